//! The stale-event guard against real Debezium: once the replica holds a key's later change,
//! records from earlier in the source's log (here: the same records applied again under
//! another group, as a replay of the raw layer or a second pipeline would) neither overwrite
//! nor delete nor revive it, and each one left out is counted. Without the guard the same
//! records roll the rows back, which is what makes the test a test.

use lakesink_config::DeleteMode;
use lakesink_schema_registry::{ChangeBatch, Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};
use lakesink_writers::PgReplicator;

use crate::replica::support::{Capture, exec, record_by_record, replicator, rows, source_pool};

/// id, v, deleted.
type Row = (i32, Option<String>, bool);

async fn read(r: &PgReplicator, schema: &str, table: &str) -> Vec<Row> {
    rows::<Row>(
        r,
        &format!("SELECT id, v, __deleted FROM \"{schema}\".{table} ORDER BY id"),
    )
    .await
}

async fn apply_each(r: &PgReplicator, group: &str, batches: &[ChangeBatch]) {
    for b in batches {
        r.apply(group, std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

async fn hard_rows(r: &PgReplicator, schema: &str, table: &str) -> Vec<(i32, Option<String>)> {
    rows(
        r,
        &format!("SELECT id, v FROM \"{schema}\".{table} ORDER BY id"),
    )
    .await
}

fn stale_total(r: &PgReplicator) -> u64 {
    r.take_stale().iter().map(|s| s.values).sum()
}

#[tokio::test]
async fn older_changes_never_overwrite_newer_ones() {
    let stack = Stack::from_env();
    let src = source_pool(&stack).await;
    let table = unique("stale");
    exec(
        &src,
        &[
            format!("CREATE TABLE public.{table} (id integer PRIMARY KEY, v text)"),
            format!("INSERT INTO public.{table} VALUES (1, 'a'), (2, 'b'), (3, 'c')"),
        ],
    )
    .await;
    let capture = Capture::start(&stack, &table, &[&table]).await;
    exec(
        &src,
        &[
            format!("UPDATE public.{table} SET v = 'a2' WHERE id = 1"),
            format!("DELETE FROM public.{table} WHERE id = 2"),
            format!("UPDATE public.{table} SET v = 'c2' WHERE id = 3"),
            format!("INSERT INTO public.{table} VALUES (4, 'd')"),
            format!("UPDATE public.{table} SET v = 'a3' WHERE id = 1"),
        ],
    )
    .await;
    // 3 snapshot reads, 2 updates, a delete and its tombstone, an insert, an update.
    let records = capture.read(&[9]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    let each = record_by_record(&batches);
    assert_eq!(each.len(), 9);
    // The snapshot and the first two changes: everything in it is older than the end state.
    let old = &each[..5];
    let latest = [
        (1, Some("a3".to_owned()), false),
        (2, Some("b".to_owned()), true),
        (3, Some("c2".to_owned()), false),
        (4, Some("d".to_owned()), false),
    ];
    let live_rows = |rows: &[Row]| -> Vec<Row> { rows.iter().filter(|r| !r.2).cloned().collect() };

    // Guarded, soft deletes: the deleted row keeps its position too.
    // The offsets table is shared: each replicator below applies under groups of its own.
    let (guarded, schema) = replicator(|c| {
        c.stale_guard = true;
        c.delete_mode = DeleteMode::Soft;
    })
    .await;
    apply_each(&guarded, "live", &batches).await;
    assert_eq!(read(&guarded, &schema, &table).await, latest);
    assert_eq!(
        stale_total(&guarded),
        0,
        "the stream in order is never stale"
    );
    // The old records again under another group: record by record, then in one call.
    apply_each(&guarded, "replay-each", old).await;
    assert_eq!(read(&guarded, &schema, &table).await, latest);
    // The snapshot's reads of ids 1, 2 (deleted since: the row keeps its delete's position)
    // and 3, and id 1's first update: each older than what its row holds. Id 2's delete is
    // the one the row holds, and applies again harmlessly.
    assert_eq!(stale_total(&guarded), 4, "each old change counted once");
    guarded
        .apply("replay-all", old)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&guarded, &schema, &table).await, latest);
    // In one call the records collapse per key: 1 and 3 once each; 2's net effect is its
    // delete.
    assert_eq!(stale_total(&guarded), 2);

    // The positions are the source's log order: id 1's last change is the latest of all, and
    // every position has PostgreSQL's `<last commit>:<lsn>` shape.
    let positions: Vec<(i32, String)> = rows(
        &guarded,
        &format!(
            "SELECT id, __source_position FROM \"{schema}\".{table} ORDER BY __source_position"
        ),
    )
    .await;
    assert_eq!(positions.last().map(|p| p.0), Some(1), "{positions:?}");
    for (id, p) in &positions {
        let shape = p.len() == 35
            && p.chars().enumerate().all(|(i, c)| match i {
                8 | 26 => c == '/',
                17 => c == ':',
                _ => c.is_ascii_hexdigit(),
            });
        assert!(shape, "{id}: {p}");
    }
    // The new changes after a replay still apply: the guard holds back only the older.
    guarded
        .apply("live", &batches)
        .await
        .expect("already applied: a no-op");
    assert_eq!(read(&guarded, &schema, &table).await, latest);

    // Guarded with hard deletes: the same, but a deleted key keeps no position, so the
    // snapshot's read of id 2 writes it again until the replayed delete removes it.
    let (hard, hard_schema) = replicator(|c| c.stale_guard = true).await;
    apply_each(&hard, "hard-live", &batches).await;
    let mirror: Vec<(i32, Option<String>)> = live_rows(&latest)
        .into_iter()
        .map(|(id, v, _)| (id, v))
        .collect();
    assert_eq!(hard_rows(&hard, &hard_schema, &table).await, mirror);
    apply_each(&hard, "hard-replay", &old[..3]).await;
    let mut revived = mirror.clone();
    revived.insert(1, (2, Some("b".to_owned())));
    assert_eq!(hard_rows(&hard, &hard_schema, &table).await, revived);
    apply_each(&hard, "hard-replay", &old[3..]).await;
    assert_eq!(hard_rows(&hard, &hard_schema, &table).await, mirror);
    assert_eq!(stale_total(&hard), 3, "ids 1 and 3 read, 1 updated");

    // Unguarded, the same replay rolls the rows back: the guard is what keeps them.
    let (plain, plain_schema) = replicator(|c| c.delete_mode = DeleteMode::Soft).await;
    apply_each(&plain, "plain-live", &batches).await;
    apply_each(&plain, "plain-replay", old).await;
    let rolled = read(&plain, &plain_schema, &table).await;
    assert_ne!(rolled, latest);
    assert_eq!(rolled[0], (1, Some("a2".to_owned()), false), "{rolled:?}");

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{table}")]).await;
}
