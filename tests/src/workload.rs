//! A synthetic Debezium table for tests and benchmarks: the key and envelope schemas Debezium's
//! PostgreSQL connector registers for a 10-column table, registered in the real registry, and
//! change events encoded as the Apicurio 3.x / Confluent converters frame them
//! (`0x00`, 4-byte contentId, Avro datum).

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{Value, json};

use crate::{Stack, unreachable};

mod wide;

/// Which table a [`Table`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 10 columns, about 185 bytes a record (key and value).
    Narrow,
    /// 32 columns, about 1.2 KB a record (see `wide.rs`).
    Wide,
}

impl Shape {
    /// The table's value schema as first registered.
    fn value_schema(self, ns: &str) -> Value {
        match self {
            Self::Narrow => value_schema(ns, "int"),
            Self::Wide => wide::value_schema(ns),
        }
    }
}

/// The table's value schema (Debezium's `Value` record); `quantity` is an `int`, or a `long`
/// once the source widened it.
fn value_schema(ns: &str, quantity: &str) -> Value {
    json!({
        "type": "record", "name": "Value", "namespace": ns, "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer_id", "type": "long"},
            {"name": "sku", "type": "string"},
            {"name": "quantity", "type": quantity},
            {"name": "price", "type": {"type": "bytes", "scale": 2, "precision": 10,
                "connect.version": 1, "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}},
            {"name": "status", "type": "string"},
            {"name": "note", "type": ["null", "string"], "default": null},
            {"name": "active", "type": "boolean"},
            {"name": "created_at", "type": {"type": "long", "connect.version": 1,
                "connect.name": "io.debezium.time.MicroTimestamp"}},
            {"name": "updated_at", "type": {"type": "string", "connect.version": 1,
                "connect.name": "io.debezium.time.ZonedTimestamp"}}
        ],
        "connect.name": format!("{ns}.Value")
    })
}

fn envelope_schema(ns: &str, value: Value) -> Value {
    let source = json!({
        "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                "connect.parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
                "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"], "default": "false"},
            {"name": "db", "type": "string"},
            {"name": "sequence", "type": ["null", "string"], "default": null},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": null},
            {"name": "lsn", "type": ["null", "long"], "default": null},
            {"name": "xmin", "type": ["null", "long"], "default": null}
        ],
        "connect.name": "io.debezium.connector.postgresql.Source"
    });
    json!({
        "type": "record", "name": "Envelope", "namespace": ns, "fields": [
            {"name": "before", "type": ["null", value], "default": null},
            {"name": "after", "type": ["null", "Value"], "default": null},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": null},
            {"name": "transaction", "type": ["null", {"type": "record", "name": "block",
                "namespace": "event", "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "total_order", "type": "long"},
                    {"name": "data_collection_order", "type": "long"}
                ], "connect.version": 1, "connect.name": "event.block"}], "default": null}
        ],
        "connect.version": 2,
        "connect.name": format!("{ns}.Envelope")
    })
}

fn key_schema(ns: &str) -> Value {
    json!({"type": "record", "name": "Key", "namespace": ns,
        "fields": [{"name": "id", "type": "long"}], "connect.name": format!("{ns}.Key")})
}

/// One table's topic with its registered schemas.
#[derive(Clone)]
pub struct Table {
    pub topic: String,
    shape: Shape,
    key_id: u32,
    value_id: u32,
}

/// Registers `schema` under a new artifact and returns its contentId.
async fn register(stack: &Stack, artifact: &str, schema: &Value) -> u32 {
    let body = json!({
        "artifactId": artifact,
        "artifactType": "AVRO",
        "firstVersion": {"content": {"content": schema.to_string(), "contentType": "application/json"}}
    });
    let url = format!(
        "{}/apis/registry/v3/groups/default/artifacts?ifExists=FIND_OR_CREATE_VERSION",
        stack.registry_url
    );
    let resp = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("Apicurio Registry", &stack.registry_url, e)
            )
        });
    let status = resp.status();
    let created: Value = resp.json().await.expect("registry answer is JSON");
    assert!(
        status.is_success(),
        "register {artifact}: {status} {created}"
    );
    created["version"]["contentId"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .expect("contentId")
}

impl Table {
    /// Creates `topic` with `partitions` and registers the table's schemas.
    pub async fn create(stack: &Stack, topic: &str, partitions: i32) -> Self {
        Self::create_in(stack, &client(&stack.kafka_brokers), topic, partitions).await
    }

