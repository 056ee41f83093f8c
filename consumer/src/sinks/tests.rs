//! The loop against in-memory sinks: stalls, revokes, failures and seeks, without the stack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lakesink_model::{Classify, Fault, System};
use lakesink_schema_registry::{NonData, ValueShape};
use lakesink_writers::testing::{MemorySink, MemoryState, batch, lock};

use super::*;
use crate::telemetry::Setup;

fn part(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

/// What the loop stored and committed, as the consumer would have been told.
enum Recorded {
    Store(Vec<Mark>),
    CommitStored,
}

struct Recorder(mpsc::UnboundedSender<Recorded>);

impl Offsets for Recorder {
    fn store(&self, marks: &[Mark]) {
        let _ = self.0.send(Recorded::Store(marks.to_vec()));
    }
    fn commit_stored(&self) {
        let _ = self.0.send(Recorded::CommitStored);
    }
    fn commit(&self, _: &[Mark], _: bool) {}
}

struct Harness {
    tx: mpsc::Sender<ToSinks>,
    recorded: mpsc::UnboundedReceiver<Recorded>,
    _control: mpsc::UnboundedReceiver<Control>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// The last offset stored per partition, and every partition stored after a point.
    stored: HashMap<TopicPartition, i64>,
    commits: usize,
}

fn start(sinks: Vec<MemorySink>) -> (Harness, Vec<Arc<Mutex<MemoryState>>>) {
    let states = sinks.iter().map(MemorySink::state).collect();
    let names: Vec<&'static str> = sinks.iter().map(|s| s.name()).collect();
    let boxed: Vec<Box<dyn Sink>> = sinks.into_iter().map(|s| Box::new(s) as _).collect();
    let (tx, rx) = mpsc::channel(2);
    let (ctl, control) = mpsc::unbounded_channel();
    let (rec, recorded) = mpsc::unbounded_channel();
    let setup = Setup {
        sinks: &names,
        group: "test",
        brokers: "127.0.0.1:9",
        kafka_grace: Duration::from_secs(300),
    };
    let telemetry = Arc::new(Telemetry::new(&setup, None));
    let task = tokio::spawn(run(boxed, rx, (ctl, Box::new(Recorder(rec))), telemetry));
    let h = Harness {
        tx,
        recorded,
        _control: control,
        task,
        stored: HashMap::new(),
        commits: 0,
    };
    (h, states)
}

impl Harness {
    async fn send(&self, item: ToSinks) {
        self.tx.send(item).await.expect("the loop runs");
    }

    async fn batches(&self, p: i32, offsets: std::ops::Range<i64>) {
        let end = offsets.end;
        self.send(ToSinks::Batches {
            batches: vec![batch("t", p, offsets)],
            consumed: vec![(part(p), end)],
        })
        .await;
    }

    /// Lets the loop run a while (time is paused: this is instant), then reads what it asked.
    async fn settle(&mut self) -> Vec<TopicPartition> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut stored_now = Vec::new();
        while let Ok(r) = self.recorded.try_recv() {
            match r {
                Recorded::Store(marks) => {
                    for m in marks {
                        stored_now.push(m.part.clone());
                        self.stored.insert(m.part, m.offset);
                    }
                }
                Recorded::CommitStored => self.commits += 1,
            }
        }
        stored_now
    }
}

