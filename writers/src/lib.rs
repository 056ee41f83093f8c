//! lakesink's sinks: Parquet on object storage (the raw layer), the PostgreSQL replica,
//! and replay. Writers take plain values (topic, partition, offsets), never rdkafka types.
//!
//! Empty until the raw-layer and replica issues land.
