//! The Arrow (Debezium) → PostgreSQL type map. `docs/replica.md` has it as a table.
//!
//! Each column has a target type (for `CREATE TABLE` / `ADD COLUMN`) and a wire type: what the
//! binary `COPY` carries. Where PostgreSQL's binary format is awkward (uuid, json, xml, bit
//! strings) the wire type is `text` and the upsert casts it from the staging table.
//!
//! Where the source is PostgreSQL and Debezium propagates the source column's type
//! (`column.propagate.source.type`), the column is created with the source's own type
//! (`character(5)`, `inet`, `int4range`, `ltree`, an enum, …) when the replica has it: see
//! [`SourceType`]. `json` and `jsonb` are told apart by that type alone, from any connector.

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
    /// A `ZonedTimestamp` kept as its text (SQL Server: up to nine fractional digits) →
    /// `timestamptz`, which PostgreSQL rounds to the microsecond.
    ZonedText,
}

/// A column's PostgreSQL target type and how its values travel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ColumnType {
    /// The type a new column gets; while `source` is unresolved, the fallback.
    pub ddl: String,
    pub wire: Wire,
    pub conv: Conv,
    /// The source's own type, which the replica may lack: looked up in its catalog when the
    /// column is created (`ddl::resolve_source_types`), else the column gets `ddl`.
    pub source: Option<SourceType>,
    /// The values are Debezium's JSON object for a PostgreSQL `hstore`
    /// (`hstore.handling.mode=json`): an `hstore` column takes them converted in SQL.
    pub hstore_json: bool,
    /// The values are a PostgreSQL `numeric` as `decimal.handling.mode=string` sends it, its
    /// specials spelled `NAN`, `POSITIVE_INFINITY`, `NEGATIVE_INFINITY`: a `numeric` column
    /// takes them spelled as PostgreSQL does, in SQL.
    pub numeric_text: bool,
}

/// A source column type the replica may not have (an extension's, a user enum, a multirange
/// on an older server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SourceType {
    /// A type by its SQL name (`inet`, `character(5)`, `ltree[]`), found with `to_regtype`.
    Named(String),
    /// A user enum, by the upper-case name Debezium sends (`MOOD`): the one enum of the
    /// replica of that name, case aside, that holds every label the schema allows.
    Enum {
        name: String,
        labels: Vec<String>,
        array: bool,
    },
}

impl ColumnType {
    fn new(ddl: impl Into<String>, wire: Wire, conv: Conv) -> Self {
        Self {
            ddl: ddl.into(),
            wire,
            conv,
            source: None,
            hstore_json: false,
            numeric_text: false,
        }
    }

    fn with_source(mut self, source: SourceType) -> Self {
        self.source = Some(source);
        self
    }

    /// SQL turning the staged (wire) value `expr` into this column's actual type `target` (as
    /// `format_type` writes it).
    pub(crate) fn cast_staged(&self, expr: &str, target: &str) -> String {
        if self.hstore_json && target == "hstore" {
            return format!(
                "CASE WHEN {expr} IS NULL THEN NULL ELSE (SELECT coalesce(hstore(array_agg(j.key), \
                 array_agg(j.value)), ''::hstore) FROM json_each_text({expr}::json) AS j) END"
            );
        }
        if self.numeric_text && target.starts_with("numeric") {
            return format!(
                "(CASE {expr} WHEN 'NAN' THEN 'NaN' WHEN 'POSITIVE_INFINITY' THEN 'Infinity' \
                 WHEN 'NEGATIVE_INFINITY' THEN '-Infinity' ELSE {expr} END)::{target}"
            );
        }
        format!("{expr}::{}", unbounded(target))
    }

