//! What mapping one connector works on: its remaining Connect keys ([`Cfg`]) and the
//! lakesink sections it fills ([`Connector`]), with the helpers shared by every mapping.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use toml::Value;

use super::{Dropped, ImportError};

pub(super) const NO_SMT: &str = "lakesink applies no single message transforms";
pub(super) const RETRIES: &str = "lakesink retries an unreachable registry, object store or database with capped backoff and no deadline; other errors stop it";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    S3,
    ConfluentJdbc,
    DebeziumJdbc,
    Iceberg,
}

impl Kind {
    pub(super) fn is_jdbc(self) -> bool {
        matches!(self, Kind::ConfluentJdbc | Kind::DebeziumJdbc)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Topics {
    List(Vec<String>),
    Regex(String),
}

/// An ordered TOML table being built.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Section(pub(super) Vec<(String, Value)>);

impl Section {
    pub(super) fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `key = value` lines; a key that is not a bare TOML key (`header.X-Tenant`) is quoted.
    pub(super) fn render(&self, out: &mut String) {
        for (k, v) in &self.0 {
            let bare = !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if bare {
                let _ = writeln!(out, "{k} = {v}");
            } else {
                let _ = writeln!(out, "{} = {v}", Value::String(k.clone()));
            }
        }
    }
}

/// What one connector config gives.
#[derive(Debug)]
pub(crate) struct Connector {
    pub(super) file: String,
    pub(super) name: String,
    pub(super) class: String,
    pub(super) kind: Kind,
    pub(super) topics: Topics,
    /// The brokers a connector setting names, and that setting.
    pub(super) brokers: Option<(String, &'static str)>,
    pub(super) format: Option<&'static str>,
    pub(super) registry: Section,
    pub(super) oauth: Section,
    pub(super) raw: Section,
    pub(super) store: Section,
    pub(super) store_options: Section,
    pub(super) replica: Section,
    pub(super) lake: Section,
    pub(super) lake_properties: Section,
    pub(super) lake_store: Section,
    pub(super) lake_store_options: Section,
    pub(super) errors: Section,
    /// `[[columns]]` policies, from `ReplaceField` transforms, in order.
    pub(super) columns: Vec<Section>,
    /// The value fields a `ValueToKey` transform makes the record key of.
    pub(super) value_to_key: Option<Vec<String>>,
    pub(super) dropped: Vec<Dropped>,
    pub(super) notes: Vec<String>,
}

impl Connector {
    pub(super) fn new(file: String, name: String, class: String, kind: Kind) -> Self {
        Self {
            file,
            name,
            class,
            kind,
            topics: Topics::List(Vec::new()),
            brokers: None,
            format: None,
            registry: Section::default(),
            oauth: Section::default(),
            raw: Section::default(),
            store: Section::default(),
            store_options: Section::default(),
            replica: Section::default(),
            lake: Section::default(),
            lake_properties: Section::default(),
            lake_store: Section::default(),
            lake_store_options: Section::default(),
            errors: Section::default(),
            columns: Vec::new(),
            value_to_key: None,
            dropped: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// A connector's remaining keys, taken one by one as they are mapped.
pub(super) struct Cfg<'a> {
    pub(super) file: &'a str,
    pub(super) map: BTreeMap<String, String>,
    pub(super) dropped: Vec<Dropped>,
    pub(super) notes: Vec<String>,
}

impl<'a> Cfg<'a> {
    pub(super) fn new(file: &'a str, map: BTreeMap<String, String>) -> Self {
        Self {
            file,
            map,
            dropped: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(super) fn err(&self, message: impl Into<String>) -> ImportError {
        ImportError::Connector {
            file: self.file.to_owned(),
            message: message.into(),
        }
    }

    pub(super) fn take(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    /// A non-secret value; a config-provider reference (`${file:…}`) cannot be carried.
    pub(super) fn plain(&mut self, key: &str) -> Option<String> {
        let v = self.take(key)?;
        if has_provider_reference(&v) {
            self.drop(
                key,
                "a config-provider reference in a key lakesink does not resolve references in; set the value in the config",
            );
            return None;
        }
        Some(v)
    }

    pub(super) fn drop(&mut self, key: &str, reason: impl Into<String>) {
        self.map.remove(key);
        self.list_dropped(key, reason);
    }

    /// Lists as not carried over a key already taken (or a part of one, or a group).
    pub(super) fn list_dropped(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.dropped.push(Dropped {
            file: self.file.to_owned(),
            key: key.into(),
            reason: reason.into(),
        });
    }

    pub(super) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(super) fn int(&mut self, key: &str) -> Result<Option<i64>, ImportError> {
        match self.plain(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.err(format!("`{key}` = {v:?} is not an integer"))),
        }
    }

    pub(super) fn bool(&mut self, key: &str) -> Result<Option<bool>, ImportError> {
        match self.plain(key) {
            None => Ok(None),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                _ => Err(self.err(format!("`{key}` = {v:?} is not true or false"))),
            },
        }
    }

    pub(super) fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.map
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Drops each of `keys` that is set, for `reason`.
    pub(super) fn drop_set(&mut self, keys: &[&str], reason: &str) {
        for k in keys {
            if self.map.contains_key(*k) {
                self.drop(k, reason);
            }
        }
    }

    /// Translates a secret for lakesink: a Connect config-provider reference into `env:` or
    /// `file:` where one matches, else a reference to `var` that the user is told to set.
    pub(super) fn secret(
        &mut self,
        key: &str,
        value: &str,
        var: &str,
        lakesink_key: &str,
    ) -> String {
        let what = if key.contains(" ") {
            key.to_owned()
        } else {
            format!("the value of `{key}`")
        };
        let fallback = |this: &mut Self, why: String| {
            this.note(format!(
                "{lakesink_key} = \"env:{var}\": set {var} to {what} of {} ({why})",
                this.file
            ));
            format!("env:{var}")
        };
        match provider_reference(value) {
            None => fallback(self, "not copied: secrets are never printed".into()),
            Some((provider, path, name)) => match provider.as_str() {
                "env" => {
                    self.note(format!(
                        "{lakesink_key} = \"env:{name}\": read from the variable {name}, as `{value}` of {} was",
                        self.file
                    ));
                    format!("env:{name}")
                }
                "directory" | "dir" if !path.is_empty() => {
                    let file = format!("{}/{name}", path.trim_end_matches('/'));
                    self.note(format!(
                        "{lakesink_key} = \"file:{file}\": read from that file, as `{value}` of {} was",
                        self.file
                    ));
                    format!("file:{file}")
                }
                // MSK's and Lenses' AWS Secrets Manager providers: `${…:NAME:KEY}` is KEY of
                // the JSON secret NAME, `${…:NAME}` the whole secret.
                "secretsmanager" | "aws" | "aws-secretsmanager" => {
                    let reference = if path.is_empty() {
                        format!("aws-secretsmanager:{name}")
                    } else {
                        format!("aws-secretsmanager:{path}#{name}")
                    };
                    self.note(format!(
                        "{lakesink_key} = \"{reference}\": read from AWS Secrets Manager at load time, as `{value}` of {} was",
                        self.file
                    ));
                    reference
                }
                "file" => fallback(
                    self,
                    format!(
                        "it came from `{value}`, a key in a properties file; lakesink's `file:` reads a whole file, so a file holding only the secret also works"
                    ),
                ),
                _ => fallback(
                    self,
                    format!("it came from `{value}`: lakesink has no `{provider}` provider"),
                ),
            },
        }
    }
}

/// Whether text holds a config-provider reference, `${provider:…}` (not a placeholder such
/// as `${topic}`).
pub(super) fn has_provider_reference(text: &str) -> bool {
    text.split("${").skip(1).any(|rest| {
        rest.split('}')
            .next()
            .is_some_and(|inner| inner.contains(':'))
    })
}

/// `${provider:path:key}` or `${provider:key}` → (provider, path, key).
fn provider_reference(value: &str) -> Option<(String, String, String)> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    let (provider, rest) = inner.split_once(':')?;
    let (path, key) = match rest.rsplit_once(':') {
        Some((p, k)) => (p.to_owned(), k.to_owned()),
        None => (String::new(), rest.to_owned()),
    };
    Some((provider.to_owned(), path, key))
}

pub(super) fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(super) fn last_segment(class: &str) -> &str {
    class.rsplit(['.', '$']).next().unwrap_or(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_references() {
        assert_eq!(
            provider_reference("${file:/opt/s.properties:pw}"),
            Some(("file".into(), "/opt/s.properties".into(), "pw".into()))
        );
        assert_eq!(
            provider_reference("${env:PG_PW}"),
            Some(("env".into(), String::new(), "PG_PW".into()))
        );
        assert_eq!(provider_reference("plain"), None);
        assert!(has_provider_reference("x${vault:secret/pg:pw}"));
        assert!(!has_provider_reference("${topic}"));
        assert!(!has_provider_reference("${source.schema}.${source.table}"));
    }

    fn secret_of(value: &str) -> (String, Vec<String>) {
        let mut cfg = Cfg {
            file: "f.json",
            map: BTreeMap::new(),
            dropped: Vec::new(),
            notes: Vec::new(),
        };
        let r = cfg.secret("connection.password", value, "VAR", "replica.password");
        (r, cfg.notes)
    }

    #[test]
    fn secrets_become_references() {
        let (r, notes) = secret_of("hunter2");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("set VAR") && !notes[0].contains("hunter2"));
        assert_eq!(secret_of("${env:PG}").0, "env:PG");
        assert_eq!(
            secret_of("${directory:/run/secrets/:pg}").0,
            "file:/run/secrets/pg"
        );
        let (r, notes) = secret_of("${file:/etc/c.properties:pw}");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("${file:/etc/c.properties:pw}"));
        // AWS Secrets Manager, as MSK's and Lenses' config providers name it.
        let (r, notes) = secret_of("${secretsmanager:prod/db:password}");
        assert_eq!(r, "aws-secretsmanager:prod/db#password");
        assert!(notes[0].contains("AWS Secrets Manager"), "{notes:?}");
        assert_eq!(
            secret_of("${aws:prod/db:password}").0,
            "aws-secretsmanager:prod/db#password"
        );
        assert_eq!(
            secret_of("${secretsmanager:prod/db-password}").0,
            "aws-secretsmanager:prod/db-password"
        );
        let (r, notes) = secret_of("${vault:secret/db:password}");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("no `vault` provider"), "{notes:?}");
    }
}
