//! A real Debezium PostgreSQL connector on one source table, for tests: register it over the
//! Connect REST API, read what it publishes, and clean up its slot and publication.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::{ClientConfig, Message};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use lakesink_schema_registry::{
    CachedResolver, ChangeBatch, ChangeDecoder, ChangeError, Format, HttpRegistry,
    HttpRegistryConfig, KafkaRecord,
};

use crate::{Stack, eventually, unique, unreachable};

/// The converter the connector writes keys and values with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converter {
    /// The Apicurio Avro converter, registering schemas in the stack's registry.
    ApicurioAvro,
    /// Kafka Connect's JsonConverter with `schemas.enable=true`.
    Json,
    /// Kafka Connect's JsonConverter with `schemas.enable=false`: bare JSON.
    PlainJson,
}

/// A connector named like its table, publishing to `<name>.public.<name>`.
pub struct Connector {
    pub name: String,
    pub table: String,
    pub topic: String,
    converter: Converter,
    /// Connector properties over the defaults.
    extra: Value,
    stack: Stack,
    http: reqwest::Client,
}

impl Connector {
    /// Registers a connector over `public.<name>`, with the Apicurio Avro converter for keys
    /// and values, and waits until its task runs.
    pub async fn start(stack: &Stack, name: &str) -> Self {
        Self::start_with(stack, name, Converter::ApicurioAvro).await
    }

    /// As [`Connector::start`], with the given converter.
    pub async fn start_with(stack: &Stack, name: &str, converter: Converter) -> Self {
        Self::start_configured(stack, name, converter, json!({})).await
    }

    /// As [`Connector::start_with`], with `extra` connector properties over the defaults.
    pub async fn start_configured(
        stack: &Stack,
        name: &str,
        converter: Converter,
        extra: Value,
    ) -> Self {
        let table = format!("public.{name}");
        let c = Self {
            converter,
            extra,
            name: name.to_owned(),
            topic: format!("{name}.{table}"),
            table,
            stack: stack.clone(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .expect("http"),
        };
        let resp = c
            .http
            .put(format!("{}/config", c.url()))
            .json(&c.config())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}", unreachable("Kafka Connect", &stack.connect_url, e)));
        assert!(
            resp.status().is_success(),
            "register connector: {} {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
        let running = eventually(Duration::from_secs(90), || async {
            (task_state(&c.http, &c.url()).await.as_deref() == Some("RUNNING")).then_some(())
        })
        .await;
        assert!(
            running.is_some(),
            "connector {name} did not reach RUNNING within 90 s"
        );
        let slot = c.config()["slot.name"].as_str().unwrap_or(name).to_owned();
        wait_streaming(stack, &c.http, &c.url(), &slot).await;
        c
    }

    fn url(&self) -> String {
        format!("{}/connectors/{}", self.stack.connect_url, self.name)
    }

    fn config(&self) -> Value {
        let pg = reqwest::Url::parse(&self.stack.source_pg_url).expect("source url");
        let registry = format!("{}/apis/registry/v2", self.stack.registry_url);
        let mut config = json!({
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": pg.host_str(), "database.port": pg.port().unwrap_or(5432).to_string(),
            "database.user": pg.username(), "database.password": pg.password(),
            "database.dbname": pg.path().trim_start_matches('/'),
            "topic.prefix": self.name, "slot.name": self.name, "publication.name": self.name,
            "publication.autocreate.mode": "filtered", "table.include.list": self.table,
            "slot.drop.on.stop": "true",
            "key.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            "key.converter.apicurio.registry.url": registry,
            "key.converter.apicurio.registry.auto-register": "true",
            "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            "value.converter.apicurio.registry.url": registry,
            "value.converter.apicurio.registry.auto-register": "true",
        });
        if self.converter != Converter::ApicurioAvro {
            let schemas = self.converter == Converter::Json;
            for side in ["key", "value"] {
                config[format!("{side}.converter")] =
                    json!("org.apache.kafka.connect.json.JsonConverter");
                config[format!("{side}.converter.schemas.enable")] = json!(schemas.to_string());
            }
        }
        if let Value::Object(extra) = &self.extra {
            for (k, v) in extra {
                config[k] = v.clone();
            }
        }
        config
    }

    /// Reads `n` records from the connector's topic, from the beginning. Waits as long as
    /// records keep coming (a slow or busy Connect worker), and gives up only after
    /// [`NO_PROGRESS`] without one, saying what the connector is doing.
    pub async fn read(&self, n: usize) -> Vec<OwnedMessage> {
        let consumer = wait_for_topic(&self.stack, &self.topic).await;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Ok(msg) = tokio::time::timeout(NO_PROGRESS, consumer.recv()).await else {
                panic!(
                    "{} of {n} records on {} and none for {NO_PROGRESS:?}; {}",
                    out.len(),
                    self.topic,
                    connector_status(&self.http, &self.url()).await
                );
            };
            out.push(msg.expect("consume").detach());
        }
        out
    }

    /// Deletes the connector, waits for its slot to go, and drops its publication.
    pub async fn stop(self, pg: &PgPool) {
        self.http
            .delete(self.url())
            .send()
            .await
            .expect("delete connector");
        let slot_gone = eventually(Duration::from_secs(30), || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            )
            .bind(&self.name)
            .fetch_one(pg)
            .await
            .ok()?;
            (n == 0).then_some(())
        })
        .await;
        assert!(
            slot_gone.is_some(),
            "replication slot {} still exists",
            self.name
        );
        sqlx::query(AssertSqlSafe(format!(
            "DROP PUBLICATION IF EXISTS {}",
            self.name
        )))
        .execute(pg)
        .await
        .expect("drop publication");
    }
}

