//! The first pipeline: one consumer group over the configured topics, each record decoded into
//! the change model and printed as one JSON line per row. Offsets are stored only once every
//! record consumed so far has been printed (or recognised as not a row), and committed on
//! shutdown, so a restart resumes after the last printed record.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use arrow_array::RecordBatch;
use lakesink_config::KafkaConfig;
use lakesink_schema_registry::{ChangeBatch, ChangeDecoder, Format, SchemaResolver};

use crate::kafka;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

/// Print what is decoded after this many records, or after this long without a record.
const FLUSH_RECORDS: usize = 1024;
const FLUSH_IDLE: Duration = Duration::from_millis(200);

/// Consumes and prints until SIGINT/SIGTERM. `resolver` serves the registry-framed formats.
pub(crate) async fn run<R: SchemaResolver>(
    config: &KafkaConfig,
    resolver: R,
    format: Format,
) -> anyhow::Result<()> {
    let (consumer, revoked) = kafka::subscribe(config, None)?;
    let mut decoder = ChangeDecoder::new(resolver, format, FLUSH_RECORDS)
        .with_routes(kafka::routes(&config.non_data));
    // The next offset to store per partition, once what came before it is printed.
    let mut consumed: HashMap<(String, i32), i64> = HashMap::new();
    let mut unflushed = 0;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    loop {
        let next = tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            next = tokio::time::timeout(FLUSH_IDLE, consumer.recv()) => next,
        };
        match next {
            Err(_idle) => {
                flush(&mut decoder, &consumer, &mut consumed)?;
                unflushed = 0;
            }
            Ok(Err(e)) if kafka::is_transient(&e) => warn!(error = %e, "consumer: waiting"),
            Ok(Err(e)) => return Err(e).context("consuming"),
            Ok(Ok(msg)) => {
                for (topic, partition) in revoked.take() {
                    decoder.finish_partition(&topic, partition)?;
                    consumed.remove(&(topic, partition));
                }
                for batch in kafka::push(&mut decoder, &msg, None).await? {
                    print(&batch)?;
                }
                consumed.insert((msg.topic().to_owned(), msg.partition()), msg.offset() + 1);
                unflushed += 1;
                if unflushed >= FLUSH_RECORDS {
                    flush(&mut decoder, &consumer, &mut consumed)?;
                    unflushed = 0;
                }
            }
        }
    }
    flush(&mut decoder, &consumer, &mut consumed)?;
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => info!("offsets committed, stopping"),
        // Nothing consumed since start: nothing to commit.
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => info!("stopping"),
        Err(e) => return Err(e).context("committing offsets on shutdown"),
    }
    Ok(())
}

/// Prints every open batch, then stores the offsets of everything consumed so far.
fn flush<R: SchemaResolver>(
    decoder: &mut ChangeDecoder<R>,
    consumer: &kafka::GroupConsumer,
    consumed: &mut HashMap<(String, i32), i64>,
) -> anyhow::Result<()> {
    for batch in decoder.finish_all()? {
        print(&batch)?;
    }
    if consumed.is_empty() {
        return Ok(());
    }
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), next) in consumed.drain() {
        offsets.add_partition_offset(&topic, partition, Offset::Offset(next))?;
    }
    consumer
        .store_offsets(&offsets)
        .context("storing offsets")?;
    Ok(())
}

/// One JSON line per row: coordinates, op, key and the row images (or the value of a record
/// that is not a row, when `[kafka.non-data]` keeps it).
fn print(batch: &ChangeBatch) -> anyhow::Result<()> {
    let keep: Vec<usize> = ["__offset", "__op", "key", "before", "after", "value"]
        .iter()
        .filter_map(|name| batch.rows.schema().index_of(name).ok())
        .collect();
    let rows: RecordBatch = batch.rows.project(&keep)?;
    let mut json = Vec::new();
    let mut writer = arrow_json::LineDelimitedWriter::new(&mut json);
    writer.write(&rows)?;
    writer.finish()?;
    let mut out = std::io::stdout().lock();
    for line in json.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        write!(out, "{}[{}] ", batch.topic, batch.partition)?;
        out.write_all(line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
