//! What to replay: the segment markers of the raw layer, per Kafka partition in offset order,
//! cut to the selection and to where the replica stands, with what is wrong with them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use lakesink_config::{Content, PartitionerKind, RawConfig, TimestampSource};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{Problem, ProblemKind, ReplayError};
use crate::parquet::{JodaPattern, KeyTemplate, Marker, marker, store};
use crate::sink::TopicPartition;

/// Requests to the store in flight while planning.
const CONCURRENCY: usize = 16;
/// Slack around a time directory's span: DST shifts and zone rounding never prune a file
/// that could hold a selected record.
const PATH_SLACK_MS: i64 = 2 * 3_600_000;

/// Which topics to replay.
#[derive(Debug, Clone, Default)]
pub enum TopicFilter {
    /// Every topic the raw layer holds.
    #[default]
    All,
    List(Vec<String>),
    /// Matched from the start of the name, as the live service subscribes.
    Regex(regex::Regex),
}

impl TopicFilter {
    /// A regex as `kafka.topics-regex` is read: anchored at the start.
    pub fn regex(pattern: &str) -> Result<Self, String> {
        let anchored = if pattern.starts_with('^') {
            pattern.to_owned()
        } else {
            format!("^{pattern}")
        };
        regex::Regex::new(&anchored)
            .map(Self::Regex)
            .map_err(|e| format!("topics regex {pattern:?}: {e}"))
    }

    pub fn matches(&self, topic: &str) -> bool {
        match self {
            Self::All => true,
            Self::List(l) => l.iter().any(|t| t == topic),
            Self::Regex(r) => r.is_match(topic),
        }
    }
}

/// An offset range of one partition, both ends inclusive, either open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRange {
    pub topic: String,
    pub partition: i32,
    pub from: Option<i64>,
    pub to: Option<i64>,
}

impl std::str::FromStr for OffsetRange {
    type Err = String;

    /// `topic:partition:from-to`, `topic:partition:from-`, `topic:partition:-to`,
    /// `topic:partition` (the whole partition).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected TOPIC:PARTITION[:FROM-TO] (FROM or TO may be empty)");
        let mut parts = s.rsplitn(3, ':').collect::<Vec<_>>();
        parts.reverse();
        let (topic, partition, range) = match parts.as_slice() {
            [t, p, r] if p.parse::<i32>().is_ok() && r.contains('-') => (*t, *p, Some(*r)),
            _ => match s.rsplit_once(':') {
                Some((t, p)) if p.parse::<i32>().is_ok() => (t, p, None),
                _ => return Err(bad()),
            },
        };
        let partition: i32 = partition.parse().map_err(|_| bad())?;
        let (from, to) = match range {
            None => (None, None),
            Some(r) => {
                let (a, b) = r.split_once('-').ok_or_else(bad)?;
                let num = |x: &str| -> Result<Option<i64>, String> {
                    if x.is_empty() {
                        Ok(None)
                    } else {
                        x.parse().map(Some).map_err(|_| bad())
                    }
                };
                (num(a)?, num(b)?)
            }
        };
        if topic.is_empty() || from.zip(to).is_some_and(|(a, b)| a > b) {
            return Err(bad());
        }
        Ok(Self {
            topic: topic.to_owned(),
            partition,
            from,
            to,
        })
    }
}

/// What to replay.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub topics: TopicFilter,
    /// Record time (the Kafka timestamp), epoch ms: per partition, replay starts at the first
    /// record at or after `from_ms` and stops before the first at or after `to_ms`.
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    /// When not empty, only these partitions, within these offsets.
    pub offsets: Vec<OffsetRange>,
}

/// The raw layer to read: its store and the settings it was written with.
pub struct RawLayer {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) prefix: String,
    pub(crate) url: String,
    marker_prefix: String,
    template: KeyTemplate,
    /// The time directory pattern, when directories say when their records are from.
    times: Option<(JodaPattern, chrono_tz::Tz, i64)>,
}

impl RawLayer {
    pub fn open(config: &RawConfig) -> Result<Self, ReplayError> {
        let (store, prefix) =
            store::open(&config.url, &config.store).map_err(ReplayError::Config)?;
        Self::with_store(config, store, prefix)
    }

