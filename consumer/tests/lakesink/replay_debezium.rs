//! End to end with real Debezium: a source table gets inserts, updates and deletes; the live
//! service (raw layer + replica) makes the replica equal to the source; the replica's table and
//! offsets are dropped; `lakesink replay` rebuilds it equal to the source, row for row; more
//! changes at the source, the live service restarted, the replica is equal again; and the raw
//! layer holds every record of the topic exactly once.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{Run, exec};
use lakesink_tests::debezium::Connector;
use lakesink_tests::{Stack, unique, unreachable};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

/// Every row as JSON text, by key: the columns compared on both sides.
async fn rows(pg: &PgPool, table: &str) -> Vec<String> {
    let q = format!(
        "SELECT json_build_array(id, name, qty, price::text, to_char(created AT TIME ZONE 'UTC', \
         'YYYY-MM-DD HH24:MI:SS.US'), doc, tags, note)::text FROM public.\"{table}\" ORDER BY id"
    );
    sqlx::query_scalar(AssertSqlSafe(q))
        .fetch_all(pg)
        .await
        .unwrap_or_default()
}

/// Runs the live service until the replica equals the source, then stops it with SIGTERM.
async fn run_until_equal(run: &Run, src: &PgPool, rep: &PgPool, table: &str) {
    let mut child: Child = run.start(None);
    let deadline = Instant::now() + Duration::from_secs(180);
    let want = rows(src, table).await;
    loop {
        if rows(rep, table).await == want {
            break;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("lakesink exited early: {status}; log:\n{}", run.log_tail());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the replica never equalled the source ({} rows); log:\n{}",
                want.len(),
                run.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Let the raw layer close its segments (rotate-interval-ms) before stopping.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let status = child.wait().expect("wait");
    assert!(status.success(), "lakesink stops cleanly: {status}");
}

fn end_offset(stack: &Stack, topic: &str) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("consumer");
    c.fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks")
        .1
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rebuilds_a_real_debezium_replica_and_the_live_service_takes_over() {
    let stack = Stack::from_env();
    let name = unique("rpl");
    let src = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    let rep = PgPool::connect(&stack.replica_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL replica", &stack.replica_pg_url, e)
            )
        });
    exec(
        &src,
        &[
            format!(
                "CREATE TABLE public.\"{name}\" (id bigint PRIMARY KEY, name text NOT NULL, \
                 qty integer, price numeric(10,2), created timestamptz, doc jsonb, tags text[], note text)"
            ),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'item ' || i, i % 17, i * 1.25, \
                 '2024-05-01 13:00:00+00'::timestamptz + i * interval '1 minute', \
                 jsonb_build_object('i', i), ARRAY['t' || (i % 3), NULL], NULL \
                 FROM generate_series(1, 300) i"
            ),
        ],
    )
    .await;
    let connector = Connector::start(&stack, &name).await;
    // Streamed changes: updates, deletes, inserts, an update of a key's row twice.
    exec(
        &src,
        &[
            format!("UPDATE public.\"{name}\" SET qty = qty + 100, note = 'u1' WHERE id % 3 = 0"),
            format!("DELETE FROM public.\"{name}\" WHERE id % 7 = 0"),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'new ' || i, 1, 9.99, now(), '{{}}', \
                 '{{}}', 'inserted' FROM generate_series(301, 400) i"
            ),
            format!("UPDATE public.\"{name}\" SET price = price * 2 WHERE id BETWEEN 290 AND 310"),
            format!("DELETE FROM public.\"{name}\" WHERE id BETWEEN 395 AND 400"),
        ],
    )
    .await;
    connector.read(1).await; // the topic exists
    let topic = connector.topic.clone();
    let table = name.clone();
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        Some("flush-size = 120\nrotate-interval-ms = 1000"),
        &format!(
            "[replica]\nurl = \"{}\"\ntable-name-format = \"${{source.table}}\"\nbatch-max-rows = 150\n",
            stack.replica_pg_url
        ),
    );

    // The live service makes the replica equal to the source.
    run_until_equal(&run, &src, &rep, &table).await;
    let before = rows(&rep, &table).await;
    assert!(before.len() > 250, "{} rows", before.len());

    // The replica is lost: its table and its offsets.
    exec(
        &rep,
        &[
            format!("DROP TABLE public.\"{table}\""),
            format!(
                "DELETE FROM public.lakesink_offsets WHERE group_id = '{}'",
                run.group
            ),
        ],
    )
    .await;
    let out = Command::new(env!("CARGO_BIN_EXE_lakesink"))
        .args(["replay", "--config"])
        .arg(&run.config)
        .output()
        .expect("replay runs");
    assert!(
        out.status.success(),
        "replay: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rows(&rep, &table).await,
        rows(&src, &table).await,
        "rebuilt row for row"
    );

    // More changes; the live service takes over from the replay's offsets.
    exec(
        &src,
        &[
            format!(
                "UPDATE public.\"{name}\" SET name = name || ' again', qty = 0 WHERE id % 5 = 0"
            ),
            format!("DELETE FROM public.\"{name}\" WHERE id % 11 = 0"),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'later ' || i, 2, 1.50, now(), '[1]', \
                 ARRAY['x'], NULL FROM generate_series(401, 450) i"
            ),
        ],
    )
    .await;
    run_until_equal(&run, &src, &rep, &table).await;
    assert_eq!(rows(&rep, &table).await, rows(&src, &table).await);

    // The raw layer: every offset of the topic once, none missing.
    let end = end_offset(&stack, &topic);
    let (got, _) = run.rows().await;
    let want: Vec<(i32, i64)> = (0..end).map(|o| (0, o)).collect();
    crate::common::assert_exactly_once(&got, &want);

    connector.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.\"{name}\"")]).await;
    exec(&rep, &[format!("DROP TABLE public.\"{table}\"")]).await;
}
