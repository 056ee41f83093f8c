use lakesink_tests::debezium::{Connector, header};
use lakesink_tests::{Stack, unique};
use rdkafka::Message;
use serde_json::Value;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

/// A real Debezium PostgreSQL connector, with the Apicurio Avro converter, turns a row inserted
/// into the source table into a change event on Kafka whose schema the registry serves.
#[tokio::test]
async fn debezium_publishes_a_change_event_for_an_inserted_row() {
    let stack = Stack::from_env();
    let name = unique("smoke_dbz");
    let pg = lakesink_tests::source_pool(&stack).await;
    let table = format!("public.{name}");
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, price numeric(10, 2))"
    )))
    .execute(&pg)
    .await
    .expect("create source table");
    let snapshot_row = format!("{name}-snapshot");
    insert(&pg, &table, 1, &snapshot_row).await;

    let connector = Connector::start(&stack, &name).await;
    let streamed_row = format!("{name}-streamed");
    insert(&pg, &table, 2, &streamed_row).await;

    let mut global_id = None;
    for (msg, row) in connector
        .read(2)
        .await
        .iter()
        .zip([&snapshot_row, &streamed_row])
    {
        let value = msg.payload().expect("a change event, not a tombstone");
        // Avro writes strings as raw UTF-8, so the row's text shows in the datum.
        assert!(
            value.windows(row.len()).any(|w| w == row.as_bytes()),
            "{row} not in the event"
        );
        let id: [u8; 8] = header(msg, "apicurio.value.globalId")
            .expect("the Apicurio 2.x converter puts the value's globalId in a header")
            .try_into()
            .expect("an 8-byte big-endian id");
        global_id = Some(i64::from_be_bytes(id));
    }

    let id = global_id.expect("at least one event");
    let url = format!("{}/apis/registry/v3/ids/globalIds/{id}", stack.registry_url);
    let schema: Value = reqwest::get(&url)
        .await
        .expect("registry")
        .json()
        .await
        .expect("schema json");
    assert_eq!(schema["name"], "Envelope", "{schema}");
    let fields: Vec<&str> = schema["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    for f in ["before", "after", "source", "op", "ts_ms"] {
        assert!(fields.contains(&f), "Envelope lacks {f}: {fields:?}");
    }

    connector.stop(&pg).await;
    sqlx::query(AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pg)
        .await
        .expect("drop table");
}

async fn insert(pg: &PgPool, table: &str, id: i64, name: &str) {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} VALUES ($1, $2, 9.99)"
    )))
    .bind(id)
    .bind(name)
    .execute(pg)
    .await
    .expect("insert");
}
