//! Which partitions' batches wait for which transaction: partitions are spread over lanes,
//! a partition stays in its lane, and a lane has at most one transaction in flight, so each
//! partition's records are applied in offset order while lanes commit independently.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use lakesink_schema_registry::ChangeBatch;

use crate::sink::{TopicPartition as Part, keep_below, skip_below};

pub(crate) struct Lanes {
    lanes: Vec<Lane>,
    /// How long a delete ending what a lane holds of its partition waits for the rest of a
    /// primary-key change ([`Lane::take_holding`]); `None`: it does not wait.
    key_change_wait: Option<Duration>,
    /// How a batch's bytes are counted against the bounds.
    bytes: Measure,
    /// Each partition's lane, kept after a revoke: a partition assigned again must not be
    /// applied in a second lane while its old transaction may still run in the first.
    lane_of: HashMap<Part, usize>,
}

#[derive(Default)]
struct Lane {
    pending: Vec<ChangeBatch>,
    /// Rows and bytes of `pending`.
    rows: usize,
    bytes: usize,
    /// First offset per partition of what is pending, and of what is being applied.
    pending_start: HashMap<Part, i64>,
    inflight_start: HashMap<Part, i64>,
    /// When its transaction started, while one runs.
    running_since: Option<Instant>,
    /// Per partition, a delete held back as the possible first half of a key change: its
    /// offset, and since when.
    held: HashMap<Part, (i64, Instant)>,
}

/// How much one transaction takes of a lane, at most (at least one batch).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    pub rows: usize,
    pub bytes: usize,
}

impl Limit {
    /// Everything pending: the live replica's pending work is bounded before it is queued.
    pub(crate) const NONE: Limit = Limit {
        rows: usize::MAX,
        bytes: usize::MAX,
    };

    fn reached(&self, rows: usize, bytes: usize) -> bool {
        rows >= self.rows || bytes >= self.bytes
    }
}

/// When a lane counts as stuck: its transaction has run at least `after` while at least
/// `rows` rows or `bytes` bytes wait behind it, or behind it and the lanes not stuck
/// together (see `Lanes::stuck_lanes`).
#[derive(Clone, Copy)]
pub(crate) struct Stuck {
    pub rows: usize,
    pub bytes: usize,
    pub after: Duration,
}

impl Lanes {
    pub(crate) fn new(count: usize, bytes: Measure) -> Self {
        Self {
            lanes: (0..count.max(1)).map(|_| Lane::default()).collect(),
            key_change_wait: None,
            bytes,
            lane_of: HashMap::new(),
        }
    }

    /// A delete ending what a lane holds of a partition waits up to `wait` for what follows
    /// it, so that a primary-key change (Debezium's delete of the old key, its tombstone, the
    /// create of the new key: consecutive records) is applied in one transaction. `None`
    /// (shutdown, replay) takes everything.
    pub(crate) fn hold_key_changes(&mut self, wait: Option<Duration>) {
        self.key_change_wait = wait;
    }

    /// When the earliest held delete of an idle lane stops waiting; `None` when none waits.
    pub(crate) fn hold_ends(&self) -> Option<Instant> {
        let wait = self.key_change_wait?;
        self.lanes
            .iter()
            .filter(|l| l.running_since.is_none())
            .flat_map(|l| l.held.values())
            .map(|&(_, since)| since + wait)
            .min()
    }

    /// Queues a batch in its partition's lane.
    pub(crate) fn push(&mut self, batch: ChangeBatch) {
        let part = Part::new(batch.topic.clone(), batch.partition);
        let (rows, bytes) = (batch.rows.num_rows(), (self.bytes)(&batch));
        let lane = self.lane(&part);
        let lane = &mut self.lanes[lane];
        lane.rows += rows;
        lane.bytes += bytes;
        lane.pending_start.entry(part).or_insert(batch.first_offset);
        lane.pending.push(batch);
    }

    /// Puts a partition in `lane` before any of its batches (replay balances partitions by
    /// their rows); a partition already placed stays where it is.
    pub(crate) fn place(&mut self, part: &Part, lane: usize) {
        let lane = lane % self.lanes.len();
        self.lane_of.entry(part.clone()).or_insert(lane);
    }

    /// The lanes there are.
    pub(crate) fn count(&self) -> usize {
        self.lanes.len()
    }

