//! The first pipeline: one consumer group over the configured topics, printing one line per
//! record. Offsets are stored only after a record is printed (the only "sink" so far), and
//! committed on shutdown, so a restart resumes after the last printed record.

use anyhow::Context;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{IdKind, SchemaRef, Side, unframe};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Message};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

pub(crate) async fn run(config: &KafkaConfig, payload_ids: IdKind) -> anyhow::Result<()> {
    let consumer = consumer(config)?;
    let subscription = match &config.topics_regex {
        // librdkafka treats a topic starting with `^` as a regex.
        Some(regex) if regex.starts_with('^') => vec![regex.clone()],
        Some(regex) => vec![format!("^{regex}")],
        None => config.topics.clone(),
    };
    let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .with_context(|| format!("subscribing to {topics:?}"))?;
    info!(brokers = %config.brokers, group = %config.group_id, ?topics, "consuming");

    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            msg = consumer.recv() => {
                let msg = match msg {
                    Ok(msg) => msg,
                    Err(e) if is_transient(&e) => {
                        warn!(error = %e, "consumer: waiting");
                        continue;
                    }
                    Err(e) => return Err(e).context("consuming"),
                };
                println!("{}", describe(&msg, payload_ids));
                consumer.store_offset_from_message(&msg).with_context(|| {
                    format!("storing offset {} of {}[{}]", msg.offset(), msg.topic(), msg.partition())
                })?;
            }
        }
    }
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => info!("offsets committed, stopping"),
        // Nothing consumed since start: nothing to commit.
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => info!("stopping"),
        Err(e) => return Err(e).context("committing offsets on shutdown"),
    }
    Ok(())
}

/// Errors librdkafka recovers from by itself: a subscribed topic that does not exist yet
/// (Debezium creates it with its first event), or a broker that is briefly unreachable.
fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        e.rdkafka_error_code(),
        Some(
            UnknownTopicOrPartition
                | UnknownTopic
                | BrokerTransportFailure
                | AllBrokersDown
                | OperationTimedOut
        )
    )
}

fn consumer(config: &KafkaConfig) -> anyhow::Result<StreamConsumer> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        // A regex subscription sees new topics only on a metadata refresh (default 5 min).
        .set("topic.metadata.refresh.interval.ms", "10000");
    for (k, v) in &config.properties {
        cc.set(k, v);
    }
    cc.create().context("creating the Kafka consumer")
}

fn describe(msg: &BorrowedMessage<'_>, payload_ids: IdKind) -> String {
    // Kafka's lastHeader semantics, as Apicurio reads them.
    let header = |name: &str| {
        msg.headers()
            .and_then(|hs| hs.iter().filter(|h| h.key == name).last())
            .and_then(|h| h.value)
    };
    let side = |side: Side, payload: Option<&[u8]>| match payload {
        None => "null".to_owned(),
        Some(bytes) => match unframe(side, bytes, header, payload_ids) {
            Ok(f) => format!("{} {}B", schema(&f.schema), f.datum.len()),
            Err(e) => format!("{}B unframed ({e})", bytes.len()),
        },
    };
    format!(
        "{}[{}]@{} ts={:?} key={} value={}",
        msg.topic(),
        msg.partition(),
        msg.offset(),
        msg.timestamp().to_millis(),
        side(Side::Key, msg.key()),
        side(Side::Value, msg.payload()),
    )
}

fn schema(schema: &SchemaRef) -> String {
    match schema {
        SchemaRef::Id {
            kind: IdKind::GlobalId,
            id,
        } => format!("globalId {id}"),
        SchemaRef::Id {
            kind: IdKind::ContentId,
            id,
        } => format!("contentId {id}"),
        SchemaRef::Coordinates {
            artifact_id,
            version,
            ..
        } => {
            format!(
                "artifact {artifact_id} v{}",
                version.as_deref().unwrap_or("latest")
            )
        }
    }
}
