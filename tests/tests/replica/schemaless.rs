//! JsonConverter with `schemas.enable=false` (`kafka.format = "json"`), with real Debezium.
//! Inferred per record, text, booleans, integers and doubles arrive exact, while a decimal
//! stays Debezium's base64 text and a timestamp its integer. Given the value's Connect schema
//! (`kafka.json-value-schema`: the `schema` object the same connector writes with
//! `schemas.enable=true`), every column arrives as the source holds it.

use std::sync::Arc;

use lakesink_schema_registry::Format;
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};
use serde_json::{Value, json};

use crate::replica::support::{Capture, exec, replicator, rows, source_pool};

const COLUMNS: [&str; 6] = ["t", "b", "i8", "f8", "n", "ts"];

fn converters(schemas: bool) -> Value {
    let on = schemas.to_string();
    json!({
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": on,
        "value.converter.schemas.enable": on,
    })
}

#[tokio::test]
async fn schemaless_json_is_inferred_or_typed_by_the_configured_schema() {
    let stack = Stack::from_env();
    let table = unique("schemaless");
    let src = source_pool(&stack).await;
    exec(
        &src,
        &[
            format!(
                "CREATE TABLE public.{table} (id int PRIMARY KEY, t text, b boolean, i8 bigint, \
                 f8 double precision, n numeric(10,2), ts timestamp)"
            ),
            format!(
                "INSERT INTO public.{table} VALUES (1, 'héllo', true, -9223372036854775808, \
                 94247779607.69379, 12345678.91, '2024-02-29 12:34:56.789012'), \
                 (2, '', false, 9223372036854775807, -0.5, -0.01, '1970-01-01 00:00:00')"
            ),
        ],
    )
    .await;
    let bare = Capture::start_with(&stack, &table, &[&table], converters(false)).await;
    let typed_name = format!("{table}_schemas");
    let typed = Capture::start_with(&stack, &typed_name, &[&table], converters(true)).await;
    exec(
        &src,
        &[format!(
            "UPDATE public.{table} SET t = 'changed', n = 0.50 WHERE id = 2"
        )],
    )
    .await;
    let records = bare.read(&[3]).await;
    // The value's Connect schema, as the same connector writes it with schemas on.
    let with_schemas = typed.read(&[3]).await;
    let envelope: Value =
        serde_json::from_slice(rdkafka::Message::payload(&with_schemas[0]).expect("a value"))
            .expect("JSON");
    let schema = Arc::new(envelope["schema"].clone());
    assert_eq!(schema["type"], "struct", "{envelope}");

    let source: Vec<(i32, Vec<Option<String>>)> = {
        let sql = format!(
            "SELECT id, ARRAY[{}] FROM public.{table} ORDER BY id",
            COLUMNS.map(|c| format!("{c}::text")).join(", ")
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&src)
            .await
            .expect("source rows")
    };
    assert_eq!(source.len(), 2);
    let replica = async |format: Format, group: &str| {
        let batches = decode_all(&stack, format, &records).await;
        let (r, schema) = replicator(|_| {}).await;
        r.apply(group, &batches)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(i32, Vec<Option<String>>)> = rows(
            &r,
            &format!(
                "SELECT id::int, ARRAY[{}] FROM \"{schema}\".{table} ORDER BY id",
                COLUMNS.map(|c| format!("{c}::text")).join(", ")
            ),
        )
        .await;
        got
    };

    // Typed by the configured schema: every column as the source holds it.
    let exact = replica(
        Format::PlainJson {
            value_schema: Some(schema),
        },
        "schemaless-typed",
    )
    .await;
    assert_eq!(exact, source, "typed by kafka.json-value-schema");

    // Inferred: exact where JSON's own types are the column's; the decimal and the timestamp
    // stay as Debezium wrote them (base64 of the unscaled value, microseconds since 1970).
    let inferred = replica(Format::PlainJson { value_schema: None }, "schemaless").await;
    assert_eq!(inferred.len(), 2);
    for ((id, got), (_, want)) in inferred.iter().zip(&source) {
        for (i, c) in COLUMNS.iter().enumerate() {
            let (g, w) = (&got[i], &want[i]);
            match *c {
                "n" | "ts" => assert_ne!(g, w, "row {id} {c}: inferred, it is not the source's"),
                "f8" => {
                    let parse = |v: &Option<String>| v.as_deref().map(|s| s.parse::<f64>());
                    assert_eq!(
                        parse(g).map(Result::ok),
                        parse(w).map(Result::ok),
                        "row {id} {c}"
                    );
                }
                _ => assert_eq!(g, w, "row {id} {c}"),
            }
        }
    }
    assert_eq!(
        inferred[0].1[5].as_deref(),
        Some("1709210096789012"),
        "the timestamp as Debezium's microseconds"
    );

    bare.stop(&src).await;
    typed.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{table}")]).await;
}
