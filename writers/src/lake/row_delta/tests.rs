//! Row deltas against the Iceberg spec (format version 2), on a table of Iceberg's in-memory
//! catalog over an in-memory object store: each delta is applied to the table's metadata as
//! the SQL catalog's commit applies it, and the snapshot it made is read back through the
//! crate's own manifest reader and scan planner, which know nothing of how it was written.

use std::collections::HashMap;

use futures::TryStreamExt;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, ManifestContentType,
    ManifestStatus, NestedField, PrimitiveType, Schema, Struct, Type,
};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation};

use super::*;
use crate::lake::commit::{applied, rebuilt};

async fn empty_table() -> Table {
    let catalog = crate::lake::memory_catalog().await;
    let ns = NamespaceIdent::new("cdc".into());
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .with_identifier_field_ids([1])
        .build()
        .expect("schema");
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .build();
    catalog.create_table(&ns, creation).await.expect("table")
}

fn file(name: &str, content: DataContentType, rows: u64) -> DataFile {
    let mut b = DataFileBuilder::default();
    b.content(content)
        .file_path(format!("memory://lake/wh/cdc/t/data/{name}.parquet"))
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(rows)
        .file_size_in_bytes(100 * rows);
    if content == DataContentType::EqualityDeletes {
        b.equality_ids(Some(vec![1]));
    }
    b.build().expect("data file")
}

fn data(name: &str, rows: u64) -> DataFile {
    file(name, DataContentType::Data, rows)
}

fn eq_deletes(name: &str, rows: u64) -> DataFile {
    file(name, DataContentType::EqualityDeletes, rows)
}

/// `delta` prepared on `table` and applied as a catalog applies it: the table after.
async fn commit(table: &Table, delta: RowDelta) -> Table {
    let prepared = delta.prepare(table).await.expect("prepare");
    let old = table
        .metadata_location_result()
        .expect("location")
        .to_owned();
    let (metadata, location) =
        applied(table, &old, prepared.requirements, prepared.updates).expect("apply");
    rebuilt(table, metadata, location.to_string()).expect("table")
}

