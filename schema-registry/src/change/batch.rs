//! Batch assembly: the rows of one partition's open batch, and the batch they close into
//! (the fixed columns, the key, then the value's columns as its shape has them).

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, StructArray, UInt32Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field, Schema, TimeUnit};

use super::decoder::Split;
use super::{ChangeBatch, ChangeError, ChangeErrorKind, KafkaRecord, ValueShape};
use crate::avro::{AvroBatchDecoder, DecodeError};
use crate::framing::{SchemaRef, Side};
use crate::non_data::{NON_DATA_METADATA, NonData};

/// The batch being filled for one partition.
pub(super) struct Open {
    first_offset: i64,
    pub(super) last_offset: i64,
    pub(super) key_schema: Option<SchemaRef>,
    pub(super) value_schema: Option<SchemaRef>,
    shape: ValueShape,
    pub(super) keys: Option<AvroBatchDecoder>,
    pub(super) values: Option<AvroBatchDecoder>,
    offsets: Int64Builder,
    timestamps: TimestampMillisecondBuilder,
    tombstones: BooleanBuilder,
    /// Per row, the row of the key / value decoders it uses, or None.
    key_rows: Vec<Option<u32>>,
    value_rows: Vec<Option<u32>>,
}

impl Open {
    pub(super) fn new(
        offset: i64,
        key_schema: Option<SchemaRef>,
        value_schema: Option<SchemaRef>,
        shape: ValueShape,
        keys: Option<AvroBatchDecoder>,
        values: Option<AvroBatchDecoder>,
    ) -> Self {
        Self {
            first_offset: offset,
            last_offset: offset,
            key_schema,
            value_schema,
            shape,
            keys,
            values,
            offsets: Int64Builder::new(),
            timestamps: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            tombstones: BooleanBuilder::new(),
            key_rows: Vec::new(),
            value_rows: Vec::new(),
        }
    }

    /// Whether a record of these schemas joins this batch: a new batch when the schemas
    /// change, or this one is full; a tombstone joins whatever batch is open.
    pub(super) fn joins(
        &self,
        batch_rows: usize,
        key_schema: Option<&SchemaRef>,
        value_schema: Option<&SchemaRef>,
    ) -> bool {
        let has_room = |d: &Option<AvroBatchDecoder>| d.as_ref().is_none_or(|d| !d.is_full());
        self.offsets.len() < batch_rows
            && has_room(&self.keys)
            && has_room(&self.values)
            && (key_schema.is_none() || self.key_schema.as_ref() == key_schema)
            && (value_schema.is_none() || self.value_schema.as_ref() == value_schema)
            && !(self.shape == ValueShape::KeyOnly && value_schema.is_some())
    }

    /// Appends one record's row.
    pub(super) fn push_row(
        &mut self,
        record: KafkaRecord<'_>,
        key: Option<&Split<'_>>,
        value: Option<&Split<'_>>,
    ) -> Result<(), ChangeError> {
        // Key first: if the value then fails, the key row is left unused, never misaligned.
        let key_row =
            append(key, self.keys.as_mut()).map_err(ChangeError::at(record, Side::Key))?;
        let value_row =
            append(value, self.values.as_mut()).map_err(ChangeError::at(record, Side::Value))?;
        if self.offsets.len() == 0 {
            self.first_offset = record.offset;
        }
        self.offsets.append_value(record.offset);
        self.timestamps.append_option(record.timestamp);
        self.tombstones.append_value(value.is_none());
        self.key_rows.push(key_row);
        self.value_rows.push(value_row);
        self.last_offset = record.offset;
        Ok(())
    }
}

/// Pushes one side's datum into its decoder: the row it landed in, None when the side is absent.
fn append(
    side: Option<&Split<'_>>,
    decoder: Option<&mut AvroBatchDecoder>,
) -> Result<Option<u32>, ChangeErrorKind> {
    match (side, decoder) {
        (Some(f), Some(d)) => {
            let row = d.rows() as u32;
            d.push(&f.datum)?;
            Ok(Some(row))
        }
        // Batches split on schema changes, so this cannot happen; refuse rather than misalign.
        (Some(_), None) => Err(ChangeErrorKind::Model(
            "a record side the open batch has no decoder for".into(),
        )),
        (None, _) => Ok(None),
    }
}

