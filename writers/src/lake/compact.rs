//! Compaction of upsert tables (`lakesink lake maintain`): each partition that holds equality
//! deletes has its data files rewritten with the deletes applied, and the applied delete files
//! dropped, in one snapshot (Java's `RewriteFiles`, operation `replace`).
//!
//! It does not conflict with the service's commits: the rewritten files keep the sequence
//! number of the snapshot they were read at ([`RowDelta::data_sequence`]), so a delete the
//! service commits meanwhile still applies to them, and a lost race is prepared again on the
//! newer table. Only a commit that removed a file being rewritten (a truncate) stops it; the
//! next run starts over. The applied delete files can go: each applies only to data files of
//! a lower sequence number, and every such file of the partition is rewritten.
//!
//! Memory: a partition's delete keys, one data file's rows and the output file being encoded
//! (rolled at `target_bytes`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_row::{OwnedRow, RowConverter, SortField};
use iceberg::spec::{DataContentType, DataFile, NestedField, StructType};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

use super::catalog::{OneAttempt, is_conflict};
use super::commit::Committer;
use super::files::{OpenFile, Sealed, data_file};
use super::row_delta::RowDelta;
use super::storage::LakeStorage;
use super::types::conform;

/// What a compaction did (or, in a dry run, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// Partitions rewritten.
    pub partitions: usize,
    pub data_files_removed: usize,
    pub delete_files_removed: usize,
    pub files_added: usize,
    /// Rows of the data files read, and of them, those the deletes removed.
    pub rows_read: u64,
    pub rows_deleted: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Partitions left alone: they hold position deletes, which lakesink does not write.
    pub skipped: usize,
}

/// A live file of the current snapshot, with its data sequence number.
struct Live {
    file: DataFile,
    seq: i64,
}

#[derive(Default)]
struct Group {
    data: Vec<Live>,
    deletes: Vec<Live>,
}

/// Compacts `ident`'s partitions that hold deletes. `dry_run`: reads the table's manifests
/// only, and reports what it would rewrite.
pub async fn compact(
    catalog: &OneAttempt,
    committer: &Committer,
    storage: &LakeStorage,
    ident: &TableIdent,
    props: &WriterProperties,
    target_bytes: usize,
    dry_run: bool,
) -> Result<Compaction, String> {
    let table = catalog.load_table(ident).await.map_err(|e| e.to_string())?;
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Compaction::default());
    };
    let read_at = snapshot.sequence_number();
    let mut report = Compaction::default();
    let groups = groups(&table).await?;
    // Deletes of an unpartitioned spec in a table with another spec apply to every
    // partition (lakesink writes none; another writer may): rewriting a partition without
    // them would bring their rows back, so such a table is left alone.
    let unpartitioned = |id: i32| {
        table
            .metadata()
            .partition_spec_by_id(id)
            .is_none_or(|spec| spec.is_unpartitioned())
    };
    let global = groups
        .iter()
        .any(|((id, _), g)| !g.deletes.is_empty() && unpartitioned(*id));
    if global && groups.keys().any(|(id, _)| !unpartitioned(*id)) {
        return Err(
            "it holds deletes of an unpartitioned spec beside partitioned files (written by \
             another engine): compact it with that engine, or run maintain with --no-compact"
                .to_owned(),
        );
    }
    let mut delta = RowDelta {
        data_sequence: Some(read_at),
        ..RowDelta::default()
    };
    for ((spec_id, _), g) in groups {
        if g.deletes.is_empty() {
            continue;
        }
        if g.deletes
            .iter()
            .any(|d| d.file.content_type() != DataContentType::EqualityDeletes)
        {
            report.skipped += 1;
            continue;
        }
        report.partitions += 1;
        report.data_files_removed += g.data.len();
        report.delete_files_removed += g.deletes.len();
        report.rows_read += g.data.iter().map(|d| d.file.record_count()).sum::<u64>();
        report.bytes_read += g
            .data
            .iter()
            .chain(&g.deletes)
            .map(|d| d.file.file_size_in_bytes())
            .sum::<u64>();
        delta.remove.extend(
            g.data
                .iter()
                .chain(&g.deletes)
                .map(|d| d.file.file_path().to_owned()),
        );
        if dry_run {
            continue;
        }
        let written = rewrite(&table, storage, spec_id, &g, props, target_bytes).await?;
        report.rows_deleted += g
            .data
            .iter()
            .map(|d| d.file.record_count())
            .sum::<u64>()
            .saturating_sub(written.iter().map(DataFile::record_count).sum::<u64>());
        report.files_added += written.len();
        report.bytes_written += written
            .iter()
            .map(DataFile::file_size_in_bytes)
            .sum::<u64>();
        delta.data.extend(written);
    }
    if dry_run || delta.remove.is_empty() {
        return Ok(report);
    }
    commit(catalog, committer, ident, &delta).await?;
    Ok(report)
}

