//! The PostgreSQL replica: Debezium change batches applied as upserts, deletes and truncates,
//! exactly once by keeping the consumed offsets in the same transaction.

mod apply;
mod collapse;
mod ddl;
mod defaults;
mod encode;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod history;
pub mod live;
mod naming;
mod offsets;
mod plan;
mod position;
mod types;

/// Debezium's stand-in for an unchanged TOASTed value, which the lake's upsert tables refuse.
pub(crate) use encode::PLACEHOLDER;

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use lakesink_config::{ReplicaConfig, SchemaEvolution};
use lakesink_schema_registry::ChangeBatch;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use error::{At, ReplicaError, describe_pg, is_auth_failure};
pub use live::{REPLICA, Rejects, ReplicaSink};
pub use naming::{TableName, quote};

use crate::sink::TopicPartition;
use ddl::TableMeta;
use offsets::OffsetsSql;
use plan::Rules;

/// What one `apply` made durable for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub topic: String,
    pub partition: i32,
    /// The offset to resume from: every record below it is in the replica.
    pub next_offset: i64,
}

/// How many values of one column, in applies that committed, the replica holds rounded
/// ([`PgReplicator::take_rounded`]) or could not know ([`PgReplicator::take_unknown`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rounded {
    /// The table, `schema.table`.
    pub table: String,
    pub column: String,
    pub values: u64,
}

/// Applies change batches to a PostgreSQL replica.
///
/// Contract:
/// - [`apply`](Self::apply) runs in one transaction: the rows of every batch given, any
///   table creation or new columns, and the offsets row of each (group, topic, partition).
///   When it returns `Ok`, all of it is committed; on `Err`, none of it is.
/// - Records below a partition's stored next offset are skipped, so replaying batches is
///   harmless. Batches of one partition must come in offset order; one call may hold several
///   partitions and tables.
/// - On partition assignment, seek to [`next_offsets`](Self::next_offsets): the replica's
///   offsets table is the truth, Kafka's committed offset only a hint.
/// - Per table and key, a call applies the net effect of its records in order (the last
///   write wins; a delete then an insert is an insert). Debezium's placeholder for unchanged
///   TOASTed values never overwrites a stored value; on the new key of a key change it is the
///   old key's value, when the old key's delete is in the same call (docs/replica.md).
/// - Errors say whether a retry can help ([`Classify`](lakesink_model::Classify) on [`ReplicaError`]) and name topic,
///   partition, offset(s) and table.
pub struct PgReplicator {
    pool: PgPool,
    rules: Rules,
    /// The history tables' rules, when any table keeps a history.
    history: Option<Rules>,
    auto_create: bool,
    evolution: SchemaEvolution,
    offsets: OffsetsSql,
    /// Known table shapes; changed only after the transaction that changed them commits.
    tables: Mutex<HashMap<TableName, Arc<TableMeta>>>,
    /// Tables where a plain insert of fresh rows met stored keys: how many more applies
    /// upsert them directly (a re-snapshot would otherwise fail and redo every batch).
    no_plain_insert: Mutex<HashMap<TableName, u32>>,
    /// Rounded values of committed applies not yet taken by [`Self::take_rounded`].
    rounded: Mutex<BTreeMap<(String, String), u64>>,
    /// Values written NULL as unknown, likewise until [`Self::take_unknown`].
    unknown: Mutex<BTreeMap<(String, String), u64>>,
    /// Changes the stale-event guard left out, likewise until [`Self::take_stale`].
    stale: Mutex<BTreeMap<(String, String), u64>>,
    /// COPY bytes of committed applies, until [`Self::take_copied_bytes`].
    copied_bytes: std::sync::atomic::AtomicU64,
}

/// Applies that skip the plain insert on a table after it met a stored key.
const PLAIN_INSERT_PAUSE: u32 = 32;

