//! Source changes that reach the replica only through what Debezium leaves implicit: a primary
//! key change of a row with unchanged TOASTed values (the new key's create carries the
//! placeholder), `ADD COLUMN … DEFAULT` (existing rows get the default without an event), and
//! a column widened mid-stream (refused until the replica's is widened too). Real Debezium on
//! the source; the replica must equal the source in every row and column.

use arrow_array::cast::AsArray;
use lakesink_model::Classify;
use lakesink_schema_registry::{ChangeBatch, Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique, unreachable};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::replica::support::{Capture, replicator, rows};

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
    for r in [&one_by_one, &at_once] {
        assert_eq!(r.take_unknown(), [], "every value known");
    }
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
        check_artifacts: true,
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

    // A call ending between a delete and its create (as one ending there, or the two in
    // different partitions): the new rows' large values are unknown, and counted.
    let (split, schema) = replicator(|_| {}).await;
    let group = unique("fidelity");
    for b in &batches {
        let offsets = b.rows.column_by_name("__offset").map(|c| {
            c.as_primitive::<arrow_array::types::Int64Type>()
                .values()
                .to_vec()
        });
        for i in 0..b.rows.num_rows() {
            let offset = offsets.as_ref().map_or(b.first_offset + i as i64, |o| o[i]);
            let one = ChangeBatch {
                rows: b.rows.slice(i, 1),
                first_offset: offset,
                last_offset: offset,
                ..b.clone()
            };
            split
                .apply(&group, &[one])
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let mut unknown: Vec<(String, u64)> = split
        .take_unknown()
        .into_iter()
        .map(|u| (u.column, u.values))
        .collect();
    unknown.sort();
    // Four key changes (the second statement moves two rows), each create's four large
    // columns.
    let four = |c: &str| (c.to_owned(), 4);
    assert_eq!(
        unknown,
        [four("big"), four("big_a"), four("big_b"), four("big_i")]
    );
    let nulls: Vec<(i64,)> = rows(
        &split,
        &format!(
            "SELECT count(*) FROM \"{schema}\".\"{name}\" \
             WHERE big IS NULL AND big_b IS NULL AND big_a IS NULL AND big_i IS NULL"
        ),
    )
    .await;
    assert_eq!(nulls, [(3,)], "the three moved rows, each unknown");

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}

/// Columns added with a default, as `name type DEFAULT value`; Debezium carries each default
/// in the schema (`connect.default`) but sends no event for the rows that got it.
const DEFAULTS: &[&str] = &[
    "c_t text DEFAULT 'x \\ ☃ \"q\"'",
    "c_vc varchar(10) DEFAULT 'short'",
    "c_s smallint DEFAULT -7",
    "c_i integer DEFAULT 42",
    "c_big bigint DEFAULT -9000000000",
    "c_n numeric(10,2) DEFAULT -3.14",
    "c_n38 numeric(38,6) DEFAULT 12345678901234567890123456789012.123456",
    "c_b boolean DEFAULT true",
    "c_f4 real DEFAULT 2.5",
    "c_f8 double precision DEFAULT 1.1",
    "c_d date DEFAULT '2024-02-29'",
    "c_ts timestamp DEFAULT '2024-02-29 12:34:56.789012'",
    "c_ts3 timestamp(3) DEFAULT '1999-12-31 23:59:59.999'",
    "c_tz timestamptz DEFAULT '2024-02-29 12:34:56.5+02'",
    "c_tm time DEFAULT '12:00:01.5'",
    "c_u uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
    "c_j jsonb DEFAULT '{\"a\": [1, 2]}'",
    "c_none text",
];

#[tokio::test]
async fn columns_added_with_a_default_hold_it_in_existing_rows() {
    let (stack, src) = source().await;
    let name = unique("defaults");
    exec(
        &src,
        &[
            format!("CREATE TABLE public.{name} (id integer PRIMARY KEY, v text)"),
            format!("INSERT INTO public.{name} SELECT i, 'v' || i FROM generate_series(1, 3) i"),
        ],
    )
    .await;
    let capture = Capture::start(&stack, &name, &[&name]).await;
    let adds: Vec<String> = DEFAULTS.iter().map(|d| format!("ADD COLUMN {d}")).collect();
    exec(
        &src,
        &[
            format!("UPDATE public.{name} SET v = 'before' WHERE id = 1"),
            format!("ALTER TABLE public.{name} {}", adds.join(", ")),
            // Rows 1 and 3 change no more: only the default gives them their new columns.
            format!("UPDATE public.{name} SET v = 'after' WHERE id = 2"),
            format!("INSERT INTO public.{name} (id, v) VALUES (4, 'new')"),
        ],
    )
    .await;
    let records = capture.read(&[3 + 3]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    // The default reaches the replica as decoding keeps it on the Arrow field.
    let after = batches
        .last()
        .and_then(|b| b.rows.column_by_name("after")?.as_struct_opt().cloned())
        .expect("an after image");
    let (_, c_i) = after.fields().find("c_i").expect("the added column");
    assert_eq!(
        c_i.metadata().get("connect.default").map(String::as_str),
        Some("42")
    );

    let mut exprs = vec!["id".to_owned(), "v".to_owned()];
    for d in DEFAULTS {
        let col = d.split_whitespace().next().expect("column name");
        exprs.push(match col {
            "c_tz" => "(c_tz AT TIME ZONE 'UTC')::text".to_owned(),
            c => format!("{c}::text"),
        });
    }
    let exprs: Vec<&str> = exprs.iter().map(String::as_str).collect();
    apply_both_ways(&src, &batches, &name, &exprs).await;

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}

/// A column widened at the source mid-stream (`integer` → `bigint`, `varchar(5)` →
/// `varchar(20)`): the records carry the wider values, which the raw layer keeps, while the
/// replica's column keeps its type (lakesink adds columns, it does not alter them yet), so the
/// first value it cannot hold is refused by name, never cut or wrapped, and nothing after it is
/// applied. Widening the replica's column by hand lets the same records through.
#[tokio::test]
async fn a_column_widened_at_the_source_is_refused_until_widened_in_the_replica() {
    let name = lakesink_tests::unique("widen");
    let big = 1_i64 << 40;
    let (src, capture, batches) = crate::replica::support::capture(
        &name,
        &[
            format!("CREATE TABLE public.{name} (id int PRIMARY KEY, i integer, v varchar(5))"),
            format!("INSERT INTO public.{name} VALUES (1, 1, 'short')"),
        ],
        &[
            format!("ALTER TABLE public.{name} ALTER COLUMN i TYPE bigint, ALTER COLUMN v TYPE varchar(20)"),
            format!("INSERT INTO public.{name} VALUES (2, {big}, 'much longer text')"),
        ],
        2,
        serde_json::json!({"column.propagate.source.type": ".*"}),
    )
    .await;
    let (r, schema) = replicator(|_| {}).await;
    r.apply("widen", &batches[..1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = r.apply("widen", &batches[1..]).await.unwrap_err();
    assert!(!err.retryable(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&format!("table {schema}.{name}")), "{msg}");
    assert!(msg.contains("schema-evolution = \"evolve\""), "{msg}");
    let held: Vec<(i32,)> = rows(
        &r,
        &format!("SELECT id FROM \"{schema}\".{name} ORDER BY id"),
    )
    .await;
    assert_eq!(held, vec![(1,)], "nothing after the refused row");

    crate::replica::support::exec(
        r.pool(),
        &[format!(
            "ALTER TABLE \"{schema}\".{name} ALTER COLUMN i TYPE bigint, \
             ALTER COLUMN v TYPE varchar(20)"
        )],
    )
    .await;
    // A replicator started now reads the widened table.
    let (fresh, _) =
        replicator(|c| c.table_name_format = format!("{schema}.${{source.table}}")).await;
    fresh
        .apply("widen", &batches[1..])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(i32, Option<i64>, Option<String>)> = rows(
        &fresh,
        &format!("SELECT id, i, v::text FROM \"{schema}\".{name} ORDER BY id"),
    )
    .await;
    assert_eq!(
        got,
        vec![
            (1, Some(1), Some("short".into())),
            (2, Some(big), Some("much longer text".into()))
        ]
    );

    capture.stop(&src).await;
    crate::replica::support::exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}

/// With `schema-evolution = "evolve"`, columns the source widened (integer → bigint, real →
/// double, numeric precision) are widened in the replica in the transaction that needs it,
/// and a batch of the older, narrower schema afterwards leaves them wide.
#[tokio::test]
async fn evolve_widens_what_the_source_widened() {
    let name = lakesink_tests::unique("evolve");
    let big = 1_i64 << 40;
    let (src, capture, batches) = crate::replica::support::capture(
        &name,
        &[
            format!(
                "CREATE TABLE public.{name} (id int PRIMARY KEY, i integer, f real, d numeric(5,2))"
            ),
            format!("INSERT INTO public.{name} VALUES (1, 1, 1.5, 123.45)"),
        ],
        &[
            format!(
                "ALTER TABLE public.{name} ALTER COLUMN i TYPE bigint, \
                 ALTER COLUMN f TYPE double precision, ALTER COLUMN d TYPE numeric(12,4)"
            ),
            format!("INSERT INTO public.{name} VALUES (2, {big}, 1e300, 12345678.1234)"),
        ],
        2,
        serde_json::json!({}),
    )
    .await;
    assert_eq!(batches.len(), 2, "one batch per schema");
    let (r, schema) = replicator(|c| {
        c.schema_evolution = lakesink_config::SchemaEvolution::Evolve;
    })
    .await;
    r.apply("evolve", &batches[..1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let types = format!(
        "SELECT column_name::text, format_type(atttypid, atttypmod) FROM information_schema.columns \
         JOIN pg_attribute ON attrelid = '\"{schema}\".{name}'::regclass AND attname = column_name \
         WHERE table_schema = '{schema}' AND table_name = '{name}' ORDER BY ordinal_position"
    );
    let before: Vec<(String, String)> = rows(&r, &types).await;
    let want = |t: [&str; 4]| -> Vec<(String, String)> {
        ["id", "i", "f", "d"]
            .iter()
            .zip(t)
            .map(|(c, t)| ((*c).to_owned(), t.to_owned()))
            .collect()
    };
    assert_eq!(before, want(["integer", "integer", "real", "numeric(5,2)"]));
    r.apply("evolve", &batches[1..])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let after: Vec<(String, String)> = rows(&r, &types).await;
    let wide = want(["integer", "bigint", "double precision", "numeric(12,4)"]);
    assert_eq!(after, wide);
    type Row = (i32, Option<i64>, Option<f64>, Option<String>);
    let got: Vec<Row> = rows(
        &r,
        &format!("SELECT id, i, f, d::text FROM \"{schema}\".{name} ORDER BY id"),
    )
    .await;
    assert_eq!(
        got,
        vec![
            (1, Some(1), Some(1.5), Some("123.4500".into())),
            (2, Some(big), Some(1e300), Some("12345678.1234".into()))
        ]
    );
    // Both schemas in one call, as the live lanes often take them: widened all the same.
    let (one, one_schema) = replicator(|c| {
        c.schema_evolution = lakesink_config::SchemaEvolution::Evolve;
    })
    .await;
    one.apply("evolve-one", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let one_types = types.replace(&schema, &one_schema);
    assert_eq!(rows::<(String, String)>(&one, &one_types).await, wide);
    let one_got: Vec<Row> = rows(
        &one,
        &format!("SELECT id, i, f, d::text FROM \"{one_schema}\".{name} ORDER BY id"),
    )
    .await;
    assert_eq!(one_got, got);

    // The first batch again, under another group: its narrower types change nothing.
    r.apply("evolve-again", &batches[..1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows::<(String, String)>(&r, &types).await, wide);

    capture.stop(&src).await;
    crate::replica::support::exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}

/// A source column's `NOT NULL` is the replica's too, on the columns it creates and on those it
/// adds with a default; under `evolve`, a `NOT NULL` column the source drops is kept, made
/// nullable, so the rows after the drop go in, and one the source makes nullable is too.
#[tokio::test]
async fn not_null_follows_the_source_and_a_dropped_column_becomes_nullable() {
    let name = lakesink_tests::unique("notnull");
    let (src, capture, batches) = crate::replica::support::capture(
        &name,
        &[
            format!(
                "CREATE TABLE public.{name} (id int PRIMARY KEY, name text NOT NULL, note text, \
                 qty integer NOT NULL DEFAULT 0, rank integer NOT NULL)"
            ),
            format!("INSERT INTO public.{name} VALUES (1, 'one', NULL, 5, 1)"),
        ],
        &[
            format!("ALTER TABLE public.{name} ADD COLUMN code text NOT NULL DEFAULT 'x'"),
            format!("INSERT INTO public.{name} VALUES (2, 'two', 'n', 6, 2, 'y')"),
            format!("ALTER TABLE public.{name} DROP COLUMN name"),
            format!("INSERT INTO public.{name} (id, note, qty, rank, code) VALUES (3, 'm', 7, 3, 'z')"),
            format!("ALTER TABLE public.{name} ALTER COLUMN rank DROP NOT NULL"),
            format!("INSERT INTO public.{name} (id, note, qty, rank, code) VALUES (4, 'k', 8, NULL, 'w')"),
        ],
        4,
        serde_json::json!({}),
    )
    .await;
    // Debezium reads a table's schema from the catalog when it meets a change of it, so the
    // later records carry the schema as of the last change (name dropped, rank nullable).
    assert!(batches.len() >= 2, "{} batches", batches.len());
    let (r, schema) =
        replicator(|c| c.schema_evolution = lakesink_config::SchemaEvolution::Evolve).await;
    let nullability = format!(
        "SELECT column_name::text, is_nullable::text, column_default IS NOT NULL \
         FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{name}' \
         ORDER BY ordinal_position"
    );
    let cols = |v: &[(&str, &str, bool)]| -> Vec<(String, String, bool)> {
        v.iter()
            .map(|(c, n, d)| ((*c).to_owned(), (*n).to_owned(), *d))
            .collect()
    };
    r.apply("notnull", &batches[..1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(String, String, bool)> = rows(&r, &nullability).await;
    assert_eq!(
        got,
        cols(&[
            ("id", "NO", false),
            ("name", "NO", false),
            ("note", "YES", false),
            ("qty", "NO", true),
            ("rank", "NO", false),
        ])
    );
    r.apply("notnull", &batches[1..])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(String, String, bool)> = rows(&r, &nullability).await;
    assert_eq!(
        got,
        cols(&[
            ("id", "NO", false),
            ("name", "YES", false),
            ("note", "YES", false),
            ("qty", "NO", true),
            ("rank", "YES", false),
            ("code", "NO", true),
        ])
    );
    type Held = (i32, Option<String>, Option<i32>, String);
    let held: Vec<Held> = rows(
        &r,
        &format!("SELECT id, name, rank, code FROM \"{schema}\".{name} ORDER BY id"),
    )
    .await;
    assert_eq!(
        held,
        [
            (1, Some("one".to_owned()), Some(1), "x".to_owned()),
            (2, Some("two".to_owned()), Some(2), "y".to_owned()),
            (3, None, Some(3), "z".to_owned()),
            (4, None, None, "w".to_owned())
        ]
    );

    // `not-null = "never"`: nullable, as before.
    let (loose, loose_schema) = replicator(|c| c.not_null = lakesink_config::NotNull::Never).await;
    loose
        .apply("notnull-never", &batches[..1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(String, String, bool)> =
        rows(&loose, &nullability.replace(&schema, &loose_schema)).await;
    assert!(got[1..].iter().all(|c| c.1 == "YES"), "{got:?}");

    capture.stop(&src).await;
    crate::replica::support::exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}
