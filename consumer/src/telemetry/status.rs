//! Each sink's state: RUNNING, WAITING (a component it needs is unavailable and is being
//! retried) or FAILED (it stopped on an error), and the whole service's: UNASSIGNED before the
//! group's first assignment, then RUNNING, or FAILED. Kafka Connect has no WAITING: a task
//! retrying a dependency is RUNNING there, and the Connect-shaped document
//! ([`Status::to_connect_json`]) says so. Transitions are what alerts are made of.

use lakesink_model::{Fault, System};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};

use super::alerts::{Alert, AlertKind, Alerter};
use super::metrics::SinkStateLabels;

pub(crate) const RAW: &str = "raw";
pub(crate) const REPLICA: &str = "replica";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Component {
    Database,
    Registry,
    ObjectStore,
    Kafka,
    /// The records themselves (bad input) or lakesink's own state.
    Data,
}

impl From<System> for Component {
    fn from(s: System) -> Self {
        match s {
            System::Database => Self::Database,
            System::Registry => Self::Registry,
            System::ObjectStore => Self::ObjectStore,
            System::Kafka => Self::Kafka,
        }
    }
}

impl Component {
    /// The component a fault blames: its system, else the data (or lakesink's own state).
    pub(crate) fn of(fault: Fault) -> Self {
        fault.system().map_or(Self::Data, Into::into)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Database => "database",
            Self::Registry => "registry",
            Self::ObjectStore => "object_store",
            Self::Kafka => "kafka",
            Self::Data => "data",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    Waiting,
    Failed,
}

impl State {
    pub(crate) const ALL: [State; 3] = [State::Running, State::Waiting, State::Failed];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Waiting => "WAITING",
            Self::Failed => "FAILED",
        }
    }

    /// Kafka Connect's name for it: a task retrying a dependency is RUNNING.
    fn as_connect(self) -> &'static str {
        match self {
            Self::Running | Self::Waiting => "RUNNING",
            Self::Failed => "FAILED",
        }
    }
}

#[derive(Debug, Clone)]
struct SinkState {
    state: State,
    component: Option<Component>,
    error: Option<String>,
    since_ms: i64,
}

/// Who this process is, as Connect's status API names a connector and its worker.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// The consumer group: what the service is called in `/connectors/<name>/status`.
    pub(crate) name: String,
    /// `host:port` of this process's HTTP endpoint (the host alone before it is bound).
    pub(crate) worker_id: String,
    pub(crate) version: &'static str,
}

