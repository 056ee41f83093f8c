//! `lakesink import-connect`: Kafka Connect sink configs (Confluent S3 sink, Confluent JDBC
//! sink, Debezium JDBC sink, Apache Iceberg's sink) converted into one lakesink config, with
//! every key that could not be carried over listed with the reason.
//!
//! Pure: it reads the files it is given and nothing else (no environment, no network). What
//! it emits: every value the Connect config determines, explicitly or by a Connect default
//! that differs from lakesink's (Connect's `delete.enabled` defaults to false, so an import
//! says `delete-enabled = false`). Literal secrets are never copied: the config refers to an
//! environment variable instead, and the notes say which to set (an Iceberg JDBC catalog's
//! password, which would sit inside `lake.catalog-uri`, is left out, and the notes say how to
//! give the URL with it).

mod cfg;
mod converters;
mod iceberg;
mod jdbc;
mod jdbc_url;
mod map;
mod merge;
mod parse;
mod s3;
mod transforms;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::{Config, ConfigError};

/// A connector config's keys and values (Connect REST JSON, a bare config object, or a
/// `.properties` file), for checks that look at a source connector's settings.
pub fn connector_config(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    parse::parse(text).map(|c| c.config)
}

/// One connector config file.
#[derive(Debug, Clone)]
pub struct Input {
    /// How the file is named in messages (its path as given).
    pub name: String,
    pub text: String,
}

impl Input {
    pub fn read(path: &Path) -> Result<Self, ImportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            name: path.display().to_string(),
            text,
        })
    }

    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `kafka.brokers`: connector configs do not hold them (the worker's config does).
    pub brokers: Option<String>,
}

/// A key that was not carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub file: String,
    pub key: String,
    pub reason: String,
}

/// The result of an import.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The lakesink config, TOML.
    pub toml: String,
    /// Keys not carried over, per file in key order.
    pub dropped: Vec<Dropped>,
    /// What the user has to do or know: variables to set, behaviours that differ.
    pub notes: Vec<String>,
    /// The connector of each file: (file, connector name, class).
    pub sources: Vec<(String, String, String)>,
}

impl Imported {
    /// The report as text lines: what was imported, what was not and why, what to do.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (file, name, class) in &self.sources {
            let _ = writeln!(out, "imported {file}: {name} ({class})");
        }
        if self.dropped.is_empty() {
            out.push_str("every key was carried over\n");
        } else {
            out.push_str("not carried over:\n");
            for d in &self.dropped {
                let _ = writeln!(out, "  {}: {}: {}", d.file, d.key, d.reason);
            }
        }
        if !self.notes.is_empty() {
            out.push_str("notes:\n");
            for n in &self.notes {
                let _ = writeln!(out, "  {n}");
            }
        }
        out
    }

    /// The config with the report above it as TOML comments.
    pub fn with_report_comments(&self) -> String {
        let mut out = String::new();
        for line in self.report().lines() {
            let _ = writeln!(out, "# {line}");
        }
        out.push('\n');
        out.push_str(&self.toml);
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Connector { file: String, message: String },
    #[error("{0}")]
    Conflict(String),
    #[error("the imported config does not load ({0}); this is a bug in import-connect")]
    Invalid(ConfigError),
}

/// Converts the connector configs into one lakesink config.
pub fn import(inputs: &[Input], options: &Options) -> Result<Imported, ImportError> {
    if inputs.is_empty() {
        return Err(ImportError::Conflict("no connector config given".into()));
    }
    let parts = inputs.iter().map(map::map).collect::<Result<Vec<_>, _>>()?;
    let merged = merge::merge(parts, options)?;
    let toml = merged.render();
    // What is printed must load (secret references stay unresolved: their variables and
    // files are the user's to provide).
    Config::from_toml_unresolved(&toml, "import-connect output", Vec::new())
        .map_err(ImportError::Invalid)?;
    let mut seen = BTreeSet::new();
    let notes = merged
        .notes
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    Ok(Imported {
        toml,
        dropped: merged.dropped,
        notes,
        sources: merged.sources,
    })
}
