//! The main job: one consumer group, each record decoded once, batches fanned out to the raw
//! layer and the replica. Three tasks, so that a record's stages run on separate cores: this
//! one consumes and copies records into chunks; the decoding side ([`decoding`]) decodes
//! them and sends the batches on; the sinks ([`crate::sinks`]) write them. Each hands over
//! through a bounded channel, in consumption order. Offsets are stored per partition at the
//! watermark: the first offset not yet durable (still being decoded, in a file not yet
//! uploaded, or in a transaction not yet committed). Kafka's auto-commit commits what was
//! stored; shutdown drains the decoding side and the sinks, then commits.

// Per-record lookups: foldhash, not SipHash (keys are our own topic names and partitions).
use foldhash::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::FutureExt;
use lakesink_config::KafkaConfig;
use lakesink_model::{Backoff, Failure, Fault};
use lakesink_schema_registry::{ChangeDecoder, Format, SchemaResolver};
use lakesink_writers::sink::{Resume, Sink, TopicPartition};
use rdkafka::Message;
use rdkafka::Offset;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::columns::Columns;
use crate::dead_letter::DeadLetters;
use crate::headers::HeaderLog;
use crate::kafka::{self, calls};
use crate::offsets;
use crate::sinks::{self, Control, ToSinks};
use crate::telemetry::{Component, Telemetry};
use chunk::Chunk;
use decoding::{Decoding, ToDecoder};
use pending::{BATCH_ROWS, Pending};

mod chunk;
mod decoding;
mod pending;
#[cfg(test)]
mod tests;

/// Items in flight to the sinks (each up to FLUSH_RECORDS records).
const CHANNEL_ITEMS: usize = 2;
/// Items in flight to the decoding side (a chunk is up to CHUNK_RECORDS records).
const DECODER_ITEMS: usize = 4;
/// Records taken in a row without looking at signals, the sinks and the idle timer.
const STREAK: usize = 256;
/// How the consumer waits after an error librdkafka recovers from by itself (brokers out of
/// reach, no topic yet): librdkafka reconnects meanwhile; the wait keeps the loop from
/// spinning on its reports.
const KAFKA_WAIT: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(5),
    attempts: None,
};

/// A sink's resume lookup, and whether its point rides in the commit's metadata.
struct Resumer {
    name: &'static str,
    mark: bool,
    resume: Arc<dyn Resume>,
}

/// A later stage ended, so an earlier one could not hand over: it has nothing to say of its
/// own, and the later stage's outcome is the one reported.
#[derive(Debug)]
struct Stopped(&'static str);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} stopped", self.0)
    }
}

impl std::error::Error for Stopped {}

/// Why the consuming loop ended before a signal: a later stage's task finished.
enum Ended {
    Decoding(anyhow::Result<()>),
    Sinks(anyhow::Result<()>),
}

/// The consuming side's part: which partitions started, and the chunk being filled.
struct Feed {
    /// Partitions whose first record was seen since assignment.
    started: HashMap<Arc<str>, HashSet<i32>>,
    /// The partition of the last record taken (started): records come in runs of one.
    last: Option<(Arc<str>, i32)>,
    chunk: Chunk,
    /// Chunks the decoding side emptied, to fill again.
    spare: mpsc::UnboundedReceiver<Chunk>,
    tx: mpsc::Sender<ToDecoder>,
}

impl Feed {
    fn is_started(&self, topic: &str, partition: i32) -> bool {
        self.started
            .get(topic)
            .is_some_and(|p| p.contains(&partition))
    }

    /// Marks a partition started; its topic's name as the feed holds it.
    fn start(&mut self, topic: &str, partition: i32) -> Arc<str> {
        let t = match self.started.get_key_value(topic) {
            Some((t, _)) => t.clone(),
            None => Arc::from(topic),
        };
        self.started.entry(t.clone()).or_default().insert(partition);
        t
    }

    fn forget(&mut self, part: &TopicPartition) {
        if let Some(p) = self.started.get_mut(&*part.topic) {
            p.remove(&part.partition);
        }
        self.last = None;
    }

    /// Copies `msg` into the chunk, or says its partition has not started (false). `topic`
    /// is `msg`'s: rdkafka's `topic()` measures and checks the name on each call.
    fn take(&mut self, msg: &impl Message, topic: &str) -> bool {
        let partition = msg.partition();
        let known = self
            .last
            .as_ref()
            .is_some_and(|(t, p)| *p == partition && **t == *topic);
        if !known {
            let Some((t, parts)) = self.started.get_key_value(topic) else {
                return false;
            };
            if !parts.contains(&partition) {
                return false;
            }
            self.last = Some((t.clone(), partition));
        }
        if let Some((t, _)) = &self.last {
            self.chunk.push(msg, t);
        }
        true
    }

