use std::sync::Arc;

use super::*;
use crate::sink::TopicPartition;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    BooleanArray, Int64Array, RecordBatch, StringArray, StructArray, TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use futures::TryStreamExt;
use lakesink_config::RawConfig;
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const HOUR: i64 = 3_600_000;
const T0: i64 = 1_714_568_400_000; // 2024-05-01T13:00:00Z

fn config(extra: &str) -> RawConfig {
    let text = format!(
        "[kafka]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n[raw]\nurl = \"memory:///\"\n{extra}\n"
    );
    lakesink_config::Config::from_toml(&text, "test", Vec::new())
        .expect("config")
        .raw
        .expect("raw")
}

/// Rows `offsets`, each an insert of id = offset, with Kafka time `time(offset)`.
fn batch(offsets: std::ops::Range<i64>, time: impl Fn(i64) -> i64) -> ChangeBatch {
    let n = (offsets.end - offsets.start) as usize;
    let ids: Int64Array = offsets.clone().collect();
    let fields = Fields::from(vec![Field::new("id", DataType::Int64, true)]);
    let after = StructArray::new(fields.clone(), vec![Arc::new(ids)], None);
    let schema = Schema::new(vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new(
            "__timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("__op", DataType::Utf8, false),
        Field::new("__tombstone", DataType::Boolean, false),
        Field::new("after", DataType::Struct(fields), true),
    ]);
    let rows = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(offsets.clone().collect::<Int64Array>()),
            Arc::new(
                TimestampMillisecondArray::from(offsets.clone().map(&time).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["c"; n])),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(after),
        ],
    )
    .expect("rows");
    ChangeBatch {
        topic: Arc::from("t"),
        partition: 0,
        first_offset: offsets.start,
        last_offset: offsets.end - 1,
        key_schema: None,
        value_schema: None,
        shape: ValueShape::Envelope,
        rows,
    }
}

async fn drain(w: &mut ParquetWriter) -> Vec<Receipt> {
    let mut out = Vec::new();
    while let Some(r) = w.next_receipt().await {
        out.push(r.expect("upload"));
    }
    out
}

/// Every data file and the offsets it holds.
async fn files(store: &Arc<dyn ObjectStore>) -> Vec<(String, Vec<i64>)> {
    let metas: Vec<_> = store.list(None).try_collect().await.expect("list");
    let mut out = Vec::new();
    for m in metas {
        let key = m.location.to_string();
        if !key.ends_with(".parquet") {
            continue;
        }
        let bytes = store
            .get(&m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .expect("parquet")
            .build()
            .expect("reader");
        let mut offsets = Vec::new();
        for b in reader {
            let b = b.expect("batch");
            let col = b.column_by_name("__offset").expect("__offset");
            offsets.extend(col.as_primitive::<Int64Type>().values().iter().copied());
        }
        out.push((key, offsets));
    }
    out.sort();
    out
}

fn writer(store: &Arc<dyn ObjectStore>, extra: &str) -> ParquetWriter {
    ParquetWriter::with_store(&config(extra), store.clone(), String::new()).expect("writer")
}

#[tokio::test]
async fn flush_size_cuts_all_files_of_a_partition_at_once() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(
        &store,
        "flush-size = 4\npartitioner = \"time\"\npath-format = \"'hour'=HH\"\npartition-duration-ms = 3600000",
    );
    // Offsets alternate between two hours.
    w.write(&batch(0..10, |o| T0 + (o % 2) * HOUR), T0)
        .await
        .expect("write");
    assert_eq!(w.pending_start("t", 0), Some(0));
    let receipts = drain(&mut w).await;
    let ends: Vec<i64> = receipts.iter().map(|r| r.next_offset).collect();
    assert_eq!(ends.len(), 2);
    assert!(ends.contains(&4) && ends.contains(&8));
    // 8 and 9 are still open.
    assert_eq!(w.pending_start("t", 0), Some(8));
    let got = files(&store).await;
    assert_eq!(
        got,
        vec![
            (
                "topics/t/hour=13/t+0+0000000000.snappy.parquet".into(),
                vec![0, 2]
            ),
            (
                "topics/t/hour=13/t+0+0000000004.snappy.parquet".into(),
                vec![4, 6]
            ),
            (
                "topics/t/hour=14/t+0+0000000001.snappy.parquet".into(),
                vec![1, 3]
            ),
            (
                "topics/t/hour=14/t+0+0000000005.snappy.parquet".into(),
                vec![5, 7]
            ),
        ]
    );
}

