//! The raw layer as a [`Sink`]: the [`ParquetWriter`], its outage state (the object store
//! down: it lets go and probes, see [`RawOutage`]), and its own position store, written from
//! the loop's view of what it holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use lakesink_model::{Backoff, retrying};
use tracing::warn;

use super::outage::RawOutage;
use super::{Held as RawHeld, ParquetWriter, Positions, RAW, RawError};
use crate::sink::{
    Backpressure, Event, Held, Meter, Receipt, Resume, Rewound, Sink, SinkError, TopicPartition,
};

/// How often the raw layer's positions are written to its store.
const POSITIONS_EVERY: Duration = Duration::from_secs(5);

pub struct RawSink {
    writer: ParquetWriter,
    outage: RawOutage,
    meter: Arc<dyn Meter>,
    positions: Positions,
    /// The point per partition as last written to the store, when, and the write running.
    positions_written: HashMap<TopicPartition, i64>,
    positions_sent: Option<Instant>,
    positions_task: Option<tokio::task::JoinHandle<()>>,
}

impl RawSink {
    pub fn new(writer: ParquetWriter, meter: Arc<dyn Meter>) -> Self {
        Self {
            positions: writer.positions(),
            writer,
            outage: RawOutage::default(),
            meter,
            positions_written: HashMap::new(),
            positions_sent: None,
            positions_task: None,
        }
    }

    fn error(e: RawError) -> SinkError {
        SinkError::in_sink(RAW, e)
    }

    /// A store error: the raw layer lets go while the store is unavailable; any other error
    /// stops the run.
    fn failed(&mut self, e: RawError) -> Result<(), SinkError> {
        self.outage
            .failed(&mut self.writer, e, self.meter.as_ref())
            .map_err(Self::error)
    }

    async fn write_one(
        &mut self,
        batch: &lakesink_schema_registry::ChangeBatch,
        now: i64,
    ) -> Result<(), SinkError> {
        let part = TopicPartition::new(batch.topic.clone(), batch.partition);
        if !self.outage.taking(&part) {
            self.outage.missed(&part, batch.first_offset);
            return Ok(());
        }
        if let Err(e) = self.writer.write(batch, now).await {
            self.outage.missed(&part, batch.first_offset);
            self.failed(e)?;
        }
        Ok(())
    }

    fn uploaded(&self, r: &super::Receipt) -> Receipt {
        self.meter
            .raw_uploaded(r.sealed_at.elapsed(), &r.file_sizes);
        Receipt {
            part: TopicPartition::new(r.topic.clone(), r.partition),
            rows: r.rows,
        }
    }
}

