//! End to end: real Debezium captures a table of every common PostgreSQL type (with TOASTed
//! columns left unchanged by updates, and a column added mid-stream), a composite-key table
//! with mixed-case quoted names that gets truncated, and a keyless table. The decoded batches
//! are applied one call each, then all replayed; the replica must equal the source.

use arrow_array::cast::AsArray;
use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique, unreachable};
use serde_json::Value;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::replica::support::{Capture, replicator, rows};

/// The golden test's types (tests/tests/decode.rs), with two values Debezium cannot carry
/// exactly made exact: an interval without months (MicroDuration counts a month as 30.4375
/// days) and a bit varying at its full length (Bits drops the actual length). Then four
/// columns stored out of line, which updates leave unchanged.
const COLUMNS: &str = "id bigint PRIMARY KEY, i2 smallint, i4 integer, f4 real, f8 double precision,
  n102 numeric(10,2), n numeric, n386 numeric(38,6), b boolean, t text, vc varchar(20), c3 char(3),
  by bytea, d date, tm time, tm3 time(3), ttz timetz, ts timestamp, ts3 timestamp(3), tstz timestamptz,
  iv interval, u uuid, j json, jb jsonb, x xml, bt bit(4), bv bit varying(8), ai int4[], at text[],
  mo MOOD, inet_ inet, cidr_ cidr, mac macaddr, pt point, money_ money, tsv tsvector, i8r int8range,
  big text, big_b bytea, big_a text[], big_i int4[]";