#[tokio::test]
async fn record_time_span_and_idle_partitions_close_segments() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store, "rotate-interval-ms = 1000");
    // Offsets 0..5 at 0..400 ms, then 5.. at 1000 ms and on: the span rule cuts before 5.
    w.write(&batch(0..8, |o| T0 + o * 200), T0)
        .await
        .expect("write");
    let r = drain(&mut w).await;
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].start, r[0].next_offset), (0, 5));
    // Nothing arrives for a second of wall time: the idle rule closes 5..8.
    w.poll(T0 + 999).await.expect("poll");
    assert!(!w.uploading());
    w.poll(T0 + 1000).await.expect("poll");
    let r = drain(&mut w).await;
    assert_eq!((r[0].start, r[0].next_offset), (5, 8));
    assert_eq!(w.pending_start("t", 0), None);
}

#[tokio::test]
async fn a_restart_repeats_recorded_cuts_whatever_the_policy_says_now() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // First run: wall-clock rotation cut after 7 records; then it crashed with 7..10 open.
    let mut first = writer(&store, "rotate-schedule-interval-ms = 60000");
    first
        .write(&batch(0..7, |o| T0 + o), T0)
        .await
        .expect("write");
    first
        .write(&batch(7..10, |o| T0 + o), T0 + 60_000)
        .await
        .expect("write");
    assert_eq!(drain(&mut first).await.len(), 1);
    drop(first);
    // The offset was not committed: the second run reads from 0, with other settings.
    let mut second = writer(&store, "flush-size = 4");
    second
        .write(&batch(0..10, |o| T0 + o), T0 + 120_000)
        .await
        .expect("write");
    second.close_all(T0 + 120_000).await.expect("close");
    let ends: Vec<(i64, i64)> = drain(&mut second)
        .await
        .iter()
        .map(|r| (r.start, r.next_offset))
        .collect();
    assert!(ends.contains(&(0, 7)), "{ends:?}");
    let all: Vec<i64> = files(&store)
        .await
        .into_iter()
        .flat_map(|(_, o)| o)
        .collect();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (0..10).collect::<Vec<_>>(),
        "each record exactly once"
    );
}

#[tokio::test]
async fn memory_budget_closes_the_largest_segment_early() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store, "memory-budget-bytes = 1");
    w.write(&batch(0..3, |o| T0 + o), T0).await.expect("write");
    let r = drain(&mut w).await;
    assert_eq!((r[0].start, r[0].next_offset), (0, 3));
    assert!(!w.over_budget());
}

#[tokio::test]
async fn tombstones_are_kept_or_skipped() {
    let mut b = batch(0..3, |o| T0 + o);
    let mut cols = b.rows.columns().to_vec();
    cols[3] = Arc::new(BooleanArray::from(vec![false, true, false]));
    b.rows = RecordBatch::try_new(b.rows.schema(), cols).expect("rows");
    let file = |o: u32| format!("topics/t/partition=0/t+0+{o:010}.snappy.parquet");
    for (setting, expect) in [
        // A tombstone has a file of its own, as it would had it been decoded alone.
        ("keep", vec![(file(0), vec![0, 2]), (file(1), vec![1])]),
        ("skip", vec![(file(0), vec![0, 2])]),
    ] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut w = writer(&store, &format!("tombstones = \"{setting}\""));
        w.write(&b, T0).await.expect("write");
        w.close_all(T0).await.expect("close");
        let r = drain(&mut w).await;
        assert_eq!(r[0].next_offset, 3, "skipped rows still count as done");
        assert_eq!(files(&store).await, expect, "{setting}");
    }
}

/// `batch` where `tombstones` are key-only rows: a null `after`, `__tombstone` set.
fn with_tombstones(mut b: ChangeBatch, tombstones: &[i64]) -> ChangeBatch {
    let offsets: Vec<i64> = b
        .rows
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec();
    let is: Vec<bool> = offsets.iter().map(|o| tombstones.contains(o)).collect();
    let mut cols = b.rows.columns().to_vec();
    cols[2] = Arc::new(StringArray::from(
        is.iter()
            .map(|&t| if t { "d" } else { "c" })
            .collect::<Vec<_>>(),
    ));
    cols[3] = Arc::new(BooleanArray::from(is.clone()));
    let after = cols[4].as_struct();
    cols[4] = Arc::new(StructArray::new(
        after.fields().clone(),
        after.columns().to_vec(),
        Some(is.iter().map(|t| !t).collect::<Vec<_>>().into()),
    ));
    b.rows = RecordBatch::try_new(b.rows.schema(), cols).expect("rows");
    b
}

