//! Smoke tests: each real component of the stack answers, the way lakesink will use it.
//! Each fails, with a message saying how to start the stack, when its component is down.

mod debezium;
mod kafka;
mod postgres;
mod registry;
mod s3;
