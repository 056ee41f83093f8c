//! Partition specs: `partition-by` as the spec a new table gets, and a batch split into one
//! part per partition value under a table's spec, each part's value for its data file.
//!
//! The values come from the `iceberg` crate's own transforms, applied to each row's source
//! value, so a bucket or a day is the one Spark and pyiceberg compute for the same value.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Fields, TimeUnit};
use iceberg::spec::{
    Datum, Literal, PartitionSpec, PrimitiveType, Schema, Struct, Transform, Type,
    UnboundPartitionSpec,
};
use iceberg::transform::{BoxedTransformFunction, create_transform_function};
use lakesink_config::{PartitionField, PartitionTransform};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

fn transform(t: PartitionTransform) -> Transform {
    match t {
        PartitionTransform::Identity => Transform::Identity,
        PartitionTransform::Year => Transform::Year,
        PartitionTransform::Month => Transform::Month,
        PartitionTransform::Day => Transform::Day,
        PartitionTransform::Hour => Transform::Hour,
        PartitionTransform::Bucket(n) => Transform::Bucket(n),
        PartitionTransform::Truncate(w) => Transform::Truncate(w),
    }
}

/// The partition field's name, as Iceberg's Java `PartitionSpec.Builder` names them (dots of
/// a nested source become underscores).
fn target_name(f: &PartitionField) -> String {
    let c = f.column.replace('.', "_");
    match f.transform {
        PartitionTransform::Identity => c,
        PartitionTransform::Year => format!("{c}_year"),
        PartitionTransform::Month => format!("{c}_month"),
        PartitionTransform::Day => format!("{c}_day"),
        PartitionTransform::Hour => format!("{c}_hour"),
        PartitionTransform::Bucket(_) => format!("{c}_bucket"),
        PartitionTransform::Truncate(_) => format!("{c}_trunc"),
    }
}

/// The spec a new table gets from `partition-by`; an error names the entry and why.
pub fn unbound_spec(
    fields: &[PartitionField],
    schema: &Schema,
) -> Result<UnboundPartitionSpec, String> {
    // Java's REST server requires the id, which the crate leaves out when it is not set.
    let mut spec = UnboundPartitionSpec::builder().with_spec_id(0);
    for f in fields {
        let source = schema.field_by_name(&f.column).ok_or_else(|| {
            format!(
                "lake.partition-by: no column `{}` in the table (its columns: {})",
                f.column,
                top_level(schema)
            )
        })?;
        let t = transform(f.transform);
        let Type::Primitive(p) = source.field_type.as_ref() else {
            return Err(format!(
                "lake.partition-by: `{}` is not a primitive column",
                f.column
            ));
        };
        supported(p).map_err(|e| format!("lake.partition-by: `{}`: {e}", f.column))?;
        t.result_type(&source.field_type).map_err(|e| {
            format!(
                "lake.partition-by: `{}` is {p}, which {t} does not apply to: {}",
                f.column,
                e.message()
            )
        })?;
        spec = spec
            .add_partition_field(source.id, target_name(f), t)
            .map_err(|e| format!("lake.partition-by: {}", e.message()))?;
    }
    Ok(spec.build())
}

