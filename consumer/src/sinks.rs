//! The sink side of the pipeline, on its own task so that writing runs beside consuming and
//! decoding. It receives decoded batches in order ([`ToSinks`]), feeds every enabled sink
//! through the [`Sink`] contract, keeps the [`OffsetTracker`] up to date from what each sink
//! holds, stores and commits what they made durable ([`Offsets`]), and asks the consuming side
//! to read partitions again or pause them ([`Control`]). It knows no sink by name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lakesink_schema_registry::{ChangeBatch, ValueShape};
use lakesink_writers::sink::{Event, Receipt, Sink, SinkError, TopicPartition};
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::offsets::{Mark, OffsetTracker};
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::SinkTopicLabels;

/// How often idle partitions and wall-clock rotation are looked at.
const TICK: Duration = Duration::from_millis(200);

/// What the consuming side sends, in consumption order.
pub(crate) enum ToSinks {
    /// Decoded batches, and per partition the offset after the last record they cover
    /// (records that were not rows count as covered).
    Batches {
        batches: Vec<ChangeBatch>,
        consumed: Vec<(TopicPartition, i64)>,
    },
    /// A partition's first record: per sink, below its floor it holds the records already.
    Started {
        part: TopicPartition,
        floors: Vec<Option<i64>>,
    },
    Revoked(Vec<TopicPartition>),
    /// The answer to [`Control::ReadAgain`]: the consumer goes on from this offset (sought
    /// back to it, or there already); what follows may have been read before.
    Rewound(TopicPartition, i64),
    /// Shut down: close files, wait for uploads and the last transaction, store offsets.
    Stop,
}

/// What the sink side asks of the consuming side, which owns seeks and pauses.
#[derive(Debug)]
pub(crate) enum Control {
    /// Read partitions again from these offsets; answered by [`ToSinks::Rewound`].
    ReadAgain(Vec<(TopicPartition, i64)>),
    /// Keep exactly these partitions paused, for these sinks (named in the log).
    Pause {
        parts: Vec<TopicPartition>,
        by: Vec<&'static str>,
    },
}

/// Where the loop stores and commits offsets (`kafka::calls::Committer`, or a test's
/// record). Storing and committing are done here, not on the consuming side, so that what
/// became durable is stored at once even while the consuming side waits (on the registry,
/// on a full channel); both are safe from any thread.
pub(crate) trait Offsets: Send {
    /// For the auto-commit.
    fn store(&self, marks: &[Mark]);
    /// Everything consumed is durable: commit what is stored now.
    fn commit_stored(&self);
    /// Commit these (their metadata moved while their offsets did not); `sync` at shutdown.
    fn commit(&self, marks: &[Mark], sync: bool);
}

pub(crate) async fn run(
    mut sinks: Vec<Box<dyn Sink>>,
    mut items: mpsc::Receiver<ToSinks>,
    (control, offsets): (mpsc::UnboundedSender<Control>, Box<dyn Offsets>),
    telemetry: Arc<Telemetry>,
) -> anyhow::Result<()> {
    let metadata_sink = sinks
        .iter()
        .position(|s| s.commits_mark())
        .map(|i| (i, sinks[i].name()));
    let mut tracker = OffsetTracker::new(sinks.len(), metadata_sink);
    let mut driver = Driver {
        control,
        offsets,
        telemetry,
        paused: Vec::new(),
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let full = driver.backpressure(&mut sinks, &tracker);
        let busy = sinks.iter().any(|s| s.busy());
        tokio::select! {
            (i, event) = next_event(&mut sinks), if busy => {
                driver.event(sinks[i].name(), event?, &tracker);
                driver.store(&sinks, &mut tracker, true);
            }
            _ = tick.tick() => {
                let now = now_ms();
                for s in &mut sinks {
                    s.tick(now).await?;
                }
                let due = tracker.caught_up_due();
                driver.store(&sinks, &mut tracker, due);
                let due = tracker.metadata_due(Instant::now(), false);
                driver.send_marks(due, false);
                for (i, s) in sinks.iter_mut().enumerate() {
                    s.durable(&tracker.points(i), false).await;
                }
                driver.telemetry.partitions.positions(&tracker.positions());
            }
            item = items.recv(), if !full => match item {
                None | Some(ToSinks::Stop) => break,
                Some(ToSinks::Batches { batches, consumed }) => {
                    write(&mut sinks, &tracker, &batches).await?;
                    for (part, next) in consumed {
                        tracker.consumed(&part, next);
                    }
                }
                Some(ToSinks::Started { part, floors }) => tracker.started(&part, floors),
                Some(ToSinks::Rewound(part, from)) => {
                    let before = tracker.consumed_at(&part);
                    let outcomes: Vec<_> =
                        sinks.iter_mut().map(|s| s.rewound(&part, from, before)).collect();
                    let again = tracker.rewound(&part, from, &outcomes);
                    driver.send(Control::ReadAgain(again));
                }
                Some(ToSinks::Revoked(parts)) => {
                    for part in parts {
                        for s in &mut sinks {
                            s.revoke(&part);
                        }
                        tracker.revoke(&part);
                    }
                }
            }
        }
    }
    info!("stopping: flushing the sinks");
    let now = now_ms();
    for s in &mut sinks {
        let receipts = s.close(now).await?;
        driver.counted(s.name(), &receipts, &tracker);
    }
    driver.store(&sinks, &mut tracker, false);
    for (i, s) in sinks.iter_mut().enumerate() {
        s.durable(&tracker.points(i), true).await;
    }
    let due = tracker.metadata_due(Instant::now(), true);
    driver.send_marks(due, true);
    Ok(())
}

