//! The `lakesink` binary.

mod tail;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lakesink_config::{Config, PayloadIds};
use lakesink_schema_registry::{HttpRegistry, HttpRegistryConfig, IdKind};

#[derive(Parser)]
#[command(
    version,
    about = "Debezium topics to Parquet on S3 and a PostgreSQL replica"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Consume the configured topics, decode each record and print one JSON line per row
    /// (the Parquet and PostgreSQL sinks come later).
    Run {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run { config } => {
            let config =
                Config::load(&config).with_context(|| format!("loading {}", config.display()))?;
            let payload_ids = match config.registry.payload_ids {
                PayloadIds::ContentId => IdKind::ContentId,
                PayloadIds::GlobalId => IdKind::GlobalId,
            };
            let url = config.registry.url.clone().context(
                "config field `registry.url` is required: the schema registry the topics' schemas are in",
            )?;
            let registry = HttpRegistry::new(HttpRegistryConfig::new(url))?;
            tail::run(&config.kafka, registry, payload_ids).await
        }
    }
}
