//! Debezium's semantic types onto real Arrow types, by the `connect.name` each Avro type carries.
//! Only lossless, reinterpreting conversions happen here (the integers keep their values); the
//! original `connect.*` attributes stay on the field as metadata, unquoted.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Int32Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, FieldRef, Fields, Metadata, Schema, SchemaRef, TimeUnit};

use super::error::{DecodeError, internal};
use super::schema::{WIDE_DECIMAL_SCALE, ZONED_TIMESTAMP};
use super::zoned::{
    INFINITY_DAYS, INFINITY_MICROS, NEG_INFINITY_DAYS, NEG_INFINITY_MICROS, zoned_timestamp_micros,
};

/// What a Debezium type means where it depends on the connector that wrote it, which the
/// envelope's `source` record names (`io.debezium.connector.mysql.Source`). The default is for
/// records that name none ([`Semantics::unknown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Semantics {
    /// MySQL's and MariaDB's `TIME` is a signed span (-838:59:59 to 838:59:59), which
    /// Debezium sends as `MicroTime`: it becomes a duration, not a time of day no reader of a
    /// Parquet `TIME` would accept past 24:00.
    pub times_are_spans: bool,
    /// PostgreSQL's `infinity` and `-infinity` arrive as pgjdbc's sentinels in `Date`,
    /// `Timestamp`, `MicroTimestamp` and `NanoTimestamp`: they become the infinities DuckDB and
    /// the replica read as such.
    pub postgres_infinities: bool,
    /// SQL Server's `datetimeoffset` has seven fractional digits by default (100 ns), which
    /// no microsecond timestamp holds: its ZonedTimestamps stay the text Debezium sent
    /// (checked to parse, up to nine digits), so the raw layer keeps every digit.
    pub zoned_timestamps_as_text: bool,
    /// The connector is not known, so a time outside a day (a MySQL `TIME` span) cannot be
    /// told from a time of day: such a value is refused ([`DecodeError::Connector`]) rather
    /// than written as a `TIME` no reader accepts.
    pub connector_unknown: bool,
}

impl Default for Semantics {
    fn default() -> Self {
        Self::unknown()
    }
}

impl Semantics {
    /// For records that name no connector (a flattened value, a key with no value seen):
    /// PostgreSQL's infinity sentinels still become infinities, since no other connector
    /// can send them (they lie beyond year 9999, where every other source's types end).
    pub fn unknown() -> Self {
        Self {
            times_are_spans: false,
            postgres_infinities: true,
            zoned_timestamps_as_text: false,
            connector_unknown: true,
        }
    }

    /// For the connector `schema`'s `source` record names, else `fallback` (the
    /// `kafka.source-connector` setting), else [`Semantics::unknown`].
    pub fn of_schema(schema: &super::WriterSchema, fallback: Option<&str>) -> Self {
        match schema.connector() {
            Some(c) => Self::of_connector(&c),
            None => fallback.map_or_else(Self::unknown, Self::of_connector),
        }
    }

    /// For the connector named in `io.debezium.connector.<name>.Source`.
    pub fn of_connector(name: &str) -> Self {
        Self {
            times_are_spans: matches!(name, "mysql" | "mariadb"),
            postgres_infinities: name == "postgresql",
            zoned_timestamps_as_text: name == "sqlserver",
            connector_unknown: false,
        }
    }
}

/// The Arrow type a Debezium semantic type becomes, given the Avro physical type it arrived as.
/// `connect_name` is the type's `connect.name`, or its `connect.type` (`int8`, `int16`).
pub fn target_type(connect_name: &str, physical: &DataType) -> Option<DataType> {
    target(connect_name, physical, Semantics::default())
}

fn target(connect_name: &str, physical: &DataType, semantics: Semantics) -> Option<DataType> {
    use DataType::*;
    if semantics.times_are_spans {
        match (connect_name, physical) {
            ("io.debezium.time.MicroTime", Int64) => return Some(Duration(TimeUnit::Microsecond)),
            ("io.debezium.time.NanoTime", Int64) => return Some(Duration(TimeUnit::Nanosecond)),
            _ => {}
        }
    }
    if semantics.zoned_timestamps_as_text && connect_name == ZONED_TIMESTAMP {
        return None;
    }
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

/// The schema [`apply`] gives batches of `schema`: each semantic type's Arrow type, the
/// `connect.*` attributes unquoted. Worked out once per decoder, as parsing the metadata of
/// every field cost a decoder a few percent when done each batch.
pub(super) fn plan(schema: &Schema, semantics: Semantics) -> Result<SchemaRef, DecodeError> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| planned_field(f, semantics))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