    /// With a given store (tests use `InMemory`).
    pub fn with_store(
        config: &RawConfig,
        store: Arc<dyn ObjectStore>,
        prefix: String,
    ) -> Result<Self, ReplayError> {
        if config.content == Content::Flattened {
            return Err(ReplayError::Config(
                "raw.content = \"flattened\" keeps only the row image (no key record, no before \
                 image, no tombstones): a replica cannot be rebuilt from it exactly. Replay \
                 needs a raw layer written with content = \"envelope\" (the default)"
                    .into(),
            ));
        }
        let template =
            KeyTemplate::compile(&config.file_key, &prefix, &config.topics_dir, config.codec)
                .map_err(ReplayError::Config)?;
        let times = match (config.partitioner, config.timestamp) {
            (PartitionerKind::Time, TimestampSource::Record) => {
                let english = config.locale.to_ascii_lowercase().starts_with("en");
                let pattern =
                    JodaPattern::compile(config.path_format.as_deref().unwrap_or(""), english)
                        .map_err(ReplayError::Config)?;
                let tz: chrono_tz::Tz = config.timezone.parse().map_err(|_| {
                    ReplayError::Config(format!("unknown time zone {:?}", config.timezone))
                })?;
                let duration = config.partition_duration_ms.unwrap_or(3_600_000) as i64;
                Some((pattern, tz, duration))
            }
            _ => None,
        };
        Ok(Self {
            store,
            prefix,
            url: config.url.clone(),
            marker_prefix: config.marker_prefix.clone(),
            template,
            times,
        })
    }

    /// The store URL, for reports.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn marker_root(&self) -> Path {
        let mut k = String::new();
        for part in [self.prefix.as_str(), self.marker_prefix.as_str()] {
            let part = part.trim_matches('/');
            if !part.is_empty() {
                if !k.is_empty() {
                    k.push('/');
                }
                k.push_str(part);
            }
        }
        Path::from(k)
    }

    /// The span of record times a file of `topic`/`partition` can hold, from its directory.
    fn file_times(&self, re: Option<&regex::Regex>, key: &str) -> Option<(i64, i64)> {
        let (pattern, tz, duration) = self.times.as_ref()?;
        let encoded = re?.captures(key)?.get(1)?.as_str();
        let (start, span) = pattern.parse(encoded, tz)?;
        Some((
            start - PATH_SLACK_MS,
            start + span.max(*duration) + PATH_SLACK_MS,
        ))
    }
}

/// One data file of a segment.
#[derive(Debug, Clone)]
pub struct FilePlan {
    pub key: String,
    /// Its size, when it exists.
    pub size: Option<u64>,
    /// Record times it can hold (from its time directory), epoch ms, end exclusive.
    pub times: Option<(i64, i64)>,
}

/// One segment: a marker and its files, offsets `start..=last`.
#[derive(Debug, Clone)]
pub struct SegmentPlan {
    pub marker: String,
    pub start: i64,
    pub last: i64,
    pub rows: u64,
    pub files: Vec<FilePlan>,
}

/// One Kafka partition's replay.
#[derive(Debug, Clone)]
pub struct PartitionPlan {
    pub topic: String,
    pub partition: i32,
    pub segments: Vec<SegmentPlan>,
    /// The replica's next offset for this partition before the replay, if it has one.
    pub stored: Option<i64>,
    /// Offsets to apply: from `begin`, up to `end` (inclusive) when set.
    pub begin: i64,
    pub end: Option<i64>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

impl PartitionPlan {
    pub fn files(&self) -> usize {
        self.segments.iter().map(|s| s.files.len()).sum()
    }

    /// Rows of its segments (an upper bound of what is applied).
    pub fn rows(&self) -> u64 {
        self.segments.iter().map(|s| s.rows).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.segments
            .iter()
            .flat_map(|s| &s.files)
            .filter_map(|f| f.size)
            .sum()
    }
}

/// The whole replay.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub partitions: Vec<PartitionPlan>,
    /// What is wrong with the raw layer in the selected range.
    pub problems: Vec<Problem>,
    /// Things worth knowing that are not wrong.
    pub notes: Vec<String>,
}

impl Plan {
    pub fn files(&self) -> usize {
        self.partitions.iter().map(PartitionPlan::files).sum()
    }

    pub fn rows(&self) -> u64 {
        self.partitions.iter().map(PartitionPlan::rows).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.partitions.iter().map(PartitionPlan::bytes).sum()
    }

