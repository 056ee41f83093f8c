//! Per table and key, the net effect of a run of events in offset order.
//!
//! The last event for a key wins, except that columns an update left untouched (Debezium's
//! unchanged-TOAST placeholder, or a column the record's schema does not have yet) keep the
//! value an earlier upsert in the run gave them, or stay untouched in the table.
//!
//! A primary key change arrives as a delete of the old key and a create of the new one, both
//! from one WAL record (the same source LSN and transaction: their [`Move`]). The create's
//! untouched columns are what the old key's row held: its value from earlier in the run, or
//! else the old row as stored, which the apply copies before it deletes it.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// A row of one of the batches in an `apply` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowRef {
    pub batch: u32,
    pub row: u32,
}

/// What pairs the delete and the create of one primary key change: the source's LSN and
/// transaction id of the change.
pub(crate) type Move = (i64, Option<i64>);

/// A soft delete of a row: when the source deleted it (µs since the Unix epoch, where the
/// event says), and the delete or truncate that did (whose source position the row keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark(pub Option<i64>, pub RowRef);

/// What to do with a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Net {
    /// Write the row: every non-key column from `base`, or, when `cols` is set, column `c`
    /// from `cols[c]` (left as stored where that is `None`; from `base` past its end, as
    /// columns can be added after the vector was made).
    Upsert {
        base: RowRef,
        cols: Option<Vec<Option<RowRef>>>,
        /// The key was moved here from another: the columns marked true come from the stored
        /// row of that old key (encoded like the key), copied before the old key's delete.
        moved: Option<Moved>,
    },
    /// Delete the key.
    Delete(RowRef),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Moved {
    pub old_key: Vec<u8>,
    pub cols: Vec<bool>,
}

impl Net {
    /// Where column `c`'s value comes from.
    pub(crate) fn source(&self, c: usize) -> Option<RowRef> {
        match self {
            Net::Upsert {
                base, cols: None, ..
            } => Some(*base),
            Net::Upsert {
                base,
                cols: Some(v),
                ..
            } => v.get(c).copied().unwrap_or(Some(*base)),
            Net::Delete(_) => None,
        }
    }

    /// The row a write takes its key from.
    pub(crate) fn base(&self) -> Option<RowRef> {
        match self {
            Net::Upsert { base, .. } => Some(*base),
            Net::Delete(_) => None,
        }
    }

    /// Whether column `c` is left as stored (an unchanged-TOAST placeholder), not written.
    pub(crate) fn keeps(&self, c: usize) -> bool {
        matches!(self, Net::Upsert { cols: Some(v), .. } if v.get(c).is_some_and(Option::is_none))
    }

    /// Whether column `c` comes from the stored row of the key this one moved from.
    pub(crate) fn copies_old(&self, c: usize) -> bool {
        match self {
            Net::Upsert { moved: Some(m), .. } => m.cols.get(c).copied().unwrap_or(false),
            _ => false,
        }
    }

    pub(crate) fn moved(&self) -> Option<&Moved> {
        match self {
            Net::Upsert { moved, .. } => moved.as_ref(),
            Net::Delete(_) => None,
        }
    }
}

/// Collapses events for one table; keys are the encoded key columns.
///
/// With soft deletes a delete keeps the row: an upsert then a delete in the run is the upsert,
/// marked deleted as of the (first) delete; a truncate marks every row so far, and rows
/// stored before the run, deleted.
#[derive(Default)]
pub(crate) struct Collapser {
    soft: bool,
    /// Soft deletes: per entry, the delete that marks it (a `Delete` always has one).
    marks: Vec<Option<Mark>>,
    /// Soft deletes: the first truncate's mark, for every row stored before the run.
    truncate_mark: Option<Mark>,
    /// Indexes into `entries`, by their key: each key is stored once.
    index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    entries: Vec<(Vec<u8>, Net)>,
    fresh: Vec<bool>,
    truncated: bool,
    /// Deletes that may be the first half of a key change: the old key, and its net effect
    /// in the run before the delete.
    deleted: foldhash::HashMap<Move, (Vec<u8>, Option<Net>)>,
}

/// A table's net effect.
pub(crate) struct Collapsed {
    /// Truncate the table first (soft deletes: mark every stored row deleted first, as of
    /// `truncate_mark`).
    pub truncated: bool,
    pub truncate_mark: Option<Mark>,
    /// Soft deletes: per entry, its mark (empty otherwise).
    pub marks: Vec<Option<Mark>>,
    /// Each key's net effect, in order of first appearance.
    pub entries: Vec<(Vec<u8>, Net)>,
    /// Per entry: the key's first event was an insert (`c`, `r`) or came after the truncate,
    /// so the table should not hold it yet (a plain insert is worth trying).
    pub fresh: Vec<bool>,
}

