//! The `[[columns]]` policies, applied to each decoded batch once, before any sink sees it: the
//! raw layer and the replica hold the same columns. Fields of the key record and of the row
//! images (`before` and `after`; a flattened record's `after`) are excluded, kept, renamed,
//! replaced by their keyed hash or masked, and fixed values and record metadata are added to the row
//! images; the envelope's other columns are left alone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use anyhow::Context;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    Array, ArrayRef, Int32Array, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema};
use hmac::{Hmac, KeyInit, Mac};
use lakesink_config::{ColumnPolicy, Metadata};
use lakesink_schema_registry::ChangeBatch;
use regex::Regex;
use sha2::Sha256;

/// Debezium's parameter naming the source column a field holds; a renamed field's is renamed.
const SOURCE_NAME: &str = "__debezium.source.column.name";

struct Policy {
    topics: Option<Regex>,
    exclude: HashSet<String>,
    include: HashSet<String>,
    rename: HashMap<String, String>,
    hash: HashSet<String>,
    key: Vec<u8>,
    mask: HashSet<String>,
    mask_replacement: Option<String>,
    static_columns: Vec<(String, String)>,
    metadata: Vec<(Metadata, String)>,
}

/// The compiled policies.
pub(crate) struct Columns {
    policies: Vec<Policy>,
}

impl Columns {
    /// `None` when there are none. `topics`: the configured topic list (empty with a regex
    /// subscription); a policy matching none of them is an error, as a misspelt pattern would
    /// leave the columns it is for in every sink.
    pub(crate) fn new(
        config: &[ColumnPolicy],
        topics: &[String],
    ) -> anyhow::Result<Option<Arc<Self>>> {
        if config.is_empty() {
            return Ok(None);
        }
        let config_topics = topics;
        let mut policies = Vec::new();
        for (i, p) in config.iter().enumerate() {
            let topics = p
                .topics
                .as_deref()
                .map(|t| Regex::new(&format!("^(?:{t})$")))
                .transpose()
                .with_context(|| format!("[[columns]] #{}: topics is not a regex", i + 1))?;
            if let Some(r) = &topics
                && !config_topics.is_empty()
                && !config_topics.iter().any(|t| r.is_match(t))
            {
                anyhow::bail!(
                    "[[columns]] #{}: topics = {:?} matches none of kafka.topics ({}): the policy would never apply; mend the pattern",
                    i + 1,
                    p.topics.as_deref().unwrap_or_default(),
                    config_topics.join(", ")
                );
            }
            let set = |v: &[String]| v.iter().cloned().collect::<HashSet<_>>();
            policies.push(Policy {
                topics,
                exclude: set(&p.exclude),
                include: set(&p.include),
                rename: p.rename.clone().into_iter().collect(),
                hash: set(&p.hash),
                mask: set(&p.mask),
                mask_replacement: p.mask_replacement.clone(),
                key: p
                    .hash_key
                    .as_ref()
                    .map(|k| k.expose().as_bytes().to_vec())
                    .unwrap_or_default(),
                static_columns: p.static_columns.clone().into_iter().collect(),
                metadata: p.metadata.clone().into_iter().collect(),
            });
        }
        Ok(Some(Arc::new(Self { policies })))
    }

    /// `batch` with every policy matching its topic applied, in order.
    pub(crate) fn apply(&self, mut batch: ChangeBatch) -> anyhow::Result<ChangeBatch> {
        for p in self
            .policies
            .iter()
            .filter(|p| p.topics.as_ref().is_none_or(|r| r.is_match(&batch.topic)))
        {
            batch.rows = p.apply(&batch).with_context(|| {
                format!(
                    "{}[{}] offsets {}..={}: [[columns]]",
                    batch.topic, batch.partition, batch.first_offset, batch.last_offset
                )
            })?;
        }
        Ok(batch)
    }
}

impl Policy {
    fn apply(&self, batch: &ChangeBatch) -> anyhow::Result<RecordBatch> {
        let rows = &batch.rows;
        let schema = rows.schema();
        let key_fields: HashSet<String> = rows
            .column_by_name("key")
            .and_then(|k| k.as_struct_opt())
            .map(|k| k.fields().iter().map(|f| f.name().clone()).collect())
            .unwrap_or_default();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (f, c) in schema.fields().iter().zip(rows.columns()) {
            let image = matches!(f.name().as_str(), "before" | "after");
            let (f, c) = match c.as_struct_opt() {
                Some(s) if image => self.image(f, s, &key_fields)?,
                Some(s) if f.name() == "key" => self.key(f, s)?,
                _ => (f.as_ref().clone(), c.clone()),
            };
            let (f, c) = match c.as_struct_opt() {
                // Both images, so that they keep one type (a delete's before image is its
                // row in the raw layer and the history).
                Some(s) if image && self.adds() => self.add(&f, s, batch)?,
                _ => (f, c),
            };
            fields.push(f);
            columns.push(c);
        }
        let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    }