/// The rows of `decoded` picked by `rows` (None: a null row); as is when it is the identity.
fn pick(decoded: &RecordBatch, rows: &[Option<u32>]) -> Result<Vec<ArrayRef>, ChangeErrorKind> {
    let identity = rows.len() == decoded.num_rows()
        && rows.iter().enumerate().all(|(i, r)| *r == Some(i as u32));
    if identity {
        return Ok(decoded.columns().to_vec());
    }
    let indices = UInt32Array::from(rows.to_vec());
    decoded
        .columns()
        .iter()
        .map(|c| {
            arrow_select::take::take(c, &indices, None)
                .map_err(|e| ChangeErrorKind::Model(e.to_string()))
        })
        .collect()
}

/// The open batch as a [`ChangeBatch`]; None when every record pushed into it failed.
pub(super) fn finish(
    part: &(Arc<str>, i32),
    open: &mut Open,
) -> Result<Option<ChangeBatch>, ChangeErrorKind> {
    let n = open.offsets.len();
    if n == 0 {
        return Ok(None);
    }
    let (mut fields, mut columns, tombstones) = record_columns(open);
    let key = key_column(open, n)?;
    let (value, ops) = value_columns(open)?;
    for (field, column) in std::iter::once(key).chain(value) {
        fields.push(field);
        columns.push(column);
    }
    done(part, open, fields, columns, &tombstones, ops)
}

/// The Kafka record's own columns, and its tombstone flags for [`done`].
fn record_columns(open: &mut Open) -> (Vec<Field>, Vec<ArrayRef>, BooleanArray) {
    let fields = vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new(
            "__timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("__op", DataType::Utf8, false),
        Field::new("__tombstone", DataType::Boolean, false),
    ];
    let tombstones = open.tombstones.finish();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(open.offsets.finish()),
        Arc::new(open.timestamps.finish()),
        Arc::new(StringBuilder::new().finish()), // replaced by done, once the value is known
        Arc::new(tombstones.clone()),
    ];
    (fields, columns, tombstones)
}

/// The key record as one struct column; null for keyless rows.
fn key_column(open: &mut Open, n: usize) -> Result<(Field, ArrayRef), ChangeErrorKind> {
    let Some(keys) = flushed(&mut open.keys)? else {
        let field = Field::new("key", DataType::Struct(Default::default()), true);
        return Ok((
            field,
            Arc::new(StructArray::new_null(Default::default(), n)),
        ));
    };
    let picked = pick(&keys, &open.key_rows)?;
    let key = StructArray::try_new(
        keys.schema().fields().clone(),
        picked,
        Some(present(&open.key_rows)),
    )
    .map_err(model)?;
    Ok((
        Field::new("key", key.data_type().clone(), true),
        Arc::new(key),
    ))
}

/// Where each row's op is read from when the batch is done: a column of the value, not a
/// string per row (an allocation and a copy each, a tenth of the decoder's time).
enum Ops {
    /// No column has it: rows without one are tombstones, or not rows.
    None,
    /// The envelope's `op`, or a non-data record's own.
    Column(StringArray),
    /// A flattened row's `__op`, else its `__deleted` ("true": a delete), else an insert.
    Flattened {
        op: Option<StringArray>,
        deleted: Option<StringArray>,
    },
}

impl Ops {
    /// Row `i`'s op; tombstones are settled before this is asked.
    fn get(&self, i: usize) -> Option<&str> {
        match self {
            Self::None => None,
            Self::Column(op) => op.is_valid(i).then(|| op.value(i)),
            Self::Flattened { op, deleted } => Some(match (op, deleted) {
                (Some(op), _) if op.is_valid(i) => op.value(i),
                (_, Some(d)) if d.is_valid(i) && d.value(i) == "true" => "d",
                _ => "c",
            }),
        }
    }
}

/// The value's columns as its shape has them, and where the rows' ops are.
fn value_columns(open: &mut Open) -> Result<(Vec<(Field, ArrayRef)>, Ops), ChangeErrorKind> {
    let Some(values) = flushed(&mut open.values)? else {
        return Ok((Vec::new(), Ops::None));
    };
    let picked = pick(&values, &open.value_rows)?;
    if open.shape == ValueShape::Envelope {
        return envelope_columns(&values, picked);
    }
    let after = StructArray::try_new(
        values.schema().fields().clone(),
        picked,
        Some(present(&open.value_rows)),
    )
    .map_err(model)?;
    let (column, ops) = match open.shape {
        ValueShape::NonData(kind) => non_data_column(kind, after),
        _ => flattened_column(after),
    };
    Ok((vec![column], ops))
}

