//! The words every lakesink crate shares and none owns: the one partition type, the fault
//! taxonomy every error maps onto, and the one retry helper. It knows no Kafka client, no
//! Arrow and no SQL.

pub mod causes;
pub mod fault;
pub mod retry;

pub use causes::with_causes;
pub use fault::{Classify, Failure, Fault, System};
pub use retry::{Backoff, Observe, Retry, retrying};

use std::sync::Arc;

/// A Kafka topic partition: what offsets, floors and receipts are kept per.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}
