//! `lakesink replay`: rebuild the replica, or a slice of it, from the raw layer, through the
//! live path's replicator and offsets table (see `docs/replay.md`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use lakesink_config::Config;
use lakesink_writers::PgReplicator;
use lakesink_writers::postgres::{stored_offsets, topic_table};
use lakesink_writers::replay::{
    self, OffsetRange, Options, Plan, RawLayer, Selection, Stats, Summary, TopicFilter,
};
use lakesink_writers::sink::TopicPartition;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::progress::{Progress, Totals};

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The TOML config file: [raw] is read, [replica] is written.
    #[arg(short, long)]
    config: PathBuf,
    /// Topics to replay, comma separated (default: the config's kafka.topics or topics-regex).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["topics_regex", "all_topics"])]
    topics: Vec<String>,
    /// A regex over topic names, matched from the start as kafka.topics-regex is.
    #[arg(long, conflicts_with = "all_topics")]
    topics_regex: Option<String>,
    /// Every topic in the raw layer.
    #[arg(long)]
    all_topics: bool,
    /// Per partition, start at the first record at or after this time (RFC 3339 or epoch ms,
    /// on the Kafka record timestamp).
    #[arg(long)]
    from: Option<String>,
    /// Per partition, stop before the first record at or after this time.
    #[arg(long)]
    to: Option<String>,
    /// Only these partitions, within these offsets (inclusive; either end may be empty).
    /// Repeatable.
    #[arg(long = "offsets", value_name = "TOPIC:PARTITION[:FROM-TO]")]
    offsets: Vec<OffsetRange>,
    /// List what would be replayed, from where and into where; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Go on past missing or corrupt files, offset gaps and refused rows, reporting them,
    /// instead of stopping at the first.
    #[arg(long)]
    continue_on_error: bool,
    /// Partitions replayed at once (default: replica.pool-size).
    #[arg(long)]
    parallelism: Option<usize>,
    /// Rows per transaction (default: replica.batch-max-rows).
    #[arg(long)]
    batch_rows: Option<usize>,
    /// The offsets group (default: kafka.group-id, so the live service takes over).
    #[arg(long)]
    group: Option<String>,
    /// Seconds between progress lines when stderr is not a terminal.
    #[arg(long, default_value_t = 10)]
    progress_seconds: u64,
}

/// Epoch ms from RFC 3339 or a number of ms.
fn parse_time(what: &str, s: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .with_context(|| {
            format!("--{what} {s:?}: expected RFC 3339 (2024-05-01T13:00:00Z) or epoch ms")
        })
}

/// A URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..s + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

pub(crate) async fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let config = crate::loading::load(&args.config).await?;
    lakesink_writers::failpoint::arm(lakesink_config::failpoints_from_env())?;
    let raw_config = config
        .raw
        .as_ref()
        .context("replay reads the raw layer: the config has no [raw] section")?;
    if config.replica.is_none() && !args.dry_run {
        bail!("replay writes the replica: the config has no [replica] section");
    }
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| config.kafka.group_id.clone());
    let topics = if args.all_topics {
        TopicFilter::All
    } else if let Some(re) = &args.topics_regex {
        TopicFilter::regex(re).map_err(anyhow::Error::msg)?
    } else if !args.topics.is_empty() {
        TopicFilter::List(args.topics.clone())
    } else if let Some(re) = &config.kafka.topics_regex {
        TopicFilter::regex(re).map_err(anyhow::Error::msg)?
    } else {
        TopicFilter::List(config.kafka.topics.clone())
    };
    let selection = Selection {
        topics,
        from_ms: args
            .from
            .as_deref()
            .map(|s| parse_time("from", s))
            .transpose()?,
        to_ms: args
            .to
            .as_deref()
            .map(|s| parse_time("to", s))
            .transpose()?,
        offsets: args.offsets.clone(),
    };
    let raw = Arc::new(RawLayer::open(raw_config)?);

    // The replica: connected (its offsets table created) for a run, only read for a dry run;
    // one connection per partition replayed at once.
    let parallelism = args
        .parallelism
        .or(config.replica.as_ref().map(|r| r.pool_size as usize))
        .unwrap_or(1)
        .max(1);
    let replicator = match (&config.replica, args.dry_run) {
        (Some(r), false) => {
            let mut r = r.clone();
            r.pool_size = r
                .pool_size
                .max(u32::try_from(parallelism).unwrap_or(u32::MAX));
            Some(Arc::new(PgReplicator::connect(&r).await?))
        }
        _ => None,
    };
    let stored: HashMap<TopicPartition, i64> = match &config.replica {
        Some(r) => match stored_offsets(r, &group).await {
            Ok(found) => found.unwrap_or_default(),
            Err(e) if args.dry_run => {
                warn!(error = %e, "cannot read the replica's offsets; listing as if it were empty");
                HashMap::new()
            }
            Err(e) => return Err(e.into()),
        },
        None => HashMap::new(),
    };

    let plan = replay::plan(&raw, &selection, &stored).await?;
    for note in &plan.notes {
        info!("{note}");
    }
    if args.dry_run {
        print!("{}", describe(&plan, &raw, &config, &group, &selection));
        return Ok(());
    }
    let (Some(replicator), Some(replica)) = (replicator, &config.replica) else {
        bail!("replay writes the replica: the config has no [replica] section");
    };
    info!(
        from = raw.url(),
        into = redact(&replica.url),
        group,
        partitions = plan.partitions.len(),
        segments = plan.segments(),
        files = plan.files(),
        rows = plan.rows(),
        "replaying"
    );
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
            warn!("stopping at the next transaction boundary; run again to resume");
            stop.store(true, Ordering::Relaxed);
        });
    }
    let stats = Arc::new(Stats::default());
    let progress = Progress::start(
        stats.clone(),
        Totals {
            files: plan.files() as u64,
            rows: plan.rows(),
        },
        Duration::from_secs(args.progress_seconds.max(1)),
    );
    let opts = Options {
        group: group.clone(),
        parallelism,
        tx_rows: args.batch_rows.unwrap_or(replica.batch_max_rows).max(1),
        tx_bytes: replica.batch_max_bytes,
        continue_on_error: args.continue_on_error,
        stop: stop.clone(),
        stats,
    };
    let summary = replay::run(raw.clone(), plan, replicator, opts).await;
    progress.finish();
    print!("{}", report(&summary, &group));
    if stop.load(Ordering::Relaxed) {
        bail!("replay interrupted; run it again to resume where it stopped");
    }
    if !summary.problems.is_empty() {
        if args.continue_on_error && !summary.stopped {
            bail!(
                "replay finished with {} problem(s), listed above",
                summary.problems.len()
            );
        }
        bail!(
            "replay stopped at bad input ({} problem(s), listed above); fix it or pass --continue-on-error, then run again to resume",
            summary.problems.len()
        );
    }
    if summary.stopped {
        bail!("replay stopped before the end");
    }
    Ok(())
}

