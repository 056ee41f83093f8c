//! Avro datums straight into Arrow buffers in one pass: each value is checked as it is read
//! (the checks of [`validate`](super::validate)), and a row that fails partway is taken back,
//! so a bad record leaves nothing behind in a batch of good ones.
//!
//! It covers the types Debezium's schemas use, and maps and Avro enums. A schema holding
//! anything else (unions other than `[null, T]`, Avro's `duration`) is decoded by validation
//! then arrow-avro instead. The
//! columns are built to the Arrow schema arrow-avro gives the same writer schema, and a
//! differential test holds the two paths to equal batches.

use std::mem;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Decimal256Array, DictionaryArray,
    FixedSizeBinaryArray, Float32Array, Float64Array, Int32Array, ListArray, MapArray, NullArray,
    RecordBatch, RecordBatchOptions, StringArray, StructArray, cast::AsArray, make_array,
    types::Int32Type,
};
use arrow_buffer::{
    BooleanBufferBuilder, Buffer, NullBuffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer, i256,
};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, SchemaRef, TimeUnit};

use super::schema::Node;
use super::validate::{Cursor, DatumError, encoded_size_can_be_zero, fits};
use super::zoned::{check_zoned_timestamp_text, zoned_timestamp_micros};

/// Decodes datums of one record schema into the columns of `schema`.
pub(super) struct DirectDecoder {
    schema: SchemaRef,
    columns: Vec<Column>,
    rows: usize,
}

impl DirectDecoder {
    /// `None` when the schema holds a type this decoder does not build, or one that arrow-avro
    /// maps to other columns than expected. `node` is the root record, or a bare type that
    /// `schema` wraps as its one column.
    pub(super) fn new(node: &Node, schema: SchemaRef) -> Option<Self> {
        let fields = schema.fields();
        let columns = match node {
            Node::Record { fields: nodes, .. } if nodes.len() == fields.len() => nodes
                .iter()
                .zip(fields.iter())
                .map(|(n, f)| Column::new(n, f))
                .collect::<Option<Vec<_>>>()?,
            Node::Record { .. } => return None,
            bare if fields.len() == 1 => vec![Column::new(bare, &fields[0])?],
            _ => return None,
        };
        Some(Self {
            schema,
            columns,
            rows: 0,
        })
    }

    /// Reads one whole datum from `c` as a row, or appends nothing.
    pub(super) fn push(&mut self, c: &mut Cursor<'_>) -> Result<(), DatumError> {
        let read = self
            .columns
            .iter_mut()
            .try_for_each(|column| column.read(c))
            .and_then(|()| c.end());
        match read {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                for column in &mut self.columns {
                    column.truncate(self.rows);
                }
                Err(e)
            }
        }
    }

    /// The rows pushed since the last flush. On an error (a bug: pushed rows always make
    /// valid arrays) they are dropped, so that the decoder starts clean.
    pub(super) fn flush(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = mem::take(&mut self.rows);
        let columns = self
            .columns
            .iter_mut()
            .map(Column::finish)
            .collect::<Result<Vec<_>, _>>();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = columns.and_then(|columns| {
            RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
        });
        if batch.is_err() {
            for column in &mut self.columns {
                column.truncate(0);
            }
        }
        batch
    }
}

/// One column: its values, and for a `[null, T]` or `[T, null]` union the validity.
struct Column {
    nulls: Option<Nullable>,
    values: Values,
}

struct Nullable {
    /// The one-byte encodings of the value's and the null's branch index: 0 and 2, or 2 and 0.
    value_byte: u8,
    null_byte: u8,
    validity: NullBufferBuilder,
}

#[derive(Clone, Copy)]
enum Text {
    Binary,
    Utf8,
    /// Debezium's ZonedTimestamp: kept as text here, checked to parse.
    Zoned,
    /// A ZonedTimestamp that stays text ([`Node::ZonedText`]): up to nine fractional digits.
    ZonedKept,
}

