//! [`LakeSink`]: change batches into per-partition data files of their lake table, committed
//! per table on an interval or a size, the partitions' offsets in the same snapshot.
//!
//! - One table per topic (`table-name-format`), created on its first rows, its schema evolved
//!   by adding the columns a new schema version brings.
//! - Each Kafka partition has its own files, so a revoked partition's rows are dropped alone.
//! - One commit per table runs at a time, in the background; rows go on arriving meanwhile.
//! - A partition another instance committed meanwhile (a rebalance) is fenced: its rows are
//!   dropped and it is read again from the table's offset.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use futures::future::BoxFuture;
use iceberg::spec::{Datum, Schema, Struct, StructType};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use lakesink_config::{LakeConfig, LakeMode};
use lakesink_model::{Backoff, Fault, retrying};
use lakesink_schema_registry::{ChangeBatch, ValueShape};
use object_store::ObjectStoreExt;
use parquet::file::properties::WriterProperties;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::catalog::{OneAttempt, is_conflict};
use super::commit::Committer;
use super::files::{
    OpenFile, Sealed, data_file, encode, equality_delete_file, file_name, properties,
};
use super::keyed::{self, Incoming, KeyedRows, Older};
use super::offsets::{self, Covered, Outcome};
use super::partition::{Partitioner, unbound_spec};
use super::promote::{Promoting, widened};
use super::storage::LakeStorage;
use super::types::{Evolution, conform, evolution, iceberg_schema};
use super::{LAKE, LakeError};
use crate::parquet::content::shape_apart;
use crate::sink::{
    Backpressure, Event, Held, Meter, Receipt, Resume, Rewound, Sink, SinkError, TopicPartition,
};

/// What the sink and its commits share.
struct Shared {
    config: LakeConfig,
    catalog: OneAttempt,
    /// Commits snapshots built on the table as loaded ([`super::commit`]).
    committer: Committer,
    storage: LakeStorage,
    namespace: NamespaceIdent,
    group: String,
    props: WriterProperties,
    meter: Arc<dyn Meter>,
    /// Per partition, the next offset the table held when this instance last looked (at
    /// assignment, after its commits): what a commit expects to find.
    known: Mutex<HashMap<TopicPartition, Option<i64>>>,
    /// Upsert mode: per table, per manifest (immutable, so read once), its live data files'
    /// key bounds ([`older`]).
    manifests: Mutex<HashMap<TableIdent, HashMap<String, Arc<FileBounds>>>>,
}

