//! Reading a segment back: its Parquet files, rows merged in offset order, cut to what the
//! partition's replay applies, as [`ChangeBatch`]es equal to the ones the live path decoded.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use bytes::Bytes;
use futures::StreamExt;
use lakesink_schema_registry::{ChangeBatch, NON_DATA_METADATA, NonData, ValueShape};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::plan::{PartitionPlan, SegmentPlan};
use super::{Problem, ProblemKind};

/// Rows per batch handed to the replicator (the live path decodes 4,096 per batch).
pub(crate) const BATCH_ROWS: usize = 16 * 1024;
/// Files of one segment fetched at once.
const FETCHES: usize = 4;

/// Where a partition's replay stands, in offset order: what decides whether a row is applied.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// Rows below this are skipped (already in the replica, or not selected).
    pub next: i64,
    pub end: Option<i64>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    /// A row at or after `from_ms` was seen: every later row is applied.
    pub started: bool,
    /// The end of the selection was reached: no later row is applied.
    pub done: bool,
}

impl Cursor {
    pub fn new(part: &PartitionPlan) -> Self {
        Self {
            next: part.begin,
            end: part.end,
            from_ms: part.from_ms,
            to_ms: part.to_ms,
            started: part.from_ms.is_none(),
            done: false,
        }
    }

    /// Whether the row at `offset` with Kafka time `ts` is applied; advances the cursor.
    fn take(&mut self, offset: i64, ts: Option<i64>) -> bool {
        if self.done || offset < self.next {
            return false;
        }
        if self.end.is_some_and(|e| offset > e) {
            self.done = true;
            return false;
        }
        if let (Some(to), Some(ts)) = (self.to_ms, ts)
            && ts >= to
        {
            self.done = true;
            return false;
        }
        if !self.started {
            match (self.from_ms, ts) {
                (Some(from), Some(ts)) if ts >= from => self.started = true,
                _ => return false,
            }
        }
        self.next = offset + 1;
        true
    }
}

/// A segment's rows to apply.
#[derive(Debug, Default)]
pub struct SegmentRows {
    pub batches: Vec<ChangeBatch>,
    /// The file each batch came from.
    pub keys: Vec<Arc<str>>,
    /// Rows in the files read.
    pub rows_read: u64,
    pub files: usize,
    pub bytes: u64,
    /// Files that could not be used (with `continue_on_error`).
    pub problems: Vec<Problem>,
}

/// One file, decoded and checked.
struct FileRows {
    key: Arc<str>,
    /// Without `__topic` and `__partition`: a change batch's columns.
    rows: RecordBatch,
    shape: ValueShape,
}

/// Reads `segment` of `part`: every file, rows merged by offset and cut by `cursor`. A file
/// that is missing, not Parquet, or not a change event stops the read with a problem naming
/// it; with `skip_bad`, it is left out, reported in [`SegmentRows::problems`].
pub async fn read_segment(
    store: &Arc<dyn ObjectStore>,
    part: &PartitionPlan,
    segment: &SegmentPlan,
    cursor: &mut Cursor,
    skip_bad: bool,
) -> Result<SegmentRows, Problem> {
    let problem = |kind: ProblemKind, key: &str, detail: String| Problem {
        kind,
        topic: part.topic.clone(),
        partition: part.partition,
        offsets: Some((segment.start, segment.last)),
        key: Some(key.to_owned()),
        detail,
    };
    let keys: Vec<String> = segment.files.iter().map(|f| f.key.clone()).collect();
    let fetches: Vec<_> = keys
        .into_iter()
        .map(|key| fetch(store.clone(), key))
        .collect();
    let fetched: Vec<(String, Result<Bytes, object_store::Error>)> = futures::stream::iter(fetches)
        .buffered(FETCHES)
        .collect()
        .await;
    let mut out = SegmentRows::default();
    let mut blobs = Vec::with_capacity(fetched.len());
    for (key, got) in fetched {
        match got {
            Ok(bytes) => blobs.push((key, bytes)),
            Err(object_store::Error::NotFound { .. }) => {
                let p = problem(
                    ProblemKind::MissingFile,
                    &key,
                    format!("listed by marker {} but not in the store", segment.marker),
                );
                if !skip_bad {
                    return Err(p);
                }
                out.problems.push(p);
            }
            Err(e) => {
                return Err(problem(
                    ProblemKind::Unavailable,
                    &key,
                    format!("the object store failed: {e}"),
                ));
            }
        }
    }
    // Decoding and merging are CPU work: off the async threads.
    let part2 = (part.topic.clone(), part.partition);
    let seg = (segment.start, segment.last);
    let mut cur = cursor.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        let r = decode_segment(&part2.0, part2.1, seg, blobs, &mut cur, skip_bad);
        (r, cur)
    })
    .await
    .map_err(|e| Problem {
        kind: ProblemKind::Unavailable,
        topic: part.topic.clone(),
        partition: part.partition,
        offsets: Some(seg),
        key: None,
        detail: format!("the reading task failed: {e}"),
    })?;
    let (result, cur) = decoded;
    let got = result?;
    *cursor = cur;
    out.batches = got.batches;
    out.keys = got.keys;
    out.rows_read = got.rows_read;
    out.files = got.files;
    out.bytes = got.bytes;
    out.problems.extend(got.problems);
    Ok(out)
}