impl Collapser {
    /// A collapser for a table with soft deletes (`soft`) or hard ones.
    pub(crate) fn new(soft: bool) -> Self {
        Self {
            soft,
            ..Self::default()
        }
    }

    /// Room for `rows` more keys: a table's rows arrive in batches of thousands, and growing
    /// from empty (moving the entries and rehashing the index at each doubling) was a few
    /// percent of a snapshot's apply.
    pub(crate) fn reserve(&mut self, rows: usize) {
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .reserve(rows, |&i| hasher.hash_one(&entries[i].0));
        self.entries.reserve(rows);
        self.fresh.reserve(rows);
        if self.soft {
            self.marks.reserve(rows);
        }
    }

    /// An upsert of `at`, leaving the non-key columns in `untouched` as they are; the table
    /// has `ncols` non-key columns so far. `insert`: the event is a `c` or `r`. `moved`: the
    /// create of a key change, whose delete [`Self::delete`] was given the same `Move`.
    /// Returns false when `moved` is set but no such delete came before in the run.
    pub(crate) fn upsert(
        &mut self,
        key: Vec<u8>,
        at: RowRef,
        ncols: usize,
        untouched: &[usize],
        insert: bool,
        moved: Option<Move>,
    ) -> bool {
        let (hash, found) = self.find(&key);
        let from = moved.and_then(|m| self.deleted.remove(&m));
        let paired = moved.is_none() || from.is_some();
        let net = if untouched.is_empty() {
            Net::Upsert {
                base: at,
                cols: None,
                moved: None,
            }
        } else if let Some((old_key, old)) = from {
            // The old key's value in the run, else its stored row (or, for a key that itself
            // moved here in the run, where its value comes from).
            // Per column: its source in the run, and whether it is copied from the stored row.
            let (cols, copy): (Vec<Option<RowRef>>, Vec<bool>) = (0..ncols)
                .map(|c| match &old {
                    _ if !untouched.contains(&c) => (Some(at), false),
                    Some(o) if o.moved().is_some() => (o.source(c), o.copies_old(c)),
                    Some(o) => (o.source(c), o.source(c).is_none()),
                    None => (None, true),
                })
                .unzip();
            let old_key = match old.as_ref().and_then(Net::moved) {
                Some(m) => m.old_key.clone(),
                None => old_key,
            };
            let moved = copy.iter().any(|c| *c).then_some(Moved {
                old_key,
                cols: copy,
            });
            Net::Upsert {
                base: at,
                cols: Some(cols),
                moved,
            }
        } else {
            // A row deleted since (softly: still an entry) has nothing to keep.
            let prev = found.filter(|i| self.live(*i)).map(|i| &self.entries[i].1);
            let cols = (0..ncols)
                .map(|c| {
                    if untouched.contains(&c) {
                        prev.and_then(|p| p.source(c))
                    } else {
                        Some(at)
                    }
                })
                .collect();
            // A stored column stays stored; one a move in the run copies is copied still.
            let moved = prev.and_then(Net::moved).map(|m| Moved {
                old_key: m.old_key.clone(),
                cols: (0..ncols)
                    .map(|c| untouched.contains(&c) && m.cols.get(c).copied().unwrap_or(false))
                    .collect(),
            });
            Net::Upsert {
                base: at,
                cols: Some(cols),
                moved: moved.filter(|m| m.cols.iter().any(|c| *c)),
            }
        };
        self.put(key, hash, found, net, insert);
        paired
    }

    /// A delete of `key`; `moved`: the source change it came from, in case it is the first
    /// half of a key change; `when`: the time it happened at the source (soft deletes).
    pub(crate) fn delete(
        &mut self,
        key: Vec<u8>,
        at: RowRef,
        moved: Option<Move>,
        when: Option<i64>,
    ) {
        let (hash, found) = self.find(&key);
        if let Some(m) = moved {
            let prev = found.map(|i| self.entries[i].1.clone());
            let prev = prev.filter(|p| !matches!(p, Net::Delete(_)));
            // A softly deleted row in the run has no value to hand on.
            let prev = prev.filter(|_| found.is_none_or(|i| self.live(i)));
            self.deleted.insert(m, (key.clone(), prev));
        }
        match found {
            // The first delete since the row was last written marks it.
            Some(i) if self.soft => {
                self.marks[i].get_or_insert(Mark(when, at));
            }
            _ => {
                self.put(key, hash, found, Net::Delete(at), false);
                if let Some(m) = self.marks.last_mut().filter(|_| self.soft) {
                    *m = Some(Mark(when, at));
                }
            }
        }
    }

