//! Upsert mode's rows of one Kafka partition until its commit: each change with its key, and
//! the row images, collapsed per key when the commit starts ([`super::upsert::collapse`]) into
//! a data file of the rows to add and an equality-delete file of the keys changed.
//!
//! Keys are compared in Arrow's row format (`arrow-row`: a byte string per key whose equality
//! is the values' equality, as Iceberg compares equality-delete columns), after conversion to
//! the table's column types, so the key `1` of an `int` column and the same key after the
//! column was widened to `long` are one key.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use std::collections::HashMap;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, StringArray};
use arrow_row::{OwnedRow, RowConverter, SortField};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use iceberg::spec::{Datum, StructType};

use super::types::conform;
use super::upsert::{Change, collapse};
use crate::postgres::PLACEHOLDER;

/// The changes of one partition awaiting a commit.
#[derive(Default)]
pub struct KeyedRows {
    /// The key's columns as the table types them, with their field ids, and their converter
    /// to the row format: from the first record with a key.
    key: Option<(SchemaRef, RowConverter)>,
    /// Row images conformed to the table when taken, by batch.
    images: Vec<RecordBatch>,
    /// In offset order; a row is `(image batch, row)`.
    changes: Vec<Change<OwnedRow, (u32, u32)>>,
    bytes: usize,
}

/// One batch's changes, as [`KeyedRows::take`] reads them.
pub struct Incoming<'a> {
    /// Debezium's operation per row (`c`, `r`, `u`, `d`, `t`); null for a tombstone.
    pub ops: &'a StringArray,
    /// The record key's columns (conformed to the table); absent where no record has a key.
    pub keys: Option<RecordBatch>,
    /// Per row: whether the record has a key (a truncate has none).
    pub has_key: Vec<bool>,
    /// The row images (conformed to the table): `after`, null for deletes.
    pub images: RecordBatch,
    /// Per row: whether the image is there.
    pub has_image: Vec<bool>,
}

/// A commit's sealed rows of a partition.
pub struct Collapsed {
    /// Every live file of the table goes first.
    pub truncate: bool,
    /// The rows to add, as the table's columns.
    pub rows: Option<RecordBatch>,
    /// The keys whose older rows are deleted, as the key's columns.
    pub deletes: Option<RecordBatch>,
}

