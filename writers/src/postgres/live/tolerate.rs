//! `errors.tolerance = "all"` for the replica. A call that fails on bad data (a record without
//! its key, a value the column cannot hold) is split until the failing records are found:
//! at the record the error names, else in halves. Each such record is read again from Kafka
//! and copied to the dead-letter topic; once the broker has it, a call with no rows moves the
//! replica's offset past it. Everything else is applied in order, per partition as before.

use std::collections::{BTreeMap, VecDeque};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use lakesink_model::{Backoff, Fault, System};
use lakesink_schema_registry::ChangeBatch;
use tracing::warn;

use super::applier::{apply, receipts};
use super::{REPLICA, Rejects};
use crate::postgres::{At, PgReplicator, ReplicaError};
use crate::sink::{Meter, Receipt, SinkError, TopicPartition};

enum Step {
    Apply(Vec<ChangeBatch>),
    /// One record, and why the replica refused it.
    Dead(Box<ChangeBatch>, String),
}

/// Rows applied per partition: what went to the dead-letter topic is not counted.
pub(super) type Applied = BTreeMap<TopicPartition, u64>;

pub(super) fn into_receipts(applied: Applied) -> Vec<Receipt> {
    applied
        .into_iter()
        .map(|(part, rows)| Receipt { part, rows })
        .collect()
}

/// Applies `batches`, split until the records the replica refuses are found and handed to
/// `dead`; `applied` counts what is committed, also when a later part fails.
pub(super) async fn apply_tolerating(
    replicator: &PgReplicator,
    group: &str,
    batches: &[ChangeBatch],
    dead: &dyn Rejects,
    meter: &dyn Meter,
    retry: Backoff,
    applied: &mut Applied,
) -> Result<(), SinkError> {
    let failed = |e: ReplicaError| SinkError::in_sink(REPLICA, e);
    let mut count = |chunk: &[ChangeBatch]| {
        for r in receipts(chunk) {
            *applied.entry(r.part).or_default() += r.rows;
        }
    };
    let mut steps = VecDeque::from([Step::Apply(batches.to_vec())]);
    while let Some(step) = steps.pop_front() {
        match step {
            Step::Apply(chunk) => match apply(replicator, group, &chunk, meter, retry).await {
                Ok(_) => count(&chunk),
                Err(ReplicaError::BadData { at, reason }) => {
                    let reason = format!("{at}: {reason}");
                    if let Some((before, bad, after)) = split_at(&chunk, &at) {
                        push_front(
                            &mut steps,
                            [
                                Step::Apply(before),
                                Step::Dead(Box::new(bad), reason),
                                Step::Apply(after),
                            ],
                        );
                    } else if rows(&chunk) <= 1 {
                        let bad = chunk.into_iter().find(|b| b.rows.num_rows() == 1);
                        let bad = bad.ok_or_else(|| {
                            SinkError::with_fault(Some(REPLICA), Fault::BadData, reason.clone())
                        })?;
                        steps.push_front(Step::Dead(Box::new(bad), reason));
                    } else {
                        let (first, second) = halve(chunk);
                        push_front(&mut steps, [Step::Apply(first), Step::Apply(second)]);
                    }
                }
                Err(e) => return Err(failed(e)),
            },
            Step::Dead(bad, reason) => {
                let offset = bad.first_offset;
                dead.reject(&bad.topic, bad.partition, offset, &reason)
                    .await
                    .map_err(|e| {
                        SinkError::with_fault(Some(REPLICA), Fault::Unavailable(System::Kafka), e)
                    })?;
                if dead.logged() {
                    warn!(error = %reason, dead_letter_topic = dead.topic(), "a record the replica cannot take sent to the dead-letter topic");
                }
                meter.dead_lettered(&bad.topic);
                let mut past = (*bad).clone();
                past.rows = bad.rows.slice(0, 0);
                apply(replicator, group, &[past], meter, retry)
                    .await
                    .map_err(failed)?;
            }
        }
    }
    Ok(())
}

/// Queues `steps` in front, in their order; empty applies are dropped.
fn push_front<const N: usize>(queue: &mut VecDeque<Step>, steps: [Step; N]) {
    for step in steps.into_iter().rev() {
        if matches!(&step, Step::Apply(c) if c.is_empty()) {
            continue;
        }
        queue.push_front(step);
    }
}

fn rows(chunk: &[ChangeBatch]) -> usize {
    chunk.iter().map(|b| b.rows.num_rows()).sum()
}

