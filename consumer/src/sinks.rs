//! The sink side of the pipeline, on its own task so that writing Parquet and applying to
//! PostgreSQL run beside consuming and decoding. It receives decoded batches in order, with
//! the offsets they cover, feeds both sinks, and stores for Kafka to commit, per partition,
//! the first offset not yet durable in both; with two sinks the raw layer's own point rides
//! along in the commit's metadata ([`raw_mark_metadata`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lakesink_schema_registry::{ChangeBatch, ValueShape};
use lakesink_writers::failpoint::KAFKA_AFTER_STORE;
use lakesink_writers::parquet::{ParquetWriter, Positions, RawError, Receipt};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::kafka::GroupConsumer;
use raw_outage::RawOutage;

mod raw_outage;
use crate::replica::{ReplicaSink, raise_floor, skip_below};
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::SinkTopicLabels;
use crate::telemetry::status::RAW;

pub(crate) type Part = (String, i32);

/// How often idle partitions and wall-clock rotation are looked at.
const TICK: Duration = Duration::from_millis(200);
/// How often a raw-layer point that moved while Kafka's offset did not is committed (the
/// auto-commit sends metadata only with an offset that moved). librdkafka's default
/// auto-commit interval.
const METADATA_EVERY: Duration = Duration::from_secs(5);
/// Once everything consumed is durable, the offsets are committed at once rather than at the
/// next auto-commit, at most this often: Kafka's lag reads zero as soon as lakesink has caught
/// up (librdkafka's auto-commit interval is 5 s by default).
const CAUGHT_UP_EVERY: Duration = Duration::from_millis(100);

/// The committed metadata that names the raw layer's resume point, when Kafka's offset is
/// the replica's, below it. A restart reads it so that the raw layer skips what it holds
/// instead of cutting those files again.
pub(crate) fn raw_mark_metadata(next: i64) -> String {
    format!("lakesink:raw={next}")
}

/// The raw layer's resume point from committed metadata; None for anything else (no
/// metadata, or offsets reset by a tool).
pub(crate) fn parse_raw_mark(metadata: &str) -> Option<i64> {
    metadata.strip_prefix("lakesink:raw=")?.parse().ok()
}

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
    /// A partition in [`Rewinds`]: the consumer goes on from this offset (sought back to it,
    /// or there already); what follows may have been read before.
    Rewound(Part, i64),
    /// Shut down: close files, wait for uploads and the last transaction, store offsets.
    Stop,
}

/// Partitions the sink side asks to be read again from an offset (a detached replica lane
/// that moved again, the object store back after an outage). The consuming side hands over
/// what it holds, seeks, and answers with [`Item::Rewound`].
#[derive(Clone, Default)]
pub(crate) struct Rewinds(Arc<RewindList>);

#[derive(Default)]
struct RewindList {
    /// Set while the list is not empty: the consuming side looks at it for every record.
    any: AtomicBool,
    list: Mutex<Vec<(Part, i64)>>,
}

impl Rewinds {
    fn push(&self, due: Vec<(Part, i64)>) {
        if let Ok(mut v) = self.0.list.lock() {
            v.extend(due);
            self.0.any.store(!v.is_empty(), Ordering::Release);
        }
    }

