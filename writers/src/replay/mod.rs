//! Replay: rebuilding a replica, or a slice of one, from the raw layer.
//!
//! The segment markers of the raw layer ([`crate::parquet::marker`]) list, per Kafka
//! partition, every segment's offsets and files: [`plan`] reads them, orders them by offset,
//! checks that they chain (each segment starts right after the previous one) and that their
//! files exist, and cuts them to the [`Selection`] and to where the replica already stands.
//! [`run`] then reads each segment's files ([`read_segment`]), merges their rows by offset
//! into [`ChangeBatch`](lakesink_schema_registry::ChangeBatch)es equal to the ones the live
//! path decoded, and applies them with the live path's
//! [`PgReplicator`](crate::PgReplicator): the same mapping, types, upsert and delete rules,
//! and the same offsets table under the same group. Partitions run in parallel, each in
//! offset order; every transaction stores its partition's next offset, so an interrupted
//! replay resumes where it stopped and the live service takes over from there.

mod plan;
mod read;
mod run;

#[cfg(test)]
mod tests;

pub use plan::{
    FilePlan, OffsetRange, PartitionPlan, Plan, RawLayer, SegmentPlan, Selection, TopicFilter, plan,
};
pub use read::{Cursor, SegmentRows, read_segment};
pub use run::{Options, PartitionDone, Stats, Summary, run};

/// A fatal error: the replay cannot be planned or started.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay config: {0}")]
    Config(String),
    #[error("raw layer store: {what}: {source}")]
    Store {
        what: String,
        #[source]
        source: object_store::Error,
    },
}

impl lakesink_model::Classify for ReplayError {
    fn fault(&self) -> lakesink_model::Fault {
        match self {
            Self::Config(_) => lakesink_model::Fault::Refused(None),
            Self::Store { source, .. } => crate::parquet::store_fault(source),
        }
    }
}

/// What is wrong with the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A file a marker lists is not in the store.
    MissingFile,
    /// Offsets no segment holds: a marker (and its files) missing from the chain, or records
    /// between the replica's offset and the raw layer's first.
    OffsetGap,
    /// A file that is not Parquet, is truncated, or holds rows it should not.
    CorruptFile,
    /// A marker that cannot be read or contradicts its key.
    CorruptMarker,
    /// A file that is not a raw-layer file of change events (flattened content).
    Unreplayable,
    /// Rows the replica refused: a schema or value it cannot take.
    Refused,
    /// The store or the database failed beyond retries.
    Unavailable,
}

impl std::fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::MissingFile => "missing file",
            Self::OffsetGap => "offset gap",
            Self::CorruptFile => "corrupt file",
            Self::CorruptMarker => "corrupt marker",
            Self::Unreplayable => "not replayable",
            Self::Refused => "refused by the replica",
            Self::Unavailable => "unavailable",
        })
    }
}

/// One problem, with where it is: the partition, the offsets concerned and the object key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub topic: String,
    pub partition: i32,
    /// First and last offset concerned (a whole segment's for a file).
    pub offsets: Option<(i64, i64)>,
    pub key: Option<String>,
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}[{}]", self.kind, self.topic, self.partition)?;
        if let Some((a, b)) = self.offsets {
            write!(f, " offsets {a}..={b}")?;
        }
        if let Some(k) = &self.key {
            write!(f, ", object {k}")?;
        }
        write!(f, ": {}", self.detail)
    }
}
