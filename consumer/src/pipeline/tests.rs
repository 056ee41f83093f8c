use rdkafka::Timestamp;
use rdkafka::message::OwnedMessage;

use super::*;

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
