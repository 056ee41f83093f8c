//! The Sink contract: what the pipeline loop asks of every sink, and what a sink promises.
//!
//! - **Durable.** A record is durable in a sink once a restart cannot lose it there: the
//!   Parquet file holding it is uploaded completely (its marker written first), the
//!   PostgreSQL transaction holding it (and the partition's offsets row) committed.
//! - **Pending.** [`Sink::pending_start`] is, per partition, the first offset the sink was
//!   given and has not made durable (or let go of); `None` when it holds nothing. The loop
//!   stores no Kafka offset past it, whatever the other sinks hold.
//! - **Events.** While [`Sink::busy`], [`Sink::next_event`] waits for the next thing that
//!   happened: something became durable ([`Event::Durable`], with receipts for the metrics),
//!   or the sink can take partitions it let go of again ([`Event::ReadAgain`]). It must be
//!   cancel-safe: the loop polls it in a `select!`.
//! - **Floors.** The loop gives a sink only rows at or above the partition's floor for that
//!   sink (what it held before this run, or before a seek back): a sink never sees a record
//!   twice in one reading, and skips nothing itself.
//! - **Letting go.** A sink that cannot take records for a while (the object store down, a
//!   stuck replica lane while another sink goes on) drops what it holds of the partitions
//!   concerned, keeps their first missing offset as its pending start, and later asks for
//!   them to be read again from there. Records after a seek back may have been seen before:
//!   [`Sink::rewound`] says where the sink takes them again.
//! - **Revoke** drops the partition's pending work. Work already running may still finish: it
//!   writes exactly what the partition's new owner writes (deterministic keys, an offsets row
//!   that only moves forward), so it harms no one; its receipt is ignored.
//! - **Backpressure.** [`Sink::backpressure`] says whether the loop may hand over more, and
//!   which partitions to pause at the consumer; memory is bounded by the sink's own limits.
//! - **Close** makes everything held durable, or fails.
//!
//! A sink takes plain values (topic, partition, offsets, decoded batches), never a Kafka
//! client, so the consumer, replay and tests drive it alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
pub use lakesink_model::TopicPartition;
use lakesink_model::{Failure, Observe};
use lakesink_schema_registry::ChangeBatch;

pub trait Sink: Send {
    /// The sink's name in `/status`, the metrics and the logs (`raw`, `replica`).
    fn name(&self) -> &'static str;

    /// Whether records that are not rows (heartbeats, schema changes, transaction markers)
    /// are given to this sink.
    fn takes_non_data(&self) -> bool;

    /// Whether rows are to carry their Kafka headers (the consuming side keeps them then).
    fn wants_headers(&self) -> bool {
        false
    }

    /// Whether the sink's own point rides in the Kafka commit's metadata when another sink's
    /// offset is committed below it (the raw layer: a restart then skips what it holds).
    fn commits_mark(&self) -> bool {
        false
    }

    /// Takes the batches of one hand-over, in offset order per partition.
    fn write<'a>(
        &'a mut self,
        batches: &'a [ChangeBatch],
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), SinkError>>;

    /// Time passed: close what is due (idle files, wall-clock rotation), probe what is down.
    fn tick(&mut self, now_ms: i64) -> BoxFuture<'_, Result<(), SinkError>>;

    /// Whether [`Sink::next_event`] has something to wait for.
    fn busy(&self) -> bool;

    /// The next event; called only while [`Sink::busy`]. Cancel-safe.
    fn next_event(&mut self) -> BoxFuture<'_, Result<Event, SinkError>>;

    /// The first offset of `part` given to the sink and not durable in it.
    fn pending_start(&self, part: &TopicPartition) -> Option<i64>;

    /// The consumer was sought back to `from` for `part`; `before` is where it had read to.
    fn rewound(&mut self, part: &TopicPartition, from: i64, before: Option<i64>) -> Rewound;

    /// `part` is no longer this process's.
    fn revoke(&mut self, part: &TopicPartition);

    /// Whether more may be handed over, and which partitions to hold at the consumer.
    /// `given` is where each partition was given to this sink up to (read, or its floor when
    /// higher: a sink letting go with nothing pending lets go there); `alone` is whether this is the only
    /// sink (a sink with company lets go of a slow partition rather than holding back the
    /// others).
    fn backpressure(&mut self, given: &HashMap<TopicPartition, i64>, alone: bool) -> Backpressure;

    /// The loop's view of the sink's durable point per partition (the first offset it does
    /// not hold), for a sink that records it in its own store; `flush` at shutdown.
    fn durable<'a>(
        &'a mut self,
        points: &'a [(TopicPartition, i64)],
        flush: bool,
    ) -> BoxFuture<'a, ()> {
        let _ = (points, flush);
        Box::pin(async {})
    }

    /// Makes everything held durable (shutdown), with the receipts of what that wrote.
    fn close(&mut self, now_ms: i64) -> BoxFuture<'_, Result<Vec<Receipt>, SinkError>>;

    /// Where the sink stands, for the consuming side on a partition's first record.
    fn resume(&self) -> Arc<dyn Resume>;
}

