use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn part(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

#[test]
fn a_sinks_mark_round_trips_through_the_metadata() {
    assert_eq!(
        parse_mark("raw", &mark_metadata("raw", 12_345)),
        Some(12_345)
    );
    assert_eq!(
        mark_metadata("raw", 7),
        "lakesink:raw=7",
        "the format earlier versions wrote"
    );
    assert_eq!(parse_mark("raw", ""), None, "offsets reset by a tool");
    assert_eq!(parse_mark("raw", "lakesink:raw=x"), None);
    assert_eq!(parse_mark("raw", "lakesink:rawer=5"), None);
    assert_eq!(parse_mark("lake", "lakesink:raw=5"), None, "another sink's");
    assert_eq!(parse_mark("raw", "someone else's"), None);
}

#[test]
fn a_sinks_watermark_is_below_what_it_holds_and_above_its_floor() {
    assert_eq!(watermark(100, None, None), 100, "everything durable");
    assert_eq!(watermark(100, None, Some(40)), 40, "40.. pending");
    assert_eq!(
        watermark(100, Some(500), None),
        500,
        "durable up to its floor"
    );
    assert_eq!(watermark(600, Some(500), Some(550)), 550);
}

#[test]
fn a_partition_resumes_where_the_sink_furthest_behind_is() {
    let held = |durable, behind| Held { durable, behind };
    // Both at the committed offset: nothing to seek, nothing to skip.
    let r = resume(10, &[held(Some(10), None), held(Some(10), None)]);
    assert_eq!(
        r,
        Resume {
            seek: None,
            floors: vec![None, None]
        }
    );
    // A replica restored from an older backup: read again from it; the raw layer skips.
    let r = resume(1000, &[held(Some(1000), None), held(Some(500), Some(500))]);
    assert_eq!(
        r,
        Resume {
            seek: Some(500),
            floors: vec![Some(1000), None]
        }
    );
    // Offsets moved past the raw layer by a tool: read again from its point; the replica
    // skips what it has.
    let r = resume(1000, &[held(Some(300), Some(300)), held(Some(1000), None)]);
    assert_eq!(
        r,
        Resume {
            seek: Some(300),
            floors: vec![None, Some(1000)]
        }
    );
    // The raw layer ahead of the committed offset (the replica's, below it).
    let r = resume(400, &[held(Some(900), None), held(Some(400), None)]);
    assert_eq!(
        r,
        Resume {
            seek: None,
            floors: vec![Some(900), None]
        }
    );
}

#[test]
fn the_metadata_sinks_point_rides_along_when_it_is_ahead() {
    let mut t = OffsetTracker::new(2, Some((0, "raw")));
    t.started(&part(0), vec![None, None]);
    t.consumed(&part(0), 100);
    // The raw layer holds all, the replica from 40 on.
    let marks = t.marks(|sink, _| (sink == 1).then_some(40));
    assert_eq!(
        marks,
        vec![Mark {
            part: part(0),
            offset: 40,
            metadata: Some("lakesink:raw=100".into())
        }]
    );
    t.consumed(&part(0), 150);
    let marks = t.marks(|sink, _| (sink == 1).then_some(40));
    assert_eq!(marks[0].offset, 40, "Kafka's offset did not move");
    assert!(
        t.metadata_due(Instant::now(), false).len() == 1,
        "so the metadata is committed"
    );
    assert!(t.metadata_due(Instant::now(), false).is_empty(), "once");
}

#[test]
fn a_caught_up_commit_is_paced() {
    let mut t = OffsetTracker::new(1, None);
    t.consumed(&part(0), 10);
    assert!(!t.commit_caught_up(Instant::now()), "nothing stored yet");
    t.marks(|_, _| None);
    let at = Instant::now();
    assert!(t.commit_caught_up(at));
    assert!(!t.commit_caught_up(at), "too soon");
    assert!(t.caught_up_due());
    assert!(t.commit_caught_up(at + CAUGHT_UP_EVERY));
}

/// One sink of the model, on one partition.
#[derive(Debug, Clone, Default)]
struct Fake {
    /// Every record below this is durable in the sink (held from before, or made durable).
    durable: i64,
    /// Records were given to it up to here.
    given: i64,
    /// It let go at this offset and waits to be read again from there.
    out: Option<i64>,
    /// When it let go earlier than a seek, it waits to ask for its own reading
    /// ([`Rewound::Waiting`], as the replica does) instead of asking at once.
    waits: bool,
    /// It has no point of its own for the partition yet (a replica with no offsets row):
    /// it says `Held { durable: None }` and takes the records from where reading starts.
    fresh: bool,
}

impl Fake {
    fn pending(&self) -> Option<i64> {
        self.out
            .or((self.durable < self.given).then_some(self.durable))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Consume(i32, u8),
    Durable(usize, i32, u8),
    /// Sink, partition, and whether it waits to ask for its own reading.
    LetGo(usize, i32, bool),
    /// Read again for the sink that let go latest (`true`: the others need their own
    /// reading again, further back) or earliest.
    ReadAgain(i32, bool),
    Revoke(i32),
    Marks,
}

fn op(sinks: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2i32, 1..20u8).prop_map(|(p, n)| Op::Consume(p, n)),
        4 => (0..sinks, 0..2i32, 1..20u8).prop_map(|(s, p, n)| Op::Durable(s, p, n)),
        1 => (0..sinks, 0..2i32, any::<bool>()).prop_map(|(s, p, w)| Op::LetGo(s, p, w)),
        1 => (0..2i32, any::<bool>()).prop_map(|(p, latest)| Op::ReadAgain(p, latest)),
        1 => (0..2i32).prop_map(Op::Revoke),
        3 => Just(Op::Marks),
    ]
}

