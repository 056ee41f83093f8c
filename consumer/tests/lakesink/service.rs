//! The service around the sinks: the HTTP endpoint, shutdown within a deadline, and two
//! instances sharing one group.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{BASE_TS, Run, assert_exactly_once, expected, http_get, metric};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use sqlx::postgres::PgPoolOptions;

fn sigterm(child: &std::process::Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
}

async fn produce(stack: &Stack, topic: &str, partitions: i32, count: i64) {
    let table = Table::create(stack, topic, partitions).await;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, partitions, count, BASE_TS))
        .await
        .expect("produce");
}

async fn replica_rows(stack: &Stack, topic: &str) -> (i64, i64) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable");
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), coalesce(sum(quantity), 0)::bigint FROM public.\"{topic}\""
    )))
    .fetch_one(&pool)
    .await
    .expect("replica table")
}

/// Rows and sum of `quantity` the workload leaves in the replica.
fn expected_table(count: i64) -> (i64, i64) {
    let alive: Vec<i64> = (0..count).filter(|i| i % 50 != 49).collect();
    let sum = alive.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    (alive.len() as i64, sum)
}

fn replica_section(stack: &Stack) -> String {
    format!(
        "[replica]\nurl = \"{}\"\nbatch-max-rows = 5000\n",
        stack.replica_pg_url
    )
}

async fn wait_for<F: AsyncFnMut() -> bool>(what: &str, secs: u64, run: &Run, mut f: F) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {secs} s; log:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_http_endpoint_reports_what_the_pipeline_did() {
    let stack = Stack::from_env();
    let topic = unique("service-http");
    let (partitions, count) = (2, 20_000);
    produce(&stack, &topic, partitions, count).await;
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 5000"),
        &replica_section(&stack),
    );
    let mut child = run.start(None);
    let (_, end) = expected(partitions, count);
    wait_for("all offsets committed", 180, &run, async || {
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        run.committed() == end
    })
    .await;

    let (status, body) = http_get(run.http, "/ready").await.expect("/ready answers");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let (status, _) = http_get(run.http, "/health")
        .await
        .expect("/health answers");
    assert_eq!(status, 200);
    let (status, body) = http_get(run.http, "/status")
        .await
        .expect("/status answers");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("/status is JSON");
    assert_eq!(v["sinks"]["raw"]["state"], "RUNNING", "{v}");
    assert_eq!(v["sinks"]["replica"]["state"], "RUNNING", "{v}");
    assert_eq!(v["assigned"], true, "{v}");
    assert_eq!(v["name"], run.group.as_str(), "{v}");
    assert_eq!(v["type"], "sink", "{v}");
    assert_eq!(v["kafka"]["state"], "RUNNING", "{v}");

    // Connect's own shape, for tools that read Connect's API: the sinks are its tasks.
    let path = format!("/connectors/{}/status", run.group);
    let (status, body) = http_get(run.http, &path)
        .await
        .expect("Connect status answers");
    assert_eq!(status, 200, "{body}");
    let c: serde_json::Value = serde_json::from_str(&body).expect("Connect status is JSON");
    assert_eq!(c["name"], run.group.as_str(), "{c}");
    assert_eq!(c["connector"]["state"], "RUNNING", "{c}");
    let tasks = c["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 2, "{c}");
    assert!(tasks.iter().all(|t| t["state"] == "RUNNING"), "{c}");
    let (status, _) = http_get(run.http, "/connectors/another-group/status")
        .await
        .expect("answers");
    assert_eq!(status, 404, "only this group's name is served");

    // Counters are exact; the lag gauges come with librdkafka's next statistics (5 s).
    let n = count as f64;
    let t = topic.as_str();
    wait_for("lag gauges at 0", 30, &run, async || {
        let (_, m) = http_get(run.http, "/metrics").await.expect("/metrics");
        (0..partitions).all(|p| {
            metric(
                &m,
                &format!("lakesink_consumer_lag_records{{topic=\"{t}\",partition=\"{p}\"}}"),
            ) == Some(0.0) && ["raw", "replica"].iter().all(|s| {
                metric(
                    &m,
                    &format!(
                        "lakesink_sink_lag_records{{sink=\"{s}\",topic=\"{t}\",partition=\"{p}\"}}"
                    ),
                ) == Some(0.0)
            })
        })
    })
    .await;
    // /status lists each assigned partition with every sink durable to its end.
    let (_, body) = http_get(run.http, "/status").await.expect("/status");
    let v: serde_json::Value = serde_json::from_str(&body).expect("/status is JSON");
    let listed = v["partitions"].as_array().expect("partitions");
    assert_eq!(listed.len(), partitions as usize, "{v}");
    for p in listed {
        assert_eq!(p["topic"], t, "{v}");
        assert_eq!(p["lag_records"], 0, "{v}");
        assert_eq!(p["end_offset"], p["consumed_offset"], "{v}");
        for sink in ["raw", "replica"] {
            assert_eq!(p["sinks"][sink]["lag_records"], 0, "{sink}: {v}");
            assert_eq!(p["sinks"][sink]["durable_offset"], p["end_offset"], "{v}");
        }
    }
    let (_, m) = http_get(run.http, "/metrics").await.expect("/metrics");
    let consumed = format!("lakesink_records_consumed_total{{topic=\"{t}\"}}");
    assert_eq!(metric(&m, &consumed), Some(n), "{m}");
    for sink in ["raw", "replica"] {
        let rows = format!("lakesink_sink_rows_total{{sink=\"{sink}\",topic=\"{t}\"}}");
        assert_eq!(metric(&m, &rows), Some(n), "{sink}: {m}");
    }
    // flush-size 5000 over 10,000 records per partition: four segments of one file each.
    assert_eq!(
        metric(&m, "lakesink_raw_flush_seconds_count"),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "lakesink_raw_file_size_bytes_count"),
        Some(4.0),
        "{m}"
    );
    assert!(metric(&m, "lakesink_replica_commit_seconds_count").is_some_and(|c| c >= 1.0));
    assert_eq!(
        metric(&m, "lakesink_replica_batch_rows_sum"),
        Some(n),
        "{m}"
    );
    assert_eq!(
        metric(&m, "lakesink_replica_latency_seconds_count"),
        Some(n),
        "{m}"
    );
    // What an operator alerts on: build, sink states, bytes, the process.
    let version = env!("CARGO_PKG_VERSION");
    let build = format!("lakesink_build_info{{version=\"{version}\"}}");
    assert_eq!(metric(&m, &build), Some(1.0), "{m}");
    for sink in ["raw", "replica"] {
        let running = format!("lakesink_sink_state{{sink=\"{sink}\",state=\"RUNNING\"}}");
        let failed = format!("lakesink_sink_state{{sink=\"{sink}\",state=\"FAILED\"}}");
        assert_eq!(metric(&m, &running), Some(1.0), "{sink}: {m}");
        assert_eq!(metric(&m, &failed), Some(0.0), "{sink}: {m}");
    }
    assert_eq!(metric(&m, "lakesink_kafka_reachable"), Some(1.0), "{m}");
    for sink in ["raw", "replica"] {
        let bytes = format!("lakesink_sink_bytes_total{{sink=\"{sink}\"}}");
        assert!(metric(&m, &bytes).is_some_and(|b| b > 0.0), "{sink}: {m}");
    }
    assert!(
        metric(&m, "process_resident_memory_bytes").is_some_and(|b| b > 0.0),
        "{m}"
    );
    assert!(
        metric(&m, "process_cpu_seconds_total").is_some_and(|s| s > 0.0),
        "{m}"
    );
    // One writer schema per side (key, value), each asked once and then cached.
    assert_eq!(
        metric(&m, "lakesink_registry_cache_lookups_total{result=\"miss\"}"),
        Some(2.0),
        "{m}"
    );
    assert!(
        metric(&m, "lakesink_registry_cache_lookups_total{result=\"hit\"}")
            .is_some_and(|h| h >= 2.0 * n - 2.0)
    );

    sigterm(&child);
    assert!(child.wait().expect("wait").success());
    assert_eq!(replica_rows(&stack, &topic).await, expected_table(count));
}

