//! Debezium's types as Iceberg (format version 2) types, and the rows as Arrow arrays an
//! Iceberg reader finds by field id.
//!
//! Every value keeps its meaning and precision. Where Iceberg v2 has no type for a value, the
//! column keeps it exactly under a documented stand-in, named in the field's `doc`:
//! nanosecond timestamps and times, and durations, are `long` counts of their unit; decimals
//! wider than Iceberg's 38 digits are `string` in plain decimal notation.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, TimeUnit};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, StructType, Type,
};

/// The key arrow-rs's Parquet writer reads a column's field id from.
const FIELD_ID: &str = parquet::arrow::PARQUET_FIELD_ID_META_KEY;

/// A column Iceberg cannot hold as it is, or a batch that does not fit its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    pub column: String,
    pub reason: String,
}

impl std::fmt::Display for TypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column `{}`: {}", self.column, self.reason)
    }
}

fn err(column: &str, reason: impl Into<String>) -> TypeError {
    TypeError {
        column: column.to_owned(),
        reason: reason.into(),
    }
}

const NANOS_DOC: &str = "nanoseconds since 1970-01-01T00:00:00 as a long: Iceberg v2 has no \
                         nanosecond timestamp (lakesink keeps every digit)";
const NANO_TIME_DOC: &str = "nanoseconds since midnight as a long: Iceberg has no nanosecond time";
const DURATION_DOC: &str = "a duration (or a MySQL TIME span) as a long count of its unit";
const WIDE_DECIMAL_DOC: &str =
    "a decimal wider than Iceberg's 38 digits, exactly, in plain decimal notation";

/// The Iceberg type of an Arrow column, with the doc of a stand-in; None for a column that
/// holds nothing (Arrow's null type).
fn primitive(
    path: &str,
    t: &DataType,
    f: &Field,
) -> Result<Option<(Type, Option<&'static str>)>, TypeError> {
    use PrimitiveType as P;
    let p = |t: P| Ok(Some((Type::Primitive(t), None)));
    let doc = |t: P, d: &'static str| Ok(Some((Type::Primitive(t), Some(d))));
    match t {
        DataType::Null => Ok(None),
        DataType::Boolean => p(P::Boolean),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            p(P::Int)
        }
        DataType::Int64 | DataType::UInt32 => p(P::Long),
        DataType::Float16 | DataType::Float32 => p(P::Float),
        DataType::Float64 => p(P::Double),
        DataType::Decimal128(precision, scale) | DataType::Decimal256(precision, scale) => {
            let scale = u32::try_from(*scale)
                .map_err(|_| err(path, format!("a decimal of negative scale {scale}")))?;
            if *precision <= 38 {
                p(P::Decimal {
                    precision: u32::from(*precision),
                    scale,
                })
            } else {
                doc(P::String, WIDE_DECIMAL_DOC)
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => p(P::String),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => p(P::Binary),
        DataType::FixedSizeBinary(16) if is_uuid(f) => p(P::Uuid),
        DataType::FixedSizeBinary(n) => p(P::Fixed(u64::try_from(*n).unwrap_or(0))),
        DataType::Date32 => p(P::Date),
        DataType::Time32(_) | DataType::Time64(TimeUnit::Microsecond) => p(P::Time),
        DataType::Time64(_) => doc(P::Long, NANO_TIME_DOC),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => doc(P::Long, NANOS_DOC),
        DataType::Timestamp(_, None) => p(P::Timestamp),
        DataType::Timestamp(_, Some(_)) => p(P::Timestamptz),
        DataType::Duration(_) => doc(P::Long, DURATION_DOC),
        DataType::Dictionary(_, value) => primitive(path, value, f),
        other => Err(err(
            path,
            format!("Arrow type {other} has no Iceberg type lakesink maps it to"),
        )),
    }
}

fn is_uuid(f: &Field) -> bool {
    f.metadata()
        .get("ARROW:extension:name")
        .is_some_and(|n| n == "arrow.uuid")
        || f.metadata()
            .get("logicalType")
            .is_some_and(|n| n.contains("uuid"))
}

/// Hands out field ids for a new table's schema (the catalog assigns its own on create).
struct Ids(i32);

impl Ids {
    fn next(&mut self) -> i32 {
        self.0 += 1;
        self.0
    }
}

/// The Iceberg type of an Arrow field, nested ones included; None for a column of nulls.
fn field_type(
    path: &str,
    f: &Field,
    ids: &mut Ids,
) -> Result<Option<(Type, Option<&'static str>)>, TypeError> {
    match f.data_type() {
        DataType::Struct(children) => {
            let mut fields = Vec::new();
            for c in children {
                if let Some(n) = nested(&format!("{path}.{}", c.name()), c, ids)? {
                    fields.push(n);
                }
            }
            Ok(Some((Type::Struct(StructType::new(fields)), None)))
        }
        DataType::List(e) | DataType::LargeList(e) => {
            let id = ids.next();
            let Some((t, _)) = field_type(&format!("{path}.element"), e, ids)? else {
                return Ok(None);
            };
            Ok(Some((
                Type::List(ListType {
                    element_field: NestedField::list_element(id, t, false).into(),
                }),
                None,
            )))
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(err(path, "a map whose entries are not key/value pairs"));
            };
            let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
                return Err(err(path, "a map whose entries are not key/value pairs"));
            };
            let (kid, vid) = (ids.next(), ids.next());
            let (Some((kt, _)), Some((vt, _))) = (
                field_type(&format!("{path}.key"), k, ids)?,
                field_type(&format!("{path}.value"), v, ids)?,
            ) else {
                return Ok(None);
            };
            Ok(Some((
                Type::Map(MapType {
                    key_field: NestedField::map_key_element(kid, kt).into(),
                    value_field: NestedField::map_value_element(vid, vt, false).into(),
                }),
                None,
            )))
        }
        t => primitive(path, t, f),
    }
}

