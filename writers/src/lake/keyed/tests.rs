use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::*;
use crate::lake::types::iceberg_schema;

fn image(ids: &[i64], vs: &[&str]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(vs.to_vec())),
        ],
    )
    .expect("image")
}

fn table() -> iceberg::spec::Schema {
    iceberg_schema(&image(&[], &[]).schema()).expect("schema")
}

/// The key column `id` as the table types it.
fn keys(table: &iceberg::spec::Schema, ids: Vec<i64>) -> RecordBatch {
    let key = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(ids))],
    )
    .expect("keys");
    conform(&key, table.as_struct()).expect("conform")
}

fn take(rows: &mut KeyedRows, t: &iceberg::spec::Schema, ops: &[&str], ids: &[i64], vs: &[&str]) {
    let n = ops.len();
    let ops: StringArray = ops.iter().map(|o| (!o.is_empty()).then_some(*o)).collect();
    let has_key = (0..n).map(|i| ops.value(i) != "t").collect();
    let has_image = (0..n)
        .map(|i| matches!(ops.value(i), "c" | "r" | "u"))
        .collect();
    rows.take(
        Incoming {
            ops: &ops,
            keys: Some(keys(t, ids.to_vec())),
            has_key,
            images: conform(&image(ids, vs), t.as_struct()).expect("conform"),
            has_image,
        },
        &|row| format!("offset {row}"),
    )
    .expect("take");
}

/// A table holding rows, their bounds unknown.
fn held() -> Older {
    Older {
        rows: true,
        ..Older::default()
    }
}

fn ids(b: &Option<RecordBatch>) -> Vec<i64> {
    b.as_ref().map_or_else(Vec::new, |b| {
        b.column_by_name("id")
            .expect("id")
            .as_primitive::<arrow_array::types::Int64Type>()
            .values()
            .to_vec()
    })
}

fn values(b: &Option<RecordBatch>) -> Vec<String> {
    b.as_ref().map_or_else(Vec::new, |b| {
        b.column_by_name("v")
            .expect("v")
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap_or("").to_owned())
            .collect()
    })
}

#[test]
fn the_last_change_of_each_key_wins_and_every_changed_key_is_deleted() {
    let t = table();
    let mut rows = KeyedRows::default();
    take(
        &mut rows,
        &t,
        &["r", "r", "u", "d"],
        &[1, 2, 1, 2],
        &["a", "b", "a2", "-"],
    );
    take(
        &mut rows,
        &t,
        &["c", "u", "d"],
        &[3, 1, 4],
        &["c", "a3", "-"],
    );
    let net = rows.seal(t.as_struct(), &held()).expect("seal");
    assert!(!net.truncate);
    assert_eq!(ids(&net.rows), [1, 3]);
    assert_eq!(values(&net.rows), ["a3", "c"]);
    assert_eq!(ids(&net.deletes), [1, 2, 3, 4]);
    // The files carry the table's field ids.
    let rows = net.rows.expect("rows");
    assert!(
        rows.schema().fields().iter().all(|f| f
            .metadata()
            .contains_key(parquet::arrow::PARQUET_FIELD_ID_META_KEY)),
        "{:?}",
        rows.schema()
    );
}

#[test]
fn a_truncate_or_an_empty_table_needs_no_delete_file() {
    let t = table();
    let mut rows = KeyedRows::default();
    take(&mut rows, &t, &["c", "t", "c"], &[1, 0, 2], &["a", "", "b"]);
    let net = rows.seal(t.as_struct(), &held()).expect("seal");
    assert!(net.truncate);
    assert_eq!(ids(&net.rows), [2]);
    assert!(net.deletes.is_none());
    let mut rows = KeyedRows::default();
    take(&mut rows, &t, &["r", "r"], &[1, 2], &["a", "b"]);
    let net = rows.seal(t.as_struct(), &Older::default()).expect("seal");
    assert_eq!(ids(&net.rows), [1, 2]);
    assert!(net.deletes.is_none());
}

