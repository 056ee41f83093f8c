//! Tests that stop a component of the shared stack (the object store, the replica database)
//! under a running `lakesink`: a binary of their own, so that no other test runs meanwhile
//! (test binaries run one after another), and one at a time within it ([`ALONE`]).

/// Held for the whole of each test: the outages of one must not reach the other.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[path = "../common/mod.rs"]
mod common;

mod raw_outage;
mod replica_restart;