enum Values {
    Null(usize),
    Boolean(BooleanBufferBuilder),
    /// `int` as Int32, Date32 or Time32: the Arrow type reinterprets the same values.
    Int(Vec<i32>, DataType),
    /// `long` as Int64, Time64 or a timestamp.
    Long(Vec<i64>, DataType),
    Float(Vec<f32>),
    Double(Vec<f64>),
    Bytes {
        offsets: Vec<i32>,
        data: Vec<u8>,
        text: Text,
    },
    Fixed {
        size: usize,
        data: Vec<u8>,
    },
    /// A `uuid` string as its 16 bytes, as arrow-avro stores it.
    Uuid(Vec<u8>),
    Decimal128 {
        fixed: Option<usize>,
        values: Vec<i128>,
        data_type: DataType,
    },
    Decimal256 {
        fixed: Option<usize>,
        values: Vec<i256>,
        data_type: DataType,
    },
    /// An array, or a map (`map`: its items are the key/value entry records).
    List {
        field: FieldRef,
        offsets: Vec<i32>,
        items: Box<Column>,
        zero_size_items: bool,
        map: bool,
    },
    /// An Avro enum's indexes, as keys into its symbols.
    Enum {
        keys: Vec<i32>,
        dictionary: ArrayRef,
    },
    Struct {
        fields: Fields,
        children: Vec<Column>,
        len: usize,
        /// Trailing null rows not yet given to the children: a null `before` (every insert's)
        /// then costs a count, and its children are filled in bulk.
        deferred: usize,
    },
}

impl Column {
    fn new(node: &Node, field: &Field) -> Option<Self> {
        let nulls = match node {
            Node::Union(branches) => {
                let (null_index, inner) = match branches.as_slice() {
                    [Node::Null, inner] if *inner != Node::Null => (0, inner),
                    [inner, Node::Null] if *inner != Node::Null => (1, inner),
                    _ => return None,
                };
                if !field.is_nullable() {
                    return None;
                }
                return Some(Self {
                    nulls: Some(Nullable {
                        value_byte: 2 - 2 * null_index,
                        null_byte: 2 * null_index,
                        validity: NullBufferBuilder::new(0),
                    }),
                    values: Values::new(inner, field)?,
                });
            }
            _ => None,
        };
        Some(Self {
            nulls,
            values: Values::new(node, field)?,
        })
    }

    /// Inlined into [`read_struct`] and [`read_list`], which take the recursion: a record's
    /// scalar fields cost no call each (a call's prologue and epilogue were a seventh of the
    /// decoder's time).
    #[inline(always)]
    fn read(&mut self, c: &mut Cursor<'_>) -> Result<(), DatumError> {
        if let Some(nullable) = &mut self.nulls {
            // The branch index is one byte, 0 or 2 (zigzag), but for a padded varint.
            let byte = c.buf.get(c.pos).copied();
            if byte == Some(nullable.value_byte) {
                c.pos += 1;
                nullable.validity.append_non_null();
            } else if byte == Some(nullable.null_byte) {
                c.pos += 1;
                nullable.validity.append_null();
                self.values.push_default();
                return Ok(());
            } else {
                return read_padded_branch(nullable, &mut self.values, c);
            }
        }
        self.values.read(c)
    }

    /// Rows under a null record: null where the column can be, a placeholder where not
    /// (hidden by the record's own null), as arrow-avro fills them.
    fn push_nulls(&mut self, rows: usize) {
        if let Some(Nullable { validity, .. }) = &mut self.nulls {
            validity.append_n_nulls(rows);
        }
        self.values.push_defaults(rows);
    }

    fn truncate(&mut self, rows: usize) {
        if let Some(Nullable { validity, .. }) = &mut self.nulls
            && validity.len() > rows
        {
            validity.truncate(rows);
        }
        self.values.truncate(rows);
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let nulls = self.nulls.as_mut().and_then(|n| n.validity.finish());
        self.values.finish(nulls)
    }
}