/// What sinks count beyond retries ([`Observe`]): the service's metrics implement it; replay
/// counts nothing. Every hook defaults to nothing.
pub trait Meter: Observe {
    /// A raw-layer segment uploaded: how long since it was sealed, and its files' sizes.
    fn raw_uploaded(&self, sealed: Duration, file_sizes: &[u64]) {
        let _ = (sealed, file_sizes);
    }
    /// A partition whose committed offset was past everything the raw layer holds.
    fn raw_behind(&self, topic: &str) {
        let _ = topic;
    }
    /// A replica transaction committed.
    fn replica_committed(&self, c: &Committed<'_>) {
        let _ = c;
    }
    /// A record the replica cannot take went to the dead-letter topic.
    fn dead_lettered(&self, topic: &str) {
        let _ = topic;
    }
    /// Partitions of stuck replica lanes (let go of, or paused).
    fn replica_stuck(&self, partitions: usize) {
        let _ = partitions;
    }
}

/// One committed replica transaction, for the metrics.
pub struct Committed<'a> {
    pub took: Duration,
    pub batches: &'a [ChangeBatch],
    /// Values rounded to the column's precision, and unknown values kept, per column.
    pub rounded: Vec<crate::Rounded>,
    pub unknown: Vec<crate::Rounded>,
    /// Changes the stale-event guard left out, per table (and its guard column).
    pub stale: Vec<crate::Rounded>,
    /// Bytes of COPY data the transaction sent (the rows, in PostgreSQL's binary format).
    pub bytes: u64,
}

/// Where a sink stands on a partition, from its own durable store (the raw layer's positions
/// and markers, the replica's offsets table), never from Kafka's committed offset alone.
pub trait Resume: Send + Sync {
    /// `committed` is the group's committed offset (the first record consumed), `mark` the
    /// sink's own point carried in the commit's metadata, if any.
    fn held<'a>(
        &'a self,
        part: &'a TopicPartition,
        committed: i64,
        mark: Option<i64>,
    ) -> BoxFuture<'a, Result<Held, SinkError>>;
}

/// What a sink holds of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Every record below this is durable in the sink.
    pub durable: Option<i64>,
    /// The sink lacks records from here although the committed offset is past it: the
    /// partition must be read again from here.
    pub behind: Option<i64>,
}

/// What a sink reports from [`Sink::next_event`].
#[derive(Debug)]
pub enum Event {
    /// Something became durable.
    Durable(Vec<Receipt>),
    /// The sink takes these partitions again: read them again from these offsets.
    ReadAgain(Vec<(TopicPartition, i64)>),
    /// Nothing for the loop (a probe that failed, a receipt of a revoked partition).
    Nothing,
}

/// Rows of a partition made durable together.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub part: TopicPartition,
    pub rows: u64,
}

/// What a seek back means for a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewound {
    /// It held on: it skips what it was given before the seek.
    Skip,
    /// It takes the partition's records again from this offset on (it let go of them there).
    From(i64),
    /// It let go of records before the seek's offset: read again from this offset for it.
    Again(i64),
    /// It waits: it asks for the partition itself when it can take it.
    Waiting,
}

