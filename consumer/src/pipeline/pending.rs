//! What the consuming side holds between hand-overs, handing it over, and decoding one
//! message (retried while the registry is unreachable; bad records to the dead-letter topic).

// Per-record lookups: foldhash, not SipHash (keys are our own topic names and partitions).
use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lakesink_model::{Backoff, Classify, Failure, Fault, Retry};
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, SchemaResolver};
use lakesink_writers::sink::TopicPartition;
use tokio::sync::mpsc;
use tracing::warn;

use super::send;
use crate::columns::Columns;
use crate::dead_letter::{DeadLetters, Stage};
use crate::headers::HeaderLog;
use crate::kafka;
use crate::sinks::ToSinks;
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::{LookupLabels, TopicLabels};

/// Hand decoded rows to the sinks after this many records, and at least every FLUSH_BUSY
/// while records keep coming. Once nothing is left to decode, within FLUSH_IDLE: the wait is
/// most of lakesink's share of the end-to-end latency at low rates, and at high rates the
/// decoding side is rarely idle, so its batches stay large.
pub(super) const FLUSH_RECORDS: usize = 16 * 1024;
pub(super) const FLUSH_BUSY: Duration = Duration::from_millis(25);
pub(super) const FLUSH_IDLE: Duration = Duration::from_millis(5);
/// Rows per decoded batch.
pub(super) const BATCH_ROWS: usize = 4096;
/// What the consuming side holds: records decoded but not yet sent. Maps are keyed by topic
/// then partition, so a record is looked up by `&str` without allocating.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) batches: Vec<ChangeBatch>,
    /// Per partition, the offset after the last record consumed (the run's not yet in).
    consumed: HashMap<Arc<str>, HashMap<i32, i64>>,
    pub(super) records: usize,
    /// Records read per topic since the last hand-over, for the metrics.
    counts: HashMap<Arc<str>, u64>,
    /// The partition the latest records came from. Records come in runs of one partition
    /// (a fetch's worth), so the maps above are updated once a run, not once a record.
    run: Option<Run>,
    /// Kafka headers, kept for the raw layer's `__headers` column when it is on.
    pub(super) headers: Option<HeaderLog>,
    /// The `[[columns]]` policies, applied to every batch before the sinks see it.
    pub(super) columns: Option<Arc<Columns>>,
}

/// Consecutive records of one started partition, not yet in [`Pending`]'s maps.
struct Run {
    topic: Arc<str>,
    partition: i32,
    next: i64,
    records: u64,
}

impl Pending {
    pub(super) fn new(headers: Option<HeaderLog>, columns: Option<Arc<Columns>>) -> Self {
        Self {
            headers,
            columns,
            ..Self::default()
        }
    }

    /// One record consumed: `next` is the offset after it.
    pub(super) fn consumed(&mut self, topic: &Arc<str>, partition: i32, next: i64) {
        self.records += 1;
        if let Some(r) = &mut self.run
            && r.partition == partition
            && (Arc::ptr_eq(&r.topic, topic) || r.topic == *topic)
        {
            r.next = next;
            r.records += 1;
            return;
        }
        self.end_run();
        self.run = Some(Run {
            topic: topic.clone(),
            partition,
            next,
            records: 1,
        });
    }

    /// The run's records into the maps.
    fn end_run(&mut self) {
        let Some(r) = self.run.take() else { return };
        *self.counts.entry(r.topic.clone()).or_default() += r.records;
        self.consumed
            .entry(r.topic)
            .or_default()
            .insert(r.partition, r.next);
    }

    pub(super) fn forget(&mut self, part: &TopicPartition) {
        // Its records were read (the metrics count them), though their offsets are dropped.
        self.end_run();
        self.batches
            .retain(|b| !(b.topic == part.topic && b.partition == part.partition));
        if let Some(p) = self.consumed.get_mut(&*part.topic) {
            p.remove(&part.partition);
        }
        if let Some(h) = &mut self.headers {
            h.forget(&part.topic, part.partition);
        }
    }
}

/// Sends every decoded row, and the offsets consumed, to the sinks.
pub(super) async fn hand_over<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    pending: &mut Pending,
    tx: &mpsc::Sender<ToSinks>,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    pending
        .batches
        .extend(decoder.finish_all().map_err(Failure::new)?);
    pending.end_run();
    pending.records = 0;
    if let Some(c) = &pending.columns {
        pending.batches = std::mem::take(&mut pending.batches)
            .into_iter()
            .map(|b| c.apply(b))
            .collect::<anyhow::Result<_>>()
            // The policy, not the record, must change: a setting to mend.
            .map_err(|e| Failure::with_fault(None, lakesink_model::Fault::Refused(None), e))?;
    }
    if let Some(h) = &mut pending.headers {
        let batches = std::mem::take(&mut pending.batches);
        for b in batches {
            let (topic, partition) = (b.topic.clone(), b.partition);
            let b = h.attach(b).map_err(|e| {
                anyhow::anyhow!("{topic}[{partition}]: adding the headers column: {e}")
            })?;
            pending.batches.push(b);
        }
    }
    let m = &telemetry.metrics;
    for (topic, n) in pending.counts.iter_mut().filter(|(_, n)| **n > 0) {
        m.consumed
            .get_or_create(&TopicLabels {
                topic: topic.to_string(),
            })
            .inc_by(std::mem::take(n));
    }
    let cache = decoder.cache_stats();
    for (result, total) in [("hit", cache.hits), ("miss", cache.misses)] {
        let c = m.registry_lookups.get_or_create(&LookupLabels { result });
        c.inc_by(total.saturating_sub(c.get()));
    }
    if pending.consumed.is_empty() && pending.batches.is_empty() {
        return Ok(());
    }
    let item = ToSinks::Batches {
        batches: std::mem::take(&mut pending.batches),
        consumed: pending
            .consumed
            .drain()
            .flat_map(|(topic, parts)| {
                parts
                    .into_iter()
                    .map(move |(p, o)| (TopicPartition::new(topic.clone(), p), o))
            })
            .collect(),
    };
    send(tx, item).await
}

