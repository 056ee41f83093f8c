//! The main job: one consumer group, each record decoded once, batches fanned out to the raw
//! layer and the replica. Offsets are stored per partition at the watermark: the first offset
//! not yet durable (held by the decoder, in a file not yet uploaded, or in a transaction not
//! yet committed). Kafka's auto-commit commits what was stored; shutdown closes open files,
//! waits for uploads and the last transaction, and commits.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};
use lakesink_writers::parquet::{ParquetWriter, RawError, Receipt};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::kafka::{self, GroupConsumer};
use crate::replica::ReplicaSink;

/// Hand decoded rows to the sink after this many records, or this long without a record.
const FLUSH_RECORDS: usize = 16 * 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(200);
/// Rows per decoded batch.
const BATCH_ROWS: usize = 4096;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

type Part = (String, i32);

/// The sinks a run feeds; at least one is set.
pub(crate) struct Sinks {
    pub(crate) raw: Option<ParquetWriter>,
    pub(crate) replica: Option<ReplicaSink>,
}

/// Per-partition progress of this process.
#[derive(Default)]
struct Progress {
    /// The offset after the last record consumed.
    consumed: HashMap<Part, i64>,
    /// The first record pushed into the decoder since it was last emptied.
    held: HashMap<Part, i64>,
    /// What was last stored for Kafka to commit.
    stored: HashMap<Part, i64>,
    /// Partitions whose first record was seen (and the replica's offset looked up).
    started: HashSet<Part>,
    /// Records below this are in the raw layer already: the partition was rewound for the
    /// replica, which was behind.
    raw_floor: HashMap<Part, i64>,
}

impl Progress {
    fn forget(&mut self, part: &Part) {
        self.consumed.remove(part);
        self.held.remove(part);
        self.stored.remove(part);
        self.started.remove(part);
        self.raw_floor.remove(part);
    }

