//! From change batches to per-table work: which table each row goes to, its key, its
//! operation, and the net effect per key. Pure: no database access.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray, StringArray, StructArray};
use arrow_schema::Field;
use lakesink_config::{DeletePolicy, IdentifierCase, KeylessMode, PkMode, ReplicaConfig};
use lakesink_schema_registry::{ChangeBatch, ValueShape};

use super::collapse::{Collapser, Mark, Move, RowRef};
use super::defaults::{ColumnDefault, column_default};
use super::encode::Enc;
use super::error::{At, ReplicaError};
use super::naming::{NameSource, NameTemplate, TableName, check_ident};
use super::types::{ColumnType, column_name, column_type, is_column};
use crate::sink::TopicPartition;

/// The parts of the config planning needs.
pub(crate) struct Rules {
    pub template: NameTemplate,
    pub pk_mode: PkMode,
    pub pk_fields: Vec<String>,
    pub delete_enabled: bool,
    pub truncate_enabled: bool,
    pub keyless: KeylessMode,
    /// How column names are spelt (table names: the template's).
    pub case: IdentifierCase,
    /// Columns the source declares `NOT NULL` are made so.
    pub not_null: bool,
    /// The per-table settings, for [`ReplicaConfig::delete_policy`].
    pub tables: ReplicaConfig,
    /// The rules of history tables ([`super::history`]): every row an insert keyed by its
    /// coordinates, into a table of its own.
    pub history: bool,
}

impl Rules {
    pub(crate) fn new(config: &ReplicaConfig, template: NameTemplate) -> Self {
        Self {
            template,
            pk_mode: config.pk_mode,
            pk_fields: config.pk_fields.clone(),
            delete_enabled: config.delete_enabled,
            truncate_enabled: config.truncate_enabled,
            keyless: config.keyless,
            case: config.identifier_case,
            not_null: config.not_null == lakesink_config::NotNull::Source,
            tables: config.clone(),
            history: false,
        }
    }

    /// The rules of the history tables beside `config`'s mirror (whose name template is
    /// `template`): keyed by the coordinates, every delete hard (there are none).
    pub(crate) fn history(config: &ReplicaConfig, template: NameTemplate) -> Self {
        let mut tables = config.clone();
        tables.delete_mode = lakesink_config::DeleteMode::Hard;
        // A history row is written once and never overwritten: nothing to guard.
        tables.stale_guard = false;
        tables.tables.clear();
        Self {
            template: template.with_suffix(&config.history_suffix),
            pk_mode: PkMode::RecordValue,
            pk_fields: [
                super::history::TOPIC,
                super::history::PARTITION,
                super::history::OFFSET,
            ]
            .map(String::from)
            .to_vec(),
            delete_enabled: true,
            truncate_enabled: true,
            keyless: KeylessMode::Insert,
            case: config.identifier_case,
            // A history row of a delete or a truncate has no values.
            not_null: false,
            tables,
            history: true,
        }
    }

    /// A table's soft-delete columns; `None` when its deletes are hard.
    fn soft(&self, name: &TableName) -> Result<Option<Soft>, String> {
        let key = format!("{}.{}", name.schema, name.table);
        let DeletePolicy::Soft { flag, at } = self.tables.delete_policy(&key) else {
            return Ok(None);
        };
        check_ident(&flag, "deleted-column")?;
        if let Some(at) = &at {
            check_ident(at, "deleted-at-column")?;
        }
        Ok(Some(Soft { flag, at }))
    }

    /// A table's stale-event guard column; `None` when it has no guard.
    fn guard(&self, name: &TableName) -> Result<Option<String>, String> {
        let column = self
            .tables
            .guard_column(&format!("{}.{}", name.schema, name.table));
        if let Some(c) = &column {
            check_ident(c, "position-column")?;
        }
        Ok(column)
    }
}

/// The columns a table with soft deletes marks its deleted rows in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Soft {
    /// `boolean`: true once deleted.
    pub flag: String,
    /// `timestamptz`: when the source deleted the row.
    pub at: Option<String>,
}