impl Shared {
    fn ident(&self, topic: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), self.config.table_name(topic))
    }

    fn known(&self, part: &TopicPartition) -> Option<i64> {
        lock(&self.known).get(part).copied().flatten()
    }

    fn set_known(&self, part: &TopicPartition, at: Option<i64>) {
        lock(&self.known).insert(part.clone(), at);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn fail(e: LakeError) -> SinkError {
    SinkError::in_sink(LAKE, e)
}

/// A Kafka partition's rows not yet committed: a file per partition value of the table's
/// spec (one, unpartitioned).
struct PartRows {
    sealed: Vec<(Struct, Sealed)>,
    open: HashMap<Struct, OpenFile>,
    /// Upsert mode: the changes, collapsed and written into files when the commit runs.
    keyed: Option<KeyedRows>,
    first: i64,
    last: i64,
    rows: u64,
}

impl PartRows {
    fn bytes(&self) -> usize {
        self.sealed
            .iter()
            .map(|(_, s)| s.bytes.len())
            .sum::<usize>()
            + self.open.values().map(OpenFile::bytes).sum::<usize>()
            + self.keyed.as_ref().map_or(0, KeyedRows::bytes)
    }

    fn new(batch: &ChangeBatch) -> Self {
        Self {
            sealed: Vec::new(),
            open: HashMap::new(),
            keyed: None,
            first: batch.first_offset,
            last: batch.last_offset,
            rows: 0,
        }
    }

    /// Seals the open files (all of them, or those whose schema is not `schema`).
    fn seal(&mut self, keep: Option<&arrow_schema::SchemaRef>) -> Result<(), SinkError> {
        let done: Vec<Struct> = self
            .open
            .iter()
            .filter(|(_, o)| keep.is_none_or(|k| o.schema() != k))
            .map(|(v, _)| v.clone())
            .collect();
        for v in done {
            if let Some(o) = self.open.remove(&v) {
                self.sealed
                    .push((v, o.seal().map_err(|e| fail(LakeError::Data(e)))?));
            }
        }
        Ok(())
    }
}

struct TableState {
    ident: TableIdent,
    table: Table,
    /// Splits rows by the table's partition spec.
    partitioner: Partitioner,
    parts: HashMap<TopicPartition, PartRows>,
    /// When the oldest uncommitted rows arrived (wall clock, ms).
    since_ms: Option<i64>,
    /// When the newest uncommitted rows arrived (wall clock, ms).
    last_ms: i64,
    /// The first offsets of the partitions in the running commit.
    committing: HashMap<TopicPartition, i64>,
    /// Bytes of the running commit's files.
    committing_bytes: usize,
}

impl TableState {
    fn bytes(&self) -> usize {
        self.parts.values().map(PartRows::bytes).sum()
    }
    fn running(&self) -> bool {
        !self.committing.is_empty()
    }
}

/// A finished commit.
struct Done {
    table: String,
    result: Result<Outcome, SinkError>,
}

pub struct LakeSink {
    s: Arc<Shared>,
    tables: HashMap<String, TableState>,
    running: JoinSet<Done>,
    /// Partitions let go of after a fence, with the offset they are read again from.
    out: HashMap<TopicPartition, i64>,
    /// Events found outside `next_event` (fences), handed out first.
    queued: Vec<Event>,
}

impl LakeSink {
    /// Opens the store and the catalog, and makes sure the namespace exists.
    pub async fn connect(
        config: &LakeConfig,
        group: &str,
        meter: Arc<dyn Meter>,
    ) -> Result<Self, SinkError> {
        let storage = LakeStorage::open(&config.warehouse, &config.store)
            .map_err(|e| fail(LakeError::Config(format!("lake.warehouse: {e}"))))?;
        let catalog = super::catalog::open(config, &storage)
            .await
            .map_err(|e| fail(LakeError::Catalog(e)))?;
        let committer = Committer::open(config).map_err(|e| fail(LakeError::Catalog(e)))?;
        let namespace = NamespaceIdent::from_vec(config.namespace_levels())
            .map_err(|e| fail(LakeError::Config(format!("lake.namespace: {e}"))))?;
        let s = Arc::new(Shared {
            config: config.clone(),
            catalog,
            committer,
            storage,
            namespace,
            group: group.to_owned(),
            props: properties(config.codec, config.row_group_rows),
            meter,
            known: Mutex::default(),
            manifests: Mutex::default(),
        });
        retrying(
            Backoff::DEFAULT,
            &*s.meter,
            Some(LAKE),
            "creating the lake namespace",
            || ensure_namespace(&s.catalog, &s.namespace),
        )
        .await
        .map_err(fail)?;
        Ok(Self {
            s,
            tables: HashMap::new(),
            running: JoinSet::new(),
            out: HashMap::new(),
            queued: Vec::new(),
        })
    }

    fn memory(&self) -> usize {
        self.tables
            .values()
            .map(|t| t.bytes() + t.committing_bytes)
            .sum()
    }

    /// The table's state, loading or creating the table on its first rows.
    async fn table(
        &mut self,
        topic: &str,
        first: &arrow_array::RecordBatch,
    ) -> Result<&mut TableState, SinkError> {
        let name = self.s.config.table_name(topic);
        if !self.tables.contains_key(&name) {
            let ident = self.s.ident(topic);
            let mode = self.s.config.mode_of(&name);
            let schema = iceberg_schema(&first.schema()).map_err(|e| {
                fail(LakeError::Data(format!(
                    "topic {topic}: lake table {ident}: {e}"
                )))
            })?;
            let s = self.s.clone();
            let table = retrying(
                Backoff::DEFAULT,
                &*s.meter,
                Some(LAKE),
                "loading a lake table",
                || load_or_create(&s, &ident, &schema, mode),
            )
            .await
            .map_err(fail)?;
            let partitioner = partitioner(&table)?;
            self.tables.insert(
                name.clone(),
                TableState {
                    ident,
                    table,
                    partitioner,
                    parts: HashMap::new(),
                    since_ms: None,
                    last_ms: 0,
                    committing: HashMap::new(),
                    committing_bytes: 0,
                },
            );
        }
        self.tables
            .get_mut(&name)
            .ok_or_else(|| fail(LakeError::Data(format!("no lake table {name}"))))
    }

    /// The table's state when the table exists (loading it), without creating it.
    async fn existing(&mut self, topic: &str) -> Result<Option<&mut TableState>, SinkError> {
        let name = self.s.config.table_name(topic);
        if !self.tables.contains_key(&name) {
            let ident = self.s.ident(topic);
            let s = self.s.clone();
            let exists = retrying(
                Backoff::DEFAULT,
                &*s.meter,
                Some(LAKE),
                "loading a lake table",
                || async {
                    s.catalog
                        .table_exists(&ident)
                        .await
                        .map_err(LakeError::Catalog)
                },
            )
            .await
            .map_err(fail)?;
            if !exists {
                return Ok(None);
            }
            // It exists: this loads it (its mode checked), creating nothing.
            let none = arrow_array::RecordBatch::new_empty(Arc::new(arrow_schema::Schema::empty()));
            self.table(topic, &none).await?;
        }
        Ok(self.tables.get_mut(&name))
    }

    async fn take(&mut self, batch: &ChangeBatch, now_ms: i64) -> Result<(), SinkError> {
        let part = TopicPartition::new(batch.topic.clone(), batch.partition);
        if self.out.contains_key(&part) || batch.rows.num_rows() == 0 {
            return Ok(());
        }
        let where_ = || {
            format!(
                "topic {} partition {} offsets {}..={}",
                batch.topic, batch.partition, batch.first_offset, batch.last_offset
            )
        };
        let name = self.s.config.table_name(&batch.topic);
        if self.s.config.mode_of(&name) == LakeMode::Upsert {
            if !self.take_upsert(batch, &part, &where_).await? {
                return Ok(());
            }
        } else {
            let apart = shape_apart(batch, self.s.config.content)
                .map_err(|e| fail(LakeError::Data(format!("{}: {e}", where_()))))?;
            for shaped in &apart {
                self.take_rows(batch, &part, shaped, &where_).await?;
            }
        }
        let lost = || {
            fail(LakeError::Data(format!(
                "{}: no open lake files after writing",
                where_()
            )))
        };
        let state = self.tables.get_mut(&name).ok_or_else(lost)?;
        let entry = state.parts.get_mut(&part).ok_or_else(lost)?;
        entry.last = batch.last_offset;
        entry.rows += batch.rows.num_rows() as u64;
        state.since_ms.get_or_insert(now_ms);
        state.last_ms = now_ms;
        Ok(())
    }

    /// Writes shaped rows of `batch` into the open files of its table, evolving the table's
    /// schema first where the rows need it.
    async fn take_rows(
        &mut self,
        batch: &ChangeBatch,
        part: &TopicPartition,
        shaped: &arrow_array::RecordBatch,
        where_: &(dyn Fn() -> String + Sync),
    ) -> Result<(), SinkError> {
        let s = self.s.clone();
        let state = self.evolved(batch, shaped, where_).await?;
        let rows =
            conform(shaped, state.table.metadata().current_schema().as_struct()).map_err(|e| {
                fail(LakeError::Data(format!(
                    "{}: lake table {}: {e}",
                    where_(),
                    state.ident
                )))
            })?;
        let entry = state
            .parts
            .entry(part.clone())
            .or_insert_with(|| PartRows::new(batch));
        entry.seal(Some(&rows.schema()))?;
        let split = state.partitioner.split(&rows).map_err(|e| {
            fail(LakeError::Data(format!(
                "{}: lake table {}: partitioning: {e}",
                where_(),
                state.ident
            )))
        })?;
        for (value, rows) in split {
            let open = match entry.open.entry(value) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => v.insert(
                    OpenFile::new(rows.schema(), s.props.clone())
                        .map_err(|e| fail(LakeError::Data(format!("{}: {e}", where_()))))?,
                ),
            };
            open.write(&rows)
                .map_err(|e| fail(LakeError::Data(format!("{}: {e}", where_()))))?;
        }
        Ok(())
    }

    /// The table of `batch`'s topic, loaded or created, with the columns of `shaped` added
    /// and widened where it holds them narrower.
    async fn evolved(
        &mut self,
        batch: &ChangeBatch,
        shaped: &arrow_array::RecordBatch,
        where_: &(dyn Fn() -> String + Sync),
    ) -> Result<&mut TableState, SinkError> {
        let s = self.s.clone();
        let state = self.table(&batch.topic, shaped).await?;
        let ev = evolution(
            &shaped.schema(),
            state.table.metadata().current_schema().as_struct(),
        )
        .map_err(|e| {
            fail(LakeError::Data(format!(
                "{}: lake table {}: {e}",
                where_(),
                state.ident
            )))
        })?;
        if !ev.is_empty() {
            let ident = state.ident.clone();
            let batch_schema = shaped.schema();
            state.table = retrying(
                Backoff::DEFAULT,
                &*s.meter,
                Some(LAKE),
                "evolving a lake table's schema",
                || evolve(&s.catalog, &ident, &batch_schema),
            )
            .await
            .map_err(fail)?;
            state.partitioner = partitioner(&state.table)?;
        }
        Ok(state)
    }

    /// Upsert mode: takes the batch's changes into its partition's [`KeyedRows`]. False when
    /// the batch holds nothing for the table (tombstones alone).
    async fn take_upsert(
        &mut self,
        batch: &ChangeBatch,
        part: &TopicPartition,
        where_: &(dyn Fn() -> String + Sync),
    ) -> Result<bool, SinkError> {
        let rows = &batch.rows;
        let bad = |e: String| fail(LakeError::Data(format!("{}: {e}", where_())));
        let n = rows.num_rows();
        let after = match batch.shape {
            ValueShape::Envelope | ValueShape::Flattened => rows.column_by_name("after"),
            ValueShape::KeyOnly => None,
            ValueShape::NonData(_) => return Ok(false),
        };
        let ops = rows
            .column_by_name("__op")
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| bad("the change batch has no __op".into()))?;
        let tombstones = rows
            .column_by_name("__tombstone")
            .and_then(|c| c.as_boolean_opt());
        // A tombstone deletes its key: after Debezium's own delete it changes nothing, and
        // where the delete was dropped (a flattening transform's `drop` or `tombstone`
        // handling) it is the only delete there is.
        let ops: arrow_array::StringArray = (0..n)
            .map(|i| {
                if tombstones.is_some_and(|t| t.is_valid(i) && t.value(i)) {
                    Some("d")
                } else {
                    ops.is_valid(i).then(|| ops.value(i))
                }
            })
            .collect();
        let key = rows
            .column_by_name("key")
            .filter(|k| k.as_struct_opt().is_some_and(|s| s.num_columns() > 0))
            .cloned();
        let offsets = rows
            .column_by_name("__offset")
            .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
            .cloned();
        let (state, images, has_image) = match after {
            Some(after) => {
                let image =
                    keyed::children(after).ok_or_else(|| bad("`after` is not a record".into()))?;
                let state = self.evolved(batch, &image, where_).await?;
                let schema = state.table.metadata().current_schema();
                let images = conform(&image, schema.as_struct())
                    .map_err(|e| bad(format!("lake table {}: {e}", state.ident)))?;
                let has_image: Vec<bool> = (0..n).map(|i| after.is_valid(i)).collect();
                (state, images, has_image)
            }
            // Tombstones alone: a table not made yet holds none of their keys.
            None => match self.existing(&batch.topic).await? {
                Some(state) => {
                    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(n));
                    let images = arrow_array::RecordBatch::try_new_with_options(
                        Arc::new(arrow_schema::Schema::empty()),
                        Vec::new(),
                        &options,
                    )
                    .map_err(|e| bad(e.to_string()))?;
                    (state, images, vec![false; n])
                }
                None => return Ok(false),
            },
        };
        let ident = state.ident.clone();
        let in_table = |e: String| bad(format!("lake table {ident}: {e}"));
        let schema = state.table.metadata().current_schema().clone();
        let (keys, has_key) = match &key {
            Some(k) => {
                let kb =
                    keyed::children(k).ok_or_else(|| in_table("the key is not a record".into()))?;
                let mut fields = Vec::new();
                for f in kb.schema().fields() {
                    let tf = schema.as_struct().field_by_name(f.name()).ok_or_else(|| {
                        in_table(format!(
                            "the record key's field `{}` is not a column of the row, so an \
                             upsert table cannot delete by it",
                            f.name()
                        ))
                    })?;
                    fields.push(tf.clone());
                }
                check_spec_on_key(&state.table, &fields).map_err(in_table)?;
                let kb = conform(&kb, &StructType::new(fields))
                    .map_err(|e| in_table(format!("the key: {e}")))?;
                (Some(kb), (0..n).map(|i| k.is_valid(i)).collect())
            }
            None => (None, vec![false; n]),
        };
        let entry = state
            .parts
            .entry(part.clone())
            .or_insert_with(|| PartRows::new(batch));
        let offset = |row: usize| {
            let at = offsets
                .as_ref()
                .filter(|o| row < o.len())
                .map_or_else(|| "?".to_owned(), |o| o.value(row).to_string());
            format!(
                "topic {} partition {} offset {at}: lake table {ident}",
                batch.topic, batch.partition
            )
        };
        entry
            .keyed
            .get_or_insert_with(KeyedRows::default)
            .take(
                Incoming {
                    ops: &ops,
                    keys,
                    has_key,
                    images,
                    has_image,
                },
                &offset,
            )
            .map_err(|e| fail(LakeError::Data(e)))?;
        Ok(true)
    }

    /// Starts the commits that are due: by size, by age, by idleness, or everything (`all`,
    /// at close).
    fn start_due(&mut self, now_ms: i64, all: bool) -> Result<(), SinkError> {
        let c = &self.s.config;
        let mut due: Vec<String> = self
            .tables
            .iter()
            .filter(|(_, t)| !t.running() && !t.parts.is_empty())
            .filter(|(_, t)| all || commit_due(c, t.bytes(), t.since_ms, t.last_ms, now_ms))
            .map(|(n, _)| n.clone())
            .collect();
        let budget = usize::try_from(self.s.config.memory_budget_bytes).unwrap_or(usize::MAX);
        if due.is_empty() && self.memory() >= budget {
            // Over the budget: the largest table commits early.
            if let Some((n, _)) = self
                .tables
                .iter()
                .filter(|(_, t)| !t.running() && !t.parts.is_empty())
                .max_by_key(|(_, t)| t.bytes())
            {
                due.push(n.clone());
            }
        }
        for name in due {
            self.start(&name)?;
        }
        Ok(())
    }

    fn start(&mut self, name: &str) -> Result<(), SinkError> {
        let Some(state) = self.tables.get_mut(name) else {
            return Ok(());
        };
        let mut work = Vec::new();
        for (part, mut rows) in state.parts.drain() {
            rows.seal(None)?;
            state.committing.insert(part.clone(), rows.first);
            state.committing_bytes += rows.bytes();
            let expected = self.s.known(&part);
            work.push((part, expected, rows));
        }
        state.since_ms = None;
        let s = self.s.clone();
        let ident = state.ident.clone();
        let table = state.table.clone();
        let name = name.to_owned();
        self.running.spawn(async move {
            let result = commit(&s, &ident, &table, work).await;
            Done {
                table: name,
                result,
            }
        });
        Ok(())
    }

    /// A finished commit: what became durable, and what was fenced.
    fn finish(&mut self, done: Done) -> Result<Event, SinkError> {
        let outcome = done.result?;
        let Some(state) = self.tables.get_mut(&done.table) else {
            return Ok(Event::Nothing);
        };
        state.committing.clear();
        state.committing_bytes = 0;
        if let Some(t) = outcome.table {
            state.table = t;
        }
        let mut receipts = Vec::new();
        for c in outcome.committed {
            self.s.set_known(&c.part, Some(c.next));
            debug!(topic = %c.part.topic, partition = c.part.partition, next = c.next, rows = c.rows, "lake commit");
            receipts.push(Receipt {
                part: c.part,
                rows: c.rows,
            });
        }
        let mut again = Vec::new();
        for (part, have) in outcome.fenced {
            let Some(at) = have else {
                return Err(fail(LakeError::Data(format!(
                    "lake table {}: the offsets of topic {} partition {} are gone from the \
                     table (rolled back to before lakesink's first commit, or its \
                     properties edited): lakesink cannot tell which rows it holds; restore \
                     the table or drop it to rebuild it",
                    state.ident, part.topic, part.partition
                ))));
            };
            info!(topic = %part.topic, partition = part.partition, table = %state.ident, at,
                "another writer committed this partition to the lake table: reading it again from the table's offset");
            self.s.set_known(&part, Some(at));
            state.parts.remove(&part);
            self.out.insert(part.clone(), at);
            again.push((part, at));
        }
        if !again.is_empty() {
            self.queued.push(Event::ReadAgain(again));
        }
        Ok(if receipts.is_empty() {
            self.queued.pop().unwrap_or(Event::Nothing)
        } else {
            Event::Durable(receipts)
        })
    }

    fn part_table(&self, part: &TopicPartition) -> Option<&TableState> {
        self.tables.get(&self.s.config.table_name(&part.topic))
    }
}

