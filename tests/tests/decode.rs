//! Golden round trip: a source row holding every common PostgreSQL type, captured by real
//! Debezium with the Apicurio converter, resolved from the real registry and decoded into Arrow,
//! equals what was inserted; a row of NULLs decodes as NULLs.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, StructArray};
use arrow_schema::{DataType, TimeUnit};
use chrono::{NaiveDate, NaiveTime, TimeZone, Utc};
use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::{Connector, Converter, decode_all};
use lakesink_tests::golden::{COLUMNS, VALUES};
use lakesink_tests::{Stack, unique, unreachable};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

#[tokio::test]
async fn every_postgres_type_decodes_losslessly() {
    let stack = Stack::from_env();
    let name = unique("golden");
    let pg = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    let mood = format!("{name}_mood");
    for sql in [
        format!("CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')"),
        format!(
            "CREATE TABLE public.{name} ({})",
            COLUMNS.replace("MOOD", &mood)
        ),
        format!("INSERT INTO public.{name} VALUES ({VALUES})"),
        format!("INSERT INTO public.{name} (id) VALUES (2)"),
    ] {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(&pg)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let connector = Connector::start(&stack, &name).await;
    for sql in [
        format!("UPDATE public.{name} SET t = 'changed' WHERE id = 2"),
        format!("DELETE FROM public.{name} WHERE id = 2"),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&pg)
            .await
            .expect("change");
    }
    // Two snapshot reads, an update, a delete and its tombstone.
    let records = connector.read(5).await;

    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let mut batches = decode_all(&stack, avro, &records).await;
    assert_eq!(batches.len(), 1, "one schema, one batch");
    let change = batches.remove(0);
    assert_eq!((change.first_offset, change.last_offset), (0, 4));
    let batch = change.rows;
    assert_eq!(batch.num_rows(), 5);
    let ops: Vec<&str> = batch
        .column_by_name("__op")
        .expect("__op")
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(ops, ["r", "r", "u", "d", "d"]);
    let tombstones = batch
        .column_by_name("__tombstone")
        .expect("__tombstone")
        .as_boolean();
    assert!(tombstones.value(4) && !tombstones.value(3));
    let keys = batch.column_by_name("key").expect("key").as_struct();
    let key_ids = keys
        .column_by_name("id")
        .expect("key id")
        .as_primitive::<Int64Type>();
    assert_eq!(key_ids.values(), &[1, 2, 2, 2, 2]);
    let after = batch.column_by_name("after").expect("after").as_struct();
    let col = |name: &str| {
        after
            .column_by_name(name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let ty = |name: &str| col(name).data_type().clone();

    assert_eq!(col("id").as_primitive::<Int64Type>().value(0), 1);
    assert_eq!(col("i2").as_primitive::<Int16Type>().value(0), -32768);
    assert_eq!(col("i4").as_primitive::<Int32Type>().value(0), 2147483647);
    assert_eq!(col("f4").as_primitive::<Float32Type>().value(0), 1.5);
    assert_eq!(col("f8").as_primitive::<Float64Type>().value(0), -2.25e300);
    assert_eq!(ty("n102"), DataType::Decimal128(10, 2));
    assert_eq!(
        col("n102")
            .as_primitive::<Decimal128Type>()
            .value_as_string(0),
        "12345678.91"
    );
    // Debezium drops the trailing zero of an unconstrained numeric: the value is exact, the
    // display scale is not carried.
    assert_eq!(
        variable_scale_decimal(col("n").as_struct(), 0),
        "3.1415926535897932384626433832795028841971693993751"
    );
    assert_eq!(
        col("n386")
            .as_primitive::<Decimal128Type>()
            .value_as_string(0),
        "12345678901234567890123456789012.123456"
    );
    assert!(col("b").as_boolean().value(0));
    assert_eq!(col("t").as_string::<i32>().value(0), "héllo ☃");
    assert_eq!(col("vc").as_string::<i32>().value(0), "vc");
    assert_eq!(col("c3").as_string::<i32>().value(0), "ab ");
    assert_eq!(col("by").as_binary::<i32>().value(0), [0x00, 0xff, 0x10]);

    let day = |y, m, d| {
        (NaiveDate::from_ymd_opt(y, m, d).expect("date") - NaiveDate::default()).num_days()
    };
    assert_eq!(ty("d"), DataType::Date32);
    assert_eq!(
        i64::from(col("d").as_primitive::<Date32Type>().value(0)),
        day(2024, 2, 29)
    );
    assert_eq!(ty("tm"), DataType::Time64(TimeUnit::Microsecond));
    assert_eq!(
        col("tm").as_primitive::<Time64MicrosecondType>().value(0),
        86_399_999_999
    );
    assert_eq!(ty("tm3"), DataType::Time32(TimeUnit::Millisecond));
    assert_eq!(
        col("tm3").as_primitive::<Time32MillisecondType>().value(0),
        43_200_123
    );
    assert_eq!(col("ttz").as_string::<i32>().value(0), "10:00:00Z");
    let micros = |y, m, d, t: &str| {
        let t = NaiveTime::parse_from_str(t, "%H:%M:%S%.f").expect("time");
        Utc.from_utc_datetime(&NaiveDate::from_ymd_opt(y, m, d).expect("date").and_time(t))
            .timestamp_micros()
    };
    assert_eq!(ty("ts"), DataType::Timestamp(TimeUnit::Microsecond, None));
    assert_eq!(
        col("ts")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        micros(2024, 2, 29, "12:34:56.789012")
    );
    assert_eq!(ty("ts3"), DataType::Timestamp(TimeUnit::Millisecond, None));
    assert_eq!(
        col("ts3")
            .as_primitive::<TimestampMillisecondType>()
            .value(0),
        micros(1999, 12, 31, "23:59:59.999") / 1000
    );
    assert_eq!(
        ty("tstz"),
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert_eq!(
        col("tstz")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        micros(2024, 2, 29, "12:34:56.789012")
    );
    // Debezium's MicroDuration counts a month as 365.25 / 12 days.
    assert_eq!(ty("iv"), DataType::Duration(TimeUnit::Microsecond));
    let expected_iv = ((14.0 * 30.4375 + 3.0) * 86_400.0 + 4.0 * 3600.0 + 5.0 * 60.0 + 6.789) * 1e6;
    let iv = col("iv").as_primitive::<DurationMicrosecondType>().value(0);
    assert!(
        (iv as f64 - expected_iv).abs() <= 1.0,
        "interval {iv} vs {expected_iv}"
    );

    assert_eq!(
        col("u").as_string::<i32>().value(0),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    );
    assert_eq!(col("j").as_string::<i32>().value(0), r#"{"a": [1, 2]}"#);
    assert_eq!(
        col("jb").as_string::<i32>().value(0),
        r#"{"b": {"c": null}}"#
    );
    assert_eq!(col("x").as_string::<i32>().value(0), r#"<r a="1">x</r>"#);
    // Bits arrive little-endian: bit i of the value is bit i % 8 of byte i / 8.
    assert_eq!(col("bt").as_binary::<i32>().value(0), [0b1010]);
    assert_eq!(col("bv").as_binary::<i32>().value(0), [0b101]);
    let ai = col("ai").as_list::<i32>().value(0);
    let ai = ai.as_primitive::<Int32Type>();
    assert_eq!(
        (ai.len(), ai.value(0), ai.is_null(1), ai.value(2)),
        (3, 1, true, 3)
    );
    let at = col("at").as_list::<i32>().value(0);
    let at: Vec<_> = at.as_string::<i32>().iter().flatten().collect();
    assert_eq!(at, ["a", "b c"]);
    assert_eq!(col("mo").as_string::<i32>().value(0), "happy");
    assert_eq!(col("inet_").as_string::<i32>().value(0), "192.168.0.1/24");
    assert_eq!(col("cidr_").as_string::<i32>().value(0), "10.0.0.0/8");
    assert_eq!(col("mac").as_string::<i32>().value(0), "08:00:2b:01:02:03");
    let pt = col("pt").as_struct();
    assert_eq!(
        pt.column_by_name("x")
            .expect("x")
            .as_primitive::<Float64Type>()
            .value(0),
        1.5
    );
    assert_eq!(
        pt.column_by_name("y")
            .expect("y")
            .as_primitive::<Float64Type>()
            .value(0),
        -2.0
    );
    assert_eq!(ty("money_"), DataType::Decimal256(64, 2));
    assert_eq!(
        col("money_")
            .as_primitive::<Decimal256Type>()
            .value_as_string(0),
        "12.34"
    );
    assert_eq!(col("tsv").as_string::<i32>().value(0), "'a' 'cat' 'fat'");
    assert_eq!(col("i8r").as_string::<i32>().value(0), "[1,10)");

    // The second row: NULL in every column but the key.
    for (i, field) in after.fields().iter().enumerate() {
        if field.name() != "id" {
            assert!(
                after.column(i).is_null(1),
                "{} should be NULL",
                field.name()
            );
        }
    }
    let op = batch.column_by_name("op").expect("op").as_string::<i32>();
    assert_eq!(
        (op.value(0), op.value(1)),
        ("r", "r"),
        "both rows come from the snapshot"
    );
    let updated = after.column_by_name("t").expect("t").as_string::<i32>();
    assert_eq!(updated.value(2), "changed");
    assert!(
        after.is_null(3) && after.is_null(4),
        "a delete and a tombstone have no after image"
    );
    let before = batch.column_by_name("before").expect("before").as_struct();
    assert_eq!(
        before
            .column_by_name("id")
            .expect("id")
            .as_primitive::<Int64Type>()
            .value(3),
        2
    );

    connector.stop(&pg).await;
    for sql in [
        format!("DROP TABLE public.{name}"),
        format!("DROP TYPE {mood}"),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&pg)
            .await
            .expect("cleanup");
    }
}

/// A VariableScaleDecimal {scale, value: two's-complement big-endian unscaled} as decimal text.
fn variable_scale_decimal(s: &StructArray, row: usize) -> String {
    let scale = s
        .column_by_name("scale")
        .expect("scale")
        .as_primitive::<Int32Type>()
        .value(row);
    let bytes = s
        .column_by_name("value")
        .expect("value")
        .as_binary::<i32>()
        .value(row)
        .to_vec();
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    assert!(!negative, "test values are positive");
    // Long division by 10 over the big-endian magnitude.
    let mut digits = Vec::new();
    let mut n = bytes;
    while n.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in n.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    let mut text: String = digits.iter().rev().collect();
    let scale = usize::try_from(scale).expect("non-negative scale");
    while text.len() <= scale {
        text.insert(0, '0');
    }
    if scale > 0 {
        text.insert(text.len() - scale, '.');
    }
    text
}

/// The same decoding for Kafka Connect's JsonConverter (`schemas.enable=true`): the schema
/// travels in each record, decimals and bytes as base64.
#[tokio::test]
async fn json_converter_records_decode_like_avro() {
    let stack = Stack::from_env();
    let (pg, connector, records) = capture(
        &stack,
        "golden_json",
        &[
            "CREATE TABLE public.{name} (id bigint PRIMARY KEY, price numeric(10,2), at timestamptz, tags text[], raw bytea, d date)",
            "INSERT INTO public.{name} VALUES (5, 12345678.91, '2024-02-29 12:34:56.789012+00', '{\"a\",NULL}', '\\x00ff', '2024-02-29')",
        ],
        Converter::Json,
        1,
    )
    .await;
    let batch = decode_all(&stack, Format::ConnectJson, &records)
        .await
        .remove(0)
        .rows;
    let after = batch.column_by_name("after").expect("after").as_struct();
    let col = |n: &str| {
        after
            .column_by_name(n)
            .unwrap_or_else(|| panic!("column {n}"))
            .clone()
    };
    assert_eq!(col("id").as_primitive::<Int64Type>().value(0), 5);
    assert_eq!(
        col("price")
            .as_primitive::<Decimal128Type>()
            .value_as_string(0),
        "12345678.91"
    );
    let micros = Utc
        .with_ymd_and_hms(2024, 2, 29, 12, 34, 56)
        .single()
        .expect("time")
        .timestamp_micros()
        + 789_012;
    assert_eq!(
        col("at")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        micros
    );
    let tags = col("tags").as_list::<i32>().value(0);
    assert_eq!(
        (tags.as_string::<i32>().value(0), tags.is_null(1)),
        ("a", true)
    );
    assert_eq!(col("raw").as_binary::<i32>().value(0), [0x00, 0xff]);
    assert_eq!(col("d").data_type(), &DataType::Date32);
    let key = batch.column_by_name("key").expect("key").as_struct();
    assert_eq!(key.column(0).as_primitive::<Int64Type>().value(0), 5);
    assert_eq!(
        batch
            .column_by_name("__op")
            .expect("op")
            .as_string::<i32>()
            .value(0),
        "r"
    );

    release(pg, connector).await;
}

/// JsonConverter with `schemas.enable=false`: the schema is inferred from each record, so
/// integers and strings keep their types while a decimal stays the base64 text Debezium sent.
#[tokio::test]
async fn plain_json_records_decode_with_an_inferred_schema() {
    let stack = Stack::from_env();
    let (pg, connector, records) = capture(
        &stack,
        "plain_json",
        &[
            "CREATE TABLE public.{name} (id bigint PRIMARY KEY, label text, price numeric(10,2))",
            "INSERT INTO public.{name} VALUES (5, 'five', 123.45)",
        ],
        Converter::PlainJson,
        1,
    )
    .await;
    let batch = decode_all(&stack, Format::PlainJson { value_schema: None }, &records)
        .await
        .remove(0)
        .rows;
    let after = batch.column_by_name("after").expect("after").as_struct();
    assert_eq!(
        after
            .column_by_name("id")
            .expect("id")
            .as_primitive::<Int64Type>()
            .value(0),
        5
    );
    assert_eq!(
        after
            .column_by_name("label")
            .expect("label")
            .as_string::<i32>()
            .value(0),
        "five"
    );
    // 12345 as two big-endian bytes, base64: the limit of inference, documented.
    assert_eq!(
        after
            .column_by_name("price")
            .expect("price")
            .as_string::<i32>()
            .value(0),
        "MDk="
    );
    assert_eq!(
        batch
            .column_by_name("__op")
            .expect("op")
            .as_string::<i32>()
            .value(0),
        "r"
    );
    let key = batch.column_by_name("key").expect("key").as_struct();
    assert_eq!(key.column(0).as_primitive::<Int64Type>().value(0), 5);

    release(pg, connector).await;
}

/// Creates a source table with `sql` (`{name}` stands for its name), captures it with a
/// connector using `converter`, and returns the pool, the connector and the first `n` records.
async fn capture(
    stack: &Stack,
    prefix: &str,
    sql: &[&str],
    converter: Converter,
    n: usize,
) -> (PgPool, Connector, Vec<rdkafka::message::OwnedMessage>) {
    let name = unique(prefix);
    let pg = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    for statement in sql {
        let statement = statement.replace("{name}", &name);
        sqlx::query(AssertSqlSafe(statement.clone()))
            .execute(&pg)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let connector = Connector::start_with(stack, &name, converter).await;
    let records = connector.read(n).await;
    (pg, connector, records)
}

/// Stops the connector and drops its table.
async fn release(pg: PgPool, connector: Connector) {
    let table = connector.table.clone();
    connector.stop(&pg).await;
    sqlx::query(AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pg)
        .await
        .expect("cleanup");
}
