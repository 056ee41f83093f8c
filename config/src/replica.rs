//! The `[replica]` section: the PostgreSQL database lakesink keeps equal to the source.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{ConfigError, Secret, SecretRef};

/// A `postgres://` URL. A password in it is never printed: `Debug` and `Display` show `****`
/// in its place. In the file it may also be a reference (`env:NAME`, `file:/path`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DbUrl(String);

impl DbUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL itself, password included: for connecting, never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn text_mut(&mut self) -> &mut String {
        &mut self.0
    }

    /// The URL with its password, if any, replaced by `****`.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl From<String> for DbUrl {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for DbUrl {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl std::ops::Deref for DbUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl std::fmt::Display for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `scheme://user:secret@host/…` → `scheme://user:****@host/…`, and a `password=` query
/// parameter's value likewise. Text that is not such a URL is returned as is.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let auth_start = scheme_end + 3;
        let auth_end = out[auth_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| auth_start + i);
        if let Some(at) = out[auth_start..auth_end].rfind('@') {
            let userinfo = &out[auth_start..auth_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(auth_start + colon + 1..auth_start + at, "****");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=****"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// Where and how change events are applied to a PostgreSQL replica.
///
/// Defaults: `table-name-format = "${topic}"` with `dots-to-underscores = true` (the Debezium
/// JDBC sink's convention), `default-schema = "public"`, `identifier-case = "preserve"`, `pk-mode = "record-key"`,
/// `delete-enabled = true`, `delete-mode = "hard"` (soft: `deleted-column = "__deleted"`,
/// `deleted-at-column = "__deleted_at"`), `stale-guard = false` (`position-column =
/// "__source_position"`), `truncate-enabled = false`, `auto-create = true`,
/// `schema-evolution = "basic"`, `keyless = "insert"`, `offsets-table = "lakesink_offsets"`
/// in `offsets-schema = "public"`, `batch-max-rows = 50000`, `batch-max-bytes = 64 MiB`,
/// `pool-size = 4`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ReplicaConfig {
    /// `postgres://user@host:port/db`; a password here works but `password` keeps it out of
    /// the file.
    pub url: DbUrl,
    /// Overrides the URL's password.
    pub password: Option<Secret>,
    /// Table name template over `${topic}`, `${source.db}`, `${source.schema}`,
    /// `${source.table}`. The result is split on dots: `table`, `schema.table`, or
    /// `database.schema.table` where the database must be the connected one.
    #[serde(default = "default_table_name_format")]
    pub table_name_format: String,
    /// `${topic}` in the template is the topic rewritten by this regex, when it matches the whole
    /// topic name, and `topic-replacement` (Kafka Connect's `RegexRouter`).
    pub topic_regex: Option<String>,
    /// What a topic `topic-regex` matches becomes: `$1` for the first group.
    #[serde(default)]
    pub topic_replacement: String,
    /// Replace dots with underscores in the substituted values (not in the template's own
    /// text), so `${topic}` = `demo.public.orders` names the table `demo_public_orders`.
    #[serde(default = "default_true")]
    pub dots_to_underscores: bool,
    /// The schema of a one-part table name.
    #[serde(default = "default_schema")]
    pub default_schema: String,
    /// Table and column names as the source spells them, or with ASCII letters lowered (what
    /// PostgreSQL makes of the unquoted names a JDBC sink writes by default).
    #[serde(default)]
    pub identifier_case: IdentifierCase,
    #[serde(default)]
    pub pk_mode: PkMode,
    /// `record-key`: a subset of the key's fields (all when empty). `record-value`: the value
    /// fields forming the key (required).
    #[serde(default)]
    pub pk_fields: Vec<String>,
    /// Apply `d` events and tombstones as deletes; when false they are skipped.
    #[serde(default = "default_true")]
    pub delete_enabled: bool,
    /// What a table receives: its current rows (the mirror), every change as a row of its
    /// own (the history table), or both.
    #[serde(default)]
    pub mode: TableMode,
    /// The history table's name: the mirror's with this appended.
    #[serde(default = "default_history_suffix")]
    pub history_suffix: String,
    /// What a delete does to the row: remove it, or keep it marked deleted.
    #[serde(default)]
    pub delete_mode: DeleteMode,
    /// Soft deletes: the `boolean` column marking a deleted row (false when it is live).
    #[serde(default = "default_deleted_column")]
    pub deleted_column: String,
    /// Soft deletes: the `timestamptz` column holding when the source deleted the row; `""`
    /// for none.
    #[serde(default = "default_deleted_at_column")]
    pub deleted_at_column: String,
    /// The stale-event guard: each row keeps where its last change is in the source's log
    /// (`position-column`), and an event from earlier in the log than what a row holds does
    /// not overwrite or delete it.
    #[serde(default)]
    pub stale_guard: bool,
    /// The stale-event guard's column: `text COLLATE "C"`, ordered as the source's log.
    #[serde(default = "default_position_column")]
    pub position_column: String,
    /// Per table (`schema.table`, as the name template makes it): settings that differ from
    /// the ones above.
    #[serde(default)]
    pub tables: BTreeMap<String, TableSettings>,
    /// Apply `t` events as `TRUNCATE`; when false they are skipped.
    #[serde(default)]
    pub truncate_enabled: bool,
    /// Create a missing table, with its primary key.
    #[serde(default = "default_true")]
    pub auto_create: bool,
    #[serde(default)]
    pub schema_evolution: SchemaEvolution,
    /// Whether a column the source declares `NOT NULL` is made `NOT NULL` in the replica.
    #[serde(default)]
    pub not_null: NotNull,
    /// What to do with a table whose records have no key.
    #[serde(default)]
    pub keyless: KeylessMode,
    /// The schema and table holding each (group, topic, partition)'s next offset.
    #[serde(default = "default_schema")]
    pub offsets_schema: String,
    #[serde(default = "default_offsets_table")]
    pub offsets_table: String,
    /// A batch handed to the replica is cut at this many rows or bytes of decoded data.
    #[serde(default = "default_batch_max_rows")]
    pub batch_max_rows: usize,
    #[serde(default = "default_batch_max_bytes")]
    pub batch_max_bytes: usize,
    /// Connections to the replica.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PkMode {
    /// The fields of the Kafka record key (Debezium's key is the source primary key).
    #[default]
    RecordKey,
    /// Named fields of the value (`pk-fields`).
    RecordValue,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentifierCase {
    /// Quoted, as the source spells them: `DB2INST1.ORDERS` stays upper case.
    #[default]
    Preserve,
    /// ASCII `A`–`Z` lowered, as PostgreSQL folds an unquoted name: `db2inst1.orders`.
    Lower,
}

impl IdentifierCase {
    /// `name` as the replica names it.
    pub fn apply(self, name: &str) -> String {
        match self {
            IdentifierCase::Preserve => name.to_owned(),
            IdentifierCase::Lower => name.to_ascii_lowercase(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableMode {
    /// The table holds what the source table holds now.
    #[default]
    Mirror,
    /// Only the history table: each change appended as a row, keyed by its Kafka coordinates.
    History,
    /// The mirror and the history table beside it.
    Both,
}

impl TableMode {
    pub fn mirror(self) -> bool {
        self != TableMode::History
    }
    pub fn history(self) -> bool {
        self != TableMode::Mirror
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeleteMode {
    /// `DELETE` the row.
    #[default]
    Hard,
    /// Keep the row, marked in `deleted-column` (and `deleted-at-column`); a later insert or
    /// update of the key makes it live again.
    Soft,
}

/// One table's settings under `[replica.tables."schema.table"]`; unset keys take the
/// `[replica]` value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TableSettings {
    pub mode: Option<TableMode>,
    pub delete_mode: Option<DeleteMode>,
    pub deleted_column: Option<String>,
    pub deleted_at_column: Option<String>,
    pub stale_guard: Option<bool>,
    pub position_column: Option<String>,
}

/// A table's delete policy, its settings resolved against the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletePolicy {
    Hard,
    /// The marking columns; `at` is `None` when `deleted-at-column = ""`.
    Soft {
        flag: String,
        at: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemaEvolution {
    /// A column the table lacks is an error (Flink CDC's `exception`: `error`).
    #[serde(alias = "error")]
    None,
    /// Add columns the writer schema gained; never drop or narrow.
    #[default]
    Basic,
    /// As `basic`, and widen a column whose source type widened (`integer` → `bigint`,
    /// `real` → `double precision`, `numeric` precision, `character(n)` length); a column
    /// the source dropped or made nullable becomes nullable (Flink CDC's `lenient`).
    #[serde(alias = "lenient")]
    Evolve,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotNull {
    /// As the source declares it (Debezium's schema: a field that is not optional), on the
    /// columns lakesink creates and adds.
    #[default]
    Source,
    /// Every column but the key's nullable, as the JDBC sinks' older releases made them.
    Never,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeylessMode {
    /// Insert rows of keyless tables; their updates and deletes cannot be matched and are
    /// skipped with a warning.
    #[default]
    Insert,
    /// A keyless record is an error.
    Error,
}

fn default_true() -> bool {
    true
}
fn default_table_name_format() -> String {
    "${topic}".to_owned()
}
fn default_schema() -> String {
    "public".to_owned()
}
fn default_history_suffix() -> String {
    "_history".to_owned()
}
fn default_deleted_column() -> String {
    "__deleted".to_owned()
}
fn default_deleted_at_column() -> String {
    "__deleted_at".to_owned()
}
fn default_position_column() -> String {
    "__source_position".to_owned()
}
fn default_offsets_table() -> String {
    "lakesink_offsets".to_owned()
}
fn default_batch_max_rows() -> usize {
    50_000
}
fn default_batch_max_bytes() -> usize {
    64 << 20
}
fn default_pool_size() -> u32 {
    4
}

impl ReplicaConfig {
    /// A config with every default, for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: DbUrl(url.into()),
            password: None,
            table_name_format: default_table_name_format(),
            topic_regex: None,
            topic_replacement: String::new(),
            dots_to_underscores: true,
            default_schema: default_schema(),
            identifier_case: IdentifierCase::default(),
            pk_mode: PkMode::default(),
            pk_fields: Vec::new(),
            delete_enabled: true,
            mode: TableMode::default(),
            history_suffix: default_history_suffix(),
            delete_mode: DeleteMode::default(),
            deleted_column: default_deleted_column(),
            deleted_at_column: default_deleted_at_column(),
            stale_guard: false,
            position_column: default_position_column(),
            tables: BTreeMap::new(),
            truncate_enabled: false,
            auto_create: true,
            schema_evolution: SchemaEvolution::default(),
            not_null: NotNull::default(),
            keyless: KeylessMode::default(),
            offsets_schema: default_schema(),
            offsets_table: default_offsets_table(),
            batch_max_rows: default_batch_max_rows(),
            batch_max_bytes: default_batch_max_bytes(),
            pool_size: default_pool_size(),
        }
    }

    /// What `table` (`schema.table`, the mirror's name) receives.
    pub fn table_mode(&self, table: &str) -> TableMode {
        self.tables
            .get(table)
            .and_then(|t| t.mode)
            .unwrap_or(self.mode)
    }

    /// Whether any table may have a history table.
    pub fn any_history(&self) -> bool {
        self.mode.history()
            || self
                .tables
                .values()
                .any(|t| t.mode.is_some_and(TableMode::history))
    }

    /// The delete policy of `table` (`schema.table`).
    pub fn delete_policy(&self, table: &str) -> DeletePolicy {
        let own = self.tables.get(table);
        let pick = |f: fn(&TableSettings) -> Option<&String>, default: &String| {
            own.and_then(f).unwrap_or(default).clone()
        };
        match own.and_then(|t| t.delete_mode).unwrap_or(self.delete_mode) {
            DeleteMode::Hard => DeletePolicy::Hard,
            DeleteMode::Soft => {
                let at = pick(|t| t.deleted_at_column.as_ref(), &self.deleted_at_column);
                DeletePolicy::Soft {
                    flag: pick(|t| t.deleted_column.as_ref(), &self.deleted_column),
                    at: (!at.is_empty()).then_some(at),
                }
            }
        }
    }

    /// The stale-event guard's column of `table` (`schema.table`); `None` when it has no
    /// guard.
    pub fn guard_column(&self, table: &str) -> Option<String> {
        let own = self.tables.get(table);
        own.and_then(|t| t.stale_guard)
            .unwrap_or(self.stale_guard)
            .then(|| {
                own.and_then(|t| t.position_column.clone())
                    .unwrap_or_else(|| self.position_column.clone())
            })
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.into(),
            })
        };
        let reference = SecretRef::is_reference(&self.url);
        if !(reference
            || self.url.starts_with("postgres://")
            || self.url.starts_with("postgresql://"))
        {
            return invalid("replica.url", "must be a postgres:// URL");
        }
        if self.table_name_format.trim().is_empty() {
            return invalid("replica.table-name-format", "must not be empty");
        }
        if self.pk_mode == PkMode::RecordValue && self.pk_fields.is_empty() {
            return invalid(
                "replica.pk-fields",
                "pk-mode = \"record-value\" needs the value fields forming the key",
            );
        }
        for (field, name) in [
            ("replica.default-schema", &self.default_schema),
            ("replica.offsets-schema", &self.offsets_schema),
            ("replica.offsets-table", &self.offsets_table),
        ] {
            if name.is_empty() || name.len() > 63 {
                return invalid(field, "must be 1 to 63 bytes (a PostgreSQL identifier)");
            }
        }
        self.validate_tables()?;
        if self.batch_max_rows == 0 || self.batch_max_bytes == 0 {
            return invalid("replica.batch-max-rows", "batch limits must be positive");
        }
        if self.pool_size == 0 {
            return invalid("replica.pool-size", "must be at least 1");
        }
        Ok(())
    }

    /// Per-table keys name `schema.table`; soft deletes need deletes applied and two
    /// distinct column names.
    fn validate_tables(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: String| Err(ConfigError::Invalid { field, reason });
        for name in self.tables.keys() {
            let parts: Vec<&str> = name.split('.').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty() || p.len() > 63) {
                return invalid(
                    "replica.tables",
                    format!(
                        "\"{name}\": a table is named `schema.table`, as the table name template makes it"
                    ),
                );
            }
        }
        let both = self.mode == TableMode::Both
            || self
                .tables
                .values()
                .any(|t| t.mode == Some(TableMode::Both));
        if both && self.history_suffix.is_empty() {
            return invalid(
                "replica.history-suffix",
                "must not be empty where a table has mode = \"both\": the history table is named the mirror's name with it appended".into(),
            );
        }
        if self.history_suffix.len() > 62 || self.history_suffix.contains('.') {
            return invalid(
                "replica.history-suffix",
                "is appended to table names: at most 62 bytes, without dots".into(),
            );
        }
        let tables = std::iter::once(None).chain(self.tables.keys().map(Some));
        for table in tables {
            let name = table.map_or("", |t| t);
            let policy = self.delete_policy(name);
            if let Some(position) = self.guard_column(name) {
                let (field, whose) = match table {
                    Some(t) => ("replica.tables", format!("\"{t}\": ")),
                    None => ("replica.position-column", String::new()),
                };
                if position.is_empty() || position.len() > 63 {
                    return invalid(
                        field,
                        format!(
                            "{whose}position-column must be 1 to 63 bytes (a PostgreSQL identifier)"
                        ),
                    );
                }
                if let DeletePolicy::Soft { flag, at } = &policy
                    && (flag == &position || at.as_ref() == Some(&position))
                {
                    return invalid(
                        field,
                        format!(
                            "{whose}position-column is `{position}`, the same as a soft-delete column"
                        ),
                    );
                }
            }
            let DeletePolicy::Soft { flag, at } = policy else {
                continue;
            };
            let (field, whose) = match table {
                Some(t) => ("replica.tables", format!("\"{t}\": ")),
                None => ("replica.delete-mode", String::new()),
            };
            if !self.delete_enabled {
                return invalid(
                    field,
                    format!(
                        "{whose}delete-mode = \"soft\" marks the rows deletes name, but delete-enabled = false skips deletes: set delete-enabled = true"
                    ),
                );
            }
            if flag.is_empty() || flag.len() > 63 || at.as_ref().is_some_and(|a| a.len() > 63) {
                return invalid(
                    field,
                    format!(
                        "{whose}deleted-column and deleted-at-column must be 1 to 63 bytes (PostgreSQL identifiers)"
                    ),
                );
            }
            if at.as_ref() == Some(&flag) {
                return invalid(
                    field,
                    format!("{whose}deleted-at-column is `{flag}`, the same as deleted-column"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        Config, ConfigError, DeleteMode, DeletePolicy, IdentifierCase, KeylessMode, PkMode,
        ReplicaConfig, SchemaEvolution, TableMode,
    };

    const BASE: &str = "[kafka]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n";

    fn parse(replica: &str) -> Result<Config, ConfigError> {
        Config::from_toml(
            &format!("{BASE}[replica]\n{replica}"),
            "test.toml",
            Vec::new(),
        )
    }

    #[test]
    fn defaults_match_new() {
        let c = parse("url = \"postgres://u@h/db\"\n").expect("valid");
        let r = c.replica.expect("replica");
        assert_eq!(r, ReplicaConfig::new("postgres://u@h/db"));
        assert_eq!(r.table_name_format, "${topic}");
        assert!(r.dots_to_underscores && r.delete_enabled && r.auto_create);
        assert!(!r.truncate_enabled);
        assert_eq!(r.schema_evolution, SchemaEvolution::Basic);
        assert_eq!(r.offsets_table, "lakesink_offsets");
        let none = Config::from_toml(BASE, "t", Vec::new()).expect("valid");
        assert!(none.replica.is_none());
    }

    #[test]
    fn every_key_parses_and_the_password_is_hidden() {
        let c = parse(
            r#"url = "postgres://u@h:5434/replica"
password = "hunter2"
table-name-format = "${source.schema}.${source.table}"
dots-to-underscores = false
default-schema = "repl"
identifier-case = "lower"
pk-mode = "record-value"
pk-fields = ["id", "region"]
delete-enabled = false
truncate-enabled = true
auto-create = false
schema-evolution = "none"
keyless = "error"
offsets-schema = "meta"
offsets-table = "offs"
batch-max-rows = 10
batch-max-bytes = 1000
pool-size = 2
"#,
        )
        .expect("valid");
        let r = c.replica.as_ref().expect("replica");
        assert_eq!(r.pk_mode, PkMode::RecordValue);
        assert_eq!(r.pk_fields, ["id", "region"]);
        assert_eq!(r.keyless, KeylessMode::Error);
        assert_eq!(r.identifier_case, IdentifierCase::Lower);
        assert_eq!(r.identifier_case.apply("DB2INST1.Ördér"), "db2inst1.Ördér");
        assert_eq!(r.schema_evolution, SchemaEvolution::None);
        assert_eq!((r.batch_max_rows, r.pool_size), (10, 2));
        assert_eq!(r.password.as_ref().map(|p| p.expose()), Some("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn delete_mode_per_table_falls_back_to_the_defaults() {
        let c = parse(
            r#"url = "postgres://u@h/db"
delete-mode = "soft"
deleted-at-column = ""
[replica.tables."public.orders"]
delete-mode = "hard"
[replica.tables."crm.people"]
deleted-column = "is_gone"
deleted-at-column = "gone_at"
"#,
        )
        .expect("valid");
        let r = c.replica.expect("replica");
        assert_eq!(r.delete_mode, DeleteMode::Soft);
        assert_eq!(r.delete_policy("public.orders"), DeletePolicy::Hard);
        assert_eq!(
            r.delete_policy("crm.people"),
            DeletePolicy::Soft {
                flag: "is_gone".into(),
                at: Some("gone_at".into())
            }
        );
        assert_eq!(
            r.delete_policy("public.other"),
            DeletePolicy::Soft {
                flag: "__deleted".into(),
                at: None
            }
        );
        let hard = ReplicaConfig::new("postgres://h/db");
        assert_eq!(hard.delete_policy("public.t"), DeletePolicy::Hard);
    }

    #[test]
    fn flink_cdcs_schema_change_names_are_taken_but_ignore() {
        for (name, want) in [
            ("error", SchemaEvolution::None),
            ("lenient", SchemaEvolution::Evolve),
        ] {
            let c = parse(&format!(
                "url = \"postgres://h/db\"\nschema-evolution = \"{name}\"\n"
            ))
            .expect("valid");
            assert_eq!(c.replica.expect("replica").schema_evolution, want);
        }
        // Dropping what the table lacks would lose it silently.
        let err = parse("url = \"postgres://h/db\"\nschema-evolution = \"ignore\"\n").unwrap_err();
        assert!(err.to_string().contains("ignore"), "{err}");
    }

    #[test]
    fn the_stale_guard_per_table_falls_back_to_the_defaults() {
        let c = parse(
            r#"url = "postgres://u@h/db"
stale-guard = true
[replica.tables."public.orders"]
stale-guard = false
[replica.tables."crm.people"]
position-column = "src_pos"
"#,
        )
        .expect("valid");
        let r = c.replica.expect("replica");
        assert_eq!(r.guard_column("public.orders"), None);
        assert_eq!(r.guard_column("crm.people").as_deref(), Some("src_pos"));
        assert_eq!(
            r.guard_column("public.other").as_deref(),
            Some("__source_position")
        );
        assert_eq!(
            ReplicaConfig::new("postgres://h/db").guard_column("a.b"),
            None
        );
        let err = parse(
            "url = \"postgres://h\"\nstale-guard = true\ndelete-mode = \"soft\"\nposition-column = \"__deleted\"\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("same as a soft-delete column"),
            "{err}"
        );
        let err = parse("url = \"postgres://h\"\nstale-guard = true\nposition-column = \"\"\n")
            .unwrap_err();
        assert!(err.to_string().contains("1 to 63 bytes"), "{err}");
    }

    #[test]
    fn history_modes_per_table() {
        let c = parse(
            r#"url = "postgres://u@h/db"
mode = "both"
[replica.tables."public.logs"]
mode = "history"
[replica.tables."public.big"]
mode = "mirror"
"#,
        )
        .expect("valid");
        let r = c.replica.expect("replica");
        assert_eq!(r.table_mode("public.orders"), TableMode::Both);
        assert_eq!(r.table_mode("public.logs"), TableMode::History);
        assert!(!r.table_mode("public.logs").mirror());
        assert!(!r.table_mode("public.big").history());
        assert!(r.any_history());
        assert_eq!(r.history_suffix, "_history");
        assert!(!ReplicaConfig::new("postgres://h/db").any_history());
        let err =
            parse("url = \"postgres://h\"\nmode = \"both\"\nhistory-suffix = \"\"\n").unwrap_err();
        assert!(err.to_string().contains("history-suffix"), "{err}");
        let ok = parse("url = \"postgres://h\"\nmode = \"history\"\nhistory-suffix = \"\"\n");
        assert!(ok.is_ok(), "{ok:?}");
        let err = parse("url = \"postgres://h\"\nhistory-suffix = \".h\"\n").unwrap_err();
        assert!(err.to_string().contains("without dots"), "{err}");
    }

    #[test]
    fn soft_deletes_refuse_what_cannot_work() {
        for (text, says) in [
            (
                "delete-mode = \"soft\"\ndelete-enabled = false\n",
                "delete-enabled = false",
            ),
            (
                "[replica.tables.\"public.t\"]\ndelete-mode = \"soft\"\ndeleted-at-column = \"__deleted\"\n",
                "the same as deleted-column",
            ),
            (
                "[replica.tables.orders]\ndelete-mode = \"soft\"\n",
                "`schema.table`",
            ),
            ("[replica.tables.\"a.b\"]\nmode = \"soft\"\n", "mode"),
        ] {
            let err = parse(&format!("url = \"postgres://h\"\n{text}")).unwrap_err();
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn invalid_values_name_the_field() {
        for (text, field) in [
            ("url = \"mysql://h\"\n", "replica.url"),
            (
                "url = \"postgres://h\"\npk-mode = \"record-value\"\n",
                "replica.pk-fields",
            ),
            (
                "url = \"postgres://h\"\npool-size = 0\n",
                "replica.pool-size",
            ),
            (
                "url = \"postgres://h\"\noffsets-table = \"\"\n",
                "replica.offsets-table",
            ),
        ] {
            match parse(text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let err = parse("url = \"postgres://h\"\npk-mode = \"kafka\"\n").unwrap_err();
        assert!(err.to_string().contains("kafka"), "{err}");
        let err = parse("url = \"postgres://h\"\ntable-format = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("table-format"), "{err}");
    }
}
