//! The object store unavailable: the raw layer lets go of what it holds and takes no records,
//! and the store is probed with capped backoff; once a probe succeeds, the partitions are read
//! again from the raw layer's own point while the replica skips what it has. An outage of the
//! backup never stops the replica, and Kafka's offset never passes what the raw layer holds.

use std::collections::HashMap;
use std::time::Duration;

use lakesink_model::{Backoff, Classify, Observe, System};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{ParquetWriter, RAW, RawError};
use crate::sink::{Rewound, TopicPartition};

type Part = TopicPartition;

/// Probes of the store: the first about a second after it failed, then backing off to 15–30 s.
const PROBES: Backoff = Backoff {
    first: Duration::from_secs(1),
    max: Duration::from_secs(30),
    attempts: None,
};

#[derive(Default)]
pub(crate) struct RawOutage {
    /// Per partition, the first offset the raw layer does not hold since it let go: read
    /// again from there.
    resume: HashMap<Part, i64>,
    down: Option<Down>,
}

struct Down {
    backoff: Box<dyn Iterator<Item = Duration> + Send>,
    next_probe: Instant,
    probe: Option<JoinHandle<Result<(), RawError>>>,
}

impl RawOutage {
    /// Whether the raw layer takes this partition's records now.
    pub(crate) fn taking(&self, part: &Part) -> bool {
        self.down.is_none() && !self.resume.contains_key(part)
    }

    /// Records of `part` from `from` on were not given to the raw layer.
    pub(crate) fn missed(&mut self, part: &Part, from: i64) {
        let r = self.resume.entry(part.clone()).or_insert(from);
        *r = (*r).min(from);
    }

    /// The first offset of `part` the raw layer does not hold, while it is out.
    pub(crate) fn point(&self, part: &Part) -> Option<i64> {
        self.resume.get(part).copied()
    }

    /// A store error: lets go of everything the raw layer holds; errors that retrying
    /// cannot fix are returned.
    pub(crate) fn failed(
        &mut self,
        raw: &mut ParquetWriter,
        e: RawError,
        observe: &dyn Observe,
    ) -> Result<(), RawError> {
        if !e.retryable() {
            return Err(e);
        }
        for (part, from) in raw.abandon_all() {
            self.missed(&part, from);
        }
        warn!(error = %e, "object store unavailable: the raw layer lets go and probes it; \
            the other sinks go on");
        observe.retrying(Some(RAW), System::ObjectStore, &e.to_string());
        if self.down.is_none() {
            let mut backoff = Box::new(PROBES.delays());
            let first = backoff.next().unwrap_or(PROBES.first);
            self.down = Some(Down {
                backoff,
                next_probe: Instant::now() + first,
                probe: None,
            });
        }
        Ok(())
    }

    /// Starts a probe of the store when one is due.
    pub(crate) fn probe_if_due(&mut self, raw: &ParquetWriter) {
        if let Some(d) = &mut self.down
            && d.probe.is_none()
            && Instant::now() >= d.next_probe
        {
            d.probe = Some(tokio::spawn(raw.probe()));
        }
    }

    pub(crate) fn probing(&self) -> bool {
        self.down.as_ref().is_some_and(|d| d.probe.is_some())
    }

    /// Waits for the running probe. When the store answers, returns the partitions to read
    /// again and their offsets; else schedules the next probe. A store that refuses the
    /// probe (a wrong key: an operator must act) is an error, not an outage to wait out.
    pub(crate) async fn probed(
        &mut self,
        observe: &dyn Observe,
    ) -> Result<Vec<(Part, i64)>, RawError> {
        let Some(d) = &mut self.down else {
            return Ok(Vec::new());
        };
        let Some(probe) = &mut d.probe else {
            return Ok(Vec::new());
        };
        let result = match probe.await {
            Ok(r) => r,
            Err(e) => Err(RawError::Task(e)),
        };
        d.probe = None;
        match result {
            Ok(()) => {
                self.down = None;
                observe.recovered(Some(RAW), System::ObjectStore);
                info!(
                    parts = self.resume.len(),
                    "object store available again: reading \
                    the raw layer's partitions again from its own offsets"
                );
                Ok(self.resume.iter().map(|(p, &o)| (p.clone(), o)).collect())
            }
            Err(e) if !e.retryable() => Err(e),
            Err(e) => {
                observe.retrying(Some(RAW), System::ObjectStore, &e.to_string());
                let wait = d.backoff.next().unwrap_or(PROBES.max);
                warn!(error = %e, retry_in = ?wait, "object store still unavailable");
                d.next_probe = Instant::now() + wait;
                Ok(Vec::new())
            }
        }
    }

    /// The consumer was sought back to `from` for `part`.
    pub(crate) fn rewound(&mut self, part: &Part, from: i64) -> Rewound {
        match self.resume.get(part).copied() {
            None => Rewound::Skip,
            // Out again since: it stays out, and is asked for after the next probe.
            Some(_) if self.down.is_some() => Rewound::Waiting,
            Some(r) if r >= from => {
                self.resume.remove(part);
                Rewound::From(r)
            }
            Some(r) => Rewound::Again(r),
        }
    }

    pub(crate) fn forget(&mut self, part: &Part) {
        self.resume.remove(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(p: i32) -> Part {
        TopicPartition::new("t", p)
    }

    fn down() -> Down {
        Down {
            backoff: Box::new(PROBES.delays()),
            next_probe: Instant::now(),
            probe: None,
        }
    }

    #[test]
    fn a_partition_is_read_again_from_the_first_offset_the_raw_layer_lacks() {
        let mut out = RawOutage::default();
        assert!(out.taking(&part(0)));
        out.down = Some(down());
        assert!(
            !out.taking(&part(0)),
            "nothing is taken while the store is down"
        );
        out.missed(&part(0), 120);
        out.missed(&part(0), 100);
        out.missed(&part(0), 150);
        assert_eq!(out.point(&part(0)), Some(100));
        assert!(matches!(out.rewound(&part(0), 100), Rewound::Waiting));
        // The store is back: still out until the seek.
        out.down = None;
        assert!(!out.taking(&part(0)));
        assert!(matches!(out.rewound(&part(0), 120), Rewound::Again(100)));
        assert!(matches!(out.rewound(&part(0), 90), Rewound::From(100)));
        assert!(out.taking(&part(0)));
        assert_eq!(out.point(&part(0)), None);
        assert!(matches!(out.rewound(&part(0), 90), Rewound::Skip));
    }

    #[test]
    fn a_revoked_partition_is_forgotten() {
        let mut out = RawOutage::default();
        out.missed(&part(1), 7);
        out.forget(&part(1));
        assert_eq!(out.point(&part(1)), None);
        assert!(out.taking(&part(1)));
    }
}
