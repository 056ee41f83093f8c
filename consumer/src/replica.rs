//! The replica side of the pipeline. Partitions are spread over lanes, one per connection
//! of `replica.pool-size`; each lane applies one transaction at a time, over its partitions
//! only, while the next batches of those partitions collect. A partition stays in its lane, so
//! its records are applied in offset order, and lanes commit independently: PostgreSQL works
//! on several transactions at once. A failed apply that can succeed later (database
//! restarting, a deadlock between lanes) is retried with capped backoff; offsets do not move
//! meanwhile.

mod lanes;
mod tolerate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lakesink_config::ReplicaConfig;
use lakesink_model::{Backoff, retrying};
use lakesink_schema_registry::ChangeBatch;
use lakesink_writers::{Applied, PgReplicator, ReplicaError};
use tokio::task::JoinSet;

use crate::dead_letter::DeadLetters;
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::{SinkTopicLabels, TableColumnLabels};
use crate::telemetry::status::REPLICA;
use lanes::{Lanes, Part, Stuck};

/// A lane whose transaction has run this long with the whole bounds waiting behind it is
/// stuck (a locked table, a slow statement): its partitions are paused at the consumer so
/// that the other lanes go on. Transactions take well under a second when they flow, so a
/// lane does not pause and resume at every transaction; each pause makes librdkafka drop and
/// fetch again what it had prefetched (pausing at a quarter of the bounds, without this
/// delay, halved the throughput).
const STUCK_AFTER: Duration = Duration::from_secs(2);

pub(crate) struct ReplicaSink {
    replicator: Arc<PgReplicator>,
    group: String,
    max_rows: usize,
    max_bytes: usize,
    lanes: Lanes,
    running: JoinSet<(usize, anyhow::Result<Vec<Applied>>)>,
    /// With `errors.tolerance = "all"`: where records the replica cannot take go.
    dead: Option<Arc<DeadLetters>>,
    /// Per partition, records below this are in the replica already (from its offsets table).
    floor: HashMap<Part, i64>,
    /// Partitions of a stuck lane that the replica stopped taking, with the first offset it
    /// does not hold: they are read again from there once the lane moves ([`Self::detach`]).
    detached: HashMap<Part, i64>,
    /// Detached partitions whose reading again was asked for.
    rewinding: std::collections::HashSet<Part>,
    telemetry: Arc<Telemetry>,
}

impl ReplicaSink {
    pub(crate) async fn connect(
        config: &ReplicaConfig,
        group: &str,
        telemetry: Arc<Telemetry>,
        dead: Option<Arc<DeadLetters>>,
    ) -> anyhow::Result<Self> {
        // One connection per lane, and one for offset lookups on partition assignment.
        let mut pool = config.clone();
        pool.pool_size = config.pool_size.saturating_add(1);
        let replicator = PgReplicator::connect(&pool).await?;
        Ok(Self {
            replicator: Arc::new(replicator),
            group: group.to_owned(),
            max_rows: config.batch_max_rows,
            max_bytes: config.batch_max_bytes,
            lanes: Lanes::new(config.pool_size as usize),
            running: JoinSet::new(),
            dead,
            floor: HashMap::new(),
            detached: HashMap::new(),
            rewinding: std::collections::HashSet::new(),
            telemetry,
        })
    }

    /// A handle that looks up the replica's offsets, for the consuming side.
    pub(crate) fn offsets(&self) -> ReplicaOffsets {
        ReplicaOffsets {
            replicator: self.replicator.clone(),
            group: self.group.clone(),
            telemetry: self.telemetry.clone(),
        }
    }

    /// Records below `floor` are in the replica already.
    pub(crate) fn set_floor(&mut self, part: Part, floor: i64) {
        self.floor.insert(part, floor);
    }

    /// Records below this are in the replica already, if it was ahead of Kafka's offset.
    pub(crate) fn floor(&self, part: &Part) -> Option<i64> {
        self.floor.get(part).copied()
    }

    /// Queues a batch; rows below the replica's own offset are dropped here.
    pub(crate) fn push(&mut self, batch: &ChangeBatch) {
        let part = (batch.topic.to_string(), batch.partition);
        if self.detached.contains_key(&part) {
            return;
        }
        let batch = match self.floor.get(&part) {
            Some(&floor) if batch.last_offset < floor => return,
            Some(&floor) if batch.first_offset < floor => match skip_below(batch, floor) {
                Some(b) => b,
                None => return,
            },
            _ => batch.clone(),
        };
        self.lanes.push(batch);
    }

