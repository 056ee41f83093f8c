//! The decoding side of the pipeline, on its own task so that decoding runs beside consuming:
//! the consuming side copies records into [`Chunk`]s and sends them here, in consumption order
//! with everything else the sinks must see in that order (a partition's start, a revocation, a
//! reading again). This side decodes, and it alone sends to the sinks.

use std::sync::Arc;
use std::time::Instant;

use lakesink_model::Failure;
use lakesink_schema_registry::{ChangeDecoder, SchemaResolver};
use lakesink_writers::sink::TopicPartition;
use tokio::sync::mpsc;

use super::chunk::Chunk;
use super::pending::{FLUSH_BUSY, FLUSH_IDLE, FLUSH_RECORDS, Pending, decode, hand_over};
use super::send;
use crate::dead_letter::DeadLetters;
use crate::kafka::{self, Incoming};
use crate::sinks::ToSinks;
use crate::telemetry::Telemetry;

/// What the consuming side sends, in consumption order.
pub(super) enum ToDecoder {
    Records(Chunk),
    /// Passed on to the sinks as is, after the records sent before it.
    Started {
        part: TopicPartition,
        floors: Vec<Option<i64>>,
    },
    /// Partitions taken away: their open batches and pending rows are dropped.
    Revoked(Vec<TopicPartition>),
    /// The consumer goes on from this offset; `sought` when it was moved there (anything
    /// kept of the partition's earlier reading is then dropped).
    Rewound {
        part: TopicPartition,
        at: i64,
        sought: bool,
    },
    /// Hand everything over, then tell the sinks to stop.
    Stop,
}

/// The decoding side's own parts.
pub(super) struct Decoding<R> {
    pub(super) decoder: ChangeDecoder<R>,
    pub(super) pending: Pending,
    pub(super) telemetry: Arc<Telemetry>,
    pub(super) dead_letters: Option<Arc<DeadLetters>>,
}

/// Runs until [`ToDecoder::Stop`] (Ok, the sinks told to stop), the consuming side going away
/// (Ok, the sinks are not told: they close, and nothing more is committed), or an error.
/// Emptied chunks go back on `spare` for the consuming side to fill again.
pub(super) async fn run<R: SchemaResolver>(
    mut d: Decoding<R>,
    mut items: mpsc::Receiver<ToDecoder>,
    spare: mpsc::UnboundedSender<Chunk>,
    tx: mpsc::Sender<ToSinks>,
) -> anyhow::Result<()> {
    let mut idle = tokio::time::interval(FLUSH_IDLE);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut handed = Instant::now();
    loop {
        let item = tokio::select! {
            biased;
            _ = idle.tick() => {
                if items.is_empty() || handed.elapsed() >= FLUSH_BUSY {
                    hand_over(&mut d.decoder, &mut d.pending, &tx, &d.telemetry).await?;
                    handed = Instant::now();
                }
                continue;
            }
            item = items.recv() => item,
        };
        match item {
            None => return Ok(()),
            Some(ToDecoder::Records(mut chunk)) => {
                d.records(&chunk, &tx).await?;
                chunk.clear();
                // The consuming side may have stopped meanwhile; the chunk is then dropped.
                let _ = spare.send(chunk);
            }
            Some(ToDecoder::Started { part, floors }) => {
                send(&tx, ToSinks::Started { part, floors }).await?;
            }
            Some(ToDecoder::Revoked(parts)) => {
                for part in &parts {
                    d.decoder
                        .finish_partition(&part.topic, part.partition)
                        .map_err(Failure::new)?;
                    d.pending.forget(part);
                }
                send(&tx, ToSinks::Revoked(parts)).await?;
            }
            Some(ToDecoder::Rewound { part, at, sought }) => {
                // What was read before goes to the sinks first: Rewound separates the two
                // readings.
                hand_over(&mut d.decoder, &mut d.pending, &tx, &d.telemetry).await?;
                if sought && let Some(h) = &mut d.pending.headers {
                    h.forget(&part.topic, part.partition);
                }
                send(&tx, ToSinks::Rewound(part, at)).await?;
            }
            Some(ToDecoder::Stop) => {
                hand_over(&mut d.decoder, &mut d.pending, &tx, &d.telemetry).await?;
                send(&tx, ToSinks::Stop).await?;
                return Ok(());
            }
        }
    }
}

impl<R: SchemaResolver> Decoding<R> {
    async fn records(&mut self, chunk: &Chunk, tx: &mpsc::Sender<ToSinks>) -> anyhow::Result<()> {
        for record in chunk.iter() {
            let topic = record.topic_name();
            if let Some(h) = &mut self.pending.headers {
                h.record(&record);
            }
            // Nearly every record: no future, whose state is moved on each call.
            let batches =
                match kafka::try_push(&mut self.decoder, &record, topic, Some(&self.telemetry)) {
                    Some(batches) => batches,
                    None => {
                        decode(
                            &mut self.decoder,
                            &record,
                            &self.telemetry,
                            self.dead_letters.as_deref(),
                        )
                        .await?
                    }
                };
            self.pending.batches.extend(batches);
            self.pending
                .consumed(topic, record.partition(), record.offset() + 1);
            if self.pending.records >= FLUSH_RECORDS {
                hand_over(&mut self.decoder, &mut self.pending, tx, &self.telemetry).await?;
            }
        }
        Ok(())
    }
}
