//! The replica's PostgreSQL restarts while lakesink applies to it: lakesink retries with
//! capped backoff without moving offsets, and the replica ends equal to what was produced.
//! Its own test binary, so no other test uses the replica cluster while it restarts.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{BASE_TS, Run, expected};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use sqlx::postgres::PgPoolOptions;

fn restart_replica_cluster() {
    let status = Command::new("pg_ctlcluster")
        .args([
            "--skip-systemctl-redirect",
            "15",
            "lakesink-replica",
            "restart",
            "-m",
            "fast",
        ])
        .status()
        .expect("pg_ctlcluster runs");
    assert!(status.success(), "restarting the replica cluster: {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_restart_mid_stream_loses_nothing() {
    let stack = Stack::from_env();
    let topic = unique("replica-restart");
    let (partitions, count) = (2, 40_000);
    let table = Table::create(&stack, &topic, partitions).await;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, partitions, count, BASE_TS))
        .await
        .expect("produce");
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        None,
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 2000\n",
            stack.replica_pg_url
        ),
    );
    let mut child = run.start(None);
    // Restart once some but not all records are in.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let done: i64 = run.committed().values().sum();
        if done > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "nothing was committed");
        assert!(child.try_wait().expect("wait").is_none(), "lakesink exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    restart_replica_cluster();
    let _ = child.try_wait();
    assert!(
        child.try_wait().expect("wait").is_none(),
        "lakesink must ride out the restart, not exit"
    );
    let (_, end) = expected(partitions, count);
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
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(child.wait().expect("wait").success());

    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable");
    let (rows, quantity): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), sum(quantity)::bigint FROM public.\"{topic}\""
    )))
    .fetch_one(&pool)
    .await
    .expect("replica table");
    let alive: Vec<i64> = (0..count).filter(|i| i % 50 != 49).collect();
    let want: i64 = alive.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    assert_eq!((rows, quantity), (alive.len() as i64, want));
}
