//! [`ParquetWriter`]: change batches into the partitions' open segments, and the segments'
//! cuts: marker first, then the upload.

use std::collections::HashMap;
use std::sync::Arc;

use lakesink_config::{Codec, PartitionerKind, RawConfig, Tombstones};
use lakesink_schema_registry::ChangeBatch;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use tracing::info;

use super::error::{RawError, StoreFailure};
use super::joda::JodaPattern;
use super::key::KeyTemplate;
use super::marker;
use super::partitioner::{Partitioner, TimeSource};
use super::position::Positions;
use super::rolling::{RollingPolicy, Rotation};
use super::segment::{Incoming, PartitionState, Segment, Step, open_segment, plan};
use super::store;
use super::uploads::Uploads;
use crate::failpoint;
use crate::sink::TopicPartition;

pub(super) struct Settings {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) prefix: String,
    pub(super) template: KeyTemplate,
    pub(super) partitioner: Partitioner,
    pub(super) times: TimeSource,
    pub(super) policy: RollingPolicy,
    pub(super) props: WriterProperties,
    pub(super) content: lakesink_config::Content,
    pub(super) skip_tombstones: bool,
    pub(super) with_headers: bool,
    pub(super) budget: usize,
    pub(super) part_size: usize,
    pub(super) marker_prefix: String,
}

impl Settings {
    fn new(
        config: &RawConfig,
        store: Arc<dyn ObjectStore>,
        prefix: String,
    ) -> Result<Self, RawError> {
        let tz: chrono_tz::Tz = config
            .timezone
            .parse()
            .map_err(|_| RawError::Config(format!("unknown time zone {:?}", config.timezone)))?;
        let partitioner = partitioner(config, tz)?;
        let template =
            KeyTemplate::compile(&config.file_key, &prefix, &config.topics_dir, config.codec)
                .map_err(RawError::Config)?;
        Ok(Settings {
            store,
            prefix,
            template,
            partitioner,
            times: TimeSource::parse(config.timestamp, config.timestamp_field.as_deref()),
            policy: RollingPolicy {
                rules: rotations(config),
                tz,
            },
            props: writer_properties(config.codec, config.row_group_rows),
            content: config.content,
            skip_tombstones: config.tombstones == Tombstones::Skip,
            with_headers: config.headers,
            budget: usize::try_from(config.memory_budget_bytes).unwrap_or(usize::MAX),
            part_size: config.part_size_bytes,
            marker_prefix: config.marker_prefix.clone(),
        })
    }
}

fn partitioner(config: &RawConfig, tz: chrono_tz::Tz) -> Result<Partitioner, RawError> {
    let english = config.locale.to_ascii_lowercase().starts_with("en");
    Ok(match config.partitioner {
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
    })
}

fn rotations(config: &RawConfig) -> Vec<Rotation> {
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
    rules
}

/// The footer's `created_by`, in the `<app> version <version>` form parquet-java parses
/// (`VersionParser`): a string it cannot parse makes it distrust, and ignore, the file's
/// min/max statistics (PARQUET-251), so Spark and Trino would read every row group.
pub(crate) fn created_by() -> String {
    format!("lakesink version {}", env!("CARGO_PKG_VERSION"))
}

/// Parquet's compression for a `codec` setting (the raw layer's and the lake's).
fn compression(codec: Codec) -> Compression {
    match codec {
        Codec::None => Compression::UNCOMPRESSED,
        Codec::Snappy => Compression::SNAPPY,
        Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
        Codec::Gzip => Compression::GZIP(GzipLevel::default()),
        Codec::Lz4 => Compression::LZ4_RAW,
    }
}

/// A column chunk's dictionary stops growing at this size and its later pages are plain
/// encoded. parquet's default of 1 MiB holds 128 Ki longs, so a row group of unique ids,
/// timestamps or LSNs was dictionary encoded whole: a hash table and a dictionary per column
/// per open file, both larger than the column they encode. At 128 KiB (16 Ki longs, thousands
/// of short strings; a status, a country or a currency stays a dictionary) the raw-layer bench
/// spent 2.9 instead of 3.4–3.6 CPU seconds per million records, peaked 60–100 MiB lower, and
/// wrote 18% fewer bytes (docs/raw-layer.md, Memory).
const DICTIONARY_PAGE_BYTES: usize = 128 * 1024;

/// The Parquet settings of the raw layer's and the lake's files.
pub(crate) fn writer_properties(codec: Codec, row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(compression(codec))
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_created_by(created_by())
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        // A new value on every row: a dictionary would only be built to be dropped.
        .set_column_dictionary_enabled(ColumnPath::from("__offset"), false)
        .set_column_dictionary_enabled(ColumnPath::from("__timestamp"), false)
        .build()
}

