//! Hand-built Debezium envelopes applied to the real replica: upserts, deletes, tombstones,
//! truncates, the unchanged-TOAST placeholder, schema evolution, and replays.

use lakesink_model::Classify;
use std::sync::Arc;

use arrow_array::builder::{Decimal128Builder, Int64Builder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema};
use lakesink_config::{KeylessMode, ReplicaConfig};
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use lakesink_writers::{Applied, PgReplicator};

use crate::replica::support::{replicator, rows};

const PLACEHOLDER: &str = "__debezium_unavailable_value";

/// One event: an op on key `id`, with an after image (name, note, amount in cents, extra).
pub(crate) struct Ev {
    offset: i64,
    op: &'static str,
    id: i64,
    after: Option<(&'static str, &'static str, i128, Option<&'static str>)>,
    tombstone: bool,
}

pub(crate) fn ev(
    offset: i64,
    op: &'static str,
    id: i64,
    name: &'static str,
    note: &'static str,
) -> Ev {
    Ev {
        offset,
        op,
        id,
        after: Some((name, note, offset as i128 * 100 + 1, None)),
        tombstone: false,
    }
}

fn del(offset: i64, id: i64, tombstone: bool) -> Ev {
    Ev {
        offset,
        op: "d",
        id,
        after: None,
        tombstone,
    }
}

fn value_fields(extra: bool) -> Fields {
    let mut f = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("note", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(10, 2), true),
    ];
    if extra {
        f.push(Field::new("extra", DataType::Utf8, true));
    }
    f.into()
}

/// A Debezium envelope batch of `events` for table `table` (the source block's name).
pub(crate) fn batch(
    topic: &str,
    partition: i32,
    table: &str,
    events: &[Ev],
    extra: bool,
) -> ChangeBatch {
    let n = events.len();
    let keyless = table.ends_with("nokey");
    let fields = value_fields(extra);
    let image = |pick: &dyn Fn(&Ev) -> bool, full: bool| {
        let (mut id, mut name, mut note) = (
            Int64Builder::new(),
            StringBuilder::new(),
            StringBuilder::new(),
        );
        let (mut amount, mut ext) = (
            Decimal128Builder::new()
                .with_precision_and_scale(10, 2)
                .expect("decimal"),
            StringBuilder::new(),
        );
        for e in events {
            id.append_value(e.id);
            match (pick(e), e.after, full) {
                (true, Some((nm, nt, a, x)), true) => {
                    name.append_value(nm);
                    note.append_value(nt);
                    amount.append_value(a);
                    ext.append_option(x);
                }
                _ => {
                    name.append_null();
                    note.append_null();
                    amount.append_null();
                    ext.append_null();
                }
            }
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(id.finish()),
            Arc::new(name.finish()),
            Arc::new(note.finish()),
            Arc::new(amount.finish()),
        ];
        if extra {
            cols.push(Arc::new(ext.finish()));
        }
        let valid: Vec<bool> = events.iter().map(pick).collect();
        StructArray::new(fields.clone(), cols, Some(valid.into()))
    };
    let after = image(&|e: &Ev| e.after.is_some(), true);
    let before = image(&|e: &Ev| e.op == "d" && !e.tombstone, false);
    let key_fields: Fields = if keyless {
        Fields::empty()
    } else {
        vec![Field::new("id", DataType::Int64, false)].into()
    };
    let key = if keyless {
        StructArray::new_null(Fields::empty(), n)
    } else {
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.id)));
        let valid: Vec<bool> = events.iter().map(|e| e.op != "t").collect();
        StructArray::new(key_fields.clone(), vec![ids], Some(valid.into()))
    };
    let source_valid: Vec<bool> = events.iter().map(|e| !e.tombstone).collect();
    Envelope {
        topic,
        partition,
        offsets: events.iter().map(|e| e.offset).collect(),
        ops: events.iter().map(|e| e.op).collect(),
        tombstones: events.iter().map(|e| e.tombstone).collect(),
        key,
        before,
        after,
        source: source_block(table, n, Some(source_valid)),
    }
    .batch()
}

