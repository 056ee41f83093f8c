use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use lakesink_model::Classify;
use serde_json::json;

use super::decoder::belongs_to;
use super::*;
use crate::avro::testing::{string, zigzag};
use crate::framing::Side;
use crate::non_data::{NON_DATA_METADATA, Route, Routes};
use crate::registry::{FixedResolver, Registration};

const AVRO: Format = Format::Avro {
    payload_ids: IdKind::ContentId,
    check_artifacts: true,
};
const KEY: i64 = 1;
const ENVELOPE: i64 = 2;
const HEARTBEAT: i64 = 3;
const FLAT: i64 = 4;
const ENVELOPE_V2: i64 = 5;
const MESSAGE: i64 = 6;
const SERVER_KEY: i64 = 7;

fn framed(id: i64, datum: Vec<u8>) -> Vec<u8> {
    let mut out = vec![0];
    out.extend((id as i32).to_be_bytes());
    out.extend(datum);
    out
}

fn resolver() -> FixedResolver {
    let id = |id| SchemaRef::Id {
        kind: IdKind::ContentId,
        id,
    };
    let value = json!({"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"], "default": null}]});
    let envelope = |extra: bool| {
        let mut fields = vec![
            json!({"name": "before", "type": ["null", value.clone()], "default": null}),
            json!({"name": "after", "type": ["null", "Value"], "default": null}),
            json!({"name": "op", "type": "string"}),
            json!({"name": "ts_ms", "type": ["null", "long"], "default": null}),
        ];
        if extra {
            fields.push(json!({"name": "ts_us", "type": ["null", "long"], "default": null}));
        }
        json!({"type": "record", "name": "Envelope", "namespace": "t.public.x", "fields": fields})
            .to_string()
    };
    FixedResolver::new()
        .with(id(KEY), json!({"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}).to_string())
        .with(id(ENVELOPE), envelope(false))
        .with(id(ENVELOPE_V2), envelope(true))
        .with(id(HEARTBEAT), json!({"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
            "fields": [{"name": "ts_ms", "type": "long"}]}).to_string())
        .with(id(MESSAGE), json!({"type": "record", "name": "MessageValue", "namespace": "io.debezium.connector.postgresql",
            "fields": [{"name": "op", "type": "string"}, {"name": "ts_ms", "type": "long"}]}).to_string())
        .with(id(SERVER_KEY), json!({"type": "record", "name": "ServerNameKey", "namespace": "io.debezium.connector.common",
            "fields": [{"name": "serverName", "type": "string"}]}).to_string())
        .with(id(FLAT), json!({"type": "record", "name": "Value", "namespace": "t.public.x", "fields": [
            {"name": "id", "type": "long"}, {"name": "__deleted", "type": ["null", "string"], "default": null}]}).to_string())
}

fn key(id: i64) -> Vec<u8> {
    framed(KEY, zigzag(id))
}

fn image(id: i64, name: &str) -> Vec<u8> {
    let mut d = zigzag(1);
    d.extend(zigzag(id));
    d.extend(zigzag(1));
    d.extend(string(name));
    d
}

/// An envelope: before and after images (None: null), op, ts_ms.
fn envelope(before: Option<(i64, &str)>, after: Option<(i64, &str)>, op: &str) -> Vec<u8> {
    let mut d = Vec::new();
    for img in [before, after] {
        match img {
            Some((id, name)) => d.extend(image(id, name)),
            None => d.extend(zigzag(0)),
        }
    }
    d.extend(string(op));
    d.extend(zigzag(1));
    d.extend(zigzag(1_700_000_000_000));
    framed(ENVELOPE, d)
}

async fn push(
    dec: &mut ChangeDecoder<FixedResolver>,
    offset: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<Pushed, ChangeError> {
    dec.push(KafkaRecord {
        topic: "t.public.x",
        partition: 3,
        offset,
        timestamp: Some(1_000 + offset),
        key,
        value,
        headers: &|_: &str| None,
    })
    .await
}

/// A v2 envelope (one more field, `ts_us`); without it when `complete` is false.
fn envelope_v2(id: i64, complete: bool) -> Vec<u8> {
    let mut v2 = envelope(None, Some((id, "b")), "r");
    v2[4] = ENVELOPE_V2 as u8;
    if complete {
        v2.extend(zigzag(0));
    }
    v2
}

fn ops(batch: &ChangeBatch) -> Vec<&str> {
    batch
        .rows
        .column_by_name("__op")
        .unwrap()
        .as_string::<i32>()
        .iter()
        .map(Option::unwrap)
        .collect()
}

#[tokio::test]
async fn inserts_updates_deletes_and_tombstones_share_one_batch() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let k = key(7);
    push(
        &mut dec,
        10,
        Some(&k),
        Some(&envelope(None, Some((7, "a")), "c")),
    )
    .await
    .unwrap();
    push(
        &mut dec,
        11,
        Some(&k),
        Some(&envelope(Some((7, "a")), Some((7, "b")), "u")),
    )
    .await
    .unwrap();
    push(
        &mut dec,
        12,
        Some(&k),
        Some(&envelope(Some((7, "b")), None, "d")),
    )
    .await
    .unwrap();
    let pushed = push(&mut dec, 13, Some(&k), None).await.unwrap();
    assert!(pushed.completed.is_empty());
    let batches = dec.finish_all().unwrap();
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(
        (b.first_offset, b.last_offset, b.partition, &*b.topic),
        (10, 13, 3, "t.public.x")
    );
    assert_eq!(b.shape, ValueShape::Envelope);
    assert_eq!(ops(b), ["c", "u", "d", "d"]);
    let tomb = b.rows.column_by_name("__tombstone").unwrap().as_boolean();
    assert_eq!(
        tomb.iter().map(Option::unwrap).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    let keys = b.rows.column_by_name("key").unwrap().as_struct();
    assert_eq!(
        keys.column(0).as_primitive::<Int64Type>().values(),
        &[7, 7, 7, 7]
    );
    let after = b.rows.column_by_name("after").unwrap();
    assert_eq!(
        (after.is_null(0), after.is_null(2), after.is_null(3)),
        (false, true, true)
    );
    let names = after
        .as_struct()
        .column_by_name("name")
        .unwrap()
        .as_string::<i32>();
    assert_eq!(names.value(1), "b");
    let offsets = b
        .rows
        .column_by_name("__offset")
        .unwrap()
        .as_primitive::<Int64Type>();
    assert_eq!(offsets.values(), &[10, 11, 12, 13]);
}

#[tokio::test]
async fn a_bad_record_names_its_coordinates_and_spoils_nothing() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let k = key(1);
    push(
        &mut dec,
        0,
        Some(&k),
        Some(&envelope(None, Some((1, "a")), "c")),
    )
    .await
    .unwrap();
    let mut bad = envelope(None, Some((2, "b")), "c");
    bad.truncate(bad.len() - 3);
    let err = push(&mut dec, 1, Some(&k), Some(&bad)).await.unwrap_err();
    assert_eq!(
        (err.topic.as_str(), err.partition, err.offset, err.side),
        ("t.public.x", 3, 1, Side::Value)
    );
    assert!(
        err.to_string()
            .starts_with("t.public.x[3] offset 1, value:"),
        "{err}"
    );
    assert!(!err.retryable());
    let unknown = framed(99, zigzag(1));
    let err = push(&mut dec, 1, Some(&unknown), None).await.unwrap_err();
    assert!(
        err.to_string().contains("no schema for contentId 99"),
        "{err}"
    );
    push(
        &mut dec,
        2,
        Some(&k),
        Some(&envelope(None, Some((3, "c")), "c")),
    )
    .await
    .unwrap();
    let b = dec.finish_all().unwrap().remove(0);
    let offsets = b
        .rows
        .column_by_name("__offset")
        .unwrap()
        .as_primitive::<Int64Type>();
    assert_eq!(offsets.values(), &[0, 2]);
    let keys = b.rows.column_by_name("key").unwrap().as_struct();
    assert_eq!(keys.len(), 2);
}

#[tokio::test]
async fn a_new_writer_schema_closes_the_batch() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let k = key(1);
    push(
        &mut dec,
        0,
        Some(&k),
        Some(&envelope(None, Some((1, "a")), "c")),
    )
    .await
    .unwrap();
    let pushed = push(&mut dec, 1, Some(&k), Some(&envelope_v2(2, true)))
        .await
        .unwrap();
    assert_eq!(pushed.completed.len(), 1);
    assert_eq!(pushed.completed[0].last_offset, 0);
    let rest = dec.finish_all().unwrap();
    assert_eq!(
        rest[0].value_schema,
        Some(SchemaRef::Id {
            kind: IdKind::ContentId,
            id: ENVELOPE_V2
        })
    );
    assert!(rest[0].rows.column_by_name("ts_us").is_some());
}

#[tokio::test]
async fn heartbeats_are_skipped_not_rows() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let hb = framed(HEARTBEAT, zigzag(5));
    let pushed = push(&mut dec, 0, None, Some(&hb)).await.unwrap();
    assert_eq!(pushed.non_data, Some(NonData::Heartbeat));
    assert!(dec.finish_all().unwrap().is_empty());
}