impl Soft {
    fn holds(&self, column: &str) -> bool {
        self.flag == column || self.at.as_deref() == Some(column)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ColumnDef {
    /// The replica's column: the source's own name where Debezium sends it
    /// ([`column_name`]), else the field's.
    pub name: String,
    /// The record's field holding the column's values.
    pub field: String,
    pub ty: ColumnType,
    /// The default the schema declares (value columns; keys have none).
    pub default: ColumnDefault,
    /// A value column the source declares `NOT NULL` (with `not-null = "source"`).
    pub required: bool,
    /// The Arrow type its values came as (value columns), so that a batch with another one is
    /// looked at for widening and the others cost nothing.
    pub seen_as: Option<arrow_schema::DataType>,
}

/// A batch's encoders for one table: the key columns as found in the key record, the after
/// and the before image, and the value columns (indexed like `TableWork::cols`, `None` where
/// the batch lacks one).
pub(crate) struct BatchEncs<'a> {
    pub key_in_key: Option<Vec<Enc<'a>>>,
    pub key_in_after: Option<Vec<Enc<'a>>>,
    pub key_in_before: Option<Vec<Enc<'a>>>,
    pub vals: Vec<Option<Enc<'a>>>,
    /// Per value column: whether a row may hold the unchanged-TOAST placeholder, so that
    /// rows are looked at only in columns where one can be.
    pub toast: Vec<bool>,
}

/// Everything one `apply` does to one table.
pub(crate) struct TableWork<'a> {
    pub name: TableName,
    pub at: At,
    /// Key columns; empty for a keyless table.
    pub pk: Vec<ColumnDef>,
    /// Non-key value columns, in the order first seen.
    pub cols: Vec<ColumnDef>,
    pub collapser: Collapser,
    /// Keyless tables: rows to insert, in order.
    pub inserts: Vec<RowRef>,
    /// Soft deletes: per insert, the truncate after it that marks it deleted.
    pub insert_marks: Vec<Option<Mark>>,
    /// Soft deletes: the columns marking deleted rows; `None` for hard deletes.
    pub soft: Option<Soft>,
    /// The stale-event guard's column (`text`, the source position of the row's last
    /// change); `None` without a guard. Use [`Self::guard`].
    guard_column: Option<String>,
    /// The table keeps only a history (`mode = "history"`): its rows are not applied here.
    pub skip: bool,
    /// A history table: rows are inserted once, never rewritten.
    pub history: bool,
    /// Nullability follows the source's (`not-null = "source"`).
    pub follows_nulls: bool,
    /// By batch index; looked up per row and column, hence the fast hash.
    pub encs: HashMap<u32, BatchEncs<'a>, foldhash::fast::RandomState>,
}

impl TableWork<'_> {
    fn new(
        at: At,
        name: TableName,
        pk: Vec<ColumnDef>,
        (soft, guard_column): (Option<Soft>, Option<String>),
        rules: &Rules,
    ) -> Self {
        Self {
            at,
            name,
            pk,
            cols: Vec::new(),
            collapser: Collapser::new(soft.is_some()),
            inserts: Vec::new(),
            insert_marks: Vec::new(),
            soft,
            guard_column,
            skip: false,
            history: rules.history,
            follows_nulls: rules.not_null,
            encs: HashMap::default(),
        }
    }

    pub(crate) fn keyless(&self) -> bool {
        self.pk.is_empty()
    }

    /// The stale-event guard's column, where the table has a guard and a key to keep a
    /// position for.
    pub(crate) fn guard(&self) -> Option<&str> {
        self.guard_column.as_deref().filter(|_| !self.keyless())
    }

    /// Whether `column` is one lakesink keeps of its own (soft deletes, the guard).
    fn own_column(&self, column: &str) -> Option<String> {
        if let Some(soft) = self.soft.as_ref().filter(|s| s.holds(column)) {
            return Some(clash(soft, column));
        }
        (self.guard_column.as_deref() == Some(column)).then(|| {
            format!(
                "the source has a column `{column}`, the replica's stale-event guard column (position-column): name that column otherwise in [replica] or [replica.tables.\"schema.table\"]"
            )
        })
    }
}

