//! The collapse against a model: applying the changes one by one to a table must give what
//! Iceberg gives for the collapsed delta (a truncate removes every row; equality deletes remove
//! older rows of their keys; the new rows are added), from any table the commit starts on.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;

use super::*;

fn change() -> impl Strategy<Value = Change<u8, u32>> {
    prop_oneof![
        6 => (0u8..6, any::<u32>()).prop_map(|(k, v)| Change::Upsert(k, v)),
        3 => (0u8..6).prop_map(Change::Delete),
        1 => Just(Change::Truncate),
    ]
}

/// The table after `changes` applied one by one, as the source applied them.
fn one_by_one(start: &BTreeMap<u8, u32>, changes: &[Change<u8, u32>]) -> BTreeMap<u8, u32> {
    let mut t = start.clone();
    for c in changes {
        match *c {
            Change::Upsert(k, v) => {
                t.insert(k, v);
            }
            Change::Delete(k) => {
                t.remove(&k);
            }
            Change::Truncate => t.clear(),
        }
    }
    t
}

/// The table after the collapsed delta, as an Iceberg reader sees it.
fn as_iceberg(start: &BTreeMap<u8, u32>, d: &Collapsed<u8, u32>) -> BTreeMap<u8, u32> {
    let mut t = if d.truncate {
        BTreeMap::new()
    } else {
        start.clone()
    };
    for k in &d.deletes {
        t.remove(k);
    }
    for (k, v) in &d.rows {
        assert!(t.insert(*k, *v).is_none(), "a new row's key is live: {k}");
    }
    t
}

proptest! {
    #[test]
    fn the_collapsed_delta_leaves_the_table_the_source_has(
        start in prop::collection::btree_map(0u8..6, any::<u32>(), 0..6),
        changes in prop::collection::vec(change(), 0..40),
    ) {
        let d = collapse(changes.iter().copied());
        let keys: HashSet<u8> = d.rows.iter().map(|r| r.0).collect();
        prop_assert_eq!(keys.len(), d.rows.len(), "a key added twice");
        let deleted: HashSet<u8> = d.deletes.iter().copied().collect();
        prop_assert_eq!(deleted.len(), d.deletes.len(), "a key deleted twice");
        prop_assert_eq!(as_iceberg(&start, &d), one_by_one(&start, &changes));
    }
}

#[test]
fn the_last_change_of_a_key_wins_and_a_truncate_forgets_what_came_before() {
    use Change::{Delete, Truncate, Upsert};
    let d = collapse([Upsert(1, 'a'), Upsert(2, 'b'), Upsert(1, 'c'), Delete(2)]);
    assert_eq!(
        d,
        Collapsed {
            truncate: false,
            deletes: vec![1, 2],
            rows: vec![(1, 'c')],
        }
    );
    let d = collapse([Upsert(1, 'a'), Delete(3), Truncate, Upsert(2, 'b')]);
    assert_eq!(
        d,
        Collapsed {
            truncate: true,
            deletes: vec![2],
            rows: vec![(2, 'b')],
        }
    );
    assert_eq!(collapse::<u8, char>([]), Collapsed::default());
}