fn top_level(schema: &Schema) -> String {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The source types lakesink reads partition values from.
fn supported(p: &PrimitiveType) -> Result<(), String> {
    match p {
        PrimitiveType::Int
        | PrimitiveType::Long
        | PrimitiveType::Date
        | PrimitiveType::Timestamp
        | PrimitiveType::Timestamptz
        | PrimitiveType::String
        | PrimitiveType::Boolean
        | PrimitiveType::Uuid => Ok(()),
        other => Err(format!(
            "lakesink does not partition by a {other} column (int, long, date, timestamp, \
             timestamptz, string, boolean and uuid columns it does)"
        )),
    }
}

/// One field of a table's spec, ready to compute.
struct Source {
    id: i32,
    name: String,
    ty: PrimitiveType,
    f: BoxedTransformFunction,
}

/// Splits batches by a table's partition spec.
pub struct Partitioner {
    sources: Vec<Source>,
}

impl Partitioner {
    pub fn new(spec: &PartitionSpec, schema: &Schema) -> Result<Self, String> {
        let mut sources = Vec::new();
        for pf in spec.fields() {
            let field = schema.field_by_id(pf.source_id).ok_or_else(|| {
                format!(
                    "partition field {} reads column id {}, which the schema lacks",
                    pf.name, pf.source_id
                )
            })?;
            let name = schema
                .name_by_field_id(pf.source_id)
                .unwrap_or(&field.name)
                .to_owned();
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                return Err(format!(
                    "partition source `{name}` is not a primitive column"
                ));
            };
            if pf.transform != Transform::Void {
                supported(ty).map_err(|e| format!("partition source `{name}`: {e}"))?;
            }
            let f = create_transform_function(&pf.transform)
                .map_err(|e| format!("partition field {}: {}", pf.name, e.message()))?;
            sources.push(Source {
                id: pf.source_id,
                name,
                ty: ty.clone(),
                f,
            });
        }
        Ok(Self { sources })
    }

    /// The batch's rows grouped by partition value, in the order values first appear; an
    /// unpartitioned table gets the batch whole, with the empty value.
    pub fn split(&self, batch: &RecordBatch) -> Result<Vec<(Struct, RecordBatch)>, String> {
        if self.sources.is_empty() {
            return Ok(vec![(Struct::empty(), batch.clone())]);
        }
        let columns: Vec<Column> = self
            .sources
            .iter()
            .map(|s| {
                Column::find(batch.schema().fields(), batch.columns(), s.id).ok_or_else(|| {
                    format!("partition source `{}` is missing from the rows", s.name)
                })
            })
            .collect::<Result<_, _>>()?;
        let mut index: HashMap<Struct, usize> = HashMap::new();
        let mut groups: Vec<(Struct, Vec<u32>)> = Vec::new();
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(self.sources.len());
            for (s, c) in self.sources.iter().zip(&columns) {
                let value = match c
                    .datum(row, &s.ty)
                    .map_err(|e| format!("`{}`: {e}", s.name))?
                {
                    None => None,
                    Some(d) => {
                        s.f.transform_literal(&d)
                            .map_err(|e| format!("`{}`: {}", s.name, e.message()))?
                    }
                };
                values.push(value.map(|d| Literal::Primitive(d.literal().clone())));
            }
            let value = Struct::from_iter(values);
            let i = *index.entry(value.clone()).or_insert_with(|| {
                groups.push((value, Vec::new()));
                groups.len() - 1
            });
            groups[i]
                .1
                .push(u32::try_from(row).map_err(|_| "a batch over 2^32 rows")?);
        }
        if groups.len() == 1 {
            let (value, _) = groups.pop().expect("one group");
            return Ok(vec![(value, batch.clone())]);
        }
        groups
            .into_iter()
            .map(|(value, rows)| {
                arrow_select::take::take_record_batch(batch, &UInt32Array::from(rows))
                    .map(|b| (value, b))
                    .map_err(|e| e.to_string())
            })
            .collect()
    }
}

/// A source column in a batch: its array and the struct arrays above it, whose nulls make
/// it null.
struct Column {
    parents: Vec<ArrayRef>,
    leaf: ArrayRef,
}

impl Column {
    /// The column whose field carries Iceberg field id `id` (set by `conform`).
    fn find(fields: &Fields, columns: &[ArrayRef], id: i32) -> Option<Self> {
        for (field, array) in fields.iter().zip(columns) {
            let fid = field
                .metadata()
                .get(PARQUET_FIELD_ID_META_KEY)
                .and_then(|v| v.parse::<i32>().ok());
            if fid == Some(id) {
                return Some(Self {
                    parents: Vec::new(),
                    leaf: array.clone(),
                });
            }
            if let DataType::Struct(children) = field.data_type() {
                let s = array.as_struct();
                if let Some(mut c) = Self::find(children, s.columns(), id) {
                    c.parents.insert(0, array.clone());
                    return Some(c);
                }
            }
        }
        None
    }

    fn datum(&self, row: usize, ty: &PrimitiveType) -> Result<Option<Datum>, String> {
        if self.parents.iter().any(|p| p.is_null(row)) || self.leaf.is_null(row) {
            return Ok(None);
        }
        let a = &self.leaf;
        let wrong = || format!("a {ty} column holds {}", a.data_type());
        Ok(Some(match (ty, a.data_type()) {
            (PrimitiveType::Int, DataType::Int32) => {
                Datum::int(a.as_primitive::<Int32Type>().value(row))
            }
            (PrimitiveType::Long, DataType::Int64) => {
                Datum::long(a.as_primitive::<Int64Type>().value(row))
            }
            (PrimitiveType::Date, DataType::Date32) => {
                Datum::date(a.as_primitive::<Date32Type>().value(row))
            }
            (PrimitiveType::Timestamp, DataType::Timestamp(TimeUnit::Microsecond, None)) => {
                Datum::timestamp_micros(a.as_primitive::<TimestampMicrosecondType>().value(row))
            }
            (PrimitiveType::Timestamptz, DataType::Timestamp(TimeUnit::Microsecond, Some(_))) => {
                Datum::timestamptz_micros(a.as_primitive::<TimestampMicrosecondType>().value(row))
            }
            (PrimitiveType::String, DataType::Utf8) => {
                Datum::string(a.as_string::<i32>().value(row))
            }
            (PrimitiveType::String, DataType::LargeUtf8) => {
                Datum::string(a.as_string::<i64>().value(row))
            }
            (PrimitiveType::String, DataType::Utf8View) => {
                Datum::string(a.as_string_view().value(row))
            }
            (PrimitiveType::Boolean, DataType::Boolean) => Datum::bool(a.as_boolean().value(row)),
            (PrimitiveType::Uuid, DataType::FixedSizeBinary(16)) => Datum::uuid(
                uuid::Uuid::from_slice(a.as_fixed_size_binary().value(row))
                    .map_err(|e| e.to_string())?,
            ),
            _ => return Err(wrong()),
        }))
    }
}

#[cfg(test)]
mod tests;
