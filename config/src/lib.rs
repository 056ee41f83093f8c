//! lakesink's configuration: TOML with kebab-case keys, unknown keys rejected (with a
//! suggestion), `LAKESINK__SECTION__KEY` environment overrides applied before validation, and
//! secrets given by reference (`env:NAME`, `file:/path`) resolved at load time.
//!
//! This is the only crate that reads the process environment.

mod columns;
pub mod connect_import;
mod errors;
mod kafka_security;
mod lake;
mod non_data;
mod overrides;
mod raw;
mod replica;
mod secrets;
mod service;
mod suggest;
mod words;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

pub use columns::{ColumnPolicy, Metadata};
pub use errors::{ErrorsConfig, Tolerance};
pub use kafka_security::{
    KafkaOAuth, KafkaSecurity, MskIam, SaslMechanism, SecurityProtocol, msk_region_of,
};
pub use lake::{
    CatalogKind, LakeConfig, LakeMode, LakeTableConfig, PartitionField, PartitionTransform,
};
pub use non_data::{NonDataAction, NonDataConfig};
pub use overrides::ENV_PREFIX;
pub use raw::{
    Codec, Content, DEFAULT_STORE_RETRY_TIMEOUT_MS, PartitionerKind, RawConfig, StoreConfig,
    TimestampSource, Tombstones,
};
pub use replica::{
    DbUrl, DeleteMode, DeletePolicy, IdentifierCase, KeylessMode, NotNull, PkMode, ReplicaConfig,
    SchemaEvolution, TableMode, TableSettings, redact_url,
};
pub use secrets::{AWS_SECRETS_MANAGER, SecretRef};
pub use service::{AlertsConfig, EmailConfig, LogFormat, ServiceConfig, SmtpTls};

/// The whole configuration of one lakesink process.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    #[serde(default)]
    pub registry: RegistryConfig,
    /// The raw layer; absent means no Parquet files are written.
    pub raw: Option<RawConfig>,
    /// The PostgreSQL replica; absent when lakesink writes only the raw layer.
    pub replica: Option<ReplicaConfig>,
    /// Lake tables (Apache Iceberg); absent when none are written.
    pub lake: Option<LakeConfig>,
    /// The HTTP endpoint, logs and shutdown.
    #[serde(default)]
    pub service: ServiceConfig,
    /// Webhook alerts; absent means none are sent.
    pub alerts: Option<AlertsConfig>,
    /// Bad records: stop (the default) or send them to a dead-letter topic.
    #[serde(default)]
    pub errors: ErrorsConfig,
    /// Column policies (`[[columns]]`), in order: what every sink holds of each topic's
    /// columns.
    #[serde(default)]
    pub columns: Vec<ColumnPolicy>,
    /// The secret keys written as `aws-secretsmanager:` references, until they are fetched
    /// (a `literal:aws-secretsmanager:…` secret resolves to the same text and is not one).
    #[serde(skip)]
    remote: Vec<String>,
}

/// Where records come from: one consumer group over a topic list or a regex.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`, comma separated.
    pub brokers: String,
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// `group.instance.id`: static membership, so a restarted process (same id) takes its
    /// partitions back at once instead of after the session timeout. Unique per process.
    pub instance_id: Option<String>,
    /// Topics to read. Exactly one of `topics` and `topics-regex` is set.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regex over topic names, as Kafka Connect's `topics.regex`.
    pub topics_regex: Option<String>,
    /// TLS and SASL towards the brokers (`[kafka.security]`).
    pub security: Option<KafkaSecurity>,
    /// Extra librdkafka properties (`"fetch.wait.max.ms" = "100"`), passed through as is,
    /// after (and over) what `security` sets.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// How keys and values are encoded.
    #[serde(default)]
    pub format: RecordFormat,
    /// For `format = "json"`: a file holding the Connect schema of the values (the `schema`
    /// object JsonConverter writes with `schemas.enable=true`). Without it, schemas are inferred.
    pub json_value_schema: Option<std::path::PathBuf>,
    /// The Debezium connector (`mysql`, `postgresql`, …) that wrote records whose schemas name
    /// none: flattened values (ExtractNewRecordState drops `source`). Some types mean
    /// different things per connector (a MySQL `TIME` past 24:00 is a span).
    pub source_connector: Option<String>,
    /// Records that are not rows (`[kafka.non-data]`): skipped unless routed.
    #[serde(default)]
    pub non_data: NonDataConfig,
}

/// Debezium's connectors, as their `source.connector` names them: the values of
/// `kafka.source-connector`.
pub const SOURCE_CONNECTORS: &[&str] = &[
    "postgresql",
    "mysql",
    "mariadb",
    "sqlserver",
    "db2",
    "oracle",
    "mongodb",
    "informix",
    "vitess",
    "spanner",
];

/// The converter the topics were written with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordFormat {
    /// Avro with a schema registry (Apicurio or Confluent converters).
    #[default]
    Avro,
    /// Kafka Connect's JsonConverter with `schemas.enable=true`.
    ConnectJson,
    /// JsonConverter with `schemas.enable=false`: bare JSON values.
    Json,
}

