//! A Parquet file encoded as parquet's `ArrowWriter` encodes it, byte for byte, but with a
//! large batch's columns encoded (and their pages compressed) on more than one thread.
//!
//! Encoding and compression are most of the raw layer's CPU, and `ArrowWriter` does them on
//! the sink's one task: with the S3 server elsewhere, a wide table's files were written by one
//! core while the other waited. A row group's column writers are independent (parquet's own
//! `ArrowColumnWriter` example encodes them in parallel), so each large write hands them out
//! to scoped threads, and the chunks are appended in column order, as `ArrowWriter` would.

use std::sync::{Mutex, OnceLock};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::writer::SerializedFileWriter;

/// Values (rows times leaf columns) below which a write stays on the calling thread: starting
/// a thread costs tens of microseconds, a small batch's encoding about as much.
const PARALLEL_VALUES: usize = 16 * 1024;

/// Values whose levels are held at once at most, but for one field's: some 8–20 MB.
const WAVE_VALUES: usize = 1024 * 1024;

/// The threads a file's batch is encoded on: the cores this process may use (a container's
/// CPU quota included), read once.
pub(crate) fn encode_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub struct ParallelWriter {
    writer: SerializedFileWriter<Vec<u8>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    max_rows: Option<usize>,
    group: Option<RowGroup>,
    /// Per field of `schema`, its leaf columns (and column writers): more than one for a
    /// struct, in the order of the writers.
    widths: Vec<usize>,
    threads: usize,
    min_values: usize,
}

/// The row group being encoded.
struct RowGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
}

impl ParallelWriter {
    /// Takes over `writer` (fresh: nothing written yet, made for `schema`), which has set up
    /// the file's Parquet schema, properties and Arrow metadata; `threads` at most encode a
    /// batch.
    pub fn new(writer: ArrowWriter<Vec<u8>>, schema: SchemaRef, threads: usize) -> Result<Self> {
        let (writer, factory) = writer.into_serialized_writer()?;
        let props = writer.properties();
        // Only the row limit is implemented below; the others would be ignored silently.
        if props.max_row_group_bytes().is_some() || props.content_defined_chunking().is_some() {
            return Err(ParquetError::General(
                "the parallel writer takes no row group byte limit and no content-defined chunking"
                    .into(),
            ));
        }
        let max_rows = props.max_row_group_row_count();
        let mut widths = vec![0; schema.fields().len()];
        let descr = writer.schema_descr();
        for leaf in 0..descr.num_columns() {
            let root = descr.get_column_root_idx(leaf);
            *widths.get_mut(root).ok_or_else(|| {
                ParquetError::General(format!("leaf column {leaf} is of no field of the schema"))
            })? += 1;
        }
        Ok(Self {
            writer,
            factory,
            schema,
            max_rows,
            group: None,
            widths,
            threads: threads.max(1),
            min_values: PARALLEL_VALUES,
        })
    }

    /// Writes of fewer values than this stay on the calling thread (16 Ki by default); 0
    /// sends every write to the threads, as the tests and the fuzzer do with small batches.
    pub fn with_min_values(mut self, values: usize) -> Self {
        self.min_values = values;
        self
    }