fn message(op: &str, ts: i64) -> Vec<u8> {
    let mut d = string(op);
    d.extend(zigzag(ts));
    framed(MESSAGE, d)
}

#[tokio::test]
async fn kept_non_data_records_are_one_value_column_in_their_own_batch() {
    let mut routes = Routes::default();
    routes
        .set(NonData::Heartbeat, Route::Keep)
        .set(NonData::Message, Route::Keep);
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100).with_routes(routes);
    let k = key(1);
    push(
        &mut dec,
        0,
        Some(&k),
        Some(&envelope(None, Some((1, "a")), "c")),
    )
    .await
    .unwrap();
    // A heartbeat closes the row batch and opens its own; a tombstone joins it.
    let pushed = push(&mut dec, 1, None, Some(&framed(HEARTBEAT, zigzag(5))))
        .await
        .unwrap();
    assert_eq!(pushed.non_data, Some(NonData::Heartbeat));
    assert_eq!(pushed.completed.len(), 1);
    assert_eq!(pushed.completed[0].shape, ValueShape::Envelope);
    push(&mut dec, 2, None, Some(&framed(HEARTBEAT, zigzag(6))))
        .await
        .unwrap();
    let mut closed = push(&mut dec, 3, None, Some(&message("m", 7)))
        .await
        .unwrap()
        .completed;
    closed.extend(dec.finish_all().unwrap());
    assert_eq!(closed.len(), 2);
    let messages = closed.pop().unwrap();
    let heartbeats = closed.pop().unwrap();

    assert_eq!(heartbeats.shape, ValueShape::NonData(NonData::Heartbeat));
    assert_eq!((heartbeats.first_offset, heartbeats.last_offset), (1, 2));
    let schema = heartbeats.rows.schema();
    let value = schema.field_with_name("value").unwrap();
    assert_eq!(
        value.metadata().get(NON_DATA_METADATA).map(String::as_str),
        Some("heartbeat")
    );
    assert!(schema.field_with_name("after").is_err());
    let ts = heartbeats.rows.column_by_name("value").unwrap().as_struct();
    assert_eq!(ts.column(0).as_primitive::<Int64Type>().values(), &[5, 6]);
    // A heartbeat has no op: null, not a made-up one.
    assert_eq!(
        heartbeats.rows.column_by_name("__op").unwrap().null_count(),
        2
    );

    assert_eq!(messages.shape, ValueShape::NonData(NonData::Message));
    assert_eq!(ops(&messages), ["m"]);
}

