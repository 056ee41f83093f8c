//! Decimals travel as binary `numeric`: every shape arrives exact, whether the rows are copied
//! straight into the table (fresh keys) or upserted through the staging table (updates, and
//! a table whose column types differ from the wire's). Through real Debezium: decimals wider
//! than Arrow's 76 digits, and `numeric`'s NaN and infinities under `decimal.handling.mode=string`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Decimal128Builder, Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, Decimal256Array, Int64Array, StructArray};
use arrow_buffer::i256;
use arrow_schema::{DataType, Field, Fields};
use lakesink_schema_registry::ChangeBatch;

use crate::replica::hand::{Envelope, source_block};
use crate::replica::support::{replicator, rows};

/// Per row: id, a Decimal128(38, 10), a Decimal256(50, 5), a VariableScaleDecimal (unscaled
/// two's-complement bytes, scale) and a list of Decimal128(6, 2).
type Vals = (i64, i128, i128, (Vec<u8>, i32), Vec<Option<i128>>);

fn batch(topic: &str, table: &str, op: &str, first: i64, vals: &[Vals]) -> ChangeBatch {
    let n = vals.len();
    let vsd_fields: Fields = vec![
        Field::new("scale", DataType::Int32, false),
        Field::new("value", DataType::Binary, false),
    ]
    .into();
    let vsd_meta = HashMap::from([(
        "connect.name".to_owned(),
        "io.debezium.data.VariableScaleDecimal".to_owned(),
    )]);
    let item = Field::new("item", DataType::Decimal128(6, 2), true);
    let fields: Fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("d38", DataType::Decimal128(38, 10), true),
        Field::new("d50", DataType::Decimal256(50, 5), true),
        Field::new("v", DataType::Struct(vsd_fields.clone()), true).with_metadata(vsd_meta),
        Field::new("l", DataType::List(item.clone().into()), true),
    ]
    .into();
    let mut d38 = Decimal128Builder::new()
        .with_precision_and_scale(38, 10)
        .expect("decimal");
    let (mut scale, mut value) = (Int32Builder::new(), BinaryBuilder::new());
    let mut list = ListBuilder::new(
        Decimal128Builder::new()
            .with_precision_and_scale(6, 2)
            .expect("decimal"),
    )
    .with_field(item);
    for (_, a, _, (bytes, s), l) in vals {
        d38.append_value(*a);
        scale.append_value(*s);
        value.append_value(bytes);
        for x in l {
            list.values().append_option(*x);
        }
        list.append(true);
    }
    let d50: Decimal256Array = vals
        .iter()
        .map(|v| Some(i256::from_i128(v.2)))
        .collect::<Decimal256Array>()
        .with_precision_and_scale(50, 5)
        .expect("decimal256");
    let vsd = StructArray::new(
        vsd_fields,
        vec![Arc::new(scale.finish()), Arc::new(value.finish())],
        None,
    );
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(vals.iter().map(|v| v.0)));
    let after = StructArray::new(
        fields.clone(),
        vec![
            ids.clone(),
            Arc::new(d38.finish()),
            Arc::new(d50),
            Arc::new(vsd),
            Arc::new(list.finish()),
        ],
        None,
    );
    let key_fields: Fields = vec![Field::new("id", DataType::Int64, false)].into();
    Envelope {
        topic,
        partition: 0,
        offsets: (first..first + n as i64).collect(),
        ops: vec![op; n],
        tombstones: vec![false; n],
        key: StructArray::new(key_fields, vec![ids], None),
        before: StructArray::new_null(fields, n),
        after,
        source: source_block(table, n, None),
    }
    .batch()
}

fn vals() -> Vec<Vals> {
    let big = 10i128.pow(38) - 1; // 38 nines
    vec![
        (
            1,
            12_345,
            1,
            (vec![0x30, 0x39], 2),
            vec![Some(12_345), None],
        ),
        (
            2,
            -big,
            -(10i128.pow(30) + 7),
            (vec![0xcf, 0xc7], 7),
            vec![Some(-1), Some(0)],
        ),
        (3, 0, 0, (vec![], 0), vec![]),
        (4, big, 5, (vec![0x07], -3), vec![Some(99_999_999 / 100)]),
        (5, -1, -100_000, (vec![0x80], 0), vec![Some(1_000)]),
    ]
}

