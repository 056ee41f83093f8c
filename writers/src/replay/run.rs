//! Running a plan: each partition read ahead by a task of its own, and applied through the
//! live replica's lanes ([`crate::postgres::live::Applier`]): partitions spread over
//! `parallelism` lanes, one transaction at a time per lane, each partition in offset order,
//! every transaction storing its partitions' next offsets. With `continue_on_error`, a
//! transaction refused for bad data is split as the live path splits it for its dead-letter
//! topic, and each refused record is reported instead.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use lakesink_model::{Backoff, Classify, Observe, System};
use lakesink_schema_registry::ChangeBatch;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::plan::{PartitionPlan, Plan, RawLayer};
use super::read::{Cursor, SegmentRows, read_segment};
use super::{Problem, ProblemKind};
use crate::postgres::live::{Applier, Done, Failed, Limit, slice_bytes};
use crate::postgres::{PgReplicator, Rejects, ReplicaError};
use crate::sink::{Meter, Receipt, TopicPartition as Part};

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
    opts: Options,
    problems: Mutex<Vec<Problem>>,
    /// A problem stops everything (without `continue_on_error`).
    halted: AtomicBool,
    /// The file each batch handed to the lanes came from, per partition by first offset (with
    /// its last), until its transaction commits: problems name it.
    files: Mutex<HashMap<Part, Files>>,
}

/// A partition's batches handed over and not committed: first offset → (last offset, file).
type Files = BTreeMap<i64, (i64, Arc<str>)>;

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

    /// The file of a partition's record, if one handed to the lanes holds it.
    fn file_of(&self, part: &Part, offset: i64) -> Option<Arc<str>> {
        let files = self.files.lock().ok()?;
        let (_, (last, key)) = files.get(part)?.range(..=offset).next_back()?;
        (offset <= *last).then(|| key.clone())
    }

    fn handed(&self, b: &ChangeBatch, key: Arc<str>) {
        if let Ok(mut files) = self.files.lock() {
            files
                .entry(Part::new(b.topic.clone(), b.partition))
                .or_default()
                .insert(b.first_offset, (b.last_offset, key));
        }
    }

    /// A partition's records below `next` are committed: their files are not needed.
    fn committed(&self, part: &Part, next: i64) {
        if let Ok(mut files) = self.files.lock()
            && let Some(f) = files.get_mut(part)
        {
            f.retain(|_, (last, _)| *last >= next);
        }
    }
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

impl Meter for Shared {}

/// With `continue_on_error`: a record the replica refuses is reported, with its file, and
/// stepped over (the replica's offset moves past it, as past a dead-lettered record).
struct Report(Arc<Shared>);

