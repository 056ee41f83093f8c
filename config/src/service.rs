//! How the process presents itself to operators: the HTTP endpoint, logs, shutdown, alerts.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::Secret;

/// `[service]`: every key has a default, so the section may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServiceConfig {
    /// Where `/metrics`, `/health`, `/ready` and `/status` are served; `"off"` for none.
    /// Port 0 picks a free port (logged at start).
    #[serde(default = "default_http_listen", deserialize_with = "listen")]
    pub http_listen: Option<SocketAddr>,
    #[serde(default)]
    pub log_format: LogFormat,
    /// On SIGTERM or SIGINT: how long to flush and commit before exiting anyway. Whatever
    /// was not made durable by then is read again on the next start.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u64,
    /// How long every broker may be out of reach before `/health` fails (and an orchestrator
    /// restarts the process). Consuming waits and retries the brokers meanwhile; the outage
    /// is in `/status`, `lakesink_kafka_reachable` and an alert from the first 10 s.
    #[serde(default = "default_kafka_grace_ms")]
    pub kafka_grace_ms: u64,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            http_listen: default_http_listen(),
            log_format: LogFormat::default(),
            shutdown_timeout_ms: default_shutdown_timeout_ms(),
            kafka_grace_ms: default_kafka_grace_ms(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per line, with the event's fields, for log shippers.
    Json,
}

/// `[alerts]`: when a sink fails or loses a component (database, registry, object store),
/// and once more when it recovers, a JSON alert is posted to `webhook-url` and an e-mail sent
/// as `[alerts.email]` says (either or both).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AlertsConfig {
    pub webhook_url: Option<Secret>,
    pub email: Option<EmailConfig>,
    /// Extra request headers, e.g. `Authorization`; values are secrets.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// A component that recovers and fails again within this time sends no new alert
    /// (flapping); its state is still reported in `/status`.
    #[serde(default = "default_alert_min_interval_ms")]
    pub min_interval_ms: u64,
    /// Per-request timeout; a failed post is retried a few times, then logged.
    #[serde(default = "default_alert_timeout_ms")]
    pub timeout_ms: u64,
}

/// `[alerts.email]`: the SMTP server alerts are sent through.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EmailConfig {
    pub smtp_host: String,
    /// Default 587 with `starttls`, 465 with `tls`, 25 with `none`.
    pub smtp_port: Option<u16>,
    #[serde(default)]
    pub tls: SmtpTls,
    /// PEM file of extra CA certificates for the server's, beside the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// AUTH (PLAIN or LOGIN, as the server offers); both or neither.
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// `Name <address>` or an address.
    pub from: String,
    pub to: Vec<String>,
}

impl EmailConfig {
    pub fn port(&self) -> u16 {
        self.smtp_port.unwrap_or(match self.tls {
            SmtpTls::Starttls => 587,
            SmtpTls::Tls => 465,
            SmtpTls::None => 25,
        })
    }
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SmtpTls {
    /// Plain, then STARTTLS, which must succeed (submission, port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No TLS: only for a relay on the same host; never with a password.
    None,
}

fn default_http_listen() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 9400)))
}

fn default_shutdown_timeout_ms() -> u64 {
    30_000
}

fn default_kafka_grace_ms() -> u64 {
    300_000
}

fn default_alert_min_interval_ms() -> u64 {
    300_000
}

fn default_alert_timeout_ms() -> u64 {
    5_000
}

fn listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s == "off" {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{s}` is not an address such as \"127.0.0.1:9400\" or \"off\": {e}"
        ))
    })
}
