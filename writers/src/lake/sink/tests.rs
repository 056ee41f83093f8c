use super::*;

fn config(extra: serde_json::Value) -> LakeConfig {
    let mut v = serde_json::json!({
        "catalog-uri": "postgres://u@127.0.0.1/db",
        "warehouse": "s3://lake/wh",
        "commit-interval-ms": 10_000,
        "commit-bytes": 16 << 20,
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    serde_json::from_value(v).expect("config")
}

const MIB: usize = 1 << 20;

#[test]
fn a_table_commits_on_size_age_or_when_a_backlog_has_caught_up() {
    let c = config(serde_json::json!({}));
    // Size and age, whatever else holds.
    assert!(commit_due(&c, 16 * MIB, Some(100), 100, 100));
    assert!(commit_due(&c, 1, Some(0), 10_000, 10_000));
    assert!(!commit_due(&c, 1, Some(1), 10_000, 10_000));
    // Idle for the default second with a file's worth (1/16 of commit-bytes): now.
    assert!(commit_due(&c, MIB, Some(0), 4_000, 5_000));
    assert!(!commit_due(&c, MIB, Some(0), 4_001, 5_000));
    // Idle with a trickle's worth: waits for the interval.
    assert!(!commit_due(&c, MIB - 1, Some(0), 0, 9_999));
    // Idle commits turned off.
    let off = config(serde_json::json!({"commit-idle-ms": 0}));
    assert!(!commit_due(&off, 8 * MIB, Some(0), 0, 9_999));
    assert!(commit_due(&off, 8 * MIB, Some(0), 0, 10_000));
}

#[test]
fn key_bounds_widen_over_files_and_are_unknown_where_one_has_none() {
    let mut m = FileBounds::default();
    let (l, u) = lower_upper(3, 9);
    m.add(&[1], &l, &u);
    let (l, u) = lower_upper(1, 4);
    m.add(&[1], &l, &u);
    assert_eq!(m.files, 2);
    assert_eq!(m.bounds[&1], Some((Datum::long(1), Datum::long(9))));
    // Another manifest's files, merged in.
    let mut other = FileBounds::default();
    let (l, u) = lower_upper(20, 30);
    other.add(&[1], &l, &u);
    m.merge(&[1], &other);
    assert_eq!(
        (m.files, m.bounds[&1].clone()),
        (3, Some((Datum::long(1), Datum::long(30))))
    );
    // A file without bounds of the column: unknown from then on.
    m.add(&[1], &HashMap::new(), &HashMap::new());
    assert_eq!(m.bounds[&1], None);
    let (l, u) = lower_upper(0, 1);
    m.add(&[1], &l, &u);
    assert_eq!(m.bounds[&1], None);
    // Bounds of another type (before the column was widened) do not compare.
    let mut mixed = FileBounds::default();
    mixed.add(
        &[1],
        &HashMap::from([(1, Datum::int(1))]),
        &HashMap::from([(1, Datum::int(2))]),
    );
    let (l, u) = lower_upper(5, 6);
    mixed.add(&[1], &l, &u);
    assert_eq!(mixed.bounds[&1], None);
    // An empty manifest changes nothing.
    let before = mixed.files;
    mixed.merge(&[1], &FileBounds::default());
    assert_eq!(mixed.files, before);
}

fn lower_upper(lo: i64, hi: i64) -> (HashMap<i32, Datum>, HashMap<i32, Datum>) {
    (
        HashMap::from([(1, Datum::long(lo))]),
        HashMap::from([(1, Datum::long(hi))]),
    )
}