    pub fn segments(&self) -> usize {
        self.partitions.iter().map(|p| p.segments.len()).sum()
    }
}

fn store_error(what: &str, source: object_store::Error) -> ReplayError {
    ReplayError::Store {
        what: what.to_owned(),
        source,
    }
}

/// Plans the replay of `selection` from `raw`, given the replica's stored next offsets
/// (per topic and partition, for the same group as the live service).
pub async fn plan(
    raw: &RawLayer,
    selection: &Selection,
    stored: &HashMap<TopicPartition, i64>,
) -> Result<Plan, ReplayError> {
    let root = raw.marker_root();
    let listing = raw
        .store
        .list_with_delimiter(Some(&root))
        .await
        .map_err(|e| store_error(&format!("listing {root}"), e))?;
    let mut topics: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .filter(|t| selection.topics.matches(t))
        .filter(|t| selection.offsets.is_empty() || selection.offsets.iter().any(|o| &o.topic == t))
        .collect();
    topics.sort();
    let mut out = Plan::default();
    if let TopicFilter::List(wanted) = &selection.topics {
        for t in wanted.iter().filter(|t| !topics.contains(t)) {
            out.notes
                .push(format!("topic {t}: nothing in the raw layer"));
        }
    }

    // Marker keys per partition, by start offset.
    let mut markers: BTreeMap<(String, i32), BTreeMap<i64, Path>> = BTreeMap::new();
    for topic in &topics {
        let dir = root.clone().join(topic.as_str());
        let metas: Vec<_> = raw
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| store_error(&format!("listing {dir}"), e))?;
        for m in metas {
            let parts: Vec<_> = m.location.parts().collect();
            let n = parts.len();
            if n < 2 {
                continue;
            }
            let partition = parts[n - 2].as_ref().parse::<i32>();
            let start = parts[n - 1]
                .as_ref()
                .strip_suffix(".json")
                .and_then(|s| s.parse::<i64>().ok());
            let (Ok(partition), Some(start)) = (partition, start) else {
                continue;
            };
            markers
                .entry((topic.clone(), partition))
                .or_default()
                .insert(start, m.location);
        }
    }

    for ((topic, partition), keys) in markers {
        let range = selection
            .offsets
            .iter()
            .find(|o| o.topic == topic && o.partition == partition);
        if !selection.offsets.is_empty() && range.is_none() {
            continue;
        }
        let stored_next = stored
            .get(&TopicPartition::new(topic.as_str(), partition))
            .copied();
        let lower = range.and_then(|r| r.from);
        let begin = stored_next
            .unwrap_or(i64::MIN)
            .max(lower.unwrap_or(i64::MIN));
        let end = range.and_then(|r| r.to);
        let wanted = Wanted {
            raw,
            topic: &topic,
            partition,
            begin,
            end,
            selection,
        };
        let part = plan_partition(&wanted, keys, &mut out).await?;
        let Some(mut part) = part else { continue };
        part.stored = stored_next;
        // Records between the replica's offset and the raw layer's first are nowhere.
        let first = part.segments.first().map(|s| s.start);
        match (stored_next, first) {
            (Some(next), Some(first))
                if first > next
                    && lower.is_none_or(|l| l < first)
                    && selection.from_ms.is_none() =>
            {
                out.problems.push(Problem {
                    kind: ProblemKind::OffsetGap,
                    topic: topic.clone(),
                    partition,
                    offsets: Some((next, first - 1)),
                    key: None,
                    detail: format!(
                        "the replica's next offset is {next} but the raw layer resumes at {first}"
                    ),
                });
            }
            (None, Some(first)) if first > 0 && lower.is_none() && selection.from_ms.is_none() => {
                out.notes.push(format!(
                    "{topic}[{partition}]: the raw layer starts at offset {first}, not 0"
                ));
            }
            _ => {}
        }
        if !part.segments.is_empty() {
            out.partitions.push(part);
        }
    }
    Ok(out)
}

/// A marker's start offset and key, and what reading it gave.
type MarkerRead = (i64, Path, Result<Option<Marker>, String>);

/// One partition to plan, and what of it is wanted.
struct Wanted<'a> {
    raw: &'a RawLayer,
    topic: &'a str,
    partition: i32,
    /// Offsets to apply: from `begin`, up to `end` (inclusive) when set.
    begin: i64,
    end: Option<i64>,
    selection: &'a Selection,
}

