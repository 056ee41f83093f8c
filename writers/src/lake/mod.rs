//! Lake tables: the change stream as Apache Iceberg tables (format version 2), one per source
//! table, appended to and committed with the Kafka offsets they hold, so a restart or another
//! instance of the group resumes from the table and never commits a row twice.
//!
//! - [`storage`]: Iceberg's file I/O over lakesink's `object_store`.
//! - [`catalog`]: the SQL (PostgreSQL) and REST catalogs.
//! - [`types`]: Debezium's types as Iceberg types, and rows as Arrow arrays with field ids.
//! - [`files`]: data files encoded with lakesink's Parquet writer, and their manifest entries.
//! - [`offsets`]: the offsets in the snapshot summary, and the commit that checks them.
//! - [`sink`]: the [`crate::sink::Sink`] that drives it all.

pub mod catalog;
pub mod files;
pub mod offsets;
pub mod sink;
pub mod storage;
pub mod types;

pub use sink::LakeSink;

use lakesink_model::{Classify, Fault, System};

/// The sink's name in `/status`, the metrics and the logs.
pub const LAKE: &str = "lake";

/// What a lake call failed on.
#[derive(Debug, thiserror::Error)]
pub enum LakeError {
    #[error("the Iceberg catalog: {0}")]
    Catalog(#[source] iceberg::Error),
    #[error("the lake's object store: {0}")]
    Store(String),
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    Config(String),
}

impl Classify for LakeError {
    fn fault(&self) -> Fault {
        use iceberg::ErrorKind as K;
        match self {
            Self::Catalog(e) => match e.kind() {
                // Transport, database and store errors all come back as `Unexpected`.
                K::Unexpected | K::CatalogCommitConflicts => Fault::Unavailable(System::Database),
                K::DataInvalid | K::PreconditionFailed => Fault::BadData,
                K::FeatureUnsupported => Fault::Refused(Some(System::Database)),
                _ => Fault::Refused(Some(System::Database)),
            },
            Self::Store(_) => Fault::Unavailable(System::ObjectStore),
            Self::Data(_) => Fault::BadData,
            Self::Config(_) => Fault::Refused(None),
        }
    }
}
