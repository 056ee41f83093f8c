//! Lake tables against the real stack: the `lakesink` binary writes a topic to an Iceberg
//! table (SQL catalog in PostgreSQL or Apache Iceberg's REST catalog server, files on the S3
//! server) beside the raw layer, is killed at every lake failpoint, restarts, shares the table
//! with a second instance that is killed mid-commit, and in the end pyiceberg and DuckDB (and,
//! after the crash tests, Apache Spark with Iceberg's Spark runtime) read every record of the
//! topic exactly once, each value equal to the raw layer's.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use lakesink_writers::failpoint::{LAKE_AFTER_COMMIT, LAKE_BEFORE_COMMIT, LAKE_BEFORE_UPLOAD};
use object_store::path::Path;
use serde_json::{Value, json};

use crate::common::{
    BASE_TS, Run, assert_exactly_once, expected, free_port, produce_range, stop_cleanly,
};

/// The catalog a test's tables live in.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// The SQL catalog in the replica's PostgreSQL.
    Sql,
    /// `dev/stack`'s Apache Iceberg REST catalog server (its own warehouse on the same bucket).
    Rest,
}

/// The `[lake]` section of a run: a catalog name (for SQL) and namespace of the test's own.
pub(crate) fn section(
    stack: &Stack,
    kind: Kind,
    catalog: &str,
    namespace: &str,
    extra: &str,
) -> String {
    let (kind, uri) = match kind {
        Kind::Sql => ("sql", &stack.replica_pg_url),
        Kind::Rest => ("rest", &stack.iceberg_rest_url),
    };
    format!(
        r#"
[lake]
catalog = "{kind}"
catalog-uri = "{uri}"
catalog-name = "{catalog}"
warehouse = "s3://{bucket}/{catalog}"
namespace = "{namespace}"
commit-interval-ms = 1000
{extra}

[lake.store]
{store}"#,
        bucket = stack.s3_bucket,
        store = stack.store_keys(),
    )
}

/// The request `tests/python/read_iceberg.py` and `read_iceberg_spark.py` take: the catalog, the
/// table, the S3 server and the raw layer's files.
pub(crate) async fn read_request(run: &Run, kind: Kind, catalog: &str, table: &str) -> Value {
    let store = run.store();
    let prefix = Path::from(format!("{}/topics", run.prefix));
    let keys: Vec<String> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    let s = &run.stack;
    let (catalog_type, catalog_uri) = s.reader_catalog(kind == Kind::Rest);
    json!({
        "catalog_type": catalog_type,
        "catalog_uri": catalog_uri,
        "catalog_name": catalog,
        "table": table,
        "s3": {"endpoint": s.s3_endpoint, "key": s.s3_access_key_id,
               "secret": s.s3_secret_access_key, "region": s.s3_region},
        "bucket": s.s3_bucket,
        "raw_keys": keys,
    })
}

/// `tests/python/read_iceberg.py`: the table through pyiceberg and DuckDB, beside the raw
/// layer's files.
async fn read_back(run: &Run, kind: Kind, catalog: &str, table: &str) -> Value {
    let request = read_request(run, kind, catalog, table).await;
    let s = &run.stack;
    let script = lakesink_tests::workspace_root().join("tests/python/read_iceberg.py");
    let out = Command::new(&s.python)
        .arg(script)
        .arg(request.to_string())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run `dev/stack install`)", s.python));
    assert!(
        out.status.success(),
        "read_iceberg.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json from read_iceberg.py")
}

/// `tests/python/read_iceberg_spark.py`: the table through Apache Spark and Apache Iceberg's
/// Spark runtime (the JDBC catalog over the same database for SQL), beside the raw layer's files.
async fn read_back_spark(run: &Run, kind: Kind, catalog: &str, table: &str) -> Value {
    spark(run, &read_request(run, kind, catalog, table).await, table)
}