/// The schema registry the records' writer schemas come from.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RegistryConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080`, or one ending in an API path.
    pub url: Option<String>,
    /// The API, when the URL does not end in one: Apicurio v3 by default.
    pub api: Option<RegistryApi>,
    /// What an id framed in the payload (`0x00 | id`) names. Apicurio 3.x and Confluent
    /// converters write contentIds; Apicurio 2.x with headers off writes globalIds.
    #[serde(default)]
    pub payload_ids: PayloadIds,
    /// Whether each schema id is checked to be registered for the record's topic (artifact
    /// `<topic>-key`/`-value`, `<topic>` or the record's name), so an id read in the wrong id
    /// space stops the run. Off only for producers naming artifacts some other way.
    #[serde(default = "default_check_artifacts")]
    pub check_artifacts: bool,
    /// HTTP basic auth.
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// OAuth 2 client credentials (Keycloak and other OIDC providers).
    pub oauth: Option<OAuthConfig>,
    /// A PEM file of extra CA certificates to trust.
    pub ca_file: Option<std::path::PathBuf>,
    /// Per-request timeout, milliseconds.
    #[serde(default = "default_registry_timeout_ms")]
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistryApi {
    ApicurioV3,
    ApicurioV2,
    Ccompat,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OAuthConfig {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Secret,
    pub scope: Option<String>,
}

/// A value that is never printed: `Debug` shows `****`. In the file it may be a reference,
/// `env:NAME` or `file:/path` (`literal:` escapes a value starting with either), resolved when
/// the config is loaded.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("****")
    }
}

fn default_registry_timeout_ms() -> u64 {
    10_000
}

