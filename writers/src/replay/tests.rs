//! Change batches through the real raw-layer writer into an in-memory store, read back by
//! replay: the same batches (types, `connect.*` metadata, rows), planned identically; and the
//! raw layer's problems found and named.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use lakesink_config::{RawConfig, ReplicaConfig};
use lakesink_schema_registry::{
    ChangeBatch, ChangeDecoder, FixedResolver, Format, KafkaRecord, NonData,
};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{Value, json};

use super::*;
use crate::parquet::ParquetWriter;
use crate::postgres::describe_plan;
use crate::sink::TopicPartition;

const TOPIC: &str = "t.public.items";
const T0: i64 = 1_714_568_400_000; // 2024-05-01T13:00:00Z
const STEP: i64 = 20 * 60_000; // records 20 minutes apart: segments span hour directories

fn raw_config(extra: &str) -> RawConfig {
    let text = format!(
        "[kafka]\nbrokers = \"b:1\"\ntopics = [\"{TOPIC}\"]\n[raw]\nurl = \"memory:///\"\n\
         partitioner = \"time\"\npath-format = \"'dt'=yyyy-MM-dd/'hour'=HH\"\n\
         partition-duration-ms = 3600000\nflush-size = 7\n{extra}\n"
    );
    lakesink_config::Config::from_toml(&text, "test", Vec::new())
        .expect("config")
        .raw
        .expect("raw")
}

fn field(kind: &str, name: &str, optional: bool) -> Value {
    json!({"type": kind, "field": name, "optional": optional})
}

fn named(kind: &str, name: &str, connect: &str) -> Value {
    json!({"type": kind, "field": name, "optional": true, "name": connect, "version": 1})
}