/// Whether a table holding `bytes` of files, its oldest rows from `since` and its newest from
/// `last`, commits at `now`: by size, by age, or idle with enough for a file of its own.
fn commit_due(c: &LakeConfig, bytes: usize, since: Option<i64>, last: i64, now: i64) -> bool {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let size = usize::try_from(c.commit_bytes).unwrap_or(usize::MAX);
    bytes >= size
        || since.is_some_and(|since| now.saturating_sub(since) >= ms(c.commit_interval_ms))
        || c.commit_idle_ms > 0
            && bytes >= size / 16
            && now.saturating_sub(last) >= ms(c.commit_idle_ms)
}

/// The table's partitioner, from its default spec (which may differ from `partition-by`: a
/// table keeps the spec it was created with).
fn partitioner(table: &Table) -> Result<Partitioner, SinkError> {
    let m = table.metadata();
    Partitioner::new(m.default_partition_spec(), m.current_schema()).map_err(|e| {
        fail(LakeError::Data(format!(
            "lake table {}: {e}",
            table.identifier()
        )))
    })
}

async fn ensure_namespace(catalog: &OneAttempt, ns: &NamespaceIdent) -> Result<(), LakeError> {
    if catalog
        .namespace_exists(ns)
        .await
        .map_err(LakeError::Catalog)?
    {
        return Ok(());
    }
    match catalog.create_namespace(ns, HashMap::new()).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => Ok(()),
        Err(e) => Err(LakeError::Catalog(e)),
    }
}

