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

/// `[alerts]`: a JSON alert is posted to `webhook-url` when a sink fails or loses a
/// component (database, registry, object store), and once more when it recovers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AlertsConfig {
    pub webhook_url: Secret,
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
