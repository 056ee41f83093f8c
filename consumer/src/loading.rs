//! Loading the config as every command does, and saying an error the way every command
//! does: one line, each cause once.

use anyhow::Context;
use lakesink_config::Config;
use lakesink_model::Failure;

use crate::aws_secrets;

/// The config at `path`, its AWS Secrets Manager references fetched; its error names the
/// file once (a parse error names it already).
pub(crate) async fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let mut config = Config::load(path).map_err(|e| match e {
        lakesink_config::ConfigError::Parse { .. } | lakesink_config::ConfigError::Read { .. } => {
            anyhow::Error::new(Failure::new(e))
        }
        e => anyhow::Error::new(Failure::new(e)).context(format!("loading {}", path.display())),
    })?;
    // Boxed: the AWS configuration loader's future is large, and rarely needed.
    Box::pin(aws_secrets::resolve(&mut config))
        .await
        .with_context(|| format!("loading {}", path.display()))?;
    Ok(config)
}

/// An error and its causes on one line, each said once: a cause whose text the layer above
/// already includes is left out.
pub(crate) fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || last.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}