    pub(crate) fn take(&self) -> Vec<(Part, i64)> {
        if !self.0.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.0
            .list
            .lock()
            .map(|mut v| {
                self.0.any.store(false, Ordering::Release);
                std::mem::take(&mut *v)
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Progress {
    consumed: HashMap<Part, i64>,
    /// What was last stored: Kafka's offset, and the raw layer's point when it is ahead.
    stored: HashMap<Part, (i64, Option<i64>)>,
    /// Partitions whose raw point moved while their offset did not: committed explicitly.
    metadata_dirty: HashSet<Part>,
    metadata_sent: Option<Instant>,
    /// The last commit made because everything consumed was durable, and whether one was
    /// held back since by [`CAUGHT_UP_EVERY`].
    caught_up_sent: Option<Instant>,
    caught_up_due: bool,
    raw_floor: HashMap<Part, i64>,
    /// The raw layer's point per partition (its first offset not durable), as last stored,
    /// and as last written to its own store ([`Progress::write_positions`]).
    raw_points: HashMap<Part, i64>,
    positions_written: HashMap<Part, i64>,
    positions_sent: Option<Instant>,
    positions_task: Option<tokio::task::JoinHandle<()>>,
    positions: Option<Positions>,
    /// Partitions paused at the consumer because their replica lane is stuck.
    paused: HashSet<Part>,
    raw_out: RawOutage,
}

pub(crate) async fn run(
    mut sinks: Sinks,
    mut items: mpsc::Receiver<Item>,
    consumer: Arc<GroupConsumer>,
    rewinds: Rewinds,
) -> anyhow::Result<()> {
    let mut progress = Progress {
        positions: sinks.raw.as_ref().map(ParquetWriter::positions),
        ..Progress::default()
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let raw_uploading = sinks.raw.as_ref().is_some_and(ParquetWriter::uploading);
        let applying = sinks.replica.as_ref().is_some_and(ReplicaSink::applying);
        // Backpressure: stuck replica lanes hold back only their own partitions; a sink over
        // its whole bounds stops everything.
        progress.stuck_lanes(&mut sinks, &consumer, &rewinds);
        let accept = !(sinks.raw.as_ref().is_some_and(ParquetWriter::over_budget) && raw_uploading
            || sinks.replica.as_ref().is_some_and(ReplicaSink::full) && applying);
        tokio::select! {
            Some(r) = next_receipt(&mut sinks.raw), if raw_uploading => {
                match r {
                    Ok(r) => uploaded(r, &progress, &sinks.telemetry),
                    Err(e) => progress.raw_failed(&mut sinks, e)?,
                }
                if progress.store(&consumer, &sinks) {
                    progress.commit_if_caught_up(&consumer);
                }
            }
            due = progress.raw_out.probed(&sinks.telemetry), if progress.raw_out.probing() => {
                rewinds.push(due);
            }
            done = finish_apply(&mut sinks.replica), if applying => {
                done?;
                if let Some(rep) = &mut sinks.replica {
                    rep.start();
                }
                if progress.store(&consumer, &sinks) {
                    progress.commit_if_caught_up(&consumer);
                }
            }
            _ = tick.tick() => {
                if let Some(raw) = &mut sinks.raw
                    && let Err(e) = raw.poll(now_ms()).await
                {
                    progress.raw_failed(&mut sinks, e)?;
                }
                if let Some(raw) = &sinks.raw {
                    progress.raw_out.probe_if_due(raw);
                }
                progress.store(&consumer, &sinks);
                if progress.caught_up_due {
                    progress.commit_if_caught_up(&consumer);
                }
                progress.commit_metadata(&consumer, false);
                progress.write_positions(false).await;
            }
            item = items.recv(), if accept => match item {
                None | Some(Item::Stop) => break,
                Some(Item::Batches { batches, consumed }) => {
                    for batch in &batches {
                        write(&mut sinks, &mut progress, batch).await?;
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
                Some(Item::Rewound(part, from)) => {
                    // What was consumed before the seek: a sink that was not out has it.
                    let before = progress.consumed.get(&part).copied();
                    if sinks.raw.is_some() {
                        progress.raw_rewound(&part, from, before, &rewinds);
                    }
                    if let Some(rep) = &mut sinks.replica {
                        rep.rewound(&part, from, before);
                    }
                    // Read again from `from`: what was consumed before no longer counts until
                    // it comes again, else the raw layer's point would jump to it with nothing
                    // of the new reading written yet, and Kafka's offset with it.
                    if before.is_some_and(|b| from < b) {
                        progress.consumed.insert(part, from);
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
    progress.write_positions(true).await;
    progress.commit_metadata(&consumer, true);
    Ok(())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Progress {
    /// A raw-layer error: the raw layer lets go while the store is unavailable (see
    /// [`RawOutage`]); any other error stops the run.
    fn raw_failed(&mut self, sinks: &mut Sinks, e: RawError) -> anyhow::Result<()> {
        let Some(raw) = &mut sinks.raw else {
            return Err(e.into());
        };
        self.raw_out.failed(raw, e, &sinks.telemetry)
    }

    /// The raw layer's side of a seek back to `from`; `before` is what was consumed before
    /// it.
    fn raw_rewound(&mut self, part: &Part, from: i64, before: Option<i64>, rewinds: &Rewinds) {
        let floor = match self.raw_out.rewound(part, from) {
            raw_outage::Rewound::Taken(r) => Some(r),
            raw_outage::Rewound::Again(r) => {
                rewinds.push(vec![(part.clone(), r)]);
                None
            }
            raw_outage::Rewound::Waiting => None,
            raw_outage::Rewound::NotOut => before,
        };
        if let Some(f) = floor {
            raise_floor(&mut self.raw_floor, part, f);
        }
    }

    fn forget(&mut self, part: &Part, consumer: &GroupConsumer) {
        self.consumed.remove(part);
        self.stored.remove(part);
        self.metadata_dirty.remove(part);
        self.raw_floor.remove(part);
        self.raw_points.remove(part);
        self.positions_written.remove(part);
        self.raw_out.forget(part);
        // Resumed as it goes, so that if it comes back to this member it is not still paused.
        if self.paused.remove(part) {
            let mut l = TopicPartitionList::new();
            l.add_partition(&part.0, part.1);
            if let Err(e) = consumer.resume(&l) {
                debug!(error = %e, "resuming a revoked partition");
            }
        }
    }

    /// Stuck replica lanes: with the raw layer on, the replica lets go of their partitions
    /// (the raw layer takes them on) and asks for them to be read again once the lane moves;
    /// with the replica alone, they are paused at the consumer.
    fn stuck_lanes(&mut self, sinks: &mut Sinks, consumer: &GroupConsumer, rewinds: &Rewinds) {
        let Some(rep) = &mut sinks.replica else {
            return;
        };
        if sinks.raw.is_some() {
            let now = rep.detach(&self.consumed);
            if !now.is_empty() {
                info!(
                    parts = now.len(),
                    "a replica lane is stuck: the replica lets go of its partitions, the raw \
                     layer goes on, and they are read again when the lane moves"
                );
            }
            let due = rep.rewind_due();
            if !due.is_empty() {
                info!(
                    parts = due.len(),
                    "the replica lane moved: reading its partitions again"
                );
                rewinds.push(due);
            }
        } else {
            self.pause_backlogged(consumer, rep);
        }
        let stuck = rep.detached() + self.paused.len();
        sinks
            .telemetry
            .metrics
            .replica_stuck_partitions
            .set(stuck as i64);
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

    /// Stores each partition's watermark where it moved: the first offset that is not yet
    /// durable in every sink. With both sinks on and the replica behind, the raw layer's own
    /// point goes in the metadata, so that a restart from the replica's offset does not
    /// write the raw layer's files again.
    /// Returns whether any moved.
    fn store(&mut self, consumer: &GroupConsumer, sinks: &Sinks) -> bool {
        let mut list = TopicPartitionList::new();
        for (part, &next) in &self.consumed {
            let raw = sinks.raw.as_ref().map(|raw| {
                let mark = watermark(
                    next,
                    self.raw_floor.get(part).copied(),
                    raw.pending_start(&part.0, part.1),
                );
                self.raw_out.point(part).map_or(mark, |p| p.min(mark))
            });
            if let Some(raw) = raw {
                self.raw_points.insert(part.clone(), raw);
            }
            let rep = sinks
                .replica
                .as_ref()
                .map(|rep| watermark(next, rep.floor(part), rep.pending_start(part)));
            let (mark, raw_ahead) = match (raw, rep) {
                (Some(raw), Some(rep)) if rep < raw => (rep, Some(raw)),
                (Some(m), _) | (None, Some(m)) => (m, None),
                (None, None) => (next, None),
            };
            let before = self.stored.get(part).copied();
            if before == Some((mark, raw_ahead)) {
                continue;
            }
            add_mark(&mut list, part, mark, raw_ahead);
            // The auto-commit sends metadata only with an offset that moved.
            if before.is_some_and(|(m, _)| m == mark) {
                self.metadata_dirty.insert(part.clone());
            }
            self.stored.insert(part.clone(), (mark, raw_ahead));
        }
        if list.count() > 0 {
            match consumer.store_offsets(&list) {
                Ok(()) => lakesink_writers::failpoint::hit(KAFKA_AFTER_STORE),
                // A partition revoked a moment ago; its new owner starts from what was committed.
                Err(e) => warn!(error = %e, "storing offsets"),
            }
        }
        list.count() > 0
    }

    /// Commits the stored offsets now when every partition's is its consumed offset: all that
    /// was read is durable in every sink. Errors are left to the next auto-commit.
    fn commit_if_caught_up(&mut self, consumer: &GroupConsumer) {
        let caught_up = !self.consumed.is_empty()
            && self
                .consumed
                .iter()
                .all(|(part, &next)| self.stored.get(part).is_some_and(|(m, _)| *m == next));
        // Too soon after the last one: the next tick commits, if still caught up.
        self.caught_up_due = caught_up
            && self
                .caught_up_sent
                .is_some_and(|t| t.elapsed() < CAUGHT_UP_EVERY);
        if !caught_up || self.caught_up_due {
            return;
        }
        self.caught_up_sent = Some(Instant::now());
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            debug!(error = %e, "committing offsets on catching up");
        }
    }

    /// Commits the stored offsets of partitions whose raw point alone moved: every
    /// [`METADATA_EVERY`], or now when `now` (shutdown). Without it a restart would only
    /// rewrite the same raw files again, so a failure is logged, not fatal.
    fn commit_metadata(&mut self, consumer: &GroupConsumer, now: bool) {
        if self.metadata_dirty.is_empty()
            || !now
                && self
                    .metadata_sent
                    .is_some_and(|t| t.elapsed() < METADATA_EVERY)
        {
            return;
        }
        let mut list = TopicPartitionList::new();
        for part in self.metadata_dirty.drain() {
            let Some(&(mark, raw_ahead)) = self.stored.get(&part) else {
                continue;
            };
            add_mark(&mut list, &part, mark, raw_ahead);
        }
        self.metadata_sent = Some(Instant::now());
        let mode = if now {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if list.count() > 0
            && let Err(e) = consumer.commit(&list, mode)
        {
            warn!(error = %e, "committing the raw layer's position");
        }
    }
}

impl Progress {
    /// Writes the raw layer's point of each partition where it moved into the raw layer's own
    /// store, where a restart reads it ([`Positions`]): every [`METADATA_EVERY`], or now and
    /// awaited (shutdown). A failed write leaves an older position, from which a restart reads
    /// a little again (the markers make that exact), so it is logged, not fatal.
    async fn write_positions(&mut self, now: bool) {
        let Some(positions) = self.positions.clone() else {
            return;
        };
        let busy = self
            .positions_task
            .as_ref()
            .is_some_and(|t| !t.is_finished());
        let recent = self
            .positions_sent
            .is_some_and(|t| t.elapsed() < METADATA_EVERY);
        if !now && (busy || recent) {
            return;
        }
        let moved: Vec<(Part, i64)> = self
            .raw_points
            .iter()
            .filter(|(part, next)| self.positions_written.get(*part) != Some(*next))
            .map(|(part, next)| (part.clone(), *next))
            .collect();
        if moved.is_empty() {
            return;
        }
        self.positions_sent = Some(Instant::now());
        self.positions_written.extend(moved.iter().cloned());
        let task = async move {
            let writes = moved
                .iter()
                .map(|((t, p), next)| positions.write(t, *p, *next));
            for (done, ((topic, partition), next)) in futures::future::join_all(writes)
                .await
                .into_iter()
                .zip(&moved)
            {
                if let Err(e) = done {
                    warn!(topic, partition, next, error = %e, "writing the raw layer's position");
                }
            }
        };
        if now {
            if let Some(t) = self.positions_task.take() {
                let _ = t.await;
            }
            task.await;
        } else {
            self.positions_task = Some(tokio::spawn(task));
        }
    }
}

/// Adds a partition's offset, with the raw layer's point as metadata when it is ahead.
fn add_mark(list: &mut TopicPartitionList, part: &Part, mark: i64, raw_ahead: Option<i64>) {
    let mut elem = list.add_partition(&part.0, part.1);
    // Offset::Offset always has a raw form.
    let _ = elem.set_offset(Offset::Offset(mark));
    if let Some(r) = raw_ahead {
        elem.set_metadata(raw_mark_metadata(r));
    }
}

/// A sink's first offset not yet durable: below what it holds pending, and never below its
/// floor (the records under it were durable in it before this run).
fn watermark(next: i64, floor: Option<i64>, pending: Option<i64>) -> i64 {
    let next = floor.map_or(next, |f| next.max(f));
    pending.map_or(next, |p| p.min(next))
}

async fn write(
    sinks: &mut Sinks,
    progress: &mut Progress,
    batch: &ChangeBatch,
) -> anyhow::Result<()> {
    if sinks.raw.is_some() {
        let part = (batch.topic.to_string(), batch.partition);
        let floor = progress.raw_floor.get(&part).copied();
        let rest = match floor {
            Some(f) if batch.first_offset < f => skip_below(batch, f),
            _ => Some(batch.clone()),
        };
        if let Some(rest) = rest {
            if !progress.raw_out.taking(&part) {
                progress.raw_out.missed(&part, rest.first_offset);
            } else if let Some(raw) = &mut sinks.raw
                && let Err(e) = raw.write(&rest, now_ms()).await
            {
                progress.raw_out.missed(&part, rest.first_offset);
                progress.raw_failed(sinks, e)?;
            }
        }
    }
    // Records that are not rows only ever go to the raw layer.
    if let Some(rep) = &mut sinks.replica
        && !matches!(batch.shape, ValueShape::NonData(_))
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_mark_round_trips_through_the_metadata() {
        assert_eq!(parse_raw_mark(&raw_mark_metadata(12_345)), Some(12_345));
        assert_eq!(parse_raw_mark(""), None, "offsets reset by a tool");
        assert_eq!(parse_raw_mark("lakesink:raw=x"), None);
        assert_eq!(parse_raw_mark("someone else's"), None);
    }

    #[test]
    fn a_sinks_watermark_is_below_what_it_holds_and_above_its_floor() {
        assert_eq!(watermark(100, None, None), 100, "everything durable");
        assert_eq!(watermark(100, None, Some(40)), 40, "40.. pending");
        assert_eq!(
            watermark(100, Some(500), None),
            500,
            "durable up to its floor"
        );
        assert_eq!(watermark(600, Some(500), Some(550)), 550);
    }
}
