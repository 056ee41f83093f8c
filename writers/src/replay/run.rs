//! Running a plan: partitions in parallel, each read ahead by one task and applied in offset
//! order, one transaction (with the partition's offset) at a time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lakesink_model::{Backoff, Classify, Observe, System, retrying};
use lakesink_schema_registry::ChangeBatch;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::plan::{PartitionPlan, Plan, RawLayer};
use super::read::{Cursor, SegmentRows, read_segment};
use super::{Problem, ProblemKind};
use crate::postgres::{PgReplicator, ReplicaError};

/// Retries of one transaction while the replica is unavailable: about a minute.
const RETRY: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(10),
    attempts: Some(10),
};

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The offsets group: the live service's `kafka.group-id`, so it takes over from here.
    pub group: String,
    /// Partitions replayed at once.
    pub parallelism: usize,
    /// Rows and bytes (Arrow memory) per transaction, at most.
    pub tx_rows: usize,
    pub tx_bytes: usize,
    /// Go on past bad input (reported in the summary) instead of stopping at it.
    pub continue_on_error: bool,
    /// Set to stop at the next transaction boundary (SIGINT).
    pub stop: Arc<AtomicBool>,
    /// Counters, for a progress display.
    pub stats: Arc<Stats>,
}

/// Counters of a running replay.
#[derive(Debug, Default)]
pub struct Stats {
    pub files: AtomicU64,
    pub segments: AtomicU64,
    pub bytes: AtomicU64,
    /// Rows in the files read.
    pub rows_read: AtomicU64,
    /// Rows applied to the replica (committed).
    pub rows_applied: AtomicU64,
    pub transactions: AtomicU64,
    pub partitions_done: AtomicU64,
}

/// Where a partition ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDone {
    pub topic: String,
    pub partition: i32,
    /// The replica's next offset for it now: the live service resumes from here.
    pub next_offset: Option<i64>,
    pub rows_applied: u64,
    /// Every planned segment was replayed.
    pub complete: bool,
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct Summary {
    pub partitions: Vec<PartitionDone>,
    pub problems: Vec<Problem>,
    /// It stopped before the end: on a problem, or when asked to.
    pub stopped: bool,
    pub elapsed: Duration,
    pub rows_read: u64,
    pub rows_applied: u64,
    pub files: u64,
    pub bytes: u64,
    pub transactions: u64,
}

struct Shared {
    raw: Arc<RawLayer>,
    replicator: Arc<PgReplicator>,
    opts: Options,
    problems: Mutex<Vec<Problem>>,
    /// A problem stops everything (without `continue_on_error`).
    halted: AtomicBool,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.halted.load(Ordering::Relaxed) || self.opts.stop.load(Ordering::Relaxed)
    }

    fn report(&self, p: Problem) {
        warn!(problem = %p, "replay");
        if let Ok(mut ps) = self.problems.lock() {
            ps.push(p);
        }
    }

    /// Reports `p`; without `continue_on_error` (or when nothing can go on), stops all.
    fn fail(&self, p: Problem) {
        if !self.opts.continue_on_error || p.kind == ProblemKind::Unavailable {
            self.halted.store(true, Ordering::Relaxed);
        }
        self.report(p);
    }
}

/// Runs `plan`. Problems found while planning stop it before anything is applied, unless
/// `continue_on_error`.
pub async fn run(
    raw: Arc<RawLayer>,
    plan: Plan,
    replicator: Arc<PgReplicator>,
    opts: Options,
) -> Summary {
    let started = Instant::now();
    let stats = opts.stats.clone();
    let mut summary = Summary::default();
    if !plan.problems.is_empty() && !opts.continue_on_error {
        summary.problems = plan.problems;
        summary.stopped = true;
        return summary;
    }
    // Streams of partitions, balanced by rows (largest first onto the lightest stream).
    let streams = opts.parallelism.max(1).min(plan.partitions.len().max(1));
    let mut parts = plan.partitions;
    parts.sort_by_key(|p| std::cmp::Reverse(p.rows()));
    let mut groups: Vec<(u64, Vec<PartitionPlan>)> =
        (0..streams).map(|_| (0, Vec::new())).collect();
    for p in parts {
        if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
            g.0 += p.rows();
            g.1.push(p);
        }
    }
    let shared = Arc::new(Shared {
        raw,
        replicator,
        opts,
        problems: Mutex::new(plan.problems),
        halted: AtomicBool::new(false),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (_, parts) in groups.into_iter().filter(|g| !g.1.is_empty()) {
        let shared = shared.clone();
        tasks.spawn(async move { replay_stream(&shared, parts).await });
    }
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(done) => summary.partitions.extend(done),
            Err(e) => {
                shared.halted.store(true, Ordering::Relaxed);
                summary.problems.push(Problem {
                    kind: ProblemKind::Unavailable,
                    topic: String::new(),
                    partition: -1,
                    offsets: None,
                    key: None,
                    detail: format!("a replay task failed: {e}"),
                });
            }
        }
    }
    summary
        .partitions
        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    if let Ok(mut ps) = shared.problems.lock() {
        summary.problems.splice(0..0, ps.drain(..));
    }
    summary.stopped = shared.stopping() || summary.partitions.iter().any(|p| !p.complete);
    summary.elapsed = started.elapsed();
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    summary.rows_read = get(&stats.rows_read);
    summary.rows_applied = get(&stats.rows_applied);
    summary.files = get(&stats.files);
    summary.bytes = get(&stats.bytes);
    summary.transactions = get(&stats.transactions);
    summary
}

