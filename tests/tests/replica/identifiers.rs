//! Identifiers, with real Debezium: a table whose name has upper case, a space, double quotes
//! and non-ASCII letters, and one whose name is PostgreSQL's longest (63 bytes), with columns
//! named by reserved words, by the staging table's own words (`grp`, `__grp`), with spaces,
//! quotes, dots, mixed case, and one of 63 bytes of multi-byte letters. The replica must have
//! the source's names, byte for byte, and its rows, through snapshot, updates, a key change, a
//! delete and inserts.

use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

use crate::replica::support::{
    Capture, apply_each_then_replay, exec, replicator, rows, source_pool,
};

/// 21 snowmen: 63 bytes, 21 characters.
const LONG_COLUMN: &str = "☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃";

/// The source's columns (key first), quoted as SQL needs.
fn columns() -> Vec<(String, &'static str)> {
    [
        ("Id Key", "integer"),
        ("order", "text"),
        ("select", "integer"),
        ("user", "text"),
        ("grp", "integer"),
        ("__grp", "text"),
        ("Some Note", "text"),
        ("qu\"ote", "text"),
        ("a.b", "text"),
        ("MiXed", "boolean"),
        ("Ünïcödé", "text"),
        (LONG_COLUMN, "text"),
    ]
    .into_iter()
    .map(|(c, t)| (quote(c), t))
    .collect()
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Debezium's topic name for a table: what a topic name cannot hold becomes `_`.
fn topic_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[tokio::test]
async fn the_replica_keeps_the_sources_identifiers() {
    let stack = Stack::from_env();
    let name = unique("ident");
    let src = source_pool(&stack).await;
    let odd = format!("Ordèrs \"Q\" {name}");
    let mut long = format!("{name}_long_");
    while long.len() < 63 {
        long.push('l');
    }
    assert_eq!(long.len(), 63);
    let defs: Vec<String> = columns().iter().map(|(c, t)| format!("{c} {t}")).collect();
    let key = format!("{}, \"order\"", quote("Id Key"));
    let cols: Vec<String> = columns().into_iter().map(|(c, _)| c).collect();
    let all = cols.join(", ");
    let row = |id: i32, order: &str| {
        format!(
            "({id}, '{order}', {id}, 'u{id}', {id}, 'g{id}', 'note {id}', 'q''{id}', 'a.b{id}', \
             true, 'ü{id}', '☃{id}')"
        )
    };
    let mut setup = Vec::new();
    for t in [&odd, &long] {
        setup.extend([
            format!(
                "CREATE TABLE public.{} ({}, PRIMARY KEY ({key}))",
                quote(t),
                defs.join(", ")
            ),
            format!(
                "INSERT INTO public.{} ({all}) VALUES {}, {}",
                quote(t),
                row(1, "a"),
                row(2, "b")
            ),
        ]);
    }
    exec(&src, &setup).await;

    let mut capture = Capture::start_with(
        &stack,
        &name,
        &[&odd, &long],
        json!({"column.propagate.source.type": ".*"}),
    )
    .await;
    capture.topics = [&odd, &long]
        .iter()
        .map(|t| format!("{name}.public.{}", topic_part(t)))
        .collect();
    let mut changes = Vec::new();
    for t in [&odd, &long] {
        let t = quote(t);
        changes.extend([
            format!(
                "UPDATE public.{t} SET \"select\" = 10, {LC} = 'changed' WHERE \"Id Key\" = 1",
                LC = quote(LONG_COLUMN)
            ),
            // A key change: Debezium's delete and create.
            format!("UPDATE public.{t} SET \"order\" = 'z' WHERE \"Id Key\" = 2"),
            format!("INSERT INTO public.{t} ({all}) VALUES {}", row(3, "c")),
            format!("DELETE FROM public.{t} WHERE \"Id Key\" = 1"),
            format!(
                "UPDATE public.{t} SET {} = 'q\"3' WHERE \"Id Key\" = 3",
                quote("qu\"ote")
            ),
        ]);
    }
    exec(&src, &changes).await;
    // Per table: 2 snapshot, update, key change (delete + tombstone + create), insert,
    // delete + tombstone, update.
    let records = capture.read(&[10, 10]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    let (r, schema) = replicator(|_| {}).await;
    apply_each_then_replay(&r, "ident", &batches).await;

    for t in [&odd, &long] {
        // Names: the replica's columns are the source's, byte for byte (key columns first).
        let names = |schema: &str| {
            format!(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = '{}.{}'::regclass \
                 AND attnum > 0 AND NOT attisdropped ORDER BY attname",
                quote(schema),
                quote(t).replace('\'', "''")
            )
        };
        let want: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(names("public")))
            .fetch_all(&src)
            .await
            .expect("source columns");
        let got: Vec<(String,)> = rows(&r, &names(&schema)).await;
        assert_eq!(got, want, "{t}: the replica's column names");

        // Rows: each row as a JSON object keyed by column name.
        let image = |schema: &str| {
            format!(
                "SELECT to_jsonb(t)::text FROM {}.{} AS t ORDER BY {key}",
                quote(schema),
                quote(t)
            )
        };
        let parse = |rows: Vec<(String,)>| -> Vec<Value> {
            rows.into_iter()
                .map(|(j,)| serde_json::from_str(&j).expect("json"))
                .collect()
        };
        let want = parse(
            sqlx::query_as(AssertSqlSafe(image("public")))
                .fetch_all(&src)
                .await
                .expect("source rows"),
        );
        let got = parse(rows(&r, &image(&schema)).await);
        assert_eq!(want.len(), 2, "{t}: rows 2 and 3 remain at the source");
        assert_eq!(got, want, "{t}: the replica's rows");
    }

    // Tables named by topic (`${topic}`): a tombstone decoded alone carries no value schema,
    // so no source names; it finds the key columns in the table by position. And a table
    // made before the source names were read (named by the Avro fields) keeps its columns.
    let odd_topic = capture.topics[0].clone();
    let mine: Vec<_> = records
        .iter()
        .filter(|m| rdkafka::Message::topic(*m) == odd_topic)
        .cloned()
        .collect();
    // Record 7 is key 1's delete, 8 its tombstone: left without its delete, the tombstone
    // alone (a batch of its own) deletes the row.
    assert!(
        rdkafka::Message::payload(&mine[8]).is_none(),
        "record 8 is a tombstone"
    );
    let (r2, by_topic) = replicator(|c| {
        c.table_name_format = c.table_name_format.replace("${source.table}", "${topic}");
        c.dots_to_underscores = true;
    })
    .await;
    let table2 = odd_topic.replace('.', "_");
    let avro_names: Vec<String> = columns()
        .iter()
        .map(|(c, t)| {
            let unquoted = c[1..c.len() - 1].replace("\"\"", "\"");
            let name: String = unquoted
                .chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() || ch == '_' {
                        ch
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("{} {t}", quote(&name))
        })
        .collect();
    let made_before = format!("{}_before", &by_topic);
    let made = [
        format!("CREATE SCHEMA {}", quote(&made_before)),
        format!(
            "CREATE TABLE {}.{} ({}, PRIMARY KEY (\"Id_Key\", \"order\"))",
            quote(&made_before),
            quote(&table2),
            avro_names.join(", "),
        ),
    ];
    exec(r2.pool(), &made).await;
    let (r3, _) = replicator(|c| {
        c.table_name_format = format!("{made_before}.${{topic}}");
        c.dots_to_underscores = true;
    })
    .await;
    // Each replicator its own group: they share the offsets table.
    for (r, group) in [(&r2, "ident-topic"), (&r3, "ident-before")] {
        for part in [&mine[..7], &mine[8..9], &mine[9..]] {
            let avro = Format::Avro {
                payload_ids: IdKind::ContentId,
                check_artifacts: true,
            };
            let batches = decode_all(&stack, avro, part).await;
            r.apply(group, &batches)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    for (schema, names) in [(&by_topic, "source"), (&made_before, "avro")] {
        let count: Vec<(i64,)> = rows(
            &r2,
            &format!(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = '{}.{}'::regclass AND attnum > 0 AND NOT attisdropped",
                quote(schema),
                quote(&table2)
            ),
        )
        .await;
        assert_eq!(
            count,
            vec![(columns().len() as i64,)],
            "{schema}: no column added"
        );
        let keys: Vec<(i32,)> = rows(
            &r2,
            &format!(
                "SELECT {} FROM {}.{} ORDER BY 1",
                if names == "source" {
                    "\"Id Key\""
                } else {
                    "\"Id_Key\""
                },
                quote(schema),
                quote(&table2)
            ),
        )
        .await;
        assert_eq!(
            keys,
            vec![(2,), (3,)],
            "{schema}: key 1 deleted by its tombstone alone"
        );
    }

    capture.stop(&src).await;
    exec(
        &src,
        &[format!(
            "DROP TABLE public.{}, public.{}",
            quote(&odd),
            quote(&long)
        )],
    )
    .await;
}

/// A pipeline migrated from a JDBC sink that left names unquoted: PostgreSQL folded the
/// upper-case source's names, and `identifier-case = "lower"` writes to that same table.
/// The default keeps the source's case.
#[tokio::test]
async fn identifier_case_lower_writes_to_the_table_an_unquoting_jdbc_sink_made() {
    use lakesink_config::IdentifierCase;
    let stack = Stack::from_env();
    let name = unique("upper");
    let src = source_pool(&stack).await;
    let table = format!("ORDERS_{}", name.to_uppercase());
    let t = quote(&table);
    exec(
        &src,
        &[
            format!(
                "CREATE TABLE public.{t} (\"OrderId\" integer PRIMARY KEY, \"Qty\" integer, \"ÜNote\" text)"
            ),
            format!("INSERT INTO public.{t} VALUES (1, 10, 'a'), (2, 20, 'b')"),
        ],
    )
    .await;
    // The source's names travel with their types; Avro alone would make `ÜNote` `_Note`.
    let capture = Capture::start_with(
        &stack,
        &name,
        &[&table],
        json!({"column.propagate.source.type": ".*"}),
    )
    .await;
    exec(
        &src,
        &[
            format!("UPDATE public.{t} SET \"Qty\" = 11 WHERE \"OrderId\" = 1"),
            format!("DELETE FROM public.{t} WHERE \"OrderId\" = 2"),
            format!("INSERT INTO public.{t} VALUES (3, 30, 'c')"),
        ],
    )
    .await;
    // 2 snapshot, update, delete + tombstone, insert.
    let records = capture.read(&[6]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;
    let want = [(1, 11, "a"), (3, 30, "c")].map(|(i, q, n)| (i, q, n.to_owned()));
    let columns = |schema: &str| {
        format!(
            "SELECT table_name::text, column_name::text FROM information_schema.columns \
             WHERE table_schema = '{schema}' ORDER BY table_name, ordinal_position"
        )
    };

    let (lower, schema) = replicator(|c| c.identifier_case = IdentifierCase::Lower).await;
    // The table as the sink made it, unquoted: PostgreSQL folds the names.
    exec(
        lower.pool(),
        &[
            format!("CREATE SCHEMA \"{schema}\""),
            format!(
                "CREATE TABLE \"{schema}\".{table} (OrderId integer PRIMARY KEY, Qty integer, \"Ünote\" text)"
            ),
        ],
    )
    .await;
    apply_each_then_replay(&lower, "upper-lower", &batches).await;
    let folded = table.to_ascii_lowercase();
    let got: Vec<(String, String)> = rows(&lower, &columns(&schema)).await;
    let expect = ["orderid", "qty", "Ünote"].map(|c| (folded.clone(), c.to_owned()));
    assert_eq!(
        got, expect,
        "one table, the sink's: only ASCII letters are lowered"
    );
    let got: Vec<(i32, i32, String)> = rows(
        &lower,
        &format!("SELECT orderid, qty, \"Ünote\" FROM \"{schema}\".{folded} ORDER BY 1"),
    )
    .await;
    assert_eq!(got, want);

    let (kept, schema) = replicator(|_| {}).await;
    apply_each_then_replay(&kept, "upper-preserve", &batches).await;
    let got: Vec<(String, String)> = rows(&kept, &columns(&schema)).await;
    let expect = ["OrderId", "Qty", "ÜNote"].map(|c| (table.clone(), c.to_owned()));
    assert_eq!(got, expect, "the source's names, case kept");
    let got: Vec<(i32, i32, String)> = rows(
        &kept,
        &format!("SELECT \"OrderId\", \"Qty\", \"ÜNote\" FROM \"{schema}\".{t} ORDER BY 1"),
    )
    .await;
    assert_eq!(got, want);

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{t}")]).await;
}
