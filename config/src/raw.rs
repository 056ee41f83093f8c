//! `[raw]`: the raw layer, Parquet files on an object store. Names and defaults follow the
//! Kafka Connect S3 sink where it has the same setting (its name is given in each doc).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{ConfigError, Secret};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RawConfig {
    /// Where files go: `s3://bucket/prefix`, `file:///path`, `gs://…`, `az://…`.
    pub url: String,
    /// Object store connection settings.
    #[serde(default)]
    pub store: StoreConfig,
    /// The first path segment of data files (`topics.dir`); empty for none.
    #[serde(default = "default_topics_dir")]
    pub topics_dir: String,
    /// The object key of a file. Placeholders: `{topics-dir}`, `{topic}`, `{encoded}` (the
    /// partitioner's path), `{partition}`, `{start-offset}` (10 digits, zero padded, as
    /// Confluent's `filename.offset.zero.pad.width`) or `{start-offset:N}`, `{ext}`.
    #[serde(default = "default_file_key")]
    pub file_key: String,
    #[serde(default)]
    pub partitioner: PartitionerKind,
    /// `path.format`: a Joda-Time pattern such as `'dt'=yyyy-MM-dd/'hour'=HH` (time partitioner).
    pub path_format: Option<String>,
    /// `partition.duration.ms` (time partitioner).
    pub partition_duration_ms: Option<u64>,
    /// `timezone`: an IANA zone name or `UTC`; also aligns `rotate-schedule-interval-ms`.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// `locale`: only matters for month and day names; English is supported.
    #[serde(default = "default_locale")]
    pub locale: String,
    /// `timestamp.extractor`: where the time of a record comes from.
    #[serde(default)]
    pub timestamp: TimestampSource,
    /// `timestamp.field` for `timestamp = "field"`: a dotted path in the change event, such as
    /// `source.ts_ms` or `after.updated_at`.
    pub timestamp_field: Option<String>,
    /// `partition.field.name` for the field partitioner: dotted paths in the change event.
    #[serde(default)]
    pub partition_fields: Vec<String>,
    /// `flush.size`: records per Kafka partition before its files are closed.
    #[serde(default = "default_flush_size")]
    pub flush_size: u64,
    /// `rotate.interval.ms`: close when the record time spanned by the open files reaches this;
    /// also closes the files of a partition that received nothing for this long.
    pub rotate_interval_ms: Option<u64>,
    /// `rotate.schedule.interval.ms`: close on wall-clock boundaries aligned in `timezone`.
    pub rotate_schedule_interval_ms: Option<u64>,
    /// Close when a Kafka partition's open files hold this many bytes (encoded).
    pub max_file_bytes: Option<u64>,
    /// What a row holds: the full change event, or the row image for analytics.
    #[serde(default)]
    pub content: Content,
    /// Tombstones: kept as key-only rows marked `__tombstone`, or skipped.
    #[serde(default)]
    pub tombstones: Tombstones,
    /// Add the Kafka record headers as a `__headers` column (list of key/value structs).
    #[serde(default)]
    pub headers: bool,
    /// `parquet.codec`.
    #[serde(default)]
    pub codec: Codec,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// The memory all open files may hold; past it the largest is closed early.
    #[serde(default = "default_memory_budget")]
    pub memory_budget_bytes: u64,
    /// Files larger than this are uploaded in parts of this size (`s3.part.size`, min 5 MiB).
    #[serde(default = "default_part_size")]
    pub part_size_bytes: usize,
    /// Files uploaded at once.
    #[serde(default = "default_upload_concurrency")]
    pub upload_concurrency: usize,
    /// Where the segment markers that make cuts reproducible live, under the store root.
    #[serde(default = "default_marker_prefix")]
    pub marker_prefix: String,
}

/// Settings for the object store, beside what the URL says.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StoreConfig {
    /// S3-compatible endpoint, e.g. `http://127.0.0.1:8333` for MinIO or SeaweedFS.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<Secret>,
    /// Allow `http://` endpoints.
    #[serde(default)]
    pub allow_http: bool,
    /// Virtual-hosted-style requests (`bucket.host`); path style by default, as MinIO needs.
    #[serde(default)]
    pub virtual_hosted: bool,
    /// Any other `object_store` option (`aws_session_token`, `google_service_account`, …).
    #[serde(default)]
    pub options: BTreeMap<String, Secret>,
    /// How long one request is retried by the store client before the raw layer counts the
    /// store as unavailable (it then lets go and probes; see docs/operations.md). Default
    /// [`DEFAULT_STORE_RETRY_TIMEOUT_MS`].
    #[serde(default)]
    pub retry_timeout_ms: Option<u64>,
}