/// A nullable value whose branch index is not the usual single byte: a padded varint (legal,
/// if no writer we know sends it), or an error.
#[cold]
#[inline(never)]
fn read_padded_branch(
    nullable: &mut Nullable,
    values: &mut Values,
    c: &mut Cursor<'_>,
) -> Result<(), DatumError> {
    let null_index = i64::from(nullable.null_byte / 2);
    let at = c.pos;
    let index = c.long()?;
    if index == null_index {
        nullable.validity.append_null();
        values.push_default();
        return Ok(());
    }
    if index != 1 - null_index {
        return Err(DatumError::BadUnionIndex {
            at,
            index,
            branches: 2,
        });
    }
    nullable.validity.append_non_null();
    values.read(c)
}

/// Takes a column's buffer, leaving an empty one with room for as many as it held.
fn take_vec<T>(v: &mut Vec<T>) -> Vec<T> {
    let capacity = v.len();
    mem::replace(v, Vec::with_capacity(capacity))
}

/// Takes a column's value bytes, leaving room for a quarter more than they held: strings vary
/// in length from batch to batch, and [`Cursor::copy_short`] writes a whole window before it
/// trims it, so an exact fit would grow (a copy of the buffer) in most batches.
fn take_bytes(v: &mut Vec<u8>) -> Vec<u8> {
    let capacity = v.len() + v.len() / 4 + 64;
    mem::replace(v, Vec::with_capacity(capacity))
}

/// Takes an offsets buffer, leaving one that starts at zero.
///
/// Unchecked in release builds: `OffsetBuffer::new` reads every offset again to check what
/// the pushes already ensure, which cost 4% of decoding. Debug builds (the tests, the
/// fuzzers) check.
#[allow(unsafe_code)]
fn take_offsets(offsets: &mut Vec<i32>) -> OffsetBuffer<i32> {
    let mut fresh = Vec::with_capacity(offsets.len());
    fresh.push(0);
    let offsets = ScalarBuffer::from(mem::replace(offsets, fresh));
    if cfg!(debug_assertions) {
        return OffsetBuffer::new(offsets);
    }
    // SAFETY: the buffer starts with a zero, and each push appends the column's new end,
    // which never falls below the last one (`offset` refuses ends past `i32::MAX`); truncation
    // keeps a prefix. So the offsets are non-negative and non-decreasing.
    unsafe { OffsetBuffer::new_unchecked(offsets) }
}

fn last(offsets: &[i32]) -> i32 {
    offsets.last().copied().unwrap_or(0)
}

/// The end offset of a value, refused when the batch's column would pass `i32::MAX`.
fn offset(end: usize, at: usize) -> Result<i32, DatumError> {
    i32::try_from(end).map_err(|_| DatumError::BatchOverflow { at })
}

/// A big-endian two's-complement integer (already checked to fit) sign-extended to `N` bytes.
fn sign_extend<const N: usize>(raw: &[u8]) -> [u8; N] {
    let sign = match raw.first() {
        Some(b) if b & 0x80 != 0 => 0xff,
        _ => 0x00,
    };
    let mut out = [sign; N];
    let kept = &raw[raw.len().saturating_sub(N)..];
    out[N - kept.len()..].copy_from_slice(kept);
    out
}

fn array<const N: usize>(c: &mut Cursor<'_>) -> Result<[u8; N], DatumError> {
    let mut out = [0; N];
    out.copy_from_slice(c.take(N)?);
    Ok(out)
}

/// A decimal's bytes, checked to fit `width` bytes.
fn decimal<'a>(
    c: &'a mut Cursor<'_>,
    fixed: Option<usize>,
    width: usize,
) -> Result<&'a [u8], DatumError> {
    let len = match fixed {
        Some(size) => size,
        None => c.length()?,
    };
    let at = c.pos;
    let raw = c.take(len)?;
    if fits(raw, width) {
        Ok(raw)
    } else {
        Err(DatumError::DecimalOverflow { at, len, width })
    }
}

