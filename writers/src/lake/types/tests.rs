use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, Time64MicrosecondType, TimestampMicrosecondType};
use arrow_array::{
    Array, Date32Array, Decimal128Array, Decimal256Array, DurationMicrosecondArray, Int16Array,
    Int32Array, NullArray, RecordBatch, StringArray, StructArray, Time32MillisecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray,
};
use arrow_buffer::i256;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use iceberg::spec::{PrimitiveType, Type};

use super::*;

fn id_of(f: &Field) -> i32 {
    f.metadata()[FIELD_ID].parse().expect("field id")
}

/// Every Debezium semantic type lakesink decodes, at the edges of its range.
fn edge_batch() -> RecordBatch {
    let after = StructArray::from(vec![
        (
            Arc::new(Field::new("small", DataType::Int16, true)),
            Arc::new(Int16Array::from(vec![Some(i16::MIN), Some(i16::MAX), None])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("name", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec![Some(""), Some("a\u{0}b"), None])) as ArrayRef,
        ),
    ]);
    let fields = vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new("after", after.data_type().clone(), true),
        Field::new(
            "ts_ms",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        ),
        Field::new(
            "ts_ns",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
        Field::new("day", DataType::Date32, true),
        Field::new("t", DataType::Time32(TimeUnit::Millisecond), true),
        Field::new("span", DataType::Duration(TimeUnit::Microsecond), true),
        Field::new("price", DataType::Decimal128(10, 2), true),
        Field::new("huge", DataType::Decimal256(60, 3), true),
        Field::new("nothing", DataType::Null, true),
    ];
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        vec![
            Arc::new(arrow_array::Int64Array::from(vec![7, 8, 9])),
            Arc::new(after),
            Arc::new(TimestampMillisecondArray::from(vec![
                Some(-62_135_596_800_000 - 86_400_000), // 1 BC
                Some(9_000_000_000_000_000),            // year 287 '000 and more: the µs still fit
                None,
            ])),
            Arc::new(TimestampNanosecondArray::from(vec![
                Some(1_700_000_000_123_456_789),
                Some(i64::MIN),
                None,
            ])),
            Arc::new(Date32Array::from(vec![
                Some(-1_000_000),
                Some(i32::MAX),
                None,
            ])),
            Arc::new(Time32MillisecondArray::from(vec![
                Some(0),
                Some(86_400_000),
                None,
            ])),
            Arc::new(DurationMicrosecondArray::from(vec![
                Some(-3_020_399_000_000),
                Some(3_020_399_000_000),
                None,
            ])),
            Arc::new(
                Decimal128Array::from(vec![Some(12_345), Some(-1), None])
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
            Arc::new(
                Decimal256Array::from(vec![
                    Some(i256::from_i128(i128::MAX) * i256::from_i128(1000)),
                    None,
                    Some(i256::from_i128(-5)),
                ])
                .with_precision_and_scale(60, 3)
                .expect("decimal"),
            ),
            Arc::new(NullArray::new(3)),
        ],
    )
    .expect("batch")
}

#[test]
fn debezium_types_become_iceberg_types_and_stand_ins_say_so() {
    let schema = iceberg_schema(&edge_batch().schema()).expect("schema");
    let t = |name: &str| {
        schema
            .field_by_name(name)
            .expect(name)
            .field_type
            .as_ref()
            .clone()
    };
    let doc = |name: &str| schema.field_by_name(name).expect(name).doc.clone();
    assert_eq!(t("__offset"), Type::Primitive(PrimitiveType::Long));
    assert_eq!(t("ts_ms"), Type::Primitive(PrimitiveType::Timestamp));
    assert_eq!(t("ts_ns"), Type::Primitive(PrimitiveType::Long));
    assert!(doc("ts_ns").expect("doc").contains("nanoseconds"));
    assert_eq!(t("day"), Type::Primitive(PrimitiveType::Date));
    assert_eq!(t("t"), Type::Primitive(PrimitiveType::Time));
    assert_eq!(t("span"), Type::Primitive(PrimitiveType::Long));
    assert_eq!(
        t("price"),
        Type::Primitive(PrimitiveType::Decimal {
            precision: 10,
            scale: 2
        })
    );
    assert_eq!(t("huge"), Type::Primitive(PrimitiveType::String));
    assert!(doc("huge").expect("doc").contains("38 digits"));
    assert!(
        schema.field_by_name("nothing").is_none(),
        "a null column has no Iceberg type"
    );
    let Type::Struct(after) = t("after") else {
        panic!("after is a struct")
    };
    assert_eq!(
        after
            .field_by_name("small")
            .expect("small")
            .field_type
            .as_ref(),
        &Type::Primitive(PrimitiveType::Int)
    );
}