/// The system around the tracker: a consumer reading partitions, sinks that make what they
/// are given durable in their own time, let go and are read again, revokes and reassignments
/// that resume from each sink's own durable point.
struct Model {
    tracker: OffsetTracker,
    sinks: Vec<HashMap<i32, Fake>>,
    /// Where the consumer reads next, per partition; None while unassigned.
    reading: HashMap<i32, i64>,
    /// The offset last stored (and so committed) per partition.
    committed: HashMap<i32, i64>,
}

impl Model {
    fn new(sinks: usize, fresh: &[bool]) -> Self {
        let fakes = (0..sinks)
            .map(|s| {
                let f = Fake {
                    fresh: fresh.get(s).copied().unwrap_or(false),
                    ..Fake::default()
                };
                (0..2).map(|p| (p, f.clone())).collect()
            })
            .collect();
        Self {
            tracker: OffsetTracker::new(sinks, Some((0, "raw"))),
            sinks: fakes,
            reading: HashMap::new(),
            committed: HashMap::new(),
        }
    }

    fn fake(&mut self, s: usize, p: i32) -> &mut Fake {
        self.sinks[s].entry(p).or_default()
    }

    /// A partition's first record after assignment, as the pipeline decides it.
    fn assign(&mut self, p: i32) {
        let first = self.committed.get(&p).copied().unwrap_or(0);
        let held: Vec<Held> = (0..self.sinks.len())
            .map(|s| {
                let f = self.fake(s, p);
                if f.fresh {
                    return Held::default();
                }
                let d = f.durable;
                Held {
                    durable: Some(d),
                    behind: (d < first).then_some(d),
                }
            })
            .collect();
        let r = resume(first, &held);
        let from = r.seek.unwrap_or(first);
        for (s, h) in held.iter().enumerate() {
            let fake = self.fake(s, p);
            match h.durable {
                Some(d) => assert!(
                    from <= d,
                    "sink {s} would miss {from}..{d}: resumed at {from}"
                ),
                None => {
                    // It starts where the reading does: nothing below is its.
                    assert_eq!(r.floors[s], None, "sink {s} holds nothing to skip");
                    fake.fresh = false;
                    fake.durable = from;
                }
            }
            if let Some(f) = r.floors[s] {
                assert!(
                    f <= fake.durable,
                    "sink {s} would skip records it does not hold: floor {f} > {}",
                    fake.durable
                );
            }
            fake.out = None;
            fake.given = fake.durable;
        }
        self.tracker.started(&part(p), r.floors);
        self.reading.insert(p, from);
    }

