//! Records that are not rows, from real Debezium: with transaction metadata, heartbeats and
//! logical decoding messages on, and a signal written to a Kafka signal topic, a `<prefix>.*`
//! subscription sees five kinds of records. `[kafka.non-data]` keeps transaction metadata and
//! messages in the raw layer and skips the rest; the replica equals the source all the same.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Killed, Run, exec, http_get, metric};
use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch, StructArray};
use lakesink_schema_registry::NON_DATA_METADATA;
use lakesink_tests::debezium::{Connector, Converter, wait_for_topic_to_exist};
use lakesink_tests::{Stack, unique};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

async fn rows(pg: &PgPool, table: &str) -> Vec<String> {
    let q = format!("SELECT json_build_array(id, name)::text FROM public.\"{table}\" ORDER BY id");
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_all(pg)
        .await
        .unwrap_or_default()
}

/// Every row of `topic`'s raw-layer files, with the kind its `value` column is marked with.
async fn raw_rows(run: &Run, topic: &str) -> (Vec<RecordBatch>, BTreeSet<String>) {
    let mut rows = Vec::new();
    let mut kinds = BTreeSet::new();
    for (schema, batches) in run.files(topic).await {
        if let Ok(value) = schema.field_with_name("value")
            && let Some(kind) = value.metadata().get(NON_DATA_METADATA)
        {
            kinds.insert(kind.clone());
        }
        rows.extend(batches);
    }
    (rows, kinds)
}

fn strings(batches: &[RecordBatch], field: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let value: &StructArray = b.column_by_name("value").expect("value").as_struct();
            let col = value.column_by_name(field).expect(field).as_string::<i32>();
            (0..col.len())
                .filter(|&i| col.is_valid(i))
                .map(|i| col.value(i).to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn non_data_records_from_real_debezium_are_routed_and_the_replica_is_untouched() {
    let stack = Stack::from_env();
    let name = unique("nd");
    let src = PgPool::connect(&stack.source_pg_url).await.expect("source");
    let rep = PgPool::connect(&stack.replica_pg_url)
        .await
        .expect("replica");
    exec(
        &src,
        &[
            format!("CREATE TABLE public.\"{name}\" (id bigint PRIMARY KEY, name text)"),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'item ' || i FROM generate_series(1, 20) i"
            ),
        ],
    )
    .await;
    let connector = Connector::start_configured(
        &stack,
        &name,
        Converter::ApicurioAvro,
        json!({"provide.transaction.metadata": "true", "heartbeat.interval.ms": "300"}),
    )
    .await;
    exec(
        &src,
        &[
            format!("UPDATE public.\"{name}\" SET name = 'changed' WHERE id % 3 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 5 = 0"),
            "SELECT pg_logical_emit_message(true, 'lakesink-test', 'hello')".into(),
        ],
    )
    .await;
    // A signal, as users write them to the Kafka signal channel: plain JSON, keyed by prefix.
    let signals = format!("{name}.signals");
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("producer");
    let signal = json!({"type": "log", "data": {"message": "hello"}}).to_string();
    producer
        .send(BaseRecord::to(&signals).key(&name).payload(&signal))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(10)).expect("flush");
    let transactions = format!("{name}.transaction");
    let messages = format!("{name}.message");
    let heartbeats = format!("__debezium-heartbeat.{name}");
    // The subscription's regex is matched against the topics there are when it starts.
    for topic in [
        &connector.topic,
        &transactions,
        &messages,
        &heartbeats,
        &signals,
    ] {
        wait_for_topic_to_exist(&stack, topic).await;
    }

    let run = Run::with(
        stack.clone(),
        &connector.topic,
        1,
        Some("rotate-interval-ms = 500"),
        &format!(
            "[replica]\nurl = \"{}\"\ntable-name-format = \"${{source.table}}\"\n\n\
             [kafka.non-data]\ntransaction = \"raw\"\nmessage = \"raw\"\n",
            stack.replica_pg_url
        ),
    );
    // Every topic of the prefix and its heartbeats, as a `<prefix>.*` deployment reads them.
    let config = std::fs::read_to_string(&run.config).expect("config");
    let config = config.replace(
        &format!("topics = [\"{}\"]", connector.topic),
        &format!("topics-regex = \"^({name}\\\\..*|__debezium-heartbeat\\\\.{name})$\""),
    );
    std::fs::write(&run.config, config).expect("config");

    let mut child = Killed(run.start(None));
    let want = rows(&src, &name).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let series = |topic: &str, kind: &str| {
        format!("lakesink_non_data_records_total{{topic=\"{topic}\",kind=\"{kind}\"}}")
    };
    loop {
        let m = http_get(run.http, "/metrics")
            .await
            .map(|(_, t)| t)
            .unwrap_or_default();
        let seen = |topic: &str, kind: &str| metric(&m, &series(topic, kind)).unwrap_or(0.0);
        let (txs, _) = raw_rows(&run, &transactions).await;
        let (msgs, _) = raw_rows(&run, &messages).await;
        if rows(&rep, &name).await == want
            && seen(&heartbeats, "heartbeat") > 0.0
            && seen(&signals, "signal") == 1.0
            && seen(&transactions, "transaction") >= 4.0
            && seen(&messages, "message") == 1.0
            && txs.iter().map(RecordBatch::num_rows).sum::<usize>() >= 4
            && !msgs.is_empty()
        {
            break;
        }
        assert!(
            child.0.try_wait().expect("wait").is_none(),
            "lakesink exited:\n{}",
            run.log_tail()
        );
        assert!(
            Instant::now() < deadline,
            "not all there within 120 s; metrics:\n{}\nlog:\n{}",
            m.lines()
                .filter(|l| l.contains("non_data"))
                .collect::<Vec<_>>()
                .join("\n"),
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(
        child.0.wait().expect("wait").success(),
        "{}",
        run.log_tail()
    );

    // Transaction metadata in the raw layer: BEGIN and END of each transaction, as Debezium
    // wrote them, marked as what they are.
    let (txs, kinds) = raw_rows(&run, &transactions).await;
    assert_eq!(kinds, BTreeSet::from(["transaction".to_owned()]));
    let status = strings(&txs, "status");
    let begins = status.iter().filter(|s| *s == "BEGIN").count();
    assert!(begins >= 2, "{status:?}");
    assert_eq!(
        begins,
        status.iter().filter(|s| *s == "END").count(),
        "{status:?}"
    );
    // The logical decoding message, with its own op.
    let (msgs, kinds) = raw_rows(&run, &messages).await;
    assert_eq!(kinds, BTreeSet::from(["message".to_owned()]));
    let ops: Vec<&str> = msgs
        .iter()
        .flat_map(|b| {
            let op = b.column_by_name("__op").expect("__op").as_string::<i32>();
            op.iter().flatten().collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(ops, ["m"]);
    // Skipped kinds leave nothing; the table's rows are all in the raw layer as rows.
    assert!(raw_rows(&run, &heartbeats).await.0.is_empty());
    assert!(raw_rows(&run, &signals).await.0.is_empty());
    assert!(!raw_rows(&run, &connector.topic).await.0.is_empty());
    // The replica only ever applied the table's topic.
    let applied: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT topic FROM public.lakesink_offsets WHERE group_id = $1 ORDER BY 1",
    )
    .bind(&run.group)
    .fetch_all(&rep)
    .await
    .expect("offsets");
    assert_eq!(applied, std::slice::from_ref(&connector.topic));
    assert_eq!(rows(&rep, &name).await, want);

    connector.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.\"{name}\"")]).await;
    exec(&rep, &[format!("DROP TABLE public.\"{name}\"")]).await;
}