impl Wanted<'_> {
    fn problem(
        &self,
        kind: ProblemKind,
        offsets: Option<(i64, i64)>,
        key: String,
        detail: String,
    ) -> Problem {
        Problem {
            kind,
            topic: self.topic.to_owned(),
            partition: self.partition,
            offsets,
            key: Some(key),
            detail,
        }
    }

    /// The markers that can hold wanted offsets, read; `keys` are all of the partition's, by
    /// start offset.
    async fn read_markers(&self, keys: BTreeMap<i64, Path>) -> Vec<MarkerRead> {
        // Markers wholly below `begin` (the next one starts at or below it) are not read.
        let starts: Vec<i64> = keys.keys().copied().collect();
        let first_needed = starts
            .partition_point(|&s| s <= self.begin)
            .saturating_sub(1);
        let wanted: Vec<(i64, Path)> = keys
            .into_iter()
            .skip(first_needed)
            .take_while(|(s, _)| self.end.is_none_or(|e| *s <= e))
            .collect();
        let store = &self.raw.store;
        futures::stream::iter(wanted.into_iter().map(|(s, k)| async move {
            let m = marker::read(store, &k).await.map_err(|e| e.reason);
            (s, k, m)
        }))
        .buffered(CONCURRENCY)
        .collect()
        .await
    }

    /// The segments of the markers read that describe this partition and reach `begin`; the
    /// others are problems.
    fn segments(&self, read: Vec<MarkerRead>, out: &mut Plan) -> Vec<SegmentPlan> {
        let (topic, partition) = (self.topic, self.partition);
        let mut segments = Vec::new();
        for (start, key, m) in read {
            let problem =
                |detail| self.problem(ProblemKind::CorruptMarker, None, key.to_string(), detail);
            let m = match m {
                Ok(Some(m)) => m,
                Ok(None) => continue, // deleted since the listing
                Err(e) => {
                    out.problems.push(problem(e));
                    continue;
                }
            };
            if m.topic != topic || m.partition != partition || m.start != start || m.last < m.start
            {
                out.problems.push(problem(format!(
                    "it describes {}[{}] offsets {}..={}",
                    m.topic, m.partition, m.start, m.last
                )));
                continue;
            }
            if m.last < self.begin {
                continue;
            }
            segments.push(SegmentPlan {
                marker: key.to_string(),
                start: m.start,
                last: m.last,
                rows: m.rows,
                files: m
                    .files
                    .into_iter()
                    .map(|key| FilePlan {
                        key,
                        size: None,
                        times: None,
                    })
                    .collect(),
            });
        }
        segments
    }

    /// Time directories: skip leading segments that hold only records before `from`, and
    /// stop at the first that holds only records at or after `to`.
    fn cut_to_times(&self, segments: &mut Vec<SegmentPlan>) {
        let re = self
            .raw
            .template
            .encoded_pattern(self.topic, self.partition);
        for s in segments.iter_mut() {
            for f in &mut s.files {
                f.times = self.raw.file_times(re.as_ref(), &f.key);
            }
        }
        let all = |s: &SegmentPlan, pred: &dyn Fn((i64, i64)) -> bool| {
            !s.files.is_empty() && s.files.iter().all(|f| f.times.is_some_and(pred))
        };
        if let Some(from) = self.selection.from_ms {
            let skip = segments
                .iter()
                .take_while(|s| all(s, &|(_, e)| e <= from))
                .count();
            segments.drain(..skip);
        }
        if let Some(to) = self.selection.to_ms
            && let Some(stop) = segments.iter().position(|s| all(s, &|(b, _)| b >= to))
        {
            segments.truncate(stop);
        }
    }

    /// The chain: each segment starts right after the previous one.
    fn check_chain(&self, segments: &[SegmentPlan], out: &mut Plan) {
        let (topic, partition) = (self.topic, self.partition);
        for pair in segments.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if b.start > a.last + 1 {
                out.problems.push(self.problem(
                    ProblemKind::OffsetGap,
                    Some((a.last + 1, b.start - 1)),
                    b.marker.clone(),
                    format!(
                        "no segment holds these offsets: one ends at {}, the next starts at {}",
                        a.last, b.start
                    ),
                ));
            } else if b.start <= a.last {
                out.notes.push(format!(
                    "{topic}[{partition}]: segments {}..={} and {}..={} overlap; each offset is applied once",
                    a.start, a.last, b.start, b.last
                ));
            }
        }
    }

    /// Every listed file must exist; a last segment with files missing is still being
    /// written (or its writer crashed before finishing it, and will write it again).
    async fn check_files(
        &self,
        segments: &mut Vec<SegmentPlan>,
        out: &mut Plan,
    ) -> Result<(), ReplayError> {
        let (topic, partition) = (self.topic, self.partition);
        let mut missing = self.sizes(segments).await?;
        if let Some((&last, _)) = missing.last_key_value()
            && last + 1 == segments.len()
        {
            let s = &segments[last];
            out.notes.push(format!(
                "{topic}[{partition}]: segment {}..={} is not complete (a writer is uploading it, or \
                 crashed before it finished and will write it again): replay stops before it",
                s.start, s.last
            ));
            missing.remove(&last);
            segments.truncate(last);
        }
        for (si, files) in missing {
            let s = &segments[si];
            for fi in files {
                out.problems.push(self.problem(
                    ProblemKind::MissingFile,
                    Some((s.start, s.last)),
                    s.files[fi].key.clone(),
                    format!("listed by marker {} but not in the store", s.marker),
                ));
            }
        }
        Ok(())
    }

    /// Sets the size of every file of `segments` that exists; returns the missing ones, per
    /// segment.
    async fn sizes(
        &self,
        segments: &mut [SegmentPlan],
    ) -> Result<BTreeMap<usize, Vec<usize>>, ReplayError> {
        let heads: Vec<(usize, usize, Result<u64, object_store::Error>)> = futures::stream::iter(
            segments
                .iter()
                .enumerate()
                .flat_map(|(si, s)| (0..s.files.len()).map(move |fi| (si, fi)))
                .map(|(si, fi)| {
                    let key = Path::from(segments[si].files[fi].key.as_str());
                    let store = self.raw.store.clone();
                    async move { (si, fi, store.head(&key).await.map(|m| m.size)) }
                }),
        )
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
        let mut missing: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (si, fi, head) in heads {
            match head {
                Ok(size) => segments[si].files[fi].size = Some(size),
                Err(object_store::Error::NotFound { .. }) => {
                    missing.entry(si).or_default().push(fi)
                }
                Err(e) => {
                    return Err(store_error(
                        &format!("reading {}", segments[si].files[fi].key),
                        e,
                    ));
                }
            }
        }
        Ok(missing)
    }
}