/// The dry run's listing.
fn describe(
    plan: &Plan,
    raw: &RawLayer,
    config: &Config,
    group: &str,
    selection: &Selection,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "replay plan (dry run: nothing is changed)");
    let _ = writeln!(o, "  from   {} (raw layer)", raw.url());
    match &config.replica {
        Some(r) => {
            let _ = writeln!(
                o,
                "  into   {} (offsets {}.{}, group {group})",
                redact(&r.url),
                r.offsets_schema,
                r.offsets_table
            );
        }
        None => {
            let _ = writeln!(o, "  into   (no [replica] section)");
        }
    }
    let time = |t: Option<i64>| {
        t.and_then(chrono::DateTime::from_timestamp_millis)
            .map_or("-".to_owned(), |t| t.to_rfc3339())
    };
    let topics = match &selection.topics {
        TopicFilter::All => "all".to_owned(),
        TopicFilter::List(l) => l.join(","),
        TopicFilter::Regex(r) => format!("regex {}", r.as_str()),
    };
    let _ = writeln!(
        o,
        "  select topics {topics}; record time from {} to {}{}",
        time(selection.from_ms),
        time(selection.to_ms),
        if selection.offsets.is_empty() {
            String::new()
        } else {
            format!("; {} offset range(s)", selection.offsets.len())
        }
    );
    for p in &plan.partitions {
        let table = match config.replica.as_ref().map(|r| topic_table(r, &p.topic)) {
            Some(Ok(Some(t))) => t.to_string(),
            Some(Ok(None)) => "per record (source.*)".to_owned(),
            Some(Err(e)) => format!("({e})"),
            None => "-".to_owned(),
        };
        let first = p.segments.first().map_or(0, |s| s.start);
        let last = p.segments.last().map_or(0, |s| s.last);
        let _ = writeln!(
            o,
            "{}[{}] -> {table}: offsets {first}..={last}, {} segment(s), {} file(s), {} row(s), {:.1} MiB; replica next offset {}",
            p.topic,
            p.partition,
            p.segments.len(),
            p.files(),
            p.rows(),
            p.bytes() as f64 / 1_048_576.0,
            p.stored.map_or("none".to_owned(), |o| o.to_string()),
        );
        for s in &p.segments {
            let _ = writeln!(
                o,
                "  segment {}..={} ({} rows), marker {}",
                s.start, s.last, s.rows, s.marker
            );
            for f in &s.files {
                let _ = writeln!(
                    o,
                    "    {} ({})",
                    f.key,
                    f.size
                        .map_or("missing".to_owned(), |b| format!("{b} bytes"))
                );
            }
        }
    }
    let _ = writeln!(
        o,
        "total: {} partition(s), {} segment(s), {} file(s), {} row(s), {:.1} MiB",
        plan.partitions.len(),
        plan.segments(),
        plan.files(),
        plan.rows(),
        plan.bytes() as f64 / 1_048_576.0
    );
    for n in &plan.notes {
        let _ = writeln!(o, "note: {n}");
    }
    for p in &plan.problems {
        let _ = writeln!(o, "problem: {p}");
    }
    o
}

/// The final summary.
fn report(s: &Summary, group: &str) -> String {
    let mut o = String::new();
    let secs = s.elapsed.as_secs_f64().max(0.001);
    let _ = writeln!(
        o,
        "replay {}: {} row(s) applied of {} read, {} file(s), {:.1} MiB, {} transaction(s), {:.1} s, {:.0} rows/s",
        if s.stopped { "stopped" } else { "done" },
        s.rows_applied,
        s.rows_read,
        s.files,
        s.bytes as f64 / 1_048_576.0,
        s.transactions,
        secs,
        s.rows_applied as f64 / secs,
    );
    for p in &s.partitions {
        let _ = writeln!(
            o,
            "  {}[{}]: {} row(s) applied, next offset {} (group {group}){}",
            p.topic,
            p.partition,
            p.rows_applied,
            p.next_offset.map_or("none".to_owned(), |n| n.to_string()),
            if p.complete { "" } else { ", not complete" }
        );
    }
    for p in &s.problems {
        let _ = writeln!(o, "problem: {p}");
    }
    o
}
