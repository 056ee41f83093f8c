//! The main job: one consumer group, each record decoded once, batches fanned out to the raw
//! layer and the replica. This task consumes and decodes; the sinks run on their own task
//! ([`crate::sinks`]), fed through a bounded channel, so the two use separate cores. Offsets
//! are stored per partition at the watermark: the first offset not yet durable (still in the
//! decoder, in a file not yet uploaded, or in a transaction not yet committed). Kafka's
//! auto-commit commits what was stored; shutdown drains the sinks, then commits.

// Per-record lookups: foldhash, not SipHash (keys are our own topic names and partitions).
use foldhash::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::FutureExt;
use lakesink_config::KafkaConfig;
use lakesink_model::{Backoff, Classify, Fault, Retry};
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};
use lakesink_writers::parquet::{Held, ParquetWriter, Positions};
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::dead_letter::{DeadLetters, Stage};
use crate::headers::HeaderLog;
use crate::kafka;
use crate::replica::ReplicaOffsets;
use crate::sinks::{self, Item, Part, Sinks};
use crate::telemetry::metrics::TopicLabels;
use crate::telemetry::{Component, Telemetry};

/// Hand decoded rows to the sinks after this many records, and at least this often. The
/// interval is most of lakesink's share of the end-to-end latency at low rates; at high rates
/// batches are cut at BATCH_ROWS rows anyway, so a short one costs nothing there.
const FLUSH_RECORDS: usize = 16 * 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(25);
/// Rows per decoded batch.
const BATCH_ROWS: usize = 4096;
/// Items in flight between the two sides (each up to FLUSH_RECORDS records).
const CHANNEL_ITEMS: usize = 2;
/// Records taken in a row without looking at signals, the sinks and the idle timer.
const STREAK: usize = 256;

/// What the consuming side holds: records decoded but not yet sent. Maps are keyed by topic
/// then partition, so a record is looked up by `&str` without allocating.
#[derive(Default)]
struct Pending {
    batches: Vec<ChangeBatch>,
    consumed: HashMap<String, HashMap<i32, i64>>,
    records: usize,
    /// Partitions whose first record was seen since assignment.
    started: HashMap<String, HashSet<i32>>,
    /// Records read per topic since the last hand-over, for the metrics.
    counts: HashMap<String, u64>,
    /// Kafka headers, kept for the raw layer's `__headers` column when it is on.
    headers: Option<HeaderLog>,
}

impl Pending {
    fn is_started(&self, topic: &str, partition: i32) -> bool {
        self.started
            .get(topic)
            .is_some_and(|p| p.contains(&partition))
    }

    fn consumed(&mut self, topic: &str, partition: i32, next: i64) {
        match self.consumed.get_mut(topic) {
            Some(parts) => {
                parts.insert(partition, next);
            }
            None => {
                self.consumed
                    .insert(topic.to_owned(), [(partition, next)].into_iter().collect());
            }
        }
    }

    fn forget(&mut self, part: &Part) {
        self.batches
            .retain(|b| !(*b.topic == *part.0 && b.partition == part.1));
        if let Some(p) = self.consumed.get_mut(&part.0) {
            p.remove(&part.1);
        }
        if let Some(p) = self.started.get_mut(&part.0) {
            p.remove(&part.1);
        }
        if let Some(h) = &mut self.headers {
            h.forget(&part.0, part.1);
        }
    }
}