/// The live files of the current snapshot by partition (spec id and value).
async fn groups(table: &Table) -> Result<HashMap<(i32, iceberg::spec::Struct), Group>, String> {
    let mut out: HashMap<(i32, iceberg::spec::Struct), Group> = HashMap::new();
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(out);
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(|e| format!("reading {}: {e}", snapshot.manifest_list()))?;
    for mf in list.entries() {
        let manifest = mf
            .load_manifest(table.file_io())
            .await
            .map_err(|e| format!("reading {}: {e}", mf.manifest_path))?;
        for e in manifest.entries().iter().filter(|e| e.is_alive()) {
            let seq = e
                .sequence_number()
                .ok_or_else(|| format!("{}: an entry with no sequence number", mf.manifest_path))?;
            let f = e.data_file();
            let g = out
                .entry((mf.partition_spec_id, f.partition().clone()))
                .or_default();
            let live = Live {
                file: f.clone(),
                seq,
            };
            if f.content_type() == DataContentType::Data {
                g.data.push(live);
            } else {
                g.deletes.push(live);
            }
        }
    }
    Ok(out)
}

/// Keys deleted by one set of equality columns, with the highest sequence number of a delete
/// file holding each.
struct Deleted {
    /// The columns, as the table holds them now.
    columns: StructType,
    /// From the first keys read (the columns' types as the table holds them now).
    converter: Option<RowConverter>,
    keys: HashMap<OwnedRow, i64>,
}

impl Deleted {
    /// `batch`'s key columns in the row format.
    fn rows(&mut self, batch: &RecordBatch) -> Result<arrow_row::Rows, String> {
        let names: Vec<usize> = self
            .columns
            .fields()
            .iter()
            .filter_map(|f| batch.schema().index_of(&f.name).ok())
            .collect();
        let keys = batch.project(&names).map_err(|e| e.to_string())?;
        let keys = conform(&keys, &self.columns).map_err(|e| e.to_string())?;
        let mut columns: Vec<Arc<dyn Array>> = Vec::new();
        for f in self.columns.fields() {
            columns.push(
                keys.column_by_name(&f.name)
                    .ok_or_else(|| format!("a file without the key column `{}`", f.name))?
                    .clone(),
            );
        }
        if self.converter.is_none() {
            let sort = columns
                .iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect();
            self.converter = Some(RowConverter::new(sort).map_err(|e| e.to_string())?);
        }
        let converter = self.converter.as_ref().ok_or("no converter")?;
        converter
            .convert_columns(&columns)
            .map_err(|e| e.to_string())
    }

    /// Marks in `keep` the rows of `rows` (the table's columns) a delete removes, for a data
    /// file of sequence number `seq`.
    fn apply(&mut self, rows: &RecordBatch, seq: i64, keep: &mut [bool]) -> Result<(), String> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let converted = self.rows(rows)?;
        for (i, k) in keep.iter_mut().enumerate() {
            if self
                .keys
                .get(&converted.row(i).owned())
                .is_some_and(|&d| d > seq)
            {
                *k = false;
            }
        }
        Ok(())
    }
}

async fn read(storage: &LakeStorage, path: &str) -> Result<Vec<RecordBatch>, String> {
    let store = storage.store().map_err(|e| e.to_string())?;
    let key = storage.key(path).map_err(|e| e.to_string())?;
    let bytes = store
        .get(&key)
        .await
        .map_err(|e| format!("{path}: {e}"))?
        .bytes()
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| format!("{path}: {e}"))?
        .build()
        .map_err(|e| format!("{path}: {e}"))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path}: {e}"))
}

