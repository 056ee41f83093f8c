//! Running the `lakesink` binary against the real stack: a config per test, runs killed at
//! failpoints, a clean run to the end, and what the raw layer holds.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

pub const BASE_TS: i64 = 1_714_568_400_000; // 2024-05-01T13:00:00Z

pub struct Run {
    pub stack: Stack,
    pub topic: String,
    pub group: String,
    pub prefix: String,
    pub partitions: i32,
    pub config: PathBuf,
    /// Where the run serves `/metrics`, `/health`, `/ready` and `/status`.
    pub http: std::net::SocketAddr,
}

impl Run {
    /// A run writing the raw layer with `raw_extra` settings, plus any `sections` of TOML.
    pub fn new(stack: Stack, topic: &str, partitions: i32, raw_extra: &str) -> Self {
        Self::with(stack, topic, partitions, Some(raw_extra), "")
    }

    pub fn with(
        stack: Stack,
        topic: &str,
        partitions: i32,
        raw_extra: Option<&str>,
        sections: &str,
    ) -> Self {
        let group = unique("group");
        let prefix = unique("raw");
        let dir = std::env::temp_dir().join(unique("lakesink-test"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config = dir.join("lakesink.toml");
        let http = free_port();
        let text = format!(
            r#"
[kafka]
brokers = "{brokers}"
group-id = "{group}"
topics = ["{topic}"]
# A killed member is noticed in seconds, not the default 45.
properties = {{ "session.timeout.ms" = "6000", "heartbeat.interval.ms" = "1000" }}

[registry]
url = "{registry}"

[service]
http-listen = "{http}"
shutdown-timeout-ms = 60000

{sections}
"#,
            brokers = stack.kafka_brokers,
            registry = stack.registry_url,
        );
        let mut text = text;
        if let Some(extra) = raw_extra {
            text.push_str(&format!(
                r#"
[raw]
url = "s3://{bucket}/{prefix}"
{extra}

[raw.store]
{store}"#,
                bucket = stack.s3_bucket,
                store = stack.store_keys(),
            ));
        }
        std::fs::write(&config, text).expect("config written");
        Self {
            stack,
            topic: topic.to_owned(),
            group,
            prefix,
            partitions,
            config,
            http,
        }
    }

    pub fn start(&self, failpoint: Option<&str>) -> Child {
        self.start_with(failpoint, &[])
    }

    /// As [`Run::start`], with `LAKESINK__…` overrides or other variables set.
    pub fn start_with(&self, failpoint: Option<&str>, env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lakesink"));
        cmd.args(["run", "--config"]).arg(&self.config);
        cmd.envs(env.iter().copied());
        if let Some(fp) = failpoint {
            cmd.env("LAKESINK_FAILPOINTS", fp);
        }
        cmd.env(
            "RUST_LOG",
            std::env::var("LAKESINK_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
        // Every run's log, appended in one file, so a failure can show what happened.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        cmd.stderr(log);
        cmd.spawn().expect("lakesink starts")
    }

    /// Waits for `child` to stop on its own with a failure, and returns the ERROR line that
    /// says why; kills it and panics with the log after `within`.
    pub fn stopped(&self, child: &mut Child, within: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let log = self.log_tail();
                assert!(!status.success(), "{log}");
                return log
                    .lines()
                    .find(|l| l.contains("ERROR") && l.contains("stopped"))
                    .unwrap_or_else(|| panic!("no ERROR line saying why:\n{log}"))
                    .to_owned();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("lakesink still runs after {within:?}:\n{}", self.log_tail());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// A client of the run's group that never joins it: for reading and moving its offsets.
    fn group_client(&self) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.stack.kafka_brokers)
            .set("group.id", &self.group)
            .create()
            .expect("consumer")
    }

    /// Waits until the group's committed offsets are `end`; panics with the log after `within`.
    pub async fn wait_committed(&self, end: &BTreeMap<i32, i64>, within: Duration, when: &str) {
        let deadline = Instant::now() + within;
        while self.committed() != *end {
            assert!(
                Instant::now() < deadline,
                "offsets {:?} never reached {end:?} {when}; log:\n{}",
                self.committed(),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Commits `offsets` for the run's group, as an offset tool or another client would.
    pub fn move_group(&self, offsets: &BTreeMap<i32, i64>) {
        use rdkafka::consumer::CommitMode;
        let consumer = self.group_client();
        let mut list = TopicPartitionList::new();
        for (&p, &o) in offsets {
            list.add_partition_offset(&self.topic, p, Offset::Offset(o))
                .expect("offset");
        }
        consumer
            .commit(&list, CommitMode::Sync)
            .expect("commit for the group");
    }

    fn log_path(&self) -> PathBuf {
        self.config.with_file_name("lakesink.log")
    }

    /// Every run's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The end of the runs' log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Runs until the failpoint kills the process.
    pub fn crash_at(&self, failpoint: &str) {
        let mut child = self.start(Some(failpoint));
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                assert_eq!(
                    status.signal(),
                    Some(9),
                    "lakesink should die by SIGKILL at {failpoint}, got {status}"
                );
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "failpoint {failpoint} was never reached; log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs without failpoints until every record is committed, then stops it with SIGTERM.
    pub fn run_to_end(&self, end: &BTreeMap<i32, i64>) {
        let mut child = self.start(None);
        let deadline = Instant::now() + Duration::from_secs(240);
        while self.committed() != *end {
            if let Some(status) = child.try_wait().expect("wait") {
                panic!("lakesink exited early: {status}; log:\n{}", self.log_tail());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "committed offsets {:?} never reached {end:?}; log:\n{}",
                    self.committed(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        stop_cleanly(&mut child);
    }

    pub fn committed(&self) -> BTreeMap<i32, i64> {
        self.committed_with_metadata()
            .into_iter()
            .map(|(p, (o, _))| (p, o))
            .collect()
    }

    /// Each partition's committed offset and the metadata committed with it.
    pub fn committed_with_metadata(&self) -> BTreeMap<i32, (i64, String)> {
        let consumer = self.group_client();
        let mut list = TopicPartitionList::new();
        for p in 0..self.partitions {
            list.add_partition(&self.topic, p);
        }
        let got = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .expect("committed offsets");
        got.elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), (o, e.metadata().to_owned()))),
                _ => None,
            })
            .collect()
    }

    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_bucket_name(&self.stack.s3_bucket)
                .with_endpoint(&self.stack.s3_endpoint)
                .with_region(&self.stack.s3_region)
                .with_access_key_id(&self.stack.s3_access_key_id)
                .with_secret_access_key(&self.stack.s3_secret_access_key)
                .with_allow_http(true)
                .build()
                .expect("s3 client"),
        )
    }

    /// Each data file under `topics/{under}`: its Arrow schema (as stored) and its rows.
    pub async fn files(&self, under: &str) -> Vec<(SchemaRef, Vec<RecordBatch>)> {
        let store = self.store();
        let prefix = Path::from(format!("{}/topics/{under}", self.prefix));
        let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await.expect("list");
        let mut files = Vec::new();
        for m in &metas {
            let bytes = store
                .get(&m.location)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes");
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap_or_else(|e| panic!("{} is not Parquet: {e}", m.location));
            let schema = reader.schema().clone();
            let batches = reader
                .build()
                .expect("reader")
                .collect::<Result<Vec<_>, _>>()
                .expect("batch");
            files.push((schema, batches));
        }
        files
    }

    /// (partition, offset) of every row in every data file, and the number of files.
    pub async fn rows(&self) -> (Vec<(i32, i64)>, usize) {
        let files = self.files("").await;
        let mut rows = Vec::new();
        for (_, batches) in &files {
            for batch in batches {
                let p = batch
                    .column_by_name("__partition")
                    .expect("__partition")
                    .as_primitive::<Int32Type>();
                let o = batch
                    .column_by_name("__offset")
                    .expect("__offset")
                    .as_primitive::<Int64Type>();
                rows.extend(p.values().iter().copied().zip(o.values().iter().copied()));
            }
        }
        rows.sort();
        (rows, files.len())
    }
}

/// Runs each statement in order; a failure names it.
pub async fn exec(pg: &sqlx::PgPool, sqls: &[String]) {
    for sql in sqls {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(pg)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// A loopback address with a port nobody listens on now.
impl Run {
    /// Waits until the replica's offsets table says `topic` (one partition) is applied up to
    /// `want`; before lakesink creates that table, it says nothing.
    pub async fn wait_for_replica(&self, pool: &sqlx::PgPool, topic: &str, want: i64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while replica_next_offset(pool, topic).await != Some(want) {
            assert!(
                Instant::now() < deadline,
                "{topic} never reached {want} in the replica; log:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A running `lakesink`, killed however the test ends: a failed assertion must not leave it
/// running.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A small pool on the replica database, for a test's own queries and locks.
pub async fn replica_pool(stack: &Stack) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable")
}

/// The replica's next offset for `topic` (its highest over partitions), if it has one.
pub async fn replica_next_offset(pool: &sqlx::PgPool, topic: &str) -> Option<i64> {
    sqlx::query_as::<_, (Option<i64>,)>(
        "SELECT max(next_offset) FROM public.lakesink_offsets WHERE topic = $1",
    )
    .bind(topic)
    .fetch_one(pool)
    .await
    .ok()
    .and_then(|(n,)| n)
}

pub fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// GET `path` from a run's HTTP endpoint: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    let r = reqwest::get(format!("http://{addr}{path}")).await.ok()?;
    let status = r.status().as_u16();
    Some((status, r.text().await.ok()?))
}

/// A metric's value from an OpenMetrics text, by its full name and labels as printed.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

pub fn expected(partitions: i32, count: i64) -> (Vec<(i32, i64)>, BTreeMap<i32, i64>) {
    let mut per: BTreeMap<i32, i64> = BTreeMap::new();
    for i in 0..count {
        *per.entry((i % i64::from(partitions)) as i32).or_default() += 1;
    }
    let rows = per
        .iter()
        .flat_map(|(&p, &n)| (0..n).map(move |o| (p, o)))
        .collect();
    (rows, per)
}

pub fn assert_exactly_once(got: &[(i32, i64)], want: &[(i32, i64)]) {
    let mut dups = got.to_vec();
    dups.dedup();
    assert_eq!(
        dups.len(),
        got.len(),
        "{} rows are duplicated",
        got.len() - dups.len()
    );
    let missing: Vec<_> = want
        .iter()
        .filter(|r| got.binary_search(r).is_err())
        .take(5)
        .collect();
    assert!(missing.is_empty(), "rows missing, e.g. {missing:?}");
    assert_eq!(got, want);
}

/// A webhook receiver on loopback: every JSON body posted to it, in order.
pub struct Webhook {
    pub url: String,
    pub posts: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Webhook {
    pub async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let posts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let store = posts.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Several requests may come over one kept-alive connection.
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let body: Vec<u8> = buf.drain(..end + 4 + len).skip(end + 4).collect();
                        if let Ok(v) = serde_json::from_slice(&body)
                            && let Ok(mut p) = store.lock()
                        {
                            p.push(v);
                        }
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { url, posts }
    }

    /// (sink, component, state) of each alert so far.
    pub fn alerts(&self) -> Vec<(String, String, String)> {
        let posts = self.posts.lock().expect("posts");
        posts
            .iter()
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                (s("sink"), s("component"), s("state"))
            })
            .collect()
    }
}

/// Produces the workload's events for `ids` (see [`Table::produce_range`]).
pub async fn produce_range(
    stack: &Stack,
    table: &Arc<Table>,
    partitions: i32,
    ids: std::ops::Range<i64>,
) {
    let (s, t) = (stack.clone(), table.clone());
    tokio::task::spawn_blocking(move || t.produce_range(&s, partitions, ids, BASE_TS))
        .await
        .expect("produce");
}

/// A table's topic holding one record whose value is `payload` (not Avro): a bad record.
pub async fn bad_record_topic(stack: &Stack, prefix: &str, payload: &'static [u8]) -> String {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let topic = unique(prefix);
    let table = Table::create(stack, &topic, 1).await;
    let (s, t, key) = (stack.clone(), table.topic.clone(), table.key(1));
    tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_brokers)
            .create()
            .expect("producer");
        producer
            .send(BaseRecord::to(&t).key(&key).payload(payload))
            .map_err(|(e, _)| e)
            .expect("send");
        producer
            .flush(std::time::Duration::from_secs(10))
            .expect("flush");
    })
    .await
    .expect("produce");
    topic
}

/// Asserts that the replica's table for `topic` holds what the workload's first `count`
/// events leave: every row but each 50th (deleted), with its last quantity.
pub async fn assert_replica_table(pool: &sqlx::PgPool, topic: &str, count: i64) {
    let (rows, quantity): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), coalesce(sum(quantity), 0)::bigint FROM public.\"{topic}\""
    )))
    .fetch_one(pool)
    .await
    .expect("replica table");
    let alive: Vec<i64> = (0..count).filter(|i| i % 50 != 49).collect();
    let want: i64 = alive.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    assert_eq!((rows, quantity), (alive.len() as i64, want));
}

/// SIGTERM, and a clean exit.
pub fn stop_cleanly(child: &mut Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let status = child.wait().expect("wait");
    assert!(
        status.success(),
        "lakesink stops cleanly on SIGTERM: {status}"
    );
}
