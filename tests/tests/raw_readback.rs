//! Real readers read the raw layer: the golden 37-type row, captured by real Debezium, decoded
//! and written by `ParquetWriter` to `file://`, is read back by pyarrow (and DuckDB) from PyPI.
//! Every column has the Arrow type the decoder chose, keeps its `connect.*` metadata, and holds
//! the value PostgreSQL holds, in both content modes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lakesink_schema_registry::{ChangeBatch, Format, IdKind};
use lakesink_tests::debezium::{Connector, decode_all};
use lakesink_tests::golden::{COLUMNS, VALUES};
use lakesink_tests::raw::{self, Scratch};
use lakesink_tests::{Stack, unique};
use serde_json::Value;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

/// Each golden column: the type pyarrow reports, the type DuckDB reports, and the SQL giving
/// its value in the form `tests/python/read_parquet.py` renders (mostly `column::text`, session
/// time zone UTC).
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("id", "int64", "BIGINT", "id::text"),
    ("i2", "int16", "SMALLINT", "i2::text"),
    ("i4", "int32", "INTEGER", "i4::text"),
    ("f4", "float", "FLOAT", "f4::text"),
    ("f8", "double", "DOUBLE", "f8::text"),
    ("n102", "decimal128(10, 2)", "DECIMAL(10,2)", "n102::text"),
    // VariableScaleDecimal; Debezium drops trailing zeros.
    (
        "n",
        "struct<scale: int32 not null, value: binary not null>",
        "STRUCT(scale INTEGER, \"value\" BLOB)",
        "trim_scale(n)::text",
    ),
    ("n386", "decimal128(38, 6)", "DECIMAL(38,6)", "n386::text"),
    ("b", "bool", "BOOLEAN", "b::text"),
    ("t", "string", "VARCHAR", "t"),
    ("vc", "string", "VARCHAR", "vc::text"),
    // format() keeps char(n)'s padding, as Debezium does; a text cast trims it.
    ("c3", "string", "VARCHAR", "format('%s', c3)"),
    ("by", "binary", "BLOB", "by::text"),
    ("d", "date32[day]", "DATE", "d::text"),
    ("tm", "time64[us]", "TIME", "tm::text"),
    ("tm3", "time32[ms]", "TIME", "tm3::text"),
    // Debezium normalises timetz to UTC.
    (
        "ttz",
        "string",
        "VARCHAR",
        "(ttz AT TIME ZONE 'UTC')::time::text || 'Z'",
    ),
    ("ts", "timestamp[us]", "TIMESTAMP", "ts::text"),
    ("ts3", "timestamp[ms]", "TIMESTAMP", "ts3::text"),
    (
        "tstz",
        "timestamp[us, tz=UTC]",
        "TIMESTAMP WITH TIME ZONE",
        "tstz::text",
    ),
    // MicroDuration: a month is 365.25 / 12 days; compared to within 1 µs (Debezium uses f64).
    (
        "iv",
        "duration[us]",
        "BIGINT",
        "round(((extract(year from iv) * 12 + extract(month from iv)) * 30.4375 * 86400
           + extract(day from iv) * 86400 + extract(hour from iv) * 3600
           + extract(minute from iv) * 60 + extract(second from iv)) * 1000000)::bigint::text",
    ),
    ("u", "string", "VARCHAR", "u::text"),
    ("j", "string", "VARCHAR", "j::text"),
    ("jb", "string", "VARCHAR", "jb::text"),
    ("x", "string", "VARCHAR", "x::text"),
    // Bits little-endian: bit i is bit i % 8 of byte i / 8 (one byte here).
    (
        "bt",
        "binary",
        "BLOB",
        "'\\x' || lpad(to_hex(bt::int), 2, '0')",
    ),
    (
        "bv",
        "binary",
        "BLOB",
        "'\\x' || lpad(to_hex(lpad(bv::text, 32, '0')::bit(32)::int), 2, '0')",
    ),
    (
        "ai",
        "list<item: int32>",
        "INTEGER[]",
        "(SELECT json_agg(e::text) FROM unnest(ai) e)",
    ),
    (
        "at",
        "list<item: string>",
        "VARCHAR[]",
        "(SELECT json_agg(e) FROM unnest(at) e)",
    ),
    ("mo", "string", "VARCHAR", "mo::text"),
    ("inet_", "string", "VARCHAR", "inet_::text"),
    ("cidr_", "string", "VARCHAR", "cidr_::text"),
    ("mac", "string", "VARCHAR", "mac::text"),
    // Compared on x and y; wkb and srid are Debezium's additions.
    (
        "pt",
        "struct<x: double not null, y: double not null, wkb: binary, srid: int32>",
        "STRUCT(x DOUBLE, y DOUBLE, wkb BLOB, srid INTEGER)",
        "json_build_object('x', pt[0]::text, 'y', pt[1]::text)",
    ),
    (
        "money_",
        "decimal256(64, 2)",
        "DOUBLE",
        "money_::numeric::text",
    ),
    ("tsv", "string", "VARCHAR", "tsv::text"),
    ("i8r", "string", "VARCHAR", "i8r::text"),
];

