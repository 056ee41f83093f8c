//! The errors of decoding a record: the side it failed on and why.

use lakesink_model::{Classify, Fault};

use super::KafkaRecord;
use crate::avro::{DecodeError, SchemaError};
use crate::connect_json::JsonError;
use crate::framing::{FramingError, IdKind, SchemaRef, Side};
use crate::non_data::NonData;
use crate::registry::{Registration, RegistryError};

/// Why a record could not be decoded, and where it is.
#[derive(Debug, thiserror::Error)]
#[error("{topic}[{partition}] offset {offset}, {side}: {kind}")]
pub struct ChangeError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub side: Side,
    pub kind: ChangeErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum ChangeErrorKind {
    #[error("{0}")]
    Framing(#[from] FramingError),
    #[error("{0}")]
    Registry(#[from] RegistryError),
    #[error("{0}")]
    Schema(#[from] SchemaError),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("{0}")]
    Json(#[from] JsonError),
    #[error("{0}")]
    Model(String),
    #[error("a {0} record, not a row; refused by the non-data route")]
    NonData(NonData),
    #[error("{0}")]
    Mismatch(Box<Mismatch>),
}

/// A record side whose schema is not one of its topic's: the id was looked up in the wrong
/// id space (`registry.payload-ids`) or the wrong registry. Never a record to skip or
/// dead-letter: every record of the topic would go the same way.
#[derive(Debug)]
pub enum Mismatch {
    /// The registry holds the schema under artifacts that do not belong to the topic.
    Artifact {
        topic: String,
        side: Side,
        schema: SchemaRef,
        in_payload: bool,
        /// The schema's record name, as resolved.
        name: String,
        registered: Vec<Registration>,
        /// Where the same number is registered as an id of the other kind, when that fits the
        /// topic.
        other_kind: Option<Registration>,
    },
    /// A value schema of one kind of record keyed by the key schema of another (a table's key
    /// on a heartbeat, a schema-change key on a row).
    KeyValue {
        key: SchemaRef,
        key_name: String,
        value: SchemaRef,
        value_name: String,
        in_payload: bool,
    },
}

/// What an id read from the payload is, in `registry.payload-ids`' words.
fn setting(kind: IdKind) -> &'static str {
    match kind {
        IdKind::ContentId => "content-id",
        IdKind::GlobalId => "global-id",
    }
}

pub(super) fn other(kind: IdKind) -> IdKind {
    match kind {
        IdKind::ContentId => IdKind::GlobalId,
        IdKind::GlobalId => IdKind::ContentId,
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let origin = |schema: &SchemaRef, in_payload: bool| match (schema, in_payload) {
            (SchemaRef::Id { kind, .. }, true) => format!(
                "read from the payload as registry.payload-ids = \"{}\" says",
                setting(*kind)
            ),
            _ => "named by the record's apicurio.* header".to_owned(),
        };
        let advice = |schema: &SchemaRef, in_payload: bool| match (schema, in_payload) {
            (SchemaRef::Id { kind, .. }, true) => format!(
                "the ids in this topic's payloads are probably {}s: check registry.payload-ids \
                 (\"content-id\" or \"global-id\") against the producer's converter",
                match other(*kind) {
                    IdKind::ContentId => "contentId",
                    IdKind::GlobalId => "globalId",
                }
            ),
            _ => "check that registry.url is the registry this topic's producer registers in"
                .to_owned(),
        };
        match self {
            Mismatch::Artifact {
                topic,
                side,
                schema,
                in_payload,
                name,
                registered,
                other_kind,
            } => {
                let registered: Vec<String> = registered.iter().map(|r| r.to_string()).collect();
                write!(
                    f,
                    "{schema} ({}) resolved to schema {name}, registered as {}, which is not a \
                     {side} schema of topic {topic} (artifact {topic}-{side}, {topic}, or the \
                     record's name); ",
                    origin(schema, *in_payload),
                    registered.join(", "),
                )?;
                match (schema, other_kind) {
                    (SchemaRef::Id { kind, id }, Some(fits)) => write!(
                        f,
                        "as a {} the same id {id} is {fits}: set registry.payload-ids = \"{}\"",
                        match other(*kind) {
                            IdKind::ContentId => "contentId",
                            IdKind::GlobalId => "globalId",
                        },
                        setting(other(*kind)),
                    )?,
                    _ => f.write_str(&advice(schema, *in_payload))?,
                }
                f.write_str(
                    ". The record is not skipped: lakesink stops. If the artifacts are named by \
                     a custom strategy, registry.check-artifacts = false turns this check off",
                )
            }
            Mismatch::KeyValue {
                key,
                key_name,
                value,
                value_name,
                in_payload,
            } => write!(
                f,
                "the key's {key} resolved to {key_name} and the value's {value} ({}) to \
                 {value_name}: Debezium never writes these together, so an id names another \
                 schema than the producer's; {}. The record is not skipped: lakesink stops",
                origin(value, *in_payload),
                advice(value, *in_payload),
            ),
        }
    }
}

impl ChangeError {
    /// Places an error at one side of `record`.
    pub(super) fn at(record: KafkaRecord<'_>, side: Side) -> impl FnOnce(ChangeErrorKind) -> Self {
        move |kind| ChangeError {
            topic: record.topic.to_owned(),
            partition: record.partition,
            offset: record.offset,
            side,
            kind,
        }
    }

    /// Whether the record itself is at fault (bad framing or data, an id the registry does
    /// not know), so other records can still be decoded; not a registry that refuses or
    /// misbehaves, which would fail every record alike.
    pub fn is_bad_record(&self) -> bool {
        self.fault() == Fault::BadData
    }
}

impl Classify for ChangeError {
    fn fault(&self) -> Fault {
        match &self.kind {
            ChangeErrorKind::Registry(e) => e.fault(),
            // Configuration, not data: every record of the topic would follow this one.
            ChangeErrorKind::Mismatch(_) | ChangeErrorKind::Decode(DecodeError::Connector(_)) => {
                Fault::Refused(None)
            }
            _ => Fault::BadData,
        }
    }
}
