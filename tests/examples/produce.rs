//! Fills a topic with the synthetic Debezium table of `lakesink_tests::workload`, for the
//! benchmarks: `cargo run --release -p lakesink-tests --example produce -- TOPIC PARTITIONS COUNT
//! [MODE]`. Without MODE every tenth event is an update and every fiftieth a delete; MODE
//! `snapshot` or `mixed` produces a [`Stream`] instead, and `wide` the default events of the
//! 32-column, ~1.2 KB table ([`Shape::Wide`]) instead of the 10-column one.

use std::time::Instant;

use lakesink_tests::Stack;
use lakesink_tests::workload::{Shape, Stream, Table};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: produce TOPIC PARTITIONS COUNT [snapshot|mixed|wide]");
        std::process::exit(2);
    };
    let (topic, partitions, count, stream, shape) = match args.as_slice() {
        [t, p, c] => (t, p, c, None, Shape::Narrow),
        [t, p, c, m] if m == "wide" => (t, p, c, None, Shape::Wide),
        [t, p, c, m] => {
            let stream = Stream::parse(m).unwrap_or_else(|| usage());
            (t, p, c, Some(stream), Shape::Narrow)
        }
        _ => usage(),
    };
    let partitions: i32 = partitions.parse().expect("PARTITIONS is a number");
    let count: i64 = count.parse().expect("COUNT is a number");
    let stack = Stack::from_env();
    let started = Instant::now();
    let table = Table::create_shaped(&stack, topic, partitions, shape).await;
    let base = chrono::Utc::now().timestamp_millis() - count;
    let s = stack.clone();
    let bytes = tokio::task::spawn_blocking(move || match stream {
        None => table.produce(&s, partitions, count, base),
        Some(stream) => table.produce_stream(&s, partitions, stream, count, base),
    })
    .await
    .expect("produce");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "produced {count} records to {topic} ({partitions} partitions) in {secs:.1} s ({:.0} records/s)",
        count as f64 / secs
    );
    // The benchmarks' MB/s count these: keys and values as the producer sent them.
    println!("bytes {bytes}");
}
