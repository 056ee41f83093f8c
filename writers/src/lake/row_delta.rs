//! One snapshot that adds data files and delete files together (Iceberg Java's `RowDelta`),
//! optionally removing every live file first (a truncate) or named files (a compaction's
//! rewrite, Java's `RewriteFiles`, whose new files keep the sequence number of the snapshot
//! they were read at so that deletes committed since still apply to them), built on the `iceberg` crate's
//! public spec types: its transactions only fast-append data files (apache/iceberg-rust #2203).
//! The updates go to the catalog through [`super::commit`].
//!
//! Per the spec (format version 2): the new manifests' entries inherit the snapshot's
//! sequence number from the manifest list, so a retry on a newer table rewrites only the
//! manifest list; an equality delete applies to data files of a lower sequence number, never
//! to the rows added in its own snapshot; a removed file keeps its data and file sequence
//! numbers in a `DELETED` entry. The summary's `added-*`, `deleted-*`, `removed-*` and
//! `total-*` figures are Java's.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, MAIN_BRANCH, ManifestContentType,
    ManifestFile, ManifestListWriter, ManifestWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary, TableProperties,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};
use uuid::Uuid;

/// What one snapshot does to a table.
#[derive(Debug, Default, Clone)]
pub struct RowDelta {
    /// Data files added.
    pub data: Vec<DataFile>,
    /// Equality- or position-delete files added.
    pub deletes: Vec<DataFile>,
    /// Every live data and delete file of the table removed before the files above are
    /// added (a truncate).
    pub remove_all: bool,
    /// These live files (by path) removed: each must be live, or the delta fails (the table
    /// changed under a rewrite).
    pub remove: HashSet<String>,
    /// The data sequence number of the added data files, instead of the new snapshot's: a
    /// rewrite of files read at that sequence number (Java's `validateFromSnapshot` with
    /// `dataSequenceNumber`), so that equality deletes committed after it still apply.
    pub data_sequence: Option<i64>,
    /// Extra summary properties (the Kafka offsets).
    pub properties: HashMap<String, String>,
}

/// A delta's commit: what must still hold, and what changes.
#[derive(Debug)]
pub struct Prepared {
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
    pub snapshot_id: i64,
}

/// Summary pairs whose `total-*` moves by `added - removed` (Java's `SnapshotSummary`).
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

impl RowDelta {
    /// Whether the snapshot would change nothing but properties.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.deletes.is_empty()
            && !self.remove_all
            && self.remove.is_empty()
    }

    /// The operation Java records: `append` for data alone, `delete` for deletes or removals
    /// alone, `overwrite` for both, `replace` for a rewrite (rows unchanged).
    pub fn operation(&self) -> Operation {
        if self.data_sequence.is_some() {
            return Operation::Replace;
        }
        let removes = self.remove_all || !self.deletes.is_empty() || !self.remove.is_empty();
        match (self.data.is_empty(), removes) {
            (false, false) => Operation::Append,
            (true, _) => Operation::Delete,
            (false, true) => Operation::Overwrite,
        }
    }

    /// Writes the snapshot's manifests and manifest list under the table's `metadata/` and
    /// returns its commit against `table` as it is now.
    pub async fn prepare(&self, table: &Table) -> Result<Prepared> {
        for f in &self.data {
            if f.content_type() != DataContentType::Data {
                return Err(invalid(format!("{} is not a data file", f.file_path())));
            }
        }
        for f in &self.deletes {
            if f.content_type() == DataContentType::Data {
                return Err(invalid(format!("{} is not a delete file", f.file_path())));
            }
        }
        let m = table.metadata();
        if m.format_version() != FormatVersion::V2 {
            return Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!(
                    "{}: row deltas need format version 2, the table is {}",
                    table.identifier(),
                    m.format_version()
                ),
            ));
        }
        let snapshot_id = unique_snapshot_id(table);
        let sequence = m.next_sequence_number();
        let parent = m.current_snapshot();
        let mut files = Files {
            table,
            snapshot_id,
            commit: Uuid::new_v4(),
            count: 0,
        };
        let schema = m.current_schema().clone();
        let spec = m.default_partition_spec().clone();
        let mut summary = SnapshotSummaryCollector::default();
        summary.set_partition_summary_limit(
            m.properties()
                .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
                .and_then(|v| v.parse().ok())
                .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT),
        );

        let mut manifests: Vec<ManifestFile> = Vec::new();
        let mut found: HashSet<&str> = HashSet::new();
        if let Some(parent) = parent {
            let list = table.manifest_list_reader(parent).load().await?;
            for mf in list.entries() {
                // Manifests with no live file are history: the new snapshot leaves them out.
                if !(mf.has_added_files() || mf.has_existing_files()) {
                    continue;
                }
                if !self.remove_all && self.remove.is_empty() {
                    manifests.push(mf.clone());
                    continue;
                }
                let spec_of = m
                    .partition_spec_by_id(mf.partition_spec_id)
                    .ok_or_else(|| {
                        invalid(format!(
                            "{}: no partition spec {}",
                            mf.manifest_path, mf.partition_spec_id
                        ))
                    })?;
                let manifest = mf.load_manifest(table.file_io()).await?;
                let live: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
                let goes = |path: &str| self.remove_all || self.remove.contains(path);
                if !live.iter().any(|e| goes(e.file_path())) {
                    manifests.push(mf.clone());
                    continue;
                }
                let mut writer = files.manifest(mf.content, spec_of.as_ref().clone())?;
                for e in live {
                    let seq = e.sequence_number().ok_or_else(|| {
                        invalid(format!(
                            "{}: an entry with no sequence number",
                            mf.manifest_path
                        ))
                    })?;
                    let f = e.data_file().clone();
                    if goes(e.file_path()) {
                        if let Some(p) = self.remove.get(e.file_path()) {
                            found.insert(p.as_str());
                        }
                        summary.remove_file(e.data_file(), schema.clone(), spec_of.clone());
                        writer.add_delete_file(f, seq, e.file_sequence_number)?;
                    } else {
                        let snapshot = e.snapshot_id().ok_or_else(|| {
                            invalid(format!(
                                "{}: an entry with no snapshot id",
                                mf.manifest_path
                            ))
                        })?;
                        writer.add_existing_file(f, snapshot, seq, e.file_sequence_number)?;
                    }
                }
                manifests.push(writer.write_manifest_file().await?);
            }
        }
        for (content, added) in [
            (ManifestContentType::Data, &self.data),
            (ManifestContentType::Deletes, &self.deletes),
        ] {
            if added.is_empty() {
                continue;
            }
            let mut writer = files.manifest(content, spec.as_ref().clone())?;
            // No sequence number (-1): the entry inherits the snapshot's from the list.
            let seq = match content {
                ManifestContentType::Data => self.data_sequence.unwrap_or(-1),
                ManifestContentType::Deletes => -1,
            };
            for f in added {
                summary.add_file(f, schema.clone(), spec.clone());
                writer.add_file(f.clone(), seq)?;
            }
            manifests.push(writer.write_manifest_file().await?);
        }

        if let Some(gone) = self.remove.iter().find(|p| !found.contains(p.as_str())) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{}: {gone} is no longer a live file of the table (removed by a commit \
                     since, a truncate say)",
                    table.identifier()
                ),
            ));
        }
        let list_path = format!(
            "{}/metadata/snap-{snapshot_id}-0-{}.{}",
            m.location(),
            files.commit,
            DataFileFormat::Avro
        );
        let out = table.file_io().new_output(&list_path)?.writer().await?;
        let mut list =
            ManifestListWriter::v2(out, snapshot_id, parent.map(|p| p.snapshot_id()), sequence);
        list.add_manifests(manifests.into_iter())?;
        list.close().await?;

        let mut properties = self.properties.clone();
        properties.extend(summary.build());
        let previous = parent.map(|p| &p.summary().additional_properties);
        totals(&mut properties, previous)?;
        let snapshot = Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent.map(|p| p.snapshot_id()))
            .with_sequence_number(sequence)
            .with_summary(Summary {
                operation: self.operation(),
                additional_properties: properties,
            })
            .with_schema_id(m.current_schema_id())
            .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
            .build();
        Ok(Prepared {
            requirements: vec![
                TableRequirement::UuidMatch { uuid: m.uuid() },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: MAIN_BRANCH.to_owned(),
                    snapshot_id: parent.map(|p| p.snapshot_id()),
                },
            ],
            updates: vec![
                TableUpdate::AddSnapshot { snapshot },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_owned(),
                    reference: SnapshotReference::new(
                        snapshot_id,
                        SnapshotRetention::branch(None, None, None),
                    ),
                },
            ],
            snapshot_id,
        })
    }
}

