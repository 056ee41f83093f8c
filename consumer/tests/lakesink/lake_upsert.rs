//! Upsert lake tables against real Debezium: a PostgreSQL table with a composite key is
//! snapshotted, changed (updates, deletes, inserts, key changes, a row updated twice),
//! truncated and refilled, while the `lakesink` binary writes it to an upsert table in the SQL
//! catalog, partitioned by a bucket of the key, and is killed at every lake failpoint. After
//! each phase Apache Spark with Iceberg's runtime (which applies equality deletes) reads the
//! table equal to the source table, EXCEPT ALL both ways. A second source flattened by
//! Debezium's ExtractNewRecordState, its deletes sent as tombstones alone, reads equal too.

use std::time::{Duration, Instant};

use lakesink_tests::debezium::{Connector, Converter};
use lakesink_tests::{Stack, source_pool, unique};
use lakesink_writers::failpoint::{LAKE_AFTER_COMMIT, LAKE_BEFORE_COMMIT, LAKE_BEFORE_UPLOAD};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::{Value, json};

use crate::common::{Run, exec, stop_cleanly};
use crate::lake::{EVERYTHING_NOW, Kind, maintain, read_request, section, spark};

/// Inserts a row whose note is a fresh marker and returns the topic's offset just past its
/// change event: every change made before it is in the topic below that offset (one
/// partition, in commit order).
async fn mark(stack: &Stack, src: &sqlx::PgPool, table: &str, topic: &str, id: i64) -> i64 {
    let marker = unique("marker");
    exec(
        src,
        &[format!(
            "INSERT INTO public.\"{table}\" (id, region, name, note) VALUES ({id}, 'm', 'marker', '{marker}')"
        )],
    )
    .await;
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("group.id", unique("marker"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    c.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let Some(msg) = c.poll(Duration::from_millis(500)) else {
            continue;
        };
        let msg = msg.expect("poll");
        // Avro writes strings as their UTF-8 bytes.
        if msg
            .payload()
            .is_some_and(|p| p.windows(marker.len()).any(|w| w == marker.as_bytes()))
        {
            return msg.offset() + 1;
        }
    }
    panic!("the marker {marker} never reached {topic}");
}

/// Spark's reading of the lake table beside the source table.
async fn spark_against_source(run: &Run, catalog: &str, table: &str, source: &str) -> Value {
    let mut request = read_request(run, Kind::Sql, catalog, table).await;
    request["source"] = json!({"url": run.stack.source_pg_url, "table": source});
    spark(run, &request, table)
}

/// The lake table equals the source table, row for row, on every column; its summary.
async fn assert_equal(
    run: &Run,
    catalog: &str,
    table: &str,
    source: &str,
    when: &str,
    columns: usize,
) -> Value {
    let got = spark_against_source(run, catalog, table, source).await;
    assert_eq!(
        got["lake_minus_source"]["count"], 0,
        "{when}: rows in the lake table the source lacks: {got}"
    );
    assert_eq!(
        got["source_minus_lake"]["count"], 0,
        "{when}: rows of the source the lake table lacks: {got}"
    );
    assert_eq!(got["count"], got["source_count"], "{when}: {got}");
    assert_eq!(
        got["compared_columns"].as_array().map(Vec::len),
        Some(columns),
        "{when}: {got}"
    );
    got["snapshot_summary"].clone()
}

/// The source table both tests change: a composite key, and a value of most kinds.
fn create(name: &str) -> String {
    format!(
        "CREATE TABLE public.\"{name}\" (id bigint, region text, name text NOT NULL, \
         qty integer, price numeric(10,2), created timestamptz, doc jsonb, tags text[], \
         note text, PRIMARY KEY (id, region))"
    )
}

fn figure(summary: &Value, key: &str) -> i64 {
    summary[key]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {summary}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_table_equals_the_source_through_a_snapshot_changes_crashes_and_a_truncate() {
    let stack = Stack::from_env();
    let name = unique("ups").replace('-', "_");
    let src = source_pool(&stack).await;
    exec(
        &src,
        &[
            create(&name),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'r' || (i % 3), 'item ' || i, i % 17, \
                 i * 1.25, '2024-05-01 13:00:00+00'::timestamptz + i * interval '1 minute', \
                 jsonb_build_object('i', i), ARRAY['t' || (i % 3), NULL], NULL \
                 FROM generate_series(1, 400) i"
            ),
        ],
    )
    .await;
    let connector = Connector::start_configured(
        &stack,
        &name,
        Converter::ApicurioAvro,
        json!({"skipped.operations": "none"}),
    )
    .await;
    let topic = connector.topic.clone();
    let catalog = unique("lake");
    let namespace = unique("cdc").replace('-', "_");
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        Some("flush-size = 400\nrotate-interval-ms = 2000"),
        &section(
            &stack,
            Kind::Sql,
            &catalog,
            &namespace,
            "mode = \"upsert\"\npartition-by = [\"bucket(4, id)\"]",
        ),
    );
    let table = format!("{namespace}.{}", topic.replace('.', "_"));
    let source = format!("public.\"{name}\"");
    let end = |o: i64| std::collections::BTreeMap::from([(0, o)]);

    // The snapshot: committed, the process killed before it told Kafka; no delete files
    // (nothing older for them to delete).
    let at = mark(&stack, &src, &name, &topic, -1).await;
    run.crash_at(LAKE_AFTER_COMMIT);
    run.run_to_end(&end(at));
    let summary = assert_equal(&run, &catalog, &table, &source, "after the snapshot", 9).await;
    assert_eq!(figure(&summary, "total-delete-files"), 0, "{summary}");

    // Changes of every kind, some of a key twice in one commit; killed before an upload
    // and before a commit.
    exec(
        &src,
        &[
            format!("UPDATE public.\"{name}\" SET qty = qty + 100, note = 'u1' WHERE id % 3 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 7 = 0"),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'r' || (i % 3), 'new ' || i, 1, 9.99, \
                 now(), '{{}}', '{{}}', 'inserted' FROM generate_series(401, 500) i"
            ),
            // Key changes: Debezium sends a delete of the old key and a create of the new.
            format!("UPDATE public.\"{name}\" SET id = id + 100000 WHERE id % 10 = 1"),
            format!("UPDATE public.\"{name}\" SET region = 'moved' WHERE id % 10 = 2"),
            format!("UPDATE public.\"{name}\" SET price = price * 2 WHERE id BETWEEN 290 AND 310"),
            format!("UPDATE public.\"{name}\" SET price = price + 1 WHERE id BETWEEN 300 AND 320"),
            format!("DELETE FROM public.\"{name}\" WHERE id BETWEEN 495 AND 500"),
            // Deleted, then back with other values.
            format!(
                "INSERT INTO public.\"{name}\" (id, region, name, qty) VALUES (497, 'r2', 'back', 7)"
            ),
        ],
    )
    .await;
    let at = mark(&stack, &src, &name, &topic, -2).await;
    run.crash_at(LAKE_BEFORE_UPLOAD);
    run.crash_at(LAKE_BEFORE_COMMIT);
    run.run_to_end(&end(at));
    let summary = assert_equal(&run, &catalog, &table, &source, "after the changes", 9).await;
    assert!(
        figure(&summary, "total-equality-deletes") > 0
            && figure(&summary, "total-delete-files") > 0,
        "the changes were applied by equality deletes: {summary}"
    );

    // Compaction while the service commits more changes to the rows it rewrites: their
    // deletes still apply to the rewritten files (they keep the sequence number they were read
    // at), and the compaction, if it loses the race, is made again on the newer table.
    exec(
        &src,
        &[
            format!("UPDATE public.\"{name}\" SET qty = qty + 1, note = 'c' WHERE id % 4 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 13 = 0"),
        ],
    )
    .await;
    let at = mark(&stack, &src, &name, &topic, -4).await;
    let mut service = run.start(None);
    let compacted = maintain(&run, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while run.committed() != end(at) {
        assert!(
            Instant::now() < deadline,
            "never committed; log:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop_cleanly(&mut service);
    eprintln!("lake maintain beside the service:\n{}", compacted.text);
    assert!(
        compacted.text.contains(": compacted "),
        "the first compaction rewrote partitions: {}",
        compacted.text
    );
    assert_equal(
        &run,
        &catalog,
        &table,
        &source,
        "after a compaction beside the service",
        9,
    )
    .await;
    // With the service stopped: the rest compacted, old snapshots and files gone.
    let last = maintain(&run, EVERYTHING_NOW);
    eprintln!("lake maintain, no writers:\n{}", last.text);
    let summary = assert_equal(&run, &catalog, &table, &source, "compacted", 9).await;
    assert_eq!(
        figure(&summary, "total-delete-files"),
        0,
        "{summary}\n{}",
        last.text
    );

    // A truncate, and rows after it; killed before a commit.
    exec(
        &src,
        &[
            format!("TRUNCATE public.\"{name}\""),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'r' || (i % 3), 'after ' || i, 2, 1.50, \
                 now(), '[1]', ARRAY['x'], NULL FROM generate_series(1, 50) i"
            ),
            format!("UPDATE public.\"{name}\" SET note = 'later' WHERE id % 5 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 9 = 0"),
        ],
    )
    .await;
    let at = mark(&stack, &src, &name, &topic, -3).await;
    run.crash_at(LAKE_BEFORE_COMMIT);
    run.run_to_end(&end(at));
    assert_equal(&run, &catalog, &table, &source, "after the truncate", 9).await;

    connector.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.\"{name}\"")]).await;
}