/// A Debezium `source` block naming `table` (db `source`, schema `public`) for `n` rows.
pub(crate) fn source_block(table: &str, n: usize, valid: Option<Vec<bool>>) -> StructArray {
    let fields: Fields = ["db", "schema", "table"]
        .iter()
        .map(|f| Field::new(*f, DataType::Utf8, true))
        .collect();
    let cols: Vec<ArrayRef> = ["source", "public", table]
        .iter()
        .map(|v| Arc::new(StringArray::from(vec![*v; n])) as ArrayRef)
        .collect();
    StructArray::new(fields, cols, valid.map(Into::into))
}

/// A decoded envelope batch as the decoder makes it, from its rows' parts.
pub(crate) struct Envelope<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offsets: Vec<i64>,
    pub(crate) ops: Vec<&'a str>,
    pub(crate) tombstones: Vec<bool>,
    pub(crate) key: StructArray,
    pub(crate) before: StructArray,
    pub(crate) after: StructArray,
    pub(crate) source: StructArray,
}

impl Envelope<'_> {
    pub(crate) fn batch(self) -> ChangeBatch {
        let schema = Schema::new(vec![
            Field::new("__offset", DataType::Int64, false),
            Field::new("__op", DataType::Utf8, false),
            Field::new("__tombstone", DataType::Boolean, false),
            Field::new("key", self.key.data_type().clone(), true),
            Field::new("before", self.before.data_type().clone(), true),
            Field::new("after", self.after.data_type().clone(), true),
            Field::new("source", self.source.data_type().clone(), true),
            Field::new("op", DataType::Utf8, true),
        ]);
        let (first_offset, last_offset) = (self.offsets[0], self.offsets[self.offsets.len() - 1]);
        let rows = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(self.offsets)),
                Arc::new(StringArray::from(self.ops.clone())),
                Arc::new(BooleanArray::from(self.tombstones)),
                Arc::new(self.key),
                Arc::new(self.before),
                Arc::new(self.after),
                Arc::new(self.source),
                Arc::new(StringArray::from(self.ops)),
            ],
        )
        .expect("batch");
        ChangeBatch {
            topic: self.topic.into(),
            partition: self.partition,
            first_offset,
            last_offset,
            key_schema: None,
            value_schema: None,
            shape: ValueShape::Envelope,
            rows,
        }
    }
}

type Row = (i64, Option<String>, Option<String>, Option<String>);

async fn table(r: &PgReplicator, schema: &str, table: &str) -> Vec<Row> {
    rows(
        r,
        &format!("SELECT id, name, note, amount::text FROM \"{schema}\".\"{table}\" ORDER BY id"),
    )
    .await
}

fn row(id: i64, name: &str, note: &str, amount: &str) -> Row {
    (
        id,
        Some(name.into()),
        Some(note.into()),
        Some(amount.into()),
    )
}