fn nested(path: &str, f: &Field, ids: &mut Ids) -> Result<Option<NestedFieldRef>, TypeError> {
    let id = ids.next();
    Ok(field_type(path, f, ids)?.map(|(t, doc)| {
        let n = NestedField::optional(id, f.name(), t);
        Arc::new(match doc {
            Some(d) => n.with_doc(d),
            None => n,
        })
    }))
}

/// The Iceberg schema of a shaped batch's Arrow schema: every column optional (a later
/// schema version may leave any of them out).
pub fn iceberg_schema(schema: &Schema) -> Result<iceberg::spec::Schema, TypeError> {
    let mut ids = Ids(0);
    let mut fields = Vec::new();
    for f in schema.fields() {
        if let Some(n) = nested(f.name(), f, &mut ids)? {
            fields.push(n);
        }
    }
    iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| err("", e.to_string()))
}

/// A column of the batch the table lacks: added by schema evolution, under `parent` (a
/// dotted path) or at the top.
#[derive(Debug, Clone)]
pub struct Missing {
    pub parent: Option<String>,
    pub name: String,
    pub field_type: Type,
    pub doc: Option<&'static str>,
}

/// A column whose records now carry a wider type than the table's, as Iceberg allows a column
/// to widen: int to long, float to double, a decimal's precision at the same scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Promote {
    /// The dotted path of the column.
    pub path: String,
    /// The table's field id of the column (kept: a promotion is the same column).
    pub id: i32,
    pub from: PrimitiveType,
    pub to: PrimitiveType,
}

/// What the table's schema needs to take the batch: columns to add, columns to widen.
#[derive(Debug, Clone, Default)]
pub struct Evolution {
    pub add: Vec<Missing>,
    pub promote: Vec<Promote>,
}

impl Evolution {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.promote.is_empty()
    }
}

