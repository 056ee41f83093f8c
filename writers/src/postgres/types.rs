//! The Arrow (Debezium) → PostgreSQL type map. `docs/replica.md` has it as a table.
//!
//! Each column has a target type (for `CREATE TABLE` / `ADD COLUMN`) and a wire type: what the
//! binary `COPY` carries. Where PostgreSQL's binary format is awkward (uuid, json, xml, bit
//! strings) the wire type is `text` and the upsert casts it from the staging table.

use arrow_schema::{DataType, Field, TimeUnit};

/// How a value travels in binary COPY.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Wire {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    Text,
    Bytea,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Interval,
    Point,
    Array(Box<Wire>),
}

impl Wire {
    /// The staging column's type.
    pub(crate) fn sql(&self) -> String {
        match self {
            Wire::Array(e) => format!("{}[]", e.sql()),
            other => other.scalar_sql().to_owned(),
        }
    }

    fn scalar_sql(&self) -> &'static str {
        match self {
            Wire::Bool => "boolean",
            Wire::Int2 => "smallint",
            Wire::Int4 => "integer",
            Wire::Int8 => "bigint",
            Wire::Float4 => "real",
            Wire::Float8 => "double precision",
            Wire::Numeric => "numeric",
            Wire::Text => "text",
            Wire::Bytea => "bytea",
            Wire::Date => "date",
            Wire::Time => "time",
            Wire::Timestamp => "timestamp",
            Wire::Timestamptz => "timestamptz",
            Wire::Interval => "interval",
            Wire::Point => "point",
            Wire::Array(_) => "",
        }
    }

    /// Whether a column of type `target` (as `format_type` or our DDL spells it) takes this
    /// wire value in binary COPY exactly as the staging path's cast would: the same type, where
    /// the receive function applies the column's typmod as the cast does.
    pub(crate) fn fits(&self, target: &str) -> bool {
        let alias = match self {
            Wire::Array(e) => return target.strip_suffix("[]").is_some_and(|t| e.fits(t)),
            Wire::Numeric => return target == "numeric" || target.starts_with("numeric("),
            Wire::Time => "time without time zone",
            Wire::Timestamp => "timestamp without time zone",
            Wire::Timestamptz => "timestamp with time zone",
            _ => "",
        };
        target == self.scalar_sql() || target == alias
    }

    /// The element type's OID, for binary arrays.
    pub(crate) fn oid(&self) -> u32 {
        match self {
            Wire::Bool => 16,
            Wire::Bytea => 17,
            Wire::Int8 => 20,
            Wire::Int2 => 21,
            Wire::Int4 => 23,
            Wire::Text => 25,
            Wire::Point => 600,
            Wire::Float4 => 700,
            Wire::Float8 => 701,
            Wire::Numeric => 1700,
            Wire::Date => 1082,
            Wire::Time => 1083,
            Wire::Timestamp => 1114,
            Wire::Timestamptz => 1184,
            Wire::Interval => 1186,
            Wire::Array(_) => 0,
        }
    }
}

/// How an Arrow value becomes its wire value, where that is not the obvious one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Conv {
    Plain,
    /// Decimal128/256 → decimal text.
    Decimal,
    /// `VariableScaleDecimal` {scale, value} → decimal text.
    VariableScale,
    /// `Bits`, little-endian bytes → a bit string of `len` bits (`None`: 8 per byte).
    Bits(Option<usize>),
    /// Geometry / Geography {wkb, srid} → the WKB bytes.
    Wkb,
    /// Point {x, y, …} → point.
    Point,
}

/// A column's PostgreSQL target type and how its values travel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ColumnType {
    pub ddl: String,
    pub wire: Wire,
    pub conv: Conv,
}

impl ColumnType {
    fn new(ddl: impl Into<String>, wire: Wire, conv: Conv) -> Self {
        Self {
            ddl: ddl.into(),
            wire,
            conv,
        }
    }
}

/// `target` without the length of a character or bit string type: an explicit cast to
/// `character varying(3)` (or `character(3)`, `bit varying(3)`) cuts a longer value silently,
/// while the assignment to the column refuses it, as a value the column cannot hold should be.
pub(crate) fn unbounded(target: &str) -> String {
    let (base, arrays) = match target.find("[]") {
        Some(i) => target.split_at(i),
        None => (target, ""),
    };
    let unbounded = [
        ("character varying(", "character varying"),
        ("character(", "bpchar"),
        ("bit varying(", "bit varying"),
        ("bit(", "bit varying"),
    ]
    .iter()
    .find(|(prefix, _)| base.starts_with(prefix) && base.ends_with(')'))
    .map(|(_, to)| *to);
    match unbounded {
        Some(to) => format!("{to}{arrays}"),
        None => target.to_owned(),
    }
}