#[tokio::test]
async fn tombstones_keyed_like_non_data_records_are_never_deletes() {
    let hb_key = framed(SERVER_KEY, string("demo"));
    for route in [Route::Skip, Route::Keep] {
        let mut routes = Routes::default();
        routes.set(NonData::Heartbeat, route);
        let mut dec = ChangeDecoder::new(resolver(), AVRO, 100).with_routes(routes);
        let pushed = push(&mut dec, 0, Some(&hb_key), None).await.unwrap();
        assert_eq!(pushed.non_data, Some(NonData::Heartbeat), "{route:?}");
        assert!(dec.finish_all().unwrap().is_empty(), "{route:?}");
    }
    let mut routes = Routes::default();
    routes.set(NonData::Heartbeat, Route::Refuse);
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100).with_routes(routes);
    let err = push(&mut dec, 4, Some(&hb_key), None).await.unwrap_err();
    assert!(
        matches!(err.kind, ChangeErrorKind::NonData(NonData::Heartbeat)),
        "{err}"
    );
    // A table's tombstone is still a delete.
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let pushed = push(&mut dec, 0, Some(&key(3)), None).await.unwrap();
    assert_eq!(pushed.non_data, None);
    let b = dec.finish_all().unwrap().remove(0);
    assert_eq!((b.shape, ops(&b)), (ValueShape::KeyOnly, vec!["d"]));
}