/// Each field of the envelope as a column of its own.
fn envelope_columns(
    values: &RecordBatch,
    picked: Vec<ArrayRef>,
) -> Result<(Vec<(Field, ArrayRef)>, Ops), ChangeErrorKind> {
    let mut out = Vec::with_capacity(picked.len());
    let mut ops = Ops::None;
    for (f, c) in values.schema().fields().iter().zip(picked) {
        if f.name() == "op" {
            let op = c
                .as_string_opt::<i32>()
                .ok_or_else(|| ChangeErrorKind::Model("envelope op is not a string".into()))?;
            ops = Ops::Column(op.clone());
        }
        out.push((f.as_ref().clone().with_nullable(true), c));
    }
    Ok((out, ops))
}

/// A record that is not a row: its whole value as one `value` column, tagged with its kind.
fn non_data_column(kind: NonData, value: StructArray) -> ((Field, ArrayRef), Ops) {
    // Its own op when it has one (logical decoding messages: `m`), else null.
    let ops = value
        .column_by_name("op")
        .and_then(|c| c.as_string_opt::<i32>())
        .map_or(Ops::None, |op| Ops::Column(op.clone()));
    let meta = [(NON_DATA_METADATA.to_owned(), kind.as_str().to_owned())];
    let field = Field::new("value", value.data_type().clone(), true).with_metadata(
        meta.into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
    );
    ((field, Arc::new(value)), ops)
}

/// A flattened row as one `after` column; its op from `__op`, else from `__deleted`.
fn flattened_column(after: StructArray) -> ((Field, ArrayRef), Ops) {
    let deleted = after
        .column_by_name("__deleted")
        .and_then(|c| c.as_string_opt::<i32>().cloned());
    let op = after
        .column_by_name("__op")
        .and_then(|c| c.as_string_opt::<i32>().cloned());
    (
        (
            Field::new("after", after.data_type().clone(), true),
            Arc::new(after),
        ),
        Ops::Flattened { op, deleted },
    )
}

/// The batch a decoder holds, flushed; None when there is no decoder or it holds no rows.
fn flushed(decoder: &mut Option<AvroBatchDecoder>) -> Result<Option<RecordBatch>, DecodeError> {
    decoder
        .as_mut()
        .map(AvroBatchDecoder::flush)
        .transpose()
        .map(Option::flatten)
}

/// The validity of a struct column: the rows that have this side.
fn present(rows: &[Option<u32>]) -> NullBuffer {
    rows.iter().map(Option::is_some).collect::<Vec<_>>().into()
}

fn model(e: ArrowError) -> ChangeErrorKind {
    ChangeErrorKind::Model(e.to_string())
}

/// The batch, with its `__op` column filled in from `ops`: the envelope's own `op` column
/// as it is when every row has one.
fn done(
    part: &(Arc<str>, i32),
    open: &Open,
    mut fields: Vec<Field>,
    mut columns: Vec<ArrayRef>,
    tombstones: &BooleanArray,
    ops: Ops,
) -> Result<Option<ChangeBatch>, ChangeErrorKind> {
    let non_data = matches!(open.shape, ValueShape::NonData(_));
    let n = tombstones.len();
    columns[2] = match &ops {
        Ops::Column(op)
            if op.len() == n && op.null_count() == 0 && tombstones.true_count() == 0 =>
        {
            Arc::new(op.clone())
        }
        _ => {
            // A tombstone deletes by key; a row without op is malformed data, unless it is
            // not a row.
            let mut op_column = StringBuilder::with_capacity(n, n);
            for i in 0..n {
                match (tombstones.value(i), ops.get(i)) {
                    (true, _) => op_column.append_value("d"),
                    (false, Some(op)) => op_column.append_value(op),
                    (false, None) if non_data => op_column.append_null(),
                    (false, None) => {
                        return Err(ChangeErrorKind::Model(format!("row {i} has no op")));
                    }
                }
            }
            Arc::new(op_column.finish())
        }
    };
    fields[2] = fields[2].clone().with_nullable(non_data);
    let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(model)?;
    Ok(Some(ChangeBatch {
        topic: part.0.clone(),
        partition: part.1,
        first_offset: open.first_offset,
        last_offset: open.last_offset,
        key_schema: open.key_schema.clone(),
        value_schema: open.value_schema.clone(),
        shape: open.shape,
        rows,
    }))
}
