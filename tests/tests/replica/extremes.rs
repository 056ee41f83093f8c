//! Conformance: every special value PostgreSQL holds, each in a row of its own so that one
//! refusal cannot hide another, captured by real Debezium both in the snapshot and streamed,
//! reaches the replica (compared with the source as text, as multisets both ways), the raw
//! layer (read back by DuckDB and by pyarrow, each value compared with the source's), and a
//! replica rebuilt by replaying the raw layer into an empty schema.

use std::collections::BTreeMap;

use lakesink_schema_registry::{ChangeBatch, Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::raw::Scratch;
use lakesink_tests::{Stack, unique, unreachable};
use rdkafka::message::Headers;
use serde_json::Value;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::replica::support::{Capture, replicator, rows};

const COLUMNS: &str = "id integer PRIMARY KEY, d date, ts timestamp, ts3 timestamp(3),
  tstz timestamptz, tm time, f4 real, f8 double precision, t text, j json";

/// One row per value. `false`: streamed only, since Debezium 3.6's snapshot drops a BC
/// date's era (4713 BC arrives as 4713 AD; docs/decoding.md, extreme values).
const VALUES: &[(&str, &str, bool)] = &[
    ("d", "'infinity'", true),
    ("d", "'-infinity'", true),
    ("d", "'4714-11-24 BC'", false),
    ("d", "'0001-01-01 BC'", false),
    ("d", "'5874897-12-31'", true),
    ("ts", "'infinity'", true),
    ("ts", "'-infinity'", true),
    ("ts", "'4714-11-24 00:00:00 BC'", true),
    ("ts", "'0001-01-01 00:00:00'", true),
    ("ts", "'294247-01-09 23:59:59.999999'", true),
    ("ts3", "'infinity'", true),
    ("ts3", "'-infinity'", true),
    ("ts3", "'4714-11-24 00:00:00.001 BC'", true),
    ("tstz", "'infinity'", true),
    ("tstz", "'-infinity'", true),
    ("tstz", "'4714-11-24 00:00:00+00 BC'", true),
    ("tstz", "'10000-01-01 00:00:00.000001+00'", true),
    ("tstz", "'294247-01-09 12:00:00+00'", true),
    ("tm", "'24:00:00'", true),
    ("tm", "'00:00:00'", true),
    ("tm", "'23:59:59.999999'", true),
    ("f4", "'NaN'", true),
    ("f4", "'Infinity'", true),
    ("f4", "'-Infinity'", true),
    ("f4", "'-0'", true),
    ("f4", "'1.4e-45'", true),
    ("f8", "'NaN'", true),
    ("f8", "'Infinity'", true),
    ("f8", "'-Infinity'", true),
    ("f8", "'-0'", true),
    ("f8", "'4.9e-324'", true),
    ("f8", "'1.7976931348623157e308'", true),
    ("f8", "'94247779607.69379'", true),
    ("t", "''", true),
    ("t", "'☃ \\ '' \" tab\t'", true),
    // json as written: jsonb would respace, reorder, keep the last "a", and refuse \u0000.
    (
        "j",
        r#"'{"b": 1,  "a": 2, "a": [1.50, 2e3], "s": "x\u0000y"}'"#,
        true,
    ),
    ("j", "' [] '", true),
];

/// Per column: the source's value as text, for comparing with the replica (as text) and with
/// what the readers report. Temporal columns as integers since 1970 in their unit, or `inf`.
fn physical(col: &str) -> String {
    let finite = |int: &str| {
        format!(
            "CASE WHEN {col} IS NULL THEN NULL WHEN NOT isfinite({col}) THEN \
             (CASE WHEN {col} > 'epoch' THEN 'inf' ELSE '-inf' END) ELSE ({int})::text END"
        )
    };
    match col {
        "d" => finite("d - date '1970-01-01'"),
        "ts" | "tstz" => finite(&format!(
            "(extract(epoch from {col}) * 1000000)::numeric(30,0)"
        )),
        "ts3" => finite("(extract(epoch from ts3) * 1000)::numeric(30,0)"),
        "tm" => "(extract(epoch from tm) * 1000000)::bigint::text".into(),
        other => format!("{other}::text"),
    }
}

/// How the connector writes its records, and how lakesink is told to read them.
fn wire(kind: &str) -> (Value, Format) {
    let avro = |payload_ids| Format::Avro {
        payload_ids,
        check_artifacts: true,
    };
    match kind {
        // The Apicurio 2.x converter's default: 8-byte globalIds in record headers.
        "avro-headers" => (serde_json::json!({}), avro(IdKind::ContentId)),
        // Headers off, Confluent framing: a magic byte and a 4-byte contentId in the payload.
        "avro-payload" => (
            serde_json::json!({
                "key.converter.apicurio.registry.headers.enabled": "false",
                "value.converter.apicurio.registry.headers.enabled": "false",
                "key.converter.apicurio.registry.as-confluent": "true",
                "value.converter.apicurio.registry.as-confluent": "true",
                "key.converter.apicurio.registry.use-id": "contentId",
                "value.converter.apicurio.registry.use-id": "contentId",
            }),
            avro(IdKind::ContentId),
        ),
        "connect-json" => (
            serde_json::json!({
                "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable": "true",
                "value.converter.schemas.enable": "true",
            }),
            Format::ConnectJson,
        ),
        other => panic!("no wire format {other}"),
    }
}

#[tokio::test]
async fn every_special_value_reaches_the_replica_and_the_raw_layer() {
    special_values("avro-headers").await;
}

#[tokio::test]
async fn every_special_value_arrives_framed_in_the_payload_too() {
    special_values("avro-payload").await;
}

#[tokio::test]
async fn every_special_value_arrives_through_jsonconverter_too() {
    special_values("connect-json").await;
}

async fn special_values(kind: &str) {
    let (converters, format) = wire(kind);
    let stack = Stack::from_env();
    let name = unique("extremes");
    let src = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    let exec = |sqls: Vec<String>| {
        let src = src.clone();
        async move {
            for sql in sqls {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .execute(&src)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    };
    let insert = |id: usize, (col, value, _): &(&str, &str, bool)| {
        format!("INSERT INTO public.{name} (id, {col}) VALUES ({id}, {value})")
    };
    let mut setup = vec![format!("CREATE TABLE public.{name} ({COLUMNS})")];
    let snapshot: Vec<_> = VALUES.iter().filter(|v| v.2).collect();
    setup.extend(snapshot.iter().enumerate().map(|(i, v)| insert(i + 1, v)));
    setup.push(format!("INSERT INTO public.{name} (id) VALUES (999)"));
    exec(setup).await;
    let capture = Capture::start_with(&stack, &name, &[&name], converters).await;
    exec(
        VALUES
            .iter()
            .enumerate()
            .map(|(i, v)| insert(1000 + i, v))
            .collect(),
    )
    .await;
    let records = capture.read(&[snapshot.len() + 1 + VALUES.len()]).await;
    // The records are framed as `kind` says.
    for r in &records {
        let value = rdkafka::Message::payload(r).expect("a value");
        let names: Vec<String> = rdkafka::Message::headers(r)
            .map(|h| (0..h.count()).map(|i| h.get(i).key.to_owned()).collect())
            .unwrap_or_default();
        match kind {
            "avro-headers" => assert!(
                names.iter().any(|n| n.starts_with("apicurio")),
                "ids in headers: {names:?}"
            ),
            "avro-payload" => assert!(
                !names.iter().any(|n| n.starts_with("apicurio")) && value[0] == 0,
                "a magic byte and an id, no id headers: {names:?} {:?}",
                &value[..value.len().min(9)]
            ),
            _ => assert_eq!(value[0], b'{', "JSON"),
        }
    }
    let batches = decode_all(&stack, format, &records).await;

    // The source, each value in the forms compared below.
    let cols: Vec<&str> = ["id", "d", "ts", "ts3", "tstz", "tm", "f4", "f8", "t", "j"].to_vec();
    let source = source_rows(&src, &name, &cols).await;
    assert_eq!(source.len(), records.len(), "one source row per record");

    // The replica: every row, every column, as the source's text.
    let (r, schema) = replicator(|_| {}).await;
    r.apply("extremes", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text: Vec<String> = cols
        .iter()
        .map(|c| match *c {
            "tstz" => "(tstz AT TIME ZONE 'UTC')::text".to_owned(),
            c => format!("{c}::text"),
        })
        .collect();
    let query = |schema: &str| {
        format!(
            "SELECT json_build_array({})::text FROM \"{schema}\".\"{name}\" ORDER BY id",
            text.join(", ")
        )
    };
    let want: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(query("public")))
        .fetch_all(&src)
        .await
        .expect("source rows");
    let same_rows = |what: &str, got: Vec<(String,)>| {
        let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
        let extra: Vec<_> = got.iter().filter(|g| !want.contains(g)).collect();
        assert!(
            missing.is_empty() && extra.is_empty() && got.len() == want.len(),
            "{what} differs from the source\nmissing: {missing:#?}\nextra: {extra:#?}"
        );
    };
    same_rows("the replica", rows(&r, &query(&schema)).await);

    // The raw layer's change events, replayed into an empty schema, rebuild the same table.
    let events = write_raw(&batches, &capture.topics[0], "envelope").await;
    let (rebuilt, rebuilt_schema) = replicator(|_| {}).await;
    let raw = lakesink_writers::replay::RawLayer::open(&events.1).expect("raw layer");
    let plan = lakesink_writers::replay::plan(&raw, &Default::default(), &Default::default())
        .await
        .expect("plan");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let options = lakesink_writers::replay::Options {
        // Its own offsets: the live replicator above stored the same topic's as "extremes".
        group: "extremes-replay".into(),
        parallelism: 1,
        tx_rows: 10_000,
        tx_bytes: 64 << 20,
        continue_on_error: false,
        stop: Default::default(),
        stats: Default::default(),
    };
    let rebuilt = std::sync::Arc::new(rebuilt);
    let summary =
        lakesink_writers::replay::run(std::sync::Arc::new(raw), plan, rebuilt.clone(), options)
            .await;
    assert!(
        summary.problems.is_empty() && !summary.stopped,
        "{:?}",
        summary.problems
    );
    assert_eq!(summary.rows_applied as usize, records.len());
    same_rows(
        "the replayed replica",
        rows(&rebuilt, &query(&rebuilt_schema)).await,
    );

    // The raw layer, flattened, read by pyarrow and by DuckDB.
    let (dir, _) = write_raw(&batches, &capture.topics[0], "flattened").await;
    let glob = format!("{}/**/*.parquet", dir.0.display());
    let pyarrow = read(
        &stack,
        &[vec!["--physical".to_owned()], parquet_files(&dir.0)].concat(),
    );
    let duck_exprs: Vec<String> = cols
        .iter()
        .map(|c| {
            let e = match *c {
                "d" | "ts" | "ts3" | "tstz" => {
                    let int = match *c {
                        "d" => "datediff('day', DATE '1970-01-01', d)".to_owned(),
                        "ts3" => "epoch_ms(ts3)".to_owned(),
                        _ => format!("epoch_us({c})"),
                    };
                    format!(
                        "CASE WHEN {c} IS NULL THEN NULL WHEN isinf({c}) THEN \
                         (CASE WHEN {c} > '1970-01-01' THEN 'inf' ELSE '-inf' END) \
                         ELSE ({int})::VARCHAR END"
                    )
                }
                "tm" => "tm::VARCHAR".to_owned(),
                c => format!("{c}::VARCHAR"),
            };
            format!("{e} AS {c}")
        })
        .collect();
    let duck = read(
        &stack,
        &[
            "--duckdb".into(),
            format!(
                "SELECT {} FROM read_parquet('{{file}}') WHERE __op <> 'd' ORDER BY id",
                duck_exprs.join(", ")
            ),
            glob,
        ],
    );
    let by_id = |rows: &Value| -> BTreeMap<String, Value> {
        rows.as_array()
            .expect("rows")
            .iter()
            .map(|r| (r["id"].as_str().expect("id").to_owned(), r.clone()))
            .collect()
    };
    let (pyarrow, duck) = (by_id(&pyarrow), by_id(&duck));
    let mut wrong = Vec::new();
    for (id, want) in &source {
        for reader in ["pyarrow", "duckdb"] {
            let row = if reader == "pyarrow" { &pyarrow } else { &duck };
            let Some(got) = row.get(id) else {
                wrong.push(format!("{reader}: row {id} missing"));
                continue;
            };
            for c in &cols {
                let (g, w) = (&got[*c], &want[*c]);
                if !same(reader, c, g, w) {
                    wrong.push(format!(
                        "{reader}: row {id} {c}: read {g}, PostgreSQL has {w}"
                    ));
                }
            }
        }
    }
    assert_eq!(
        pyarrow.len(),
        source.len(),
        "pyarrow: one row per source row"
    );
    assert_eq!(duck.len(), source.len(), "duckdb: one row per source row");
    assert!(
        wrong.is_empty(),
        "the raw layer differs:\n{}",
        wrong.join("\n")
    );

    capture.stop(&src).await;
    exec(vec![format!("DROP TABLE public.{name}")]).await;
}

/// Whether a reader's value equals the source's: temporal values as integers (pyarrow, which
/// stores `infinity` as the ends of the range), floats bit for bit, the rest as text.
fn same(reader: &str, col: &str, got: &Value, want: &Value) -> bool {
    let (Some(g), Some(w)) = (got.as_str(), want.as_str()) else {
        return got.is_null() && want.is_null();
    };
    match col {
        "d" | "ts" | "ts3" | "tstz" if reader == "pyarrow" => {
            let ends = if col == "d" {
                i64::from(i32::MAX)
            } else {
                i64::MAX
            };
            let g: i64 = g.parse().expect("an integer");
            match w {
                "inf" => g == ends,
                "-inf" => g == -ends,
                w => w.parse::<i64>().ok() == Some(g),
            }
        }
        "tm" if reader == "duckdb" => {
            let us: i64 = w.parse().expect("microseconds");
            let (s, frac) = (us / 1_000_000, us % 1_000_000);
            let text = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
            g == text || g == format!("{text}.{frac:06}")
        }
        "f4" => float(g).map(|v| (v as f32).to_bits()) == float(w).map(|v| (v as f32).to_bits()),
        "f8" => float(g).map(f64::to_bits) == float(w).map(f64::to_bits),
        _ => g == w,
    }
}

/// PostgreSQL's, Python's and DuckDB's spellings of a float (`NaN`, `nan`, `Infinity`, `inf`).
pub(crate) fn float(text: &str) -> Option<f64> {
    let v: f64 = text.parse().ok()?;
    // One NaN: the sign and payload of a NaN are not a value.
    Some(if v.is_nan() { f64::NAN } else { v })
}

async fn source_rows(
    src: &PgPool,
    table: &str,
    cols: &[&str],
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let pairs: Vec<String> = cols
        .iter()
        .map(|c| format!("'{c}', {}", physical(c)))
        .collect();
    let sql = format!(
        "SELECT json_build_object({})::text FROM public.\"{table}\"",
        pairs.join(", ")
    );
    let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(sql.clone()))
        .fetch_all(src)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.into_iter()
        .map(|(t,)| {
            let row: BTreeMap<String, Value> = serde_json::from_str(&t).expect("json");
            (row["id"].as_str().expect("id").to_owned(), row)
        })
        .collect()
}

/// `batches` written to the raw layer with `content` (`envelope`, `flattened`), in a scratch
/// directory, and its config.
pub(crate) async fn write_raw(
    batches: &[ChangeBatch],
    topic: &str,
    content: &str,
) -> (Scratch, lakesink_config::RawConfig) {
    let w =
        lakesink_tests::raw::write_raw(batches, topic, &format!("content = \"{content}\"")).await;
    (w.dir, w.config)
}

/// The Parquet files under `dir`, as arguments for [`read`].
pub(crate) fn parquet_files(dir: &std::path::Path) -> Vec<String> {
    lakesink_tests::raw::parquet_files(dir)
        .iter()
        .map(|p| p.display().to_string())
        .collect()
}

/// `tests/python/read_parquet.py` with `args`, its JSON output.
pub(crate) fn read(stack: &Stack, args: &[String]) -> Value {
    lakesink_tests::raw::read_parquet(stack, args)
}

/// Asserts that DuckDB reads `value` in every row `WHERE column IS NOT NULL` of the Parquet
/// files under `dir`, as `column.field`, and that there are such rows.
pub(crate) fn assert_duckdb_reads(
    stack: &Stack,
    dir: &std::path::Path,
    column: &str,
    field: &str,
    value: &str,
) {
    let duck = read(
        stack,
        &[
            "--duckdb".into(),
            format!(
                "SELECT {column}.{field}::VARCHAR AS v FROM read_parquet('{{file}}') \
                 WHERE {column} IS NOT NULL"
            ),
            format!("{}/**/*.parquet", dir.display()),
        ],
    );
    assert!(
        duck.as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|r| r["v"] == value)),
        "DuckDB reads {column}.{field}: {duck}"
    );
}