pub const DEFAULT_STORE_RETRY_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionerKind {
    /// `partition=<kafka partition>`.
    #[default]
    Default,
    /// `path-format` over the record time, bucketed by `partition-duration-ms`.
    Time,
    /// `name=value` per `partition-fields`.
    Field,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampSource {
    /// The Kafka record's timestamp (Confluent's `Record`).
    #[default]
    Record,
    /// A field of the change event (`RecordField`).
    Field,
    /// The time the file set was opened (`Wallclock`); recorded, so replays agree.
    Wallclock,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Content {
    /// key, before, after, source, op, ts_ms, transaction and the Kafka coordinates.
    #[default]
    Envelope,
    /// The `after` image (`before` for deletes) as columns, with `__op`, `__deleted`,
    /// `__source_ts_ms` and the Kafka coordinates.
    Flattened,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tombstones {
    #[default]
    Keep,
    Skip,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Codec {
    None,
    #[default]
    Snappy,
    Zstd,
    Gzip,
    Lz4,
}

fn default_topics_dir() -> String {
    "topics".into()
}
fn default_file_key() -> String {
    "{topics-dir}/{topic}/{encoded}/{topic}+{partition}+{start-offset}{ext}".into()
}
fn default_timezone() -> String {
    "UTC".into()
}
fn default_locale() -> String {
    "en".into()
}
fn default_flush_size() -> u64 {
    100_000
}
fn default_row_group_rows() -> usize {
    128 * 1024
}
fn default_memory_budget() -> u64 {
    512 * 1024 * 1024
}
fn default_part_size() -> usize {
    16 * 1024 * 1024
}
fn default_upload_concurrency() -> usize {
    8
}
fn default_marker_prefix() -> String {
    "_lakesink/segments".into()
}

const MIN_PART: usize = 5 * 1024 * 1024;

/// The schemes the raw layer writes to, and an example of each.
const STORES: [(&str, &str); 8] = [
    ("s3", "s3://bucket/prefix"),
    ("s3a", "s3a://bucket/prefix"),
    ("gs", "gs://bucket/prefix"),
    ("az", "az://container/prefix"),
    (
        "abfs",
        "abfs://container@account.dfs.core.windows.net/prefix",
    ),
    (
        "abfss",
        "abfss://container@account.dfs.core.windows.net/prefix",
    ),
    ("file", "file:///var/lib/lakesink/raw"),
    ("memory", "memory://"),
];

/// `raw.url` names a store lakesink writes to, with a bucket where one is needed: checked at
/// load, so `s3:/bucket` fails here rather than at the first file.
fn check_url(url: &str) -> Result<(), ConfigError> {
    let examples = || {
        STORES
            .iter()
            .filter(|(s, _)| ["s3", "gs", "az", "file"].contains(s))
            .map(|(_, e)| *e)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bad = |reason: String| {
        Err(ConfigError::Invalid {
            field: "raw.url",
            reason,
        })
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(format!("`{url}` is not a URL ({})", examples()));
    };
    if !STORES.iter().any(|(s, _)| *s == scheme) {
        return bad(format!(
            "`{url}`: lakesink writes to {} ({})",
            STORES.map(|(s, _)| s).join(", "),
            examples()
        ));
    }
    let bucket = rest.split('/').next().unwrap_or("");
    if !["file", "memory"].contains(&scheme) && bucket.is_empty() {
        return bad(format!(
            "`{url}` names no bucket (e.g. {scheme}://bucket/prefix)"
        ));
    }
    Ok(())
}

impl RawConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        check_url(&self.url)?;
        if self.flush_size == 0 {
            return invalid("raw.flush-size", "must be at least 1");
        }
        if self.part_size_bytes < MIN_PART {
            return invalid(
                "raw.part-size-bytes",
                "S3 parts are at least 5 MiB (5242880)",
            );
        }
        if self.row_group_rows == 0 || self.upload_concurrency == 0 {
            return invalid(
                "raw.row-group-rows",
                "row-group-rows and upload-concurrency must be at least 1",
            );
        }
        for needed in ["{topic}", "{partition}", "{start-offset"] {
            if !self.file_key.contains(needed) {
                return Err(ConfigError::Invalid {
                    field: "raw.file-key",
                    reason: format!("must contain {needed}…: without it two files can share a key"),
                });
            }
        }
        match self.partitioner {
            PartitionerKind::Time => {
                if self.path_format.as_deref().unwrap_or("").is_empty() {
                    return invalid(
                        "raw.path-format",
                        "the time partitioner needs a path format",
                    );
                }
                if self.partition_duration_ms.unwrap_or(0) == 0 {
                    return invalid(
                        "raw.partition-duration-ms",
                        "the time partitioner needs a duration above 0",
                    );
                }
            }
            PartitionerKind::Field if self.partition_fields.is_empty() => {
                return invalid("raw.partition-fields", "the field partitioner needs fields");
            }
            _ => {}
        }
        if self.timestamp == TimestampSource::Field && self.timestamp_field.is_none() {
            return invalid("raw.timestamp-field", "needed with timestamp = \"field\"");
        }
        if self.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err(ConfigError::Invalid {
                field: "raw.timezone",
                reason: format!("{:?} is not an IANA time zone name", self.timezone),
            });
        }
        if self.rotate_interval_ms == Some(0) || self.rotate_schedule_interval_ms == Some(0) {
            return invalid("raw.rotate-interval-ms", "intervals must be above 0");
        }
        Ok(())
    }
}
