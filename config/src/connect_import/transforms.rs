//! Single message transforms (only Debezium's unwrap SMT means something to lakesink) and
//! Connect's error handling keys.

use super::ImportError;
use toml::Value;

use super::cfg::{Cfg, Connector, Kind, NO_SMT, RETRIES, Section, last_segment, split_list};

const UNWRAP: &str = "io.debezium.transforms.ExtractNewRecordState";
/// Kafka Connect's field filter and renamer, on the record value.
const REPLACE_FIELD: &str = "org.apache.kafka.connect.transforms.ReplaceField$Value";
/// Kafka Connect's fixed and metadata fields, on the record value.
const INSERT_FIELD: &str = "org.apache.kafka.connect.transforms.InsertField$Value";
/// Kafka Connect's value masking, on the record value.
const MASK_FIELD: &str = "org.apache.kafka.connect.transforms.MaskField$Value";
/// Kafka Connect's record key from value fields.
const VALUE_TO_KEY: &str = "org.apache.kafka.connect.transforms.ValueToKey";
/// Kafka Connect's topic renamer, which names a JDBC sink's tables.
const REGEX_ROUTER: &str = "org.apache.kafka.connect.transforms.RegexRouter";
/// Apache Iceberg's Debezium SMT for its sink (and Tabular's before it): the row image at the
/// top level with a `_cdc` struct, lakesink's flattened rows but for the metadata columns.
const ICEBERG_DEBEZIUM: [&str; 2] = [
    "org.apache.iceberg.connect.transforms.DebeziumTransform",
    "io.tabular.iceberg.connect.transforms.DebeziumTransform",
];

/// The unwrap SMT's `drop.tombstones` (default true), when the connector applies it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unwrap {
    pub(super) drop_tombstones: bool,
    /// `delete.handling.mode = rewrite` (or `delete.tombstone.handling.mode = rewrite…`): a
    /// delete arrives as the row with `__deleted = "true"`, which a JDBC sink with deletes off
    /// keeps as a soft-deleted row.
    pub(super) rewrite: bool,
    /// Tombstones reach the sink after deletes (`drop.tombstones = false`, or
    /// `delete.tombstone.handling.mode = rewrite-with-tombstone`).
    pub(super) tombstones: bool,
    /// The transform's class name, for notes: `ExtractNewRecordState`, or `DebeziumTransform`
    /// (Apache Iceberg's, on an Iceberg sink).
    pub(super) smt: &'static str,
}

