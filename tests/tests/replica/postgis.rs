//! PostGIS through real Debezium: `geometry` (with and without an SRID, empty ones included)
//! and `geography` reach the replica as their EWKB (the SRID inside), exact, and the raw layer
//! as {wkb, srid}, in files pyarrow and DuckDB open. The other geometric types Debezium
//! leaves out.

use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};
use serde_json::{Value, json};

use crate::replica::extremes::{parquet_files, read, write_raw};
use crate::replica::support::{Capture, exec, replicator, rows, source_pool};

const COLUMNS: [&str; 3] = ["g", "gp", "gg"];

#[tokio::test]
async fn postgis_values_reach_both_sinks() {
    let stack = Stack::from_env();
    let table = unique("postgis");
    let src = source_pool(&stack).await;
    exec(
        &src,
        &[
            "CREATE EXTENSION IF NOT EXISTS postgis".to_owned(),
            format!(
                "CREATE TABLE public.{table} (id int PRIMARY KEY, g geometry, \
                 gp geometry(Point, 4326), gg geography)"
            ),
            format!(
                "INSERT INTO public.{table} VALUES \
                 (1, 'POLYGON((0 0,1 0,1 1,0 0))', 'SRID=4326;POINT(1 2)', \
                 'SRID=4326;POINT(-71.06 42.36)'), \
                 (2, 'SRID=3857;LINESTRING(0 0,1.5 -1e-7)', NULL, 'LINESTRING(0 0,10 10)'), \
                 (3, NULL, NULL, NULL)"
            ),
        ],
    )
    .await;
    let capture = Capture::start_with(
        &stack,
        &table,
        &[&table],
        json!({"column.propagate.source.type": ".*"}),
    )
    .await;
    exec(
        &src,
        &[format!(
            "UPDATE public.{table} SET g = 'GEOMETRYCOLLECTION EMPTY', \
             gp = 'SRID=4326;POINT(179.999999 -89.5)' WHERE id = 3"
        )],
    )
    .await;
    let records = capture.read(&[4]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    // The source: per row and column, the EWKB (WKB with the SRID, where set) as hex, and the
    // SRID. Debezium sends the EWKB in its `wkb` field.
    let select = COLUMNS
        .map(|c| format!("encode(ST_AsEWKB({c}::geometry), 'hex'), ST_SRID({c}::geometry)"))
        .join(", ");
    type Row = (
        i32,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i32>,
    );
    let source: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, {select} FROM public.{table} ORDER BY id"
    )))
    .fetch_all(&src)
    .await
    .expect("source rows");
    assert_eq!(source.len(), 3);

    // The replica: the EWKB, byte for byte (`ST_GeomFromEWKB` gives the geometry back).
    let (r, schema) = replicator(|_| {}).await;
    r.apply("postgis", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    type Ewkb = (i32, Option<String>, Option<String>, Option<String>);
    let wkb: Vec<Ewkb> = rows(
        &r,
        &format!(
            "SELECT id, {} FROM \"{schema}\".{table} ORDER BY id",
            COLUMNS.map(|c| format!("encode({c}, 'hex')")).join(", ")
        ),
    )
    .await;
    let want: Vec<_> = source
        .iter()
        .map(|s| (s.0, s.1.clone(), s.3.clone(), s.5.clone()))
        .collect();
    assert_eq!(wkb, want, "the replica's EWKB");

    // The raw layer: {wkb, srid} as pyarrow reads it.
    let (dir, _) = write_raw(&batches, &capture.topics[0], "flattened").await;
    let py = read(
        &stack,
        &[vec!["--physical".to_owned()], parquet_files(&dir.0)].concat(),
    );
    let mut last: std::collections::BTreeMap<String, Value> = Default::default();
    for row in py.as_array().expect("rows") {
        if row["__op"] != "d" {
            last.insert(row["id"].as_str().expect("id").to_owned(), row.clone());
        }
    }
    for s in &source {
        let row = &last[&s.0.to_string()];
        let cells = [(&s.1, s.2), (&s.3, s.4), (&s.5, s.6)];
        for (c, (hex, srid)) in COLUMNS.iter().zip(cells) {
            match hex {
                None => assert_eq!(row[*c], Value::Null, "row {} {c}: {row}", s.0),
                Some(hex) => {
                    assert_eq!(
                        row[*c]["wkb"],
                        format!("\\x{hex}"),
                        "row {} {c}: the raw layer's EWKB",
                        s.0
                    );
                    let kept = row[*c]["srid"].as_str().and_then(|v| v.parse::<i32>().ok());
                    assert_eq!(
                        kept.unwrap_or(0),
                        srid.unwrap_or(0),
                        "row {} {c}: SRID",
                        s.0
                    );
                }
            }
        }
    }
    crate::replica::extremes::assert_duckdb_reads(&stack, &dir.0, "gp", "srid", "4326");

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{table}")]).await;
}

/// PostgreSQL's other geometric types (`line`, `lseg`, `box`, `path`, `polygon`, `circle`):
/// Debezium 3.6 leaves them out of its records, so neither sink can hold them. The test
/// asserts the loss, so a Debezium that starts sending them shows up here.
#[tokio::test]
async fn debezium_leaves_out_the_other_geometric_types() {
    let stack = Stack::from_env();
    let table = unique("geometric");
    let src = source_pool(&stack).await;
    exec(
        &src,
        &[
            format!(
                "CREATE TABLE public.{table} (id int PRIMARY KEY, pt point, l line, ls lseg, \
                 b box, pa path, po polygon, c circle)"
            ),
            format!(
                "INSERT INTO public.{table} VALUES (1, '(1,2)', '{{1,-1,0}}', '[(0,0),(1,1)]', \
                 '((0,0),(1,1))', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(2,0))', '<(0,0),1>')"
            ),
        ],
    )
    .await;
    let capture = Capture::start(&stack, &table, &[&table]).await;
    let records = capture.read(&[1]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    let after = batches[0].rows.column_by_name("after").expect("after");
    let arrow_schema::DataType::Struct(fields) = after.data_type() else {
        panic!("after is a struct");
    };
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["id", "pt"], "what Debezium sends of the row");

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{table}")]).await;
}
