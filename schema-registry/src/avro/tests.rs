//! The decoder end to end on hand-built datums: types, values, metadata, and bad rows.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int64Type, TimestampMicrosecondType};
use arrow_schema::{DataType, TimeUnit};
use serde_json::json;

use super::testing::{string, zigzag};
use super::*;

fn envelope_schema() -> WriterSchema {
    let schema = json!({"type": "record", "name": "Envelope", "namespace": "demo.public.t", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": null},
            {"name": "born", "type": ["null", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}], "default": null},
            {"name": "seen", "type": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}},
            {"name": "price", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}], "default": null}
        ], "connect.name": "demo.public.t.Value"}], "default": null},
        {"name": "after", "type": ["null", "Value"], "default": null},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": null}
    ], "connect.name": "demo.public.t.Envelope"});
    WriterSchema::parse_text(&schema.to_string()).unwrap()
}

fn insert(id: i64, name: Option<&str>, born: i32, seen: i64, cents: i64) -> Vec<u8> {
    insert_priced(id, name, born, seen, &cents.to_be_bytes())
}

/// An insert: before null, after {id, name, born, seen, price}, op "c".
fn insert_priced(id: i64, name: Option<&str>, born: i32, seen: i64, price: &[u8]) -> Vec<u8> {
    let mut d = zigzag(0); // before: null
    d.extend(zigzag(1)); // after: Value
    d.extend(zigzag(id));
    match name {
        Some(n) => {
            d.extend(zigzag(1));
            d.extend(string(n));
        }
        None => d.extend(zigzag(0)),
    }
    d.extend(zigzag(1));
    d.extend(zigzag(i64::from(born)));
    d.extend(zigzag(seen));
    d.extend(zigzag(1));
    d.extend(zigzag(price.len() as i64));
    d.extend(price);
    d.extend(string("c"));
    d.extend(zigzag(1));
    d.extend(zigzag(1_700_000_000_000));
    d
}

#[test]
fn decodes_an_envelope_with_debezium_types() {
    let mut dec = AvroBatchDecoder::new(&envelope_schema(), 100).unwrap();
    dec.push(&insert(
        1,
        Some("ada"),
        19_000,
        1_700_000_000_123_456,
        12_345,
    ))
    .unwrap();
    dec.push(&insert(2, None, -1, -5, -1)).unwrap();
    let batch = dec.flush().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 2);

    let after = batch.column_by_name("after").unwrap().as_struct();
    let field = |name: &str| {
        let DataType::Struct(fields) = batch
            .schema()
            .field_with_name("after")
            .unwrap()
            .data_type()
            .clone()
        else {
            panic!("after is a struct")
        };
        fields.find(name).unwrap().1.clone()
    };
    assert_eq!(
        field("seen").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
    assert_eq!(field("born").data_type(), &DataType::Date32);
    assert_eq!(field("price").data_type(), &DataType::Decimal128(10, 2));
    assert_eq!(
        field("seen").metadata()["connect.name"],
        "io.debezium.time.MicroTimestamp"
    );
    assert_eq!(
        field("price").metadata()["connect.parameters"],
        r#"{"connect.decimal.precision":"10","scale":"2"}"#
    );

    let ids = after
        .column_by_name("id")
        .unwrap()
        .as_primitive::<Int64Type>();
    assert_eq!(ids.values(), &[1, 2]);
    let names = after.column_by_name("name").unwrap().as_string::<i32>();
    assert_eq!(names.value(0), "ada");
    assert!(names.is_null(1));
    let born = after
        .column_by_name("born")
        .unwrap()
        .as_primitive::<Date32Type>();
    assert_eq!(born.values(), &[19_000, -1]);
    let seen = after
        .column_by_name("seen")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(seen.values(), &[1_700_000_000_123_456, -5]);
    let price = after
        .column_by_name("price")
        .unwrap()
        .as_primitive::<Decimal128Type>();
    assert_eq!(price.value_as_string(0), "123.45");
    assert_eq!(price.value_as_string(1), "-0.01");
    assert!(batch.column_by_name("before").unwrap().is_null(0));
    assert_eq!(
        batch
            .column_by_name("op")
            .unwrap()
            .as_string::<i32>()
            .value(1),
        "c"
    );
}