    /// A partition's lane, if it has one.
    pub(crate) fn lane_of(&self, part: &Part) -> Option<usize> {
        self.lane_of.get(part).copied()
    }

    /// Rows and bytes waiting in a lane.
    pub(crate) fn pending_in(&self, lane: usize) -> (usize, usize) {
        self.lanes.get(lane).map_or((0, 0), |l| (l.rows, l.bytes))
    }

    /// A partition's lane; a new partition goes to the lane with the fewest.
    fn lane(&mut self, part: &Part) -> usize {
        if let Some(&lane) = self.lane_of.get(part) {
            return lane;
        }
        let mut count = vec![0usize; self.lanes.len()];
        for &l in self.lane_of.values() {
            count[l] += 1;
        }
        let lane = (0..count.len()).min_by_key(|&l| count[l]).unwrap_or(0);
        self.lane_of.insert(part.clone(), lane);
        lane
    }

    /// Rows and bytes waiting for a transaction.
    #[cfg(test)]
    fn pending(&self) -> (usize, usize) {
        self.lanes
            .iter()
            .fold((0, 0), |(r, b), l| (r + l.rows, b + l.bytes))
    }

    /// Which lanes are stuck. A lane is when its transaction has run `after` or longer with
    /// `rows`/`bytes` waiting behind it; and when such long-running lanes together have that
    /// much waiting, so is each of them: else two lanes each under the bound, behind a
    /// database that is down, would hold everything.
    fn stuck_lanes(&self, s: Stuck, now: Instant) -> Vec<bool> {
        let slow = |l: &Lane| {
            l.running_since
                .is_some_and(|t| now.saturating_duration_since(t) >= s.after)
        };
        let mut stuck: Vec<bool> = self
            .lanes
            .iter()
            .map(|l| slow(l) && (l.rows >= s.rows || l.bytes >= s.bytes))
            .collect();
        // What waits behind the other long-running transactions; an idle lane's work starts.
        let behind: Vec<bool> = self
            .lanes
            .iter()
            .zip(&stuck)
            .map(|(l, &stuck)| !stuck && slow(l) && l.rows > 0)
            .collect();
        let (rows, bytes) = self.waiting(&behind);
        if rows >= s.rows || bytes >= s.bytes {
            for (stuck, behind) in stuck.iter_mut().zip(behind) {
                *stuck |= behind;
            }
        }
        stuck
    }

    /// Rows and bytes waiting in the lanes marked `true`.
    fn waiting(&self, lanes: &[bool]) -> (usize, usize) {
        self.lanes
            .iter()
            .zip(lanes)
            .filter(|(_, counted)| **counted)
            .fold((0, 0), |(r, b), (l, _)| (r + l.rows, b + l.bytes))
    }

    /// Rows and bytes waiting in lanes that are not stuck. A stuck lane's partitions are
    /// paused, so its own backlog grows only by what was fetched before the pause.
    pub(crate) fn pending_flowing(&self, stuck: Stuck, now: Instant) -> (usize, usize) {
        let flowing: Vec<bool> = self.stuck_lanes(stuck, now).iter().map(|s| !s).collect();
        self.waiting(&flowing)
    }