    /// As [`Table::create`], of the given shape.
    pub async fn create_shaped(stack: &Stack, topic: &str, partitions: i32, shape: Shape) -> Self {
        let kafka = client(&stack.kafka_brokers);
        Self::create_shaped_in(stack, &kafka, topic, partitions, shape, &[]).await
    }

    /// As [`Table::create`], the topic with `config` (`("max.message.bytes", "8388608")`).
    pub async fn create_with_topic_config(
        stack: &Stack,
        topic: &str,
        partitions: i32,
        config: &[(&str, &str)],
    ) -> Self {
        let kafka = client(&stack.kafka_brokers);
        Self::create_shaped_in(stack, &kafka, topic, partitions, Shape::Narrow, config).await
    }

    /// As [`Table::create`], on the cluster `kafka` reaches (its brokers and security).
    pub async fn create_in(
        stack: &Stack,
        kafka: &ClientConfig,
        topic: &str,
        partitions: i32,
    ) -> Self {
        Self::create_shaped_in(stack, kafka, topic, partitions, Shape::Narrow, &[]).await
    }

    async fn create_shaped_in(
        stack: &Stack,
        kafka: &ClientConfig,
        topic: &str,
        partitions: i32,
        shape: Shape,
        config: &[(&str, &str)],
    ) -> Self {
        let brokers = kafka.get("bootstrap.servers").unwrap_or_default();
        let admin: AdminClient<_> = kafka.create().expect("admin client");
        // The tests' records carry 2024 timestamps (their hourly directories are asserted), far
        // past a default 7-day retention: a retention check in the middle of a test would delete
        // them and leave the consumer an empty topic. dev/stack's brokers keep data anyway.
        let mut new =
            NewTopic::new(topic, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
        for &(k, v) in config {
            new = new.set(k, v);
        }
        let created = admin
            .create_topics([&new], &AdminOptions::new())
            .await
            .unwrap_or_else(|e| panic!("{}", unreachable("Kafka", brokers, e)));
        for r in created {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        let ns = topic.replace('-', "_");
        Self {
            topic: topic.to_owned(),
            shape,
            key_id: register(stack, &format!("{topic}-key"), &key_schema(&ns)).await,
            value_id: register(
                stack,
                &format!("{topic}-value"),
                &envelope_schema(&ns, shape.value_schema(&ns)),
            )
            .await,
        }
    }

    /// The table after `ALTER TABLE … ALTER COLUMN quantity TYPE bigint`: the next version of
    /// its value schema, with `quantity` a `long`, registered; its events carry that version.
    pub async fn widen_quantity(&self, stack: &Stack) -> Self {
        let ns = self.topic.replace('-', "_");
        assert_eq!(
            self.shape,
            Shape::Narrow,
            "only the narrow table has `quantity`"
        );
        let schema = envelope_schema(&ns, value_schema(&ns, "long"));
        Self {
            value_id: register(stack, &format!("{}-value", self.topic), &schema).await,
            ..self.clone()
        }
    }

    /// The framed key of row `id`.
    pub fn key(&self, id: i64) -> Vec<u8> {
        let mut out = frame(self.key_id);
        long(&mut out, id);
        out
    }

    /// The framed change event: `op` is `c`, `r` (snapshot read: after only, like `c`), `u` or
    /// `d`; `version` changes the row's values.
    pub fn event(&self, id: i64, op: char, version: i64, ts_ms: i64) -> Vec<u8> {
        let mut out = frame(self.value_id);
        let shape = self.shape;
        let row = |out: &mut Vec<u8>, v: i64| {
            long(out, 1); // union branch: the record
            if shape == Shape::Wide {
                wide::row(out, id, v, ts_ms);
                return;
            }
            long(out, id);
            long(out, id % 1000);
            string(out, &format!("SKU-{:06}", id % 100_000));
            long(out, (v % 50) + 1); // int and long share the zig-zag varint
            decimal(out, 100 + (id * 7 + v) % 100_000);
            string(
                out,
                ["new", "paid", "shipped", "delivered"][(v % 4) as usize],
            );
            if id % 3 == 0 {
                long(out, 0);
            } else {
                long(out, 1);
                string(out, "leave at the door");
            }
            out.push(u8::from(id % 2 == 0));
            long(out, ts_ms * 1000 + 123);
            string(out, "2024-05-01T13:00:00.123456Z");
        };
        match op {
            'c' | 'r' => {
                long(&mut out, 0);
                row(&mut out, version);
            }
            'u' => {
                row(&mut out, version - 1);
                row(&mut out, version);
            }
            _ => {
                row(&mut out, version);
                long(&mut out, 0);
            }
        }
        // source
        string(&mut out, "3.6.1.Final");
        string(&mut out, "postgresql");
        string(&mut out, "bench");
        long(&mut out, ts_ms);
        long(&mut out, 0);
        string(&mut out, if op == 'r' { "true" } else { "false" });
        string(&mut out, "source");
        long(&mut out, 0);
        string(&mut out, "public");
        string(&mut out, "orders");
        long(&mut out, 1);
        long(&mut out, 1000 + id);
        long(&mut out, 1);
        long(&mut out, 30_000_000 + id);
        long(&mut out, 0);
        string(&mut out, &op.to_string());
        long(&mut out, 1);
        long(&mut out, ts_ms + 5);
        long(&mut out, 0);
        out
    }

    /// Produces `count` events of rows `0..count` to partitions round robin, then waits for
    /// every delivery. Every tenth event is an update and every fiftieth a delete. Returns the
    /// bytes of the keys and values sent.
    pub fn produce(&self, stack: &Stack, partitions: i32, count: i64, base_ts_ms: i64) -> u64 {
        self.produce_range(stack, partitions, 0..count, base_ts_ms)
    }

    /// As [`Table::produce`], to the cluster `kafka` reaches (its brokers and security).
    pub fn produce_in(
        &self,
        kafka: &ClientConfig,
        partitions: i32,
        count: i64,
        base_ts_ms: i64,
    ) -> u64 {
        self.send_to(kafka, partitions, events(0..count, base_ts_ms), &[])
    }

    /// As [`Table::produce`], uncompressed, in batches of up to `batch_bytes` (the topic's
    /// `max.message.bytes` must allow them).
    pub fn produce_in_batches(
        &self,
        stack: &Stack,
        partitions: i32,
        count: i64,
        base_ts_ms: i64,
        batch_bytes: usize,
    ) -> u64 {
        let bytes = batch_bytes.to_string();
        let settings = [
            ("compression.type", "none"),
            ("batch.size", bytes.as_str()),
            ("message.max.bytes", bytes.as_str()),
            ("batch.num.messages", "1000000"),
            // Long enough for a batch to fill: records come faster than this.
            ("linger.ms", "500"),
        ];
        let kafka = client(&stack.kafka_brokers);
        self.send_to(&kafka, partitions, events(0..count, base_ts_ms), &settings)
    }

    /// As [`Table::produce`], for rows `ids` (event `i` is row `i`, at `base_ts_ms + i`).
    pub fn produce_range(
        &self,
        stack: &Stack,
        partitions: i32,
        ids: std::ops::Range<i64>,
        base_ts_ms: i64,
    ) -> u64 {
        self.send(stack, partitions, events(ids, base_ts_ms))
    }

    /// Produces `count` events of `stream` (see [`Stream`]); row `id` goes to partition
    /// `id % partitions`, event `k` is at `base_ts_ms + k`.
    pub fn produce_stream(
        &self,
        stack: &Stack,
        partitions: i32,
        stream: Stream,
        count: i64,
        base_ts_ms: i64,
    ) -> u64 {
        let events = stream.events(count).into_iter().zip(base_ts_ms..);
        self.send(
            stack,
            partitions,
            events.map(|((id, op, version), ts)| (id, op, version, ts)),
        )
    }

    /// Sends `(id, op, version, ts_ms)` events, row `id` to partition `id % partitions`, then
    /// waits for every delivery. Returns the bytes of the keys and values sent.
    fn send(
        &self,
        stack: &Stack,
        partitions: i32,
        events: impl Iterator<Item = (i64, char, i64, i64)>,
    ) -> u64 {
        self.send_to(&client(&stack.kafka_brokers), partitions, events, &[])
    }

    fn send_to(
        &self,
        kafka: &ClientConfig,
        partitions: i32,
        events: impl Iterator<Item = (i64, char, i64, i64)>,
        settings: &[(&str, &str)],
    ) -> u64 {
        let mut config = kafka.clone();
        config
            .set("linger.ms", "20")
            .set("batch.size", "1000000")
            .set("compression.type", "lz4")
            .set("queue.buffering.max.messages", "1000000");
        for &(k, v) in settings {
            config.set(k, v);
        }
        let producer: BaseProducer = config.create().expect("producer");
        let mut sent = 0u64;
        for (n, (id, op, version, ts)) in events.enumerate() {
            let key = self.key(id);
            let value = self.event(id, op, version, ts);
            sent += (key.len() + value.len()) as u64;
            let mut record = BaseRecord::to(&self.topic)
                .key(&key)
                .payload(&value)
                .partition((id % i64::from(partitions)) as i32)
                .timestamp(ts);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        producer.poll(Duration::from_millis(10));
                        record = r;
                    }
                }
            }
            if n % 10_000 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        producer
            .flush(Duration::from_secs(120))
            .expect("every record delivered");
        sent
    }
}

