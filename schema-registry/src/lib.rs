//! Schema registry clients (Apicurio v2/v3, Confluent-compatible), wire framing, the schema
//! cache, and Avro to Arrow decoding with Debezium's semantic types.
//!
//! This crate knows nothing of sinks or Kafka clients: callers hand it bytes and headers.

pub mod avro;
pub mod change;
pub mod connect_json;
pub mod framing;
pub mod non_data;
pub mod registry;

pub use change::{
    CacheStats, ChangeBatch, ChangeDecoder, ChangeError, ChangeErrorKind, Format, KafkaRecord,
    Mismatch, Pushed, ValueShape,
};
pub use framing::{Encoding, Framed, FramingError, IdKind, SchemaRef, Side, unframe};
pub use non_data::{NON_DATA_METADATA, NonData, Route, Routes};
pub use registry::{
    Api, Auth, Backoff, CachedResolver, FixedResolver, HttpRegistry, HttpRegistryConfig,
    REQUEST_RETRIES, Registration, RegistryError, ResolvedSchema, SchemaResolver,
};
