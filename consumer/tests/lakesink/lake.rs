//! Lake tables against the real stack: the `lakesink` binary writes a topic to an Iceberg
//! table (SQL catalog in PostgreSQL, files on the S3 server) beside the raw layer, is killed at
//! every lake failpoint, restarts, and in the end pyiceberg and DuckDB read every record of the
//! topic exactly once, each value equal to the raw layer's.

use std::path::PathBuf;
use std::process::Command;

use futures::TryStreamExt;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use lakesink_writers::failpoint::{LAKE_AFTER_COMMIT, LAKE_BEFORE_COMMIT, LAKE_BEFORE_UPLOAD};
use object_store::path::Path;
use serde_json::{Value, json};

use crate::common::{Run, assert_exactly_once, expected, produce_range};

/// The `[lake]` section of a run: the SQL catalog in the replica's server, a catalog name and
/// namespace of the test's own.
fn section(stack: &Stack, catalog: &str, namespace: &str, extra: &str) -> String {
    format!(
        r#"
[lake]
catalog-uri = "{uri}"
catalog-name = "{catalog}"
warehouse = "s3://{bucket}/{catalog}"
namespace = "{namespace}"
commit-interval-ms = 1000
{extra}

[lake.store]
endpoint = "{endpoint}"
region = "{region}"
access-key-id = "{key}"
secret-access-key = "{secret}"
allow-http = true
"#,
        uri = stack.replica_pg_url,
        bucket = stack.s3_bucket,
        endpoint = stack.s3_endpoint,
        region = stack.s3_region,
        key = stack.s3_access_key_id,
        secret = stack.s3_secret_access_key,
    )
}

/// `tests/python/read_iceberg.py`: the table through pyiceberg and DuckDB, beside the raw
/// layer's files.
async fn read_back(run: &Run, catalog: &str, table: &str) -> Value {
    let store = run.store();
    let prefix = Path::from(format!("{}/topics", run.prefix));
    let keys: Vec<String> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    let s = &run.stack;
    let request = json!({
        "catalog_uri": s.replica_pg_url.replacen("postgres://", "postgresql+psycopg2://", 1),
        "catalog_name": catalog,
        "table": table,
        "s3": {"endpoint": s.s3_endpoint, "key": s.s3_access_key_id,
               "secret": s.s3_secret_access_key, "region": s.s3_region},
        "bucket": s.s3_bucket,
        "raw_keys": keys,
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/read_iceberg.py");
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

#[tokio::test(flavor = "multi_thread")]
async fn the_lake_table_holds_each_record_once_across_crashes_at_every_failpoint() {
    let stack = Stack::from_env();
    let topic = unique("lake-crash");
    let (partitions, count) = (3, 3_000);
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    produce_range(&stack, &table, partitions, 0..count / 2).await;
    let catalog = unique("lake");
    let namespace = unique("cdc").replace('-', "_");
    // Small segments and commits, so every failpoint is reached with work on both sides.
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 400\nrotate-interval-ms = 2000"),
        &section(&stack, &catalog, &namespace, "commit-bytes = 1048576"),
    );
    // The first half: killed before an upload, before a commit, then after one (the restart
    // finds the commit's offsets in the table and makes it no second time).
    for failpoint in [LAKE_BEFORE_UPLOAD, LAKE_BEFORE_COMMIT, LAKE_AFTER_COMMIT] {
        run.crash_at(failpoint);
    }
    // The second half, on top of committed rows.
    produce_range(&stack, &table, partitions, count / 2..count).await;
    run.crash_at(LAKE_BEFORE_COMMIT);
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let name = topic.replace('.', "_");
    let got = read_back(&run, &catalog, &format!("{namespace}.{name}")).await;
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
    assert_eq!(offsets[&topic], Value::Object(want_offsets));
    let schema = got["schema"].as_str().expect("schema");
    assert!(
        schema.contains("price: optional decimal(10, 2)"),
        "{schema}"
    );
    assert!(
        schema.contains("created_at: optional timestamp"),
        "{schema}"
    );
    assert!(
        schema.contains("updated_at: optional timestamptz"),
        "{schema}"
    );
}