#[test]
fn rows_keep_every_value_under_the_tables_field_ids() {
    let batch = edge_batch();
    let schema = iceberg_schema(&batch.schema()).expect("schema");
    let out = conform(&batch, schema.as_struct()).expect("conform");
    assert_eq!(out.num_rows(), 3);
    assert!(out.schema().column_with_name("nothing").is_none());
    for f in out.schema().fields() {
        assert_eq!(
            Some(id_of(f)),
            schema.field_id_by_name(f.name()),
            "{}",
            f.name()
        );
    }
    let after = out.column_by_name("after").expect("after").as_struct();
    let small_field = &after.fields()[0];
    assert_eq!(
        Some(id_of(small_field)),
        schema.field_id_by_name("after.small")
    );
    assert_eq!(
        after
            .column(0)
            .as_primitive::<arrow_array::types::Int32Type>()
            .value(0),
        i32::from(i16::MIN)
    );
    assert_eq!(after.column(1).as_string::<i32>().value(1), "a\u{0}b");
    let ts = out
        .column_by_name("ts_ms")
        .expect("ts")
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.value(0), (-62_135_596_800_000 - 86_400_000) * 1000);
    assert_eq!(ts.value(1), 9_000_000_000_000_000_000);
    let ns = out
        .column_by_name("ts_ns")
        .expect("ns")
        .as_primitive::<Int64Type>();
    assert_eq!(
        (ns.value(0), ns.value(1)),
        (1_700_000_000_123_456_789, i64::MIN)
    );
    let time = out
        .column_by_name("t")
        .expect("t")
        .as_primitive::<Time64MicrosecondType>();
    assert_eq!(time.value(1), 86_400_000_000, "PostgreSQL's 24:00 is kept");
    let span = out
        .column_by_name("span")
        .expect("span")
        .as_primitive::<Int64Type>();
    assert_eq!(span.value(0), -3_020_399_000_000);
    let huge = out.column_by_name("huge").expect("huge").as_string::<i32>();
    assert_eq!(huge.value(0), "170141183460469231731687303715884105727.000");
    assert_eq!(huge.value(2), "-0.005");
    assert!(huge.is_null(1));
}

#[test]
fn a_value_the_column_cannot_hold_is_an_error_not_a_null() {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Millisecond, None),
        true,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(TimestampMillisecondArray::from(vec![i64::MAX]))],
    )
    .expect("batch");
    let table = iceberg_schema(&schema).expect("schema");
    let e = conform(&batch, table.as_struct()).expect_err("overflow");
    assert_eq!(e.column, "ts");
}

