//! `errors.tolerance = "all"`: a record that cannot be decoded is copied to the dead-letter
//! topic with Kafka Connect's context headers, and the records around it reach both sinks.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{BASE_TS, Run, bad_record_topic, http_get, metric};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message};
use sqlx::postgres::PgPoolOptions;

const BAD: &[u8] = b"\x07not an Avro record";

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_record_goes_to_the_dead_letter_topic_and_the_rest_goes_on() {
    let stack = Stack::from_env();
    let topic = unique("dead-letter");
    let dlq = format!("{topic}.dlq");
    let table = std::sync::Arc::new(Table::create(&stack, &topic, 1).await);
    let (s, t) = (stack.clone(), table.clone());
    let key = table.key(1_000_000);
    tokio::task::spawn_blocking(move || {
        t.produce_range(&s, 1, 0..1000, BASE_TS);
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_brokers)
            .create()
            .expect("producer");
        producer
            .send(BaseRecord::to(&t.topic).key(&key).payload(BAD))
            .map_err(|(e, _)| e)
            .expect("send");
        producer.flush(Duration::from_secs(10)).expect("flush");
        t.produce_range(&s, 1, 1000..2000, BASE_TS);
    })
    .await
    .expect("produce");

    let run = both_sinks_with_dead_letters(&stack, &topic, &dlq);
    let mut child = run.start(None);
    let end = BTreeMap::from([(0, 2001)]);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while run.committed() != end {
        assert!(
            std::time::Instant::now() < deadline,
            "offsets {:?}; log:\n{}",
            run.committed(),
            run.log_tail()
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "lakesink exited:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_after_one_dead_letter(&run, &mut child, &topic).await;

    // The dead letter: the record as it was, and where it came from.
    let letters = dead_letters(&stack, &dlq);
    assert_eq!(letters.len(), 1, "one dead letter");
    let msg = &letters[0];
    assert_eq!(msg.payload(), Some(BAD));
    assert_eq!(msg.key(), Some(table.key(1_000_000).as_slice()));
    let header = |name: &str| header(msg, name);
    assert_eq!(header("__connect.errors.topic"), Some(topic.clone()));
    assert_eq!(header("__connect.errors.partition"), Some("0".into()));
    assert_eq!(header("__connect.errors.offset"), Some("1000".into()));
    let error = header("__connect.errors.exception.message").expect("error header");
    assert!(error.contains("offset 1000"), "{error}");

    // Everything else reached both sinks.
    let (rows, _) = run.rows().await;
    assert_eq!(rows.len(), 2000);
    assert!(!rows.contains(&(0, 1000)));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable");
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM public.\"{topic}\""
    )))
    .fetch_one(&pool)
    .await
    .expect("replica table");
    let alive = (0..2000).filter(|i| i % 50 != 49).count() as i64;
    assert_eq!(n, alive);
}

/// A record the replica cannot take (here: refused by a CHECK constraint added to the replica
/// table mid-stream) is found by splitting the failing transaction, copied to the dead-letter
/// topic as it was read, and the replica's offset moves past it; the raw layer keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_replica_refuses_goes_to_the_dead_letter_topic() {
    let stack = Stack::from_env();
    let topic = unique("replica-dead-letter");
    let dlq = format!("{topic}.dlq");
    let table = std::sync::Arc::new(Table::create(&stack, &topic, 1).await);
    let produce = |ids: std::ops::Range<i64>| {
        let (s, t) = (stack.clone(), table.clone());
        tokio::task::spawn_blocking(move || t.produce_range(&s, 1, ids, BASE_TS))
    };
    produce(0..1000).await.expect("produce");
    let run = both_sinks_with_dead_letters(&stack, &topic, &dlq);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable");
    let mut child = run.start(None);
    run.wait_for_replica(&pool, &topic, 1000).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE public.\"{topic}\" ADD CONSTRAINT not_1500 CHECK (id <> 1500)"
    )))
    .execute(&pool)
    .await
    .expect("constraint");
    produce(1000..2000).await.expect("produce");
    run.wait_for_replica(&pool, &topic, 2000).await;
    stop_after_one_dead_letter(&run, &mut child, &topic).await;

    let letters = dead_letters(&stack, &dlq);
    assert_eq!(letters.len(), 1, "one dead letter");
    let msg = &letters[0];
    assert_eq!(msg.key(), Some(table.key(1500).as_slice()));
    assert_eq!(
        msg.payload(),
        Some(
            table
                .event(1500, 'c', 1500 % 7 + 1, BASE_TS + 1500)
                .as_slice()
        )
    );
    let header = |name: &str| header(msg, name);
    assert_eq!(header("__connect.errors.offset"), Some("1500".into()));
    assert_eq!(header("__connect.errors.stage"), Some("TASK_PUT".into()));
    let error = header("__connect.errors.exception.message").expect("error header");
    assert!(
        error.contains("offset 1500") && error.contains("not_1500"),
        "{error}"
    );

    // The replica has everything else; the raw layer has it all.
    let ids: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM public.\"{topic}\" ORDER BY id"
    )))
    .fetch_all(&pool)
    .await
    .expect("replica table");
    let want: Vec<(i64,)> = (0..2000)
        .filter(|i| i % 50 != 49 && *i != 1500)
        .map(|i| (i,))
        .collect();
    assert_eq!(ids, want);
    let (rows, _) = run.rows().await;
    assert_eq!(rows.len(), 2000);
}