/// Whether the envelope's `source` record is `io.debezium.connector.postgresql.Source`, as the
/// decoder keeps its name on the field (`connect.name`, or arrow-avro's `avro.name` and
/// `avro.namespace`).
fn postgres_source(schema: &arrow_schema::Schema) -> bool {
    const SOURCE: &str = "io.debezium.connector.postgresql.Source";
    let Ok(f) = schema.field_with_name("source") else {
        return false;
    };
    let m = f.metadata();
    let get = |k: &str| m.get(k).map(String::as_str);
    get("connect.name") == Some(SOURCE)
        || get("avro.name") == Some(SOURCE)
        || (get("avro.namespace") == Some("io.debezium.connector.postgresql")
            && get("avro.name") == Some("Source"))
}

/// The columns of one batch, looked up once.
pub(crate) struct View<'a> {
    b: &'a ChangeBatch,
    offsets: &'a [i64],
    pub ops: &'a StringArray,
    pub tombstones: &'a BooleanArray,
    key: Option<&'a StructArray>,
    pub after: Option<&'a StructArray>,
    pub before: Option<&'a StructArray>,
    source: Option<&'a StructArray>,
    /// The envelope's `source` record is Debezium's PostgreSQL connector's.
    postgres: bool,
}

impl<'a> View<'a> {
    pub(crate) fn shape(&self) -> ValueShape {
        self.b.shape
    }

    pub(crate) fn new(b: &'a ChangeBatch) -> Result<Self, String> {
        let rows = &b.rows;
        let col = |n: &str| rows.column_by_name(n);
        let offsets = col("__offset")
            .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
            .ok_or("batch without an Int64 __offset column")?
            .values();
        let ops = col("__op")
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or("batch without a __op column")?;
        let tombstones = col("__tombstone")
            .and_then(|c| c.as_boolean_opt())
            .ok_or("batch without a __tombstone column")?;
        let strukt = |n: &str| col(n).and_then(|c| c.as_struct_opt());
        let key = strukt("key").filter(|k| !k.fields().is_empty());
        let after = strukt("after");
        let (before, source) = match b.shape {
            ValueShape::Envelope => (strukt("before"), strukt("source")),
            // A flattened delete (rewrite mode) carries the old row in `after`.
            _ => (after, None),
        };
        Ok(Self {
            b,
            offsets,
            ops,
            tombstones,
            key,
            after,
            before,
            source,
            postgres: b.shape == ValueShape::Envelope && postgres_source(rows.schema_ref()),
        })
    }

    fn at(&self, offset: i64, table: Option<&TableName>) -> At {
        At {
            topic: self.b.topic.to_string(),
            partition: self.b.partition,
            offsets: (offset, offset),
            table: table.map(ToString::to_string),
        }
    }

