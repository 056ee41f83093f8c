//! Kafka Connect's JsonConverter with `schemas.enable=true`: each record is
//! `{"schema": <Connect schema>, "payload": <value>}`. The Connect schema becomes the Avro schema
//! the Avro converter would have registered for it (the same `connect.*` attributes), and the
//! payload becomes an Avro datum of that schema, so JSON topics go through the same validator,
//! Arrow decoder and Debezium types as Avro ones.
//!
//! The schema conversion runs once per distinct schema (by fingerprint); the payload is
//! converted per record.
//!
//! With `schemas.enable=false` the record is the bare value: its schema comes from
//! configuration, or is inferred from the value ([`Record::inferred`]).
//!
//! Limits: bytes and decimals must be base64 (JsonConverter's default `decimal.format`);
//! maps with non-string keys are not supported.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::avro::encode::{bytes, long};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a schemas.enable=true envelope: {0}")]
    NoEnvelope(&'static str),
    #[error("Connect schema: {0}")]
    Schema(String),
    #[error("payload at {path}: {reason}")]
    Payload { path: String, reason: String },
}

/// A `schemas.enable=true` record split into its Connect schema and its payload.
#[derive(Debug, Clone)]
pub struct Record {
    /// Identifies the Connect schema: equal schemas, equal fingerprints.
    pub fingerprint: u64,
    schema: Value,
    payload: Value,
}

/// Splits a `schemas.enable=true` record.
pub fn parse(bytes: &[u8]) -> Result<Record, JsonError> {
    let mut doc: Value =
        serde_json::from_slice(bytes).map_err(|e| JsonError::NotJson(e.to_string()))?;
    let obj = doc
        .as_object_mut()
        .ok_or(JsonError::NoEnvelope("not an object"))?;
    let schema = obj
        .remove("schema")
        .ok_or(JsonError::NoEnvelope("no \"schema\""))?;
    let payload = obj
        .remove("payload")
        .ok_or(JsonError::NoEnvelope("no \"payload\""))?;
    Ok(Record::new(schema, payload))
}