    /// Encodes `batch`, into as many row groups as the row limit makes it (`ArrowWriter`'s
    /// split: the open group is filled first).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut rest = batch.clone();
        while rest.num_rows() > 0 {
            let group = match &mut self.group {
                Some(g) => g,
                none => none.insert(RowGroup {
                    writers: self
                        .factory
                        .create_column_writers(self.writer.flushed_row_groups().len())?,
                    rows: 0,
                }),
            };
            let take = match self.max_rows {
                Some(max) => rest.num_rows().min(max.saturating_sub(group.rows)),
                None => rest.num_rows(),
            };
            if take > 0 {
                let threads =
                    threads_for(self.threads, self.min_values, take * group.writers.len());
                group.write(&self.schema, &self.widths, &rest.slice(0, take), threads)?;
                rest = rest.slice(take, rest.num_rows() - take);
            }
            if self.max_rows.is_some_and(|max| group.rows >= max) {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Closes the open row group, if any.
    pub fn flush(&mut self) -> Result<()> {
        let Some(group) = self.group.take() else {
            return Ok(());
        };
        let threads = threads_for(
            self.threads,
            self.min_values,
            group.rows * group.writers.len(),
        );
        let chunks: Vec<ArrowColumnChunk> = each(group.writers, threads, ArrowColumnWriter::close)
            .into_iter()
            .collect::<Result<_>>()?;
        let mut row_group = self.writer.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        Ok(())
    }

    /// `ArrowWriter::memory_size`: the open row group's buffered pages and encoders.
    pub fn memory_size(&self) -> usize {
        self.group.as_ref().map_or(0, |g| {
            g.writers.iter().map(ArrowColumnWriter::memory_size).sum()
        })
    }

    /// `ArrowWriter::in_progress_size`: the open row group's estimated encoded size.
    pub fn in_progress_size(&self) -> usize {
        self.group.as_ref().map_or(0, |g| {
            g.writers
                .iter()
                .map(ArrowColumnWriter::get_estimated_total_bytes)
                .sum()
        })
    }

    pub fn bytes_written(&self) -> usize {
        self.writer.bytes_written()
    }

    pub fn inner(&self) -> &Vec<u8> {
        self.writer.inner()
    }

    /// The bytes written so far; taking them is safe, the writer counts offsets itself.
    pub fn inner_mut(&mut self) -> &mut Vec<u8> {
        self.writer.inner_mut()
    }

    /// Closes the last row group and writes the footer.
    pub fn finish(&mut self) -> Result<ParquetMetaData> {
        self.flush()?;
        self.writer.finish()
    }

    /// Closes the last row group, writes the footer, and returns what was not yet taken.
    pub fn into_inner(mut self) -> Result<Vec<u8>> {
        self.flush()?;
        self.writer.into_inner()
    }
}

/// The threads for work on `values` values (rows times leaf columns): `threads`, or the
/// calling one alone below `min_values`.
fn threads_for(threads: usize, min_values: usize, values: usize) -> usize {
    if values >= min_values { threads } else { 1 }
}

impl RowGroup {
    /// Fields go in waves of at least [`WAVE_VALUES`] values (rows times leaf columns) or one
    /// field: a wave's levels are computed, then its leaves written on the threads. Levels
    /// take 8 bytes a value and more, which `ArrowWriter`, computing one field's at a time,
    /// never held for a whole batch; a wave bounds them the same way, while a struct's leaves
    /// (a Debezium envelope's `after`) still go to every thread.
    fn write(
        &mut self,
        schema: &SchemaRef,
        widths: &[usize],
        batch: &RecordBatch,
        threads: usize,
    ) -> Result<()> {
        let rows = batch.num_rows().max(1);
        let mut writers: &mut [ArrowColumnWriter] = &mut self.writers;
        let mut fields = schema.fields().iter().zip(batch.columns()).zip(widths);
        self.rows += batch.num_rows();
        loop {
            let mut jobs = Vec::new();
            while jobs.len() * rows < WAVE_VALUES {
                let Some(((field, column), &width)) = fields.next() else {
                    break;
                };
                let (mine, rest) = std::mem::take(&mut writers)
                    .split_at_mut_checked(width)
                    .ok_or_else(|| {
                        ParquetError::General("fewer column writers than leaves".into())
                    })?;
                writers = rest;
                let leaves = compute_leaves(field, column)?;
                if leaves.len() != mine.len() {
                    return Err(ParquetError::General(format!(
                        "field {}: {} leaf columns for {} column writers",
                        field.name(),
                        leaves.len(),
                        mine.len()
                    )));
                }
                jobs.extend(mine.iter_mut().zip(leaves));
            }
            if jobs.is_empty() {
                return Ok(());
            }
            each(jobs, threads, |(writer, leaf)| writer.write(&leaf))
                .into_iter()
                .collect::<Result<()>>()?;
        }
    }
}

/// `f` of every item, in the items' order, on up to `threads` threads (the caller's one of
/// them), each taking the next item as it finishes one: columns differ in cost by orders of
/// magnitude, so a fixed split would leave threads idle. Scoped threads rather than a pool
/// crate: the one call site blocks until its items are done, and no threads idle between
/// batches.
fn each<T: Send, R: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let n = items.len();
    let helpers = threads.min(n).saturating_sub(1);
    if helpers == 0 {
        return items.into_iter().map(f).collect();
    }
    let queue = Mutex::new(items.into_iter().enumerate());
    let work = || {
        let mut done = Vec::new();
        loop {
            // A poisoned lock means another thread panicked; scope re-raises that panic.
            let next = match queue.lock() {
                Ok(mut q) => q.next(),
                Err(_) => None,
            };
            let Some((i, item)) = next else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut all = std::thread::scope(|s| {
        // A helper the system cannot start leaves its share to the others.
        let handles: Vec<_> = (0..helpers)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("lakesink-encode".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mut all = work();
        for h in handles {
            // A helper's panic is re-raised here, as it would have been on this thread.
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    // Every item was taken from the queue exactly once.
    all.sort_unstable_by_key(|&(i, _)| i);
    all.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::{
        ArrayRef, BinaryArray, Decimal128Array, Float64Array, Int64Array, StringArray, StructArray,
        TimestampMicrosecondArray,
    };
    use arrow_schema::{DataType, Field, Fields, Schema};
    use lakesink_config::Codec;
    use parquet::arrow::arrow_writer::ArrowWriterOptions;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A table with every kind of leaf the raw layer writes: plain, nullable, long strings
    /// (past the dictionary limit, so pages fall back to plain), a list and a struct.
    fn batch(rows: usize, seed: u64) -> RecordBatch {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let ids = Int64Array::from_iter_values((0..rows).map(|_| next() as i64));
        let status = StringArray::from_iter((0..rows).map(|i| match next() % 5 {
            0 => None,
            n => Some(["new", "paid", "shipped", "gone"][n as usize - 1].repeat(1 + i % 2)),
        }));
        let text =
            StringArray::from_iter_values((0..rows).map(|_| format!("{:x}", next()).repeat(8)));
        let amount = Float64Array::from_iter(
            (0..rows).map(|_| (next() % 7 != 0).then(|| next() as f64 / 3.0)),
        );
        let at = TimestampMicrosecondArray::from_iter_values((0..rows).map(|_| next() as i64))
            .with_timezone("UTC");
        let money =
            Decimal128Array::from_iter_values((0..rows).map(|_| next() as i128 - (1 << 30)))
                .with_precision_and_scale(20, 4)
                .unwrap();
        let blob = BinaryArray::from_iter_values((0..rows).map(|_| next().to_le_bytes()));
        let mut tags = ListBuilder::new(Int32Builder::new());
        for _ in 0..rows {
            match next() % 4 {
                0 => tags.append_null(),
                n => {
                    for _ in 0..n {
                        tags.values().append_value(next() as i32);
                    }
                    tags.append(true);
                }
            }
        }
        let inner = Fields::from(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Int64, false),
        ]);
        let nested = StructArray::new(
            inner.clone(),
            vec![
                Arc::new(StringArray::from_iter(
                    (0..rows).map(|_| (next() % 3 != 0).then(|| format!("{}", next() % 100))),
                )) as ArrayRef,
                Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|_| next() as i64),
                )),
            ],
            None,
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(ids),
            Arc::new(status),
            Arc::new(text),
            Arc::new(amount),
            Arc::new(at),
            Arc::new(money),
            Arc::new(blob),
            Arc::new(tags.finish()),
            Arc::new(nested),
        ];
        let schema = Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        );
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    const SIZES: [usize; 7] = [3, 9000, 30000, 1, 0, 7000, 20000];

    fn props() -> WriterProperties {
        crate::parquet::writer_properties(Codec::Snappy, 16 * 1024)
    }

    /// What parquet's own writer makes of the batches, the bytes taken after each write as the
    /// raw layer streams them, then the tail.
    fn expected(options: ArrowWriterOptions) -> Vec<u8> {
        let schema = batch(1, 0).schema();
        let mut w = ArrowWriter::try_new_with_options(Vec::new(), schema, options).unwrap();
        let mut out = Vec::new();
        for (i, n) in SIZES.into_iter().enumerate() {
            w.write(&batch(n, i as u64)).unwrap();
            out.append(w.inner_mut());
        }
        out.extend(w.into_inner().unwrap());
        out
    }

    fn parallel(options: ArrowWriterOptions, threads: usize) -> Vec<u8> {
        let schema = batch(1, 0).schema();
        let reference =
            ArrowWriter::try_new_with_options(Vec::new(), schema.clone(), options.clone()).unwrap();
        let mut reference = Some(reference);
        let w = ArrowWriter::try_new_with_options(Vec::new(), schema.clone(), options).unwrap();
        // Every write through the threads, the small ones too.
        let mut w = ParallelWriter::new(w, schema, threads)
            .unwrap()
            .with_min_values(0);
        let mut out = Vec::new();
        for (i, n) in SIZES.into_iter().enumerate() {
            let b = batch(n, i as u64);
            w.write(&b).unwrap();
            // The sizes the raw layer rotates and budgets by are parquet's own.
            let r = reference.as_mut().unwrap();
            r.write(&b).unwrap();
            assert_eq!(w.memory_size(), r.memory_size(), "memory after batch {i}");
            assert_eq!(
                w.in_progress_size(),
                r.in_progress_size(),
                "in progress after batch {i}"
            );
            assert_eq!(
                w.bytes_written(),
                r.bytes_written(),
                "bytes after batch {i}"
            );
            out.append(w.inner_mut());
        }
        out.extend(w.into_inner().unwrap());
        out
    }

    #[test]
    fn files_are_parquets_own_byte_for_byte() {
        for options in [
            ArrowWriterOptions::new().with_properties(props()),
            // The lake's files: no Arrow schema in the footer.
            ArrowWriterOptions::new()
                .with_properties(props())
                .with_skip_arrow_metadata(true),
        ] {
            let want = expected(options.clone());
            for threads in [1, 2, 3, 8] {
                let got = parallel(options.clone(), threads);
                assert!(
                    got == want,
                    "{threads} threads: {} bytes, parquet's {}",
                    got.len(),
                    want.len()
                );
            }
        }
    }

    #[test]
    fn a_batch_of_more_values_than_a_wave_is_still_parquets_own() {
        // 150,000 rows of 10 leaves in one row group: two waves of levels.
        let b = batch(150_000, 7);
        let props = || crate::parquet::writer_properties(Codec::Snappy, 256 * 1024);
        let mut want = ArrowWriter::try_new(Vec::new(), b.schema(), Some(props())).unwrap();
        want.write(&b).unwrap();
        let w = ArrowWriter::try_new(Vec::new(), b.schema(), Some(props())).unwrap();
        let mut got = ParallelWriter::new(w, b.schema(), 2).unwrap();
        got.write(&b).unwrap();
        assert!(b.num_rows() * 10 > WAVE_VALUES);
        assert!(got.into_inner().unwrap() == want.into_inner().unwrap());
    }

    #[test]
    fn the_file_reads_back_with_every_row_group() {
        let schema = batch(1, 0).schema();
        let w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props())).unwrap();
        let mut w = ParallelWriter::new(w, schema, 4).unwrap();
        let written: Vec<RecordBatch> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| batch(n, i as u64))
            .collect();
        for b in &written {
            w.write(b).unwrap();
        }
        let bytes = bytes::Bytes::from(w.into_inner().unwrap());
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        // 16 Ki-row groups: 66,004 rows in five.
        assert_eq!(reader.metadata().num_row_groups(), 5);
        let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        let schema = written[0].schema();
        let want = arrow_select::concat::concat_batches(&schema, &written).unwrap();
        let got = arrow_select::concat::concat_batches(&read[0].schema(), &read).unwrap();
        assert_eq!(got.num_rows(), want.num_rows());
        assert_eq!(got.columns(), want.columns());
    }

    #[test]
    fn a_byte_limit_is_refused_not_ignored() {
        let schema = batch(1, 0).schema();
        let props = WriterProperties::builder()
            .set_max_row_group_bytes(Some(1 << 20))
            .build();
        let w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props)).unwrap();
        assert!(ParallelWriter::new(w, schema, 2).is_err());
    }

    #[test]
    fn each_keeps_the_items_order() {
        for threads in [1, 2, 5, 64] {
            let got = each((0..1000u64).collect(), threads, |i| {
                // Uneven costs, as columns have.
                (0..(i % 7) * 1000).fold(i, |a, b| a.wrapping_mul(31).wrapping_add(b)) ^ i
            });
            let want: Vec<u64> = (0..1000u64)
                .map(|i| (0..(i % 7) * 1000).fold(i, |a, b| a.wrapping_mul(31).wrapping_add(b)) ^ i)
                .collect();
            assert_eq!(got, want, "{threads} threads");
        }
        assert!(each(Vec::<u8>::new(), 4, |x| x).is_empty());
    }
}