#[tokio::test]
async fn refused_non_data_records_are_bad_records_naming_their_place() {
    let mut routes = Routes::default();
    routes.set(NonData::Heartbeat, Route::Refuse);
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100).with_routes(routes);
    let err = push(&mut dec, 9, None, Some(&framed(HEARTBEAT, zigzag(5))))
        .await
        .unwrap_err();
    assert!(matches!(
        err.kind,
        ChangeErrorKind::NonData(NonData::Heartbeat)
    ));
    assert!(err.is_bad_record() && !err.retryable());
    let text = err.to_string();
    assert!(
        text.contains("t.public.x[3] offset 9") && text.contains("heartbeat"),
        "{text}"
    );
    // Messages are still skipped: routes are per kind.
    let pushed = push(&mut dec, 10, None, Some(&message("m", 1)))
        .await
        .unwrap();
    assert_eq!(pushed.non_data, Some(NonData::Message));
    assert!(dec.finish_all().unwrap().is_empty());
}

#[tokio::test]
async fn kafka_signals_are_recognised_in_every_format_and_routed() {
    let signal = br#"{"type":"execute-snapshot","data":{"data-collections":["public.x"]}}"#;
    for format in [AVRO, Format::ConnectJson] {
        let mut dec = ChangeDecoder::new(resolver(), format.clone(), 100);
        let pushed = push(&mut dec, 0, Some(b"demo"), Some(signal))
            .await
            .unwrap();
        assert_eq!(pushed.non_data, Some(NonData::Signal), "{format:?}");

        let mut routes = Routes::default();
        routes.set(NonData::Signal, Route::Refuse);
        let mut dec = ChangeDecoder::new(resolver(), format.clone(), 100).with_routes(routes);
        let err = push(&mut dec, 0, Some(b"demo"), Some(signal))
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind, ChangeErrorKind::NonData(NonData::Signal)),
            "{err}"
        );

        // Other undecodable JSON is still an error, not a signal.
        let mut dec = ChangeDecoder::new(resolver(), format.clone(), 100);
        let err = push(&mut dec, 0, Some(b"demo"), Some(br#"{"type":"x"}"#))
            .await
            .unwrap_err();
        assert!(!matches!(err.kind, ChangeErrorKind::NonData(_)), "{err}");
    }
}

