//! Peak memory with many open files: TOPICS topics, each writing to HOURS hourly directories at
//! once (1,000 open files by default), into a local directory, under a memory budget.
//!
//!   cargo run --release -p lakesink-writers --example open_files -- [TOPICS] [HOURS] [ROWS] [BUDGET_MIB]
//!
//! Prints the files written, how many segments the budget closed early, and the process's
//! peak RSS (VmHWM).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    BooleanArray, Int64Array, RecordBatch, StringArray, StructArray, TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use lakesink_writers::parquet::ParquetWriter;

const T0: i64 = 1_714_521_600_000; // 2024-05-01T00:00:00Z
const HOUR: i64 = 3_600_000;

fn arg(n: usize, default: i64) -> i64 {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("numeric argument"))
        .unwrap_or(default)
}

/// `rows` inserts of a 10-column table, spread round robin over `hours` hours.
fn batch(topic: &str, first: i64, rows: i64, hours: i64) -> ChangeBatch {
    let offsets: Vec<i64> = (first..first + rows).collect();
    let long = |f: &dyn Fn(i64) -> i64| {
        Arc::new(Int64Array::from_iter_values(offsets.iter().map(|&o| f(o))))
    };
    let text = |f: &dyn Fn(i64) -> String| {
        Arc::new(StringArray::from_iter_values(offsets.iter().map(|&o| f(o))))
    };
    let fields = Fields::from(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer_id", DataType::Int64, false),
        Field::new("sku", DataType::Utf8, false),
        Field::new("quantity", DataType::Int64, false),
        Field::new("price_cents", DataType::Int64, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("note", DataType::Utf8, false),
        Field::new("created_at", DataType::Int64, false),
        Field::new("updated_at", DataType::Int64, false),
        Field::new("region", DataType::Utf8, false),
    ]);
    let after = StructArray::new(
        fields.clone(),
        vec![
            long(&|o| o),
            long(&|o| o % 1000),
            text(&|o| format!("SKU-{:06}", o % 100_000)),
            long(&|o| o % 50),
            long(&|o| 100 + o * 7 % 100_000),
            text(&|o| ["new", "paid", "shipped"][(o % 3) as usize].to_owned()),
            text(&|o| format!("note {o} leave at the door")),
            long(&|o| T0 * 1000 + o),
            long(&|o| T0 * 1000 + o * 3),
            text(&|o| ["eu", "us", "ap"][(o % 3) as usize].to_owned()),
        ],
        None,
    );
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
    let n = offsets.len();
    let rows = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(offsets.clone())),
            Arc::new(
                TimestampMillisecondArray::from_iter_values(
                    offsets.iter().map(|o| T0 + (o % hours) * HOUR),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["c"; n])),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(after),
        ],
    )
    .expect("rows");
    ChangeBatch {
        topic: Arc::from(topic),
        partition: 0,
        first_offset: first,
        last_offset: first + rows.num_rows() as i64 - 1,
        key_schema: None,
        value_schema: None,
        shape: ValueShape::Envelope,
        rows,
    }
}

fn vm_hwm_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

#[tokio::main]
async fn main() {
    let topics = arg(1, 100);
    let hours = arg(2, 10);
    let rows = arg(3, 20_000);
    let budget_mib = arg(4, 256);
    let dir = std::env::temp_dir().join(format!("lakesink-open-files-{}", std::process::id()));
    let text = format!(
        "[kafka]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n[raw]\nurl = \"file://{}\"\n\
         partitioner = \"time\"\npath-format = \"'dt'=yyyy-MM-dd/'hour'=HH\"\n\
         partition-duration-ms = 3600000\nflush-size = 100000000\nmemory-budget-bytes = {}\n",
        dir.display(),
        budget_mib * 1024 * 1024
    );
    let config = lakesink_config::Config::from_toml(&text, "example", Vec::new())
        .expect("config")
        .raw
        .expect("raw");
    let mut writer = ParquetWriter::new(&config).expect("writer");
    let started = Instant::now();
    let mut segments = 0;
    // Every topic gets a slice at a time, so all of them hold open files at once.
    let slices = 10;
    for slice in 0..slices {
        for t in 0..topics {
            let topic = format!("bench.public.table_{t:03}");
            let per = rows / slices;
            writer
                .write(&batch(&topic, slice * per, per, hours), 0)
                .await
                .expect("write");
            while writer.over_budget() && writer.uploading() {
                writer
                    .next_receipt()
                    .await
                    .expect("receipt")
                    .expect("upload");
                segments += 1;
            }
        }
    }
    let open_mib = writer.memory() as f64 / 1048576.0;
    writer.close_all(0).await.expect("close");
    while let Some(r) = writer.next_receipt().await {
        r.expect("upload");
        segments += 1;
    }
    let files = walk(&dir);
    println!(
        "topics x hourly directories   {topics} x {hours} = {} open files at once",
        topics * hours
    );
    println!("rows written                  {}", topics * rows);
    println!(
        "memory budget                 {budget_mib} MiB (held before the final close: {open_mib:.0} MiB)"
    );
    println!(
        "segments uploaded             {segments} ({} closed before the end by the budget)",
        segments - topics
    );
    println!("parquet files                 {files}");
    println!(
        "seconds                       {:.1}",
        started.elapsed().as_secs_f64()
    );
    println!(
        "peak RSS                      {:.0} MiB (VmHWM)",
        vm_hwm_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) -> usize {
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                n += walk(&p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                n += 1;
            }
        }
    }
    n
}
