//! The live replica, the [`Sink`] that feeds [`PgReplicator`] from the consumer. Partitions are spread over lanes, one per connection
//! of `replica.pool-size`; each lane applies one transaction at a time, over its partitions
//! only, while the next batches of those partitions collect. A partition stays in its lane, so
//! its records are applied in offset order, and lanes commit independently: PostgreSQL works
//! on several transactions at once. A failed apply that can succeed later (database
//! restarting, a deadlock between lanes) is retried with capped backoff; offsets do not move
//! meanwhile.

mod applier;
mod lanes;
mod tolerate;

pub(crate) use applier::{Applier, Done, Failed};
pub(crate) use lanes::{Limit, held_bytes, slice_bytes};

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use lakesink_config::ReplicaConfig;
use lakesink_model::{Backoff, retrying};
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use tracing::info;

use super::{PgReplicator, ReplicaError};
use crate::sink::{
    Backpressure, Event, Held, Meter, Receipt, Resume, Rewound, Sink, SinkError, TopicPartition,
};
use lanes::Stuck;

type Part = TopicPartition;

/// The replica's name as a sink.
pub const REPLICA: &str = "replica";

/// Where records the replica cannot take go, with `errors.tolerance = "all"`: the consumer's
/// dead-letter topic. Ok once the broker has the record.
pub trait Rejects: Send + Sync {
    fn reject<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
        offset: i64,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), Box<dyn Error + Send + Sync>>>;

    /// The dead-letter topic, for the log.
    fn topic(&self) -> &str;

    /// Whether each rejected record is logged as sent to [`Self::topic`] (replay reports its
    /// own instead).
    fn logged(&self) -> bool {
        true
    }
}

/// A lane whose transaction has run this long with the whole bounds waiting behind it is
/// stuck (a locked table, a slow statement): its partitions are paused at the consumer so
/// that the other lanes go on. Transactions take well under a second when they flow, so a
/// lane does not pause and resume at every transaction; each pause makes librdkafka drop and
/// fetch again what it had prefetched (pausing at a quarter of the bounds, without this
/// delay, halved the throughput).
const STUCK_AFTER: Duration = Duration::from_secs(2);

/// How long a delete that ends what the replica has of its partition waits for what follows
/// it: a primary-key change is a delete, its tombstone and a create in consecutive records,
/// and the two halves are applied in one transaction. Debezium sends them together, so the
/// create comes with the next hand-over (the pipeline hands over within 25 ms of a pause);
/// a delete that is not half of a key change is applied after this at the latest.
pub(crate) const KEY_CHANGE_WAIT: Duration = Duration::from_millis(100);

pub struct ReplicaSink {
    group: String,
    max_rows: usize,
    max_bytes: usize,
    /// The lanes and their transactions; with `errors.tolerance = "all"`, the records the
    /// replica cannot take go to the dead-letter topic through it.
    applier: Applier,
    /// Partitions of a stuck lane that the replica stopped taking, with the first offset it
    /// does not hold: they are read again from there once the lane moves ([`Self::detach`]).
    detached: HashMap<Part, i64>,
    /// Detached partitions whose reading again was asked for.
    rewinding: HashSet<Part>,
    meter: Arc<dyn Meter>,
}

impl ReplicaSink {
    pub async fn connect(
        config: &ReplicaConfig,
        group: &str,
        meter: Arc<dyn Meter>,
        dead: Option<Arc<dyn Rejects>>,
    ) -> Result<Self, ReplicaError> {
        // One connection per lane, and one for offset lookups on partition assignment.
        let mut pool = config.clone();
        pool.pool_size = config.pool_size.saturating_add(1);
        let replicator = PgReplicator::connect(&pool).await?;
        let mut sink = Self {
            group: group.to_owned(),
            max_rows: config.batch_max_rows,
            max_bytes: config.batch_max_bytes,
            applier: Applier::new(
                Arc::new(replicator),
                group,
                config.pool_size as usize,
                meter.clone(),
                dead,
                Backoff::DEFAULT,
                Limit::NONE,
                held_bytes,
            ),
            detached: HashMap::new(),
            rewinding: HashSet::new(),
            meter,
        };
        sink.applier.lanes.hold_key_changes(Some(KEY_CHANGE_WAIT));
        Ok(sink)
    }

    /// Queues a batch, unless the replica let go of its partition.
    fn push(&mut self, batch: &ChangeBatch) {
        let part = TopicPartition::new(batch.topic.clone(), batch.partition);
        if self.detached.contains_key(&part) {
            return;
        }
        self.applier.push(batch.clone());
    }