impl PgReplicator {
    /// Connects a pool and creates the offsets table when missing.
    pub async fn connect(config: &ReplicaConfig) -> Result<Self, ReplicaError> {
        let mut options = PgConnectOptions::from_str(&config.url)
            .map_err(|e| ReplicaError::Setup(format!("replica.url: {e}")))?;
        if let Some(p) = &config.password {
            options = options.password(p.expose());
        }
        let database = options.get_database().unwrap_or("postgres").to_owned();
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_size)
            // Unreachable is a retryable error for the caller's backoff, not a long stall here.
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(|e| {
                if error::is_auth_failure(&e) {
                    ReplicaError::Setup(format!(
                        "replica.url {}: {}: check the user in replica.url and replica.password",
                        config.url.redacted(),
                        error::describe_pg(&e)
                    ))
                } else {
                    ReplicaError::from_sqlx(e, None)
                }
            })?;
        let template = name_template(config, &database).map_err(ReplicaError::Setup)?;
        let offsets_table = TableName {
            schema: config.offsets_schema.clone(),
            table: config.offsets_table.clone(),
        };
        let offsets = OffsetsSql::new(&offsets_table);
        let setup = |e| ReplicaError::from_sqlx(e, None);
        let mut tx = pool.begin().await.map_err(setup)?;
        ddl::lock(&mut tx, &offsets_table.quoted())
            .await
            .map_err(setup)?;
        for sql in [&offsets.schema, &offsets.create] {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .execute(&mut *tx)
                .await
                .map_err(setup)?;
        }
        tx.commit().await.map_err(setup)?;
        Ok(Self {
            pool,
            history: config
                .any_history()
                .then(|| Rules::history(config, template.clone())),
            rules: Rules::new(config, template),
            auto_create: config.auto_create,
            evolution: config.schema_evolution,
            offsets,
            tables: Mutex::new(HashMap::new()),
            no_plain_insert: Mutex::new(HashMap::new()),
            rounded: Mutex::new(BTreeMap::new()),
            unknown: Mutex::new(BTreeMap::new()),
            stale: Mutex::new(BTreeMap::new()),
            copied_bytes: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The pool, for callers that want to read the replica.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The stored next offset of each of `partitions` that has one.
    pub async fn next_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<HashMap<i32, i64>, ReplicaError> {
        let rows: Vec<(i32, i64)> = sqlx::query_as(AssertSqlSafe(self.offsets.read.clone()))
            .bind(group)
            .bind(topic)
            .bind(partitions)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| ReplicaError::from_sqlx(e, None))?;
        Ok(rows.into_iter().collect())
    }

    /// Applies `batches` and stores `group`'s offsets, in one transaction; see the type's doc.
    pub async fn apply(
        &self,
        group: &str,
        batches: &[ChangeBatch],
    ) -> Result<Vec<Applied>, ReplicaError> {
        let result = self.apply_in_tx(group, batches).await;
        if result.is_err() {
            // The cached shapes may be what failed (a table changed behind our back).
            if let Ok(mut tables) = self.tables.lock() {
                tables.clear();
            }
        }
        result
    }

    async fn apply_in_tx(
        &self,
        group: &str,
        batches: &[ChangeBatch],
    ) -> Result<Vec<Applied>, ReplicaError> {
        let mut last: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for b in batches {
            let e = last
                .entry(TopicPartition::new(b.topic.clone(), b.partition))
                .or_insert(b.last_offset);
            *e = (*e).max(b.last_offset);
        }
        if last.is_empty() {
            return Ok(Vec::new());
        }
        let parts: Vec<TopicPartition> = last.keys().cloned().collect();
        let unavailable = |e| ReplicaError::from_sqlx(e, None);
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let stored = offsets::lock(&mut tx, &self.offsets, group, &parts).await?;
        let works = plan::plan(&self.rules, batches, &stored)?;
        // History rows are batches of their own; the offsets are the mirror's.
        let history = match &self.history {
            Some(_) => history::batches(&self.rules, batches)?,
            None => Vec::new(),
        };
        let history_works = match &self.history {
            Some(rules) if !history.is_empty() => plan::plan(rules, &history, &stored)?,
            _ => Vec::new(),
        };
        let works = works
            .into_iter()
            .map(|w| (batches, w))
            .chain(history_works.into_iter().map(|w| (&history[..], w)));

        let mut changed: Vec<(TableName, Arc<TableMeta>)> = Vec::new();
        let mut rounded: Vec<(String, String, u64)> = Vec::new();
        let mut unknown: Vec<(String, String, u64)> = Vec::new();
        let mut stale: Vec<(String, String, u64)> = Vec::new();
        let mut copied_bytes = 0u64;
        for (seq, (batches, mut work)) in works.enumerate() {
            let cached = self.cached(&work.name);
            let existing = match cached {
                Some(m) => Some(m),
                None => ddl::load(&mut tx, &work).await?.map(Arc::new),
            };
            let only_deletes = work.cols.is_empty() && work.inserts.is_empty();
            if existing.is_none() && only_deletes {
                continue; // nothing to delete in a table that does not exist
            }
            ddl::resolve_names(&mut work, existing.as_deref());
            ddl::resolve_source_types(&mut tx, &mut work, existing.as_deref()).await?;
            let (ddl, meta) =
                ddl::plan_ddl(&work, existing.as_deref(), self.auto_create, self.evolution)
                    .map_err(|reason| ReplicaError::BadData {
                        at: work.at.clone(),
                        reason,
                    })?;
            let meta = if ddl.is_empty() {
                existing.unwrap_or_else(|| Arc::new(meta))
            } else {
                ddl::run(&mut tx, &work, ddl).await?;
                Arc::new(meta)
            };
            changed.push((work.name.clone(), meta.clone()));
            let name = work.name.clone();
            let at = work.at.clone();
            let guard = work.guard().map(str::to_owned);
            let plain = self.plain_insert(&name);
            let counts = apply::apply_table(&mut tx, batches, work, &meta, seq, plain).await?;
            if counts.fresh_conflict {
                self.pause_plain_insert(&name);
            }
            copied_bytes += counts.copied_bytes;
            for (column, n) in &counts.rounded {
                rounded.push((name.to_string(), column.clone(), *n));
            }
            for (column, n) in &counts.unknown {
                unknown.push((name.to_string(), column.clone(), *n));
            }
            if let Some(column) = guard.filter(|_| counts.stale > 0) {
                stale.push((name.to_string(), column, counts.stale));
            }
            tracing::debug!(
                table = %name,
                topic = at.topic,
                partition = at.partition,
                upserted = counts.upserted,
                deleted = counts.deleted,
                inserted = counts.inserted,
                truncated = counts.truncated,
                moved = counts.moved,
                stale = counts.stale,
                "replica table applied"
            );
        }

        let next: Vec<(TopicPartition, i64)> = last
            .iter()
            .map(|(part, l)| {
                let stored = stored.get(part).copied().unwrap_or(i64::MIN);
                (part.clone(), stored.max(l + 1))
            })
            .collect();
        offsets::store(&mut tx, &self.offsets, group, &next).await?;
        crate::failpoint::hit(crate::failpoint::REPLICA_BEFORE_COMMIT);
        tx.commit().await.map_err(unavailable)?;
        crate::failpoint::hit(crate::failpoint::REPLICA_AFTER_COMMIT);
        if let Ok(mut tables) = self.tables.lock() {
            tables.extend(changed);
        }
        self.copied_bytes
            .fetch_add(copied_bytes, std::sync::atomic::Ordering::Relaxed);
        for (counts, totals) in [
            (rounded, &self.rounded),
            (unknown, &self.unknown),
            (stale, &self.stale),
        ] {
            if !counts.is_empty()
                && let Ok(mut totals) = totals.lock()
            {
                for (table, column, n) in counts {
                    *totals.entry((table, column)).or_default() += n;
                }
            }
        }
        Ok(next
            .into_iter()
            .map(|(part, next_offset)| Applied {
                topic: part.topic.to_string(),
                partition: part.partition,
                next_offset,
            })
            .collect())
    }

    /// The values PostgreSQL rounded in applies committed since the last call, per table and
    /// column: for a metric. A failed apply counts nothing.
    pub fn take_rounded(&self) -> Vec<Rounded> {
        take(&self.rounded)
    }

    /// The values written NULL because the replica could not know them, in applies
    /// committed since the last call: a key change's unchanged TOASTed column whose old row
    /// the replica did not hold (docs/replica.md). For a metric.
    pub fn take_unknown(&self) -> Vec<Rounded> {
        take(&self.unknown)
    }

    /// The changes the stale-event guard left out (a row held a later change of its key), in
    /// applies committed since the last call, per table and guard column. For a metric.
    pub fn take_stale(&self) -> Vec<Rounded> {
        take(&self.stale)
    }

    /// The bytes of COPY data in applies committed since the last call.
    pub fn take_copied_bytes(&self) -> u64 {
        self.copied_bytes
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    fn cached(&self, name: &TableName) -> Option<Arc<TableMeta>> {
        self.tables.lock().ok()?.get(name).cloned()
    }

    /// Whether to try a plain insert of fresh rows on `name` (counting down a pause).
    fn plain_insert(&self, name: &TableName) -> bool {
        let Ok(mut paused) = self.no_plain_insert.lock() else {
            return false;
        };
        match paused.get_mut(name) {
            Some(0) | None => true,
            Some(left) => {
                *left -= 1;
                false
            }
        }
    }

    fn pause_plain_insert(&self, name: &TableName) {
        if let Ok(mut paused) = self.no_plain_insert.lock() {
            paused.insert(name.clone(), PLAIN_INSERT_PAUSE);
        }
    }
}

/// The table a topic's rows go to, when the name does not depend on each record's `source`
/// block (`Ok(None)` when it does). For reports; nothing is connected.
pub fn topic_table(config: &ReplicaConfig, topic: &str) -> Result<Option<TableName>, String> {
    let database = PgConnectOptions::from_str(&config.url)
        .map_err(|e| format!("replica.url: {e}"))?
        .get_database()
        .unwrap_or("postgres")
        .to_owned();
    let template = name_template(config, &database)?;
    if template.uses_source() {
        return Ok(None);
    }
    template
        .render(naming::NameSource {
            topic,
            ..Default::default()
        })
        .map(Some)
}

/// The next offsets stored for `group`, per (topic, partition), read without creating or
/// changing anything; `Ok(None)` when the offsets table does not exist.
pub async fn stored_offsets(
    config: &ReplicaConfig,
    group: &str,
) -> Result<Option<HashMap<TopicPartition, i64>>, ReplicaError> {
    let mut options = PgConnectOptions::from_str(&config.url)
        .map_err(|e| ReplicaError::Setup(format!("replica.url: {e}")))?;
    if let Some(p) = &config.password {
        options = options.password(p.expose());
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect_with(options)
        .await
        .map_err(|e| ReplicaError::from_sqlx(e, None))?;
    let table = TableName {
        schema: config.offsets_schema.clone(),
        table: config.offsets_table.clone(),
    };
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(table.quoted())
        .fetch_one(&pool)
        .await
        .map_err(|e| ReplicaError::from_sqlx(e, None))?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows: Vec<(String, i32, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT topic, partition, next_offset FROM {} WHERE group_id = $1",
        table.quoted()
    )))
    .bind(group)
    .fetch_all(&pool)
    .await
    .map_err(|e| ReplicaError::from_sqlx(e, None))?;
    pool.close().await;
    Ok(Some(
        rows.into_iter()
            .map(|(t, p, o)| (TopicPartition::new(t, p), o))
            .collect(),
    ))
}

/// What [`PgReplicator::apply`] would write for `batches` into an empty replica, as text:
/// per table its name, key and columns with their types, then per net row its key and the
/// binary COPY value of every column (or `untouched` / `delete`). Batches cut differently
/// but holding the same records describe the same. For tests that compare two ways of
/// building batches.
#[doc(hidden)]
pub fn describe_plan(
    config: &ReplicaConfig,
    batches: &[ChangeBatch],
) -> Result<Vec<String>, ReplicaError> {
    let template = name_template(config, "replica").map_err(ReplicaError::Setup)?;
    let rules = Rules::new(config, template);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut out = Vec::new();
    for mut work in plan::plan(&rules, batches, &HashMap::new())? {
        let cols = |c: &[plan::ColumnDef]| {
            c.iter()
                .map(|c| format!("{} {} {:?} {:?}", c.name, c.ty.ddl, c.ty.wire, c.ty.conv))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(format!(
            "table {} key [{}] columns [{}]",
            work.name,
            cols(&work.pk),
            cols(&work.cols)
        ));
        let collapse::Collapsed {
            truncated: truncate,
            entries,
            marks,
            ..
        } = std::mem::take(&mut work.collapser).finish();
        if truncate {
            out.push("truncate".into());
        }
        let value = |net: Option<&collapse::Net>, r: Option<collapse::RowRef>, c: usize| {
            if net.is_some_and(|n| n.copies_old(c)) {
                return Ok::<_, String>("from-old-key".into());
            }
            let Some(r) = r else {
                return Ok("untouched".into());
            };
            match work.encs.get(&r.batch).and_then(|e| e.vals.get(c)) {
                Some(Some(enc)) if enc.is_null(r.row as usize) => Ok("null".into()),
                Some(Some(enc)) => {
                    let mut buf = Vec::new();
                    enc.write(r.row as usize, &mut buf)?;
                    Ok(hex(&buf))
                }
                _ => Ok("absent".into()),
            }
        };
        let bad = |reason: String| ReplicaError::BadData {
            at: work.at.clone(),
            reason,
        };
        for (i, (key, net)) in entries.iter().enumerate() {
            let marked = marks.get(i).is_some_and(Option::is_some);
            let line = match net {
                collapse::Net::Delete(_) => format!("{} delete", hex(key)),
                net => {
                    let vals = (0..work.cols.len())
                        .map(|c| value(Some(net), net.source(c), c))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(bad)?;
                    let then = if marked { " then soft-delete" } else { "" };
                    format!("{} upsert {}{then}", hex(key), vals.join(" "))
                }
            };
            out.push(line);
        }
        for r in &work.inserts {
            let vals = (0..work.cols.len())
                .map(|c| value(None, Some(*r), c))
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
            out.push(format!("insert {}", vals.join(" ")));
        }
    }
    Ok(out)
}

/// The config's table name template, for a replica connected to `database`.
fn name_template(config: &ReplicaConfig, database: &str) -> Result<naming::NameTemplate, String> {
    naming::NameTemplate::parse(
        &config.table_name_format,
        config.dots_to_underscores,
        &config.default_schema,
        database,
    )
    .map(|t| t.with_case(config.identifier_case))
    .and_then(|t| match &config.topic_regex {
        Some(re) => t.with_route(re, &config.topic_replacement),
        None => Ok(t),
    })
}

/// Takes a table of per-column counts.
fn take(totals: &Mutex<BTreeMap<(String, String), u64>>) -> Vec<Rounded> {
    let Ok(mut totals) = totals.lock() else {
        return Vec::new();
    };
    std::mem::take(&mut *totals)
        .into_iter()
        .map(|((table, column), values)| Rounded {
            table,
            column,
            values,
        })
        .collect()
}