/// Sets each `total-*` to the previous snapshot's plus what this one added, less what it
/// removed; a previous snapshot without a total leaves it unknown (unset), as Java does.
fn totals(
    properties: &mut HashMap<String, String>,
    previous: Option<&HashMap<String, String>>,
) -> Result<()> {
    let number = |map: &HashMap<String, String>, key: &str| -> Result<u64> {
        map.get(key).map_or(Ok(0), |v| {
            v.parse()
                .map_err(|_| invalid(format!("snapshot summary `{key}` is not a count: {v}")))
        })
    };
    for (total, added, removed) in TOTALS {
        let before = match previous {
            None => 0,
            Some(p) if p.contains_key(total) => number(p, total)?,
            Some(_) => {
                properties.remove(total);
                continue;
            }
        };
        let (plus, minus) = (number(properties, added)?, number(properties, removed)?);
        let now = before
            .checked_add(plus)
            .and_then(|n| n.checked_sub(minus))
            .ok_or_else(|| {
                invalid(format!(
                    "snapshot summary `{total}`: {before} + {plus} - {minus} is out of range"
                ))
            })?;
        properties.insert(total.to_owned(), now.to_string());
    }
    Ok(())
}

fn invalid(what: String) -> Error {
    Error::new(ErrorKind::DataInvalid, what)
}

/// A snapshot id no snapshot of the table has, positive (as Java and the crate pick them).
fn unique_snapshot_id(table: &Table) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) & (i64::MAX as u64)) as i64;
        if id != 0 && !table.metadata().snapshots().any(|s| s.snapshot_id() == id) {
            return id;
        }
    }
}

/// The manifests one snapshot writes, named as Java names them.
struct Files<'a> {
    table: &'a Table,
    snapshot_id: i64,
    commit: Uuid,
    count: u64,
}

impl Files<'_> {
    fn manifest(
        &mut self,
        content: ManifestContentType,
        spec: iceberg::spec::PartitionSpec,
    ) -> Result<ManifestWriter> {
        let m = self.table.metadata();
        let path = format!(
            "{}/metadata/{}-m{}.{}",
            m.location(),
            self.commit,
            self.count,
            DataFileFormat::Avro
        );
        self.count += 1;
        let out = self.table.file_io().new_output(path)?;
        let builder = ManifestWriterBuilder::new(
            out,
            Some(self.snapshot_id),
            m.current_schema().clone(),
            spec,
        );
        Ok(match content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        })
    }
}

#[cfg(test)]
mod tests;
