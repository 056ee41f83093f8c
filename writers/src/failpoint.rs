//! Named failpoints for crash tests: an armed point kills the process on the spot (SIGKILL),
//! so nothing is flushed or cleaned up, as in a real crash. `name@N` kills at the Nth hit.
//!
//! The names are constants shared by the code and the tests, so a renamed point cannot
//! silently stop being exercised. Points are compiled only under the `failpoints` feature,
//! which the test builds enable (a dev-dependency of the `lakesink` crate); a release build
//! carries none, and arming one there is an error.

/// The raw layer: a file's marker about to be written (wall-clock cuts).
pub const RAW_BEFORE_MARKER: &str = "raw.before-marker";
/// The raw layer: a file about to be uploaded.
pub const RAW_BEFORE_UPLOAD: &str = "raw.before-upload";
/// The raw layer: a multipart upload with some parts sent.
pub const RAW_MID_MULTIPART: &str = "raw.mid-multipart";
/// The raw layer: a file uploaded, its receipt not yet handed back.
pub const RAW_AFTER_UPLOAD: &str = "raw.after-upload";
/// The replica: rows copied into the staging table, the transaction open.
pub const REPLICA_AFTER_COPY: &str = "replica.after-copy";
/// The replica: everything applied, the commit not yet sent.
pub const REPLICA_BEFORE_COMMIT: &str = "replica.before-commit";
/// The replica: the transaction committed, the offsets not yet stored in Kafka.
pub const REPLICA_AFTER_COMMIT: &str = "replica.after-commit";
/// The lake: a data file about to be uploaded.
pub const LAKE_BEFORE_UPLOAD: &str = "lake.before-upload";
/// The lake: a table's files uploaded, the snapshot not yet committed.
pub const LAKE_BEFORE_COMMIT: &str = "lake.before-commit";
/// The lake: the snapshot committed, its receipt not yet handed back.
pub const LAKE_AFTER_COMMIT: &str = "lake.after-commit";
/// Kafka: offsets stored, the commit not yet sent.
pub const KAFKA_AFTER_STORE: &str = "kafka.after-store";

/// Every point, for tests that want them all.
pub const ALL: &[&str] = &[
    RAW_BEFORE_MARKER,
    RAW_BEFORE_UPLOAD,
    RAW_MID_MULTIPART,
    RAW_AFTER_UPLOAD,
    REPLICA_AFTER_COPY,
    REPLICA_BEFORE_COMMIT,
    REPLICA_AFTER_COMMIT,
    LAKE_BEFORE_UPLOAD,
    LAKE_BEFORE_COMMIT,
    LAKE_AFTER_COMMIT,
    KAFKA_AFTER_STORE,
];

/// `LAKESINK_FAILPOINTS` names points this build cannot kill at: a crash test would pass
/// without crashing, so it is an error.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    #[error(
        "LAKESINK_FAILPOINTS is set ({0}) but this build has no failpoints: build with the \
         `failpoints` feature (the test builds do), or unset it"
    )]
    NotCompiled(String),
    #[error("LAKESINK_FAILPOINTS: {0}")]
    Bad(String),
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Armed points: the hit that kills, and the hits so far.
    static ARMED: OnceLock<HashMap<String, (u64, AtomicU64)>> = OnceLock::new();

    pub(super) fn arm(names: Vec<String>) -> Result<(), String> {
        let mut armed = HashMap::new();
        for n in names {
            let (name, at) = match n.rsplit_once('@') {
                Some((name, at)) => match at.parse::<u64>() {
                    Ok(at) if at > 0 => (name.to_owned(), at),
                    _ => return Err(format!("{n}: the hit after `@` is a number from 1")),
                },
                None => (n, 1),
            };
            if !super::ALL.contains(&name.as_str()) {
                return Err(format!(
                    "{name}: no such failpoint ({})",
                    super::ALL.join(", ")
                ));
            }
            armed.insert(name, (at, AtomicU64::new(0)));
        }
        let _ = ARMED.set(armed);
        Ok(())
    }

    pub(super) fn hit(name: &str) {
        let Some((at, hits)) = ARMED.get().and_then(|armed| armed.get(name)) else {
            return;
        };
        if hits.fetch_add(1, Ordering::SeqCst) + 1 == *at {
            eprintln!("failpoint {name}: killing the process");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            std::process::abort();
        }
    }
}

/// Arms the named points for the life of the process; only the first call counts.
pub fn arm(names: Vec<String>) -> Result<(), ArmError> {
    #[cfg(feature = "failpoints")]
    return armed::arm(names).map_err(ArmError::Bad);
    #[cfg(not(feature = "failpoints"))]
    if names.is_empty() {
        Ok(())
    } else {
        Err(ArmError::NotCompiled(names.join(",")))
    }
}

/// Kills the process if `name` is armed (and this is the hit it is armed for).
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    armed::hit(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
