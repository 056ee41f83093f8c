//! The `lakesink` binary.

mod aws_secrets;
mod check;
mod columns;
mod dead_letter;
mod headers;
mod import;
mod kafka;
mod kafka_auth;
mod lake_maintain;
mod loading;
mod offsets;
mod pipeline;
mod progress;
mod registry;
mod replay;
mod sinks;
mod tail;
mod telemetry;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lakesink_config::{Config, LogFormat, PayloadIds, RecordFormat};
use lakesink_model::{Backoff, Classify, Failure, retrying};
use lakesink_schema_registry::{CachedResolver, FixedResolver, Format, HttpRegistry, IdKind};
use lakesink_writers::lake::{LAKE, LakeSink};
use lakesink_writers::parquet::{ParquetWriter, RawSink};
use lakesink_writers::postgres::{Rejects, ReplicaSink};
use lakesink_writers::sink::{Meter, Sink};

use dead_letter::DeadLetters;
use loading::{describe, load};
use telemetry::alerts::Alerter;
use telemetry::status::{RAW, REPLICA};
use telemetry::{Component, Telemetry};

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
    /// Print the configured topics' records as one JSON line per row, from the end of each
    /// partition by default. Outside the consumer group: commits nothing.
    Tail(tail::TailArgs),
    /// Rebuild the replica, or a slice of it, from the raw layer (docs/replay.md).
    Replay(replay::ReplayArgs),
    /// Convert Kafka Connect sink configs (Confluent S3 sink, Confluent or Debezium JDBC sink,
    /// Apache Iceberg sink) into one lakesink config; what cannot be carried over is listed
    /// with the reason.
    ImportConnect {
        /// Connector configs: Connect REST JSON (`{"name", "config"}`), a bare config object,
        /// or a .properties file.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the config to this file (the report as comments at its top), not stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// `kafka.brokers` (connector configs do not hold them).
        #[arg(long)]
        brokers: Option<String>,
    },
    /// Lake table upkeep.
    #[command(subcommand)]
    Lake(LakeCommand),
    /// Check a config against the live systems: brokers and topics, registry, object store,
    /// database. One line per check; exits non-zero when one fails.
    Check {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
        /// The Debezium source connector's config (Connect REST JSON, a bare config object or
        /// .properties), checked against the config: `skipped.operations` and truncates.
        #[arg(long = "source-connector")]
        source_connectors: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum LakeCommand {
    /// Expire old snapshots and delete orphan files of the lake tables; safe while lakesink
    /// commits to them.
    Maintain(lake_maintain::MaintainArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    match start().await {
        Ok(code) => code,
        Err(e) => {
            // One line, each cause once, no backtrace: the error names what to do.
            let text = describe(&e);
            if tracing::dispatcher::has_been_set() {
                tracing::error!("stopped: {text}");
            } else {
                eprintln!("error: {text}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn start() -> anyhow::Result<ExitCode> {
    let (path, tail) = match Cli::parse().command {
        Command::Run { config } => (config, None),
        Command::Tail(args) => (args.config.clone(), Some(args)),
        Command::Replay(args) => {
            init_logs(LogFormat::Human);
            return replay::run(args).await.map(|()| ExitCode::SUCCESS);
        }
        Command::ImportConnect {
            files,
            output,
            brokers,
        } => return import::run(&files, output.as_deref(), brokers).map(|()| ExitCode::SUCCESS),
        Command::Lake(LakeCommand::Maintain(args)) => {
            init_logs(LogFormat::Human);
            return lake_maintain::run(args).await.map(|()| ExitCode::SUCCESS);
        }
        Command::Check {
            config,
            source_connectors,
        } => {
            init_logs(LogFormat::Human);
            return Ok(if check::run(&config, &source_connectors).await {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
    };
    let config = load(&path).await;
    init_logs(
        config
            .as_ref()
            .map_or(LogFormat::Human, |c| c.service.log_format),
    );
    let config = config?;
    lakesink_writers::failpoint::arm(lakesink_config::failpoints_from_env())?;
    if let Some(args) = tail {
        let format = record_format(&config)?;
        match format {
            format @ Format::Avro { .. } => {
                let registry =
                    CachedResolver::new(HttpRegistry::new(registry::config(&config.registry)?)?);
                tail::run(&config.kafka, &args, registry, format).await?;
            }
            // JSON records carry or infer their schemas: no registry is asked.
            format => tail::run(&config.kafka, &args, FixedResolver::new(), format).await?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut names = Vec::new();
    if config.raw.is_some() {
        names.push(RAW);
    }
    if config.replica.is_some() {
        names.push(REPLICA);
    }
    if config.lake.is_some() {
        names.push(LAKE);
    }
    if names.is_empty() {
        anyhow::bail!(
            "no sink is configured: add a [raw], [replica] or [lake] section (or use `lakesink tail` to print rows)"
        );
    }
    let alerter = match &config.alerts {
        Some(a) => Some(Alerter::start(a, &config.kafka.group_id)?),
        None => None,
    };
    let setup = telemetry::Setup {
        sinks: &names,
        group: &config.kafka.group_id,
        brokers: &config.kafka.brokers,
        kafka_grace: Duration::from_millis(config.service.kafka_grace_ms),
    };
    let telemetry = Arc::new(Telemetry::new(&setup, alerter));
    telemetry.start_clock();
    let server = match config.service.http_listen {
        Some(addr) => Some(telemetry::http::serve(addr, telemetry.clone()).await?),
        None => None,
    };
    let result = run(&config, telemetry.clone()).await;
    if let Err(e) = &result {
        let (sink, component) = blame(e);
        telemetry.status.failed(sink, component, &format!("{e:#}"));
        if let Some(a) = &telemetry.alerter {
            a.flush(Duration::from_secs(10)).await;
        }
    }
    // Served until the sinks have finished, so probes see the shutdown through.
    if let Some(server) = server {
        server.shutdown().await;
    }
    result.map(|()| ExitCode::SUCCESS)
}

async fn run(config: &Config, telemetry: Arc<Telemetry>) -> anyhow::Result<()> {
    // Subscribed first: librdkafka joins the group in the background while the sinks connect.
    let subscribed = kafka::subscribe(&config.kafka, Some(telemetry.clone()))?;
    let dead = DeadLetters::new(&config.kafka, &config.errors)?.map(Arc::new);
    // In this order: the raw layer first, as a backup comes before the copy.
    let mut enabled: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(raw) = &config.raw {
        let writer = ParquetWriter::new(raw).map_err(|e| Failure::in_sink(RAW, e))?;
        enabled.push(Box::new(RawSink::new(writer, telemetry.clone())));
    }
    if let Some(r) = &config.replica {
        let rejects = dead
            .clone()
            .map(|d| Arc::new(dead_letter::ReplicaRejects(d)) as Arc<dyn Rejects>);
        // An unreachable replica at start is waited for like any outage (a database
        // restarting with lakesink, a busy server); a refusal stops the run.
        let meter: Arc<dyn Meter> = telemetry.clone();
        let replica = retrying(
            Backoff::DEFAULT,
            &*telemetry,
            Some(REPLICA),
            "connecting to the replica",
            || ReplicaSink::connect(r, &config.kafka.group_id, meter.clone(), rejects.clone()),
        )
        .await
        .map_err(|e| Failure::in_sink(REPLICA, e))?;
        enabled.push(Box::new(replica));
    }
    if let Some(l) = &config.lake {
        let meter: Arc<dyn Meter> = telemetry.clone();
        let lake = retrying(
            Backoff::DEFAULT,
            &*telemetry,
            Some(LAKE),
            "connecting to the lake catalog",
            || LakeSink::connect(l, &config.kafka.group_id, meter.clone()),
        )
        .await?;
        enabled.push(Box::new(lake));
    }
    let sinks = (enabled, telemetry);
    let shutdown = Duration::from_millis(config.service.shutdown_timeout_ms);
    let columns = columns::Columns::new(&config.columns, &config.kafka.topics)?;
    match record_format(config)? {
        format @ Format::Avro { .. } => {
            let registry =
                HttpRegistry::new(registry::config(&config.registry)?).map_err(Failure::new)?;
            let registry = CachedResolver::new(registry);
            pipeline::run(
                &config.kafka,
                subscribed,
                registry,
                format,
                sinks,
                shutdown,
                (dead, columns),
            )
            .await
        }
        format => {
            let resolver = FixedResolver::new();
            pipeline::run(
                &config.kafka,
                subscribed,
                resolver,
                format,
                sinks,
                shutdown,
                (dead, columns),
            )
            .await
        }
    }
}

/// Which sink and component an error that stopped the run came from, for `/status` and alerts:
/// the first classified failure in the chain. An error nothing classified is lakesink's own
/// (the data, or its own state).
fn blame(e: &anyhow::Error) -> (Option<&'static str>, Component) {
    match Failure::find(e.chain()) {
        Some(f) => (f.sink(), Component::of(f.fault())),
        None => (None, Component::Data),
    }
}

fn init_logs(format: LogFormat) {
    // sqlx logs the server's notices (`relation … already exists, skipping`) at INFO.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx::postgres::notice=warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        // Above the replay's progress bar, when one is drawn.
        .with_writer(progress::LogWriter);
    match format {
        LogFormat::Human => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

fn record_format(config: &Config) -> anyhow::Result<Format> {
    Ok(match config.kafka.format {
        RecordFormat::ConnectJson => Format::ConnectJson,
        RecordFormat::Json => Format::PlainJson {
            value_schema: match &config.kafka.json_value_schema {
                None => None,
                Some(path) => {
                    let text = std::fs::read(path).with_context(|| {
                        format!("reading kafka.json-value-schema {}", path.display())
                    })?;
                    Some(Arc::new(serde_json::from_slice(&text).with_context(
                        || format!("kafka.json-value-schema {} is not JSON", path.display()),
                    )?))
                }
            },
        },
        RecordFormat::Avro => Format::Avro {
            payload_ids: match config.registry.payload_ids {
                PayloadIds::ContentId => IdKind::ContentId,
                PayloadIds::GlobalId => IdKind::GlobalId,
            },
            check_artifacts: config.registry.check_artifacts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::describe;

    /// An error whose text includes its source's, as many crates' errors do.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connecting to the replica: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_says_each_cause_once() {
        let e = anyhow::Error::new(Repeats(std::io::Error::other("connection refused")))
            .context("starting");
        assert_eq!(
            describe(&e),
            "starting: connecting to the replica: connection refused"
        );
        let e = anyhow::Error::new(std::io::Error::other("denied")).context("reading /etc/x");
        assert_eq!(describe(&e), "reading /etc/x: denied");
    }
}