impl Rejects for Report {
    fn reject<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
        offset: i64,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), Box<dyn Error + Send + Sync>>> {
        let key = self.0.file_of(&Part::new(topic, partition), offset);
        self.0.report(Problem {
            kind: ProblemKind::Refused,
            topic: topic.to_owned(),
            partition,
            offsets: Some((offset, offset)),
            key: key.map(|k| k.to_string()),
            detail: reason.to_owned(),
        });
        Box::pin(async { Ok(()) })
    }

    fn topic(&self) -> &str {
        "the replay's summary"
    }

    fn logged(&self) -> bool {
        false
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
    let lanes = opts.parallelism.max(1).min(plan.partitions.len().max(1));
    let limit = Limit {
        rows: opts.tx_rows.max(1),
        bytes: opts.tx_bytes.max(1),
    };
    let shared = Arc::new(Shared {
        raw,
        problems: Mutex::new(plan.problems),
        halted: AtomicBool::new(false),
        files: Mutex::default(),
        opts,
    });
    let dead = shared
        .opts
        .continue_on_error
        .then(|| Arc::new(Report(shared.clone())) as Arc<dyn Rejects>);
    let meter: Arc<dyn Meter> = shared.clone();
    let mut applier = Applier::new(
        replicator,
        &shared.opts.group,
        lanes,
        meter,
        dead,
        RETRY,
        limit,
        slice_bytes,
    );
    // Partitions balanced over the lanes by rows, largest first onto the lightest.
    let mut parts = plan.partitions;
    parts.sort_by_key(|p| std::cmp::Reverse(p.rows()));
    let mut load = vec![0u64; lanes];
    for p in &parts {
        let lightest = (0..lanes).min_by_key(|&l| load[l]).unwrap_or(0);
        load[lightest] += p.rows();
        applier
            .lanes
            .place(&Part::new(p.topic.as_str(), p.partition), lightest);
    }
    let mut readers: Vec<Reader> = parts
        .into_iter()
        .map(|p| Reader::start(&shared, p))
        .collect();
    let failed = replay(&shared, &mut applier, &mut readers).await;
    // Whatever stopped it, running transactions end (committed or not) before the summary.
    while let Some(done) = applier.finish().await.transpose() {
        settle(&shared, &mut readers, done);
    }
    read_next_offsets(&applier, &shared.opts.group, &mut readers).await;
    for mut reader in readers {
        reader.rx.close();
        let read_all = (&mut reader.task).await.unwrap_or(false);
        reader.done.complete = read_all
            && !failed
            && !shared.stopping()
            && reader.queue.batches.is_empty()
            && applier.lanes.start_of(&reader.part).is_none();
        stats.partitions_done.fetch_add(1, Ordering::Relaxed);
        debug!(topic = %reader.done.topic, partition = reader.done.partition,
            next = ?reader.done.next_offset, rows = reader.done.rows_applied, "partition replayed");
        summary.partitions.push(reader.done);
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

/// Reads and applies until every partition is done or something stops it; true when a
/// transaction failed (reported).
async fn replay(shared: &Shared, applier: &mut Applier, readers: &mut [Reader]) -> bool {
    let limit = Limit {
        rows: shared.opts.tx_rows.max(1),
        bytes: shared.opts.tx_bytes.max(1),
    };
    loop {
        if shared.stopping() {
            return false;
        }
        hand_over(shared, applier, readers, limit);
        let more = coming(applier, readers);
        applier.start(|lane| more.get(lane).copied().unwrap_or(false));
        // A partition takes its next segment when it has none waiting and its lane holds less
        // than a transaction.
        let wanted: Vec<bool> = readers
            .iter()
            .map(|r| r.open && r.queue.batches.is_empty() && !lane_full(applier, &r.part, limit))
            .collect();
        let reading = wanted.contains(&true);
        if !applier.applying() && !reading {
            // Every lane has started what it holds, and nothing more can come.
            return false;
        }
        // Whichever comes first: a transaction ending, or a segment read.
        let woke = {
            let segments = readers
                .iter_mut()
                .zip(&wanted)
                .enumerate()
                .filter(|(_, (_, w))| **w)
                .map(|(i, (r, _))| Box::pin(async move { (i, r.rx.recv().await) }))
                .collect::<Vec<_>>();
            let segment = async move {
                if segments.is_empty() {
                    std::future::pending().await
                } else {
                    futures::future::select_all(segments).await.0
                }
            };
            tokio::select! {
                done = applier.finish(), if applier.applying() => Woke::Done(done.transpose()),
                (i, segment) = segment => Woke::Read(i, segment),
            }
        };
        match woke {
            Woke::Done(Some(done)) => {
                if !settle(shared, readers, done) {
                    return true;
                }
            }
            Woke::Done(None) => {}
            Woke::Read(i, segment) => {
                if readers[i].receive(shared, segment) {
                    // What was read before the problem is applied, then it stops.
                    return drain(shared, applier, readers).await;
                }
            }
        }
    }
}

enum Woke {
    Done(Option<Result<Done, Failed>>),
    Read(usize, Option<Result<SegmentRows, Problem>>),
}

/// Everything read is handed over and applied (for a reading problem: what was read before
/// it); true when a transaction failed.
async fn drain(shared: &Shared, applier: &mut Applier, readers: &mut [Reader]) -> bool {
    for r in readers.iter_mut() {
        r.open = false;
    }
    let limit = Limit::NONE;
    loop {
        hand_over(shared, applier, readers, limit);
        applier.start(|_| false);
        match applier.finish().await.transpose() {
            Some(done) => {
                if !settle(shared, readers, done) {
                    return true;
                }
            }
            None => return false,
        }
    }
}

/// Each partition's next offset as the replica stores it, where it answers: what the live
/// service resumes from (a transaction that failed after committing part of its work, or
/// another writer, can leave it past what the replay counted).
async fn read_next_offsets(applier: &Applier, group: &str, readers: &mut [Reader]) {
    let mut topics: BTreeMap<Arc<str>, Vec<i32>> = BTreeMap::new();
    for r in readers.iter() {
        topics
            .entry(r.part.topic.clone())
            .or_default()
            .push(r.part.partition);
    }
    for (topic, partitions) in topics {
        match applier
            .replicator()
            .next_offsets(group, &topic, &partitions)
            .await
        {
            Ok(stored) => {
                for r in readers.iter_mut().filter(|r| r.part.topic == topic) {
                    if let Some(&next) = stored.get(&r.part.partition) {
                        r.done.next_offset = Some(next);
                    }
                }
            }
            Err(e) => debug!(error = %e, %topic, "reading the replica's offsets after replay"),
        }
    }
}

/// Whether `part`'s lane holds a transaction's worth already.
fn lane_full(applier: &Applier, part: &Part, limit: Limit) -> bool {
    let lane = applier.lanes.lane_of(part).unwrap_or(0);
    let (rows, bytes) = applier.lanes.pending_in(lane);
    rows >= limit.rows || bytes >= limit.bytes
}

/// Hands what the partitions read to their lanes, one batch from each partition in turn,
/// each lane up to a transaction: a transaction mixes its lane's partitions (rows close in key
/// order across partitions land together), each partition's batches in offset order.
fn hand_over(shared: &Shared, applier: &mut Applier, readers: &mut [Reader], limit: Limit) {
    loop {
        let mut any = false;
        for r in readers.iter_mut() {
            if r.queue.batches.is_empty() || lane_full(applier, &r.part, limit) {
                continue;
            }
            if let Some((batch, key)) = r.queue.pop() {
                shared.handed(&batch, key);
                applier.push(batch);
                any = true;
            }
        }
        if !any {
            return;
        }
    }
}

/// Per lane, whether one of its partitions may still hand it batches.
fn coming(applier: &Applier, readers: &[Reader]) -> Vec<bool> {
    let mut more = vec![false; applier.lanes.count()];
    for r in readers.iter().filter(|r| !r.finished()) {
        if let Some(lane) = applier.lanes.lane_of(&r.part)
            && let Some(m) = more.get_mut(lane)
        {
            *m = true;
        }
    }
    more
}

/// A transaction ended: committed (counted) or failed (reported). False when it failed.
fn settle(shared: &Shared, readers: &mut [Reader], done: Result<Done, Failed>) -> bool {
    let stats = &shared.opts.stats;
    let done = match done {
        Ok(d) => d,
        Err(f) => {
            // Parts of a split transaction may have committed: their rows count.
            count(shared, readers, &f.receipts);
            shared.fail(refused(shared, &f));
            return false;
        }
    };
    count(shared, readers, &done.receipts);
    for r in readers.iter_mut() {
        let d = &mut r.done;
        if let Some(span) = done.spans.iter().find(|s| s.part == r.part) {
            // The replica's offsets only move forward.
            let next = span.next;
            d.next_offset = Some(d.next_offset.map_or(next, |o| o.max(next)));
            shared.committed(&r.part, next);
        }
    }
    debug!(lane = done.lane, "replay transaction committed");
    stats.transactions.fetch_add(1, Ordering::Relaxed);
    true
}

fn count(shared: &Shared, readers: &mut [Reader], receipts: &[Receipt]) {
    for x in receipts {
        if let Some(r) = readers.iter_mut().find(|r| r.part == x.part) {
            r.done.rows_applied += x.rows;
            shared
                .opts
                .stats
                .rows_applied
                .fetch_add(x.rows, Ordering::Relaxed);
        }
    }
}

/// Batches read but not handed to the lanes yet, with the file each came from.
#[derive(Default)]
struct Queue {
    batches: VecDeque<(ChangeBatch, Arc<str>)>,
}

impl Queue {
    fn push(&mut self, seg: SegmentRows) {
        for (b, k) in seg.batches.into_iter().zip(seg.keys) {
            self.batches.push_back((b, k));
        }
    }

    fn pop(&mut self) -> Option<(ChangeBatch, Arc<str>)> {
        self.batches.pop_front()
    }
}

/// One partition: its reading task, what it read, where it stands.
struct Reader {
    part: Part,
    rx: mpsc::Receiver<Result<SegmentRows, Problem>>,
    task: tokio::task::JoinHandle<bool>,
    queue: Queue,
    /// The task may send more.
    open: bool,
    done: PartitionDone,
}

impl Reader {
    fn start(shared: &Arc<Shared>, plan: PartitionPlan) -> Self {
        let (tx, rx) = mpsc::channel::<Result<SegmentRows, Problem>>(1);
        let done = PartitionDone {
            topic: plan.topic.clone(),
            partition: plan.partition,
            next_offset: plan.stored,
            rows_applied: 0,
            complete: false,
        };
        let part = Part::new(plan.topic.as_str(), plan.partition);
        let shared = shared.clone();
        let task = tokio::spawn(async move {
            let mut cursor = Cursor::new(&plan);
            let skip_bad = shared.opts.continue_on_error;
            for seg in &plan.segments {
                if cursor.done || shared.stopping() {
                    break;
                }
                let r = read_segment(&shared.raw.store, &plan, seg, &mut cursor, skip_bad).await;
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
            part,
            rx,
            task,
            queue: Queue::default(),
            open: true,
            done,
        }
    }

    /// Nothing more can come from it.
    fn finished(&self) -> bool {
        !self.open && self.queue.batches.is_empty()
    }

    /// Takes what its task sent; true on a problem that stops the replay.
    fn receive(&mut self, shared: &Shared, got: Option<Result<SegmentRows, Problem>>) -> bool {
        let stats = &shared.opts.stats;
        match got {
            None => self.open = false,
            Some(Err(p)) => {
                let stop = !shared.opts.continue_on_error || p.kind == ProblemKind::Unavailable;
                if stop {
                    self.open = false;
                }
                shared.fail(p);
                return stop;
            }
            Some(Ok(mut seg)) => {
                stats.files.fetch_add(seg.files as u64, Ordering::Relaxed);
                stats.segments.fetch_add(1, Ordering::Relaxed);
                stats.bytes.fetch_add(seg.bytes, Ordering::Relaxed);
                stats.rows_read.fetch_add(seg.rows_read, Ordering::Relaxed);
                for p in std::mem::take(&mut seg.problems) {
                    shared.report(p);
                }
                self.queue.push(seg);
            }
        }
        false
    }
}

/// The problem for a failed transaction: the partition and offsets the replica's error names
/// (else the first partition the transaction covered), and their file.
fn refused(shared: &Shared, f: &Failed) -> Problem {
    let e = &f.error;
    // A task that failed stops the replay as an outage does.
    let kind = if e.retryable() || e.fault() == lakesink_model::Fault::Bug {
        ProblemKind::Unavailable
    } else {
        ProblemKind::Refused
    };
    // The replica's own error, under the sink's name.
    let inner = e.source();
    let detail = inner.map_or_else(|| e.to_string(), |s| s.to_string());
    let named = inner
        .and_then(|s| s.downcast_ref::<ReplicaError>())
        .and_then(|r| match r {
            ReplicaError::BadData { at, .. } | ReplicaError::Rejected { at, .. } => Some(at),
            ReplicaError::Unavailable { at, .. } => at.as_ref(),
            _ => None,
        })
        .map(|at| (Part::new(at.topic.as_str(), at.partition), at.offsets));
    let covered = || {
        f.spans
            .first()
            .map(|s| (s.part.clone(), (s.first, s.next - 1)))
    };
    let Some((part, offsets)) = named.or_else(covered) else {
        return Problem {
            kind,
            topic: String::new(),
            partition: -1,
            offsets: None,
            key: None,
            detail,
        };
    };
    Problem {
        kind,
        key: shared.file_of(&part, offsets.0).map(|k| k.to_string()),
        topic: part.topic.to_string(),
        partition: part.partition,
        offsets: Some(offsets),
        detail,
    }
}
