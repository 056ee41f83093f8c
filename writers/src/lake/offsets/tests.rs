//! Commits against Iceberg's in-memory catalog, through lakesink's storage over an in-memory
//! object store: offsets merge across instances, a commit never lands twice, and a partition
//! another writer moved is fenced.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};

use super::*;
use crate::lake::catalog::OneAttempt;
use crate::lake::commit::Committer;
use crate::lake::fake::Fake;
use crate::lake::files::{data_file, encode, properties};
use crate::lake::types::iceberg_schema;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

struct Lake {
    catalog: OneAttempt,
    fake: Arc<Fake>,
    committer: Committer,
}

async fn setup() -> (Lake, TableIdent) {
    let fake = Fake::new().await;
    let catalog = OneAttempt(fake.clone());
    let ns = NamespaceIdent::new("cdc".into());
    let schema = iceberg_schema(&arrow()).expect("schema");
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .build();
    catalog.create_table(&ns, creation).await.expect("table");
    let committer = Committer::Fake(fake.clone());
    let lake = Lake {
        catalog,
        fake,
        committer,
    };
    (lake, TableIdent::new(ns, "t".into()))
}

/// [`super::commit`] on the test's catalog.
async fn commit(
    lake: &Lake,
    ident: &TableIdent,
    group: &str,
    covered: Vec<Covered>,
) -> Result<Outcome, iceberg::Error> {
    super::commit(&lake.catalog, &lake.committer, ident, group, covered).await
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
    let sealed = encode(
        &batch,
        schema.as_struct(),
        properties(lakesink_config::Codec::Zstd, 1024),
    )
    .expect("encode");
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
        deletes: Vec::new(),
        truncate: false,
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
    let (lake, ident) = setup().await;
    let catalog = &lake.catalog;
    let a = covered(catalog, &ident, 0, None, 0..10).await;
    let b = covered(catalog, &ident, 1, None, 0..7).await;
    // Two instances at once: whichever loses the race reloads and merges.
    let (ra, rb) = tokio::join!(
        commit(&lake, &ident, "g", vec![a]),
        commit(&lake, &ident, "g", vec![b])
    );
    assert_eq!(ra.expect("a").committed.len(), 1);
    assert_eq!(rb.expect("b").committed.len(), 1);
    let (offsets, snapshots, records) = state(catalog, &ident, "g").await;
    assert_eq!(
        offsets["topic.a"],
        std::collections::BTreeMap::from([(0, 10), (1, 7)])
    );
    assert_eq!((snapshots, records), (2, 17));
    // Another group's offsets are its own.
    assert!(state(catalog, &ident, "other").await.0.is_empty());
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_not_made_again() {
    let (lake, ident) = setup().await;
    let catalog = &lake.catalog;
    let first = covered(catalog, &ident, 0, None, 0..10).await;
    commit(&lake, &ident, "g", vec![first.clone()])
        .await
        .expect("commit");
    // The same commit again, as after an error that hid its success.
    let again = commit(&lake, &ident, "g", vec![first])
        .await
        .expect("again");
    assert_eq!(again.committed.len(), 1, "the rows are held");
    assert!(again.table.is_none(), "no snapshot was made");
    assert_eq!(state(catalog, &ident, "g").await.1, 1);
    assert_eq!(state(catalog, &ident, "g").await.2, 10);
}

#[tokio::test]
async fn a_partition_another_writer_moved_is_fenced_and_the_rest_committed() {
    let (lake, ident) = setup().await;
    let catalog = &lake.catalog;
    let theirs = covered(catalog, &ident, 0, None, 0..10).await;
    commit(&lake, &ident, "g", vec![theirs])
        .await
        .expect("theirs");
    // This instance saw partition 0 before the other committed it; partition 1 is its own.
    let stale = covered(catalog, &ident, 0, None, 0..20).await;
    let own = covered(catalog, &ident, 1, None, 0..5).await;
    let out = commit(&lake, &ident, "g", vec![stale, own])
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
    let (offsets, _, records) = state(catalog, &ident, "g").await;
    assert_eq!(
        offsets["topic.a"],
        std::collections::BTreeMap::from([(0, 10), (1, 5)])
    );
    assert_eq!(records, 15, "the fenced rows are not in the table");
}

#[tokio::test]
async fn offsets_are_found_behind_a_snapshot_another_writer_made() {
    let (lake, ident) = setup().await;
    let catalog = &lake.catalog;
    let mine = covered(catalog, &ident, 0, None, 0..10).await;
    commit(&lake, &ident, "g", vec![mine])
        .await
        .expect("commit");
    // A foreign append (another tool) carries no lakesink offsets.
    let table = catalog.load_table(&ident).await.expect("load");
    let foreign = file(catalog, &ident, 100..101).await;
    let tx = Transaction::new(&table);
    let tx = tx
        .fast_append()
        .add_data_files(vec![foreign])
        .apply(tx)
        .expect("apply");
    tx.commit(catalog).await.expect("foreign commit");
    let (offsets, snapshots, _) = state(catalog, &ident, "g").await;
    assert_eq!(snapshots, 2);
    assert_eq!(offsets["topic.a"][&0], 10);
    let next = covered(catalog, &ident, 0, Some(10), 10..15).await;
    let out = commit(&lake, &ident, "g", vec![next])
        .await
        .expect("commit");
    assert_eq!(out.committed.len(), 1);
    assert_eq!(state(catalog, &ident, "g").await.0["topic.a"][&0], 15);
}

/// The two-instance end-to-end test's failure, made certain: another instance commits its
/// partition between this instance's load of the table and its commit. The commit must lose
/// the race and merge, not land on the newer table with the older offsets (the other
/// instance's partition would then be read again and its rows written twice).
#[tokio::test]
async fn a_commit_that_loses_a_race_keeps_the_winners_offsets() {
    let (lake, ident) = setup().await;
    let catalog = &lake.catalog;
    let theirs = covered(catalog, &ident, 1, None, 0..7).await;
    let mine = covered(catalog, &ident, 0, None, 0..10).await;
    let (other, other_ident) = (
        Lake {
            catalog: lake.catalog.clone(),
            fake: lake.fake.clone(),
            committer: lake.committer.clone(),
        },
        ident.clone(),
    );
    lake.fake
        .race(Box::pin(async move {
            let out = commit(&other, &other_ident, "g", vec![theirs])
                .await
                .expect("theirs");
            assert_eq!(out.committed.len(), 1);
        }))
        .await;
    let out = commit(&lake, &ident, "g", vec![mine]).await.expect("mine");
    assert_eq!(out.committed.len(), 1);
    let (offsets, snapshots, records) = state(catalog, &ident, "g").await;
    assert_eq!(
        offsets["topic.a"],
        std::collections::BTreeMap::from([(0, 10), (1, 7)]),
        "the winner's offsets are kept"
    );
    assert_eq!((snapshots, records), (2, 17));
}
