//! One connector config → its lakesink sections: the connector's kind, the keys every sink
//! has, then the kind's own mapping; whatever is left is listed as not carried over.

use super::cfg::{Cfg, Connector, Kind, NO_SMT, Topics, split_list};
use super::converters::converters;
use super::iceberg::iceberg;
use super::jdbc::jdbc;
use super::s3::s3;
use super::transforms::{errors, transforms};
use super::{ImportError, Input, parse};

const S3_SINK: &str = "io.confluent.connect.s3.S3SinkConnector";
const CONFLUENT_JDBC_SINK: &str = "io.confluent.connect.jdbc.JdbcSinkConnector";
const DEBEZIUM_JDBC_SINK: &str = "io.debezium.connector.jdbc.JdbcSinkConnector";
const ICEBERG_SINK: &str = "org.apache.iceberg.connect.IcebergSinkConnector";
/// The same sink before it moved to Apache Iceberg (Tabular's `iceberg-kafka-connect`).
const TABULAR_ICEBERG_SINK: &str = "io.tabular.iceberg.connect.IcebergSinkConnector";

const SOURCE_SETTING: &str = "a source connector setting: no effect in a sink";

/// Maps one file.
pub(crate) fn map(input: &Input) -> Result<Connector, ImportError> {
    let connector = parse::parse(&input.text).map_err(|message| ImportError::Connector {
        file: input.name.clone(),
        message,
    })?;
    let mut cfg = Cfg::new(&input.name, connector.config);
    let class = cfg
        .take("connector.class")
        .ok_or_else(|| cfg.err("no `connector.class`"))?;
    let kind = kind(&cfg, &class)?;
    let name = cfg
        .take("name")
        .or(connector.name)
        .unwrap_or_else(|| "(unnamed)".into());
    let mut part = Connector::new(input.name.clone(), name, class, kind);
    common(&mut cfg, &mut part)?;
    let unwrap = transforms(&mut cfg, &mut part);
    match kind {
        Kind::S3 => s3(&mut cfg, &mut part, unwrap)?,
        Kind::ConfluentJdbc | Kind::DebeziumJdbc => {
            jdbc(&mut cfg, &mut part, unwrap.as_ref().map(|(u, _)| u))?;
        }
        Kind::Iceberg => iceberg(&mut cfg, &mut part, unwrap)?,
    }
    leftovers(&mut cfg);
    part.dropped = cfg.dropped;
    part.dropped.sort_by(|a, b| a.key.cmp(&b.key));
    part.notes = cfg.notes;
    Ok(part)
}

/// The sink `connector.class` names, or why it is not one lakesink replaces.
fn kind(cfg: &Cfg<'_>, class: &str) -> Result<Kind, ImportError> {
    match class {
        S3_SINK | "S3SinkConnector" => Ok(Kind::S3),
        CONFLUENT_JDBC_SINK => Ok(Kind::ConfluentJdbc),
        DEBEZIUM_JDBC_SINK => Ok(Kind::DebeziumJdbc),
        ICEBERG_SINK | TABULAR_ICEBERG_SINK | "IcebergSinkConnector" => Ok(Kind::Iceberg),
        other => {
            let what = if other.contains("Source") || other.starts_with("io.debezium.connector.") {
                "a source connector: lakesink replaces sink connectors"
            } else {
                "not a connector lakesink replaces"
            };
            Err(cfg.err(format!(
                "connector.class {other} is {what} (the Confluent S3 sink {S3_SINK}, the Confluent JDBC sink {CONFLUENT_JDBC_SINK}, the Debezium JDBC sink {DEBEZIUM_JDBC_SINK}, Apache Iceberg's sink {ICEBERG_SINK})"
            )))
        }
    }
}

/// Keys of every sink connector: topics, converters, errors, Connect framework settings.
fn common(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    if let Some(n) = cfg.plain("tasks.max")
        && n.trim() != "1"
    {
        cfg.drop(
            "tasks.max",
            "lakesink reads with one consumer per process: run more processes with the same kafka.group-id to spread the partitions",
        );
    }
    let topics = cfg.plain("topics").map(|t| split_list(&t));
    let regex = cfg.plain("topics.regex").filter(|r| !r.trim().is_empty());
    part.topics = match (topics, regex) {
        (Some(t), None) if !t.is_empty() => Topics::List(t),
        (None, Some(r)) => Topics::Regex(anchor(&r)),
        (Some(t), Some(_)) if !t.is_empty() => {
            return Err(cfg.err("sets both `topics` and `topics.regex` (Connect rejects that too)"));
        }
        _ => return Err(cfg.err("sets neither `topics` nor `topics.regex`")),
    };
    if let Some(b) = cfg.plain("confluent.topic.bootstrap.servers") {
        part.brokers = Some((b, "confluent.topic.bootstrap.servers"));
    }
    for k in cfg.keys_with_prefix("confluent.") {
        cfg.drop(&k, "Confluent licensing: lakesink needs no license topic");
    }
    converters(cfg, part)?;
    errors(cfg, part)?;
    for k in cfg.keys_with_prefix("consumer.override.") {
        cfg.drop(
            &k,
            "a Java consumer setting: put librdkafka's equivalent in kafka.properties",
        );
    }
    for k in cfg.keys_with_prefix("predicates") {
        cfg.drop(&k, NO_SMT);
    }
    if let Some(h) = cfg.take("header.converter")
        && !h.ends_with("SimpleHeaderConverter")
    {
        cfg.list_dropped(
            "header.converter",
            "lakesink reads only the Apicurio id headers, as bytes",
        );
    }
    Ok(())
}

/// Connect's `topics.regex` must match the whole name; librdkafka's matches anywhere, so
/// the imported regex is anchored at both ends.
fn anchor(regex: &str) -> String {
    let r = regex.trim();
    let body = r.strip_prefix('^').unwrap_or(r);
    let body = body.strip_suffix('$').unwrap_or(body);
    if body.contains('|') {
        format!("^({body})$")
    } else {
        format!("^{body}$")
    }
}

/// Whatever no mapping took.
fn leftovers(cfg: &mut Cfg<'_>) {
    let keys: Vec<String> = cfg.map.keys().cloned().collect();
    for k in keys {
        let source_prefixes = [
            "schema.history.internal.",
            "schema.name.adjustment.mode",
            "database.",
            "topic.prefix",
            "topic.creation.",
            "snapshot.",
            "table.include.list",
            "plugin.name",
            "slot.name",
            "publication.",
        ];
        let reason = if source_prefixes.iter().any(|p| k.starts_with(p)) {
            SOURCE_SETTING
        } else if k.starts_with("transforms.") {
            "belongs to no transform listed in `transforms`"
        } else {
            "no lakesink equivalent"
        };
        cfg.drop(&k, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_are_anchored_whole() {
        assert_eq!(anchor("demo\\..*"), "^demo\\..*$");
        assert_eq!(anchor("^a.*$"), "^a.*$");
        assert_eq!(anchor("a|b"), "^(a|b)$");
    }
}
