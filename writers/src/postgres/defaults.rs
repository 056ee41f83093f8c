//! A column's default as the Debezium schema declares it, as a typed SQL literal for
//! `ADD COLUMN … DEFAULT` and `CREATE TABLE`, so that rows the source gave the default without
//! a change event (`ALTER TABLE … ADD COLUMN c … DEFAULT …`) hold it in the replica too.
//!
//! The Avro converters put Connect's default in the type's `connect.default`, which decoding
//! keeps on the Arrow field as text: a JSON string's content, else the JSON itself (numbers,
//! booleans). Its encoding is the column's Connect type's: days, micros or millis since the
//! epoch, ISO-8601 text for `ZonedTimestamp`, and for bytes and decimals a string of one
//! character per byte (decimals: the unscaled two's-complement integer, big-endian).
//!
//! DDL takes no bind parameters, so the literal is quoted here: every value is parsed to its
//! type first and written back, then enclosed as `E'…'` with `\` and `'` doubled, and cast to
//! the column's type from the type map.

use arrow_schema::{DataType, Field, TimeUnit};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime};

use super::encode::decimal_digits;
use super::types::{ColumnType, Conv};

/// What the schema says a column's default is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnDefault {
    /// No default: the column is added nullable, without one.
    None,
    /// The default as PostgreSQL's text input, quoted and cast to the column's type when the
    /// column is created (not decided before then: the source's own type may be missing).
    Sql(String),
    /// A default the replica cannot take, and why (logged when the column is added).
    Unusable(String),
}

/// The default of a column of `field`'s values, typed `ty`.
pub(crate) fn column_default(field: &Field, ty: &ColumnType) -> ColumnDefault {
    let Some(text) = field.metadata().get("connect.default") else {
        return ColumnDefault::None;
    };
    match literal(text, field.data_type(), ty) {
        Ok(value) => ColumnDefault::Sql(value),
        Err(why) => ColumnDefault::Unusable(format!("default {text:?}: {why}")),
    }
}

/// The `DEFAULT` expression for a column of type `ty` whose default is `value` (text input).
pub(crate) fn default_sql(value: &str, ty: &ColumnType) -> Result<String, String> {
    if ty.hstore_json && ty.ddl == "hstore" {
        return Ok(format!("{}::hstore", quote_literal(&hstore_text(value)?)));
    }
    Ok(format!("{}::{}", quote_literal(value), ty.ddl))
}

/// Debezium's JSON object for an `hstore` as `hstore`'s text input.
fn hstore_text(json: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON for an hstore: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object for an hstore")?;
    let quoted = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    obj.iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok(format!("{}=>{}", quoted(k), quoted(s))),
            serde_json::Value::Null => Ok(format!("{}=>NULL", quoted(k))),
            _ => Err("an hstore value that is not a string".to_owned()),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|pairs| pairs.join(", "))
}

