//! lakesink's sinks: Parquet on object storage (the raw layer), the PostgreSQL replica,
//! and replay. Writers take plain values (topic, partition, offsets), never rdkafka types.

pub mod failpoint;
pub mod lake;
pub mod parquet;
pub mod postgres;
pub mod replay;
pub mod sink;
#[cfg(feature = "test-utils")]
pub mod testing;

pub use postgres::{Applied, PgReplicator, ReplicaError, Rounded, describe_pg, is_auth_failure};