    /// Whether entry `i` is not marked deleted (always, with hard deletes).
    fn live(&self, i: usize) -> bool {
        self.marks.get(i).is_none_or(Option::is_none)
    }

    /// The key's hash, and its entry if it has one.
    fn find(&self, key: &[u8]) -> (u64, Option<usize>) {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        let found = self.index.find(hash, |&i| entries[i].0 == key).copied();
        (hash, found)
    }

    /// Everything before a truncate is moot; the table is truncated first. With soft deletes
    /// every row so far is marked deleted as of `when` (by the truncate `at`) instead, and so
    /// are the stored ones.
    pub(crate) fn truncate(&mut self, when: Option<i64>, at: RowRef) {
        self.deleted.clear();
        if self.soft {
            for m in &mut self.marks {
                m.get_or_insert(Mark(when, at));
            }
            self.truncate_mark.get_or_insert(Mark(when, at));
            self.truncated = true;
            return;
        }
        self.index.clear();
        self.entries.clear();
        self.fresh.clear();
        self.deleted.clear();
        self.truncated = true;
    }

    /// Sets the key's net effect; with soft deletes the key is live again (unmarked).
    fn put(&mut self, key: Vec<u8>, hash: u64, found: Option<usize>, net: Net, insert: bool) {
        match found {
            Some(i) => {
                self.entries[i].1 = net;
                if self.soft {
                    self.marks[i] = None;
                }
            }
            None => {
                let (entries, hasher) = (&self.entries, &self.hasher);
                self.index
                    .insert_unique(hash, entries.len(), |&i| hasher.hash_one(&entries[i].0));
                self.entries.push((key, net));
                // A soft truncate leaves the rows in the table.
                self.fresh.push(insert || (self.truncated && !self.soft));
                if self.soft {
                    self.marks.push(None);
                }
            }
        }
    }

    pub(crate) fn finish(self) -> Collapsed {
        Collapsed {
            truncated: self.truncated,
            truncate_mark: self.truncate_mark,
            marks: self.marks,
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
            moved: None,
        }
    }

