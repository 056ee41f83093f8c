//! Kafka records of Debezium topics into the change model: one Arrow batch per (topic,
//! partition, key schema, value schema), rows in offset order.
//!
//! Every batch has `__offset`, `__timestamp` (the Kafka record's, ms), `__op` (`c r u d t m`;
//! a tombstone is `d`), `__tombstone` and `key` (the key record, null for keyless tables), then
//! the value's own columns: for a Debezium envelope `before`, `after`, `source`, `op`, `ts_ms`
//! and the rest as the writer schema has them; for a record flattened by ExtractNewRecordState,
//! `after` holding the flattened record. A tombstone joins the open batch of its partition with
//! nulls in the value columns, so delete + tombstone pairs never split batches.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StructArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::avro::AvroBatchDecoder;
use crate::framing::{IdKind, SchemaRef};
use crate::non_data::{NON_DATA_METADATA, NonData};

mod decoder;
mod error;

use decoder::Split;
pub use decoder::{CacheStats, ChangeDecoder};
pub use error::{ChangeError, ChangeErrorKind, Mismatch};

/// One Kafka record, as plain values.
#[derive(Clone, Copy)]
pub struct KafkaRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch, when the record has a timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header lookup by name, last value wins.
    pub headers: &'a dyn Fn(&str) -> Option<&'a [u8]>,
}

/// What the value of a batch's records is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueShape {
    /// Debezium's envelope: before, after, source, op, ts_ms.
    Envelope,
    /// A record flattened by ExtractNewRecordState (the row itself, maybe with `__op`,
    /// `__deleted`, `__source_ts_ms`).
    Flattened,
    /// Only tombstones so far: no value schema.
    KeyOnly,
    /// Records that are not rows, kept by their [`Route::Keep`](crate::Route::Keep): the whole
    /// value is one `value` column.
    NonData(NonData),
}

/// Decoded rows of one (topic, partition, key schema, value schema), in offset order.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub key_schema: Option<SchemaRef>,
    pub value_schema: Option<SchemaRef>,
    pub shape: ValueShape,
    pub rows: RecordBatch,
}

/// What one record led to.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Batches closed by this record (a schema change, or a full batch).
    pub completed: Vec<ChangeBatch>,
    /// Set when the record was not a row: skipped, or kept by its route.
    pub non_data: Option<NonData>,
}

/// How the records' keys and values are encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    /// Avro with a schema registry (Apicurio or Confluent framing); `payload_ids` says what an
    /// id framed in the payload is. With `check_artifacts`, each id's schema must be one the
    /// registry holds for the record's topic (off for producers naming artifacts some other
    /// way than Debezium's converters can).
    Avro {
        payload_ids: IdKind,
        check_artifacts: bool,
    },
    /// Kafka Connect's JsonConverter with `schemas.enable=true`.
    ConnectJson,
    /// JsonConverter with `schemas.enable=false`: bare JSON values, typed by the Connect schema
    /// given for values (keys are always inferred), or inferred from each record.
    PlainJson {
        value_schema: Option<Arc<serde_json::Value>>,
    },
}

/// The batch being filled for one partition.
struct Open {
    first_offset: i64,
    last_offset: i64,
    key_schema: Option<SchemaRef>,
    value_schema: Option<SchemaRef>,
    shape: ValueShape,
    keys: Option<AvroBatchDecoder>,
    values: Option<AvroBatchDecoder>,
    offsets: Int64Builder,
    timestamps: TimestampMillisecondBuilder,
    tombstones: BooleanBuilder,
    /// Per row, the row of the key / value decoders it uses, or None.
    key_rows: Vec<Option<u32>>,
    value_rows: Vec<Option<u32>>,
}

/// Pushes one side's datum into its decoder: the row it landed in, None when the side is absent.
fn append(
    side: Option<&Split<'_>>,
    decoder: Option<&mut AvroBatchDecoder>,
) -> Result<Option<u32>, ChangeErrorKind> {
    match (side, decoder) {
        (Some(f), Some(d)) => {
            let row = d.rows() as u32;
            d.push(&f.datum)?;
            Ok(Some(row))
        }
        // Batches split on schema changes, so this cannot happen; refuse rather than misalign.
        (Some(_), None) => Err(ChangeErrorKind::Model(
            "a record side the open batch has no decoder for".into(),
        )),
        (None, _) => Ok(None),
    }
}

/// The rows of `decoded` picked by `rows` (None: a null row); as is when it is the identity.
fn pick(decoded: &RecordBatch, rows: &[Option<u32>]) -> Result<Vec<ArrayRef>, ChangeErrorKind> {
    let identity = rows.len() == decoded.num_rows()
        && rows.iter().enumerate().all(|(i, r)| *r == Some(i as u32));
    if identity {
        return Ok(decoded.columns().to_vec());
    }
    let indices = UInt32Array::from(rows.to_vec());
    decoded
        .columns()
        .iter()
        .map(|c| {
            arrow_select::take::take(c, &indices, None)
                .map_err(|e| ChangeErrorKind::Model(e.to_string()))
        })
        .collect()
}

