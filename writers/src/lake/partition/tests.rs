use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    Decimal128Array, Int32Array, Int64Array, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{Field, Schema as ArrowSchema};
use lakesink_config::PartitionField;

use super::super::types::{conform, iceberg_schema};
use super::*;

/// Rows as `conform` hands them over: field ids set, Iceberg's units.
fn rows() -> (Schema, RecordBatch) {
    let key = StructArray::from(vec![(
        Arc::new(Field::new("id", DataType::Int32, true)),
        Arc::new(Int32Array::from(vec![Some(34), Some(34), None, Some(34)])) as ArrayRef,
    )]);
    let fields = vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new("key", key.data_type().clone(), true),
        Field::new(
            "__timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Decimal128(10, 2), true),
    ];
    // 2017-11-16T22:31:08Z (day 17486), the same day, a null, the day before.
    let ts = 1_510_871_468_000_000i64;
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(fields)),
        vec![
            Arc::new(Int64Array::from(vec![0, 1, 2, 3])),
            Arc::new(key),
            Arc::new(
                TimestampMicrosecondArray::from(vec![
                    Some(ts),
                    Some(ts + 1),
                    None,
                    Some(ts - 86_400_000_000),
                ])
                .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["iceberg", "iceberg", "", "x"])),
            Arc::new(
                Decimal128Array::from(vec![1, 2, 3, 4])
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ],
    )
    .expect("batch");
    let schema = iceberg_schema(&batch.schema()).expect("schema");
    let batch = conform(&batch, schema.as_struct()).expect("conform");
    (schema, batch)
}

fn spec(schema: &Schema, entries: &[&str]) -> Result<PartitionSpec, String> {
    let fields: Vec<PartitionField> = entries
        .iter()
        .map(|e| PartitionField::parse(e).expect("parses"))
        .collect();
    unbound_spec(&fields, schema)?
        .bind(schema.clone())
        .map_err(|e| e.to_string())
}

fn offsets(b: &RecordBatch) -> Vec<i64> {
    b.column(0).as_primitive::<Int64Type>().values().to_vec()
}

#[test]
fn rows_split_by_day_and_key_bucket_with_the_spec_values() {
    let (schema, batch) = rows();
    let spec = spec(&schema, &["days(__timestamp)", "bucket(16, key.id)"]).expect("spec");
    let names: Vec<&str> = spec.fields().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["__timestamp_day", "key_id_bucket"]);
    let parts = Partitioner::new(&spec, &schema)
        .expect("partitioner")
        .split(&batch)
        .expect("split");
    // Iceberg's spec: bucket(34) hashes to 2017239379, and 2017239379 % 16 = 3.
    let got: Vec<(Struct, Vec<i64>)> = parts.iter().map(|(v, b)| (v.clone(), offsets(b))).collect();
    let value = |day: Option<i32>, bucket: Option<i32>| {
        Struct::from_iter([
            day.map(|d| Literal::Primitive(Datum::date(d).literal().clone())),
            bucket.map(|b| Literal::Primitive(Datum::int(b).literal().clone())),
        ])
    };
    assert_eq!(
        got,
        vec![
            (value(Some(17_486), Some(3)), vec![0, 1]),
            (value(None, None), vec![2]),
            (value(Some(17_485), Some(3)), vec![3]),
        ]
    );
}

#[test]
fn identity_and_truncate_of_a_string() {
    let (schema, batch) = rows();
    let spec = spec(&schema, &["name", "truncate(3, name)"]).expect("spec");
    let parts = Partitioner::new(&spec, &schema)
        .expect("partitioner")
        .split(&batch)
        .expect("split");
    let string = |s: &str| Some(Literal::Primitive(Datum::string(s).literal().clone()));
    let got: Vec<(Struct, Vec<i64>)> = parts.iter().map(|(v, b)| (v.clone(), offsets(b))).collect();
    assert_eq!(
        got,
        vec![
            (
                Struct::from_iter([string("iceberg"), string("ice")]),
                vec![0, 1]
            ),
            (Struct::from_iter([string(""), string("")]), vec![2]),
            (Struct::from_iter([string("x"), string("x")]), vec![3]),
        ]
    );
}

#[test]
fn an_unpartitioned_table_takes_the_batch_whole() {
    let (schema, batch) = rows();
    let spec = spec(&schema, &[]).expect("spec");
    let parts = Partitioner::new(&spec, &schema)
        .expect("partitioner")
        .split(&batch)
        .expect("split");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].0, Struct::empty());
    assert_eq!(parts[0].1.num_rows(), 4);
}

#[test]
fn entries_that_cannot_partition_the_table_say_why() {
    let (schema, _) = rows();
    for (entry, says) in [
        ("days(nope)", "no column `nope`"),
        ("days(name)", "does not apply"),
        ("bucket(4, price)", "does not partition by a decimal"),
        ("key", "not a primitive column"),
    ] {
        let e = spec(&schema, &[entry]).expect_err(entry);
        assert!(e.contains(says), "{entry}: {e}");
    }
}