/// Flattened records (`ExtractNewRecordState`) whose deletes are tombstones alone
/// (`delete.tombstone.handling.mode = tombstone`): each tombstone deletes its key.
#[tokio::test(flavor = "multi_thread")]
async fn a_flattened_source_whose_deletes_are_tombstones_alone_reads_equal() {
    let stack = Stack::from_env();
    let name = unique("upf").replace('-', "_");
    let src = source_pool(&stack).await;
    exec(
        &src,
        &[
            create(&name),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'r' || (i % 3), 'item ' || i, i % 17, \
                 i * 1.25, now(), '{{}}', ARRAY['t'], NULL FROM generate_series(1, 200) i"
            ),
        ],
    )
    .await;
    let connector = Connector::start_configured(
        &stack,
        &name,
        Converter::ApicurioAvro,
        json!({
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.delete.tombstone.handling.mode": "tombstone",
        }),
    )
    .await;
    let topic = connector.topic.clone();
    let catalog = unique("lake");
    let namespace = unique("cdc").replace('-', "_");
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        None,
        &section(&stack, Kind::Sql, &catalog, &namespace, "mode = \"upsert\""),
    );
    let end = |o: i64| std::collections::BTreeMap::from([(0, o)]);
    // The snapshot committed first, so the deletes after it reach older files.
    let at = mark(&stack, &src, &name, &topic, -1).await;
    run.run_to_end(&end(at));
    exec(
        &src,
        &[
            format!("UPDATE public.\"{name}\" SET qty = -1, note = 'u' WHERE id % 4 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 5 = 0"),
            format!("UPDATE public.\"{name}\" SET id = id + 1000 WHERE id % 7 = 0"),
            // A new column, and one widened: the table evolves under the buffered rows.
            format!("ALTER TABLE public.\"{name}\" ADD COLUMN extra text"),
            format!("ALTER TABLE public.\"{name}\" ALTER COLUMN qty TYPE bigint"),
            format!(
                "UPDATE public.\"{name}\" SET extra = 'x' || id, qty = 5000000000 WHERE id % 3 = 0"
            ),
            format!("DELETE FROM public.\"{name}\" WHERE id % 11 = 0"),
        ],
    )
    .await;
    let at = mark(&stack, &src, &name, &topic, -2).await;
    run.run_to_end(&end(at));
    let table = format!("{namespace}.{}", topic.replace('.', "_"));
    let source = format!("public.\"{name}\"");
    let summary = assert_equal(&run, &catalog, &table, &source, "flattened", 10).await;
    assert!(figure(&summary, "total-equality-deletes") > 0, "{summary}");
    connector.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.\"{name}\"")]).await;
}