    /// Stores each partition's watermark where it moved. With the raw layer on, Kafka's
    /// offset is the raw layer's (its resume point); the replica resumes from its own table.
    fn store(&mut self, consumer: &GroupConsumer, sinks: &Sinks) {
        let mut list = TopicPartitionList::new();
        for (part, &next) in &self.consumed {
            let base = self.held.get(part).map_or(next, |&h| next.min(h));
            let mark = match (&sinks.raw, &sinks.replica) {
                (Some(raw), _) => {
                    let m = raw
                        .pending_start(&part.0, part.1)
                        .map_or(base, |p| base.min(p));
                    self.raw_floor.get(part).map_or(m, |&f| m.max(f))
                }
                (None, Some(rep)) => rep.pending_start(part).map_or(base, |p| base.min(p)),
                (None, None) => base,
            };
            if self.stored.get(part) != Some(&mark)
                && list
                    .add_partition_offset(&part.0, part.1, Offset::Offset(mark))
                    .is_ok()
            {
                self.stored.insert(part.clone(), mark);
            }
        }
        if list.count() > 0
            && let Err(e) = consumer.store_offsets(&list)
        {
            // A partition revoked a moment ago; its new owner starts from what was committed.
            warn!(error = %e, "storing offsets");
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Runs until SIGINT/SIGTERM or an error that retrying cannot fix.
pub(crate) async fn run<R: SchemaResolver>(
    config: &KafkaConfig,
    resolver: R,
    format: Format,
    mut sinks: Sinks,
) -> anyhow::Result<()> {
    let (consumer, revoked) = kafka::subscribe(config)?;
    let mut decoder = ChangeDecoder::new(resolver, format, BATCH_ROWS);
    let mut progress = Progress::default();
    let mut since_flush = 0;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    loop {
        for part in revoked.take() {
            decoder.finish_partition(&part.0, part.1)?;
            if let Some(raw) = &mut sinks.raw {
                raw.revoke(&part.0, part.1);
            }
            if let Some(rep) = &mut sinks.replica {
                rep.revoke(&part);
            }
            progress.forget(&part);
        }
        let raw_uploading = sinks.raw.as_ref().is_some_and(ParquetWriter::uploading);
        let applying = sinks.replica.as_ref().is_some_and(ReplicaSink::applying);
        let raw_full = sinks.raw.as_ref().is_some_and(ParquetWriter::over_budget) && raw_uploading;
        let replica_full = sinks.replica.as_ref().is_some_and(ReplicaSink::full) && applying;
        if raw_full || replica_full {
            // Backpressure: nothing more is read until a sink frees memory.
            tokio::select! {
                Some(r) = next_receipt(&mut sinks.raw), if raw_uploading => {
                    uploaded(r?, &progress);
                }
                done = finish_apply(&mut sinks.replica), if applying => {
                    done?;
                    if let Some(rep) = &mut sinks.replica {
                        rep.start();
                    }
                }
            }
            progress.store(&consumer, &sinks);
            continue;
        }
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            Some(r) = next_receipt(&mut sinks.raw), if raw_uploading => {
                uploaded(r?, &progress);
                progress.store(&consumer, &sinks);
            }
            done = finish_apply(&mut sinks.replica), if applying => {
                done?;
                if let Some(rep) = &mut sinks.replica {
                    rep.start();
                }
                progress.store(&consumer, &sinks);
            }
            next = tokio::time::timeout(FLUSH_IDLE, consumer.recv()) => match next {
                Err(_idle) => {
                    flush(&mut decoder, &mut sinks, &mut progress).await?;
                    if let Some(raw) = &mut sinks.raw {
                        raw.poll(now_ms()).await?;
                    }
                    progress.store(&consumer, &sinks);
                    since_flush = 0;
                }
                Ok(Err(e)) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
                Ok(Err(e)) => return Err(e).context("consuming"),
                Ok(Ok(msg)) => {
                    let part = (msg.topic().to_owned(), msg.partition());
                    if !progress.started.contains(&part) {
                        progress.started.insert(part.clone());
                        if rewind(&consumer, &mut sinks, &mut progress, &part, msg.offset()).await? {
                            continue;
                        }
                    }
                    for batch in decode(&mut decoder, &msg).await? {
                        write(&mut sinks, &progress, &batch).await?;
                    }
                    progress.held.entry(part.clone()).or_insert(msg.offset());
                    progress.consumed.insert(part, msg.offset() + 1);
                    since_flush += 1;
                    if since_flush >= FLUSH_RECORDS
                        || sinks.replica.as_ref().is_some_and(ReplicaSink::full)
                    {
                        flush(&mut decoder, &mut sinks, &mut progress).await?;
                        if let Some(raw) = &mut sinks.raw {
                            raw.poll(now_ms()).await?;
                        }
                        progress.store(&consumer, &sinks);
                        since_flush = 0;
                    }
                }
            }
        }
    }
    info!("stopping: flushing the sinks");
    flush(&mut decoder, &mut sinks, &mut progress).await?;
    if let Some(raw) = &mut sinks.raw {
        raw.close_all(now_ms()).await?;
        while let Some(r) = raw.next_receipt().await {
            uploaded(r?, &progress);
        }
    }
    if let Some(rep) = &mut sinks.replica {
        rep.finish().await?;
        rep.start();
        rep.finish().await?;
    }
    progress.store(&consumer, &sinks);
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => info!("offsets committed, stopped"),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => info!("stopped"),
        Err(e) => return Err(e).context("committing offsets on shutdown"),
    }
    Ok(())
}

/// On a partition's first record: when the replica is behind it, seek back to the replica's
/// offset (the raw layer skips what it already holds). True when the record was dropped.
async fn rewind(
    consumer: &GroupConsumer,
    sinks: &mut Sinks,
    progress: &mut Progress,
    part: &Part,
    first: i64,
) -> anyhow::Result<bool> {
    let Some(rep) = &mut sinks.replica else {
        return Ok(false);
    };
    match rep.next_offset(&part.0, part.1).await? {
        Some(next) if next < first => {
            info!(topic = %part.0, partition = part.1, from = next, to = first,
                "the replica is behind: reading again from its offset");
            if sinks.raw.is_some() {
                progress.raw_floor.insert(part.clone(), first);
            }
            consumer
                .seek(
                    &part.0,
                    part.1,
                    Offset::Offset(next),
                    Duration::from_secs(10),
                )
                .with_context(|| format!("seeking {}[{}] to {next}", part.0, part.1))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

async fn write(sinks: &mut Sinks, progress: &Progress, batch: &ChangeBatch) -> anyhow::Result<()> {
    if let Some(raw) = &mut sinks.raw {
        let floor = progress
            .raw_floor
            .get(&(batch.topic.to_string(), batch.partition));
        match floor {
            Some(&f) if batch.first_offset < f => {
                if let Some(rest) = crate::replica::skip_below(batch, f) {
                    raw.write(&rest, now_ms()).await?;
                }
            }
            _ => raw.write(batch, now_ms()).await?,
        }
    }
    if let Some(rep) = &mut sinks.replica {
        rep.push(batch);
    }
    Ok(())
}

async fn next_receipt(raw: &mut Option<ParquetWriter>) -> Option<Result<Receipt, RawError>> {
    match raw {
        Some(raw) => raw.next_receipt().await,
        None => None,
    }
}

async fn finish_apply(replica: &mut Option<ReplicaSink>) -> anyhow::Result<()> {
    if let Some(rep) = replica {
        rep.finish().await?;
    }
    Ok(())
}

fn uploaded(r: Receipt, progress: &Progress) {
    let part = (r.topic.to_string(), r.partition);
    if !progress.consumed.contains_key(&part) {
        // Revoked meanwhile: the new owner rewrites the same keys; nothing to store here.
        info!(topic = %r.topic, partition = r.partition, "upload of a revoked partition finished");
    }
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

/// Hands every decoded row to the sinks; the decoder holds nothing afterwards.
async fn flush<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    sinks: &mut Sinks,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    for batch in decoder.finish_all()? {
        write(sinks, progress, &batch).await?;
    }
    progress.held.clear();
    if let Some(rep) = &mut sinks.replica {
        rep.start();
    }
    Ok(())
}