/// `transforms` and each listed transform's keys; the unwrap SMT and its alias, if listed (on
/// an Iceberg sink also Apache Iceberg's `DebeziumTransform`, which unwraps the same way).
/// `ReplaceField` and `InsertField` transforms become `[[columns]]` policies in `part`, a
/// JDBC sink's `ValueToKey` its key fields.
pub(super) fn transforms(cfg: &mut Cfg<'_>, part: &mut Connector) -> Option<(Unwrap, String)> {
    let kind = part.kind;
    let columns = &mut part.columns;
    let list = cfg.take("transforms").map(|t| split_list(&t))?;
    let unwraps =
        |ty: &str| ty == UNWRAP || (kind == Kind::Iceberg && ICEBERG_DEBEZIUM.contains(&ty));
    // Field transforms before the unwrap SMT see the envelope's fields (`before`, `source`),
    // not the row's columns: they are not carried.
    let unwrap_at = list.iter().position(|a| {
        cfg.map
            .get(&format!("transforms.{a}.type"))
            .is_some_and(|ty| unwraps(ty))
    });
    let mut unwrap = None;
    for (at, alias) in list.into_iter().enumerate() {
        let prefix = format!("transforms.{alias}.");
        let ty = cfg.take(&format!("{prefix}type")).unwrap_or_default();
        let envelope_level = unwrap_at.is_some_and(|u| at < u);
        // Mapped only as they apply to every record's row.
        let predicate = cfg.map.contains_key(&format!("{prefix}predicate")) || envelope_level;
        if envelope_level && (ty == REPLACE_FIELD || ty == INSERT_FIELD || ty == MASK_FIELD) {
            cfg.list_dropped(
                format!("{prefix}*"),
                format!(
                    "{}: before the unwrap SMT it names the envelope's fields, not the row's columns; write the [[columns]] policy by hand",
                    last_segment(&ty)
                ),
            );
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.map.remove(&k);
            }
            continue;
        }
        if ty == REPLACE_FIELD && !predicate {
            if let Some(policy) = replace_field(cfg, &prefix) {
                columns.push(policy);
            }
            continue;
        }
        if ty == REGEX_ROUTER
            && !predicate
            && kind.is_jdbc()
            && part.replica.get("topic-regex").is_none()
        {
            if let Some(regex) = cfg.take(&format!("{prefix}regex")) {
                let to = cfg
                    .take(&format!("{prefix}replacement"))
                    .unwrap_or_default();
                part.replica.set("topic-regex", regex);
                part.replica.set("topic-replacement", to);
            }
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.drop(&k, "not a RegexRouter option lakesink knows");
            }
            continue;
        }
        if ty == VALUE_TO_KEY && !predicate && kind.is_jdbc() {
            let fields = cfg.take(&format!("{prefix}fields")).unwrap_or_default();
            part.value_to_key = Some(split_list(&fields));
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.drop(&k, "not a ValueToKey option lakesink knows");
            }
            continue;
        }
        if ty == INSERT_FIELD && !predicate {
            if let Some(policy) = insert_field(cfg, &prefix) {
                columns.push(policy);
            }
            continue;
        }
        if ty == MASK_FIELD && !predicate {
            if let Some(policy) = mask_field(cfg, &prefix) {
                columns.push(policy);
            }
            continue;
        }
        if ICEBERG_DEBEZIUM.contains(&ty.as_str()) && unwraps(&ty) && !predicate {
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.drop(
                    &k,
                    "lakesink's flattened rows carry __op, __deleted and __source_ts_ms in place of the _cdc struct, and tables are named after the topic",
                );
            }
            unwrap = Some((
                Unwrap {
                    drop_tombstones: false,
                    rewrite: false,
                    tombstones: true,
                    smt: "DebeziumTransform",
                },
                alias,
            ));
            continue;
        }
        if ty != UNWRAP {
            let mut reason = format!("{}: {NO_SMT}", last_segment(&ty));
            if ty.contains("Router") {
                reason.push_str("; tables and paths are named after the topic as read");
            }
            cfg.list_dropped(format!("{prefix}*"), reason);
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.map.remove(&k);
            }
            continue;
        }
        let drop_tombstones = match cfg.take(&format!("{prefix}drop.tombstones")) {
            Some(v) => !v.trim().eq_ignore_ascii_case("false"),
            None => true,
        };
        let option = |k: &str| {
            cfg.map
                .get(&format!("{prefix}{k}"))
                .map(|v| v.trim().to_owned())
        };
        let legacy = option("delete.handling.mode");
        let mode = option("delete.tombstone.handling.mode");
        let rewrite = legacy.as_deref() == Some("rewrite")
            || mode.as_deref().is_some_and(|m| m.starts_with("rewrite"));
        let tombstones = match mode.as_deref() {
            Some(m) => m == "rewrite-with-tombstone" || m == "tombstone",
            None => !drop_tombstones,
        };
        unwrap_options(cfg, kind, &prefix);
        unwrap = Some((
            Unwrap {
                drop_tombstones,
                rewrite,
                tombstones,
                smt: "ExtractNewRecordState",
            },
            alias,
        ));
    }
    unwrap
}

/// A `ReplaceField$Value` transform's keys → a `[[columns]]` policy (every topic of the
/// connector: one lakesink config reads one connector's topics). `None` when it names nothing.
fn replace_field(cfg: &mut Cfg<'_>, prefix: &str) -> Option<Section> {
    let list = |cfg: &mut Cfg<'_>, keys: [&str; 2]| -> Vec<Value> {
        keys.iter()
            .filter_map(|k| cfg.take(&format!("{prefix}{k}")))
            .flat_map(|v| split_list(&v))
            .map(Value::String)
            .collect()
    };
    // `exclude`/`include` since Kafka 2.7; `blacklist`/`whitelist` before.
    let exclude = list(cfg, ["exclude", "blacklist"]);
    let include = list(cfg, ["include", "whitelist"]);
    let mut rename = toml::map::Map::new();
    for pair in cfg
        .take(&format!("{prefix}renames"))
        .map(|r| split_list(&r))
        .unwrap_or_default()
    {
        if let Some((from, to)) = pair.split_once(':') {
            rename.insert(from.trim().to_owned(), Value::String(to.trim().to_owned()));
        }
    }
    for k in cfg.keys_with_prefix(prefix) {
        cfg.drop(&k, "not a ReplaceField option lakesink knows");
    }
    let mut policy = Section::default();
    if !exclude.is_empty() {
        policy.set("exclude", Value::Array(exclude));
    }
    if !include.is_empty() {
        policy.set("include", Value::Array(include));
    }
    if !rename.is_empty() {
        policy.set("rename", Value::Table(rename));
    }
    (!policy.is_empty()).then_some(policy)
}

/// An `InsertField$Value` transform's keys → a `[[columns]]` policy adding the fixed value and
/// the record's coordinates and timestamp as columns.
fn insert_field(cfg: &mut Cfg<'_>, prefix: &str) -> Option<Section> {
    // A field name may end in `!` (required) or `?` (optional): lakesink's are optional.
    let mut take = |k: &str| {
        cfg.take(&format!("{prefix}{k}"))
            .map(|v| v.trim().trim_end_matches(['!', '?']).to_owned())
            .filter(|v| !v.is_empty())
    };
    let mut metadata = toml::map::Map::new();
    for (key, what) in [
        ("topic.field", "topic"),
        ("partition.field", "partition"),
        ("offset.field", "offset"),
        ("timestamp.field", "kafka-ts"),
    ] {
        if let Some(name) = take(key) {
            metadata.insert(what.to_owned(), Value::String(name));
        }
    }
    let mut fixed = toml::map::Map::new();
    if let (Some(name), Some(value)) = (take("static.field"), take("static.value")) {
        fixed.insert(name, Value::String(value));
    }
    for k in cfg.keys_with_prefix(prefix) {
        cfg.drop(&k, "not an InsertField option lakesink knows");
    }
    let mut policy = Section::default();
    if !fixed.is_empty() {
        policy.set("static", Value::Table(fixed));
    }
    if !metadata.is_empty() {
        policy.set("metadata", Value::Table(metadata));
    }
    (!policy.is_empty()).then_some(policy)
}

