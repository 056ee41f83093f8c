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

/// Writer settings for lake files.
pub fn properties(codec: Codec, row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(crate::parquet::compression(codec))
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_created_by(format!("lakesink {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// One file being encoded in memory.
pub struct OpenFile {
    writer: ArrowWriter<Vec<u8>>,
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

/// The manifest entry of a sealed file at `path`: its counts per column, and lower and upper
/// bounds where Parquet's statistics give them exactly (integers, dates, times, timestamps),
/// so engines skip files by them.
pub fn data_file(
    path: String,
    sealed: &Sealed,
    schema: &Schema,
    spec_id: i32,
    partition: Struct,
) -> Result<DataFile, String> {
    let mut sizes: HashMap<i32, u64> = HashMap::new();
    let mut values: HashMap<i32, u64> = HashMap::new();
    let mut nulls: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    let mut unknown_nulls: Vec<i32> = Vec::new();
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
            if let Some((lo, hi)) = bounds(p, stats) {
                merge(&mut lower, id, lo, |new, old| new < old);
                merge(&mut upper, id, hi, |new, old| new > old);
            }
        }
    }
    for id in unknown_nulls {
        nulls.remove(&id);
    }
    DataFileBuilder::default()
        .content(DataContentType::Data)
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

/// Exact bounds of a column chunk for the types whose Parquet statistics are their values.
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
        _ => None,
    }
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