/// A Debezium row schema with many of its types; `v2` adds a column.
fn row_schema(field_name: &str, v2: bool) -> Value {
    let mut fields = vec![
        field("int64", "id", false),
        field("string", "name", true),
        json!({"type": "bytes", "field": "price", "optional": true,
            "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
        named("int64", "created", "io.debezium.time.MicroTimestamp"),
        named("string", "updated", "io.debezium.time.ZonedTimestamp"),
        named("string", "uid", "io.debezium.data.Uuid"),
        named("string", "doc", "io.debezium.data.Json"),
        named("int32", "day", "io.debezium.time.Date"),
        json!({"type": "array", "field": "tags", "optional": true,
            "items": {"type": "string", "optional": true}}),
        field("bytes", "blob", true),
        field("float64", "score", true),
        field("int16", "small", true),
        field("boolean", "flag", true),
        json!({"type": "struct", "field": "vsd", "optional": true,
            "name": "io.debezium.data.VariableScaleDecimal", "version": 1, "fields": [
                field("int32", "scale", false), field("bytes", "value", false)]}),
    ];
    if v2 {
        fields.push(field("string", "extra", true));
    }
    json!({"type": "struct", "name": "t.public.items.Value", "optional": true,
        "field": field_name, "fields": fields})
}

fn envelope_schema(v2: bool) -> Value {
    json!({"type": "struct", "name": "t.public.items.Envelope", "optional": false, "fields": [
        row_schema("before", v2),
        row_schema("after", v2),
        {"type": "struct", "name": "io.debezium.connector.postgresql.Source", "field": "source",
         "optional": false, "fields": [
            field("string", "db", false), field("string", "schema", false),
            field("string", "table", false), field("int64", "ts_ms", false)]},
        field("string", "op", false),
        field("int64", "ts_ms", true),
    ]})
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn row(id: i64, version: i64, v2: bool) -> Value {
    let cents: i64 = 100 + id * 7 + version;
    let mut r = json!({
        "id": id, "name": format!("item {id} v{version}"), "price": b64(&cents.to_be_bytes()),
        "created": 1_700_000_000_000_000_i64 + id, "updated": "2024-05-01T13:00:00.123456Z",
        "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "doc": "{\"a\": [1, 2]}",
        "day": 19_844 + id, "tags": ["x", null, format!("v{version}")],
        "blob": b64(&[0, 0xff, id as u8]), "score": 1.5 * id as f64, "small": (id % 100) as i16,
        "flag": id % 2 == 0, "vsd": {"scale": 3, "value": b64(&(id * 1001).to_be_bytes())},
    });
    if v2 {
        r["extra"] = json!(format!("e{id}"));
    }
    r
}

/// The event of offset `i`: inserts, then updates and deletes (with tombstones) of earlier
/// rows; odd offsets use the second schema version, so versions interleave within segments.
fn event(i: i64) -> (Vec<u8>, Option<Vec<u8>>) {
    let v2 = i % 2 == 1;
    let (id, op) = match i % 6 {
        3 => (i - 3, "u"),
        5 => (i - 4, "d"),
        _ => (i, if i < 6 { "r" } else { "c" }),
    };
    let key = json!({"schema": {"type": "struct", "name": "t.public.items.Key", "optional": false,
        "fields": [field("int64", "id", false)]}, "payload": {"id": id}});
    let (before, after) = match op {
        "u" => (row(id, 1, v2), row(id, 2, v2)),
        "d" => (row(id, 2, v2), Value::Null),
        _ => (Value::Null, row(id, 1, v2)),
    };
    let value = json!({"schema": envelope_schema(v2), "payload": {
        "before": before, "after": after,
        "source": {"db": "src", "schema": "public", "table": "items", "ts_ms": T0 + i},
        "op": op, "ts_ms": T0 + i + 5}});
    (
        key.to_string().into_bytes(),
        Some(value.to_string().into_bytes()),
    )
}

/// A record of partition 0 at `offset`, its time `STEP` after the one before.
fn record<'a>(
    topic: &'a str,
    offset: i64,
    key: &'a [u8],
    value: Option<&'a [u8]>,
) -> KafkaRecord<'a> {
    KafkaRecord {
        topic,
        partition: 0,
        offset,
        timestamp: Some(T0 + offset * STEP),
        key: Some(key),
        value,
        headers: &|_: &str| None,
    }
}

/// Decodes `count` records as the live path does (batches handed over every 5 records), a
/// tombstone after each delete.
async fn live_batches(count: i64) -> Vec<ChangeBatch> {
    let mut dec = ChangeDecoder::new(FixedResolver::new(), Format::ConnectJson, 4096);
    let mut out = Vec::new();
    let mut offset = 0;
    for i in 0..count {
        let (key, value) = event(i);
        let mut records = vec![(key.clone(), value)];
        if i % 6 == 5 {
            records.push((key, None));
        }
        for (key, value) in records {
            let pushed = dec
                .push(record(TOPIC, offset, &key, value.as_deref()))
                .await
                .expect("decode");
            out.extend(pushed.completed);
            offset += 1;
            if offset % 5 == 0 {
                out.extend(dec.finish_all().expect("finish"));
            }
        }
    }
    out.extend(dec.finish_all().expect("finish"));
    out
}

/// Writes `batches` with the raw-layer writer into a new in-memory store.
async fn write_raw(config: &RawConfig, batches: &[ChangeBatch]) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = ParquetWriter::with_store(config, store.clone(), String::new()).expect("writer");
    for b in batches {
        w.write(b, T0).await.expect("write");
        while let Some(r) = w.next_receipt().await {
            r.expect("upload");
        }
    }
    w.close_all(T0).await.expect("close");
    while let Some(r) = w.next_receipt().await {
        r.expect("upload");
    }
    store
}

/// Every batch of every planned segment, read back.
async fn read_all(raw: &RawLayer, plan: &Plan) -> Result<Vec<ChangeBatch>, Problem> {
    let mut out = Vec::new();
    for part in &plan.partitions {
        let mut cursor = Cursor::new(part);
        for seg in &part.segments {
            out.extend(
                read_segment(&raw.store, part, seg, &mut cursor, false)
                    .await?
                    .batches,
            );
        }
    }
    Ok(out)
}

fn offsets_and_ops(batches: &[ChangeBatch]) -> Vec<(i64, String, bool)> {
    batches
        .iter()
        .flat_map(|b| {
            let o = b.rows.column_by_name("__offset").expect("offset");
            let op = b.rows.column_by_name("__op").expect("op");
            let t = b.rows.column_by_name("__tombstone").expect("tombstone");
            let (o, op, t) = (
                o.as_primitive::<Int64Type>().clone(),
                op.as_string::<i32>().clone(),
                t.as_boolean().clone(),
            );
            (0..o.len())
                .map(|i| (o.value(i), op.value(i).to_owned(), t.value(i)))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn replica() -> ReplicaConfig {
    let mut c = ReplicaConfig::new("postgres://u@h/replica");
    c.table_name_format = "${source.schema}.${source.table}".into();
    c.dots_to_underscores = false;
    c
}

#[tokio::test]
async fn batches_read_back_from_parquet_plan_like_the_live_ones() {
    let live = live_batches(40).await;
    let config = raw_config("");
    let store = write_raw(&config, &live).await;
    let raw = RawLayer::with_store(&config, store, String::new()).expect("raw layer");
    let plan = plan(&raw, &Selection::default(), &HashMap::new())
        .await
        .expect("plan");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert!(plan.segments() >= 6, "{} segments", plan.segments());
    assert!(
        plan.files() > plan.segments(),
        "segments of several files (hours, schema versions)"
    );
    let replayed = read_all(&raw, &plan).await.expect("read");

    assert_eq!(offsets_and_ops(&replayed), offsets_and_ops(&live));
    // Every schema read back is one the decoder made, field metadata included.
    for b in &replayed {
        assert!(
            live.iter()
                .any(|l| l.rows.schema().fields() == b.rows.schema().fields()),
            "schema not from the decoder: {:#?}",
            b.rows.schema()
        );
        assert!(live.iter().any(|l| l.shape == b.shape));
    }
    let want = describe_plan(&replica(), &live).expect("live plan");
    let got = describe_plan(&replica(), &replayed).expect("replayed plan");
    assert!(
        want.iter().any(|l| l.contains("table public.items"))
            && want.iter().any(|l| l.contains(" upsert "))
            && want.iter().any(|l| l.ends_with(" delete")),
        "{want:#?}"
    );
    assert!(
        want[0].contains("numeric(10,2)")
            && want[0].contains("uuid")
            && want[0].contains("doc json ")
            && want[0].contains("timestamptz"),
        "{}",
        want[0]
    );
    assert_eq!(got, want);
}

#[tokio::test]
async fn selection_cuts_by_offsets_time_and_the_replica_offset() {
    let live = live_batches(30).await;
    let config = raw_config("");
    let store = write_raw(&config, &live).await;
    let raw = RawLayer::with_store(&config, store, String::new()).expect("raw layer");
    let all = offsets_and_ops(&live);
    let read = |sel: Selection, stored: HashMap<TopicPartition, i64>| {
        let raw = &raw;
        async move {
            let plan = plan(raw, &sel, &stored).await.expect("plan");
            let got = read_all(raw, &plan).await.expect("read");
            (plan, offsets_and_ops(&got))
        }
    };
    // Offsets.
    let sel = Selection {
        offsets: vec!["t.public.items:0:10-20".parse().expect("range")],
        ..Selection::default()
    };
    let (_, got) = read(sel, HashMap::new()).await;
    assert_eq!(got, all[10..=20].to_vec());
    // The replica's stored offset.
    let (_, got) = read(
        Selection::default(),
        HashMap::from([(TopicPartition::new(TOPIC, 0), 12)]),
    )
    .await;
    assert_eq!(got, all[12..].to_vec());
    // Time: offset i is at T0 + i * STEP; from 15 to before 25. Segments wholly before are
    // not even read (their hour directories say so).
    let sel = Selection {
        from_ms: Some(T0 + 15 * STEP),
        to_ms: Some(T0 + 25 * STEP),
        ..Selection::default()
    };
    let (plan, got) = read(sel, HashMap::new()).await;
    assert_eq!(got, all[15..25].to_vec());
    assert!(plan.partitions[0].segments[0].start > 0, "pruned by path");
    // Other topics.
    let sel = Selection {
        topics: TopicFilter::List(vec!["other".into()]),
        ..Selection::default()
    };
    let (plan, got) = read(sel, HashMap::new()).await;
    assert!(got.is_empty() && plan.partitions.is_empty());
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("other") && n.contains("nothing"))
    );
}

async fn markers(store: &Arc<dyn ObjectStore>) -> Vec<crate::parquet::Marker> {
    use futures::TryStreamExt;
    let metas: Vec<_> = store
        .list(Some(&Path::from("_lakesink/segments")))
        .try_collect()
        .await
        .expect("list");
    let mut out = Vec::new();
    for m in metas {
        let bytes = store
            .get(&m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        out.push(serde_json::from_slice::<crate::parquet::Marker>(&bytes).expect("marker"));
    }
    out.sort_by_key(|m| m.start);
    out
}

#[tokio::test]
async fn missing_files_gaps_and_corrupt_files_are_named() {
    let live = live_batches(40).await;
    let config = raw_config("");
    let store = write_raw(&config, &live).await;
    let ms = markers(&store).await;
    assert!(ms.len() >= 5);
    let raw = RawLayer::with_store(&config, store.clone(), String::new()).expect("raw layer");
    let problems = |plan: &Plan| plan.problems.clone();

    // A file of a middle segment deleted: named with its segment's offsets.
    let gone = ms[1].files[0].clone();
    let bytes = store
        .get(&Path::from(gone.as_str()))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    store
        .delete(&Path::from(gone.as_str()))
        .await
        .expect("delete");
    let p = plan(&raw, &Selection::default(), &HashMap::new())
        .await
        .expect("plan");
    assert_eq!(problems(&p).len(), 1, "{:?}", p.problems);
    let problem = &p.problems[0];
    assert_eq!(problem.kind, ProblemKind::MissingFile);
    assert_eq!(problem.key.as_deref(), Some(gone.as_str()));
    assert_eq!(problem.offsets, Some((ms[1].start, ms[1].last)));
    assert!(problem.to_string().contains(&gone), "{problem}");

    // Corrupt (truncated) instead: found when read, named the same way.
    store
        .put(
            &Path::from(gone.as_str()),
            bytes.slice(..bytes.len() / 2).into(),
        )
        .await
        .expect("put");
    let p = plan(&raw, &Selection::default(), &HashMap::new())
        .await
        .expect("plan");
    assert!(p.problems.is_empty());
    let err = read_all(&raw, &p).await.expect_err("corrupt file");
    assert_eq!(err.kind, ProblemKind::CorruptFile);
    assert_eq!(err.key.as_deref(), Some(gone.as_str()));
    assert_eq!(err.offsets, Some((ms[1].start, ms[1].last)));
    // Skipped when asked to go on: the other files of the segment are read.
    let part = &p.partitions[0];
    let mut cursor = Cursor::new(part);
    let mut skipped = Vec::new();
    for seg in &part.segments {
        let r = read_segment(&raw.store, part, seg, &mut cursor, true)
            .await
            .expect("skips");
        skipped.extend(r.problems);
    }
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].key.as_deref(), Some(gone.as_str()));
    store
        .put(
            &Path::from(gone.as_str()),
            Bytes::from(bytes.to_vec()).into(),
        )
        .await
        .expect("put");

    // A marker (and its files) missing from the chain: an offset gap.
    let marker_key = crate::parquet::marker::key("_lakesink/segments", "", TOPIC, 0, ms[2].start);
    store.delete(&marker_key).await.expect("delete");
    let p = plan(&raw, &Selection::default(), &HashMap::new())
        .await
        .expect("plan");
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
    assert_eq!(p.problems[0].kind, ProblemKind::OffsetGap);
    assert_eq!(p.problems[0].offsets, Some((ms[2].start, ms[2].last)));

    // The last segment's files not uploaded yet: replay stops before it, no problem.
    let last = ms.last().expect("last");
    for f in &last.files {
        store.delete(&Path::from(f.as_str())).await.expect("delete");
    }
    let sel = Selection {
        offsets: vec![
            format!("{TOPIC}:0:{}-", ms[3].start)
                .parse()
                .expect("range"),
        ],
        ..Selection::default()
    };
    let p = plan(&raw, &sel, &HashMap::new()).await.expect("plan");
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert_eq!(
        p.partitions[0].segments.last().expect("seg").last,
        ms[ms.len() - 2].last
    );
    assert!(
        p.notes.iter().any(|n| n.contains("not complete")),
        "{:?}",
        p.notes
    );

    // The replica ahead of a gap before the raw layer's first segment.
    let sel = Selection {
        offsets: vec![
            format!("{TOPIC}:0:{}-", ms[3].start)
                .parse()
                .expect("range"),
        ],
        ..Selection::default()
    };
    let p = plan(
        &raw,
        &sel,
        &HashMap::from([(TopicPartition::new(TOPIC, 0), 0)]),
    )
    .await
    .expect("plan");
    assert!(
        p.problems.is_empty(),
        "an explicit lower bound is not a gap"
    );
}

#[test]
fn flattened_content_is_refused() {
    let config = raw_config("content = \"flattened\"");
    let err = RawLayer::with_store(&config, Arc::new(InMemory::new()), String::new())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("flattened"), "{err}");
}

