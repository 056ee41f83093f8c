//! A writer schema as the registry returns it (root text plus named references) turned into one
//! self-contained Avro schema: each named type defined at its first use and referred to by full
//! name afterwards, which is what arrow-avro parses; and a compact tree for the validator.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::registry::ResolvedSchema;

/// The shape of an Avro schema, enough to walk a datum.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    /// Debezium's `io.debezium.time.ZonedTimestamp`: an ISO-8601 string with an offset,
    /// decoded to a UTC timestamp in microseconds.
    ZonedTimestamp,
    /// A ZonedTimestamp kept as the text Debezium sent (SQL Server, whose `datetimeoffset(7)`
    /// has a digit past the microsecond): checked to parse, with up to nine fractional digits.
    /// Never parsed from a schema: [`Node::zoned_as_text`] makes it.
    ZonedText,
    /// A string with Avro's `uuid` logical type.
    Uuid,
    /// Avro's `decimal` logical type on bytes (`fixed: None`) or on a fixed: its two's-complement
    /// value must fit `width` bytes (16 up to precision 38, else 32), the Arrow decimal's size.
    Decimal {
        width: usize,
        fixed: Option<usize>,
    },
    Fixed(usize),
    Enum(usize),
    Array(Box<Node>),
    Map(Box<Node>),
    Union(Vec<Node>),
    Record {
        name: String,
        fields: Vec<Node>,
    },
}

impl Node {
    /// This tree with every [`Node::ZonedTimestamp`] a [`Node::ZonedText`].
    pub(crate) fn zoned_as_text(&self) -> Node {
        let all = |nodes: &[Node]| nodes.iter().map(Node::zoned_as_text).collect();
        match self {
            Node::ZonedTimestamp => Node::ZonedText,
            Node::Array(item) => Node::Array(Box::new(item.zoned_as_text())),
            Node::Map(values) => Node::Map(Box::new(values.zoned_as_text())),
            Node::Union(branches) => Node::Union(all(branches)),
            Node::Record { name, fields } => Node::Record {
                name: name.clone(),
                fields: all(fields),
            },
            other => other.clone(),
        }
    }
}

/// A parsed, self-contained writer schema.
#[derive(Debug, Clone)]
pub struct WriterSchema {
    /// The schema with every reference inlined at its first use.
    pub json: Value,
    pub root: Node,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("schema is not JSON: {0}")]
    NotJson(String),
    #[error("schema names type {0:?}, which it does not define and no reference provides")]
    UnknownType(String),
    #[error("type {0} refers to itself; recursive types cannot become Arrow columns")]
    Recursive(String),
    #[error("schema is malformed: {0}")]
    Malformed(String),
}

fn is_decimal(o: &Map<String, Value>) -> bool {
    o.get("logicalType").and_then(Value::as_str) == Some("decimal")
}

/// The byte width of the Arrow decimal arrow-avro decodes a `decimal` into.
fn decimal_width(o: &Map<String, Value>) -> usize {
    match o.get("precision").and_then(Value::as_u64) {
        Some(p) if p > 38 => 32,
        _ => 16,
    }
}

pub(crate) const ZONED_TIMESTAMP: &str = "io.debezium.time.ZonedTimestamp";

/// Arrow's widest decimal (Decimal256) holds 76 digits; PostgreSQL's `numeric(p, s)` up to
/// 1,000. A wider decimal is decoded as its bytes and then made the struct Debezium's
/// `VariableScaleDecimal` is, {scale, value}: exact, in a shape readers already take.
const MAX_ARROW_PRECISION: u64 = 76;

/// Marks a decimal too wide for Arrow, with its scale, on the type decoded as bytes.
pub(crate) const WIDE_DECIMAL_SCALE: &str = "lakesink.wide-decimal.scale";

/// A decimal too wide for Arrow becomes its bytes (or fixed), marked with its scale.
fn widen_decimal(out: &mut Map<String, Value>) -> bool {
    let wide = is_decimal(out)
        && out
            .get("precision")
            .and_then(Value::as_u64)
            .is_some_and(|p| p > MAX_ARROW_PRECISION);
    if wide {
        let scale = out.get("scale").and_then(Value::as_i64).unwrap_or(0);
        out.remove("logicalType");
        out.insert(WIDE_DECIMAL_SCALE.into(), Value::from(scale));
    }
    wide
}