fn planned_field(field: &FieldRef, semantics: Semantics) -> Result<FieldRef, DecodeError> {
    let metadata = unquoted(field.metadata());
    let data_type = match field.data_type() {
        DataType::Struct(children) => DataType::Struct(
            children
                .iter()
                .map(|c| planned_field(c, semantics))
                .collect::<Result<Fields, _>>()?,
        ),
        DataType::List(item) => DataType::List(planned_field(item, semantics)?),
        DataType::Binary | DataType::FixedSizeBinary(_)
            if metadata.contains_key(WIDE_DECIMAL_SCALE) =>
        {
            wide_decimal_scale(metadata.get(WIDE_DECIMAL_SCALE))?;
            DataType::Struct(wide_decimal_fields())
        }
        physical => metadata
            .get("connect.name")
            .or_else(|| metadata.get("connect.type"))
            .and_then(|name| target(name, physical, semantics))
            .unwrap_or_else(|| physical.clone()),
    };
    Ok(Arc::new(
        Field::new(field.name(), data_type, field.is_nullable()).with_metadata(metadata),
    ))
}

/// Gives a batch the types of `planned`, [`plan`]'s schema for the batch's own.
pub(super) fn apply(
    batch: RecordBatch,
    planned: &SchemaRef,
    semantics: Semantics,
) -> Result<RecordBatch, DecodeError> {
    let schema = batch.schema();
    if schema.fields().len() != planned.fields().len() {
        return Err(internal("a batch's schema is not the one planned"));
    }
    let columns = schema
        .fields()
        .iter()
        .zip(planned.fields())
        .zip(batch.columns())
        .map(|((from, to), column)| convert(from, to, column.clone(), None, semantics))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(planned.clone(), columns).map_err(internal)
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

/// What Debezium's PostgreSQL connector (3.6) writes for `infinity` and `-infinity`, none of
/// them a date or timestamp PostgreSQL can hold otherwise, so mapping them cannot alter one:
/// - `date`, streamed: the epoch days of `-5877611-06-21` and `-06-22`;
/// - `date`, snapshot: what `java.sql.Date` makes of pgjdbc's sentinel in a UTC JVM (another
///   zone gives other days, which the replica then refuses as out of range);
/// - `timestamp`: pgjdbc's `PGStatement.DATE_POSITIVE_INFINITY` / `DATE_NEGATIVE_INFINITY`
///   (milliseconds) read as microseconds, then in the column's unit; nanoseconds saturate.
const PG_DATE_INFINITIES: [(i32, i32); 2] = [
    (-2_147_472_692, -2_147_472_691),
    (-622_191_234, -625_821_272),
];
const PG_MICROS_INFINITY: (i64, i64) = (9_223_372_036_825_200_000, -9_223_372_036_832_400_000);

/// PostgreSQL's infinities, from Debezium's sentinels to DuckDB's own: the ends of the type's
/// range (`i64::MAX` / `-i64::MAX`; `i32::MAX` / `-i32::MAX` for dates), which the replica
/// writes as PostgreSQL's.
fn postgres_infinities(column: ArrayRef) -> ArrayRef {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    fn map<T: ArrowPrimitiveType>(a: &ArrayRef, f: impl Fn(T::Native) -> T::Native) -> ArrayRef {
        let values = a.as_primitive::<T>();
        // Most batches hold no infinity: a scan, not a new buffer; without an early exit, so
        // that it runs on vectors.
        if values
            .values()
            .iter()
            .fold(true, |same, &v| same & (f(v) == v))
        {
            return a.clone();
        }
        Arc::new(
            values
                .unary::<_, T>(f)
                .with_data_type(a.data_type().clone()),
        )
    }
    let ts = |(pos, neg): (i64, i64)| {
        move |v: i64| {
            if v == pos {
                INFINITY_MICROS
            } else if v == neg {
                NEG_INFINITY_MICROS
            } else {
                v
            }
        }
    };
    let date = |v: i32| match PG_DATE_INFINITIES.iter().find(|(p, n)| v == *p || v == *n) {
        Some((p, _)) if v == *p => INFINITY_DAYS,
        Some(_) => NEG_INFINITY_DAYS,
        None => v,
    };
    let (us_pos, us_neg) = PG_MICROS_INFINITY;
    match column.data_type() {
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            map::<TimestampMillisecondType>(&column, ts((us_pos / 1000, us_neg / 1000)))
        }
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            map::<TimestampMicrosecondType>(&column, ts(PG_MICROS_INFINITY))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, None) => {
            map::<TimestampNanosecondType>(&column, ts((i64::MAX, i64::MIN)))
        }
        DataType::Date32 => map::<Date32Type>(&column, date),
        _ => column,
    }
}

/// A time of day lies in 00:00 to 24:00 (PostgreSQL's `time` holds 24:00); outside it, only a
/// MySQL or MariaDB `TIME` span, which the connector would have said.
fn check_time_of_day(
    name: &str,
    column: &ArrayRef,
    outer: Option<&NullBuffer>,
) -> Result<(), DecodeError> {
    use arrow_array::cast::AsArray;
    let per_day: i64 = match column.data_type() {
        DataType::Time32(TimeUnit::Millisecond) => 86_400_000,
        DataType::Time64(TimeUnit::Microsecond) => 86_400_000_000,
        DataType::Time64(TimeUnit::Nanosecond) => 86_400_000_000_000,
        _ => return Ok(()),
    };
    let values = arrow_cast::cast(column, &DataType::Int64).map_err(internal)?;
    let bad = values
        .as_primitive::<arrow_array::types::Int64Type>()
        .iter()
        .enumerate()
        .filter(|(i, _)| outer.is_none_or(|n| n.is_valid(*i)))
        .find_map(|(_, v)| v.filter(|v| !(0..=per_day).contains(v)));
    match bad {
        None => Ok(()),
        Some(v) => Err(DecodeError::Connector(format!(
            "column `{name}` holds the time {}, outside a day: a MySQL or \
             MariaDB `TIME` span, which is a duration, not a time of day. These records name no \
             connector (a flattened record has no `source`), so lakesink cannot tell; set \
             `kafka.source-connector` to the connector that wrote them (`mysql`, `mariadb`, …)",
            hms(v, per_day / 86_400)
        ))),
    }
}

