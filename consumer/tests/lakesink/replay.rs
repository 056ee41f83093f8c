//! `lakesink replay` through the binary, on the synthetic Debezium table: the live service
//! writes the raw layer and the replica; the replica's table and offsets are dropped; replay
//! rebuilds them (killed mid-way once, then resumed); the live service takes over with no
//! gap and no duplicate. Then bad input: a data file deleted, a file truncated, a table the
//! rows cannot go into, rows the replica refuses.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::Arc;

use crate::common::{BASE_TS, Run, assert_exactly_once, expected};
use futures::TryStreamExt;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use lakesink_writers::failpoint::REPLICA_AFTER_COMMIT;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgPool, PgPoolOptions};

async fn produce(stack: &Stack, table: &Arc<Table>, partitions: i32, ids: std::ops::Range<i64>) {
    let (s, t) = (stack.clone(), table.clone());
    tokio::task::spawn_blocking(move || t.produce_range(&s, partitions, ids, BASE_TS))
        .await
        .expect("produce");
}

fn replica_section(stack: &Stack, table: &str) -> String {
    format!(
        "[replica]\nurl = \"{}\"\ntable-name-format = \"{table}\"\nbatch-max-rows = 700\npool-size = 2\n",
        stack.replica_pg_url
    )
}

/// Row count, sum of `quantity` and one price, as the workload's events leave the table.
fn expected_table(count: i64) -> (i64, i64, String) {
    let alive: Vec<i64> = (0..count).filter(|i| i % 50 != 49).collect();
    let quantity: i64 = alive.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    (alive.len() as i64, quantity, "1.74".into())
}

async fn pool(stack: &Stack) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(&stack.replica_pg_url)
        .await
        .expect("replica reachable")
}

async fn table_state(pg: &PgPool, table: &str) -> (i64, i64, String) {
    let q = format!(
        "SELECT count(*), coalesce(sum(quantity), 0)::bigint, coalesce((SELECT price::text FROM public.\"{table}\" WHERE id = 10), '') FROM public.\"{table}\""
    );
    sqlx::query_as(AssertSqlSafe(q))
        .fetch_one(pg)
        .await
        .expect("replica table")
}

/// Every row of the table, as text, in key order: for row-for-row comparisons.
async fn table_rows(pg: &PgPool, table: &str) -> Vec<String> {
    let q = format!("SELECT t::text FROM public.\"{table}\" t ORDER BY id");
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_all(pg)
        .await
        .expect("rows")
}

async fn offsets(pg: &PgPool, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT partition, next_offset FROM public.lakesink_offsets WHERE group_id = $1 AND topic = $2",
    )
    .bind(group)
    .bind(topic)
    .fetch_all(pg)
    .await
    .expect("offsets");
    rows.into_iter().collect()
}

/// Drops the replica's table and the group's offsets: a lost replica.
async fn drop_replica(pg: &PgPool, table: &str, group: &str) {
    sqlx::query(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS public.\"{table}\""
    )))
    .execute(pg)
    .await
    .expect("drop table");
    sqlx::query("DELETE FROM public.lakesink_offsets WHERE group_id = $1")
        .bind(group)
        .execute(pg)
        .await
        .expect("delete offsets");
}