    /// Checks marks to store: none past a record some sink lacks, and the metadata sink's
    /// point in the metadata never past what it holds.
    fn store(&mut self, marks: Vec<Mark>) {
        for m in marks {
            let p = m.part.partition;
            for (s, fakes) in self.sinks.iter().enumerate() {
                let f = &fakes[&p];
                if f.fresh {
                    continue;
                }
                assert!(
                    m.offset <= f.durable,
                    "stored {} for partition {p} past sink {s}'s durable {}",
                    m.offset,
                    f.durable
                );
            }
            if let Some(meta) = &m.metadata {
                let at = parse_mark("raw", meta).expect("the metadata sink's mark");
                let d = self.sinks[0][&p].durable;
                assert!(
                    at > m.offset,
                    "metadata only when ahead: {at} at {}",
                    m.offset
                );
                assert!(at <= d, "metadata says raw holds {at}, it holds {d}");
            }
            self.committed.insert(p, m.offset);
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Consume(p, n) => {
                if !self.reading.contains_key(&p) {
                    self.assign(p);
                }
                let from = self.reading[&p];
                let to = from + i64::from(n);
                for s in 0..self.sinks.len() {
                    let floor = self.tracker.parts[&part(p)].floors[s];
                    let fake = self.fake(s, p);
                    if fake.out.is_none() {
                        // What it gets: the records at or above its floor.
                        let start = floor.map_or(from, |f| from.max(f));
                        assert!(
                            start >= fake.given,
                            "sink {s} given {start}.. twice (it has up to {})",
                            fake.given
                        );
                        fake.given = fake.given.max(to);
                    }
                }
                self.tracker.consumed(&part(p), to);
                self.reading.insert(p, to);
            }
            Op::Durable(s, p, n) => {
                let f = self.fake(s, p);
                if f.out.is_none() {
                    f.durable = (f.durable + i64::from(n)).min(f.given).max(f.durable);
                }
            }
            Op::LetGo(s, p, waits) => {
                if !self.reading.contains_key(&p) {
                    return;
                }
                // With nothing pending a sink lets go where the loop says it was given to.
                let given = self.tracker.given(s).get(&part(p)).copied();
                let f = self.fake(s, p);
                if f.out.is_some() {
                    return;
                }
                f.waits = waits;
                if f.durable < f.given {
                    f.out = Some(f.durable);
                    f.given = f.durable;
                } else if let Some(g) = given {
                    assert_eq!(g, f.given, "sink {s} was given up to {}, not {g}", f.given);
                    f.out = Some(g);
                }
            }
            Op::ReadAgain(p, latest) => {
                let Some(&at) = self.reading.get(&p) else {
                    return;
                };
                let outs: Vec<i64> = (0..self.sinks.len())
                    .filter_map(|s| self.fake(s, p).out)
                    .collect();
                let pick = if latest {
                    outs.iter().max()
                } else {
                    outs.iter().min()
                };
                let Some(&to) = pick else { return };
                let to = to.min(at);
                let outcomes: Vec<Rewound> = (0..self.sinks.len())
                    .map(|s| {
                        let f = self.fake(s, p);
                        match f.out {
                            Some(r) if r >= to => {
                                f.out = None;
                                Rewound::From(r)
                            }
                            Some(_) if f.waits => Rewound::Waiting,
                            Some(r) => Rewound::Again(r),
                            None => Rewound::Skip,
                        }
                    })
                    .collect();
                let asking = outcomes
                    .iter()
                    .filter(|o| matches!(o, Rewound::Again(_)))
                    .count();
                let again = self.tracker.rewound(&part(p), to, &outcomes);
                assert_eq!(
                    again.len(),
                    asking,
                    "each sink that let go earlier and does not wait asks again"
                );
                self.reading.insert(p, to);
                if !again.is_empty() {
                    self.apply(&Op::ReadAgain(p, false));
                }
            }
            Op::Revoke(p) => {
                self.tracker.revoke(&part(p));
                self.reading.remove(&p);
                for s in 0..self.sinks.len() {
                    let f = self.fake(s, p);
                    f.out = None;
                    f.given = f.durable;
                }
            }
            Op::Marks => {
                let sinks = &self.sinks;
                let marks = self
                    .tracker
                    .marks(|s, tp| sinks[s].get(&tp.partition).and_then(Fake::pending));
                self.store(marks);
                // The metadata alone moved: committed with the offset it rides on.
                let due = self.tracker.metadata_due(Instant::now(), true);
                self.store(due);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Whatever the interleaving of records, receipts, letting go, reading again, revokes
    /// and reassignments: no stored offset passes a record some sink has not made durable,
    /// a partition never resumes past what a sink lacks, and no sink is given a record twice
    /// in one reading.
    #[test]
    fn the_stored_offset_never_passes_what_a_sink_lacks(
        sinks in 1..4usize,
        fresh in proptest::collection::vec(any::<bool>(), 3),
        ops in proptest::collection::vec(op(3), 1..200),
    ) {
        let mut m = Model::new(sinks, &fresh);
        for o in ops.iter().map(|o| match o {
            Op::Durable(s, p, n) => Op::Durable(s % sinks, *p, *n),
            Op::LetGo(s, p, w) => Op::LetGo(s % sinks, *p, *w),
            o => o.clone(),
        }) {
            m.apply(&o);
        }
        m.apply(&Op::Marks);
    }
}