async fn plan_partition(
    w: &Wanted<'_>,
    keys: BTreeMap<i64, Path>,
    out: &mut Plan,
) -> Result<Option<PartitionPlan>, ReplayError> {
    let read = w.read_markers(keys).await;
    let mut segments = w.segments(read, out);
    w.cut_to_times(&mut segments);
    w.check_chain(&segments, out);
    w.check_files(&mut segments, out).await?;
    Ok(Some(PartitionPlan {
        topic: w.topic.to_owned(),
        partition: w.partition,
        segments,
        stored: None,
        begin: w.begin,
        end: w.end,
        from_ms: w.selection.from_ms,
        to_ms: w.selection.to_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_ranges_parse() {
        let r: OffsetRange = "db.public.t:3:10-20".parse().expect("range");
        assert_eq!(
            r,
            OffsetRange {
                topic: "db.public.t".into(),
                partition: 3,
                from: Some(10),
                to: Some(20)
            }
        );
        let r: OffsetRange = "t:0:5-".parse().expect("range");
        assert_eq!((r.from, r.to), (Some(5), None));
        let r: OffsetRange = "t:0:-5".parse().expect("range");
        assert_eq!((r.from, r.to), (None, Some(5)));
        let r: OffsetRange = "a:b:1".parse().expect("whole partition");
        assert_eq!((r.topic.as_str(), r.partition, r.from), ("a:b", 1, None));
        assert!("t:0:9-3".parse::<OffsetRange>().is_err());
        assert!("t".parse::<OffsetRange>().is_err());
        assert!("t:x:1-2".parse::<OffsetRange>().is_err());
    }

    #[test]
    fn topic_regex_is_anchored_at_the_start() {
        let f = TopicFilter::regex("demo\\..*").expect("regex");
        assert!(f.matches("demo.public.orders"));
        assert!(!f.matches("x.demo.public.orders"));
    }
}
