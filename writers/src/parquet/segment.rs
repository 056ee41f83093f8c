//! A partition's open segment: how many rows it takes, the files they go to, and its sealing
//! into a marker and the files to make visible.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BooleanArray, Int64Array, RecordBatch, UInt32Array};
use lakesink_schema_registry::ChangeBatch;
use object_store::path::Path;

use super::content;
use super::error::RawError;
use super::file::{FileError, FileWriter, Sealed};
use super::marker::Marker;
use super::rolling::{Rotation, SegmentStats};
use super::writer::Settings;
use crate::sink::TopicPartition;

pub(super) struct Segment {
    pub(super) start: i64,
    pub(super) last: i64,
    pub(super) rows: u64,
    pub(super) first_time: i64,
    pub(super) opened_wall: i64,
    pub(super) last_arrival_wall: i64,
    pub(super) files: Vec<FileWriter>,
    /// [`Segment::memory`] as of the last write; computing it walks every column's pages.
    pub(super) mem: usize,
}

impl Segment {
    /// An empty segment from `offset`, opened at wall time `wall`.
    pub(super) fn new(offset: i64, wall: i64, now: i64) -> Self {
        Segment {
            start: offset,
            last: offset,
            rows: 0,
            first_time: 0,
            opened_wall: wall,
            last_arrival_wall: now,
            files: Vec::new(),
            mem: 0,
        }
    }

    pub(super) fn stats(&self) -> SegmentStats {
        SegmentStats {
            rows: self.rows,
            bytes: self.files.iter().map(|f| f.bytes() as u64).sum(),
            opened_wall: self.opened_wall,
            last_arrival_wall: self.last_arrival_wall,
        }
    }

    pub(super) fn memory(&self) -> usize {
        self.files.iter().map(FileWriter::memory).sum()
    }

    /// Writes rows `rows` of `b` (their times `times`) into the segment's files.
    pub(super) async fn append(
        &mut self,
        s: &Settings,
        key: &TopicPartition,
        b: &Incoming<'_>,
        rows: Range<usize>,
        times: &[i64],
        now: i64,
    ) -> Result<(), RawError> {
        let (from, len) = (rows.start, rows.len());
        if self.rows == 0 {
            self.first_time = times[0];
        }
        let slice = Slice::new(b, from, len);
        let groups = s
            .partitioner
            .group(&b.batch.rows.slice(from, len), b.batch.partition, times)
            .map_err(|(row, reason)| b.error(b.offsets.value(from + row), reason))?;
        for (encoded, idx) in groups {
            for (source, idx) in slice.parts(idx, s.skip_tombstones) {
                let Some(&first) = idx.first() else {
                    continue;
                };
                let first_offset = slice.offset(first);
                let out = slice.take(source, idx, first_offset)?;
                self.write_file(s, key, b, encoded.clone(), first_offset, &out)
                    .await?;
            }
        }
        self.rows += len as u64;
        self.last = b.offsets.value(rows.end - 1);
        self.last_arrival_wall = now;
        Ok(())
    }

    /// Writes `out` (rows of one directory, the first at `first_offset`) to its file.
    async fn write_file(
        &mut self,
        s: &Settings,
        key: &TopicPartition,
        b: &Incoming<'_>,
        encoded: Arc<str>,
        first_offset: i64,
        out: &RecordBatch,
    ) -> Result<(), RawError> {
        let file = file_for(s, self, key, encoded, first_offset, out.schema())
            .map_err(|e| b.error(first_offset, e))?;
        file.write(&s.store, out)
            .await
            .map_err(|source| match source {
                FileError::Parquet(e) => b.error(first_offset, format!("parquet: {e}")),
                source => RawError::File {
                    topic: key.topic.to_string(),
                    partition: key.partition,
                    key: file.key.to_string(),
                    source,
                },
            })
    }

    /// Completes the segment's files in memory; its marker records the cut.
    pub(super) fn seal(self, key: &TopicPartition) -> Result<(Marker, Vec<Sealed>), RawError> {
        let mut files = Vec::with_capacity(self.files.len());
        let mut keys = Vec::with_capacity(self.files.len());
        for f in self.files {
            let fkey = f.key.to_string();
            files.push(f.seal().map_err(|source| RawError::File {
                topic: key.topic.to_string(),
                partition: key.partition,
                key: fkey.clone(),
                source,
            })?);
            keys.push(fkey);
        }
        let marker = Marker {
            topic: key.topic.to_string(),
            partition: key.partition,
            start: self.start,
            last: self.last,
            wall_ms: self.opened_wall,
            rows: self.rows,
            files: keys,
        };
        Ok((marker, files))
    }
}