/// Runs `tests/python/read_iceberg_spark.py` on `request`; its answer.
pub(crate) fn spark(run: &Run, request: &Value, table: &str) -> Value {
    let s = &run.stack;
    let script = lakesink_tests::workspace_root().join("tests/python/read_iceberg_spark.py");
    let started = Instant::now();
    let out = Command::new(&s.spark_python)
        .arg(script)
        .arg(request.to_string())
        .env("LAKESINK_SPARK_JARS", &s.spark_jars)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run `dev/stack install`)", s.spark_python));
    assert!(
        out.status.success(),
        "read_iceberg_spark.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("Spark read {table} in {:.1?}", started.elapsed());
    serde_json::from_slice(&out.stdout).expect("json from read_iceberg_spark.py")
}

fn pairs(v: &Value) -> Vec<(i32, i64)> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|p| {
            let p = p.as_array().expect("pair");
            (
                i32::try_from(p[0].as_i64().expect("partition")).expect("i32"),
                p[1].as_i64().expect("offset"),
            )
        })
        .collect()
}

/// What every lake test checks in the end: each record of the topic once in pyiceberg's and
/// DuckDB's reads, equal to the raw layer's, and the group's offsets in the snapshot summary.
/// Returns pyiceberg's read.
async fn assert_table(
    run: &Run,
    kind: Kind,
    catalog: &str,
    namespace: &str,
    count: i64,
    partitioned: bool,
) -> Value {
    let (want, end) = expected(run.partitions, count);
    let name = run.topic.replace('.', "_");
    let got = read_back(run, kind, catalog, &format!("{namespace}.{name}")).await;
    assert_exactly_once(&pairs(&got["offsets"]), &want);
    assert_exactly_once(&pairs(&got["duckdb_offsets"]), &want);
    assert_eq!(got["compared"], json!(count), "{got}");
    assert_eq!(got["mismatches"], json!([]), "lake and raw layer differ");
    let offsets: Value = serde_json::from_str(
        got["summary"][format!("lakesink.offsets.{}", run.group)]
            .as_str()
            .expect("the snapshot summary carries the group's offsets"),
    )
    .expect("json");
    let want_offsets: serde_json::Map<String, Value> =
        end.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
    assert_eq!(offsets[&run.topic], Value::Object(want_offsets));
    let schema = got["schema"].as_str().expect("schema");
    assert_eq!(
        got["partition_mismatches"],
        json!([]),
        "rows outside their file's partition"
    );
    assert_eq!(
        got["bound_mismatches"],
        json!([]),
        "values outside their file's bounds"
    );
    let bounded = got["bounded_columns"].as_array().expect("bounded columns");
    for column in [
        "__offset",
        "after.sku",
        "after.price",
        "after.quantity",
        "after.created_at",
        "after.updated_at",
    ] {
        assert!(bounded.contains(&json!(column)), "{column}: {bounded:?}");
    }
    if partitioned {
        let spec = got["spec"].as_str().expect("spec");
        for field in [
            "key_id_bucket: bucket[4]",
            "after_created_at_hour: hour",
            "after_status: identity",
        ] {
            assert!(spec.contains(field), "{spec}");
        }
        // Four buckets of the key, in every commit of every partition.
        assert!(got["files"].as_i64().expect("files") >= 4, "{got}");
    }
    for column in [
        "price: optional decimal(10, 2)",
        "created_at: optional timestamp",
        "updated_at: optional timestamptz",
    ] {
        assert!(schema.contains(column), "{schema}");
    }
    got
}