/// The Connect schema a JSON value suggests.
fn infer(value: &Value, optional: bool) -> Value {
    let mut schema = match value {
        Value::Null | Value::String(_) => json!({"type": "string"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(n) if n.is_i64() => json!({"type": "int64"}),
        Value::Number(_) => json!({"type": "float64"}),
        Value::Array(items) => {
            let first = items.iter().find(|i| !i.is_null()).unwrap_or(&Value::Null);
            json!({"type": "array", "items": infer(first, true)})
        }
        Value::Object(fields) => {
            let fields: Vec<Value> = fields
                .iter()
                .map(|(name, v)| {
                    let mut f = infer(v, true);
                    f["field"] = json!(name);
                    f
                })
                .collect();
            json!({"type": "struct", "fields": fields})
        }
    };
    schema["optional"] = json!(optional);
    schema
}

impl Record {
    /// A plain JSON value (JsonConverter with `schemas.enable=false`) with the Connect schema
    /// the user configured for it.
    pub fn with_schema(schema: &Value, bytes: &[u8]) -> Result<Self, JsonError> {
        let payload =
            serde_json::from_slice(bytes).map_err(|e| JsonError::NotJson(e.to_string()))?;
        Ok(Self::new(schema.clone(), payload))
    }

    /// A plain JSON value with a Connect schema inferred from the value itself: integers as
    /// int64, other numbers as float64, every field optional, nulls as strings. Decimals and
    /// timestamps stay as the JSON has them (base64 text, numbers); configure a schema to get
    /// their real types. Records whose shapes differ get different schemas.
    pub fn inferred(bytes: &[u8]) -> Result<Self, JsonError> {
        let payload: Value =
            serde_json::from_slice(bytes).map_err(|e| JsonError::NotJson(e.to_string()))?;
        let obj = payload.as_object().ok_or(JsonError::NoEnvelope(
            "a plain JSON record must be an object",
        ))?;
        // Name an envelope as Debezium does, so it is read as one.
        let name = if obj.contains_key("op")
            && (obj.contains_key("after") || obj.contains_key("before"))
        {
            "lakesink.inferred.Envelope"
        } else {
            "lakesink.inferred.Value"
        };
        let mut schema = infer(&payload, false);
        schema["name"] = json!(name);
        Ok(Self::new(schema, payload))
    }

    fn new(schema: Value, payload: Value) -> Self {
        let mut hasher = DefaultHasher::new();
        schema.hash(&mut hasher);
        Self {
            fingerprint: hasher.finish(),
            schema,
            payload,
        }
    }

    /// The Avro schema the Avro converter would have registered for this Connect schema. Needed
    /// once per fingerprint.
    pub fn avro_schema(&self) -> Result<Value, JsonError> {
        to_avro(&self.schema, &mut 0)
    }

    /// The payload as an Avro datum of [`Record::avro_schema`].
    pub fn datum(&self) -> Result<Vec<u8>, JsonError> {
        let mut out = Vec::with_capacity(256);
        encode(&self.schema, &self.payload, "$", &mut out)?;
        Ok(out)
    }
}

fn schema_err(msg: impl Into<String>) -> JsonError {
    JsonError::Schema(msg.into())
}

fn kind(schema: &Value) -> Result<&str, JsonError> {
    schema
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| schema_err(format!("no type in {schema}")))
}

fn optional(schema: &Value) -> bool {
    schema
        .get("optional")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// An Avro name from a Connect name (`demo.public.t.Value`), or a generated one.
fn avro_name(schema: &Value, names: &mut usize) -> String {
    match schema.get("name").and_then(Value::as_str) {
        Some(name) => name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
        None => {
            *names += 1;
            format!("ConnectStruct{names}")
        }
    }
}

/// The Avro schema AvroData would produce for a Connect schema.
fn to_avro(schema: &Value, names: &mut usize) -> Result<Value, JsonError> {
    let name = schema.get("name").and_then(Value::as_str);
    let params = schema.get("parameters").cloned();
    let mut t = match kind(schema)? {
        "int8" | "int16" => json!({"type": "int", "connect.type": kind(schema)?}),
        "int32" => json!({"type": "int"}),
        "int64" => json!({"type": "long"}),
        "float" | "float32" => json!({"type": "float"}),
        "double" | "float64" => json!({"type": "double"}),
        "boolean" => json!({"type": "boolean"}),
        "string" => json!({"type": "string"}),
        "bytes" if name == Some("org.apache.kafka.connect.data.Decimal") => {
            let p = params.as_ref();
            let int_param = |key: &str| {
                p.and_then(|p| p.get(key))
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u32>().ok())
            };
            let scale = int_param("scale")
                .ok_or_else(|| schema_err("Decimal without a scale parameter"))?;
            let precision = int_param("connect.decimal.precision").unwrap_or(64);
            json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
        }
        "bytes" => json!({"type": "bytes"}),
        "array" => {
            let items = schema
                .get("items")
                .ok_or_else(|| schema_err("array without items"))?;
            json!({"type": "array", "items": nullable(items, names)?})
        }
        "map" => {
            let keys = schema
                .get("keys")
                .ok_or_else(|| schema_err("map without keys"))?;
            if kind(keys)? != "string" {
                return Err(schema_err("maps with non-string keys are not supported"));
            }
            let values = schema
                .get("values")
                .ok_or_else(|| schema_err("map without values"))?;
            json!({"type": "map", "values": nullable(values, names)?})
        }
        "struct" => {
            let fields = schema
                .get("fields")
                .and_then(Value::as_array)
                .ok_or_else(|| schema_err("struct without fields"))?;
            let fields = fields
                .iter()
                .map(|f| {
                    let fname = f
                        .get("field")
                        .and_then(Value::as_str)
                        .ok_or_else(|| schema_err("field without a name"))?;
                    let mut field = json!({"name": fname, "type": nullable(f, names)?});
                    if optional(f) {
                        field["default"] = Value::Null;
                    }
                    Ok(field)
                })
                .collect::<Result<Vec<_>, JsonError>>()?;
            json!({"type": "record", "name": avro_name(schema, names), "fields": fields})
        }
        other => return Err(schema_err(format!("unknown Connect type {other:?}"))),
    };
    let attrs = t.as_object_mut().ok_or_else(|| schema_err("internal"))?;
    if let Some(name) = name {
        attrs.insert("connect.name".into(), json!(name));
    }
    if let Some(v) = schema.get("version") {
        attrs.insert("connect.version".into(), v.clone());
    }
    if let Some(p) = params {
        attrs.insert("connect.parameters".into(), p);
    }
    if let Some(d) = schema.get("default").filter(|d| !d.is_null()) {
        attrs.insert("connect.default".into(), avro_default(schema, d)?);
    }
    Ok(t)
}

/// A Connect default as the Avro converter writes `connect.default`, so JSON topics carry the
/// same defaults to the replica as Avro ones: bytes (base64 in JsonConverter's JSON) as a
/// string of one character per byte, everything else as JSON has it.
fn avro_default(schema: &Value, default: &Value) -> Result<Value, JsonError> {
    if kind(schema)? != "bytes" {
        return Ok(default.clone());
    }
    let text = default
        .as_str()
        .ok_or_else(|| schema_err(format!("a bytes default {default} is not base64 text")))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| schema_err(format!("a bytes default is not base64: {e}")))?;
    Ok(Value::String(raw.into_iter().map(char::from).collect()))
}