/// Decodes a message, retrying while the registry is unreachable.
pub(super) async fn decode<R: SchemaResolver, M: kafka::Incoming>(
    decoder: &mut ChangeDecoder<R>,
    msg: &M,
    telemetry: &Telemetry,
    dead_letters: Option<&DeadLetters>,
) -> anyhow::Result<Vec<ChangeBatch>> {
    // The first try outside the retry helper: it is every record's path, and nearly always
    // succeeds. Every sink waits for the decoder (sink None).
    let mut first = Some(kafka::push(decoder, msg, Some(telemetry)).await);
    let mut retry = None;
    loop {
        let result = match first.take() {
            Some(Ok(batches)) => return Ok(batches),
            Some(r) => r,
            None => kafka::push(decoder, msg, Some(telemetry)).await,
        };
        let Some(done) = retry
            .get_or_insert_with(|| Retry::new(Backoff::DEFAULT, telemetry, None, "decoding"))
            .settle(result)
            .await
        else {
            continue;
        };
        match done {
            Ok(batches) => return Ok(batches),
            Err(e) if e.fault() == Fault::BadData && dead_letters.is_some() => {
                let Some(dl) = dead_letters else {
                    return Err(Failure::new(e).into());
                };
                dl.send(msg, Stage::Decode, &e.to_string()).await?;
                warn!(error = %e, dead_letter_topic = dl.topic(), "bad record sent to the dead-letter topic");
                telemetry
                    .metrics
                    .dead_letters
                    .get_or_create(&TopicLabels {
                        topic: msg.topic().to_owned(),
                    })
                    .inc();
                return Ok(Vec::new());
            }
            Err(e) if e.fault() == Fault::BadData => {
                // The remedy with the error, for the record it stopped at.
                let said = format!(
                    "{e}. To set such records aside and go on, set errors.tolerance = \"all\" \
                     and errors.dead-letter-topic"
                );
                return Err(anyhow::Error::new(Failure::new(e)).context(said));
            }
            Err(e) => return Err(Failure::new(e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(p: &Pending) -> Vec<(String, i32, i64)> {
        let mut v: Vec<_> = p
            .consumed
            .iter()
            .flat_map(|(t, parts)| parts.iter().map(|(&p, &o)| (t.to_string(), p, o)))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn runs_of_partitions_end_in_the_maps_with_every_record_counted() {
        let mut p = Pending::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        // The same name in another allocation is the same topic.
        let a_again: Arc<str> = Arc::from("a");
        // Interleaved runs, one of a single record, and a partition run twice.
        for (topic, part, offset) in [
            (&a, 0, 10),
            (&a_again, 0, 11),
            (&a, 1, 5),
            (&b, 0, 7),
            (&b, 0, 8),
            (&b, 0, 9),
            (&a, 0, 12),
        ] {
            p.consumed(topic, part, offset + 1);
        }
        assert_eq!(p.records, 7);
        p.end_run();
        assert!(p.run.is_none());
        assert_eq!(
            offsets(&p),
            [("a".into(), 0, 13), ("a".into(), 1, 6), ("b".into(), 0, 10)]
        );
        assert_eq!(p.counts.get("a"), Some(&4));
        assert_eq!(p.counts.get("b"), Some(&3));
    }

    #[test]
    fn a_partition_forgotten_mid_run_keeps_no_offset_but_its_count() {
        let mut p = Pending::default();
        let a: Arc<str> = Arc::from("a");
        p.consumed(&a, 1, 4);
        p.consumed(&a, 0, 21);
        p.consumed(&a, 0, 22);
        p.forget(&TopicPartition::new("a", 0));
        assert!(p.run.is_none());
        assert_eq!(offsets(&p), [("a".into(), 1, 4)]);
        assert_eq!(p.counts.get("a"), Some(&3));
        // Assigned again: its new reading starts over.
        p.consumed(&a, 0, 3);
        p.end_run();
        assert_eq!(offsets(&p), [("a".into(), 0, 3), ("a".into(), 1, 4)]);
    }
}
