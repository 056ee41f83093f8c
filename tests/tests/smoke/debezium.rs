use std::time::Duration;

use lakesink_tests::{Stack, eventually, unique, unreachable};
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

/// A real Debezium PostgreSQL connector, with the Apicurio Avro converter, turns a row inserted
/// into the source table into a change event on Kafka whose schema the registry serves.
#[tokio::test]
async fn debezium_publishes_a_change_event_for_an_inserted_row() {
    let stack = Stack::from_env();
    let name = unique("smoke_dbz");
    let table = format!("public.{name}");
    let topic = format!("{name}.{table}");

    let pg = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, price numeric(10, 2))"
    )))
    .execute(&pg)
    .await
    .expect("create source table");
    let snapshot_row = format!("{name}-snapshot");
    insert(&pg, &table, 1, &snapshot_row).await;

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("http");
    let connector = format!("{}/connectors/{name}", stack.connect_url);
    let resp = http
        .put(format!("{connector}/config"))
        .json(&connector_config(&stack, &name, &table))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("Kafka Connect", &stack.connect_url, e)));
    assert!(
        resp.status().is_success(),
        "register connector: {} {}",
        resp.status(),
        resp.text().await.unwrap_or_default()
    );

    let running = eventually(Duration::from_secs(90), || async {
        let status: Value = http
            .get(format!("{connector}/status"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (status["tasks"][0]["state"] == "RUNNING").then_some(())
    })
    .await;
    assert!(
        running.is_some(),
        "connector {name} did not reach RUNNING within 90 s"
    );
    let streamed_row = format!("{name}-streamed");
    insert(&pg, &table, 2, &streamed_row).await;

    let consumer = wait_for_topic(&stack, &topic).await;
    let mut pending = vec![snapshot_row.clone(), streamed_row.clone()];
    let mut global_id = None;
    while !pending.is_empty() {
        let msg = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("no change event on {topic} within 60 s; still waiting for {pending:?}")
            })
            .expect("consume");
        let value = msg.payload().expect("a change event, not a tombstone");
        // Avro writes strings as raw UTF-8, so the row's text shows in the datum.
        pending.retain(|row| !contains(value, row.as_bytes()));
        let header = msg
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "apicurio.value.globalId"))
            .and_then(|h| h.value)
            .expect("the Apicurio 2.x converter puts the value's globalId in a header");
        let id: [u8; 8] = header.try_into().expect("an 8-byte big-endian id");
        global_id = Some(i64::from_be_bytes(id));
    }

    let id = global_id.expect("at least one event");
    let url = format!("{}/apis/registry/v3/ids/globalIds/{id}", stack.registry_url);
    let schema: Value = http
        .get(&url)
        .send()
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

    // Clean up: the connector drops its slot on stop; the publication and table are ours.
    http.delete(&connector)
        .send()
        .await
        .expect("delete connector");
    let slot_gone = eventually(Duration::from_secs(30), || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1")
                .bind(&name)
                .fetch_one(&pg)
                .await
                .ok()?;
        (n == 0).then_some(())
    })
    .await;
    assert!(slot_gone.is_some(), "replication slot {name} still exists");
    sqlx::query(AssertSqlSafe(format!("DROP PUBLICATION IF EXISTS {name}")))
        .execute(&pg)
        .await
        .expect("drop publication");
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

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn connector_config(stack: &Stack, name: &str, table: &str) -> Value {
    let pg = reqwest::Url::parse(&stack.source_pg_url).expect("source url");
    let registry = format!("{}/apis/registry/v2", stack.registry_url);
    json!({
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "plugin.name": "pgoutput",
        "database.hostname": pg.host_str(), "database.port": pg.port().unwrap_or(5432).to_string(),
        "database.user": pg.username(), "database.password": pg.password(),
        "database.dbname": pg.path().trim_start_matches('/'),
        "topic.prefix": name, "slot.name": name, "publication.name": name,
        "publication.autocreate.mode": "filtered", "table.include.list": table,
        "slot.drop.on.stop": "true",
        "key.converter": "io.apicurio.registry.utils.converter.AvroConverter",
        "key.converter.apicurio.registry.url": registry,
        "key.converter.apicurio.registry.auto-register": "true",
        "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
        "value.converter.apicurio.registry.url": registry,
        "value.converter.apicurio.registry.auto-register": "true",
    })
}

/// Debezium creates the topic with its first event; subscribe once it exists.
async fn wait_for_topic(stack: &Stack, topic: &str) -> StreamConsumer {
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("metadata client");
    let found = eventually(Duration::from_secs(60), || async {
        let md = probe
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()?;
        md.topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            .then_some(())
    })
    .await;
    assert!(found.is_some(), "topic {topic} did not appear within 60 s");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("group.id", unique("smoke-dbz-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}
