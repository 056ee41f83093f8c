//! Rows per second of `PgReplicator::apply` into the real replica database (`dev/stack up`):
//! a synthetic snapshot of 1M rows, then a mixed stream (70% inserts, 25% updates, 5%
//! deletes). Prints figures; asserts nothing.
//!
//! `cargo bench -p lakesink-writers --bench replica_apply` (ROWS=200000 for a shorter run).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{Decimal128Builder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, PrimitiveArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use lakesink_config::ReplicaConfig;
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use lakesink_writers::PgReplicator;

const BATCH: usize = 50_000;

fn value_fields() -> Fields {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("qty", DataType::Int32, true),
        Field::new(
            "updated_at",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("note", DataType::Utf8, true),
    ]
    .into()
}

/// One batch of envelopes: `(offset, op, id)` per row.
fn batch(topic: &str, table: &str, events: &[(i64, &'static str, i64)]) -> ChangeBatch {
    let n = events.len();
    let (mut id, mut name, mut qty, mut note) = (
        Int64Builder::with_capacity(n),
        StringBuilder::with_capacity(n, n * 16),
        Int32Builder::with_capacity(n),
        StringBuilder::with_capacity(n, n * 40),
    );
    let mut amount = Decimal128Builder::with_capacity(n)
        .with_precision_and_scale(12, 2)
        .expect("decimal");
    let mut ts = Vec::with_capacity(n);
    for &(offset, _, k) in events {
        id.append_value(k);
        name.append_value(format!("customer-{k:08}"));
        amount.append_value(i128::from(k) * 137 + i128::from(offset % 100));
        qty.append_value((offset % 1000) as i32);
        ts.push(Some(1_700_000_000_000_000 + offset * 1_000));
        note.append_value("a note of about forty bytes, for width.");
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(name.finish()),
        Arc::new(amount.finish()),
        Arc::new(qty.finish()),
        Arc::new(PrimitiveArray::<TimestampMicrosecondType>::from(ts)),
        Arc::new(note.finish()),
    ];
    let is_delete: Vec<bool> = events.iter().map(|e| e.1 == "d").collect();
    let after_valid: Vec<bool> = is_delete.iter().map(|d| !d).collect();
    let after = StructArray::new(value_fields(), cols.clone(), Some(after_valid.into()));
    let before = StructArray::new(value_fields(), cols, Some(is_delete.into()));
    let key_fields: Fields = vec![Field::new("id", DataType::Int64, false)].into();
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.2)));
    let key = StructArray::new(key_fields.clone(), vec![ids], None);
    let src_fields: Fields = ["db", "schema", "table"]
        .iter()
        .map(|f| Field::new(*f, DataType::Utf8, true))
        .collect();
    let src_cols: Vec<ArrayRef> = ["source", "public", table]
        .iter()
        .map(|v| Arc::new(StringArray::from(vec![*v; n])) as ArrayRef)
        .collect();
    let source = StructArray::new(src_fields, src_cols, None);
    let ops = StringArray::from(events.iter().map(|e| e.1).collect::<Vec<_>>());
    let schema = Schema::new(vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new("__op", DataType::Utf8, false),
        Field::new("__tombstone", DataType::Boolean, false),
        Field::new("key", DataType::Struct(key_fields), true),
        Field::new("before", before.data_type().clone(), true),
        Field::new("after", after.data_type().clone(), true),
        Field::new("source", source.data_type().clone(), true),
        Field::new("op", DataType::Utf8, true),
    ]);
    let rows = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.0))),
            Arc::new(ops.clone()),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(key),
            Arc::new(before),
            Arc::new(after),
            Arc::new(source),
            Arc::new(ops),
        ],
    )
    .expect("batch");
    ChangeBatch {
        topic: topic.into(),
        partition: 0,
        first_offset: events[0].0,
        last_offset: events[n - 1].0,
        key_schema: None,
        value_schema: None,
        shape: ValueShape::Envelope,
        rows,
    }
}

async fn run(
    r: &PgReplicator,
    label: &str,
    topic: &str,
    table: &str,
    events: &[(i64, &'static str, i64)],
) {
    let batches: Vec<ChangeBatch> = events
        .chunks(BATCH)
        .map(|c| batch(topic, table, c))
        .collect();
    let start = Instant::now();
    for b in &batches {
        r.apply("bench", std::slice::from_ref(b))
            .await
            .expect("apply");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{label}: {} rows in {secs:.2} s = {:.0} rows/s ({} calls of {BATCH})",
        events.len(),
        events.len() as f64 / secs,
        batches.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let url = std::env::var("LAKESINK_REPLICA_PG_URL")
        .unwrap_or_else(|_| "postgres://lakesink:lakesink@127.0.0.1:5434/replica".into());
    let schema = format!("bench_{}", std::process::id());
    let mut config = ReplicaConfig::new(url);
    config.table_name_format = format!("{schema}.${{source.table}}");
    config.dots_to_underscores = false;
    let r = PgReplicator::connect(&config)
        .await
        .expect("replica (dev/stack up)");
    let topic = format!("{schema}.public.orders");

    let snapshot: Vec<_> = (0..rows).map(|i| (i, "r", i)).collect();
    run(&r, "snapshot", &topic, "orders", &snapshot).await;

    // 70% inserts of new keys, 25% updates and 5% deletes of existing ones.
    let mut next_key = rows;
    let mixed: Vec<_> = (0..rows)
        .map(|i| {
            let offset = rows + i;
            let pick = (i.wrapping_mul(2_654_435_761) % rows).abs();
            match i % 20 {
                0 => (offset, "d", pick),
                1..=5 => (offset, "u", pick),
                _ => {
                    next_key += 1;
                    (offset, "c", next_key)
                }
            }
        })
        .collect();
    run(&r, "mixed 70/25/5", &topic, "orders", &mixed).await;

    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(r.pool())
    .await
    .expect("drop bench schema");
}
