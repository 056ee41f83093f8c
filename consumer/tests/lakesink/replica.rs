//! The replica through the `lakesink` binary: killed at each failpoint of the apply (after the
//! COPY, before the COMMIT, after the COMMIT before Kafka hears of it) and of the raw layer,
//! restarted, and in the end the replica holds exactly the source's rows while the raw layer
//! holds every record once.

use crate::common::{
    Killed, Run, assert_exactly_once, expected, http_get, metric, produce_range,
    replica_next_offset, replica_pool,
};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use std::sync::Arc;

use lakesink_writers::failpoint::{
    KAFKA_AFTER_STORE, RAW_AFTER_UPLOAD, REPLICA_AFTER_COMMIT, REPLICA_AFTER_COPY,
    REPLICA_BEFORE_COMMIT,
};
use sqlx::postgres::PgPoolOptions;

/// The replica section: one table per topic (the default `${topic}` template).
fn replica(stack: &Stack) -> String {
    format!(
        "[replica]\nurl = \"{}\"\nbatch-max-rows = 700\n",
        stack.replica_pg_url
    )
}

/// Row count, sum of `quantity` and one price, as the workload's events leave the table.
fn expected_table(count: i64) -> (i64, i64, String) {
    let alive: Vec<i64> = (0..count).filter(|i| i % 50 != 49).collect();
    let quantity: i64 = alive.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    // Row 10 was last written with version 10 % 7 + 1 = 4: 100 + (10 * 7 + 4) cents.
    let cents = 174;
    (
        alive.len() as i64,
        quantity,
        format!("{}.{:02}", cents / 100, cents % 100),
    )
}

async fn replica_state(stack: &Stack, table: &str) -> (i64, i64, String) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable");
    let q = format!(
        "SELECT count(*), sum(quantity)::bigint, (SELECT price::text FROM public.\"{table}\" WHERE id = 10) FROM public.\"{table}\""
    );
    sqlx::query_as(sqlx::AssertSqlSafe(q))
        .fetch_one(&pool)
        .await
        .expect("replica table")
}

#[tokio::test(flavor = "multi_thread")]
async fn both_sinks_end_exact_across_crashes_in_the_replica_and_the_raw_layer() {
    let stack = Stack::from_env();
    let topic = unique("fanout");
    let partitions = 2;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 900\nrotate-interval-ms = 1000"),
        &replica(&stack),
    );
    // More records before each run, so every run has something left to apply.
    let failpoints = [
        REPLICA_AFTER_COPY,
        REPLICA_BEFORE_COMMIT,
        REPLICA_AFTER_COMMIT,
        RAW_AFTER_UPLOAD,
        REPLICA_AFTER_COMMIT,
        KAFKA_AFTER_STORE,
    ];
    let chunk = 1_000;
    for (i, failpoint) in failpoints.iter().enumerate() {
        produce_range(
            &stack,
            &table,
            partitions,
            i as i64 * chunk..(i as i64 + 1) * chunk,
        )
        .await;
        run.crash_at(failpoint);
    }
    let count = failpoints.len() as i64 * chunk;
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    assert_eq!(replica_state(&stack, &topic).await, expected_table(count));
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_replica_alone_resumes_from_its_own_offsets() {
    let stack = Stack::from_env();
    let topic = unique("replica-only");
    let partitions = 3;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    let run = Run::with(stack.clone(), &topic, partitions, None, &replica(&stack));
    produce_range(&stack, &table, partitions, 0..1_500).await;
    run.crash_at(REPLICA_AFTER_COMMIT);
    produce_range(&stack, &table, partitions, 1_500..3_000).await;
    run.crash_at(REPLICA_BEFORE_COMMIT);
    let count = 3_000;
    let (_, end) = expected(partitions, count);
    run.run_to_end(&end);
    assert_eq!(replica_state(&stack, &topic).await, expected_table(count));
}

