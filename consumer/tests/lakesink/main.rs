//! The `lakesink` binary against the real stack, one module per concern, in one test binary
//! (each binary links the whole dependency tree: on 2 cores that is most of a test build).
//! `common` runs the binary: a config per test, runs killed at failpoints, a clean run to the
//! end, and what the raw layer holds.

// Shared with the outage tests' binary.
#[path = "../common/mod.rs"]
mod common;

mod alerts;
mod check;
mod columns;
mod dead_letter;
mod lake;
mod lake_upsert;
mod non_data;
mod raw;
mod raw_headers;
mod replay;
mod replay_debezium;
mod replica;
mod schema_ids;
mod security;
mod service;
mod soak;
mod tail;
