//! What an operator sees: metrics, each sink's status, the brokers' reachability, the
//! assigned partitions, alerts, and the HTTP endpoint that serves them.

pub(crate) mod alerts;
pub(crate) mod brokers;
#[cfg(test)]
mod dashboards;
pub(crate) mod email;
pub(crate) mod http;
mod meter;
pub(crate) mod metrics;
pub(crate) mod partitions;
mod process;
pub(crate) mod status;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use metrics::Metrics;
pub(crate) use status::{Component, Status};

/// Shared by the consuming side, the sinks and the HTTP endpoint.
pub(crate) struct Telemetry {
    pub(crate) metrics: Metrics,
    pub(crate) status: Status,
    pub(crate) brokers: brokers::Brokers,
    pub(crate) partitions: partitions::Partitions,
    pub(crate) alerter: Option<alerts::Alerter>,
}

/// Retries reach `/status` (the sink waiting on the system) and the retry counter.
impl lakesink_model::Observe for Telemetry {
    fn retrying(&self, sink: Option<&'static str>, system: lakesink_model::System, error: &str) {
        let c = Component::from(system);
        self.metrics.retry(c.as_str());
        self.status.waiting(sink, c, error);
    }

    fn recovered(&self, sink: Option<&'static str>, system: lakesink_model::System) {
        self.status.resumed(sink, system.into());
    }
}

/// Who the service is and how long the brokers may be out of reach before `/health` fails.
pub(crate) struct Setup<'a> {
    pub(crate) sinks: &'a [&'static str],
    pub(crate) group: &'a str,
    pub(crate) brokers: &'a str,
    pub(crate) kafka_grace: Duration,
}

impl Telemetry {
    pub(crate) fn new(setup: &Setup<'_>, alerter: Option<alerts::Alerter>) -> Self {
        let metrics = Metrics::new(setup.sinks);
        let status = Status::new(
            setup.sinks,
            status::Identity::new(setup.group),
            alerter.clone(),
            metrics.sink_state.clone(),
        );
        let brokers = brokers::Brokers::new(
            setup.brokers,
            setup.kafka_grace,
            metrics.kafka_reachable.clone(),
            alerter.clone(),
        );
        let partitions =
            partitions::Partitions::new(setup.sinks, metrics.lag.clone(), metrics.sink_lag.clone());
        Self {
            metrics,
            status,
            brokers,
            partitions,
            alerter,
        }
    }

    /// Alive: no sink failed and the brokers have not been out of reach past the grace.
    pub(crate) fn alive(&self) -> Result<(), String> {
        self.status.sinks_alive()?;
        self.brokers.alive()
    }

    /// The whole `/status` document.
    pub(crate) fn status_json(&self) -> serde_json::Value {
        let mut v = self.status.to_json();
        v["kafka"] = self.brokers.to_json();
        v["partitions"] = self.partitions.to_json();
        v
    }

    /// Once a second, whatever else is going on: an outage is reported on time.
    pub(crate) fn start_clock(self: &Arc<Self>) {
        let t = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(t) = t.upgrade() else { return };
                t.brokers.tick();
            }
        });
    }
}