/// Apache Spark reads what pyiceberg read (`pyiceberg`, [`assert_table`]'s): each record of the
/// topic once, every value equal to the raw layer's, and the group's offsets in the current
/// snapshot's summary.
async fn assert_spark_reads(
    run: &Run,
    kind: Kind,
    catalog: &str,
    namespace: &str,
    count: i64,
    pyiceberg: &Value,
) {
    let (want, _) = expected(run.partitions, count);
    let name = run.topic.replace('.', "_");
    let got = read_back_spark(run, kind, catalog, &format!("{namespace}.{name}")).await;
    let offsets = pairs(&got["offsets"]);
    assert_exactly_once(&offsets, &want);
    assert_eq!(
        offsets,
        pairs(&pyiceberg["offsets"]),
        "Spark and pyiceberg read different rows"
    );
    assert_eq!(got["count"], json!(count), "{got}");
    assert_eq!(got["compared"], json!(count), "{got}");
    assert_eq!(
        got["compared_columns"], pyiceberg["compared_columns"],
        "Spark compared other columns than pyiceberg"
    );
    assert_eq!(
        got["mismatches"],
        json!([]),
        "Spark's rows and the raw layer differ"
    );
    let key = format!("lakesink.offsets.{}", run.group);
    assert!(got["snapshot_summary"][&key].is_string(), "{got}");
    assert_eq!(
        got["snapshot_summary"][&key], pyiceberg["summary"][&key],
        "Spark's current snapshot is not pyiceberg's"
    );
    let schema = got["schema"].as_str().expect("schema");
    for column in [
        "price:decimal(10,2)",
        "created_at:timestamp_ntz",
        "updated_at:timestamp",
    ] {
        assert!(schema.contains(column), "{schema}");
    }
}

/// A partition spec over a bucket of the key, an hour of a source timestamp and a string.
const PARTITIONED: &str =
    r#"partition-by = ["bucket(4, key.id)", "hours(after.created_at)", "after.status"]"#;

/// A topic with its first `produced` records, and a run writing it to the raw layer and to a
/// lake table in a catalog and namespace of its own.
struct Setup {
    stack: Stack,
    table: Arc<Table>,
    catalog: String,
    namespace: String,
    run: Run,
}

async fn setup(kind: Kind, prefix: &str, partitions: i32, produced: i64, extra: &str) -> Setup {
    let stack = Stack::from_env();
    let topic = unique(prefix);
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    produce_range(&stack, &table, partitions, 0..produced).await;
    let catalog = unique("lake");
    let namespace = unique("cdc").replace('-', "_");
    // Small segments and commits, so every failpoint is reached with work on both sides.
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 400\nrotate-interval-ms = 2000"),
        &section(
            &stack,
            kind,
            &catalog,
            &namespace,
            &format!("commit-bytes = 1048576\n{extra}"),
        ),
    );
    Setup {
        stack,
        table,
        catalog,
        namespace,
        run,
    }
}

/// Killed before an upload, before a commit and after one on the first half of the topic,
/// before a commit on the second, then run to the end.
async fn crash_at_every_failpoint(kind: Kind, extra: &str) {
    let (partitions, count) = (3, 3_000);
    let Setup {
        stack,
        table,
        catalog,
        namespace,
        run,
    } = setup(kind, "lake-crash", partitions, count / 2, extra).await;
    // The first half: killed before an upload, before a commit, then after one (the restart
    // finds the commit's offsets in the table and makes it no second time).
    for failpoint in [LAKE_BEFORE_UPLOAD, LAKE_BEFORE_COMMIT, LAKE_AFTER_COMMIT] {
        run.crash_at(failpoint);
    }
    // The second half, on top of committed rows.
    produce_range(&stack, &table, partitions, count / 2..count).await;
    run.crash_at(LAKE_BEFORE_COMMIT);
    let (_, end) = expected(partitions, count);
    run.run_to_end(&end);
    assert_table(&run, kind, &catalog, &namespace, count, !extra.is_empty()).await;
    // With every writer stopped: every snapshot but the current expired, and the files of
    // the commits the crashes cut short deleted; the table reads the same.
    // A dry run first: the same figures as the run after it, and nothing changed.
    let dry = maintain(&run, &[EVERYTHING_NOW, &["--dry-run"]].concat());
    let first = maintain(&run, EVERYTHING_NOW);
    assert_eq!(
        (dry.expired, dry.orphans, dry.young),
        (first.expired, first.orphans, first.young),
        "the dry run's figures are the real run's: {dry:?} {first:?}"
    );
    assert!(first.expired > 0, "{first:?}");
    assert!(
        first.orphans > 0,
        "the before-commit crashes left files: {first:?}"
    );
    let again = maintain(&run, EVERYTHING_NOW);
    assert_eq!(
        (again.expired, again.orphans, again.young),
        (0, 0, 0),
        "{again:?}"
    );
    let read = assert_table(&run, kind, &catalog, &namespace, count, !extra.is_empty()).await;
    // And Apache Spark with Iceberg's own (Java) reader and catalog client reads the same.
    assert_spark_reads(&run, kind, &catalog, &namespace, count, &read).await;
}

