//! The dead-letter topic: with `errors.tolerance = "all"`, a record that cannot be decoded is
//! copied there as it was read, with Kafka Connect's `__connect.errors.*` context headers,
//! and the pipeline goes on. The copy is acknowledged by the broker before the record counts
//! as consumed, so its offset is never committed past a record that is nowhere.

use std::time::Duration;

use anyhow::Context;
use lakesink_config::{ErrorsConfig, KafkaConfig};
use lakesink_schema_registry::ChangeError;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

pub(crate) struct DeadLetters {
    producer: FutureProducer,
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
        cc.set("bootstrap.servers", &kafka.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all");
        // The connection settings the consumer uses, not its consumer-only settings.
        for (k, v) in &kafka.properties {
            if ["security.", "sasl.", "ssl.", "client."]
                .iter()
                .any(|p| k.starts_with(p))
            {
                cc.set(k, v);
            }
        }
        let producer = cc.create().context("creating the dead-letter producer")?;
        Ok(Some(Self {
            producer,
            topic: topic.clone(),
            context_headers: errors.dead_letter_context_headers,
        }))
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    /// Copies `msg` to the dead-letter topic and waits for the broker's acknowledgement.
    pub(crate) async fn send(
        &self,
        msg: &BorrowedMessage<'_>,
        error: &ChangeError,
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
            let message = error.to_string();
            for (key, value) in [
                ("__connect.errors.topic", msg.topic()),
                ("__connect.errors.partition", partition.as_str()),
                ("__connect.errors.offset", offset.as_str()),
                ("__connect.errors.stage", "VALUE_CONVERTER"),
                ("__connect.errors.class.name", "lakesink"),
                (
                    "__connect.errors.exception.class.name",
                    "lakesink::ChangeError",
                ),
                ("__connect.errors.exception.message", message.as_str()),
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
            .map_err(|(e, _)| e)
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
}
