//! Alerts, to a webhook and by e-mail. One outage sends one alert and one recovery: alerts are made only on
//! state transitions, and a component that fails again soon after recovering (flapping)
//! sends nothing new until `min-interval-ms` has passed since its last alert.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lakesink_config::AlertsConfig;

use super::email::Mailer;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlertKind {
    Failing,
    Recovered,
    Failed,
}

impl AlertKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Failing => "failing",
            Self::Recovered => "recovered",
            Self::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Alert {
    pub(crate) kind: AlertKind,
    pub(crate) sink: &'static str,
    pub(crate) component: &'static str,
    pub(crate) error: Option<String>,
}

enum Msg {
    Alert(Alert),
    Flush(oneshot::Sender<()>),
}

/// Sends alerts from a task of its own, so a slow webhook never holds up the pipeline.
#[derive(Clone)]
pub(crate) struct Alerter {
    tx: mpsc::UnboundedSender<Msg>,
}

impl Alerter {
    pub(crate) fn start(config: &AlertsConfig, group: &str) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let webhook = match &config.webhook_url {
            None => None,
            Some(url) => Some(Webhook {
                client: reqwest::Client::builder().timeout(timeout).build()?,
                url: url.expose().to_owned(),
                headers: config
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                    .collect(),
            }),
        };
        let mail = config
            .email
            .as_ref()
            .map(|e| Mailer::new(e, timeout))
            .transpose()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let poster = Poster {
            webhook,
            mail,
            group: group.to_owned(),
        };
        let throttle = Throttle::new(Duration::from_millis(config.min_interval_ms));
        tokio::spawn(run(rx, poster, throttle));
        Ok(Self { tx })
    }

    pub(crate) fn send(&self, alert: Alert) {
        let _ = self.tx.send(Msg::Alert(alert));
    }

    /// Waits until every alert sent so far was posted (or given up), at most `timeout`.
    pub(crate) async fn flush(&self, timeout: Duration) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(timeout, wait).await;
        }
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<Msg>, poster: Poster, mut throttle: Throttle) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                None => return,
                Some(Msg::Flush(done)) => {
                    let _ = done.send(());
                }
                Some(Msg::Alert(alert)) => {
                    if throttle.admit(&alert, Instant::now()) {
                        poster.post(&alert).await;
                    } else {
                        info!(sink = alert.sink, component = alert.component,
                            kind = alert.kind.as_str(), "alert held back (flapping)");
                    }
                }
            },
            _ = tick.tick() => {
                for alert in throttle.due(Instant::now()) {
                    poster.post(&alert).await;
                }
            }
        }
    }
}

/// Decides which transitions become alerts.
pub(crate) struct Throttle {
    min_interval: Duration,
    last: HashMap<(&'static str, &'static str), Outage>,
}

/// Per (sink, component).
struct Outage {
    /// When the last `failing` alert was posted.
    announced_at: Instant,
    /// Whether the current outage was announced: its recovery is posted only then.
    announced: bool,
    /// A failure held back because the last alert was recent; posted if it lasts.
    held: Option<Alert>,
}

impl Throttle {
    pub(crate) fn new(min_interval: Duration) -> Self {
        Self {
            min_interval,
            last: HashMap::new(),
        }
    }

    /// Whether to post `alert` now.
    pub(crate) fn admit(&mut self, alert: &Alert, now: Instant) -> bool {
        let key = (alert.sink, alert.component);
        match alert.kind {
            AlertKind::Failed => true,
            AlertKind::Failing => match self.last.get_mut(&key) {
                Some(o) if now.duration_since(o.announced_at) < self.min_interval => {
                    o.announced = false;
                    o.held = Some(alert.clone());
                    false
                }
                _ => {
                    let o = Outage {
                        announced_at: now,
                        announced: true,
                        held: None,
                    };
                    self.last.insert(key, o);
                    true
                }
            },
            AlertKind::Recovered => match self.last.get_mut(&key) {
                Some(o) => {
                    o.held = None;
                    std::mem::replace(&mut o.announced, false)
                }
                None => false,
            },
        }
    }

    /// Held-back failures that have lasted until `min-interval-ms` after the last alert.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Alert> {
        let mut out = Vec::new();
        for o in self.last.values_mut() {
            if o.held.is_some() && now.duration_since(o.announced_at) >= self.min_interval {
                out.extend(o.held.take());
                o.announced_at = now;
                o.announced = true;
            }
        }
        out
    }
}

struct Poster {
    webhook: Option<Webhook>,
    mail: Option<Mailer>,
    group: String,
}

struct Webhook {
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
}

impl Poster {
    async fn post(&self, alert: &Alert) {
        let text = alert.text(&self.group);
        if let Some(hook) = &self.webhook {
            hook.post(alert, &self.group, &text).await;
        }
        if let Some(mail) = &self.mail {
            let body = alert.body(&self.group, &text);
            retried(alert, "e-mail", || mail.send(&text, body.clone())).await;
        }
    }
}