/// The key-only batch the decoder makes of tombstones that open no data batch.
fn tombstones_alone(offsets: std::ops::Range<i64>) -> ChangeBatch {
    let b = with_tombstones(
        batch(offsets.clone(), |o| T0 + o),
        &offsets.collect::<Vec<_>>(),
    );
    ChangeBatch {
        shape: ValueShape::KeyOnly,
        rows: b.rows.project(&[0, 1, 2, 3]).expect("project"),
        ..b
    }
}

/// Every object's key and bytes.
async fn objects(store: &Arc<dyn ObjectStore>) -> Vec<(String, bytes::Bytes)> {
    let metas: Vec<_> = store.list(None).try_collect().await.expect("list");
    let mut out = Vec::new();
    for m in metas {
        let bytes = store.get(&m.location).await.expect("get").bytes().await;
        out.push((m.location.to_string(), bytes.expect("bytes")));
    }
    out.sort();
    out
}

#[tokio::test]
async fn the_same_records_batched_otherwise_make_the_same_files() {
    // One run: a tombstone joins the batch of the delete before it. Another: it arrives
    // after that batch was handed over and is decoded alone, as after a restart.
    let joined = [with_tombstones(batch(0..6, |o| T0 + o), &[3])];
    let apart = [
        with_tombstones(batch(0..3, |o| T0 + o), &[]),
        tombstones_alone(3..4),
        with_tombstones(batch(4..6, |o| T0 + o), &[]),
    ];
    let mut runs = Vec::new();
    for batches in [&joined[..], &apart[..]] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut w = writer(&store, "flush-size = 100");
        for b in batches {
            w.write(b, T0).await.expect("write");
        }
        w.close_all(T0).await.expect("close");
        drain(&mut w).await;
        let file = |o: u32| format!("topics/t/partition=0/t+0+{o:010}.snappy.parquet");
        assert_eq!(
            files(&store).await,
            vec![(file(0), vec![0, 1, 2, 4, 5]), (file(3), vec![3])]
        );
        runs.push(objects(&store).await);
    }
    assert_eq!(
        runs[0], runs[1],
        "the same keys, the same bytes, the same marker"
    );
}

#[tokio::test]
async fn markers_list_the_files_of_each_segment() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store, "flush-size = 5");
    w.write(&batch(0..5, |o| T0 + o), T0).await.expect("write");
    drain(&mut w).await;
    let m = marker::read(&store, &marker::key("_lakesink/segments", "", "t", 0, 0))
        .await
        .expect("read")
        .expect("marker");
    assert_eq!((m.start, m.last, m.rows), (0, 4, 5));
    assert_eq!(
        m.files,
        vec!["topics/t/partition=0/t+0+0000000000.snappy.parquet"]
    );
}

/// `batch` with a second `after` field: the next version of the writer schema.
fn batch_v2(offsets: std::ops::Range<i64>) -> ChangeBatch {
    let mut b = batch(offsets.clone(), |o| T0 + o);
    let n = b.rows.num_rows();
    let fields = Fields::from(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("note", DataType::Utf8, true),
    ]);
    let after = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(offsets.collect::<Int64Array>()),
            Arc::new(StringArray::from(vec!["v2"; n])),
        ],
        None,
    );
    let mut schema: Vec<Field> = b
        .rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    schema[4] = Field::new("after", DataType::Struct(fields), true);
    let mut cols = b.rows.columns().to_vec();
    cols[4] = Arc::new(after);
    b.rows = RecordBatch::try_new(Arc::new(Schema::new(schema)), cols).expect("rows");
    b
}