impl Identity {
    pub(crate) fn new(group: &str) -> Self {
        Self {
            name: group.to_owned(),
            worker_id: hostname(),
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

pub(crate) struct Status {
    /// In the order the sinks were configured: their task ids in the Connect shape.
    sinks: Mutex<Vec<(&'static str, SinkState)>>,
    assigned: AtomicBool,
    identity: Mutex<Identity>,
    alerter: Option<Alerter>,
    gauge: Family<SinkStateLabels, Gauge>,
}

impl Status {
    pub(crate) fn new(
        sinks: &[&'static str],
        identity: Identity,
        alerter: Option<Alerter>,
        gauge: Family<SinkStateLabels, Gauge>,
    ) -> Self {
        let now = now_ms();
        let sinks = sinks
            .iter()
            .map(|&s| {
                (
                    s,
                    SinkState {
                        state: State::Running,
                        component: None,
                        error: None,
                        since_ms: now,
                    },
                )
            })
            .collect::<Vec<_>>();
        let status = Self {
            sinks: Mutex::new(sinks),
            assigned: AtomicBool::new(false),
            identity: Mutex::new(identity),
            alerter,
            gauge,
        };
        if let Ok(sinks) = status.sinks.lock() {
            for (name, s) in sinks.iter() {
                status.set_gauge(name, s.state);
            }
        }
        status
    }

    /// The HTTP endpoint is bound: the worker id gets its port.
    pub(crate) fn set_port(&self, port: u16) {
        if let Ok(mut id) = self.identity.lock() {
            id.worker_id = format!("{}:{port}", hostname());
        }
    }

    pub(crate) fn identity(&self) -> Option<Identity> {
        self.identity.lock().ok().map(|id| id.clone())
    }

    /// The group gave this process its first assignment.
    pub(crate) fn set_assigned(&self) {
        self.assigned.store(true, Ordering::Relaxed);
    }

    /// `sink` (or every sink, for a component they share) waits for `component`.
    pub(crate) fn waiting(&self, sink: Option<&'static str>, component: Component, error: &str) {
        self.transition(sink, State::Waiting, Some(component), Some(error));
    }

    /// `sink` (or every sink) works again: a waiting sink is running.
    pub(crate) fn resumed(&self, sink: Option<&'static str>, component: Component) {
        self.transition(sink, State::Running, Some(component), None);
    }

    /// `sink` stopped on an error; the process is about to exit.
    pub(crate) fn failed(&self, sink: Option<&'static str>, component: Component, error: &str) {
        self.transition(sink, State::Failed, Some(component), Some(error));
    }

    fn set_gauge(&self, sink: &'static str, now: State) {
        for s in State::ALL {
            self.gauge
                .get_or_create(&SinkStateLabels {
                    sink,
                    state: s.as_str(),
                })
                .set(i64::from(s == now));
        }
    }

    fn transition(
        &self,
        sink: Option<&'static str>,
        to: State,
        component: Option<Component>,
        error: Option<&str>,
    ) {
        let mut alerts = Vec::new();
        {
            let Ok(mut sinks) = self.sinks.lock() else {
                return;
            };
            for (name, s) in sinks.iter_mut() {
                if sink.is_some_and(|want| want != *name) {
                    continue;
                }
                let kind = match (s.state, to) {
                    (State::Failed, _) => continue, // final
                    // Recovery only of the component the sink waits for.
                    (State::Waiting, State::Running) if s.component == component => {
                        AlertKind::Recovered
                    }
                    (State::Running, State::Waiting) => AlertKind::Failing,
                    (_, State::Failed) => AlertKind::Failed,
                    _ => continue,
                };
                let c = component.unwrap_or(Component::Data);
                alerts.push(Alert {
                    kind,
                    sink: name,
                    component: c.as_str(),
                    error: error.map(str::to_owned).or_else(|| s.error.clone()),
                });
                *s = SinkState {
                    state: to,
                    component: (to != State::Running).then_some(c),
                    error: error.map(str::to_owned),
                    since_ms: now_ms(),
                };
                self.set_gauge(name, to);
            }
        }
        if let Some(alerter) = &self.alerter {
            for a in alerts {
                alerter.send(a);
            }
        }
    }

    /// No sink has failed; `Err` names the one that did.
    pub(crate) fn sinks_alive(&self) -> Result<(), String> {
        let sinks = self
            .sinks
            .lock()
            .map_err(|_| "status poisoned".to_owned())?;
        match sinks.iter().find(|(_, s)| s.state == State::Failed) {
            Some((name, s)) => Err(format!(
                "sink {name} failed: {}",
                s.error.as_deref().unwrap_or("")
            )),
            None => Ok(()),
        }
    }

    /// Ready: in the group, and every sink running. `Err` says why not.
    pub(crate) fn ready(&self) -> Result<(), String> {
        if !self.assigned.load(Ordering::Relaxed) {
            return Err("waiting for the consumer group's first assignment".into());
        }
        let sinks = self
            .sinks
            .lock()
            .map_err(|_| "status poisoned".to_owned())?;
        match sinks.iter().find(|(_, s)| s.state != State::Running) {
            Some((name, s)) => Err(format!("sink {name} is {}", s.state.as_str())),
            None => Ok(()),
        }
    }

    /// UNASSIGNED before the first assignment, FAILED once a sink failed, else RUNNING.
    fn service_state(&self, sinks: &[(&'static str, SinkState)]) -> &'static str {
        if sinks.iter().any(|(_, s)| s.state == State::Failed) {
            "FAILED"
        } else if !self.assigned.load(Ordering::Relaxed) {
            "UNASSIGNED"
        } else {
            "RUNNING"
        }
    }

    /// lakesink's own document: identity, the service's state, each sink's.
    pub(crate) fn to_json(&self) -> Value {
        let sinks = self.sinks.lock().map(|s| s.clone()).unwrap_or_default();
        let id = self.identity().unwrap_or_else(|| Identity::new(""));
        let by_name: BTreeMap<&str, Value> = sinks
            .iter()
            .map(|(name, s)| {
                let mut v = json!({
                    "state": s.state.as_str(),
                    "since": rfc3339(s.since_ms),
                });
                if let Some(c) = s.component {
                    v["component"] = json!(c.as_str());
                }
                if let Some(e) = &s.error {
                    v["error"] = json!(e);
                }
                (*name, v)
            })
            .collect();
        json!({
            "name": id.name,
            "type": "sink",
            "version": id.version,
            "worker_id": id.worker_id,
            "state": self.service_state(&sinks),
            "assigned": self.assigned.load(Ordering::Relaxed),
            "sinks": by_name,
        })
    }

    /// Kafka Connect's `GET /connectors/<name>/status`: the service as the connector, each
    /// sink a task (ids in configuration order), a failed sink's error as its `trace`.
    pub(crate) fn to_connect_json(&self) -> Value {
        let sinks = self.sinks.lock().map(|s| s.clone()).unwrap_or_default();
        let id = self.identity().unwrap_or_else(|| Identity::new(""));
        let assigned = self.assigned.load(Ordering::Relaxed);
        let tasks: Vec<Value> = sinks
            .iter()
            .enumerate()
            .map(|(i, (_, s))| {
                let state = if assigned || s.state == State::Failed {
                    s.state.as_connect()
                } else {
                    "UNASSIGNED"
                };
                let mut t = json!({
                    "id": i,
                    "state": state,
                    "worker_id": id.worker_id,
                    "version": id.version,
                });
                if s.state == State::Failed {
                    t["trace"] = json!(s.error.clone().unwrap_or_default());
                }
                t
            })
            .collect();
        json!({
            "name": id.name,
            "connector": {
                "state": self.service_state(&sinks),
                "worker_id": id.worker_id,
                "version": id.version,
            },
            "tasks": tasks,
            "type": "sink",
        })
    }
}

pub(crate) fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

pub(crate) fn rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.to_rfc3339())
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status::new(
            &[RAW, REPLICA],
            Identity {
                name: "g".into(),
                worker_id: "h:1".into(),
                version: "v",
            },
            None,
            Family::default(),
        )
    }

    #[test]
    fn unassigned_then_running_then_waiting_shows_as_running_to_connect() {
        let s = status();
        let c = s.to_connect_json();
        assert_eq!(c["connector"]["state"], "UNASSIGNED");
        assert_eq!(c["tasks"][0]["state"], "UNASSIGNED");
        assert_eq!(s.to_json()["state"], "UNASSIGNED");
        s.set_assigned();
        s.waiting(Some(REPLICA), Component::Database, "refused");
        let own = s.to_json();
        assert_eq!(own["state"], "RUNNING");
        assert_eq!(own["sinks"]["replica"]["state"], "WAITING");
        assert_eq!(own["sinks"]["replica"]["component"], "database");
        let c = s.to_connect_json();
        assert_eq!(c["name"], "g");
        assert_eq!(c["type"], "sink");
        assert_eq!(c["tasks"][1]["state"], "RUNNING");
        assert_eq!(c["tasks"][1]["worker_id"], "h:1");
        assert!(c["tasks"][1].get("trace").is_none());
        assert!(s.ready().is_err());
        assert!(s.sinks_alive().is_ok());
    }

    #[test]
    fn a_failed_sink_is_final_and_carries_its_error_as_the_trace() {
        let s = status();
        s.set_assigned();
        s.failed(
            Some(RAW),
            Component::ObjectStore,
            "403: check raw.store keys",
        );
        s.resumed(Some(RAW), Component::ObjectStore);
        let c = s.to_connect_json();
        assert_eq!(c["connector"]["state"], "FAILED");
        assert_eq!(c["tasks"][0]["state"], "FAILED");
        assert_eq!(c["tasks"][0]["trace"], "403: check raw.store keys");
        assert_eq!(c["tasks"][1]["state"], "RUNNING");
        assert!(s.sinks_alive().unwrap_err().contains("sink raw failed"));
    }

    #[test]
    fn the_state_gauge_has_one_state_set_per_sink() {
        let s = status();
        s.waiting(None, Component::Registry, "down");
        let g = |sink, state| {
            s.gauge
                .get_or_create(&SinkStateLabels { sink, state })
                .get()
        };
        assert_eq!(g(RAW, "WAITING"), 1);
        assert_eq!(g(RAW, "RUNNING"), 0);
        assert_eq!(g(REPLICA, "WAITING"), 1);
        s.resumed(None, Component::Registry);
        assert_eq!(g(REPLICA, "RUNNING"), 1);
        assert_eq!(g(REPLICA, "WAITING"), 0);
    }
}
