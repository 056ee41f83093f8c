//! lakesink's configuration: TOML with kebab-case keys, unknown keys rejected,
//! and `LAKESINK__SECTION__KEY` environment overrides applied before validation.
//!
//! This is the only crate that reads the process environment.

mod kafka_security;
mod overrides;
mod raw;
mod replica;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

pub use kafka_security::{
    KafkaOAuth, KafkaSecurity, MskIam, SaslMechanism, SecurityProtocol, msk_region_of,
};
pub use overrides::ENV_PREFIX;
pub use raw::{
    Codec, Content, PartitionerKind, RawConfig, StoreConfig, TimestampSource, Tombstones,
};
pub use replica::{KeylessMode, PkMode, ReplicaConfig, SchemaEvolution};

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
}

/// Where records come from: one consumer group over a topic list or a regex.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`, comma separated.
    pub brokers: String,
    #[serde(default = "default_group_id")]
    pub group_id: String,
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
}

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
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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

/// A value that is never printed: `Debug` shows `****`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
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
    #[error("config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
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

    /// Parses TOML text; `origin` names it in errors.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        overrides::apply(&mut doc, env)?;
        let config: Config = doc
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                origin: origin.to_owned(),
                message: e.to_string(),
            })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
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
        let r = &self.registry;
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.kafka.format, RecordFormat::Avro);
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
    fn env_override_of_unknown_key_names_the_variable() {
        let err = parse(BASE, &[("LAKESINK__KAFKA__NOPE", "1")]).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
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
    fn bad_toml_names_the_origin() {
        let err = parse("[kafka", &[]).unwrap_err();
        assert!(err.to_string().starts_with("config test.toml:"), "{err}");
    }
}
