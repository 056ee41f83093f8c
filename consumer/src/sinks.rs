//! The sink side of the pipeline, on its own task so that writing Parquet and applying to
//! PostgreSQL run beside consuming and decoding. It receives decoded batches in order, with
//! the offsets they cover, feeds both sinks, and stores for Kafka to commit, per partition,
//! the first offset not yet durable.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use lakesink_schema_registry::ChangeBatch;
use lakesink_writers::parquet::{ParquetWriter, RawError, Receipt};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::kafka::GroupConsumer;
use crate::replica::{ReplicaSink, skip_below};
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::SinkTopicLabels;
use crate::telemetry::status::RAW;

pub(crate) type Part = (String, i32);

/// How often idle partitions and wall-clock rotation are looked at.
const TICK: Duration = Duration::from_millis(200);

/// The sinks a run feeds; at least one is set.
pub(crate) struct Sinks {
    pub(crate) raw: Option<ParquetWriter>,
    pub(crate) replica: Option<ReplicaSink>,
    pub(crate) telemetry: Arc<Telemetry>,
}

/// What the consuming side sends, in consumption order.
pub(crate) enum Item {
    /// Decoded batches, and per partition the offset after the last record they cover
    /// (records that were not rows count as covered).
    Batches {
        batches: Vec<ChangeBatch>,
        consumed: Vec<(Part, i64)>,
    },
    /// A partition's first record: below `raw_floor` the raw layer holds the records already,
    /// below `replica_floor` the replica does.
    Started {
        part: Part,
        raw_floor: Option<i64>,
        replica_floor: Option<i64>,
    },
    Revoked(Vec<Part>),
    /// Shut down: close files, wait for uploads and the last transaction, store offsets.
    Stop,
}

#[derive(Default)]
struct Progress {
    consumed: HashMap<Part, i64>,
    stored: HashMap<Part, i64>,
    raw_floor: HashMap<Part, i64>,
    /// Partitions paused at the consumer because their replica lane is stuck.
    paused: HashSet<Part>,
}