/// `E'…'`: valid whatever `standard_conforming_strings` is.
fn quote_literal(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// Debezium stands in the epoch for a temporal default it cannot evaluate (`now()`,
/// `CURRENT_TIMESTAMP`, …): the source's rows hold the time of the `ALTER`, not 1970.
const EPOCH: &str = "is the epoch, Debezium's stand-in for a function default such as now()";

/// The default's value as PostgreSQL's text input for `ty`.
fn literal(text: &str, dt: &DataType, ty: &ColumnType) -> Result<String, String> {
    let int = || {
        text.parse::<i64>()
            .map_err(|e| format!("not an integer: {e}"))
    };
    let bytes = || {
        text.chars()
            .map(|c| u8::try_from(u32::from(c)).map_err(|_| "a bytes default above U+00FF"))
            .collect::<Result<Vec<u8>, _>>()
    };
    let in_range = |year: i32| {
        (1..=9999)
            .contains(&year)
            .then_some(())
            .ok_or_else(|| format!("year {year} is outside 1-9999"))
    };
    Ok(match (dt, &ty.conv) {
        (DataType::Boolean, _) => match text {
            "true" | "false" => text.to_owned(),
            _ => return Err("not a boolean".into()),
        },
        (DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64, _) => {
            int()?.to_string()
        }
        (DataType::Float32, _) => float(text)?
            .parse::<f32>()
            .map_err(|e| e.to_string())?
            .to_string(),
        (DataType::Float64, _) => float(text)?
            .parse::<f64>()
            .map_err(|e| e.to_string())?
            .to_string(),
        (DataType::Utf8, Conv::Plain) => {
            if text.contains('\0') {
                return Err("a NUL character".into());
            }
            text.to_owned()
        }
        (DataType::Binary, Conv::Plain) => {
            let hex: String = bytes()?.iter().map(|b| format!("{b:02x}")).collect();
            format!("\\x{hex}")
        }
        (DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale), Conv::Decimal) => {
            decimal(&bytes()?, *scale)
        }
        (DataType::Date32, _) => {
            let days = int()?;
            if days == 0 {
                return Err(EPOCH.into());
            }
            let d = i32::try_from(days)
                .ok()
                .and_then(|d| NaiveDate::from_num_days_from_ce_opt(d.checked_add(719_163)?))
                .ok_or("out of range")?;
            in_range(d.year())?;
            d.format("%Y-%m-%d").to_string()
        }
        (DataType::Timestamp(unit, None), _) => {
            let v = int()?;
            if v == 0 {
                return Err(EPOCH.into());
            }
            let t = timestamp(v, *unit).ok_or("out of range")?;
            in_range(t.date().year())?;
            t.format("%Y-%m-%d %H:%M:%S%.f").to_string()
        }
        (DataType::Timestamp(_, Some(_)), _) => {
            let t = DateTime::parse_from_rfc3339(text)
                .map_err(|e| format!("not an ISO-8601 timestamp: {e}"))?
                .naive_utc();
            if t.and_utc().timestamp_micros() == 0 {
                return Err(EPOCH.into());
            }
            in_range(t.date().year())?;
            format!("{}+00", t.format("%Y-%m-%d %H:%M:%S%.f"))
        }
        // SQL Server's `datetimeoffset`, kept as its text: PostgreSQL rounds the digits past
        // the microsecond, as it does for the values.
        (DataType::Utf8, Conv::ZonedText) => {
            let t = DateTime::parse_from_rfc3339(text)
                .map_err(|e| format!("not an ISO-8601 timestamp: {e}"))?;
            if t.timestamp_nanos_opt() == Some(0) {
                return Err(EPOCH.into());
            }
            in_range(t.naive_utc().date().year())?;
            text.to_owned()
        }
        (DataType::Time32(unit) | DataType::Time64(unit), _) => {
            let v = int()?;
            let micros = match unit {
                TimeUnit::Second => v.checked_mul(1_000_000),
                TimeUnit::Millisecond => v.checked_mul(1_000),
                TimeUnit::Microsecond => Some(v),
                TimeUnit::Nanosecond => Some(v / 1_000),
            }
            .filter(|us| (0..=86_400_000_000).contains(us))
            .ok_or("not a time of day")?;
            let secs = micros / 1_000_000;
            format!(
                "{:02}:{:02}:{:02}.{:06}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                micros % 1_000_000
            )
        }
        (DataType::Duration(TimeUnit::Microsecond), _) => format!("{} microseconds", int()?),
        (DataType::Duration(TimeUnit::Nanosecond), _) => {
            format!("{} microseconds", int()? / 1_000)
        }
        _ => return Err(format!("no default for a {dt} column")),
    })
}

/// JSON numbers as they are; Jackson's strings for the values JSON has no number for.
fn float(text: &str) -> Result<&str, String> {
    match text {
        "NaN" | "Infinity" | "-Infinity" => Ok(text),
        t if t.parse::<f64>().is_ok() => Ok(t),
        _ => Err("not a number".into()),
    }
}

fn timestamp(v: i64, unit: TimeUnit) -> Option<NaiveDateTime> {
    let t = match unit {
        TimeUnit::Second => DateTime::from_timestamp(v, 0),
        TimeUnit::Millisecond => DateTime::from_timestamp_millis(v),
        TimeUnit::Microsecond => DateTime::from_timestamp_micros(v),
        TimeUnit::Nanosecond => Some(DateTime::from_timestamp_nanos(v)),
    };
    t.map(|t| t.naive_utc())
}

