//! The raw layer: change batches into time-partitioned Parquet files on an object store.
//!
//! Contract. Per Kafka partition, rows accumulate in one open *segment*: a contiguous offset
//! range, with one file per (directory, schema). The rolling policy closes the whole segment,
//! as Kafka Connect's S3 sink commits all files of a partition at once. Closing writes a
//! marker (the cut point), then completes every file, then yields a [`Receipt`]: only then are
//! the segment's offsets durable. [`ParquetWriter::pending_start`] is the first offset of a
//! partition that is not durable yet; the consumer commits no further. After a crash the
//! segment is read again from that offset, the marker makes it end at the same record, and
//! the same keys are written again: each record lands in exactly one visible file. For that,
//! which file a row goes to depends on the row alone, never on how records were batched: a
//! tombstone is written as the key-only row it decodes to on its own, also when it joined the
//! batch of the delete before it.

pub mod content;
mod error;
mod file;
mod joda;
mod key;
pub mod marker;
mod outage;
mod partitioner;
mod position;
mod rolling;
mod sink;
pub mod store;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{RecordBatch, UInt32Array};
use lakesink_config::{Codec, PartitionerKind, RawConfig, Tombstones};
use lakesink_schema_registry::ChangeBatch;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, info};

use crate::failpoint;
pub use error::RawError;
pub use file::FileError;
use file::{FileWriter, Sealed};
pub use joda::JodaPattern;
pub use key::KeyTemplate;
pub use marker::Marker;
use partitioner::{Partitioner, TimeSource};
pub use position::{Held, Positions};
pub use sink::RawSink;

/// The raw layer's name as a sink.
pub const RAW: &str = "raw";
pub use rolling::SegmentStats;
pub use rolling::{RollingPolicy, Rotation};

/// A segment whose files are all visible: offsets up to `next_offset` are durable.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub topic: Arc<str>,
    pub partition: i32,
    pub start: i64,
    pub next_offset: i64,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
    /// Each file's size.
    pub file_sizes: Vec<u64>,
    /// When the segment was closed: its files were complete in memory from then on.
    pub sealed_at: std::time::Instant,
}

struct Settings {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    template: KeyTemplate,
    partitioner: Partitioner,
    times: TimeSource,
    policy: RollingPolicy,
    props: WriterProperties,
    content: lakesink_config::Content,
    skip_tombstones: bool,
    with_headers: bool,
    budget: usize,
    part_size: usize,
    marker_prefix: String,
}

struct Segment {
    start: i64,
    last: i64,
    rows: u64,
    first_time: i64,
    opened_wall: i64,
    last_arrival_wall: i64,
    files: Vec<FileWriter>,
    /// [`Segment::memory`] as of the last write; computing it walks every column's pages.
    mem: usize,
}

impl Segment {
    fn stats(&self) -> SegmentStats {
        SegmentStats {
            rows: self.rows,
            bytes: self.files.iter().map(|f| f.bytes() as u64).sum(),
            opened_wall: self.opened_wall,
            last_arrival_wall: self.last_arrival_wall,
        }
    }

    fn memory(&self) -> usize {
        self.files.iter().map(FileWriter::memory).sum()
    }
}

#[derive(Default)]
struct PartitionState {
    segment: Option<Segment>,
    /// A cut recorded by an earlier run: the last offset and wall time of its segment.
    forced: Option<(i64, i64)>,
    /// The marker chain was followed to its end: no later marker can exist.
    chain_done: bool,
    /// Starts of sealed segments still uploading.
    uploading: BTreeSet<i64>,
}

type PartitionKey = (Arc<str>, i32);

pub struct ParquetWriter {
    s: Arc<Settings>,
    parts: HashMap<PartitionKey, PartitionState>,
    /// The sum of the open segments' `mem`.
    open_memory: usize,
    uploads: JoinSet<Result<Receipt, RawError>>,
    uploading_bytes: Arc<AtomicUsize>,
    permits: Arc<Semaphore>,
}

