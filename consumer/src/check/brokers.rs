//! `check`'s metadata request. librdkafka's own lines are kept out of the report (an
//! unreachable broker made ~200 of them for a 5-line report); the first thing it said went
//! wrong goes into the FAIL line instead, with the setting to look at.

use std::sync::Mutex;

use lakesink_config::KafkaConfig;
use rdkafka::client::OAuthToken;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext};
use tracing::debug;

use super::TIMEOUT;
use crate::kafka_auth::{self, KafkaAuth};

/// The brokers' count and the topics they list, or why not, said in one line.
pub(super) fn metadata(k: &KafkaConfig) -> Result<(usize, Vec<String>), String> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &k.brokers)
        .set("group.id", &k.group_id);
    kafka_auth::configure(k, &mut cc).map_err(|e| format!("{e:#}"))?;
    for (key, v) in &k.properties {
        cc.set(key, v);
    }
    let context = Quiet {
        auth: KafkaAuth::new(k).map_err(|e| format!("{e:#}"))?,
        first: Mutex::new(None),
    };
    let consumer: BaseConsumer<Quiet> =
        cc.create_with_context(context).map_err(|e| e.to_string())?;
    match consumer.fetch_metadata(None, TIMEOUT) {
        Ok(md) => Ok((
            md.brokers().len(),
            md.topics().iter().map(|t| t.name().to_owned()).collect(),
        )),
        Err(e) => {
            // librdkafka's logs and errors reach the context through its queue: served here.
            let _ = consumer.poll(std::time::Duration::from_millis(100));
            let first = consumer.context().first.lock().ok().and_then(|f| f.clone());
            Err(failure(&e.to_string(), first.as_deref()))
        }
    }
}

/// The FAIL text: librdkafka's error, the first cause it reported, and what to check.
fn failure(error: &str, first: Option<&str>) -> String {
    let cause = first.unwrap_or(error);
    let auth = [
        "SASL",
        "authentication",
        "Authentication",
        "SSL",
        "certificate",
    ]
    .iter()
    .any(|w| cause.contains(w));
    let what = if auth {
        "check kafka.security (mechanism, credentials, CA file)"
    } else {
        "check kafka.brokers and that the brokers are up and reachable from here"
    };
    match first {
        Some(first) if first != error => format!("{error}; first error: {first}: {what}"),
        _ => format!("{error}: {what}"),
    }
}

struct Quiet {
    auth: KafkaAuth,
    first: Mutex<Option<String>>,
}

impl Quiet {
    fn keep(&self, text: String) {
        if let Ok(mut first) = self.first.lock()
            && first.is_none()
        {
            *first = Some(text);
        }
    }
}

impl ClientContext for Quiet {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        oauthbearer_config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.auth.token(oauthbearer_config)
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        debug!(target: "lakesink::kafka", "librdkafka {fac}: {message}");
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            // "127.0.0.1:9999/bootstrap: Connect to ipv4#127.0.0.1:9999 failed: Connection
            // refused (after 0ms in state CONNECT)": the broker's part says it once.
            let text = message.split_once(": ").map_or(message, |(_, rest)| rest);
            self.keep(text.to_owned());
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        debug!(target: "lakesink::kafka", "librdkafka: {error}: {reason}");
        self.keep(reason.to_owned());
    }
}

impl ConsumerContext for Quiet {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fail_line_says_the_first_cause_and_the_setting() {
        let said = failure(
            "Meta data fetch error: BrokerTransportFailure (Local: Broker transport failure)",
            Some(
                "Connect to ipv4#127.0.0.1:9999 failed: Connection refused (after 0ms in state CONNECT)",
            ),
        );
        assert!(
            said.contains("first error: Connect to ipv4#127.0.0.1:9999 failed: Connection refused"),
            "{said}"
        );
        assert!(
            said.ends_with(
                "check kafka.brokers and that the brokers are up and reachable from here"
            ),
            "{said}"
        );
        let said = failure(
            "Meta data fetch error",
            Some("SASL authentication error: Authentication failed"),
        );
        assert!(
            said.ends_with("check kafka.security (mechanism, credentials, CA file)"),
            "{said}"
        );
        assert_eq!(
            failure("x", None),
            "x: check kafka.brokers and that the brokers are up and reachable from here"
        );
    }
}
