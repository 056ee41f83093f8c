//! Tests that stop a component of the shared stack (the object store, the replica database)
//! under a running `lakesink`: a binary of their own, so that no other test runs meanwhile
//! (test binaries run one after another).

#[path = "../common/mod.rs"]
mod common;

mod raw_outage;
mod replica_restart;