    /// The key record: renamed and hashed like the images, so its fields still name the
    /// images' columns; a key field is never left out (the replica keys rows by it).
    fn key(&self, field: &Field, s: &StructArray) -> anyhow::Result<(Field, ArrayRef)> {
        if let Some(f) = s
            .fields()
            .iter()
            .find(|f| self.exclude.contains(f.name()) || self.mask.contains(f.name()))
        {
            anyhow::bail!(
                "column `{}` is in the record key: it cannot be excluded or masked (rows are keyed by it); hash it instead",
                f.name()
            );
        }
        self.rebuild(field, s, |_| true)
    }

    fn image(
        &self,
        field: &Field,
        s: &StructArray,
        key_fields: &HashSet<String>,
    ) -> anyhow::Result<(Field, ArrayRef)> {
        self.rebuild(field, s, |name| {
            // A flattened record's metadata (`__op`, `__deleted`) stays unless named.
            let meta = name.starts_with("__");
            if self.exclude.contains(name) {
                false
            } else if self.include.is_empty() {
                true
            } else {
                self.include.contains(name) || key_fields.contains(name) || meta
            }
        })
    }

    /// `s` with the fields `keep` says, renamed and hashed.
    fn rebuild(
        &self,
        field: &Field,
        s: &StructArray,
        keep: impl Fn(&str) -> bool,
    ) -> anyhow::Result<(Field, ArrayRef)> {
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        for (f, a) in s.fields().iter().zip(s.columns()) {
            if !keep(f.name()) {
                continue;
            }
            let (mut f, mut a) = (f.as_ref().clone(), a.clone());
            if self.hash.contains(f.name()) {
                a = self.hashed(f.name(), &a)?;
                f = hashed_field(&f);
            }
            if self.mask.contains(f.name()) {
                a = masked(f.name(), &a, self.mask_replacement.as_deref())?;
            }
            if let Some(to) = self.rename.get(f.name()) {
                f = renamed(&f, to);
            }
            fields.push(f);
            arrays.push(a);
        }
        let s = StructArray::try_new(Fields::from(fields), arrays, s.nulls().cloned())?;
        let field = Field::new(field.name(), s.data_type().clone(), field.is_nullable())
            .with_metadata(field.metadata().clone());
        Ok((field, Arc::new(s)))
    }

    fn adds(&self) -> bool {
        !self.static_columns.is_empty() || !self.metadata.is_empty()
    }

