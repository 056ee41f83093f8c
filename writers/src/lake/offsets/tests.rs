//! Commits against Iceberg's in-memory catalog, through lakesink's storage over an in-memory
//! object store: offsets merge across instances, a commit never lands twice, and a partition
//! another writer moved is fenced.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalogBuilder};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};

use super::*;
use crate::lake::catalog::OneAttempt;
use crate::lake::files::{OpenFile, data_file, properties};
use crate::lake::storage::{LakeStorage, LakeStorageFactory};
use crate::lake::types::{conform, iceberg_schema};

async fn setup() -> (OneAttempt, TableIdent) {
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let storage = LakeStorage::new(store, "memory://lake/".into());
    let catalog = MemoryCatalogBuilder::default()
        .with_storage_factory(Arc::new(LakeStorageFactory(storage)))
        .load(
            "test",
            HashMap::from([(
                MEMORY_CATALOG_WAREHOUSE.to_owned(),
                "memory://lake/wh".to_owned(),
            )]),
        )
        .await
        .expect("catalog");
    let catalog = OneAttempt(Arc::new(catalog));
    let ns = NamespaceIdent::new("cdc".into());
    catalog
        .create_namespace(&ns, HashMap::new())
        .await
        .expect("namespace");
    let schema = iceberg_schema(&arrow()).expect("schema");
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .build();
    catalog.create_table(&ns, creation).await.expect("table");
    (catalog, TableIdent::new(ns, "t".into()))
}

fn arrow() -> ArrowSchema {
    ArrowSchema::new(vec![Field::new("__offset", DataType::Int64, false)])
}

/// A data file of the rows at `offsets`, as the sink makes one.
async fn file(catalog: &OneAttempt, ident: &TableIdent, offsets: std::ops::Range<i64>) -> DataFile {
    let table = catalog.load_table(ident).await.expect("load");
    let schema = table.metadata().current_schema().clone();
    let batch = RecordBatch::try_new(
        Arc::new(arrow()),
        vec![Arc::new(Int64Array::from_iter_values(offsets.clone()))],
    )
    .expect("batch");
    let rows = conform(&batch, schema.as_struct()).expect("conform");
    let mut open = OpenFile::new(
        rows.schema(),
        properties(lakesink_config::Codec::Zstd, 1024),
    )
    .expect("open");
    open.write(&rows).expect("write");
    let sealed = open.seal().expect("seal");
    let path = format!(
        "memory://lake/wh/cdc/t/data/{}-{}.parquet",
        offsets.start,
        uuid::Uuid::new_v4()
    );
    let f =
        data_file(path, &sealed, &schema, 0, iceberg::spec::Struct::empty()).expect("data file");
    assert_eq!(f.record_count(), (offsets.end - offsets.start) as u64);
    let id = schema.field_id_by_name("__offset").expect("id");
    assert_eq!(
        f.lower_bounds()[&id],
        iceberg::spec::Datum::long(offsets.start)
    );
    assert_eq!(
        f.upper_bounds()[&id],
        iceberg::spec::Datum::long(offsets.end - 1)
    );
    assert_eq!(f.null_value_counts()[&id], 0);
    f
}

async fn covered(
    catalog: &OneAttempt,
    ident: &TableIdent,
    partition: i32,
    expected: Option<i64>,
    rows: std::ops::Range<i64>,
) -> Covered {
    Covered {
        part: TopicPartition::new("topic.a", partition),
        expected,
        next: rows.end,
        rows: (rows.end - rows.start) as u64,
        files: vec![file(catalog, ident, rows).await],
    }
}

async fn state(catalog: &OneAttempt, ident: &TableIdent, group: &str) -> (Offsets, usize, u64) {
    let t = catalog.load_table(ident).await.expect("load");
    let snapshots = t.metadata().snapshots().count();
    let records = t
        .metadata()
        .current_snapshot()
        .and_then(|s| {
            s.summary()
                .additional_properties
                .get("total-records")
                .cloned()
        })
        .map_or(0, |r| r.parse().expect("count"));
    (
        table_offsets(&t, group).expect("offsets"),
        snapshots,
        records,
    )
}

