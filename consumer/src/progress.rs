//! Progress of a replay: a bar (files, rows per second, ETA) when stderr is a terminal, plain
//! log lines every few seconds otherwise. Log lines written while the bar is drawn go above
//! it ([`LogWriter`]).

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lakesink_writers::replay::Stats;
use tracing::info;

/// The bar being drawn, if any: log lines suspend it.
static BAR: OnceLock<Mutex<Option<ProgressBar>>> = OnceLock::new();

fn bar_slot() -> &'static Mutex<Option<ProgressBar>> {
    BAR.get_or_init(|| Mutex::new(None))
}

/// The log writer: stderr, above the progress bar when one is drawn.
#[derive(Clone, Copy, Default)]
pub(crate) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = bar_slot().lock().ok().and_then(|b| b.clone());
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

/// What the whole replay holds, for the ETA.
pub(crate) struct Totals {
    pub(crate) files: u64,
    pub(crate) rows: u64,
}

/// Shows progress until dropped.
pub(crate) struct Progress {
    task: tokio::task::JoinHandle<()>,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar on a terminal, else a log line every `every`.
    pub(crate) fn start(stats: Arc<Stats>, totals: Totals, every: Duration) -> Self {
        let started = Instant::now();
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(
                Some(totals.rows.max(1)),
                ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows, \
                     {rate}, ETA {eta} {msg}",
                )
                .map(|s| {
                    s.with_key(
                        "rate",
                        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = write!(w, "{:.0} rows/s", state.per_sec());
                        },
                    )
                })
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            if let Ok(mut slot) = bar_slot().lock() {
                *slot = Some(bar.clone());
            }
            let b = bar.clone();
            let task = tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(200));
                loop {
                    tick.tick().await;
                    b.set_position(stats.rows_read.load(Ordering::Relaxed));
                    b.set_message(format!(
                        "| files {}/{} | applied {} rows",
                        stats.files.load(Ordering::Relaxed),
                        totals.files,
                        stats.rows_applied.load(Ordering::Relaxed)
                    ));
                }
            });
            return Self {
                task,
                bar: Some(bar),
            };
        }
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let secs = started.elapsed().as_secs_f64().max(0.001);
                let read = stats.rows_read.load(Ordering::Relaxed);
                let applied = stats.rows_applied.load(Ordering::Relaxed);
                let rate = read as f64 / secs;
                let eta = if rate > 0.0 && totals.rows > read {
                    format!("{:.0}s", (totals.rows - read) as f64 / rate)
                } else {
                    "-".into()
                };
                info!(
                    files = format!("{}/{}", stats.files.load(Ordering::Relaxed), totals.files),
                    rows_read = format!("{read}/{}", totals.rows),
                    rows_applied = applied,
                    rows_per_s = format!("{:.0}", applied as f64 / secs),
                    eta,
                    "replay progress"
                );
            }
        });
        Self { task, bar: None }
    }

    pub(crate) fn finish(self) {
        self.task.abort();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if let Ok(mut slot) = bar_slot().lock() {
            *slot = None;
        }
    }
}
