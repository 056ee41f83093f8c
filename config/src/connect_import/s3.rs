//! The Confluent S3 sink → `[raw]`, `[raw.store]` and `[raw.store.options]`.

use toml::Value;

use super::ImportError;
use super::cfg::{Cfg, Connector, RETRIES, has_provider_reference, last_segment, split_list};
use super::transforms::{Unwrap, event_path};

const PARTITIONER_PKG: &str = "io.confluent.connect.storage.partitioner.";

/// The partitioners with a fixed path format and duration.
const FIXED_PARTITIONERS: [(&str, &str, i64); 2] = [
    (
        "HourlyPartitioner",
        "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
        3_600_000,
    ),
    (
        "DailyPartitioner",
        "'year'=YYYY/'month'=MM/'day'=dd",
        86_400_000,
    ),
];

/// Connect keys carried as they are into `[raw.store.options]` when not empty.
const STORE_OPTIONS: [(&str, &str); 2] = [
    ("s3.ssea.name", "aws_server_side_encryption"),
    ("s3.sse.kms.key.id", "aws_sse_kms_key_id"),
];

/// Keys lakesink has no use for, and why.
const NOT_CARRIED: [(&[&str], &str); 3] = [
    (
        &["s3.credentials.provider.class"],
        "lakesink takes S3 credentials from raw.store or the AWS environment and instance-metadata chain",
    ),
    (
        &["s3.part.retries", "s3.retry.backoff.ms", "retry.backoff.ms"],
        RETRIES,
    ),
    (
        &[
            "s3.elastic.buffer.enable",
            "s3.elastic.buffer.init.capacity",
        ],
        "lakesink streams row groups into parts; memory is bounded by raw.memory-budget-bytes",
    ),
];

pub(super) fn s3(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    unwrap: Option<(Unwrap, String)>,
) -> Result<(), ImportError> {
    let bucket = cfg
        .plain("s3.bucket.name")
        .ok_or_else(|| cfg.err("no `s3.bucket.name`"))?;
    part.raw.set("url", format!("s3://{bucket}"));
    if let Some(dir) = cfg.plain("topics.dir")
        && dir != "topics"
    {
        part.raw.set("topics-dir", dir);
    }
    key_layout(cfg, part)?;
    let time = partitioner(cfg, part);
    let unwrapped = unwrap.is_some();
    partition_settings(cfg, part, unwrapped)?;
    timestamp(cfg, part, time, unwrapped);
    rotation(cfg, part, time)?;
    content(cfg, part, unwrap.as_ref());
    format(cfg, part)?;
    store(cfg, part)?;
    not_carried(cfg)
}

/// The key layout: delimiters and the offset's padding.
fn key_layout(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    let dir_delim = cfg.plain("directory.delim").unwrap_or_else(|| "/".into());
    let file_delim = cfg.plain("file.delim").unwrap_or_else(|| "+".into());
    let pad = cfg.int("filename.offset.zero.pad.width")?.unwrap_or(10);
    if dir_delim != "/" || file_delim != "+" || pad != 10 {
        let offset = if pad == 10 {
            "{start-offset}".to_owned()
        } else {
            format!("{{start-offset:{pad}}}")
        };
        part.raw.set(
            "file-key",
            format!(
                "{{topics-dir}}{d}{{topic}}{d}{{encoded}}{d}{{topic}}{f}{{partition}}{f}{offset}{{ext}}",
                d = dir_delim,
                f = file_delim
            ),
        );
    }
    Ok(())
}

/// `partitioner.class` → `raw.partitioner`; whether it partitions by time.
fn partitioner(cfg: &mut Cfg<'_>, part: &mut Connector) -> bool {
    let partitioner = cfg.plain("partitioner.class");
    let short = partitioner
        .as_deref()
        .map(|p| p.trim_start_matches(PARTITIONER_PKG));
    match short {
        None | Some("DefaultPartitioner") => false,
        Some("TimeBasedPartitioner") => {
            part.raw.set("partitioner", "time");
            true
        }
        Some("FieldPartitioner") => {
            part.raw.set("partitioner", "field");
            false
        }
        Some(short) => {
            if let Some((fixed, format, ms)) = FIXED_PARTITIONERS
                .iter()
                .find(|(name, _, _)| *name == short)
            {
                part.raw.set("partitioner", "time");
                part.raw.set("path-format", *format);
                part.raw.set("partition-duration-ms", *ms);
                let reason = format!("ignored by {fixed}, which has its own");
                cfg.drop_set(&["path.format", "partition.duration.ms"], &reason);
                return true;
            }
            let class = partitioner.clone().unwrap_or_default();
            cfg.list_dropped(
                "partitioner.class",
                format!(
                    "{class}: a custom partitioner; lakesink has default, time and field partitioners (the default one is used)"
                ),
            );
            false
        }
    }
}