type Row = (i64, String, String, String, String);

/// What PostgreSQL should hold for `vals()`.
fn expected() -> Vec<Row> {
    let r = |id, a: &str, b: &str, v: &str, l: &str| {
        (id, a.to_owned(), b.to_owned(), v.to_owned(), l.to_owned())
    };
    let nines = "9".repeat(38);
    vec![
        r(1, "0.0000012345", "0.00001", "123.45", "{123.45,NULL}"),
        r(
            2,
            &format!("-{}.{}", &nines[..28], &nines[28..]),
            &format!("-1{}.00007", "0".repeat(25)),
            "-0.0012345",
            "{-0.01,0.00}",
        ),
        r(3, "0.0000000000", "0.00000", "0", "{}"),
        r(
            4,
            &format!("{}.{}", &nines[..28], &nines[28..]),
            "0.00005",
            "7000",
            "{9999.99}",
        ),
        r(5, "-0.0000000001", "-1.00000", "-128", "{10.00}"),
    ]
}

async fn read(r: &lakesink_writers::PgReplicator, schema: &str, table: &str) -> Vec<Row> {
    rows(
        r,
        &format!(
            "SELECT id, d38::text, d50::text, v::text, l::text FROM \"{schema}\".\"{table}\" ORDER BY id"
        ),
    )
    .await
}

#[tokio::test]
async fn decimals_of_every_shape_arrive_exact() {
    let (r, schema) = replicator(|_| {}).await;
    // A table lakesink creates: fresh rows are copied straight in.
    let topic = format!("{schema}.public.dec");
    r.apply("g", &[batch(&topic, "dec", "r", 0, &vals())])
        .await
        .expect("snapshot");
    assert_eq!(read(&r, &schema, "dec").await, expected());
    // Updates of the same values go through the staging table.
    r.apply("g", &[batch(&topic, "dec", "u", 10, &vals())])
        .await
        .expect("updates");
    assert_eq!(read(&r, &schema, "dec").await, expected());

    // A table made beforehand with other column types (text for the list): fresh rows take
    // the staging table and its casts.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".\"dec2\" (id bigint PRIMARY KEY, d38 numeric(38,10), \
         d50 numeric(50,5), v numeric, l text)"
    )))
    .execute(r.pool())
    .await
    .expect("create dec2");
    let topic2 = format!("{schema}.public.dec2");
    r.apply("g", &[batch(&topic2, "dec2", "r", 0, &vals())])
        .await
        .expect("snapshot into dec2");
    assert_eq!(read(&r, &schema, "dec2").await, expected());
}

/// Asserts that `table`'s columns `a` and `b` hold the same text in the source and the
/// replica, with the replica's types `types` (in the order of `a`, `b` by name).
async fn assert_same(
    src: &sqlx::PgPool,
    r: &lakesink_writers::PgReplicator,
    schema: &str,
    table: &str,
    (a, b): (&str, &str),
    types: [&str; 2],
) {
    let text = format!("SELECT id, {a}::text, {b}::text FROM public.{table} ORDER BY id");
    let want: Vec<(i32, Option<String>, Option<String>)> =
        sqlx::query_as(sqlx::AssertSqlSafe(text.clone()))
            .fetch_all(src)
            .await
            .expect("source rows");
    let got: Vec<(i32, Option<String>, Option<String>)> =
        rows(r, &text.replace("public.", &format!("\"{schema}\"."))).await;
    assert_eq!(want.len(), 5);
    assert_eq!(got, want, "the replica holds every value");
    let got: Vec<(String,)> = rows(
        r,
        &format!(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = \
             '\"{schema}\".{table}'::regclass AND attname IN ('{a}', '{b}') ORDER BY attname"
        ),
    )
    .await;
    let want: Vec<(String,)> = types.iter().map(|t| ((*t).to_owned(),)).collect();
    assert_eq!(got, want);
}