#[test]
fn new_columns_are_found_and_narrowing_or_retyping_is_refused() {
    let old = Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new(
            "after",
            DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true)])),
            true,
        ),
    ]);
    let table = iceberg_schema(&old).expect("schema");
    let new = Schema::new(vec![
        Field::new("id", DataType::Int16, true),
        Field::new(
            "after",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int32, true),
                Field::new("b", DataType::Utf8, true),
            ])),
            true,
        ),
        Field::new("extra", DataType::Date32, true),
    ]);
    let ev = evolution(&new, table.as_struct()).expect("evolution");
    assert!(ev.promote.is_empty());
    let names: Vec<_> = ev
        .add
        .iter()
        .map(|m| (m.parent.clone(), m.name.clone()))
        .collect();
    assert_eq!(
        names,
        vec![
            (Some("after".to_owned()), "b".to_owned()),
            (None, "extra".to_owned())
        ]
    );
    // int16 into an int column: as it is; text into it: refused, naming the column.
    let text = Schema::new(vec![Field::new("id", DataType::Utf8, true)]);
    let e = evolution(&text, table.as_struct()).expect_err("text into int");
    assert_eq!(e.column, "id");
    assert!(e.reason.contains("Iceberg cannot change"), "{}", e.reason);
}

#[test]
fn wider_records_promote_the_column_where_iceberg_allows_it_and_nowhere_else() {
    use PrimitiveType as P;
    let decimal = |p: u8, s: i8| DataType::Decimal128(p, s);
    let table = iceberg_schema(&Schema::new(vec![
        Field::new("i", DataType::Int32, true),
        Field::new("f", DataType::Float32, true),
        Field::new("d", decimal(10, 2), true),
        Field::new(
            "after",
            DataType::Struct(Fields::from(vec![Field::new("n", DataType::Int32, true)])),
            true,
        ),
        Field::new("l", DataType::Int64, true),
    ]))
    .expect("schema");
    let id = |name: &str| table.field_by_name(name).expect("field").id;
    let after_n = match table
        .field_by_name("after")
        .expect("after")
        .field_type
        .as_ref()
    {
        Type::Struct(s) => s.field_by_name("n").expect("n").id,
        _ => unreachable!(),
    };
    let wider = Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("d", decimal(20, 2), true),
        Field::new(
            "after",
            DataType::Struct(Fields::from(vec![Field::new("n", DataType::Int64, true)])),
            true,
        ),
        Field::new("l", DataType::Int64, true),
    ]);
    let ev = evolution(&wider, table.as_struct()).expect("evolution");
    assert!(ev.add.is_empty());
    let dec = |precision: u32, scale: u32| P::Decimal { precision, scale };
    assert_eq!(
        ev.promote,
        vec![
            Promote {
                path: "i".into(),
                id: id("i"),
                from: P::Int,
                to: P::Long
            },
            Promote {
                path: "f".into(),
                id: id("f"),
                from: P::Float,
                to: P::Double
            },
            Promote {
                path: "d".into(),
                id: id("d"),
                from: dec(10, 2),
                to: dec(20, 2)
            },
            Promote {
                path: "after.n".into(),
                id: after_n,
                from: P::Int,
                to: P::Long
            },
        ]
    );
    // What Iceberg cannot express: another scale, long to int's opposite kinds, int to double.
    for (name, t) in [
        ("d", decimal(20, 3)),
        ("i", DataType::Float64),
        ("l", DataType::Utf8),
        ("d", decimal(8, 2)),
    ] {
        let s = Schema::new(vec![Field::new(name, t.clone(), true)]);
        match evolution(&s, table.as_struct()) {
            Err(e) => assert_eq!(e.column, name, "{t}"),
            Ok(ev) if matches!(t, DataType::Decimal128(8, 2)) => {
                // A narrower decimal goes into the wider column as it is.
                assert!(ev.is_empty(), "{t}");
            }
            Ok(ev) => panic!("{name} as {t}: {ev:?}"),
        }
    }
}

#[test]
fn an_older_schema_version_writes_into_the_wider_table() {
    let table = iceberg_schema(&Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("gone", DataType::Utf8, true),
    ]))
    .expect("schema");
    let old = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, true)])),
        vec![Arc::new(Int32Array::from(vec![1, -2]))],
    )
    .expect("batch");
    let out = conform(&old, table.as_struct()).expect("conform");
    assert_eq!(out.schema().field(0).data_type(), &DataType::Int64);
    assert_eq!(
        out.column(0).as_primitive::<Int64Type>().values().as_ref(),
        &[1, -2]
    );
}