/// Runs until SIGINT/SIGTERM or an error that retrying cannot fix.
pub(crate) async fn run<R: SchemaResolver>(
    config: &KafkaConfig,
    (consumer, revoked): (kafka::GroupConsumer, kafka::Revoked),
    resolver: R,
    format: Format,
    sinks: Sinks,
    shutdown_timeout: Duration,
    dead_letters: Option<Arc<DeadLetters>>,
) -> anyhow::Result<()> {
    let telemetry = sinks.telemetry.clone();
    let consumer = Arc::new(consumer);
    let replica = sinks.replica.as_ref().map(|r| r.offsets());
    let raw_on = sinks.raw.is_some();
    let positions = sinks.raw.as_ref().map(ParquetWriter::positions);
    let with_headers = sinks.raw.as_ref().is_some_and(ParquetWriter::with_headers);
    let (tx, rx) = mpsc::channel(CHANNEL_ITEMS);
    let rewinds = sinks::Rewinds::default();
    let mut sink_task = tokio::spawn(sinks::run(sinks, rx, consumer.clone(), rewinds.clone()));
    let mut decoder = ChangeDecoder::new(resolver, format, BATCH_ROWS)
        .with_routes(kafka::routes(&config.non_data))
        .with_source_connector(config.source_connector.clone());
    let mut pending = Pending {
        headers: with_headers.then(HeaderLog::default),
        ..Pending::default()
    };
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut idle = tokio::time::interval(FLUSH_IDLE);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut streak = 0;
    let outcome: anyhow::Result<Option<anyhow::Result<()>>> = async {
        loop {
            let parts = revoked.take();
            if !parts.is_empty() {
                for part in &parts {
                    decoder.finish_partition(&part.0, part.1)?;
                    pending.forget(part);
                }
                send(&tx, Item::Revoked(parts)).await?;
            }
            let due = rewinds.take();
            if !due.is_empty() {
                rewind(&consumer, &mut decoder, &mut pending, &tx, &telemetry, due).await?;
            }
            // While records are ready, take them without the select: polling the signals and
            // the timer for each record cost the consuming thread a tenth of its time. The
            // select still runs at least every STREAK records.
            let ready = if streak < STREAK {
                consumer.recv().now_or_never()
            } else {
                None
            };
            streak = if ready.is_some() { streak + 1 } else { 0 };
            let next = if let Some(next) = ready {
                next
            } else {
                tokio::select! {
                biased;
                _ = int.recv() => {
                    shutdown_deadline(shutdown_timeout);
                    break;
                }
                _ = term.recv() => {
                    shutdown_deadline(shutdown_timeout);
                    break;
                }
                // The sinks stop on their own only on an error.
                done = &mut sink_task => return Ok(Some(flatten(done))),
                // Whatever was decoded goes to the sinks at least this often.
                _ = idle.tick() => {
                    hand_over(&mut decoder, &mut pending, &tx, &telemetry).await?;
                    continue;
                }
                next = consumer.recv() => next,
                }
            };
            match next {
                Err(e) if kafka::is_transient(&e) => {
                    telemetry.metrics.retry(Component::Kafka.as_str());
                    warn!(error = %e, "consumer: waiting");
                }
                Err(e) => return Err(e).context("consuming"),
                Ok(msg) => {
                    if !pending.is_started(msg.topic(), msg.partition()) {
                        let part = (msg.topic().to_owned(), msg.partition());
                        pending
                            .started
                            .entry(part.0.clone())
                            .or_default()
                            .insert(part.1);
                        let raw_mark = match (&replica, raw_on) {
                            (Some(_), true) => committed_raw_mark(&consumer, &part).await,
                            _ => None,
                        };
                        let held = match &positions {
                            Some(p) => raw_held(p, &part).await,
                            None => None,
                        };
                        let (item, seek) = start(
                            replica.as_ref(),
                            (raw_on, raw_mark, held),
                            &part,
                            msg.offset(),
                            &telemetry,
                        )
                        .await?;
                        send(&tx, item).await?;
                        if let Some(to) = seek {
                            consumer
                                .seek(&part.0, part.1, Offset::Offset(to), Duration::from_secs(10))
                                .with_context(|| {
                                    format!("seeking {}[{}] to {to}", part.0, part.1)
                                })?;
                            continue;
                        }
                    }
                    if let Some(h) = &mut pending.headers {
                        h.record(&msg);
                    }
                    pending.batches.extend(
                        decode(&mut decoder, &msg, &telemetry, dead_letters.as_deref()).await?,
                    );
                    pending.consumed(msg.topic(), msg.partition(), msg.offset() + 1);
                    pending.records += 1;
                    match pending.counts.get_mut(msg.topic()) {
                        Some(n) => *n += 1,
                        None => {
                            pending.counts.insert(msg.topic().to_owned(), 1);
                        }
                    }
                    if pending.records >= FLUSH_RECORDS {
                        hand_over(&mut decoder, &mut pending, &tx, &telemetry).await?;
                    }
                }
            }
        }
        hand_over(&mut decoder, &mut pending, &tx, &telemetry).await?;
        send(&tx, Item::Stop).await?;
        Ok(None)
    }
    .await;
    drop(tx);
    // The sinks finish what they hold (or say why they failed) before anything is committed.
    let sinks_done = match &outcome {
        Ok(Some(_)) => None,
        _ => Some(flatten(sink_task.await)),
    };
    match (outcome, sinks_done) {
        (Ok(Some(sinks)), _) => sinks.and(Err(anyhow::anyhow!("the sinks stopped"))),
        (Err(e), Some(Err(sinks))) => {
            Err(sinks.context(format!("after the consumer failed: {e:#}")))
        }
        (Err(e), _) => Err(e),
        (Ok(None), Some(sinks)) => sinks,
        (Ok(None), None) => Ok(()),
    }?;
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => info!("offsets committed, stopped"),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => info!("stopped"),
        Err(e) => return Err(e).context("committing offsets on shutdown"),
    }
    Ok(())
}

