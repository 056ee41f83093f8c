//! Running a plan: partitions in parallel, each read ahead by one task and applied in offset
//! order, one transaction (with the partition's offset) at a time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lakesink_schema_registry::ChangeBatch;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::plan::{PartitionPlan, Plan, RawLayer};
use super::read::{Cursor, SegmentRows, read_segment};
use super::{Problem, ProblemKind};
use crate::postgres::{PgReplicator, ReplicaError};

/// Attempts of one transaction while the replica is unavailable.
const RETRIES: u32 = 10;
const MAX_BACKOFF: Duration = Duration::from_secs(10);

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
    let workers = opts.parallelism.max(1).min(plan.partitions.len().max(1));
    let shared = Arc::new(Shared {
        raw,
        replicator,
        opts,
        problems: Mutex::new(plan.problems),
        halted: AtomicBool::new(false),
    });
    // Largest first, so the last partitions to finish are short ones.
    let mut parts = plan.partitions;
    parts.sort_by_key(|p| std::cmp::Reverse(p.rows()));
    let queue = Arc::new(Mutex::new(VecDeque::from(parts)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (shared, queue) = (shared.clone(), queue.clone());
        tasks.spawn(async move {
            let mut done = Vec::new();
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(part) = next else { break };
                if shared.stopping() {
                    done.push(PartitionDone {
                        topic: part.topic.clone(),
                        partition: part.partition,
                        next_offset: part.stored,
                        rows_applied: 0,
                        complete: false,
                    });
                    continue;
                }
                done.push(replay_partition(&shared, part).await);
            }
            done
        });
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

    /// The next transaction's batches: up to the limits, at least one batch.
    fn take(&mut self, rows: usize, bytes: usize) -> Vec<(ChangeBatch, Arc<str>)> {
        let mut out = Vec::new();
        let (mut r, mut b) = (0, 0);
        while let Some((batch, _)) = self.batches.front() {
            let (br, bb) = (batch.rows.num_rows(), slice_bytes(batch));
            if !out.is_empty() && (r + br > rows || b + bb > bytes) {
                break;
            }
            r += br;
            b += bb;
            if let Some(x) = self.batches.pop_front() {
                out.push(x);
            }
        }
        self.rows -= r;
        self.bytes -= b;
        out
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

async fn replay_partition(shared: &Arc<Shared>, part: PartitionPlan) -> PartitionDone {
    let opts = &shared.opts;
    let stats = &opts.stats;
    let mut done = PartitionDone {
        topic: part.topic.clone(),
        partition: part.partition,
        next_offset: part.stored,
        rows_applied: 0,
        complete: false,
    };
    let (tx, mut rx) = mpsc::channel::<Result<SegmentRows, Problem>>(1);
    let reader = {
        let shared = shared.clone();
        let part = part.clone();
        tokio::spawn(async move {
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
        })
    };
    let mut pending = Pending::default();
    let mut own_problem = false;
    while let Some(r) = rx.recv().await {
        match r {
            Err(p) => {
                own_problem |= !opts.continue_on_error || p.kind == ProblemKind::Unavailable;
                shared.fail(p);
            }
            Ok(mut seg) => {
                stats.files.fetch_add(seg.files as u64, Ordering::Relaxed);
                stats.segments.fetch_add(1, Ordering::Relaxed);
                stats.bytes.fetch_add(seg.bytes, Ordering::Relaxed);
                stats.rows_read.fetch_add(seg.rows_read, Ordering::Relaxed);
                for p in std::mem::take(&mut seg.problems) {
                    shared.report(p);
                }
                pending.push(seg);
            }
        }
        if own_problem || shared.stopping() {
            break;
        }
        while pending.rows >= opts.tx_rows || pending.bytes >= opts.tx_bytes {
            let batches = pending.take(opts.tx_rows, opts.tx_bytes);
            if !apply(shared, &batches, &mut done).await || shared.stopping() {
                break;
            }
        }
        if shared.stopping() {
            break;
        }
    }
    drop(rx);
    let read_all = reader.await.unwrap_or(false);
    // What was read before this partition's own problem is applied; when stopping for any
    // other reason, nothing more is.
    if own_problem || !shared.stopping() {
        while !pending.batches.is_empty() {
            let batches = pending.take(opts.tx_rows, opts.tx_bytes);
            if !apply(shared, &batches, &mut done).await {
                break;
            }
        }
    }
    done.complete = read_all && !own_problem && !shared.stopping() && pending.batches.is_empty();
    stats.partitions_done.fetch_add(1, Ordering::Relaxed);
    debug!(topic = %done.topic, partition = done.partition, next = ?done.next_offset,
        rows = done.rows_applied, "partition replayed");
    done
}

/// Applies one transaction's batches; false when it could not (the problem is reported).
async fn apply(
    shared: &Shared,
    batches: &[(ChangeBatch, Arc<str>)],
    done: &mut PartitionDone,
) -> bool {
    let only: Vec<ChangeBatch> = batches.iter().map(|(b, _)| b.clone()).collect();
    match apply_retrying(shared, &only, done).await {
        Ok(()) => true,
        Err(e) if e.is_retryable() => {
            shared.fail(refused(batches, &e, ProblemKind::Unavailable));
            false
        }
        Err(e) if shared.opts.continue_on_error && batches.len() > 1 => {
            // Find the batches the replica refuses; apply the others.
            debug!(error = %e, "a transaction was refused: applying its batches one by one");
            for one in batches {
                if !Box::pin(apply(shared, std::slice::from_ref(one), done)).await
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
    done: &mut PartitionDone,
) -> Result<(), ReplicaError> {
    let mut backoff = Duration::from_millis(200);
    let mut tries = 0;
    loop {
        match shared.replicator.apply(&shared.opts.group, batches).await {
            Ok(applied) => {
                let rows: usize = batches.iter().map(|b| b.rows.num_rows()).sum();
                done.rows_applied += rows as u64;
                for a in applied {
                    if a.topic == done.topic && a.partition == done.partition {
                        done.next_offset = Some(a.next_offset);
                    }
                }
                let stats = &shared.opts.stats;
                stats.rows_applied.fetch_add(rows as u64, Ordering::Relaxed);
                stats.transactions.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) if e.is_retryable() && tries < RETRIES && !shared.stopping() => {
                warn!(error = %e, retry_in = ?backoff, "replica unavailable; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The problem for a refused transaction: the offsets the error names, and their file.
fn refused(batches: &[(ChangeBatch, Arc<str>)], e: &ReplicaError, kind: ProblemKind) -> Problem {
    let (first, last) = (&batches[0].0, &batches[batches.len() - 1].0);
    let offsets = match e {
        ReplicaError::BadData { at, .. } | ReplicaError::Rejected { at, .. } => at.offsets,
        _ => (first.first_offset, last.last_offset),
    };
    let key = batches
        .iter()
        .find(|(b, _)| b.first_offset <= offsets.0 && offsets.0 <= b.last_offset)
        .or(batches.first())
        .map(|(_, k)| k.to_string());
    Problem {
        kind,
        topic: first.topic.to_string(),
        partition: first.partition,
        offsets: Some(offsets),
        key,
        detail: e.to_string(),
    }
}
