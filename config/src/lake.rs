//! `[lake]`: lake tables, one Apache Iceberg table per source table, committed with the Kafka
//! offsets they cover. Names follow Apache Iceberg's Kafka Connect sink where it has the same
//! setting (its name is given in each doc).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{Codec, ConfigError, Content, DbUrl, Secret, StoreConfig};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LakeConfig {
    /// The catalog that holds the tables (`iceberg.catalog.type`).
    #[serde(default)]
    pub catalog: CatalogKind,
    /// `sql`: the PostgreSQL database of the catalog's two tables (`iceberg_tables`,
    /// `iceberg_namespace_properties`, as Iceberg's JDBC catalog and pyiceberg's SQL catalog
    /// read them). `rest`: the REST catalog's base URL (`iceberg.catalog.uri`).
    pub catalog_uri: DbUrl,
    /// The catalog's name (`iceberg.catalog`): the `catalog_name` column of the SQL catalog.
    #[serde(default = "default_catalog_name")]
    pub catalog_name: String,
    /// Other catalog properties passed through as they are (`iceberg.catalog.*`): a REST
    /// catalog's `credential`, `token`, `oauth2-server-uri`, `scope`, `prefix`, ….
    #[serde(default)]
    pub catalog_properties: BTreeMap<String, Secret>,
    /// Where new tables live: `s3://bucket/prefix`, `file:///path`, … (`iceberg.catalog.warehouse`).
    pub warehouse: String,
    /// Object store connection settings, as `[raw.store]`.
    #[serde(default)]
    pub store: StoreConfig,
    /// The namespace tables are created in; dots separate levels (`analytics.cdc`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Table name template over `${topic}`; dots in the result become underscores.
    #[serde(default = "default_table_name_format")]
    pub table_name_format: String,
    /// What a row holds, as `[raw] content`.
    #[serde(default)]
    pub content: Content,
    /// Commit a table's files at least this often (`iceberg.control.commit.interval-ms`).
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Commit a table whose rows stopped arriving this long ago, before its interval, when its
    /// files hold at least a sixteenth of `commit-bytes` (a backlog caught up; a trickle of
    /// rows waits for the interval). 0: never.
    #[serde(default = "default_commit_idle_ms")]
    pub commit_idle_ms: u64,
    /// Commit a table once its open files hold this many bytes (encoded).
    #[serde(default = "default_commit_bytes")]
    pub commit_bytes: u64,
    /// The memory all open files may hold; past it the largest table commits early.
    #[serde(default = "default_memory_budget")]
    pub memory_budget_bytes: u64,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// `write.parquet.compression-codec`.
    #[serde(default = "default_codec")]
    pub codec: Codec,
    /// The partition spec new tables get, in Spark's and Iceberg's transform syntax over the
    /// table's columns (dots for nested ones): `"after.region"`, `"days(__timestamp)"`,
    /// `"hours(source.ts_ms)"`, `"bucket(16, key.id)"`, `"truncate(4, after.code)"`
    /// (`iceberg.tables.default-partition-by`). Empty: unpartitioned.
    #[serde(default)]
    pub partition_by: Vec<String>,
    /// What a table holds: `append`, every change event as a row; `upsert`, the source
    /// table's rows as they are now (deletes and key changes applied by equality deletes).
    #[serde(default)]
    pub mode: LakeMode,
    /// Per table (the name `table-name-format` makes): settings overriding the ones above.
    #[serde(default)]
    pub tables: BTreeMap<String, LakeTableConfig>,
}

/// What a lake table holds ([`LakeConfig::mode`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LakeMode {
    /// Every change event, as a row (the raw layer's content).
    #[default]
    Append,
    /// The source table's current rows, keyed by the record key: an update deletes the key's
    /// older row and adds the new one in the same snapshot.
    Upsert,
}

impl LakeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Upsert => "upsert",
        }
    }
}

/// `[lake.tables."name"]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LakeTableConfig {
    pub mode: Option<LakeMode>,
}

/// A partition transform ([`LakeConfig::partition_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionTransform {
    Identity,
    Year,
    Month,
    Day,
    Hour,
    Bucket(u32),
    Truncate(u32),
}

/// One `partition-by` entry: a transform of a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    pub transform: PartitionTransform,
    /// The source column, dotted for a nested one.
    pub column: String,
}