    /// A row image with the fixed values and the metadata added as columns.
    fn add(
        &self,
        field: &Field,
        s: &StructArray,
        batch: &ChangeBatch,
    ) -> anyhow::Result<(Field, ArrayRef)> {
        let n = s.len();
        let (fields, mut arrays, nulls) = s.clone().into_parts();
        let mut fields: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
        let mut put = |name: &str, a: ArrayRef| -> anyhow::Result<()> {
            if fields.iter().any(|f| f.name() == name) {
                anyhow::bail!(
                    "the record already has a column `{name}`: name the added column otherwise"
                );
            }
            fields.push(column(name, a.data_type().clone()));
            arrays.push(a);
            Ok(())
        };
        for (name, value) in &self.static_columns {
            put(
                name,
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(value, n))),
            )?;
        }
        let rows = &batch.rows;
        let col = |name: &str| {
            rows.column_by_name(name)
                .cloned()
                .with_context(|| format!("the batch has no {name} column"))
        };
        let now_us = chrono::Utc::now().timestamp_micros();
        for (what, name) in &self.metadata {
            let a: ArrayRef = match what {
                Metadata::Op => col("__op")?,
                Metadata::Topic => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                    &*batch.topic,
                    n,
                ))),
                Metadata::Partition => Arc::new(Int32Array::from_value(batch.partition, n)),
                Metadata::Offset => col("__offset")?,
                Metadata::KafkaTs => col("__timestamp")?,
                Metadata::SourceTs => Arc::new(source_ts(rows, s)),
                Metadata::UpdatedAt => {
                    Arc::new(TimestampMicrosecondArray::from_value(now_us, n).with_timezone("UTC"))
                }
            };
            put(name, a)?;
        }
        let s = StructArray::try_new(Fields::from(fields), arrays, nulls)?;
        let field = Field::new(field.name(), s.data_type().clone(), field.is_nullable())
            .with_metadata(field.metadata().clone());
        Ok((field, Arc::new(s)))
    }

    /// HMAC-SHA-256 of each value's bytes (text as UTF-8, binary as is, integers and decimals
    /// as their decimal text), lower-case hex; nulls stay null.
    fn hashed(&self, name: &str, a: &ArrayRef) -> anyhow::Result<ArrayRef> {
        let mac = Hmac::<Sha256>::new_from_slice(&self.key)
            .map_err(|e| anyhow::anyhow!("hash-key: {e}"))?;
        let digest = |bytes: &[u8]| {
            let mut m = mac.clone();
            m.update(bytes);
            hex(&m.finalize().into_bytes())
        };
        let out: StringArray = match a.data_type() {
            DataType::Utf8 => a
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(|s| digest(s.as_bytes())))
                .collect(),
            DataType::LargeUtf8 => a
                .as_string::<i64>()
                .iter()
                .map(|v| v.map(|s| digest(s.as_bytes())))
                .collect(),
            DataType::Binary => a.as_binary::<i32>().iter().map(|v| v.map(digest)).collect(),
            DataType::LargeBinary => a.as_binary::<i64>().iter().map(|v| v.map(digest)).collect(),
            t if t.is_integer()
                || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) =>
            {
                let text = arrow_cast::cast(a, &DataType::Utf8)?;
                text.as_string::<i32>()
                    .iter()
                    .map(|v| v.map(|s| digest(s.as_bytes())))
                    .collect()
            }
            t => anyhow::bail!(
                "column `{name}` is {t}: hash applies to text, binary, integer and decimal columns"
            ),
        };
        Ok(Arc::new(out))
    }
}