#[tokio::test]
async fn keyless_and_flattened_records() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let flat = |id: i64, deleted: &str| {
        let mut d = zigzag(id);
        d.extend(zigzag(1));
        d.extend(string(deleted));
        framed(FLAT, d)
    };
    push(&mut dec, 0, None, Some(&flat(1, "false")))
        .await
        .unwrap();
    push(&mut dec, 1, None, Some(&flat(1, "true")))
        .await
        .unwrap();
    let b = dec.finish_all().unwrap().remove(0);
    assert_eq!(b.shape, ValueShape::Flattened);
    assert_eq!(ops(&b), ["c", "d"]);
    assert!(b.rows.column_by_name("key").unwrap().is_null(0));
    let after = b.rows.column_by_name("after").unwrap().as_struct();
    assert_eq!(
        after.column(0).as_primitive::<Int64Type>().values(),
        &[1, 1]
    );
}

#[tokio::test]
async fn full_batches_are_handed_over() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 2);
    let k = key(1);
    let v = envelope(None, Some((1, "a")), "c");
    let mut completed = Vec::new();
    for offset in 0..5 {
        completed.extend(
            push(&mut dec, offset, Some(&k), Some(&v))
                .await
                .unwrap()
                .completed,
        );
    }
    completed.extend(dec.finish_all().unwrap());
    let spans: Vec<(i64, i64)> = completed
        .iter()
        .map(|b| (b.first_offset, b.last_offset))
        .collect();
    assert_eq!(spans, [(0, 1), (2, 3), (4, 4)]);
}

#[tokio::test]
async fn a_tombstone_before_any_value_opens_a_key_only_batch() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let k = key(4);
    push(&mut dec, 0, Some(&k), None).await.unwrap();
    let pushed = push(
        &mut dec,
        1,
        Some(&k),
        Some(&envelope(None, Some((4, "x")), "c")),
    )
    .await
    .unwrap();
    assert_eq!(pushed.completed.len(), 1);
    assert_eq!(pushed.completed[0].shape, ValueShape::KeyOnly);
    assert_eq!(ops(&pushed.completed[0]), ["d"]);
}

#[tokio::test]
async fn a_record_failing_after_a_schema_change_keeps_the_closed_batch() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let k = key(1);
    push(
        &mut dec,
        0,
        Some(&k),
        Some(&envelope(None, Some((1, "a")), "c")),
    )
    .await
    .unwrap();
    // A v2 record that closes the v1 batch, then fails to decode.
    let truncated = envelope_v2(2, false);
    assert!(push(&mut dec, 1, Some(&k), Some(&truncated)).await.is_err());
    let batches = dec.finish_partition("t.public.x", 3).unwrap();
    let spans: Vec<(i64, i64)> = batches
        .iter()
        .map(|b| (b.first_offset, b.last_offset))
        .collect();
    assert_eq!(spans, [(0, 0)]);
    assert!(dec.finish_all().unwrap().is_empty());
}

/// Key ids of a batch, in row order.
fn key_ids(batch: &ChangeBatch) -> Vec<i64> {
    let keys = batch.rows.column_by_name("key").unwrap().as_struct();
    keys.column_by_name("id")
        .unwrap()
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

#[tokio::test]
async fn decoders_reused_across_batches_carry_nothing_over() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    for round in 0..3i64 {
        for i in 0..4 {
            let id = round * 10 + i;
            let offset = round * 100 + i;
            let value = envelope(None, Some((id, "a")), "c");
            push(&mut dec, offset, Some(&key(id)), Some(&value))
                .await
                .unwrap();
        }
        let batch = dec.finish_all().unwrap().remove(0);
        let want: Vec<i64> = (0..4).map(|i| round * 10 + i).collect();
        assert_eq!(key_ids(&batch), want, "round {round}");
    }
    assert_eq!(dec.spare.values().map(Vec::len).sum::<usize>(), 2);

    // A record whose key decodes and whose value fails leaves a stray key row in a batch with
    // no rows: the next batch still holds only its own rows.
    let mut bad = envelope(None, Some((50, "b")), "c");
    bad.truncate(bad.len() - 3);
    push(&mut dec, 400, Some(&key(50)), Some(&bad))
        .await
        .unwrap_err();
    assert!(dec.finish_all().unwrap().is_empty());
    let value = envelope(None, Some((51, "c")), "c");
    push(&mut dec, 401, Some(&key(51)), Some(&value))
        .await
        .unwrap();
    let batch = dec.finish_all().unwrap().remove(0);
    assert_eq!(key_ids(&batch), vec![51]);
}

