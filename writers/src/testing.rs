//! Test doubles for the [`Sink`] contract, behind the `test-utils` feature: an in-memory sink
//! whose durability, stalls and failures the test controls, so the pipeline loop is tested
//! without the stack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use lakesink_model::{Fault, System};
use lakesink_schema_registry::{ChangeBatch, ValueShape};

use crate::sink::TopicPartition;
use crate::sink::{Backpressure, Event, Held, Receipt, Resume, Rewound, Sink, SinkError};

/// What a [`MemorySink`] holds; shared with the test through [`MemorySink::state`].
#[derive(Debug, Default)]
pub struct MemoryState {
    /// Offsets given and not yet durable, per partition, in order.
    pub pending: HashMap<TopicPartition, Vec<i64>>,
    /// Offsets made durable, per partition, in the order they became so.
    pub durable: HashMap<TopicPartition, Vec<i64>>,
    /// While set, nothing becomes durable.
    pub stalled: bool,
    /// The next write fails with this fault.
    pub fail_next_write: Option<Fault>,
    /// Batches of records that are not rows it was given.
    pub non_data: usize,
    /// Revoked partitions, in order.
    pub revoked: Vec<TopicPartition>,
    /// Partitions it let go of, with the first offset it does not hold: it answers a seek
    /// back to there or earlier with `From`, and takes the partition again.
    pub out: HashMap<TopicPartition, i64>,
}

/// A sink in memory: what it is given becomes durable at its next event, unless stalled.
pub struct MemorySink {
    name: &'static str,
    takes_non_data: bool,
    state: Arc<Mutex<MemoryState>>,
}

impl MemorySink {
    pub fn new(name: &'static str, takes_non_data: bool) -> Self {
        Self {
            name,
            takes_non_data,
            state: Arc::default(),
        }
    }

    /// The state, for the test to look at and steer.
    pub fn state(&self) -> Arc<Mutex<MemoryState>> {
        self.state.clone()
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        lock(&self.state)
    }
}

pub fn lock(state: &Mutex<MemoryState>) -> MutexGuard<'_, MemoryState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sink for MemorySink {
    fn name(&self) -> &'static str {
        self.name
    }

    fn takes_non_data(&self) -> bool {
        self.takes_non_data
    }

    fn write<'a>(
        &'a mut self,
        batches: &'a [ChangeBatch],
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), SinkError>> {
        let mut st = self.lock();
        let result = match st.fail_next_write.take() {
            Some(fault) => Err(SinkError::with_fault(
                Some(self.name),
                fault,
                "told to fail",
            )),
            None => {
                for b in batches {
                    if matches!(b.shape, ValueShape::NonData(_)) {
                        st.non_data += 1;
                    }
                    let part = TopicPartition::new(b.topic.clone(), b.partition);
                    // It let go of the partition: it takes none of its records.
                    if st.out.contains_key(&part) {
                        continue;
                    }
                    st.pending.entry(part).or_default().extend(offsets(b));
                }
                Ok(())
            }
        };
        Box::pin(async move { result })
    }

    fn tick(&mut self, _now_ms: i64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async { Ok(()) })
    }

    fn busy(&self) -> bool {
        let st = self.lock();
        !st.stalled && st.pending.values().any(|p| !p.is_empty())
    }

    /// Cancel-safe as the contract asks: nothing happens until the future is polled, and
    /// then at once.
    fn next_event(&mut self) -> BoxFuture<'_, Result<Event, SinkError>> {
        Box::pin(async move {
            let receipts = {
                let mut st = self.lock();
                if st.stalled {
                    Vec::new()
                } else {
                    flush(&mut st)
                }
            };
            if receipts.is_empty() {
                Ok(Event::Nothing)
            } else {
                Ok(Event::Durable(receipts))
            }
        })
    }

    fn pending_start(&self, part: &TopicPartition) -> Option<i64> {
        let st = self.lock();
        let pending = st.pending.get(part).and_then(|p| p.first().copied());
        match (pending, st.out.get(part)) {
            (Some(a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b.copied()),
        }
    }

    fn rewound(&mut self, part: &TopicPartition, from: i64, _: Option<i64>) -> Rewound {
        let mut st = self.lock();
        match st.out.get(part).copied() {
            Some(r) if r >= from => {
                st.out.remove(part);
                Rewound::From(r)
            }
            Some(r) => Rewound::Again(r),
            None => Rewound::Skip,
        }
    }

    fn revoke(&mut self, part: &TopicPartition) {
        let mut st = self.lock();
        st.pending.remove(part);
        st.revoked.push(part.clone());
    }

    fn backpressure(&mut self, _: &HashMap<TopicPartition, i64>, _: bool) -> Backpressure {
        Backpressure::default()
    }

    fn close(&mut self, _now_ms: i64) -> BoxFuture<'_, Result<Vec<Receipt>, SinkError>> {
        let mut st = self.lock();
        let result = if st.stalled {
            Err(SinkError::with_fault(
                Some(self.name),
                Fault::Unavailable(System::Database),
                "stalled at close",
            ))
        } else {
            Ok(flush(&mut st))
        };
        Box::pin(async move { result })
    }

    fn resume(&self) -> Arc<dyn Resume> {
        Arc::new(MemoryResume(self.state.clone()))
    }
}

/// Moves everything pending to durable.
fn flush(st: &mut MemoryState) -> Vec<Receipt> {
    let mut receipts = Vec::new();
    let pending = std::mem::take(&mut st.pending);
    for (part, offsets) in pending {
        if offsets.is_empty() {
            continue;
        }
        receipts.push(Receipt {
            part: part.clone(),
            rows: offsets.len() as u64,
        });
        st.durable.entry(part).or_default().extend(offsets);
    }
    receipts
}

/// Where a memory sink stands: after its last durable offset.
struct MemoryResume(Arc<Mutex<MemoryState>>);

impl Resume for MemoryResume {
    fn held<'a>(
        &'a self,
        part: &'a TopicPartition,
        committed: i64,
        _mark: Option<i64>,
    ) -> BoxFuture<'a, Result<Held, SinkError>> {
        let next = lock(&self.0)
            .durable
            .get(part)
            .and_then(|d| d.iter().max())
            .map(|o| o + 1);
        Box::pin(async move {
            Ok(Held {
                durable: next,
                behind: next.filter(|&n| n < committed),
            })
        })
    }
}

fn offsets(b: &ChangeBatch) -> Vec<i64> {
    use arrow_array::cast::AsArray;
    b.rows
        .column_by_name("__offset")
        .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
        .map(|o| o.values().to_vec())
        .unwrap_or_default()
}

/// A batch of rows at `offsets` (an `__offset` column only).
pub fn batch(topic: &str, partition: i32, offsets: std::ops::Range<i64>) -> ChangeBatch {
    crate::sink::test_batch(topic, partition, offsets)
}