/// `lake maintain` with no writer running: every snapshot but the current, every orphan.
pub(crate) const EVERYTHING_NOW: &[&str] = &[
    "--snapshot-age-minutes",
    "0",
    "--orphan-age-minutes",
    "0",
    "--no-writers",
];

/// One `lakesink lake maintain` run's figures, of its table's expiry line, and all it printed.
#[derive(Debug)]
pub(crate) struct Maintained {
    expired: u64,
    orphans: u64,
    young: u64,
    pub(crate) text: String,
}

/// Runs `lakesink lake maintain` on the run's config; its one table's figures.
pub(crate) fn maintain(run: &Run, args: &[&str]) -> Maintained {
    let out = Command::new(env!("CARGO_BIN_EXE_lakesink"))
        .args(["lake", "maintain", "--config"])
        .arg(&run.config)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run lakesink lake maintain");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("snapshots expired"))
        .unwrap_or_default();
    let number_before = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("no `{what}` in {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number before `{what}` in {line}"))
    };
    Maintained {
        expired: number_before(" of "),
        orphans: number_before(" orphan files deleted"),
        young: number_before(" younger orphans kept"),
        text: stdout.clone(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lake_table_holds_each_record_once_across_crashes_at_every_failpoint() {
    crash_at_every_failpoint(Kind::Sql, "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rest_catalog_partitioned_table_holds_each_record_once_across_crashes_at_every_failpoint()
{
    crash_at_every_failpoint(Kind::Rest, PARTITIONED).await;
}

/// Two instances of one group commit to one table without a coordinator; one is killed in
/// the middle of its third commit (files uploaded, snapshot not made). The survivor takes its
/// partitions over from the table's offsets and runs to the end: each record once.
#[tokio::test(flavor = "multi_thread")]
async fn two_instances_share_a_table_and_the_survivor_of_a_kill_mid_commit_loses_nothing() {
    let (partitions, count) = (4, 8_000);
    let Setup {
        stack,
        table,
        catalog,
        namespace,
        run,
    } = setup(Kind::Sql, "lake-two", partitions, count / 2, PARTITIONED).await;
    let mut survivor = run.start(None);
    // The second instance serves its HTTP endpoints on a port of its own.
    let http = free_port().to_string();
    let mut victim = run.start_with(
        Some(&format!("{LAKE_BEFORE_COMMIT}@3")),
        &[("LAKESINK__SERVICE__HTTP_LISTEN", http.as_str())],
    );
    // The rest arrives in steps while both run, so both have rows to commit each second
    // until the victim dies; whatever is left goes to the survivor alone.
    let (mut next, step) = (count / 2, count / 20);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = victim.try_wait().expect("wait") {
            break status;
        }
        if let Some(status) = survivor.try_wait().expect("wait") {
            panic!(
                "the surviving instance exited: {status}\n{}",
                run.log_tail()
            );
        }
        if Instant::now() > deadline {
            let _ = victim.kill();
            let _ = survivor.kill();
            panic!(
                "the second instance never reached its third commit:\n{}",
                run.log_tail()
            );
        }
        if next < count {
            produce_range(&stack, &table, partitions, next..next + step).await;
            next += step;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    };
    assert_eq!(
        status.signal(),
        Some(9),
        "killed at the failpoint: {status}"
    );
    if next < count {
        produce_range(&stack, &table, partitions, next..count).await;
    }
    // Maintenance while the survivor commits: its conflicts are retried, its uploads in
    // flight are young orphans and stay.
    let during = maintain(&run, &["--snapshot-age-minutes", "0"]);
    assert_eq!(during.orphans, 0, "{during:?}");
    let (_, end) = expected(partitions, count);
    run.wait_committed(&end, Duration::from_secs(180), "on the survivor")
        .await;
    stop_cleanly(&mut survivor);
    assert_table(&run, Kind::Sql, &catalog, &namespace, count, true).await;
}

/// The source widens a column (`quantity` from int to bigint) between two halves of the topic:
/// the table's column becomes a `long` under the same field id, no data file is rewritten, and
/// both halves read back equal to the raw layer, in either catalog.
async fn a_widened_column(kind: Kind) {
    let (partitions, count) = (2, 1_200);
    let Setup {
        stack,
        table,
        catalog,
        namespace,
        run,
    } = setup(kind, "lake-widen", partitions, count / 2, "").await;
    let (_, half) = expected(partitions, count / 2);
    run.run_to_end(&half);
    let name = format!("{namespace}.{}", run.topic.replace('.', "_"));
    let before = read_back(&run, kind, &catalog, &name).await;
    let schema = before["schema"].as_str().expect("schema");
    // pyiceberg prints a nested field as `<id>: <name>: optional <type>`; `before.quantity`
    // and `after.quantity`.
    let ids: Vec<String> = schema
        .split([',', '<', '>', '\n'])
        .filter_map(|f| f.trim().strip_suffix(": quantity: optional int"))
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len(), 2, "{schema}");
    let wider = Arc::new(table.widen_quantity(&stack).await);
    produce_range(&stack, &wider, partitions, count / 2..count).await;
    let (_, end) = expected(partitions, count);
    run.run_to_end(&end);
    assert_table(&run, kind, &catalog, &namespace, count, false).await;
    let after = read_back(&run, kind, &catalog, &name).await;
    let schema = after["schema"].as_str().expect("schema");
    for id in &ids {
        assert!(
            schema.contains(&format!("{id}: quantity: optional long")),
            "field {id} is a long under the same id: {schema}"
        );
    }
    assert!(!schema.contains("quantity: optional int"), "{schema}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_column_the_source_widens_is_promoted_in_place_in_the_sql_catalog() {
    a_widened_column(Kind::Sql).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_column_the_source_widens_is_promoted_in_place_in_the_rest_catalog() {
    a_widened_column(Kind::Rest).await;
}

/// A keyed table's creates, deletes each followed by Debezium's tombstone (the key, a null
/// value), and a keyless table's creates (no key): each record a row of the lake table, equal
/// to the raw layer's, in `content` (`envelope` or `flattened`).
async fn tombstones_and_keyless_records(kind: Kind, content: &str) {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let stack = Stack::from_env();
    let topic = unique("lake-tomb");
    let table = Table::create(&stack, &topic, 1).await;
    let (s, t) = (stack.clone(), topic.clone());
    let count = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_brokers)
            .create()
            .expect("producer");
        let mut count = 0i64;
        let mut send = |key: Option<Vec<u8>>, value: Option<Vec<u8>>| {
            let mut r = BaseRecord::<Vec<u8>, Vec<u8>>::to(&t);
            if let Some(k) = key.as_ref() {
                r = r.key(k);
            }
            if let Some(v) = value.as_ref() {
                r = r.payload(v);
            }
            producer.send(r).map_err(|(e, _)| e).expect("send");
            count += 1;
        };
        for id in 0..60i64 {
            let ts = BASE_TS + id;
            send(Some(table.key(id)), Some(table.event(id, 'c', 1, ts)));
            if id % 10 == 9 {
                send(Some(table.key(id)), Some(table.event(id, 'd', 1, ts)));
                send(Some(table.key(id)), None);
            }
            if id % 4 == 0 {
                send(None, Some(table.event(1_000 + id, 'c', 1, ts)));
            }
        }
        producer.flush(Duration::from_secs(10)).expect("flush");
        count
    })
    .await
    .expect("produce");
    let catalog = unique("lake");
    let namespace = unique("cdc").replace('-', "_");
    let content = format!("content = \"{content}\"");
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        Some(&format!(
            "flush-size = 400\nrotate-interval-ms = 2000\n{content}"
        )),
        &section(&stack, kind, &catalog, &namespace, &content),
    );
    let (want, end) = expected(1, count);
    run.run_to_end(&end);
    let name = format!("{namespace}.{}", run.topic.replace('.', "_"));
    let got = read_back(&run, kind, &catalog, &name).await;
    assert_exactly_once(&pairs(&got["offsets"]), &want);
    assert_exactly_once(&pairs(&got["duckdb_offsets"]), &want);
    assert_eq!(got["compared"], json!(count), "{got}");
    assert_eq!(got["mismatches"], json!([]), "lake and raw layer differ");
    let columns = got["compared_columns"].as_array().expect("columns");
    let want: &[&str] = if content.contains("flattened") {
        &["id", "quantity", "__op", "__deleted"]
    } else {
        &["key", "before", "after", "source", "op"]
    };
    for c in want {
        assert!(columns.contains(&json!(c)), "{c} not compared: {columns:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tombstones_and_keyless_records_are_rows_like_the_raw_layers_in_envelope_content() {
    tombstones_and_keyless_records(Kind::Sql, "envelope").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tombstones_and_keyless_records_are_rows_like_the_raw_layers_in_flattened_content() {
    tombstones_and_keyless_records(Kind::Rest, "flattened").await;
}

/// `lakesink check` with a `[lake]` section: the catalog, its namespace and a probe table.
fn check(stack: &Stack, kind: Kind, uri: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lakesink.toml");
    let catalog = unique("lake");
    let mut lake = section(stack, kind, &catalog, &unique("checked"), "");
    let wanted = match kind {
        Kind::Sql => &stack.replica_pg_url,
        Kind::Rest => &stack.iceberg_rest_url,
    };
    lake = lake.replace(
        &format!("catalog-uri = \"{wanted}\""),
        &format!("catalog-uri = \"{uri}\""),
    );
    let text = format!(
        "[kafka]\nbrokers = \"{}\"\ntopics-regex = \"lake-check-.*\"\nformat = \"json\"\n{lake}",
        stack.kafka_brokers
    );
    std::fs::write(&path, text).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_lakesink"))
        .args(["check", "--config", path.to_str().expect("utf-8")])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run lakesink check");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn lake_line(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.len() > 4 && l[4..].trim_start().starts_with("lake"))
        .unwrap_or_else(|| panic!("no lake line:\n{report}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn check_creates_and_drops_a_probe_table_in_either_catalog_and_names_a_bad_one() {
    let stack = Stack::from_env();
    for (kind, uri) in [
        (Kind::Sql, stack.replica_pg_url.clone()),
        (Kind::Rest, stack.iceberg_rest_url.clone()),
    ] {
        let (ok, report) = check(&stack, kind, &uri);
        let line = lake_line(&report);
        assert!(ok, "{report}");
        assert!(line.starts_with("OK"), "{line}");
        assert!(line.contains("created, wrote to and dropped"), "{line}");
        assert!(
            !line.contains(":lakesink@"),
            "the password is shown: {line}"
        );
    }
    // Nothing listens on port 1; the PostgreSQL user's password is wrong.
    let wrong_password = stack.replica_pg_url.replacen(":lakesink@", ":wrong@", 1);
    for (kind, uri, says) in [
        (
            Kind::Rest,
            "http://127.0.0.1:1",
            "REST catalog http://127.0.0.1:1",
        ),
        (Kind::Sql, wrong_password.as_str(), "SQL catalog"),
    ] {
        let (ok, report) = check(&stack, kind, uri);
        let line = lake_line(&report);
        assert!(!ok, "{report}");
        assert!(line.starts_with("FAIL"), "{line}");
        assert!(line.contains(says), "{line}");
        assert!(!line.contains("wrong"), "the password is shown: {line}");
    }
}