fn default_check_artifacts() -> bool {
    true
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            url: None,
            api: None,
            payload_ids: PayloadIds::default(),
            check_artifacts: default_check_artifacts(),
            username: None,
            password: None,
            oauth: None,
            ca_file: None,
            timeout_ms: default_registry_timeout_ms(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PayloadIds {
    #[default]
    ContentId,
    GlobalId,
}

fn default_group_id() -> String {
    "lakesink".to_owned()
}

/// Failpoints armed for crash tests, from `LAKESINK_FAILPOINTS` (comma separated).
pub fn failpoints_from_env() -> Vec<String> {
    std::env::var("LAKESINK_FAILPOINTS")
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("environment override {var}: {message}")]
    Env { var: String, message: String },
    /// A secret reference that cannot be resolved; the value is never in the message.
    #[error("config field `{key}`: cannot resolve {reference}: {reason}")]
    Secret {
        key: String,
        reference: String,
        reason: String,
    },
    #[error("config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Every config error is lakesink's own configuration refusing to run: an operator must mend
/// the file or the environment.
impl lakesink_model::Classify for ConfigError {
    fn fault(&self) -> lakesink_model::Fault {
        lakesink_model::Fault::Refused(None)
    }
}

impl Config {
    /// Reads `path`, applies `LAKESINK__…` overrides from the process environment, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// As [`Config::load`], with the environment given explicitly.
    pub fn load_with_env(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string(), env)
    }

    /// Parses TOML text; `origin` names it in errors. `env` gives both the
    /// `LAKESINK__…` overrides and the variables `env:` references read.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = env.into_iter().collect();
        let mut config = Self::from_toml_unresolved(text, origin, env.clone())?;
        config.resolve_secrets(&env)?;
        Ok(config)
    }

    /// As [`Config::from_toml`], with secret references left as written (`env:NAME` stays
    /// `env:NAME`): for tools that check a config's shape where its secrets are not at hand.
    pub fn from_toml_unresolved(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        let from_env = overrides::apply(&mut doc, env)?;
        let config: Config = serde_path_to_error::deserialize(doc.clone()).map_err(
            |e: serde_path_to_error::Error<toml::de::Error>| {
                let path = key_path(e.path());
                let message = e.into_inner().message().to_owned();
                let error = Culprit {
                    doc: &doc,
                    text,
                    origin,
                    from_env: &from_env,
                };
                error.of(path, message)
            },
        )?;
        config.validate()?;
        Ok(config)
    }

    /// Every secret key that is set, with its text.
    fn secret_slots(&mut self) -> Vec<(String, &mut String)> {
        let mut secrets: Vec<(String, &mut String)> = Vec::new();
        if let Some(k) = &mut self.kafka.security {
            if let Some(p) = &mut k.password {
                secrets.push(("kafka.security.password".into(), &mut p.0));
            }
            if let Some(p) = &mut k.key_password {
                secrets.push(("kafka.security.key-password".into(), &mut p.0));
            }
            if let Some(o) = &mut k.oauth {
                secrets.push((
                    "kafka.security.oauth.client-secret".into(),
                    &mut o.client_secret.0,
                ));
            }
        }
        if let Some(p) = &mut self.registry.password {
            secrets.push(("registry.password".into(), &mut p.0));
        }
        if let Some(o) = &mut self.registry.oauth {
            secrets.push((
                "registry.oauth.client-secret".into(),
                &mut o.client_secret.0,
            ));
        }
        if let Some(raw) = &mut self.raw {
            if let Some(s) = &mut raw.store.secret_access_key {
                secrets.push(("raw.store.secret-access-key".into(), &mut s.0));
            }
            for (k, v) in &mut raw.store.options {
                secrets.push((format!("raw.store.options.{k}"), &mut v.0));
            }
        }
        if let Some(r) = &mut self.replica {
            if let Some(p) = &mut r.password {
                secrets.push(("replica.password".into(), &mut p.0));
            }
            secrets.push(("replica.url".into(), r.url.text_mut()));
        }
        if let Some(l) = &mut self.lake {
            if let Some(s) = &mut l.store.secret_access_key {
                secrets.push(("lake.store.secret-access-key".into(), &mut s.0));
            }
            for (k, v) in &mut l.store.options {
                secrets.push((format!("lake.store.options.{k}"), &mut v.0));
            }
            for (k, v) in &mut l.catalog_properties {
                secrets.push((format!("lake.catalog-properties.{k}"), &mut v.0));
            }
            secrets.push(("lake.catalog-uri".into(), l.catalog_uri.text_mut()));
        }
        for (i, c) in self.columns.iter_mut().enumerate() {
            if let Some(k) = &mut c.hash_key {
                secrets.push((format!("columns[{i}].hash-key"), &mut k.0));
            }
        }
        if let Some(a) = &mut self.alerts {
            if let Some(w) = &mut a.webhook_url {
                secrets.push(("alerts.webhook-url".into(), &mut w.0));
            }
            if let Some(p) = a.email.as_mut().and_then(|e| e.password.as_mut()) {
                secrets.push(("alerts.email.password".into(), &mut p.0));
            }
            for (k, v) in &mut a.headers {
                secrets.push((format!("alerts.headers.{k}"), &mut v.0));
            }
        }
        secrets
    }

    /// Replaces each `env:` and `file:` reference by what it refers to. References to a
    /// secrets store (`aws-secretsmanager:`) are left for [`Config::remote_secrets`].
    fn resolve_secrets(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        let mut remote = Vec::new();
        for (key, value) in self.secret_slots() {
            if matches!(SecretRef::parse(value), SecretRef::AwsSecretsManager(_)) {
                remote.push(key.clone());
            }
            *value = secrets::resolve(&key, value, env)?;
        }
        if remote.is_empty() {
            self.validate_secrets()?;
        }
        self.remote = remote;
        Ok(())
    }

    /// The secret keys that refer to a secrets store (`aws-secretsmanager:NAME#KEY`), each
    /// with its reference, to be replaced by the value; then [`Config::validate_secrets`].
    pub fn remote_secrets(&mut self) -> Vec<(String, &mut String)> {
        let remote = self.remote.clone();
        self.secret_slots()
            .into_iter()
            .filter(|(k, _)| remote.contains(k))
            .collect()
    }

    /// The checks that need the secrets' values (a replica or catalog URL given by reference).
    pub fn validate_secrets(&self) -> Result<(), ConfigError> {
        if let Some(r) = &self.replica {
            r.validate()?;
        }
        if let Some(l) = &self.lake {
            l.validate()?;
        }
        columns::validate_keys(&self.columns)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        columns::validate(&self.columns)?;
        if let Some(l) = &self.lake {
            l.validate()?;
        }
        if let Some(a) = &self.alerts {
            validate_alerts(a)?;
        }
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(ConfigError::Invalid {
                field: "kafka.brokers",
                reason: "must name at least one broker (host:port)".into(),
            });
        }
        if k.group_id.trim().is_empty() {
            return Err(ConfigError::Invalid {
                field: "kafka.group-id",
                reason: "must not be empty".into(),
            });
        }
        if let Some(security) = &k.security {
            security.validate()?;
        }
        if k.json_value_schema.is_some() && k.format != RecordFormat::Json {
            return Err(ConfigError::Invalid {
                field: "kafka.json-value-schema",
                reason: "only applies with format = \"json\"".into(),
            });
        }
        if let Some(c) = &k.source_connector
            && !SOURCE_CONNECTORS.contains(&c.as_str())
        {
            return Err(ConfigError::Invalid {
                field: "kafka.source-connector",
                reason: format!(
                    "`{c}` is not a Debezium connector lakesink knows; one of {}",
                    SOURCE_CONNECTORS.join(", ")
                ),
            });
        }
        let r = &self.registry;
        if let Some(url) = &r.url {
            check_registry_url(url)?;
        }
        if r.password.is_some() && r.username.is_none() {
            return Err(ConfigError::Invalid {
                field: "registry.username",
                reason: "a password is set without a username".into(),
            });
        }
        if r.username.is_some() && r.oauth.is_some() {
            return Err(ConfigError::Invalid {
                field: "registry.oauth",
                reason: "use basic auth (username, password) or oauth, not both".into(),
            });
        }
        k.non_data.validate(self.raw.is_some())?;
        self.errors.validate()?;
        if let Some(raw) = &self.raw {
            raw.validate()?;
        }
        if let Some(replica) = &self.replica {
            replica.validate()?;
        }
        match (k.topics.is_empty(), &k.topics_regex) {
            (true, None) => Err(ConfigError::Invalid {
                field: "kafka.topics",
                reason: "set `topics` or `topics-regex`".into(),
            }),
            (false, Some(_)) => Err(ConfigError::Invalid {
                field: "kafka.topics-regex",
                reason: "set `topics` or `topics-regex`, not both".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// Where a deserialization error is, as table keys; None past anything but a table.
fn key_path(path: &serde_path_to_error::Path) -> Option<Vec<String>> {
    path.iter()
        .map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

/// Where a deserialization error comes from: the file (with its text, for line numbers) or
/// the environment variables that were merged over it.
struct Culprit<'a> {
    doc: &'a toml::Table,
    text: &'a str,
    origin: &'a str,
    from_env: &'a [(Vec<String>, String)],
}

impl Culprit<'_> {
    /// The error serde gave at `path`, blaming the variable that set the key when one did, or
    /// else the file's line; an unknown key with a suggestion when one is close.
    fn of(&self, path: Option<Vec<String>>, message: String) -> ConfigError {
        let at = path
            .as_ref()
            .map(|p| format!(" in `{}`", p.join(".")))
            .unwrap_or_default();
        let Some(path) = path.filter(|p| !p.is_empty()) else {
            return self.in_file(&message, &message);
        };
        match unknown_key_error(self.doc, self.origin, self.from_env, &path, &message) {
            Some(ConfigError::Parse { message: said, .. }) => return self.in_file(&message, &said),
            Some(unknown) => return unknown,
            None => {}
        }
        let said = format!("{}{at}", words::plain(&message));
        if let Some((_, var)) = self.from_env.iter().find(|(p, _)| path.starts_with(p)) {
            return ConfigError::Env {
                var: var.clone(),
                message: said,
            };
        }
        self.in_file(&message, &said)
    }

    /// A file error: with the line of the value when the file alone gives the same error
    /// (its own parse keeps the places the merged tree has lost).
    fn in_file(&self, message: &str, said: &str) -> ConfigError {
        let line = match toml::from_str::<Config>(self.text) {
            Err(e) if e.message() == message => e.span().map(|s| words::line_of(self.text, s)),
            _ => None,
        };
        ConfigError::Parse {
            origin: match line {
                Some(line) => format!("{} line {line}", self.origin),
                None => self.origin.to_owned(),
            },
            message: said.to_owned(),
        }
    }
}

/// An unknown key's error, with its place, a suggestion when one is close (then without
/// serde's list of every key), and the environment variable that set it when one did; `None`
/// for other errors. `path` is where serde failed: for an unknown key, the key itself.
fn unknown_key_error(
    doc: &toml::Table,
    origin: &str,
    from_env: &[(Vec<String>, String)],
    path: &[String],
    message: &str,
) -> Option<ConfigError> {
    let (unknown, _) = path.split_last()?;
    // serde names what it expected only in the message.
    let expected = suggest::expected_keys(message, unknown)?;
    let mut suggestion = suggest::suggest(unknown, &expected).map(str::to_owned);
    let mut shown = path.join(".");
    // `flush.size = 1` is a TOML dotted key: a table `flush` holding `size`.
    if suggestion.is_none()
        && let Some(toml::Value::Table(t)) = lookup(doc, path)
    {
        let mut dotted = unknown.clone();
        let mut t = t;
        while t.len() == 1 {
            let (k, v) = t.iter().next().expect("one entry");
            dotted = format!("{dotted}.{k}");
            match v {
                toml::Value::Table(inner) => t = inner,
                _ => break,
            }
        }
        suggestion = suggest::suggest(&dotted, &expected)
            .filter(|s| suggest::kebab(&dotted) == *s)
            .map(str::to_owned);
        if suggestion.is_some() {
            // As the user wrote it: `raw.flush.size`, not the table `raw.flush`.
            let mut written = path[..path.len() - 1].to_vec();
            written.push(dotted);
            shown = written.join(".");
        }
    }
    let parents = &path[..path.len() - 1];
    let mut text = format!("unknown key `{shown}`");
    if let Some(s) = &suggestion {
        text.push_str(&format!("; did you mean `{s}`?"));
    }
    if suggestion.is_none() {
        text.push_str(&format!(" ({})", words::plain(message)));
    }
    if let Some((_, var)) = from_env.iter().find(|(p, _)| p.starts_with(path)) {
        if let Some(s) = &suggestion {
            let mut good = parents.to_vec();
            good.push(s.clone());
            text.push_str(&format!(" (set {})", overrides::var_name(&good)));
        }
        return Some(ConfigError::Env {
            var: var.clone(),
            message: text,
        });
    }
    Some(ConfigError::Parse {
        origin: origin.to_owned(),
        message: text,
    })
}

fn validate_alerts(a: &AlertsConfig) -> Result<(), ConfigError> {
    let invalid = |field, reason: &str| {
        Err(ConfigError::Invalid {
            field,
            reason: reason.to_owned(),
        })
    };
    if a.webhook_url.is_none() && a.email.is_none() {
        return invalid(
            "alerts",
            "names no destination: set webhook-url, [alerts.email], or both",
        );
    }
    let Some(e) = &a.email else { return Ok(()) };
    if e.to.is_empty() {
        return invalid("alerts.email.to", "names no recipient");
    }
    if e.username.is_some() != e.password.is_some() {
        return invalid(
            "alerts.email.username",
            "username and password go together (AUTH), or neither is set",
        );
    }
    if e.tls == SmtpTls::None && e.password.is_some() {
        return invalid(
            "alerts.email.tls",
            "\"none\" would send the password in the clear: use \"starttls\" or \"tls\"",
        );
    }
    for address in e.to.iter().chain([&e.from]) {
        if !address.contains('@') {
            return invalid(
                "alerts.email.to",
                &format!("`{address}` is not an e-mail address (`Name <a@b>` or `a@b`)"),
            );
        }
    }
    Ok(())
}

/// The value at `path` in `doc`.
fn lookup<'a>(doc: &'a toml::Table, path: &[String]) -> Option<&'a toml::Value> {
    let (last, parents) = path.split_last()?;
    let mut table = doc;
    for k in parents {
        table = table.get(k)?.as_table()?;
    }
    table.get(last)
}

/// An `http://` or `https://` URL with a host: a bare `host:port` would otherwise reach the
/// HTTP client as a URL whose scheme is the host, and fail only at the first record.
fn check_registry_url(url: &str) -> Result<(), ConfigError> {
    let lower = url.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        Some(_) => Err(ConfigError::Invalid {
            field: "registry.url",
            reason: format!("`{url}` names no host (e.g. http://127.0.0.1:8080)"),
        }),
        None if !lower.contains("://") => Err(ConfigError::Invalid {
            field: "registry.url",
            reason: format!("`{url}` has no scheme: write `http://{}`", url.trim()),
        }),
        None => Err(ConfigError::Invalid {
            field: "registry.url",
            reason: format!("`{url}` is not an http:// or https:// URL"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_url_needs_http_or_https_and_a_host() {
        let with = |url: &str| parse(&format!("{BASE}\n[registry]\nurl = \"{url}\"\n"), &[]);
        for good in [
            "http://127.0.0.1:8080",
            "HTTPS://registry.example/apis/ccompat/v7",
        ] {
            assert!(with(good).is_ok(), "{good}");
        }
        let err = with("127.0.0.1:8080").unwrap_err().to_string();
        assert!(
            err.contains("registry.url") && err.contains("write `http://127.0.0.1:8080`"),
            "{err}"
        );
        let err = with("ftp://registry:8080").unwrap_err().to_string();
        assert!(err.contains("not an http:// or https:// URL"), "{err}");
        let err = with("http:///apis").unwrap_err().to_string();
        assert!(err.contains("names no host"), "{err}");
        let err = parse(BASE, &[("LAKESINK__REGISTRY__URL", "localhost:8080")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("registry.url"),
            "an override is checked too: {err}"
        );
    }

    const BASE: &str = r#"
        [kafka]
        brokers = "127.0.0.1:9092"
        topics-regex = "^demo\\..*"
    "#;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::from_toml(text, "test.toml", env)
    }

    #[test]
    fn defaults_apply() {
        let c = parse(BASE, &[]).expect("valid");
        assert_eq!(c.kafka.group_id, "lakesink");
        assert_eq!(c.kafka.topics_regex.as_deref(), Some("^demo\\..*"));
        assert!(c.kafka.properties.is_empty());
        assert_eq!(c.registry.payload_ids, PayloadIds::ContentId);
        assert!(c.registry.check_artifacts);
        assert_eq!(c.kafka.format, RecordFormat::Avro);
    }

    #[test]
    fn non_data_routes_parse_and_are_checked() {
        let c = parse(BASE, &[]).expect("valid");
        assert_eq!(c.kafka.non_data, NonDataConfig::default());
        assert!(
            c.kafka
                .non_data
                .actions()
                .iter()
                .all(|(_, a)| *a == NonDataAction::Skip)
        );

        let raw = "[raw]\nurl = \"memory://\"\n";
        let text =
            format!("{BASE}\n[kafka.non-data]\nschema-change = \"raw\"\nsignal = \"error\"\n{raw}");
        let c = parse(&text, &[]).expect("valid");
        assert_eq!(c.kafka.non_data.schema_change, NonDataAction::Raw);
        assert_eq!(c.kafka.non_data.signal, NonDataAction::Error);
        assert_eq!(c.kafka.non_data.heartbeat, NonDataAction::Skip);

        let no_raw = format!("{BASE}\n[kafka.non-data]\ntransaction = \"raw\"\n");
        let err = parse(&no_raw, &[]).unwrap_err().to_string();
        assert!(
            err.contains("kafka.non-data") && err.contains("[raw]"),
            "{err}"
        );

        let signal_raw = format!("{BASE}\n[kafka.non-data]\nsignal = \"raw\"\n{raw}");
        let err = parse(&signal_raw, &[]).unwrap_err().to_string();
        assert!(err.contains("kafka.non-data.signal"), "{err}");

        let typo = format!("{BASE}\n[kafka.non-data]\nheartbeats = \"skip\"\n");
        let err = parse(&typo, &[]).unwrap_err().to_string();
        assert!(err.contains("heartbeat"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected_by_name() {
        let err = parse(&format!("{BASE}\nbrokerz = 1\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("brokerz"), "{err}");
    }

    #[test]
    fn env_overrides_win_and_are_typed() {
        let c = parse(
            BASE,
            &[
                ("LAKESINK__KAFKA__BROKERS", "10.0.0.1:9092"),
                ("LAKESINK__KAFKA__GROUP_ID", "g2"),
                ("LAKESINK__KAFKA__PROPERTIES__SECURITY.PROTOCOL", "SSL"),
                ("UNRELATED", "x"),
            ],
        )
        .expect("valid");
        assert_eq!(c.kafka.brokers, "10.0.0.1:9092");
        assert_eq!(c.kafka.group_id, "g2");
        assert_eq!(c.kafka.properties["security.protocol"], "SSL");
        let c = parse(BASE, &[("LAKESINK__REGISTRY__PAYLOAD_IDS", "global-id")]).expect("valid");
        assert_eq!(c.registry.payload_ids, PayloadIds::GlobalId);
    }

    #[test]
    fn wrong_values_are_said_in_words_at_their_line_or_their_variable() {
        let file = format!("{BASE}\n[raw]\nurl = \"memory://\"\nflush-size = \"200\"\n");
        let line = file
            .lines()
            .position(|l| l.starts_with("flush-size"))
            .expect("line")
            + 1;
        assert_eq!(
            parse(&file, &[]).unwrap_err().to_string(),
            format!(
                "config test.toml line {line}: invalid type: string \"200\", expected a whole \
                 number ≥ 0 in `raw.flush-size`"
            )
        );
        let negative = file.replace("flush-size = \"200\"", "partition-duration-ms = -5");
        let err = parse(&negative, &[]).unwrap_err().to_string();
        assert!(
            err.ends_with("invalid value: integer `-5`, expected a whole number ≥ 0 in `raw.partition-duration-ms`"),
            "{err}"
        );
        // The file says 200; the variable is the culprit.
        let good = file.replace("\"200\"", "200");
        assert_eq!(
            parse(&good, &[("LAKESINK__RAW__FLUSH_SIZE", "abc")])
                .unwrap_err()
                .to_string(),
            "environment override LAKESINK__RAW__FLUSH_SIZE: invalid type: string \"abc\", \
             expected a whole number ≥ 0 in `raw.flush-size`"
        );
        // A confident suggestion comes without serde's list of every key.
        let dotted = good.replace("flush-size", "flush.size");
        let err = parse(&dotted, &[]).unwrap_err().to_string();
        assert!(
            err.ends_with("unknown key `raw.flush.size`; did you mean `flush-size`?"),
            "{err}"
        );
        let typo = good.replace("flush-size", "flush-sise");
        let err = parse(&typo, &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "config test.toml line {line}: unknown key `raw.flush-sise`; did you mean `flush-size`?"
            )
        );
    }

    #[test]
    fn env_override_of_unknown_key_names_the_variable() {
        let err = parse(BASE, &[("LAKESINK__KAFKA__NOPE", "1")]).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn tolerating_errors_needs_a_dead_letter_topic() {
        let err = parse(&format!("{BASE}\n[errors]\ntolerance = \"all\"\n"), &[]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "errors.dead-letter-topic",
                ..
            }
        ));
        let c = parse(
            &format!("{BASE}\n[errors]\ntolerance = \"all\"\ndead-letter-topic = \"dlq\"\n"),
            &[],
        )
        .expect("valid");
        assert_eq!(c.errors.tolerance, Tolerance::All);
        assert!(c.errors.dead_letter_context_headers);
        assert_eq!(
            parse(BASE, &[]).expect("valid").errors.tolerance,
            Tolerance::None
        );
    }

    #[test]
    fn alert_secrets_are_resolved_by_reference() {
        let text = format!(
            "{BASE}\n[alerts]\nwebhook-url = \"env:HOOK\"\nheaders = {{ Authorization = \"env:AUTH\" }}\n"
        );
        let c = parse(
            &text,
            &[("HOOK", "https://hooks.example/T1"), ("AUTH", "Bearer x")],
        )
        .expect("valid");
        let a = c.alerts.expect("alerts");
        assert_eq!(
            a.webhook_url.as_ref().map(Secret::expose),
            Some("https://hooks.example/T1")
        );
        assert_eq!(a.headers["Authorization"].expose(), "Bearer x");
        let err = parse(&text, &[]).unwrap_err();
        assert!(err.to_string().contains("alerts.webhook-url"), "{err}");
    }

    #[test]
    fn the_raw_url_is_checked_at_load() {
        for (url, said) in [
            (
                "s3:/lakesink",
                "`s3:/lakesink` is not a URL (s3://bucket/prefix",
            ),
            (
                "s3:///prefix",
                "`s3:///prefix` names no bucket (e.g. s3://bucket/prefix)",
            ),
            (
                "ftp://host/x",
                "`ftp://host/x`: lakesink writes to s3, s3a, gs, az",
            ),
        ] {
            let err = parse(&format!("{BASE}[raw]\nurl = \"{url}\"\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("config field `raw.url`: "), "{err}");
            assert!(err.contains(said), "{err}");
        }
        for url in [
            "s3://b/p",
            "file:///tmp/raw",
            "memory://",
            "gs://b",
            "az://c/p",
        ] {
            parse(&format!("{BASE}[raw]\nurl = \"{url}\"\n"), &[]).expect(url);
        }
    }

    #[test]
    fn kafka_secrets_take_references_and_aws_ones_are_left_for_the_service() {
        let text = format!(
            "{BASE}[kafka.security]\nprotocol = \"sasl-ssl\"\nmechanism = \"scram-sha-512\"\nusername = \"ls\"\npassword = \"env:KAFKA_PW\"\n[replica]\nurl = \"postgres://ls@db/r\"\npassword = \"aws-secretsmanager:prod/db#password\"\n"
        );
        let mut c = parse(&text, &[("KAFKA_PW", "k-secret")]).expect("valid");
        let k = c.kafka.security.as_ref().expect("security");
        assert_eq!(k.password.as_ref().map(Secret::expose), Some("k-secret"));
        let remote = c.remote_secrets();
        assert_eq!(remote.len(), 1);
        assert_eq!(remote[0].0, "replica.password");
        assert_eq!(remote[0].1, "aws-secretsmanager:prod/db#password");
        // A literal secret that only looks like a reference stays a literal.
        let literal = text.replace(
            "password = \"aws-secretsmanager:prod/db#password\"",
            "password = \"literal:aws-secretsmanager:x\"",
        );
        let mut c = parse(&literal, &[("KAFKA_PW", "k")]).expect("valid");
        assert!(c.remote_secrets().is_empty());
        let password = c.replica.as_ref().and_then(|r| r.password.as_ref());
        assert_eq!(password.map(Secret::expose), Some("aws-secretsmanager:x"));
        let empty = text.replace("prod/db#password", "#password");
        let err = parse(&empty, &[("KAFKA_PW", "k")]).unwrap_err().to_string();
        assert!(
            err.contains("no secret name after `aws-secretsmanager:`"),
            "{err}"
        );
    }

    #[test]
    fn email_alerts_are_checked_and_their_password_resolved() {
        let email = "[alerts.email]\nsmtp-host = \"smtp.example.com\"\nfrom = \"lakesink <ls@example.com>\"\nto = [\"oncall@example.com\"]\n";
        let c = parse(&format!("{BASE}{email}"), &[]).expect("valid");
        let e = c.alerts.and_then(|a| a.email).expect("email");
        assert_eq!((e.tls, e.port()), (SmtpTls::Starttls, 587));
        let auth =
            format!("{BASE}{email}username = \"ls\"\npassword = \"env:SMTP\"\ntls = \"tls\"\n");
        let c = parse(&auth, &[("SMTP", "s3cret")]).expect("valid");
        let e = c.alerts.and_then(|a| a.email).expect("email");
        assert_eq!(e.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(e.port(), 465);
        let bad = |text: &str, field: &str| {
            let err = parse(&format!("{BASE}{text}"), &[("SMTP", "x")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{err}");
        };
        bad("[alerts]\n", "set webhook-url, [alerts.email], or both");
        bad(
            &email.replace("[\"oncall@example.com\"]", "[]"),
            "alerts.email.to",
        );
        bad(
            &format!("{email}username = \"ls\"\n"),
            "alerts.email.username",
        );
        bad(
            &format!("{email}username = \"ls\"\npassword = \"env:SMTP\"\ntls = \"none\"\n"),
            "in the clear",
        );
        bad(
            &email.replace("oncall@example.com", "oncall"),
            "not an e-mail address",
        );
    }

    #[test]
    fn the_service_section_has_defaults_and_can_be_turned_off() {
        let c = parse(BASE, &[]).expect("valid");
        assert_eq!(c.service.http_listen, Some(([127, 0, 0, 1], 9400).into()));
        assert_eq!(c.service.shutdown_timeout_ms, 30_000);
        let c = parse(BASE, &[("LAKESINK__SERVICE__HTTP_LISTEN", "off")]).expect("valid");
        assert_eq!(c.service.http_listen, None);
        let err = parse(BASE, &[("LAKESINK__SERVICE__HTTP_LISTEN", "nowhere")]).unwrap_err();
        assert!(err.to_string().contains("nowhere"), "{err}");
    }

    #[test]
    fn topics_and_regex_are_exclusive() {
        let err = parse(&format!("{BASE}topics = [\"a\"]\n"), &[]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "kafka.topics-regex",
                ..
            }
        ));
        let err = parse("[kafka]\nbrokers = \"b:1\"\n", &[]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "kafka.topics",
                ..
            }
        ));
    }

    #[test]
    fn registry_secrets_are_never_printed() {
        let text = format!(
            "{BASE}[registry]\nurl = \"http://r\"\napi = \"ccompat\"\n[registry.oauth]\ntoken-url = \"http://idp/token\"\nclient-id = \"ls\"\nclient-secret = \"hunter2\"\n"
        );
        let c = parse(&text, &[]).expect("valid");
        assert_eq!(c.registry.api, Some(RegistryApi::Ccompat));
        let oauth = c.registry.oauth.as_ref().expect("oauth");
        assert_eq!(oauth.client_secret.expose(), "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(c.registry.timeout_ms, 10_000);
        let err = parse(&text, &[("LAKESINK__REGISTRY__USERNAME", "u")]).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "registry.oauth",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_get_a_suggestion() {
        let raw = "[raw]\nurl = \"memory://x\"\n";
        for (extra, key, suggestion) in [
            ("\"flush.size\" = 5\n", "raw.flush.size", "flush-size"),
            // A dotted key is named as written, not as the table TOML makes of it.
            ("flush.size = 5\n", "raw.flush.size", "flush-size"),
            ("flush_size = 5\n", "raw.flush_size", "flush-size"),
            ("flush-sise = 5\n", "raw.flush-sise", "flush-size"),
            (
                "rotate.interval.ms = 5\n",
                "raw.rotate.interval.ms",
                "rotate-interval-ms",
            ),
            (
                "[raw.store]\nendpont = \"x\"\n",
                "raw.store.endpont",
                "endpoint",
            ),
        ] {
            let err = parse(&format!("{BASE}{raw}{extra}"), &[]).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("unknown key `{key}`")), "{text}");
            assert!(
                text.contains(&format!("did you mean `{suggestion}`?")),
                "{text}"
            );
        }
        let err = parse(&format!("{BASE}{raw}zzzzzz = 1\n"), &[]).unwrap_err();
        assert!(
            err.to_string().contains("unknown key `raw.zzzzzz`"),
            "{err}"
        );
        assert!(!err.to_string().contains("did you mean"), "{err}");
        // Nothing close: the section's keys are listed instead.
        assert!(err.to_string().contains("expected one of"), "{err}");
        let err = parse(&format!("{BASE}brokerz = 1\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("did you mean `brokers`?"), "{err}");
    }

    #[test]
    fn an_unknown_key_is_named_in_its_own_table() {
        // `flush-size` is a key of [raw], not of [replica].
        let text = format!(
            "{BASE}[raw]\nurl = \"memory://x\"\nflush-size = 5\n[replica]\nflush-size = 5\n"
        );
        let err = parse(&text, &[]).unwrap_err().to_string();
        assert!(err.contains("unknown key `replica.flush-size`"), "{err}");
    }

    #[test]
    fn unknown_env_override_names_the_variable_and_the_right_one() {
        let raw = "[raw]\nurl = \"memory://x\"\n";
        let err = parse(
            &format!("{BASE}{raw}"),
            &[("LAKESINK__RAW__FLUSH_SIZ", "5")],
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("environment override LAKESINK__RAW__FLUSH_SIZ:"),
            "{text}"
        );
        assert!(text.contains("did you mean `flush-size`?"), "{text}");
        assert!(text.contains("LAKESINK__RAW__FLUSH_SIZE"), "{text}");
    }

    #[test]
    fn secrets_resolve_from_env_and_files_and_never_print() {
        let dir = std::env::temp_dir().join(format!("lakesink-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key_file = dir.join("s3-secret");
        std::fs::write(&key_file, "s3-hunter2\n").expect("write");
        let text = format!(
            r#"{BASE}
[registry]
url = "http://r"
username = "u"
password = "env:REG_PW"

[raw]
url = "memory://x"
[raw.store]
secret-access-key = "file:{}"
options = {{ aws_session_token = "literal:env:NOT_A_REFERENCE" }}

[replica]
url = "env:REPLICA_URL"
password = "env:REPLICA_PW"
"#,
            key_file.display()
        );
        let env = [
            ("REG_PW", "reg-hunter2"),
            ("REPLICA_URL", "postgres://u:url-hunter2@h/db"),
            ("REPLICA_PW", "pg-hunter2"),
        ];
        let c = parse(&text, &env).expect("valid");
        assert_eq!(
            c.registry.password.as_ref().map(Secret::expose),
            Some("reg-hunter2")
        );
        let raw = c.raw.as_ref().expect("raw");
        assert_eq!(
            raw.store.secret_access_key.as_ref().map(Secret::expose),
            Some("s3-hunter2")
        );
        assert_eq!(
            raw.store.options["aws_session_token"].expose(),
            "env:NOT_A_REFERENCE"
        );
        let replica = c.replica.as_ref().expect("replica");
        assert_eq!(replica.url.expose(), "postgres://u:url-hunter2@h/db");
        assert_eq!(replica.url.to_string(), "postgres://u:****@h/db");
        assert_eq!(
            replica.password.as_ref().map(Secret::expose),
            Some("pg-hunter2")
        );
        assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
        // A missing variable names the key and the reference, not any value.
        let err = parse(&text, &env[..2]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("replica.password") && msg.contains("env:REPLICA_PW"),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");
        // A resolved URL is validated like a written one.
        let bad = [("REPLICA_URL", "mysql://h/db"), env[0], env[2]];
        assert!(matches!(
            parse(&text, &bad),
            Err(ConfigError::Invalid {
                field: "replica.url",
                ..
            })
        ));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://user:pw@host:5432/db?sslmode=require"),
            "postgres://user:****@host:5432/db?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://user@host/db"),
            "postgres://user@host/db"
        );
        assert_eq!(
            redact_url("postgres://host/db?user=u&password=pw"),
            "postgres://host/db?user=u&password=****"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn bad_toml_names_the_origin() {
        let err = parse("[kafka", &[]).unwrap_err();
        assert!(err.to_string().starts_with("config test.toml:"), "{err}");
    }
}