/// The raw layer opens one file per Arrow schema in a segment: batches from a reused decoder
/// must carry the very schema a fresh one gives.
#[tokio::test]
async fn a_reused_decoder_gives_the_same_arrow_schema() {
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let mut schemas = Vec::new();
    for round in 0..3i64 {
        let value = envelope(None, Some((round, "a")), "c");
        push(&mut dec, round, Some(&key(round)), Some(&value))
            .await
            .unwrap();
        schemas.push(dec.finish_all().unwrap().remove(0).rows.schema());
    }
    assert_eq!(schemas[0], schemas[1]);
    assert_eq!(schemas[1], schemas[2]);
}

const SCHEMA_CHANGE: i64 = 8;

/// The reported case: the topic's records carry globalIds in their payloads, read as
/// contentIds (the default). Content 8 is another connector's `SchemaChangeValue`, while
/// globalId 8 is this topic's envelope; content 1 (the key) is this table's.
fn wrong_space() -> FixedResolver {
    let content = |id| SchemaRef::Id {
        kind: IdKind::ContentId,
        id,
    };
    let global = |id| SchemaRef::Id {
        kind: IdKind::GlobalId,
        id,
    };
    resolver()
        .with(
            content(SCHEMA_CHANGE),
            json!({"type": "record", "name": "SchemaChangeValue",
            "namespace": "io.debezium.connector.mysql",
            "fields": [{"name": "databaseName", "type": "string"}]})
            .to_string(),
        )
        .registered(content(KEY), "t.public.x-key")
        .registered(content(ENVELOPE), "t.public.x-value")
        .registered(content(SCHEMA_CHANGE), "mysql1-value")
        .registered(global(SCHEMA_CHANGE), "t.public.x-value")
}

#[tokio::test]
async fn a_schema_registered_for_another_topic_stops_instead_of_being_skipped() {
    let mut dec = ChangeDecoder::new(wrong_space(), AVRO, 100);
    // A row datum framed with an id that, as a contentId, is a schema-change schema.
    let mut value = envelope(None, Some((1, "a")), "c");
    value[4] = SCHEMA_CHANGE as u8;
    let err = push(&mut dec, 7, Some(&key(1)), Some(&value))
        .await
        .unwrap_err();
    assert!(
        matches!(&err.kind, ChangeErrorKind::Mismatch(m) if matches!(**m, Mismatch::Artifact { .. })),
        "{err}"
    );
    // Not a bad record: it stops the run even with a dead-letter topic.
    assert!(!err.is_bad_record() && !err.retryable());
    let text = err.to_string();
    for part in [
        "t.public.x[3] offset 7, value",
        "contentId 8",
        "io.debezium.connector.mysql.SchemaChangeValue",
        "mysql1-value",
        "registry.payload-ids",
        r#"as a globalId the same id 8 is t.public.x-value: set registry.payload-ids = "global-id""#,
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    assert!(dec.finish_all().unwrap().is_empty());

    // The topic's own schemas pass, and are checked once.
    let mut dec = ChangeDecoder::new(wrong_space(), AVRO, 100);
    for offset in 0..3 {
        let value = envelope(None, Some((offset, "a")), "c");
        let pushed = push(&mut dec, offset, Some(&key(offset)), Some(&value))
            .await
            .unwrap();
        assert_eq!(pushed.non_data, None);
    }
    assert_eq!(dec.finish_all().unwrap()[0].rows.num_rows(), 3);

    // Without the check (custom artifact names), the record goes where its schema says.
    let unchecked = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: false,
    };
    let mut dec = ChangeDecoder::new(wrong_space(), unchecked, 100);
    let pushed = push(&mut dec, 7, None, Some(&value)).await.unwrap();
    assert_eq!(pushed.non_data, Some(NonData::SchemaChange));
}