pub struct ParquetWriter {
    pub(super) s: Arc<Settings>,
    pub(super) parts: HashMap<TopicPartition, PartitionState>,
    /// The sum of the open segments' `mem`.
    pub(super) open_memory: usize,
    pub(super) uploads: Uploads,
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
        let settings = Settings::new(config, store, prefix)?;
        Ok(Self {
            s: Arc::new(settings),
            parts: HashMap::new(),
            open_memory: 0,
            uploads: Uploads::new(config.upload_concurrency),
        })
    }

    /// Adds a batch's rows; closes segments the policy or the memory budget says to close.
    /// `now` is the wall clock, epoch ms.
    pub async fn write(&mut self, batch: &ChangeBatch, now: i64) -> Result<(), RawError> {
        let n = batch.rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let b = Incoming::new(batch, &self.s)?;
        let key = TopicPartition::new(batch.topic.clone(), batch.partition);
        let mut from = 0;
        while from < n {
            self.open(&key, b.offsets.value(from), now).await?;
            let (to, times) = match self.step(&key, &b, from, now)? {
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
            let close = self.append(&key, &b, from..to, &times, now).await?;
            from = to;
            if close {
                self.cut(&key, now).await?;
            }
        }
        self.enforce_budget(now).await
    }

    /// What to do with the rows of `b` from `from` on.
    fn step(
        &mut self,
        key: &TopicPartition,
        b: &Incoming<'_>,
        from: usize,
        now: i64,
    ) -> Result<Step, RawError> {
        let (forced, seg) = open_segment(&mut self.parts, key)?;
        plan(&self.s, forced, seg, &b.offsets, &b.batch.rows, from, now)
            .map_err(|(row, reason)| b.error(b.offsets.value(row), reason))
    }

    /// Writes rows `rows` of `b` into the open segment; true when it is now to be closed.
    async fn append(
        &mut self,
        key: &TopicPartition,
        b: &Incoming<'_>,
        rows: std::ops::Range<usize>,
        times: &[i64],
        now: i64,
    ) -> Result<bool, RawError> {
        let (forced, seg) = open_segment(&mut self.parts, key)?;
        seg.append(&self.s, key, b, rows, times, now).await?;
        let mem = seg.memory();
        self.open_memory = self.open_memory + mem - seg.mem;
        seg.mem = mem;
        Ok(match forced {
            Some((last, _)) => seg.last >= last,
            None => self.s.policy.full(&seg.stats()).is_some(),
        })
    }

    /// Closes segments whose time is up: idle partitions and wall-clock boundaries.
    pub async fn poll(&mut self, now: i64) -> Result<(), RawError> {
        let due: Vec<TopicPartition> = self
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
        let open: Vec<TopicPartition> = self
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
        let key = TopicPartition::new(topic, partition);
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
    pub fn abandon_all(&mut self) -> Vec<(TopicPartition, i64)> {
        let mut points = Vec::new();
        for (key, st) in self.parts.drain() {
            let start = st.pending_start();
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
        self.uploads.abort_all();
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
        self.parts
            .get(&TopicPartition::new(topic, partition))?
            .pending_start()
    }

    /// Opens a segment at `offset` if none is open, following an earlier run's markers.
    async fn open(&mut self, key: &TopicPartition, offset: i64, now: i64) -> Result<(), RawError> {
        let mkey = self.marker_key(key, offset);
        let st = self.parts.entry(key.clone()).or_default();
        if st.segment.is_some() {
            return Ok(());
        }
        if st.forced.is_none() && !st.chain_done {
            match marker::read(&self.s.store, &mkey).await {
                Ok(Some(m)) => {
                    info!(topic = %key.topic, partition = key.partition, start = offset, last = m.last,
                        "repeating the cut of an earlier run");
                    st.forced = Some((m.last, m.wall_ms));
                }
                Ok(None) => st.chain_done = true,
                Err(reason) => return Err(marker_error(key, &mkey, reason)),
            }
        }
        let wall = st.forced.map_or(now, |(_, wall)| wall);
        st.segment = Some(Segment::new(offset, wall, now));
        Ok(())
    }

    fn marker_key(&self, key: &TopicPartition, start: i64) -> Path {
        marker::key(
            &self.s.marker_prefix,
            &self.s.prefix,
            &key.topic,
            key.partition,
            start,
        )
    }

    /// Seals the partition's segment, records its cut, and starts making its files visible.
    pub(super) async fn cut(&mut self, key: &TopicPartition, _now: i64) -> Result<(), RawError> {
        let (marker, sealed) = {
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
            let sealed = seg.seal(key)?;
            st.uploading.insert(sealed.0.start);
            sealed
        };
        failpoint::hit(failpoint::RAW_BEFORE_MARKER);
        let mkey = self.marker_key(key, marker.start);
        marker::write(&self.s.store, &mkey, &marker)
            .await
            .map_err(|reason| marker_error(key, &mkey, reason))?;
        self.uploads
            .start(self.s.store.clone(), key, &marker, sealed);
        Ok(())
    }
}

fn marker_error(key: &TopicPartition, mkey: &Path, reason: StoreFailure) -> RawError {
    RawError::Marker {
        topic: key.topic.to_string(),
        partition: key.partition,
        key: mkey.to_string(),
        reason,
    }
}
