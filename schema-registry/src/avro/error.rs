//! The decoding error, shared by the decoder and the semantic types it applies.

use super::validate::DatumError;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The datum does not match its writer schema: bad data.
    #[error("{0}")]
    Datum(#[from] DatumError),
    /// A union-rooted schema whose datum is its null branch: there is no row to make.
    #[error("the datum is the null branch of the schema's root union")]
    NullRoot,
    /// The schema cannot be decoded into Arrow (arrow-avro refused it).
    #[error("schema not supported for Arrow decoding: {0}")]
    Schema(String),
    /// arrow-avro failed on a datum that validated: a bug here or there.
    #[error("decoder failed on a valid datum: {0}")]
    Internal(String),
    /// A value whose meaning depends on the connector, in records that name none: a setting
    /// is missing, so every such record would fail alike.
    #[error("{0}")]
    Connector(String),
}

pub(super) fn internal(e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Internal(e.to_string())
}
