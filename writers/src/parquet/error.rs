//! The raw layer's error, and how each kind is handled.

use lakesink_model::{Classify, Fault, System};

use super::file::FileError;

#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("raw layer config: {0}")]
    Config(String),
    #[error("raw layer: {topic}[{partition}] offset {offset}: {reason}")]
    Data {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    #[error("raw layer: {topic}[{partition}] file {key}: {source}")]
    File {
        topic: String,
        partition: i32,
        key: String,
        source: FileError,
    },
    #[error("raw layer: {topic}[{partition}] marker {key}: {reason}")]
    Marker {
        topic: String,
        partition: i32,
        key: String,
        reason: String,
    },
    #[error("raw layer: upload task failed: {0}")]
    Task(String),
    #[error("raw layer: object store unavailable at {key}: {source}")]
    Unavailable {
        key: String,
        #[source]
        source: object_store::Error,
    },
}

impl Classify for RawError {
    /// Store errors: retrying the segment (from the durable offset) can help, unless the store
    /// refused the credentials.
    fn fault(&self) -> Fault {
        match self {
            Self::Config(_) => Fault::Refused(None),
            Self::Data { .. } => Fault::BadData,
            Self::Marker { .. } => Fault::Unavailable(System::ObjectStore),
            Self::Unavailable { source, .. }
            | Self::File {
                source: FileError::Store(source),
                ..
            } => store_fault(source),
            Self::File {
                source: FileError::Parquet(_),
                ..
            }
            | Self::Task(_) => Fault::Bug,
        }
    }
}

/// An object store error: refused credentials and permissions are for an operator to fix.
pub(crate) fn store_fault(e: &object_store::Error) -> Fault {
    match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => Fault::Refused(Some(System::ObjectStore)),
        _ => Fault::Unavailable(System::ObjectStore),
    }
}
