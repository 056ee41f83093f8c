//! The replica's connections killed in the middle of applying: the error says a retry can
//! help, nothing half-applied is left, and the retry applies everything exactly once.

use lakesink_model::Classify;
use std::time::Duration;

use lakesink_tests::{Stack, unique};
use sqlx::postgres::PgPool;

use crate::replica::hand::{batch, ev};
use crate::replica::support::{replicator, rows};

#[tokio::test]
async fn a_lost_connection_is_retryable_and_the_retry_is_exact() {
    let stack = Stack::from_env();
    let app = unique("lakesink_kill");
    let url = format!("{}?application_name={app}", stack.replica_pg_url);
    let (r, schema) = replicator(|c| c.url = url.into()).await;
    let killer = PgPool::connect(&stack.replica_pg_url)
        .await
        .expect("replica");
    let topic = format!("{schema}.public.items");
    let n = 200_000;
    let events: Vec<_> = (0..n).map(|i| ev(i, "c", i, "name", "note")).collect();
    let b = batch(&topic, 0, "items", &events, false);

    let apply = r.apply("g", std::slice::from_ref(&b));
    let kill = async {
        // Kill the replicator's sessions until the apply gives up or finishes.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1")
                .bind(&app)
                .execute(&killer)
                .await
                .expect("terminate");
        }
    };
    let first = tokio::select! {
        res = apply => res,
        _ = kill => unreachable!("the kill loop never ends"),
    };
    let err = first.expect_err("an apply whose session was killed fails");
    assert!(err.retryable(), "{err}");
    assert!(
        r.next_offsets("g", &topic, &[0])
            .await
            .expect("offsets")
            .is_empty()
    );

    let applied = r.apply("g", std::slice::from_ref(&b)).await.expect("retry");
    assert_eq!(applied[0].next_offset, n);
    let count: Vec<(i64,)> = rows(&r, &format!("SELECT count(*) FROM \"{schema}\".items")).await;
    assert_eq!(count[0].0, n);
}