/// Kafka hears of what is durable as soon as lakesink has caught up, not at the next
/// auto-commit: with the auto-commit ten minutes apart, the committed offsets still reach the
/// end within seconds, and the replica holds every row.
#[tokio::test(flavor = "multi_thread")]
async fn caught_up_offsets_are_committed_without_waiting_for_the_auto_commit() {
    let stack = Stack::from_env();
    let topic = unique("caught-up");
    let partitions = 2;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    let run = Run::with(stack.clone(), &topic, partitions, None, &replica(&stack));
    let config = std::fs::read_to_string(&run.config).expect("config");
    let slow = config.replace(
        "\"heartbeat.interval.ms\" = \"1000\"",
        "\"heartbeat.interval.ms\" = \"1000\", \"auto.commit.interval.ms\" = \"600000\"",
    );
    assert_ne!(slow, config, "the auto-commit interval is set");
    std::fs::write(&run.config, slow).expect("config");
    produce_range(&stack, &table, partitions, 0..2_000).await;
    let (_, end) = expected(partitions, 2_000);
    let child = Killed(run.start(None));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let run = &run;
    let wait = |end: std::collections::BTreeMap<i32, i64>| async move {
        while run.committed() != end {
            assert!(
                std::time::Instant::now() < deadline,
                "committed {:?}, want {end:?}; log:\n{}",
                run.committed(),
                run.log_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    wait(end).await;
    // More records later: committed again once applied, still long before the auto-commit.
    produce_range(&stack, &table, partitions, 2_000..3_000).await;
    wait(expected(partitions, 3_000).1).await;
    drop(child);
    assert_eq!(replica_state(&stack, &topic).await, expected_table(3_000));
}

/// A slow replica table holds back only its own lane: with one table locked by another
/// session, the partitions of its lane pause at the consumer while the other topic's rows
/// keep arriving in the replica; unlocked, the first catches up.
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_table_holds_back_only_its_own_lane() {
    let stack = Stack::from_env();
    let (slow, fast) = (unique("slow-lane"), unique("fast-lane"));
    let slow_t = Arc::new(Table::create(&stack, &slow, 1).await);
    let fast_t = Arc::new(Table::create(&stack, &fast, 1).await);
    produce_range(&stack, &slow_t, 1, 0..100).await;
    produce_range(&stack, &fast_t, 1, 0..100).await;
    // Two lanes, and a bound small enough that the locked table's backlog would stop
    // everything if the whole consumer paused (the consumer hands over up to 16k records at
    // a time, so the stream must be longer than that).
    let run = Run::with(
        stack.clone(),
        &slow,
        1,
        None,
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 100\npool-size = 2\n",
            stack.replica_pg_url
        ),
    );
    let text = std::fs::read_to_string(&run.config).expect("config");
    let text = text.replace(
        &format!("topics = [\"{slow}\"]"),
        &format!("topics = [\"{slow}\", \"{fast}\"]"),
    );
    std::fs::write(&run.config, text).expect("config written");
    let pool = replica_pool(&stack).await;
    let mut child = Killed(run.start(None));
    run.wait_for_replica(&pool, &slow, 100).await;
    run.wait_for_replica(&pool, &fast, 100).await;

    let mut lock = pool.begin().await.expect("begin");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE public.\"{slow}\" IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *lock)
    .await
    .expect("lock");
    // The locked table's records first, so that its backlog builds before the others come.
    produce_range(&stack, &slow_t, 1, 100..20_000).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    produce_range(&stack, &fast_t, 1, 100..20_000).await;
    run.wait_for_replica(&pool, &fast, 20_000).await;
    assert!(
        replica_next_offset(&pool, &slow).await < Some(20_000),
        "the locked table moved"
    );
    lock.commit().await.expect("unlock");
    run.wait_for_replica(&pool, &slow, 20_000).await;
    assert!(
        child.0.try_wait().expect("wait").is_none(),
        "{}",
        run.log_tail()
    );
    drop(child);
    let want = expected_table(20_000);
    assert_eq!(replica_state(&stack, &slow).await, want);
    assert_eq!(replica_state(&stack, &fast).await, want);
}

/// With both sinks, a stuck replica lane does not stop the raw layer: the replica lets go of
/// the lane's partition and the raw layer takes every record while the table is locked.
/// Kafka's committed offset stays at the replica's point, with the raw layer's own in its
/// metadata. Unlocked, the partition is read again for the replica alone; after a crash with
/// the lane stuck, a restart does the same without writing any raw file a second time.
#[tokio::test(flavor = "multi_thread")]
async fn a_stuck_replica_lane_lets_the_raw_layer_go_on() {
    let stack = Stack::from_env();
    let topic = unique("stuck-both");
    let table = Arc::new(Table::create(&stack, &topic, 1).await);
    produce_range(&stack, &table, 1, 0..100).await;
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        Some("flush-size = 1000\nrotate-interval-ms = 1000"),
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 100\npool-size = 1\n",
            stack.replica_pg_url
        ),
    );
    let pool = replica_pool(&stack).await;
    let lock = async || {
        let mut lock = pool.begin().await.expect("begin");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "LOCK TABLE public.\"{topic}\" IN ACCESS EXCLUSIVE MODE"
        )))
        .execute(&mut *lock)
        .await
        .expect("lock");
        lock
    };
    let stuck_partitions = async || {
        let (_, text) = http_get(run.http, "/metrics").await.expect("/metrics");
        metric(&text, "lakesink_replica_stuck_partitions")
    };
    // Waits until the raw layer holds `count` records while the replica is behind, as
    // Kafka's commit says: the replica's offset, the raw layer's in the metadata.
    let raw_goes_on = async |count: i64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let want = format!("lakesink:raw={count}");
        loop {
            let committed = run.committed_with_metadata();
            if let Some((offset, _)) = committed.get(&0).filter(|(_, m)| *m == want) {
                let replica = replica_next_offset(&pool, &topic).await.expect("offsets");
                assert!(
                    *offset <= replica && replica < count,
                    "Kafka's offset {offset} is the replica's point {replica}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the raw layer never reached {count} while the table was locked \
                 ({committed:?}); log:\n{}",
                run.log_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        let (rows, _) = run.rows().await;
        assert_eq!(
            rows.len() as i64,
            count,
            "every record in the raw layer, once"
        );
        assert_eq!(stuck_partitions().await, Some(1.0));
    };
    let child = Killed(run.start(None));
    run.wait_for_replica(&pool, &topic, 100).await;

    // More than the consumer hands over at a time (16k records) plus the bounds: with the
    // partition paused instead, the raw layer would stop short of the end.
    let first = 25_000;
    let held = lock().await;
    produce_range(&stack, &table, 1, 100..first).await;
    raw_goes_on(first).await;
    held.commit().await.expect("unlock");
    run.wait_for_replica(&pool, &topic, first).await;
    let (rows, _) = run.rows().await;
    assert_eq!(rows.len() as i64, first, "read again for the replica only");
    assert_eq!(stuck_partitions().await, Some(0.0), "taken back");

    // Again, then a crash with the lane still stuck, the table unlocked and a clean run.
    let count = 2 * first;
    let held = lock().await;
    produce_range(&stack, &table, 1, first..count).await;
    raw_goes_on(count).await;
    drop(child);
    let crashed = chrono::Utc::now();
    held.commit().await.expect("unlock");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (want_rows, end) = expected(1, count);
    run.run_to_end(&end);
    assert_eq!(replica_state(&stack, &topic).await, expected_table(count));
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want_rows);
    let store = run.store();
    let prefix = object_store::path::Path::from(format!("{}/topics", run.prefix));
    let metas: Vec<_> = futures::TryStreamExt::try_collect(store.list(Some(&prefix)))
        .await
        .expect("list");
    let rewritten: Vec<_> = metas
        .iter()
        .filter(|m| m.last_modified > crashed)
        .map(|m| m.location.to_string())
        .collect();
    assert!(
        rewritten.is_empty(),
        "the restart wrote raw files again: {rewritten:?}"
    );
}
