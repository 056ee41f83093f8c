//! The raw layer: change batches into time-partitioned Parquet files on an object store.
//!
//! Contract. Per Kafka partition, rows accumulate in one open *segment*: a contiguous offset
//! range, with one file per (directory, schema). The rolling policy closes the whole segment,
//! as Kafka Connect's S3 sink commits all files of a partition at once. Closing writes a
//! marker (the cut point), then completes every file, then yields a [`Receipt`]: only then are
//! the segment's offsets durable. [`ParquetWriter::pending_start`] is the first offset of a
//! partition that is not durable yet; the consumer commits no further. After a crash the
//! segment is read again from that offset, the marker makes it end at the same record, and
//! the same keys are written again: each record lands in exactly one visible file. For that,
//! which file a row goes to depends on the row alone, never on how records were batched: a
//! tombstone is written as the key-only row it decodes to on its own, also when it joined the
//! batch of the delete before it.

pub mod content;
mod error;
mod file;
mod joda;
mod key;
pub mod marker;
mod outage;
mod parallel;
mod partitioner;
mod position;
mod rolling;
mod segment;
mod sink;
pub mod store;
mod uploads;
mod writer;

pub(crate) use error::store_fault;
pub use error::{RawError, StoreFailure, describe_store};
pub use file::FileError;
pub use joda::JodaPattern;
pub use key::KeyTemplate;
pub use marker::Marker;
pub use parallel::ParallelWriter;
pub(crate) use parallel::encode_threads;
pub use position::{Held, Positions};
pub use rolling::{RollingPolicy, Rotation, SegmentStats};
pub use sink::RawSink;
pub use uploads::Receipt;
pub use writer::ParquetWriter;
#[cfg(test)]
use writer::created_by;
pub(crate) use writer::writer_properties;

/// The raw layer's name as a sink.
pub const RAW: &str = "raw";

#[cfg(test)]
mod tests;
