//! The raw layer against the real stack: the `lakesink` binary reads a real topic into
//! Parquet on the S3 server, is killed at named failpoints, restarts, and in the end the
//! files hold every record of the topic exactly once.

use crate::common::{BASE_TS, Run, assert_exactly_once, expected};
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use lakesink_writers::failpoint::{
    RAW_AFTER_UPLOAD, RAW_BEFORE_MARKER, RAW_BEFORE_UPLOAD, RAW_MID_MULTIPART,
};

#[tokio::test(flavor = "multi_thread")]
async fn each_record_lands_once_across_crashes_at_every_failpoint() {
    let stack = Stack::from_env();
    let topic = unique("raw-crash");
    let (partitions, count) = (3, 6_000);
    let table = Table::create(&stack, &topic, partitions).await;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, partitions, count, BASE_TS))
        .await
        .expect("produce");
    // Hourly directories from the record time (records 2 s apart span two hours), small
    // segments, and a wall-clock schedule: cuts that a restart cannot recompute.
    let run = Run::new(
        stack,
        &topic,
        partitions,
        "flush-size = 700\npartitioner = \"time\"\npath-format = \"'dt'=yyyy-MM-dd/'hour'=HH\"\npartition-duration-ms = 3600000\nrotate-schedule-interval-ms = 300\nrotate-interval-ms = 2000",
    );
    for failpoint in [
        RAW_BEFORE_MARKER,
        RAW_BEFORE_UPLOAD,
        RAW_AFTER_UPLOAD,
        RAW_BEFORE_UPLOAD,
    ] {
        run.crash_at(failpoint);
    }
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let (got, files) = run.rows().await;
    assert!(files > 3 * 2, "several files per partition: {files}");
    assert_exactly_once(&got, &want);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_in_the_middle_of_a_multipart_upload_loses_nothing() {
    let stack = Stack::from_env();
    let topic = unique("raw-multipart");
    // The segment closes when the last record arrives: flush-size is the record count.
    let (partitions, count) = (1, 120_000);
    let table = Table::create(&stack, &topic, partitions).await;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, partitions, count, BASE_TS))
        .await
        .expect("produce");
    let run = Run::new(
        stack,
        &topic,
        partitions,
        "flush-size = 120000\ncodec = \"none\"\nrow-group-rows = 8192\npart-size-bytes = 5242880",
    );
    run.crash_at(RAW_MID_MULTIPART);
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let (got, files) = run.rows().await;
    assert_eq!(files, 1, "one file, uploaded in parts");
    assert_exactly_once(&got, &want);
}

