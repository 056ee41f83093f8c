//! The Kafka offsets a lake table holds, and commits that move them exactly once.
//!
//! Every lakesink snapshot carries, in its summary, the next offset of every partition of its
//! consumer group that the table holds (`lakesink.offsets.<group>`, JSON `{topic: {partition:
//! offset}}`), merged with what other instances of the group committed before it. A commit
//! checks that the partitions it covers still stand where this instance last saw them: if an
//! instance that owned a partition before a rebalance committed it meanwhile, or this commit
//! already landed (an answer lost on the way back), it is not committed again.
//!
//! The snapshot is built on the table as loaded and committed only if the catalog still holds
//! that table ([`super::commit`]): the `iceberg` crate's transactions reload the table at commit
//! and apply their actions to the newer one, which would write this instance's view of the
//! offsets over another instance's newer ones (its rows then in the table twice).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent, TableUpdate};
use lakesink_model::TopicPartition;

use super::catalog::{OneAttempt, is_conflict};
use super::commit::Committer;
use super::row_delta::RowDelta;

/// The snapshot summary and table property key of a group's offsets.
pub fn key(group: &str) -> String {
    format!("lakesink.offsets.{group}")
}

/// topic → partition → next offset.
pub type Offsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// The group's offsets: from the newest snapshot of the current lineage that carries them (a
/// snapshot another writer made, a compaction, carries none), else from the table property
/// every lakesink commit also sets, which outlives expired snapshots.
pub fn table_offsets(table: &Table, group: &str) -> Result<Offsets, String> {
    let key = key(group);
    let meta = table.metadata();
    let mut at = meta.current_snapshot();
    while let Some(s) = at {
        if let Some(text) = s.summary().additional_properties.get(&key) {
            return parse(&key, text);
        }
        at = s
            .parent_snapshot_id()
            .and_then(|id| meta.snapshot_by_id(id));
    }
    match meta.properties().get(&key) {
        Some(text) if meta.current_snapshot().is_some() => parse(&key, text),
        _ => Ok(Offsets::new()),
    }
}

fn parse(key: &str, text: &str) -> Result<Offsets, String> {
    let raw: BTreeMap<String, BTreeMap<String, i64>> = serde_json::from_str(text)
        .map_err(|e| format!("the table's {key} is not lakesink's offsets: {e}"))?;
    let mut out = Offsets::new();
    for (topic, parts) in raw {
        let mut m = BTreeMap::new();
        for (p, o) in parts {
            let p: i32 = p
                .parse()
                .map_err(|_| format!("the table's {key} names partition {p:?}"))?;
            m.insert(p, o);
        }
        out.insert(topic, m);
    }
    Ok(out)
}

fn render(offsets: &Offsets) -> String {
    let raw: BTreeMap<&String, BTreeMap<String, i64>> = offsets
        .iter()
        .map(|(t, ps)| (t, ps.iter().map(|(p, o)| (p.to_string(), *o)).collect()))
        .collect();
    serde_json::to_string(&raw).unwrap_or_default()
}

pub fn get(offsets: &Offsets, part: &TopicPartition) -> Option<i64> {
    offsets
        .get(&*part.topic)
        .and_then(|ps| ps.get(&part.partition))
        .copied()
}

/// A partition's rows in a commit: the table held it up to `expected` when this instance
/// last looked; the commit moves it to `next`.
#[derive(Debug, Clone)]
pub struct Covered {
    pub part: TopicPartition,
    pub expected: Option<i64>,
    pub next: i64,
    pub rows: u64,
    /// The data files holding this partition's rows.
    pub files: Vec<DataFile>,
    /// Upsert mode: the equality-delete files of the keys its rows changed.
    pub deletes: Vec<DataFile>,
    /// Upsert mode: the partition's changes began with a truncate (or held one).
    pub truncate: bool,
}

/// What became of a commit.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Partitions now held by the table up to their `next` (committed now, or found there).
    pub committed: Vec<Covered>,
    /// Partitions another writer moved: their rows are not committed; the table holds them up
    /// to the offset given.
    pub fenced: Vec<(TopicPartition, Option<i64>)>,
    /// The table after the commit, when one was made.
    pub table: Option<Table>,
}

/// Lost races are retried this often, reloading the table each time.
const ATTEMPTS: u32 = 20;

/// Commits the files of `covered` in one snapshot, with the group's offsets merged.
pub async fn commit(
    catalog: &OneAttempt,
    committer: &Committer,
    ident: &TableIdent,
    group: &str,
    mut covered: Vec<Covered>,
) -> Result<Outcome, iceberg::Error> {
    let mut outcome = Outcome::default();
    let mut attempt = 0;
    loop {
        let table = catalog.load_table(ident).await?;
        let mut offsets = table_offsets(&table, group)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e))?;
        let mut go = Vec::new();
        for c in covered.drain(..) {
            let have = get(&offsets, &c.part);
            if have == c.expected {
                go.push(c);
            } else if have.is_some_and(|h| h >= c.next) {
                // The table holds every record below `next` already: this commit's own
                // earlier attempt landed (its answer lost), or the partition's next owner
                // committed past it.
                outcome.committed.push(c);
            } else {
                outcome.fenced.push((c.part, have));
            }
        }
        covered = go;
        if covered.is_empty() {
            return Ok(outcome);
        }
        for c in &covered {
            offsets
                .entry(c.part.topic.to_string())
                .or_default()
                .insert(c.part.partition, c.next);
        }
        let text = render(&offsets);
        let files: Vec<DataFile> = covered
            .iter()
            .flat_map(|c| c.files.iter().cloned())
            .collect();
        let delta = RowDelta {
            data: files,
            deletes: covered
                .iter()
                .flat_map(|c| c.deletes.iter().cloned())
                .collect(),
            remove_all: covered.iter().any(|c| c.truncate),
            properties: HashMap::from([(key(group), text.clone())]),
            ..RowDelta::default()
        };
        let mut prepared = delta.prepare(&table).await?;
        prepared.updates.push(TableUpdate::SetProperties {
            updates: HashMap::from([(key(group), text)]),
        });
        attempt += 1;
        match committer
            .commit(&table, prepared.requirements, prepared.updates)
            .await
        {
            Ok(t) => {
                outcome.committed.append(&mut covered);
                outcome.table = Some(t);
                return Ok(outcome);
            }
            Err(e) if is_conflict(&e) && attempt < ATTEMPTS => {
                let wait = 50u64.saturating_mul(1 << attempt.min(6));
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            Err(e) => {
                // Unknown whether it landed: the next attempt, or the next run, finds out
                // from the offsets.
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests;
