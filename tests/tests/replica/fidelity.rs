//! Source changes that reach the replica only through what Debezium leaves implicit: a primary
//! key change of a row with unchanged TOASTed values (the new key's create carries the
//! placeholder), and `ADD COLUMN … DEFAULT` (existing rows get the default without an event).
//! Real Debezium on the source; the replica must equal the source in every row and column.

use lakesink_schema_registry::{ChangeBatch, Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique, unreachable};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::support::{Capture, replicator, rows};

async fn source() -> (Stack, PgPool) {
    let stack = Stack::from_env();
    let src = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    (stack, src)
}

async fn exec(src: &PgPool, sqls: &[String]) {
    for sql in sqls {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(src)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// `public.<table>` on the source and `<schema>.<table>` in the replica, each row as the text
/// of `exprs`, ordered by id.
async fn assert_same(
    src: &PgPool,
    r: &lakesink_writers::PgReplicator,
    schema: &str,
    table: &str,
    exprs: &[&str],
    what: &str,
) {
    let query = |schema: &str| {
        format!(
            "SELECT json_build_array({})::text FROM \"{schema}\".\"{table}\" ORDER BY id",
            exprs.join(", ")
        )
    };
    let sql = query("public");
    let want: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(sql.clone()))
        .fetch_all(src)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let got: Vec<(String,)> = rows(r, &query(schema)).await;
    assert!(!want.is_empty(), "{table} has rows to compare");
    assert_eq!(got, want, "{what}: replica (left) differs from the source");
}

/// Applies `batches` one call each into one fresh replica and all in one call into another;
/// both must equal the source.
async fn apply_both_ways(src: &PgPool, batches: &[ChangeBatch], table: &str, exprs: &[&str]) {
    // Offsets are kept per group: each replica has its own.
    let (one_by_one, schema) = replicator(|_| {}).await;
    let group = unique("fidelity");
    for b in batches {
        one_by_one
            .apply(&group, std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_same(
        src,
        &one_by_one,
        &schema,
        table,
        exprs,
        "one call per batch",
    )
    .await;
    let (at_once, schema) = replicator(|_| {}).await;
    at_once
        .apply(&unique("fidelity"), batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_same(src, &at_once, &schema, table, exprs, "one call").await;
}

#[tokio::test]
async fn a_key_change_keeps_the_unchanged_toasted_values() {
    let (stack, src) = source().await;
    let name = unique("keychange");
    let mut setup = vec![format!(
        "CREATE TABLE public.{name} (id integer PRIMARY KEY, small text, big text, big_b bytea, \
         big_a text[], big_i int4[])"
    )];
    for c in ["big", "big_b", "big_a", "big_i"] {
        setup.push(format!(
            "ALTER TABLE public.{name} ALTER COLUMN {c} SET STORAGE EXTERNAL"
        ));
    }
    // Rows 1-3 differ in every large value, so a value taken from the wrong row shows.
    setup.push(format!(
        "INSERT INTO public.{name} SELECT i, 's' || i,
           (SELECT string_agg(md5((i * 1000 + j)::text), '') FROM generate_series(1, 100) j),
           decode((SELECT string_agg(md5((i * 1000 + j)::text), '') FROM generate_series(1, 200) j), 'hex'),
           (SELECT array_agg(md5((i * 1000 + j)::text)) FROM generate_series(1, 100) j),
           (SELECT array_agg(i * 1000 + j) FROM generate_series(1, 1000) j)
         FROM generate_series(1, 3) i"
    ));
    exec(&src, &setup).await;
    let capture = Capture::start(&stack, &name, &[&name]).await;
    exec(
        &src,
        &[
            // One row's key.
            format!("UPDATE public.{name} SET id = id + 100 WHERE id = 1"),
            // Two rows' keys in one statement, another column changed too.
            format!("UPDATE public.{name} SET id = id + 100, small = 'moved' WHERE id IN (2, 3)"),
            // A moved row moved again, then updated leaving the large values untouched.
            format!("UPDATE public.{name} SET id = 201 WHERE id = 101"),
            format!("UPDATE public.{name} SET small = 'again' WHERE id = 201"),
        ],
    )
    .await;
    // 3 snapshot; per key change a delete, its tombstone and a create (4 of them); an update.
    let records = capture.read(&[3 + 4 * 3 + 1]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
    };
    let batches = decode_all(&stack, avro, &records).await;

    let exprs = [
        "id",
        "small",
        "md5(big)",
        "md5(big_b)",
        "md5(big_a::text)",
        "md5(big_i::text)",
    ];
    apply_both_ways(&src, &batches, &name, &exprs).await;

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}