    /// A `source` field for the table name: the envelope's block, or the flattened record's
    /// `__source_<f>` / `__<f>` fields (ExtractNewRecordState `add.fields`).
    pub(crate) fn source_int(&self, name: &str, row: usize) -> Option<i64> {
        // MySQL's `row` is an `int`, the rest `long`s.
        let pick = |s: &'a StructArray, n: &str| {
            let c = s.column_by_name(n)?;
            if let Some(c) = c.as_primitive_opt::<arrow_array::types::Int32Type>() {
                return c.is_valid(row).then(|| i64::from(c.value(row)));
            }
            let c = c.as_primitive_opt::<arrow_array::types::Int64Type>()?;
            c.is_valid(row).then(|| c.value(row))
        };
        match (self.source, self.after) {
            (Some(s), _) if s.is_valid(row) => pick(s, name),
            (None, Some(a)) if self.b.shape == ValueShape::Flattened && a.is_valid(row) => {
                pick(a, &format!("__source_{name}")).or_else(|| pick(a, &format!("__{name}")))
            }
            _ => None,
        }
    }

    /// When the row's change happened at the source, in µs since the Unix epoch: the
    /// source's `ts_us` or `ts_ms`, else (a tombstone) the Kafka record's timestamp.
    fn event_time(&self, row: usize) -> Option<i64> {
        if let Some(us) = self.source_int("ts_us", row) {
            return Some(us);
        }
        if let Some(ms) = self.source_int("ts_ms", row) {
            return ms.checked_mul(1000);
        }
        let kafka = self
            .b
            .rows
            .column_by_name("__timestamp")?
            .as_primitive_opt::<arrow_array::types::TimestampMillisecondType>()?;
        kafka
            .is_valid(row)
            .then(|| kafka.value(row).checked_mul(1000))
            .flatten()
    }

    /// The source change a row came from, where the source names it (PostgreSQL's LSN and
    /// transaction id): a key change's delete and create share it.
    fn change(&self, row: usize) -> Option<Move> {
        Some((self.source_int("lsn", row)?, self.source_int("txId", row)))
    }

    /// A `source` field for the table name: the envelope's block, or the flattened record's
    /// `__source_<f>` / `__<f>` fields (ExtractNewRecordState `add.fields`).
    pub(crate) fn source_field(&self, name: &str, row: usize) -> Option<&'a str> {
        let pick = |s: &'a StructArray, n: &str| {
            let c = s.column_by_name(n)?.as_string_opt::<i32>()?;
            c.is_valid(row).then(|| c.value(row))
        };
        match (self.source, self.after) {
            (Some(s), _) if s.is_valid(row) => pick(s, name),
            (None, Some(a)) if self.b.shape == ValueShape::Flattened && a.is_valid(row) => {
                pick(a, &format!("__source_{name}")).or_else(|| pick(a, &format!("__{name}")))
            }
            _ => None,
        }
    }
}

/// One row's source fields, for [`super::position`].
struct RowSource<'v, 'a> {
    view: &'v View<'a>,
    row: usize,
}

impl super::position::Source for RowSource<'_, '_> {
    fn text(&self, name: &str) -> Option<&str> {
        self.view.source_field(name, self.row)
    }
    fn int(&self, name: &str) -> Option<i64> {
        self.view.source_int(name, self.row)
    }
}

impl View<'_> {
    /// Where the row's change is in the source's log ([`super::position`]).
    pub(crate) fn position(&self, row: usize) -> Option<String> {
        super::position::position(&RowSource { view: self, row })
    }
}

/// A batch that cannot be read, placed at its offsets.
pub(crate) fn bad_batch(b: &ChangeBatch, reason: String) -> ReplicaError {
    ReplicaError::BadData {
        at: At {
            topic: b.topic.to_string(),
            partition: b.partition,
            offsets: (b.first_offset, b.last_offset),
            table: None,
        },
        reason,
    }
}

/// Value fields that are table columns: a flattened record's `__` fields are metadata
/// (`__op`, `__deleted`, `__source_ts_ms`), unless Debezium names the source column they
/// hold (a source column called `__grp`, with `column.propagate.source.type`).
fn value_fields(shape: ValueShape, after: &StructArray) -> impl Iterator<Item = (usize, &Field)> {
    after
        .fields()
        .iter()
        .enumerate()
        .filter(move |(_, f)| {
            !(shape == ValueShape::Flattened && f.name().starts_with("__") && !is_column(f))
        })
        .map(|(i, f)| (i, f.as_ref()))
}

