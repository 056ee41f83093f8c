//! Kafka records of Debezium topics into the change model: one Arrow batch per (topic,
//! partition, key schema, value schema), rows in offset order.
//!
//! Every batch has `__offset`, `__timestamp` (the Kafka record's, ms), `__op` (`c r u d t m`;
//! a tombstone is `d`), `__tombstone` and `key` (the key record, null for keyless tables), then
//! the value's own columns: for a Debezium envelope `before`, `after`, `source`, `op`, `ts_ms`
//! and the rest as the writer schema has them; for a record flattened by ExtractNewRecordState,
//! `after` holding the flattened record. A tombstone joins the open batch of its partition with
//! nulls in the value columns, so delete + tombstone pairs never split batches.

use std::sync::Arc;

use arrow_array::RecordBatch;

use crate::framing::{IdKind, SchemaRef};
use crate::non_data::NonData;

mod batch;
mod decoder;
mod error;

pub use decoder::{CacheStats, ChangeDecoder};
pub use error::{ChangeError, ChangeErrorKind, Mismatch};

/// One Kafka record, as plain values.
#[derive(Clone, Copy)]
pub struct KafkaRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch, when the record has a timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header lookup by name, last value wins.
    /// Sync, so that a decode can be awaited on any thread.
    pub headers: &'a (dyn Fn(&str) -> Option<&'a [u8]> + Sync),
}

/// What the value of a batch's records is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueShape {
    /// Debezium's envelope: before, after, source, op, ts_ms.
    Envelope,
    /// A record flattened by ExtractNewRecordState (the row itself, maybe with `__op`,
    /// `__deleted`, `__source_ts_ms`).
    Flattened,
    /// Only tombstones so far: no value schema.
    KeyOnly,
    /// Records that are not rows, kept by their [`Route::Keep`](crate::Route::Keep): the whole
    /// value is one `value` column.
    NonData(NonData),
}

/// Decoded rows of one (topic, partition, key schema, value schema), in offset order.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub key_schema: Option<SchemaRef>,
    pub value_schema: Option<SchemaRef>,
    pub shape: ValueShape,
    pub rows: RecordBatch,
}

/// What one record led to.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Batches closed by this record (a schema change, or a full batch).
    pub completed: Vec<ChangeBatch>,
    /// Set when the record was not a row: skipped, or kept by its route.
    pub non_data: Option<NonData>,
}

/// How the records' keys and values are encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    /// Avro with a schema registry (Apicurio or Confluent framing); `payload_ids` says what an
    /// id framed in the payload is. With `check_artifacts`, each id's schema must be one the
    /// registry holds for the record's topic (off for producers naming artifacts some other
    /// way than Debezium's converters can).
    Avro {
        payload_ids: IdKind,
        check_artifacts: bool,
    },
    /// Kafka Connect's JsonConverter with `schemas.enable=true`.
    ConnectJson,
    /// JsonConverter with `schemas.enable=false`: bare JSON values, typed by the Connect schema
    /// given for values (keys are always inferred), or inferred from each record.
    PlainJson {
        value_schema: Option<Arc<serde_json::Value>>,
    },
}

#[cfg(test)]
mod tests;
