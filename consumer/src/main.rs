//! The `lakesink` binary.

mod kafka;
mod kafka_auth;
mod pipeline;
mod replica;
mod sinks;
mod tail;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lakesink_config::{Config, PayloadIds, RecordFormat, RegistryApi, RegistryConfig};
use lakesink_schema_registry::{
    Api, Auth, CachedResolver, FixedResolver, Format, HttpRegistry, HttpRegistryConfig, IdKind,
};
use lakesink_writers::parquet::ParquetWriter;

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
    /// Consume the configured topics into the configured sinks (raw layer, replica).
    Run {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Consume the configured topics, decode each record and print one JSON line per row.
    Tail {
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
    let (config, tail) = match Cli::parse().command {
        Command::Run { config } => (config, false),
        Command::Tail { config } => (config, true),
    };
    {
        {
            let config =
                Config::load(&config).with_context(|| format!("loading {}", config.display()))?;
            lakesink_writers::failpoint::arm(lakesink_config::failpoints_from_env());
            let sinks = if tail {
                None
            } else {
                let raw = config.raw.as_ref().map(ParquetWriter::new).transpose()?;
                let replica = match &config.replica {
                    Some(r) => {
                        Some(replica::ReplicaSink::connect(r, &config.kafka.group_id).await?)
                    }
                    None => None,
                };
                if raw.is_none() && replica.is_none() {
                    anyhow::bail!(
                        "no sink is configured: add a [raw] or [replica] section (or use `lakesink tail` to print rows)"
                    );
                }
                Some(sinks::Sinks { raw, replica })
            };
            let format = match config.kafka.format {
                RecordFormat::ConnectJson => Format::ConnectJson,
                RecordFormat::Json => Format::PlainJson {
                    value_schema: match &config.kafka.json_value_schema {
                        None => None,
                        Some(path) => {
                            let text = std::fs::read(path).with_context(|| {
                                format!("reading kafka.json-value-schema {}", path.display())
                            })?;
                            Some(std::sync::Arc::new(
                                serde_json::from_slice(&text).with_context(|| {
                                    format!(
                                        "kafka.json-value-schema {} is not JSON",
                                        path.display()
                                    )
                                })?,
                            ))
                        }
                    },
                },
                RecordFormat::Avro => Format::Avro {
                    payload_ids: match config.registry.payload_ids {
                        PayloadIds::ContentId => IdKind::ContentId,
                        PayloadIds::GlobalId => IdKind::GlobalId,
                    },
                },
            };
            match (format, sinks) {
                (format @ Format::Avro { .. }, sinks) => {
                    let registry =
                        CachedResolver::new(HttpRegistry::new(registry_config(&config.registry)?)?);
                    match sinks {
                        Some(sinks) => pipeline::run(&config.kafka, registry, format, sinks).await,
                        None => tail::run(&config.kafka, registry, format).await,
                    }
                }
                // JSON records carry or infer their schemas: no registry is asked.
                (format, Some(sinks)) => {
                    pipeline::run(&config.kafka, FixedResolver::new(), format, sinks).await
                }
                (format, None) => tail::run(&config.kafka, FixedResolver::new(), format).await,
            }
        }
    }
}

fn registry_config(r: &RegistryConfig) -> anyhow::Result<HttpRegistryConfig> {
    let url = r.url.clone().context(
        "config field `registry.url` is required for Avro topics: the schema registry their schemas are in",
    )?;
    let mut c = HttpRegistryConfig::new(url);
    c.api = r.api.map(|api| match api {
        RegistryApi::ApicurioV3 => Api::ApicurioV3,
        RegistryApi::ApicurioV2 => Api::ApicurioV2,
        RegistryApi::Ccompat => Api::Ccompat,
    });
    c.timeout = Duration::from_millis(r.timeout_ms);
    c.auth = match (&r.username, &r.oauth) {
        (Some(username), _) => Auth::Basic {
            username: username.clone(),
            password: r
                .password
                .as_ref()
                .map(|p| p.expose().to_owned())
                .unwrap_or_default(),
        },
        (None, Some(o)) => Auth::ClientCredentials {
            token_url: o.token_url.clone(),
            client_id: o.client_id.clone(),
            client_secret: o.client_secret.expose().to_owned(),
            scope: o.scope.clone(),
        },
        (None, None) => Auth::None,
    };
    if let Some(path) = &r.ca_file {
        c.ca_pem = Some(
            std::fs::read(path)
                .with_context(|| format!("reading registry.ca-file {}", path.display()))?,
        );
    }
    Ok(c)
}