#[tokio::test]
async fn instances_merge_their_partitions_offsets_into_one_summary() {
    let (catalog, ident) = setup().await;
    let a = covered(&catalog, &ident, 0, None, 0..10).await;
    let b = covered(&catalog, &ident, 1, None, 0..7).await;
    // Two instances at once: whichever loses the race reloads and merges.
    let (ra, rb) = tokio::join!(
        commit(&catalog, &ident, "g", vec![a]),
        commit(&catalog, &ident, "g", vec![b])
    );
    assert_eq!(ra.expect("a").committed.len(), 1);
    assert_eq!(rb.expect("b").committed.len(), 1);
    let (offsets, snapshots, records) = state(&catalog, &ident, "g").await;
    assert_eq!(
        offsets["topic.a"],
        std::collections::BTreeMap::from([(0, 10), (1, 7)])
    );
    assert_eq!((snapshots, records), (2, 17));
    // Another group's offsets are its own.
    assert!(state(&catalog, &ident, "other").await.0.is_empty());
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_not_made_again() {
    let (catalog, ident) = setup().await;
    let first = covered(&catalog, &ident, 0, None, 0..10).await;
    commit(&catalog, &ident, "g", vec![first.clone()])
        .await
        .expect("commit");
    // The same commit again, as after an error that hid its success.
    let again = commit(&catalog, &ident, "g", vec![first])
        .await
        .expect("again");
    assert_eq!(again.committed.len(), 1, "the rows are held");
    assert!(again.table.is_none(), "no snapshot was made");
    assert_eq!(state(&catalog, &ident, "g").await.1, 1);
    assert_eq!(state(&catalog, &ident, "g").await.2, 10);
}

#[tokio::test]
async fn a_partition_another_writer_moved_is_fenced_and_the_rest_committed() {
    let (catalog, ident) = setup().await;
    let theirs = covered(&catalog, &ident, 0, None, 0..10).await;
    commit(&catalog, &ident, "g", vec![theirs])
        .await
        .expect("theirs");
    // This instance saw partition 0 before the other committed it; partition 1 is its own.
    let stale = covered(&catalog, &ident, 0, None, 0..20).await;
    let own = covered(&catalog, &ident, 1, None, 0..5).await;
    let out = commit(&catalog, &ident, "g", vec![stale, own])
        .await
        .expect("commit");
    assert_eq!(
        out.fenced,
        vec![(TopicPartition::new("topic.a", 0), Some(10))]
    );
    assert_eq!(
        out.committed
            .iter()
            .map(|c| c.part.partition)
            .collect::<Vec<_>>(),
        vec![1]
    );
    let (offsets, _, records) = state(&catalog, &ident, "g").await;
    assert_eq!(
        offsets["topic.a"],
        std::collections::BTreeMap::from([(0, 10), (1, 5)])
    );
    assert_eq!(records, 15, "the fenced rows are not in the table");
}

#[tokio::test]
async fn offsets_are_found_behind_a_snapshot_another_writer_made() {
    let (catalog, ident) = setup().await;
    let mine = covered(&catalog, &ident, 0, None, 0..10).await;
    commit(&catalog, &ident, "g", vec![mine])
        .await
        .expect("commit");
    // A foreign append (another tool) carries no lakesink offsets.
    let table = catalog.load_table(&ident).await.expect("load");
    let foreign = file(&catalog, &ident, 100..101).await;
    let tx = Transaction::new(&table);
    let tx = tx
        .fast_append()
        .add_data_files(vec![foreign])
        .apply(tx)
        .expect("apply");
    tx.commit(&catalog).await.expect("foreign commit");
    let (offsets, snapshots, _) = state(&catalog, &ident, "g").await;
    assert_eq!(snapshots, 2);
    assert_eq!(offsets["topic.a"][&0], 10);
    let next = covered(&catalog, &ident, 0, Some(10), 10..15).await;
    let out = commit(&catalog, &ident, "g", vec![next])
        .await
        .expect("commit");
    assert_eq!(out.committed.len(), 1);
    assert_eq!(state(&catalog, &ident, "g").await.0["topic.a"][&0], 15);
}
