use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, Decimal128Array, Float32Array, Float64Array, Int32Array,
    Time64MicrosecondArray,
};
use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{Field, Schema as ArrowSchema};
use lakesink_config::Codec;

use super::*;
use crate::lake::types::{conform, iceberg_schema};

/// Columns of every bounded kind, in row groups of two rows.
fn file(columns: Vec<(&str, ArrayRef)>) -> (Schema, DataFile) {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let arrays: Vec<ArrayRef> = columns.into_iter().map(|(_, a)| a).collect();
    let batch = RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), arrays).expect("batch");
    let schema = iceberg_schema(&batch.schema()).expect("schema");
    let rows = conform(&batch, schema.as_struct()).expect("conform");
    let mut open = OpenFile::new(rows.schema(), properties(Codec::Snappy, 2)).expect("open");
    open.write(&rows).expect("write");
    let sealed = open.seal().expect("seal");
    assert!(sealed.metadata.num_row_groups() > 1);
    let entry = data_file(
        "s3://b/f.parquet".into(),
        &sealed,
        &schema,
        0,
        Struct::empty(),
    )
    .expect("data file");
    (schema, entry)
}

fn id(schema: &Schema, name: &str) -> i32 {
    schema.field_by_name(name).expect("field").id
}

#[test]
fn bounds_cover_every_value_of_every_row_group_and_nothing_is_bounded_wrongly() {
    let long = "m".repeat(15) + "zz"; // 17 characters: truncated to 16
    let (schema, f) = file(vec![
        (
            "s",
            Arc::new(StringArray::from(vec![
                Some("b"),
                Some("a"),
                Some(long.as_str()),
                None,
                None,
                None,
            ])),
        ),
        (
            "d",
            Arc::new(
                Decimal128Array::from(vec![Some(123), Some(-500), None, Some(99_999), None, None])
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ),
        (
            "f",
            Arc::new(Float64Array::from(vec![
                f64::NAN,
                1.5,
                0.0,
                -2.0,
                f64::NAN,
                f64::NAN,
            ])),
        ),
        (
            "zero",
            Arc::new(Float32Array::from(vec![0.0, 3.0, 1.0, 2.0, 0.5, 0.25])),
        ),
        (
            "i",
            Arc::new(Int32Array::from(vec![
                Some(4),
                None,
                Some(-7),
                None,
                None,
                None,
            ])),
        ),
    ]);
    let lo = |n: &str| f.lower_bounds().get(&id(&schema, n)).cloned();
    let hi = |n: &str| f.upper_bounds().get(&id(&schema, n)).cloned();
    assert_eq!(lo("s"), Some(Datum::string("a")));
    // 16 characters, the last incremented: above every value starting with them.
    assert_eq!(hi("s"), Some(Datum::string("m".repeat(15) + "{")));
    let dec = |v: i128| {
        Datum::try_from_bytes(
            &v.to_be_bytes(),
            PrimitiveType::Decimal {
                precision: 10,
                scale: 2,
            },
        )
    };
    assert_eq!(lo("d"), Some(dec(-500).expect("decimal")));
    assert_eq!(hi("d"), Some(dec(99_999).expect("decimal")));
    // NaN is left out; the row group of only NaN bounds nothing.
    assert_eq!(lo("f"), Some(Datum::double(-2.0)));
    assert_eq!(hi("f"), Some(Datum::double(1.5)));
    // A zero lower bound is -0.0, so `x = -0.0` keeps the file.
    let zero = lo("zero").expect("bound");
    assert_eq!(zero, Datum::float(-0.0));
    assert!(
        matches!(zero.literal(), iceberg::spec::PrimitiveLiteral::Float(v) if v.0.is_sign_negative())
    );
    assert_eq!(hi("zero"), Some(Datum::float(3.0)));
    assert_eq!(lo("i"), Some(Datum::int(-7)));
    assert_eq!(hi("i"), Some(Datum::int(4)));
}

#[test]
fn a_column_one_row_group_cannot_bound_has_no_bounds_in_the_file() {
    let midnight = 86_400_000_000; // PostgreSQL's time 24:00, past Iceberg's time
    let (schema, f) = file(vec![
        (
            "t",
            Arc::new(Time64MicrosecondArray::from(vec![1, 2, midnight, 3])),
        ),
        (
            "b",
            Arc::new(BinaryArray::from(vec![
                &b"\x01"[..],
                &b"\x02"[..],
                &[0xFF; 20][..],
                &b"\x03"[..],
            ])),
        ),
        ("u", Arc::new(Int32Array::from(vec![1, 2, 3, 4]))),
    ]);
    assert_eq!(
        schema.field_by_name("t").map(|f| f.field_type.to_string()),
        Some("time".to_owned())
    );
    for n in ["t", "b"] {
        assert!(!f.lower_bounds().contains_key(&id(&schema, n)), "{n}");
        assert!(!f.upper_bounds().contains_key(&id(&schema, n)), "{n}");
    }
    assert_eq!(
        f.upper_bounds().get(&id(&schema, "u")),
        Some(&Datum::int(4))
    );
}

#[test]
fn truncated_upper_bounds_increment_what_they_can() {
    assert_eq!(string_upper("short"), Some("short".into()));
    let max = char::MAX.to_string().repeat(17);
    assert_eq!(string_upper(&max), None);
    let mixed = format!("{}{}", "a".repeat(15), char::MAX.to_string().repeat(2));
    assert_eq!(string_upper(&mixed), Some(format!("{}b", "a".repeat(14))));
    let surrogate_edge = format!("{}\u{D7FF}x", "a".repeat(15));
    assert_eq!(
        string_upper(&surrogate_edge),
        Some(format!("{}\u{E000}", "a".repeat(15)))
    );
    assert_eq!(binary_upper(&[1, 2]), Some(vec![1, 2]));
    let mut bytes = vec![7u8; 15];
    bytes.extend([0xFF, 0xFF]);
    assert_eq!(
        binary_upper(&bytes),
        Some([vec![7u8; 14], vec![8]].concat())
    );
    assert_eq!(binary_upper(&[0xFF; 17]), None);
}