/// `a` with each value replaced (Kafka Connect's `MaskField`): by `with`, text read as the
/// column's type, else by the type's empty value (0, `""`, empty bytes, false, the epoch);
/// nulls stay null.
fn masked(name: &str, a: &ArrayRef, with: Option<&str>) -> anyhow::Result<ArrayRef> {
    use arrow_array::{BinaryArray, BooleanArray, Int32Array, UInt32Array};
    let ty = a.data_type();
    let strict = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = |from: ArrayRef| arrow_cast::cast_with_options(&from, ty, &strict);
    let one = match (with, ty) {
        (Some(text), _) => cast(Arc::new(StringArray::from(vec![text]))).with_context(|| {
            format!("column `{name}` is {ty}: mask-replacement {text:?} is not a value of it")
        })?,
        (None, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {
            cast(Arc::new(StringArray::from(vec![""])))?
        }
        (None, DataType::Binary | DataType::LargeBinary | DataType::BinaryView) => {
            cast(Arc::new(BinaryArray::from(vec![&b""[..]])))?
        }
        (None, DataType::Boolean) => Arc::new(BooleanArray::from(vec![false])),
        (None, DataType::Date32 | DataType::Time32(_)) => {
            cast(Arc::new(Int32Array::from(vec![0])))?
        }
        (None, t) if t.is_numeric() || t.is_temporal() => {
            cast(Arc::new(arrow_array::Int64Array::from(vec![0])))?
        }
        (None, t) => anyhow::bail!(
            "column `{name}` is {t}: mask applies to text, binary, numeric, boolean, date and time columns"
        ),
    };
    let copies = arrow_select::take::take(&one, &UInt32Array::from(vec![0u32; a.len()]), None)?;
    let data = copies
        .to_data()
        .into_builder()
        .nulls(a.nulls().cloned())
        .build()?;
    Ok(arrow_array::make_array(data))
}

/// When each change happened at the source, µs: the envelope's `source.ts_us` or `ts_ms`, a
/// flattened record's `__source_ts_us` or `__source_ts_ms` (`add.fields`).
fn source_ts(rows: &RecordBatch, after: &StructArray) -> TimestampMicrosecondArray {
    let source = rows
        .column_by_name("source")
        .and_then(|s| s.as_struct_opt());
    let int = |s: Option<&StructArray>, name: &str| {
        s.and_then(|s| s.column_by_name(name))
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .cloned()
    };
    let (us, ms) = match source {
        Some(s) => (int(Some(s), "ts_us"), int(Some(s), "ts_ms")),
        None => (
            int(Some(after), "__source_ts_us"),
            int(Some(after), "__source_ts_ms"),
        ),
    };
    let valid = |a: &arrow_array::Int64Array, r: usize| a.is_valid(r).then(|| a.value(r));
    (0..rows.num_rows())
        .map(|r| match (&us, &ms) {
            (Some(us), _) if us.is_valid(r) => valid(us, r),
            (_, Some(ms)) => valid(ms, r).and_then(|v| v.checked_mul(1000)),
            _ => None,
        })
        .collect::<TimestampMicrosecondArray>()
        .with_timezone("UTC")
}

/// A field the replica takes as a column of that name, `__` prefix or not.
fn column(name: &str, data_type: DataType) -> Field {
    let params = serde_json::json!({ SOURCE_NAME: name }).to_string();
    Field::new(name, data_type, true)
        .with_metadata(HashMap::from([("connect.parameters".to_owned(), params)]))
}

/// A hashed column is text: the source's type and default no longer apply; its source name
/// does.
fn hashed_field(f: &Field) -> Field {
    let mut metadata = HashMap::new();
    if let Some(name) = source_name(f) {
        let params = serde_json::json!({ SOURCE_NAME: name }).to_string();
        metadata.insert("connect.parameters".to_owned(), params);
    }
    Field::new(f.name(), DataType::Utf8, true).with_metadata(metadata)
}

/// `f` named `to`, its source column name too.
fn renamed(f: &Field, to: &str) -> Field {
    let mut metadata = f.metadata().clone();
    if let Some(params) = metadata.get("connect.parameters")
        && let Ok(mut v) = serde_json::from_str::<serde_json::Value>(params)
        && let Some(o) = v.as_object_mut()
        && o.contains_key(SOURCE_NAME)
    {
        o.insert(
            SOURCE_NAME.to_owned(),
            serde_json::Value::String(to.to_owned()),
        );
        metadata.insert("connect.parameters".to_owned(), v.to_string());
    }
    f.clone().with_name(to).with_metadata(metadata)
}

fn source_name(f: &Field) -> Option<String> {
    let params = f.metadata().get("connect.parameters")?;
    let v: serde_json::Value = serde_json::from_str(params).ok()?;
    v.get(SOURCE_NAME)?.as_str().map(str::to_owned)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use lakesink_config::Secret;
    use lakesink_schema_registry::ValueShape;

    fn policy(f: impl FnOnce(&mut ColumnPolicy)) -> Arc<Columns> {
        let mut p = ColumnPolicy {
            topics: None,
            exclude: vec![],
            include: vec![],
            rename: Default::default(),
            hash: vec![],
            hash_key: Some(Secret::new("0123456789abcdef-key")),
            mask: vec![],
            mask_replacement: None,
            static_columns: Default::default(),
            metadata: Default::default(),
        };
        f(&mut p);
        Columns::new(&[p], &[]).expect("compiles").expect("one")
    }

    /// An envelope batch of `users`: key {id}, before/after {id, email, ssn, note}.
    fn batch(topic: &str) -> ChangeBatch {
        let image = || {
            let fields = Fields::from(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("email", DataType::Utf8, true),
                Field::new("ssn", DataType::Utf8, true),
                Field::new("note", DataType::Utf8, true).with_metadata(HashMap::from([(
                    "connect.parameters".to_owned(),
                    format!("{{\"{SOURCE_NAME}\": \"note\"}}"),
                )])),
            ]);
            let cols: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a@x"), None])),
                Arc::new(StringArray::from(vec!["111", "222"])),
                Arc::new(StringArray::from(vec!["n1", "n2"])),
            ];
            StructArray::new(fields, cols, None)
        };
        let key = StructArray::new(
            Fields::from(vec![Field::new("id", DataType::Int64, false)]),
            vec![Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef],
            None,
        );
        let (after, before) = (image(), image());
        let schema = Schema::new(vec![
            Field::new("__offset", DataType::Int64, false),
            Field::new("key", key.data_type().clone(), true),
            Field::new("before", before.data_type().clone(), true),
            Field::new("after", after.data_type().clone(), true),
        ]);
        let rows = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![0, 1])),
                Arc::new(key),
                Arc::new(before),
                Arc::new(after),
            ],
        )
        .expect("batch");
        ChangeBatch {
            topic: topic.into(),
            partition: 0,
            first_offset: 0,
            last_offset: 1,
            key_schema: None,
            value_schema: None,
            shape: ValueShape::Envelope,
            rows,
        }
    }

    fn names(b: &ChangeBatch, column: &str) -> Vec<String> {
        b.rows
            .column_by_name(column)
            .expect("column")
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    #[test]
    fn exclude_rename_and_hash_apply_to_both_images_and_the_key() {
        let c = policy(|p| {
            p.exclude = vec!["ssn".into()];
            p.rename = [("note".to_owned(), "remark".to_owned())].into();
            p.hash = vec!["email".into(), "id".into()];
        });
        let b = c.apply(batch("db.public.users")).expect("applies");
        for image in ["before", "after"] {
            assert_eq!(names(&b, image), ["id", "email", "remark"]);
        }
        assert_eq!(names(&b, "key"), ["id"]);
        let after = b.rows.column_by_name("after").unwrap().as_struct();
        let email = after.column(1).as_string::<i32>();
        assert_eq!(email.len(), 2);
        assert_eq!(email.value(0).len(), 64, "HMAC-SHA-256, hex");
        assert!(email.is_null(1), "nulls stay null");
        // The key's hash equals the image's, so rows still match their keys.
        let key = b.rows.column_by_name("key").unwrap().as_struct();
        assert_eq!(
            key.column(0).as_string::<i32>().value(1),
            after.column(0).as_string::<i32>().value(1)
        );
        // The renamed field names its source column anew.
        let remark = after.fields()[2].clone();
        assert_eq!(source_name(&remark).as_deref(), Some("remark"));
        // Known answer: HMAC-SHA-256("0123456789abcdef-key", "1").
        let mac = Hmac::<Sha256>::new_from_slice(b"0123456789abcdef-key").unwrap();
        let mut m = mac;
        m.update(b"1");
        assert_eq!(
            key.column(0).as_string::<i32>().value(0),
            hex(&m.finalize().into_bytes())
        );
    }

    #[test]
    fn include_keeps_the_key_and_topics_select_the_batches() {
        let c = policy(|p| {
            p.topics = Some("db\\.public\\.users".into());
            p.include = vec!["note".into()];
        });
        let b = c.apply(batch("db.public.users")).expect("applies");
        assert_eq!(names(&b, "after"), ["id", "note"]);
        let other = c.apply(batch("db.public.users_old")).expect("applies");
        assert_eq!(
            names(&other, "after"),
            ["id", "email", "ssn", "note"],
            "whole-name match"
        );
    }

    #[test]
    fn fixed_values_and_metadata_are_added_to_the_row_images() {
        let c = policy(|p| {
            p.static_columns = [("region".to_owned(), "eu".to_owned())].into();
            p.metadata = [
                (Metadata::Offset, "kafka_offset".to_owned()),
                (Metadata::Topic, "__topic".to_owned()),
                (Metadata::SourceTs, "changed_at".to_owned()),
                (Metadata::UpdatedAt, "__updated_at".to_owned()),
            ]
            .into();
        });
        let before = chrono::Utc::now().timestamp_micros();
        let b = c.apply(batch("db.public.users")).expect("applies");
        let after_apply = chrono::Utc::now().timestamp_micros();
        assert_eq!(
            names(&b, "after"),
            [
                "id",
                "email",
                "ssn",
                "note",
                "region",
                "changed_at",
                "__topic",
                "kafka_offset",
                "__updated_at"
            ]
        );
        assert_eq!(
            names(&b, "before"),
            names(&b, "after"),
            "one type for both images"
        );
        let after = b.rows.column_by_name("after").unwrap().as_struct();
        let offset = after.column_by_name("kafka_offset").unwrap();
        assert_eq!(offset.as_primitive::<Int64Type>().values(), &[0, 1]);
        let topic = after.column_by_name("__topic").unwrap().as_string::<i32>();
        assert_eq!(topic.value(1), "db.public.users");
        // A `__` name is a column all the same (the replica takes such fields of a flattened
        // record as metadata otherwise).
        let f = after.fields().find("__topic").unwrap().1;
        assert_eq!(source_name(f).as_deref(), Some("__topic"));
        // No source block in this batch: no source time.
        assert_eq!(after.column_by_name("changed_at").unwrap().null_count(), 2);
        // When it was taken in: one time for the batch, in UTC.
        let updated = after.column_by_name("__updated_at").unwrap();
        assert_eq!(
            updated.data_type(),
            &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into()))
        );
        let updated = updated.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert!(
            updated
                .values()
                .iter()
                .all(|t| (before..=after_apply).contains(t)),
            "{updated:?}"
        );
        let clash = policy(|p| p.static_columns = [("email".to_owned(), "x".to_owned())].into());
        let err = clash.apply(batch("t")).unwrap_err();
        assert!(
            format!("{err:#}").contains("already has a column `email`"),
            "{err:#}"
        );
    }

    #[test]
    fn a_pattern_matching_no_configured_topic_is_refused() {
        let p = ColumnPolicy {
            topics: Some("db\\.public\\.user".into()),
            exclude: vec!["ssn".into()],
            include: vec![],
            rename: Default::default(),
            hash: vec![],
            hash_key: None,
            mask: vec![],
            mask_replacement: None,
            static_columns: Default::default(),
            metadata: Default::default(),
        };
        let topics = ["db.public.users".to_owned()];
        let err = Columns::new(std::slice::from_ref(&p), &topics)
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains("matches none of kafka.topics"),
            "{err}"
        );
        let ok = ColumnPolicy {
            topics: Some("db\\.public\\.users".into()),
            ..p
        };
        assert!(Columns::new(&[ok], &topics).is_ok());
    }

    #[test]
    fn masked_columns_take_their_types_empty_value_or_the_replacement() {
        let c = policy(|p| p.mask = vec!["email".into(), "note".into()]);
        let out = c.apply(batch("t")).expect("masked");
        for image in ["before", "after"] {
            let s = out.rows.column_by_name(image).expect("image").as_struct();
            let email = s.column_by_name("email").expect("email").as_string::<i32>();
            assert_eq!(
                email.iter().collect::<Vec<_>>(),
                [Some(""), None],
                "nulls stay"
            );
            let note = s.column_by_name("note").expect("note").as_string::<i32>();
            assert_eq!(note.iter().collect::<Vec<_>>(), [Some(""), Some("")]);
            assert_eq!(names(&out, image), ["id", "email", "ssn", "note"]);
        }
        let c = policy(|p| {
            p.mask = vec!["ssn".into()];
            p.mask_replacement = Some("***".into());
        });
        let out = c.apply(batch("t")).expect("masked");
        let after = out.rows.column_by_name("after").expect("after").as_struct();
        let ssn = after.column_by_name("ssn").expect("ssn").as_string::<i32>();
        assert_eq!(ssn.iter().collect::<Vec<_>>(), [Some("***"), Some("***")]);
        // Numbers, dates and flags become their zero; a replacement that is not a value of
        // the column's type is refused, naming it.
        let cases: Vec<(ArrayRef, ArrayRef)> = vec![
            (
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(Int64Array::from(vec![Some(0), None])),
            ),
            (
                Arc::new(arrow_array::Date32Array::from(vec![19_000])),
                Arc::new(arrow_array::Date32Array::from(vec![0])),
            ),
            (
                Arc::new(arrow_array::BooleanArray::from(vec![true])),
                Arc::new(arrow_array::BooleanArray::from(vec![false])),
            ),
            (
                Arc::new(
                    arrow_array::Decimal128Array::from(vec![12_345])
                        .with_precision_and_scale(10, 2)
                        .expect("decimal"),
                ),
                Arc::new(
                    arrow_array::Decimal128Array::from(vec![0])
                        .with_precision_and_scale(10, 2)
                        .expect("decimal"),
                ),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(&masked("c", &value, None).expect("masked"), &want);
        }
        let n: ArrayRef = Arc::new(Int64Array::from(vec![5]));
        assert_eq!(
            masked("n", &n, Some("-1")).expect("masked").as_ref(),
            &Int64Array::from(vec![-1]) as &dyn Array
        );
        let err = masked("n", &n, Some("***")).unwrap_err();
        assert!(
            format!("{err:#}").contains("column `n` is Int64"),
            "{err:#}"
        );
    }

    #[test]
    fn a_key_column_cannot_be_excluded_and_a_struct_cannot_be_hashed() {
        let c = policy(|p| p.exclude = vec!["id".into()]);
        let err = c.apply(batch("t")).unwrap_err();
        assert!(
            format!("{err:#}").contains("column `id` is in the record key"),
            "{err:#}"
        );
        assert!(format!("{err:#}").contains("t[0] offsets 0..=1"), "{err:#}");
        let c = policy(|p| p.mask = vec!["id".into()]);
        let err = c.apply(batch("t")).unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot be excluded or masked"),
            "{err:#}"
        );
        let c = policy(|p| p.hash = vec!["after".into()]);
        // Only fields of the images are columns: the envelope's own `after` is not one.
        assert!(c.apply(batch("t")).is_ok());
    }
}