/// Per table, the work for `batches`; rows below `stored` next offsets are skipped.
pub(crate) fn plan<'a>(
    rules: &Rules,
    batches: &'a [ChangeBatch],
    stored: &HashMap<TopicPartition, i64>,
) -> Result<Vec<TableWork<'a>>, ReplicaError> {
    let mut tables: Vec<TableWork<'a>> = Vec::new();
    let mut index: HashMap<TableName, usize> = HashMap::new();
    // A tombstone has no source block: it goes where its partition's last row went.
    let mut last_table: HashMap<(&str, i32), usize> = HashMap::new();
    // Topics one of whose tables was given room for the topic's rows in this apply.
    let mut roomed: Vec<&str> = Vec::new();
    for (bi, b) in batches.iter().enumerate() {
        // A topic per table: the first table a topic brings into the apply takes room for all
        // of the topic's rows in it from here on, so its collapser does not grow (moving its
        // entries and rehashing at each doubling) batch after batch. Any other table of a
        // topic routed from several grows as it goes, so the rows are reserved once at most.
        let mut room = if roomed.contains(&&*b.topic) {
            0
        } else {
            batches[bi..]
                .iter()
                .filter(|x| x.topic == b.topic)
                .map(|x| x.rows.num_rows())
                .sum()
        };
        let had_room = room > 0;
        let bi = bi as u32;
        // The table of this batch's last row so far, kept in `last_table` when the batch ends.
        let mut last: Option<usize> = None;
        let v = View::new(b).map_err(|reason| bad_batch(b, reason))?;
        let from = stored
            .get(&TopicPartition::new(b.topic.clone(), b.partition))
            .copied()
            .unwrap_or(i64::MIN);
        let mut fixed_name: Option<usize> = None;
        for row in 0..b.rows.num_rows() {
            let offset = v.offsets[row];
            if offset < from {
                continue;
            }
            let bad = |reason: String, t: Option<&TableName>| ReplicaError::BadData {
                at: v.at(offset, t),
                reason,
            };
            let op = if v.ops.is_valid(row) {
                v.ops.value(row)
            } else {
                ""
            };
            let tombstone = v.tombstones.value(row);
            let delete = op == "d" || tombstone;
            if (delete && !rules.delete_enabled) || (op == "t" && !rules.truncate_enabled) {
                continue;
            }
            if !matches!(op, "c" | "r" | "u" | "d" | "t") {
                continue; // `m`: a logical decoding message, not a row
            }
            // Which table.
            let ti = if tombstone {
                match last.or_else(|| last_table.get(&(&*b.topic, b.partition)).copied()) {
                    Some(t) => t,
                    None if !rules.template.uses_source() => {
                        table_index(rules, &v, row, &mut tables, &mut index, false, &mut room)?
                    }
                    None => continue, // its delete came in an earlier call and did the work
                }
            } else if let Some(t) = fixed_name {
                t
            } else {
                let t = table_index(
                    rules,
                    &v,
                    row,
                    &mut tables,
                    &mut index,
                    op == "t",
                    &mut room,
                )?;
                if !rules.template.uses_source() {
                    fixed_name = Some(t);
                }
                t
            };
            last = Some(ti);
            let work = &mut tables[ti];
            if work.skip {
                continue;
            }
            work.at.offsets.0 = work.at.offsets.0.min(offset);
            work.at.offsets.1 = work.at.offsets.1.max(offset);
            let at = RowRef {
                batch: bi,
                row: row as u32,
            };
            if op == "t" {
                let when = work.soft.as_ref().and_then(|_| v.event_time(row));
                work.collapser.truncate(when, at);
                if work.soft.is_some() {
                    for m in &mut work.insert_marks {
                        m.get_or_insert(Mark(when, at));
                    }
                } else {
                    work.inserts.clear();
                }
                continue;
            }
            // With the guard, a tombstone is not applied: it has no source position to be
            // compared by, and the delete before it did the work (a replayed old tombstone
            // must not delete a row written since).
            if tombstone && work.guard().is_some() {
                continue;
            }
            if !work.encs.contains_key(&bi) {
                let encs = batch_encs(rules, &v, work).map_err(|r| bad(r, Some(&work.name)))?;
                work.encs.insert(bi, encs);
            }
            let work = &mut tables[ti];
            let name = &work.name;
            let encs = &work.encs[&bi];
            if work.pk.is_empty() {
                match (delete, op) {
                    (false, "c" | "r") => {
                        work.inserts.push(at);
                        if work.soft.is_some() {
                            work.insert_marks.push(None);
                        }
                    }
                    _ if rules.keyless == KeylessMode::Error => {
                        return Err(bad(
                            "a record without a key; keyless = \"error\"".into(),
                            Some(name),
                        ));
                    }
                    _ => tracing::warn!(
                        topic = &*b.topic,
                        partition = b.partition,
                        offset,
                        table = %name,
                        op,
                        "update or delete of a keyless table's row skipped: it has no key to match"
                    ),
                }
                continue;
            }
            let valid = |s: Option<&StructArray>| s.is_some_and(|s| s.is_valid(row));
            let keys = match rules.pk_mode {
                PkMode::RecordKey if valid(v.key) => encs.key_in_key.as_ref(),
                PkMode::RecordKey => None,
                PkMode::RecordValue if !delete && valid(v.after) => encs.key_in_after.as_ref(),
                PkMode::RecordValue if delete && valid(v.before) => encs.key_in_before.as_ref(),
                PkMode::RecordValue if delete && valid(v.key) => encs.key_in_key.as_ref(),
                PkMode::RecordValue => None,
            };
            let Some(keys) = keys else {
                if tombstone {
                    continue; // a tombstone without usable key fields: its delete did the work
                }
                return Err(bad(format!("`{op}` record without its key"), Some(name)));
            };
            let mut key = Vec::new();
            for (k, enc) in keys.iter().enumerate() {
                if enc.is_null(row) {
                    return Err(bad(
                        format!("key column `{}` is null", work.pk[k].name),
                        Some(name),
                    ));
                }
                enc.write(row, &mut key).map_err(|r| bad(r, Some(name)))?;
            }
            if delete {
                let when = work.soft.as_ref().and_then(|_| v.event_time(row));
                work.collapser.delete(key, at, v.change(row), when);
                continue;
            }
            if v.after.is_none_or(|a| !a.is_valid(row)) {
                return Err(bad(
                    format!("`{op}` record without an after image"),
                    Some(name),
                ));
            }
            let untouched: Vec<usize> = encs
                .vals
                .iter()
                .enumerate()
                .filter(|(c, e)| {
                    e.as_ref()
                        .is_none_or(|e| encs.toast[*c] && e.is_placeholder(row))
                })
                .map(|(c, _)| c)
                .collect();
            let ncols = work.cols.len();
            let insert = matches!(op, "c" | "r");
            // A create never has an unchanged value, unless it is the new key of a key
            // change: its placeholders are the old key's values.
            let placeholders = || untouched.iter().filter(|c| encs.vals[**c].is_some());
            let key_change = op == "c" && placeholders().next().is_some();
            // A history row is never half of a key change: every row is an insert.
            let key_change = key_change && !rules.history;
            let change = v.change(row).filter(|_| key_change);
            let paired = work
                .collapser
                .upsert(key, at, ncols, &untouched, insert, change);
            if key_change && (change.is_none() || !paired) {
                // Counted as unknown where the row is then inserted (apply.rs).
                for c in placeholders() {
                    tracing::warn!(
                        topic = &*b.topic,
                        partition = b.partition,
                        offset,
                        table = %name,
                        column = work.cols[*c].name,
                        "a key change's new row has Debezium's unchanged-TOAST placeholder, and \
                         the old key's delete is not in this apply (another partition, or an \
                         earlier apply): the column is left NULL"
                    );
                }
            }
        }
        if let Some(t) = last {
            last_table.insert((&*b.topic, b.partition), t);
        }
        if had_room && room == 0 {
            roomed.push(&b.topic);
        }
    }
    tables.retain(|t| !t.skip);
    Ok(tables)
}