const VALUES: &str = "1, -32768, 2147483647, 1.5, -2.25e300, 12345678.91,
  3.14159265358979323846264338327950288419716939937510, 12345678901234567890123456789012.123456,
  true, 'héllo ☃', 'vc', 'ab', '\\x00ff10', '2024-02-29', '23:59:59.999999', '12:00:00.123',
  '12:00:00+02', '2024-02-29 12:34:56.789012', '1999-12-31 23:59:59.999',
  '2024-02-29 12:34:56.789012+00', '3 days 04:05:06.789',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2]}', '{\"b\": {\"c\": null}}', '<r a=\"1\">x</r>',
  B'1010', B'10100101', '{1,NULL,3}', '{\"a\",\"b c\"}', 'happy', '192.168.0.1/24', '10.0.0.0/8',
  '08:00:2b:01:02:03', '(1.5,-2)', 12.34, 'a fat cat', '[1,10)',
  (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i),
  decode((SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i), 'hex'),
  (SELECT array_agg(md5(i::text)) FROM generate_series(1, 100) i),
  (SELECT array_agg(i) FROM generate_series(1, 1000) i)";

/// Per column, the expression compared on the source and on the replica: equal text means
/// equal values (types the replica holds differently are normalised).
const COMPARE: &[(&str, &str, &str)] = &[
    ("n", "trim_scale(n)", "trim_scale(n)"),
    ("ttz", "ttz AT TIME ZONE 'UTC'", "ttz AT TIME ZONE 'UTC'"),
    ("tstz", "tstz AT TIME ZONE 'UTC'", "tstz AT TIME ZONE 'UTC'"),
    ("j", "j::jsonb", "j"),
    ("x", "x::text", "x::text"),
    ("money_", "money_::numeric", "money_"),
    ("big", "md5(big)", "md5(big)"),
    ("big_b", "md5(big_b)", "md5(big_b)"),
    ("big_a", "md5(big_a::text)", "md5(big_a::text)"),
    ("big_i", "md5(big_i::text)", "md5(big_i::text)"),
];

#[tokio::test]
async fn replica_equals_the_source_after_real_debezium() {
    let stack = Stack::from_env();
    let name = unique("e2e");
    let src = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    let types = format!("{name}_types");
    let mixed = format!("Mixed_{name}");
    let nokey = format!("{name}_nokey");
    let mood = format!("{name}_mood");
    let exec = |sqls: Vec<String>| {
        let src = src.clone();
        async move {
            for sql in sqls {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .execute(&src)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    };
    let mut setup = vec![
        format!("CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')"),
        format!(
            "CREATE TABLE public.{types} ({})",
            COLUMNS.replace("MOOD", &mood)
        ),
    ];
    for c in ["big", "big_b", "big_a", "big_i"] {
        setup.push(format!(
            "ALTER TABLE public.{types} ALTER COLUMN {c} SET STORAGE EXTERNAL"
        ));
    }
    setup.extend([
        format!("INSERT INTO public.{types} VALUES ({VALUES})"),
        format!("INSERT INTO public.{types} (id) VALUES (2)"),
        format!(
            "CREATE TABLE public.\"{mixed}\" (\"Region\" text, \"Id\" integer, \"Qty\" integer, \"Some Note\" text, PRIMARY KEY (\"Region\", \"Id\"))"
        ),
        format!("INSERT INTO public.\"{mixed}\" VALUES ('eu', 1, 10, 'a'), ('us', 1, 20, 'b')"),
        format!("CREATE TABLE public.{nokey} (a integer, b text)"),
        format!("INSERT INTO public.{nokey} VALUES (1, 'one'), (2, 'two')"),
    ]);
    exec(setup).await;

    let capture = Capture::start(&stack, &name, &[&types, &mixed, &nokey]).await;
    exec(vec![
        format!("UPDATE public.{types} SET i2 = 5 WHERE id = 1"),
        format!("UPDATE public.{types} SET t = 'changed' WHERE id = 2"),
        format!("INSERT INTO public.{types} (id, t) VALUES (3, 'three')"),
        format!("DELETE FROM public.{types} WHERE id = 3"),
        format!("ALTER TABLE public.{types} ADD COLUMN extra text"),
        format!("UPDATE public.{types} SET extra = 'x' WHERE id = 1"),
        format!("INSERT INTO public.{types} (id, extra) VALUES (4, 'four')"),
        format!("UPDATE public.\"{mixed}\" SET \"Qty\" = 11 WHERE \"Region\" = 'eu'"),
        format!("DELETE FROM public.\"{mixed}\" WHERE \"Region\" = 'us'"),
        format!("TRUNCATE public.\"{mixed}\""),
        format!("INSERT INTO public.\"{mixed}\" VALUES ('eu', 2, 5, 'c'), ('ap', 3, 6, 'd')"),
        format!("UPDATE public.\"{mixed}\" SET \"Some Note\" = 'dd' WHERE \"Id\" = 3"),
        format!("INSERT INTO public.{nokey} VALUES (3, 'three')"),
    ])
    .await;
    // types: 2 snapshot, 2 updates, insert, delete + tombstone, 2 more; mixed: 2 snapshot,
    // update, delete + tombstone, truncate, 2 inserts, update; nokey: 2 snapshot, insert.
    let records = capture.read(&[9, 9, 3]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    // The updates of row 1 really carried Debezium's placeholder for the TOASTed text.
    let placeholders = batches
        .iter()
        .filter_map(|b| {
            b.rows
                .column_by_name("after")?
                .as_struct_opt()?
                .column_by_name("big")
                .cloned()
        })
        .flat_map(|c| {
            c.as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|v| v == "__debezium_unavailable_value")
        .count();
    assert_eq!(
        placeholders, 2,
        "two updates left the TOASTed text unchanged"
    );

    let (r, schema) = replicator(|c| c.truncate_enabled = true).await;
    for b in &batches {
        r.apply("e2e", std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let applied = r.apply("e2e", &batches).await.expect("replay");
    assert_eq!(applied.len(), 3, "{applied:?}");

    // Column names: the first word after each comma outside parentheses.
    let mut type_cols = vec!["id"];
    let mut depth = 0;
    for (i, ch) in COLUMNS.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                type_cols.extend(COLUMNS[i + 1..].split_whitespace().next());
            }
            _ => {}
        }
    }
    type_cols.push("extra");
    let same = |cols: &[&'static str]| cols.iter().map(|c| (*c, *c)).collect::<Vec<_>>();
    compare(&src, &r, &schema, &types, &same(&type_cols), "id").await;
    // Avro field names cannot hold a space: Debezium's schema calls the column `Some_Note`.
    let mixed_cols = [
        ("\"Region\"", "\"Region\""),
        ("\"Id\"", "\"Id\""),
        ("\"Qty\"", "\"Qty\""),
        ("\"Some Note\"", "\"Some_Note\""),
    ];
    let mixed_table = format!("\"{mixed}\"");
    compare(
        &src,
        &r,
        &schema,
        &mixed_table,
        &mixed_cols,
        "\"Region\", \"Id\"",
    )
    .await;
    compare(&src, &r, &schema, &nokey, &same(&["a", "b"]), "a, b").await;
    let toast: Vec<(Option<i16>, Option<String>)> = rows(
        &r,
        &format!("SELECT i2, left(big, 8) FROM \"{schema}\".{types} WHERE id = 1"),
    )
    .await;
    assert_eq!(
        toast,
        vec![(Some(5), Some("c4ca4238".into()))],
        "the TOASTed text survived"
    );

    capture.stop(&src).await;
    exec(vec![
        format!("DROP TABLE public.{types}, public.\"{mixed}\", public.{nokey}"),
        format!("DROP TYPE {mood}"),
    ])
    .await;
}

/// Compares `public.<table>` on the source and `<rep_schema>.<table>` in the replica, row for
/// row and column for column; `cols` pairs each source column with its replica name.
async fn compare(
    src: &PgPool,
    r: &lakesink_writers::PgReplicator,
    rep_schema: &str,
    table: &str,
    cols: &[(&str, &str)],
    order: &str,
) {
    let exprs = |replica: bool| -> String {
        cols.iter()
            .map(|(s, rep)| if replica { rep } else { s })
            .map(|c| {
                let e = COMPARE
                    .iter()
                    .find(|(n, _, _)| n == c)
                    .map_or(c.to_string(), |(_, s, rep)| {
                        if replica { rep } else { s }.to_string()
                    });
                format!("CASE WHEN ({e}) IS NULL THEN NULL ELSE format('%s', {e}) END")
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let query = |schema: &str, replica: bool| {
        format!(
            "SELECT json_build_array({})::text FROM \"{schema}\".{table} ORDER BY {order}",
            exprs(replica)
        )
    };
    let parse = |rows: Vec<(String,)>| -> Vec<Vec<Value>> {
        rows.into_iter()
            .map(|(t,)| serde_json::from_str::<Vec<Value>>(&t).expect("json row"))
            .collect()
    };
    let sql = query("public", false);
    let want = parse(
        sqlx::query_as(AssertSqlSafe(sql.clone()))
            .fetch_all(src)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    );
    let got = parse(rows(r, &query(rep_schema, true)).await);
    assert_eq!(got.len(), want.len(), "{table}: row count; replica {got:?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        for (c, (name, _)) in cols.iter().enumerate() {
            assert_eq!(g[c], w[c], "{table} row {i} column {name}");
        }
    }
    assert!(!want.is_empty(), "{table} has rows to compare");
}
