//! A replicator over a fresh schema of the replica, and a Debezium connector capturing
//! several source tables (mixed-case names included) with truncates on.

use std::time::Duration;

use arrow_array::cast::AsArray;
use lakesink_config::ReplicaConfig;
use lakesink_schema_registry::ChangeBatch;
use lakesink_tests::debezium::{
    NO_PROGRESS, connector_status, decode_all, task_state, wait_streaming,
};
use lakesink_tests::{Stack, eventually, unique, unreachable};
use lakesink_writers::PgReplicator;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::{ClientConfig, Message};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgPool, PgRow};

/// A replicator writing tables to `<unique schema>.<source table>`, with `tweak` applied to
/// its config; returns it and the schema.
pub(crate) async fn replicator(tweak: impl FnOnce(&mut ReplicaConfig)) -> (PgReplicator, String) {
    let stack = Stack::from_env();
    let schema = unique("replica");
    let mut config = ReplicaConfig::new(&stack.replica_pg_url);
    config.table_name_format = format!("{schema}.${{source.table}}");
    config.dots_to_underscores = false;
    config.pool_size = 2;
    tweak(&mut config);
    let r = PgReplicator::connect(&config).await.unwrap_or_else(|e| {
        panic!(
            "{}",
            unreachable("PostgreSQL replica", &stack.replica_pg_url, e)
        )
    });
    (r, schema)
}

pub(crate) use lakesink_tests::source_pool;