/// `["null", T]` for an optional Connect schema.
fn nullable(schema: &Value, names: &mut usize) -> Result<Value, JsonError> {
    let t = to_avro(schema, names)?;
    Ok(if optional(schema) {
        json!(["null", t])
    } else {
        t
    })
}

/// A JSON float as JsonConverter writes it: a number, or (Jackson's way for values JSON has no
/// number for) the string `"NaN"`, `"Infinity"` or `"-Infinity"`.
fn float(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => value.as_f64(),
    }
}

/// Encodes `value` as the Avro datum of `to_avro(schema)`.
fn encode(schema: &Value, value: &Value, path: &str, out: &mut Vec<u8>) -> Result<(), JsonError> {
    let bad = |reason: String| JsonError::Payload {
        path: path.to_owned(),
        reason,
    };
    if optional(schema) {
        if value.is_null() {
            long(out, 0);
            return Ok(());
        }
        long(out, 1);
    } else if value.is_null() {
        return Err(bad("null for a required field".into()));
    }
    let not_a_number = || bad(format!("{value} is not a number"));
    match kind(schema)? {
        "int8" | "int16" | "int32" | "int64" => {
            let n = value
                .as_i64()
                .ok_or_else(|| bad(format!("{value} is not an integer")))?;
            long(out, n);
        }
        // The shortest decimal of an f32, read exactly as an f64, rounds back to that f32.
        "float" | "float32" => {
            out.extend((float(value).ok_or_else(not_a_number)? as f32).to_le_bytes())
        }
        "double" | "float64" => out.extend(float(value).ok_or_else(not_a_number)?.to_le_bytes()),
        "boolean" => out.push(u8::from(
            value
                .as_bool()
                .ok_or_else(|| bad(format!("{value} is not a boolean")))?,
        )),
        "string" => bytes(
            out,
            value
                .as_str()
                .ok_or_else(|| bad(format!("{value} is not a string")))?
                .as_bytes(),
        ),
        "bytes" => {
            let text = value
                .as_str()
                .ok_or_else(|| bad(format!("{value} is not base64 text")))?;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| bad(format!("not base64: {e}")))?;
            bytes(out, &raw);
        }
        "array" => {
            let items = value
                .as_array()
                .ok_or_else(|| bad(format!("{value} is not an array")))?;
            let item_schema = schema
                .get("items")
                .ok_or_else(|| schema_err("array without items"))?;
            if !items.is_empty() {
                long(out, items.len() as i64);
                for (i, item) in items.iter().enumerate() {
                    encode(item_schema, item, &format!("{path}[{i}]"), out)?;
                }
            }
            long(out, 0);
        }
        "map" => {
            let entries = value
                .as_object()
                .ok_or_else(|| bad(format!("{value} is not an object")))?;
            let value_schema = schema
                .get("values")
                .ok_or_else(|| schema_err("map without values"))?;
            if !entries.is_empty() {
                long(out, entries.len() as i64);
                for (k, v) in entries {
                    bytes(out, k.as_bytes());
                    encode(value_schema, v, &format!("{path}.{k}"), out)?;
                }
            }
            long(out, 0);
        }
        "struct" => {
            let obj: &Map<String, Value> = value
                .as_object()
                .ok_or_else(|| bad(format!("{value} is not an object")))?;
            let fields = schema
                .get("fields")
                .and_then(Value::as_array)
                .ok_or_else(|| schema_err("struct without fields"))?;
            for f in fields {
                let name = f
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or_else(|| schema_err("field without a name"))?;
                encode(
                    f,
                    obj.get(name).unwrap_or(&Value::Null),
                    &format!("{path}.{name}"),
                    out,
                )?;
            }
        }
        other => return Err(schema_err(format!("unknown Connect type {other:?}"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro::{AvroBatchDecoder, WriterSchema};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Decimal128Type, Int16Type, TimestampMicrosecondType};

    /// A record as Debezium with JsonConverter writes it (abridged envelope).
    fn record() -> Value {
        json!({
            "schema": {"type": "struct", "name": "demo.public.t.Envelope", "optional": false, "fields": [
                {"type": "struct", "name": "demo.public.t.Value", "optional": true, "field": "before", "fields": [
                    {"type": "int32", "optional": false, "field": "id"}]},
                {"type": "struct", "name": "demo.public.t.Value", "optional": true, "field": "after", "fields": [
                    {"type": "int32", "optional": false, "field": "id"}]},
                {"type": "int16", "optional": true, "field": "small"},
                {"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                 "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price"},
                {"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "at"},
                {"type": "array", "optional": true, "items": {"type": "string", "optional": true}, "field": "tags"},
                {"type": "string", "optional": false, "field": "op"}]},
            "payload": {"before": null, "after": {"id": 7}, "small": -3, "price": "MDk=", "at": 1_700_000_000_000_001_i64,
                        "tags": ["a", null], "op": "c"}
        })
    }

    fn convert(bytes: &[u8]) -> Result<(Record, Value, Vec<u8>), JsonError> {
        let r = parse(bytes)?;
        let (schema, datum) = (r.avro_schema()?, r.datum()?);
        Ok((r, schema, datum))
    }

    #[test]
    fn a_debezium_json_record_decodes_like_avro() {
        let (_, schema, datum) = convert(record().to_string().as_bytes()).unwrap();
        let schema = WriterSchema::parse_text(&schema.to_string()).unwrap();
        let mut dec = AvroBatchDecoder::new(&schema, 4).unwrap();
        dec.push(&datum).unwrap();
        let batch = dec.flush().unwrap().unwrap();
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        assert!(col("before").is_null(0));
        assert_eq!(col("small").as_primitive::<Int16Type>().value(0), -3);
        // "MDk=" is 0x3039 = 12345 unscaled.
        assert_eq!(
            col("price")
                .as_primitive::<Decimal128Type>()
                .value_as_string(0),
            "123.45"
        );
        assert_eq!(
            col("at")
                .as_primitive::<TimestampMicrosecondType>()
                .value(0),
            1_700_000_000_000_001
        );
        assert_eq!(col("op").as_string::<i32>().value(0), "c");
    }

    #[test]
    fn the_same_schema_has_the_same_fingerprint() {
        let a = parse(record().to_string().as_bytes()).unwrap();
        let mut other = record();
        other["payload"]["op"] = json!("u");
        let b = parse(other.to_string().as_bytes()).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        other["schema"]["fields"][6]["optional"] = json!(true);
        assert_ne!(
            a.fingerprint,
            parse(other.to_string().as_bytes()).unwrap().fingerprint
        );
    }

    #[test]
    fn plain_json_with_an_inferred_or_configured_schema() {
        let envelope = json!({"before": null, "after": {"id": 7, "name": "a", "score": 1.5, "tags": ["x"]},
            "source": {"db": "s"}, "op": "c", "ts_ms": 1_700_000_000_000_i64});
        let r = Record::inferred(envelope.to_string().as_bytes()).unwrap();
        let schema = WriterSchema::parse_text(&r.avro_schema().unwrap().to_string()).unwrap();
        assert!(
            matches!(&schema.root, crate::avro::Node::Record { name, .. } if name == "lakesink.inferred.Envelope")
        );
        let mut dec = AvroBatchDecoder::new(&schema, 4).unwrap();
        dec.push(&r.datum().unwrap()).unwrap();
        let batch = dec.flush().unwrap().unwrap();
        let after = batch.column_by_name("after").unwrap().as_struct();
        assert_eq!(
            after
                .column_by_name("id")
                .unwrap()
                .as_primitive::<arrow_array::types::Int64Type>()
                .value(0),
            7
        );
        assert!(batch.column_by_name("before").unwrap().is_null(0));

        let configured = json!({"type": "struct", "optional": false, "fields": [
            {"type": "int32", "optional": false, "field": "id"},
            {"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2"}, "field": "price"}]});
        let r = Record::with_schema(&configured, br#"{"id": 1, "price": "MDk="}"#).unwrap();
        let schema = WriterSchema::parse_text(&r.avro_schema().unwrap().to_string()).unwrap();
        let mut dec = AvroBatchDecoder::new(&schema, 4).unwrap();
        dec.push(&r.datum().unwrap()).unwrap();
        let batch = dec.flush().unwrap().unwrap();
        assert_eq!(col_decimal(&batch, "price"), "123.45");
        assert!(Record::inferred(b"[1]").is_err());
    }

    fn col_decimal(batch: &arrow_array::RecordBatch, name: &str) -> String {
        let c = batch.column_by_name(name).unwrap();
        match c.data_type() {
            arrow_schema::DataType::Decimal256(..) => c
                .as_primitive::<arrow_array::types::Decimal256Type>()
                .value_as_string(0),
            _ => c.as_primitive::<Decimal128Type>().value_as_string(0),
        }
    }

    #[test]
    fn floats_arrive_exact_with_jacksons_names_for_nan_and_infinity() {
        let schema = json!({"type": "struct", "optional": false, "fields": [
            {"type": "double", "optional": true, "field": "d"},
            {"type": "float", "optional": true, "field": "f"}]});
        let rows = [
            (r#""NaN""#, r#""NaN""#),
            (r#""Infinity""#, r#""-Infinity""#),
            (r#""-Infinity""#, r#""Infinity""#),
            // Off by an ulp or two with serde_json's default float parser.
            ("94247779607.69379", "3.4028235E38"),
            ("-0.0", "1.4E-45"),
            ("2.2250738585072014E-308", "-1.17549435E-38"),
        ];
        let mut dec = None;
        for (d, f) in rows {
            let payload = format!(r#"{{"d": {d}, "f": {f}}}"#);
            let r = Record::with_schema(&schema, payload.as_bytes()).unwrap();
            let dec = dec.get_or_insert_with(|| {
                let text = r.avro_schema().unwrap().to_string();
                AvroBatchDecoder::new(&WriterSchema::parse_text(&text).unwrap(), 8).unwrap()
            });
            dec.push(&r.datum().unwrap()).unwrap();
        }
        let batch = dec.unwrap().flush().unwrap().unwrap();
        let d = batch
            .column_by_name("d")
            .unwrap()
            .as_primitive::<arrow_array::types::Float64Type>();
        let f = batch
            .column_by_name("f")
            .unwrap()
            .as_primitive::<arrow_array::types::Float32Type>();
        assert!(d.value(0).is_nan() && f.value(0).is_nan());
        assert_eq!((d.value(1), f.value(1)), (f64::INFINITY, f32::NEG_INFINITY));
        assert_eq!((d.value(2), f.value(2)), (f64::NEG_INFINITY, f32::INFINITY));
        assert_eq!(d.value(3).to_bits(), 94247779607.69379f64.to_bits());
        assert_eq!(f.value(3), f32::MAX);
        assert!(d.value(4) == 0.0 && d.value(4).is_sign_negative());
        assert_eq!(f.value(4), f32::from_bits(1));
        assert_eq!(d.value(5), f64::MIN_POSITIVE);
        assert_eq!(f.value(5), -f32::MIN_POSITIVE);
        let r = Record::with_schema(&schema, br#"{"d": "nan", "f": 1}"#).unwrap();
        assert!(
            r.datum()
                .unwrap_err()
                .to_string()
                .contains("\"nan\" is not a number")
        );
    }

    #[test]
    fn defaults_are_carried_as_the_avro_converter_writes_them() {
        let schema = json!({"type": "struct", "optional": false, "fields": [
            {"type": "string", "optional": true, "default": "x 'y'", "field": "s"},
            {"type": "int32", "optional": true, "default": 7, "field": "n"},
            {"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2"}, "default": "MDk=", "field": "price"},
            {"type": "boolean", "optional": true, "field": "none"}]});
        let r = Record::with_schema(&schema, br#"{"s": "a"}"#).unwrap();
        let avro = r.avro_schema().unwrap();
        let attr = |i: usize| avro["fields"][i]["type"][1]["connect.default"].clone();
        assert_eq!(attr(0), json!("x 'y'"));
        assert_eq!(attr(1), json!(7));
        assert_eq!(
            attr(2),
            json!("\u{30}\u{39}"),
            "the bytes 0x30 0x39, one char each"
        );
        assert_eq!(attr(3), Value::Null);
        let decoded = WriterSchema::parse_text(&avro.to_string()).unwrap();
        let mut dec = AvroBatchDecoder::new(&decoded, 4).unwrap();
        dec.push(&r.datum().unwrap()).unwrap();
        let batch = dec.flush().unwrap().unwrap();
        let field = batch.schema().field_with_name("n").unwrap().clone();
        assert_eq!(
            field.metadata().get("connect.default").map(String::as_str),
            Some("7")
        );
    }

    #[test]
    fn bad_payloads_name_the_path() {
        let mut r = record();
        r["payload"]["after"]["id"] = json!("seven");
        let err = convert(r.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "payload at $.after.id: \"seven\" is not an integer"
        );
        assert!(matches!(parse(b"{}"), Err(JsonError::NoEnvelope(_))));
        assert!(matches!(parse(b"not json"), Err(JsonError::NotJson(_))));
    }
}
