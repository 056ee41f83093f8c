//! What an operator sees: metrics, each sink's status, alerts, and the HTTP endpoint that
//! serves them.

pub(crate) mod alerts;
pub(crate) mod http;
mod meter;
pub(crate) mod metrics;
pub(crate) mod status;

pub(crate) use metrics::Metrics;
pub(crate) use status::{Component, Status};

/// Shared by the consuming side, the sinks and the HTTP endpoint.
pub(crate) struct Telemetry {
    pub(crate) metrics: Metrics,
    pub(crate) status: Status,
    pub(crate) alerter: Option<alerts::Alerter>,
}

/// Retries reach `/status` (the sink paused on the system) and the retry counter.
impl lakesink_model::Observe for Telemetry {
    fn retrying(&self, sink: Option<&'static str>, system: lakesink_model::System, error: &str) {
        let c = Component::from(system);
        self.metrics.retry(c.as_str());
        self.status.paused(sink, c, error);
    }

    fn recovered(&self, sink: Option<&'static str>, system: lakesink_model::System) {
        self.status.resumed(sink, system.into());
    }
}

impl Telemetry {
    pub(crate) fn new(sinks: &[&'static str], alerter: Option<alerts::Alerter>) -> Self {
        Self {
            metrics: Metrics::new(),
            status: Status::new(sinks, alerter.clone()),
            alerter,
        }
    }
}