fn primitive(name: &str) -> Option<Node> {
    Some(match name {
        "null" => Node::Null,
        "boolean" => Node::Boolean,
        "int" => Node::Int,
        "long" => Node::Long,
        "float" => Node::Float,
        "double" => Node::Double,
        "bytes" => Node::Bytes,
        "string" => Node::String,
        _ => return None,
    })
}

/// The full name of a named type defined by `o` inside namespace `ns`.
fn full_name(o: &Map<String, Value>, ns: Option<&str>) -> Result<String, SchemaError> {
    let name = o
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| SchemaError::Malformed("a named type has no name".into()))?;
    if name.contains('.') {
        return Ok(name.to_owned());
    }
    let ns = match o.get("namespace") {
        Some(Value::String(n)) => Some(n.as_str()),
        Some(Value::Null) | None => ns,
        Some(_) => {
            return Err(SchemaError::Malformed(format!(
                "namespace of {name} is not a string"
            )));
        }
    };
    Ok(match ns {
        Some(ns) if !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_owned(),
    })
}

/// The namespace that names inside a type called `full` are resolved in.
fn namespace_of(full: &str) -> Option<&str> {
    full.rsplit_once('.').map(|(ns, _)| ns)
}

fn is_named(o: &Map<String, Value>) -> bool {
    matches!(
        o.get("type").and_then(Value::as_str),
        Some("record" | "error" | "enum" | "fixed")
    )
}