/// Every entry of the current snapshot's manifests: (file name, content, status, data
/// sequence number, the manifest's sequence number).
async fn entries(table: &Table) -> Vec<(String, ManifestContentType, ManifestStatus, i64, i64)> {
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .expect("list");
    let mut out = Vec::new();
    for mf in list.entries() {
        let manifest = mf.load_manifest(table.file_io()).await.expect("manifest");
        for e in manifest.entries() {
            let name = e.file_path().rsplit('/').next().unwrap_or_default();
            out.push((
                name.trim_end_matches(".parquet").to_owned(),
                mf.content,
                e.status(),
                e.sequence_number().expect("sequence number"),
                mf.sequence_number,
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// What the crate's scan planner reads: each data file with the delete files it applies.
async fn plan(table: &Table) -> Vec<(String, Vec<String>)> {
    let tasks: Vec<_> = table
        .scan()
        .build()
        .expect("scan")
        .plan_files()
        .await
        .expect("plan")
        .try_collect()
        .await
        .expect("tasks");
    let name = |p: &str| {
        p.rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".parquet")
            .to_owned()
    };
    let mut out: Vec<_> = tasks
        .iter()
        .map(|t| {
            let mut d: Vec<_> = t.deletes.iter().map(|d| name(&d.file_path)).collect();
            d.sort();
            (name(&t.data_file_path), d)
        })
        .collect();
    out.sort();
    out
}

/// f1 (10 rows) in snapshot 1; f2 (4 rows) and d1 (3 equality deletes) in snapshot 2.
async fn two_snapshots(properties: HashMap<String, String>) -> (Table, Table) {
    let t0 = empty_table().await;
    let t1 = commit(
        &t0,
        RowDelta {
            data: vec![data("f1", 10)],
            ..RowDelta::default()
        },
    )
    .await;
    let t2 = commit(
        &t1,
        RowDelta {
            data: vec![data("f2", 4)],
            deletes: vec![eq_deletes("d1", 3)],
            properties,
            ..RowDelta::default()
        },
    )
    .await;
    (t1, t2)
}

fn summary(table: &Table) -> (Operation, HashMap<String, String>) {
    let s = table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .summary();
    (s.operation.clone(), s.additional_properties.clone())
}

fn get<'a>(props: &'a HashMap<String, String>, key: &str) -> &'a str {
    props.get(key).map_or("unset", String::as_str)
}

#[test]
fn the_operation_is_javas() {
    let d = |data: bool, deletes: bool, remove_all: bool| RowDelta {
        data: if data {
            vec![self::data("a", 1)]
        } else {
            vec![]
        },
        deletes: if deletes {
            vec![eq_deletes("d", 1)]
        } else {
            vec![]
        },
        remove_all,
        ..RowDelta::default()
    };
    assert_eq!(d(true, false, false).operation(), Operation::Append);
    assert_eq!(d(true, true, false).operation(), Operation::Overwrite);
    assert_eq!(d(true, false, true).operation(), Operation::Overwrite);
    assert_eq!(d(false, true, false).operation(), Operation::Delete);
    assert_eq!(d(false, false, true).operation(), Operation::Delete);
    assert!(d(false, false, false).is_empty());
    assert!(!d(false, false, true).is_empty());
}

#[tokio::test]
async fn data_and_deletes_land_in_one_snapshot_and_the_deletes_apply_only_to_older_rows() {
    let (t1, t2) = two_snapshots(HashMap::from([("lakesink.offsets.g".into(), "{}".into())])).await;
    let first = t1.metadata().current_snapshot().expect("snapshot");
    assert_eq!(first.sequence_number(), 1);
    assert_eq!(first.parent_snapshot_id(), None);
    let second = t2.metadata().current_snapshot().expect("snapshot");
    assert_eq!(second.sequence_number(), 2);
    assert_eq!(second.parent_snapshot_id(), Some(first.snapshot_id()));
    assert_eq!(t2.metadata().last_sequence_number(), 2);
    use ManifestContentType::{Data, Deletes};
    use ManifestStatus::Added;
    assert_eq!(
        entries(&t2).await,
        vec![
            ("d1".into(), Deletes, Added, 2, 2),
            ("f1".into(), Data, Added, 1, 1),
            ("f2".into(), Data, Added, 2, 2),
        ]
    );
    // The delete of sequence 2 applies to f1 (1), not to f2, written beside it.
    assert_eq!(
        plan(&t2).await,
        vec![("f1".into(), vec!["d1".into()]), ("f2".into(), vec![])]
    );
    let (op, p) = summary(&t2);
    assert_eq!(op, Operation::Overwrite);
    assert_eq!(get(&p, "lakesink.offsets.g"), "{}");
    for (key, want) in [
        ("added-data-files", "1"),
        ("added-records", "4"),
        ("added-delete-files", "1"),
        ("added-equality-delete-files", "1"),
        ("added-equality-deletes", "3"),
        ("total-data-files", "2"),
        ("total-records", "14"),
        ("total-delete-files", "1"),
        ("total-equality-deletes", "3"),
        ("total-position-deletes", "0"),
        ("total-files-size", "1700"),
    ] {
        assert_eq!(get(&p, key), want, "{key} in {p:?}");
    }
}

#[tokio::test]
async fn a_truncate_removes_every_live_file_keeping_their_sequence_numbers() {
    let (_, t2) = two_snapshots(HashMap::new()).await;
    let t3 = commit(
        &t2,
        RowDelta {
            data: vec![data("f3", 2)],
            remove_all: true,
            ..RowDelta::default()
        },
    )
    .await;
    use ManifestContentType::{Data, Deletes};
    use ManifestStatus::{Added, Deleted};
    assert_eq!(
        entries(&t3).await,
        vec![
            ("d1".into(), Deletes, Deleted, 2, 3),
            ("f1".into(), Data, Deleted, 1, 3),
            ("f2".into(), Data, Deleted, 2, 3),
            ("f3".into(), Data, Added, 3, 3),
        ]
    );
    assert_eq!(plan(&t3).await, vec![("f3".into(), vec![])]);
    let (op, p) = summary(&t3);
    assert_eq!(op, Operation::Overwrite);
    for (key, want) in [
        ("deleted-data-files", "2"),
        ("deleted-records", "14"),
        ("removed-delete-files", "1"),
        ("removed-equality-deletes", "3"),
        ("total-data-files", "1"),
        ("total-records", "2"),
        ("total-delete-files", "0"),
        ("total-equality-deletes", "0"),
        ("total-files-size", "200"),
    ] {
        assert_eq!(get(&p, key), want, "{key} in {p:?}");
    }
    // The next snapshot leaves the removed entries' manifests out: only f3's is live.
    let t4 = commit(
        &t3,
        RowDelta {
            deletes: vec![eq_deletes("d2", 1)],
            ..RowDelta::default()
        },
    )
    .await;
    assert_eq!(
        entries(&t4).await,
        vec![
            ("d2".into(), Deletes, Added, 4, 4),
            ("f3".into(), Data, Added, 3, 3),
        ]
    );
    assert_eq!(summary(&t4).0, Operation::Delete);
    assert_eq!(plan(&t4).await, vec![("f3".into(), vec!["d2".into()])]);
}

#[tokio::test]
async fn a_rewrite_keeps_the_sequence_number_it_read_at_so_later_deletes_still_apply() {
    let (_, t2) = two_snapshots(HashMap::new()).await;
    // Read at snapshot 2 (sequence number 2): f1 with d1 applied, and f2, into c1.
    let rewrite = RowDelta {
        data: vec![data("c1", 11)],
        remove: ["f1", "f2", "d1"]
            .iter()
            .map(|n| format!("memory://lake/wh/cdc/t/data/{n}.parquet"))
            .collect(),
        data_sequence: Some(2),
        ..RowDelta::default()
    };
    // Meanwhile the service commits a delete (sequence number 3) and two rows.
    let t3 = commit(
        &t2,
        RowDelta {
            data: vec![data("f3", 1), data("f4", 1)],
            deletes: vec![eq_deletes("d2", 1)],
            ..RowDelta::default()
        },
    )
    .await;
    // The rewrite lost the race, and is prepared again on the newer table.
    let t4 = commit(&t3, rewrite.clone()).await;
    use ManifestContentType::{Data, Deletes};
    use ManifestStatus::{Added, Deleted, Existing};
    assert_eq!(
        entries(&t4).await,
        vec![
            ("c1".into(), Data, Added, 2, 4),
            ("d1".into(), Deletes, Deleted, 2, 4),
            ("d2".into(), Deletes, Added, 3, 3),
            ("f1".into(), Data, Deleted, 1, 4),
            ("f2".into(), Data, Deleted, 2, 4),
            ("f3".into(), Data, Added, 3, 3),
            ("f4".into(), Data, Added, 3, 3),
        ]
    );
    // d2 (3) still applies to the rewritten rows (2), not to f3 and f4 (3).
    assert_eq!(
        plan(&t4).await,
        vec![
            ("c1".into(), vec!["d2".into()]),
            ("f3".into(), vec![]),
            ("f4".into(), vec![])
        ]
    );
    let (op, p) = summary(&t4);
    assert_eq!(op, Operation::Replace);
    for (key, want) in [
        ("added-data-files", "1"),
        ("deleted-data-files", "2"),
        ("removed-delete-files", "1"),
        ("total-data-files", "3"),
        ("total-delete-files", "1"),
        ("total-records", "13"),
    ] {
        assert_eq!(get(&p, key), want, "{key} in {p:?}");
    }
    // A file removed from a manifest that keeps another: that one stays, as it was.
    let t5 = commit(
        &t4,
        RowDelta {
            data: vec![data("c2", 1)],
            remove: ["memory://lake/wh/cdc/t/data/f4.parquet".to_owned()].into(),
            data_sequence: Some(4),
            ..RowDelta::default()
        },
    )
    .await;
    let e = entries(&t5).await;
    assert!(e.contains(&("f3".into(), Data, Existing, 3, 5)), "{e:?}");
    assert!(e.contains(&("f4".into(), Data, Deleted, 3, 5)), "{e:?}");
    assert!(e.contains(&("c2".into(), Data, Added, 4, 5)), "{e:?}");
    // A truncate since: the files the rewrite read are gone, and it fails.
    let t6 = commit(
        &t3,
        RowDelta {
            remove_all: true,
            ..RowDelta::default()
        },
    )
    .await;
    let e = rewrite
        .prepare(&t6)
        .await
        .expect_err("the rewrite's files are gone");
    assert!(e.to_string().contains("no longer a live file"), "{e}");
}

#[tokio::test]
async fn a_delta_prepared_on_an_older_table_is_a_lost_race() {
    let t0 = empty_table().await;
    let t1 = commit(
        &t0,
        RowDelta {
            data: vec![data("f1", 1)],
            ..RowDelta::default()
        },
    )
    .await;
    // Prepared on t0, committed on t1: main moved.
    let stale = RowDelta {
        data: vec![data("f2", 1)],
        ..RowDelta::default()
    }
    .prepare(&t0)
    .await
    .expect("prepare");
    let old = t1.metadata_location_result().expect("location").to_owned();
    let e = applied(&t1, &old, stale.requirements, stale.updates).expect_err("a lost race");
    assert_eq!(e.kind(), ErrorKind::CatalogCommitConflicts, "{e}");
}

#[tokio::test]
async fn files_of_the_wrong_content_are_refused() {
    let t0 = empty_table().await;
    let e = RowDelta {
        data: vec![eq_deletes("d", 1)],
        ..RowDelta::default()
    }
    .prepare(&t0)
    .await
    .expect_err("a delete file as data");
    assert!(e.to_string().contains("not a data file"), "{e}");
    let e = RowDelta {
        deletes: vec![data("f", 1)],
        ..RowDelta::default()
    }
    .prepare(&t0)
    .await
    .expect_err("a data file as deletes");
    assert!(e.to_string().contains("not a delete file"), "{e}");
}

#[test]
fn totals_add_what_was_added_and_take_what_was_removed() {
    let mut p = HashMap::from([
        ("added-records".to_owned(), "5".to_owned()),
        ("deleted-records".to_owned(), "3".to_owned()),
    ]);
    let previous = HashMap::from([
        ("total-records".to_owned(), "10".to_owned()),
        ("total-data-files".to_owned(), "2".to_owned()),
    ]);
    totals(&mut p, Some(&previous)).expect("totals");
    assert_eq!(get(&p, "total-records"), "12");
    assert_eq!(get(&p, "total-data-files"), "2");
    // A total the previous snapshot did not have stays unknown.
    assert_eq!(get(&p, "total-delete-files"), "unset");
    // Removing more than there was is a broken summary, not a wrapped number.
    let mut p = HashMap::from([("deleted-records".to_owned(), "11".to_owned())]);
    assert!(totals(&mut p, Some(&previous)).is_err());
    let mut p = HashMap::from([("added-records".to_owned(), "x".to_owned())]);
    assert!(totals(&mut p, None).is_err());
}
