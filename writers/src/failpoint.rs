//! Named failpoints for crash tests: an armed point kills the process on the spot (SIGKILL),
//! so nothing is flushed or cleaned up, as in a real crash.

use std::collections::HashSet;
use std::sync::OnceLock;

static ARMED: OnceLock<HashSet<String>> = OnceLock::new();

/// Arms the named points for the life of the process; only the first call counts.
pub fn arm(names: impl IntoIterator<Item = String>) {
    let _ = ARMED.set(names.into_iter().collect());
}

/// Kills the process if `name` is armed.
pub fn hit(name: &str) {
    if ARMED.get().is_some_and(|armed| armed.contains(name)) {
        eprintln!("failpoint {name}: killing the process");
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        std::process::abort();
    }
}