pub(crate) async fn run(
    mut sinks: Sinks,
    mut items: mpsc::Receiver<Item>,
    consumer: Arc<GroupConsumer>,
) -> anyhow::Result<()> {
    let mut progress = Progress::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let raw_uploading = sinks.raw.as_ref().is_some_and(ParquetWriter::uploading);
        let applying = sinks.replica.as_ref().is_some_and(ReplicaSink::applying);
        // Backpressure: a stuck replica lane pauses its own partitions; a sink over its whole
        // bounds stops everything.
        if let Some(rep) = &sinks.replica {
            progress.pause_backlogged(&consumer, rep);
        }
        let accept = !(sinks.raw.as_ref().is_some_and(ParquetWriter::over_budget) && raw_uploading
            || sinks.replica.as_ref().is_some_and(ReplicaSink::full) && applying);
        tokio::select! {
            Some(r) = next_receipt(&mut sinks.raw), if raw_uploading => {
                uploaded(r?, &progress, &sinks.telemetry);
                progress.store(&consumer, &sinks);
            }
            done = finish_apply(&mut sinks.replica), if applying => {
                done?;
                if let Some(rep) = &mut sinks.replica {
                    rep.start();
                }
                progress.store(&consumer, &sinks);
            }
            _ = tick.tick() => {
                if let Some(raw) = &mut sinks.raw {
                    raw.poll(now_ms()).await?;
                }
                progress.store(&consumer, &sinks);
            }
            item = items.recv(), if accept => match item {
                None | Some(Item::Stop) => break,
                Some(Item::Batches { batches, consumed }) => {
                    for batch in &batches {
                        write(&mut sinks, &progress, batch).await?;
                    }
                    progress.consumed.extend(consumed);
                    if let Some(rep) = &mut sinks.replica {
                        rep.start();
                    }
                }
                Some(Item::Started { part, raw_floor, replica_floor }) => {
                    if let (Some(f), Some(_)) = (raw_floor, &sinks.raw) {
                        progress.raw_floor.insert(part.clone(), f);
                    }
                    if let (Some(f), Some(rep)) = (replica_floor, &mut sinks.replica) {
                        rep.set_floor(part, f);
                    }
                }
                Some(Item::Revoked(parts)) => {
                    for part in parts {
                        if let Some(raw) = &mut sinks.raw {
                            raw.revoke(&part.0, part.1);
                        }
                        if let Some(rep) = &mut sinks.replica {
                            rep.revoke(&part);
                        }
                        progress.forget(&part, &consumer);
                    }
                }
            }
        }
    }
    info!("stopping: flushing the sinks");
    if let Some(raw) = &mut sinks.raw {
        raw.close_all(now_ms()).await?;
        while let Some(r) = raw.next_receipt().await {
            uploaded(r?, &progress, &sinks.telemetry);
        }
    }
    if let Some(rep) = &mut sinks.replica {
        rep.drain().await?;
    }
    progress.store(&consumer, &sinks);
    Ok(())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Progress {
    fn forget(&mut self, part: &Part, consumer: &GroupConsumer) {
        self.consumed.remove(part);
        self.stored.remove(part);
        self.raw_floor.remove(part);
        // Resumed as it goes, so that if it comes back to this member it is not still paused.
        if self.paused.remove(part) {
            let mut l = TopicPartitionList::new();
            l.add_partition(&part.0, part.1);
            if let Err(e) = consumer.resume(&l) {
                debug!(error = %e, "resuming a revoked partition");
            }
        }
    }

    /// Pauses the partitions of stuck replica lanes at the consumer, and resumes those whose
    /// lane moved again.
    fn pause_backlogged(&mut self, consumer: &GroupConsumer, rep: &ReplicaSink) {
        let want: HashSet<Part> = rep
            .backlogged()
            .into_iter()
            .filter(|p| self.consumed.contains_key(p))
            .collect();
        if want == self.paused {
            return;
        }
        let list = |parts: &mut dyn Iterator<Item = &Part>| {
            let mut l = TopicPartitionList::new();
            for (t, p) in parts {
                l.add_partition(t, *p);
            }
            l
        };
        let pause = list(&mut want.difference(&self.paused));
        let resume = list(&mut self.paused.difference(&want));
        if pause.count() > 0 {
            match consumer.pause(&pause) {
                Ok(()) => {
                    info!(
                        parts = pause.count(),
                        "a replica lane is stuck: its partitions paused, the others go on"
                    )
                }
                Err(e) => warn!(error = %e, "pausing partitions"),
            }
        }
        if resume.count() > 0 {
            match consumer.resume(&resume) {
                Ok(()) => {
                    info!(
                        parts = resume.count(),
                        "the replica lane moved again: its partitions resumed"
                    )
                }
                Err(e) => warn!(error = %e, "resuming partitions"),
            }
        }
        self.paused = want;
    }

    /// Stores each partition's watermark where it moved. With the raw layer on, Kafka's
    /// offset is the raw layer's (its resume point); the replica resumes from its own table.
    fn store(&mut self, consumer: &GroupConsumer, sinks: &Sinks) {
        let mut list = TopicPartitionList::new();
        for (part, &next) in &self.consumed {
            let mark = match (&sinks.raw, &sinks.replica) {
                (Some(raw), _) => {
                    let m = raw
                        .pending_start(&part.0, part.1)
                        .map_or(next, |p| next.min(p));
                    self.raw_floor.get(part).map_or(m, |&f| m.max(f))
                }
                (None, Some(rep)) => rep.pending_start(part).map_or(next, |p| next.min(p)),
                (None, None) => next,
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

async fn write(sinks: &mut Sinks, progress: &Progress, batch: &ChangeBatch) -> anyhow::Result<()> {
    if let Some(raw) = &mut sinks.raw {
        let floor = progress
            .raw_floor
            .get(&(batch.topic.to_string(), batch.partition));
        match floor {
            Some(&f) if batch.first_offset < f => {
                if let Some(rest) = skip_below(batch, f) {
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

fn uploaded(r: Receipt, progress: &Progress, telemetry: &Telemetry) {
    let m = &telemetry.metrics;
    m.raw_flush_seconds
        .observe(r.sealed_at.elapsed().as_secs_f64());
    for &size in &r.file_sizes {
        m.raw_file_bytes.observe(size as f64);
    }
    m.written
        .get_or_create(&SinkTopicLabels {
            sink: RAW,
            topic: r.topic.to_string(),
        })
        .inc_by(r.rows);
    let part = (r.topic.to_string(), r.partition);
    if !progress.consumed.contains_key(&part) {
        // Revoked meanwhile: the new owner rewrites the same keys; nothing to store here.
        info!(topic = %r.topic, partition = r.partition, "upload of a revoked partition finished");
    }
}
