//! Schema registry clients (Apicurio v2/v3, Confluent-compatible), wire framing, the schema
//! cache, and Avro to Arrow decoding with Debezium's semantic types.
//!
//! Empty until the decode issue lands; the workspace layout and its dependency direction
//! (this crate knows nothing of sinks or Kafka clients) are fixed here first.