/// Batches read but not applied yet, with the file each came from.
#[derive(Default)]
struct Pending {
    batches: VecDeque<(ChangeBatch, Arc<str>)>,
    rows: usize,
    bytes: usize,
}

impl Pending {
    fn push(&mut self, seg: SegmentRows) {
        for (b, k) in seg.batches.into_iter().zip(seg.keys) {
            self.rows += b.rows.num_rows();
            self.bytes += slice_bytes(&b);
            self.batches.push_back((b, k));
        }
    }

    fn pop(&mut self) -> Option<(ChangeBatch, Arc<str>)> {
        let x = self.batches.pop_front()?;
        self.rows -= x.0.rows.num_rows();
        self.bytes -= slice_bytes(&x.0);
        Some(x)
    }
}

/// The bytes of a batch's own rows: batches are slices of a file's columns, whose whole
/// buffers `get_array_memory_size` would count for every slice.
fn slice_bytes(b: &ChangeBatch) -> usize {
    b.rows
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum()
}

/// One partition of a stream: its reader, what it read, where it stands.
struct Lane {
    rx: mpsc::Receiver<Result<SegmentRows, Problem>>,
    reader: tokio::task::JoinHandle<bool>,
    pending: Pending,
    /// The reader may send more.
    open: bool,
    done: PartitionDone,
}

impl Lane {
    fn start(shared: &Arc<Shared>, part: PartitionPlan) -> Self {
        let (tx, rx) = mpsc::channel::<Result<SegmentRows, Problem>>(1);
        let done = PartitionDone {
            topic: part.topic.clone(),
            partition: part.partition,
            next_offset: part.stored,
            rows_applied: 0,
            complete: false,
        };
        let shared = shared.clone();
        let reader = tokio::spawn(async move {
            let mut cursor = Cursor::new(&part);
            let skip_bad = shared.opts.continue_on_error;
            for seg in &part.segments {
                if cursor.done || shared.stopping() {
                    break;
                }
                let r = read_segment(&shared.raw.store, &part, seg, &mut cursor, skip_bad).await;
                let fatal = r
                    .as_ref()
                    .is_err_and(|p| !skip_bad || p.kind == ProblemKind::Unavailable);
                if tx.send(r).await.is_err() || fatal {
                    return false;
                }
            }
            true
        });
        Self {
            rx,
            reader,
            pending: Pending::default(),
            open: true,
            done,
        }
    }
}

