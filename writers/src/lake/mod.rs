//! Lake tables: the change stream as Apache Iceberg tables (format version 2), one per source
//! table, appended to and committed with the Kafka offsets they hold, so a restart or another
//! instance of the group resumes from the table and never commits a row twice.
//!
//! - [`storage`]: Iceberg's file I/O over lakesink's `object_store`.
//! - [`catalog`]: the SQL (PostgreSQL) and REST catalogs.
//! - [`commit`]: commits of updates built by lakesink (a row delta), to either catalog.
//! - [`types`]: Debezium's types as Iceberg types, and rows as Arrow arrays with field ids.
//! - [`files`]: data files encoded with lakesink's Parquet writer, and their manifest entries.
//! - [`keyed`]: upsert mode's changes of a partition, until its commit collapses them into files.
//! - [`offsets`]: the offsets in the snapshot summary, and the commit that checks them.
//! - [`partition`]: partition specs from `partition-by`, and rows split by them.
//! - [`row_delta`]: each commit's snapshot: data files, and delete files with them (upsert mode).
//! - [`upsert`]: upsert mode's collapse of a commit's changes per key.
//! - [`promote`]: widening a column's type, which the crate's schema update cannot do.
//! - [`sink`]: the [`crate::sink::Sink`] that drives it all.
//! - [`probe`]: `lakesink check` for the catalog.
//! - [`maintain`]: `lakesink lake maintain`: snapshot expiry and orphan files.

pub mod catalog;
pub mod commit;
pub mod compact;
pub mod files;
pub mod keyed;
pub mod maintain;
pub mod offsets;
pub mod partition;
pub mod probe;
pub mod promote;
pub mod row_delta;
pub mod sink;
pub mod storage;
pub mod types;
pub mod upsert;

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
                // A REST catalog that refused the request (4xx) answers the same on a retry.
                K::Unexpected if http_status(e).is_some_and(refused) => {
                    Fault::Refused(Some(System::Database))
                }
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

/// The HTTP status a REST catalog answered with, as the `iceberg` crate puts it in the error's
/// context (`status: 400 Bad Request`).
fn http_status(e: &iceberg::Error) -> Option<u16> {
    let text = e.to_string();
    let at = text.find("status: ")? + "status: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// A 4xx other than a timeout or a rate limit.
fn refused(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429
}

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
pub(crate) use fake::memory_catalog;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rest_catalog_refusal_is_not_retried_and_an_outage_is() {
        let answer = |status: &str| {
            LakeError::Catalog(
                iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    "Received response with unexpected status code",
                )
                .with_context("status", status),
            )
        };
        assert_eq!(
            answer("400 Bad Request").fault(),
            Fault::Refused(Some(System::Database))
        );
        assert_eq!(
            answer("403 Forbidden").fault(),
            Fault::Refused(Some(System::Database))
        );
        for s in [
            "500 Internal Server Error",
            "503 Service Unavailable",
            "429 Too Many Requests",
        ] {
            assert_eq!(
                answer(s).fault(),
                Fault::Unavailable(System::Database),
                "{s}"
            );
        }
    }
}