#[tokio::test]
async fn pyarrow_and_duckdb_read_the_raw_layer_back_with_types_and_values() {
    let started = Instant::now();
    let stack = Stack::from_env();
    check_python(&stack);
    let name = unique("rawread");
    let pg = lakesink_tests::source_pool(&stack).await;
    let mood = format!("{name}_mood");
    for sql in [
        format!("CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')"),
        format!(
            "CREATE TABLE public.{name} ({})",
            COLUMNS.replace("MOOD", &mood)
        ),
        format!("INSERT INTO public.{name} VALUES ({VALUES})"),
        format!("INSERT INTO public.{name} (id) VALUES (2)"),
    ] {
        run(&pg, &sql).await;
    }
    let expected = source_row(&pg, &name).await;
    let connector = Connector::start(&stack, &name).await;
    run(
        &pg,
        &format!("UPDATE public.{name} SET t = 'changed' WHERE id = 2"),
    )
    .await;
    run(&pg, &format!("DELETE FROM public.{name} WHERE id = 2")).await;
    // Two snapshot reads, an update, a delete and its tombstone.
    let records = connector.read(5).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    assert_eq!(batches.len(), 1, "one schema, one batch");
    let metadata = decoded_metadata(&batches[0]);

    // Envelope: the whole change event, the row image under `after`.
    let dir = write_raw(&batches, &connector.topic, "").await;
    let (file, tombstone) = segment_files(&dir.0);
    let read = pyarrow(&stack, &file);
    let fields = &read["fields"];
    for (field, ty) in [
        ("__topic", "string"),
        ("__partition", "int32"),
        ("__offset", "int64"),
        ("__timestamp", "timestamp[ms, tz=UTC]"),
        ("__op", "string"),
        ("__tombstone", "bool"),
    ] {
        assert_eq!(fields[field]["type"], ty, "{field}");
    }
    check_columns(fields, "after.", &metadata);
    let rows = with_tombstone(&read, &pyarrow(&stack, &tombstone));
    let column = |c: &str| -> Vec<Value> { rows.iter().map(|r| r[c].clone()).collect() };
    assert_eq!(column("__op"), ["r", "r", "u", "d", "d"]);
    assert_eq!(
        column("__tombstone"),
        ["false", "false", "false", "false", "true"]
    );
    assert_eq!(column("__offset"), ["0", "1", "2", "3", "4"]);
    check_values(&rows[0]["after"], &expected);
    assert_nulls_but_id(&rows[1]["after"]);
    assert_eq!(rows[2]["after"]["t"], "changed");
    assert!(rows[3]["after"].is_null() && rows[4]["after"].is_null());
    assert_eq!(rows[3]["before"]["id"], "2");
    assert_eq!(rows[4]["key"]["id"], "2", "the tombstone keeps its key");

    // Flattened: the row image as columns (the before image for deletes).
    let dir = write_raw(&batches, &connector.topic, "content = \"flattened\"").await;
    let (file, tombstone) = segment_files(&dir.0);
    let read = pyarrow(&stack, &file);
    let fields = &read["fields"];
    for (field, ty) in [
        ("__topic", "string"),
        ("__partition", "int32"),
        ("__offset", "int64"),
        ("__timestamp", "timestamp[ms, tz=UTC]"),
        ("__op", "string"),
        ("__deleted", "bool"),
        ("__source_ts_ms", "int64"),
    ] {
        assert_eq!(fields[field]["type"], ty, "{field}");
    }
    check_columns(fields, "", &metadata);
    let rows = with_tombstone(&read, &pyarrow(&stack, &tombstone));
    let column = |c: &str| -> Vec<Value> { rows.iter().map(|r| r[c].clone()).collect() };
    assert_eq!(column("__op"), ["r", "r", "u", "d", "d"]);
    assert_eq!(
        column("__deleted"),
        ["false", "false", "false", "true", "true"]
    );
    check_values(&rows[0], &expected);
    assert_nulls_but_id(&rows[1]);
    assert_eq!(rows[2]["t"], "changed");
    assert_eq!(rows[3]["id"], "2", "a delete holds its before image");
    assert_eq!(rows[4]["id"], "2", "the tombstone holds its key's fields");

    // DuckDB reads the same file.
    let duck = &duckdb(
        &stack,
        "SELECT (SELECT count(*) FROM read_parquet('{file}')) AS n,
            n102::VARCHAR AS n102, n386::VARCHAR AS n386, money_::VARCHAR AS money_,
            d::VARCHAR AS d, tm::VARCHAR AS tm, ts::VARCHAR AS ts, epoch_us(tstz) AS tstz_us,
            iv::VARCHAR AS iv, u
         FROM read_parquet('{file}') WHERE id = 1 AND __op = 'r'",
        &file,
    )[0];
    // Every golden column's DuckDB type. DuckDB also reads the Kafka partition directory
    // (`partition=0`) as a hive partition column.
    let described = duckdb(
        &stack,
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet('{file}'))",
        &file,
    );
    let described: BTreeMap<String, String> = described
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().expect("text").to_owned();
            (s("column_name"), s("column_type"))
        })
        .collect();
    let wrong: Vec<String> = EXPECTED
        .iter()
        .filter(|(col, _, ty, _)| described.get(*col).map(String::as_str) != Some(*ty))
        .map(|(col, _, ty, _)| format!("{col}: {:?} (expected {ty})", described.get(*col)))
        .collect();
    assert!(wrong.is_empty(), "DuckDB types:\n{}", wrong.join("\n"));
    assert_eq!(described["__deleted"], "BOOLEAN");
    assert_eq!(
        described["partition"], "BIGINT",
        "the hive partition column"
    );
    assert_eq!(
        duck["n"], "4",
        "DuckDB counts every row but the tombstone's"
    );
    let tombstones = &duckdb(
        &stack,
        "SELECT count(*) AS n, min(__offset) AS o FROM read_parquet('{file}')",
        &tombstone,
    )[0];
    assert_eq!(
        (&tombstones["n"], &tombstones["o"]),
        (&Value::from("1"), &Value::from("4"))
    );
    for col in ["n102", "n386", "d", "tm", "ts", "u", "iv", "money_"] {
        assert_eq!(duck[col], expected[col], "DuckDB value of {col}");
    }
    let tstz = expected["tstz"].as_str().expect("tstz");
    let tstz =
        chrono::NaiveDateTime::parse_from_str(tstz.trim_end_matches("+00"), "%Y-%m-%d %H:%M:%S%.f")
            .expect("timestamp");
    assert_eq!(
        duck["tstz_us"],
        tstz.and_utc().timestamp_micros().to_string(),
        "DuckDB value of tstz"
    );

    connector.stop(&pg).await;
    run(&pg, &format!("DROP TABLE public.{name}")).await;
    run(&pg, &format!("DROP TYPE {mood}")).await;
    eprintln!("raw read-back took {:?}", started.elapsed());
}