/// The table of a row, registering new tables with their key columns; a new keyed table's
/// collapser takes `room` for that many keys (leaving 0).
fn table_index<'a>(
    rules: &Rules,
    v: &View<'a>,
    row: usize,
    tables: &mut Vec<TableWork<'a>>,
    index: &mut HashMap<TableName, usize>,
    truncate: bool,
    room: &mut usize,
) -> Result<usize, ReplicaError> {
    let offset = v.offsets[row];
    let src = NameSource {
        topic: &v.b.topic,
        db: v.source_field("db", row),
        schema: v.source_field("schema", row),
        table: v.source_field("table", row),
    };
    let bad = |reason: String, t: Option<&TableName>| ReplicaError::BadData {
        at: v.at(offset, t),
        reason,
    };
    let name = rules.template.render(src).map_err(|r| bad(r, None))?;
    let known = index.get(&name).copied();
    // A truncate has no key even for keyed tables: a table first seen by one learns its key
    // from the next batch.
    if let Some(i) = known
        && (truncate || tables[i].skip || !tables[i].pk.is_empty() || !tables[i].encs.is_empty())
    {
        return Ok(i);
    }
    let key = format!("{}.{}", name.schema, name.table);
    // A table with only a history has no mirror to key or check here.
    if !rules.history && !rules.tables.table_mode(&key).mirror() {
        index.insert(name.clone(), tables.len());
        tables.push(TableWork::new(
            v.at(offset, Some(&name)),
            name,
            Vec::new(),
            (None, None),
            rules,
        ));
        let last = tables.len() - 1;
        tables[last].skip = true;
        return Ok(last);
    }
    let pk = key_columns(rules, v).map_err(|r| bad(r, Some(&name)))?;
    if pk.is_empty() && rules.keyless == KeylessMode::Error && !truncate {
        return Err(bad(
            "records without a key; keyless = \"error\"".into(),
            Some(&name),
        ));
    }
    let soft = rules.soft(&name).map_err(|r| bad(r, Some(&name)))?;
    let guard = rules.guard(&name).map_err(|r| bad(r, Some(&name)))?;
    let mut work = TableWork::new(
        v.at(offset, Some(&name)),
        name.clone(),
        Vec::new(),
        (soft, guard),
        rules,
    );
    if let Some(clash) = pk.iter().find_map(|k| work.own_column(&k.name)) {
        return Err(bad(clash, Some(&name)));
    }
    if let Some(i) = known {
        tables[i].pk = pk;
        return Ok(i);
    }
    if !pk.is_empty() && *room > 0 {
        work.collapser.reserve(std::mem::take(room));
    }
    work.pk = pk;
    index.insert(name, tables.len());
    tables.push(work);
    Ok(tables.len() - 1)
}