/// The partitioners' settings: path format, duration, fields, time zone and locale.
fn partition_settings(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    unwrapped: bool,
) -> Result<(), ImportError> {
    if let Some(f) = cfg.plain("path.format") {
        part.raw
            .set("path-format", f.trim_end_matches('/').to_owned());
    }
    if let Some(ms) = cfg.int("partition.duration.ms")?
        && ms > 0
    {
        part.raw.set("partition-duration-ms", ms);
    }
    if let Some(fields) = cfg.plain("partition.field.name") {
        let fields: Vec<Value> = split_list(&fields)
            .iter()
            .map(|f| Value::String(event_path(f, unwrapped)))
            .collect();
        part.raw.set("partition-fields", Value::Array(fields));
    }
    if let Some(tz) = cfg.plain("timezone")
        && !tz.is_empty()
        && tz != "UTC"
    {
        part.raw.set("timezone", tz);
    }
    if let Some(locale) = cfg.plain("locale")
        && !locale.is_empty()
    {
        if !locale.to_ascii_lowercase().starts_with("en") {
            cfg.note(format!(
                "{}: locale {locale}: lakesink writes month and day names (MMM, EEE) in English only; numeric path formats are unaffected",
                cfg.file
            ));
        }
        part.raw.set("locale", locale);
    }
    Ok(())
}

/// `timestamp.extractor` and `timestamp.field` → `raw.timestamp`, `raw.timestamp-field`.
fn timestamp(cfg: &mut Cfg<'_>, part: &mut Connector, time: bool, unwrapped: bool) {
    let extractor = cfg.plain("timestamp.extractor");
    match extractor.as_deref() {
        // Connect's default is the wall clock.
        None if time => part.raw.set("timestamp", "wallclock"),
        None => {}
        Some("Wallclock") => part.raw.set("timestamp", "wallclock"),
        Some("Record") => part.raw.set("timestamp", "record"),
        Some("RecordField") => {
            part.raw.set("timestamp", "field");
            let field = cfg
                .plain("timestamp.field")
                .unwrap_or_else(|| "timestamp".into());
            part.raw
                .set("timestamp-field", event_path(&field, unwrapped));
        }
        Some(other) => cfg.list_dropped(
            "timestamp.extractor",
            format!(
                "{other}: a custom extractor; lakesink has Record, RecordField and Wallclock (Record is used)"
            ),
        ),
    }
    cfg.drop_set(
        &["timestamp.field"],
        "only read with timestamp.extractor = RecordField",
    );
}

/// When a file is closed: `flush.size`, `rotate.interval.ms`, `rotate.schedule.interval.ms`.
fn rotation(cfg: &mut Cfg<'_>, part: &mut Connector, time: bool) -> Result<(), ImportError> {
    if let Some(n) = cfg.int("flush.size")? {
        if n < 1 {
            return Err(cfg.err(format!("`flush.size` = {n}: must be at least 1")));
        }
        part.raw.set("flush-size", n);
    }
    if let Some(ms) = cfg.int("rotate.interval.ms")?
        && ms > 0
    {
        part.raw.set("rotate-interval-ms", ms);
        if !time {
            cfg.note(format!(
                "{}: rotate.interval.ms is ignored by the S3 sink without a time-based partitioner; lakesink applies it (rotate-interval-ms)",
                cfg.file
            ));
        }
    }
    if let Some(ms) = cfg.int("rotate.schedule.interval.ms")?
        && ms > 0
    {
        part.raw.set("rotate-schedule-interval-ms", ms);
    }
    Ok(())
}

/// What a row holds: the unwrap SMT → flattened rows; tombstones kept or skipped.
fn content(cfg: &mut Cfg<'_>, part: &mut Connector, unwrap: Option<&(Unwrap, String)>) {
    if let Some((u, alias)) = unwrap {
        part.raw.set("content", "flattened");
        cfg.note(format!(
            "{}: transforms.{alias} (ExtractNewRecordState) → raw.content = \"flattened\": the row image as columns, with __op, __deleted and __source_ts_ms",
            cfg.file
        ));
        if u.drop_tombstones {
            part.raw.set("tombstones", "skip");
        }
    }
    match cfg
        .plain("behavior.on.null.values")
        .as_deref()
        .map(str::to_ascii_lowercase)
    {
        None => {}
        Some(b) if b == "ignore" => part.raw.set("tombstones", "skip"),
        Some(b) if b == "write" && part.raw.get("tombstones").is_none() => {
            part.raw.set("tombstones", "keep");
        }
        Some(b) if b == "write" => {}
        Some(_) => cfg.list_dropped(
            "behavior.on.null.values",
            "lakesink never stops at a tombstone: it writes it as a key-only row (tombstones = \"keep\") or skips it (\"skip\")",
        ),
    }
}

