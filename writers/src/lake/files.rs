//! A data file of a lake table: rows encoded by lakesink's own Parquet writer (arrow/parquet
//! 60, with each column's Iceberg field id), and the [`DataFile`] entry a manifest lists,
//! built from the file's footer. The `iceberg` crate's own writer is on arrow/parquet 58; see
//! docs/lake.md for why lakesink does not hand its batches over to it.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, PrimitiveType, Schema,
    Struct, Type,
};
use lakesink_config::Codec;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;

use crate::parquet::{ParallelWriter, encode_threads};

/// Writer settings for lake files: the raw layer's.
pub fn properties(codec: Codec, row_group_rows: usize) -> WriterProperties {
    crate::parquet::writer_properties(codec, row_group_rows)
}

/// One file being encoded in memory.
pub struct OpenFile {
    writer: ParallelWriter,
    schema: SchemaRef,
    rows: u64,
}

/// A file's bytes with its footer.
pub struct Sealed {
    pub bytes: bytes::Bytes,
    pub metadata: ParquetMetaData,
    pub rows: u64,
}

impl OpenFile {
    pub fn new(schema: SchemaRef, props: WriterProperties) -> Result<Self, String> {
        // Iceberg readers find columns by field id; an Arrow schema in the footer would only
        // tell some readers to prefer it over the table's.
        let options = parquet::arrow::arrow_writer::ArrowWriterOptions::new()
            .with_properties(props)
            .with_skip_arrow_metadata(true);
        let writer = ArrowWriter::try_new_with_options(Vec::new(), schema.clone(), options)
            .and_then(|w| ParallelWriter::new(w, schema.clone(), encode_threads()))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            writer,
            schema,
            rows: 0,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.writer.write(batch).map_err(|e| e.to_string())?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Encoded bytes so far, with the row group being built.
    pub fn bytes(&self) -> usize {
        self.writer.bytes_written() + self.writer.in_progress_size()
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn seal(mut self) -> Result<Sealed, String> {
        let metadata = self.writer.finish().map_err(|e| e.to_string())?;
        // `into_inner` would try to finish the file a second time.
        let bytes = std::mem::take(self.writer.inner_mut());
        Ok(Sealed {
            bytes: bytes.into(),
            metadata,
            rows: self.rows,
        })
    }
}

/// `batch` as one file of the table whose columns are `table`'s (their field ids), encoded with
/// `props`: a file written at once, as opposed to [`OpenFile`]'s batch by batch.
pub fn encode(
    batch: &arrow_array::RecordBatch,
    table: &iceberg::spec::StructType,
    props: WriterProperties,
) -> Result<Sealed, String> {
    let rows = crate::lake::types::conform(batch, table).map_err(|e| e.to_string())?;
    let mut open = OpenFile::new(rows.schema(), props)?;
    open.write(&rows)?;
    open.seal()
}

/// The manifest entry of a sealed file at `path`: its counts per column, and lower and upper
/// bounds where Parquet's statistics give them (see [`bounds`]), so engines skip files by them.
pub fn data_file(
    path: String,
    sealed: &Sealed,
    schema: &Schema,
    spec_id: i32,
    partition: Struct,
) -> Result<DataFile, String> {
    entry(path, sealed, schema, spec_id, partition, None)
}

/// The manifest entry of an equality-delete file: rows of the columns `equality_ids` (the
/// table's field ids, which the file's columns carry) whose matches in older data files are
/// deleted.
pub fn equality_delete_file(
    path: String,
    sealed: &Sealed,
    schema: &Schema,
    spec_id: i32,
    partition: Struct,
    equality_ids: Vec<i32>,
) -> Result<DataFile, String> {
    entry(path, sealed, schema, spec_id, partition, Some(equality_ids))
}

fn entry(
    path: String,
    sealed: &Sealed,
    schema: &Schema,
    spec_id: i32,
    partition: Struct,
    equality_ids: Option<Vec<i32>>,
) -> Result<DataFile, String> {
    let mut sizes: HashMap<i32, u64> = HashMap::new();
    let mut values: HashMap<i32, u64> = HashMap::new();
    let mut nulls: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    let mut unknown_nulls: Vec<i32> = Vec::new();
    let mut unbounded: Vec<i32> = Vec::new();
    let descr = sealed.metadata.file_metadata().schema_descr();
    for rg in sealed.metadata.row_groups() {
        for (i, col) in rg.columns().iter().enumerate() {
            let info = descr.column(i).self_type().get_basic_info().clone();
            if !info.has_id() {
                continue;
            }
            let id = info.id();
            *sizes.entry(id).or_default() += u64::try_from(col.compressed_size()).unwrap_or(0);
            *values.entry(id).or_default() += u64::try_from(col.num_values()).unwrap_or(0);
            match col.statistics().and_then(Statistics::null_count_opt) {
                Some(n) => *nulls.entry(id).or_default() += n,
                None => unknown_nulls.push(id),
            }
            let Some(stats) = col.statistics() else {
                continue;
            };
            // Only top-level and struct columns: a bound of a list's elements is not one of
            // the column.
            if descr.column(i).max_rep_level() > 0 {
                continue;
            }
            let Some(Type::Primitive(p)) = schema.field_by_id(id).map(|f| f.field_type.as_ref())
            else {
                continue;
            };
            match bounds(p, stats) {
                Some((lo, hi)) => {
                    merge(&mut lower, id, lo, |new, old| new < old);
                    merge(&mut upper, id, hi, |new, old| new > old);
                }
                // A chunk with values but no bounds (a 24:00 time, a maximum that cannot be
                // truncated): the file's bounds would leave its values out, so it has none.
                // A chunk of only nulls, or only NaN, has nothing to bound.
                None if stats.min_bytes_opt().is_some() && !nan_only(stats) => {
                    unbounded.push(id);
                }
                None => {}
            }
        }
    }
    for id in unknown_nulls {
        nulls.remove(&id);
    }
    for id in unbounded {
        lower.remove(&id);
        upper.remove(&id);
    }
    let content = match equality_ids {
        Some(_) => DataContentType::EqualityDeletes,
        None => DataContentType::Data,
    };
    DataFileBuilder::default()
        .content(content)
        .equality_ids(equality_ids)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(sealed.rows)
        .file_size_in_bytes(sealed.bytes.len() as u64)
        .column_sizes(sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(
            sealed
                .metadata
                .row_groups()
                .iter()
                .filter_map(|rg| rg.file_offset())
                .collect(),
        ))
        .build()
        .map_err(|e| e.to_string())
}

fn merge(
    map: &mut HashMap<i32, Datum>,
    id: i32,
    new: Datum,
    better: impl Fn(&Datum, &Datum) -> bool,
) {
    match map.get(&id) {
        Some(old) if !better(&new, old) => {}
        _ => {
            map.insert(id, new);
        }
    }
}

/// How many characters (strings) or bytes (binary) a bound keeps: Iceberg's default metrics
/// mode, `truncate(16)`, so long values do not bloat the manifests.
const TRUNCATE: usize = 16;

/// Lower and upper bounds of a column chunk, from Parquet statistics that are exact and ordered
/// as Iceberg orders the type. Floats leave NaN out (Parquet's statistics skip it; a chunk of
/// only NaN has none) and widen a zero bound to both signs. UUIDs have none: engines disagree
/// on their order.
fn bounds(p: &PrimitiveType, stats: &Statistics) -> Option<(Datum, Datum)> {
    use PrimitiveType as P;
    match (p, stats) {
        (P::Int, Statistics::Int32(s)) => {
            Some((Datum::int(*s.min_opt()?), Datum::int(*s.max_opt()?)))
        }
        (P::Date, Statistics::Int32(s)) => {
            Some((Datum::date(*s.min_opt()?), Datum::date(*s.max_opt()?)))
        }
        (P::Long, Statistics::Int64(s)) => {
            Some((Datum::long(*s.min_opt()?), Datum::long(*s.max_opt()?)))
        }
        // Iceberg's time stops before 24:00, which PostgreSQL's `time` reaches: no bound then.
        (P::Time, Statistics::Int64(s)) => Some((
            Datum::time_micros(*s.min_opt()?).ok()?,
            Datum::time_micros(*s.max_opt()?).ok()?,
        )),
        (P::Timestamp, Statistics::Int64(s)) => Some((
            Datum::timestamp_micros(*s.min_opt()?),
            Datum::timestamp_micros(*s.max_opt()?),
        )),
        (P::Timestamptz, Statistics::Int64(s)) => Some((
            Datum::timestamptz_micros(*s.min_opt()?),
            Datum::timestamptz_micros(*s.max_opt()?),
        )),
        (P::Boolean, Statistics::Boolean(s)) => {
            Some((Datum::bool(*s.min_opt()?), Datum::bool(*s.max_opt()?)))
        }
        (P::Float, Statistics::Float(s)) => {
            let (lo, hi) = float_bounds(f64::from(*s.min_opt()?), f64::from(*s.max_opt()?))?;
            // Both came from f32 values (or are signed zeros): exact as f32.
            #[allow(clippy::cast_possible_truncation)]
            Some((Datum::float(lo as f32), Datum::float(hi as f32)))
        }
        (P::Double, Statistics::Double(s)) => {
            let (lo, hi) = float_bounds(*s.min_opt()?, *s.max_opt()?)?;
            Some((Datum::double(lo), Datum::double(hi)))
        }
        // Parquet's truncated statistics (longer than 64 bytes) are bounds still: a prefix of the
        // minimum, and a maximum incremented after its prefix.
        (P::String, Statistics::ByteArray(s)) => {
            let lo = std::str::from_utf8(s.min_opt()?.data()).ok()?;
            let hi = std::str::from_utf8(s.max_opt()?.data()).ok()?;
            Some((
                Datum::string(lo.chars().take(TRUNCATE).collect::<String>()),
                Datum::string(string_upper(hi)?),
            ))
        }
        (P::Binary, Statistics::ByteArray(s)) => {
            let lo = s.min_opt()?.data();
            let hi = s.max_opt()?.data();
            Some((
                Datum::binary(lo.iter().take(TRUNCATE).copied()),
                Datum::binary(binary_upper(hi)?),
            ))
        }
        (P::Decimal { .. }, _) => {
            let (lo, hi) = decimal_bounds(stats)?;
            Some((
                Datum::try_from_bytes(&lo.to_be_bytes(), p.clone()).ok()?,
                Datum::try_from_bytes(&hi.to_be_bytes(), p.clone()).ok()?,
            ))
        }
        _ => None,
    }
}

/// Whether a float chunk's statistics are NaN: Parquet's minimum is NaN only when every value is.
fn nan_only(stats: &Statistics) -> bool {
    match stats {
        Statistics::Float(s) => s.min_opt().is_some_and(|v| v.is_nan()),
        Statistics::Double(s) => s.min_opt().is_some_and(|v| v.is_nan()),
        _ => false,
    }
}

/// Float bounds without NaN, a zero lower bound as -0.0 and a zero upper bound as +0.0 (as
/// Parquet's format asks), so `x = -0.0` and `x = 0.0` both keep the file.
fn float_bounds(lo: f64, hi: f64) -> Option<(f64, f64)> {
    if lo.is_nan() || hi.is_nan() {
        return None;
    }
    let lo = if lo == 0.0 { -0.0 } else { lo };
    let hi = if hi == 0.0 { 0.0 } else { hi };
    Some((lo, hi))
}

/// The decimal statistics as unscaled values (Parquet orders decimals by value, signed).
fn decimal_bounds(stats: &Statistics) -> Option<(i128, i128)> {
    let be = |b: &[u8]| -> Option<i128> {
        if b.is_empty() || b.len() > 16 {
            return None;
        }
        let fill = if b[0] & 0x80 != 0 { 0xFF } else { 0 };
        let mut out = [fill; 16];
        out[16 - b.len()..].copy_from_slice(b);
        Some(i128::from_be_bytes(out))
    };
    match stats {
        Statistics::Int32(s) => Some((i128::from(*s.min_opt()?), i128::from(*s.max_opt()?))),
        Statistics::Int64(s) => Some((i128::from(*s.min_opt()?), i128::from(*s.max_opt()?))),
        Statistics::FixedLenByteArray(s) if s.min_is_exact() && s.max_is_exact() => {
            Some((be(s.min_opt()?.data())?, be(s.max_opt()?.data())?))
        }
        Statistics::ByteArray(s) if s.min_is_exact() && s.max_is_exact() => {
            Some((be(s.min_opt()?.data())?, be(s.max_opt()?.data())?))
        }
        _ => None,
    }
}

/// An upper bound of `max` at most [`TRUNCATE`] characters long: `max` itself when short
/// enough, else its prefix with the last character that can be incremented incremented (the
/// rest dropped); None when no character can be.
fn string_upper(max: &str) -> Option<String> {
    if max.chars().nth(TRUNCATE).is_none() {
        return Some(max.to_owned());
    }
    let mut chars: Vec<char> = max.chars().take(TRUNCATE).collect();
    while let Some(last) = chars.pop() {
        let next = match u32::from(last) {
            0xD7FF => Some('\u{E000}'),
            c => c.checked_add(1).and_then(char::from_u32),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// As [`string_upper`], for bytes.
fn binary_upper(max: &[u8]) -> Option<Vec<u8>> {
    if max.len() <= TRUNCATE {
        return Some(max.to_vec());
    }
    let mut bytes = max[..TRUNCATE].to_vec();
    while let Some(last) = bytes.pop() {
        if let Some(next) = last.checked_add(1) {
            bytes.push(next);
            return Some(bytes);
        }
    }
    None
}

/// `batch` as one file of `table` (unpartitioned) under its `data/`, uploaded through
/// `storage`, and its entry: a data file, or with `equality_ids` an equality-delete file.
/// For tools and tests that write a table's files outside the sink.
pub async fn put_file(
    storage: &super::storage::LakeStorage,
    table: &iceberg::table::Table,
    batch: &RecordBatch,
    equality_ids: Option<Vec<i32>>,
) -> Result<DataFile, String> {
    use object_store::ObjectStoreExt;
    let schema = table.metadata().current_schema().clone();
    let sealed = encode(
        batch,
        schema.as_struct(),
        properties(Codec::Zstd, 128 * 1024),
    )?;
    let kind = if equality_ids.is_some() {
        "eq-deletes"
    } else {
        "data"
    };
    let path = format!(
        "{}/data/{kind}-{}.parquet",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let key = storage.key(&path).map_err(|e| e.to_string())?;
    storage
        .store()
        .map_err(|e| e.to_string())?
        .put(&key, sealed.bytes.clone().into())
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    entry(path, &sealed, &schema, 0, Struct::empty(), equality_ids)
}

/// A file's name: unique per attempt, so a file uploaded by a crashed attempt is never
/// overwritten or listed twice; it stays an orphan for `lake maintain` to remove.
pub fn file_name(topic: &str, partition: i32, first_offset: i64) -> String {
    let safe: String = topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{safe}+{partition}+{first_offset:020}-{}.parquet",
        uuid::Uuid::new_v4()
    )
}

#[cfg(test)]
mod tests;