#[derive(Default)]
pub(super) struct PartitionState {
    pub(super) segment: Option<Segment>,
    pub(super) forced: Option<RecordedCut>,
    /// The marker chain was followed to its end: no later marker can exist.
    pub(super) chain_done: bool,
    /// Starts of sealed segments still uploading.
    pub(super) uploading: BTreeSet<i64>,
}

impl PartitionState {
    /// The first offset not durable yet: of the open segment or of an upload.
    pub(super) fn pending_start(&self) -> Option<i64> {
        let open = self
            .segment
            .as_ref()
            .filter(|s| s.rows > 0)
            .map(|s| s.start);
        match (open, self.uploading.first().copied()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A cut recorded by an earlier run: the last offset and wall time of its segment.
pub(super) type RecordedCut = (i64, i64);

/// The open segment of `key` and its recorded cut; the writer has just opened it.
pub(super) fn open_segment<'a>(
    parts: &'a mut HashMap<TopicPartition, PartitionState>,
    key: &TopicPartition,
) -> Result<(Option<RecordedCut>, &'a mut Segment), RawError> {
    let st = parts
        .get_mut(key)
        .ok_or_else(|| RawError::Bug("partition state vanished while writing"))?;
    let seg = st
        .segment
        .as_mut()
        .ok_or_else(|| RawError::Bug("segment vanished while writing"))?;
    Ok((st.forced, seg))
}

/// A batch as the segments take it: its offsets, tombstones and rows as written.
pub(super) struct Incoming<'a> {
    pub(super) batch: &'a ChangeBatch,
    pub(super) offsets: Int64Array,
    tombstones: Option<BooleanArray>,
    shaped: RecordBatch,
    /// The tombstones as the key-only rows they decode to alone, when kept and any.
    apart: Option<RecordBatch>,
}

impl<'a> Incoming<'a> {
    pub(super) fn new(batch: &'a ChangeBatch, s: &Settings) -> Result<Self, RawError> {
        let bad = |reason: String| data_error(batch, batch.first_offset, reason);
        let rows = &batch.rows;
        let offsets = rows
            .column_by_name("__offset")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| bad("no __offset column".into()))?
            .clone();
        let tombstones = rows
            .column_by_name("__tombstone")
            .and_then(|c| c.as_boolean_opt())
            .cloned();
        let shaped = content::shape(batch, s.content).map_err(bad)?;
        let apart = match &tombstones {
            Some(t) if !s.skip_tombstones && t.true_count() > 0 => {
                content::tombstones_alone(batch, s.content).map_err(bad)?
            }
            _ => None,
        };
        Ok(Self {
            batch,
            offsets,
            tombstones,
            shaped,
            apart,
        })
    }

    /// Bad data at `offset`.
    pub(super) fn error(&self, offset: i64, reason: String) -> RawError {
        data_error(self.batch, offset, reason)
    }
}

fn data_error(batch: &ChangeBatch, offset: i64, reason: String) -> RawError {
    RawError::Data {
        topic: batch.topic.to_string(),
        partition: batch.partition,
        offset,
        reason,
    }
}

/// Rows `from..from + len` of an [`Incoming`] batch, as written.
struct Slice<'a> {
    b: &'a Incoming<'a>,
    from: usize,
    len: usize,
    out: RecordBatch,
    apart: Option<RecordBatch>,
}

impl<'a> Slice<'a> {
    fn new(b: &'a Incoming<'a>, from: usize, len: usize) -> Self {
        Self {
            b,
            from,
            len,
            out: b.shaped.slice(from, len),
            apart: b.apart.as_ref().map(|t| t.slice(from, len)),
        }
    }

    /// The offset of row `i` of the slice.
    fn offset(&self, i: u32) -> i64 {
        self.b.offsets.value(self.from + i as usize)
    }