impl Values {
    fn new(node: &Node, field: &Field) -> Option<Self> {
        use DataType as D;
        let data_type = field.data_type();
        let dt = data_type.clone();
        Some(match (node, data_type) {
            (Node::Null, D::Null) => Self::Null(0),
            (Node::Boolean, D::Boolean) => Self::Boolean(BooleanBufferBuilder::new(0)),
            (Node::Int, D::Int32 | D::Date32 | D::Time32(TimeUnit::Millisecond)) => {
                Self::Int(Vec::new(), dt)
            }
            (Node::Long, D::Int64 | D::Time64(TimeUnit::Microsecond) | D::Timestamp(..)) => {
                Self::Long(Vec::new(), dt)
            }
            (Node::Float, D::Float32) => Self::Float(Vec::new()),
            (Node::Double, D::Float64) => Self::Double(Vec::new()),
            (Node::Bytes | Node::String | Node::ZonedTimestamp | Node::ZonedText, _) => {
                let text = match (node, data_type) {
                    (Node::Bytes, D::Binary) => Text::Binary,
                    (Node::String, D::Utf8) => Text::Utf8,
                    (Node::ZonedTimestamp, D::Utf8) => Text::Zoned,
                    (Node::ZonedText, D::Utf8) => Text::ZonedKept,
                    _ => return None,
                };
                Self::Bytes {
                    offsets: vec![0],
                    data: Vec::new(),
                    text,
                }
            }
            (Node::Uuid, D::FixedSizeBinary(16)) => Self::Uuid(Vec::new()),
            (Node::Fixed(size), D::FixedSizeBinary(width))
                if *size > 0 && usize::try_from(*width).ok() == Some(*size) =>
            {
                Self::Fixed {
                    size: *size,
                    data: Vec::new(),
                }
            }
            (Node::Decimal { width: 16, fixed }, D::Decimal128(..)) => Self::Decimal128 {
                fixed: *fixed,
                values: Vec::new(),
                data_type: dt,
            },
            (Node::Decimal { width: 32, fixed }, D::Decimal256(..)) => Self::Decimal256 {
                fixed: *fixed,
                values: Vec::new(),
                data_type: dt,
            },
            (Node::Array(items), D::List(field)) => Self::List {
                field: field.clone(),
                offsets: vec![0],
                items: Box::new(Column::new(items, field)?),
                zero_size_items: encoded_size_can_be_zero(items),
                map: false,
            },
            (Node::Map(values), D::Map(entries, false)) => {
                let entry = Node::Record {
                    name: entries.name().clone(),
                    fields: vec![Node::String, (**values).clone()],
                };
                Self::List {
                    field: entries.clone(),
                    offsets: vec![0],
                    items: Box::new(Column::new(&entry, entries)?),
                    zero_size_items: false,
                    map: true,
                }
            }
            (Node::Enum(symbols), D::Dictionary(key, value))
                if **key == D::Int32 && **value == D::Utf8 =>
            {
                let names: Vec<String> =
                    serde_json::from_str(field.metadata().get("avro.enum.symbols")?).ok()?;
                if names.len() != *symbols {
                    return None;
                }
                Self::Enum {
                    keys: Vec::new(),
                    dictionary: Arc::new(StringArray::from(names)),
                }
            }
            (Node::Record { fields: nodes, .. }, D::Struct(fields))
                if nodes.len() == fields.len() =>
            {
                Self::Struct {
                    fields: fields.clone(),
                    children: nodes
                        .iter()
                        .zip(fields.iter())
                        .map(|(n, f)| Column::new(n, f))
                        .collect::<Option<_>>()?,
                    len: 0,
                    deferred: 0,
                }
            }
            _ => return None,
        })
    }

