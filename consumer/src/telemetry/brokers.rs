//! Whether the Kafka brokers answer. librdkafka reconnects by itself and reports every failed
//! attempt; this turns those reports into one state: RUNNING, or WAITING since a moment, with
//! the last transport error. An outage is logged once when it has lasted [`REPORT_AFTER`]
//! (brief broker restarts say nothing), reminded every [`REMIND_EVERY`], and its end logged;
//! `/health` fails once it has lasted the configured grace.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::alerts::{Alert, AlertKind, Alerter};
use super::status::{now_ms, rfc3339};

/// How long the brokers may be out of reach before it is logged and alerted.
pub(crate) const REPORT_AFTER: Duration = Duration::from_secs(10);
const REMIND_EVERY: Duration = Duration::from_secs(300);
/// The name alerts about the brokers carry in place of a sink's.
const CONSUMER: &str = "consumer";

pub(crate) struct Brokers {
    list: String,
    grace: Duration,
    outage: Mutex<Option<Outage>>,
    reachable: Gauge,
    alerter: Option<Alerter>,
}

struct Outage {
    since: Instant,
    since_ms: i64,
    error: String,
    /// When it was last logged (None: not yet).
    logged: Option<Instant>,
}

impl Brokers {
    pub(crate) fn new(
        list: &str,
        grace: Duration,
        reachable: Gauge,
        alerter: Option<Alerter>,
    ) -> Self {
        reachable.set(1);
        Self {
            list: list.to_owned(),
            grace,
            outage: Mutex::new(None),
            reachable,
            alerter,
        }
    }

    /// A broker could not be reached; `error` is librdkafka's reason. Only an outage already
    /// under way, or `all` (every broker down), makes one.
    pub(crate) fn unreachable(&self, error: &str, all: bool) {
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        match &mut *outage {
            Some(o) => {
                // "1/1 brokers are down" says less than the connection error before it.
                if !error.contains("brokers are down") || o.error.is_empty() {
                    o.error = error.to_owned();
                }
            }
            None if all => {
                debug!(brokers = %self.list, %error, "the Kafka brokers do not answer");
                self.reachable.set(0);
                *outage = Some(Outage {
                    since: Instant::now(),
                    since_ms: now_ms(),
                    error: error.to_owned(),
                    logged: None,
                });
            }
            None => debug!(%error, "a Kafka broker does not answer"),
        }
    }

    /// A broker answered (a record arrived, or librdkafka's statistics show one up).
    pub(crate) fn reachable(&self) {
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        let Some(o) = outage.take() else { return };
        self.reachable.set(1);
        let lasted = o.since.elapsed();
        if o.logged.is_some() {
            info!(brokers = %self.list, "the Kafka brokers are reachable again after {}",
                seconds(lasted));
            self.alert(AlertKind::Recovered, None);
        } else {
            debug!(brokers = %self.list, ?lasted, "the Kafka brokers answer again");
        }
    }

    /// Called every second: logs and alerts an outage that has lasted long enough.
    pub(crate) fn tick(&self) {
        let Ok(mut outage) = self.outage.lock() else {
            return;
        };
        let Some(o) = &mut *outage else { return };
        let lasted = o.since.elapsed();
        let due = match o.logged {
            None => lasted >= REPORT_AFTER,
            Some(at) => at.elapsed() >= REMIND_EVERY,
        };
        if !due {
            return;
        }
        let first = o.logged.is_none();
        o.logged = Some(Instant::now());
        warn!(
            "cannot reach the Kafka brokers {} (kafka.brokers) for {}: {}; retrying, /health \
             fails after {}",
            self.list,
            seconds(lasted),
            o.error,
            seconds(self.grace)
        );
        if first {
            let error = o.error.clone();
            drop(outage);
            self.alert(AlertKind::Failing, Some(error));
        }
    }

    fn alert(&self, kind: AlertKind, error: Option<String>) {
        if let Some(a) = &self.alerter {
            a.send(Alert {
                kind,
                sink: CONSUMER,
                component: "kafka",
                error,
            });
        }
    }

    /// `Err` once the brokers have been out of reach longer than the grace.
    pub(crate) fn alive(&self) -> Result<(), String> {
        match self.outage.lock().as_deref() {
            Ok(Some(o)) if o.since.elapsed() > self.grace => Err(format!(
                "cannot reach the Kafka brokers {} for {}: {}",
                self.list,
                seconds(o.since.elapsed()),
                o.error
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        match self.outage.lock().as_deref() {
            Ok(Some(o)) => json!({
                "state": "WAITING",
                "brokers": self.list,
                "since": rfc3339(o.since_ms),
                "error": o.error,
            }),
            _ => json!({"state": "RUNNING", "brokers": self.list}),
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_broker_down_is_no_outage_all_down_is_until_one_answers() {
        let b = Brokers::new("k:9092", Duration::ZERO, Gauge::default(), None);
        b.unreachable("k:9092/1: Connection refused", false);
        assert_eq!(b.to_json()["state"], "RUNNING");
        b.unreachable("k:9092/bootstrap: Connect failed: Connection refused", true);
        b.unreachable("1/1 brokers are down", true);
        let v = b.to_json();
        assert_eq!(v["state"], "WAITING");
        assert_eq!(
            v["error"], "k:9092/bootstrap: Connect failed: Connection refused",
            "the connection error is kept over the count of brokers down"
        );
        assert_eq!(b.reachable.get(), 0);
        std::thread::sleep(Duration::from_millis(5));
        assert!(b.alive().unwrap_err().contains("Connection refused"));
        b.reachable();
        assert_eq!(b.to_json()["state"], "RUNNING");
        assert_eq!(b.reachable.get(), 1);
        assert!(b.alive().is_ok());
    }

    #[test]
    fn health_holds_within_the_grace() {
        let b = Brokers::new("k:9092", Duration::from_secs(60), Gauge::default(), None);
        b.unreachable("Connection refused", true);
        b.tick();
        assert!(b.alive().is_ok());
    }
}