fn flatten(done: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    done.context("the sink task failed")?
}

/// On a partition's first record: where each sink stands, and where to read from when a
/// sink holds less than Kafka's offset says. Kafka's offset is the lower of the two sinks'
/// points, and `raw_mark` (from the commit's metadata) the raw layer's when it was ahead.
/// `held` is what the raw layer's own store says it holds: its durable point, and the end of
/// all it ever cut, which no offset lakesink commits can pass. A committed offset past that
/// end was moved by something else (a group reset, an offset tool, another client): the
/// partition is read again from the raw layer's own point, never skipped. When the replica is
/// behind (a replica restored from an older backup), the partition is read again from its
/// offset; each sink skips what it already holds.
async fn start(
    replica: Option<&ReplicaOffsets>,
    (raw_on, raw_mark, held): (bool, Option<i64>, Option<Held>),
    part: &Part,
    first: i64,
    telemetry: &Telemetry,
) -> anyhow::Result<(Item, Option<i64>)> {
    let replica_floor = match replica {
        Some(r) => r.next_offset(&part.0, part.1).await?,
        None => None,
    };
    let replica_behind = replica_floor.filter(|&next| next < first);
    if let Some(from) = replica_behind {
        info!(topic = %part.0, partition = part.1, from, to = first,
            "the replica is behind: reading again from its offset");
    }
    let raw_durable = match (held.and_then(|h| h.durable), raw_mark) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let raw_behind = held
        .filter(|h| raw_on && h.cut_end < first)
        .map(|h| raw_durable.unwrap_or(h.cut_end));
    if let (Some(from), Some(h)) = (raw_behind, held) {
        warn!(topic = %part.0, partition = part.1, committed = first, raw_layer = h.cut_end, from,
            "the group's committed offset is past everything the raw layer holds (offsets moved \
             by a reset, a tool or another client): reading again from the raw layer's point");
        telemetry
            .metrics
            .raw_rewinds
            .get_or_create(&TopicLabels {
                topic: part.0.clone(),
            })
            .inc();
    }
    let seek = replica_behind.into_iter().chain(raw_behind).min();
    let from = seek.unwrap_or(first);
    let raw_floor = match raw_durable {
        Some(d) if d > from => Some(d),
        Some(_) => None,
        // Without a position of its own (a raw layer written before positions), below Kafka's
        // offset the raw layer holds everything, as lakesink committed it.
        None if replica_behind.is_some() && raw_behind.is_none() => Some(first),
        None => None,
    };
    let item = Item::Started {
        part: part.clone(),
        raw_floor: raw_floor.filter(|_| raw_on),
        replica_floor,
    };
    Ok((item, seek))
}

