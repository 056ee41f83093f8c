//! Per table and key, the net effect of a run of events in offset order.
//!
//! The last event for a key wins, except that columns an update left untouched (Debezium's
//! unchanged-TOAST placeholder, or a column the record's schema does not have yet) keep the
//! value an earlier upsert in the run gave them, or stay untouched in the table.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// A row of one of the batches in an `apply` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowRef {
    pub batch: u32,
    pub row: u32,
}

/// What to do with a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Net {
    /// Write the row: every non-key column from `base`, or, when `cols` is set, column `c`
    /// from `cols[c]` (left as stored where that is `None`; from `base` past its end, as
    /// columns can be added after the vector was made).
    Upsert {
        base: RowRef,
        cols: Option<Vec<Option<RowRef>>>,
    },
    /// Delete the key.
    Delete(RowRef),
}

impl Net {
    /// Where column `c`'s value comes from.
    pub(crate) fn source(&self, c: usize) -> Option<RowRef> {
        match self {
            Net::Upsert { base, cols: None } => Some(*base),
            Net::Upsert {
                base,
                cols: Some(v),
            } => v.get(c).copied().unwrap_or(Some(*base)),
            Net::Delete(_) => None,
        }
    }
}

/// Collapses events for one table; keys are the encoded key columns.
#[derive(Default)]
pub(crate) struct Collapser {
    /// Indexes into `entries`, by their key: each key is stored once.
    index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    entries: Vec<(Vec<u8>, Net)>,
    fresh: Vec<bool>,
    truncated: bool,
}

/// A table's net effect.
pub(crate) struct Collapsed {
    /// Truncate the table first.
    pub truncated: bool,
    /// Each key's net effect, in order of first appearance.
    pub entries: Vec<(Vec<u8>, Net)>,
    /// Per entry: the key's first event was an insert (`c`, `r`) or came after the truncate,
    /// so the table should not hold it yet (a plain insert is worth trying).
    pub fresh: Vec<bool>,
}

impl Collapser {
    /// An upsert of `at`, leaving the non-key columns in `untouched` as they are; the table
    /// has `ncols` non-key columns so far. `insert`: the event is a `c` or `r`.
    pub(crate) fn upsert(
        &mut self,
        key: Vec<u8>,
        at: RowRef,
        ncols: usize,
        untouched: &[usize],
        insert: bool,
    ) {
        let (hash, found) = self.find(&key);
        let prev = found.map(|i| &self.entries[i].1);
        let net = if untouched.is_empty() {
            Net::Upsert {
                base: at,
                cols: None,
            }
        } else {
            let cols = (0..ncols)
                .map(|c| {
                    if untouched.contains(&c) {
                        prev.and_then(|p| p.source(c))
                    } else {
                        Some(at)
                    }
                })
                .collect();
            Net::Upsert {
                base: at,
                cols: Some(cols),
            }
        };
        self.put(key, hash, found, net, insert);
    }

    pub(crate) fn delete(&mut self, key: Vec<u8>, at: RowRef) {
        let (hash, found) = self.find(&key);
        self.put(key, hash, found, Net::Delete(at), false);
    }

    /// The key's hash, and its entry if it has one.
    fn find(&self, key: &[u8]) -> (u64, Option<usize>) {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        let found = self.index.find(hash, |&i| entries[i].0 == key).copied();
        (hash, found)
    }

    /// Everything before a truncate is moot; the table is truncated first.
    pub(crate) fn truncate(&mut self) {
        self.index.clear();
        self.entries.clear();
        self.fresh.clear();
        self.truncated = true;
    }

    fn put(&mut self, key: Vec<u8>, hash: u64, found: Option<usize>, net: Net, insert: bool) {
        match found {
            Some(i) => self.entries[i].1 = net,
            None => {
                let (entries, hasher) = (&self.entries, &self.hasher);
                self.index
                    .insert_unique(hash, entries.len(), |&i| hasher.hash_one(&entries[i].0));
                self.entries.push((key, net));
                self.fresh.push(insert || self.truncated);
            }
        }
    }