impl Alert {
    /// One line: the chat message, and the e-mail's subject.
    fn text(&self, group: &str) -> String {
        match (&self.kind, &self.error) {
            (AlertKind::Recovered, _) => format!(
                "lakesink ({group}): sink {} recovered: {} is reachable again",
                self.sink, self.component
            ),
            (kind, error) => format!(
                "lakesink ({group}): sink {} {}: {}: {}",
                self.sink,
                kind.as_str(),
                self.component,
                first_line(error.as_deref().unwrap_or("unknown error"))
            ),
        }
    }

    /// The e-mail's body: the line, then each field, the error in full.
    fn body(&self, group: &str, text: &str) -> String {
        format!(
            "{text}\n\nservice: lakesink\ngroup: {group}\nsink: {}\ncomponent: {}\nstate: {}\nat: {}\nhost: {}\n\nerror:\n{}\n",
            self.sink,
            self.component,
            self.kind.as_str(),
            chrono::Utc::now().to_rfc3339(),
            super::status::hostname(),
            self.error.as_deref().unwrap_or("-"),
        )
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

impl Webhook {
    async fn post(&self, alert: &Alert, group: &str, text: &str) {
        let body = json!({
            "service": "lakesink",
            "group": group,
            "sink": alert.sink,
            "component": alert.component,
            "state": alert.kind.as_str(),
            "error": alert.error,
            "at": chrono::Utc::now().to_rfc3339(),
            // Slack and Teams incoming webhooks show `text`.
            "text": text,
        });
        retried(alert, "webhook", || async {
            let mut req = self.client.post(&self.url).json(&body);
            for (k, v) in &self.headers {
                req = req.header(k, v);
            }
            req.send()
                .await
                .and_then(|r| r.error_for_status())
                .map(drop)
                // The URL is a secret (Slack's carries its token): say only what failed.
                .map_err(|e| lakesink_model::with_causes(&e.without_url()))
        })
        .await;
    }
}

/// Up to three tries, half a second apart and doubling; each failure logged.
async fn retried<F, Fut>(alert: &Alert, to: &str, mut send: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut delay = Duration::from_millis(500);
    for attempt in 1..=3 {
        match send().await {
            Ok(()) => {
                info!(
                    sink = alert.sink,
                    component = alert.component,
                    kind = alert.kind.as_str(),
                    to,
                    "alert sent"
                );
                return;
            }
            Err(error) => {
                warn!(attempt, to, %error, "sending an alert failed");
                if attempt < 3 {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(kind: AlertKind) -> Alert {
        Alert {
            kind,
            sink: "replica",
            component: "database",
            error: Some("connection refused".into()),
        }
    }

    #[test]
    fn the_subject_is_one_line_and_the_body_has_the_error_in_full() {
        let mut failing = alert(AlertKind::Failing);
        failing.error = Some("replica database unavailable\ncaused by: refused".into());
        let text = failing.text("g1");
        assert_eq!(
            text,
            "lakesink (g1): sink replica failing: database: replica database unavailable"
        );
        let body = failing.body("g1", &text);
        assert!(body.starts_with(&format!("{text}\n\n")), "{body}");
        for part in [
            "group: g1",
            "sink: replica",
            "component: database",
            "state: failing",
        ] {
            assert!(body.contains(part), "{part} in {body}");
        }
        assert!(
            body.ends_with("error:\nreplica database unavailable\ncaused by: refused\n"),
            "{body}"
        );
        assert_eq!(
            alert(AlertKind::Recovered).text("g1"),
            "lakesink (g1): sink replica recovered: database is reachable again"
        );
    }

    #[test]
    fn one_outage_is_one_alert_and_one_recovery() {
        let mut t = Throttle::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert!(t.admit(&alert(AlertKind::Failing), t0));
        assert!(t.admit(&alert(AlertKind::Recovered), at(10)));
        // A recovery without an outage is not news.
        assert!(!t.admit(&alert(AlertKind::Recovered), at(11)));
        // Flapping soon after: neither the failure nor its recovery is posted.
        assert!(!t.admit(&alert(AlertKind::Failing), at(20)));
        assert!(!t.admit(&alert(AlertKind::Recovered), at(21)));
        assert!(t.due(at(400)).is_empty());
        // A later outage is announced again.
        assert!(t.admit(&alert(AlertKind::Failing), at(400)));
        assert!(t.admit(&alert(AlertKind::Recovered), at(401)));
        // A final failure is always posted.
        assert!(t.admit(&alert(AlertKind::Failed), at(402)));
    }

    #[test]
    fn a_held_back_failure_that_lasts_is_posted() {
        let mut t = Throttle::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert!(t.admit(&alert(AlertKind::Failing), t0));
        assert!(t.admit(&alert(AlertKind::Recovered), at(10)));
        assert!(!t.admit(&alert(AlertKind::Failing), at(20)));
        assert!(t.due(at(299)).is_empty());
        let due = t.due(at(300));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].kind, AlertKind::Failing);
        assert!(t.due(at(301)).is_empty());
        // It was announced, so its recovery is too.
        assert!(t.admit(&alert(AlertKind::Recovered), at(302)));
    }

    #[test]
    fn components_are_throttled_apart() {
        let mut t = Throttle::new(Duration::from_secs(300));
        let t0 = Instant::now();
        assert!(t.admit(&alert(AlertKind::Failing), t0));
        let mut other = alert(AlertKind::Failing);
        other.component = "registry";
        assert!(t.admit(&other, t0));
    }
}