    /// Pending work over the bounds: the caller takes nothing new while it waits. Stuck
    /// lanes do not count: their partitions are paused instead (see [`Self::backlogged`]).
    pub(crate) fn full(&self) -> bool {
        let (rows, bytes) = self.lanes.pending_flowing(self.stuck(), Instant::now());
        rows >= self.max_rows || bytes >= self.max_bytes
    }

    fn stuck(&self) -> Stuck {
        Stuck {
            rows: self.max_rows,
            bytes: self.max_bytes,
            after: STUCK_AFTER,
        }
    }

    pub(crate) fn applying(&self) -> bool {
        !self.running.is_empty()
    }

    /// Partitions to pause: those of a stuck lane (see [`STUCK_AFTER`]). The other lanes go
    /// on.
    pub(crate) fn backlogged(&self) -> Vec<Part> {
        self.lanes.stuck(self.stuck(), Instant::now())
    }

    /// Starts a transaction in every lane that has work and none running.
    pub(crate) fn start(&mut self) {
        for (lane, batches) in self.lanes.take_ready() {
            let replicator = self.replicator.clone();
            let group = self.group.clone();
            let telemetry = self.telemetry.clone();
            let dead = self.dead.clone();
            self.running.spawn(async move {
                let applied = match &dead {
                    Some(dead) => {
                        tolerate::apply_tolerating(&replicator, &group, &batches, dead, &telemetry)
                            .await
                    }
                    None => apply(&replicator, &group, &batches, &telemetry)
                        .await
                        .map_err(Into::into),
                };
                (lane, applied)
            });
        }
    }

    /// Waits for one running transaction; Ok(None) when none runs.
    pub(crate) async fn finish(&mut self) -> anyhow::Result<Option<Vec<Applied>>> {
        let Some(done) = self.running.join_next().await else {
            return Ok(None);
        };
        let (lane, applied) = done?;
        self.lanes.done(lane);
        let applied = applied?;
        tracing::debug!(
            lane,
            partitions = applied.len(),
            "replica transaction committed"
        );
        Ok(Some(applied))
    }

    /// Applies everything pending and waits for it: for shutdown.
    pub(crate) async fn drain(&mut self) -> anyhow::Result<()> {
        loop {
            self.start();
            if self.finish().await?.is_none() {
                return Ok(());
            }
        }
    }

