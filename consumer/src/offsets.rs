//! The offset tracker: per partition, what was consumed, each sink's floor (below it the sink
//! held the records before this reading) and durable point, and the watermark Kafka may
//! store — the first offset some enabled sink has not made durable. Pure logic: the sink task
//! feeds it, and `kafka.rs` turns what it returns into rdkafka calls.
//!
//! Where a partition resumes is decided here too ([`resume`]): from every sink's own durable
//! position, never from Kafka's committed offset alone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lakesink_schema_registry::ChangeBatch;
use lakesink_writers::sink::{Held, Rewound, TopicPartition, skip_below};

/// How often a sink point that moved while Kafka's offset did not is committed (the
/// auto-commit sends metadata only with an offset that moved). librdkafka's default
/// auto-commit interval.
pub(crate) const METADATA_EVERY: Duration = Duration::from_secs(5);
/// Once everything consumed is durable, the offsets are committed at once rather than at the
/// next auto-commit, at most this often: Kafka's lag reads zero as soon as lakesink has caught
/// up (librdkafka's auto-commit interval is 5 s by default).
const CAUGHT_UP_EVERY: Duration = Duration::from_millis(100);

/// The committed metadata that names a sink's own point when Kafka's offset is another
/// sink's, below it. A restart reads it so that the sink skips what it holds instead of
/// writing it again.
pub(crate) fn mark_metadata(sink: &str, next: i64) -> String {
    format!("lakesink:{sink}={next}")
}

/// A sink's point from committed metadata; None for anything else (no metadata, another
/// sink's, or offsets reset by a tool).
pub(crate) fn parse_mark(sink: &str, metadata: &str) -> Option<i64> {
    metadata
        .strip_prefix("lakesink:")?
        .strip_prefix(sink)?
        .strip_prefix('=')?
        .parse()
        .ok()
}

/// An offset to store for Kafka, with the metadata it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) part: TopicPartition,
    pub(crate) offset: i64,
    pub(crate) metadata: Option<String>,
}

#[derive(Debug, Default)]
struct Partition {
    /// The offset after the last record handed over; None before the first hand-over.
    consumed: Option<i64>,
    /// Per sink: records below it are durable in the sink from before this reading.
    floors: Vec<Option<i64>>,
    /// Per sink: its first offset not durable, as last computed.
    points: Vec<Option<i64>>,
    /// What was last stored: Kafka's offset, and the metadata sink's point when it is ahead.
    stored: Option<(i64, Option<i64>)>,
    /// The metadata sink's point moved while the offset did not: committed explicitly.
    metadata_dirty: bool,
}

/// A partition, the offset after the last record consumed, and each sink's durable point.
pub(crate) type Position = (TopicPartition, Option<i64>, Vec<Option<i64>>);