    #[inline(always)]
    fn read(&mut self, c: &mut Cursor<'_>) -> Result<(), DatumError> {
        match self {
            Self::Null(len) => *len += 1,
            Self::Boolean(values) => {
                let at = c.pos;
                match c.take(1)?[0] {
                    0 => values.append(false),
                    1 => values.append(true),
                    byte => return Err(DatumError::BadBoolean { at, byte }),
                }
            }
            Self::Int(values, _) => values.push(c.int()?),
            Self::Long(values, _) => values.push(c.long()?),
            Self::Float(values) => values.push(f32::from_le_bytes(array(c)?)),
            Self::Double(values) => values.push(f64::from_le_bytes(array(c)?)),
            Self::Bytes {
                offsets,
                data,
                text,
            } => {
                let at = c.pos;
                if let Text::Binary | Text::Utf8 = text
                    && c.copy_short(data, matches!(text, Text::Utf8))
                {
                    offsets.push(offset(data.len(), at)?);
                    return Ok(());
                }
                let bytes = match text {
                    Text::Binary => {
                        let len = c.length()?;
                        c.take(len)?
                    }
                    Text::Utf8 => c.text()?,
                    kind @ (Text::Zoned | Text::ZonedKept) => {
                        let value = c.string()?;
                        let checked = match kind {
                            Text::ZonedKept => check_zoned_timestamp_text(value),
                            _ => zoned_timestamp_micros(value).map(drop),
                        };
                        if let Err(reason) = checked {
                            return Err(DatumError::BadTimestamp {
                                at,
                                value: value.to_owned(),
                                reason,
                            });
                        }
                        value.as_bytes()
                    }
                };
                data.extend_from_slice(bytes);
                offsets.push(offset(data.len(), at)?);
            }
            Self::Fixed { size, data } => data.extend_from_slice(c.take(*size)?),
            Self::Uuid(data) => {
                let at = c.pos;
                let text = c.string()?;
                let uuid = uuid::Uuid::try_parse(text).map_err(|_| DatumError::BadUuid {
                    at,
                    value: text.to_owned(),
                })?;
                data.extend_from_slice(uuid.as_bytes());
            }
            Self::Decimal128 { fixed, values, .. } => {
                let raw = decimal(c, *fixed, 16)?;
                values.push(i128::from_be_bytes(sign_extend(raw)));
            }
            Self::Decimal256 { fixed, values, .. } => {
                let raw = decimal(c, *fixed, 32)?;
                values.push(i256::from_be_bytes(sign_extend(raw)));
            }
            Self::List {
                offsets,
                items,
                zero_size_items,
                ..
            } => read_list(offsets, items, *zero_size_items, c)?,
            Self::Enum { keys, dictionary } => {
                let at = c.pos;
                let index = c.long()?;
                let symbols = dictionary.len();
                match i32::try_from(index) {
                    Ok(key) if usize::try_from(key).is_ok_and(|k| k < symbols) => keys.push(key),
                    _ => return Err(DatumError::BadEnumIndex { at, index, symbols }),
                }
            }
            Self::Struct {
                children,
                len,
                deferred,
                ..
            } => read_struct(children, len, deferred, c)?,
        }
        Ok(())
    }

    /// One placeholder row, as [`Values::push_defaults`] does.
    #[inline(always)]
    fn push_default(&mut self) {
        match self {
            Self::Null(len) => *len += 1,
            Self::Boolean(values) => values.append(false),
            Self::Int(values, _) => values.push(0),
            Self::Long(values, _) => values.push(0),
            Self::Float(values) => values.push(0.0),
            Self::Double(values) => values.push(0.0),
            Self::Bytes { offsets, .. } | Self::List { offsets, .. } => {
                offsets.push(last(offsets));
            }
            Self::Decimal128 { values, .. } => values.push(0),
            Self::Enum { keys, .. } => keys.push(0),
            _ => self.push_defaults(1),
        }
    }

    fn push_defaults(&mut self, rows: usize) {
        match self {
            Self::Null(len) => *len += rows,
            Self::Boolean(values) => values.append_n(rows, false),
            Self::Int(values, _) => values.resize(values.len() + rows, 0),
            Self::Long(values, _) => values.resize(values.len() + rows, 0),
            Self::Float(values) => values.resize(values.len() + rows, 0.0),
            Self::Double(values) => values.resize(values.len() + rows, 0.0),
            Self::Bytes { offsets, .. } | Self::List { offsets, .. } => {
                offsets.resize(offsets.len() + rows, last(offsets));
            }
            Self::Fixed { size, data } => data.resize(data.len() + *size * rows, 0),
            Self::Uuid(data) => data.resize(data.len() + 16 * rows, 0),
            Self::Decimal128 { values, .. } => values.resize(values.len() + rows, 0),
            Self::Decimal256 { values, .. } => values.resize(values.len() + rows, i256::ZERO),
            Self::Enum { keys, .. } => keys.resize(keys.len() + rows, 0),
            Self::Struct { len, deferred, .. } => {
                *deferred += rows;
                *len += rows;
            }
        }
    }

