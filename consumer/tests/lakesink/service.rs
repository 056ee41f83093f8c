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

    // Counters are exact; the lag gauges come with librdkafka's next statistics (5 s).
    let n = count as f64;
    let t = topic.as_str();
    wait_for("lag gauges at 0", 30, &run, async || {
        let (_, m) = http_get(run.http, "/metrics").await.expect("/metrics");
        (0..partitions).all(|p| {
            metric(
                &m,
                &format!("lakesink_consumer_lag{{topic=\"{t}\",partition=\"{p}\"}}"),
            ) == Some(0.0)
        })
    })
    .await;
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
    // One writer schema per side (key, value), each asked once and then cached.
    assert_eq!(
        metric(&m, "lakesink_registry_cache_misses_total"),
        Some(2.0),
        "{m}"
    );
    assert!(metric(&m, "lakesink_registry_cache_hits_total").is_some_and(|h| h >= 2.0 * n - 2.0));

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

/// An object store that accepts connections and never answers: the flush cannot finish,
/// and the process still exits by the deadline, with nothing committed.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_gives_up_at_the_deadline() {
    let stack = Stack::from_env();
    let topic = unique("service-deadline");
    let (partitions, count) = (1, 2_000);
    produce(&stack, &topic, partitions, count).await;
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hole_addr = hole.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hole.accept().await {
            held.push(s);
        }
    });
    let run = Run::new(stack.clone(), &topic, partitions, "flush-size = 1000000");
    let mut child = run.start_with(
        None,
        &[
            (
                "LAKESINK__RAW__STORE__ENDPOINT",
                &format!("http://{hole_addr}"),
            ),
            ("LAKESINK__SERVICE__SHUTDOWN_TIMEOUT_MS", "3000"),
        ],
    );
    // The sinks block on the store's first request, and the consumer soon after them.
    let t = topic.clone();
    wait_for("records read", 60, &run, async || {
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        http_get(run.http, "/metrics").await.is_some_and(|(_, m)| {
            metric(
                &m,
                &format!("lakesink_records_consumed_total{{topic=\"{t}\"}}"),
            )
            .is_some_and(|n| n > 0.0)
        })
    })
    .await;
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
