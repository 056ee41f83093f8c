//! `lakesink lake maintain`: compaction of upsert tables, snapshot expiry and orphan-file
//! cleanup for the lake tables, safe to run while lakesink commits to them.
//!
//! - **Compaction** ([`super::compact`]) rewrites each partition holding equality deletes
//!   with them applied, first, so that the expiry after it can let the files it replaced go.
//! - **Expiry** commits through the `iceberg` crate's `ExpireSnapshotsAction` (Java's
//!   `RemoveSnapshots` selection), retried on a conflict with a concurrent commit. The files
//!   only the expired snapshots referenced (manifest lists, manifests, data files) are then
//!   deleted: they were committed once, so no writer has them in flight, and no later commit
//!   can refer to them again (commits build on the metadata without them).
//! - **Orphans** are objects under a table's location that no snapshot, metadata log entry or
//!   current metadata refers to: files of a commit that never happened (a crash between upload
//!   and commit, a fenced partition). A running writer's upload is an orphan until its commit
//!   lands, so only orphans older than `orphan_age_ms` are deleted (Java's
//!   `DeleteOrphanFiles` has the same guard, three days by default).
//! - The Kafka offsets live in each snapshot's summary and in a table property, so expiry
//!   never loses them.
//! - A **dry run** makes the same selection on the table as it is, through a catalog that
//!   applies the expiry to a copy of the metadata and hands it back ([`Dry`]), and deletes nothing.

use std::collections::HashSet;

use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use lakesink_config::LakeConfig;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use tracing::info;

use super::catalog::{OneAttempt, is_conflict, open, wrapper_catalog};
use super::commit::Committer;
use super::compact::{Compaction, compact};
use super::files::properties;
use super::storage::LakeStorage;

/// What to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Expire snapshots older than this (wall clock, ms before now).
    pub snapshot_age_ms: i64,
    /// Keep at least this many recent snapshots of each branch.
    pub retain_last: usize,
    /// Delete orphan files older than this (ms before now).
    pub orphan_age_ms: i64,
    /// Only these tables (names in the namespace); empty: every table of the namespace.
    pub tables: Vec<String>,
    /// Report what would be expired and deleted; change and delete nothing.
    pub dry_run: bool,
    /// Compact the partitions that hold deletes.
    pub compact: bool,
}

/// What happened to one table.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TableReport {
    pub table: String,
    /// The compaction (none without deletes, or without `compact`).
    pub compaction: Compaction,
    pub snapshots_before: usize,
    pub snapshots_expired: usize,
    /// Files only the expired snapshots referenced, deleted.
    pub expired_files: Vec<String>,
    /// Orphans old enough to delete, deleted.
    pub orphans: Vec<String>,
    /// Orphans kept because they are younger than the guard (a commit may be on its way).
    pub young_orphans: usize,
}

const CONFLICT_RETRIES: usize = 20;

pub async fn maintain(config: &LakeConfig, opts: &Options) -> Result<Vec<TableReport>, String> {
    let storage = LakeStorage::open(&config.warehouse, &config.store)
        .map_err(|e| format!("lake.warehouse {}: {e}", config.warehouse))?;
    let catalog = open(config, &storage)
        .await
        .map_err(|e| format!("the catalog {}: {e}", config.catalog_uri.redacted()))?;
    let ns = NamespaceIdent::from_vec(config.namespace_levels())
        .map_err(|e| format!("lake.namespace: {e}"))?;
    let idents: Vec<TableIdent> = if opts.tables.is_empty() {
        catalog
            .list_tables(&ns)
            .await
            .map_err(|e| format!("listing the tables of {}: {e}", config.namespace))?
    } else {
        opts.tables
            .iter()
            .map(|t| TableIdent::new(ns.clone(), t.clone()))
            .collect()
    };
    let committer = Committer::open(config)
        .map_err(|e| format!("the catalog {}: {e}", config.catalog_uri.redacted()))?;
    let props = properties(config.codec, config.row_group_rows);
    let target = usize::try_from(config.commit_bytes).unwrap_or(usize::MAX);
    let mut reports = Vec::new();
    for ident in idents {
        let compaction = if opts.compact {
            compact(
                &catalog,
                &committer,
                &storage,
                &ident,
                &props,
                target,
                opts.dry_run,
            )
            .await
            .map_err(|e| format!("lake table {ident}: compacting: {e}"))?
        } else {
            Compaction::default()
        };
        let mut report = table(&catalog, &storage, &ident, opts)
            .await
            .map_err(|e| format!("lake table {ident}: {e}"))?;
        report.compaction = compaction;
        reports.push(report);
    }
    Ok(reports)
}