/// The loop's side effects: messages to the consuming side, metrics.
struct Driver {
    control: mpsc::UnboundedSender<Control>,
    offsets: Box<dyn Offsets>,
    telemetry: Arc<Telemetry>,
    /// The partitions last asked to be paused.
    paused: Vec<TopicPartition>,
}

impl Driver {
    fn send(&self, c: Control) {
        let empty = match &c {
            Control::ReadAgain(r) => r.is_empty(),
            Control::Pause { .. } => false,
        };
        // A closed channel means the consuming side stopped; it reports why.
        if !empty && self.control.send(c).is_err() {
            debug!("the consuming side stopped");
        }
    }

    fn send_marks(&self, marks: Vec<Mark>, sync: bool) {
        if !marks.is_empty() {
            self.offsets.commit(&marks, sync);
        }
    }

    /// Asks every sink: whether to take more, what to pause, what to read again.
    fn backpressure(&mut self, sinks: &mut [Box<dyn Sink>], tracker: &OffsetTracker) -> bool {
        let alone = sinks.len() == 1;
        let mut full = false;
        let mut pause = Vec::new();
        let mut by = Vec::new();
        for (i, s) in sinks.iter_mut().enumerate() {
            let b = s.backpressure(&tracker.given(i), alone);
            full |= b.full;
            if !b.pause.is_empty() {
                by.push(s.name());
            }
            pause.extend(b.pause);
            self.send(Control::ReadAgain(b.read_again));
        }
        pause.sort();
        pause.dedup();
        if pause != self.paused {
            self.send(Control::Pause {
                parts: pause.clone(),
                by,
            });
            self.paused = pause;
        }
        full
    }

    fn event(&self, sink: &'static str, event: Event, tracker: &OffsetTracker) {
        match event {
            Event::Durable(receipts) => self.counted(sink, &receipts, tracker),
            Event::ReadAgain(due) => self.send(Control::ReadAgain(due)),
            Event::Nothing => {}
        }
    }

    fn counted(&self, sink: &'static str, receipts: &[Receipt], tracker: &OffsetTracker) {
        for r in receipts {
            self.telemetry
                .metrics
                .written
                .get_or_create(&SinkTopicLabels {
                    sink,
                    topic: r.part.topic.to_string(),
                })
                .inc_by(r.rows);
            if !tracker.knows(&r.part) {
                // Revoked meanwhile: the new owner writes the same; nothing to store here.
                info!(sink, partition = %r.part, "work of a revoked partition finished");
            }
        }
    }

    /// Stores each partition's watermark where it moved; with `commit`, commits at once when
    /// everything consumed is durable.
    fn store(&self, sinks: &[Box<dyn Sink>], tracker: &mut OffsetTracker, commit: bool) {
        let marks = tracker.marks(|i, part| sinks[i].pending_start(part));
        let moved = !marks.is_empty();
        if moved {
            self.offsets.store(&marks);
        }
        if commit && (moved || tracker.caught_up_due()) && tracker.commit_caught_up(Instant::now())
        {
            self.offsets.commit_stored();
        }
    }
}

/// Gives each sink what it does not hold of a hand-over.
async fn write(
    sinks: &mut [Box<dyn Sink>],
    tracker: &OffsetTracker,
    batches: &[ChangeBatch],
) -> Result<(), SinkError> {
    let now = now_ms();
    for (i, s) in sinks.iter_mut().enumerate() {
        let mut rows = tracker.for_sink(i, batches);
        if !s.takes_non_data() {
            rows.retain(|b| !matches!(b.shape, ValueShape::NonData(_)));
        }
        s.write(&rows, now).await?;
    }
    Ok(())
}

/// The next event of any busy sink, with the sink's index; never resolves when none is busy.
async fn next_event(sinks: &mut [Box<dyn Sink>]) -> (usize, Result<Event, SinkError>) {
    let waiting: Vec<_> = sinks
        .iter_mut()
        .enumerate()
        .filter(|(_, s)| s.busy())
        .map(|(i, s)| Box::pin(async move { (i, s.next_event().await) }))
        .collect();
    if waiting.is_empty() {
        return std::future::pending().await;
    }
    futures::future::select_all(waiting).await.0
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests;
