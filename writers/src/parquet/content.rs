//! What a raw-layer row holds: the whole change event with its Kafka coordinates, or the row
//! image flattened for analytics.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Schema};
use lakesink_config::Content;
use lakesink_schema_registry::{ChangeBatch, ValueShape};

use super::partitioner::lookup;

/// The rows to write for `batch`, in the batch's row order.
pub fn shape(batch: &ChangeBatch, content: Content) -> Result<RecordBatch, String> {
    let rows = &batch.rows;
    let n = rows.num_rows();
    let mut fields: Vec<Field> = vec![
        Field::new("__topic", DataType::Utf8, false),
        Field::new("__partition", DataType::Int32, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            &*batch.topic,
            n,
        ))),
        Arc::new(Int32Array::from_value(batch.partition, n)),
    ];
    let mut push = |fields: &mut Vec<Field>, name: &str| -> Result<(), String> {
        let (i, f) = rows
            .schema()
            .column_with_name(name)
            .map(|(i, f)| (i, f.clone()))
            .ok_or_else(|| format!("the change batch has no column {name}"))?;
        fields.push(f);
        columns.push(rows.column(i).clone());
        Ok(())
    };
    match content {
        Content::Envelope => {
            for f in rows.schema().fields() {
                push(&mut fields, f.name())?;
            }
        }
        Content::Flattened => {
            push(&mut fields, "__offset")?;
            push(&mut fields, "__timestamp")?;
            if rows.schema().column_with_name(HEADERS).is_some() {
                push(&mut fields, HEADERS)?;
            }
            let image: Option<ArrayRef> = match batch.shape {
                ValueShape::Envelope => {
                    let after = rows.column_by_name("after");
                    let before = rows.column_by_name("before");
                    match (after, before) {
                        (Some(after), Some(before)) => Some(row_image(after, before)?),
                        (Some(after), None) => Some(after.clone()),
                        _ => None,
                    }
                }
                ValueShape::Flattened => rows.column_by_name("after").cloned(),
                ValueShape::KeyOnly => rows.column_by_name("key").cloned(),
                ValueShape::NonData(_) => rows.column_by_name("value").cloned(),
            };
            let mut names: Vec<String> = Vec::new();
            if let Some(image) = &image
                && let Some(image) = image.as_struct_opt()
            {
                for (field, child) in image.fields().iter().zip(image.columns()) {
                    fields.push(field.as_ref().clone().with_nullable(true));
                    columns.push(with_parent_nulls(child, image)?);
                    names.push(field.name().clone());
                }
            }
            let op = rows
                .column_by_name("__op")
                .ok_or("the change batch has no __op")?;
            if !names.iter().any(|n| n == "__op") {
                fields.push(Field::new("__op", op.data_type().clone(), true));
                columns.push(op.clone());
            }
            if !names.iter().any(|n| n == "__deleted") {
                let op = op.as_string_opt::<i32>().ok_or("__op is not text")?;
                let deleted: BooleanArray = op.iter().map(|o| Some(o == Some("d"))).collect();
                fields.push(Field::new("__deleted", DataType::Boolean, true));
                columns.push(Arc::new(deleted));
            }
            if !names.iter().any(|n| n == "__source_ts_ms")
                && let Some(ts) = lookup(rows, &["source".into(), "ts_ms".into()])
            {
                fields.push(Field::new("__source_ts_ms", ts.data_type().clone(), true));
                columns.push(ts);
            }
        }
    }
    let (fields, columns) = without_empty_structs(fields, columns)?;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}

/// Parquet cannot hold a struct of no fields (a keyless table's `key`, a record Debezium
/// declares with none): such columns, at any depth, carry nothing but their nulls and are left
/// out. Replay gives a missing `key` back as the keyless table's null key.
fn without_empty_structs(
    fields: Vec<Field>,
    columns: Vec<ArrayRef>,
) -> Result<(Vec<Field>, Vec<ArrayRef>), String> {
    if !fields.iter().any(|f| holds_empty_struct(f.data_type())) {
        return Ok((fields, columns));
    }
    let mut kept = (Vec::new(), Vec::new());
    for (f, c) in fields.into_iter().zip(columns) {
        if let Some((f, c)) = strip(f, c)? {
            kept.0.push(f);
            kept.1.push(c);
        }
    }
    Ok(kept)
}

