//! History tables: every change of a table as a row of its own, keyed by its Kafka
//! coordinates. They are built as change batches of their own (one per source batch, its
//! history rows only) and planned and applied by the mirror's code: each row is an insert of
//! the key (topic, partition, offset), so a replay inserts nothing twice, and the columns,
//! types, defaults and schema evolution are the mirror's.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, make_array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use lakesink_schema_registry::{ChangeBatch, ValueShape};

use super::error::ReplicaError;
use super::naming::{NameSource, TableName};
use super::plan::{Rules, View, bad_batch};
use super::types::SOURCE_NAME;

/// The columns every history table starts with; the first three are its key.
pub(crate) const TOPIC: &str = "__topic";
pub(crate) const PARTITION: &str = "__partition";
pub(crate) const OFFSET: &str = "__offset";
const OP: &str = "__op";
const SOURCE_TS: &str = "__source_ts";
const KAFKA_TS: &str = "__kafka_ts";
const POSITION: &str = "__source_position";

/// The history batches of `batches`: for each, its changes (`c`, `r`, `u`, `d`, `t`; not
/// tombstones or messages) of tables whose mode keeps a history (`rules` are the mirror's).
pub(crate) fn batches(
    rules: &Rules,
    batches: &[ChangeBatch],
) -> Result<Vec<ChangeBatch>, ReplicaError> {
    let mut modes: HashMap<TableName, bool> = HashMap::new();
    let mut out = Vec::new();
    for b in batches {
        let bad = |reason: String| bad_batch(b, reason);
        let v = View::new(b).map_err(bad)?;
        let mut kept = Vec::with_capacity(b.rows.num_rows());
        let mut fixed: Option<bool> = None;
        for row in 0..b.rows.num_rows() {
            let op = if v.ops.is_valid(row) {
                v.ops.value(row)
            } else {
                ""
            };
            if v.tombstones.value(row) || !matches!(op, "c" | "r" | "u" | "d" | "t") {
                kept.push(false);
                continue;
            }
            let keeps = match fixed {
                Some(k) => k,
                None => {
                    let src = NameSource {
                        topic: &b.topic,
                        db: v.source_field("db", row),
                        schema: v.source_field("schema", row),
                        table: v.source_field("table", row),
                    };
                    // A name that cannot be made is the mirror plan's error to report.
                    let Ok(name) = rules.template.render(src) else {
                        kept.push(false);
                        continue;
                    };
                    let keeps = *modes.entry(name.clone()).or_insert_with(|| {
                        rules
                            .tables
                            .table_mode(&format!("{}.{}", name.schema, name.table))
                            .history()
                    });
                    if !rules.template.uses_source() {
                        fixed = Some(keeps);
                    }
                    keeps
                }
            };
            kept.push(keeps);
        }
        if !kept.iter().any(|k| *k) {
            continue;
        }
        let rows = history_rows(&v, b).map_err(bad)?;
        let rows = arrow_select::filter::filter_record_batch(&rows, &BooleanArray::from(kept))
            .map_err(|e| bad(format!("history rows: {e}")))?;
        out.push(ChangeBatch {
            topic: b.topic.clone(),
            partition: b.partition,
            first_offset: b.first_offset,
            last_offset: b.last_offset,
            key_schema: None,
            value_schema: None,
            shape: b.shape,
            rows,
        });
    }
    Ok(out)
}

/// A field the planner takes as a column of that name, in any shape.
fn column(name: &str, data_type: DataType) -> Field {
    let params = serde_json::json!({ SOURCE_NAME: name }).to_string();
    Field::new(name, data_type, true)
        .with_metadata(HashMap::from([("connect.parameters".to_owned(), params)]))
}

