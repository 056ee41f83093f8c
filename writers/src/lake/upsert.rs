//! Upsert mode's collapse of one commit's changes to a keyed table (issue 22): what the
//! commit's row delta must hold so the table equals the source after it.
//!
//! The delta's equality deletes apply to older snapshots' rows only, never to the rows added
//! beside them, so within a commit each key may be added at most once: the last change of a
//! key wins, as the replica collapses a batch. Every key the commit changed after its last
//! truncate gets an equality delete (its older row, if any, goes); a truncate removes every
//! live file, so the keys changed before it need none, and their rows are gone with it.

use std::collections::HashMap;
use std::hash::Hash;

/// One change event, in offset order. `R` says where its row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<K, R> {
    /// A create, a snapshot read or an update: the key's row is now `R`.
    Upsert(K, R),
    /// The key's row is gone.
    Delete(K),
    /// The source table was emptied.
    Truncate,
}

/// The net effect of a commit's changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collapsed<K, R> {
    /// Every live file of the table goes first.
    pub truncate: bool,
    /// Keys whose older rows are deleted, each once, in the order first changed.
    pub deletes: Vec<K>,
    /// Rows to add, at most one per key (its last upsert), in the order the keys were first
    /// changed.
    pub rows: Vec<(K, R)>,
}

impl<K, R> Default for Collapsed<K, R> {
    fn default() -> Self {
        Self {
            truncate: false,
            deletes: Vec::new(),
            rows: Vec::new(),
        }
    }
}

/// Collapses `changes`, in offset order.
pub fn collapse<K, R>(changes: impl IntoIterator<Item = Change<K, R>>) -> Collapsed<K, R>
where
    K: Hash + Eq + Clone,
{
    let mut truncate = false;
    let mut keys: Vec<(K, Option<R>)> = Vec::new();
    let mut at: HashMap<K, usize> = HashMap::new();
    for change in changes {
        let (key, row) = match change {
            Change::Truncate => {
                truncate = true;
                keys.clear();
                at.clear();
                continue;
            }
            Change::Upsert(k, r) => (k, Some(r)),
            Change::Delete(k) => (k, None),
        };
        match at.get(&key) {
            Some(&i) => keys[i].1 = row,
            None => {
                at.insert(key.clone(), keys.len());
                keys.push((key, row));
            }
        }
    }
    let mut out = Collapsed {
        truncate,
        deletes: Vec::with_capacity(keys.len()),
        rows: Vec::new(),
    };
    for (k, row) in keys {
        if let Some(r) = row {
            out.rows.push((k.clone(), r));
        }
        out.deletes.push(k);
    }
    out
}

#[cfg(test)]
mod tests;