/// What the raw layer holds of a partition. A failed lookup falls back to Kafka's offset (what
/// every version before positions did), loudly.
async fn raw_held(positions: &Positions, part: &Part) -> Option<Held> {
    match positions.held(&part.0, part.1).await {
        Ok(held) => held,
        Err(e) => {
            warn!(topic = %part.0, partition = part.1, error = %e,
                "reading the raw layer's position; starting at the group's committed offset");
            None
        }
    }
}

/// The raw layer's point from the partition's committed metadata (see
/// [`sinks::raw_mark_metadata`]). Without it the raw layer cuts the same files again from
/// Kafka's offset, which is safe, so a failed lookup is only logged.
async fn committed_raw_mark(consumer: &Arc<kafka::GroupConsumer>, part: &Part) -> Option<i64> {
    let (c, p) = (consumer.clone(), part.clone());
    let found = tokio::task::spawn_blocking(move || {
        let mut list = TopicPartitionList::new();
        list.add_partition(&p.0, p.1);
        let list = c.committed_offsets(list, Duration::from_secs(10))?;
        // rdkafka panics on metadata that is not UTF-8, which another client could write.
        let metadata = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            list.elements().first().map(|e| e.metadata().to_owned())
        }));
        Ok::<_, KafkaError>(metadata.ok().flatten())
    })
    .await;
    match found {
        Ok(Ok(metadata)) => metadata.as_deref().and_then(sinks::parse_raw_mark),
        Ok(Err(e)) => {
            warn!(topic = %part.0, partition = part.1, error = %e,
                "reading the committed metadata; the raw layer starts at Kafka's offset");
            None
        }
        Err(e) => {
            warn!(error = %e, "reading the committed metadata");
            None
        }
    }
}

/// Reads partitions again from the offsets the sinks asked for: what was consumed before goes
/// to the sinks first, so that [`Item::Rewound`] separates the two readings. A seek only ever
/// goes back: when the consumer is not past the offset asked for (two requests, one answered
/// already), it goes on from where it is, and the sinks are told that point.
async fn rewind<R: SchemaResolver>(
    consumer: &kafka::GroupConsumer,
    decoder: &mut ChangeDecoder<R>,
    pending: &mut Pending,
    tx: &mpsc::Sender<Item>,
    telemetry: &Telemetry,
    due: Vec<(Part, i64)>,
) -> anyhow::Result<()> {
    hand_over(decoder, pending, tx, telemetry).await?;
    // One seek per partition, to the earliest offset asked for.
    let mut earliest: HashMap<Part, i64> = HashMap::default();
    for (part, from) in due {
        let e = earliest.entry(part).or_insert(from);
        *e = (*e).min(from);
    }
    let positions = consumer.position().ok();
    for (part, from) in earliest {
        // Revoked meanwhile: the sinks forgot it, and its new reading starts on its own.
        if !pending.is_started(&part.0, part.1) {
            continue;
        }
        let at = positions
            .as_ref()
            .and_then(|l| l.find_partition(&part.0, part.1))
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        if let Some(at) = at.filter(|&at| at <= from) {
            send(tx, Item::Rewound(part, at)).await?;
            continue;
        }
        if let Some(h) = &mut pending.headers {
            h.forget(&part.0, part.1);
        }
        consumer
            .seek(
                &part.0,
                part.1,
                Offset::Offset(from),
                Duration::from_secs(10),
            )
            .with_context(|| format!("seeking {}[{}] back to {from}", part.0, part.1))?;
        send(tx, Item::Rewound(part, from)).await?;
    }
    Ok(())
}