    /// The first offset of a partition not yet in the replica, if anything is pending (or
    /// was dropped by a detach).
    pub(crate) fn pending_start(&self, part: &Part) -> Option<i64> {
        match (self.lanes.start_of(part), self.detached.get(part)) {
            (Some(a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b.copied()),
        }
    }

    /// With another sink to feed: the replica stops taking the partitions of a stuck lane
    /// and drops what they have queued, so that the consumer goes on for the raw layer within
    /// the bounds; `consumed` gives where a partition with nothing queued stands. Returns
    /// the partitions detached now. When the lane's transaction ends, [`Self::rewind_due`]
    /// has them read again from where the replica stopped.
    pub(crate) fn detach(&mut self, consumed: &HashMap<Part, i64>) -> Vec<Part> {
        let mut now = Vec::new();
        for part in self.backlogged() {
            if self.detached.contains_key(&part) {
                continue;
            }
            let from = self
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

    /// How many partitions the replica let go of and has not taken back yet.
    pub(crate) fn detached(&self) -> usize {
        self.detached.len()
    }

    /// Detached partitions whose lane has no transaction running any more: read them again
    /// from the offset returned, then [`Self::reattach`].
    pub(crate) fn rewind_due(&mut self) -> Vec<(Part, i64)> {
        let mut due = Vec::new();
        for (part, &from) in &self.detached {
            if !self.rewinding.contains(part) && !self.lanes.running(part) {
                due.push((part.clone(), from));
            }
        }
        for (part, _) in &due {
            self.rewinding.insert(part.clone());
        }
        due
    }

    /// The consumer was sought back to `from` for `part`; `before` is what was consumed
    /// before. Detached from `from` or later: the replica takes its records again. Detached
    /// earlier: it waits for a seek of its own ([`Self::rewind_due`]). Not detached: it skips
    /// what it had received.
    pub(crate) fn rewound(&mut self, part: &Part, from: i64, before: Option<i64>) {
        self.rewinding.remove(part);
        let floor = match self.detached.get(part).copied() {
            Some(r) if r >= from => {
                self.detached.remove(part);
                Some(r)
            }
            Some(_) => None,
            None => before,
        };
        if let Some(f) = floor {
            raise_floor(&mut self.floor, part, f);
        }
    }

    /// Forgets a revoked partition's queued batches. A running apply may still commit them:
    /// its offsets row is locked and only moves forward, so the new owner is not harmed.
    pub(crate) fn revoke(&mut self, part: &Part) {
        self.floor.remove(part);
        self.detached.remove(part);
        self.rewinding.remove(part);
        self.lanes.drop_pending(part);
    }
}

/// One transaction, retried while the database cannot take it.
async fn apply(
    replicator: &PgReplicator,
    group: &str,
    batches: &[ChangeBatch],
    telemetry: &Telemetry,
) -> Result<Vec<Applied>, ReplicaError> {
    let mut began = Instant::now();
    let applied = retrying(
        Backoff::DEFAULT,
        telemetry,
        Some(REPLICA),
        "replica apply",
        || {
            began = Instant::now();
            replicator.apply(group, batches)
        },
    )
    .await?;
    committed(telemetry, replicator, batches, began.elapsed());
    Ok(applied)
}

/// Metrics of one committed transaction.
fn committed(
    telemetry: &Telemetry,
    replicator: &PgReplicator,
    batches: &[ChangeBatch],
    took: Duration,
) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let m = &telemetry.metrics;
    m.replica_commit_seconds.observe(took.as_secs_f64());
    for (counts, family) in [
        (replicator.take_rounded(), &m.replica_values_rounded),
        (replicator.take_unknown(), &m.replica_values_unknown),
    ] {
        for r in counts {
            family
                .get_or_create(&TableColumnLabels {
                    table: r.table,
                    column: r.column,
                })
                .inc_by(r.values);
        }
    }
    let now = chrono::Utc::now().timestamp_millis();
    let mut rows = 0;
    for b in batches {
        let n = b.rows.num_rows();
        rows += n;
        m.written
            .get_or_create(&SinkTopicLabels {
                sink: REPLICA,
                topic: b.topic.to_string(),
            })
            .inc_by(n as u64);
        // Source commit to replica commit, for rows that carry the source's time.
        let source_ts = b
            .rows
            .column_by_name("source")
            .and_then(|c| c.as_struct_opt())
            .and_then(|s| s.column_by_name("ts_ms"))
            .and_then(|c| c.as_primitive_opt::<Int64Type>());
        if let Some(ts) = source_ts {
            for t in ts.iter().flatten() {
                m.replica_latency_seconds
                    .observe((now - t).max(0) as f64 / 1000.0);
            }
        }
    }
    m.replica_batch_rows.observe(rows as f64);
}

/// Looks up where the replica stands, from the replica's own offsets table.
#[derive(Clone)]
pub(crate) struct ReplicaOffsets {
    replicator: Arc<PgReplicator>,
    group: String,
    telemetry: Arc<Telemetry>,
}

impl ReplicaOffsets {
    /// The replica's next offset for a partition, retried while the database is unreachable.
    pub(crate) async fn next_offset(
        &self,
        topic: &str,
        partition: i32,
    ) -> anyhow::Result<Option<i64>> {
        let telemetry: &Telemetry = &self.telemetry;
        let partitions = [partition];
        let found = retrying(
            Backoff::DEFAULT,
            telemetry,
            Some(REPLICA),
            "reading the replica's offsets",
            || {
                self.replicator
                    .next_offsets(&self.group, topic, &partitions)
            },
        )
        .await?;
        Ok(found.get(&partition).copied())
    }
}

/// Raises a partition's floor to `to` (never lowers it).
pub(crate) fn raise_floor(floors: &mut HashMap<Part, i64>, part: &Part, to: i64) {
    let floor = floors.entry(part.clone()).or_insert(to);
    *floor = (*floor).max(to);
}

/// The rows of `batch` at or above `floor` (rows are in offset order).
pub(crate) fn skip_below(batch: &ChangeBatch, floor: i64) -> Option<ChangeBatch> {
    use arrow_array::cast::AsArray;
    let offsets = batch
        .rows
        .column_by_name("__offset")?
        .as_primitive_opt::<arrow_array::types::Int64Type>()?;
    let from = offsets.values().partition_point(|&o| o < floor);
    if from >= offsets.len() {
        return None;
    }
    let mut out = batch.clone();
    out.rows = batch.rows.slice(from, offsets.len() - from);
    out.first_offset = offsets.value(from);
    Some(out)
}

/// A batch of rows at `offsets` (an `__offset` column only), for the unit tests.
#[cfg(test)]
fn test_batch(topic: &str, partition: i32, offsets: std::ops::Range<i64>) -> ChangeBatch {
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    let schema = Schema::new(vec![Field::new("__offset", DataType::Int64, false)]);
    let values: Vec<i64> = offsets.clone().collect();
    ChangeBatch {
        topic: Arc::from(topic),
        partition,
        first_offset: offsets.start,
        last_offset: offsets.end - 1,
        key_schema: None,
        value_schema: None,
        shape: lakesink_schema_registry::ValueShape::KeyOnly,
        rows: RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from(values))])
            .expect("batch"),
    }
}