/// What a sink asks of the consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backpressure {
    /// Past its bounds with work running: hand over nothing until an event.
    pub full: bool,
    /// Partitions to keep paused at the consumer (the whole set: others resume).
    pub pause: Vec<TopicPartition>,
    /// Partitions to read again from an offset (it let go of them and can take them again).
    pub read_again: Vec<(TopicPartition, i64)>,
}

/// A sink's error: the failure underneath, classified, naming the sink
/// ([`Failure::in_sink`], or [`Failure::with_fault`] for an error that does not classify
/// itself).
pub type SinkError = Failure;

/// The rows of `batch` at or above `floor` (rows are in offset order); None when none is.
pub fn skip_below(batch: &ChangeBatch, floor: i64) -> Option<ChangeBatch> {
    use arrow_array::cast::AsArray;
    if batch.first_offset >= floor {
        return Some(batch.clone());
    }
    if batch.last_offset < floor {
        return None;
    }
    let offsets = batch
        .rows
        .column_by_name("__offset")?
        .as_primitive_opt::<arrow_array::types::Int64Type>()?;
    let from = offsets.values().partition_point(|&o| o < floor);
    if from >= offsets.len() {
        return None;
    }
    let mut out = batch.clone();
    out.rows = batch.rows.slice(from, offsets.len() - from);
    out.first_offset = offsets.value(from);
    Some(out)
}

/// The rows of `batch` below `at` (rows are in offset order), covering the offsets from the
/// batch's first to `at - 1`; None when none is.
pub fn keep_below(batch: &ChangeBatch, at: i64) -> Option<ChangeBatch> {
    use arrow_array::cast::AsArray;
    if batch.last_offset < at {
        return Some(batch.clone());
    }
    let offsets = batch
        .rows
        .column_by_name("__offset")?
        .as_primitive_opt::<arrow_array::types::Int64Type>()?;
    let to = offsets.values().partition_point(|&o| o < at);
    if to == 0 {
        return None;
    }
    let mut out = batch.clone();
    out.rows = batch.rows.slice(0, to);
    out.last_offset = at - 1;
    Some(out)
}

/// A batch of rows at `offsets` (an `__offset` column only), for unit tests.
#[cfg(any(test, feature = "test-utils"))]
pub(crate) fn test_batch(
    topic: &str,
    partition: i32,
    offsets: std::ops::Range<i64>,
) -> ChangeBatch {
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    let schema = Schema::new(vec![Field::new("__offset", DataType::Int64, false)]);
    let values: Vec<i64> = offsets.clone().collect();
    ChangeBatch {
        topic: Arc::from(topic),
        partition,
        first_offset: offsets.start,
        last_offset: offsets.end - 1,
        key_schema: None,
        value_schema: None,
        shape: lakesink_schema_registry::ValueShape::KeyOnly,
        rows: RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from(values))])
            .expect("batch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_splits_at_an_offset_covering_every_offset_once() {
        let b = test_batch("t", 0, 10..20);
        let below = keep_below(&b, 15).expect("rows below");
        let from = skip_below(&b, 15).expect("rows from");
        assert_eq!((below.first_offset, below.last_offset), (10, 14));
        assert_eq!(below.rows.num_rows(), 5);
        assert_eq!((from.first_offset, from.last_offset), (15, 19));
        assert!(keep_below(&b, 10).is_none());
        assert_eq!(keep_below(&b, 25).map(|b| b.last_offset), Some(19));
    }

    #[test]
    fn rows_below_the_floor_are_skipped() {
        let b = test_batch("t", 0, 10..20);
        assert_eq!(skip_below(&b, 5).map(|b| b.first_offset), Some(10));
        let cut = skip_below(&b, 15).expect("rows left");
        assert_eq!((cut.first_offset, cut.last_offset), (15, 19));
        assert_eq!(cut.rows.num_rows(), 5);
        assert!(skip_below(&b, 20).is_none());
    }
}