/// The table property naming what a lakesink table holds ([`LakeMode`]); a table without it
/// holds change events (lakesink made append tables only before it).
pub const MODE_PROPERTY: &str = "lakesink.mode";

async fn load_or_create(
    s: &Shared,
    ident: &TableIdent,
    schema: &Schema,
    mode: LakeMode,
) -> Result<Table, LakeError> {
    // Catalogs differ in what loading a missing table fails with; asking first is plain.
    if s.catalog
        .table_exists(ident)
        .await
        .map_err(LakeError::Catalog)?
    {
        let table = s
            .catalog
            .load_table(ident)
            .await
            .map_err(LakeError::Catalog)?;
        warn_other_spec(s, &table);
        return same_mode(table, mode);
    }
    let spec = unbound_spec(&s.config.partition_fields(), schema)
        .map_err(|e| LakeError::Config(format!("lake table {ident}: {e}")))?;
    let creation = TableCreation::builder()
        .name(ident.name().to_owned())
        .schema(schema.clone())
        .partition_spec(spec)
        .properties([
            ("write.format.default".to_owned(), "parquet".to_owned()),
            (MODE_PROPERTY.to_owned(), mode.as_str().to_owned()),
            (
                "lakesink.created-by".to_owned(),
                format!("lakesink {}", env!("CARGO_PKG_VERSION")),
            ),
        ])
        .build();
    match s.catalog.create_table(ident.namespace(), creation).await {
        Ok(t) => {
            info!(table = %ident, "created the lake table");
            Ok(t)
        }
        // Another instance created it first.
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => same_mode(
            s.catalog
                .load_table(ident)
                .await
                .map_err(LakeError::Catalog)?,
            mode,
        ),
        Err(e) => Err(LakeError::Catalog(e)),
    }
}