/// The state of the first task of the connector at `url` (`…/connectors/<name>`), if Connect
/// answers.
pub async fn task_state(http: &reqwest::Client, url: &str) -> Option<String> {
    let status: Value = http
        .get(format!("{url}/status"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    status["tasks"][0]["state"].as_str().map(str::to_owned)
}

/// How long a test waits for the next record of a running connector before it gives up.
pub const NO_PROGRESS: Duration = Duration::from_secs(120);

/// What Kafka Connect says of the connector at `url` (`…/connectors/<name>`): its state and
/// its tasks', with the first line of a failed task's trace, for a test's failure message.
pub async fn connector_status(http: &reqwest::Client, url: &str) -> String {
    let status: Option<serde_json::Value> = match http.get(format!("{url}/status")).send().await {
        Ok(r) => r.json().await.ok(),
        Err(e) => return format!("Kafka Connect did not answer for {url}: {e}"),
    };
    let Some(status) = status else {
        return format!("Kafka Connect gave no status for {url}");
    };
    let tasks: Vec<String> = status["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let trace = t["trace"]
                .as_str()
                .and_then(|t| t.lines().next())
                .unwrap_or("");
            format!(
                "task {} {} {trace}",
                t["id"],
                t["state"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!(
        "connector {} is {} ({})",
        status["name"].as_str().unwrap_or("?"),
        status["connector"]["state"].as_str().unwrap_or("?"),
        if tasks.is_empty() {
            "no tasks".to_owned()
        } else {
            tasks.join("; ")
        }
    )
}

/// Waits until `topic` exists with partitions (Debezium creates topics with their first
/// event); panics after 60 s.
pub async fn wait_for_topic_to_exist(stack: &Stack, topic: &str) {
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("metadata client");
    let found = eventually(Duration::from_secs(60), || async {
        let md = probe
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()?;
        md.topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            .then_some(())
    })
    .await;
    assert!(found.is_some(), "topic {topic} did not appear within 60 s");
}

/// Debezium creates the topic with its first event; subscribe once it exists.
async fn wait_for_topic(stack: &Stack, topic: &str) -> StreamConsumer {
    wait_for_topic_to_exist(stack, topic).await;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .set("group.id", unique("test-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

/// The last value of a header, as Kafka's `lastHeader`.
pub fn header<'a>(msg: &'a OwnedMessage, name: &str) -> Option<&'a [u8]> {
    use rdkafka::message::Headers;
    msg.headers()
        .and_then(|hs| hs.iter().filter(|h| h.key == name).last())
        .and_then(|h| h.value)
}

/// Decodes `records` with a fresh [`ChangeDecoder`] over the stack's registry, in `format`,
/// and hands over every batch. Panics, naming the record, on the first that fails.
pub async fn decode_all(
    stack: &Stack,
    format: Format,
    records: &[OwnedMessage],
) -> Vec<ChangeBatch> {
    try_decode_all(stack, format, records, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// As [`decode_all`], with `kafka.source-connector` set to `source_connector`; the first
/// error is returned.
pub async fn try_decode_all(
    stack: &Stack,
    format: Format,
    records: &[OwnedMessage],
    source_connector: Option<&str>,
) -> Result<Vec<ChangeBatch>, ChangeError> {
    let registry = CachedResolver::new(
        HttpRegistry::new(HttpRegistryConfig::new(&stack.registry_url)).expect("registry client"),
    );
    let mut decoder = ChangeDecoder::new(registry, format, 1024)
        .with_source_connector(source_connector.map(str::to_owned));
    let mut out = Vec::new();
    for msg in records {
        let headers = |h: &str| header(msg, h);
        let pushed = decoder
            .push(KafkaRecord {
                topic: msg.topic(),
                partition: msg.partition(),
                offset: msg.offset(),
                timestamp: msg.timestamp().to_millis(),
                key: msg.key(),
                value: msg.payload(),
                headers: &headers,
            })
            .await?;
        out.extend(pushed.completed);
    }
    out.extend(decoder.finish_all()?);
    assert_eq!(
        decoder.two_pass_decoders(),
        0,
        "every schema here decodes in one pass"
    );
    Ok(out)
}

/// Waits until the PostgreSQL connector's replication slot `slot` is streaming (active), so
/// that changes a test makes after this are streamed rather than raced against the snapshot.
/// A commit that lands while Debezium takes its snapshot can miss both the snapshot and the
/// stream (seen in CI: a connector RUNNING for minutes that never sent a row inserted right
/// after it started). Returns early if the task stops running; panics after 120 s.
pub async fn wait_streaming(stack: &Stack, http: &reqwest::Client, url: &str, slot: &str) {
    let pg = crate::source_pool(stack).await;
    let streaming = eventually(NO_PROGRESS, || async {
        let active: Option<bool> =
            sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                .bind(slot)
                .fetch_optional(&pg)
                .await
                .ok()?;
        if active == Some(true) {
            return Some(());
        }
        (task_state(http, url).await?.as_str() != "RUNNING").then_some(())
    })
    .await;
    pg.close().await;
    if streaming.is_none() {
        panic!(
            "slot {slot} did not start streaming within {NO_PROGRESS:?}; {}",
            connector_status(http, url).await
        );
    }
}