/// Everything in the dead-letter topic: read until the end offsets the broker reports.
fn dead_letters(stack: &Stack, dlq: &str) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("group.id", unique("dlq-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    let (_, end) = consumer
        .fetch_watermarks(dlq, 0, Duration::from_secs(10))
        .expect("the dead-letter topic");
    consumer.subscribe(&[dlq]).expect("subscribe");
    let until = std::time::Instant::now() + Duration::from_secs(30);
    let mut out: Vec<OwnedMessage> = Vec::new();
    // poll also returns None after serving a group event: read until a deadline.
    while out.last().is_none_or(|m| m.offset() + 1 < end) {
        assert!(
            std::time::Instant::now() < until,
            "{} of {end} in {dlq}",
            out.len()
        );
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(m)) => out.push(m.detach()),
            Some(Err(e)) => panic!("reading {dlq}: {e}"),
            None => {}
        }
    }
    out
}

fn header(msg: &OwnedMessage, name: &str) -> Option<String> {
    msg.headers()
        .and_then(|hs| hs.iter().find(|h| h.key == name))
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Checks the run is alive and counted one dead letter, then stops it.
async fn stop_after_one_dead_letter(run: &Run, child: &mut std::process::Child, topic: &str) {
    assert!(
        child.try_wait().expect("wait").is_none(),
        "lakesink exited:\n{}",
        run.log_tail()
    );
    let (_, m) = http_get(run.http, "/metrics").await.expect("/metrics");
    let dead = format!("lakesink_dead_letters_total{{topic=\"{topic}\"}}");
    assert_eq!(metric(&m, &dead), Some(1.0), "{m}");
    child.kill().expect("kill");
    child.wait().expect("wait");
}

/// A run of both sinks over one partition, bad records to `dlq`.
fn both_sinks_with_dead_letters(stack: &Stack, topic: &str, dlq: &str) -> Run {
    Run::with(
        stack.clone(),
        topic,
        1,
        Some("flush-size = 500"),
        &format!(
            "[errors]\ntolerance = \"all\"\ndead-letter-topic = \"{dlq}\"\n\n[replica]\nurl = \"{}\"\n",
            stack.replica_pg_url
        ),
    )
}

/// Without `errors.tolerance`, a bad record stops the run at that record, and the error says
/// where it is and what to do: the dead-letter settings, and for a value that starts with `{`,
/// the JSON formats.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_record_stops_the_run_with_the_remedy() {
    let stack = Stack::from_env();
    let topic = bad_record_topic(&stack, "bad-record", br#"{"id": 1, "name": "json"}"#).await;
    let run = Run::new(stack, &topic, 1, "flush-size = 5");
    let mut child = run.start(None);
    let stopped = run.stopped(&mut child, Duration::from_secs(60));
    assert!(
        stopped.contains(&format!("{topic}[0] offset 0")),
        "{stopped}"
    );
    assert!(
        stopped.contains("it looks like JSON: kafka.format"),
        "{stopped}"
    );
    assert!(
        stopped.contains("set errors.tolerance = \"all\" and errors.dead-letter-topic"),
        "{stopped}"
    );
}
