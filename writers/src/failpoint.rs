//! Named failpoints for crash tests: an armed point kills the process on the spot (SIGKILL),
//! so nothing is flushed or cleaned up, as in a real crash. `name@N` kills at the Nth hit.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Armed points: the hit that kills, and the hits so far.
static ARMED: OnceLock<HashMap<String, (u64, AtomicU64)>> = OnceLock::new();

/// Arms the named points for the life of the process; only the first call counts.
pub fn arm(names: impl IntoIterator<Item = String>) {
    let armed = names
        .into_iter()
        .map(|n| match n.rsplit_once('@') {
            Some((name, at)) if at.parse::<u64>().is_ok_and(|a| a > 0) => (
                name.to_owned(),
                (at.parse().unwrap_or(1), AtomicU64::new(0)),
            ),
            _ => (n, (1, AtomicU64::new(0))),
        })
        .collect();
    let _ = ARMED.set(armed);
}

/// Kills the process if `name` is armed (and this is the hit it is armed for).
pub fn hit(name: &str) {
    let Some((at, hits)) = ARMED.get().and_then(|armed| armed.get(name)) else {
        return;
    };
    if hits.fetch_add(1, Ordering::SeqCst) + 1 == *at {
        eprintln!("failpoint {name}: killing the process");
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        std::process::abort();
    }
}