    /// SQL turning a stored value `expr` of the actual type `target` back into the wire type.
    pub(crate) fn cast_stored(&self, expr: &str, target: &str) -> String {
        if self.hstore_json && target == "hstore" {
            return format!("hstore_to_json({expr})::text");
        }
        format!("{expr}::{}", self.wire.sql())
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

pub(crate) fn connect_param(field: &Field, name: &str) -> Option<String> {
    let params = field.metadata().get("connect.parameters")?;
    let v: serde_json::Value = serde_json::from_str(params).ok()?;
    match &v[name] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The parameter Debezium adds with `column.propagate.source.type` (or
/// `datatype.propagate.source.type`): the source column's type, upper case (`BPCHAR`, `INET`,
/// `_INET` for an array, an enum's own name).
const SOURCE_TYPE: &str = "__debezium.source.column.type";
const SOURCE_LENGTH: &str = "__debezium.source.column.length";
const SOURCE_SCALE: &str = "__debezium.source.column.scale";
/// Added beside it: the column's name as the source has it, before the Avro converter turned
/// what an Avro name cannot hold into `_` (`Some Note` sent as `Some_Note`).
pub(crate) const SOURCE_NAME: &str = "__debezium.source.column.name";

/// The replica's name for the column of `field`: the source's own where Debezium sends it
/// (as the Debezium JDBC sink does), else the field's.
pub(crate) fn column_name(field: &Field) -> String {
    source_name(field).unwrap_or_else(|| field.name().clone())
}

/// Whether Debezium says `field` holds a source column (it names the column).
pub(crate) fn is_column(field: &Field) -> bool {
    source_name(field).is_some()
}

/// The source column's name, where it is this field's: a named Avro type (PostGIS's
/// `Geometry` record, say) is defined once, with the parameters of the first column using it,
/// and shared by later columns of that type, whose fields then carry another column's name.
/// The field's own name is the source's with what Avro cannot hold turned into `_`.
fn source_name(field: &Field) -> Option<String> {
    connect_param(field, SOURCE_NAME).filter(|n| adjusted_from(field.name(), n))
}

/// Whether `field` can be `name` with some characters turned into `_`, as Avro converters
/// adjust names.
pub(crate) fn adjusted_from(field: &str, name: &str) -> bool {
    field.chars().count() == name.chars().count()
        && field
            .chars()
            .zip(name.chars())
            .all(|(f, n)| f == n || f == '_')
}

/// Types Debezium's PostgreSQL connector sends as their text form, which the replica can
/// cast that text back into.
const PG_TEXT_TYPES: &[&str] = &[
    "INET",
    "CIDR",
    "MACADDR",
    "MACADDR8",
    "INT4RANGE",
    "INT8RANGE",
    "NUMRANGE",
    "TSRANGE",
    "TSTZRANGE",
    "DATERANGE",
    "INT4MULTIRANGE",
    "INT8MULTIRANGE",
    "NUMMULTIRANGE",
    "TSMULTIRANGE",
    "TSTZMULTIRANGE",
    "DATEMULTIRANGE",
    "LTREE",
    "CITEXT",
];

/// The PostgreSQL type of a column holding `field`'s values, or why there is none.
/// `postgres`: the source is PostgreSQL (the envelope's `source` record says so), so its
/// column types, where Debezium propagates them, are the replica's to take.
pub(crate) fn column_type(field: &Field, postgres: bool) -> Result<ColumnType, String> {
    let t = debezium_type(field, postgres)?;
    Ok(if postgres {
        pg_source_type(field, t)
    } else {
        t
    })
}

/// The source's own type for a column Debezium sends as text (or `money` as a decimal).
fn pg_source_type(field: &Field, t: ColumnType) -> ColumnType {
    let (elem, array) = match field.data_type() {
        DataType::List(e) => (e.as_ref(), true),
        _ => (field, false),
    };
    let ltree = connect_name(elem) == Some("io.debezium.data.Ltree");
    let Some(source) = connect_param(field, SOURCE_TYPE).or_else(|| ltree.then(|| "LTREE".into()))
    else {
        return t;
    };
    let base = if array {
        match source.strip_prefix('_') {
            Some(b) => b,
            None => return t,
        }
    } else {
        source.as_str()
    };
    let brackets = if array { "[]" } else { "" };
    let text = t.wire == Wire::Text || t.wire == Wire::Array(Box::new(Wire::Text));
    let named = |name: String| t.clone().with_source(SourceType::Named(name));
    match base {
        "BPCHAR" if text && t.conv == Conv::Plain => {
            match connect_param(field, SOURCE_LENGTH).and_then(|l| l.parse::<u32>().ok()) {
                // Built in, so no lookup (`to_regtype` would drop the length, too).
                Some(n @ 1..=10_485_760) => ColumnType {
                    ddl: format!("character({n}){brackets}"),
                    ..t
                },
                _ => t,
            }
        }
        "MONEY" if matches!(t.conv, Conv::Decimal) && !array => ColumnType {
            ddl: "money".into(),
            ..t
        },
        // `decimal.handling.mode=string`: the decimal's text, or a special's name.
        "NUMERIC" if text && t.conv == Conv::Plain && !array && connect_name(elem).is_none() => {
            let precision = connect_param(field, SOURCE_LENGTH).and_then(|l| l.parse::<u16>().ok());
            let scale = connect_param(field, SOURCE_SCALE).and_then(|s| s.parse::<i16>().ok());
            ColumnType {
                ddl: match (precision, scale) {
                    (Some(p @ 1..=1000), Some(s)) => format!("numeric({p},{s})"),
                    _ => "numeric".into(),
                },
                numeric_text: true,
                ..t
            }
        }
        _ if !text || t.conv != Conv::Plain => t,
        b if PG_TEXT_TYPES.contains(&b) && connect_name(elem).is_none_or(|_| ltree) => {
            named(format!("{}{brackets}", b.to_ascii_lowercase()))
        }
        "HSTORE" if t.hstore_json => named(format!("hstore{brackets}")),
        name if connect_name(elem) == Some("io.debezium.data.Enum") => {
            match connect_param(elem, "allowed") {
                Some(allowed) => t.clone().with_source(SourceType::Enum {
                    name: name.to_owned(),
                    labels: allowed.split(',').map(str::to_owned).collect(),
                    array,
                }),
                None => t,
            }
        }
        _ => t,
    }
}

/// The type from the Debezium and Arrow types alone (and, for JSON, the source type).
fn debezium_type(field: &Field, postgres: bool) -> Result<ColumnType, String> {
    use ColumnType as C;
    let dt = field.data_type();
    if connect_name(field) == Some("io.debezium.data.Json") && *dt == DataType::Utf8 {
        // `json` keeps the text as written (whitespace, key order, duplicate keys, `\u0000`),
        // which `jsonb` cannot; so `jsonb` only where the source says it was one.
        return Ok(match connect_param(field, SOURCE_TYPE).as_deref() {
            Some("JSONB") => C::new("jsonb", Wire::Text, Conv::Plain),
            Some("HSTORE") if postgres => C {
                hstore_json: true,
                ..C::new("json", Wire::Text, Conv::Plain)
            },
            _ => C::new("json", Wire::Text, Conv::Plain),
        });
    }
    let by_name = match (connect_name(field), dt) {
        (Some("io.debezium.data.Uuid"), DataType::Utf8) => Some(("uuid", Conv::Plain)),
        (Some("io.debezium.data.Xml"), DataType::Utf8) => Some(("xml", Conv::Plain)),
        (Some("io.debezium.time.ZonedTime"), DataType::Utf8) => {
            Some(("time with time zone", Conv::Plain))
        }
        (Some("io.debezium.time.Interval"), DataType::Utf8) => Some(("interval", Conv::Plain)),
        (Some("io.debezium.time.ZonedTimestamp"), DataType::Utf8) => {
            Some(("timestamptz", Conv::ZonedText))
        }
        (Some("io.debezium.data.Tsvector"), DataType::Utf8) => Some(("tsvector", Conv::Plain)),
        (Some("io.debezium.data.Bits"), DataType::Binary) => {
            let len = connect_param(field, "length").and_then(|l| l.parse().ok());
            Some(("bit varying", Conv::Bits(len)))
        }
        (Some("io.debezium.data.VariableScaleDecimal"), DataType::Struct(_)) => {
            return Ok(C::new("numeric", Wire::Numeric, Conv::VariableScale));
        }
        // A decimal wider than Arrow's 76 digits, decoded as {scale, value} (PostgreSQL's
        // `numeric(p, s)` up to p = 1000).
        (Some("org.apache.kafka.connect.data.Decimal"), DataType::Struct(_)) => {
            let ddl = match (
                connect_param(field, "connect.decimal.precision"),
                connect_param(field, "scale"),
            ) {
                (Some(p), Some(s)) if p.parse::<u16>().is_ok() && s.parse::<i16>().is_ok() => {
                    format!("numeric({p},{s})")
                }
                _ => "numeric".to_owned(),
            };
            return Ok(C::new(ddl, Wire::Numeric, Conv::VariableScale));
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
            let mut e = debezium_type(elem, postgres)?;
            if e.ddl == "json" && connect_param(field, SOURCE_TYPE).as_deref() == Some("_JSONB") {
                e.ddl = "jsonb".into();
            }
            if matches!(e.wire, Wire::Array(_)) || !matches!(e.conv, Conv::Plain | Conv::Decimal) {
                return Err(unsupported(field));
            }
            C {
                hstore_json: e.hstore_json,
                ..C::new(
                    format!("{}[]", e.ddl),
                    Wire::Array(Box::new(e.wire)),
                    e.conv,
                )
            }
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
        column_type(f, false).unwrap().ddl
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
        let t = column_type(&f(list), false).unwrap();
        assert_eq!(
            (t.ddl.as_str(), t.wire.sql()),
            ("integer[]", "integer[]".into())
        );
        assert!(column_type(&f(DataType::Duration(TimeUnit::Second)), false).is_err());
    }

    #[test]
    fn zoned_timestamps_kept_as_text_are_timestamptz_sent_as_text() {
        let z = "io.debezium.time.ZonedTimestamp";
        let t = column_type(&named("z", DataType::Utf8, z), false).unwrap();
        assert_eq!(
            (t.ddl.as_str(), t.wire, t.conv),
            ("timestamptz", Wire::Text, Conv::ZonedText)
        );
        let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let t = column_type(&named("z", utc, z), false).unwrap();
        assert_eq!((t.ddl.as_str(), t.wire), ("timestamptz", Wire::Timestamptz));
    }

    #[test]
    fn debezium_semantic_types_by_connect_name() {
        let t = column_type(&named("u", DataType::Utf8, "io.debezium.data.Uuid"), false).unwrap();
        assert_eq!((t.ddl.as_str(), t.wire), ("uuid", Wire::Text));
        assert_eq!(
            ddl(&named("j", DataType::Utf8, "io.debezium.data.Json")),
            "json"
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
        let t = column_type(&bits, false).unwrap();
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
        assert!(column_type(&Field::new("s", geo, true), false).is_err());
    }

    /// A field as Debezium sends it with `column.propagate.source.type`.
    fn propagated(dt: DataType, connect: Option<&str>, source: &str, length: &str) -> Field {
        let mut meta = HashMap::from([(
            "connect.parameters".to_owned(),
            serde_json::json!({
                "__debezium.source.column.type": source,
                "__debezium.source.column.length": length,
                "__debezium.source.column.scale": "0",
                "allowed": "sad,ok,happy",
            })
            .to_string(),
        )]);
        if let Some(c) = connect {
            meta.insert("connect.name".into(), c.into());
        }
        Field::new("c", dt, true).with_metadata(meta)
    }

    #[test]
    fn json_is_json_unless_the_source_says_jsonb() {
        let json = Some("io.debezium.data.Json");
        for pg in [false, true] {
            let t = column_type(&propagated(DataType::Utf8, json, "JSON", "0"), pg).unwrap();
            assert_eq!((t.ddl.as_str(), t.source), ("json", None));
            let t = column_type(&propagated(DataType::Utf8, json, "JSONB", "0"), pg).unwrap();
            assert_eq!((t.ddl.as_str(), t.source), ("jsonb", None));
        }
        let elem = named("item", DataType::Utf8, "io.debezium.data.Json");
        let jsonb_array = propagated(DataType::List(elem.into()), None, "_JSONB", "0");
        assert_eq!(column_type(&jsonb_array, true).unwrap().ddl, "jsonb[]");
        // hstore (hstore.handling.mode=json) is JSON text: json, or hstore where it exists.
        let hs = column_type(&propagated(DataType::Utf8, json, "HSTORE", "0"), true).unwrap();
        assert_eq!(
            (hs.ddl.as_str(), hs.source.clone(), hs.hstore_json),
            ("json", Some(SourceType::Named("hstore".into())), true)
        );
        assert_eq!(
            hs.cast_staged("s.c", "jsonb"),
            "s.c::jsonb",
            "an hstore column made jsonb by an older lakesink still takes the JSON"
        );
        assert!(
            hs.cast_staged("s.c", "hstore")
                .contains("json_each_text(s.c::json)")
        );
        assert_eq!(hs.cast_stored("o.c", "hstore"), "hstore_to_json(o.c)::text");
    }

    #[test]
    fn postgres_source_types_where_the_source_is_postgresql() {
        let src = |dt: DataType, connect, source, length, pg| {
            column_type(&propagated(dt, connect, source, length), pg)
                .unwrap()
                .source
        };
        let by_name = |s: &str| Some(SourceType::Named(s.into()));
        let ddl = |dt: DataType, source, length, pg| {
            column_type(&propagated(dt, None, source, length), pg)
                .unwrap()
                .ddl
        };
        assert_eq!(ddl(DataType::Utf8, "BPCHAR", "5", true), "character(5)");
        for (source, ty) in [
            ("INET", "inet"),
            ("CIDR", "cidr"),
            ("MACADDR", "macaddr"),
            ("MACADDR8", "macaddr8"),
            ("INT4RANGE", "int4range"),
            ("TSTZRANGE", "tstzrange"),
            ("CITEXT", "citext"),
        ] {
            assert_eq!(
                src(DataType::Utf8, None, source, "2147483647", true),
                by_name(ty)
            );
        }
        let ltree = Some("io.debezium.data.Ltree");
        assert_eq!(
            src(DataType::Utf8, ltree, "LTREE", "0", true),
            by_name("ltree")
        );
        let mo = src(
            DataType::Utf8,
            Some("io.debezium.data.Enum"),
            "MOOD",
            "2147483647",
            true,
        );
        assert_eq!(
            mo,
            Some(SourceType::Enum {
                name: "MOOD".into(),
                labels: vec!["sad".into(), "ok".into(), "happy".into()],
                array: false
            })
        );
        let money = DataType::Decimal256(64, 2);
        assert_eq!(ddl(money.clone(), "MONEY", "0", true), "money");
        let list = DataType::List(Field::new("item", DataType::Utf8, true).into());
        assert_eq!(ddl(list.clone(), "_BPCHAR", "3", true), "character(3)[]");
        assert_eq!(src(list, None, "_INET", "0", true), by_name("inet[]"));
        // Not from PostgreSQL (SQL Server has MONEY too, MySQL CHAR), or not the source's
        // own text: the Debezium type's column, as before.
        assert_eq!(ddl(DataType::Utf8, "BPCHAR", "5", false), "text");
        assert_eq!(ddl(money, "MONEY", "0", false), "numeric(64,2)");
        assert_eq!(src(DataType::Utf8, None, "VARCHAR", "5", true), None);
        assert_eq!(src(DataType::Utf8, None, "TEXT", "0", true), None);
        assert_eq!(
            src(
                DataType::Utf8,
                Some("io.debezium.data.Uuid"),
                "INET",
                "0",
                true
            ),
            None
        );
        assert_eq!(src(DataType::Int32, None, "INET", "0", true), None);
        // Fallbacks are what the Debezium type gives.
        let t = column_type(&propagated(DataType::Utf8, None, "INET", "0"), true).unwrap();
        assert_eq!((t.ddl.as_str(), t.wire), ("text", Wire::Text));
        // Without propagation an Ltree is still PostgreSQL's.
        assert_eq!(
            column_type(&named("l", DataType::Utf8, "io.debezium.data.Ltree"), true)
                .unwrap()
                .source,
            by_name("ltree")
        );
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
