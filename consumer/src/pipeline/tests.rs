use rdkafka::Timestamp;
use rdkafka::message::OwnedMessage;

use super::*;
use crate::sinks::ToSinks;

fn message(topic: &str, partition: i32, offset: i64) -> OwnedMessage {
    OwnedMessage::new(
        Some(b"v".to_vec()),
        None,
        topic.to_owned(),
        Timestamp::NotAvailable,
        partition,
        offset,
        None,
    )
}

fn feed() -> (Feed, mpsc::Receiver<ToDecoder>) {
    let (tx, rx) = mpsc::channel(16);
    let (_, spare) = mpsc::unbounded_channel();
    let feed = Feed {
        started: HashMap::default(),
        last: None,
        chunk: Chunk::default(),
        spare,
        tx,
    };
    (feed, rx)
}

/// What reached the decoding side: records as (topic, partition, offset), other items named.
fn received(rx: &mut mpsc::Receiver<ToDecoder>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(item) = rx.try_recv() {
        match item {
            ToDecoder::Records(chunk) => out.extend(chunk.iter().map(|r| {
                use crate::kafka::Incoming;
                format!("{}[{}]@{}", r.topic(), r.partition(), r.offset())
            })),
            ToDecoder::Started { part, .. } => out.push(format!("started {part}")),
            ToDecoder::Revoked(parts) => out.push(format!("revoked {}", parts.len())),
            ToDecoder::Rewound { part, at, sought } => {
                out.push(format!("rewound {part} at {at} sought {sought}"))
            }
            ToDecoder::Stop => out.push("stop".into()),
        }
    }
    out
}

#[tokio::test]
async fn the_feed_takes_only_started_partitions_and_keeps_items_in_order() {
    let (mut feed, mut rx) = feed();
    assert!(!feed.take(&message("t", 0, 5), "t"));
    let t = feed.start("t", 0);
    // The feed's own name, shared by later starts of the topic.
    assert!(Arc::ptr_eq(&t, &feed.start("t", 1)));
    feed.send(ToDecoder::Started {
        part: TopicPartition::new(t.clone(), 0),
        floors: Vec::new(),
    })
    .await
    .unwrap();
    assert!(feed.take(&message("t", 0, 5), "t"));
    assert!(feed.take(&message("t", 1, 9), "t"));
    assert!(!feed.take(&message("t", 2, 1), "t"));
    assert!(!feed.take(&message("u", 0, 1), "u"));
    // Records taken before an item reach the decoding side before it.
    let part = TopicPartition::new("t", 0);
    feed.forget(&part);
    assert!(!feed.is_started("t", 0) && feed.is_started("t", 1));
    assert!(!feed.take(&message("t", 0, 6), "t"));
    feed.send(ToDecoder::Revoked(vec![part])).await.unwrap();
    assert!(feed.take(&message("t", 1, 10), "t"));
    feed.flush().await.unwrap();
    // Nothing to send: no empty chunk.
    feed.flush().await.unwrap();
    feed.send(ToDecoder::Stop).await.unwrap();
    assert_eq!(
        received(&mut rx),
        [
            "started t[0]",
            "t[0]@5",
            "t[1]@9",
            "revoked 1",
            "t[1]@10",
            "stop"
        ]
    );
}

#[tokio::test]
async fn a_feed_whose_decoding_side_is_gone_says_so() {
    let (mut feed, rx) = feed();
    drop(rx);
    feed.start("t", 0);
    assert!(feed.take(&message("t", 0, 1), "t"));
    let e = feed.flush().await.unwrap_err();
    assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
    assert_eq!(e.to_string(), "the decoding side stopped");
}

fn failed(what: &str) -> anyhow::Result<()> {
    Err(anyhow::anyhow!("{what}"))
}

fn stopped(what: &'static str) -> anyhow::Result<()> {
    Err(Stopped(what).into())
}

#[test]
fn the_pipeline_reports_the_stage_that_failed_not_those_it_stopped() {
    let settled = |c, d, s| {
        settle([("consumer", c), ("decoding side", d), ("sinks", s)]).map_err(|e| format!("{e:#}"))
    };
    assert_eq!(settled(Ok(()), Ok(()), Ok(())), Ok(()));
    // A sink failed; the stages before it could not hand over.
    assert_eq!(
        settled(
            stopped("decoding side"),
            stopped("sinks"),
            failed("PostgreSQL refused")
        ),
        Err("PostgreSQL refused".into())
    );
    // The decoding side failed on a record; the sinks closed without it.
    assert_eq!(
        settled(
            stopped("decoding side"),
            failed("bad record at t[0]@5"),
            Ok(())
        ),
        Err("bad record at t[0]@5".into())
    );
    // Two failures of their own: the later stage's, with the earlier one's as context.
    assert_eq!(
        settled(failed("Kafka refused"), Ok(()), failed("upload failed")),
        Err("after the consumer failed: Kafka refused: upload failed".into())
    );
    // The sinks ended without an error, which they do only when something is wrong.
    assert_eq!(
        settled(stopped("sinks"), Ok(()), Ok(())),
        Err("the sinks stopped".into())
    );
}