pub(crate) fn connect_name(field: &Field) -> Option<&str> {
    field.metadata().get("connect.name").map(String::as_str)
}

fn connect_param(field: &Field, name: &str) -> Option<String> {
    let params = field.metadata().get("connect.parameters")?;
    let v: serde_json::Value = serde_json::from_str(params).ok()?;
    match &v[name] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The PostgreSQL type of a column holding `field`'s values, or why there is none.
pub(crate) fn column_type(field: &Field) -> Result<ColumnType, String> {
    use ColumnType as C;
    let dt = field.data_type();
    let by_name = match (connect_name(field), dt) {
        (Some("io.debezium.data.Uuid"), DataType::Utf8) => Some(("uuid", Conv::Plain)),
        (Some("io.debezium.data.Json"), DataType::Utf8) => Some(("jsonb", Conv::Plain)),
        (Some("io.debezium.data.Xml"), DataType::Utf8) => Some(("xml", Conv::Plain)),
        (Some("io.debezium.time.ZonedTime"), DataType::Utf8) => {
            Some(("time with time zone", Conv::Plain))
        }
        (Some("io.debezium.time.Interval"), DataType::Utf8) => Some(("interval", Conv::Plain)),
        (Some("io.debezium.data.Tsvector"), DataType::Utf8) => Some(("tsvector", Conv::Plain)),
        (Some("io.debezium.data.Bits"), DataType::Binary) => {
            let len = connect_param(field, "length").and_then(|l| l.parse().ok());
            Some(("bit varying", Conv::Bits(len)))
        }
        (Some("io.debezium.data.VariableScaleDecimal"), DataType::Struct(_)) => {
            return Ok(C::new("numeric", Wire::Numeric, Conv::VariableScale));
        }
        _ => None,
    };
    if let Some((ddl, conv)) = by_name {
        return Ok(C::new(ddl, Wire::Text, conv));
    }
    Ok(match dt {
        DataType::Boolean => C::new("boolean", Wire::Bool, Conv::Plain),
        DataType::Int8 | DataType::Int16 => C::new("smallint", Wire::Int2, Conv::Plain),
        DataType::Int32 => C::new("integer", Wire::Int4, Conv::Plain),
        DataType::Int64 => C::new("bigint", Wire::Int8, Conv::Plain),
        DataType::Float32 => C::new("real", Wire::Float4, Conv::Plain),
        DataType::Float64 => C::new("double precision", Wire::Float8, Conv::Plain),
        DataType::Utf8 => C::new("text", Wire::Text, Conv::Plain),
        DataType::Binary => C::new("bytea", Wire::Bytea, Conv::Plain),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            let ddl = if *s < 0 || i16::from(*s) > i16::from(*p) {
                "numeric".to_owned()
            } else {
                format!("numeric({p},{s})")
            };
            C::new(ddl, Wire::Numeric, Conv::Decimal)
        }
        DataType::Date32 => C::new("date", Wire::Date, Conv::Plain),
        DataType::Time32(TimeUnit::Millisecond) | DataType::Time64(_) => {
            C::new("time", Wire::Time, Conv::Plain)
        }
        DataType::Timestamp(_, None) => C::new("timestamp", Wire::Timestamp, Conv::Plain),
        DataType::Timestamp(_, Some(_)) => C::new("timestamptz", Wire::Timestamptz, Conv::Plain),
        DataType::Duration(TimeUnit::Microsecond | TimeUnit::Nanosecond) => {
            C::new("interval", Wire::Interval, Conv::Plain)
        }
        DataType::Struct(fields) => {
            match connect_name(field) {
                Some(
                    "io.debezium.data.geometry.Geometry" | "io.debezium.data.geometry.Geography",
                ) if fields.find("wkb").is_some() => C::new("bytea", Wire::Bytea, Conv::Wkb),
                Some("io.debezium.data.geometry.Point")
                    if fields.find("x").is_some() && fields.find("y").is_some() =>
                {
                    C::new("point", Wire::Point, Conv::Point)
                }
                _ => return Err(unsupported(field)),
            }
        }
        DataType::List(elem) => {
            let e = column_type(elem)?;
            if matches!(e.wire, Wire::Array(_)) || !matches!(e.conv, Conv::Plain | Conv::Decimal) {
                return Err(unsupported(field));
            }
            C::new(
                format!("{}[]", e.ddl),
                Wire::Array(Box::new(e.wire)),
                e.conv,
            )
        }
        _ => return Err(unsupported(field)),
    })
}