/// Rows `from..from + len` of a batch, with the offsets they cover.
fn slice(b: &ChangeBatch, from: usize, len: usize) -> ChangeBatch {
    let mut out = b.clone();
    out.rows = b.rows.slice(from, len);
    if let Some(offsets) = out
        .rows
        .column_by_name("__offset")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        && len > 0
    {
        out.first_offset = offsets.value(0);
        out.last_offset = offsets.value(len - 1);
    }
    out
}

/// The chunk split around the one record `at` names: before it, it, after it.
fn split_at(
    chunk: &[ChangeBatch],
    at: &At,
) -> Option<(Vec<ChangeBatch>, ChangeBatch, Vec<ChangeBatch>)> {
    let (offset, last) = at.offsets;
    if offset != last {
        return None;
    }
    let (i, row) = chunk.iter().enumerate().find_map(|(i, b)| {
        if *b.topic != *at.topic || b.partition != at.partition {
            return None;
        }
        let offsets = b
            .rows
            .column_by_name("__offset")?
            .as_primitive_opt::<Int64Type>()?;
        let row = offsets.values().iter().position(|&o| o == offset)?;
        Some((i, row))
    })?;
    let b = &chunk[i];
    let mut before = chunk[..i].to_vec();
    if row > 0 {
        before.push(slice(b, 0, row));
    }
    let mut after = Vec::new();
    let rest = b.rows.num_rows() - row - 1;
    if rest > 0 {
        after.push(slice(b, row + 1, rest));
    }
    after.extend_from_slice(&chunk[i + 1..]);
    Some((before, slice(b, row, 1), after))
}

/// The chunk's rows in two halves, in order.
fn halve(chunk: Vec<ChangeBatch>) -> (Vec<ChangeBatch>, Vec<ChangeBatch>) {
    let mut left = rows(&chunk) / 2;
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for b in chunk {
        let n = b.rows.num_rows();
        if left == 0 && n > 0 {
            second.push(b);
        } else if n <= left {
            left -= n;
            first.push(b);
        } else {
            first.push(slice(&b, 0, left));
            second.push(slice(&b, left, n - left));
            left = 0;
        }
    }
    (first, second)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(partition: i32, offsets: std::ops::Range<i64>) -> ChangeBatch {
        crate::sink::test_batch("t", partition, offsets)
    }

    fn spans(chunk: &[ChangeBatch]) -> Vec<(i32, i64, i64, usize)> {
        chunk
            .iter()
            .map(|b| {
                (
                    b.partition,
                    b.first_offset,
                    b.last_offset,
                    b.rows.num_rows(),
                )
            })
            .collect()
    }

    fn at(partition: i32, from: i64, to: i64) -> At {
        At {
            topic: "t".into(),
            partition,
            offsets: (from, to),
            table: None,
        }
    }

    #[test]
    fn a_named_record_is_cut_out_in_order() {
        let chunk = vec![batch(0, 0..5), batch(1, 10..13), batch(0, 5..8)];
        let (before, bad, after) = split_at(&chunk, &at(1, 11, 11)).expect("found");
        assert_eq!(spans(&before), vec![(0, 0, 4, 5), (1, 10, 10, 1)]);
        assert_eq!(spans(&[bad]), vec![(1, 11, 11, 1)]);
        assert_eq!(spans(&after), vec![(1, 12, 12, 1), (0, 5, 7, 3)]);
        // At the edges nothing empty is left.
        let (before, _, after) = split_at(&chunk, &at(0, 0, 0)).expect("found");
        assert!(before.is_empty());
        assert_eq!(after.len(), 3);
        assert!(
            split_at(&chunk, &at(0, 0, 4)).is_none(),
            "a range names no record"
        );
        assert!(
            split_at(&chunk, &at(2, 1, 1)).is_none(),
            "nor another partition"
        );
    }

    #[test]
    fn halves_keep_each_partitions_order() {
        let chunk = vec![batch(0, 0..5), batch(1, 10..13), batch(0, 5..8)];
        let (first, second) = halve(chunk);
        assert_eq!(spans(&first), vec![(0, 0, 4, 5)]);
        assert_eq!(spans(&second), vec![(1, 10, 12, 3), (0, 5, 7, 3)]);
        let (first, second) = halve(vec![batch(0, 0..3)]);
        assert_eq!(spans(&first), vec![(0, 0, 0, 1)]);
        assert_eq!(spans(&second), vec![(0, 1, 2, 2)]);
    }
}