#[test]
fn a_bad_datum_leaves_the_batch_intact() {
    let mut dec = AvroBatchDecoder::new(&envelope_schema(), 100).unwrap();
    dec.push(&insert(1, Some("a"), 1, 1, 1)).unwrap();
    let good = insert(2, Some("b"), 2, 2, 2);
    // Every truncation of a good datum, and bad UTF-8, fail without touching the batch.
    for len in 0..good.len() {
        assert!(dec.push(&good[..len]).is_err(), "prefix {len}");
    }
    let mut utf8 = insert(3, Some("xx"), 3, 3, 3);
    let at = utf8.windows(2).position(|w| w == b"xx").unwrap();
    utf8[at] = 0xff;
    assert!(matches!(
        dec.push(&utf8),
        Err(DecodeError::Datum(DatumError::BadUtf8 { .. }))
    ));
    dec.push(&good).unwrap();
    let batch = dec.flush().unwrap().unwrap();
    let ids = batch
        .column_by_name("after")
        .unwrap()
        .as_struct()
        .column(0)
        .as_primitive::<Int64Type>()
        .clone();
    assert_eq!(ids.values(), &[1, 2]);
    // And the decoder goes on after a flush.
    dec.push(&good).unwrap();
    assert_eq!(dec.flush().unwrap().unwrap().num_rows(), 1);
}

#[test]
fn a_nullable_record_root_decodes_its_record_branch() {
    let schema = json!(["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"}, {"name": "__deleted", "type": ["null", "string"], "default": null}]}]);
    let schema = WriterSchema::parse_text(&schema.to_string()).unwrap();
    let mut dec = AvroBatchDecoder::new(&schema, 10).unwrap();
    let mut d = zigzag(1);
    d.extend(zigzag(42));
    d.extend(zigzag(1));
    d.extend(string("false"));
    dec.push(&d).unwrap();
    assert!(matches!(dec.push(&zigzag(0)), Err(DecodeError::NullRoot)));
    let batch = dec.flush().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 42);
    assert_eq!(batch.column(1).as_string::<i32>().value(0), "false");
}

#[test]
fn full_batches_ask_for_a_flush() {
    let mut dec = AvroBatchDecoder::new(&envelope_schema(), 2).unwrap();
    let d = insert(1, None, 1, 1, 1);
    dec.push(&d).unwrap();
    dec.push(&d).unwrap();
    assert!(dec.is_full());
    assert!(dec.push(&d).is_err());
    assert_eq!(dec.flush().unwrap().unwrap().num_rows(), 2);
    assert_eq!(dec.rows(), 0);
    assert!(dec.flush().unwrap().is_none());
}

#[test]
fn zoned_timestamps_under_a_null_struct_are_not_parsed() {
    let schema = json!({"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "at", "type": {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}}]}]},
        {"name": "after", "type": ["null", "Value"]}]});
    let mut dec =
        AvroBatchDecoder::new(&WriterSchema::parse_text(&schema.to_string()).unwrap(), 4).unwrap();
    // before: null (arrow-avro leaves a placeholder "" under it), after: a timestamp.
    let mut d = zigzag(0);
    d.extend(zigzag(1));
    d.extend(string("2024-02-29T12:34:56.789012+02:00"));
    dec.push(&d).unwrap();
    let batch = dec.flush().unwrap().unwrap();
    let at = |col: &str| {
        batch
            .column_by_name(col)
            .unwrap()
            .as_struct()
            .column(0)
            .clone()
    };
    assert_eq!(
        at("after").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    let after = at("after");
    assert_eq!(
        after.as_primitive::<TimestampMicrosecondType>().value(0),
        1_709_202_896_789_012
    );
    assert!(at("before").is_null(0));
    // A timestamp finer than a microsecond is refused at push, not rounded.
    let mut fine = zigzag(0);
    fine.extend(zigzag(1));
    fine.extend(string("2024-02-29T12:34:56.789012345Z"));
    assert!(matches!(
        dec.push(&fine),
        Err(DecodeError::Datum(DatumError::BadTimestamp { .. }))
    ));
}