/// The table, if it holds what `mode` writes: change events written into a table of current
/// rows (or the reverse) would be read as something they are not.
fn same_mode(table: Table, mode: LakeMode) -> Result<Table, LakeError> {
    let have = table
        .metadata()
        .properties()
        .get(MODE_PROPERTY)
        .map_or("append", String::as_str);
    if have == mode.as_str() {
        return Ok(table);
    }
    Err(LakeError::Config(format!(
        "lake table {} holds {have} mode's rows ({MODE_PROPERTY} = {have}) and the configuration \
         writes it in {} mode: set mode = \"{have}\" for it in [lake.tables.\"{}\"], or give \
         it another name (table-name-format)",
        table.identifier(),
        mode.as_str(),
        table.identifier().name()
    )))
}

/// The live data files of one manifest: how many, and per key column (by field id) the
/// bounds of their values, `None` where one has none.
#[derive(Debug, Default)]
struct FileBounds {
    files: usize,
    bounds: HashMap<i32, Option<(Datum, Datum)>>,
}

impl FileBounds {
    /// Widens `self` by a file's bounds of the columns `ids`.
    fn add(&mut self, ids: &[i32], lower: &HashMap<i32, Datum>, upper: &HashMap<i32, Datum>) {
        let file = FileBounds {
            files: 1,
            bounds: ids
                .iter()
                .map(|id| (*id, lower.get(id).cloned().zip(upper.get(id).cloned())))
                .collect(),
        };
        self.merge(ids, &file);
    }

    fn merge(&mut self, ids: &[i32], other: &FileBounds) {
        if other.files == 0 {
            return;
        }
        let first = self.files == 0;
        self.files += other.files;
        for id in ids {
            let merged = match (self.bounds.get(id), other.bounds.get(id)) {
                (_, None | Some(None)) => None,
                (None, Some(Some((lo, hi)))) if first => Some((lo.clone(), hi.clone())),
                (Some(Some((a, b))), Some(Some((lo, hi)))) => widen(a, b, lo, hi),
                _ => None,
            };
            self.bounds.insert(*id, merged);
        }
    }
}