fn unsupported(field: &Field) -> String {
    format!(
        "column `{}` has type {}{} that the replica has no PostgreSQL type for",
        field.name(),
        field.data_type(),
        connect_name(field)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn named(name: &str, dt: DataType, connect: &str) -> Field {
        Field::new(name, dt, true).with_metadata(HashMap::from([(
            "connect.name".to_owned(),
            connect.to_owned(),
        )]))
    }

    fn ddl(f: &Field) -> String {
        column_type(f).unwrap().ddl
    }

    #[test]
    fn plain_arrow_types() {
        let f = |dt| Field::new("c", dt, true);
        assert_eq!(ddl(&f(DataType::Int16)), "smallint");
        assert_eq!(ddl(&f(DataType::Int64)), "bigint");
        assert_eq!(ddl(&f(DataType::Float64)), "double precision");
        assert_eq!(ddl(&f(DataType::Decimal128(10, 2))), "numeric(10,2)");
        assert_eq!(ddl(&f(DataType::Decimal256(64, 2))), "numeric(64,2)");
        assert_eq!(ddl(&f(DataType::Decimal128(10, -2))), "numeric");
        assert_eq!(
            ddl(&f(DataType::Timestamp(TimeUnit::Microsecond, None))),
            "timestamp"
        );
        assert_eq!(
            ddl(&f(DataType::Timestamp(
                TimeUnit::Microsecond,
                Some("UTC".into())
            ))),
            "timestamptz"
        );
        assert_eq!(ddl(&f(DataType::Time32(TimeUnit::Millisecond))), "time");
        assert_eq!(
            ddl(&f(DataType::Duration(TimeUnit::Microsecond))),
            "interval"
        );
        let list = DataType::List(Field::new("item", DataType::Int32, true).into());
        let t = column_type(&f(list)).unwrap();
        assert_eq!(
            (t.ddl.as_str(), t.wire.sql()),
            ("integer[]", "integer[]".into())
        );
        assert!(column_type(&f(DataType::Duration(TimeUnit::Second))).is_err());
    }

    #[test]
    fn debezium_semantic_types_by_connect_name() {
        let t = column_type(&named("u", DataType::Utf8, "io.debezium.data.Uuid")).unwrap();
        assert_eq!((t.ddl.as_str(), t.wire), ("uuid", Wire::Text));
        assert_eq!(
            ddl(&named("j", DataType::Utf8, "io.debezium.data.Json")),
            "jsonb"
        );
        assert_eq!(
            ddl(&named("x", DataType::Utf8, "io.debezium.data.Xml")),
            "xml"
        );
        assert_eq!(
            ddl(&named("e", DataType::Utf8, "io.debezium.data.Enum")),
            "text"
        );
        let bits =
            named("b", DataType::Binary, "io.debezium.data.Bits").with_metadata(HashMap::from([
                ("connect.name".into(), "io.debezium.data.Bits".into()),
                ("connect.parameters".into(), r#"{"length":"4"}"#.into()),
            ]));
        let t = column_type(&bits).unwrap();
        assert_eq!(
            (t.ddl.as_str(), t.conv),
            ("bit varying", Conv::Bits(Some(4)))
        );
        let vsd = DataType::Struct(
            vec![
                Field::new("scale", DataType::Int32, false),
                Field::new("value", DataType::Binary, false),
            ]
            .into(),
        );
        assert_eq!(
            ddl(&named("n", vsd, "io.debezium.data.VariableScaleDecimal")),
            "numeric"
        );
        let geo = DataType::Struct(
            vec![
                Field::new("wkb", DataType::Binary, false),
                Field::new("srid", DataType::Int32, true),
            ]
            .into(),
        );
        assert_eq!(
            ddl(&named(
                "g",
                geo.clone(),
                "io.debezium.data.geometry.Geometry"
            )),
            "bytea"
        );
        assert!(column_type(&Field::new("s", geo, true)).is_err());
    }

    #[test]
    fn casts_leave_lengths_to_the_column() {
        assert_eq!(unbounded("character varying(20)"), "character varying");
        assert_eq!(unbounded("character(5)"), "bpchar");
        assert_eq!(unbounded("character(5)[]"), "bpchar[]");
        assert_eq!(unbounded("bit(4)"), "bit varying");
        assert_eq!(unbounded("bit varying(8)"), "bit varying");
        assert_eq!(unbounded("numeric(10,2)"), "numeric(10,2)");
        assert_eq!(
            unbounded("timestamp(3) without time zone"),
            "timestamp(3) without time zone"
        );
        assert_eq!(unbounded("inet"), "inet");
    }
}