    /// Pending work over the bounds: the caller takes nothing new while it waits. Stuck
    /// lanes do not count: their partitions are paused instead (see [`Self::backlogged`]).
    fn full(&self) -> bool {
        let (rows, bytes) = self
            .applier
            .lanes
            .pending_flowing(self.stuck(), Instant::now());
        rows >= self.max_rows || bytes >= self.max_bytes
    }

    fn stuck(&self) -> Stuck {
        Stuck {
            rows: self.max_rows,
            bytes: self.max_bytes,
            after: STUCK_AFTER,
        }
    }

    fn applying(&self) -> bool {
        self.applier.applying()
    }

    /// Partitions to pause: those of a stuck lane (see [`STUCK_AFTER`]). The other lanes go
    /// on.
    fn backlogged(&self) -> Vec<Part> {
        self.applier.lanes.stuck(self.stuck(), Instant::now())
    }

    /// Starts a transaction in every lane that has work and none running.
    fn start(&mut self) {
        self.applier.start(|_| false);
    }

    /// Waits for one running transaction; Ok(None) when none runs.
    async fn finish(&mut self) -> Result<Option<Vec<Receipt>>, SinkError> {
        match self.applier.finish().await {
            Ok(done) => Ok(done.map(|d| d.receipts)),
            Err(f) => Err(f.error),
        }
    }

    /// Applies everything pending and waits for it: for shutdown.
    async fn drain(&mut self) -> Result<Vec<Receipt>, SinkError> {
        // Nothing more comes: a held delete goes now.
        self.applier.lanes.hold_key_changes(None);
        let mut receipts = Vec::new();
        loop {
            self.start();
            match self.finish().await? {
                Some(r) => receipts.extend(r),
                None => return Ok(receipts),
            }
        }
    }

    /// The first offset of a partition not yet in the replica, if anything is pending (or
    /// was dropped by a detach).
    fn pending_start(&self, part: &Part) -> Option<i64> {
        match (self.applier.lanes.start_of(part), self.detached.get(part)) {
            (Some(a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b.copied()),
        }
    }

    /// With another sink to feed: the replica stops taking the partitions of a stuck lane
    /// and drops what they have queued, so that the consumer goes on for the raw layer within
    /// the bounds; `consumed` gives where a partition with nothing queued stands. Returns
    /// the partitions detached now. When the lane's transaction ends, [`Self::rewind_due`]
    /// has them read again from where the replica stopped.
    fn detach(&mut self, consumed: &HashMap<Part, i64>) -> Vec<Part> {
        let mut now = Vec::new();
        for part in self.backlogged() {
            if self.detached.contains_key(&part) {
                continue;
            }
            let from = self
                .applier
                .lanes
                .drop_pending(&part)
                .or_else(|| consumed.get(&part).copied());
            if let Some(from) = from {
                self.detached.insert(part.clone(), from);
                now.push(part);
            }
        }
        now
    }

    /// Detached partitions whose lane has no transaction running any more: read them again
    /// from the offset returned (the seek comes back through `rewound`).
    fn rewind_due(&mut self) -> Vec<(Part, i64)> {
        let mut due = Vec::new();
        for (part, &from) in &self.detached {
            if !self.rewinding.contains(part) && !self.applier.lanes.running(part) {
                due.push((part.clone(), from));
            }
        }
        for (part, _) in &due {
            self.rewinding.insert(part.clone());
        }
        due
    }

    /// The consumer was sought back to `from` for `part`. Detached from `from` or later: the
    /// replica takes its records again. Detached earlier: it waits for a seek of its own
    /// ([`Self::rewind_due`]). Not detached: it skips what it had received.
    fn rewound_at(&mut self, part: &Part, from: i64) -> Rewound {
        self.rewinding.remove(part);
        match self.detached.get(part).copied() {
            Some(r) if r >= from => {
                self.detached.remove(part);
                Rewound::From(r)
            }
            Some(_) => Rewound::Waiting,
            None => Rewound::Skip,
        }
    }
}

impl Sink for ReplicaSink {
    fn name(&self) -> &'static str {
        REPLICA
    }

    /// Records that are not rows only ever go to the raw layer.
    fn takes_non_data(&self) -> bool {
        false
    }