async fn run(pg: &PgPool, sql: &str) {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pg)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The golden row as PostgreSQL gives it, column by column, in the reader's text forms.
async fn source_row(pg: &PgPool, name: &str) -> BTreeMap<String, Value> {
    let mut conn = pg.acquire().await.expect("connection");
    sqlx::query("SET TimeZone = 'UTC'")
        .execute(&mut *conn)
        .await
        .expect("time zone");
    let pairs: Vec<String> = EXPECTED
        .iter()
        .map(|(col, _, _, expr)| format!("'{col}', {expr}"))
        .collect();
    let sql = format!(
        "SELECT json_build_object({})::text FROM public.{name} WHERE id = 1",
        pairs.join(", ")
    );
    let text: String = sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(&mut *conn)
        .await
        .expect("source row");
    serde_json::from_str(&text).expect("json")
}

/// `connect.*` metadata of each `after` field, as the decoder put it on the Arrow fields.
fn decoded_metadata(batch: &ChangeBatch) -> BTreeMap<String, BTreeMap<String, String>> {
    let schema = batch.rows.schema();
    let after = schema.field_with_name("after").expect("after");
    let arrow_schema::DataType::Struct(fields) = after.data_type() else {
        panic!("after is {}", after.data_type());
    };
    fields
        .iter()
        .map(|f| {
            let m = f.metadata().clone().into_iter().collect();
            (f.name().clone(), m)
        })
        .collect()
}