async fn table(
    catalog: &OneAttempt,
    storage: &LakeStorage,
    ident: &TableIdent,
    opts: &Options,
) -> Result<TableReport, String> {
    let now = now_ms();
    let mut report = TableReport {
        table: ident.to_string(),
        ..TableReport::default()
    };
    let mut attempts = 0;
    let (before, after) = loop {
        let t = catalog.load_table(ident).await.map_err(|e| e.to_string())?;
        report.snapshots_before = t.metadata().snapshots().len();
        let before = referenced(storage, &t).await?;
        let tx = Transaction::new(&t);
        let action = tx
            .expire_snapshots()
            .expire_older_than_ms(now.saturating_sub(opts.snapshot_age_ms))
            .retain_last(opts.retain_last.max(1));
        let tx = action.apply(tx).map_err(|e| e.to_string())?;
        let committed = if opts.dry_run {
            tx.commit(&Dry(catalog)).await
        } else {
            tx.commit(catalog).await
        };
        match committed {
            Ok(t) => {
                report.snapshots_expired = report
                    .snapshots_before
                    .saturating_sub(t.metadata().snapshots().len());
                break (before, referenced(storage, &t).await?);
            }
            Err(e) if is_conflict(&e) && attempts < CONFLICT_RETRIES => attempts += 1,
            Err(e) => return Err(format!("expiring snapshots: {e}")),
        }
    };
    let store = storage.store().map_err(|e| e.to_string())?;
    let gone: HashSet<String> = before.difference(&after).cloned().collect();
    if !opts.dry_run {
        for key in &gone {
            delete(store, key).await?;
        }
    }
    report.expired_files = gone.iter().cloned().collect();
    report.expired_files.sort();
    // Orphans: under the table's location, referenced by nothing that is left.
    let t = catalog.load_table(ident).await.map_err(|e| e.to_string())?;
    let keep = referenced(storage, &t).await?;
    let location = t.metadata().location().trim_end_matches('/');
    let prefix = storage.key(location).map_err(|e| e.to_string())?;
    let objects: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| format!("listing {prefix}: {e}"))?;
    let cutoff = now.saturating_sub(opts.orphan_age_ms);
    for o in objects {
        let key = o.location.to_string();
        // A deleted file may still be listed for a moment.
        if keep.contains(&key) || after.contains(&key) || gone.contains(&key) {
            continue;
        }
        if o.last_modified.timestamp_millis() >= cutoff {
            report.young_orphans += 1;
            continue;
        }
        if !opts.dry_run {
            delete(store, &key).await?;
        }
        report.orphans.push(key);
    }
    report.orphans.sort();
    info!(table = %ident, expired = report.snapshots_expired, files = report.expired_files.len(),
        orphans = report.orphans.len(), young = report.young_orphans, "lake table maintained");
    Ok(report)
}

/// The catalog of a dry run: a commit is applied to the table as loaded and handed back, and
/// the catalog never sees it (the expiry only loads and commits).
#[derive(Debug)]
struct Dry<'a>(&'a OneAttempt);

wrapper_catalog! {
    Dry<'_>,
    0,
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        self.0.load_table(table).await
    }
    async fn update_table(&self, commit: iceberg::TableCommit) -> iceberg::Result<Table> {
        let now = self.0.load_table(commit.identifier()).await?;
        commit.apply(now)
    }
}

/// Every object key the table's metadata refers to: metadata files (current and logged),
/// manifest lists, manifests and data files of every snapshot.
async fn referenced(storage: &LakeStorage, t: &Table) -> Result<HashSet<String>, String> {
    let m = t.metadata();
    let mut urls: Vec<String> = Vec::new();
    urls.extend(t.metadata_location().map(str::to_owned));
    urls.extend(m.metadata_log().iter().map(|l| l.metadata_file.clone()));
    urls.extend(m.statistics_iter().map(|s| s.statistics_path.clone()));
    let mut manifests = HashSet::new();
    for snapshot in m.snapshots() {
        urls.push(snapshot.manifest_list().to_owned());
        let list = t
            .manifest_list_reader(snapshot)
            .load()
            .await
            .map_err(|e| format!("reading {}: {e}", snapshot.manifest_list()))?;
        for mf in list.entries() {
            if !manifests.insert(mf.manifest_path.clone()) {
                continue;
            }
            let manifest = mf
                .load_manifest(t.file_io())
                .await
                .map_err(|e| format!("reading {}: {e}", mf.manifest_path))?;
            urls.extend(manifest.entries().iter().map(|e| e.file_path().to_owned()));
        }
    }
    urls.extend(manifests);
    urls.into_iter()
        .map(|u| {
            storage
                .key(&u)
                .map(|k| k.to_string())
                .map_err(|e| format!("{u} is outside lake.warehouse: {e}"))
        })
        .collect()
}

async fn delete(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    key: &str,
) -> Result<(), String> {
    match store.delete(&Path::from(key)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(format!("deleting {key}: {e}")),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