/// Open segments are flushed and committed on SIGTERM: with a flush size never reached,
/// every record is still in the files after a clean stop.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_flushes_open_files_and_commits() {
    let stack = Stack::from_env();
    let topic = unique("service-term");
    let (partitions, count) = (2, 10_000);
    produce(&stack, &topic, partitions, count).await;
    let run = Run::new(stack.clone(), &topic, partitions, "flush-size = 1000000");
    let mut child = run.start(None);
    let t = topic.clone();
    let n = count as f64;
    wait_for("every record read", 120, &run, async || {
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        http_get(run.http, "/metrics").await.is_some_and(|(_, m)| {
            metric(
                &m,
                &format!("lakesink_records_consumed_total{{topic=\"{t}\"}}"),
            ) == Some(n)
        })
    })
    .await;
    // Nothing is durable yet, so nothing is committed.
    assert!(run.committed().is_empty(), "{:?}", run.committed());
    let stopping = Instant::now();
    sigterm(&child);
    assert!(child.wait().expect("wait").success(), "{}", run.log_tail());
    assert!(stopping.elapsed() < Duration::from_secs(30));
    let (want, end) = expected(partitions, count);
    assert_eq!(run.committed(), end);
    let (got, files) = run.rows().await;
    assert_eq!(files, partitions as usize);
    assert_exactly_once(&got, &want);
}