/// A `MaskField$Value` transform's keys → a `[[columns]]` policy masking the same fields with
/// the same replacement.
fn mask_field(cfg: &mut Cfg<'_>, prefix: &str) -> Option<Section> {
    let fields: Vec<Value> = cfg
        .take(&format!("{prefix}fields"))
        .map(|f| split_list(&f))
        .unwrap_or_default()
        .into_iter()
        .map(Value::String)
        .collect();
    let replacement = cfg.take(&format!("{prefix}replacement"));
    for k in cfg.keys_with_prefix(prefix) {
        cfg.drop(&k, "not a MaskField option lakesink knows");
    }
    if fields.is_empty() {
        return None;
    }
    let mut policy = Section::default();
    policy.set("mask", Value::Array(fields));
    if let Some(r) = replacement {
        policy.set("mask-replacement", Value::String(r));
    }
    Some(policy)
}

/// The unwrap SMT's other options: lakesink's own handling replaces them.
fn unwrap_options(cfg: &mut Cfg<'_>, kind: Kind, prefix: &str) {
    for k in cfg.keys_with_prefix(prefix) {
        let option = &k[prefix.len()..];
        // The delete handling of a JDBC sink's SMT: mapped by `jdbc`, with `delete.enabled`.
        let deletes = kind.is_jdbc()
            && (option == "delete.handling.mode" || option == "delete.tombstone.handling.mode");
        if deletes {
            cfg.map.remove(&k);
            continue;
        }
        let reason = if kind.is_jdbc() {
            "lakesink applies change events itself: replica tables hold the source's columns, deletes follow replica.delete-enabled"
        } else {
            "lakesink's flattened rows always carry __op, __deleted and __source_ts_ms, whatever the SMT's options"
        };
        cfg.drop(&k, reason);
    }
}

/// A field path as the S3 sink saw it (in the unwrapped row when the SMT ran) → a path in
/// the change event, as lakesink reads it.
pub(super) fn event_path(field: &str, unwrapped: bool) -> String {
    if !unwrapped {
        return field.to_owned();
    }
    match field {
        "__source_ts_ms" => "source.ts_ms".into(),
        "__ts_ms" => "ts_ms".into(),
        "__op" => "op".into(),
        f => match f.strip_prefix("__source_") {
            Some(s) => format!("source.{s}"),
            None => format!("after.{f}"),
        },
    }
}

/// `errors.*` → `[errors]`.
pub(super) fn errors(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    let tolerance = cfg.take("errors.tolerance");
    let dlq = cfg.take("errors.deadletterqueue.topic.name");
    match (tolerance.as_deref().map(str::trim), dlq) {
        (Some("all"), Some(topic)) if !topic.trim().is_empty() => {
            part.errors.set("tolerance", "all");
            part.errors.set("dead-letter-topic", topic);
            if let Some(h) = cfg.bool("errors.deadletterqueue.context.headers.enable")? {
                part.errors.set("dead-letter-context-headers", h);
            }
        }
        (Some("all"), _) => cfg.list_dropped(
            "errors.tolerance",
            "lakesink tolerates bad records only into a dead-letter topic (errors.dead-letter-topic), never by skipping them; without one it stops at the record, naming its topic, partition and offset",
        ),
        _ => {}
    }
    cfg.take("errors.deadletterqueue.context.headers.enable");
    cfg.take("errors.log.enable");
    if cfg.bool("errors.log.include.messages")? == Some(true) {
        cfg.list_dropped(
            "errors.log.include.messages",
            "lakesink logs a failing record's topic, partition and offset, never its contents",
        );
    }
    for k in cfg.keys_with_prefix("errors.deadletterqueue.") {
        cfg.drop(
            &k,
            "the dead-letter topic is created by the broker's defaults (auto.create.topics.enable) or beforehand",
        );
    }
    cfg.drop_set(
        &["errors.retry.timeout", "errors.retry.delay.max.ms"],
        RETRIES,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwrapped_fields_are_paths_in_the_event() {
        assert_eq!(event_path("region", true), "after.region");
        assert_eq!(event_path("__source_ts_ms", true), "source.ts_ms");
        assert_eq!(event_path("__source_db", true), "source.db");
        assert_eq!(event_path("source.ts_ms", false), "source.ts_ms");
    }
}