impl ParquetWriter {
    /// The raw layer's positions, for the consuming side to read on assignment.
    pub fn positions(&self) -> Positions {
        Positions::new(self.s.store.clone(), &self.s.marker_prefix, &self.s.prefix)
    }

    /// Whether rows should come with a `__headers` column (`headers = true`); the caller
    /// adds it, since the decoded batches do not carry headers.
    pub fn with_headers(&self) -> bool {
        self.s.with_headers
    }

    pub fn new(config: &RawConfig) -> Result<Self, RawError> {
        let (store, prefix) = store::open(&config.url, &config.store).map_err(RawError::Config)?;
        Self::with_store(config, store, prefix)
    }

    /// With a given store (tests use `InMemory`).
    pub fn with_store(
        config: &RawConfig,
        store: Arc<dyn ObjectStore>,
        prefix: String,
    ) -> Result<Self, RawError> {
        let tz: chrono_tz::Tz = config
            .timezone
            .parse()
            .map_err(|_| RawError::Config(format!("unknown time zone {:?}", config.timezone)))?;
        let english = config.locale.to_ascii_lowercase().starts_with("en");
        let partitioner = match config.partitioner {
            PartitionerKind::Default => Partitioner::Default,
            PartitionerKind::Field => Partitioner::Field(
                config
                    .partition_fields
                    .iter()
                    .map(|f| (f.clone(), f.split('.').map(str::to_owned).collect()))
                    .collect(),
            ),
            PartitionerKind::Time => Partitioner::Time {
                pattern: JodaPattern::compile(
                    config.path_format.as_deref().unwrap_or_default(),
                    english,
                )
                .map_err(RawError::Config)?,
                duration_ms: config.partition_duration_ms.unwrap_or(3_600_000) as i64,
                tz,
            },
        };
        let mut rules = vec![Rotation::Records(config.flush_size)];
        if let Some(ms) = config.rotate_interval_ms {
            rules.push(Rotation::RecordTime(ms as i64));
        }
        if let Some(ms) = config.rotate_schedule_interval_ms {
            rules.push(Rotation::WallClock(ms as i64));
        }
        if let Some(n) = config.max_file_bytes {
            rules.push(Rotation::Bytes(n));
        }
        let compression = match config.codec {
            Codec::None => Compression::UNCOMPRESSED,
            Codec::Snappy => Compression::SNAPPY,
            Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
            Codec::Gzip => Compression::GZIP(GzipLevel::default()),
            Codec::Lz4 => Compression::LZ4_RAW,
        };
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(config.row_group_rows))
            .set_created_by(format!("lakesink {}", env!("CARGO_PKG_VERSION")))
            // A new value on every row: a dictionary would be built, then dropped at its
            // size limit.
            .set_column_dictionary_enabled(ColumnPath::from("__offset"), false)
            .set_column_dictionary_enabled(ColumnPath::from("__timestamp"), false)
            .build();
        let template =
            KeyTemplate::compile(&config.file_key, &prefix, &config.topics_dir, config.codec)
                .map_err(RawError::Config)?;
        let settings = Settings {
            store,
            prefix,
            template,
            partitioner,
            times: TimeSource::parse(config.timestamp, config.timestamp_field.as_deref()),
            policy: RollingPolicy { rules, tz },
            props,
            content: config.content,
            skip_tombstones: config.tombstones == Tombstones::Skip,
            with_headers: config.headers,
            budget: usize::try_from(config.memory_budget_bytes).unwrap_or(usize::MAX),
            part_size: config.part_size_bytes,
            marker_prefix: config.marker_prefix.clone(),
        };
        Ok(Self {
            s: Arc::new(settings),
            parts: HashMap::new(),
            open_memory: 0,
            uploads: JoinSet::new(),
            uploading_bytes: Arc::new(AtomicUsize::new(0)),
            permits: Arc::new(Semaphore::new(config.upload_concurrency)),
        })
    }

    /// Adds a batch's rows; closes segments the policy or the memory budget says to close.
    /// `now` is the wall clock, epoch ms.
    pub async fn write(&mut self, batch: &ChangeBatch, now: i64) -> Result<(), RawError> {
        let data_error = |offset: i64, reason: String| RawError::Data {
            topic: batch.topic.to_string(),
            partition: batch.partition,
            offset,
            reason,
        };
        let rows = &batch.rows;
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let offsets = rows
            .column_by_name("__offset")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| data_error(batch.first_offset, "no __offset column".into()))?
            .clone();
        let tombstones = rows
            .column_by_name("__tombstone")
            .and_then(|c| c.as_boolean_opt())
            .cloned();
        let shaped = content::shape(batch, self.s.content)
            .map_err(|reason| data_error(batch.first_offset, reason))?;
        let tombstones_apart = match &tombstones {
            Some(t) if !self.s.skip_tombstones && t.true_count() > 0 => {
                content::tombstones_alone(batch, self.s.content)
                    .map_err(|reason| data_error(batch.first_offset, reason))?
            }
            _ => None,
        };
        let key: PartitionKey = (batch.topic.clone(), batch.partition);
        let s = self.s.clone();
        let mut from = 0;
        while from < n {
            self.open(&key, offsets.value(from), now).await?;
            let step = {
                let st = self.parts.get_mut(&key).ok_or_else(|| {
                    RawError::Task("partition state vanished while writing".into())
                })?;
                let seg = st
                    .segment
                    .as_ref()
                    .ok_or_else(|| RawError::Task("segment vanished while writing".into()))?;
                plan(&s, st.forced, seg, &offsets, rows, from, now)
                    .map_err(|(row, reason)| data_error(offsets.value(row), reason))?
            };
            let (to, times) = match step {
                Step::Cut => {
                    self.cut(&key, now).await?;
                    continue;
                }
                Step::Unforce => {
                    if let Some(st) = self.parts.get_mut(&key) {
                        st.forced = None;
                    }
                    continue;
                }
                Step::Append { to, times } => (to, times),
            };
            let close = {
                let st = self.parts.get_mut(&key).ok_or_else(|| {
                    RawError::Task("partition state vanished while writing".into())
                })?;
                let forced = st.forced;
                let seg = st
                    .segment
                    .as_mut()
                    .ok_or_else(|| RawError::Task("segment vanished while writing".into()))?;
                let len = to - from;
                if seg.rows == 0 {
                    seg.first_time = times[0];
                }
                let slice_rows = rows.slice(from, len);
                let slice_out = shaped.slice(from, len);
                let slice_apart = tombstones_apart.as_ref().map(|t| t.slice(from, len));
                let groups = s
                    .partitioner
                    .group(&slice_rows, batch.partition, &times)
                    .map_err(|(row, reason)| data_error(offsets.value(from + row), reason))?;
                for (encoded, mut idx) in groups {
                    let is_tombstone = |i: &u32| {
                        tombstones
                            .as_ref()
                            .is_some_and(|t| t.value(from + *i as usize))
                    };
                    let mut apart = Vec::new();
                    if s.skip_tombstones {
                        idx.retain(|i| !is_tombstone(i));
                    } else if slice_apart.is_some() {
                        apart = idx.iter().copied().filter(is_tombstone).collect();
                        idx.retain(|i| !is_tombstone(i));
                    }
                    let parts = [
                        (&slice_out, idx),
                        (slice_apart.as_ref().unwrap_or(&slice_out), apart),
                    ];
                    for (source, idx) in parts {
                        let Some(&first) = idx.first() else {
                            continue;
                        };
                        let first_offset = offsets.value(from + first as usize);
                        let out: RecordBatch = if idx.len() == len {
                            source.clone()
                        } else {
                            arrow_select::take::take_record_batch(source, &UInt32Array::from(idx))
                                .map_err(|e| data_error(first_offset, e.to_string()))?
                        };
                        let file =
                            file_for(&s, seg, &key, encoded.clone(), first_offset, out.schema())
                                .map_err(|e| data_error(first_offset, e))?;
                        file.write(&s.store, &out)
                            .await
                            .map_err(|source| match source {
                                FileError::Parquet(e) => {
                                    data_error(first_offset, format!("parquet: {e}"))
                                }
                                source => RawError::File {
                                    topic: key.0.to_string(),
                                    partition: key.1,
                                    key: file.key.to_string(),
                                    source,
                                },
                            })?;
                    }
                }
                seg.rows += len as u64;
                seg.last = offsets.value(to - 1);
                seg.last_arrival_wall = now;
                from = to;
                let mem = seg.memory();
                self.open_memory = self.open_memory + mem - seg.mem;
                seg.mem = mem;
                match forced {
                    Some((last, _)) => seg.last >= last,
                    None => s.policy.full(&seg.stats()).is_some(),
                }
            };
            if close {
                self.cut(&key, now).await?;
            }
        }
        self.enforce_budget(now).await
    }

    /// Closes segments whose time is up: idle partitions and wall-clock boundaries.
    pub async fn poll(&mut self, now: i64) -> Result<(), RawError> {
        let due: Vec<PartitionKey> = self
            .parts
            .iter()
            .filter(|(_, st)| st.forced.is_none())
            .filter_map(|(k, st)| {
                let seg = st.segment.as_ref()?;
                (seg.rows > 0 && self.s.policy.due(&seg.stats(), now).is_some()).then(|| k.clone())
            })
            .collect();
        for key in due {
            self.cut(&key, now).await?;
        }
        Ok(())
    }

    /// Closes every open segment (shutdown); their receipts follow from [`Self::next_receipt`].
    pub async fn close_all(&mut self, now: i64) -> Result<(), RawError> {
        let open: Vec<PartitionKey> = self
            .parts
            .iter()
            .filter(|(_, st)| st.segment.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for key in open {
            self.cut(&key, now).await?;
        }
        Ok(())
    }

    /// Drops the open segment of a partition this process no longer owns. Uploads already
    /// started finish (they write what a new owner would write); their receipts are stale.
    pub fn revoke(&mut self, topic: &str, partition: i32) {
        let key: PartitionKey = (Arc::from(topic), partition);
        if let Some(st) = self.parts.remove(&key)
            && let Some(seg) = st.segment
        {
            self.open_memory -= seg.mem;
            for f in seg.files {
                f.abandon();
            }
        }
    }

    /// Lets go of everything not yet durable, after the store failed: open segments are
    /// abandoned and uploads stopped (a multipart upload stopped midway is left to the bucket's
    /// lifecycle rules). Returns, per partition that held anything, the first offset not
    /// durable: the caller reads those partitions again from there once [`Self::probe`]
    /// succeeds, and the earlier runs' markers make the same cuts, so no file is duplicated.
    pub fn abandon_all(&mut self) -> Vec<((Arc<str>, i32), i64)> {
        let mut points = Vec::new();
        for (key, st) in self.parts.drain() {
            let open = st.segment.as_ref().filter(|s| s.rows > 0).map(|s| s.start);
            let start = match (open, st.uploading.first().copied()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(seg) = st.segment {
                for f in seg.files {
                    f.abandon();
                }
            }
            if let Some(start) = start {
                points.push((key, start));
            }
        }
        self.open_memory = 0;
        // Dropping the set aborts the uploads (and frees their permits).
        self.uploads = JoinSet::new();
        self.uploading_bytes.store(0, Ordering::Relaxed);
        points
    }

    /// Whether the store takes writes again: a small object written and deleted under the
    /// marker prefix. Runs apart from the writer, so a slow store does not hold it.
    pub fn probe(
        &self,
    ) -> impl std::future::Future<Output = Result<(), RawError>> + Send + 'static {
        let store = self.s.store.clone();
        let key = Path::from(format!(
            "{}/probe-{}",
            [self.s.prefix.as_str(), self.s.marker_prefix.as_str()]
                .iter()
                .map(|p| p.trim_matches('/'))
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("/"),
            std::process::id()
        ));
        async move {
            let fail = |source| RawError::Unavailable {
                key: key.to_string(),
                source,
            };
            store
                .put(&key, bytes::Bytes::from_static(b"lakesink").into())
                .await
                .map_err(fail)?;
            store.delete(&key).await.map_err(fail)?;
            Ok(())
        }
    }

    /// The first offset of the partition not durable yet, if anything is pending.
    pub fn pending_start(&self, topic: &str, partition: i32) -> Option<i64> {
        let st = self.parts.get(&(Arc::from(topic), partition))?;
        let open = st.segment.as_ref().filter(|s| s.rows > 0).map(|s| s.start);
        let uploading = st.uploading.first().copied();
        match (open, uploading) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether uploads are running; [`Self::next_receipt`] waits for the next one.
    pub fn uploading(&self) -> bool {
        !self.uploads.is_empty()
    }

    /// Bytes held: open files plus files being uploaded.
    pub fn memory(&self) -> usize {
        self.open_memory + self.uploading_bytes.load(Ordering::Relaxed)
    }

    /// Past the budget with nothing left to close: the caller waits for uploads.
    pub fn over_budget(&self) -> bool {
        self.memory() > self.s.budget
    }

    /// The next finished upload; None when none is running.
    pub async fn next_receipt(&mut self) -> Option<Result<Receipt, RawError>> {
        let joined = self.uploads.join_next().await?;
        Some(match joined {
            Err(e) => Err(RawError::Task(e.to_string())),
            Ok(Err(e)) => Err(e),
            Ok(Ok(r)) => {
                self.uploading_bytes
                    .fetch_sub(r.bytes as usize, Ordering::Relaxed);
                if let Some(st) = self.parts.get_mut(&(r.topic.clone(), r.partition)) {
                    st.uploading.remove(&r.start);
                }
                info!(
                    topic = %r.topic,
                    partition = r.partition,
                    start = r.start,
                    next_offset = r.next_offset,
                    files = r.files,
                    rows = r.rows,
                    bytes = r.bytes,
                    "segment uploaded"
                );
                Ok(r)
            }
        })
    }

    async fn enforce_budget(&mut self, now: i64) -> Result<(), RawError> {
        while self.memory() > self.s.budget {
            let largest = self
                .parts
                .iter()
                .filter_map(|(k, st)| Some((k, st.segment.as_ref()?.mem)))
                .filter(|(_, m)| *m > 0)
                .max_by_key(|(_, m)| *m)
                .map(|(k, _)| k.clone());
            let Some(key) = largest else { break };
            debug!(topic = %key.0, partition = key.1, "memory budget: closing early");
            self.cut(&key, now).await?;
        }
        Ok(())
    }

    /// Opens a segment at `offset` if none is open, following an earlier run's markers.
    async fn open(&mut self, key: &PartitionKey, offset: i64, now: i64) -> Result<(), RawError> {
        let mkey = self.marker_key(key, offset);
        let st = self.parts.entry(key.clone()).or_default();
        if st.segment.is_some() {
            return Ok(());
        }
        if st.forced.is_none() && !st.chain_done {
            match marker::read(&self.s.store, &mkey).await {
                Ok(Some(m)) => {
                    info!(topic = %key.0, partition = key.1, start = offset, last = m.last,
                        "repeating the cut of an earlier run");
                    st.forced = Some((m.last, m.wall_ms));
                }
                Ok(None) => st.chain_done = true,
                Err(reason) => {
                    return Err(RawError::Marker {
                        topic: key.0.to_string(),
                        partition: key.1,
                        key: mkey.to_string(),
                        reason,
                    });
                }
            }
        }
        let wall = st.forced.map_or(now, |(_, wall)| wall);
        st.segment = Some(Segment {
            start: offset,
            last: offset,
            rows: 0,
            first_time: 0,
            opened_wall: wall,
            last_arrival_wall: now,
            files: Vec::new(),
            mem: 0,
        });
        Ok(())
    }

    fn marker_key(&self, key: &PartitionKey, start: i64) -> Path {
        marker::key(&self.s.marker_prefix, &self.s.prefix, &key.0, key.1, start)
    }

    /// Seals the partition's segment, records its cut, and starts making its files visible.
    async fn cut(&mut self, key: &PartitionKey, _now: i64) -> Result<(), RawError> {
        let mkey_start;
        let marker;
        let sealed: Vec<Sealed>;
        {
            let Some(st) = self.parts.get_mut(key) else {
                return Ok(());
            };
            let Some(seg) = st.segment.take() else {
                return Ok(());
            };
            self.open_memory -= seg.mem;
            if seg.rows == 0 {
                return Ok(());
            }
            if st.forced.is_some_and(|(last, _)| seg.last >= last) {
                st.forced = None;
            }
            let mut files = Vec::with_capacity(seg.files.len());
            let mut keys = Vec::with_capacity(seg.files.len());
            for f in seg.files {
                let fkey = f.key.to_string();
                files.push(f.seal().map_err(|source| RawError::File {
                    topic: key.0.to_string(),
                    partition: key.1,
                    key: fkey.clone(),
                    source,
                })?);
                keys.push(fkey);
            }
            sealed = files;
            mkey_start = seg.start;
            marker = Marker {
                topic: key.0.to_string(),
                partition: key.1,
                start: seg.start,
                last: seg.last,
                wall_ms: seg.opened_wall,
                rows: seg.rows,
                files: keys,
            };
            st.uploading.insert(seg.start);
        }
        failpoint::hit(failpoint::RAW_BEFORE_MARKER);
        let mkey = self.marker_key(key, mkey_start);
        marker::write(&self.s.store, &mkey, &marker)
            .await
            .map_err(|reason| RawError::Marker {
                topic: key.0.to_string(),
                partition: key.1,
                key: mkey.to_string(),
                reason,
            })?;
        let bytes: usize = sealed.iter().map(Sealed::len).sum();
        self.uploading_bytes.fetch_add(bytes, Ordering::Relaxed);
        let store = self.s.store.clone();
        let permits = self.permits.clone();
        let receipt = Receipt {
            topic: key.0.clone(),
            partition: key.1,
            start: marker.start,
            next_offset: marker.last + 1,
            files: sealed.len(),
            rows: marker.rows,
            bytes: bytes as u64,
            file_sizes: sealed.iter().map(|f| f.len() as u64).collect(),
            sealed_at: std::time::Instant::now(),
        };
        self.uploads.spawn(async move {
            failpoint::hit(failpoint::RAW_BEFORE_UPLOAD);
            let uploads = sealed.into_iter().map(|file| {
                let store = store.clone();
                let permits = permits.clone();
                let receipt = &receipt;
                async move {
                    let _permit = permits.acquire().await;
                    let fkey = file.key().to_string();
                    file.complete(&store)
                        .await
                        .map_err(|source| RawError::File {
                            topic: receipt.topic.to_string(),
                            partition: receipt.partition,
                            key: fkey,
                            source,
                        })
                }
            });
            futures::future::try_join_all(uploads).await?;
            failpoint::hit(failpoint::RAW_AFTER_UPLOAD);
            Ok(receipt)
        });
        Ok(())
    }
}

/// What to do with the rows from `from` on.
enum Step {
    /// Close the open segment first.
    Cut,
    /// The recorded cut cannot be matched (its records are gone): forget it.
    Unforce,
    /// Rows `from..to` go into the open segment; their times.
    Append { to: usize, times: Vec<i64> },
}

/// Decides how many rows from `from` the open segment takes. Err is (row, reason).
fn plan(
    s: &Settings,
    forced: Option<(i64, i64)>,
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
    key: &PartitionKey,
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
    let k = s.template.key(&key.0, &encoded, key.1, first_offset);
    let f = FileWriter::new(Path::from(k), encoded, schema, s.props.clone(), s.part_size)
        .map_err(|e| format!("parquet: {e}"))?;
    seg.files.push(f);
    let last = seg.files.len() - 1;
    Ok(&mut seg.files[last])
}

#[cfg(test)]
mod tests;