/// One partition's data files, their deletes applied, as new files uploaded under the table.
async fn rewrite(
    table: &Table,
    storage: &LakeStorage,
    spec_id: i32,
    g: &Group,
    props: &WriterProperties,
    target_bytes: usize,
) -> Result<Vec<DataFile>, String> {
    let m = table.metadata();
    let schema = m.current_schema();
    // The deletes, by their equality columns.
    let mut sets: HashMap<Vec<i32>, Deleted> = HashMap::new();
    for d in &g.deletes {
        let ids = d.file.equality_ids().unwrap_or_default();
        let fields: Vec<Arc<NestedField>> = ids
            .iter()
            .map(|id| {
                schema
                    .field_by_id(*id)
                    .cloned()
                    .ok_or_else(|| format!("{}: no column {id}", d.file.file_path()))
            })
            .collect::<Result<_, _>>()?;
        let set = sets.entry(ids.clone()).or_insert_with(|| Deleted {
            columns: StructType::new(fields),
            converter: None,
            keys: HashMap::new(),
        });
        for batch in read(storage, d.file.file_path()).await? {
            let rows = set
                .rows(&batch)
                .map_err(|e| format!("{}: {e}", d.file.file_path()))?;
            for r in rows.iter() {
                let seq = set.keys.entry(r.owned()).or_insert(d.seq);
                *seq = (*seq).max(d.seq);
            }
        }
    }
    let partition = g
        .data
        .first()
        .map(|d| d.file.partition().clone())
        .unwrap_or_else(iceberg::spec::Struct::empty);
    let location = m.location().trim_end_matches('/');
    let mut out = Vec::new();
    let mut open: Option<OpenFile> = None;
    let upload = async |sealed: Sealed| -> Result<DataFile, String> {
        let path = format!("{location}/data/compacted-{}.parquet", uuid::Uuid::new_v4());
        let store = storage.store().map_err(|e| e.to_string())?;
        let key = storage.key(&path).map_err(|e| e.to_string())?;
        store
            .put(&key, sealed.bytes.clone().into())
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        data_file(path, &sealed, schema, spec_id, partition.clone())
    };
    for d in &g.data {
        for batch in read(storage, d.file.file_path()).await? {
            let rows = conform(&batch, schema.as_struct()).map_err(|e| e.to_string())?;
            let mut keep = vec![true; rows.num_rows()];
            for set in sets.values_mut() {
                set.apply(&rows, d.seq, &mut keep)
                    .map_err(|e| format!("{}: {e}", d.file.file_path()))?;
            }
            let kept = arrow_select::filter::filter_record_batch(&rows, &BooleanArray::from(keep))
                .map_err(|e| e.to_string())?;
            if kept.num_rows() == 0 {
                continue;
            }
            // Files of older schema versions hold fewer columns: a file per shape.
            let full = open
                .as_ref()
                .is_some_and(|f| f.bytes() >= target_bytes || f.schema() != &kept.schema());
            if full && let Some(f) = open.take() {
                out.push(upload(f.seal()?).await?);
            }
            let file = match &mut open {
                Some(f) => f,
                None => open.insert(OpenFile::new(kept.schema(), props.clone())?),
            };
            file.write(&kept)?;
        }
    }
    if let Some(f) = open.take() {
        out.push(upload(f.seal()?).await?);
    }
    Ok(out)
}

/// Commits the rewrite, prepared again on the newer table after a lost race.
async fn commit(
    catalog: &OneAttempt,
    committer: &Committer,
    ident: &TableIdent,
    delta: &RowDelta,
) -> Result<(), String> {
    let mut attempt = 0;
    loop {
        let table = catalog.load_table(ident).await.map_err(|e| e.to_string())?;
        let prepared = delta.prepare(&table).await.map_err(|e| e.to_string())?;
        attempt += 1;
        match committer
            .commit(&table, prepared.requirements, prepared.updates)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) && attempt < 20 => {
                tokio::time::sleep(std::time::Duration::from_millis(50u64 << attempt.min(6))).await;
            }
            Err(e) => return Err(format!("committing the compaction: {e}")),
        }
    }
}

#[cfg(test)]
mod tests;