fn holds_empty_struct(t: &DataType) -> bool {
    match t {
        DataType::Struct(children) => {
            children.is_empty() || children.iter().any(|c| holds_empty_struct(c.data_type()))
        }
        _ => false,
    }
}

/// `field` without its empty structs, or `None` when nothing is left of it.
fn strip(field: Field, column: ArrayRef) -> Result<Option<(Field, ArrayRef)>, String> {
    if !holds_empty_struct(field.data_type()) {
        return Ok(Some((field, column)));
    }
    let s = column.as_struct();
    let (mut names, mut kept) = (Vec::new(), Vec::new());
    for (f, c) in s.fields().iter().zip(s.columns()) {
        if let Some((f, c)) = strip(f.as_ref().clone(), c.clone())? {
            names.push(f);
            kept.push(c);
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    let array = StructArray::try_new(names.clone().into(), kept, s.nulls().cloned())
        .map_err(|e| e.to_string())?;
    let field = Field::new(
        field.name(),
        DataType::Struct(names.into()),
        field.is_nullable(),
    )
    .with_metadata(field.metadata().clone());
    Ok(Some((field, Arc::new(array))))
}

/// The rows of `batch` as a batch of key-only rows (tombstones) would be shaped: its
/// coordinates and key, without the value's columns. `None` for a batch that is key-only (or
/// not rows) already.
pub fn tombstones_alone(
    batch: &ChangeBatch,
    content: Content,
) -> Result<Option<RecordBatch>, String> {
    if matches!(batch.shape, ValueShape::KeyOnly | ValueShape::NonData(_)) {
        return Ok(None);
    }
    // The columns, in their order, of the batch the decoder makes of tombstones alone.
    let schema = batch.rows.schema();
    let keep: Vec<usize> = [
        "__offset",
        "__timestamp",
        "__op",
        "__tombstone",
        "key",
        HEADERS,
    ]
    .iter()
    .filter_map(|c| schema.index_of(c).ok())
    .collect();
    let rows = batch.rows.project(&keep).map_err(|e| e.to_string())?;
    let key_only = ChangeBatch {
        shape: ValueShape::KeyOnly,
        value_schema: None,
        rows,
        ..batch.clone()
    };
    shape(&key_only, content).map(Some)
}

/// The rows of `batch` shaped as the raw layer writes them, in one batch or two: the records
/// with a value, and the tombstones among them shaped as key-only rows (in `flattened`
/// content, the key's fields in the row's columns).
pub fn shape_apart(batch: &ChangeBatch, content: Content) -> Result<Vec<RecordBatch>, String> {
    let shaped = shape(batch, content)?;
    let tombstones = batch
        .rows
        .column_by_name("__tombstone")
        .and_then(|c| c.as_boolean_opt());
    let Some(tombstones) = tombstones.filter(|t| t.true_count() > 0) else {
        return Ok(vec![shaped]);
    };
    let Some(apart) = tombstones_alone(batch, content)? else {
        return Ok(vec![shaped]);
    };
    // A null counts as not a tombstone (`prep_null_mask_filter` panics on no nulls).
    let is = match tombstones.nulls() {
        Some(n) => tombstones.values() & n.inner(),
        None => tombstones.values().clone(),
    };
    let not = BooleanArray::new(!&is, None);
    let is = BooleanArray::new(is, None);
    let mut out = Vec::new();
    if not.true_count() > 0 {
        out.push(
            arrow_select::filter::filter_record_batch(&shaped, &not).map_err(|e| e.to_string())?,
        );
    }
    out.push(arrow_select::filter::filter_record_batch(&apart, &is).map_err(|e| e.to_string())?);
    Ok(out)
}

/// The column of Kafka record headers, when the pipeline adds it.
pub const HEADERS: &str = "__headers";

/// `after` where it is set, else `before` (deletes).
fn row_image(after: &ArrayRef, before: &ArrayRef) -> Result<ArrayRef, String> {
    if after.null_count() == 0 || after.data_type() != before.data_type() {
        return Ok(after.clone());
    }
    let has_after: BooleanArray = (0..after.len()).map(|i| Some(after.is_valid(i))).collect();
    arrow_select::zip::zip(&has_after, after, before).map_err(|e| e.to_string())
}

fn with_parent_nulls(child: &ArrayRef, parent: &StructArray) -> Result<ArrayRef, String> {
    let Some(nulls) = parent.nulls() else {
        return Ok(child.clone());
    };
    let combined = arrow_buffer::NullBuffer::union(Some(nulls), child.nulls());
    let data = child
        .to_data()
        .into_builder()
        .nulls(combined)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(arrow_array::make_array(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, TimestampMillisecondArray};
    use arrow_schema::Fields;

    fn image(ids: Vec<Option<i64>>, valid: Vec<bool>) -> StructArray {
        let fields = Fields::from(vec![Field::new("id", DataType::Int64, true)]);
        StructArray::new(
            fields,
            vec![Arc::new(Int64Array::from(ids))],
            Some(valid.into()),
        )
    }

    fn envelope() -> ChangeBatch {
        let after = image(vec![Some(1), Some(0), None], vec![true, false, false]);
        let before = image(vec![None, Some(2), None], vec![false, true, false]);
        let t = after.data_type().clone();
        let schema = Schema::new(vec![
            Field::new("__offset", DataType::Int64, false),
            Field::new(
                "__timestamp",
                DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("UTC".into())),
                true,
            ),
            Field::new("__op", DataType::Utf8, false),
            Field::new("__tombstone", DataType::Boolean, false),
            Field::new("before", t.clone(), true),
            Field::new("after", t, true),
        ]);
        let rows = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![10, 11, 12])),
                Arc::new(TimestampMillisecondArray::from(vec![1, 2, 3]).with_timezone("UTC")),
                Arc::new(StringArray::from(vec!["c", "d", "d"])),
                Arc::new(BooleanArray::from(vec![false, false, true])),
                Arc::new(before),
                Arc::new(after),
            ],
        )
        .expect("rows");
        ChangeBatch {
            topic: Arc::from("t"),
            partition: 3,
            first_offset: 10,
            last_offset: 12,
            key_schema: None,
            value_schema: None,
            shape: ValueShape::Envelope,
            rows,
        }
    }

    #[test]
    fn envelope_keeps_everything_and_adds_coordinates() {
        let out = shape(&envelope(), Content::Envelope).expect("shape");
        let schema = out.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "__topic",
                "__partition",
                "__offset",
                "__timestamp",
                "__op",
                "__tombstone",
                "before",
                "after"
            ]
        );
        assert_eq!(
            out.column(1)
                .as_primitive::<arrow_array::types::Int32Type>()
                .value(2),
            3
        );
    }

    #[test]
    fn structs_of_no_fields_are_left_out() {
        let mut batch = envelope();
        let (schema, mut columns, _) = batch.rows.clone().into_parts();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        let empty = StructArray::new_null(Default::default(), 3);
        let nested = StructArray::new(
            vec![
                Field::new("none", empty.data_type().clone(), true),
                Field::new("id", DataType::Int64, true),
            ]
            .into(),
            vec![
                Arc::new(empty.clone()),
                Arc::new(Int64Array::from(vec![1, 2, 3])),
            ],
            None,
        );
        fields.insert(4, Field::new("key", empty.data_type().clone(), true));
        columns.insert(4, Arc::new(empty));
        fields.push(Field::new("nested", nested.data_type().clone(), true));
        columns.push(Arc::new(nested));
        batch.rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let out = shape(&batch, Content::Envelope).expect("shape");
        let schema = out.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "__topic",
                "__partition",
                "__offset",
                "__timestamp",
                "__op",
                "__tombstone",
                "before",
                "after",
                "nested"
            ]
        );
        let nested = out.column(8).as_struct();
        assert_eq!(nested.num_columns(), 1);
        assert_eq!(nested.fields()[0].name(), "id");
        let mut file = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut file, out.schema(), None).unwrap();
        w.write(&out).unwrap();
        w.close().unwrap();
    }

    #[test]
    fn flattened_takes_before_for_deletes() {
        let out = shape(&envelope(), Content::Flattened).expect("shape");
        let schema = out.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "__topic",
                "__partition",
                "__offset",
                "__timestamp",
                "id",
                "__op",
                "__deleted"
            ]
        );
        let id = out
            .column(4)
            .as_primitive::<arrow_array::types::Int64Type>();
        assert_eq!(id.iter().collect::<Vec<_>>(), vec![Some(1), Some(2), None]);
        let deleted = out.column(6).as_boolean();
        assert_eq!(
            deleted.iter().collect::<Vec<_>>(),
            vec![Some(false), Some(true), Some(true)]
        );
    }
}
