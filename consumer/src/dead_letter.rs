//! The dead-letter topic: with `errors.tolerance = "all"`, a record that cannot be decoded, or
//! that the replica cannot take, is copied there as it was read, with Kafka Connect's
//! `__connect.errors.*` context headers, and the pipeline goes on. The copy is acknowledged
//! by the broker before the record counts as consumed (or, for the replica, before the
//! replica's offset moves past it), so no offset is ever stored past a record that is nowhere.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use lakesink_config::{ErrorsConfig, KafkaConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::kafka::{self, GroupContext};
use crate::kafka_auth;

/// Where in Kafka Connect's terms a record failed (`__connect.errors.stage`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage {
    /// Decoding (Kafka Connect's converter).
    Decode,
    /// Applying to the replica (Kafka Connect's `SinkTask.put`).
    Replica,
}

pub(crate) struct DeadLetters {
    producer: FutureProducer<GroupContext>,
    /// Reads a record again by offset, for the replica (which holds decoded rows only).
    reader: Mutex<BaseConsumer<GroupContext>>,
    topic: String,
    context_headers: bool,
}

impl DeadLetters {
    /// A producer for `errors.dead-letter-topic`, when bad records are tolerated.
    pub(crate) fn new(kafka: &KafkaConfig, errors: &ErrorsConfig) -> anyhow::Result<Option<Self>> {
        let Some(topic) = &errors.dead_letter_topic else {
            return Ok(None);
        };
        if errors.tolerance == lakesink_config::Tolerance::None {
            return Ok(None);
        }
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &kafka.brokers);
        kafka_auth::configure(kafka, &mut cc)?;
        // The connection settings the consumer uses, not its consumer-only settings.
        for (k, v) in &kafka.properties {
            if ["security.", "sasl.", "ssl.", "client."]
                .iter()
                .any(|p| k.starts_with(p))
            {
                cc.set(k, v);
            }
        }
        let mut producer = cc.clone();
        producer
            .set("enable.idempotence", "true")
            .set("acks", "all");
        let producer = producer
            .create_with_context(GroupContext::plain(kafka)?)
            .map_err(kafka::failure)
            .context("creating the dead-letter producer")?;
        let mut reader = cc;
        reader
            .set("group.id", format!("{}-dead-letter-reader", kafka.group_id))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        let reader = reader
            .create_with_context(GroupContext::plain(kafka)?)
            .map_err(kafka::failure)
            .context("creating the dead-letter reader")?;
        Ok(Some(Self {
            producer,
            reader: Mutex::new(reader),
            topic: topic.clone(),
            context_headers: errors.dead_letter_context_headers,
        }))
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    /// Copies `msg` to the dead-letter topic and waits for the broker's acknowledgement.
    pub(crate) async fn send<M: kafka::Incoming>(
        &self,
        msg: &M,
        stage: Stage,
        error: &str,
    ) -> anyhow::Result<()> {
        let mut headers = OwnedHeaders::new();
        if let Some(hs) = msg.headers() {
            for h in hs.iter() {
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        if self.context_headers {
            let partition = msg.partition().to_string();
            let offset = msg.offset().to_string();
            let (stage, exception) = match stage {
                Stage::Decode => ("VALUE_CONVERTER", "lakesink::ChangeError"),
                Stage::Replica => ("TASK_PUT", "lakesink::ReplicaError"),
            };
            for (key, value) in [
                ("__connect.errors.topic", msg.topic()),
                ("__connect.errors.partition", partition.as_str()),
                ("__connect.errors.offset", offset.as_str()),
                ("__connect.errors.stage", stage),
                ("__connect.errors.class.name", "lakesink"),
                ("__connect.errors.exception.class.name", exception),
                ("__connect.errors.exception.message", error),
            ] {
                headers = headers.insert(Header {
                    key,
                    value: Some(value),
                });
            }
        }
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
        if let Some(k) = msg.key() {
            record = record.key(k);
        }
        if let Some(v) = msg.payload() {
            record = record.payload(v);
        }
        if let Some(ts) = msg.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        self.producer
            .send(record, Duration::from_secs(60))
            .await
            .map_err(|(e, _)| kafka::failure(e))
            .with_context(|| {
                format!(
                    "copying {}[{}] offset {} to the dead-letter topic {}",
                    msg.topic(),
                    msg.partition(),
                    msg.offset(),
                    self.topic
                )
            })?;
        Ok(())
    }

    /// Reads the record at `offset` of a partition again, as it is in Kafka.
    pub(crate) async fn read(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> anyhow::Result<OwnedMessage> {
        let what =
            format!("reading {topic}[{partition}] offset {offset} again for the dead-letter topic");
        let topic = topic.to_owned();
        let this = self.clone();
        let read = tokio::task::spawn_blocking(move || {
            let reader = this
                .reader
                .lock()
                .map_err(|_| anyhow::anyhow!("the reader's lock is poisoned"))?;
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
            reader.assign(&tpl)?;
            let deadline = Instant::now() + Duration::from_secs(60);
            let found = loop {
                anyhow::ensure!(Instant::now() < deadline, "no record within 60 s");
                match reader.poll(Duration::from_millis(500)) {
                    Some(Ok(m)) if m.offset() == offset => break m.detach(),
                    Some(Ok(m)) => anyhow::bail!(
                        "the record is gone (the partition continues at offset {})",
                        m.offset()
                    ),
                    Some(Err(e)) => return Err(e.into()),
                    None => {}
                }
            };
            reader.unassign()?;
            Ok(found)
        });
        read.await.context(what.clone())?.context(what)
    }
}

/// The replica's hand-off of records it cannot take: read again from Kafka, copied to the
/// dead-letter topic.
pub(crate) struct ReplicaRejects(pub(crate) Arc<DeadLetters>);

impl lakesink_writers::postgres::Rejects for ReplicaRejects {
    fn reject<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
        offset: i64,
        reason: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), Box<dyn std::error::Error + Send + Sync>>> {
        Box::pin(async move {
            let msg = self.0.read(topic, partition, offset).await?;
            self.0.send(&msg, Stage::Replica, reason).await?;
            Ok(())
        })
    }

    fn topic(&self) -> &str {
        self.0.topic()
    }
}