    /// A group's rows `idx`, split into the rows and the tombstones written apart, each with
    /// the batch it takes them from; skipped tombstones are dropped.
    fn parts(&self, mut idx: Vec<u32>, skip: bool) -> [(&RecordBatch, Vec<u32>); 2] {
        let is_tombstone = |i: &u32| {
            self.b
                .tombstones
                .as_ref()
                .is_some_and(|t| t.value(self.from + *i as usize))
        };
        let mut apart = Vec::new();
        if skip {
            idx.retain(|i| !is_tombstone(i));
        } else if self.apart.is_some() {
            apart = idx.iter().copied().filter(is_tombstone).collect();
            idx.retain(|i| !is_tombstone(i));
        }
        [
            (&self.out, idx),
            (self.apart.as_ref().unwrap_or(&self.out), apart),
        ]
    }

    /// Rows `idx` of `source`; the whole of it when they are all of the slice.
    fn take(
        &self,
        source: &RecordBatch,
        idx: Vec<u32>,
        first_offset: i64,
    ) -> Result<RecordBatch, RawError> {
        if idx.len() == self.len {
            return Ok(source.clone());
        }
        arrow_select::take::take_record_batch(source, &UInt32Array::from(idx))
            .map_err(|e| self.b.error(first_offset, e.to_string()))
    }
}

/// What to do with the rows from `from` on.
pub(super) enum Step {
    /// Close the open segment first.
    Cut,
    /// The recorded cut cannot be matched (its records are gone): forget it.
    Unforce,
    /// Rows `from..to` go into the open segment; their times.
    Append { to: usize, times: Vec<i64> },
}

/// Decides how many rows from `from` the open segment takes. Err is (row, reason).
pub(super) fn plan(
    s: &Settings,
    forced: Option<RecordedCut>,
    seg: &Segment,
    offsets: &arrow_array::Int64Array,
    rows: &RecordBatch,
    from: usize,
    now: i64,
) -> Result<Step, (usize, String)> {
    let n = rows.num_rows();
    let times_of = |to: usize| {
        s.times
            .times(&rows.slice(from, to - from), seg.opened_wall)
            .map_err(|(row, reason)| (from + row, reason))
    };
    if let Some((last, _)) = forced {
        // Repeat the earlier run's cut exactly; no other rule applies.
        let to = from + offsets.values()[from..].partition_point(|&o| o <= last);
        if to == from {
            return Ok(if seg.rows == 0 {
                Step::Unforce
            } else {
                Step::Cut
            });
        }
        return Ok(Step::Append {
            to,
            times: times_of(to)?,
        });
    }
    if seg.rows > 0
        && s.policy
            .due(&seg.stats(), now)
            .is_some_and(|r| matches!(r, Rotation::WallClock(_)))
    {
        return Ok(Step::Cut);
    }
    let mut to = n;
    if let Some(max) = s.policy.records() {
        to = to.min(from + max.saturating_sub(seg.rows).max(1) as usize);
    }
    let mut times = times_of(to)?;
    if let Some(span) = s.policy.record_time() {
        let base = if seg.rows == 0 {
            times[0]
        } else {
            seg.first_time
        };
        if let Some(i) = times.iter().position(|&ts| ts - base >= span) {
            if i == 0 {
                return Ok(Step::Cut);
            }
            to = from + i;
            times.truncate(i);
        }
    }
    Ok(Step::Append { to, times })
}

/// The open file of `seg` for (directory, schema), created on first use.
fn file_for<'a>(
    s: &Settings,
    seg: &'a mut Segment,
    key: &TopicPartition,
    encoded: Arc<str>,
    first_offset: i64,
    schema: arrow_schema::SchemaRef,
) -> Result<&'a mut FileWriter, String> {
    if let Some(i) = seg
        .files
        .iter()
        .position(|f| f.encoded == encoded && f.schema == schema)
    {
        return Ok(&mut seg.files[i]);
    }
    let k = s
        .template
        .key(&key.topic, &encoded, key.partition, first_offset);
    let f = FileWriter::new(Path::from(k), encoded, schema, s.props.clone(), s.part_size)
        .map_err(|e| format!("parquet: {e}"))?;
    seg.files.push(f);
    let last = seg.files.len() - 1;
    Ok(&mut seg.files[last])
}