#[tokio::test]
async fn upserts_deletes_truncates_and_replays_are_exact() {
    let (r, schema) = replicator(|c| c.truncate_enabled = true).await;
    let topic = format!("{schema}.public.items");
    let group = "g";
    let b1 = batch(
        &topic,
        0,
        "items",
        &[
            ev(0, "r", 1, "a", "n1"),
            ev(1, "c", 2, "b", "n2"),
            ev(2, "u", 1, "a2", PLACEHOLDER), // an unchanged TOASTed note
            del(3, 2, false),
            del(4, 2, true),
            ev(5, "c", 3, "c", "n3"),
            ev(6, "c", 2, "b2", "n2b"), // re-inserted after its delete
        ],
        false,
    );
    // Another partition of the same topic, in the same call.
    let p1 = batch(
        &topic,
        1,
        "items",
        &[ev(0, "c", 10, "x", "nx"), del(1, 10, false)],
        false,
    );
    let applied = r
        .apply(group, &[b1.clone(), p1.clone()])
        .await
        .expect("apply");
    assert_eq!(
        applied,
        vec![
            Applied {
                topic: topic.clone(),
                partition: 0,
                next_offset: 7
            },
            Applied {
                topic: topic.clone(),
                partition: 1,
                next_offset: 2
            },
        ]
    );
    let expected = vec![
        row(1, "a2", "n1", "2.01"),
        row(2, "b2", "n2b", "6.01"),
        row(3, "c", "n3", "5.01"),
    ];
    assert_eq!(table(&r, &schema, "items").await, expected);

    // A replay changes nothing, and the offsets stay.
    let again = r.apply(group, &[b1.clone(), p1]).await.expect("replay");
    assert_eq!(again, applied);
    assert_eq!(table(&r, &schema, "items").await, expected);

    // The placeholder across calls keeps the stored value; a new column is added.
    let mut upd = ev(7, "u", 3, "c3", PLACEHOLDER);
    upd.after = Some(("c3", PLACEHOLDER, 701, Some("e3")));
    let b2 = batch(&topic, 0, "items", &[upd], true);
    r.apply(group, std::slice::from_ref(&b2))
        .await
        .expect("apply b2");
    let extra: Vec<(i64, Option<String>, Option<String>)> = rows(
        &r,
        &format!("SELECT id, note, extra FROM \"{schema}\".items ORDER BY id"),
    )
    .await;
    assert_eq!(extra[2], (3, Some("n3".into()), Some("e3".into())));
    assert_eq!(extra[0].2, None);

    // Truncate drops what came before it, in the batch and in the table.
    let trunc = Ev {
        offset: 9,
        op: "t",
        id: 0,
        after: None,
        tombstone: false,
    };
    let b3 = batch(
        &topic,
        0,
        "items",
        &[ev(8, "c", 9, "z", "nz"), trunc, ev(10, "c", 4, "d", "n4")],
        false,
    );
    r.apply(group, &[b3]).await.expect("apply b3");
    assert_eq!(
        table(&r, &schema, "items").await,
        vec![row(4, "d", "n4", "10.01")]
    );

    // Old batches replayed after all that are skipped entirely.
    let stale = r.apply(group, &[b1, b2]).await.expect("stale replay");
    assert_eq!(stale[0].next_offset, 11);
    assert_eq!(
        table(&r, &schema, "items").await,
        vec![row(4, "d", "n4", "10.01")]
    );
    let seek = r
        .next_offsets(group, &topic, &[0, 1, 2])
        .await
        .expect("offsets");
    assert_eq!(seek.len(), 2);
    assert_eq!((seek[&0], seek[&1]), (11, 2));
    // Another group has its own offsets.
    assert!(
        r.next_offsets("other", &topic, &[0])
            .await
            .expect("offsets")
            .is_empty()
    );
}

/// Snapshot rows are inserted without `ON CONFLICT` first; a second snapshot of stored rows
/// (an incremental snapshot, a re-snapshot) must still upsert them.
#[tokio::test]
async fn a_second_snapshot_of_stored_rows_upserts_them() {
    let (r, schema) = replicator(|_| {}).await;
    let topic = format!("{schema}.public.snap");
    let first = batch(
        &topic,
        0,
        "snap",
        &[
            ev(0, "r", 1, "a", "n1"),
            ev(1, "r", 2, "b", "n2"),
            ev(2, "r", 3, "c", "n3"),
        ],
        false,
    );
    r.apply("g", &[first]).await.expect("first snapshot");
    let again = batch(
        &topic,
        0,
        "snap",
        &[
            ev(3, "r", 2, "b2", "m2"),
            ev(4, "r", 3, "c2", "m3"),
            ev(5, "r", 4, "d2", "m4"),
            ev(6, "c", 5, "e", "n5"),
        ],
        false,
    );
    r.apply("g", &[again]).await.expect("second snapshot");
    // While plain inserts pause on this table, fresh rows are upserted.
    let later = batch(&topic, 0, "snap", &[ev(7, "c", 6, "f", "n6")], false);
    r.apply("g", &[later]).await.expect("later insert");
    assert_eq!(
        table(&r, &schema, "snap").await,
        vec![
            row(1, "a", "n1", "0.01"),
            row(2, "b2", "m2", "3.01"),
            row(3, "c2", "m3", "4.01"),
            row(4, "d2", "m4", "5.01"),
            row(5, "e", "n5", "6.01"),
            row(6, "f", "n6", "7.01"),
        ]
    );
}

