//! The replica's PostgreSQL goes down while lakesink applies to it and writes the raw layer:
//! lakesink retries with capped backoff without moving offsets, posts one alert and one
//! recovery to the webhook, the raw layer takes every record during the outage, and in the
//! end the replica equals what was produced and the raw layer holds each record once. Its own test binary, so no other test
//! uses the replica cluster while it is down.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    Run, Webhook, assert_exactly_once, assert_replica_table, expected, http_get, produce_range,
    replica_pool, stop_cleanly,
};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};

fn replica_cluster(action: &str) {
    let mut cmd = Command::new("pg_ctlcluster");
    cmd.args([
        "--skip-systemctl-redirect",
        "15",
        "lakesink-replica",
        action,
    ]);
    if action == "stop" {
        cmd.args(["-m", "fast"]);
    }
    // The server it starts must not inherit the test's output pipes: it outlives the test.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let status = cmd.status().expect("pg_ctlcluster runs");
    assert!(status.success(), "{action} the replica cluster: {status}");
}

/// Starts the cluster again when dropped, so a failing test does not leave it down for the
/// other tests.
struct Down;

impl Down {
    fn stop() -> Self {
        replica_cluster("stop");
        Down
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        replica_cluster("start");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_restart_mid_stream_loses_nothing() {
    let _alone = crate::ALONE.lock().await;
    let stack = Stack::from_env();
    let topic = unique("replica-restart");
    let (partitions, count) = (2, 40_000);
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    let produce = async |ids| produce_range(&stack, &table, partitions, ids).await;
    produce(0..count / 2).await;
    let hook = Webhook::start().await;
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 2000\nrotate-interval-ms = 1000"),
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 2000\n\n[alerts]\nwebhook-url = \"{}\"\n",
            stack.replica_pg_url, hook.url
        ),
    );
    let mut child = run.start(None);
    // The first half applied, then the database goes down and the second half arrives.
    let (_, half) = expected(partitions, count / 2);
    let deadline = Instant::now() + Duration::from_secs(90);
    while run.committed() != half {
        assert!(Instant::now() < deadline, "the first half was not applied");
        assert!(
            child.try_wait().expect("wait").is_none(),
            "lakesink exited:\n{}",
            run.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let down = Down::stop();
    produce(count / 2..count).await;
    // Down long enough for lakesink to notice: the sink pauses and the alert goes out.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let paused = http_get(run.http, "/status").await.is_some_and(|(_, s)| {
            serde_json::from_str::<serde_json::Value>(&s)
                .is_ok_and(|v| v["sinks"]["replica"]["state"] == "WAITING")
        });
        if paused && !hook.alerts().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the outage was not reported; log:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = http_get(run.http, "/ready").await.expect("/ready");
    assert_eq!(status, 503, "not ready while the database is down");
    // The backup goes on without the replica: every record reaches the raw layer. Meanwhile
    // more failed retries, and still one alert.
    let deadline = Instant::now() + Duration::from_secs(90);
    while (run.rows().await.0.len() as i64) < count {
        assert!(
            Instant::now() < deadline,
            "the raw layer stopped with the replica's database; log:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(down);
    assert!(
        child.try_wait().expect("wait").is_none(),
        "lakesink must ride out the outage, not exit"
    );
    let (want_rows, end) = expected(partitions, count);
    let deadline = Instant::now() + Duration::from_secs(120);
    while run.committed() != end {
        assert!(
            Instant::now() < deadline,
            "offsets {:?} never reached {end:?}",
            run.committed()
        );
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        std::thread::sleep(Duration::from_millis(250));
    }
    let recovered = Instant::now() + Duration::from_secs(10);
    while hook.alerts().len() < 2 && Instant::now() < recovered {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let database = |state: &str| {
        (
            "replica".to_owned(),
            "database".to_owned(),
            state.to_owned(),
        )
    };
    assert_eq!(
        hook.alerts(),
        vec![database("failing"), database("recovered")]
    );
    stop_cleanly(&mut child);
    let pool = replica_pool(&stack).await;
    assert_replica_table(&pool, &topic, count).await;
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want_rows);
}
