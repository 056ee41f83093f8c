//! Fills a topic with the synthetic Debezium table of `lakesink_tests::workload`, for the
//! benchmarks: `cargo run --release -p lakesink-tests --example produce -- TOPIC PARTITIONS COUNT`.

use std::time::Instant;

use lakesink_tests::Stack;
use lakesink_tests::workload::Table;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [topic, partitions, count] = args.as_slice() else {
        eprintln!("usage: produce TOPIC PARTITIONS COUNT");
        std::process::exit(2);
    };
    let partitions: i32 = partitions.parse().expect("PARTITIONS is a number");
    let count: i64 = count.parse().expect("COUNT is a number");
    let stack = Stack::from_env();
    let started = Instant::now();
    let table = Table::create(&stack, topic, partitions).await;
    let base = chrono::Utc::now().timestamp_millis() - count;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, partitions, count, base))
        .await
        .expect("produce");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "produced {count} records to {topic} ({partitions} partitions) in {secs:.1} s ({:.0} records/s)",
        count as f64 / secs
    );
}