fn durable(state: &Mutex<MemoryState>, p: i32) -> Vec<i64> {
    lock(state)
        .durable
        .get(&part(p))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_stalled_sink_holds_back_the_stored_offset_and_the_other_goes_on() {
    let (mut h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    lock(&st[1]).stalled = true;
    h.send(ToSinks::Started {
        part: part(0),
        floors: vec![None, None],
    })
    .await;
    h.batches(0, 0..10).await;
    h.settle().await;
    assert_eq!(durable(&st[0], 0), (0..10).collect::<Vec<_>>(), "a goes on");
    assert!(durable(&st[1], 0).is_empty());
    assert_eq!(h.stored.get(&part(0)), Some(&0), "b holds 0.. pending");
    assert_eq!(h.commits, 0, "not caught up");

    lock(&st[1]).stalled = false;
    h.settle().await;
    assert_eq!(durable(&st[1], 0), (0..10).collect::<Vec<_>>());
    assert_eq!(h.stored.get(&part(0)), Some(&10));
    assert_eq!(h.commits, 1, "caught up: committed at once");
}

#[tokio::test(start_paused = true)]
async fn a_revoke_mid_batch_touches_only_the_revoked_partition() {
    let (mut h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    lock(&st[1]).stalled = true;
    for p in 0..2 {
        h.send(ToSinks::Started {
            part: part(p),
            floors: vec![None, None],
        })
        .await;
        h.batches(p, 0..5).await;
    }
    h.settle().await;
    h.send(ToSinks::Revoked(vec![part(0)])).await;
    h.settle().await;
    lock(&st[1]).stalled = false;
    let after = h.settle().await;
    assert!(
        !after.contains(&part(0)),
        "nothing stored for a revoked partition: {after:?}"
    );
    assert_eq!(
        h.stored.get(&part(1)),
        Some(&5),
        "the other partition goes on"
    );
    assert!(
        durable(&st[1], 0).is_empty(),
        "its pending work was dropped"
    );
    assert_eq!(durable(&st[1], 1), (0..5).collect::<Vec<_>>());
    assert_eq!(lock(&st[0]).revoked, vec![part(0)]);
}

#[tokio::test(start_paused = true)]
async fn a_failing_sink_stops_the_loop_naming_itself() {
    let (h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    lock(&st[1]).fail_next_write = Some(Fault::Refused(Some(System::Database)));
    h.send(ToSinks::Started {
        part: part(0),
        floors: vec![None, None],
    })
    .await;
    h.batches(0, 0..3).await;
    let err = h.task.await.expect("joined").expect_err("the loop stops");
    let sink = err.downcast_ref::<SinkError>().expect("a sink error");
    assert_eq!(sink.sink(), Some("b"));
    assert_eq!(sink.fault(), Fault::Refused(Some(System::Database)));
}

#[tokio::test(start_paused = true)]
async fn records_that_are_not_rows_reach_only_the_sinks_that_take_them() {
    let (mut h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    h.send(ToSinks::Started {
        part: part(0),
        floors: vec![None, None],
    })
    .await;
    let mut heartbeat = batch("t", 0, 0..1);
    heartbeat.shape = ValueShape::NonData(NonData::Heartbeat);
    h.send(ToSinks::Batches {
        batches: vec![heartbeat, batch("t", 0, 1..4)],
        consumed: vec![(part(0), 4)],
    })
    .await;
    h.settle().await;
    assert_eq!(lock(&st[0]).non_data, 1);
    assert_eq!(lock(&st[1]).non_data, 0);
    assert_eq!(durable(&st[1], 0), vec![1, 2, 3]);
    assert_eq!(
        h.stored.get(&part(0)),
        Some(&4),
        "the heartbeat counts as covered"
    );
}

#[tokio::test(start_paused = true)]
async fn floors_and_seeks_back_give_each_sink_each_record_once() {
    let (mut h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    // b held 0..3 from before this run.
    h.send(ToSinks::Started {
        part: part(0),
        floors: vec![None, Some(3)],
    })
    .await;
    h.batches(0, 0..10).await;
    h.settle().await;
    // Read again from 5 (for some other reason): both hold what they had.
    h.send(ToSinks::Rewound(part(0), 5)).await;
    h.batches(0, 5..15).await;
    h.send(ToSinks::Stop).await;
    h.task.await.expect("joined").expect("stopped cleanly");
    assert_eq!(durable(&st[0], 0), (0..15).collect::<Vec<_>>());
    assert_eq!(durable(&st[1], 0), (3..15).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_let_go_takes_the_partition_again_from_where_it_did() {
    let (mut h, st) = start(vec![
        MemorySink::new("a", true),
        MemorySink::new("b", false),
    ]);
    lock(&st[1]).stalled = true;
    h.send(ToSinks::Started {
        part: part(0),
        floors: vec![None, None],
    })
    .await;
    h.batches(0, 0..10).await;
    h.settle().await;
    // b lets go of what it held (its store went away) and takes nothing meanwhile.
    {
        let mut b = lock(&st[1]);
        b.pending.clear();
        b.out.insert(part(0), 0);
        b.stalled = false;
    }
    h.batches(0, 10..12).await;
    h.settle().await;
    assert_eq!(h.stored.get(&part(0)), Some(&0), "b holds nothing from 0");
    // The consuming side reads it again from 0, as b would ask.
    h.send(ToSinks::Rewound(part(0), 0)).await;
    h.batches(0, 0..12).await;
    h.settle().await;
    assert_eq!(
        durable(&st[0], 0),
        (0..12).collect::<Vec<_>>(),
        "a: each record once"
    );
    assert_eq!(
        durable(&st[1], 0),
        (0..12).collect::<Vec<_>>(),
        "b: all again, once"
    );
    assert_eq!(h.stored.get(&part(0)), Some(&12));
}
