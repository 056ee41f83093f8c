//! `lakesink tail` against the real stack, with the service's own config: it prints from where
//! it is told (the end, the beginning, explicit offsets), stops after `--max` rows, and never
//! touches the service's consumer group, so the next `run` still reads every record.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{Run, assert_exactly_once, expected, produce_range};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};

/// A running `lakesink tail --config <run's config> ARGS`: its stdout lines, its stderr in a
/// file beside the config.
struct Tail {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
}

impl Tail {
    fn start(run: &Run, args: &[&str]) -> Self {
        let log = run.config.with_file_name(unique("tail") + ".log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_lakesink"))
            .args(["tail", "--config"])
            .arg(&run.config)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("lakesink starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the tail has assigned and positioned its partitions.
    fn wait_until_tailing(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log().contains("tailing") {
            if let Some(status) = self.child.try_wait().expect("wait") {
                panic!("lakesink exited ({status}); log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "never positioned; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the tail to exit by itself (after `--max` rows): its status and the rows it
    /// printed, as (partition, offset, key id).
    fn exit(mut self, within: Duration) -> (ExitStatus, Vec<(i32, i64, i64)>) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("lakesink still runs after {within:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The reader thread ends at EOF, closing the channel.
        let rows = self.lines.iter().map(|l| parse(&l)).collect();
        (status, rows)
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `topic[p] {json}` into (partition, offset, key id).
fn parse(line: &str) -> (i32, i64, i64) {
    let (coords, json) = line.split_once(' ').expect("`topic[p] json`");
    let partition = coords
        .rsplit_once('[')
        .and_then(|(_, p)| p.strip_suffix(']'))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no partition in {line}"));
    let row: serde_json::Value = serde_json::from_str(json).expect("a JSON row");
    let offset = row["__offset"].as_i64().expect("__offset");
    let id = row["key"]["id"].as_i64().expect("key id");
    (partition, offset, id)
}

/// A topic of `count` workload events, row `i` on partition `i % partitions`.
async fn topic(stack: &Stack, name: &str, partitions: i32, count: i64) -> (String, Arc<Table>) {
    let topic = unique(name);
    let table = Arc::new(Table::create(stack, &topic, partitions).await);
    produce_range(stack, &table, partitions, 0..count).await;
    (topic, table)
}

/// The defect this guards against: a tail with the service's config joined the service's
/// group and committed what it printed, so the next `run` started the raw layer after it.
#[tokio::test(flavor = "multi_thread")]
async fn tail_from_the_beginning_commits_nothing_for_the_services_group() {
    let stack = Stack::from_env();
    let (partitions, count) = (2, 20);
    let (topic, _) = topic(&stack, "tail-nogroup", partitions, count).await;
    let run = Run::new(stack, &topic, partitions, "flush-size = 10");

    let tail = Tail::start(&run, &["--from-beginning", "--max", &count.to_string()]);
    let (status, rows) = tail.exit(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    let mut ids: Vec<i64> = rows.iter().map(|r| r.2).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..count).collect::<Vec<_>>());
    for (p, o, id) in &rows {
        assert_eq!((*p, *o), ((id % 2) as i32, id / 2), "row {id}");
    }

    assert!(
        run.committed().is_empty(),
        "the service's group {} has committed offsets after a tail: {:?}",
        run.group,
        run.committed()
    );
    // And the service, started afterwards, backs up every record from offset 0.
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_starts_at_the_end_of_each_partition_by_default() {
    let stack = Stack::from_env();
    let partitions = 2;
    let (topic, table) = topic(&stack, "tail-end", partitions, 10).await;
    let run = Run::with(stack.clone(), &topic, partitions, None, "");

    let mut tail = Tail::start(&run, &["--max", "4"]);
    tail.wait_until_tailing();
    produce_range(&stack, &table, partitions, 10..14).await;
    let (status, mut rows) = tail.exit(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    rows.sort_unstable();
    assert_eq!(rows, vec![(0, 5, 10), (0, 6, 12), (1, 5, 11), (1, 6, 13)]);
    assert!(run.committed().is_empty(), "{:?}", run.committed());
}

/// `--offsets` positions the partitions it names; the others start at their end; `--max`
/// stops after that many rows even when more are there.
#[tokio::test(flavor = "multi_thread")]
async fn tail_starts_at_explicit_offsets_and_stops_after_max_rows() {
    let stack = Stack::from_env();
    let partitions = 2;
    let (topic, table) = topic(&stack, "tail-offsets", partitions, 20).await;
    let run = Run::with(stack.clone(), &topic, partitions, None, "");

    // Partition 0 from offset 6 (rows 12, 14, 16, 18); partition 1 from its end (10).
    let offsets = format!("{topic}:0:6");
    let mut tail = Tail::start(&run, &["--offsets", &offsets, "--max", "8"]);
    tail.wait_until_tailing();
    produce_range(&stack, &table, partitions, 20..24).await;
    let (status, mut rows) = tail.exit(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    rows.sort_unstable();
    assert_eq!(
        rows,
        vec![
            (0, 6, 12),
            (0, 7, 14),
            (0, 8, 16),
            (0, 9, 18),
            (0, 10, 20),
            (0, 11, 22),
            (1, 10, 21),
            (1, 11, 23)
        ]
    );

    // Both partitions named (comma separated), more rows there than --max: exactly --max.
    let offsets = format!("{topic}:0:2,{topic}:1:3");
    let tail = Tail::start(&run, &["--offsets", &offsets, "--max", "5"]);
    let (status, rows) = tail.exit(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    assert_eq!(rows.len(), 5, "{rows:?}");
    for p in 0..partitions {
        // Each partition's rows are a run of offsets from where it was told to start.
        let got: Vec<i64> = rows.iter().filter(|r| r.0 == p).map(|r| r.1).collect();
        let from = [2, 3][p as usize];
        let want: Vec<i64> = (from..from + got.len() as i64).collect();
        assert_eq!(got, want, "partition {p}");
    }
    assert!(run.committed().is_empty(), "{:?}", run.committed());
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_refuses_offsets_of_a_partition_it_does_not_read() {
    let stack = Stack::from_env();
    let (topic, _) = topic(&stack, "tail-badoffsets", 1, 1).await;
    let run = Run::with(stack, &topic, 1, None, "");
    let offsets = format!("{topic}:5:0");
    let tail = Tail::start(&run, &["--offsets", &offsets]);
    let log = tail.log.clone();
    let (status, rows) = tail.exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!status.success(), "{log}");
    assert!(rows.is_empty());
    assert!(log.contains(&format!("{topic}:5")), "{log}");
}