    /// The partitions of every stuck lane: what a slow lane holds back.
    pub(crate) fn stuck(&self, stuck: Stuck, now: Instant) -> Vec<Part> {
        let over = self.stuck_lanes(stuck, now);
        if !over.contains(&true) {
            return Vec::new();
        }
        self.lane_of
            .iter()
            .filter(|&(_, &l)| over[l])
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Takes a transaction's batches from every idle lane, marking those lanes busy: what it
    /// holds in the order it came, up to `limit`. A lane holding less than `limit` waits while
    /// `hold(lane)` says more is coming for it.
    pub(crate) fn take_ready(
        &mut self,
        limit: Limit,
        hold: impl Fn(usize) -> bool,
    ) -> Vec<(usize, Vec<ChangeBatch>)> {
        let mut ready = Vec::new();
        for (index, lane) in self.lanes.iter_mut().enumerate() {
            if lane.running_since.is_some() || lane.pending.is_empty() {
                continue;
            }
            if !limit.reached(lane.rows, lane.bytes) && hold(index) {
                continue;
            }
            let batches = lane.take(limit, self.bytes, self.key_change_wait);
            if batches.is_empty() {
                continue; // all of it held back, waiting for a key change's create
            }
            lane.running_since = Some(Instant::now());
            ready.push((index, batches));
        }
        ready
    }

    /// A lane's transaction ended (committed or not: a failure stops the run).
    pub(crate) fn done(&mut self, index: usize) {
        let lane = &mut self.lanes[index];
        lane.running_since = None;
        lane.inflight_start.clear();
    }

    /// The first offset of a partition not yet applied, if anything is pending or in flight.
    pub(crate) fn start_of(&self, part: &Part) -> Option<i64> {
        let lane = &self.lanes[*self.lane_of.get(part)?];
        match (lane.pending_start.get(part), lane.inflight_start.get(part)) {
            (Some(&a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    /// Drops a partition's pending batches (not what is in flight), for a revoke or a
    /// detach; returns the first offset dropped.
    pub(crate) fn drop_pending(&mut self, part: &Part) -> Option<i64> {
        let &index = self.lane_of.get(part)?;
        let lane = &mut self.lanes[index];
        lane.held.remove(part);
        let (rows, bytes) = (&mut lane.rows, &mut lane.bytes);
        let measure = self.bytes;
        lane.pending.retain(|b| {
            let keep = !(b.topic == part.topic && b.partition == part.partition);
            if !keep {
                *rows -= b.rows.num_rows();
                *bytes -= measure(b);
            }
            keep
        });
        lane.pending_start.remove(part)
    }

    /// Whether the partition's lane has a transaction in flight.
    pub(crate) fn running(&self, part: &Part) -> bool {
        self.lane_of
            .get(part)
            .is_some_and(|&l| self.lanes[l].running_since.is_some())
    }
}

impl Lane {
    /// The first batches, up to `limit` (at least one); what is left stays pending. With
    /// `wait`, a key change's delete may be held back ([`Self::take_holding`]).
    fn take(&mut self, limit: Limit, measure: Measure, wait: Option<Duration>) -> Vec<ChangeBatch> {
        // All of it fits: the live replica's case, with no limit.
        if !limit.reached(self.rows, self.bytes) {
            return match wait {
                Some(wait) => self.take_holding(wait, measure),
                None => self.take_all(),
            };
        }
        let (mut rows, mut bytes, mut n) = (0usize, 0usize, 0);
        for b in &self.pending {
            let (r, by) = (b.rows.num_rows(), measure(b));
            if n > 0
                && (rows.saturating_add(r) > limit.rows || bytes.saturating_add(by) > limit.bytes)
            {
                break;
            }
            rows += r;
            bytes += by;
            n += 1;
        }
        if n == self.pending.len() {
            return self.take_all();
        }
        let taken: Vec<ChangeBatch> = self.pending.drain(..n).collect();
        self.rows -= rows;
        self.bytes -= bytes;
        self.inflight_start = first_offsets(&taken);
        self.pending_start = first_offsets(&self.pending);
        taken
    }

    /// Everything pending but, per partition, a delete (with the tombstones after it) that
    /// ends it, for up to `wait` from when it was first held: it may be the delete of a key
    /// change whose create has not come yet. The create always follows its delete and
    /// tombstone, so anything after a held delete releases it.
    fn take_holding(&mut self, wait: Duration, measure: Measure) -> Vec<ChangeBatch> {
        let now = Instant::now();
        let mut last: HashMap<Part, usize> = HashMap::new();
        for (i, b) in self.pending.iter().enumerate() {
            last.insert(Part::new(b.topic.clone(), b.partition), i);
        }
        let mut cut: HashMap<Part, i64> = HashMap::new();
        for (part, i) in last {
            let Some(at) = trailing_delete(&self.pending[i]) else {
                self.held.remove(&part);
                continue;
            };
            let since = match self.held.get(&part) {
                Some(&(held, since)) if held == at => since,
                _ => now,
            };
            if now.saturating_duration_since(since) < wait {
                self.held.insert(part.clone(), (at, since));
                cut.insert(part, at);
            } else {
                self.held.remove(&part);
            }
        }
        if cut.is_empty() {
            return self.take_all();
        }
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        for b in std::mem::take(&mut self.pending) {
            match cut.get(&Part::new(b.topic.clone(), b.partition)) {
                Some(&at) if b.last_offset >= at => {
                    taken.extend(keep_below(&b, at));
                    kept.extend(skip_below(&b, at));
                }
                _ => taken.push(b),
            }
        }
        self.rows = kept.iter().map(|b| b.rows.num_rows()).sum();
        self.bytes = kept.iter().map(measure).sum();
        self.inflight_start = first_offsets(&taken);
        self.pending_start = first_offsets(&kept);
        self.pending = kept;
        taken
    }

    fn take_all(&mut self) -> Vec<ChangeBatch> {
        self.held.clear();
        self.inflight_start = std::mem::take(&mut self.pending_start);
        self.rows = 0;
        self.bytes = 0;
        std::mem::take(&mut self.pending)
    }
}

/// Each partition's first offset in `batches`.
fn first_offsets(batches: &[ChangeBatch]) -> HashMap<Part, i64> {
    let mut out = HashMap::new();
    for b in batches {
        out.entry(Part::new(b.topic.clone(), b.partition))
            .or_insert(b.first_offset);
    }
    out
}

/// The offset of the delete ending `b`, where only tombstones follow it.
fn trailing_delete(b: &ChangeBatch) -> Option<i64> {
    let rows = &b.rows;
    let ops = rows.column_by_name("__op")?.as_string_opt::<i32>()?;
    let tombstones = rows.column_by_name("__tombstone")?.as_boolean_opt()?;
    let offsets = rows
        .column_by_name("__offset")?
        .as_primitive_opt::<arrow_array::types::Int64Type>()?;
    let last = (0..rows.num_rows()).rev().find(|&i| !tombstones.value(i))?;
    (ops.is_valid(last) && ops.value(last) == "d").then(|| offsets.value(last))
}

/// How a batch's bytes are counted.
pub(crate) type Measure = fn(&ChangeBatch) -> usize;

/// The Arrow memory a batch holds, buffers' spare capacity and whole buffers behind a slice
/// included: what the live replica bounds (`replica.batch-max-bytes`).
pub(crate) fn held_bytes(b: &ChangeBatch) -> usize {
    b.rows.get_array_memory_size()
}

/// The bytes of a batch's own rows: replay's batches are slices of a file's columns, whose
/// whole buffers [`held_bytes`] would count once for every slice.
pub(crate) fn slice_bytes(b: &ChangeBatch) -> usize {
    b.rows
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(topic: &str, partition: i32, offsets: std::ops::Range<i64>) -> ChangeBatch {
        crate::sink::test_batch(topic, partition, offsets)
    }

    fn parts(batches: &[ChangeBatch]) -> Vec<(String, i32, i64)> {
        batches
            .iter()
            .map(|b| (b.topic.to_string(), b.partition, b.first_offset))
            .collect()
    }

    /// Rows of `ops` from offset `first`: `T` a tombstone, else the operation.
    fn changes(topic: &str, partition: i32, first: i64, ops: &[&str]) -> ChangeBatch {
        use std::sync::Arc;

        use arrow_array::{BooleanArray, Int64Array, RecordBatch, StringArray};
        use arrow_schema::{DataType, Field, Schema};
        let n = ops.len() as i64;
        let schema = Schema::new(vec![
            Field::new("__offset", DataType::Int64, false),
            Field::new("__op", DataType::Utf8, true),
            Field::new("__tombstone", DataType::Boolean, false),
        ]);
        let rows = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(first..first + n)),
                Arc::new(StringArray::from_iter(
                    ops.iter().map(|o| (*o != "T").then_some(*o)),
                )),
                Arc::new(BooleanArray::from_iter(ops.iter().map(|o| Some(*o == "T")))),
            ],
        )
        .expect("batch");
        ChangeBatch {
            rows,
            ..crate::sink::test_batch(topic, partition, first..first + n)
        }
    }

    fn offsets(batches: &[ChangeBatch]) -> Vec<(i32, i64, i64)> {
        batches
            .iter()
            .map(|b| (b.partition, b.first_offset, b.last_offset))
            .collect()
    }

    #[test]
    fn a_delete_ending_a_partition_waits_for_the_create_of_its_key_change() {
        let mut lanes = Lanes::new(1, held_bytes);
        lanes.hold_key_changes(Some(Duration::from_secs(60)));
        lanes.push(changes("t", 0, 0, &["c", "u", "d", "T"]));
        lanes.push(changes("t", 1, 0, &["c", "d", "u"]));
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(offsets(&ready[0].1), vec![(0, 0, 1), (1, 0, 2)]);
        assert_eq!(lanes.start_of(&Part::new("t", 0)), Some(0), "in flight");
        lanes.done(0);
        assert_eq!(lanes.start_of(&Part::new("t", 0)), Some(2), "held");
        assert_eq!(lanes.pending().0, 2);
        assert!(lanes.hold_ends().is_some());
        assert!(
            lanes.take_ready(Limit::NONE, |_| false).is_empty(),
            "nothing but the held delete: no transaction"
        );
        // The create comes: the delete, its tombstone and the create go together.
        lanes.push(changes("t", 0, 4, &["c"]));
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(offsets(&ready[0].1), vec![(0, 2, 3), (0, 4, 4)]);
        lanes.done(0);
        assert_eq!(lanes.hold_ends(), None);
        assert_eq!(lanes.start_of(&Part::new("t", 0)), None);
    }

    #[test]
    fn a_held_delete_goes_when_its_wait_ends_or_nothing_may_wait() {
        let mut lanes = Lanes::new(1, held_bytes);
        lanes.hold_key_changes(Some(Duration::from_millis(5)));
        lanes.push(changes("t", 0, 0, &["d", "T"]));
        assert!(lanes.take_ready(Limit::NONE, |_| false).is_empty());
        let ends = lanes.hold_ends().expect("held");
        std::thread::sleep(ends.saturating_duration_since(Instant::now()));
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(offsets(&ready[0].1), vec![(0, 0, 1)]);
        lanes.done(0);
        // Shutdown: nothing waits.
        lanes.hold_key_changes(Some(Duration::from_secs(60)));
        lanes.push(changes("t", 0, 2, &["u", "d"]));
        assert_eq!(
            offsets(&lanes.take_ready(Limit::NONE, |_| false)[0].1),
            vec![(0, 2, 2)]
        );
        lanes.done(0);
        lanes.hold_key_changes(None);
        assert_eq!(
            offsets(&lanes.take_ready(Limit::NONE, |_| false)[0].1),
            vec![(0, 3, 3)]
        );
        // A revoke forgets the hold.
        lanes.done(0);
        lanes.hold_key_changes(Some(Duration::from_secs(60)));
        lanes.push(changes("t", 0, 4, &["d"]));
        assert!(lanes.take_ready(Limit::NONE, |_| false).is_empty());
        assert_eq!(lanes.drop_pending(&Part::new("t", 0)), Some(4));
        assert_eq!(lanes.hold_ends(), None);
    }

    #[test]
    fn partitions_spread_evenly_and_stay_in_their_lane() {
        let mut lanes = Lanes::new(3, held_bytes);
        for p in 0..6 {
            lanes.push(batch("t", p, 0..10));
        }
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(ready.len(), 3);
        for (_, batches) in &ready {
            assert_eq!(batches.len(), 2, "two partitions per lane");
        }
        let lane_of_3 = ready
            .iter()
            .find(|(_, b)| b.iter().any(|b| b.partition == 3))
            .map(|(i, _)| *i)
            .expect("partition 3 taken");
        // Busy lanes give nothing until done, and a partition comes back to its own lane.
        lanes.push(batch("t", 3, 10..20));
        assert!(lanes.take_ready(Limit::NONE, |_| false).is_empty());
        lanes.done(lane_of_3);
        let again = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, lane_of_3);
        assert_eq!(parts(&again[0].1), vec![("t".to_owned(), 3, 10)]);
    }

    #[test]
    fn a_partitions_batches_keep_their_order() {
        let mut lanes = Lanes::new(2, held_bytes);
        lanes.push(batch("a", 0, 0..5));
        lanes.push(batch("b", 0, 0..5));
        lanes.push(batch("a", 0, 5..9));
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        let a: Vec<i64> = ready
            .iter()
            .flat_map(|(_, b)| b.iter())
            .filter(|b| &*b.topic == "a")
            .map(|b| b.first_offset)
            .collect();
        assert_eq!(a, vec![0, 5]);
    }

    #[test]
    fn the_start_covers_what_is_pending_and_in_flight() {
        let mut lanes = Lanes::new(1, held_bytes);
        let part = Part::new("t", 0);
        assert_eq!(lanes.start_of(&part), None);
        lanes.push(batch("t", 0, 4..8));
        assert_eq!(lanes.start_of(&part), Some(4));
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(ready.len(), 1);
        lanes.push(batch("t", 0, 8..12));
        assert_eq!(lanes.start_of(&part), Some(4), "in flight from 4");
        lanes.done(0);
        assert_eq!(lanes.start_of(&part), Some(8));
        lanes.take_ready(Limit::NONE, |_| false);
        lanes.done(0);
        assert_eq!(lanes.start_of(&part), None);
    }

    #[test]
    fn only_the_partitions_of_a_lane_stuck_over_its_bound_are_held_back() {
        let at_once = Stuck {
            rows: 5,
            bytes: usize::MAX,
            after: Duration::ZERO,
        };
        let now = Instant::now;
        let mut lanes = Lanes::new(2, held_bytes);
        lanes.push(batch("t", 0, 0..10));
        lanes.push(batch("t", 1, 0..10));
        assert!(
            lanes.stuck(at_once, now()).is_empty(),
            "idle lanes start instead"
        );
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        lanes.push(batch("t", 0, 10..20));
        lanes.push(batch("t", 1, 10..12));
        assert_eq!(lanes.stuck(at_once, now()), vec![Part::new("t", 0)]);
        assert_eq!(
            lanes.pending_flowing(at_once, now()).0,
            2,
            "the stuck lane not counted"
        );
        let later = Stuck {
            after: Duration::from_secs(60),
            ..at_once
        };
        assert!(
            lanes.stuck(later, now()).is_empty(),
            "not running long enough"
        );
        assert_eq!(lanes.pending_flowing(later, now()).0, 12);
        // Its transaction done, the lane is not held back any more.
        let lane_0 = ready
            .iter()
            .find(|(_, b)| b[0].partition == 0)
            .map(|(i, _)| *i)
            .expect("lane of 0");
        lanes.done(lane_0);
        assert!(lanes.stuck(at_once, now()).is_empty());
        lanes.take_ready(Limit::NONE, |_| false);
        assert!(
            lanes.stuck(at_once, now()).is_empty(),
            "its count went with the take"
        );
    }

    #[test]
    fn lanes_each_under_the_bound_behind_a_stalled_database_are_stuck_together() {
        let bound = Stuck {
            rows: 10,
            bytes: usize::MAX,
            after: Duration::ZERO,
        };
        let now = Instant::now;
        let mut lanes = Lanes::new(2, held_bytes);
        lanes.push(batch("t", 0, 0..1));
        lanes.push(batch("t", 1, 0..1));
        lanes.take_ready(Limit::NONE, |_| false);
        // Six rows behind each running transaction: neither lane over ten alone, twelve
        // together.
        lanes.push(batch("t", 0, 1..7));
        lanes.push(batch("t", 1, 1..7));
        let mut held = lanes.stuck(bound, now());
        held.sort();
        assert_eq!(held, vec![Part::new("t", 0), Part::new("t", 1)]);
        assert_eq!(
            lanes.pending_flowing(bound, now()),
            (0, 0),
            "nothing holds the rest"
        );
        let patient = Stuck {
            after: Duration::from_secs(60),
            ..bound
        };
        assert!(
            lanes.stuck(patient, now()).is_empty(),
            "not running long enough"
        );
        assert_eq!(lanes.pending_flowing(patient, now()).0, 12);
    }

    #[test]
    fn pending_counts_follow_push_take_and_revoke() {
        let mut lanes = Lanes::new(2, held_bytes);
        lanes.push(batch("t", 0, 0..10));
        lanes.push(batch("t", 1, 0..7));
        assert_eq!(lanes.pending().0, 17);
        let ready = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(lanes.pending(), (0, 0));
        lanes.push(batch("t", 0, 10..13));
        lanes.push(batch("t", 1, 7..12));
        assert_eq!(lanes.pending().0, 8);
        let t1 = Part::new("t", 1);
        assert!(lanes.running(&t1));
        assert_eq!(lanes.drop_pending(&t1), Some(7), "the first offset dropped");
        assert_eq!(lanes.drop_pending(&t1), None, "nothing left to drop");
        assert_eq!(lanes.pending().0, 3);
        assert_eq!(
            lanes.start_of(&Part::new("t", 1)),
            Some(0),
            "still in flight"
        );
        for (index, _) in ready {
            lanes.done(index);
        }
        assert_eq!(lanes.start_of(&Part::new("t", 1)), None);
        assert!(!lanes.running(&t1));
        let rest = lanes.take_ready(Limit::NONE, |_| false);
        assert_eq!(rest.len(), 1);
        assert_eq!(parts(&rest[0].1), vec![("t".to_owned(), 0, 10)]);
        assert_eq!(lanes.pending(), (0, 0));
    }
}
