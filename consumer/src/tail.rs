//! `lakesink tail`: the configured topics decoded and printed as one JSON line per row, for a
//! look at a topic. It is no member of the configured group: it assigns itself every partition
//! of the configured topics, positioned from the command line, and never commits or stores an
//! offset, so a tail run with the service's config leaves the service's offsets untouched
//! (a commit there would make the next `run` skip what the tail printed).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arrow_array::RecordBatch;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, info, warn};

use crate::kafka::{self, GroupConsumer};

/// Print what is decoded after this many records, or after this long without a record.
const FLUSH_RECORDS: usize = 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(200);
/// How often the topics' metadata is read again for new topics and partitions.
const REFRESH: Duration = Duration::from_secs(10);
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(clap::Args)]
pub(crate) struct TailArgs {
    /// The TOML config file.
    #[arg(short, long)]
    pub(crate) config: PathBuf,
    /// Start each partition at its earliest offset (default: at its end, for new records only).
    #[arg(long)]
    from_beginning: bool,
    /// Start these partitions at these offsets, comma separated or repeated; the others start
    /// at their end (or their beginning, with --from-beginning).
    #[arg(long, value_name = "TOPIC:PARTITION:OFFSET", value_delimiter = ',')]
    offsets: Vec<StartAt>,
    /// Stop after printing this many rows.
    #[arg(long, value_name = "N")]
    max: Option<u64>,
}

/// `--offsets topic:partition:offset`.
#[derive(Clone, Debug, PartialEq)]
struct StartAt {
    topic: String,
    partition: i32,
    offset: i64,
}

impl std::str::FromStr for StartAt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected TOPIC:PARTITION:OFFSET");
        let mut parts = s.rsplitn(3, ':');
        let (Some(offset), Some(partition), Some(topic)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if topic.is_empty() {
            return Err(bad());
        }
        let partition: i32 = partition.parse().map_err(|_| bad())?;
        let offset: i64 = offset.parse().map_err(|_| bad())?;
        if partition < 0 || offset < 0 {
            return Err(bad());
        }
        Ok(Self {
            topic: topic.to_owned(),
            partition,
            offset,
        })
    }
}

/// Which topics the config names: a list, or a regex matched from the start of the name
/// (as librdkafka matches `kafka.topics-regex` for `run`).
enum Topics {
    Named(Vec<String>),
    Matching(regex::Regex),
}

impl Topics {
    fn new(config: &KafkaConfig) -> anyhow::Result<Self> {
        Ok(match &config.topics_regex {
            Some(r) => {
                let anchored = if r.starts_with('^') {
                    r.clone()
                } else {
                    format!("^{r}")
                };
                Self::Matching(
                    regex::Regex::new(&anchored)
                        .with_context(|| format!("kafka.topics-regex {r:?} is not a regex"))?,
                )
            }
            None => Self::Named(config.topics.clone()),
        })
    }

    fn matches(&self, topic: &str) -> bool {
        match self {
            Self::Named(names) => names.iter().any(|n| n == topic),
            Self::Matching(re) => re.is_match(topic),
        }
    }
}

/// A partition the brokers know, with its first and next offsets when it was looked up.
struct Found {
    topic: String,
    partition: i32,
    low: i64,
    high: i64,
}