/// A source column named like a soft-delete column.
fn clash(soft: &Soft, column: &str) -> String {
    let setting = if soft.flag == column {
        "deleted-column"
    } else {
        "deleted-at-column"
    };
    format!(
        "the source has a column `{column}`, the replica's soft-delete column ({setting}): name that column otherwise in [replica] or [replica.tables.\"schema.table\"]"
    )
}

/// The key columns and their types, from the key record or the named value fields.
fn key_columns(rules: &Rules, v: &View<'_>) -> Result<Vec<ColumnDef>, String> {
    let (fields, what) = match rules.pk_mode {
        PkMode::RecordKey => match v.key {
            Some(k) => (k.fields().clone(), "record key"),
            None => return Ok(Vec::new()),
        },
        PkMode::RecordValue => match v.after.or(v.before) {
            Some(a) => (a.fields().clone(), "record value"),
            None => return Err("pk-mode = record-value needs a value schema".into()),
        },
    };
    let names: Vec<String> = if rules.pk_fields.is_empty() {
        fields.iter().map(|f| f.name().clone()).collect()
    } else {
        rules.pk_fields.clone()
    };
    names
        .into_iter()
        .map(|n| {
            let f = fields
                .find(&n)
                .ok_or_else(|| format!("pk field `{n}` is not in the {what}"))?
                .1;
            // Debezium's key schema has no parameters; the value's field for the same column
            // has the source's name and type.
            let f = v
                .after
                .or(v.before)
                .and_then(|a| a.fields().find(&n))
                .map(|(_, vf)| vf.as_ref())
                .filter(|vf| vf.data_type() == f.data_type())
                .unwrap_or(f);
            let name = rules.case.apply(&column_name(f));
            check_ident(&name, "column")?;
            Ok(ColumnDef {
                ty: column_type(f, v.postgres)?,
                name,
                field: n,
                default: ColumnDefault::None,
                required: true,
                seen_as: None,
            })
        })
        .collect()
}