/// The file format and how it is written: format, codec, part size, schema projection and
/// storage.
fn format(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    match cfg.plain("format.class") {
        None => {}
        Some(f) if f.ends_with("ParquetFormat") => {}
        Some(f) => cfg.list_dropped(
            "format.class",
            format!("{}: lakesink writes Parquet only", last_segment(&f)),
        ),
    }
    if let Some(codec) = cfg.plain("parquet.codec") {
        match codec.to_ascii_lowercase().as_str() {
            c @ ("snappy" | "gzip" | "zstd" | "lz4") => {
                if c != "snappy" {
                    part.raw.set("codec", c);
                }
            }
            "none" | "uncompressed" => part.raw.set("codec", "none"),
            other => cfg.list_dropped(
                "parquet.codec",
                format!(
                    "{other}: lakesink writes snappy, gzip, zstd, lz4 or none (snappy is used)"
                ),
            ),
        }
    }
    if let Some(p) = cfg.int("s3.part.size")? {
        part.raw.set("part-size-bytes", p);
    }
    match cfg.plain("schema.compatibility").as_deref() {
        None | Some("NONE") => {}
        Some(c) => cfg.list_dropped(
            "schema.compatibility",
            format!(
                "{c}: lakesink never projects records to another schema version; each writer schema gets its own file in a segment"
            ),
        ),
    }
    match cfg.plain("storage.class") {
        None => {}
        Some(s) if s.ends_with("S3Storage") => {}
        Some(s) => cfg.list_dropped(
            "storage.class",
            format!("{s}: lakesink writes to S3 through its own client"),
        ),
    }
    Ok(())
}

/// The object store: region, endpoint, addressing, credentials, encryption.
fn store(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    match cfg.plain("s3.region") {
        Some(r) => part.store.set("region", r),
        // The S3 sink's default.
        None => part.store.set("region", "us-west-2"),
    }
    if let Some(url) = cfg.plain("store.url") {
        if url.starts_with("http://") {
            part.store.set("endpoint", url);
            part.store.set("allow-http", true);
        } else {
            part.store.set("endpoint", url);
        }
    }
    if cfg.bool("s3.path.style.access.enabled")? == Some(false) {
        part.store.set("virtual-hosted", true);
    }
    if let Some(id) = cfg.take("aws.access.key.id") {
        if has_provider_reference(&id) {
            cfg.list_dropped(
                "aws.access.key.id",
                "a config-provider reference: set raw.store.access-key-id (or LAKESINK__RAW__STORE__ACCESS_KEY_ID)",
            );
        } else {
            part.store.set("access-key-id", id);
        }
    }
    if let Some(s) = cfg.take("aws.secret.access.key") {
        let r = cfg.secret(
            "aws.secret.access.key",
            &s,
            "LAKESINK_RAW_SECRET_ACCESS_KEY",
            "raw.store.secret-access-key",
        );
        part.store.set("secret-access-key", r);
    }
    for (key, option) in STORE_OPTIONS {
        if let Some(v) = cfg.plain(key)
            && !v.is_empty()
        {
            part.store_options.set(option, v);
        }
    }
    Ok(())
}

/// Keys lakesink does not carry: sidecar files, compression Parquet ignores, and the rest of
/// [`NOT_CARRIED`].
fn not_carried(cfg: &mut Cfg<'_>) -> Result<(), ImportError> {
    for (keys, reason) in NOT_CARRIED {
        cfg.drop_set(keys, reason);
    }
    for k in ["store.kafka.keys", "store.kafka.headers"] {
        if cfg.bool(k)? == Some(true) {
            cfg.list_dropped(
                k,
                "no sidecar files: the key is a column of every row (content = \"envelope\"), headers are not stored",
            );
        }
    }
    if let Some(c) = cfg.plain("s3.compression.type")
        && c != "none"
    {
        cfg.list_dropped(
            "s3.compression.type",
            "ignored by the S3 sink for Parquet (parquet.codec compresses)",
        );
    }
    Ok(())
}