async fn fetch(
    store: Arc<dyn ObjectStore>,
    key: String,
) -> (String, Result<Bytes, object_store::Error>) {
    let got = match store.get(&Path::from(key.as_str())).await {
        Ok(g) => g.bytes().await,
        Err(e) => Err(e),
    };
    (key, got)
}

/// Decodes the fetched files of a segment and merges them; see [`read_segment`].
fn decode_segment(
    topic: &str,
    partition: i32,
    (start, last): (i64, i64),
    blobs: Vec<(String, Bytes)>,
    cursor: &mut Cursor,
    skip_bad: bool,
) -> Result<SegmentRows, Problem> {
    let problem = |kind: ProblemKind, key: &str, detail: String| Problem {
        kind,
        topic: topic.to_owned(),
        partition,
        offsets: Some((start, last)),
        key: Some(key.to_owned()),
        detail,
    };
    let mut out = SegmentRows::default();
    let mut files: Vec<FileRows> = Vec::with_capacity(blobs.len());
    for (key, bytes) in blobs {
        let len = bytes.len() as u64;
        match decode_file(topic, partition, (start, last), &key, bytes) {
            // Records that are not rows, which `[kafka.non-data]` kept: nothing to apply.
            Ok(f) if matches!(f.shape, ValueShape::NonData(_)) => {
                out.files += 1;
                out.bytes += len;
            }
            Ok(f) => {
                out.files += 1;
                out.bytes += len;
                out.rows_read += f.rows.num_rows() as u64;
                files.push(f);
            }
            Err((kind, detail)) => {
                let p = problem(kind, &key, detail);
                if !skip_bad {
                    return Err(p);
                }
                out.problems.push(p);
            }
        }
    }
    // Every row once, in offset order.
    let mut order: Vec<(i64, u32, u32)> = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        let offsets = f.rows.column(0).as_primitive::<Int64Type>();
        order.extend(
            offsets
                .values()
                .iter()
                .enumerate()
                .map(|(r, &o)| (o, fi as u32, r as u32)),
        );
    }
    if !order.is_sorted_by_key(|e| e.0) {
        order.sort_unstable_by_key(|e| e.0);
    }
    if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
        let (a, b) = (&files[w[0].1 as usize].key, &files[w[1].1 as usize].key);
        return Err(problem(
            ProblemKind::CorruptFile,
            b,
            format!("offset {} is in this file and in {a}", w[0].0),
        ));
    }
    let times: Vec<Option<&arrow_array::TimestampMillisecondArray>> = files
        .iter()
        .map(|f| {
            f.rows
                .column(1)
                .as_primitive_opt::<TimestampMillisecondType>()
        })
        .collect();
    let kept: Vec<(u32, u32)> = order
        .into_iter()
        .filter(|&(o, fi, r)| {
            let ts = times[fi as usize]
                .filter(|t| t.is_valid(r as usize))
                .map(|t| t.value(r as usize));
            cursor.take(o, ts)
        })
        .map(|(_, fi, r)| (fi, r))
        .collect();

    // Runs of rows with one schema become batches: slices of one file where the rows are
    // contiguous, else interleaved from the files of that schema.
    let mut i = 0;
    while i < kept.len() {
        let fields = files[kept[i].0 as usize].rows.schema_ref().fields().clone();
        let same = |fi: u32| files[fi as usize].rows.schema_ref().fields() == &fields;
        let mut j = i + 1;
        while j < kept.len() && j - i < BATCH_ROWS && same(kept[j].0) {
            j += 1;
        }
        let run = &kept[i..j];
        let (f0, r0) = run[0];
        let contiguous = run
            .iter()
            .enumerate()
            .all(|(k, &(fi, r))| fi == f0 && r == r0 + k as u32);
        let file = &files[f0 as usize];
        let rows = if contiguous {
            file.rows.slice(r0 as usize, run.len())
        } else {
            let members: Vec<u32> = {
                let mut m: Vec<u32> = run.iter().map(|e| e.0).collect();
                m.sort_unstable();
                m.dedup();
                m
            };
            let batches: Vec<&RecordBatch> =
                members.iter().map(|&fi| &files[fi as usize].rows).collect();
            let indices: Vec<(usize, usize)> = run
                .iter()
                .map(|&(fi, r)| {
                    let at = members.binary_search(&fi).unwrap_or_default();
                    (at, r as usize)
                })
                .collect();
            arrow_select::interleave::interleave_record_batch(&batches, &indices)
                .map_err(|e| problem(ProblemKind::CorruptFile, &file.key, e.to_string()))?
        };
        let offsets = rows.column(0).as_primitive::<Int64Type>();
        out.batches.push(ChangeBatch {
            topic: Arc::from(topic),
            partition,
            first_offset: offsets.value(0),
            last_offset: offsets.value(offsets.len() - 1),
            key_schema: None,
            value_schema: None,
            shape: file.shape,
            rows,
        });
        out.keys.push(file.key.clone());
        i = j;
    }
    Ok(out)
}