/// The open batch as a [`ChangeBatch`]; None when every record pushed into it failed.
fn finish(part: &(Arc<str>, i32), open: &mut Open) -> Result<Option<ChangeBatch>, ChangeErrorKind> {
    let model = |e: arrow_schema::ArrowError| ChangeErrorKind::Model(e.to_string());
    let n = open.offsets.len();
    if n == 0 {
        return Ok(None);
    }
    let mut fields = vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new(
            "__timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("__op", DataType::Utf8, false),
        Field::new("__tombstone", DataType::Boolean, false),
    ];
    let tombstones = open.tombstones.finish();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(open.offsets.finish()),
        Arc::new(open.timestamps.finish()),
        Arc::new(StringBuilder::new().finish()), // replaced below, once the value is known
        Arc::new(tombstones.clone()),
    ];
    // The key record as one struct column; null for keyless rows.
    let key_batch = open
        .keys
        .as_mut()
        .map(AvroBatchDecoder::flush)
        .transpose()?
        .flatten();
    match key_batch {
        Some(keys) => {
            let picked = pick(&keys, &open.key_rows)?;
            let nulls = open
                .key_rows
                .iter()
                .map(Option::is_some)
                .collect::<Vec<_>>();
            let key =
                StructArray::try_new(keys.schema().fields().clone(), picked, Some(nulls.into()))
                    .map_err(model)?;
            fields.push(Field::new("key", key.data_type().clone(), true));
            columns.push(Arc::new(key));
        }
        None => {
            fields.push(Field::new(
                "key",
                DataType::Struct(Default::default()),
                true,
            ));
            columns.push(Arc::new(StructArray::new_null(Default::default(), n)));
        }
    }
    let value_batch = open
        .values
        .as_mut()
        .map(AvroBatchDecoder::flush)
        .transpose()?
        .flatten();
    let mut ops: Vec<Option<String>> = vec![None; n];
    if let Some(values) = value_batch {
        let picked = pick(&values, &open.value_rows)?;
        match open.shape {
            ValueShape::Envelope => {
                for (f, c) in values.schema().fields().iter().zip(picked) {
                    if f.name() == "op" {
                        let op = c.as_string_opt::<i32>().ok_or_else(|| {
                            ChangeErrorKind::Model("envelope op is not a string".into())
                        })?;
                        for (i, o) in op.iter().enumerate() {
                            ops[i] = o.map(str::to_owned);
                        }
                    }
                    fields.push(f.as_ref().clone().with_nullable(true));
                    columns.push(c);
                }
            }
            _ => {
                let after = StructArray::try_new(
                    values.schema().fields().clone(),
                    picked,
                    Some(
                        open.value_rows
                            .iter()
                            .map(Option::is_some)
                            .collect::<Vec<_>>()
                            .into(),
                    ),
                )
                .map_err(model)?;
                if let ValueShape::NonData(kind) = open.shape {
                    // Its own op when it has one (logical decoding messages: `m`), else null.
                    if let Some(op) = after
                        .column_by_name("op")
                        .and_then(|c| c.as_string_opt::<i32>())
                    {
                        for (i, o) in op.iter().enumerate() {
                            ops[i] = o.map(str::to_owned);
                        }
                    }
                    let meta = [(NON_DATA_METADATA.to_owned(), kind.as_str().to_owned())];
                    let field = Field::new("value", after.data_type().clone(), true).with_metadata(
                        meta.into_iter()
                            .collect::<std::collections::HashMap<_, _>>(),
                    );
                    fields.push(field);
                    columns.push(Arc::new(after));
                    return done(part, open, fields, columns, &tombstones, ops);
                }
                let deleted = after
                    .column_by_name("__deleted")
                    .and_then(|c| c.as_string_opt::<i32>().cloned());
                let op = after
                    .column_by_name("__op")
                    .and_then(|c| c.as_string_opt::<i32>().cloned());
                for (i, slot) in ops.iter_mut().enumerate() {
                    *slot = match (&op, &deleted) {
                        (Some(op), _) if op.is_valid(i) => Some(op.value(i).to_owned()),
                        (_, Some(d)) if d.is_valid(i) && d.value(i) == "true" => Some("d".into()),
                        _ => Some("c".into()),
                    };
                }
                fields.push(Field::new("after", after.data_type().clone(), true));
                columns.push(Arc::new(after));
            }
        }
    }
    done(part, open, fields, columns, &tombstones, ops)
}

/// The batch, with its `__op` column filled in from `ops`.
fn done(
    part: &(Arc<str>, i32),
    open: &Open,
    mut fields: Vec<Field>,
    mut columns: Vec<ArrayRef>,
    tombstones: &BooleanArray,
    ops: Vec<Option<String>>,
) -> Result<Option<ChangeBatch>, ChangeErrorKind> {
    let model = |e: arrow_schema::ArrowError| ChangeErrorKind::Model(e.to_string());
    let non_data = matches!(open.shape, ValueShape::NonData(_));
    // A tombstone deletes by key; a row without op is malformed data, unless it is not a row.
    let mut op_column = StringBuilder::with_capacity(ops.len(), ops.len());
    for (i, op) in ops.into_iter().enumerate() {
        match (tombstones.value(i), op) {
            (true, _) => op_column.append_value("d"),
            (false, Some(op)) => op_column.append_value(op),
            (false, None) if non_data => op_column.append_null(),
            (false, None) => return Err(ChangeErrorKind::Model(format!("row {i} has no op"))),
        }
    }
    columns[2] = Arc::new(op_column.finish());
    fields[2] = fields[2].clone().with_nullable(non_data);
    let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(model)?;
    Ok(Some(ChangeBatch {
        topic: part.0.clone(),
        partition: part.1,
        first_offset: open.first_offset,
        last_offset: open.last_offset,
        key_schema: open.key_schema.clone(),
        value_schema: open.value_schema.clone(),
        shape: open.shape,
        rows,
    }))
}

#[cfg(test)]
mod tests;