    /// Sends the chunk, if it holds records, to the decoding side.
    async fn flush(&mut self) -> anyhow::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let next = self.spare.try_recv().unwrap_or_default();
        let chunk = std::mem::replace(&mut self.chunk, next);
        self.tx
            .send(ToDecoder::Records(chunk))
            .await
            .map_err(|_| Stopped("decoding side").into())
    }

    /// Sends `item` after the records taken before it.
    async fn send(&mut self, item: ToDecoder) -> anyhow::Result<()> {
        self.flush().await?;
        self.tx
            .send(item)
            .await
            .map_err(|_| Stopped("decoding side").into())
    }
}

/// Runs until SIGINT/SIGTERM or an error that retrying cannot fix.
pub(crate) async fn run<R: SchemaResolver + 'static>(
    config: &KafkaConfig,
    (consumer, revoked): (kafka::GroupConsumer, kafka::Revoked),
    resolver: R,
    format: Format,
    (sinks, telemetry): (Vec<Box<dyn Sink>>, Arc<Telemetry>),
    shutdown_timeout: Duration,
    (dead_letters, columns): (Option<Arc<DeadLetters>>, Option<Arc<Columns>>),
) -> anyhow::Result<()> {
    let consumer = Arc::new(consumer);
    let resumers: Vec<Resumer> = sinks
        .iter()
        .map(|s| Resumer {
            name: s.name(),
            mark: s.commits_mark() && sinks.len() > 1,
            resume: s.resume(),
        })
        .collect();
    let with_headers = sinks.iter().any(|s| s.wants_headers());
    let (tx, rx) = mpsc::channel(CHANNEL_ITEMS);
    let (control_tx, mut control_rx) = mpsc::unbounded_channel();
    let mut paused = std::collections::HashSet::new();
    let offsets = Box::new(calls::Committer(consumer.clone()));
    let mut sink_task = tokio::spawn(sinks::run(
        sinks,
        rx,
        (control_tx, offsets),
        telemetry.clone(),
    ));
    let decoding = Decoding {
        decoder: ChangeDecoder::new(resolver, format, BATCH_ROWS)
            .with_routes(kafka::routes(&config.non_data))
            .with_source_connector(config.source_connector.clone()),
        pending: Pending::new(with_headers.then(HeaderLog::default), columns),
        telemetry: telemetry.clone(),
        dead_letters,
    };
    let (decoder_tx, decoder_rx) = mpsc::channel(DECODER_ITEMS);
    let (spare_tx, spare_rx) = mpsc::unbounded_channel();
    let mut decoding_task = tokio::spawn(decoding::run(decoding, decoder_rx, spare_tx, tx));
    let mut feed = Feed {
        started: HashMap::default(),
        last: None,
        chunk: Chunk::default(),
        spare: spare_rx,
        tx: decoder_tx,
    };
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut streak = 0;
    // Kafka's errors: the waits after them, whether the ones queued meanwhile are being
    // drained (no wait each), whether any came since the last record.
    let mut waits = None;
    let mut draining = false;
    let mut erring = false;
    let mut told_no_topic = false;
    let outcome: anyhow::Result<Option<Ended>> = async {
        loop {
            let parts = revoked.take();
            if !parts.is_empty() {
                for part in &parts {
                    feed.forget(part);
                }
                calls::resume_revoked(&consumer, &mut paused, &parts);
                feed.send(ToDecoder::Revoked(parts)).await?;
            }
            while let Ok(c) = control_rx.try_recv() {
                control(c, &consumer, &mut paused, &mut feed).await?;
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
            if ready.is_none() {
                draining = false;
            }
            let next = if let Some(next) = ready {
                next
            } else {
                tokio::select! {
                biased;
                _ = stop_signal(&mut int, &mut term) => {
                    shutdown_deadline(shutdown_timeout);
                    break;
                }
                // The later stages stop on their own only on an error.
                done = &mut decoding_task => return Ok(Some(Ended::Decoding(flatten(done, "decoding")))),
                done = &mut sink_task => return Ok(Some(Ended::Sinks(flatten(done, "sink")))),
                Some(c) = control_rx.recv() => {
                    control(c, &consumer, &mut paused, &mut feed).await?;
                    continue;
                }
                next = consumer.recv() => next,
                // No record is ready: the chunk goes now, not once the next record comes.
                _ = std::future::ready(()), if !feed.chunk.is_empty() => {
                    feed.flush().await?;
                    continue;
                }
                }
            };
            match next {
                Err(e) if kafka::is_transient(&e) => {
                    erring = true;
                    match kafka::transport(&e) {
                        Some(all) => telemetry.brokers.unreachable(&e.to_string(), all),
                        None if !told_no_topic => {
                            told_no_topic = true;
                            warn!(subscription = %subscription(config), error = %e,
                                "no subscribed topic is in the cluster yet (Debezium creates a \
                                 table's topic with its first event); waiting for one");
                        }
                        None => debug!(error = %e, "consumer: waiting"),
                    }
                    if !draining {
                        feed.flush().await?;
                        telemetry.metrics.retry(Component::Kafka.as_str());
                        let wait = waits
                            .get_or_insert_with(|| KAFKA_WAIT.delays())
                            .next()
                            .unwrap_or(KAFKA_WAIT.max);
                        tokio::select! {
                            biased;
                            _ = stop_signal(&mut int, &mut term) => {
                                shutdown_deadline(shutdown_timeout);
                                break;
                            }
                            done = &mut decoding_task => return Ok(Some(Ended::Decoding(flatten(done, "decoding")))),
                            done = &mut sink_task => return Ok(Some(Ended::Sinks(flatten(done, "sink")))),
                            _ = tokio::time::sleep(wait) => {}
                        }
                        // What was reported meanwhile is read at once.
                        draining = true;
                    }
                }
                Err(e) => return Err(kafka::failure(e)).context("consuming"),
                Ok(msg) => {
                    if erring {
                        erring = false;
                        waits = None;
                        telemetry.brokers.reachable();
                    }
                    let topic = msg.topic();
                    if !feed.take(&msg, topic) {
                        let part = TopicPartition::new(feed.start(topic, msg.partition()), msg.partition());
                        let seek = start(&consumer, &resumers, &part, msg.offset(), &mut feed).await?;
                        if let Some(to) = seek {
                            calls::seek(&consumer, &part, to)
                                .map_err(kafka::failure)
                                .with_context(|| format!("seeking {part} to {to}"))?;
                            continue;
                        }
                        feed.take(&msg, topic);
                    }
                    if feed.chunk.is_full() {
                        feed.flush().await?;
                    }
                }
            }
        }
        feed.send(ToDecoder::Stop).await?;
        Ok(None)
    }
    .await;
    // The decoding side ends once the feed is gone: after Stop, or at once without it.
    drop(feed);
    // The later stages finish what they hold (or say why they failed) before anything is
    // committed.
    let (consumed, decoded, sunk) = match outcome {
        Ok(None) => (
            Ok(()),
            flatten(decoding_task.await, "decoding"),
            flatten(sink_task.await, "sink"),
        ),
        Ok(Some(Ended::Decoding(d))) => (
            Err(Stopped("decoding side").into()),
            d,
            flatten(sink_task.await, "sink"),
        ),
        Ok(Some(Ended::Sinks(s))) => (Err(Stopped("sinks").into()), stop(decoding_task).await, s),
        Err(e) => (
            Err(e),
            stop(decoding_task).await,
            flatten(sink_task.await, "sink"),
        ),
    };
    settle([
        ("consumer", consumed),
        ("decoding side", decoded),
        ("sinks", sunk),
    ])?;
    calls::commit_final(&consumer)
        .map_err(kafka::failure)
        .context("committing offsets on shutdown")
}

/// Stops the decoding side when nothing it still holds can be committed (the consumer failed,
/// or the sinks ended): it would decode the chunks queued for it, retrying the registry and
/// sending bad records to the dead-letter topic, for records that are read again anyway.
async fn stop(task: tokio::task::JoinHandle<anyhow::Result<()>>) -> anyhow::Result<()> {
    task.abort();
    match task.await {
        Err(e) if e.is_cancelled() => Ok(()),
        done => flatten(done, "decoding"),
    }
}

/// The pipeline's outcome from its stages', in pipeline order. A stage that could not hand
/// over because a later one ended ([`Stopped`]) has nothing of its own to say. Of the others,
/// the latest stage's error is reported, with the earlier ones' as context; if none has one
/// but a stage was stopped, the later stage ended on its own, which is an error too.
fn settle(stages: [(&str, anyhow::Result<()>); 3]) -> anyhow::Result<()> {
    let mut failed: Option<(&str, anyhow::Error)> = None;
    let mut stopped = None;
    for (name, outcome) in stages {
        let Err(e) = outcome else { continue };
        if e.downcast_ref::<Stopped>().is_some() {
            stopped.get_or_insert(e);
            continue;
        }
        let e = match failed {
            None => e,
            Some((before, earlier)) => e.context(format!("after the {before} failed: {earlier:#}")),
        };
        failed = Some((name, e));
    }
    match (failed, stopped) {
        (Some((_, e)), _) | (None, Some(e)) => Err(e),
        (None, None) => Ok(()),
    }
}

/// SIGINT or SIGTERM.
async fn stop_signal(int: &mut Signal, term: &mut Signal) {
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

fn subscription(config: &KafkaConfig) -> String {
    match &config.topics_regex {
        Some(regex) => regex.clone(),
        None => config.topics.join(","),
    }
}

fn flatten(
    done: Result<anyhow::Result<()>, tokio::task::JoinError>,
    task: &str,
) -> anyhow::Result<()> {
    done.map_err(|e| Failure::with_fault(None, Fault::Bug, e))
        .with_context(|| format!("the {task} task failed"))?
}

/// On a partition's first record (`first`, the group's committed offset): where each sink
/// stands, from its own durable store ([`Resume`]), and where to read from when one holds
/// less than Kafka's offset says ([`offsets::resume`]). Each sink skips what it holds.
async fn start(
    consumer: &Arc<kafka::GroupConsumer>,
    resumers: &[Resumer],
    part: &TopicPartition,
    first: i64,
    feed: &mut Feed,
) -> anyhow::Result<Option<i64>> {
    // The lookups below can take a while (a Kafka round trip, the sinks' stores): records of
    // other partitions do not wait for them in the chunk.
    feed.flush().await?;
    let metadata = match resumers.iter().any(|r| r.mark) {
        true => calls::committed_metadata(consumer, part).await,
        false => None,
    };
    let mut held = Vec::with_capacity(resumers.len());
    for r in resumers {
        let mark = metadata
            .as_deref()
            .filter(|_| r.mark)
            .and_then(|m| offsets::parse_mark(r.name, m));
        held.push(r.resume.held(part, first, mark).await?);
    }
    let decided = offsets::resume(first, &held);
    feed.send(ToDecoder::Started {
        part: part.clone(),
        floors: decided.floors,
    })
    .await?;
    Ok(decided.seek)
}

/// What the sink side asked for.
async fn control(
    c: Control,
    consumer: &kafka::GroupConsumer,
    paused: &mut std::collections::HashSet<TopicPartition>,
    feed: &mut Feed,
) -> anyhow::Result<()> {
    match c {
        Control::Pause { parts, by } => calls::set_paused(consumer, paused, parts, &by),
        Control::ReadAgain(due) => rewind(consumer, feed, due).await?,
    }
    Ok(())
}

/// Reads partitions again from the offsets the sinks asked for. What was consumed before
/// reaches the sinks first: the decoding side hands it over before it passes on
/// [`ToDecoder::Rewound`], which separates the two readings. A seek only ever goes back: when
/// the consumer is not past the offset asked for (two requests, one answered already), it
/// goes on from where it is, and the sinks are told that point.
async fn rewind(
    consumer: &kafka::GroupConsumer,
    feed: &mut Feed,
    due: Vec<(TopicPartition, i64)>,
) -> anyhow::Result<()> {
    feed.flush().await?;
    // One seek per partition, to the earliest offset asked for.
    let mut earliest: HashMap<TopicPartition, i64> = HashMap::default();
    for (part, from) in due {
        let e = earliest.entry(part).or_insert(from);
        *e = (*e).min(from);
    }
    let positions = calls::positions(consumer);
    for (part, from) in earliest {
        // Revoked meanwhile: the sinks forgot it, and its new reading starts on its own.
        if !feed.is_started(&part.topic, part.partition) {
            continue;
        }
        let at = positions
            .as_ref()
            .and_then(|l| l.find_partition(&part.topic, part.partition))
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        if let Some(at) = at.filter(|&at| at <= from) {
            feed.send(ToDecoder::Rewound {
                part,
                at,
                sought: false,
            })
            .await?;
            continue;
        }
        calls::seek(consumer, &part, from)
            .map_err(kafka::failure)
            .with_context(|| format!("seeking {part} back to {from}"))?;
        feed.send(ToDecoder::Rewound {
            part,
            at: from,
            sought: true,
        })
        .await?;
    }
    Ok(())
}

async fn send(tx: &mpsc::Sender<ToSinks>, item: ToSinks) -> anyhow::Result<()> {
    // A closed channel means the sink task ended; its own outcome is reported (settle).
    tx.send(item).await.map_err(|_| Stopped("sinks").into())
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
            _ = stop_signal(&mut int, &mut term) => {}
        }
        warn!("second signal: exiting without flushing");
        std::process::exit(130);
    });
}