#[tokio::test]
async fn non_data_records_kept_in_the_raw_layer_are_passed_over_by_replay() {
    const HEARTBEATS: &str = "__debezium-heartbeat.t";
    let mut routes = lakesink_schema_registry::Routes::default();
    routes.set(NonData::Heartbeat, lakesink_schema_registry::Route::Keep);
    let mut dec =
        ChangeDecoder::new(FixedResolver::new(), Format::ConnectJson, 4096).with_routes(routes);
    let key = json!({"schema": {"type": "struct", "name": "io.debezium.connector.common.ServerNameKey",
        "fields": [field("string", "serverName", false)]}, "payload": {"serverName": "t"}});
    let value = |ts: i64| {
        json!({"schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat",
            "fields": [field("int64", "ts_ms", false)]}, "payload": {"ts_ms": ts}})
    };
    let mut batches = live_batches(12).await;
    for offset in 0..3 {
        let (k, v) = (key.to_string(), value(T0 + offset).to_string());
        let pushed = dec
            .push(record(HEARTBEATS, offset, k.as_bytes(), Some(v.as_bytes())))
            .await
            .expect("decode");
        assert_eq!(pushed.non_data, Some(NonData::Heartbeat));
        batches.extend(pushed.completed);
    }
    batches.extend(dec.finish_all().expect("finish"));
    let config = raw_config("");
    let store = write_raw(&config, &batches).await;

    // The raw layer holds the heartbeats as written, marked as what they are.
    let files: Vec<_> = store
        .list(Some(&Path::from(format!("topics/{HEARTBEATS}"))))
        .map(|m| m.expect("list").location)
        .collect::<Vec<_>>()
        .await;
    assert!(!files.is_empty(), "no heartbeat files");
    let mut ts = Vec::new();
    for f in &files {
        let bytes = store
            .get(f)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .expect("parquet");
        let schema = reader.schema().clone();
        let value = schema.field_with_name("value").expect("value column");
        assert_eq!(
            value
                .metadata()
                .get(lakesink_schema_registry::NON_DATA_METADATA),
            Some(&"heartbeat".to_owned())
        );
        for b in reader.build().expect("reader") {
            let b = b.expect("batch");
            let v = b.column_by_name("value").expect("value").as_struct();
            ts.extend(
                v.column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .copied(),
            );
        }
    }
    ts.sort_unstable();
    assert_eq!(ts, [T0, T0 + 1, T0 + 2]);

    // Replay of every topic applies the rows and passes over the heartbeats, no problem.
    let raw = RawLayer::with_store(&config, store, String::new()).expect("raw layer");
    let sel = Selection {
        topics: TopicFilter::All,
        ..Selection::default()
    };
    let plan = plan(&raw, &sel, &HashMap::new()).await.expect("plan");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert!(plan.partitions.iter().any(|p| p.topic == HEARTBEATS));
    let replayed = read_all(&raw, &plan).await.expect("read");
    assert!(replayed.iter().all(|b| &*b.topic == TOPIC));
    let rows: Vec<_> = batches
        .iter()
        .filter(|b| &*b.topic == TOPIC)
        .cloned()
        .collect();
    assert_eq!(offsets_and_ops(&replayed), offsets_and_ops(&rows));
}

