//! Each sink's state, as Kafka Connect's status API reports a task's: RUNNING, PAUSED (a
//! component it needs is unavailable and is being retried) or FAILED (it stopped on an
//! error). Transitions are what alerts are made of.

use lakesink_model::{Fault, System};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::alerts::{Alert, AlertKind, Alerter};

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
    Paused,
    Failed,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
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

pub(crate) struct Status {
    sinks: Mutex<BTreeMap<&'static str, SinkState>>,
    assigned: AtomicBool,
    alerter: Option<Alerter>,
}

impl Status {
    pub(crate) fn new(sinks: &[&'static str], alerter: Option<Alerter>) -> Self {
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
            .collect();
        Self {
            sinks: Mutex::new(sinks),
            assigned: AtomicBool::new(false),
            alerter,
        }
    }

    /// The group gave this process its first assignment.
    pub(crate) fn set_assigned(&self) {
        self.assigned.store(true, Ordering::Relaxed);
    }

    /// `sink` (or every sink, for a component they share) waits for `component`.
    pub(crate) fn paused(&self, sink: Option<&'static str>, component: Component, error: &str) {
        self.transition(sink, State::Paused, Some(component), Some(error));
    }

    /// `sink` (or every sink) works again: a paused sink is running.
    pub(crate) fn resumed(&self, sink: Option<&'static str>, component: Component) {
        self.transition(sink, State::Running, Some(component), None);
    }

    /// `sink` stopped on an error; the process is about to exit.
    pub(crate) fn failed(&self, sink: Option<&'static str>, component: Component, error: &str) {
        self.transition(sink, State::Failed, Some(component), Some(error));
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
            for (&name, s) in sinks.iter_mut() {
                if sink.is_some_and(|want| want != name) {
                    continue;
                }
                let kind = match (s.state, to) {
                    (State::Failed, _) => continue, // final
                    // Recovery only of the component the sink waits for.
                    (State::Paused, State::Running) if s.component == component => {
                        AlertKind::Recovered
                    }
                    (State::Running, State::Paused) => AlertKind::Failing,
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
            }
        }
        if let Some(alerter) = &self.alerter {
            for a in alerts {
                alerter.send(a);
            }
        }
    }

    /// Alive: no sink has failed.
    pub(crate) fn healthy(&self) -> bool {
        self.sinks
            .lock()
            .map(|s| s.values().all(|s| s.state != State::Failed))
            .unwrap_or(false)
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

    pub(crate) fn to_json(&self) -> Value {
        let sinks: BTreeMap<&str, Value> = self
            .sinks
            .lock()
            .map(|sinks| {
                sinks
                    .iter()
                    .map(|(name, s)| {
                        let mut v = json!({
                            "state": s.state.as_str(),
                            "since": chrono::DateTime::from_timestamp_millis(s.since_ms)
                                .map(|t| t.to_rfc3339()),
                        });
                        if let Some(c) = s.component {
                            v["component"] = json!(c.as_str());
                        }
                        if let Some(e) = &s.error {
                            v["error"] = json!(e);
                        }
                        (*name, v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "assigned": self.assigned.load(Ordering::Relaxed),
            "sinks": sinks,
        })
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