#[test]
fn a_key_column_widened_mid_commit_keeps_its_keys() {
    let narrow = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, true)])),
        vec![Arc::new(Int32Array::from(vec![7]))],
    )
    .expect("narrow key");
    let narrow_table = iceberg_schema(&narrow.schema()).expect("schema");
    let mut rows = KeyedRows::default();
    let ops = StringArray::from(vec!["c"]);
    rows.take(
        Incoming {
            ops: &ops,
            keys: Some(conform(&narrow, narrow_table.as_struct()).expect("conform")),
            has_key: vec![true],
            images: conform(&narrow, narrow_table.as_struct()).expect("conform"),
            has_image: vec![true],
        },
        &|_| String::new(),
    )
    .expect("take");
    // The table's `id` is a long now (same field id); the key 7 is the same key.
    let t = table();
    take(&mut rows, &t, &["d"], &[7], &["-"]);
    let net = rows.seal(t.as_struct(), &held()).expect("seal");
    assert!(net.rows.is_none(), "the create was deleted");
    assert_eq!(ids(&net.deletes), [7]);
}

#[test]
fn a_toast_placeholder_or_a_missing_key_is_an_error_naming_the_record() {
    let t = table();
    let ops = StringArray::from(vec!["u"]);
    let mut rows = KeyedRows::default();
    let e = rows
        .take(
            Incoming {
                ops: &ops,
                keys: Some(keys(&t, vec![1])),
                has_key: vec![true],
                images: conform(&image(&[1], &[crate::postgres::PLACEHOLDER]), t.as_struct())
                    .expect("conform"),
                has_image: vec![true],
            },
            &|row| format!("topic t partition 0 offset {}", 40 + row),
        )
        .expect_err("placeholder refused");
    assert!(
        e.contains("offset 40") && e.contains("`v`") && e.contains("REPLICA IDENTITY FULL"),
        "{e}"
    );
    let e = rows
        .take(
            Incoming {
                ops: &ops,
                keys: None,
                has_key: vec![false],
                images: conform(&image(&[1], &["x"]), t.as_struct()).expect("conform"),
                has_image: vec![true],
            },
            &|row| format!("offset {row}"),
        )
        .expect_err("keyless refused");
    assert!(e.contains("no key") && e.contains("append"), "{e}");
    assert!(rows.is_empty(), "nothing was taken");
}

#[test]
fn memory_held_grows_with_each_batch_not_with_all_held_before() {
    let t = table();
    let mut rows = KeyedRows::default();
    let ids: Vec<i64> = (0..100).collect();
    let vs: Vec<&str> = ids.iter().map(|_| "v").collect();
    let ops: Vec<&str> = ids.iter().map(|_| "u").collect();
    take(&mut rows, &t, &ops, &ids, &vs);
    let one = rows.bytes();
    assert!(one > 0);
    for _ in 0..9 {
        take(&mut rows, &t, &ops, &ids, &vs);
    }
    assert_eq!(rows.bytes(), 10 * one, "each batch adds what it holds");
}

#[test]
fn keys_outside_every_older_file_s_bounds_get_no_delete() {
    let t = table();
    let mut rows = KeyedRows::default();
    // 5 and 7 within the table's ids [3, 9]; 1 below, 12 and 40 past them.
    take(
        &mut rows,
        &t,
        &["u", "c", "d", "c", "u"],
        &[5, 12, 7, 40, 1],
        &["a", "b", "-", "c", "d"],
    );
    let older = Older {
        rows: true,
        bounds: HashMap::from([(
            "id".to_owned(),
            (iceberg::spec::Datum::long(3), iceberg::spec::Datum::long(9)),
        )]),
    };
    let net = rows.seal(t.as_struct(), &older).expect("seal");
    assert_eq!(ids(&net.rows), [5, 12, 40, 1]);
    assert_eq!(ids(&net.deletes), [5, 7], "the keys an older row may hold");
    // Strings: byte order, bounds inclusive.
    let keys = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("code", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec!["b", "bz", "c", "a", "é"]))],
    )
    .expect("keys");
    let older = Older {
        rows: true,
        bounds: HashMap::from([(
            "code".to_owned(),
            (
                iceberg::spec::Datum::string("b"),
                iceberg::spec::Datum::string("c"),
            ),
        )]),
    };
    let may: Vec<bool> = older
        .may_hold(&keys)
        .iter()
        .map(|m| m == Some(true))
        .collect();
    assert_eq!(may, [true, true, true, false, false]);
    // A type the bounds do not compare with (a widened column's older int bounds) may hold.
    let older = Older {
        rows: true,
        bounds: HashMap::from([(
            "code".to_owned(),
            (iceberg::spec::Datum::int(1), iceberg::spec::Datum::int(2)),
        )]),
    };
    assert_eq!(older.may_hold(&keys).true_count(), 5);
}