impl Sink for RawSink {
    fn name(&self) -> &'static str {
        RAW
    }

    fn takes_non_data(&self) -> bool {
        true
    }

    fn wants_headers(&self) -> bool {
        self.writer.with_headers()
    }

    fn commits_mark(&self) -> bool {
        true
    }

    fn write<'a>(
        &'a mut self,
        batches: &'a [lakesink_schema_registry::ChangeBatch],
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(async move {
            for b in batches {
                self.write_one(b, now_ms).await?;
            }
            Ok(())
        })
    }

    fn tick(&mut self, now_ms: i64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            if let Err(e) = self.writer.poll(now_ms).await {
                self.failed(e)?;
            }
            self.outage.probe_if_due(&self.writer);
            Ok(())
        })
    }

    fn busy(&self) -> bool {
        self.writer.uploading() || self.outage.probing()
    }

    fn next_event(&mut self) -> BoxFuture<'_, Result<Event, SinkError>> {
        Box::pin(async move {
            let uploading = self.writer.uploading();
            let probing = self.outage.probing();
            let meter = self.meter.clone();
            let upload = tokio::select! {
                r = self.writer.next_receipt(), if uploading => r,
                due = self.outage.probed(meter.as_ref()), if probing => {
                    let due = due.map_err(Self::error)?;
                    return Ok(if due.is_empty() { Event::Nothing } else { Event::ReadAgain(due) });
                }
                else => None,
            };
            match upload {
                None => Ok(Event::Nothing),
                Some(Ok(r)) => Ok(Event::Durable(vec![self.uploaded(&r)])),
                Some(Err(e)) => {
                    self.failed(e)?;
                    Ok(Event::Nothing)
                }
            }
        })
    }

    fn pending_start(&self, part: &TopicPartition) -> Option<i64> {
        let pending = self.writer.pending_start(&part.topic, part.partition);
        match (pending, self.outage.point(part)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn rewound(&mut self, part: &TopicPartition, from: i64, _before: Option<i64>) -> Rewound {
        self.outage.rewound(part, from)
    }

    fn revoke(&mut self, part: &TopicPartition) {
        self.writer.revoke(&part.topic, part.partition);
        self.outage.forget(part);
        self.positions_written.remove(part);
    }

    fn backpressure(&mut self, _: &HashMap<TopicPartition, i64>, _: bool) -> Backpressure {
        Backpressure {
            full: self.writer.over_budget() && self.writer.uploading(),
            ..Backpressure::default()
        }
    }

    /// Writes the raw layer's point of each partition where it moved into its own store, where
    /// a restart reads it ([`Positions`]): every [`POSITIONS_EVERY`], or now and awaited
    /// (`flush`). A failed write leaves an older position, from which a restart reads a
    /// little again (the markers make that exact), so it is logged, not fatal.
    fn durable<'a>(
        &'a mut self,
        points: &'a [(TopicPartition, i64)],
        flush: bool,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let busy = self
                .positions_task
                .as_ref()
                .is_some_and(|t| !t.is_finished());
            let recent = self
                .positions_sent
                .is_some_and(|t| t.elapsed() < POSITIONS_EVERY);
            if !flush && (busy || recent) {
                return;
            }
            let moved: Vec<(TopicPartition, i64)> = points
                .iter()
                .filter(|(part, next)| self.positions_written.get(part) != Some(next))
                .cloned()
                .collect();
            if moved.is_empty() {
                return;
            }
            self.positions_sent = Some(Instant::now());
            self.positions_written.extend(moved.iter().cloned());
            let positions = self.positions.clone();
            let task = async move {
                let writes = moved
                    .iter()
                    .map(|(p, next)| positions.write(&p.topic, p.partition, *next));
                for (done, (p, next)) in futures::future::join_all(writes)
                    .await
                    .into_iter()
                    .zip(&moved)
                {
                    if let Err(e) = done {
                        warn!(topic = %p.topic, partition = p.partition, next, error = %e,
                            "writing the raw layer's position");
                    }
                }
            };
            if flush {
                if let Some(t) = self.positions_task.take() {
                    let _ = t.await;
                }
                task.await;
            } else {
                self.positions_task = Some(tokio::spawn(task));
            }
        })
    }

    fn close(&mut self, now_ms: i64) -> BoxFuture<'_, Result<Vec<Receipt>, SinkError>> {
        Box::pin(async move {
            self.writer.close_all(now_ms).await.map_err(Self::error)?;
            let mut receipts = Vec::new();
            while let Some(r) = self.writer.next_receipt().await {
                let r = r.map_err(Self::error)?;
                receipts.push(self.uploaded(&r));
            }
            Ok(receipts)
        })
    }

    fn resume(&self) -> Arc<dyn Resume> {
        Arc::new(RawResume {
            positions: self.positions.clone(),
            meter: self.meter.clone(),
        })
    }
}

/// The raw layer's own point: its positions and markers, and the mark a commit's metadata
/// carries (when another sink's offset was committed below it).
struct RawResume {
    positions: Positions,
    meter: Arc<dyn Meter>,
}

impl Resume for RawResume {
    /// `held` from the store is the durable point and the end of all it ever cut, which no
    /// offset lakesink commits can pass. A committed offset past that end was moved by
    /// something else (a group reset, an offset tool, another client): the partition is read
    /// again from the raw layer's own point, never skipped. A lookup the store does not answer
    /// is retried (the consumer waits, as for the replica's offsets); one it refuses stops the
    /// run. Only a raw layer with no position and no marker at all (written before positions,
    /// or empty) starts at Kafka's offset.
    fn held<'a>(
        &'a self,
        part: &'a TopicPartition,
        committed: i64,
        mark: Option<i64>,
    ) -> BoxFuture<'a, Result<Held, SinkError>> {
        Box::pin(async move {
            // Retried while the store does not answer, as the replica's offsets are: starting
            // at the group's committed offset instead could pass what the raw layer lacks.
            let held: Option<RawHeld> = retrying(
                Backoff::DEFAULT,
                &*self.meter,
                Some(RAW),
                "reading the raw layer's position",
                || self.positions.held(&part.topic, part.partition),
            )
            .await
            .map_err(|e| SinkError::in_sink(RAW, e))?;
            let durable = match (held.and_then(|h| h.durable), mark) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            let behind = held
                .filter(|h| h.cut_end < committed)
                .map(|h| durable.unwrap_or(h.cut_end));
            if let (Some(from), Some(h)) = (behind, held) {
                warn!(topic = %part.topic, partition = part.partition, committed,
                    raw_layer = h.cut_end, from,
                    "the group's committed offset is past everything the raw layer holds (offsets \
                     moved by a reset, a tool or another client): reading again from the raw \
                     layer's point");
                self.meter.raw_behind(&part.topic);
            }
            // Without a position of its own (a raw layer written before positions), below
            // Kafka's offset the raw layer holds everything, as lakesink committed it.
            let durable = durable.or(behind.is_none().then_some(committed));
            Ok(Held { durable, behind })
        })
    }
}