#[tokio::test]
async fn keyless_tables_are_written_without_a_key_and_replayed_with_a_null_one() {
    let mut dec = ChangeDecoder::new(FixedResolver::new(), Format::ConnectJson, 4096);
    let mut live = Vec::new();
    for i in 0..12 {
        let (_, value) = event(i);
        let mut r = record(TOPIC, i, &[], value.as_deref());
        r.key = None;
        live.extend(dec.push(r).await.expect("decode").completed);
    }
    live.extend(dec.finish_all().expect("finish"));
    assert!(live.iter().all(|b| {
        matches!(b.rows.column_by_name("key").unwrap().data_type(), DataType::Struct(f) if f.is_empty())
    }));
    let config = raw_config("");
    let store = write_raw(&config, &live).await;
    let raw = RawLayer::with_store(&config, store, String::new()).expect("raw layer");
    let plan = plan(&raw, &Selection::default(), &HashMap::new())
        .await
        .expect("plan");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let replayed = read_all(&raw, &plan).await.expect("read");
    assert_eq!(offsets_and_ops(&replayed), offsets_and_ops(&live));
    for b in &replayed {
        assert!(
            live.iter()
                .any(|l| l.rows.schema().fields() == b.rows.schema().fields()),
            "{:#?}",
            b.rows.schema()
        );
        assert_eq!(
            b.rows.column_by_name("key").unwrap().null_count(),
            b.rows.num_rows()
        );
    }
}