/// The columns of `schema` that `table` lacks, outermost first (a missing struct brings its
/// children), and those the table holds in a narrower type Iceberg can widen. Narrower records
/// go into a wider column as they are; any other change of type is an error.
pub fn evolution(schema: &Schema, table: &StructType) -> Result<Evolution, TypeError> {
    let mut out = Evolution::default();
    evolution_in(schema.fields(), table, None, &mut out)?;
    Ok(out)
}

fn evolution_in(
    fields: &Fields,
    table: &StructType,
    parent: Option<&str>,
    out: &mut Evolution,
) -> Result<(), TypeError> {
    for f in fields {
        let path = match parent {
            Some(p) => format!("{p}.{}", f.name()),
            None => f.name().clone(),
        };
        match table.field_by_name(f.name()) {
            None => {
                if let Some((field_type, doc)) = field_type(&path, f, &mut Ids(0))? {
                    out.add.push(Missing {
                        parent: parent.map(str::to_owned),
                        name: f.name().clone(),
                        field_type,
                        doc,
                    });
                }
            }
            Some(have) => match (f.data_type(), have.field_type.as_ref()) {
                (DataType::Struct(children), Type::Struct(st)) => {
                    evolution_in(children, st, Some(&path), out)?;
                }
                (DataType::Struct(_), _) => {
                    return Err(err(&path, "is a struct now; the table's column is not"));
                }
                (DataType::List(_) | DataType::LargeList(_) | DataType::Map(..), _) => {
                    // Element types are checked when the rows are written.
                }
                (t, Type::Primitive(want)) => {
                    let Some((Type::Primitive(got), _)) = primitive(&path, t, f)? else {
                        continue;
                    };
                    if fits(&got, want) {
                        continue;
                    }
                    if !fits(want, &got) {
                        return Err(err(
                            &path,
                            format!(
                                "the records' type {got} does not fit the table's {want}, and \
                                 Iceberg cannot change one into the other: it widens only int \
                                 to long, float to double and a decimal's precision at the \
                                 same scale. Write this table under a new name \
                                 (lake.table-name-format) or drop it to rebuild it"
                            ),
                        ));
                    }
                    out.promote.push(Promote {
                        path,
                        id: have.id,
                        from: want.clone(),
                        to: got,
                    });
                }
                (_, other) => {
                    return Err(err(&path, format!("the table's column is a {other}")));
                }
            },
        }
    }
    Ok(())
}

/// Whether values of Iceberg type `got` can be written into a column of type `want` exactly.
fn fits(got: &PrimitiveType, want: &PrimitiveType) -> bool {
    use PrimitiveType as P;
    match (got, want) {
        (a, b) if a == b => true,
        (P::Int, P::Long) | (P::Float, P::Double) => true,
        (
            P::Decimal {
                precision: p1,
                scale: s1,
            },
            P::Decimal {
                precision: p2,
                scale: s2,
            },
        ) => s1 == s2 && p1 <= p2,
        _ => false,
    }
}

/// The batch as the table's columns: values converted to the Arrow types an Iceberg reader
/// expects for the field, each field carrying its id. Columns the table lacks must have been
/// added first ([`missing`]).
pub fn conform(batch: &RecordBatch, table: &StructType) -> Result<RecordBatch, TypeError> {
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if let Some(want) = table.field_by_name(f.name()) {
            if let Some((field, column)) = conform_field(f.name(), f, c, want)? {
                fields.push(field);
                columns.push(column);
            }
        } else if f.data_type() != &DataType::Null {
            return Err(err(f.name(), "the table has no such column"));
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema, columns, &options).map_err(|e| err("", e.to_string()))
}

fn with_id(name: &str, t: DataType, id: i32) -> Field {
    Field::new(name, t, true).with_metadata(HashMap::from([(FIELD_ID.to_owned(), id.to_string())]))
}

/// Casting that fails on a value the target cannot hold instead of making it null.
const EXACT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow_cast::display::FormatOptions::new(),
};