/// Registers the batch's new value columns with the table and builds its encoders.
fn batch_encs<'a>(
    rules: &Rules,
    v: &View<'a>,
    work: &mut TableWork<'a>,
) -> Result<BatchEncs<'a>, String> {
    let mut by_name: HashMap<&str, &'a arrow_array::ArrayRef> = HashMap::new();
    if let Some(after) = v.after {
        for (i, f) in value_fields(v.b.shape, after) {
            if work.pk.iter().any(|k| &k.field == f.name()) {
                continue;
            }
            by_name.insert(f.name(), after.column(i));
            if let Some(c) = work.cols.iter().position(|c| &c.field == f.name()) {
                // A later batch of the call with the column's type widened (the source's
                // ALTER between them): the column takes the wider type, and the batches
                // before re-encode to it.
                if work.cols[c].seen_as.as_ref() == Some(f.data_type()) {
                    continue;
                }
                let ty = column_type(f, v.postgres)?;
                if super::ddl::widens(&work.cols[c].ty.ddl, &ty.ddl) {
                    for e in work.encs.values_mut() {
                        if let Some(Some(enc)) = e.vals.get(c) {
                            e.vals[c] = Some(enc.recast(&ty)?);
                        }
                    }
                    work.cols[c].ty = ty;
                    work.cols[c].seen_as = Some(f.data_type().clone());
                }
                continue;
            }
            {
                let name = rules.case.apply(&column_name(f));
                check_ident(&name, "column")?;
                if let Some(clash) = work.own_column(&name) {
                    return Err(clash);
                }
                if let Some(c) = work.pk.iter().chain(&work.cols).find(|c| c.name == name) {
                    return Err(format!(
                        "fields `{}` and `{}` both name the column `{name}`",
                        c.field,
                        f.name()
                    ));
                }
                let ty = column_type(f, v.postgres)?;
                work.cols.push(ColumnDef {
                    name,
                    field: f.name().clone(),
                    default: column_default(f, &ty),
                    required: rules.not_null && !f.is_nullable(),
                    seen_as: Some(f.data_type().clone()),
                    ty,
                });
            }
        }
    }
    let vals = work
        .cols
        .iter()
        .map(|c| {
            by_name
                .get(c.field.as_str())
                .map(|a| Enc::new(a, &c.ty))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let encs_from = |s: &'a StructArray| -> Result<Vec<Enc<'a>>, String> {
        work.pk
            .iter()
            .map(|k| {
                let a = s
                    .column_by_name(&k.field)
                    .ok_or_else(|| format!("key column `{}` is not in the record", k.field))?;
                Enc::new(a, &k.ty)
            })
            .collect()
    };
    let keyed = !work.pk.is_empty();
    let key_in_key = match (keyed, rules.pk_mode, v.key) {
        (true, PkMode::RecordKey, Some(k)) => Some(encs_from(k)?),
        // Record-value keys may also be in the key record, which tombstones carry.
        (true, PkMode::RecordValue, Some(k)) => encs_from(k).ok(),
        _ => None,
    };
    let image = |s: Option<&'a StructArray>| match (keyed, rules.pk_mode, s) {
        (true, PkMode::RecordValue, Some(s)) => encs_from(s).map(Some),
        _ => Ok(None),
    };
    let toast = vals
        .iter()
        .map(|e| e.as_ref().is_some_and(Enc::may_hold_placeholder))
        .collect();
    Ok(BatchEncs {
        key_in_key,
        key_in_after: image(v.after)?,
        key_in_before: image(v.before)?,
        vals,
        toast,
    })
}