/// A TCP forwarder in front of the object store that can be shut: after [`Gate::hold`] its
/// open connections are cut and new ones are accepted and never answered.
struct Gate {
    addr: std::net::SocketAddr,
    held: std::sync::Arc<std::sync::atomic::AtomicBool>,
    forwarding: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Gate {
    async fn open(upstream: &str) -> Self {
        use std::sync::atomic::Ordering;
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let gate = Self {
            addr: listener.local_addr().expect("addr"),
            held: Default::default(),
            forwarding: Default::default(),
        };
        let (held, forwarding) = (gate.held.clone(), gate.forwarding.clone());
        tokio::spawn(async move {
            let mut silent = Vec::new();
            while let Ok((mut client, _)) = listener.accept().await {
                if held.load(Ordering::SeqCst) {
                    silent.push(client);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                forwarding.lock().expect("lock").push(task);
            }
        });
        gate
    }

    fn hold(&self) {
        self.held.store(true, std::sync::atomic::Ordering::SeqCst);
        for task in self.forwarding.lock().expect("lock").drain(..) {
            task.abort();
        }
    }
}

/// The object store stops answering once every record is read: the flush on SIGTERM cannot
/// finish, and the process still exits by the deadline, with nothing committed.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_gives_up_at_the_deadline() {
    let stack = Stack::from_env();
    let topic = unique("service-deadline");
    let (partitions, count) = (1, 2_000);
    produce(&stack, &topic, partitions, count).await;
    let gate = Gate::open(&stack.s3_endpoint).await;
    let run = Run::new(stack.clone(), &topic, partitions, "flush-size = 1000000");
    let mut child = run.start_with(
        None,
        &[
            (
                "LAKESINK__RAW__STORE__ENDPOINT",
                &format!("http://{}", gate.addr),
            ),
            ("LAKESINK__SERVICE__SHUTDOWN_TIMEOUT_MS", "3000"),
        ],
    );
    // Every record read and held in the open file (the flush size is never reached).
    let t = topic.clone();
    let n = count as f64;
    wait_for("records read", 60, &run, async || {
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        http_get(run.http, "/metrics").await.is_some_and(|(_, m)| {
            metric(
                &m,
                &format!("lakesink_records_consumed_total{{topic=\"{t}\"}}"),
            ) == Some(n)
        })
    })
    .await;
    gate.hold();
    let stopping = Instant::now();
    sigterm(&child);
    let status = child.wait().expect("wait");
    let took = stopping.elapsed();
    assert_eq!(status.code(), Some(2), "{}", run.log_tail());
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert!(run.committed().is_empty());
}

/// Two instances share the partitions; one is killed mid-stream and the other takes its
/// partitions over: the raw layer holds every record once and the replica equals the source.
#[tokio::test(flavor = "multi_thread")]
async fn a_survivor_takes_over_from_a_killed_instance() {
    let stack = Stack::from_env();
    let topic = unique("service-scale");
    let (partitions, count) = (4, 80_000);
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    // A stream still flowing when an instance is killed: 5,000 records a second.
    let producing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (s, t, p) = (stack.clone(), table.clone(), producing.clone());
    let producer = tokio::task::spawn_blocking(move || {
        for chunk in (0..count).step_by(5_000) {
            t.produce_range(&s, partitions, chunk..chunk + 5_000, BASE_TS);
            std::thread::sleep(Duration::from_secs(1));
        }
        p.store(false, std::sync::atomic::Ordering::SeqCst);
    });
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 2000"),
        &replica_section(&stack),
    );
    let second_http = crate::common::free_port().to_string();
    let mut a = run.start(None);
    let mut b = run.start_with(None, &[("LAKESINK__SERVICE__HTTP_LISTEN", &second_http)]);
    let second: std::net::SocketAddr = second_http.parse().expect("addr");
    // Both have partitions, and some but not all records are committed.
    wait_for("both instances assigned", 60, &run, async || {
        let assigned = async |addr| {
            http_get(addr, "/status").await.is_some_and(|(_, s)| {
                serde_json::from_str::<serde_json::Value>(&s).is_ok_and(|v| v["assigned"] == true)
            })
        };
        assigned(run.http).await && assigned(second).await
    })
    .await;
    let (want, end) = expected(partitions, count);
    wait_for("a first commit", 120, &run, async || {
        assert!(a.try_wait().expect("wait").is_none(), "instance a exited");
        !run.committed().is_empty()
    })
    .await;
    a.kill().expect("SIGKILL instance a");
    a.wait().expect("wait");
    assert!(
        producing.load(std::sync::atomic::Ordering::SeqCst),
        "the stream ended before the kill"
    );
    producer.await.expect("produce");
    wait_for(
        "all offsets committed by the survivor",
        240,
        &run,
        async || {
            assert!(b.try_wait().expect("wait").is_none(), "instance b exited");
            run.committed() == end
        },
    )
    .await;
    sigterm(&b);
    assert!(b.wait().expect("wait").success(), "{}", run.log_tail());

    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
    assert_eq!(replica_rows(&stack, &topic).await, expected_table(count));
    let committed: BTreeMap<i32, i64> = run.committed();
    assert_eq!(committed, end);
}