pub(crate) struct OffsetTracker {
    sinks: usize,
    /// The sink whose own point rides in the commit's metadata when it is ahead (with other
    /// sinks only), and its name.
    metadata_sink: Option<(usize, &'static str)>,
    parts: HashMap<TopicPartition, Partition>,
    metadata_sent: Option<Instant>,
    caught_up_sent: Option<Instant>,
    /// A caught-up commit held back by [`CAUGHT_UP_EVERY`]: the next tick makes it.
    caught_up_due: bool,
}

impl OffsetTracker {
    pub(crate) fn new(sinks: usize, metadata_sink: Option<(usize, &'static str)>) -> Self {
        Self {
            sinks,
            metadata_sink: metadata_sink.filter(|_| sinks > 1),
            parts: HashMap::new(),
            metadata_sent: None,
            caught_up_sent: None,
            caught_up_due: false,
        }
    }

    fn part(&mut self, part: &TopicPartition) -> &mut Partition {
        let sinks = self.sinks;
        self.parts.entry(part.clone()).or_insert_with(|| Partition {
            floors: vec![None; sinks],
            points: vec![None; sinks],
            ..Partition::default()
        })
    }

    /// A partition's first record: each sink's floor, from [`resume`].
    pub(crate) fn started(&mut self, part: &TopicPartition, floors: Vec<Option<i64>>) {
        let sinks = self.sinks;
        let p = self.part(part);
        p.floors = floors;
        p.floors.resize(sinks, None);
    }

    /// Records of `part` up to `next` (exclusive) were handed over.
    pub(crate) fn consumed(&mut self, part: &TopicPartition, next: i64) {
        self.part(part).consumed = Some(next);
    }

    /// Whether `part` is this process's and was read.
    pub(crate) fn knows(&self, part: &TopicPartition) -> bool {
        self.parts.get(part).is_some_and(|p| p.consumed.is_some())
    }

    /// Where a partition was read to.
    pub(crate) fn consumed_at(&self, part: &TopicPartition) -> Option<i64> {
        self.parts.get(part)?.consumed
    }

    /// Where sink `sink` was given each partition up to: what was read, or its floor when
    /// that is higher (it holds everything below its floor). A sink that lets go of a
    /// partition with nothing pending lets go here, not below what it holds.
    pub(crate) fn given(&self, sink: usize) -> HashMap<TopicPartition, i64> {
        self.parts
            .iter()
            .filter_map(|(k, p)| {
                let next = p.consumed?;
                let floor = p.floors.get(sink).copied().flatten();
                Some((k.clone(), floor.map_or(next, |f| next.max(f))))
            })
            .collect()
    }

    /// The rows of `batches` sink `sink` does not hold yet: those at or above its floors.
    pub(crate) fn for_sink(&self, sink: usize, batches: &[ChangeBatch]) -> Vec<ChangeBatch> {
        batches
            .iter()
            .filter_map(|b| {
                let floor = self
                    .parts
                    .get(&TopicPartition::new(b.topic.clone(), b.partition))
                    .and_then(|p| p.floors.get(sink).copied().flatten());
                match floor {
                    Some(f) => skip_below(b, f),
                    None => Some(b.clone()),
                }
            })
            .collect()
    }

    /// The consumer was sought back to `from` for `part`; `outcomes` is each sink's answer.
    /// Returns the partitions a sink needs read again (from an earlier offset).
    pub(crate) fn rewound(
        &mut self,
        part: &TopicPartition,
        from: i64,
        outcomes: &[Rewound],
    ) -> Vec<(TopicPartition, i64)> {
        // Revoked meanwhile: nothing to keep.
        let Some(p) = self.parts.get_mut(part) else {
            return Vec::new();
        };
        let before = p.consumed;
        let mut again = Vec::new();
        for (sink, outcome) in outcomes.iter().enumerate() {
            let Some(slot) = p.floors.get_mut(sink) else {
                continue;
            };
            match *outcome {
                // It holds what it was given: it skips that again.
                Rewound::Skip => {
                    if let Some(b) = before {
                        *slot = Some(slot.map_or(b, |old| old.max(b)));
                    }
                }
                // It let go from `r`: it holds below `r` only, whatever its floor said
                // before (a floor above `r` would skip records it dropped).
                Rewound::From(r) => *slot = Some(r),
                Rewound::Again(r) => again.push((part.clone(), r)),
                Rewound::Waiting => {}
            }
        }
        // Read again from `from`: what was consumed before no longer counts until it comes
        // again, else a sink's point would jump to it with nothing of the new reading
        // written yet, and Kafka's offset with it.
        if before.is_some_and(|b| from < b) {
            p.consumed = Some(from);
        }
        again
    }

    /// Forgets a revoked partition.
    pub(crate) fn revoke(&mut self, part: &TopicPartition) {
        self.parts.remove(part);
    }

    /// Each partition's watermark where it moved: the lowest of the sinks' points, with the
    /// metadata sink's own point as metadata when it is ahead. `pending` is each sink's
    /// [`lakesink_writers::sink::Sink::pending_start`].
    pub(crate) fn marks(
        &mut self,
        pending: impl Fn(usize, &TopicPartition) -> Option<i64>,
    ) -> Vec<Mark> {
        let mut out = Vec::new();
        for (part, p) in &mut self.parts {
            let Some(next) = p.consumed else {
                continue;
            };
            for (sink, point) in p.points.iter_mut().enumerate() {
                let floor = p.floors.get(sink).copied().flatten();
                *point = Some(watermark(next, floor, pending(sink, part)));
            }
            let low = p.points.iter().flatten().copied().min().unwrap_or(next);
            let ahead = self
                .metadata_sink
                .and_then(|(m, _)| p.points.get(m).copied().flatten())
                .filter(|&m| m > low);
            let before = p.stored;
            if before == Some((low, ahead)) {
                continue;
            }
            // The auto-commit sends metadata only with an offset that moved.
            if before.is_some_and(|(m, _)| m == low) {
                p.metadata_dirty = true;
            }
            p.stored = Some((low, ahead));
            out.push(mark(self.metadata_sink, part, low, ahead));
        }
        out
    }

    fn mark(&self, part: &TopicPartition, offset: i64, ahead: Option<i64>) -> Mark {
        mark(self.metadata_sink, part, offset, ahead)
    }

    /// Sink `sink`'s point per partition, as last computed by [`Self::marks`].
    pub(crate) fn points(&self, sink: usize) -> Vec<(TopicPartition, i64)> {
        self.parts
            .iter()
            .filter_map(|(k, p)| Some((k.clone(), p.points.get(sink).copied().flatten()?)))
            .collect()
    }

    /// Per partition: the offset after the last record consumed, and each sink's point as
    /// last computed (for `/status` and the lag gauges).
    pub(crate) fn positions(&self) -> Vec<Position> {
        self.parts
            .iter()
            .map(|(k, p)| (k.clone(), p.consumed, p.points.clone()))
            .collect()
    }

    /// Whether to commit the stored offsets now: every partition's stored offset is its
    /// consumed offset (all that was read is durable in every sink), and the last such commit
    /// was at least [`CAUGHT_UP_EVERY`] ago (else the next tick asks again).
    pub(crate) fn commit_caught_up(&mut self, now: Instant) -> bool {
        let caught_up = !self.parts.is_empty()
            && self.parts.values().any(|p| p.consumed.is_some())
            && self
                .parts
                .values()
                .filter_map(|p| Some((p.consumed?, p.stored)))
                .all(|(next, stored)| stored.is_some_and(|(m, _)| m == next));
        self.caught_up_due = caught_up
            && self
                .caught_up_sent
                .is_some_and(|t| now.saturating_duration_since(t) < CAUGHT_UP_EVERY);
        if !caught_up || self.caught_up_due {
            return false;
        }
        self.caught_up_sent = Some(now);
        true
    }

    /// A caught-up commit was held back.
    pub(crate) fn caught_up_due(&self) -> bool {
        self.caught_up_due
    }

    /// The marks of partitions whose metadata alone moved, to commit: every
    /// [`METADATA_EVERY`], or now when `now` (shutdown).
    pub(crate) fn metadata_due(&mut self, at: Instant, now: bool) -> Vec<Mark> {
        let any = self.parts.values().any(|p| p.metadata_dirty);
        let recent = self
            .metadata_sent
            .is_some_and(|t| at.saturating_duration_since(t) < METADATA_EVERY);
        if !any || !now && recent {
            return Vec::new();
        }
        self.metadata_sent = Some(at);
        let mut out = Vec::new();
        for (part, p) in &mut self.parts {
            if std::mem::take(&mut p.metadata_dirty)
                && let Some((mark, ahead)) = p.stored
            {
                out.push((part.clone(), mark, ahead));
            }
        }
        out.into_iter()
            .map(|(part, mark, ahead)| self.mark(&part, mark, ahead))
            .collect()
    }
}

fn mark(
    metadata_sink: Option<(usize, &'static str)>,
    part: &TopicPartition,
    offset: i64,
    ahead: Option<i64>,
) -> Mark {
    Mark {
        part: part.clone(),
        offset,
        metadata: metadata_sink
            .zip(ahead)
            .map(|((_, name), a)| mark_metadata(name, a)),
    }
}

/// A sink's first offset not yet durable: below what it holds pending, and never below its
/// floor (the records under it were durable in it before this reading).
fn watermark(next: i64, floor: Option<i64>, pending: Option<i64>) -> i64 {
    let next = floor.map_or(next, |f| next.max(f));
    pending.map_or(next, |p| p.min(next))
}

/// Where a partition resumes, on its first record at `first` (the group's committed offset),
/// from what each sink holds: read again from the lowest point a sink is behind at, if any
/// (`seek`), and per sink the floor below which it skips what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) seek: Option<i64>,
    pub(crate) floors: Vec<Option<i64>>,
}

pub(crate) fn resume(first: i64, held: &[Held]) -> Resume {
    let seek = held.iter().filter_map(|h| h.behind).min();
    let from = seek.unwrap_or(first);
    Resume {
        seek,
        floors: held
            .iter()
            .map(|h| h.durable.filter(|&d| d > from))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
