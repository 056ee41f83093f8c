//! The main job: one consumer group, each record decoded once, batches fanned out to the raw
//! layer and the replica. This task consumes and decodes; the sinks run on their own task
//! ([`crate::sinks`]), fed through a bounded channel, so the two use separate cores. Offsets
//! are stored per partition at the watermark: the first offset not yet durable (still in the
//! decoder, in a file not yet uploaded, or in a transaction not yet committed). Kafka's
//! auto-commit commits what was stored; shutdown drains the sinks, then commits.

// Per-record lookups: foldhash, not SipHash (keys are our own topic names and partitions).
use foldhash::HashMap;
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
use pending::{BATCH_ROWS, FLUSH_IDLE, FLUSH_RECORDS, Pending, decode, hand_over};

mod pending;

/// Items in flight between the two sides (each up to FLUSH_RECORDS records).
const CHANNEL_ITEMS: usize = 2;
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

/// Runs until SIGINT/SIGTERM or an error that retrying cannot fix.
pub(crate) async fn run<R: SchemaResolver>(
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
    let mut decoder = ChangeDecoder::new(resolver, format, BATCH_ROWS)
        .with_routes(kafka::routes(&config.non_data))
        .with_source_connector(config.source_connector.clone());
    let mut pending = Pending {
        headers: with_headers.then(HeaderLog::default),
        columns,
        ..Pending::default()
    };
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut idle = tokio::time::interval(FLUSH_IDLE);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut streak = 0;
    // Kafka's errors: the waits after them, whether the ones queued meanwhile are being
    // drained (no wait each), whether any came since the last record.
    let mut waits = None;
    let mut draining = false;
    let mut erring = false;
    let mut told_no_topic = false;
    let outcome: anyhow::Result<Option<anyhow::Result<()>>> = async {
        loop {
            let parts = revoked.take();
            if !parts.is_empty() {
                for part in &parts {
                    decoder
                        .finish_partition(&part.topic, part.partition)
                        .map_err(Failure::new)?;
                    pending.forget(part);
                }
                calls::resume_revoked(&consumer, &mut paused, &parts);
                send(&tx, ToSinks::Revoked(parts)).await?;
            }
            while let Ok(c) = control_rx.try_recv() {
                control(
                    c,
                    &consumer,
                    &mut paused,
                    &mut decoder,
                    &mut pending,
                    &tx,
                    &telemetry,
                )
                .await?;
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
                // The sinks stop on their own only on an error.
                done = &mut sink_task => return Ok(Some(flatten(done))),
                // Whatever was decoded goes to the sinks at least this often.
                _ = idle.tick() => {
                    hand_over(&mut decoder, &mut pending, &tx, &telemetry).await?;
                    continue;
                }
                Some(c) = control_rx.recv() => {
                    control(c, &consumer, &mut paused, &mut decoder, &mut pending, &tx, &telemetry)
                        .await?;
                    continue;
                }
                next = consumer.recv() => next,
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
                        hand_over(&mut decoder, &mut pending, &tx, &telemetry).await?;
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
                            done = &mut sink_task => return Ok(Some(flatten(done))),
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
                    if !pending.is_started(msg.topic(), msg.partition()) {
                        let part = TopicPartition::new(msg.topic(), msg.partition());
                        pending
                            .started
                            .entry(msg.topic().to_owned())
                            .or_default()
                            .insert(part.partition);
                        let seek = start(&consumer, &resumers, &part, msg.offset(), &tx).await?;
                        if let Some(to) = seek {
                            calls::seek(&consumer, &part, to)
                                .map_err(kafka::failure)
                                .with_context(|| format!("seeking {part} to {to}"))?;
                            continue;
                        }
                    }
                    if let Some(h) = &mut pending.headers {
                        h.record(&msg);
                    }
                    // Nearly every record: no future, whose state is moved on each call.
                    let batches = match kafka::try_push(&mut decoder, &msg, Some(&telemetry)) {
                        Some(batches) => batches,
                        None => {
                            decode(&mut decoder, &msg, &telemetry, dead_letters.as_deref()).await?
                        }
                    };
                    pending.batches.extend(batches);
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
        send(&tx, ToSinks::Stop).await?;
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
    calls::commit_final(&consumer)
        .map_err(kafka::failure)
        .context("committing offsets on shutdown")
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

fn flatten(done: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    done.map_err(|e| Failure::with_fault(None, Fault::Bug, e))
        .context("the sink task failed")?
}

/// On a partition's first record (`first`, the group's committed offset): where each sink
/// stands, from its own durable store ([`Resume`]), and where to read from when one holds
/// less than Kafka's offset says ([`offsets::resume`]). Each sink skips what it holds.
async fn start(
    consumer: &Arc<kafka::GroupConsumer>,
    resumers: &[Resumer],
    part: &TopicPartition,
    first: i64,
    tx: &mpsc::Sender<ToSinks>,
) -> anyhow::Result<Option<i64>> {
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
    send(
        tx,
        ToSinks::Started {
            part: part.clone(),
            floors: decided.floors,
        },
    )
    .await?;
    Ok(decided.seek)
}

/// What the sink side asked for.
async fn control<R: SchemaResolver>(
    c: Control,
    consumer: &kafka::GroupConsumer,
    paused: &mut std::collections::HashSet<TopicPartition>,
    decoder: &mut ChangeDecoder<R>,
    pending: &mut Pending,
    tx: &mpsc::Sender<ToSinks>,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    match c {
        Control::Pause { parts, by } => calls::set_paused(consumer, paused, parts, &by),
        Control::ReadAgain(due) => rewind(consumer, decoder, pending, tx, telemetry, due).await?,
    }
    Ok(())
}

/// Reads partitions again from the offsets the sinks asked for: what was consumed before goes
/// to the sinks first, so that [`ToSinks::Rewound`] separates the two readings. A seek only ever
/// goes back: when the consumer is not past the offset asked for (two requests, one answered
/// already), it goes on from where it is, and the sinks are told that point.
async fn rewind<R: SchemaResolver>(
    consumer: &kafka::GroupConsumer,
    decoder: &mut ChangeDecoder<R>,
    pending: &mut Pending,
    tx: &mpsc::Sender<ToSinks>,
    telemetry: &Telemetry,
    due: Vec<(TopicPartition, i64)>,
) -> anyhow::Result<()> {
    hand_over(decoder, pending, tx, telemetry).await?;
    // One seek per partition, to the earliest offset asked for.
    let mut earliest: HashMap<TopicPartition, i64> = HashMap::default();
    for (part, from) in due {
        let e = earliest.entry(part).or_insert(from);
        *e = (*e).min(from);
    }
    let positions = calls::positions(consumer);
    for (part, from) in earliest {
        // Revoked meanwhile: the sinks forgot it, and its new reading starts on its own.
        if !pending.is_started(&part.topic, part.partition) {
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
            send(tx, ToSinks::Rewound(part, at)).await?;
            continue;
        }
        if let Some(h) = &mut pending.headers {
            h.forget(&part.topic, part.partition);
        }
        calls::seek(consumer, &part, from)
            .map_err(kafka::failure)
            .with_context(|| format!("seeking {part} back to {from}"))?;
        send(tx, ToSinks::Rewound(part, from)).await?;
    }
    Ok(())
}

async fn send(tx: &mpsc::Sender<ToSinks>, item: ToSinks) -> anyhow::Result<()> {
    // A closed channel means the sink task ended; its own error is reported by the caller.
    tx.send(item)
        .await
        .map_err(|_| anyhow::anyhow!("the sinks stopped"))
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