async fn send(tx: &mpsc::Sender<Item>, item: Item) -> anyhow::Result<()> {
    // A closed channel means the sink task ended; its own error is reported by the caller.
    tx.send(item)
        .await
        .map_err(|_| anyhow::anyhow!("the sinks stopped"))
}

/// Sends every decoded row, and the offsets consumed, to the sinks.
async fn hand_over<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    pending: &mut Pending,
    tx: &mpsc::Sender<Item>,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    pending.batches.extend(decoder.finish_all()?);
    pending.records = 0;
    if let Some(h) = &mut pending.headers {
        let batches = std::mem::take(&mut pending.batches);
        for b in batches {
            let (topic, partition) = (b.topic.clone(), b.partition);
            let b = h.attach(b).map_err(|e| {
                anyhow::anyhow!("{topic}[{partition}]: adding the headers column: {e}")
            })?;
            pending.batches.push(b);
        }
    }
    let m = &telemetry.metrics;
    for (topic, n) in pending.counts.iter_mut().filter(|(_, n)| **n > 0) {
        m.consumed
            .get_or_create(&TopicLabels {
                topic: topic.clone(),
            })
            .inc_by(std::mem::take(n));
    }
    let cache = decoder.cache_stats();
    m.registry_cache_hits
        .inc_by(cache.hits.saturating_sub(m.registry_cache_hits.get()));
    m.registry_cache_misses
        .inc_by(cache.misses.saturating_sub(m.registry_cache_misses.get()));
    if pending.consumed.is_empty() && pending.batches.is_empty() {
        return Ok(());
    }
    let item = Item::Batches {
        batches: std::mem::take(&mut pending.batches),
        consumed: pending
            .consumed
            .drain()
            .flat_map(|(topic, parts)| parts.into_iter().map(move |(p, o)| ((topic.clone(), p), o)))
            .collect(),
    };
    send(tx, item).await
}

/// Decodes a message, retrying while the registry is unreachable.
async fn decode<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    msg: &BorrowedMessage<'_>,
    telemetry: &Telemetry,
    dead_letters: Option<&DeadLetters>,
) -> anyhow::Result<Vec<ChangeBatch>> {
    // Every sink waits for the decoder (sink None).
    let mut retry = Retry::new(Backoff::DEFAULT, telemetry, None, "decoding");
    loop {
        let Some(done) = retry
            .settle(kafka::push(decoder, msg, Some(telemetry)).await)
            .await
        else {
            continue;
        };
        match done {
            Ok(batches) => return Ok(batches),
            Err(e) if e.fault() == Fault::BadData && dead_letters.is_some() => {
                let Some(dl) = dead_letters else {
                    return Err(e.into());
                };
                dl.send(msg, Stage::Decode, &e.to_string()).await?;
                warn!(error = %e, dead_letter_topic = dl.topic(), "bad record sent to the dead-letter topic");
                telemetry
                    .metrics
                    .dead_letters
                    .get_or_create(&TopicLabels {
                        topic: msg.topic().to_owned(),
                    })
                    .inc();
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// After the first SIGTERM or SIGINT the pipeline flushes and commits; this bounds how long.
/// Exiting with work unflushed loses nothing: offsets are stored only for durable records,
/// so the next start reads the rest again. A second signal exits at once.
fn shutdown_deadline(timeout: Duration) {
    info!(deadline = ?timeout, "stopping: flushing the sinks, then committing");
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(timeout) => {
                tracing::error!(deadline = ?timeout,
                    "shutdown deadline passed before the sinks were flushed; exiting, \
                     and what was not durable is read again on the next start");
                std::process::exit(2);
            }
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        warn!("second signal: exiting without flushing");
        std::process::exit(130);
    });
}
