//! The Grafana dashboard and the Prometheus alerts in `deploy/` query only metrics lakesink
//! exports: a renamed metric fails here, not silently on an operator's screen.

use std::collections::BTreeSet;

use super::Metrics;
use super::metrics::{
    NonDataLabels, PartitionLabels, SinkPartitionLabels, SinkStateLabels, SinkTopicLabels,
    TableColumnLabels, TopicLabels,
};

const DASHBOARD: &str = include_str!("../../../deploy/grafana/lakesink.json");
const ALERTS: &str = include_str!("../../../deploy/prometheus/lakesink-alerts.yaml");

/// The metric families the text exposition declares (`# TYPE <name> <type>`), each labelled
/// family with one series (an empty family is not declared).
fn families() -> BTreeSet<String> {
    let m = Metrics::new(&["raw", "replica"]);
    let (topic, sink, partition) = ("t".to_owned(), "raw", 0);
    let column = TableColumnLabels {
        table: "t".into(),
        column: "c".into(),
    };
    drop(m.sink_state.get_or_create(&SinkStateLabels {
        sink,
        state: "RUNNING",
    }));
    drop(m.sink_lag.get_or_create(&SinkPartitionLabels {
        sink,
        topic: topic.clone(),
        partition,
    }));
    drop(m.lag.get_or_create(&PartitionLabels {
        topic: topic.clone(),
        partition,
    }));
    drop(m.written.get_or_create(&SinkTopicLabels {
        sink,
        topic: topic.clone(),
    }));
    let by_topic = TopicLabels {
        topic: topic.clone(),
    };
    for family in [&m.consumed, &m.dead_letters, &m.raw_rewinds] {
        drop(family.get_or_create(&by_topic));
    }
    drop(m.non_data.get_or_create(&NonDataLabels {
        topic,
        kind: "tombstone",
    }));
    drop(m.replica_values_rounded.get_or_create(&column));
    drop(m.replica_values_unknown.get_or_create(&column));
    m.render()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The lakesink and process metric names an expression uses.
fn names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let word = bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_';
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if !word {
            i += 1;
            continue;
        }
        let w = &expr[start..i];
        if w.starts_with("lakesink_") || w.starts_with("process_") {
            out.push(w.to_owned());
        }
    }
    out
}

/// Whether a series name belongs to a declared family (counters end in `_total`, histograms
/// in `_bucket`/`_sum`/`_count`, infos in `_info`).
fn exists(families: &BTreeSet<String>, series: &str) -> bool {
    families.contains(series)
        || ["_total", "_bucket", "_sum", "_count", "_info"]
            .iter()
            .any(|s| series.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

fn dashboard_exprs() -> Vec<String> {
    let d: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let mut exprs: Vec<String> = d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    for v in d["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = v["query"].as_str() {
            exprs.push(q.to_owned());
        }
    }
    exprs
}

fn alert_exprs() -> Vec<String> {
    ALERTS
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_owned())
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_query_exists() {
    let families = families();
    let exprs: Vec<String> = dashboard_exprs().into_iter().chain(alert_exprs()).collect();
    assert!(exprs.len() >= 25, "{} expressions found", exprs.len());
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| names(e)).collect();
    let missing: Vec<&String> = used.iter().filter(|n| !exists(&families, n)).collect();
    assert!(
        missing.is_empty(),
        "not exported: {missing:?}; exported: {families:?}"
    );
    // The metrics an operator alerts on are on the dashboard or in the alerts.
    for needed in [
        "lakesink_sink_state",
        "lakesink_kafka_reachable",
        "lakesink_sink_lag_records",
        "lakesink_consumer_lag_records",
        "lakesink_sink_bytes_total",
        "lakesink_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ] {
        assert!(used.contains(needed), "{needed} is not used");
    }
}

#[test]
fn a_name_that_is_not_exported_is_found() {
    let families = families();
    assert_eq!(
        names("rate(lakesink_sink_rows_total{sink=\"raw\"}[1m]) / up"),
        ["lakesink_sink_rows_total"]
    );
    assert!(exists(&families, "lakesink_sink_rows_total"));
    assert!(exists(&families, "lakesink_replica_latency_seconds_bucket"));
    assert!(
        !exists(&families, "lakesink_consumer_lag"),
        "renamed with its unit"
    );
    assert!(!exists(&families, "lakesink_registry_cache_hits_total"));
}