    #[test]
    fn last_event_per_key_wins_in_first_seen_order() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false, None);
        c.upsert(b"b".to_vec(), r(1), 3, &[], false, None);
        c.upsert(b"a".to_vec(), r(2), 3, &[], false, None);
        c.delete(b"b".to_vec(), r(3), None, None);
        c.delete(b"b".to_vec(), r(4), None, None); // the tombstone after its delete
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
        c.delete(b"k".to_vec(), r(0), None, None);
        c.upsert(b"k".to_vec(), r(1), 3, &[], false, None);
        c.upsert(b"j".to_vec(), r(2), 3, &[], false, None);
        c.delete(b"j".to_vec(), r(3), None, None);
        let net = c.finish().entries;
        assert_eq!(net[0].1, full(1));
        assert_eq!(net[1].1, Net::Delete(r(3)));
    }

    #[test]
    fn untouched_columns_keep_the_earlier_value_or_stay_as_stored() {
        let mut c = Collapser::default();
        c.upsert(b"k".to_vec(), r(0), 3, &[], false, None);
        c.upsert(b"k".to_vec(), r(1), 3, &[2], false, None); // column 2 is the placeholder
        c.upsert(b"k".to_vec(), r(2), 3, &[1, 2], false, None);
        c.upsert(b"x".to_vec(), r(3), 3, &[0], false, None); // no earlier value in the run
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
    fn a_moved_key_takes_the_old_keys_value_in_the_run_or_its_stored_row() {
        let m = |lsn| Some((lsn, Some(7)));
        let mut c = Collapser::default();
        // `a` updated in the run (column 0), then moved to `b` leaving 0 and 1 untouched.
        c.upsert(b"a".to_vec(), r(0), 3, &[1], false, None);
        c.delete(b"a".to_vec(), r(1), m(10), None);
        assert!(c.upsert(b"b".to_vec(), r(2), 3, &[0, 1], true, m(10)));
        // `b` moved on to `c`, leaving everything but column 2 untouched.
        c.delete(b"b".to_vec(), r(3), m(11), None);
        assert!(c.upsert(b"c".to_vec(), r(4), 3, &[0, 1], true, m(11)));
        // A move whose delete is not in the run.
        assert!(!c.upsert(b"x".to_vec(), r(5), 3, &[1], true, m(12)));
        let net = c.finish().entries;
        let find = |k: &[u8]| &net.iter().find(|(key, _)| key == k).expect("key").1;
        let moved_c = find(b"c");
        assert_eq!(
            moved_c.source(0),
            Some(r(0)),
            "the old key's value in the run"
        );
        assert_eq!(moved_c.source(2), Some(r(4)));
        assert!(moved_c.copies_old(1) && !moved_c.copies_old(0) && !moved_c.copies_old(2));
        assert_eq!(
            moved_c.moved().map(|m| m.old_key.as_slice()),
            Some(&b"a"[..]),
            "stored values come from the first key of the chain"
        );
        assert_eq!(*find(b"b"), Net::Delete(r(3)));
        assert!(find(b"x").moved().is_none() && find(b"x").source(1).is_none());
    }

    #[test]
    fn keys_first_inserted_here_or_after_a_truncate_are_fresh() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], true, None); // c
        c.upsert(b"a".to_vec(), r(1), 3, &[], false, None); // then u: still new to the table
        c.upsert(b"b".to_vec(), r(2), 3, &[], false, None); // u of a stored row
        c.delete(b"d".to_vec(), r(3), None, None);
        c.upsert(b"d".to_vec(), r(4), 3, &[], true, None); // d then c: the row may be stored
        assert_eq!(c.finish().fresh, vec![true, false, false]);

        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false, None);
        c.truncate(None, r(99));
        c.upsert(b"a".to_vec(), r(1), 3, &[], false, None);
        c.delete(b"b".to_vec(), r(2), None, None);
        let done = c.finish();
        assert!(done.truncated);
        assert_eq!(done.fresh, vec![true, true]);
    }

    #[test]
    fn truncate_drops_what_came_before() {
        let mut c = Collapser::default();
        c.upsert(b"a".to_vec(), r(0), 3, &[], false, None);
        c.truncate(None, r(99));
        c.upsert(b"b".to_vec(), r(2), 3, &[], false, None);
        let Collapsed {
            truncated,
            entries: net,
            ..
        } = c.finish();
        assert!(truncated);
        assert_eq!(net, vec![(b"b".to_vec(), full(2))]);
    }

    #[test]
    fn a_soft_delete_keeps_the_row_marked_as_of_its_first_delete() {
        let mut c = Collapser::new(true);
        c.upsert(b"a".to_vec(), r(0), 3, &[], true, None);
        c.delete(b"a".to_vec(), r(1), None, Some(10));
        c.delete(b"a".to_vec(), r(2), None, Some(20)); // its tombstone
        c.delete(b"s".to_vec(), r(3), None, Some(30)); // a stored row
        c.delete(b"s".to_vec(), r(4), None, None);
        c.delete(b"v".to_vec(), r(5), None, Some(40));
        c.upsert(b"v".to_vec(), r(6), 3, &[], true, None); // revived
        let done = c.finish();
        assert_eq!(
            done.entries,
            vec![
                (b"a".to_vec(), full(0)),
                (b"s".to_vec(), Net::Delete(r(3))),
                (b"v".to_vec(), full(6)),
            ]
        );
        assert_eq!(
            done.marks,
            vec![Some(Mark(Some(10), r(1))), Some(Mark(Some(30), r(3))), None]
        );
        assert_eq!(done.fresh, vec![true, false, false]);
    }

    #[test]
    fn a_soft_truncate_marks_every_row_so_far_and_the_stored_ones() {
        let mut c = Collapser::new(true);
        c.upsert(b"a".to_vec(), r(0), 3, &[], true, None);
        c.upsert(b"b".to_vec(), r(1), 3, &[], true, None);
        c.delete(b"b".to_vec(), r(2), None, Some(5));
        c.truncate(Some(7), r(20));
        c.upsert(b"c".to_vec(), r(3), 3, &[], true, None);
        c.truncate(Some(9), r(21));
        c.upsert(b"d".to_vec(), r(4), 3, &[], false, None);
        let done = c.finish();
        assert!(done.truncated);
        assert_eq!(done.truncate_mark, Some(Mark(Some(7), r(20))));
        assert_eq!(done.entries.len(), 4);
        assert_eq!(
            done.marks,
            vec![
                Some(Mark(Some(7), r(20))),
                Some(Mark(Some(5), r(2))),
                Some(Mark(Some(9), r(21))),
                None
            ]
        );
        // The truncated rows are still in the table: nothing after it is fresh for that.
        assert_eq!(done.fresh, vec![true, true, true, false]);
    }

    #[test]
    fn a_softly_deleted_row_hands_no_value_to_its_next_write() {
        let mut c = Collapser::new(true);
        c.upsert(b"k".to_vec(), r(0), 2, &[], false, None);
        c.delete(b"k".to_vec(), r(1), None, Some(1));
        c.upsert(b"k".to_vec(), r(2), 2, &[1], false, None); // column 1 unchanged
        let net = c.finish().entries;
        assert_eq!(
            net[0].1.source(1),
            None,
            "left as stored, as after a hard delete"
        );
    }
}