/// The consumer fetches 1 MiB per partition. A record batch larger than that comes whole only
/// when its partition is the first with data in a response (the broker's rule for making
/// progress), so batches of 3 MiB on every partition are read in turns, not skipped or stuck.
#[tokio::test(flavor = "multi_thread")]
async fn record_batches_larger_than_the_fetch_size_are_all_read() {
    let stack = Stack::from_env();
    let topic = unique("raw-big-batches");
    // About 180 bytes a record: 4.5 MB a partition, produced in batches of up to 3 MiB.
    let (partitions, count) = (3, 75_000);
    let table = Table::create_with_topic_config(
        &stack,
        &topic,
        partitions,
        &[("max.message.bytes", "8388608")],
    )
    .await;
    let s = stack.clone();
    let sent = tokio::task::spawn_blocking(move || {
        table.produce_in_batches(&s, partitions, count, BASE_TS, 3 << 20)
    })
    .await
    .expect("produce");
    assert!(
        sent > 3 * (3 << 20),
        "more than a batch a partition: {sent} bytes"
    );
    let run = Run::new(stack, &topic, partitions, "flush-size = 12500");
    let (want, end) = expected(partitions, count);
    run.run_to_end(&end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_offset_moved_past_the_raw_layer_is_read_again_not_skipped() {
    let stack = Stack::from_env();
    let topic = unique("raw-moved");
    let partitions = 2;
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    crate::common::produce_range(&stack, &table, partitions, 0..1_000).await;
    let run = Run::new(
        stack.clone(),
        &topic,
        partitions,
        "flush-size = 300\nrotate-interval-ms = 1000",
    );
    let (_, end) = expected(partitions, 1_000);
    run.run_to_end(&end);
    // More records, then the group's offsets moved past them before lakesink sees them: a
    // reset to latest, or `kafka-consumer-groups --reset-offsets`.
    crate::common::produce_range(&stack, &table, partitions, 1_000..2_000).await;
    let (want, end) = expected(partitions, 2_000);
    let moved: std::collections::BTreeMap<i32, i64> =
        end.iter().map(|(&p, &n)| (p, n - 100)).collect();
    run.move_group(&moved);
    run.run_to_end(&end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
    let log = run.log();
    assert!(
        log.contains("past everything the raw layer holds"),
        "the move is reported; log:\n{}",
        run.log_tail()
    );
}

/// A new group reads each partition from its log start, which retention may have moved past
/// 0 (here DeleteRecords), and says so; a group with commits resumes at them, not there.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_group_reads_from_the_log_start_and_a_known_one_from_its_commits() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    const SAID: &str = "no committed offset: reading from the log start";
    let stack = Stack::from_env();
    let topic = unique("raw-log-start");
    let partitions = 2;
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    crate::common::produce_range(&stack, &table, partitions, 0..1_000).await;
    // Partition 0's first 100 records deleted, as retention would.
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("admin client");
    let mut head = TopicPartitionList::new();
    head.add_partition_offset(&topic, 0, Offset::Offset(100))
        .expect("offset");
    let deleted = admin
        .delete_records(&head, &AdminOptions::new())
        .await
        .expect("delete records");
    assert_eq!(deleted.elements()[0].offset(), Offset::Offset(100));
    let kept = |rows: Vec<(i32, i64)>| -> Vec<(i32, i64)> {
        rows.into_iter()
            .filter(|&(p, o)| p != 0 || o >= 100)
            .collect()
    };
    let run = Run::new(
        stack.clone(),
        &topic,
        partitions,
        "flush-size = 300\nrotate-interval-ms = 1000",
    );
    let (want, end) = expected(partitions, 1_000);
    run.run_to_end(&end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &kept(want));
    let said = |log: &str| log.lines().filter(|l| l.contains(SAID)).count();
    let log = run.log();
    assert_eq!(
        said(&log),
        1,
        "the reset is logged once; log:\n{}",
        run.log_tail()
    );
    let line = log.lines().find(|l| l.contains(SAID)).unwrap_or_default();
    for p in 0..partitions {
        assert!(
            line.contains(&format!("{topic}[{p}]")),
            "partition {p} named: {line}"
        );
    }
    // Again, in the same group, which has committed offsets now.
    crate::common::produce_range(&stack, &table, partitions, 1_000..2_000).await;
    let (want, end) = expected(partitions, 2_000);
    run.run_to_end(&end);
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &kept(want));
    let log = run.log();
    assert_eq!(
        said(&log),
        1,
        "the second run resumed from its commits; log:\n{}",
        run.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_static_member_takes_its_partitions_back_at_once() {
    let stack = Stack::from_env();
    let topic = unique("raw-static");
    let partitions = 2;
    let table = std::sync::Arc::new(Table::create(&stack, &topic, partitions).await);
    crate::common::produce_range(&stack, &table, partitions, 0..400).await;
    let run = Run::new(
        stack.clone(),
        &topic,
        partitions,
        "flush-size = 100\nrotate-interval-ms = 500",
    );
    // A session long enough that waiting it out cannot pass for taking the partitions back.
    let text = std::fs::read_to_string(&run.config).expect("config");
    let text = text
        .replace(
            "\"session.timeout.ms\" = \"6000\"",
            "\"session.timeout.ms\" = \"45000\"",
        )
        .replacen(
            "topics = [",
            &format!("instance-id = \"{topic}-0\"\ntopics = ["),
            1,
        );
    std::fs::write(&run.config, text).expect("config");
    let (_, end) = expected(partitions, 400);
    let mut child = run.start(None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while run.committed() != end {
        assert!(
            std::time::Instant::now() < deadline,
            "log:\n{}",
            run.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    crate::common::produce_range(&stack, &table, partitions, 400..800).await;
    let restarted = std::time::Instant::now();
    let (want, end) = expected(partitions, 800);
    run.run_to_end(&end);
    let took = restarted.elapsed();
    eprintln!("caught up {took:?} after the restart");
    assert!(
        took < std::time::Duration::from_secs(25),
        "caught up {took:?} after the restart: the partitions waited for the dead member's \
         45 s session; log:\n{}",
        run.log_tail()
    );
    let (got, _) = run.rows().await;
    assert_exactly_once(&got, &want);
}

/// A secret key the object store refuses is a setting to fix, not an outage to wait out:
/// `run` stops at once, naming the settings, with the store's error code and without its
/// XML body (before, it probed forever and logged the XML on every probe).
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_object_store_key_stops_the_run_naming_the_settings() {
    let stack = Stack::from_env();
    let topic = unique("raw-badkey");
    let table = Table::create(&stack, &topic, 1).await;
    let s = stack.clone();
    tokio::task::spawn_blocking(move || table.produce(&s, 1, 10, BASE_TS))
        .await
        .expect("produce");
    let run = Run::new(stack, &topic, 1, "flush-size = 5");
    let mut child = run.start_with(
        None,
        &[("LAKESINK__RAW__STORE__SECRET_ACCESS_KEY", "not-the-secret")],
    );
    let stopped = run.stopped(&mut child, std::time::Duration::from_secs(60));
    assert!(
        stopped.contains("SignatureDoesNotMatch") || stopped.contains("InvalidAccessKeyId"),
        "{stopped}"
    );
    assert!(
        stopped.contains("check raw.store.access-key-id and raw.store.secret-access-key"),
        "{stopped}"
    );
    let log = run.log_tail();
    assert!(!log.contains("<Error>"), "no XML:\n{log}");
    assert!(!log.contains("still unavailable"), "not an outage:\n{log}");
    assert!(!log.contains("not-the-secret"), "{log}");
}
