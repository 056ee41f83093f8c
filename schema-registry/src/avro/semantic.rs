//! Debezium's semantic types onto real Arrow types, by the `connect.name` each Avro type carries.
//! Only lossless, reinterpreting conversions happen here (the integers keep their values); the
//! original `connect.*` attributes stay on the field as metadata, unquoted.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, ListArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, FieldRef, Fields, Metadata, Schema, TimeUnit};

use super::decode::DecodeError;
use super::schema::ZONED_TIMESTAMP;
use super::validate::zoned_timestamp_micros;

/// The Arrow type a Debezium semantic type becomes, given the Avro physical type it arrived as.
/// `connect_name` is the type's `connect.name`, or its `connect.type` (`int8`, `int16`).
pub fn target_type(connect_name: &str, physical: &DataType) -> Option<DataType> {
    use DataType::*;
    Some(match (connect_name, physical) {
        ("int8", Int32) => Int8,
        ("int16", Int32) => Int16,
        (ZONED_TIMESTAMP, Utf8) => Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ("io.debezium.time.Date", Int32) => Date32,
        ("io.debezium.time.Time", Int32) => Time32(TimeUnit::Millisecond),
        ("io.debezium.time.MicroTime", Int64) => Time64(TimeUnit::Microsecond),
        ("io.debezium.time.NanoTime", Int64) => Time64(TimeUnit::Nanosecond),
        ("io.debezium.time.Timestamp", Int64) => Timestamp(TimeUnit::Millisecond, None),
        ("io.debezium.time.MicroTimestamp", Int64) => Timestamp(TimeUnit::Microsecond, None),
        ("io.debezium.time.NanoTimestamp", Int64) => Timestamp(TimeUnit::Nanosecond, None),
        ("io.debezium.time.MicroDuration", Int64) => Duration(TimeUnit::Microsecond),
        ("io.debezium.time.NanoDuration", Int64) => Duration(TimeUnit::Nanosecond),
        _ => return None,
    })
}

/// Applies [`target_type`] through every column, nested ones included.
pub(super) fn apply(batch: RecordBatch) -> Result<RecordBatch, DecodeError> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let (f, c) = convert(field, column.clone(), None)?;
        fields.push(f);
        columns.push(c);
    }
    let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
    RecordBatch::try_new(Arc::new(schema), columns).map_err(internal)
}

fn internal(e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Internal(e.to_string())
}

/// arrow-avro keeps unknown Avro attributes as JSON text: `"\"io.debezium.time.Date\""`.
fn unquoted(metadata: &Metadata) -> HashMap<String, String> {
    metadata
        .iter()
        .map(|(k, v)| {
            let v = match serde_json::from_str::<serde_json::Value>(v) {
                Ok(serde_json::Value::String(s)) => s,
                _ => v.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// ZonedTimestamp strings (already validated per datum) to microseconds since the epoch.
fn zoned_timestamps(
    column: &ArrayRef,
    outer: Option<&NullBuffer>,
) -> Result<TimestampMicrosecondArray, DecodeError> {
    let strings = column
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| internal("ZonedTimestamp column is not Utf8"))?;
    strings
        .iter()
        .enumerate()
        .map(|(i, v)| v.filter(|_| outer.is_none_or(|n| n.is_valid(i))))
        .map(|v| {
            v.map(|text| {
                zoned_timestamp_micros(text)
                    .map_err(|e| internal(format!("ZonedTimestamp {text:?}: {e}")))
            })
            .transpose()
        })
        .collect::<Result<TimestampMicrosecondArray, _>>()
}

/// `outer` marks rows whose enclosing struct is null: their child values are placeholders
/// (arrow-avro writes `""` and `0` there) and are not parsed.
fn convert(
    field: &FieldRef,
    column: ArrayRef,
    outer: Option<&NullBuffer>,
) -> Result<(FieldRef, ArrayRef), DecodeError> {
    let metadata = unquoted(field.metadata());
    match field.data_type() {
        DataType::Struct(children) => {
            let s = column
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| internal("struct column is not a StructArray"))?;
            let mut fields = Vec::with_capacity(children.len());
            let mut columns = Vec::with_capacity(children.len());
            let nulls = NullBuffer::union(outer, s.nulls());
            for (child, col) in children.iter().zip(s.columns()) {
                let (f, c) = convert(child, col.clone(), nulls.as_ref())?;
                fields.push(f);
                columns.push(c);
            }
            let fields = Fields::from(fields);
            // With the length given, so a record of no fields keeps its rows.
            let array = StructArray::try_new_with_length(
                fields.clone(),
                columns,
                s.nulls().cloned(),
                s.len(),
            )
            .map_err(internal)?;
            let field = Field::new(field.name(), DataType::Struct(fields), field.is_nullable())
                .with_metadata(metadata);
            Ok((Arc::new(field), Arc::new(array)))
        }
        DataType::List(item) => {
            let l = column
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| internal("list column is not a ListArray"))?;
            // List values do not line up with rows; a null list holds no values.
            let (item, values) = convert(item, l.values().clone(), None)?;
            let array = ListArray::try_new(
                item.clone(),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )
            .map_err(internal)?;
            let field = Field::new(field.name(), DataType::List(item), field.is_nullable())
                .with_metadata(metadata);
            Ok((Arc::new(field), Arc::new(array)))
        }
        physical => {
            let target = metadata
                .get("connect.name")
                .or_else(|| metadata.get("connect.type"))
                .and_then(|name| target_type(name, physical));
            let (data_type, column) = match target {
                Some(t @ DataType::Timestamp(_, Some(_))) => {
                    let micros = zoned_timestamps(&column, outer)?;
                    (t.clone(), Arc::new(micros.with_data_type(t)) as ArrayRef)
                }
                Some(t) => {
                    let cast = arrow_cast::cast(&column, &t).map_err(internal)?;
                    (t, cast)
                }
                None => (physical.clone(), column),
            };
            let field =
                Field::new(field.name(), data_type, field.is_nullable()).with_metadata(metadata);
            Ok((Arc::new(field), column))
        }
    }
}