fn json_message(partition: i32, offset: i64) -> OwnedMessage {
    OwnedMessage::new(
        Some(format!(r#"{{"id": {offset}, "name": "n{offset}"}}"#).into_bytes()),
        Some(format!(r#"{{"id": {offset}}}"#).into_bytes()),
        "t".to_owned(),
        Timestamp::CreateTime(1_700_000_000_000),
        partition,
        offset,
        None,
    )
}

fn chunk(partition: i32, offsets: std::ops::Range<i64>) -> Chunk {
    let t: Arc<str> = Arc::from("t");
    let mut chunk = Chunk::default();
    for o in offsets {
        chunk.push(&json_message(partition, o), &t);
    }
    chunk
}

/// What reached the sinks: consecutive hand-overs merged (the idle timer may split one), each
/// as its rows and the offsets it covers.
fn to_sinks(rx: &mut mpsc::Receiver<ToSinks>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rows = 0;
    let mut consumed = Vec::new();
    let end = |out: &mut Vec<String>, rows: &mut usize, consumed: &mut Vec<String>| {
        if *rows > 0 || !consumed.is_empty() {
            consumed.sort();
            out.push(format!("{rows} rows, {}", consumed.join(" ")));
            *rows = 0;
            consumed.clear();
        }
    };
    while let Ok(item) = rx.try_recv() {
        match item {
            ToSinks::Batches {
                batches,
                consumed: c,
            } => {
                rows += batches.iter().map(|b| b.rows.num_rows()).sum::<usize>();
                // A later hand-over of a partition supersedes its earlier offset.
                for (part, next) in c {
                    consumed.retain(|s: &String| !s.starts_with(&format!("{part}@")));
                    consumed.push(format!("{part}@{next}"));
                }
            }
            other => {
                end(&mut out, &mut rows, &mut consumed);
                out.push(match other {
                    ToSinks::Started { part, .. } => format!("started {part}"),
                    ToSinks::Revoked(parts) => format!("revoked {}", parts.len()),
                    ToSinks::Rewound(part, at) => format!("rewound {part} at {at}"),
                    ToSinks::Stop => "stop".into(),
                    ToSinks::Batches { .. } => unreachable!(),
                });
            }
        }
    }
    end(&mut out, &mut rows, &mut consumed);
    out
}

#[tokio::test]
async fn the_decoding_side_hands_over_before_it_passes_on_a_rewind_a_revocation_or_stop() {
    let names = ["raw"];
    let setup = crate::telemetry::Setup {
        sinks: &names,
        group: "test",
        brokers: "127.0.0.1:9",
        kafka_grace: Duration::from_secs(300),
    };
    let decoding = Decoding {
        decoder: ChangeDecoder::new(
            lakesink_schema_registry::FixedResolver::new(),
            Format::PlainJson { value_schema: None },
            BATCH_ROWS,
        ),
        pending: Pending::new(None, None),
        telemetry: Arc::new(Telemetry::new(&setup, None)),
        dead_letters: None,
    };
    let (items, decoder_rx) = mpsc::channel(16);
    let (spare_tx, mut spare) = mpsc::unbounded_channel();
    let (tx, mut rx) = mpsc::channel(64);
    let task = tokio::spawn(decoding::run(decoding, decoder_rx, spare_tx, tx));
    let (p0, p1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    for item in [
        ToDecoder::Started {
            part: p0.clone(),
            floors: Vec::new(),
        },
        ToDecoder::Started {
            part: p1.clone(),
            floors: Vec::new(),
        },
        ToDecoder::Records(chunk(0, 0..3)),
        ToDecoder::Records(chunk(1, 10..12)),
        ToDecoder::Rewound {
            part: p0.clone(),
            at: 1,
            sought: true,
        },
        ToDecoder::Records(chunk(0, 1..4)),
        ToDecoder::Records(chunk(1, 12..13)),
        ToDecoder::Revoked(vec![p1]),
        ToDecoder::Records(chunk(0, 4..5)),
        ToDecoder::Stop,
    ] {
        items.send(item).await.unwrap();
    }
    task.await.unwrap().unwrap();
    let got = to_sinks(&mut rx);
    assert_eq!(
        got[..4],
        [
            "started t[0]",
            "started t[1]",
            "5 rows, t[0]@3 t[1]@12",
            "rewound t[0] at 1"
        ]
    );
    // After the rewind, a revocation does not hand over, and it drops what it finds pending of
    // its partition; the idle timer may have handed some over before it came.
    let after: Vec<&str> = got[4..].iter().map(String::as_str).collect();
    let no_tick = ["revoked 1", "4 rows, t[0]@5", "stop"];
    let tick_after_both = [
        "4 rows, t[0]@4 t[1]@13",
        "revoked 1",
        "1 rows, t[0]@5",
        "stop",
    ];
    let tick_between = ["3 rows, t[0]@4", "revoked 1", "1 rows, t[0]@5", "stop"];
    assert!(
        after == no_tick || after == tick_after_both || after == tick_between,
        "{after:?}"
    );
    // Every chunk came back, emptied, for the consuming side to fill again.
    let mut back = 0;
    while let Ok(c) = spare.try_recv() {
        assert!(c.is_empty());
        back += 1;
    }
    assert_eq!(back, 5);
}

#[tokio::test]
async fn a_decoding_side_stopped_says_nothing_but_one_that_failed_says_why() {
    let waiting = tokio::spawn(std::future::pending::<anyhow::Result<()>>());
    assert!(stop(waiting).await.is_ok());
    let failed = tokio::spawn(async { failed("bad record at t[0]@5") });
    // Finished before it is stopped: its own outcome stands.
    tokio::task::yield_now().await;
    while !failed.is_finished() {
        tokio::task::yield_now().await;
    }
    let e = stop(failed).await.unwrap_err();
    assert_eq!(e.to_string(), "bad record at t[0]@5");
}
