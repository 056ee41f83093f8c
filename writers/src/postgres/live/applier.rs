//! Applying batches through the lanes: the machinery the live replica and replay share.
//! Batches queue in their partition's lane; each idle lane starts one transaction over what it
//! holds (up to a [`Limit`]), retried while the database is unavailable. With a [`Rejects`],
//! a transaction refused for bad data is split until the refused records are found, each
//! handed to it and stepped over ([`super::tolerate`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use lakesink_model::{Backoff, Fault, retrying};
use lakesink_schema_registry::ChangeBatch;
use tokio::task::JoinSet;

use super::lanes::{Lanes, Limit, Measure};
use super::{REPLICA, Rejects, tolerate};
use crate::postgres::{Applied, PgReplicator, ReplicaError};
use crate::sink::{Committed, Meter, Receipt, SinkError, TopicPartition as Part};

/// The records of one partition a transaction covers.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) part: Part,
    pub(crate) first: i64,
    /// The offset after the last: once committed, the replica's next offset for the
    /// partition is at least this.
    pub(crate) next: i64,
}

/// A committed transaction.
pub(crate) struct Done {
    pub(crate) lane: usize,
    /// Rows applied per partition (records handed to the [`Rejects`] are not counted).
    pub(crate) receipts: Vec<Receipt>,
    pub(crate) spans: Vec<Span>,
}

/// A transaction that failed, and what it covered.
pub(crate) struct Failed {
    pub(crate) error: SinkError,
    pub(crate) spans: Vec<Span>,
    /// Rows committed before it failed: a transaction split to find refused records commits
    /// its parts one by one.
    pub(crate) receipts: Vec<Receipt>,
}

/// Rows committed, and the error that stopped the rest.
type Partial = (Vec<Receipt>, SinkError);

type Running = JoinSet<(usize, Vec<Span>, Result<Vec<Receipt>, Partial>)>;

pub(crate) struct Applier {
    replicator: Arc<PgReplicator>,
    group: Arc<str>,
    pub(crate) lanes: Lanes,
    running: Running,
    dead: Option<Arc<dyn Rejects>>,
    meter: Arc<dyn Meter>,
    retry: Backoff,
    limit: Limit,
}

impl Applier {
    /// `lanes` transactions at most at once (one connection each), each retried as `retry`
    /// says and taking up to `limit` of its lane, bytes counted by `bytes`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        replicator: Arc<PgReplicator>,
        group: &str,
        lanes: usize,
        meter: Arc<dyn Meter>,
        dead: Option<Arc<dyn Rejects>>,
        retry: Backoff,
        limit: Limit,
        bytes: Measure,
    ) -> Self {
        Self {
            replicator,
            group: group.into(),
            lanes: Lanes::new(lanes, bytes),
            running: JoinSet::new(),
            dead,
            meter,
            retry,
            limit,
        }
    }

    pub(crate) fn replicator(&self) -> &Arc<PgReplicator> {
        &self.replicator
    }

    /// Queues a batch in its partition's lane.
    pub(crate) fn push(&mut self, batch: ChangeBatch) {
        self.lanes.push(batch);
    }

    /// Whether a transaction runs.
    pub(crate) fn applying(&self) -> bool {
        !self.running.is_empty()
    }

    /// Starts a transaction in every idle lane with work, except a lane holding less than a
    /// transaction while `hold(lane)` says more is coming for it.
    pub(crate) fn start(&mut self, hold: impl Fn(usize) -> bool) {
        for (lane, batches) in self.lanes.take_ready(self.limit, hold) {
            let spans = spans(&batches);
            let replicator = self.replicator.clone();
            let group = self.group.clone();
            let meter = self.meter.clone();
            let dead = self.dead.clone();
            let retry = self.retry;
            self.running.spawn(async move {
                let applied = match &dead {
                    Some(dead) => {
                        let mut applied = tolerate::Applied::new();
                        let done = tolerate::apply_tolerating(
                            &replicator,
                            &group,
                            &batches,
                            &**dead,
                            &*meter,
                            retry,
                            &mut applied,
                        )
                        .await;
                        let receipts = tolerate::into_receipts(applied);
                        match done {
                            Ok(()) => Ok(receipts),
                            Err(e) => Err((receipts, e)),
                        }
                    }
                    None => apply(&replicator, &group, &batches, &*meter, retry)
                        .await
                        .map(|_| receipts(&batches))
                        .map_err(|e| (Vec::new(), SinkError::in_sink(REPLICA, e))),
                };
                (lane, spans, applied)
            });
        }
    }

    /// Waits for one running transaction; Ok(None) when none runs.
    pub(crate) async fn finish(&mut self) -> Result<Option<Done>, Failed> {
        let Some(done) = self.running.join_next().await else {
            return Ok(None);
        };
        let (lane, spans, receipts) = done.map_err(|e| Failed {
            error: SinkError::with_fault(Some(REPLICA), Fault::Bug, e),
            spans: Vec::new(),
            receipts: Vec::new(),
        })?;
        self.lanes.done(lane);
        let receipts = match receipts {
            Ok(r) => r,
            Err((receipts, error)) => {
                return Err(Failed {
                    error,
                    spans,
                    receipts,
                });
            }
        };
        tracing::debug!(
            lane,
            partitions = receipts.len(),
            "replica transaction committed"
        );
        Ok(Some(Done {
            lane,
            receipts,
            spans,
        }))
    }
}

/// One transaction, retried while the database cannot take it.
pub(super) async fn apply(
    replicator: &PgReplicator,
    group: &str,
    batches: &[ChangeBatch],
    meter: &dyn Meter,
    retry: Backoff,
) -> Result<Vec<Applied>, ReplicaError> {
    let mut began = Instant::now();
    let applied = retrying(retry, meter, Some(REPLICA), "replica apply", || {
        began = Instant::now();
        replicator.apply(group, batches)
    })
    .await?;
    meter.replica_committed(&Committed {
        took: began.elapsed(),
        batches,
        rounded: replicator.take_rounded(),
        unknown: replicator.take_unknown(),
        stale: replicator.take_stale(),
        bytes: replicator.take_copied_bytes(),
    });
    Ok(applied)
}

/// Rows per partition of a committed transaction.
pub(super) fn receipts(batches: &[ChangeBatch]) -> Vec<Receipt> {
    let mut rows: HashMap<Part, u64> = HashMap::new();
    for b in batches {
        *rows
            .entry(Part::new(b.topic.clone(), b.partition))
            .or_default() += b.rows.num_rows() as u64;
    }
    rows.into_iter()
        .map(|(part, rows)| Receipt { part, rows })
        .collect()
}

/// Per partition, the records `batches` cover, in the order the partitions come.
fn spans(batches: &[ChangeBatch]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    let mut at: HashMap<Part, usize> = HashMap::new();
    for b in batches {
        let next = b.last_offset.saturating_add(1);
        let part = Part::new(b.topic.clone(), b.partition);
        match at.get(&part) {
            Some(&i) => {
                let s = &mut out[i];
                s.first = s.first.min(b.first_offset);
                s.next = s.next.max(next);
            }
            None => {
                at.insert(part.clone(), out.len());
                out.push(Span {
                    part,
                    first: b.first_offset,
                    next,
                });
            }
        }
    }
    out
}