/// The least of two lower bounds and the greatest of two upper ones; `None` where they do
/// not compare (bounds of another type, from before a column was widened).
fn widen(a: &Datum, b: &Datum, lo: &Datum, hi: &Datum) -> Option<(Datum, Datum)> {
    let low = match a.partial_cmp(lo)? {
        std::cmp::Ordering::Greater => lo.clone(),
        _ => a.clone(),
    };
    let high = match b.partial_cmp(hi)? {
        std::cmp::Ordering::Less => hi.clone(),
        _ => b.clone(),
    };
    Some((low, high))
}

/// What the table's rows as they stand may hold of the key `names` (see [`Older`]): whether
/// it has any live data file, and each key column's bounds over them, from every data
/// manifest of the current snapshot (each read once, then remembered).
async fn older(s: &Shared, table: &Table, names: &[String]) -> Result<Older, LakeError> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Older::default());
    };
    let schema = table.metadata().current_schema();
    let ids: Vec<i32> = names
        .iter()
        .filter_map(|n| schema.field_id_by_name(n))
        .collect();
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(LakeError::Catalog)?;
    let mut total = FileBounds::default();
    let mut seen = HashMap::new();
    let ident = table.identifier().clone();
    for mf in list.entries() {
        if mf.content != iceberg::spec::ManifestContentType::Data {
            continue;
        }
        let known = lock(&s.manifests)
            .get(&ident)
            .and_then(|m| m.get(&mf.manifest_path).cloned());
        let bounds = match known {
            Some(b) => b,
            None => {
                let manifest = mf
                    .load_manifest(table.file_io())
                    .await
                    .map_err(LakeError::Catalog)?;
                let mut b = FileBounds::default();
                for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                    let f = e.data_file();
                    b.add(&ids, f.lower_bounds(), f.upper_bounds());
                }
                Arc::new(b)
            }
        };
        total.merge(&ids, &bounds);
        seen.insert(mf.manifest_path.clone(), bounds);
    }
    // Only the manifests the table lists now are kept.
    lock(&s.manifests).insert(ident, seen);
    let by_name = |id: &i32| schema.name_by_field_id(*id).map(str::to_owned);
    Ok(Older {
        rows: total.files > 0,
        bounds: total
            .bounds
            .iter()
            .filter_map(|(id, b)| Some((by_name(id)?, b.clone()?)))
            .collect(),
    })
}

