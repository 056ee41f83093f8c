//! The assigned partitions, each with its end offset (librdkafka's statistics, every second),
//! what was consumed and what each sink made durable (the sink loop, every tick): the lag
//! gauges and `/status`'s `partitions` come from here. Entries live from assignment to
//! revocation, so a partition with no record yet is listed too.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};

use super::metrics::{PartitionLabels, SinkPartitionLabels};
use crate::offsets::Position;
use lakesink_writers::sink::TopicPartition;

#[derive(Debug, Default, Clone)]
struct View {
    /// The offset after the last record (the last stable one under read_committed).
    end: Option<i64>,
    /// librdkafka's lag from the committed offset, for a partition nothing was read of yet.
    committed_lag: Option<i64>,
    consumed: Option<i64>,
    /// Per sink, in configuration order: the offset below which it holds every record.
    durable: Vec<Option<i64>>,
}

pub(crate) struct Partitions {
    sinks: Vec<&'static str>,
    views: Mutex<BTreeMap<TopicPartition, View>>,
    consumer_lag: Family<PartitionLabels, Gauge>,
    sink_lag: Family<SinkPartitionLabels, Gauge>,
}

impl Partitions {
    pub(crate) fn new(
        sinks: &[&'static str],
        consumer_lag: Family<PartitionLabels, Gauge>,
        sink_lag: Family<SinkPartitionLabels, Gauge>,
    ) -> Self {
        Self {
            sinks: sinks.to_vec(),
            views: Mutex::default(),
            consumer_lag,
            sink_lag,
        }
    }

    pub(crate) fn assigned(&self, parts: &[TopicPartition]) {
        if let Ok(mut views) = self.views.lock() {
            for p in parts {
                views.entry(p.clone()).or_insert_with(|| View {
                    durable: vec![None; self.sinks.len()],
                    ..View::default()
                });
            }
        }
    }

    pub(crate) fn revoked(&self, parts: &[TopicPartition]) {
        if let Ok(mut views) = self.views.lock() {
            for part in parts {
                views.remove(part);
                let labels = PartitionLabels {
                    topic: part.topic.to_string(),
                    partition: part.partition,
                };
                self.consumer_lag.remove(&labels);
                for &sink in &self.sinks {
                    self.sink_lag.remove(&SinkPartitionLabels {
                        sink,
                        topic: part.topic.to_string(),
                        partition: part.partition,
                    });
                }
            }
        }
    }

    /// From librdkafka's statistics.
    pub(crate) fn end(&self, topic: &str, partition: i32, end: i64, committed_lag: i64) {
        if let Ok(mut views) = self.views.lock()
            && let Some(v) = views.get_mut(&TopicPartition::new(topic, partition))
        {
            v.end = (end >= 0).then_some(end);
            v.committed_lag = (committed_lag >= 0).then_some(committed_lag);
            self.gauges(topic, partition, v);
        }
    }

    /// From the sink loop: per partition, what was consumed and each sink's durable point.
    pub(crate) fn positions(&self, positions: &[Position]) {
        if let Ok(mut views) = self.views.lock() {
            for (part, consumed, durable) in positions {
                if let Some(v) = views.get_mut(part) {
                    v.consumed = consumed.or(v.consumed);
                    for (have, new) in v.durable.iter_mut().zip(durable) {
                        *have = new.or(*have);
                    }
                    self.gauges(&part.topic, part.partition, v);
                }
            }
        }
    }

    fn gauges(&self, topic: &str, partition: i32, v: &View) {
        let Some(end) = v.end else { return };
        let lag = match v.consumed {
            Some(c) => Some(end.saturating_sub(c).max(0)),
            None => v.committed_lag,
        };
        if let Some(lag) = lag {
            self.consumer_lag
                .get_or_create(&PartitionLabels {
                    topic: topic.to_owned(),
                    partition,
                })
                .set(lag);
        }
        for (&sink, durable) in self.sinks.iter().zip(&v.durable) {
            if let Some(d) = durable {
                self.sink_lag
                    .get_or_create(&SinkPartitionLabels {
                        sink,
                        topic: topic.to_owned(),
                        partition,
                    })
                    .set(end.saturating_sub(*d).max(0));
            }
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        let Ok(views) = self.views.lock() else {
            return json!([]);
        };
        let list: Vec<Value> = views
            .iter()
            .map(|(TopicPartition { topic, partition }, v)| {
                let lag = |at: Option<i64>| match (v.end, at) {
                    (Some(e), Some(a)) => json!(e.saturating_sub(a).max(0)),
                    _ => Value::Null,
                };
                let sinks: BTreeMap<&str, Value> = self
                    .sinks
                    .iter()
                    .zip(&v.durable)
                    .map(|(&s, &d)| (s, json!({"durable_offset": d, "lag_records": lag(d)})))
                    .collect();
                json!({
                    "topic": &**topic,
                    "partition": partition,
                    "end_offset": v.end,
                    "consumed_offset": v.consumed,
                    "lag_records": if v.consumed.is_some() { lag(v.consumed) } else { json!(v.committed_lag) },
                    "sinks": sinks,
                })
            })
            .collect();
        json!(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_per_partition_and_sink_from_the_end_and_the_durable_points() {
        let p = Partitions::new(&["raw", "replica"], Family::default(), Family::default());
        p.assigned(&[TopicPartition::new("t", 0), TopicPartition::new("t", 1)]);
        p.end("t", 0, 100, 100);
        p.end("t", 1, 7, 7);
        p.end("unassigned", 0, 5, 5);
        let part = TopicPartition::new("t", 0);
        p.positions(&[(part, Some(90), vec![Some(80), None])]);
        let v = p.to_json();
        assert_eq!(v.as_array().map(Vec::len), Some(2), "{v}");
        assert_eq!(v[0]["lag_records"], 10);
        assert_eq!(v[0]["sinks"]["raw"]["durable_offset"], 80);
        assert_eq!(v[0]["sinks"]["raw"]["lag_records"], 20);
        assert_eq!(v[0]["sinks"]["replica"]["lag_records"], Value::Null);
        assert_eq!(
            v[1]["lag_records"], 7,
            "nothing read yet: lag from the committed offset"
        );
        let g = p
            .sink_lag
            .get_or_create(&SinkPartitionLabels {
                sink: "raw",
                topic: "t".into(),
                partition: 0,
            })
            .get();
        assert_eq!(g, 20);
        p.revoked(&[TopicPartition::new("t", 0)]);
        assert_eq!(p.to_json().as_array().map(Vec::len), Some(1));
    }
}