#[tokio::test]
async fn a_tombstone_opening_the_next_batch_of_an_apply_deletes_in_its_partitions_table() {
    let (r, schema) = replicator(|_| {}).await;
    let topic = format!("{schema}.public.split");
    // One apply of three batches of one partition, as a lane hands them over: the table is
    // named from the source block, which a tombstone lacks, so it goes to the table of its
    // partition's last row, here in the batch before. A tombstone with no delete before it
    // (as after a compaction) shows that it was applied, not skipped.
    let b1 = batch(
        &topic,
        0,
        "split",
        &[ev(0, "r", 1, "a", "n1"), ev(1, "r", 2, "b", "n2")],
        false,
    );
    let b2 = batch(
        &topic,
        0,
        "split",
        &[del(2, 1, true), ev(3, "c", 3, "c", "n3")],
        false,
    );
    let b3 = batch(&topic, 0, "split", &[del(4, 3, true)], false);
    r.apply("g", &[b1, b2, b3]).await.expect("apply");
    assert_eq!(
        table(&r, &schema, "split").await,
        vec![row(2, "b", "n2", "1.01")]
    );
}

#[tokio::test]
async fn keyless_tables_insert_once() {
    let (r, schema) = replicator(|_| {}).await;
    let topic = format!("{schema}.public.nokey");
    let b = batch(
        &topic,
        0,
        "nokey",
        &[
            ev(0, "r", 1, "a", "x"),
            ev(1, "c", 1, "a", "x"),
            ev(2, "u", 1, "b", "y"),
        ],
        false,
    );
    r.apply("g", std::slice::from_ref(&b)).await.expect("apply");
    r.apply("g", &[b]).await.expect("replay");
    let got = table(&r, &schema, "nokey").await;
    assert_eq!(
        got.len(),
        2,
        "two inserts, the update skipped, the replay skipped: {got:?}"
    );
    let pk: i64 = rows::<(i64,)>(
        &r,
        &format!(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{schema}' AND c.relname = 'nokey' AND i.indisprimary"
        ),
    )
    .await[0]
        .0;
    assert_eq!(pk, 0);

    let (strict, schema) = replicator(|c| c.keyless = KeylessMode::Error).await;
    let b = batch(
        &format!("{schema}.t"),
        3,
        "nokey",
        &[ev(5, "c", 1, "a", "x")],
        false,
    );
    let err = strict.apply("g", &[b]).await.unwrap_err();
    assert!(!err.retryable());
    let msg = err.to_string();
    assert!(
        msg.contains("[3] offset 5") && msg.contains("nokey") && msg.contains("keyless"),
        "{msg}"
    );
}

#[tokio::test]
async fn bad_records_stop_with_their_place_and_commit_nothing() {
    let (r, schema) = replicator(|c| {
        c.table_name_format = "${topic}".into();
        c.dots_to_underscores = false;
    })
    .await;
    // A table name longer than PostgreSQL holds is refused, not truncated.
    let long = format!("{schema}.{}", "x".repeat(64));
    let b = batch(&long, 0, "items", &[ev(0, "c", 1, "a", "b")], false);
    let err = r.apply("g", &[b]).await.unwrap_err();
    assert!(err.to_string().contains("64 bytes"), "{err}");

    // A value the existing column cannot hold: the whole call rolls back.
    let topic = format!("{schema}.ok");
    let good = batch(&topic, 0, "ok", &[ev(0, "c", 1, "a", "b")], false);
    r.apply("g", &[good]).await.expect("apply");
    let pool = r.pool();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE \"{schema}\".ok ALTER COLUMN name TYPE varchar(2)"
    )))
    .execute(pool)
    .await
    .expect("narrow");
    let b = batch(
        &topic,
        0,
        "ok",
        &[ev(1, "c", 2, "abc", "n"), ev(2, "c", 3, "ok", "n")],
        false,
    );
    let err = r.apply("g", &[b]).await.unwrap_err();
    assert!(!err.retryable(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{topic}[0] offset 1..=2, table {schema}.ok")),
        "{msg}"
    );
    assert_eq!(
        r.next_offsets("g", &topic, &[0]).await.expect("offsets")[&0],
        1
    );
    assert_eq!(table(&r, &schema, "ok").await.len(), 1);

    let unreachable = ReplicaConfig::new("postgres://lakesink:lakesink@127.0.0.1:1/replica");
    let err = PgReplicator::connect(&unreachable)
        .await
        .err()
        .expect("no database on port 1");
    assert!(err.retryable(), "{err}");
}