/// Consumes and prints until SIGINT/SIGTERM, or until `--max` rows are printed.
/// `resolver` serves the registry-framed formats.
pub(crate) async fn run<R: SchemaResolver>(
    config: &KafkaConfig,
    args: &TailArgs,
    resolver: R,
    format: Format,
) -> anyhow::Result<()> {
    let topics = Arc::new(Topics::new(config)?);
    let consumer = Arc::new(kafka::unsubscribed(config, &throwaway_group())?);
    info!(brokers = %config.brokers, "reading the topics' metadata");
    let found = first_lookup(&consumer, &topics).await?;
    let mut known: HashSet<(String, i32)> = HashSet::new();
    let mut explicit: HashMap<(&str, i32), i64> = HashMap::new();
    for s in &args.offsets {
        explicit.insert((&s.topic, s.partition), s.offset);
    }
    let mut start = TopicPartitionList::new();
    for f in &found {
        let offset = match explicit.remove(&(f.topic.as_str(), f.partition)) {
            Some(o) if o < f.low || o > f.high => {
                let clamped = o.clamp(f.low, f.high);
                warn!(
                    topic = f.topic,
                    partition = f.partition,
                    requested = o,
                    low = f.low,
                    high = f.high,
                    offset = clamped,
                    "--offsets: outside the partition's offsets; starting at the nearest"
                );
                clamped
            }
            Some(o) => o,
            None if args.from_beginning => f.low,
            None => f.high,
        };
        debug!(topic = f.topic, partition = f.partition, offset, "start");
        start.add_partition_offset(&f.topic, f.partition, Offset::Offset(offset))?;
        known.insert((f.topic.clone(), f.partition));
    }
    if let Some(((topic, partition), _)) = explicit.into_iter().next() {
        anyhow::bail!(
            "--offsets names {topic}:{partition}, which is not a partition of the configured topics"
        );
    }
    consumer
        .incremental_assign(&start)
        .context("assigning the partitions")?;
    if found.is_empty() {
        warn!(
            "no partition of the configured topics yet; they are read from their start once they appear"
        );
    }
    info!(
        partitions = found.len(),
        from = if args.from_beginning {
            "beginning"
        } else {
            "end"
        },
        "tailing"
    );
    drop(found);

    let max = args.max.unwrap_or(u64::MAX);
    let batch = usize::try_from(max).map_or(FLUSH_RECORDS, |m| m.clamp(1, FLUSH_RECORDS));
    let mut decoder = ChangeDecoder::new(resolver, format, batch)
        .with_routes(kafka::routes(&config.non_data))
        .with_source_connector(config.source_connector.clone());
    let mut out = Printed { rows: 0, max };
    let mut unflushed = 0;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + REFRESH, REFRESH);
    while !out.done() {
        let next = tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = refresh.tick() => {
                assign_new(&consumer, &topics, &mut known).await?;
                continue;
            }
            next = tokio::time::timeout(FLUSH_IDLE, consumer.recv()) => next,
        };
        match next {
            Err(_idle) => {
                flush(&mut decoder, &mut out)?;
                unflushed = 0;
            }
            Ok(Err(e)) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
            Ok(Err(e)) => return Err(e).context("consuming"),
            Ok(Ok(msg)) => {
                for batch in kafka::push(&mut decoder, &msg, None).await? {
                    out.print(&batch)?;
                }
                unflushed += 1;
                if unflushed >= batch {
                    flush(&mut decoder, &mut out)?;
                    unflushed = 0;
                }
            }
        }
    }
    flush(&mut decoder, &mut out)?;
    // Nothing to commit: the tail is no member of any group that keeps offsets.
    info!(rows = out.rows, "stopping");
    Ok(())
}

/// A group id that is no service's: librdkafka wants one for `assign`, and nothing is ever
/// committed under it.
fn throwaway_group() -> String {
    let random = RandomState::new().hash_one(std::time::SystemTime::now());
    format!("lakesink-tail-{}-{random:016x}", std::process::id())
}

/// The partitions at start. librdkafka serves OAUTHBEARER token requests and reports
/// authentication and TLS failures only through the consumer's queue, so the queue is polled
/// while the metadata is read: a failure stops the tail instead of leaving it waiting. Each
/// lookup is one bounded attempt, so that stopping never waits on a retry loop.
async fn first_lookup(
    consumer: &Arc<GroupConsumer>,
    topics: &Arc<Topics>,
) -> anyhow::Result<Vec<Found>> {
    loop {
        let (c, t) = (consumer.clone(), topics.clone());
        let mut lookup = tokio::task::spawn_blocking(move || partitions(&c, &t, &HashSet::new()));
        let found = loop {
            tokio::select! {
                found = &mut lookup => break found.context("the metadata lookup")?,
                next = consumer.recv() => nothing_assigned(next)?,
            }
        };
        match found {
            Ok(found) => return Ok(found),
            Err(e) if kafka::is_transient(&e) => {
                warn!(error = %e, "reading the topics' metadata: waiting");
                let pause = tokio::time::sleep(Duration::from_secs(1));
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        _ = &mut pause => break,
                        next = consumer.recv() => nothing_assigned(next)?,
                    }
                }
            }
            Err(e) => return Err(e).context("reading the topics' metadata"),
        }
    }
}

/// What the consumer's queue yields before any partition is assigned: errors only.
fn nothing_assigned(
    next: Result<rdkafka::message::BorrowedMessage<'_>, rdkafka::error::KafkaError>,
) -> anyhow::Result<()> {
    match next {
        Err(e) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
        Err(e) => return Err(e).context("connecting to Kafka"),
        Ok(_) => {}
    }
    Ok(())
}