/// Records every named type a document defines, by full name.
fn collect(
    v: &Value,
    ns: Option<&str>,
    defs: &mut HashMap<String, (Value, Option<String>)>,
) -> Result<(), SchemaError> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|i| collect(i, ns, defs)),
        Value::Object(o) => {
            if is_named(o) {
                let full = full_name(o, ns)?;
                let inner = namespace_of(&full).map(str::to_owned);
                defs.entry(full)
                    .or_insert_with(|| (v.clone(), ns.map(str::to_owned)));
                if let Some(Value::Array(fields)) = o.get("fields") {
                    for f in fields {
                        if let Some(t) = f.get("type") {
                            collect(t, inner.as_deref(), defs)?;
                        }
                    }
                }
                Ok(())
            } else {
                for key in ["type", "items", "values"] {
                    if let Some(t) = o.get(key)
                        && !t.is_string()
                    {
                        collect(t, ns, defs)?;
                    }
                }
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

struct Inliner {
    defs: HashMap<String, (Value, Option<String>)>,
    done: HashMap<String, Node>,
    open: HashSet<String>,
}

impl Inliner {
    fn resolve_name(&self, name: &str, ns: Option<&str>) -> Result<String, SchemaError> {
        if let Some(ns) = ns
            && !name.contains('.')
        {
            let full = format!("{ns}.{name}");
            if self.defs.contains_key(&full) {
                return Ok(full);
            }
        }
        if self.defs.contains_key(name) {
            return Ok(name.to_owned());
        }
        Err(SchemaError::UnknownType(name.to_owned()))
    }

    fn walk(&mut self, v: &Value, ns: Option<&str>) -> Result<(Value, Node), SchemaError> {
        match v {
            Value::String(s) => {
                if let Some(node) = primitive(s) {
                    return Ok((v.clone(), node));
                }
                let full = self.resolve_name(s, ns)?;
                if let Some(node) = self.done.get(&full) {
                    return Ok((Value::String(full), node.clone()));
                }
                if self.open.contains(&full) {
                    return Err(SchemaError::Recursive(full));
                }
                let (def, def_ns) = self.defs[&full].clone();
                self.walk(&def, def_ns.as_deref())
            }
            Value::Array(branches) => {
                let mut json = Vec::with_capacity(branches.len());
                let mut nodes = Vec::with_capacity(branches.len());
                for b in branches {
                    let (j, n) = self.walk(b, ns)?;
                    json.push(j);
                    nodes.push(n);
                }
                Ok((Value::Array(json), Node::Union(nodes)))
            }
            Value::Object(o) => self.walk_object(o, ns),
            other => Err(SchemaError::Malformed(format!("{other} is not a schema"))),
        }
    }

    fn walk_object(
        &mut self,
        o: &Map<String, Value>,
        ns: Option<&str>,
    ) -> Result<(Value, Node), SchemaError> {
        let kind = o
            .get("type")
            .ok_or_else(|| SchemaError::Malformed("an object schema has no type".into()))?;
        let Some(kind) = kind.as_str() else {
            // {"type": {...}} or {"type": [...]}: the attributes of the wrapper are dropped.
            return self.walk(kind, ns);
        };
        let mut out = o.clone();
        let node = match kind {
            "record" | "error" | "enum" | "fixed" => {
                let full = full_name(o, ns)?;
                if let Some(node) = self.done.get(&full) {
                    // Defined again after an earlier use pulled the definition in.
                    return Ok((Value::String(full), node.clone()));
                }
                // Explicit name and namespace, so the definition means the same wherever it
                // is inlined; references use the full name.
                match full.rsplit_once('.') {
                    Some((ns, name)) => {
                        out.insert("name".into(), Value::String(name.to_owned()));
                        out.insert("namespace".into(), Value::String(ns.to_owned()));
                    }
                    None => {
                        out.insert("name".into(), Value::String(full.clone()));
                        out.insert("namespace".into(), Value::String(String::new()));
                    }
                }
                let node = match kind {
                    "enum" => {
                        let symbols = o
                            .get("symbols")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len);
                        Node::Enum(symbols)
                    }
                    "fixed" => {
                        let size = o.get("size").and_then(Value::as_u64).ok_or_else(|| {
                            SchemaError::Malformed(format!("fixed {full} has no size"))
                        })?;
                        let size = usize::try_from(size).map_err(|_| {
                            SchemaError::Malformed(format!("fixed {full} is too large"))
                        })?;
                        if widen_decimal(&mut out) {
                            Node::Fixed(size)
                        } else if is_decimal(o) {
                            Node::Decimal {
                                width: decimal_width(o),
                                fixed: Some(size),
                            }
                        } else {
                            Node::Fixed(size)
                        }
                    }
                    _ => {
                        self.open.insert(full.clone());
                        let fields =
                            o.get("fields").and_then(Value::as_array).ok_or_else(|| {
                                SchemaError::Malformed(format!("record {full} has no fields"))
                            })?;
                        let inner = namespace_of(&full).map(str::to_owned);
                        let mut json_fields = Vec::with_capacity(fields.len());
                        let mut nodes = Vec::with_capacity(fields.len());
                        for f in fields {
                            let mut f = f.as_object().cloned().ok_or_else(|| {
                                SchemaError::Malformed(format!(
                                    "a field of {full} is not an object"
                                ))
                            })?;
                            let t = f.get("type").cloned().ok_or_else(|| {
                                SchemaError::Malformed(format!("a field of {full} has no type"))
                            })?;
                            let (j, n) = self.walk(&t, inner.as_deref())?;
                            f.insert("type".into(), j);
                            json_fields.push(Value::Object(f));
                            nodes.push(n);
                        }
                        self.open.remove(&full);
                        out.insert("fields".into(), Value::Array(json_fields));
                        Node::Record {
                            name: full.clone(),
                            fields: nodes,
                        }
                    }
                };
                self.done.insert(full, node.clone());
                node
            }
            "array" => {
                let items = o
                    .get("items")
                    .ok_or_else(|| SchemaError::Malformed("array without items".into()))?;
                let (j, n) = self.walk(items, ns)?;
                out.insert("items".into(), j);
                Node::Array(Box::new(n))
            }
            "map" => {
                let values = o
                    .get("values")
                    .ok_or_else(|| SchemaError::Malformed("map without values".into()))?;
                let (j, n) = self.walk(values, ns)?;
                out.insert("values".into(), j);
                Node::Map(Box::new(n))
            }
            "string" if o.get("connect.name").and_then(Value::as_str) == Some(ZONED_TIMESTAMP) => {
                Node::ZonedTimestamp
            }
            "string" if o.get("logicalType").and_then(Value::as_str) == Some("uuid") => Node::Uuid,
            "bytes" if widen_decimal(&mut out) => Node::Bytes,
            "bytes" if is_decimal(o) => Node::Decimal {
                width: decimal_width(o),
                fixed: None,
            },
            name => match primitive(name) {
                Some(node) => node,
                // {"type": "SomeNamedType", ...}: a reference wearing attributes.
                None => return self.walk(&Value::String(name.to_owned()), ns),
            },
        };
        Ok((Value::Object(out), node))
    }
}

impl WriterSchema {
    /// Parses a schema and the references the registry listed for it.
    pub fn parse(resolved: &ResolvedSchema) -> Result<Self, SchemaError> {
        let json = |text: &str| {
            serde_json::from_str::<Value>(text).map_err(|e| SchemaError::NotJson(e.to_string()))
        };
        let root = json(&resolved.text)?;
        let mut defs = HashMap::new();
        for r in &resolved.references {
            collect(&json(&r.text)?, None, &mut defs)?;
        }
        collect(&root, None, &mut defs)?;
        let mut inliner = Inliner {
            defs,
            done: HashMap::new(),
            open: HashSet::new(),
        };
        let (json, root) = inliner.walk(&root, None)?;
        Ok(Self { json, root })
    }

    /// The Debezium connector that wrote records of this schema: `<name>` of the
    /// `io.debezium.connector.<name>.Source` record in the envelope's `source` field.
    pub fn connector(&self) -> Option<String> {
        let fields = self.json.get("fields")?.as_array()?;
        let source = fields
            .iter()
            .find(|f| f.get("name").and_then(Value::as_str) == Some("source"))?;
        // `source` may be optional: `["null", {record}]`.
        let record = match source.get("type")? {
            Value::Array(branches) => branches.iter().find(|b| b.is_object())?,
            t => t,
        };
        let name = record.get("name")?.as_str()?;
        let full = match record.get("namespace").and_then(Value::as_str) {
            Some(ns) if !name.contains('.') => format!("{ns}.{name}"),
            _ => name.to_owned(),
        };
        let connector = full
            .strip_prefix("io.debezium.connector.")?
            .strip_suffix(".Source")?;
        Some(connector.to_owned())
    }

    /// Parses one self-contained schema text.
    pub fn parse_text(text: &str) -> Result<Self, SchemaError> {
        Self::parse(&ResolvedSchema {
            text: text.to_owned(),
            references: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::NamedSchema;

    #[test]
    fn inline_named_type_is_defined_once_and_referred_to_by_full_name() {
        let s = WriterSchema::parse_text(
            &json!({"type": "record", "name": "Envelope", "namespace": "demo.public.t", "fields": [
                {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
                    {"name": "id", "type": "int"}]}], "default": null},
                {"name": "after", "type": ["null", "Value"], "default": null},
                {"name": "op", "type": "string"}]})
            .to_string(),
        )
        .unwrap();
        let fields = s.json["fields"].as_array().unwrap();
        assert_eq!(fields[0]["type"][1]["name"], "Value");
        assert_eq!(fields[0]["type"][1]["namespace"], "demo.public.t");
        assert_eq!(fields[1]["type"][1], "demo.public.t.Value");
        let value = Node::Record {
            name: "demo.public.t.Value".into(),
            fields: vec![Node::Int],
        };
        assert_eq!(
            s.root,
            Node::Record {
                name: "demo.public.t.Envelope".into(),
                fields: vec![
                    Node::Union(vec![Node::Null, value.clone()]),
                    Node::Union(vec![Node::Null, value]),
                    Node::String
                ]
            }
        );
    }

    #[test]
    fn references_are_inlined_at_first_use() {
        let resolved = ResolvedSchema {
            text: json!({"type": "record", "name": "Envelope", "namespace": "ns", "fields": [
                {"name": "source", "type": "io.debezium.Source"},
                {"name": "again", "type": ["null", "io.debezium.Source"]}]})
            .to_string(),
            references: vec![NamedSchema {
                name: "io.debezium.Source".into(),
                text: json!({"type": "record", "name": "Source", "namespace": "io.debezium", "fields": [
                    {"name": "db", "type": "string", "connect.x": 1}]})
                .to_string(),
            }],
        };
        let s = WriterSchema::parse(&resolved).unwrap();
        let fields = s.json["fields"].as_array().unwrap();
        assert_eq!(fields[0]["type"]["name"], "Source");
        assert_eq!(fields[0]["type"]["namespace"], "io.debezium");
        assert_eq!(fields[0]["type"]["fields"][0]["connect.x"], 1);
        assert_eq!(fields[1]["type"][1], "io.debezium.Source");
    }

    #[test]
    fn unknown_and_recursive_types_are_errors() {
        let unknown =
            json!({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]});
        assert_eq!(
            WriterSchema::parse_text(&unknown.to_string()).unwrap_err(),
            SchemaError::UnknownType("Nope".into())
        );
        let recursive = json!({"type": "record", "name": "List", "fields": [
            {"name": "next", "type": ["null", "List"]}]});
        assert_eq!(
            WriterSchema::parse_text(&recursive.to_string()).unwrap_err(),
            SchemaError::Recursive("List".into())
        );
        assert!(matches!(
            WriterSchema::parse_text("{"),
            Err(SchemaError::NotJson(_))
        ));
        assert!(matches!(
            WriterSchema::parse_text("42"),
            Err(SchemaError::Malformed(_))
        ));
    }
}