fn cast(path: &str, c: &ArrayRef, to: &DataType) -> Result<ArrayRef, TypeError> {
    if c.data_type() == to {
        return Ok(c.clone());
    }
    cast_with_options(c, to, &EXACT)
        .map_err(|e| err(path, format!("cannot be written as {to}: {e}")))
}

fn conform_field(
    path: &str,
    f: &Field,
    c: &ArrayRef,
    want: &NestedField,
) -> Result<Option<(Field, ArrayRef)>, TypeError> {
    let id = want.id;
    match (c.data_type(), want.field_type.as_ref()) {
        (DataType::Null, _) => Ok(None),
        (DataType::Dictionary(_, value), _) => {
            let plain = cast(path, c, value)?;
            conform_field(
                path,
                &f.clone().with_data_type(value.as_ref().clone()),
                &plain,
                want,
            )
        }
        (DataType::Struct(_), Type::Struct(st)) => {
            let s = c.as_struct();
            let mut fields = Vec::new();
            let mut columns = Vec::new();
            for (cf, cc) in s.fields().iter().zip(s.columns()) {
                let child = format!("{path}.{}", cf.name());
                match st.field_by_name(cf.name()) {
                    Some(w) => {
                        if let Some((field, column)) = conform_field(&child, cf, cc, w)? {
                            fields.push(field);
                            columns.push(column);
                        }
                    }
                    None if cf.data_type() == &DataType::Null => {}
                    None => return Err(err(&child, "the table has no such column")),
                }
            }
            let fields = Fields::from(fields);
            let array = if fields.is_empty() {
                StructArray::new_empty_fields(s.len(), s.nulls().cloned())
            } else {
                StructArray::try_new(fields.clone(), columns, s.nulls().cloned())
                    .map_err(|e| err(path, e.to_string()))?
            };
            Ok(Some((
                with_id(f.name(), DataType::Struct(fields), id),
                Arc::new(array),
            )))
        }
        (DataType::List(_) | DataType::LargeList(_), Type::List(lt)) => {
            let (offsets, values, nulls, ef) = match c.data_type() {
                DataType::List(ef) => {
                    let l = c.as_list::<i32>();
                    (
                        l.offsets().clone(),
                        l.values().clone(),
                        l.nulls().cloned(),
                        ef.clone(),
                    )
                }
                DataType::LargeList(ef) => {
                    let l = c.as_list::<i64>();
                    let small: Vec<i32> = l
                        .offsets()
                        .iter()
                        .map(|&o| i32::try_from(o))
                        .collect::<Result<_, _>>()
                        .map_err(|_| err(path, "a list longer than 2^31 values in one batch"))?;
                    (
                        arrow_buffer::OffsetBuffer::new(small.into()),
                        l.values().clone(),
                        l.nulls().cloned(),
                        ef.clone(),
                    )
                }
                _ => unreachable_list(path)?,
            };
            let Some((element, values)) =
                conform_field(&format!("{path}.element"), &ef, &values, &lt.element_field)?
            else {
                return Err(err(path, "a list of nulls"));
            };
            let element: FieldRef = Arc::new(element.with_name("element"));
            let array = ListArray::try_new(element.clone(), offsets, values, nulls)
                .map_err(|e| err(path, e.to_string()))?;
            Ok(Some((
                with_id(f.name(), DataType::List(element), id),
                Arc::new(array),
            )))
        }
        (DataType::Map(entries, sorted), Type::Map(mt)) => {
            let m = c.as_map();
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(err(path, "a map whose entries are not key/value pairs"));
            };
            let (Some(kf), Some(vf)) = (kv.first(), kv.get(1)) else {
                return Err(err(path, "a map whose entries are not key/value pairs"));
            };
            let (Some((kfield, keys)), Some((vfield, values))) = (
                conform_field(&format!("{path}.key"), kf, m.keys(), &mt.key_field)?,
                conform_field(&format!("{path}.value"), vf, m.values(), &mt.value_field)?,
            ) else {
                return Err(err(path, "a map of nulls"));
            };
            let kfield = kfield.with_name("key").with_nullable(false);
            let vfield = vfield.with_name("value");
            let kv = Fields::from(vec![kfield, vfield]);
            let entries_field =
                Arc::new(Field::new("key_value", DataType::Struct(kv.clone()), false));
            let entries = StructArray::try_new(kv, vec![keys, values], None)
                .map_err(|e| err(path, e.to_string()))?;
            let array = MapArray::try_new(
                entries_field.clone(),
                m.offsets().clone(),
                entries,
                m.nulls().cloned(),
                *sorted,
            )
            .map_err(|e| err(path, e.to_string()))?;
            Ok(Some((
                with_id(f.name(), DataType::Map(entries_field, *sorted), id),
                Arc::new(array),
            )))
        }
        (t, Type::Primitive(p)) => {
            let to = arrow_type(path, t, p)?;
            let column = cast(path, c, &to)?;
            Ok(Some((with_id(f.name(), to, id), column)))
        }
        (t, other) => Err(err(
            path,
            format!("holds {t} but the table's column is a {other}"),
        )),
    }
}