/// Assigns, from their first offset, partitions that appeared since the last look: a new
/// topic (Debezium creates one with its first event, a regex may match it) or new partitions.
/// Everything in them was written after the tail started.
async fn assign_new(
    consumer: &Arc<GroupConsumer>,
    topics: &Arc<Topics>,
    known: &mut HashSet<(String, i32)>,
) -> anyhow::Result<()> {
    let (c, t, k) = (consumer.clone(), topics.clone(), known.clone());
    let found = tokio::task::spawn_blocking(move || partitions(&c, &t, &k))
        .await
        .context("the metadata lookup")?;
    let found = match found {
        Ok(f) => f,
        Err(e) => {
            warn!(error = %e, "reading the topics' metadata again; trying later");
            return Ok(());
        }
    };
    if found.is_empty() {
        return Ok(());
    }
    let mut list = TopicPartitionList::new();
    for f in found {
        info!(
            topic = f.topic,
            partition = f.partition,
            offset = f.low,
            "new partition"
        );
        list.add_partition_offset(&f.topic, f.partition, Offset::Offset(f.low))?;
        known.insert((f.topic, f.partition));
    }
    consumer
        .incremental_assign(&list)
        .context("assigning the new partitions")
}

/// The partitions of the configured topics not in `known`, with their watermarks. Blocking.
fn partitions(
    consumer: &GroupConsumer,
    topics: &Topics,
    known: &HashSet<(String, i32)>,
) -> KafkaResult<Vec<Found>> {
    let metadata = consumer.fetch_metadata(None, METADATA_TIMEOUT)?;
    let mut found = Vec::new();
    for topic in metadata.topics() {
        // A topic with an error (being created or deleted) is looked at again later.
        if topic.error().is_some() || !topics.matches(topic.name()) {
            continue;
        }
        for p in topic.partitions() {
            if known.contains(&(topic.name().to_owned(), p.id())) {
                continue;
            }
            let (low, high) = consumer.fetch_watermarks(topic.name(), p.id(), METADATA_TIMEOUT)?;
            found.push(Found {
                topic: topic.name().to_owned(),
                partition: p.id(),
                low,
                high,
            });
        }
    }
    found.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(found)
}

/// Rows printed so far, against `--max`.
struct Printed {
    rows: u64,
    max: u64,
}

impl Printed {
    fn done(&self) -> bool {
        self.rows >= self.max
    }

    /// One JSON line per row (up to `--max`): coordinates, op, key and the row images (or
    /// the value of a record that is not a row, when `[kafka.non-data]` keeps it).
    fn print(&mut self, batch: &ChangeBatch) -> anyhow::Result<()> {
        let left = usize::try_from(self.max - self.rows).unwrap_or(usize::MAX);
        if left == 0 {
            return Ok(());
        }
        let keep: Vec<usize> = ["__offset", "__op", "key", "before", "after", "value"]
            .iter()
            .filter_map(|name| batch.rows.schema().index_of(name).ok())
            .collect();
        let rows: RecordBatch = batch.rows.project(&keep)?;
        let rows = rows.slice(0, rows.num_rows().min(left));
        let mut json = Vec::new();
        let mut writer = arrow_json::LineDelimitedWriter::new(&mut json);
        writer.write(&rows)?;
        writer.finish()?;
        let mut out = std::io::stdout().lock();
        for line in json.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            write!(out, "{}[{}] ", batch.topic, batch.partition)?;
            out.write_all(line)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        self.rows += rows.num_rows() as u64;
        Ok(())
    }
}

/// Prints every open batch.
fn flush<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    out: &mut Printed,
) -> anyhow::Result<()> {
    for batch in decoder.finish_all()? {
        out.print(&batch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_offsets_parse() {
        let s: StartAt = "db.inventory.orders:2:41".parse().expect("parses");
        assert_eq!(
            s,
            StartAt {
                topic: "db.inventory.orders".into(),
                partition: 2,
                offset: 41
            }
        );
        for bad in [
            "orders:2",
            "orders",
            ":1:2",
            "orders:x:1",
            "orders:1:-1",
            "orders:-1:0",
        ] {
            assert!(bad.parse::<StartAt>().is_err(), "{bad}");
        }
    }
}