/// Replays a set of partitions as one stream of transactions, each taking batches from every
/// partition in turn (as the live path's transactions mix its partitions), each partition's
/// batches in offset order.
async fn replay_stream(shared: &Arc<Shared>, parts: Vec<PartitionPlan>) -> Vec<PartitionDone> {
    let opts = &shared.opts;
    let stats = &opts.stats;
    let mut lanes: Vec<Lane> = parts.into_iter().map(|p| Lane::start(shared, p)).collect();
    let mut own_problem = false;
    'stream: loop {
        // Every open partition holding less than its share of a transaction reads on.
        let open = lanes.iter().filter(|l| l.open).count().max(1);
        let share = (opts.tx_rows / open).max(1);
        for lane in lanes
            .iter_mut()
            .filter(|l| l.open && l.pending.rows < share)
        {
            match lane.rx.recv().await {
                None => lane.open = false,
                Some(Err(p)) => {
                    if !opts.continue_on_error || p.kind == ProblemKind::Unavailable {
                        own_problem = true;
                        lane.open = false;
                    }
                    shared.fail(p);
                }
                Some(Ok(mut seg)) => {
                    stats.files.fetch_add(seg.files as u64, Ordering::Relaxed);
                    stats.segments.fetch_add(1, Ordering::Relaxed);
                    stats.bytes.fetch_add(seg.bytes, Ordering::Relaxed);
                    stats.rows_read.fetch_add(seg.rows_read, Ordering::Relaxed);
                    for p in std::mem::take(&mut seg.problems) {
                        shared.report(p);
                    }
                    lane.pending.push(seg);
                }
            }
            if own_problem || shared.stopping() {
                break 'stream;
            }
        }
        let rows: usize = lanes.iter().map(|l| l.pending.rows).sum();
        let bytes: usize = lanes.iter().map(|l| l.pending.bytes).sum();
        let any_open = lanes.iter().any(|l| l.open);
        if rows == 0 && !any_open {
            break;
        }
        if rows >= opts.tx_rows || bytes >= opts.tx_bytes || !any_open {
            let batches = take(&mut lanes, opts.tx_rows, opts.tx_bytes);
            if !apply(shared, &batches, &mut lanes).await || shared.stopping() {
                break;
            }
        }
    }
    // What was read before this stream's own problem is applied; when stopping for any other
    // reason, nothing more is.
    if own_problem || !shared.stopping() {
        while lanes.iter().any(|l| !l.pending.batches.is_empty()) {
            let batches = take(&mut lanes, opts.tx_rows, opts.tx_bytes);
            if !apply(shared, &batches, &mut lanes).await {
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(lanes.len());
    for mut lane in lanes {
        lane.rx.close();
        let read_all = (&mut lane.reader).await.unwrap_or(false);
        lane.done.complete =
            read_all && !own_problem && !shared.stopping() && lane.pending.batches.is_empty();
        stats.partitions_done.fetch_add(1, Ordering::Relaxed);
        debug!(topic = %lane.done.topic, partition = lane.done.partition,
            next = ?lane.done.next_offset, rows = lane.done.rows_applied, "partition replayed");
        out.push(lane.done);
    }
    out
}

/// The next transaction's batches: one batch from each partition in turn, up to the limits,
/// at least one batch.
fn take(lanes: &mut [Lane], rows: usize, bytes: usize) -> Vec<(ChangeBatch, Arc<str>)> {
    let mut out = Vec::new();
    let (mut r, mut b) = (0, 0);
    'fill: loop {
        let mut any = false;
        for lane in lanes.iter_mut() {
            let Some((batch, _)) = lane.pending.batches.front() else {
                continue;
            };
            let (br, bb) = (batch.rows.num_rows(), slice_bytes(batch));
            if !out.is_empty() && (r + br > rows || b + bb > bytes) {
                break 'fill;
            }
            if let Some(x) = lane.pending.pop() {
                r += br;
                b += bb;
                out.push(x);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    out
}

/// Applies one transaction's batches; false when it could not (the problem is reported).
async fn apply(shared: &Shared, batches: &[(ChangeBatch, Arc<str>)], lanes: &mut [Lane]) -> bool {
    let only: Vec<ChangeBatch> = batches.iter().map(|(b, _)| b.clone()).collect();
    match apply_retrying(shared, &only, lanes).await {
        Ok(()) => true,
        Err(e) if e.retryable() => {
            shared.fail(refused(batches, &e, ProblemKind::Unavailable));
            false
        }
        Err(e) if shared.opts.continue_on_error && batches.len() > 1 => {
            // Find the batches the replica refuses; apply the others.
            debug!(error = %e, "a transaction was refused: applying its batches one by one");
            for one in batches {
                if !Box::pin(apply(shared, std::slice::from_ref(one), lanes)).await
                    && shared.stopping()
                {
                    return false;
                }
            }
            true
        }
        Err(e) => {
            shared.fail(refused(batches, &e, ProblemKind::Refused));
            false
        }
    }
}

async fn apply_retrying(
    shared: &Shared,
    batches: &[ChangeBatch],
    lanes: &mut [Lane],
) -> Result<(), ReplicaError> {
    let applied = retrying(RETRY, shared, None, "replay apply", || {
        shared.replicator.apply(&shared.opts.group, batches)
    })
    .await?;
    let stats = &shared.opts.stats;
    for lane in lanes.iter_mut() {
        let d = &mut lane.done;
        let rows: usize = batches
            .iter()
            .filter(|b| *b.topic == *d.topic && b.partition == d.partition)
            .map(|b| b.rows.num_rows())
            .sum();
        d.rows_applied += rows as u64;
        stats.rows_applied.fetch_add(rows as u64, Ordering::Relaxed);
        if let Some(a) = applied
            .iter()
            .find(|a| a.topic == d.topic && a.partition == d.partition)
        {
            d.next_offset = Some(a.next_offset);
        }
    }
    stats.transactions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A replay retries an unavailable database a while, then reports it; it stops retrying when
/// it is stopping.
impl Observe for Shared {
    fn retrying(&self, _: Option<&'static str>, _: System, _: &str) {}
    fn recovered(&self, _: Option<&'static str>, _: System) {}
    fn give_up(&self) -> bool {
        self.stopping()
    }
}

/// The problem for a refused transaction: the partition and offsets the error names, and
/// their file.
fn refused(batches: &[(ChangeBatch, Arc<str>)], e: &ReplicaError, kind: ProblemKind) -> Problem {
    let (first, last) = (&batches[0].0, &batches[batches.len() - 1].0);
    let (topic, partition, offsets) = match e {
        ReplicaError::BadData { at, .. } | ReplicaError::Rejected { at, .. } => {
            (at.topic.clone(), at.partition, at.offsets)
        }
        _ => (
            first.topic.to_string(),
            first.partition,
            (first.first_offset, last.last_offset),
        ),
    };
    let key = batches
        .iter()
        .find(|(b, _)| {
            *b.topic == *topic
                && b.partition == partition
                && b.first_offset <= offsets.0
                && offsets.0 <= b.last_offset
        })
        .or(batches.first())
        .map(|(_, k)| k.to_string());
    Problem {
        kind,
        topic,
        partition,
        offsets: Some(offsets),
        key,
        detail: e.to_string(),
    }
}
