//! What the sinks count, into the service's metrics ([`Meter`]).

use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use lakesink_writers::sink::{Committed, Meter};

use super::Telemetry;
use super::metrics::{SinkLabels, TableColumnLabels, TopicLabels};
use super::status::{RAW, REPLICA};

impl Meter for Telemetry {
    fn raw_uploaded(&self, sealed: Duration, file_sizes: &[u64]) {
        let m = &self.metrics;
        m.raw_flush_seconds.observe(sealed.as_secs_f64());
        for &size in file_sizes {
            m.raw_file_bytes.observe(size as f64);
        }
        m.sink_bytes
            .get_or_create(&SinkLabels { sink: RAW })
            .inc_by(file_sizes.iter().sum());
    }

    fn raw_behind(&self, topic: &str) {
        self.metrics
            .raw_rewinds
            .get_or_create(&TopicLabels {
                topic: topic.to_owned(),
            })
            .inc();
    }

    fn replica_committed(&self, c: &Committed<'_>) {
        let m = &self.metrics;
        m.replica_commit_seconds.observe(c.took.as_secs_f64());
        m.sink_bytes
            .get_or_create(&SinkLabels { sink: REPLICA })
            .inc_by(c.bytes);
        for (counts, family) in [
            (&c.rounded, &m.replica_values_rounded),
            (&c.unknown, &m.replica_values_unknown),
            (&c.stale, &m.replica_stale_skipped),
        ] {
            for r in counts {
                family
                    .get_or_create(&TableColumnLabels {
                        table: r.table.clone(),
                        column: r.column.clone(),
                    })
                    .inc_by(r.values);
            }
        }
        let now = chrono::Utc::now().timestamp_millis();
        let mut rows = 0;
        for b in c.batches {
            rows += b.rows.num_rows();
            // Source commit to replica commit, for rows that carry the source's time.
            let source_ts = b
                .rows
                .column_by_name("source")
                .and_then(|c| c.as_struct_opt())
                .and_then(|s| s.column_by_name("ts_ms"))
                .and_then(|c| c.as_primitive_opt::<Int64Type>());
            if let Some(ts) = source_ts {
                for t in ts.iter().flatten() {
                    m.replica_latency_seconds
                        .observe((now - t).max(0) as f64 / 1000.0);
                }
            }
        }
        m.replica_batch_rows.observe(rows as f64);
    }

    fn dead_lettered(&self, topic: &str) {
        self.metrics
            .dead_letters
            .get_or_create(&TopicLabels {
                topic: topic.to_owned(),
            })
            .inc();
    }

    fn replica_stuck(&self, partitions: usize) {
        self.metrics.replica_stuck_partitions.set(partitions as i64);
    }
}