#[tokio::test]
async fn interleaved_schema_versions_share_one_file_per_version() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store, "flush-size = 100");
    w.write(&batch(0..3, |o| T0 + o), T0).await.expect("write");
    w.write(&batch_v2(3..6), T0).await.expect("write");
    w.write(&batch(6..9, |o| T0 + o), T0).await.expect("write");
    w.write(&batch_v2(9..12), T0).await.expect("write");
    w.close_all(T0).await.expect("close");
    let r = drain(&mut w).await;
    assert_eq!(
        (r.len(), r[0].files),
        (1, 2),
        "one segment, one file per version"
    );
    assert_eq!(
        files(&store).await,
        vec![
            (
                "topics/t/partition=0/t+0+0000000000.snappy.parquet".into(),
                vec![0, 1, 2, 6, 7, 8]
            ),
            (
                "topics/t/partition=0/t+0+0000000003.snappy.parquet".into(),
                vec![3, 4, 5, 9, 10, 11]
            ),
        ]
    );
}

#[tokio::test]
async fn letting_go_returns_each_partitions_first_offset_not_durable() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store, "flush-size = 4");
    w.write(&batch(0..6, |o| T0 + o), T0).await.expect("write");
    // 0..4 sealed and uploading (no receipt taken yet), 4..6 open.
    assert!(w.uploading());
    assert_eq!(w.pending_start("t", 0), Some(0));
    let points = w.abandon_all();
    assert_eq!(points, vec![(TopicPartition::new("t", 0), 0)]);
    assert_eq!(w.memory(), 0);
    assert!(!w.uploading());
    assert_eq!(w.pending_start("t", 0), None);
    assert!(w.abandon_all().is_empty(), "nothing held any more");
    w.probe().await.expect("the store takes writes");
    // Read again from 0, the same cuts follow.
    w.write(&batch(0..6, |o| T0 + o), T0).await.expect("write");
    let r = drain(&mut w).await;
    assert_eq!((r[0].start, r[0].next_offset), (0, 4));
}

/// parquet-java's `VersionParser` pattern, which must match the whole `created_by` for readers
/// on the JVM to trust the files' statistics.
#[test]
fn created_by_is_in_the_form_parquet_java_parses() {
    let java =
        regex::Regex::new(r"^(.*?)\s+version\s*(?:([^(]*?)\s*(?:\(\s*build\s*([^)]*?)\s*\))?)?$")
            .unwrap();
    let created_by = super::created_by();
    let parts = java.captures(&created_by).expect(&created_by);
    assert_eq!(&parts[1], "lakesink");
    assert_eq!(&parts[2], env!("CARGO_PKG_VERSION"));
}

/// Unique values outgrow the dictionary: the column chunk's later pages are plain encoded,
/// and every value reads back, while a column of few values stays a dictionary.
#[test]
fn a_column_past_the_dictionary_limit_falls_back_to_plain_and_reads_back_whole() {
    use parquet::basic::{Encoding, PageType};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let n = 100_000i64;
    let ids: Int64Array = (0..n).map(|i| i * 7919).collect();
    let names: StringArray = (0..n).map(|i| Some(format!("customer-{i:08}"))).collect();
    let status: StringArray = (0..n)
        .map(|i| Some(["new", "paid", "shipped"][(i % 3) as usize]))
        .collect();
    let rows = RecordBatch::try_from_iter([
        ("id", Arc::new(ids) as arrow_array::ArrayRef),
        ("name", Arc::new(names) as _),
        ("status", Arc::new(status) as _),
    ])
    .unwrap();
    let mut out = Vec::new();
    let props = writer_properties(lakesink_config::Codec::Snappy, 128 * 1024);
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, rows.schema(), Some(props)).unwrap();
    w.write(&rows).unwrap();
    w.close().unwrap();

    let bytes = bytes::Bytes::from(out);
    let file = SerializedFileReader::new(bytes.clone()).unwrap();
    // The encodings of a column chunk's data pages, read from the page headers.
    let encodings = |c: usize| -> Vec<Encoding> {
        let pages = file
            .get_row_group(0)
            .unwrap()
            .get_column_page_reader(c)
            .unwrap();
        pages
            .map(|p| p.unwrap())
            .filter(|p| p.page_type() != PageType::DICTIONARY_PAGE)
            .map(|p| p.encoding())
            .collect()
    };
    for c in [0, 1] {
        let e = encodings(c);
        assert!(
            e.contains(&Encoding::RLE_DICTIONARY) && e.contains(&Encoding::PLAIN),
            "column {c}: dictionary pages, then plain ones: {e:?}"
        );
    }
    assert!(
        !encodings(2).contains(&Encoding::PLAIN),
        "three values stay a dictionary"
    );
    let read: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap()
        .build()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        arrow_select::concat::concat_batches(&rows.schema(), &read).unwrap(),
        rows
    );
}
