//! Kills at random moments: the `lakesink` binary writes the raw layer (wall-clock rotation,
//! small segments, hourly directories) and the replica from a topic that is still being
//! produced, and is SIGKILLed at random times, restarting each time. In the end the raw layer
//! holds every offset exactly once and the replica holds what the events leave.
//!
//! The moments come from a seed, printed at the start (`LAKESINK_SOAK_SEED` repeats a run).
//! CI's mode is a few kills; a soak run sets `LAKESINK_SOAK_KILLS` and `LAKESINK_SOAK_RECORDS`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{
    BASE_TS, Run, assert_exactly_once, assert_replica_table, expected, replica_pool,
};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{name}={v}: {e}")))
        .unwrap_or(default)
}

/// xorshift64*: enough to spread kill moments, and the same moments for the same seed.
struct Moments(u64);

impl Moments {
    fn next_ms(&mut self, from: u64, to: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        from + self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % (to - from)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kills_at_random_moments_lose_and_repeat_nothing() {
    let kills = setting("LAKESINK_SOAK_KILLS", 6);
    let count = setting("LAKESINK_SOAK_RECORDS", 30_000) as i64;
    let seed = setting(
        "LAKESINK_SOAK_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    )
    .max(1);
    eprintln!("soak: seed {seed} (LAKESINK_SOAK_SEED repeats it), {kills} kills, {count} records");
    let mut moments = Moments(seed);

    let stack = Stack::from_env();
    let topic = unique("soak");
    let partitions = 3;
    let table = Arc::new(Table::create(&stack, &topic, partitions).await);
    // A stream still flowing while the kills happen: 2,000 records every 300 ms.
    let producing = Arc::new(AtomicBool::new(true));
    let (s, t, p) = (stack.clone(), table.clone(), producing.clone());
    let producer = tokio::task::spawn_blocking(move || {
        for chunk in (0..count).step_by(2_000) {
            t.produce_range(&s, partitions, chunk..(chunk + 2_000).min(count), BASE_TS);
            std::thread::sleep(Duration::from_millis(300));
        }
        p.store(false, Ordering::SeqCst);
    });
    let run = Run::with(
        stack.clone(),
        &topic,
        partitions,
        Some(
            "flush-size = 700\npartitioner = \"time\"\n\
             path-format = \"'dt'=yyyy-MM-dd/'hour'=HH\"\npartition-duration-ms = 3600000\n\
             rotate-schedule-interval-ms = 300\nrotate-interval-ms = 2000",
        ),
        &format!(
            "[replica]\nurl = \"{}\"\nbatch-max-rows = 1000\n",
            stack.replica_pg_url
        ),
    );
    let mut while_producing = 0;
    for kill in 0..kills {
        let mut child = run.start(None);
        // From before the first assignment to well into writing and uploading.
        let after = moments.next_ms(200, 4_000);
        tokio::time::sleep(Duration::from_millis(after)).await;
        if let Some(status) = child.try_wait().expect("wait") {
            panic!(
                "kill {kill}: lakesink exited by itself ({status}) after {after} ms; log:\n{}",
                run.log_tail()
            );
        }
        while_producing += u32::from(producing.load(Ordering::SeqCst));
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        eprintln!("soak: kill {kill} after {after} ms");
    }
    producer.await.expect("produce");
    if kills > 0 {
        assert!(
            while_producing > 0,
            "no kill happened while records were still being produced"
        );
    }

    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let (got, files) = run.rows().await;
    assert!(files > 3, "several files: {files}");
    assert_exactly_once(&got, &want);
    assert_replica_table(&replica_pool(&stack).await, &topic, count).await;
}