#[test]
fn artifacts_of_every_converter_strategy_belong_to_their_topic() {
    let at = |group: Option<&str>, artifact: &str| Registration {
        group: group.map(str::to_owned),
        artifact: artifact.to_owned(),
    };
    let topic = "demo.public.customers";
    let name = Some("demo.public.customers.Envelope");
    let fits = |side, r: &Registration| belongs_to(topic, side, name, r);
    // TopicIdStrategy / TopicNameStrategy, SimpleTopicIdStrategy.
    assert!(fits(Side::Value, &at(None, "demo.public.customers-value")));
    assert!(fits(Side::Key, &at(None, "demo.public.customers-key")));
    assert!(fits(Side::Value, &at(Some("g"), "demo.public.customers")));
    // RecordIdStrategy (namespace as group), RecordNameStrategy, TopicRecordNameStrategy.
    assert!(fits(
        Side::Value,
        &at(Some("demo.public.customers"), "Envelope")
    ));
    assert!(fits(
        Side::Value,
        &at(None, "demo.public.customers.Envelope")
    ));
    assert!(fits(
        Side::Value,
        &at(None, "demo.public.customers-demo.public.customers.Envelope")
    ));
    // A topic replicated by MirrorMaker under `<source>.<topic>`.
    let mirrored =
        |r: &Registration| belongs_to("east.demo.public.customers", Side::Value, name, r);
    assert!(mirrored(&at(None, "demo.public.customers-value")));

    // Another topic's artifacts, the other side's, another record's.
    assert!(!fits(Side::Value, &at(None, "demo.public.orders-value")));
    assert!(!fits(Side::Value, &at(None, "demo.public.customers-key")));
    assert!(!fits(Side::Key, &at(None, "demo.public.customers-value")));
    assert!(!fits(Side::Value, &at(None, "mysql1-value")));
    assert!(!fits(Side::Value, &at(Some("other"), "Envelope")));
    assert!(!fits(
        Side::Value,
        &at(None, "demo.public.customers-value2")
    ));
    assert!(!fits(Side::Value, &at(None, "customers")));
}

#[tokio::test]
async fn a_key_of_another_kind_of_record_is_a_mismatch_not_a_skip() {
    // No registrations here: the rule needs no registry.
    let mut dec = ChangeDecoder::new(resolver(), AVRO, 100);
    let hb = framed(HEARTBEAT, zigzag(5));
    let err = push(&mut dec, 4, Some(&key(1)), Some(&hb))
        .await
        .unwrap_err();
    assert!(matches!(err.kind, ChangeErrorKind::Mismatch(_)), "{err}");
    assert!(!err.is_bad_record());
    let text = err.to_string();
    assert!(
        text.contains("t.public.x[3] offset 4")
            && text.contains("contentId 3")
            && text.contains("io.debezium.connector.common.Heartbeat")
            && text.contains("registry.payload-ids"),
        "{text}"
    );
    // A row keyed like a heartbeat.
    let row = envelope(None, Some((1, "a")), "c");
    let server = framed(SERVER_KEY, string("demo"));
    let err = push(&mut dec, 5, Some(&server), Some(&row))
        .await
        .unwrap_err();
    assert!(matches!(err.kind, ChangeErrorKind::Mismatch(_)), "{err}");
    // Debezium's own pairs go through: a heartbeat keyed by ServerNameKey is skipped.
    let pushed = push(&mut dec, 6, Some(&server), Some(&hb)).await.unwrap();
    assert_eq!(pushed.non_data, Some(NonData::Heartbeat));
    assert!(dec.finish_all().unwrap().is_empty());
}