/// Runs each statement on `pool` in order; a failure names it.
pub(crate) async fn exec(pool: &PgPool, sqls: &[String]) {
    for sql in sqls {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Applies `batches` one call each, then all again as a replay (which must be a no-op).
pub(crate) async fn apply_each_then_replay(r: &PgReplicator, group: &str, batches: &[ChangeBatch]) {
    for b in batches {
        r.apply(group, std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    r.apply(group, batches).await.expect("replay");
}

/// Each record of `batches` as a batch of its own.
pub(crate) fn record_by_record(batches: &[ChangeBatch]) -> Vec<ChangeBatch> {
    let mut out = Vec::new();
    for b in batches {
        let offsets = b
            .rows
            .column_by_name("__offset")
            .expect("__offset")
            .as_primitive::<arrow_array::types::Int64Type>()
            .clone();
        for i in 0..b.rows.num_rows() {
            let mut one = b.clone();
            one.rows = b.rows.slice(i, 1);
            one.first_offset = offsets.value(i);
            one.last_offset = offsets.value(i);
            out.push(one);
        }
    }
    out
}

/// Rows of a query on the replica.
pub(crate) async fn rows<T>(r: &PgReplicator, sql: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    sqlx::query_as::<_, T>(AssertSqlSafe(sql.to_owned()))
        .fetch_all(r.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A Debezium PostgreSQL connector over several `public` tables of the source, publishing to
/// `<name>.public.<table>` with the Apicurio Avro converter and truncate events on.
pub(crate) struct Capture {
    pub(crate) name: String,
    pub(crate) topics: Vec<String>,
    stack: Stack,
    http: reqwest::Client,
}

impl Capture {
    pub(crate) async fn start(stack: &Stack, name: &str, tables: &[&str]) -> Self {
        Self::start_with(stack, name, tables, json!({})).await
    }

    /// As [`Capture::start`], with `extra` added to the connector's config.
    pub(crate) async fn start_with(
        stack: &Stack,
        name: &str,
        tables: &[&str],
        extra: Value,
    ) -> Self {
        let pg = reqwest::Url::parse(&stack.source_pg_url).expect("source url");
        let include: Vec<String> = tables.iter().map(|t| format!("public\\.{t}")).collect();
        let mut config = json!({
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": pg.host_str(), "database.port": pg.port().unwrap_or(5432).to_string(),
            "database.user": pg.username(), "database.password": pg.password(),
            "database.dbname": pg.path().trim_start_matches('/'),
            "topic.prefix": name, "slot.name": name, "publication.name": name,
            "publication.autocreate.mode": "filtered", "table.include.list": include.join(","),
            "slot.drop.on.stop": "true",
            "skipped.operations": "none",
        });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        let topics = tables
            .iter()
            .map(|t| format!("{name}.public.{t}"))
            .collect();
        let slot = config["slot.name"].as_str().unwrap_or(name).to_owned();
        let c = Self::register(stack, name, topics, config).await;
        wait_streaming(stack, &c.http, &c.url(), &slot).await;
        c
    }

    /// Debezium's MariaDB connector over tables of the MariaDB source's database, publishing
    /// to `<name>.<database>.<table>`; `extra` settings are added to its config.
    pub(crate) async fn start_mariadb(
        stack: &Stack,
        name: &str,
        tables: &[&str],
        extra: Value,
    ) -> Self {
        let url = reqwest::Url::parse(&stack.mariadb_url).expect("MariaDB url");
        let db = url.path().trim_start_matches('/').to_owned();
        let include: Vec<String> = tables.iter().map(|t| format!("{db}\\.{t}")).collect();
        // Each connector reads the binlog as a replica with its own server id.
        let server_id = 10_000
            + u32::from_le_bytes(
                uuid::Uuid::new_v4().as_bytes()[..4]
                    .try_into()
                    .expect("4 bytes"),
            ) % 1_000_000_000;
        let mut config = json!({
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": url.host_str(), "database.port": url.port().unwrap_or(3306).to_string(),
            "database.user": url.username(), "database.password": url.password(),
            "database.server.id": server_id.to_string(), "database.ssl.mode": "disable",
            "topic.prefix": name, "database.include.list": db, "table.include.list": include.join(","),
            "schema.history.internal.kafka.bootstrap.servers": stack.kafka_brokers,
            "schema.history.internal.kafka.topic": format!("{name}.schema-history"),
            "include.schema.changes": "false",
            "skipped.operations": "none",
        });
        let (Some(config_map), Some(extra)) = (config.as_object_mut(), extra.as_object()) else {
            panic!("connector configs are objects");
        };
        config_map.extend(extra.clone());
        let topics = tables.iter().map(|t| format!("{name}.{db}.{t}")).collect();
        Self::register(stack, name, topics, config).await
    }

    /// Registers the connector `name` with `config` and the Apicurio Avro converters (unless
    /// `config` names other converters; its own converter settings win), and waits for its
    /// task to run.
    async fn register(stack: &Stack, name: &str, topics: Vec<String>, mut config: Value) -> Self {
        let c = Self {
            name: name.to_owned(),
            topics,
            stack: stack.clone(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .expect("http"),
        };
        let registry = format!("{}/apis/registry/v2", stack.registry_url);
        let converters = json!({
            "key.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            "key.converter.apicurio.registry.url": registry,
            "key.converter.apicurio.registry.auto-register": "true",
            "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
            "value.converter.apicurio.registry.url": registry,
            "value.converter.apicurio.registry.auto-register": "true",
        });
        // The Apicurio Avro converters, unless the caller chose its own (their settings kept).
        if let (Some(config), Some(converters)) = (config.as_object_mut(), converters.as_object()) {
            for (k, v) in converters {
                let chosen = |side: &str| {
                    k.starts_with(side)
                        && config
                            .get(side)
                            .is_some_and(|c| !c.as_str().unwrap_or("").contains("apicurio"))
                };
                if !config.contains_key(k) && !chosen("key.converter") && !chosen("value.converter")
                {
                    config.insert(k.clone(), v.clone());
                }
            }
        }
        let resp = c
            .http
            .put(format!("{}/config", c.url()))
            .json(&config)
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
        if running.is_none() {
            let status = match c.http.get(format!("{}/status", c.url())).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            panic!("connector {name} did not reach RUNNING within 90 s: {status}");
        }
        c
    }

    fn url(&self) -> String {
        format!("{}/connectors/{}", self.stack.connect_url, self.name)
    }

    /// Reads exactly `counts[i]` records from `topics[i]`, from the beginning.
    pub(crate) async fn read(&self, counts: &[usize]) -> Vec<OwnedMessage> {
        let probe: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.stack.kafka_brokers)
            .create()
            .expect("metadata client");
        for topic in &self.topics {
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
            if found.is_none() {
                panic!(
                    "topic {topic} did not appear within 60 s; {}",
                    connector_status(&self.http, &self.url()).await
                );
            }
        }
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.stack.kafka_brokers)
            .set("group.id", unique("test-group"))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics).expect("subscribe");
        let total: usize = counts.iter().sum();
        let mut seen = vec![0usize; counts.len()];
        let mut out = Vec::with_capacity(total);
        while out.len() < total {
            // As long as records keep coming: on a stack just started, the group's first join
            // (the offsets topic being created) and a cold or busy Connect worker take a while.
            let Ok(msg) = tokio::time::timeout(NO_PROGRESS, consumer.recv()).await else {
                panic!(
                    "{seen:?} of {counts:?} records on {topics:?} and none for {NO_PROGRESS:?}; {}",
                    connector_status(&self.http, &self.url()).await
                );
            };
            let msg = msg.expect("consume");
            if let Some(i) = self.topics.iter().position(|t| t == msg.topic()) {
                seen[i] += 1;
            }
            out.push(msg.detach());
        }
        assert_eq!(seen, counts, "records per topic");
        out
    }

    /// Deletes the connector.
    pub(crate) async fn delete(&self) {
        self.http
            .delete(self.url())
            .send()
            .await
            .expect("delete connector");
    }

    /// Deletes the connector, waits for its slot to go, and drops its publication.
    pub(crate) async fn stop(self, pg: &PgPool) {
        self.delete().await;
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

/// Captures `table` (created and filled by `setup`) with Debezium and `extra` settings, runs
/// `changes`, and decodes the `count` records.
pub(crate) async fn capture(
    table: &str,
    setup: &[String],
    changes: &[String],
    count: usize,
    extra: serde_json::Value,
) -> (PgPool, Capture, Vec<ChangeBatch>) {
    let stack = Stack::from_env();
    let src = source_pool(&stack).await;
    exec(&src, setup).await;
    let capture = Capture::start_with(&stack, table, &[table], extra).await;
    exec(&src, changes).await;
    let records = capture.read(&[count]).await;
    let avro = lakesink_schema_registry::Format::Avro {
        payload_ids: lakesink_schema_registry::IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    (src, capture, batches)
}
