//! `[kafka.non-data]`: what to do with records that are not table rows (heartbeats, schema
//! changes, transaction metadata, logical decoding messages, notifications, signals).

use serde::Deserialize;

use crate::ConfigError;

/// What happens to one kind of non-data record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonDataAction {
    /// Counted (`non_data_records_total`) and logged at debug level.
    #[default]
    Skip,
    /// Written to the raw layer under its topic, the whole value as one `value` column; the
    /// replica ignores it.
    Raw,
    /// Refused as a record lakesink cannot take: the service stops, or dead-letters it with
    /// `errors.tolerance = "all"`.
    Error,
}

/// One action per kind; all skipped by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NonDataConfig {
    #[serde(default)]
    pub heartbeat: NonDataAction,
    #[serde(default)]
    pub schema_change: NonDataAction,
    #[serde(default)]
    pub transaction: NonDataAction,
    #[serde(default)]
    pub message: NonDataAction,
    #[serde(default)]
    pub notification: NonDataAction,
    /// Signals are plain JSON no format decodes: skip or error only.
    #[serde(default)]
    pub signal: NonDataAction,
}

impl NonDataConfig {
    /// Each kind by its name in the file, with its action.
    pub fn actions(&self) -> [(&'static str, NonDataAction); 6] {
        [
            ("heartbeat", self.heartbeat),
            ("schema-change", self.schema_change),
            ("transaction", self.transaction),
            ("message", self.message),
            ("notification", self.notification),
            ("signal", self.signal),
        ]
    }

    pub(crate) fn validate(&self, has_raw: bool) -> Result<(), ConfigError> {
        if self.signal == NonDataAction::Raw {
            return Err(ConfigError::Invalid {
                field: "kafka.non-data.signal",
                reason: "signals are plain JSON, not decoded: \"skip\" or \"error\"".into(),
            });
        }
        if !has_raw && self.actions().iter().any(|(_, a)| *a == NonDataAction::Raw) {
            return Err(ConfigError::Invalid {
                field: "kafka.non-data",
                reason: "\"raw\" needs a [raw] section: there is no raw layer to write to".into(),
            });
        }
        Ok(())
    }
}
