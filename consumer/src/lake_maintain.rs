//! `lakesink lake maintain`: compaction of upsert tables, snapshot expiry and orphan-file
//! cleanup for the `[lake]` tables (docs/lake.md#maintenance).

use std::path::PathBuf;

use anyhow::{Context, bail};
use lakesink_writers::lake::maintain::{Options, maintain};

#[derive(clap::Args)]
pub(crate) struct MaintainArgs {
    /// The TOML config file (its `[lake]` section names the catalog and namespace).
    #[arg(short, long)]
    config: PathBuf,
    /// Expire snapshots older than this many minutes (Iceberg's default: 5 days).
    #[arg(long, default_value_t = 7200)]
    snapshot_age_minutes: u64,
    /// Keep at least this many recent snapshots per branch, however old.
    #[arg(long, default_value_t = 1)]
    retain_last: usize,
    /// Delete files no snapshot refers to once they are this many minutes old (Iceberg's
    /// default: 3 days). A running lakesink's upload is unreferenced until its commit lands.
    #[arg(long, default_value_t = 4320)]
    orphan_age_minutes: u64,
    /// No lakesink writes to these tables now: allows an orphan age under an hour.
    #[arg(long)]
    no_writers: bool,
    /// Only this table of the namespace (repeatable); default: every table in it.
    #[arg(long = "table")]
    tables: Vec<String>,
    /// Print what would be compacted, expired and deleted; change and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Leave upsert tables' delete files as they are (no compaction).
    #[arg(long)]
    no_compact: bool,
}

/// Under this, an orphan may be a running commit's file.
const SAFE_ORPHAN_MINUTES: u64 = 60;

pub(crate) async fn run(args: MaintainArgs) -> anyhow::Result<()> {
    if args.orphan_age_minutes < SAFE_ORPHAN_MINUTES && !args.no_writers && !args.dry_run {
        bail!(
            "--orphan-age-minutes {} is under {SAFE_ORPHAN_MINUTES}: a lakesink that is \
             committing has files no snapshot refers to yet, and they would be deleted. Stop \
             every lakesink writing to these tables and add --no-writers, or keep the age at \
             {SAFE_ORPHAN_MINUTES} minutes or more",
            args.orphan_age_minutes
        );
    }
    let config = crate::loading::load(&args.config)
        .await
        .map_err(|e| anyhow::anyhow!(crate::loading::describe(&e)))?;
    let lake = config
        .lake
        .as_ref()
        .with_context(|| format!("{} has no [lake] section", args.config.display()))?;
    let minutes = |m: u64| i64::try_from(m.saturating_mul(60_000)).unwrap_or(i64::MAX);
    let opts = Options {
        snapshot_age_ms: minutes(args.snapshot_age_minutes),
        retain_last: args.retain_last,
        orphan_age_ms: minutes(args.orphan_age_minutes),
        tables: args.tables,
        dry_run: args.dry_run,
        compact: !args.no_compact,
    };
    // The same line either way, so a dry run's figures compare with the real run's.
    let dry = if args.dry_run {
        "dry run, nothing changed: "
    } else {
        ""
    };
    let reports = maintain(lake, &opts).await.map_err(anyhow::Error::msg)?;
    for r in &reports {
        let c = &r.compaction;
        if c.partitions > 0 || c.skipped > 0 {
            let read = format!(
                "{} partitions: {} data files and {} delete files ({} rows, {} bytes)",
                c.partitions,
                c.data_files_removed,
                c.delete_files_removed,
                c.rows_read,
                c.bytes_read
            );
            let left = if c.skipped > 0 {
                format!(
                    "; {} partitions with position deletes left alone",
                    c.skipped
                )
            } else {
                String::new()
            };
            if opts.dry_run {
                println!("{dry}{}: would compact {read}{left}", r.table);
            } else {
                println!(
                    "{}: compacted {read} into {} files ({} bytes), {} rows deleted{left}",
                    r.table, c.files_added, c.bytes_written, c.rows_deleted
                );
            }
        }
        println!(
            "{dry}{}: {} of {} snapshots expired, {} files only they referenced deleted, {} orphan \
             files deleted, {} younger orphans kept",
            r.table,
            r.snapshots_expired,
            r.snapshots_before,
            r.expired_files.len(),
            r.orphans.len(),
            r.young_orphans
        );
    }
    if reports.is_empty() {
        println!("no tables in namespace {}", lake.namespace);
    }
    Ok(())
}