impl KeyedRows {
    /// The key's column names, once a record with a key came.
    pub fn key_names(&self) -> Vec<String> {
        self.key
            .as_ref()
            .map(|(k, _)| k.fields().iter().map(|f| f.name().clone()).collect())
            .unwrap_or_default()
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Takes a batch's changes in row order; `offset(row)` names a row in errors. Returns how
    /// many changes it held (tombstones are none).
    pub fn take(
        &mut self,
        incoming: Incoming<'_>,
        offset: &dyn Fn(usize) -> String,
    ) -> Result<u64, String> {
        let Incoming {
            ops,
            keys,
            has_key,
            images,
            has_image,
        } = incoming;
        let keys = match keys {
            Some(k) => Some(self.rows_of(&k)?),
            None => None,
        };
        let batch = u32::try_from(self.images.len()).map_err(|_| "too many batches")?;
        let mut taken = 0u64;
        for row in 0..ops.len() {
            if ops.is_null(row) {
                continue;
            }
            let key = || -> Result<OwnedRow, String> {
                keys.as_ref()
                    .filter(|_| has_key.get(row).copied().unwrap_or(false))
                    .map(|k| k.row(row).owned())
                    .ok_or_else(|| {
                        format!(
                            "{}: the record has no key; an upsert table needs the source \
                             table's key (set mode = \"append\" for this table in \
                             [lake.tables.\"name\"])",
                            offset(row)
                        )
                    })
            };
            let change = match ops.value(row) {
                "c" | "r" | "u" => {
                    if !has_image.get(row).copied().unwrap_or(false) {
                        return Err(format!(
                            "{}: a `{}` event without a row image",
                            offset(row),
                            ops.value(row)
                        ));
                    }
                    if let Some(column) = placeholder(&images, row) {
                        return Err(format!(
                            "{}: column `{column}` holds Debezium's unchanged-TOAST \
                             placeholder: an upsert table writes whole rows and the event \
                             does not carry this value; set REPLICA IDENTITY FULL on the \
                             source table (Debezium then sends it), or write this table in \
                             mode = \"append\"",
                            offset(row)
                        ));
                    }
                    let at = u32::try_from(row).map_err(|_| "a batch over 2^32 rows")?;
                    Change::Upsert(key()?, (batch, at))
                }
                "d" => Change::Delete(key()?),
                "t" => Change::Truncate,
                other => {
                    return Err(format!(
                        "{}: operation `{other}` is not one an upsert table applies",
                        offset(row)
                    ));
                }
            };
            self.changes.push(change);
            taken += 1;
        }
        // The images, each key once more as an owned row, and the changes' own room.
        let each = std::mem::size_of::<Change<OwnedRow, (u32, u32)>>();
        self.bytes += images.get_array_memory_size()
            + keys.as_ref().map_or(0, |k| k.size())
            + usize::try_from(taken)
                .unwrap_or(usize::MAX)
                .saturating_mul(each);
        self.images.push(images);
        Ok(taken)
    }

    /// The key columns in the row format, converting to this buffer's key types; a table
    /// whose key column was widened since converts the keys held so far too.
    fn rows_of(&mut self, keys: &RecordBatch) -> Result<arrow_row::Rows, String> {
        let schema = keys.schema();
        let same = self.key.as_ref().is_some_and(|(k, _)| {
            k.fields().len() == schema.fields().len()
                && k.fields()
                    .iter()
                    .zip(schema.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
        });
        if !same {
            self.rekey(schema)?;
        }
        let (_, converter) = self.key.as_ref().ok_or("no key columns")?;
        converter
            .convert_columns(keys.columns())
            .map_err(|e| format!("the record key: {e}"))
    }

    /// Takes `key` as the key's columns from now on: the keys held are converted back to
    /// values, cast to its types (the widening Iceberg allows loses nothing) and converted
    /// again.
    fn rekey(&mut self, key: SchemaRef) -> Result<(), String> {
        let converter = converter(&key)?;
        let Some((old_key, old)) = self.key.take() else {
            self.key = Some((key, converter));
            return Ok(());
        };
        if names(&key) != names(&old_key) {
            let e = format!(
                "the record key's columns changed from {:?} to {:?}: an upsert table's key \
                 cannot change",
                names(&old_key),
                names(&key)
            );
            self.key = Some((old_key, old));
            return Err(e);
        }
        let held: Vec<usize> = self
            .changes
            .iter()
            .enumerate()
            .filter(|(_, c)| !matches!(c, Change::Truncate))
            .map(|(i, _)| i)
            .collect();
        if !held.is_empty() {
            let values = old
                .convert_rows(held.iter().filter_map(|&i| match &self.changes[i] {
                    Change::Upsert(k, _) | Change::Delete(k) => Some(k.row()),
                    Change::Truncate => None,
                }))
                .map_err(|e| e.to_string())?;
            let cast: Vec<ArrayRef> = values
                .iter()
                .zip(key.fields())
                .map(|(c, f)| arrow_cast::cast(c, f.data_type()).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            let rows = converter
                .convert_columns(&cast)
                .map_err(|e| e.to_string())?;
            for (n, &i) in held.iter().enumerate() {
                let k = rows.row(n).owned();
                match &mut self.changes[i] {
                    Change::Upsert(old, _) | Change::Delete(old) => *old = k,
                    Change::Truncate => {}
                }
            }
        }
        self.key = Some((key, converter));
        Ok(())
    }

    /// The net effect of the changes held: the rows to add as `table`'s columns, the keys
    /// to delete, and whether a truncate goes first. A key no older row can hold (`older`:
    /// an empty table, or a value outside a key column's bounds) gets no delete.
    pub fn seal(self, table: &StructType, older: &Older) -> Result<Collapsed, String> {
        let net = collapse(self.changes);
        let rows = if net.rows.is_empty() {
            None
        } else {
            let images = aligned(&self.images, table)?;
            let refs: Vec<&RecordBatch> = images.iter().collect();
            let at: Vec<(usize, usize)> = net
                .rows
                .iter()
                .map(|(_, (b, r))| (*b as usize, *r as usize))
                .collect();
            Some(
                arrow_select::interleave::interleave_record_batch(&refs, &at)
                    .map_err(|e| e.to_string())?,
            )
        };
        let deletes = match &self.key {
            Some((key, converter)) if !net.truncate && older.rows && !net.deletes.is_empty() => {
                let columns = converter
                    .convert_rows(net.deletes.iter().map(OwnedRow::row))
                    .map_err(|e| e.to_string())?;
                let all = RecordBatch::try_new(key.clone(), columns).map_err(|e| e.to_string())?;
                let reach = older.may_hold(&all);
                if reach.true_count() == 0 {
                    None
                } else if reach.true_count() == all.num_rows() {
                    Some(all)
                } else {
                    Some(
                        arrow_select::filter::filter_record_batch(&all, &reach)
                            .map_err(|e| e.to_string())?,
                    )
                }
            }
            _ => None,
        };
        Ok(Collapsed {
            truncate: net.truncate,
            rows,
            deletes,
        })
    }
}

/// What the rows of older snapshots may hold, so that keys none of them can hold get no
/// equality delete (an insert of a key past every key the table holds, typically).
#[derive(Debug, Clone, Default)]
pub struct Older {
    /// Whether the table holds any data file.
    pub rows: bool,
    /// Per key column: the least lower and the greatest upper bound of its values over every
    /// live data file. Absent: unknown (a file without bounds, or of another type).
    pub bounds: HashMap<String, (Datum, Datum)>,
}

impl Older {
    /// Per key row: whether an older row may hold it (its every bounded column within the
    /// bounds; a value of a type not compared here, or null, may).
    pub fn may_hold(&self, keys: &RecordBatch) -> BooleanArray {
        let mut may = vec![true; keys.num_rows()];
        for (f, c) in keys.schema().fields().iter().zip(keys.columns()) {
            let Some((lo, hi)) = self.bounds.get(f.name()) else {
                continue;
            };
            for (i, m) in may.iter_mut().enumerate() {
                if *m && !c.is_null(i) && within(c.as_ref(), i, lo, hi) == Some(false) {
                    *m = false;
                }
            }
        }
        BooleanArray::from(may)
    }
}

/// Whether row `i` of `c` lies within `[lo, hi]`; `None` where this does not compare.
fn within(c: &dyn Array, i: usize, lo: &Datum, hi: &Datum) -> Option<bool> {
    use arrow_array::types::{Date32Type, Int32Type, Int64Type, TimestampMicrosecondType};
    use iceberg::spec::PrimitiveLiteral as L;
    fn range<T: PartialOrd>(v: T, lo: T, hi: T) -> bool {
        lo <= v && v <= hi
    }
    match (c.data_type(), lo.literal(), hi.literal()) {
        (DataType::Int32, L::Int(lo), L::Int(hi)) => {
            Some(range(c.as_primitive::<Int32Type>().value(i), *lo, *hi))
        }
        (DataType::Date32, L::Int(lo), L::Int(hi)) => {
            Some(range(c.as_primitive::<Date32Type>().value(i), *lo, *hi))
        }
        (DataType::Int64, L::Long(lo), L::Long(hi)) => {
            Some(range(c.as_primitive::<Int64Type>().value(i), *lo, *hi))
        }
        (DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _), L::Long(lo), L::Long(hi)) => {
            Some(range(
                c.as_primitive::<TimestampMicrosecondType>().value(i),
                *lo,
                *hi,
            ))
        }
        // Iceberg orders strings by their UTF-8 bytes, as `str` does; a truncated lower bound
        // is below every value it stands for, a truncated upper bound above.
        (DataType::Utf8, L::String(lo), L::String(hi)) => {
            let v = c.as_string::<i32>().value(i);
            Some(range(v, lo.as_str(), hi.as_str()))
        }
        _ => None,
    }
}

fn converter(key: &Schema) -> Result<RowConverter, String> {
    RowConverter::new(
        key.fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
    .map_err(|e| format!("the key's columns cannot be compared: {e}"))
}

fn names(s: &Schema) -> Vec<&str> {
    s.fields().iter().map(|f| f.name().as_str()).collect()
}

/// The batches conformed to `table` as it is now, each with every column any of them has, in
/// the table's order (a column a batch lacks is null), so they interleave.
fn aligned(batches: &[RecordBatch], table: &StructType) -> Result<Vec<RecordBatch>, String> {
    let conformed: Vec<RecordBatch> = batches
        .iter()
        .map(|b| conform(b, table).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut fields: Vec<FieldRef> = Vec::new();
    for want in table.fields() {
        if let Some(f) = conformed
            .iter()
            .find_map(|b| b.schema().field_with_name(&want.name).ok().cloned())
        {
            fields.push(Arc::new(f));
        }
    }
    let schema = Arc::new(Schema::new(fields.clone()));
    conformed
        .iter()
        .map(|b| {
            let columns: Vec<ArrayRef> = fields
                .iter()
                .map(|f| {
                    b.column_by_name(f.name())
                        .cloned()
                        .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), b.num_rows()))
                })
                .collect();
            let options = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
            RecordBatch::try_new_with_options(schema.clone(), columns, &options)
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// A struct column's children as a batch of their own (the struct's own nulls left aside:
/// only the rows it holds are read).
pub fn children(column: &ArrayRef) -> Option<RecordBatch> {
    let s = column.as_struct_opt()?;
    let fields: Vec<Field> = s
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(s.len()));
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        s.columns().to_vec(),
        &options,
    )
    .ok()
}

/// The first column of row `row` holding Debezium's placeholder: text, bytes, or an array
/// of either with it as the only element.
fn placeholder(images: &RecordBatch, row: usize) -> Option<String> {
    images
        .schema()
        .fields()
        .iter()
        .zip(images.columns())
        .find(|(_, c)| is_placeholder(c.as_ref(), row))
        .map(|(f, _)| f.name().clone())
}

fn is_placeholder(c: &dyn Array, row: usize) -> bool {
    if c.is_null(row) {
        return false;
    }
    match c.data_type() {
        DataType::Utf8 => c.as_string::<i32>().value(row) == PLACEHOLDER,
        DataType::LargeUtf8 => c.as_string::<i64>().value(row) == PLACEHOLDER,
        DataType::Utf8View => c.as_string_view().value(row) == PLACEHOLDER,
        DataType::Binary => c.as_binary::<i32>().value(row) == PLACEHOLDER.as_bytes(),
        DataType::LargeBinary => c.as_binary::<i64>().value(row) == PLACEHOLDER.as_bytes(),
        DataType::List(_) => {
            let l = c.as_list::<i32>();
            let one = l.value(row);
            one.len() == 1 && is_placeholder(one.as_ref(), 0)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