    pub(crate) fn finish(self) -> Collapsed {
        Collapsed {
            truncated: self.truncated,
            entries: self.entries,
            fresh: self.fresh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(row: u32) -> RowRef {
        RowRef { batch: 0, row }
    }

    fn full(row: u32) -> Net {
        Net::Upsert {
            base: r(row),
            cols: None,
        }
    }

    #[test]
    fn last_event_per_key_wins_in_first_seen_order() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false);
        c.upsert(b"b".to_vec(), r(1), 3, &[], false);
        c.upsert(b"a".to_vec(), r(2), 3, &[], false);
        c.delete(b"b".to_vec(), r(3));
        c.delete(b"b".to_vec(), r(4)); // the tombstone after its delete
        let Collapsed {
            truncated,
            entries: net,
            ..
        } = c.finish();
        assert!(!truncated);
        assert_eq!(
            net,
            vec![(b"a".to_vec(), full(2)), (b"b".to_vec(), Net::Delete(r(4)))]
        );
    }

    #[test]
    fn delete_then_insert_is_an_insert_and_insert_then_delete_a_delete() {
        let mut c = Collapser::default();
        c.delete(b"k".to_vec(), r(0));
        c.upsert(b"k".to_vec(), r(1), 3, &[], false);
        c.upsert(b"j".to_vec(), r(2), 3, &[], false);
        c.delete(b"j".to_vec(), r(3));
        let net = c.finish().entries;
        assert_eq!(net[0].1, full(1));
        assert_eq!(net[1].1, Net::Delete(r(3)));
    }

    #[test]
    fn untouched_columns_keep_the_earlier_value_or_stay_as_stored() {
        let mut c = Collapser::default();
        c.upsert(b"k".to_vec(), r(0), 3, &[], false);
        c.upsert(b"k".to_vec(), r(1), 3, &[2], false); // column 2 is the placeholder
        c.upsert(b"k".to_vec(), r(2), 3, &[1, 2], false);
        c.upsert(b"x".to_vec(), r(3), 3, &[0], false); // no earlier value in the run
        let net = c.finish().entries;
        let k = &net[0].1;
        assert_eq!(k.source(0), Some(r(2)));
        assert_eq!(k.source(1), Some(r(1)));
        assert_eq!(k.source(2), Some(r(0)));
        assert_eq!((net[1].1.source(0), net[1].1.source(1)), (None, Some(r(3))));
        assert_eq!(
            net[1].1.source(5),
            Some(r(3)),
            "a column added later comes from base"
        );
    }

    #[test]
    fn keys_first_inserted_here_or_after_a_truncate_are_fresh() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], true); // c
        c.upsert(b"a".to_vec(), r(1), 3, &[], false); // then u: still new to the table
        c.upsert(b"b".to_vec(), r(2), 3, &[], false); // u of a stored row
        c.delete(b"d".to_vec(), r(3));
        c.upsert(b"d".to_vec(), r(4), 3, &[], true); // d then c: the row may be stored
        assert_eq!(c.finish().fresh, vec![true, false, false]);

        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false);
        c.truncate();
        c.upsert(b"a".to_vec(), r(1), 3, &[], false);
        c.delete(b"b".to_vec(), r(2));
        let done = c.finish();
        assert!(done.truncated);
        assert_eq!(done.fresh, vec![true, true]);
    }

    #[test]
    fn truncate_drops_what_came_before() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false);
        c.truncate();
        c.upsert(b"b".to_vec(), r(2), 3, &[], false);
        let Collapsed {
            truncated,
            entries: net,
            ..
        } = c.finish();
        assert!(truncated);
        assert_eq!(net, vec![(b"b".to_vec(), full(2))]);
    }
}