    /// Drops everything past the first `rows` rows (a half-read row included).
    fn truncate(&mut self, rows: usize) {
        match self {
            Self::Null(len) => *len = (*len).min(rows),
            Self::Boolean(values) => {
                if values.len() > rows {
                    values.truncate(rows);
                }
            }
            Self::Int(values, _) => values.truncate(rows),
            Self::Long(values, _) => values.truncate(rows),
            Self::Float(values) => values.truncate(rows),
            Self::Double(values) => values.truncate(rows),
            Self::Bytes { offsets, data, .. } => {
                offsets.truncate(rows + 1);
                data.truncate(usize::try_from(last(offsets)).unwrap_or(0));
            }
            Self::Fixed { size, data } => data.truncate(rows * *size),
            Self::Uuid(data) => data.truncate(rows * 16),
            Self::Decimal128 { values, .. } => values.truncate(rows),
            Self::Decimal256 { values, .. } => values.truncate(rows),
            Self::Enum { keys, .. } => keys.truncate(rows),
            Self::List { offsets, items, .. } => {
                offsets.truncate(rows + 1);
                items.truncate(usize::try_from(last(offsets)).unwrap_or(0));
            }
            Self::Struct {
                children,
                len,
                deferred,
                ..
            } => {
                settle(children, deferred);
                for child in children.iter_mut() {
                    child.truncate(rows);
                }
                *len = (*len).min(rows);
            }
        }
    }

    fn finish(&mut self, nulls: Option<NullBuffer>) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            Self::Null(len) => Arc::new(NullArray::new(mem::take(len))),
            Self::Boolean(values) => Arc::new(BooleanArray::new(values.finish(), nulls)),
            Self::Int(values, data_type) => {
                let len = values.len();
                primitive(Buffer::from_vec(take_vec(values)), len, data_type, nulls)?
            }
            Self::Long(values, data_type) => {
                let len = values.len();
                primitive(Buffer::from_vec(take_vec(values)), len, data_type, nulls)?
            }
            Self::Float(values) => Arc::new(Float32Array::new(take_vec(values).into(), nulls)),
            Self::Double(values) => Arc::new(Float64Array::new(take_vec(values).into(), nulls)),
            Self::Bytes {
                offsets,
                data,
                text,
            } => {
                let offsets = take_offsets(offsets);
                let data = Buffer::from_vec(take_bytes(data));
                match text {
                    Text::Binary => Arc::new(BinaryArray::try_new(offsets, data, nulls)?),
                    Text::Utf8 | Text::Zoned | Text::ZonedKept => {
                        Arc::new(strings(offsets, data, nulls)?)
                    }
                }
            }
            Self::Fixed { size, data } => {
                let size = i32::try_from(*size)
                    .map_err(|_| ArrowError::InvalidArgumentError("fixed too wide".into()))?;
                fixed(size, take_vec(data), nulls)?
            }
            Self::Uuid(data) => fixed(16, take_vec(data), nulls)?,
            Self::Decimal128 {
                values, data_type, ..
            } => Arc::new(
                Decimal128Array::try_new(take_vec(values).into(), nulls)?
                    .with_data_type(data_type.clone()),
            ),
            Self::Decimal256 {
                values, data_type, ..
            } => Arc::new(
                Decimal256Array::try_new(take_vec(values).into(), nulls)?
                    .with_data_type(data_type.clone()),
            ),
            Self::List {
                field,
                offsets,
                items,
                map: false,
                ..
            } => {
                let offsets = take_offsets(offsets);
                Arc::new(ListArray::try_new(
                    field.clone(),
                    offsets,
                    items.finish()?,
                    nulls,
                )?)
            }
            Self::List {
                field,
                offsets,
                items,
                map: true,
                ..
            } => {
                let offsets = take_offsets(offsets);
                let entries = items.finish()?.as_struct().clone();
                Arc::new(MapArray::try_new(
                    field.clone(),
                    offsets,
                    entries,
                    nulls,
                    false,
                )?)
            }
            Self::Enum {
                keys, dictionary, ..
            } => Arc::new(DictionaryArray::<Int32Type>::try_new(
                Int32Array::new(take_vec(keys).into(), nulls),
                dictionary.clone(),
            )?),
            Self::Struct {
                fields,
                children,
                len,
                deferred,
            } => {
                settle(children, deferred);
                let children = children
                    .iter_mut()
                    .map(Column::finish)
                    .collect::<Result<Vec<_>, _>>()?;
                Arc::new(StructArray::try_new_with_length(
                    fields.clone(),
                    children,
                    nulls,
                    mem::take(len),
                )?)
            }
        })
    }
}