#[tokio::test]
async fn the_sync_path_takes_only_schemas_known_to_belong_to_the_records_topic() {
    let record = |topic, offset, key: &'static [u8], value: &'static [u8]| KafkaRecord {
        topic,
        partition: 3,
        offset,
        timestamp: Some(1_000 + offset),
        key: Some(key),
        value: Some(value),
        headers: &|_: &str| None,
    };
    let key: &'static [u8] = key(1).leak();
    let value: &'static [u8] = envelope(None, Some((1, "a")), "c").leak();
    let mut dec = ChangeDecoder::new(wrong_space(), AVRO, 100);
    // Nothing cached: the registry must be asked, so the future's path.
    assert!(dec.try_push(record("t.public.x", 0, key, value)).is_none());
    dec.push(record("t.public.x", 0, key, value)).await.unwrap();
    let pushed = dec.try_push(record("t.public.x", 1, key, value));
    assert_eq!(pushed.unwrap().unwrap().non_data, None);
    assert_eq!(dec.cache_stats(), CacheStats { hits: 2, misses: 2 });
    // The same schemas on a topic they are not registered for: not taken without the
    // check, which then stops the record.
    assert!(dec.try_push(record("t.public.y", 0, key, value)).is_none());
    let err = dec
        .push(record("t.public.y", 0, key, value))
        .await
        .unwrap_err();
    assert!(matches!(&err.kind, ChangeErrorKind::Mismatch(_)), "{err}");
    let batches = dec.finish_all().unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].rows.num_rows(), 2);
    assert_eq!(ops(&batches[0]), ["c", "c"]);
}

/// A resolver that takes a moment per lookup and records how many were in flight at once.
struct Counting {
    inner: FixedResolver,
    stats: std::sync::Arc<LookupStats>,
}

#[derive(Default)]
struct LookupStats {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    calls: std::sync::atomic::AtomicUsize,
}

impl Counting {
    async fn around<T>(&self, lookup: impl Future<Output = T>) -> T {
        use std::sync::atomic::Ordering::SeqCst;
        let stats = &self.stats;
        stats.calls.fetch_add(1, SeqCst);
        let now = stats.in_flight.fetch_add(1, SeqCst) + 1;
        stats.most.fetch_max(now, SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        stats.in_flight.fetch_sub(1, SeqCst);
        lookup.await
    }
}

impl crate::registry::SchemaResolver for Counting {
    async fn resolve(
        &self,
        schema: &SchemaRef,
    ) -> Result<std::sync::Arc<crate::registry::ResolvedSchema>, crate::registry::RegistryError>
    {
        self.around(self.inner.resolve(schema)).await
    }

    async fn registrations(
        &self,
        schema: &SchemaRef,
    ) -> Result<Option<Vec<Registration>>, crate::registry::RegistryError> {
        self.around(self.inner.registrations(schema)).await
    }
}

#[tokio::test]
async fn a_new_schemas_lookups_are_asked_at_once_and_only_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let stats = std::sync::Arc::new(LookupStats::default());
    let counting = Counting {
        inner: wrong_space(),
        stats: stats.clone(),
    };
    let mut dec = ChangeDecoder::new(counting, AVRO, 100);
    for offset in 0..3 {
        let (k, v) = (key(offset), envelope(None, Some((offset, "a")), "c"));
        let pushed = dec
            .push(KafkaRecord {
                topic: "t.public.x",
                partition: 3,
                offset,
                timestamp: None,
                key: Some(&k),
                value: Some(&v),
                headers: &|_: &str| None,
            })
            .await
            .unwrap();
        assert_eq!(pushed.non_data, None);
    }
    assert_eq!(dec.finish_all().unwrap()[0].rows.num_rows(), 3);
    // Both sides' schemas and both topic checks: four lookups, all in flight together, at
    // the first record; none after it.
    assert_eq!(stats.calls.load(SeqCst), 4);
    assert_eq!(stats.most.load(SeqCst), 4);
}