/// The event streams of the replica benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// A snapshot: `r` for rows `0..count`.
    Snapshot,
    /// Out of every 20 events, 14 inserts of new rows, 5 updates and 1 delete of rows inserted
    /// earlier and not deleted (picked by a fixed pseudo-random sequence): 70%, 25%, 5%. Ends
    /// with `count * 13 / 20` rows (rounded by the pattern).
    Mixed,
}

impl Stream {
    /// Parses `snapshot` or `mixed`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "snapshot" => Some(Self::Snapshot),
            "mixed" => Some(Self::Mixed),
            _ => None,
        }
    }

    /// The stream's `count` events as `(id, op, version)`, in order.
    pub fn events(self, count: i64) -> Vec<(i64, char, i64)> {
        if self == Self::Snapshot {
            return (0..count).map(|id| (id, 'r', 1)).collect();
        }
        let mut alive: Vec<i64> = Vec::new();
        let mut next_id = 0;
        let mut seed: u64 = 0x5eed;
        let mut pick = |len: usize| {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            (splitmix64(seed) % len as u64) as usize
        };
        (0..count)
            .map(|k| {
                let version = k % 7 + 1;
                match k % 20 {
                    14..=18 if !alive.is_empty() => (alive[pick(alive.len())], 'u', version),
                    19 if !alive.is_empty() => (alive.swap_remove(pick(alive.len())), 'd', version),
                    _ => {
                        alive.push(next_id);
                        next_id += 1;
                        (next_id - 1, 'c', version)
                    }
                }
            })
            .collect()
    }
}