/// One record value: each field read inline (see [`Column::read`]).
#[inline(never)]
fn read_struct(
    children: &mut [Column],
    len: &mut usize,
    deferred: &mut usize,
    c: &mut Cursor<'_>,
) -> Result<(), DatumError> {
    settle(children, deferred);
    for child in children.iter_mut() {
        child.read(c)?;
    }
    *len += 1;
    Ok(())
}

/// One array or map value: its blocks of items.
#[inline(never)]
fn read_list(
    offsets: &mut Vec<i32>,
    items: &mut Column,
    zero_size_items: bool,
    c: &mut Cursor<'_>,
) -> Result<(), DatumError> {
    let at = c.pos;
    let mut count = 0usize;
    c.blocks(
        |c| {
            count += 1;
            items.read(c)
        },
        zero_size_items,
    )?;
    let end = usize::try_from(last(offsets)).unwrap_or(0) + count;
    offsets.push(offset(end, at)?);
    Ok(())
}

/// Gives a record's children the null rows it deferred.
fn settle(children: &mut [Column], deferred: &mut usize) {
    if *deferred > 0 {
        for child in children.iter_mut() {
            child.push_nulls(*deferred);
        }
        *deferred = 0;
    }
}

/// A string column from its buffers.
///
/// Unchecked in release builds: `StringArray::try_new` validates all the column's UTF-8 and
/// every offset's char boundary again, a tenth of decoding, when each value was checked as it
/// was read (and a bad one refused with its record). Debug builds (the tests, the fuzzers)
/// check.
#[allow(unsafe_code)]
fn strings(
    offsets: OffsetBuffer<i32>,
    data: Buffer,
    nulls: Option<NullBuffer>,
) -> Result<StringArray, ArrowError> {
    if cfg!(debug_assertions) {
        return StringArray::try_new(offsets, data, nulls);
    }
    // SAFETY: every value appended to `data` was checked to be UTF-8 (`Cursor::copy_short`,
    // `text`, `string`), and a failed row truncates `data` back to the last offset, so `data`
    // is whole strings end to end and each offset (see `take_offsets`) falls between two of
    // them; the last offset is `data`'s length, and `nulls` has one bit per row, as for every
    // column.
    Ok(unsafe { StringArray::new_unchecked(offsets, data, nulls) })
}

/// A primitive array of `data_type` over `values`, which hold its native values.
fn primitive(
    values: Buffer,
    len: usize,
    data_type: &DataType,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, ArrowError> {
    let data = ArrayData::builder(data_type.clone())
        .len(len)
        .add_buffer(values)
        .nulls(nulls)
        .build()?;
    Ok(make_array(data))
}

fn fixed(size: i32, data: Vec<u8>, nulls: Option<NullBuffer>) -> Result<ArrayRef, ArrowError> {
    Ok(Arc::new(FixedSizeBinaryArray::try_new(
        size,
        Buffer::from_vec(data),
        nulls,
    )?))
}