#[tokio::test]
async fn a_value_too_long_for_a_hand_narrowed_column_is_refused_not_cut() {
    let by_topic = |c: &mut ReplicaConfig| {
        c.table_name_format = "${topic}".into();
        c.dots_to_underscores = false;
    };
    let (r, schema) = replicator(by_topic).await;
    let topic = format!("{schema}.narrow");
    let first = batch(&topic, 0, "narrow", &[ev(0, "c", 1, "a", "b")], false);
    r.apply("g", &[first]).await.expect("apply");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE \"{schema}\".narrow ALTER COLUMN name TYPE varchar(2), \
         ALTER COLUMN note TYPE char(2)"
    )))
    .execute(r.pool())
    .await
    .expect("narrow");
    // A replicator started now reads the narrowed table; an explicit cast to varchar(2) or
    // char(2) would cut "abc" to "ab" without a word.
    let (fresh, _) = replicator(by_topic).await;
    for (i, (name, note)) in [("abc", "n"), ("ok", "abc")].into_iter().enumerate() {
        let offset = 1 + i as i64;
        for op in ["u", "c"] {
            let id = if op == "u" { 1 } else { 2 };
            let mut e = ev(offset, op, id, name, note);
            e.after = Some((name, note, 1, None));
            let b = batch(&topic, 0, "narrow", &[e], false);
            let err = fresh.apply("g", &[b]).await.unwrap_err();
            assert!(!err.retryable(), "{err}");
            assert!(err.to_string().contains("too long"), "{err}");
        }
    }
    let names: Vec<(String, String)> = rows(
        &fresh,
        &format!("SELECT name, note FROM \"{schema}\".narrow ORDER BY id"),
    )
    .await;
    assert_eq!(names, vec![("a".to_owned(), "b ".to_owned())]);
}

/// ExtractNewRecordState output (rewrite mode: deletes carry the old row and
/// `__deleted = "true"`), keyed by a value field, named by its `__table` field.
fn flattened(topic: &str, events: &[(i64, &'static str, i64, &'static str)]) -> ChangeBatch {
    let n = events.len();
    let fields: Fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("__table", DataType::Utf8, true),
        Field::new("__deleted", DataType::Utf8, true),
    ]
    .into();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.2))),
        Arc::new(StringArray::from_iter_values(events.iter().map(|e| e.3))),
        Arc::new(StringArray::from(vec!["flat"; n])),
        Arc::new(StringArray::from_iter_values(
            events
                .iter()
                .map(|e| if e.1 == "d" { "true" } else { "false" }),
        )),
    ];
    let after = StructArray::new(fields, cols, None);
    let schema = Schema::new(vec![
        Field::new("__offset", DataType::Int64, false),
        Field::new("__op", DataType::Utf8, false),
        Field::new("__tombstone", DataType::Boolean, false),
        Field::new("key", DataType::Struct(Fields::empty()), true),
        Field::new("after", after.data_type().clone(), true),
    ]);
    let rows = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.0))),
            Arc::new(StringArray::from_iter_values(events.iter().map(|e| e.1))),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(StructArray::new_null(Fields::empty(), n)),
            Arc::new(after),
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
        shape: ValueShape::Flattened,
        rows,
    }
}

#[tokio::test]
async fn flattened_deletes_and_record_value_keys() {
    let (r, schema) = replicator(|c| {
        c.pk_mode = lakesink_config::PkMode::RecordValue;
        c.pk_fields = vec!["id".into()];
    })
    .await;
    let b = flattened(
        &format!("{schema}.flat"),
        &[
            (0, "c", 1, "a"),
            (1, "c", 2, "b"),
            (2, "u", 1, "a2"),
            (3, "d", 2, "b"),
        ],
    );
    r.apply("g", &[b]).await.expect("apply");
    let got: Vec<(i64, Option<String>)> = rows(
        &r,
        &format!("SELECT id, name FROM \"{schema}\".flat ORDER BY id"),
    )
    .await;
    assert_eq!(got, vec![(1, Some("a2".into()))]);
    let cols: Vec<(String,)> = rows(
        &r,
        &format!(
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = 'flat' ORDER BY ordinal_position"
        ),
    )
    .await;
    let cols: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        cols,
        ["id", "name"],
        "`__` fields are metadata, not columns"
    );
}