/// Events of rows `ids` (event `i` is row `i`, at `base_ts_ms + i`): every tenth an update,
/// every fiftieth a delete, the rest inserts.
fn events(
    ids: std::ops::Range<i64>,
    base_ts_ms: i64,
) -> impl Iterator<Item = (i64, char, i64, i64)> {
    ids.map(move |i| {
        let op = match i % 50 {
            49 => 'd',
            n if n % 10 == 9 => 'u',
            _ => 'c',
        };
        (i, op, i % 7 + 1, base_ts_ms + i)
    })
}

fn client(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

fn frame(id: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(400);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out
}

fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, s: &str) {
    bytes(out, s.as_bytes());
}

/// A Connect `Decimal` of `unscaled`: its minimal big-endian two's complement bytes.
fn decimal(out: &mut Vec<u8>, unscaled: i64) {
    let be = unscaled.to_be_bytes();
    let skip = be.iter().take_while(|&&b| b == 0).count().min(7);
    let skip = if be[skip] & 0x80 != 0 { skip - 1 } else { skip };
    bytes(out, &be[skip..]);
}

/// splitmix64's finalizer: fixed pseudo-random values from a counter.
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use lakesink_schema_registry::avro::{WriterSchema, validate};

    use super::*;

    fn table(shape: Shape) -> (Table, WriterSchema) {
        let schema = envelope_schema("t", shape.value_schema("t")).to_string();
        let table = Table {
            topic: "t".into(),
            shape,
            key_id: 1,
            value_id: 2,
        };
        (table, WriterSchema::parse_text(&schema).expect("schema"))
    }

    #[test]
    fn every_event_of_both_shapes_is_a_whole_datum_of_its_schema() {
        for shape in [Shape::Narrow, Shape::Wide] {
            let (table, writer) = table(shape);
            for (id, op, version, ts) in events(0..200, 1_714_568_400_000) {
                let event = table.event(id, op, version, ts);
                validate(&writer.root, &event[5..])
                    .unwrap_or_else(|e| panic!("{shape:?} event {id} ({op}): {e}"));
            }
        }
    }

    #[test]
    fn the_wide_tables_events_average_about_1_2_kb() {
        let (table, _) = table(Shape::Wide);
        let n = 10_000;
        let total: usize = events(0..n, 1_714_568_400_000)
            .map(|(id, op, version, ts)| {
                table.event(id, op, version, ts).len() + table.key(id).len()
            })
            .sum();
        let average = total as f64 / n as f64;
        assert!(
            (1_100.0..=1_300.0).contains(&average),
            "{average:.0} bytes a record"
        );
    }
}