/// The unscaled big-endian two's-complement integer at `scale`, as decimal text.
fn decimal(bytes: &[u8], scale: i8) -> String {
    let (negative, digits) = decimal_digits(bytes);
    let mut digits = String::from_utf8(digits).unwrap_or_default();
    if digits.is_empty() {
        digits.push('0');
    }
    let sign = if negative { "-" } else { "" };
    match usize::try_from(scale) {
        Ok(0) => format!("{sign}{digits}"),
        Ok(s) => {
            if digits.len() <= s {
                digits = format!("{}{digits}", "0".repeat(s - digits.len() + 1));
            }
            let (int, frac) = digits.split_at(digits.len() - s);
            format!("{sign}{int}.{frac}")
        }
        // A negative scale: the digits times a power of ten.
        Err(_) => format!(
            "{sign}{digits}{}",
            "0".repeat(usize::from(scale.unsigned_abs()))
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::postgres::types::column_type;

    fn default_of(dt: DataType, meta: &[(&str, &str)]) -> ColumnDefault {
        let meta: HashMap<String, String> = meta
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let f = Field::new("c", dt, true).with_metadata(meta);
        column_default(&f, &column_type(&f, false).expect("type"))
    }

    fn sql(dt: DataType, value: &str) -> String {
        let f = Field::new("c", dt.clone(), true);
        let ddl = column_type(&f, false).expect("type").ddl;
        match default_of(dt, &[("connect.default", value)]) {
            ColumnDefault::Sql(s) => format!("{}::{ddl}", quote_literal(&s)),
            other => panic!("{value:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_are_typed_quoted_literals() {
        assert_eq!(
            sql(DataType::Utf8, "it's a \\ ☃"),
            "E'it''s a \\\\ ☃'::text"
        );
        assert_eq!(
            sql(DataType::Utf8, "x'); DROP TABLE t; --"),
            "E'x''); DROP TABLE t; --'::text"
        );
        assert_eq!(sql(DataType::Int16, "-7"), "E'-7'::smallint");
        assert_eq!(
            sql(DataType::Int64, "-9000000000"),
            "E'-9000000000'::bigint"
        );
        assert_eq!(sql(DataType::Boolean, "true"), "E'true'::boolean");
        assert_eq!(sql(DataType::Float64, "1.1"), "E'1.1'::double precision");
        assert_eq!(sql(DataType::Float32, "NaN"), "E'NaN'::real");
        // 0x013a = 314; 0xfec6 = -314.
        assert_eq!(
            sql(DataType::Decimal128(10, 2), "\u{1}:"),
            "E'3.14'::numeric(10,2)"
        );
        assert_eq!(
            sql(DataType::Decimal128(10, 2), "\u{fe}\u{c6}"),
            "E'-3.14'::numeric(10,2)"
        );
        assert_eq!(
            sql(DataType::Decimal128(10, 4), "\u{5}"),
            "E'0.0005'::numeric(10,4)"
        );
        assert_eq!(sql(DataType::Binary, "\u{0}\u{ff}"), "E'\\\\x00ff'::bytea");
        assert_eq!(sql(DataType::Date32, "19782"), "E'2024-02-29'::date");
        assert_eq!(
            sql(
                DataType::Timestamp(TimeUnit::Microsecond, None),
                "1709210096789012"
            ),
            "E'2024-02-29 12:34:56.789012'::timestamp"
        );
        assert_eq!(
            sql(
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                "2024-02-29T10:34:56.500000Z"
            ),
            "E'2024-02-29 10:34:56.500+00'::timestamptz"
        );
        assert_eq!(
            sql(DataType::Time64(TimeUnit::Microsecond), "43201500000"),
            "E'12:00:01.500000'::time"
        );
    }

    #[test]
    fn defaults_the_replica_cannot_take_say_why() {
        let unusable = |dt: DataType, v: &str| {
            matches!(
                default_of(dt, &[("connect.default", v)]),
                ColumnDefault::Unusable(_)
            )
        };
        assert!(unusable(
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            "1970-01-01T00:00:00.000000Z"
        ));
        assert!(unusable(
            DataType::Timestamp(TimeUnit::Millisecond, None),
            "0"
        ));
        assert!(unusable(DataType::Date32, "0"));
        assert!(unusable(DataType::Int32, "4x"));
        assert!(unusable(DataType::Boolean, "yes"));
        assert!(unusable(DataType::Utf8, "a\0b"));
        assert!(unusable(DataType::Binary, "☃"));
        assert_eq!(default_of(DataType::Utf8, &[]), ColumnDefault::None);
    }
}