/// A flattened record's history row: its image is the record (a rewritten delete's too), its
/// `__` metadata fields are not columns.
#[tokio::test]
async fn flattened_records_have_their_history_too() {
    let (r, schema) = replicator(|c| {
        c.pk_mode = lakesink_config::PkMode::RecordValue;
        c.pk_fields = vec!["id".into()];
        c.mode = lakesink_config::TableMode::Both;
    })
    .await;
    let b = flattened(
        &format!("{schema}.flat"),
        &[(0, "c", 1, "a"), (1, "u", 1, "a2"), (2, "d", 1, "a2")],
    );
    r.apply("g", &[b]).await.expect("apply");
    let got: Vec<(i64, String, i64, Option<String>)> = rows(
        &r,
        &format!("SELECT __offset, __op, id, name FROM \"{schema}\".flat_history ORDER BY 1"),
    )
    .await;
    let want = [(0, "c", "a"), (1, "u", "a2"), (2, "d", "a2")]
        .map(|(o, op, n)| (o, op.to_owned(), 1, Some(n.to_owned())));
    assert_eq!(got, want);
    let cols: Vec<(String,)> = rows(
        &r,
        &format!(
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = 'flat_history' ORDER BY ordinal_position"
        ),
    )
    .await;
    let cols: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        cols,
        [
            "__topic",
            "__partition",
            "__offset",
            "__op",
            "__source_ts",
            "__kafka_ts",
            "__source_position",
            "id",
            "name"
        ]
    );
    let mirror: Vec<(i64,)> = rows(&r, &format!("SELECT id FROM \"{schema}\".flat")).await;
    assert!(mirror.is_empty(), "the mirror applied the delete");
}

#[tokio::test]
async fn partitions_of_a_new_table_applied_concurrently_create_it_once() {
    let (r, schema) = replicator(|_| {}).await;
    let topic = format!("{schema}.public.race");
    let calls: Vec<ChangeBatch> = (0..4)
        .map(|p| {
            batch(
                &topic,
                p,
                "race",
                &[ev(0, "c", i64::from(p), "n", "x")],
                p == 3,
            )
        })
        .collect();
    let results =
        futures::future::join_all(calls.iter().map(|b| r.apply("g", std::slice::from_ref(b))))
            .await;
    for res in results {
        res.expect("concurrent apply");
    }
    assert_eq!(table(&r, &schema, "race").await.len(), 4);
}

#[tokio::test]
async fn schema_changes_the_config_forbids_are_errors() {
    let (r, schema) = replicator(|c| {
        c.auto_create = false;
        c.schema_evolution = lakesink_config::SchemaEvolution::None;
    })
    .await;
    let topic = format!("{schema}.public.items");
    let err = r
        .apply(
            "g",
            &[batch(&topic, 0, "items", &[ev(0, "c", 1, "a", "b")], false)],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("auto-create is off"), "{err}");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!(
            "CREATE TABLE \"{schema}\".items (id bigint PRIMARY KEY, name text, note text, amount numeric)"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(r.pool())
            .await
            .expect("create by hand");
    }
    r.apply(
        "g",
        &[batch(&topic, 0, "items", &[ev(0, "c", 1, "a", "b")], false)],
    )
    .await
    .expect("existing table");
    let err = r
        .apply(
            "g",
            &[batch(&topic, 0, "items", &[ev(1, "c", 2, "a", "b")], true)],
        )
        .await
        .unwrap_err();
    assert!(!err.retryable());
    assert!(
        err.to_string().contains("extra") && err.to_string().contains("offset 1"),
        "{err}"
    );
}