/// `-838:59:59`: whole seconds of a signed span of `v` units, `per_second` to a second.
fn hms(v: i64, per_second: i64) -> String {
    let secs = (v / per_second.max(1)).unsigned_abs();
    let sign = if v < 0 { "-" } else { "" };
    format!(
        "{sign}{}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn wide_decimal_fields() -> Fields {
    Fields::from(vec![
        Field::new("scale", DataType::Int32, false),
        Field::new("value", DataType::Binary, false),
    ])
}

/// The scale a wide decimal's field carries (its `lakesink.wide-decimal.scale`).
fn wide_decimal_scale(value: Option<&String>) -> Result<i32, DecodeError> {
    value
        .and_then(|s| s.parse::<i32>().ok())
        .ok_or_else(|| internal("a wide decimal's scale is not an int"))
}

/// A decimal too wide for Arrow as {scale, value}: the struct of Debezium's
/// `VariableScaleDecimal`, the scale the schema's, the value its two's-complement bytes.
fn wide_decimal(column: &ArrayRef, scale: i32) -> Result<StructArray, DecodeError> {
    let value = arrow_cast::cast(column, &DataType::Binary).map_err(internal)?;
    let scales: ArrayRef = Arc::new(Int32Array::from(vec![scale; column.len()]));
    // The children carry no nulls; the struct carries the column's.
    let value = match value.nulls() {
        Some(_) => {
            let b = value.as_any().downcast_ref::<arrow_array::BinaryArray>();
            let b = b.ok_or_else(|| internal("a wide decimal is not Binary"))?;
            Arc::new(arrow_array::BinaryArray::new(
                b.offsets().clone(),
                b.values().clone(),
                None,
            )) as ArrayRef
        }
        None => value,
    };
    StructArray::try_new(
        wide_decimal_fields(),
        vec![scales, value],
        column.nulls().cloned(),
    )
    .map_err(internal)
}

/// One column from `from`'s type to `to`'s, its planned field. `outer` marks rows whose
/// enclosing struct is null: their child values are placeholders (arrow-avro writes `""` and
/// `0` there) and are not parsed.
fn convert(
    from: &FieldRef,
    to: &FieldRef,
    column: ArrayRef,
    outer: Option<&NullBuffer>,
    semantics: Semantics,
) -> Result<ArrayRef, DecodeError> {
    match (from.data_type(), to.data_type()) {
        (DataType::Struct(children), DataType::Struct(planned))
            if children.len() == planned.len() =>
        {
            let s = column
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| internal("struct column is not a StructArray"))?;
            let nulls = NullBuffer::union(outer, s.nulls());
            let columns = children
                .iter()
                .zip(planned)
                .zip(s.columns())
                .map(|((from, to), c)| convert(from, to, c.clone(), nulls.as_ref(), semantics))
                .collect::<Result<Vec<_>, _>>()?;
            // With the length given, so a record of no fields keeps its rows.
            let array = StructArray::try_new_with_length(
                planned.clone(),
                columns,
                s.nulls().cloned(),
                s.len(),
            )
            .map_err(internal)?;
            Ok(Arc::new(array))
        }
        (DataType::List(item), DataType::List(planned)) => {
            let l = column
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| internal("list column is not a ListArray"))?;
            // List values do not line up with rows; a null list holds no values.
            let values = convert(item, planned, l.values().clone(), None, semantics)?;
            let array = ListArray::try_new(
                planned.clone(),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )
            .map_err(internal)?;
            Ok(Arc::new(array))
        }
        (DataType::Binary | DataType::FixedSizeBinary(_), DataType::Struct(_)) => {
            let scale = wide_decimal_scale(to.metadata().get(WIDE_DECIMAL_SCALE))?;
            Ok(Arc::new(wide_decimal(&column, scale)?))
        }
        (physical, planned) if physical == planned => Ok(column),
        (_, t @ DataType::Timestamp(_, Some(_))) => {
            let micros = zoned_timestamps(&column, outer)?;
            Ok(Arc::new(micros.with_data_type(t.clone())))
        }
        (_, t) => {
            let cast = arrow_cast::cast(&column, t).map_err(internal)?;
            let cast = if semantics.postgres_infinities {
                postgres_infinities(cast)
            } else {
                cast
            };
            if semantics.connector_unknown {
                check_time_of_day(to.name(), &cast, outer)?;
            }
            Ok(cast)
        }
    }
}
