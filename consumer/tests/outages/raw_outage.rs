//! The object store goes down while lakesink writes both sinks: the raw layer lets go and
//! reports WAITING, the replica keeps applying every record, Kafka's offset stays at what the
//! raw layer holds; when the store is back, the raw layer reads its partitions again and ends
//! with every record exactly once. Its own test binary, so no other test uses the store while
//! it is down.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{
    Killed, Run, assert_exactly_once, assert_replica_table, expected, http_get, produce_range,
    replica_pool, stop_cleanly,
};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};

fn stack_command(args: &[&str]) {
    let script = lakesink_tests::workspace_root().join("dev/stack");
    let status = Command::new(script)
        .args(args)
        .status()
        .expect("dev/stack runs");
    assert!(status.success(), "dev/stack {args:?}: {status}");
}

/// Starts the store again when dropped, so a failing test does not leave it down.
struct StoreDown;

impl StoreDown {
    fn stop() -> Self {
        stack_command(&["stop", "s3"]);
        StoreDown
    }
}

impl Drop for StoreDown {
    fn drop(&mut self) {
        stack_command(&["up"]);
    }
}

async fn raw_state(run: &Run) -> Option<(String, String)> {
    let (_, body) = http_get(run.http, "/status").await?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let raw = &v["sinks"]["raw"];
    Some((
        raw["state"].as_str()?.to_owned(),
        raw["component"].as_str().unwrap_or_default().to_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_store_outage_stops_neither_the_replica_nor_loses_a_record() {
    let _alone = crate::ALONE.lock().await;
    let stack = Stack::from_env();
    let topic = unique("store-outage");
    let (partitions, count) = (2, 20_000);
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    let produce = async |ids| produce_range(&stack, &table, partitions, ids).await;
    produce(0..count / 2).await;
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 1000\nrotate-interval-ms = 1000"),
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 1000\n",
            stack.replica_pg_url
        ),
    );
    // The store client gives up on a request after a second, so the outage shows at once.
    let text = std::fs::read_to_string(&run.config).expect("config");
    let text = text.replace(
        "allow-http = true",
        "allow-http = true\nretry-timeout-ms = 1000",
    );
    std::fs::write(&run.config, text).expect("config written");
    let pool = replica_pool(&stack).await;
    let replica_applied = async || -> i64 {
        sqlx::query_scalar::<_, Option<i64>>(
            "SELECT sum(next_offset)::bigint FROM public.lakesink_offsets WHERE topic = $1",
        )
        .bind(&topic)
        .fetch_one(&pool)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
    };
    let mut child = Killed(run.start(None));
    let (_, half) = expected(partitions, count / 2);
    let deadline = Instant::now() + Duration::from_secs(90);
    while run.committed() != half {
        assert!(
            Instant::now() < deadline,
            "the first half was not written; log:\n{}",
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let down = StoreDown::stop();
    produce(count / 2..count).await;
    // The replica applies the second half with the store down, the raw layer says why it
    // waits, and Kafka's offset stays where the raw layer stopped.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let paused =
            raw_state(&run).await == Some(("WAITING".to_owned(), "object_store".to_owned()));
        if paused && replica_applied().await == count {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "with the store down: raw {:?}, replica at {} of {count}; log:\n{}",
            raw_state(&run).await,
            replica_applied().await,
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Down a while longer: probes fail, and nothing moves on for the raw layer.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        raw_state(&run).await,
        Some(("WAITING".to_owned(), "object_store".to_owned()))
    );
    let committed: i64 = run.committed().values().sum();
    assert!(
        committed < count,
        "Kafka's offset ({committed}) passed records the raw layer does not hold"
    );

    drop(down);
    let (want, end) = expected(partitions, count);
    run.wait_committed(&end, Duration::from_secs(120), "after the store came back")
        .await;
    assert_eq!(
        raw_state(&run).await.map(|s| s.0),
        Some("RUNNING".to_owned())
    );
    stop_cleanly(&mut child.0);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
    assert_replica_table(&pool, &topic, count).await;
}

/// The store down when the partitions are assigned, and the group's offset moved past what
/// the raw layer holds (a reset, an offset tool): the raw layer's position cannot be read, so
/// lakesink waits for it rather than start at the group's offset (which here would skip 100
/// records per partition), and once the store is back reads again from its own point.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_down_at_assignment_is_waited_for_not_skipped_past() {
    let _alone = crate::ALONE.lock().await;
    let stack = Stack::from_env();
    let topic = unique("store-down-start");
    let partitions = 2;
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    produce_range(&stack, &table, partitions, 0..1_000).await;
    let run = Run::new(
        stack.clone(),
        &topic,
        partitions,
        "flush-size = 300\nrotate-interval-ms = 1000",
    );
    let text = std::fs::read_to_string(&run.config).expect("config");
    let text = text.replace(
        "allow-http = true",
        "allow-http = true\nretry-timeout-ms = 1000",
    );
    std::fs::write(&run.config, text).expect("config written");
    let (_, first) = expected(partitions, 1_000);
    run.run_to_end(&first);

    produce_range(&stack, &table, partitions, 1_000..2_000).await;
    let (want, end) = expected(partitions, 2_000);
    let moved: std::collections::BTreeMap<i32, i64> =
        end.iter().map(|(&p, &n)| (p, n - 100)).collect();
    run.move_group(&moved);
    let down = StoreDown::stop();
    let mut child = Killed(run.start(None));
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        child.0.try_wait().expect("wait").is_none(),
        "lakesink waits for the store, it does not stop; log:\n{}",
        run.log_tail()
    );
    assert_eq!(
        run.committed(),
        moved,
        "nothing is committed while it waits"
    );
    drop(down);
    run.wait_committed(&end, Duration::from_secs(120), "after the store came back")
        .await;
    stop_cleanly(&mut child.0);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
}
