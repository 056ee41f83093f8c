//! The main job: one consumer group, each record decoded once, batches fanned out to the raw
//! layer and the replica. This task consumes and decodes; the sinks run on their own task
//! ([`crate::sinks`]), fed through a bounded channel, so the two use separate cores. Offsets
//! are stored per partition at the watermark: the first offset not yet durable (still in the
//! decoder, in a file not yet uploaded, or in a transaction not yet committed). Kafka's
//! auto-commit commits what was stored; shutdown drains the sinks, then commits.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::kafka;
use crate::replica::ReplicaOffsets;
use crate::sinks::{self, Item, Part, Sinks};

/// Hand decoded rows to the sinks after this many records, or this long without a record.
const FLUSH_RECORDS: usize = 16 * 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(200);
/// Rows per decoded batch.
const BATCH_ROWS: usize = 4096;
/// Items in flight between the two sides (each up to FLUSH_RECORDS records).
const CHANNEL_ITEMS: usize = 2;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the consuming side holds: records decoded but not yet sent.
#[derive(Default)]
struct Pending {
    batches: Vec<ChangeBatch>,
    consumed: HashMap<Part, i64>,
    records: usize,
    /// Partitions whose first record was seen since assignment.
    started: HashSet<Part>,
}

/// Runs until SIGINT/SIGTERM or an error that retrying cannot fix.
pub(crate) async fn run<R: SchemaResolver>(
    config: &KafkaConfig,
    resolver: R,
    format: Format,
    sinks: Sinks,
) -> anyhow::Result<()> {
    let (consumer, revoked) = kafka::subscribe(config)?;
    let consumer = Arc::new(consumer);
    let replica = sinks.replica.as_ref().map(|r| r.offsets());
    let raw_on = sinks.raw.is_some();
    let (tx, rx) = mpsc::channel(CHANNEL_ITEMS);
    let mut sink_task = tokio::spawn(sinks::run(sinks, rx, consumer.clone()));
    let mut decoder = ChangeDecoder::new(resolver, format, BATCH_ROWS);
    let mut pending = Pending::default();
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let outcome: anyhow::Result<Option<anyhow::Result<()>>> = async {
        loop {
            let parts = revoked.take();
            if !parts.is_empty() {
                for part in &parts {
                    decoder.finish_partition(&part.0, part.1)?;
                    pending
                        .batches
                        .retain(|b| !(*b.topic == *part.0 && b.partition == part.1));
                    pending.consumed.remove(part);
                    pending.started.remove(part);
                }
                send(&tx, Item::Revoked(parts)).await?;
            }
            let next = tokio::select! {
                biased;
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                // The sinks stop on their own only on an error.
                done = &mut sink_task => return Ok(Some(flatten(done))),
                next = tokio::time::timeout(FLUSH_IDLE, consumer.recv()) => next,
            };
            match next {
                Err(_idle) => hand_over(&mut decoder, &mut pending, &tx).await?,
                Ok(Err(e)) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
                Ok(Err(e)) => return Err(e).context("consuming"),
                Ok(Ok(msg)) => {
                    let part = (msg.topic().to_owned(), msg.partition());
                    if !pending.started.contains(&part) {
                        pending.started.insert(part.clone());
                        let item = start(replica.as_ref(), raw_on, &part, msg.offset()).await?;
                        let seek = seek_target(&item, msg.offset());
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
                    pending.batches.extend(decode(&mut decoder, &msg).await?);
                    pending.consumed.insert(part, msg.offset() + 1);
                    pending.records += 1;
                    if pending.records >= FLUSH_RECORDS {
                        hand_over(&mut decoder, &mut pending, &tx).await?;
                    }
                }
            }
        }
        hand_over(&mut decoder, &mut pending, &tx).await?;
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

/// On a partition's first record: where each sink stands. When the replica is behind the
/// record, the partition is read again from the replica's offset and the raw layer skips what
/// it already holds; when it is ahead, the replica skips what it applied.
async fn start(
    replica: Option<&ReplicaOffsets>,
    raw_on: bool,
    part: &Part,
    first: i64,
) -> anyhow::Result<Item> {
    let replica_floor = match replica {
        Some(r) => r.next_offset(&part.0, part.1).await?,
        None => None,
    };
    let behind = replica_floor.is_some_and(|next| next < first);
    if behind {
        info!(topic = %part.0, partition = part.1, from = ?replica_floor, to = first,
            "the replica is behind: reading again from its offset");
    }
    Ok(Item::Started {
        part: part.clone(),
        raw_floor: (behind && raw_on).then_some(first),
        replica_floor,
    })
}

/// Where to seek after [`start`]: the replica's offset when it is behind `first`.
fn seek_target(item: &Item, first: i64) -> Option<i64> {
    match item {
        Item::Started {
            replica_floor: Some(next),
            ..
        } if *next < first => Some(*next),
        _ => None,
    }
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
) -> anyhow::Result<()> {
    pending.batches.extend(decoder.finish_all()?);
    pending.records = 0;
    if pending.consumed.is_empty() && pending.batches.is_empty() {
        return Ok(());
    }
    let item = Item::Batches {
        batches: std::mem::take(&mut pending.batches),
        consumed: pending.consumed.drain().collect(),
    };
    send(tx, item).await
}

/// Decodes a message, retrying while the registry is unreachable.
async fn decode<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    msg: &BorrowedMessage<'_>,
) -> anyhow::Result<Vec<ChangeBatch>> {
    let mut backoff = Duration::from_millis(200);
    loop {
        match kafka::push(decoder, msg).await {
            Ok(batches) => return Ok(batches),
            Err(e) if e.is_retryable() => {
                warn!(error = %e, retry_in = ?backoff, "registry unavailable");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e.into()),
        }
    }
}
