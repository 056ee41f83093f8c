use std::time::Duration;

use lakesink_tests::{Stack, unreachable};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

async fn connect(url: &str, what: &str) -> PgConnection {
    let opts: PgConnectOptions = url.parse().expect("postgres url");
    tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&opts))
        .await
        .unwrap_or_else(|_| panic!("{}", unreachable(what, url, "connect timed out")))
        .unwrap_or_else(|e| panic!("{}", unreachable(what, url, e)))
}

#[tokio::test]
async fn source_is_ready_for_logical_decoding() {
    let stack = Stack::from_env();
    let mut conn = connect(&stack.source_pg_url, "PostgreSQL source").await;
    let wal_level: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&mut conn)
        .await
        .expect("SHOW wal_level");
    assert_eq!(wal_level, "logical");
    let can_replicate: bool =
        sqlx::query_scalar("SELECT rolreplication FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&mut conn)
            .await
            .expect("role");
    assert!(
        can_replicate,
        "the stack's role needs REPLICATION for Debezium"
    );
}

#[tokio::test]
async fn replica_round_trips_a_row() {
    let stack = Stack::from_env();
    let mut conn = connect(&stack.replica_pg_url, "PostgreSQL replica").await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("CREATE TEMP TABLE smoke (id bigint PRIMARY KEY, amount numeric(20, 6))")
        .execute(&mut *tx)
        .await
        .expect("create");
    sqlx::query("INSERT INTO smoke VALUES ($1, $2::numeric)")
        .bind(7_i64)
        .bind("12345678901234.000001")
        .execute(&mut *tx)
        .await
        .expect("insert");
    let amount: String = sqlx::query_scalar("SELECT amount::text FROM smoke WHERE id = 7")
        .fetch_one(&mut *tx)
        .await
        .expect("select");
    assert_eq!(amount, "12345678901234.000001");
    tx.rollback().await.expect("rollback");
}