/// PostgreSQL's `numeric(p, s)` goes to p = 1000, past Arrow's widest decimal (76 digits):
/// through real Debezium such a column reaches the replica exact, with its own type, and the
/// raw layer as {scale, value} (the struct of a `VariableScaleDecimal`), which DuckDB and
/// pyarrow open.
#[tokio::test]
async fn decimals_wider_than_arrow_arrive_exact() {
    let stack = lakesink_tests::Stack::from_env();
    let name = lakesink_tests::unique("wide");
    let big = format!("{}.99", "9".repeat(998));
    let n77 = "9".repeat(77);
    let (src, capture, batches) = crate::replica::support::capture(
        &name,
        &[
            format!("CREATE TABLE public.{name} (id int PRIMARY KEY, n numeric(1000,2), n77 numeric(77,0))"),
            format!(
                "INSERT INTO public.{name} VALUES (1, {big}, {n77}), (2, -{big}, -{n77}), (3, 0, 0), \
                 (4, NULL, NULL)"
            ),
        ],
        &[
            format!("INSERT INTO public.{name} VALUES (5, 1.5, 1)"),
            format!("UPDATE public.{name} SET n = -0.01, n77 = 12345678901234567890 WHERE id = 3"),
        ],
        6,
        serde_json::json!({"column.propagate.source.type": ".*"}),
    )
    .await;
    let (r, schema) = replicator(|_| {}).await;
    r.apply("wide", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_same(
        &src,
        &r,
        &schema,
        &name,
        ("n", "n77"),
        ["numeric(1000,2)", "numeric(77,0)"],
    )
    .await;

    // The raw layer: readers open it, and the scale is the column's.
    let (dir, _) =
        crate::replica::extremes::write_raw(&batches, &capture.topics[0], "flattened").await;
    let files = crate::replica::extremes::parquet_files(&dir.0);
    let py = crate::replica::extremes::read(
        &stack,
        &[vec!["--physical".to_owned()], files.clone()].concat(),
    );
    let py_rows: Vec<&serde_json::Value> = py
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["n"].is_object())
        .collect();
    assert!(!py_rows.is_empty(), "{py}");
    assert!(py_rows.iter().all(|r| r["n"]["scale"] == "2"), "{py}");
    crate::replica::extremes::assert_duckdb_reads(&stack, &dir.0, "n", "scale", "2");

    capture.stop(&src).await;
    crate::replica::support::exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}

/// `numeric` `NaN` and `±Infinity`: Debezium's default `decimal.handling.mode=precise` sends
/// them as null (lost before Kafka); `string` sends `NAN`, `POSITIVE_INFINITY` and
/// `NEGATIVE_INFINITY`, which the replica, told the source type, writes into `numeric` columns
/// as PostgreSQL's own NaN and infinities.
#[tokio::test]
async fn numeric_specials_arrive_under_string_mode() {
    let name = lakesink_tests::unique("nspecial");
    let (src, capture, batches) = crate::replica::support::capture(
        &name,
        &[
            format!("CREATE TABLE public.{name} (id int PRIMARY KEY, n numeric, n2 numeric(10,2))"),
            format!(
                "INSERT INTO public.{name} VALUES (1, 'NaN', 'NaN'), (2, 'Infinity', 1.5), \
                 (3, '-Infinity', -2), (4, 12.50, NULL)"
            ),
        ],
        &[
            format!("INSERT INTO public.{name} VALUES (5, '-Infinity', 'NaN')"),
            format!("UPDATE public.{name} SET n = 'NaN', n2 = 3.25 WHERE id = 2"),
        ],
        6,
        serde_json::json!({"column.propagate.source.type": ".*", "decimal.handling.mode": "string"}),
    )
    .await;
    let (r, schema) = replicator(|_| {}).await;
    // Record by record, then all again: the staged path and the replay.
    crate::replica::support::apply_each_then_replay(&r, "nspecial", &batches).await;
    assert_same(
        &src,
        &r,
        &schema,
        &name,
        ("n", "n2"),
        ["numeric", "numeric(10,2)"],
    )
    .await;

    capture.stop(&src).await;
    crate::replica::support::exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}