    fn write<'a>(
        &'a mut self,
        batches: &'a [ChangeBatch],
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), SinkError>> {
        for b in batches {
            if !matches!(b.shape, ValueShape::NonData(_)) {
                self.push(b);
            }
        }
        self.start();
        Box::pin(async { Ok(()) })
    }

    fn tick(&mut self, _now_ms: i64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async { Ok(()) })
    }

    fn busy(&self) -> bool {
        self.applying() || self.applier.lanes.hold_ends().is_some()
    }

    fn next_event(&mut self) -> BoxFuture<'_, Result<Event, SinkError>> {
        Box::pin(async move {
            // A held delete's wait may end before any running transaction does (one lane can
            // be stuck for long): whichever comes first. Waiting for a transaction is
            // cancel-safe.
            let done = match self.applier.lanes.hold_ends() {
                Some(ends) if self.applying() => tokio::select! {
                    done = self.finish() => done?,
                    () = tokio::time::sleep_until(ends.into()) => None,
                },
                Some(ends) => {
                    tokio::time::sleep_until(ends.into()).await;
                    None
                }
                None => self.finish().await?,
            };
            self.start();
            Ok(done.map_or(Event::Nothing, Event::Durable))
        })
    }

    fn pending_start(&self, part: &TopicPartition) -> Option<i64> {
        ReplicaSink::pending_start(self, part)
    }

    fn rewound(&mut self, part: &TopicPartition, from: i64, _before: Option<i64>) -> Rewound {
        self.rewound_at(part, from)
    }

    /// Forgets a revoked partition's queued batches. A running apply may still commit them:
    /// its offsets row is locked and only moves forward, so the new owner is not harmed.
    fn revoke(&mut self, part: &TopicPartition) {
        self.detached.remove(part);
        self.rewinding.remove(part);
        self.applier.lanes.drop_pending(part);
    }

    /// Stuck lanes: with another sink on, the replica lets go of their partitions (the other
    /// sinks go on) and asks for them to be read again once the lane moves; alone, it has
    /// them paused at the consumer. Pending work over the bounds holds everything.
    fn backpressure(
        &mut self,
        consumed: &HashMap<TopicPartition, i64>,
        alone: bool,
    ) -> Backpressure {
        let mut out = Backpressure {
            full: self.full() && self.applying(),
            ..Backpressure::default()
        };
        if alone {
            out.pause = self
                .backlogged()
                .into_iter()
                .filter(|p| consumed.contains_key(p))
                .collect();
        } else {
            let now = self.detach(consumed);
            if !now.is_empty() {
                info!(
                    parts = now.len(),
                    "a replica lane is stuck: the replica lets go of its partitions, the other \
                     sinks go on, and they are read again when the lane moves"
                );
            }
            out.read_again = self.rewind_due();
            if !out.read_again.is_empty() {
                info!(
                    parts = out.read_again.len(),
                    "the replica lane moved: reading its partitions again"
                );
            }
        }
        self.meter
            .replica_stuck(self.detached.len() + out.pause.len());
        out
    }

    fn close(&mut self, _now_ms: i64) -> BoxFuture<'_, Result<Vec<Receipt>, SinkError>> {
        Box::pin(self.drain())
    }

    fn resume(&self) -> Arc<dyn Resume> {
        Arc::new(ReplicaResume {
            replicator: self.applier.replicator().clone(),
            group: self.group.clone(),
            meter: self.meter.clone(),
        })
    }
}

/// Where the replica stands: its own offsets table.
struct ReplicaResume {
    replicator: Arc<PgReplicator>,
    group: String,
    meter: Arc<dyn Meter>,
}

impl Resume for ReplicaResume {
    /// The replica's next offset, retried while the database is unreachable. Behind the
    /// committed offset (a replica restored from an older backup), the partition is read
    /// again from it.
    fn held<'a>(
        &'a self,
        part: &'a TopicPartition,
        committed: i64,
        _mark: Option<i64>,
    ) -> BoxFuture<'a, Result<Held, SinkError>> {
        Box::pin(async move {
            let partitions = [part.partition];
            let found = retrying(
                Backoff::DEFAULT,
                &*self.meter,
                Some(REPLICA),
                "reading the replica's offsets",
                || {
                    self.replicator
                        .next_offsets(&self.group, &part.topic, &partitions)
                },
            )
            .await
            .map_err(|e| SinkError::in_sink(REPLICA, e))?;
            let next = found.get(&part.partition).copied();
            let behind = next.filter(|&n| n < committed);
            if let Some(from) = behind {
                info!(topic = %part.topic, partition = part.partition, from, to = committed,
                    "the replica is behind: reading again from its offset");
            }
            Ok(Held {
                durable: next,
                behind,
            })
        })
    }
}
