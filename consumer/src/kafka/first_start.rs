//! A partition with no committed offset starts at its beginning without librdkafka's wait.
//!
//! librdkafka resets such a partition (`auto.offset.reset`) after a 100 ms backoff:
//! `rd_kafka_offset_reset` passes `err ? 100 : 0` as the offset query's delay, and a missing
//! commit is the error `__NO_OFFSET` (`rdkafka_offset.c`, 2.12.1). A new group, or a new topic's
//! partitions, fetched nothing for those 100 ms. Assigned `BEGINNING` explicitly, librdkafka
//! looks the log start up at once: the same offset `earliest` resolves to.
//!
//! Only partitions never assigned to this consumer before are looked at. For those, no commit
//! of this process can still be in flight, so the committed offsets read here are the ones
//! librdkafka would read itself (it waits for its own in-flight commits before reading). Any
//! failure leaves the partitions to librdkafka's own path.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info};

/// How long the committed offsets may take before librdkafka's own path is left to it.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct FirstStarts {
    /// `auto.offset.reset` is `earliest` (under any of its names; librdkafka ignores case).
    earliest: bool,
    /// Every partition assigned to this consumer so far.
    seen: Mutex<HashSet<(String, i32)>>,
}

impl FirstStarts {
    /// For a consumer whose effective `auto.offset.reset` is `reset`.
    pub(crate) fn new(reset: Option<&str>) -> Self {
        Self {
            earliest: reset.is_some_and(|r| {
                ["earliest", "smallest", "beginning"]
                    .iter()
                    .any(|e| r.eq_ignore_ascii_case(e))
            }),
            seen: Mutex::default(),
        }
    }

    /// Sets `BEGINNING` in `assigned` (the list librdkafka assigns next) on each partition
    /// that is new to this consumer, has no offset set, and has no committed offset.
    pub(crate) fn resolve<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        assigned: &TopicPartitionList,
    ) {
        if !self.earliest {
            return;
        }
        let new = self.new_partitions(assigned);
        if new.count() == 0 {
            return;
        }
        let committed = match consumer.committed_offsets(new, COMMITTED_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "committed offsets not read; librdkafka resets on its own");
                return;
            }
        };
        let starts = uncommitted(&committed);
        if starts.is_empty() {
            return;
        }
        for mut e in assigned.elements() {
            if starts.contains(&(e.topic().to_owned(), e.partition())) {
                // Only fails for an offset librdkafka cannot represent; BEGINNING is one it has.
                let _ = e.set_offset(Offset::Beginning);
            }
        }
        let mut parts: Vec<String> = starts.iter().map(|(t, p)| format!("{t}[{p}]")).collect();
        parts.sort();
        // As Kafka Connect logs its resets: where a new partition is read from, and why.
        info!(?parts, "no committed offset: reading from the log start");
    }

    /// The partitions in `assigned` not seen before with no offset set, now marked seen.
    fn new_partitions(&self, assigned: &TopicPartitionList) -> TopicPartitionList {
        let mut new = TopicPartitionList::new();
        let Ok(mut seen) = self.seen.lock() else {
            return new;
        };
        for e in assigned.elements() {
            let first = seen.insert((e.topic().to_owned(), e.partition()));
            if first && e.offset() == Offset::Invalid {
                new.add_partition(e.topic(), e.partition());
            }
        }
        new
    }
}

/// The partitions the group has no committed offset for, read without error.
fn uncommitted(committed: &TopicPartitionList) -> HashSet<(String, i32)> {
    committed
        .elements()
        .iter()
        .filter(|e| e.error().is_ok() && e.offset() == Offset::Invalid)
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(parts: &[(&str, i32, Offset)]) -> TopicPartitionList {
        let mut l = TopicPartitionList::new();
        for (t, p, o) in parts {
            l.add_partition_offset(t, *p, *o).unwrap();
        }
        l
    }

    fn names(l: &TopicPartitionList) -> Vec<(String, i32)> {
        let mut v: Vec<_> = l
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn only_earliest_resets_are_started_early() {
        for (reset, on) in [
            (Some("earliest"), true),
            (Some("smallest"), true),
            (Some("beginning"), true),
            (Some("Earliest"), true),
            (Some("latest"), false),
            (Some("error"), false),
            (None, false),
        ] {
            assert_eq!(FirstStarts::new(reset).earliest, on, "{reset:?}");
        }
    }

    #[test]
    fn a_partition_is_new_once_and_only_without_an_offset() {
        let f = FirstStarts::new(Some("earliest"));
        let first = list(&[
            ("a", 0, Offset::Invalid),
            ("a", 1, Offset::Invalid),
            ("b", 0, Offset::Offset(7)),
        ]);
        assert_eq!(
            names(&f.new_partitions(&first)),
            [("a".to_owned(), 0), ("a".to_owned(), 1)]
        );
        // Assigned again (revoked in between): its commits may be in flight, so not new.
        let again = list(&[("a", 1, Offset::Invalid), ("c", 2, Offset::Invalid)]);
        assert_eq!(names(&f.new_partitions(&again)), [("c".to_owned(), 2)]);
        // b was seen with an offset of its own; it is not new later either.
        assert_eq!(
            names(&f.new_partitions(&list(&[("b", 0, Offset::Invalid)]))),
            []
        );
    }

    #[test]
    fn only_partitions_without_a_commit_start_at_the_beginning() {
        // Per-partition errors are set only by librdkafka, so they are not made here.
        let committed = list(&[
            ("a", 0, Offset::Invalid),
            ("a", 1, Offset::Offset(42)),
            ("a", 2, Offset::Offset(0)),
            ("b", 0, Offset::Invalid),
        ]);
        let mut got: Vec<_> = uncommitted(&committed).into_iter().collect();
        got.sort();
        assert_eq!(got, [("a".to_owned(), 0), ("b".to_owned(), 0)]);
    }
}
