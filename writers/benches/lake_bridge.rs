//! The bridging measurement behind the lake's data files (docs/lake.md#data-files-and-the-iceberg-crate):
//! rows per second, on one core, of
//!
//! - **lakesink**: `conform` to the table's types and field ids, lakesink's Parquet writer
//!   (arrow/parquet 60), the manifest entry from the footer;
//! - **IPC hand-off**: the batch crossing from arrow 60 to the `iceberg` crate's arrow 58 as an
//!   Arrow IPC stream (written by arrow-ipc 60, read by arrow-ipc 58);
//! - **iceberg writer**: the `iceberg` crate's `ParquetWriter` (parquet 58) on the arrow 58
//!   batch, into its in-memory file I/O, closed into its `DataFile`;
//!
//! and the alternative in full (hand-off + the crate's writer) against lakesink's path. The
//! rows are the raw-layer bench's 10-column table, flattened, in 8,192-row batches; both
//! writers use snappy and the same row group size. Prints figures; asserts nothing.
//!
//! `cargo bench -p lakesink-writers --bench lake_bridge` (ROWS=1000000 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{
    BooleanBuilder, Decimal128Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use iceberg::io::FileIO;
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
use lakesink_config::Codec;
use lakesink_writers::lake::files::{OpenFile, data_file, properties};
use lakesink_writers::lake::types::{conform, iceberg_schema};

const BATCH: usize = 8_192;

/// The bench topic's row image, as the flattened content has it.
fn batch(first: i64) -> RecordBatch {
    let n = BATCH;
    let (mut id, mut customer, mut quantity) = (
        Int64Builder::with_capacity(n),
        Int64Builder::with_capacity(n),
        Int32Builder::with_capacity(n),
    );
    let mut price = Decimal128Builder::with_capacity(n)
        .with_precision_and_scale(10, 2)
        .expect("decimal");
    let (mut sku, mut status, mut note) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let mut active = BooleanBuilder::with_capacity(n);
    let mut created = TimestampMicrosecondBuilder::with_capacity(n);
    let mut updated = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    for i in 0..n as i64 {
        let k = first + i;
        id.append_value(k);
        customer.append_value(k % 1000);
        sku.append_value(format!("SKU-{:06}", k % 100_000));
        quantity.append_value(i32::try_from(k % 50).expect("small") + 1);
        price.append_value(i128::from(100 + (k * 7) % 100_000));
        status.append_value(["new", "paid", "shipped", "delivered"][(k % 4) as usize]);
        if k % 3 == 0 {
            note.append_null();
        } else {
            note.append_value("leave at the door");
        }
        active.append_value(k % 2 == 0);
        created.append_value(1_714_568_400_000_000 + k * 1000 + 123);
        updated.append_value(1_714_568_400_123_456);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(id.finish())),
        ("customer_id", Arc::new(customer.finish())),
        ("sku", Arc::new(sku.finish())),
        ("quantity", Arc::new(quantity.finish())),
        ("price", Arc::new(price.finish())),
        ("status", Arc::new(status.finish())),
        ("note", Arc::new(note.finish())),
        ("active", Arc::new(active.finish())),
        ("created_at", Arc::new(created.finish())),
        ("updated_at", Arc::new(updated.finish())),
    ];
    let schema = Schema::new(
        columns
            .iter()
            .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(
        Arc::new(schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .expect("batch")
}

/// Arrow 60 to arrow 58 through an IPC stream.
fn to_arrow58(batch: &RecordBatch) -> arrow_array58::RecordBatch {
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())
            .expect("ipc writer");
        w.write(batch).expect("ipc write");
        w.finish().expect("ipc finish");
    }
    let mut r = arrow_ipc58::reader::StreamReader::try_new(std::io::Cursor::new(buf), None)
        .expect("ipc reader");
    r.next().expect("a batch").expect("ipc read")
}

fn report(name: &str, rows: usize, took: Duration) -> f64 {
    let rate = rows as f64 / took.as_secs_f64();
    println!(
        "{name:<44} {rate:>12.0} rows/s  {:>8.1} µs per {BATCH}-row batch",
        took.as_secs_f64() * 1e6 / (rows / BATCH) as f64
    );
    rate
}

fn main() {
    let rows: usize = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let batches: Vec<RecordBatch> = (0..rows.div_ceil(BATCH))
        .map(|b| batch((b * BATCH) as i64))
        .collect();
    let rows = batches.len() * BATCH;
    let schema = iceberg_schema(&batches[0].schema()).expect("iceberg schema");
    let group_rows = 128 * 1024;
    println!(
        "{rows} rows, {} batches of {BATCH}, snappy, row groups of {group_rows}",
        batches.len()
    );

    // lakesink: conform, encode, manifest entry; one file per 128 batches (~1M rows).
    let props = properties(Codec::Snappy, group_rows);
    let t = Instant::now();
    for chunk in batches.chunks(128) {
        let mut file: Option<OpenFile> = None;
        for b in chunk {
            let rows = conform(b, schema.as_struct()).expect("conform");
            file.get_or_insert_with(|| {
                OpenFile::new(rows.schema(), props.clone()).expect("open file")
            })
            .write(&rows)
            .expect("write");
        }
        let sealed = file.expect("a file").seal().expect("seal");
        data_file(
            "s3://b/t/data/f.parquet".into(),
            &sealed,
            &schema,
            0,
            iceberg::spec::Struct::empty(),
        )
        .expect("data file");
    }
    let ours = report(
        "lakesink (conform + parquet 60 + footer)",
        rows,
        t.elapsed(),
    );

    // The hand-off alone, of the conformed batches (field ids ride along in the schema).
    let conformed: Vec<RecordBatch> = batches
        .iter()
        .map(|b| conform(b, schema.as_struct()).expect("conform"))
        .collect();
    let t = Instant::now();
    let crossed: Vec<arrow_array58::RecordBatch> = conformed.iter().map(to_arrow58).collect();
    let ipc = report("IPC hand-off arrow 60 -> 58", rows, t.elapsed());

    // The crate's writer on arrow 58.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let io = FileIO::new_with_memory();
    let props58 = parquet58::file::properties::WriterProperties::builder()
        .set_compression(parquet58::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let t = Instant::now();
    runtime.block_on(async {
        for (i, chunk) in crossed.chunks(128).enumerate() {
            let builder = ParquetWriterBuilder::new(props58.clone(), Arc::new(schema.clone()));
            let out = io
                .new_output(format!("memory:///t/data/{i}.parquet"))
                .expect("output");
            let mut w = builder.build(out).await.expect("writer");
            for b in chunk {
                w.write(b).await.expect("write");
            }
            let built = w.close().await.expect("close");
            assert_eq!(built.len(), 1);
        }
    });
    let theirs = report("iceberg crate writer (parquet 58)", rows, t.elapsed());
    let both = 1.0 / (1.0 / ipc + 1.0 / theirs);
    println!(
        "{:<44} {both:>12.0} rows/s",
        "hand-off + iceberg crate writer"
    );
    println!(
        "lakesink's path: {:.2}x the alternative's rows/s; the hand-off alone is {:.1}% of its time",
        ours / both,
        100.0 * (1.0 / ipc) / (1.0 / both)
    );
}