/// Every row of `b` as a history row (filtered by the caller): `__op` = `c` for the planner,
/// and in `after` the coordinates, the real operation, the times, the source position and the
/// row image (the after image, or for a delete the before image).
fn history_rows(v: &View<'_>, b: &ChangeBatch) -> Result<RecordBatch, String> {
    let n = b.rows.num_rows();
    let col = |name: &str| {
        b.rows
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| format!("batch without a {name} column"))
    };
    let mut fields: Vec<Field> = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let mut push = |f: Field, a: ArrayRef| {
        fields.push(f);
        arrays.push(a);
    };
    push(
        column(TOPIC, DataType::Utf8),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            &*b.topic, n,
        ))),
    );
    push(
        column(PARTITION, DataType::Int32),
        Arc::new(Int32Array::from_value(b.partition, n)),
    );
    push(column(OFFSET, DataType::Int64), col("__offset")?);
    push(column(OP, DataType::Utf8), col("__op")?);
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let source_ts: TimestampMicrosecondArray = (0..n)
        .map(|r| {
            v.source_int("ts_us", r)
                .or_else(|| v.source_int("ts_ms", r).and_then(|ms| ms.checked_mul(1000)))
        })
        .collect::<TimestampMicrosecondArray>()
        .with_timezone("UTC");
    push(column(SOURCE_TS, utc), Arc::new(source_ts));
    let kafka_ts: ArrayRef = match b.rows.column_by_name("__timestamp") {
        Some(t)
            if t.as_primitive_opt::<arrow_array::types::TimestampMillisecondType>()
                .is_some() =>
        {
            t.clone()
        }
        _ => Arc::new(TimestampMillisecondArray::new_null(n).with_timezone("UTC")),
    };
    push(column(KAFKA_TS, kafka_ts.data_type().clone()), kafka_ts);
    let position: StringArray = (0..n).map(|r| v.position(r)).collect();
    push(column(POSITION, DataType::Utf8), Arc::new(position));

    let meta = [TOPIC, PARTITION, OFFSET, OP, SOURCE_TS, KAFKA_TS, POSITION];
    if let Some(image) = image(v, n)? {
        let (image_fields, children, parent) = image.into_parts();
        for (f, child) in image_fields.iter().zip(children) {
            // A flattened record's own `__op` and the like are metadata, not columns: they
            // give way to the history's.
            if meta.contains(&f.name().as_str()) {
                continue;
            }
            let nulls = NullBuffer::union(child.nulls(), parent.as_ref());
            let data = child
                .to_data()
                .into_builder()
                .nulls(nulls)
                .build()
                .map_err(|e| format!("history image column `{}`: {e}", f.name()))?;
            push(f.as_ref().clone().with_nullable(true), make_array(data));
        }
    }
    let after = StructArray::try_new(Fields::from(fields), arrays, None)
        .map_err(|e| format!("history rows: {e}"))?;
    let mut columns: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("__offset", DataType::Int64, false),
            col("__offset")?,
        ),
        (
            Field::new("__op", DataType::Utf8, false),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n("c", n))),
        ),
        (
            Field::new("__tombstone", DataType::Boolean, false),
            Arc::new(BooleanArray::from(vec![false; n])),
        ),
        (
            Field::new("after", after.data_type().clone(), true),
            Arc::new(after),
        ),
    ];
    // The source block names the table and says which connector wrote it.
    if let (ValueShape::Envelope, Some(i)) = (b.shape, b.rows.schema().index_of("source").ok()) {
        let f = b.rows.schema().field(i).clone();
        columns.push((f, b.rows.column(i).clone()));
    }
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| format!("history rows: {e}"))
}

/// The row image of each row: the after image, a delete's before image (an envelope's); `None`
/// when the batch has neither (truncates alone).
fn image(v: &View<'_>, n: usize) -> Result<Option<StructArray>, String> {
    let (after, before) = match (v.after, v.before) {
        (Some(a), Some(b)) if v.shape() == ValueShape::Envelope => (a, b),
        (Some(a), _) => return Ok(Some(a.clone())),
        (None, Some(b)) => return Ok(Some(b.clone())),
        (None, None) => return Ok(None),
    };
    let deletes: BooleanArray = (0..n)
        .map(|r| Some(v.ops.is_valid(r) && v.ops.value(r) == "d"))
        .collect();
    let zipped = arrow_select::zip::zip(&deletes, before, after)
        .map_err(|e| format!("history image: {e}"))?;
    Ok(Some(zipped.as_struct().clone()))
}