/// MySQL, SQL Server and Db2 text may hold U+0000, which PostgreSQL text cannot: the row is
/// refused with its place and column, not with the server's "invalid byte sequence".
#[tokio::test]
async fn text_holding_nul_is_refused_naming_row_and_column() {
    let (r, schema) = replicator(|c| {
        c.table_name_format = "${topic}".into();
        c.dots_to_underscores = false;
    })
    .await;
    let topic = format!("{schema}.nul");
    let b = batch(
        &topic,
        0,
        "nul",
        &[ev(0, "c", 1, "ok", "fine"), ev(1, "c", 2, "a\0b", "n")],
        false,
    );
    let err = r.apply("g", &[b]).await.unwrap_err();
    assert!(!err.retryable(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{topic}[0] offset 1"))
            && msg.contains("column `name`")
            && msg.contains("U+0000"),
        "{msg}"
    );
}

/// An update whose TOASTed note is unchanged, of a row the replica does not hold (never
/// captured, or truncated since): the note is unknown, written NULL and counted, on the
/// upsert path and on the fresh insert after a truncate; an update of a held row keeps it.
#[tokio::test]
async fn an_unchanged_toast_value_of_a_row_not_held_is_counted_unknown() {
    let (r, schema) = replicator(|c| c.truncate_enabled = true).await;
    let topic = format!("{schema}.public.items");
    let unknown = |r: &PgReplicator| -> Vec<(String, u64)> {
        r.take_unknown()
            .into_iter()
            .map(|u| (u.column, u.values))
            .collect()
    };
    let b = batch(
        &topic,
        0,
        "items",
        &[ev(0, "u", 1, "a", PLACEHOLDER)],
        false,
    );
    r.apply("g", &[b]).await.expect("apply");
    assert_eq!(unknown(&r), [("note".to_owned(), 1)]);
    assert_eq!(table(&r, &schema, "items").await.len(), 1);

    // Now held: an update keeps the stored (NULL) note and nothing more is unknown.
    let b = batch(
        &topic,
        0,
        "items",
        &[ev(1, "c", 2, "b", "n2"), ev(2, "u", 1, "a2", PLACEHOLDER)],
        false,
    );
    r.apply("g", &[b]).await.expect("apply");
    assert_eq!(unknown(&r), []);

    // After a truncate the row is gone again: the fresh insert counts it.
    let trunc = Ev {
        offset: 3,
        op: "t",
        id: 0,
        after: None,
        tombstone: false,
    };
    let b = batch(
        &topic,
        0,
        "items",
        &[
            trunc,
            ev(4, "u", 2, "b2", PLACEHOLDER),
            ev(5, "c", 3, "c", "n3"),
        ],
        false,
    );
    r.apply("g", &[b]).await.expect("apply");
    assert_eq!(unknown(&r), [("note".to_owned(), 1)]);
    let notes: Vec<(i64, Option<String>)> = rows(
        &r,
        &format!("SELECT id, note FROM \"{schema}\".items ORDER BY id"),
    )
    .await;
    assert_eq!(notes, vec![(2, None), (3, Some("n3".into()))]);
}

/// A replicator and its hand-made `items` table, whose `note` is `NOT NULL`; the topic.
async fn strict_items() -> (PgReplicator, String, String) {
    let (r, schema) = replicator(|_| {}).await;
    let topic = format!("{schema}.public.items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!(
            "CREATE TABLE \"{schema}\".items (id bigint PRIMARY KEY, name text, note text NOT NULL, amount numeric)"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(r.pool())
            .await
            .expect("setup");
    }
    (r, schema, topic)
}

/// An unchanged TOASTed value of a row the replica does not hold, in a column the table has
/// `NOT NULL`: refused, never invented, with what to do.
#[tokio::test]
async fn an_unknown_value_for_a_not_null_column_is_refused_saying_what_to_do() {
    let (r, schema, topic) = strict_items().await;
    let b = batch(
        &topic,
        0,
        "items",
        &[ev(0, "u", 1, "a", PLACEHOLDER)],
        false,
    );
    let err = r.apply("g", &[b]).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("not-null constraint"), "{msg}");
    assert!(msg.contains("REPLICA IDENTITY FULL"), "{msg}");
    assert!(
        table(&r, &schema, "items").await.is_empty(),
        "nothing written"
    );
}

/// The same with the row held: the stored value stays, as the source's did.
#[tokio::test]
async fn a_held_rows_unchanged_value_in_a_not_null_column_stays() {
    let (r, schema, topic) = strict_items().await;
    let b = batch(
        &topic,
        0,
        "items",
        &[ev(0, "c", 1, "a", "kept"), ev(1, "c", 2, "b", "n2")],
        false,
    );
    r.apply("g", &[b]).await.expect("apply");
    let b = batch(
        &topic,
        0,
        "items",
        &[ev(2, "u", 1, "a2", PLACEHOLDER)],
        false,
    );
    r.apply("g", &[b])
        .await
        .expect("the stored value stands in");
    let notes: Vec<(i64, Option<String>, String)> = rows(
        &r,
        &format!("SELECT id, name, note FROM \"{schema}\".items ORDER BY id"),
    )
    .await;
    assert_eq!(
        notes,
        [
            (1, Some("a2".to_owned()), "kept".to_owned()),
            (2, Some("b".to_owned()), "n2".to_owned())
        ]
    );
}