/// Types as listed in [`EXPECTED`], and the decoder's field metadata kept.
fn check_columns(
    fields: &Value,
    prefix: &str,
    metadata: &BTreeMap<String, BTreeMap<String, String>>,
) {
    let mut wrong = Vec::new();
    for (col, ty, ..) in EXPECTED {
        let f = &fields[format!("{prefix}{col}")];
        if f["type"] != *ty {
            wrong.push(format!("{col}: {} (expected {ty})", f["type"]));
        }
        let got: BTreeMap<String, String> =
            serde_json::from_value(f["metadata"].clone()).expect("metadata");
        let want = &metadata[*col];
        for (k, v) in want {
            if got.get(k) != Some(v) {
                wrong.push(format!(
                    "{col}: metadata {k} = {:?}, decoded {v:?}",
                    got.get(k)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{prefix}*:\n{}", wrong.join("\n"));
    assert!(
        metadata["u"].get("connect.name").map(String::as_str) == Some("io.debezium.data.Uuid"),
        "the decoder marks uuid columns: {:?}",
        metadata["u"]
    );
}

fn check_values(row: &Value, expected: &BTreeMap<String, Value>) {
    let mut wrong = Vec::new();
    for (col, ..) in EXPECTED {
        let got = &row[*col];
        let want = &expected[*col];
        let same = match *col {
            "n" => {
                let scale: u32 = got["scale"].as_str().expect("scale").parse().expect("int");
                let hex = got["value"].as_str().expect("value");
                Some(decimal_text(scale, hex).as_str()) == want.as_str()
            }
            "pt" => want
                .as_object()
                .expect("object")
                .iter()
                .all(|(k, v)| got[k] == *v),
            "iv" => {
                let g: i64 = got.as_str().expect("iv").parse().expect("int");
                let w: i64 = want.as_str().expect("iv").parse().expect("int");
                (g - w).abs() <= 1
            }
            _ => got == want,
        };
        if !same {
            wrong.push(format!("{col}: read {got}, PostgreSQL has {want}"));
        }
    }
    assert!(wrong.is_empty(), "values differ:\n{}", wrong.join("\n"));
}

fn assert_nulls_but_id(row: &Value) {
    assert_eq!(row["id"], "2");
    for (col, ..) in EXPECTED.iter().filter(|(c, ..)| *c != "id") {
        assert!(row[*col].is_null(), "{col} should be NULL: {}", row[*col]);
    }
}

/// An unscaled big-endian non-negative integer (hex after `\x`) with `scale`, as decimal text.
fn decimal_text(scale: u32, hex: &str) -> String {
    let hex = hex.trim_start_matches("\\x");
    let mut n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect();
    assert!(
        n.first().is_none_or(|b| b & 0x80 == 0),
        "test values are positive"
    );
    let mut digits = Vec::new();
    while n.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in n.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    let mut text: String = digits.iter().rev().collect();
    let scale = scale as usize;
    while text.len() <= scale {
        text.insert(0, '0');
    }
    if scale > 0 {
        text.insert(text.len() - scale, '.');
    }
    text
}

/// Writes `batches` to a fresh `file://` raw layer with `extra` settings; every record must be
/// written and durable.
async fn write_raw(batches: &[ChangeBatch], topic: &str, extra: &str) -> Scratch {
    let w = raw::write_raw(batches, topic, extra).await;
    assert_eq!((w.rows, w.next), (5, 5), "every record written and durable");
    w.dir
}

/// The segment's two files: its rows, and its tombstone (a tombstone always has a file of
/// its own, so that a restart writes the same files however records were batched).
fn segment_files(dir: &Path) -> (PathBuf, PathBuf) {
    let mut found = raw::parquet_files(dir);
    assert_eq!(
        found.len(),
        2,
        "one segment, the rows' file and the tombstone's: {found:?}"
    );
    let tombstone = found.pop().expect("two files");
    (found.remove(0), tombstone)
}

/// The rows of the rows' file, then the tombstone file's.
fn with_tombstone(rows: &Value, tombstone: &Value) -> Vec<Value> {
    let all = |v: &Value| v["rows"].as_array().expect("rows").clone();
    [all(rows), all(tombstone)].concat()
}

fn check_python(stack: &Stack) {
    let ok = Command::new(&stack.python)
        .args(["-c", "import pyarrow, duckdb"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import pyarrow and duckdb: run `dev/stack install` (or set LAKESINK_PYTHON)",
        stack.python
    );
}

fn pyarrow(stack: &Stack, file: &Path) -> Value {
    let mut files = raw::read_parquet(stack, &[file]);
    files[0].take()
}

/// The rows DuckDB returns for `sql` over `file`.
fn duckdb(stack: &Stack, sql: &str, file: &Path) -> Vec<Value> {
    let rows = raw::read_parquet(
        stack,
        &["--duckdb".as_ref(), sql.as_ref(), file.as_os_str()],
    );
    rows.as_array().expect("rows").clone()
}
