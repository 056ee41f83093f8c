//! Compaction on Iceberg's in-memory catalog over an in-memory object store, with real Parquet
//! files: deletes applied, the applied delete files dropped, and a delete the service commits
//! while the compaction runs still applying to the rewritten rows.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::{Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use futures::FutureExt;
use iceberg::{NamespaceIdent, TableCreation};

use super::*;
use crate::lake::fake::{Fake, memory_storage};
use crate::lake::files::{properties, put_file};
use crate::lake::types::iceberg_schema;

fn arrow() -> ArrowSchema {
    ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("v", DataType::Utf8, true),
    ])
}

struct Lake {
    storage: LakeStorage,
    fake: Arc<Fake>,
    catalog: OneAttempt,
    committer: Committer,
    ident: TableIdent,
}

async fn lake() -> Lake {
    let storage = memory_storage();
    let fake = Fake::on(storage.clone()).await;
    let catalog = OneAttempt(fake.clone());
    let ns = NamespaceIdent::new("cdc".into());
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(iceberg_schema(&arrow()).expect("schema"))
        .build();
    catalog.create_table(&ns, creation).await.expect("table");
    Lake {
        storage,
        committer: Committer::Fake(fake.clone()),
        fake,
        catalog,
        ident: TableIdent::new(ns, "t".into()),
    }
}

/// Uploads `rows` as a data file, or their ids as an equality-delete file on `id`.
async fn upload(lake: &Lake, rows: &[(i64, &str)], deletes: bool) -> DataFile {
    let table = lake.catalog.load_table(&lake.ident).await.expect("load");
    let schema = table.metadata().current_schema().clone();
    let ids = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
    let batch = if deletes {
        RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![Field::new(
                "id",
                DataType::Int64,
                true,
            )])),
            vec![ids],
        )
    } else {
        RecordBatch::try_new(
            Arc::new(arrow()),
            vec![
                ids,
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
    }
    .expect("batch");
    let ids = deletes.then(|| vec![schema.field_id_by_name("id").expect("id")]);
    put_file(&lake.storage, &table, &batch, ids)
        .await
        .expect("upload")
}

/// The service's commit: rows, and deletes of keys.
async fn service(lake: &Lake, rows: &[(i64, &str)], deleted: &[i64]) {
    let table = lake.catalog.load_table(&lake.ident).await.expect("load");
    let mut delta = RowDelta {
        data: vec![upload(lake, rows, false).await],
        ..RowDelta::default()
    };
    if !deleted.is_empty() {
        let keys: Vec<(i64, &str)> = deleted.iter().map(|k| (*k, "")).collect();
        delta.deletes.push(upload(lake, &keys, true).await);
    }
    let p = delta.prepare(&table).await.expect("prepare");
    lake.committer
        .commit(&table, p.requirements, p.updates)
        .await
        .expect("commit");
}

/// Every row of the live data files, by id (each once where no delete file is left), with
/// the delete files left.
async fn rows(lake: &Lake) -> (BTreeMap<i64, String>, usize) {
    let table = lake.catalog.load_table(&lake.ident).await.expect("load");
    let mut out = BTreeMap::new();
    let mut twice = Vec::new();
    let mut deletes = 0;
    for g in groups(&table).await.expect("groups").into_values() {
        deletes += g.deletes.len();
        for d in &g.data {
            for b in read(&lake.storage, d.file.file_path()).await.expect("read") {
                let ids = b
                    .column_by_name("id")
                    .expect("id")
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .clone();
                let vs = b.column_by_name("v").expect("v").as_string::<i32>().clone();
                for i in 0..b.num_rows() {
                    if out.insert(ids.value(i), vs.value(i).to_owned()).is_some() {
                        twice.push(ids.value(i));
                    }
                }
            }
        }
    }
    assert!(deletes > 0 || twice.is_empty(), "ids {twice:?} twice");
    (out, deletes)
}

async fn run(lake: &Lake, dry_run: bool) -> Compaction {
    compact(
        &lake.catalog,
        &lake.committer,
        &lake.storage,
        &lake.ident,
        &properties(lakesink_config::Codec::Zstd, 1024),
        1 << 20,
        dry_run,
    )
    .await
    .expect("compact")
}

#[tokio::test]
async fn a_compaction_applies_the_deletes_and_a_delete_committed_meanwhile_still_applies() {
    let lake = lake().await;
    service(&lake, &[(1, "a"), (2, "b"), (3, "c")], &[]).await;
    // 2 updated, 3 deleted, 4 inserted.
    service(&lake, &[(2, "b2"), (4, "d")], &[2, 3]).await;
    let dry = run(&lake, true).await;
    assert_eq!(
        (
            dry.partitions,
            dry.data_files_removed,
            dry.delete_files_removed,
            dry.rows_read
        ),
        (1, 2, 1, 5),
        "{dry:?}"
    );
    assert_eq!(rows(&lake).await.1, 1, "the dry run changed nothing");
    // While the compaction runs, the service deletes 1 and adds 5: its commit lands first.
    let other = Lake {
        storage: lake.storage.clone(),
        fake: lake.fake.clone(),
        catalog: OneAttempt(lake.fake.clone()),
        committer: Committer::Fake(lake.fake.clone()),
        ident: lake.ident.clone(),
    };
    lake.fake
        .race(async move { service(&other, &[(5, "e")], &[1]).await }.boxed())
        .await;
    let done = run(&lake, false).await;
    assert_eq!(
        (
            done.partitions,
            done.data_files_removed,
            done.delete_files_removed,
            done.files_added,
            done.rows_read,
            done.rows_deleted
        ),
        (1, 2, 1, 1, 5, 2),
        "{done:?}"
    );
    let table = lake.catalog.load_table(&lake.ident).await.expect("load");
    let s = table.metadata().current_snapshot().expect("snapshot");
    assert_eq!(s.summary().operation, iceberg::spec::Operation::Replace);
    // The service's delete of 1 (a later sequence number) applies to the rewritten file: a
    // second compaction applies it.
    let (before, deletes) = rows(&lake).await;
    assert_eq!(deletes, 1, "the service's delete file is kept");
    assert!(before.contains_key(&1), "{before:?}");
    run(&lake, false).await;
    let (after, deletes) = rows(&lake).await;
    assert_eq!(deletes, 0);
    assert_eq!(
        after,
        BTreeMap::from([(2, "b2".into()), (4, "d".into()), (5, "e".into())])
    );
    // Nothing left to do.
    assert_eq!(run(&lake, false).await, Compaction::default());
}
