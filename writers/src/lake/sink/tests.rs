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