fn unreachable_list<T>(path: &str) -> Result<T, TypeError> {
    Err(err(path, "not a list"))
}

/// The Arrow type a value of Arrow type `t` is written as in a column of Iceberg type `p`.
fn arrow_type(path: &str, t: &DataType, p: &PrimitiveType) -> Result<DataType, TypeError> {
    use PrimitiveType as P;
    let refuse = || {
        Err(err(
            path,
            format!("holds {t}, which does not fit the table's column of type {p}"),
        ))
    };
    Ok(match (p, t) {
        (P::Boolean, DataType::Boolean) => DataType::Boolean,
        (
            P::Int,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16,
        ) => DataType::Int32,
        (
            P::Long,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Duration(_),
        ) => DataType::Int64,
        (
            P::Long,
            DataType::Timestamp(TimeUnit::Nanosecond, _) | DataType::Time64(TimeUnit::Nanosecond),
        ) => DataType::Int64,
        (P::Float, DataType::Float16 | DataType::Float32) => DataType::Float32,
        (P::Double, DataType::Float16 | DataType::Float32 | DataType::Float64) => DataType::Float64,
        (P::Decimal { precision, scale }, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
            let precision = u8::try_from(*precision).map_err(|_| err(path, "decimal precision"))?;
            let scale = i8::try_from(*scale).map_err(|_| err(path, "decimal scale"))?;
            DataType::Decimal128(precision, scale)
        }
        (P::String, DataType::Decimal256(..) | DataType::Decimal128(..)) => DataType::Utf8,
        (P::String, DataType::Utf8 | DataType::Utf8View) => DataType::Utf8,
        (P::String, DataType::LargeUtf8) => DataType::LargeUtf8,
        (P::Binary, DataType::Binary | DataType::BinaryView) => DataType::Binary,
        (P::Binary, DataType::LargeBinary) => DataType::LargeBinary,
        (P::Uuid, DataType::FixedSizeBinary(16)) => DataType::FixedSizeBinary(16),
        (P::Fixed(n), DataType::FixedSizeBinary(m)) if i32::try_from(*n).ok() == Some(*m) => {
            DataType::FixedSizeBinary(*m)
        }
        (P::Date, DataType::Date32) => DataType::Date32,
        (P::Time, DataType::Time32(_) | DataType::Time64(TimeUnit::Microsecond)) => {
            DataType::Time64(TimeUnit::Microsecond)
        }
        (P::Timestamp, DataType::Timestamp(u, None)) if *u != TimeUnit::Nanosecond => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        (P::Timestamptz, DataType::Timestamp(u, Some(_))) if *u != TimeUnit::Nanosecond => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        }
        _ => return refuse(),
    })
}

#[cfg(test)]
mod tests;