fn replay(run: &Run, args: &[&str], failpoint: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lakesink"));
    cmd.args(["replay", "--config"])
        .arg(&run.config)
        .args(["--progress-seconds", "1"])
        .args(args);
    cmd.env("RUST_LOG", "info");
    if let Some(fp) = failpoint {
        cmd.env("LAKESINK_FAILPOINTS", fp);
    }
    cmd.output().expect("lakesink replay runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr (tail)\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rebuilds_the_replica_resumes_and_hands_over_to_the_live_service() {
    let stack = Stack::from_env();
    let topic = unique("replay");
    let table_name = unique("replayed");
    let partitions = 3;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 150\nrotate-interval-ms = 1000"),
        &replica_section(&stack, &table_name),
    );
    let pg = pool(&stack).await;

    // The live service builds the raw layer and the replica.
    let count = 3_000;
    produce(&stack, &table, partitions, 0..count).await;
    let (_, end) = expected(partitions, count);
    run.run_to_end(&end);
    let live_rows = table_rows(&pg, &table_name).await;
    assert_eq!(table_state(&pg, &table_name).await, expected_table(count));
    assert_eq!(offsets(&pg, &run.group, &topic).await, end);

    // The replica is lost.
    drop_replica(&pg, &table_name, &run.group).await;

    // A dry run lists the segments and files and changes nothing.
    let out = replay(&run, &["--dry-run"], None);
    assert!(out.status.success(), "{}", text(&out));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains(&format!("{topic}[0] -> public.{table_name}"))
            && listing.contains("replica next offset none")
            && listing.contains(".snappy.parquet")
            && listing.contains(&format!("{count} row(s)")),
        "{listing}"
    );
    assert!(offsets(&pg, &run.group, &topic).await.is_empty());

    // Replay, killed after its third commit, then run again: it resumes.
    let out = replay(&run, &[], Some(&format!("{REPLICA_AFTER_COMMIT}@3")));
    assert!(
        !out.status.success(),
        "the failpoint kills it: {}",
        text(&out)
    );
    let partial = table_state(&pg, &table_name).await.0;
    assert!(
        partial > 0 && partial < expected_table(count).0,
        "{partial} rows after the kill"
    );
    let out = replay(&run, &[], None);
    assert!(out.status.success(), "{}", text(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    let applied: u64 = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("summary: {summary}"));
    assert!(applied < count as u64, "the second run resumed: {summary}");
    assert_eq!(table_state(&pg, &table_name).await, expected_table(count));
    assert_eq!(table_rows(&pg, &table_name).await, live_rows, "row for row");
    assert_eq!(offsets(&pg, &run.group, &topic).await, end);

    // Nothing to do a second time.
    let out = replay(&run, &[], None);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("replay done: 0 row(s) applied"),
        "{}",
        text(&out)
    );

    // The live service takes over from the replay's offsets: no gap, no duplicate.
    let more = 4_500;
    produce(&stack, &table, partitions, count..more).await;
    let (want, end) = expected(partitions, more);
    run.run_to_end(&end);
    assert_eq!(table_state(&pg, &table_name).await, expected_table(more));
    assert_eq!(offsets(&pg, &run.group, &topic).await, end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);

    // A slice: offsets of partition 0 only, up to 99, into a fresh table.
    drop_replica(&pg, &table_name, &run.group).await;
    let out = replay(&run, &["--offsets", &format!("{topic}:0:-99")], None);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        offsets(&pg, &run.group, &topic).await,
        BTreeMap::from([(0, 100)])
    );
    let (rows, _, _) = table_state(&pg, &table_name).await;
    assert!(rows > 90 && rows <= 100, "{rows}");
    sqlx::query(AssertSqlSafe(format!("DROP TABLE public.\"{table_name}\"")))
        .execute(&pg)
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_named_and_stops_the_replay_unless_told_to_go_on() {
    let stack = Stack::from_env();
    let topic = unique("replay-bad");
    let table_name = unique("replay_bad");
    let partitions = 1;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    // The raw layer alone first: the replica is only written by replay.
    let live = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some("flush-size = 200\nrotate-interval-ms = 1000"),
        "",
    );
    let count = 1_000;
    produce(&stack, &table, partitions, 0..count).await;
    let (_, end) = expected(partitions, count);
    live.run_to_end(&end);
    let replayer = Run {
        stack: stack.clone(),
        topic: topic.clone(),
        group: live.group.clone(),
        prefix: live.prefix.clone(),
        partitions,
        config: live.config.with_file_name("replay.toml"),
        http: live.http,
    };
    let text_config = std::fs::read_to_string(&live.config).expect("config");
    std::fs::write(
        &replayer.config,
        format!("{text_config}\n{}", replica_section(&stack, &table_name)),
    )
    .expect("write config");
    let pg = pool(&stack).await;

    // Data files in offset order: the third one (offsets 400..=599) is the victim.
    let store = live.store();
    let prefix = Path::from(format!("{}/topics", live.prefix));
    let mut keys: Vec<String> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    keys.sort();
    assert_eq!(keys.len(), 5, "{keys:?}");
    let victim = keys[2].clone();
    let bytes = store
        .get(&Path::from(victim.as_str()))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");

    // Missing: found before anything is applied, named with its segment's offsets.
    store
        .delete(&Path::from(victim.as_str()))
        .await
        .expect("delete");
    let out = replay(&replayer, &[], None);
    assert!(!out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "problem: missing file: {topic}[0] offsets 400..=599, object {victim}"
        )),
        "{}",
        text(&out)
    );
    assert!(offsets(&pg, &replayer.group, &topic).await.is_empty());

    // With --continue-on-error: everything else is applied and the gap reported.
    let out = replay(&replayer, &["--continue-on-error"], None);
    assert!(
        !out.status.success(),
        "problems make it fail: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&victim),
        "{}",
        text(&out)
    );
    assert_eq!(
        table_state(&pg, &table_name).await.0,
        784,
        "1000 - 200 events, less deletes"
    );
    assert_eq!(
        offsets(&pg, &replayer.group, &topic).await,
        BTreeMap::from([(0, count)])
    );

    // Truncated: found when read; what comes before it is applied, then replay stops.
    drop_replica(&pg, &table_name, &replayer.group).await;
    store
        .put(
            &Path::from(victim.as_str()),
            bytes.slice(..bytes.len() / 2).into(),
        )
        .await
        .expect("put");
    let out = replay(&replayer, &[], None);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "problem: corrupt file: {topic}[0] offsets 400..=599, object {victim}"
        )),
        "{}",
        text(&out)
    );
    assert_eq!(
        offsets(&pg, &replayer.group, &topic).await,
        BTreeMap::from([(0, 400)])
    );

    // Repaired: the replay resumes at 400 and ends exact.
    store
        .put(&Path::from(victim.as_str()), bytes.into())
        .await
        .expect("put");
    let out = replay(&replayer, &[], None);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(table_state(&pg, &table_name).await, expected_table(count));

    // A table the rows cannot go into: refused, named with the offsets and the file.
    drop_replica(&pg, &table_name, &replayer.group).await;
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE public.\"{table_name}\" (id bigint PRIMARY KEY, quantity date)"
    )))
    .execute(&pg)
    .await
    .expect("create");
    let out = replay(&replayer, &[], None);
    assert!(!out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "problem: refused by the replica: {topic}[0] offsets 0..="
        )) && stdout.contains(&format!("object {}", keys[0]))
            && stdout.contains("cannot cast type integer to date"),
        "{}",
        text(&out)
    );
    assert!(offsets(&pg, &replayer.group, &topic).await.is_empty());

    // Rows the replica refuses, with --continue-on-error: split out as the live service splits
    // them for its dead-letter topic, each named with its offset and file; the replica's
    // offset moves past them and every other row is applied.
    drop_replica(&pg, &table_name, &replayer.group).await;
    let out = replay(&replayer, &[], None);
    assert!(out.status.success(), "{}", text(&out));
    let refused = [123i64, 456];
    for sql in [
        format!("TRUNCATE public.\"{table_name}\""),
        format!(
            "ALTER TABLE public.\"{table_name}\" ADD CONSTRAINT not_these CHECK (id NOT IN (123, 456))"
        ),
        format!(
            "DELETE FROM public.lakesink_offsets WHERE group_id = '{}'",
            replayer.group
        ),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&pg)
            .await
            .expect("prepare");
    }
    let out = replay(&replayer, &["--continue-on-error"], None);
    assert!(
        !out.status.success(),
        "problems make it fail: {}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("problem: refused by the replica"))
        .collect();
    assert_eq!(problems.len(), refused.len(), "{}", text(&out));
    for (line, offset) in problems.iter().zip(refused) {
        assert!(
            line.contains(&format!("{topic}[0] offsets {offset}..={offset}, object "))
                && line.contains("not_these"),
            "{line}\n{}",
            text(&out)
        );
    }
    let (alive, quantity, _) = expected_table(count);
    let left_out: i64 = refused.iter().map(|i| (i % 7 + 1) % 50 + 1).sum();
    let (rows, sum, _) = table_state(&pg, &table_name).await;
    assert_eq!((rows, sum), (alive - 2, quantity - left_out));
    assert_eq!(
        offsets(&pg, &replayer.group, &topic).await,
        BTreeMap::from([(0, count)]),
        "past the refused records"
    );
    sqlx::query(AssertSqlSafe(format!("DROP TABLE public.\"{table_name}\"")))
        .execute(&pg)
        .await
        .expect("drop");
}