impl PartitionField {
    /// Parses `column`, `days(column)`, `bucket(16, column)` (the count on either side, as
    /// Spark and Iceberg's Kafka Connect sink each write it), `truncate(4, column)`; `year`,
    /// `month`, `day`, `hour` are taken for their plurals.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let Some((name, rest)) = text.split_once('(') else {
            if text.is_empty() || text.contains(')') || text.contains(',') {
                return Err(format!("`{text}` is not a column or a transform of one"));
            }
            return Ok(Self {
                transform: PartitionTransform::Identity,
                column: text.to_owned(),
            });
        };
        let args = rest
            .strip_suffix(')')
            .ok_or_else(|| format!("`{text}`: no closing parenthesis"))?;
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let one = |t| match args.as_slice() {
            [c] if !c.is_empty() => Ok(Self {
                transform: t,
                column: (*c).to_owned(),
            }),
            _ => Err(format!("`{text}`: takes one column")),
        };
        let counted = |make: fn(u32) -> PartitionTransform| {
            let (n, c) = match args.as_slice() {
                [a, b] if a.parse::<u32>().is_ok() => (a, b),
                [a, b] if b.parse::<u32>().is_ok() => (b, a),
                _ => return Err(format!("`{text}`: takes a count and a column")),
            };
            match n.parse::<u32>() {
                Ok(n) if n > 0 && !c.is_empty() => Ok(Self {
                    transform: make(n),
                    column: (*c).to_owned(),
                }),
                _ => Err(format!("`{text}`: the count must be at least 1")),
            }
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "identity" => one(PartitionTransform::Identity),
            "year" | "years" => one(PartitionTransform::Year),
            "month" | "months" => one(PartitionTransform::Month),
            "day" | "days" | "date" => one(PartitionTransform::Day),
            "hour" | "hours" | "date_hour" => one(PartitionTransform::Hour),
            "bucket" => counted(PartitionTransform::Bucket),
            "truncate" => counted(PartitionTransform::Truncate),
            other => Err(format!(
                "`{text}`: unknown transform `{other}` (identity, years, months, days, hours, \
                 bucket, truncate)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CatalogKind {
    /// A SQL catalog in PostgreSQL: no service beyond the database.
    #[default]
    Sql,
    /// An Iceberg REST catalog (Polaris, Lakekeeper, Nessie, Unity, …; not yet SigV4: Glue,
    /// S3 Tables).
    Rest,
}

fn default_catalog_name() -> String {
    "lakesink".into()
}
fn default_namespace() -> String {
    "lakesink".into()
}
fn default_table_name_format() -> String {
    "${topic}".into()
}
fn default_commit_interval_ms() -> u64 {
    60_000
}
fn default_commit_idle_ms() -> u64 {
    1_000
}
fn default_commit_bytes() -> u64 {
    128 << 20
}
fn default_memory_budget() -> u64 {
    256 << 20
}
fn default_row_group_rows() -> usize {
    128 * 1024
}
fn default_codec() -> Codec {
    Codec::Zstd
}

impl LakeConfig {
    /// The table a topic's rows go to: `table-name-format` with `${topic}` replaced, dots
    /// to underscores (a dot would be a namespace level).
    pub fn table_name(&self, topic: &str) -> String {
        self.table_name_format
            .replace("${topic}", topic)
            .replace('.', "_")
    }

    /// The parsed `partition-by` (validated at load).
    pub fn partition_fields(&self) -> Vec<PartitionField> {
        self.partition_by
            .iter()
            .filter_map(|p| PartitionField::parse(p).ok())
            .collect()
    }

    /// The mode of the table named `table` (as [`Self::table_name`] makes it).
    pub fn mode_of(&self, table: &str) -> LakeMode {
        self.tables
            .get(table)
            .and_then(|t| t.mode)
            .unwrap_or(self.mode)
    }

    /// The namespace's levels.
    pub fn namespace_levels(&self) -> Vec<String> {
        self.namespace.split('.').map(str::to_owned).collect()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.catalog_uri.expose().trim().is_empty() {
            return invalid("lake.catalog-uri", "must not be empty");
        }
        // A reference (`env:…`, `file:…`) is checked once resolved (`validate_secrets`).
        let reference = crate::secrets::SecretRef::is_reference(self.catalog_uri.expose());
        match self.catalog {
            _ if reference => {}
            CatalogKind::Sql if !self.catalog_uri.expose().starts_with("postgres") => {
                return invalid(
                    "lake.catalog-uri",
                    "a SQL catalog lives in PostgreSQL: postgres://user@host:5432/db",
                );
            }
            CatalogKind::Rest if !self.catalog_uri.expose().starts_with("http") => {
                return invalid(
                    "lake.catalog-uri",
                    "a REST catalog is an http:// or https:// URL",
                );
            }
            _ => {}
        }
        if !self.warehouse.contains("://") {
            return invalid(
                "lake.warehouse",
                "must be a URL: s3://bucket/prefix, file:///path, gs://…, az://…",
            );
        }
        if self.namespace.split('.').any(|l| l.trim().is_empty()) {
            return invalid("lake.namespace", "has an empty level");
        }
        if !self.table_name_format.contains("${topic}") {
            return invalid(
                "lake.table-name-format",
                "must contain ${topic}, or every topic would go to one table",
            );
        }
        if self.commit_interval_ms == 0 {
            return invalid("lake.commit-interval-ms", "must be at least 1");
        }
        if self.commit_bytes < 1 << 20 {
            return invalid("lake.commit-bytes", "must be at least 1 MiB");
        }
        if self.memory_budget_bytes < self.commit_bytes {
            return invalid(
                "lake.memory-budget-bytes",
                "must be at least lake.commit-bytes",
            );
        }
        if self.row_group_rows == 0 {
            return invalid("lake.row-group-rows", "must be at least 1");
        }
        for p in &self.partition_by {
            if let Err(e) = PartitionField::parse(p) {
                return invalid("lake.partition-by", &e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lake(extra: &str) -> Result<LakeConfig, String> {
        let text = format!(
            "catalog-uri = \"postgres://u@127.0.0.1/db\"\nwarehouse = \"s3://lake/wh\"\n{extra}"
        );
        let c: LakeConfig = toml::from_str(&text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn defaults_name_tables_after_topics_in_one_namespace() {
        let c = lake("").expect("valid");
        assert_eq!(c.catalog, CatalogKind::Sql);
        assert_eq!(c.table_name("demo.public.orders"), "demo_public_orders");
        assert_eq!(c.namespace_levels(), vec!["lakesink".to_owned()]);
        assert_eq!(c.commit_interval_ms, 60_000);
        assert_eq!(c.commit_idle_ms, 1_000);
        let c = lake("namespace = \"a.b\"\ntable-name-format = \"cdc_${topic}\"").expect("valid");
        assert_eq!(c.namespace_levels(), vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(c.table_name("x.y"), "cdc_x_y");
    }

    #[test]
    fn partition_by_takes_spark_and_kafka_connect_spellings() {
        use PartitionTransform::*;
        for (text, transform, column) in [
            ("after.region", Identity, "after.region"),
            ("days(__timestamp)", Day, "__timestamp"),
            ("day(__timestamp)", Day, "__timestamp"),
            ("HOURS(source.ts_ms)", Hour, "source.ts_ms"),
            ("years(d)", Year, "d"),
            ("months(d)", Month, "d"),
            ("bucket(16, key.id)", Bucket(16), "key.id"),
            ("bucket(key.id, 16)", Bucket(16), "key.id"),
            ("truncate(4, code)", Truncate(4), "code"),
        ] {
            let f = PartitionField::parse(text).expect(text);
            assert_eq!(
                (f.transform, f.column.as_str()),
                (transform, column),
                "{text}"
            );
        }
        let c =
            lake("partition-by = [\"days(__timestamp)\", \"bucket(8, key.id)\"]").expect("valid");
        assert_eq!(c.partition_fields().len(), 2);
    }

    #[test]
    fn a_table_may_take_another_mode_than_the_rest() {
        let c = lake("").expect("valid");
        assert_eq!(c.mode_of("t"), LakeMode::Append);
        let c = lake("mode = \"upsert\"\n[tables.events]\nmode = \"append\"").expect("valid");
        assert_eq!(c.mode_of("orders"), LakeMode::Upsert);
        assert_eq!(c.mode_of("events"), LakeMode::Append);
        let e = lake("mode = \"merge\"").expect_err("no such mode");
        assert!(e.contains("merge"), "{e}");
        let e = lake("[tables.t]\nmod = \"upsert\"").expect_err("a misspelt key");
        assert!(e.contains("mod"), "{e}");
    }

    #[test]
    fn a_catalog_uri_by_reference_is_checked_once_resolved() {
        let text = "catalog-uri = \"env:LAKE_CATALOG_URI\"\nwarehouse = \"s3://lake/wh\"";
        let mut c: LakeConfig = toml::from_str(text).expect("toml");
        c.validate()
            .expect("a reference passes before it is resolved");
        *c.catalog_uri.text_mut() = "mysql://u@h/db".into();
        let e = c.validate().expect_err("resolved to no PostgreSQL URL");
        assert!(e.to_string().contains("lake.catalog-uri"), "{e}");
    }

    #[test]
    fn settings_that_would_misroute_or_never_commit_are_refused() {
        for (extra, field) in [
            ("table-name-format = \"t\"", "table-name-format"),
            ("namespace = \"a..b\"", "namespace"),
            ("commit-interval-ms = 0", "commit-interval-ms"),
            ("catalog = \"rest\"", "catalog-uri"),
            ("commit-bytes = 10", "commit-bytes"),
            ("partition-by = [\"bucket(0, id)\"]", "partition-by"),
            ("partition-by = [\"weeks(ts)\"]", "partition-by"),
            ("partition-by = [\"days(a, b)\"]", "partition-by"),
            ("partition-by = [\"days(ts\"]", "partition-by"),
        ] {
            let e = lake(extra).expect_err(extra);
            assert!(e.contains(field), "{extra}: {e}");
        }
    }
}