/// An upsert table's partition spec must be over its key: a delete file applies within its
/// own partition, so a row must stay in the partition its key names.
fn check_spec_on_key(table: &Table, key: &[iceberg::spec::NestedFieldRef]) -> Result<(), String> {
    let m = table.metadata();
    for f in m.default_partition_spec().fields() {
        if !key.iter().any(|k| k.id == f.source_id) {
            let column = m
                .current_schema()
                .name_by_field_id(f.source_id)
                .unwrap_or("?")
                .to_owned();
            return Err(format!(
                "partition field `{}` is over `{column}`, not a column of the key {:?}: an \
                 upsert table may be partitioned by its key's columns only (bucket(N, id), \
                 identity), since an update may move a row out of any other partition",
                f.name,
                key.iter().map(|k| k.name.as_str()).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// A table made with another spec than `partition-by` keeps its own (lakesink does not
/// evolve specs); say so once, at load.
fn warn_other_spec(s: &Shared, table: &Table) {
    let fields = s.config.partition_fields();
    if fields.is_empty() {
        return;
    }
    let m = table.metadata();
    let want = unbound_spec(&fields, m.current_schema()).map(|u| {
        u.fields()
            .iter()
            .map(|f| (f.source_id, f.transform))
            .collect::<Vec<_>>()
    });
    let have: Vec<_> = m
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| (f.source_id, f.transform))
        .collect();
    if want.as_ref().is_ok_and(|w| *w == have) {
        return;
    }
    warn!(table = %table.identifier(), spec = ?m.default_partition_spec().fields(), configured = ?s.config.partition_by,
        "the lake table keeps the partition spec it was created with, not lake.partition-by");
}

/// Adds the batch's columns the table lacks and widens those it holds narrower, reloading on a
/// lost race.
async fn evolve(
    catalog: &OneAttempt,
    ident: &TableIdent,
    schema: &arrow_schema::Schema,
) -> Result<Table, LakeError> {
    loop {
        let table = catalog
            .load_table(ident)
            .await
            .map_err(LakeError::Catalog)?;
        let ev: Evolution = evolution(schema, table.metadata().current_schema().as_struct())
            .map_err(|e| LakeError::Data(format!("lake table {ident}: {e}")))?;
        if ev.is_empty() {
            return Ok(table);
        }
        for p in &ev.promote {
            info!(table = %ident, column = %p.path, from = %p.from, to = %p.to, "widening a column of the lake table");
        }
        let base = if ev.promote.is_empty() {
            table
        } else {
            widened(&table, &ev.promote)?
        };
        let tx = Transaction::new(&base);
        let mut update = tx.update_schema();
        for m in &ev.add {
            info!(table = %ident, column = %m.name, parent = ?m.parent, "adding a column to the lake table");
            update = update.add_column(match &m.parent {
                None => AddColumn::optional(&m.name, m.field_type.clone()),
                Some(p) => AddColumn::builder()
                    .parent(p.clone())
                    .name(m.name.clone())
                    .field_type(m.field_type.clone())
                    .build(),
            });
        }
        let tx = update.apply(tx).map_err(LakeError::Catalog)?;
        let done = if ev.promote.is_empty() {
            tx.commit(catalog).await
        } else {
            tx.commit(&Promoting {
                inner: catalog,
                base,
            })
            .await
        };
        match done {
            Ok(t) => return Ok(t),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(LakeError::Catalog(e)),
        }
    }
}

/// Uploads a table's files and commits them with their partitions' offsets.
async fn commit(
    s: &Shared,
    ident: &TableIdent,
    table: &Table,
    work: Vec<(TopicPartition, Option<i64>, PartRows)>,
) -> Result<Outcome, SinkError> {
    let location = table.metadata().location().trim_end_matches('/').to_owned();
    let schema = table.metadata().current_schema().clone();
    let spec_id = table.metadata().default_partition_spec_id();
    let store = s
        .storage
        .store()
        .map_err(|e| fail(LakeError::Catalog(e)))?
        .clone();
    // Upsert mode: what the table's rows may hold of the commit's keys, as it stands now
    // (another instance may have committed this partition's rows before a rebalance).
    let names = work
        .iter()
        .find_map(|(_, _, r)| r.keyed.as_ref().map(KeyedRows::key_names));
    let older = if let Some(names) = names {
        let fresh = retrying(
            Backoff::DEFAULT,
            &*s.meter,
            Some(LAKE),
            "loading a lake table",
            || async {
                s.catalog
                    .load_table(ident)
                    .await
                    .map_err(LakeError::Catalog)
            },
        )
        .await
        .map_err(fail)?;
        older(s, &fresh, &names).await.map_err(fail)?
    } else {
        Older::default()
    };
    let mut covered = Vec::new();
    for (part, expected, mut rows) in work {
        let upsert = match rows.keyed.take() {
            Some(k) => Some(
                seal_upsert(s, table, k, &older, &mut rows.sealed)
                    .map_err(|e| fail(LakeError::Data(format!("lake table {ident}: {e}"))))?,
            ),
            None => None,
        };
        let mut files = Vec::new();
        let mut deletes = Vec::new();
        let no_deletes = Vec::new();
        let delete_files = upsert.as_ref().map_or(&no_deletes, |u| &u.deletes);
        let listed = rows
            .sealed
            .iter()
            .map(|f| (f, false))
            .chain(delete_files.iter().map(|f| (f, true)));
        for ((value, sealed), is_delete) in listed {
            let path = format!(
                "{location}/data/{}",
                file_name(&part.topic, part.partition, rows.first)
            );
            let key = s
                .storage
                .key(&path)
                .map_err(|e| fail(LakeError::Catalog(e)))?;
            crate::failpoint::hit(crate::failpoint::LAKE_BEFORE_UPLOAD);
            retrying(
                Backoff::DEFAULT,
                &*s.meter,
                Some(LAKE),
                "uploading a lake data file",
                || {
                    let (store, key, bytes) = (store.clone(), key.clone(), sealed.bytes.clone());
                    async move {
                        store
                            .put(&key, bytes.into())
                            .await
                            .map(|_| ())
                            .map_err(|e| {
                                LakeError::Store(format!(
                                    "{key}: {}",
                                    crate::parquet::describe_store(&e)
                                ))
                            })
                    }
                },
            )
            .await
            .map_err(fail)?;
            if is_delete {
                let ids = upsert.as_ref().map(|u| u.equality_ids.clone());
                deletes.push(
                    equality_delete_file(
                        path,
                        sealed,
                        &schema,
                        spec_id,
                        value.clone(),
                        ids.unwrap_or_default(),
                    )
                    .map_err(|e| fail(LakeError::Data(e)))?,
                );
            } else {
                files.push(
                    data_file(path, sealed, &schema, spec_id, value.clone())
                        .map_err(|e| fail(LakeError::Data(e)))?,
                );
            }
        }
        covered.push(Covered {
            part,
            expected,
            next: rows.last.saturating_add(1),
            rows: rows.rows,
            files,
            deletes,
            truncate: upsert.as_ref().is_some_and(|u| u.truncate),
        });
    }
    crate::failpoint::hit(crate::failpoint::LAKE_BEFORE_COMMIT);
    let outcome = retrying(
        Backoff::DEFAULT,
        &*s.meter,
        Some(LAKE),
        "committing to a lake table",
        || {
            let covered = covered.clone();
            async move {
                offsets::commit(&s.catalog, &s.committer, ident, &s.group, covered)
                    .await
                    .map_err(LakeError::Catalog)
            }
        },
    )
    .await
    .map_err(fail)?;
    crate::failpoint::hit(crate::failpoint::LAKE_AFTER_COMMIT);
    Ok(outcome)
}

/// An upsert partition's changes as files: its rows to add (into `data`) and its keys'
/// equality deletes, split by the table's spec.
struct UpsertFiles {
    deletes: Vec<(Struct, Sealed)>,
    equality_ids: Vec<i32>,
    truncate: bool,
}

fn seal_upsert(
    s: &Shared,
    table: &Table,
    rows: KeyedRows,
    older: &Older,
    data: &mut Vec<(Struct, Sealed)>,
) -> Result<UpsertFiles, String> {
    let schema = table.metadata().current_schema();
    let equality_ids = rows
        .key_names()
        .iter()
        .map(|n| {
            schema
                .field_id_by_name(n)
                .ok_or_else(|| format!("the key's column `{n}` is not in the table"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let net = rows.seal(schema.as_struct(), older)?;
    let split = Partitioner::new(table.metadata().default_partition_spec(), schema)?;
    let mut deletes = Vec::new();
    for (batch, out) in [(net.rows, &mut *data), (net.deletes, &mut deletes)] {
        let Some(batch) = batch else { continue };
        for (value, part) in split.split(&batch)? {
            out.push((value, encode(&part, schema.as_struct(), s.props.clone())?));
        }
    }
    Ok(UpsertFiles {
        deletes,
        equality_ids,
        truncate: net.truncate,
    })
}

impl Sink for LakeSink {
    fn name(&self) -> &'static str {
        LAKE
    }

    fn takes_non_data(&self) -> bool {
        false
    }

    fn write<'a>(
        &'a mut self,
        batches: &'a [ChangeBatch],
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(async move {
            for b in batches {
                self.take(b, now_ms).await?;
            }
            self.start_due(now_ms, false)
        })
    }

    fn tick(&mut self, now_ms: i64) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move { self.start_due(now_ms, false) })
    }

    fn busy(&self) -> bool {
        !self.running.is_empty() || !self.queued.is_empty()
    }

    fn next_event(&mut self) -> BoxFuture<'_, Result<Event, SinkError>> {
        Box::pin(async move {
            if let Some(e) = self.queued.pop() {
                return Ok(e);
            }
            match self.running.join_next().await {
                None => Ok(Event::Nothing),
                Some(Ok(done)) => self.finish(done),
                Some(Err(e)) => Err(SinkError::with_fault(Some(LAKE), Fault::Bug, e)),
            }
        })
    }

    fn pending_start(&self, part: &TopicPartition) -> Option<i64> {
        let t = self.part_table(part);
        [
            t.and_then(|t| t.parts.get(part)).map(|r| r.first),
            t.and_then(|t| t.committing.get(part)).copied(),
            self.out.get(part).copied(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn rewound(&mut self, part: &TopicPartition, from: i64, _before: Option<i64>) -> Rewound {
        match self.out.get(part).copied() {
            Some(r) if r >= from => {
                self.out.remove(part);
                Rewound::From(r)
            }
            Some(r) => Rewound::Again(r),
            None => Rewound::Skip,
        }
    }

    fn revoke(&mut self, part: &TopicPartition) {
        let name = self.s.config.table_name(&part.topic);
        if let Some(t) = self.tables.get_mut(&name) {
            t.parts.remove(part);
            if t.parts.is_empty() {
                t.since_ms = None;
            }
        }
        self.out.remove(part);
        lock(&self.s.known).remove(part);
    }

    fn backpressure(
        &mut self,
        _given: &HashMap<TopicPartition, i64>,
        _alone: bool,
    ) -> Backpressure {
        let budget = usize::try_from(self.s.config.memory_budget_bytes).unwrap_or(usize::MAX);
        Backpressure {
            full: self.memory() >= budget && !self.running.is_empty(),
            ..Backpressure::default()
        }
    }

    fn close(&mut self, now_ms: i64) -> BoxFuture<'_, Result<Vec<Receipt>, SinkError>> {
        Box::pin(async move {
            let mut receipts = Vec::new();
            loop {
                self.start_due(now_ms, true)?;
                let Some(done) = self.running.join_next().await else {
                    break;
                };
                let done = done.map_err(|e| SinkError::with_fault(Some(LAKE), Fault::Bug, e))?;
                if let Event::Durable(r) = self.finish(done)? {
                    receipts.extend(r);
                }
            }
            Ok(receipts)
        })
    }

    fn resume(&self) -> Arc<dyn Resume> {
        Arc::new(LakeResume(self.s.clone()))
    }
}

/// Where the lake stands on a partition: the offsets in its table's snapshots.
struct LakeResume(Arc<Shared>);

impl Resume for LakeResume {
    fn held<'a>(
        &'a self,
        part: &'a TopicPartition,
        committed: i64,
        _mark: Option<i64>,
    ) -> BoxFuture<'a, Result<Held, SinkError>> {
        Box::pin(async move {
            let s = &self.0;
            let ident = s.ident(&part.topic);
            let next = retrying(
                Backoff::DEFAULT,
                &*s.meter,
                Some(LAKE),
                "reading a lake table's offsets",
                || async {
                    if !s
                        .catalog
                        .table_exists(&ident)
                        .await
                        .map_err(LakeError::Catalog)?
                    {
                        return Ok(None);
                    }
                    let t = s
                        .catalog
                        .load_table(&ident)
                        .await
                        .map_err(LakeError::Catalog)?;
                    offsets::table_offsets(&t, &s.group)
                        .map(|o| offsets::get(&o, part))
                        .map_err(|e| LakeError::Data(format!("lake table {ident}: {e}")))
                },
            )
            .await
            .map_err(fail)?;
            s.set_known(part, next);
            let behind = next.filter(|&n| n < committed);
            if let Some(from) = behind {
                info!(topic = %part.topic, partition = part.partition, from, to = committed,
                    "the lake table is behind: reading again from its offset");
            }
            Ok(Held {
                durable: next,
                behind,
            })
        })
    }
}

#[cfg(test)]
mod tests;
