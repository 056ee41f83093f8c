//! The Prometheus metrics: one registry per process, rendered at `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TopicLabels {
    pub(crate) topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkTopicLabels {
    pub(crate) sink: &'static str,
    pub(crate) topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartitionLabels {
    pub(crate) topic: String,
    pub(crate) partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NonDataLabels {
    pub(crate) topic: String,
    pub(crate) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TableColumnLabels {
    pub(crate) table: String,
    pub(crate) column: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ComponentLabels {
    pub(crate) component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkStateLabels {
    pub(crate) sink: &'static str,
    pub(crate) state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkLabels {
    pub(crate) sink: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SinkPartitionLabels {
    pub(crate) sink: &'static str,
    pub(crate) topic: String,
    pub(crate) partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LookupLabels {
    pub(crate) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The components retries are counted for, each present from the start so that an
/// `increase()` alert sees the first retry.
const COMPONENTS: [&str; 4] = ["database", "registry", "object_store", "kafka"];

pub(crate) struct Metrics {
    registry: Registry,
    /// Each sink's state: 1 for the state it is in, 0 for the others.
    pub(crate) sink_state: Family<SinkStateLabels, Gauge>,
    /// 1 while the Kafka brokers answer, 0 during an outage.
    pub(crate) kafka_reachable: Gauge,
    /// Bytes a sink made durable (raw: Parquet file sizes).
    pub(crate) sink_bytes: Family<SinkLabels, Counter>,
    /// Records between what a sink made durable and the partition's end.
    pub(crate) sink_lag: Family<SinkPartitionLabels, Gauge>,
    /// Records read from Kafka, rows and non-rows alike.
    pub(crate) consumed: Family<TopicLabels, Counter>,
    /// Rows made durable by a sink (files complete, transaction committed).
    pub(crate) written: Family<SinkTopicLabels, Counter>,
    pub(crate) lag: Family<PartitionLabels, Gauge>,
    /// Raw layer: from a segment's close to all of its files being visible.
    pub(crate) raw_flush_seconds: Histogram,
    pub(crate) raw_file_bytes: Histogram,
    /// Replica: one transaction, from BEGIN to COMMIT returned.
    pub(crate) replica_commit_seconds: Histogram,
    pub(crate) replica_batch_rows: Histogram,
    /// Replica: from the source database's commit (`source.ts_ms`) to the replica's.
    pub(crate) replica_latency_seconds: Histogram,
    /// Partitions of stuck replica lanes: let go of (read again later) or paused.
    pub(crate) replica_stuck_partitions: Gauge,
    pub(crate) retries: Family<ComponentLabels, Counter>,
    /// Records copied to the dead-letter topic, by their topic.
    pub(crate) dead_letters: Family<TopicLabels, Counter>,
    /// Records that are not rows (heartbeats, schema changes, …), by topic and kind.
    pub(crate) non_data: Family<NonDataLabels, Counter>,
    /// Writer schema lookups: answered from the process's cache (`hit`) or the registry.
    pub(crate) registry_lookups: Family<LookupLabels, Counter>,
    pub(crate) raw_rewinds: Family<TopicLabels, Counter>,
    /// Replica: values rounded to PostgreSQL's microseconds (SQL Server `datetimeoffset(7)`,
    /// nanosecond times and timestamps), by table and column.
    pub(crate) replica_values_rounded: Family<TableColumnLabels, Counter>,
    /// Replica: values written NULL because it could not know them, by table and column.
    pub(crate) replica_values_unknown: Family<TableColumnLabels, Counter>,
    /// Replica: changes the stale-event guard left out, by table (and its guard column).
    pub(crate) replica_stale_skipped: Family<TableColumnLabels, Counter>,
}

impl Metrics {
    pub(crate) fn new(sinks: &[&'static str]) -> Self {
        let mut root = Registry::default();
        // The conventional process_* names, without lakesink's prefix.
        root.register_collector(Box::new(super::process::Process));
        let registry = root.sub_registry_with_prefix("lakesink");
        registry.register(
            "build",
            "The running lakesink's version",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        let sink_state = Family::<SinkStateLabels, Gauge>::default();
        registry.register(
            "sink_state",
            "Each sink's state (RUNNING, WAITING on a component, FAILED): 1 for the one it is in",
            sink_state.clone(),
        );
        let kafka_reachable = Gauge::default();
        registry.register(
            "kafka_reachable",
            "1 while the Kafka brokers answer, 0 during an outage",
            kafka_reachable.clone(),
        );
        let sink_bytes = Family::<SinkLabels, Counter>::default();
        registry.register_with_unit(
            "sink",
            "Bytes a sink made durable (raw: Parquet files visible in the store; replica: COPY data of committed transactions)",
            Unit::Bytes,
            sink_bytes.clone(),
        );
        let sink_lag = Family::<SinkPartitionLabels, Gauge>::default();
        registry.register_with_unit(
            "sink_lag",
            "Records between what a sink made durable and the partition's end",
            Unit::Other("records".into()),
            sink_lag.clone(),
        );
        let consumed = Family::<TopicLabels, Counter>::default();
        registry.register(
            "records_consumed",
            "Records read from Kafka",
            consumed.clone(),
        );
        let written = Family::<SinkTopicLabels, Counter>::default();
        registry.register(
            "sink_rows",
            "Rows made durable by a sink (raw: files visible; replica: committed)",
            written.clone(),
        );
        let lag = Family::<PartitionLabels, Gauge>::default();
        registry.register_with_unit(
            "consumer_lag",
            "Records between the consumer's position and the partition's end (fresh within a second)",
            Unit::Other("records".into()),
            lag.clone(),
        );
        let seconds = || Histogram::new(exponential_buckets(0.001, 2.0, 18));
        let raw_flush_seconds = seconds();
        registry.register_with_unit(
            "raw_flush",
            "From a segment's close until all of its files are visible in the store",
            Unit::Seconds,
            raw_flush_seconds.clone(),
        );
        let raw_file_bytes = Histogram::new(exponential_buckets(1024.0, 4.0, 12));
        registry.register_with_unit(
            "raw_file_size",
            "Size of each Parquet file written",
            Unit::Bytes,
            raw_file_bytes.clone(),
        );
        let replica_commit_seconds = seconds();
        registry.register_with_unit(
            "replica_commit",
            "Duration of one replica transaction, BEGIN to COMMIT",
            Unit::Seconds,
            replica_commit_seconds.clone(),
        );
        let replica_batch_rows = Histogram::new(exponential_buckets(1.0, 4.0, 10));
        registry.register(
            "replica_batch_rows",
            "Change rows in one replica transaction",
            replica_batch_rows.clone(),
        );
        let replica_latency_seconds = seconds();
        registry.register_with_unit(
            "replica_latency",
            "From the source commit (source.ts_ms) to the replica commit, per row",
            Unit::Seconds,
            replica_latency_seconds.clone(),
        );
        let replica_stuck_partitions = Gauge::default();
        registry.register(
            "replica_stuck_partitions",
            "Partitions of stuck replica lanes, let go of (read again when the lane moves) or paused",
            replica_stuck_partitions.clone(),
        );
        let retries = Family::<ComponentLabels, Counter>::default();
        registry.register(
            "retries",
            "Retried operations, by component (database, registry, kafka)",
            retries.clone(),
        );
        let dead_letters = Family::<TopicLabels, Counter>::default();
        registry.register(
            "dead_letters",
            "Records that could not be decoded, copied to the dead-letter topic",
            dead_letters.clone(),
        );
        let non_data = Family::<NonDataLabels, Counter>::default();
        registry.register(
            "non_data_records",
            "Records that are not rows (heartbeat, schema-change, transaction, message, \
             notification, signal), skipped or routed by [kafka.non-data]",
            non_data.clone(),
        );
        let registry_lookups = Family::<LookupLabels, Counter>::default();
        registry.register(
            "registry_cache_lookups",
            "Writer schema lookups, answered from the process's cache (result=hit) or by asking \
             the schema registry (result=miss)",
            registry_lookups.clone(),
        );
        let raw_rewinds = Family::<TopicLabels, Counter>::default();
        registry.register(
            "raw_rewinds",
            "Partitions whose committed offset was past everything the raw layer holds (moved \
             by a reset, a tool or another client), read again from the raw layer's point",
            raw_rewinds.clone(),
        );
        let replica_values_rounded = Family::<TableColumnLabels, Counter>::default();
        registry.register(
            "replica_values_rounded",
            "Values the replica holds rounded: timestamps and times with digits past the \
             microsecond (SQL Server datetimeoffset(7), datetime2(7), time(7); Db2 TIMESTAMP(9)), \
             which the raw layer keeps whole",
            replica_values_rounded.clone(),
        );
        let replica_values_unknown = Family::<TableColumnLabels, Counter>::default();
        registry.register(
            "replica_values_unknown",
            "Values the replica wrote NULL because it could not know them: a key change's \
             unchanged TOASTed column whose old row the replica did not hold",
            replica_values_unknown.clone(),
        );
        let replica_stale_skipped = Family::<TableColumnLabels, Counter>::default();
        registry.register(
            "replica_stale_skipped",
            "Changes the replica's stale-event guard left out: the row held a change from later \
             in the source's log (a replay, a re-snapshot, a key moved across partitions)",
            replica_stale_skipped.clone(),
        );
        // Present at zero from the start, so a rate() or an alert has a series to read.
        for component in COMPONENTS {
            drop(retries.get_or_create(&ComponentLabels { component }));
        }
        for result in ["hit", "miss"] {
            drop(registry_lookups.get_or_create(&LookupLabels { result }));
        }
        for &sink in sinks {
            drop(sink_bytes.get_or_create(&SinkLabels { sink }));
        }
        Self {
            registry: root,
            sink_state,
            kafka_reachable,
            sink_bytes,
            sink_lag,
            consumed,
            written,
            lag,
            raw_flush_seconds,
            raw_file_bytes,
            replica_commit_seconds,
            replica_batch_rows,
            replica_latency_seconds,
            replica_stuck_partitions,
            retries,
            dead_letters,
            non_data,
            registry_lookups,
            raw_rewinds,
            replica_values_rounded,
            replica_values_unknown,
            replica_stale_skipped,
        }
    }

    /// The OpenMetrics text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub(crate) fn retry(&self, component: &'static str) {
        self.retries
            .get_or_create(&ComponentLabels { component })
            .inc();
    }
}