type FileError = (ProblemKind, String);

/// A file's rows as change batch columns, checked against its partition and segment.
fn decode_file(
    topic: &str,
    partition: i32,
    (start, last): (i64, i64),
    key: &str,
    bytes: Bytes,
) -> Result<FileRows, FileError> {
    let corrupt = |e: String| (ProblemKind::CorruptFile, e);
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| corrupt(format!("not a readable Parquet file: {e}")))?;
    let schema = builder.schema().clone();
    let reader = builder
        .with_batch_size(256 * 1024)
        .build()
        .map_err(|e| corrupt(format!("not a readable Parquet file: {e}")))?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| corrupt(format!("reading Parquet: {e}")))?;
    let (indices, shape, out_schema) = change_columns(&schema)?;
    let all = match <[RecordBatch; 1]>::try_from(batches) {
        Ok([one]) => one,
        Err(batches) => arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| corrupt(e.to_string()))?,
    };
    // The coordinates must be this partition's, the offsets this segment's, in order.
    let topics = all.column(0).as_string::<i32>();
    let partitions = all.column(1).as_primitive::<Int32Type>();
    if let Some(t) = topics.iter().find(|t| *t != Some(topic)) {
        return Err(corrupt(format!(
            "it holds rows of topic {t:?}, not {topic:?}"
        )));
    }
    if let Some(p) = partitions.iter().find(|p| *p != Some(partition)) {
        return Err(corrupt(format!(
            "it holds rows of partition {p:?}, not {partition}"
        )));
    }
    let mut columns = all
        .project(&indices)
        .map_err(|e| corrupt(e.to_string()))?
        .columns()
        .to_vec();
    if columns.len() < out_schema.fields().len() {
        columns.insert(
            4,
            Arc::new(StructArray::new_null(Fields::empty(), all.num_rows())),
        );
    }
    let rows = RecordBatch::try_new(out_schema, columns).map_err(|e| corrupt(e.to_string()))?;
    let offsets = rows.column(0).as_primitive::<Int64Type>();
    if offsets.null_count() > 0 {
        return Err(corrupt("__offset has nulls".into()));
    }
    if let Some(o) = offsets.values().iter().find(|&&o| o < start || o > last) {
        return Err(corrupt(format!(
            "offset {o} is outside its segment {start}..={last}"
        )));
    }
    if !offsets.values().is_sorted() {
        return Err(corrupt("its offsets are not in order".into()));
    }
    Ok(FileRows {
        key: Arc::from(key),
        rows,
        shape,
    })
}

/// Where a change batch's columns are in a raw-layer file, and the batch's shape and schema.
/// A file written with `content = "flattened"` (or anything else) is refused.
fn change_columns(schema: &SchemaRef) -> Result<(Vec<usize>, ValueShape, SchemaRef), FileError> {
    let unreplayable = |e: String| (ProblemKind::Unreplayable, e);
    let expect = |i: usize, name: &str, ok: &dyn Fn(&DataType) -> bool| match schema.fields().get(i)
    {
        Some(f) if f.name() == name && ok(f.data_type()) => Ok(()),
        _ => Err(unreplayable(format!(
            "column {i} is not {name}: this is not a raw-layer file of change events \
                 (content = \"envelope\"); flattened content cannot be replayed"
        ))),
    };
    expect(0, "__topic", &|t| *t == DataType::Utf8)?;
    expect(1, "__partition", &|t| *t == DataType::Int32)?;
    expect(2, "__offset", &|t| *t == DataType::Int64)?;
    expect(3, "__timestamp", &|t| {
        matches!(
            t,
            DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, _)
        )
    })?;
    expect(4, "__op", &|t| *t == DataType::Utf8)?;
    expect(5, "__tombstone", &|t| *t == DataType::Boolean)?;
    // A keyless table's files have no key column (Parquet cannot hold a struct of no fields):
    // its rows get the null key they were decoded with.
    let mut fields: Vec<FieldRef> = schema.fields().iter().skip(2).cloned().collect();
    if schema.fields().get(6).is_some_and(|f| f.name() == "key") {
        expect(6, "key", &|t| matches!(t, DataType::Struct(_)))?;
    } else {
        fields.insert(
            4,
            Arc::new(Field::new("key", DataType::Struct(Fields::empty()), true)),
        );
    }
    let fields = Fields::from(fields);
    let has = |n: &str| fields.iter().any(|f| f.name() == n);
    let non_data = fields
        .iter()
        .find_map(|f| f.metadata().get(NON_DATA_METADATA))
        .map(|name| {
            NonData::from_name(name)
                .ok_or_else(|| unreplayable(format!("unknown non-data kind {name:?}")))
        })
        .transpose()?;
    let shape = if let Some(kind) = non_data {
        ValueShape::NonData(kind)
    } else if has("op") {
        ValueShape::Envelope
    } else if has("after") {
        ValueShape::Flattened
    } else {
        ValueShape::KeyOnly
    };
    let indices = (2..schema.fields().len()).collect();
    Ok((indices, shape, Arc::new(Schema::new(fields))))
}