#[test]
fn a_bare_primitive_root_decodes_as_one_column() {
    let schema = WriterSchema::parse_text(r#"{"type": "string", "connect.name": "x"}"#).unwrap();
    let mut dec = AvroBatchDecoder::new(&schema, 4).unwrap();
    dec.push(&string("k-1")).unwrap();
    assert!(dec.push(&[0x03]).is_err());
    let batch = dec.flush().unwrap().unwrap();
    assert_eq!(batch.schema().field(0).name(), "value");
    assert_eq!(batch.column(0).as_string::<i32>().value(0), "k-1");
}

/// Found by the fuzzer: a decimal wider than its Arrow type passed validation, then failed
/// inside arrow-avro halfway through the row and spoiled the batch.
#[test]
fn a_too_wide_decimal_is_refused_before_it_reaches_the_batch() {
    let mut dec = AvroBatchDecoder::new(&envelope_schema(), 8).unwrap();
    dec.push(&insert(1, None, 1, 1, 100)).unwrap();
    let wide = insert_priced(2, None, 2, 2, &[0x02; 61]);
    assert!(matches!(
        dec.push(&wide),
        Err(DecodeError::Datum(DatumError::DecimalOverflow {
            len: 61,
            width: 16,
            ..
        }))
    ));
    dec.push(&insert(3, None, 3, 3, 300)).unwrap();
    assert_eq!(dec.flush().unwrap().unwrap().num_rows(), 2);
}

/// A record of temporal columns whose `source` names `connector`.
fn temporal_schema(connector: Option<&str>) -> WriterSchema {
    let t = |physical: &str, name: &str| json!({"type": physical, "connect.name": name});
    let mut fields = vec![
        json!({"name": "d", "type": t("int", "io.debezium.time.Date")}),
        json!({"name": "ms", "type": t("long", "io.debezium.time.Timestamp")}),
        json!({"name": "us", "type": t("long", "io.debezium.time.MicroTimestamp")}),
        json!({"name": "ns", "type": t("long", "io.debezium.time.NanoTimestamp")}),
        json!({"name": "t", "type": t("long", "io.debezium.time.MicroTime")}),
        json!({"name": "z", "type": t("string", "io.debezium.time.ZonedTimestamp")}),
    ];
    if let Some(c) = connector {
        fields.push(json!({"name": "source", "type": {"type": "record", "name": "Source",
            "namespace": format!("io.debezium.connector.{c}"), "fields": [{"name": "db", "type": "string"}]}}));
    }
    let schema =
        json!({"type": "record", "name": "Envelope", "namespace": "s.t", "fields": fields});
    WriterSchema::parse_text(&schema.to_string()).unwrap()
}

fn temporal_row(d: i32, ms: i64, us: i64, ns: i64, t: i64, z: &str, source: bool) -> Vec<u8> {
    let mut row = zigzag(i64::from(d));
    for v in [ms, us, ns, t] {
        row.extend(zigzag(v));
    }
    row.extend(string(z));
    if source {
        row.extend(string("db"));
    }
    row
}

fn decode_temporal(connector: Option<&str>, rows: &[Vec<u8>]) -> arrow_array::RecordBatch {
    let schema = temporal_schema(connector);
    assert_eq!(schema.connector().as_deref(), connector);
    let [one, two] = [
        AvroBatchDecoder::new(&schema, 8).unwrap(),
        AvroBatchDecoder::via_arrow_avro(&schema, 8).unwrap(),
    ]
    .map(|mut dec| {
        for r in rows {
            dec.push(r).unwrap();
        }
        dec.flush().unwrap().unwrap()
    });
    assert_eq!(one, two, "one pass and two agree");
    one
}

#[test]
fn postgresql_infinities_become_duckdbs_and_extreme_years_arrive_exact() {
    use arrow_array::types::*;
    let rows = [
        // Streamed `infinity` in every column.
        temporal_row(
            -2_147_472_692,
            9_223_372_036_825_200,
            9_223_372_036_825_200_000,
            i64::MAX,
            86_400_000_000,
            "infinity",
            true,
        ),
        // `-infinity`, the date as a snapshot reads it.
        temporal_row(
            -625_821_272,
            -9_223_372_036_832_400,
            -9_223_372_036_832_400_000,
            i64::MIN,
            0,
            "-infinity",
            true,
        ),
        // 4713 BC and far-future years.
        temporal_row(
            -2_440_550,
            0,
            -210_863_520_000_000_000,
            0,
            1,
            "-4712-01-01T00:00:00.000000Z",
            true,
        ),
        temporal_row(
            2_145_042_905,
            0,
            0,
            0,
            2,
            "+10000-01-01T00:00:00.000000Z",
            true,
        ),
    ];
    let batch = decode_temporal(Some("postgresql"), &rows);
    let d = batch
        .column_by_name("d")
        .unwrap()
        .as_primitive::<Date32Type>();
    assert_eq!(
        d.values().to_vec(),
        [i32::MAX, -i32::MAX, -2_440_550, 2_145_042_905]
    );
    for (name, first) in [("ms", 0), ("us", 0), ("ns", 0)] {
        let c = batch.column_by_name(name).unwrap();
        let v = arrow_cast::cast(c, &DataType::Int64).unwrap();
        let v = v.as_primitive::<Int64Type>();
        assert_eq!(
            (v.value(first), v.value(1)),
            (i64::MAX, -i64::MAX),
            "{name}"
        );
    }
    let z = batch
        .column_by_name("z")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(
        z.values().to_vec(),
        [
            i64::MAX,
            -i64::MAX,
            -210_863_520_000_000_000,
            253_402_300_800_000_000
        ]
    );
    assert_eq!(
        batch.schema().field_with_name("t").unwrap().data_type(),
        &DataType::Time64(TimeUnit::Microsecond)
    );
}

#[test]
fn mysql_time_is_a_span_and_other_sources_keep_their_values() {
    use arrow_array::types::*;
    let rows = [
        temporal_row(0, 0, 0, 0, -3_020_399_000_000, "2024-01-01T00:00:00Z", true),
        temporal_row(0, 0, 0, 0, 3_020_399_000_000, "2024-01-01T00:00:00Z", true),
        temporal_row(0, 0, 0, 0, -1, "2024-01-01T00:00:00Z", true),
    ];
    for connector in ["mysql", "mariadb"] {
        let batch = decode_temporal(Some(connector), &rows);
        let t = batch.column_by_name("t").unwrap();
        assert_eq!(t.data_type(), &DataType::Duration(TimeUnit::Microsecond));
        assert_eq!(
            t.as_primitive::<DurationMicrosecondType>()
                .values()
                .to_vec(),
            [-3_020_399_000_000, 3_020_399_000_000, -1]
        );
    }
    // From another named source, a sentinel is a value like any other.
    let sentinel = |source: bool| {
        temporal_row(
            -2_147_472_692,
            0,
            9_223_372_036_825_200_000,
            0,
            0,
            "infinity",
            source,
        )
    };
    let batch = decode_temporal(Some("sqlserver"), &[sentinel(true)]);
    let d = batch
        .column_by_name("d")
        .unwrap()
        .as_primitive::<Date32Type>();
    assert_eq!(d.value(0), -2_147_472_692);
    let us = batch
        .column_by_name("us")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(us.value(0), 9_223_372_036_825_200_000);
    // Naming none (a flattened record), it is PostgreSQL's infinity: no other connector can
    // send a year past 9999.
    let batch = decode_temporal(None, &[sentinel(false)]);
    let d = batch
        .column_by_name("d")
        .unwrap()
        .as_primitive::<Date32Type>();
    assert_eq!(d.value(0), i32::MAX);
    let us = batch
        .column_by_name("us")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(us.value(0), i64::MAX);
}

#[test]
fn a_span_from_no_named_connector_is_refused_not_written_as_a_time() {
    // 00:00 to 24:00 are times of day whatever the connector.
    let fine =
        [0, 1, 86_400_000_000].map(|t| temporal_row(0, 0, 0, 0, t, "2024-01-01T00:00:00Z", false));
    let batch = decode_temporal(None, &fine);
    assert_eq!(
        batch.schema().field_with_name("t").unwrap().data_type(),
        &DataType::Time64(TimeUnit::Microsecond)
    );
    // Outside a day only a MySQL TIME can be: the setting is named, on both paths.
    let schema = temporal_schema(None);
    for span in [-3_020_399_000_000, 86_400_000_001, -1] {
        for mut dec in [
            AvroBatchDecoder::new(&schema, 8).unwrap(),
            AvroBatchDecoder::via_arrow_avro(&schema, 8).unwrap(),
        ] {
            dec.push(&fine[1]).unwrap();
            dec.push(&temporal_row(
                0,
                0,
                0,
                0,
                span,
                "2024-01-01T00:00:00Z",
                false,
            ))
            .unwrap();
            match dec.flush() {
                Err(DecodeError::Connector(m)) => {
                    assert!(
                        m.contains("`t`") && m.contains("kafka.source-connector"),
                        "{m}"
                    );
                    if span == -3_020_399_000_000 {
                        assert!(m.contains("-838:59:59"), "{m}");
                    }
                }
                other => panic!("{span}: {other:?}"),
            }
        }
    }
    // Told the connector, a span is a duration.
    let mysql = Semantics::of_schema(&schema, Some("mysql"));
    assert!(mysql.times_are_spans && !mysql.connector_unknown);
    let mut dec = AvroBatchDecoder::with_semantics(&schema, 8, mysql).unwrap();
    dec.push(&temporal_row(
        0,
        0,
        0,
        0,
        -3_020_399_000_000,
        "2024-01-01T00:00:00Z",
        false,
    ))
    .unwrap();
    let batch = dec.flush().unwrap().unwrap();
    assert_eq!(
        batch.column_by_name("t").unwrap().data_type(),
        &DataType::Duration(TimeUnit::Microsecond)
    );
    // The envelope's own connector wins over the setting.
    let pg = Semantics::of_schema(&temporal_schema(Some("postgresql")), Some("mysql"));
    assert_eq!(pg, Semantics::of_connector("postgresql"));
}

#[test]
fn sql_server_zoned_timestamps_stay_their_text_with_every_digit() {
    let rows: Vec<Vec<u8>> = [
        "2020-01-01T10:00:00.1234567+05:30",
        "0001-01-01T00:00:00.0000001-14:00",
        "9999-12-31T23:59:59.9999999+14:00",
        "2018-07-13T12:23:45.456+11:00",
        "2020-01-01T10:00:00Z",
    ]
    .iter()
    .map(|z| temporal_row(0, 0, 0, 0, 0, z, true))
    .collect();
    let batch = decode_temporal(Some("sqlserver"), &rows);
    let field = batch.schema().field_with_name("z").unwrap().clone();
    assert_eq!(field.data_type(), &DataType::Utf8);
    assert_eq!(
        field.metadata().get("connect.name").map(String::as_str),
        Some("io.debezium.time.ZonedTimestamp")
    );
    let z = batch.column_by_name("z").unwrap().as_string::<i32>();
    assert_eq!(
        z.iter().flatten().collect::<Vec<_>>(),
        [
            "2020-01-01T10:00:00.1234567+05:30",
            "0001-01-01T00:00:00.0000001-14:00",
            "9999-12-31T23:59:59.9999999+14:00",
            "2018-07-13T12:23:45.456+11:00",
            "2020-01-01T10:00:00Z",
        ]
    );
    // Still checked: a value that does not parse is refused on both paths.
    let schema = temporal_schema(Some("sqlserver"));
    for mut dec in [
        AvroBatchDecoder::new(&schema, 8).unwrap(),
        AvroBatchDecoder::via_arrow_avro(&schema, 8).unwrap(),
    ] {
        for bad in [
            "2020-02-30T10:00:00.1234567+05:30",
            "2020-01-01T10:00:00.1234567890Z",
        ] {
            assert!(matches!(
                dec.push(&temporal_row(0, 0, 0, 0, 0, bad, true)),
                Err(DecodeError::Datum(DatumError::BadTimestamp { .. }))
            ));
        }
    }
    // Another connector's ZonedTimestamp is still a microsecond timestamp, and refuses 7 digits.
    let schema = temporal_schema(Some("postgresql"));
    let mut dec = AvroBatchDecoder::new(&schema, 8).unwrap();
    assert!(
        dec.push(&temporal_row(
            0,
            0,
            0,
            0,
            0,
            "2020-01-01T10:00:00.1234567Z",
            true
        ))
        .is_err()
    );
}

#[test]
fn decimals_wider_than_arrow_become_scale_and_value() {
    let schema = json!({"type": "record", "name": "R", "fields": [
        {"name": "n", "type": ["null", {"type": "bytes", "logicalType": "decimal",
            "precision": 1000, "scale": 2, "connect.name": "org.apache.kafka.connect.data.Decimal"}]},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 40, "logicalType": "decimal",
            "precision": 90, "scale": 3}}]});
    let schema = WriterSchema::parse_text(&schema.to_string()).unwrap();
    // 12345 (0x3039) and -1 in 40 bytes.
    let row = |n: Option<&[u8]>| {
        let mut r = match n {
            Some(b) => {
                let mut r = zigzag(1);
                r.extend(zigzag(b.len() as i64));
                r.extend(b);
                r
            }
            None => zigzag(0),
        };
        r.extend([0xff; 40]);
        r
    };
    let [one, two] = [
        AvroBatchDecoder::new(&schema, 8).unwrap(),
        AvroBatchDecoder::via_arrow_avro(&schema, 8).unwrap(),
    ]
    .map(|mut dec| {
        dec.push(&row(Some(&[0x30, 0x39]))).unwrap();
        dec.push(&row(None)).unwrap();
        dec.flush().unwrap().unwrap()
    });
    assert_eq!(one, two, "one pass and two agree");
    let n = one.column_by_name("n").unwrap().as_struct();
    assert_eq!(n.null_count(), 1);
    let scale = n
        .column_by_name("scale")
        .unwrap()
        .as_primitive::<arrow_array::types::Int32Type>();
    let value = n.column_by_name("value").unwrap().as_binary::<i32>();
    assert_eq!((scale.value(0), value.value(0)), (2, &[0x30, 0x39][..]));
    assert_eq!(
        one.schema()
            .field_with_name("n")
            .unwrap()
            .metadata()
            .get("connect.name")
            .map(String::as_str),
        Some("org.apache.kafka.connect.data.Decimal")
    );
    let f = one.column_by_name("f").unwrap().as_struct();
    let scale = f
        .column_by_name("scale")
        .unwrap()
        .as_primitive::<arrow_array::types::Int32Type>();
    let value = f.column_by_name("value").unwrap().as_binary::<i32>();
    assert_eq!((scale.value(1), value.value(1)), (3, &[0xff; 40][..]));
}
