//! The main job: one consumer group, each record decoded once, batches written to the raw
//! layer. Offsets are stored per partition at the watermark: the first offset not yet durable
//! in the sink (held by the decoder, or in a file not yet uploaded). Kafka's auto-commit
//! commits what was stored; shutdown closes open files, waits for uploads and commits.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};
use lakesink_writers::parquet::{ParquetWriter, Receipt};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::kafka::{self, GroupConsumer};

/// Hand decoded rows to the sink after this many records, or this long without a record.
const FLUSH_RECORDS: usize = 16 * 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(200);
/// Rows per decoded batch.
const BATCH_ROWS: usize = 4096;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

type Part = (String, i32);

/// Per-partition progress of this process.
#[derive(Default)]
struct Progress {
    /// The offset after the last record consumed.
    consumed: HashMap<Part, i64>,
    /// The first record pushed into the decoder since it was last emptied.
    held: HashMap<Part, i64>,
    /// What was last stored for Kafka to commit.
    stored: HashMap<Part, i64>,
}

impl Progress {
    fn forget(&mut self, part: &Part) {
        self.consumed.remove(part);
        self.held.remove(part);
        self.stored.remove(part);
    }

    /// Stores each partition's watermark where it moved.
    fn store(&mut self, consumer: &GroupConsumer, raw: &ParquetWriter) {
        let mut list = TopicPartitionList::new();
        for (part, &next) in &self.consumed {
            let mut mark = next;
            if let Some(&h) = self.held.get(part) {
                mark = mark.min(h);
            }
            if let Some(p) = raw.pending_start(&part.0, part.1) {
                mark = mark.min(p);
            }
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
    mut raw: ParquetWriter,
) -> anyhow::Result<()> {
    let (consumer, revoked) = kafka::subscribe(config)?;
    let mut decoder = ChangeDecoder::new(resolver, format, BATCH_ROWS);
    let mut progress = Progress::default();
    let mut since_flush = 0;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    loop {
        for part in revoked.take() {
            decoder.finish_partition(&part.0, part.1)?;
            raw.revoke(&part.0, part.1);
            progress.forget(&part);
        }
        if raw.over_budget() && raw.uploading() {
            // Backpressure: nothing more is read until uploads free memory.
            if let Some(r) = raw.next_receipt().await {
                uploaded(r?, &progress);
                progress.store(&consumer, &raw);
            }
            continue;
        }
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            Some(r) = raw.next_receipt(), if raw.uploading() => {
                uploaded(r?, &progress);
                progress.store(&consumer, &raw);
            }
            next = tokio::time::timeout(FLUSH_IDLE, consumer.recv()) => match next {
                Err(_idle) => {
                    flush(&mut decoder, &mut raw, &mut progress).await?;
                    raw.poll(now_ms()).await?;
                    progress.store(&consumer, &raw);
                    since_flush = 0;
                }
                Ok(Err(e)) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
                Ok(Err(e)) => return Err(e).context("consuming"),
                Ok(Ok(msg)) => {
                    let part = (msg.topic().to_owned(), msg.partition());
                    for batch in decode(&mut decoder, &msg).await? {
                        raw.write(&batch, now_ms()).await?;
                    }
                    progress.held.entry(part.clone()).or_insert(msg.offset());
                    progress.consumed.insert(part, msg.offset() + 1);
                    since_flush += 1;
                    if since_flush >= FLUSH_RECORDS {
                        flush(&mut decoder, &mut raw, &mut progress).await?;
                        raw.poll(now_ms()).await?;
                        progress.store(&consumer, &raw);
                        since_flush = 0;
                    }
                }
            }
        }
    }
    info!("stopping: closing open files");
    flush(&mut decoder, &mut raw, &mut progress).await?;
    raw.close_all(now_ms()).await?;
    while let Some(r) = raw.next_receipt().await {
        uploaded(r?, &progress);
    }
    progress.store(&consumer, &raw);
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => info!("offsets committed, stopped"),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => info!("stopped"),
        Err(e) => return Err(e).context("committing offsets on shutdown"),
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

/// Hands every decoded row to the sink; the decoder holds nothing afterwards.
async fn flush<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    raw: &mut ParquetWriter,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    let now = now_ms();
    for batch in decoder.finish_all()? {
        raw.write(&batch, now).await?;
    }
    progress.held.clear();
    Ok(())
}
