//! `[errors]`: what a record that cannot be decoded does, as Kafka Connect's `errors.*`.

use serde::Deserialize;

use crate::ConfigError;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ErrorsConfig {
    #[serde(default)]
    pub tolerance: Tolerance,
    /// With `tolerance = "all"`: where bad records go, as they were read (key, value,
    /// headers). Required then: a record is never dropped without a trace.
    pub dead_letter_topic: Option<String>,
    /// Add `__connect.errors.*` headers (topic, partition, offset, stage, error), as
    /// Kafka Connect's `errors.deadletterqueue.context.headers.enable`.
    #[serde(default = "default_true")]
    pub dead_letter_context_headers: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tolerance {
    /// Stop on the first bad record, naming topic, partition and offset.
    #[default]
    None,
    /// Send bad records to the dead-letter topic and go on.
    All,
}

fn default_true() -> bool {
    true
}

impl ErrorsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match (self.tolerance, &self.dead_letter_topic) {
            (Tolerance::All, None) => Err(ConfigError::Invalid {
                field: "errors.dead-letter-topic",
                reason: "is required with tolerance = \"all\": bad records go there".into(),
            }),
            (_, Some(t)) if t.trim().is_empty() => Err(ConfigError::Invalid {
                field: "errors.dead-letter-topic",
                reason: "must not be empty".into(),
            }),
            _ => Ok(()),
        }
    }
}
