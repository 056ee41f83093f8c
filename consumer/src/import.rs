//! `lakesink import-connect`: Kafka Connect sink configs in, a lakesink config out (stdout,
//! or a file with the report as comments at its top); the report goes to stderr.

use std::path::{Path, PathBuf};

use anyhow::Context;
use lakesink_config::connect_import::{Input, Options, import};

pub(crate) fn run(
    files: &[PathBuf],
    output: Option<&Path>,
    brokers: Option<String>,
) -> anyhow::Result<()> {
    let inputs = files
        .iter()
        .map(|f| Input::read(f))
        .collect::<Result<Vec<_>, _>>()?;
    let imported = import(&inputs, &Options { brokers })?;
    eprint!("{}", imported.report());
    match output {
        None => print!("{}", imported.toml),
        Some(path) => {
            std::fs::write(path, imported.with_report_comments())
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
