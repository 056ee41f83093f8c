//! Security towards the brokers: `[kafka.security]` mapped onto librdkafka properties, the
//! OAUTHBEARER tokens lakesink makes itself (OAuth client credentials, AWS MSK IAM, unsecured
//! JWTs), and authentication failures reported so that an operator sees what failed.
//!
//! librdkafka asks for a token when it first connects and again at 80% of the token's
//! lifetime; rdkafka calls [`KafkaAuth::token`] from the thread polling the consumer. Fetching
//! a token may need the network (a token endpoint, the AWS credential chain), so it runs on a
//! small runtime of its own and the caller waits for it. A renewal that fails while the
//! current token is still valid keeps the current token, so a short outage of the token
//! endpoint does not stop lakesink; a token that cannot be had at all is an authentication
//! error, which stops it.

mod msk_iam;
mod oauth;

use std::error::Error;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use lakesink_config::{KafkaConfig, KafkaSecurity, SaslMechanism, msk_region_of};
use rdkafka::ClientConfig;
use rdkafka::client::OAuthToken;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tracing::{error, info, warn};

pub(crate) use msk_iam::MskIamTokens;

/// How long the consumer waits for a token.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// A token with less life than this left is not served again after a failed renewal.
const MIN_LIFE_LEFT_MS: i64 = 30_000;

/// An OAUTHBEARER token for librdkafka.
#[derive(Clone)]
pub(crate) struct Token {
    pub(crate) value: String,
    pub(crate) principal: String,
    /// When it expires, in ms since the epoch.
    pub(crate) lifetime_ms: i64,
}

/// Sets the librdkafka properties `[kafka.security]` implies, checking that the files it names
/// can be read. The raw `kafka.properties` are set after these, and win.
pub(crate) fn configure(config: &KafkaConfig, cc: &mut ClientConfig) -> anyhow::Result<()> {
    for (key, value) in properties(config.security.as_ref())? {
        cc.set(key, value);
    }
    Ok(())
}

fn properties(security: Option<&KafkaSecurity>) -> anyhow::Result<Vec<(&'static str, String)>> {
    let Some(s) = security else {
        return Ok(Vec::new());
    };
    let protocol = s.effective_protocol();
    let mut props = vec![("security.protocol", protocol.as_str().to_owned())];
    if protocol.is_tls() {
        let ca = match &s.ca_file {
            Some(path) => readable("kafka.security.ca-file", path)?,
            // librdkafka looks for the system's CA store in the usual places.
            None => "probe".to_owned(),
        };
        props.push(("ssl.ca.location", ca));
        if let (Some(cert), Some(key)) = (&s.cert_file, &s.key_file) {
            props.push((
                "ssl.certificate.location",
                readable("kafka.security.cert-file", cert)?,
            ));
            props.push((
                "ssl.key.location",
                readable("kafka.security.key-file", key)?,
            ));
        }
        if let Some(password) = &s.key_password {
            props.push(("ssl.key.password", password.expose().to_owned()));
        }
        let check = if s.verify_hostname { "https" } else { "none" };
        props.push(("ssl.endpoint.identification.algorithm", check.to_owned()));
    }
    if let Some(mechanism) = s.mechanism {
        props.push(("sasl.mechanism", mechanism.wire_name().to_owned()));
        if let (Some(username), Some(password)) = (&s.username, &s.password) {
            props.push(("sasl.username", username.clone()));
            props.push(("sasl.password", password.expose().to_owned()));
        }
    }
    Ok(props)
}

fn readable(field: &str, path: &Path) -> anyhow::Result<String> {
    std::fs::File::open(path).with_context(|| format!("{field} {}", path.display()))?;
    Ok(path.display().to_string())
}

/// Where lakesink's OAUTHBEARER tokens come from.
enum Source {
    ClientCredentials(oauth::ClientCredentials),
    MskIam(MskIamTokens),
    /// `enable.sasl.oauthbearer.unsecure.jwt` in the raw properties: librdkafka makes the first
    /// token itself but hands the renewals to lakesink.
    Unsecured,
}

/// The security part of the consumer's rdkafka context.
pub(crate) struct KafkaAuth {
    source: Option<Arc<Source>>,
    worker: Option<Worker>,
    /// The last token handed out, served again if a renewal fails while it is valid.
    last: Mutex<Option<Token>>,
    /// Brokers, protocol, mechanism and user, for error messages.
    describe: String,
}

impl KafkaAuth {
    pub(crate) fn new(config: &KafkaConfig) -> anyhow::Result<Self> {
        let security = config.security.as_ref();
        let raw = |key: &str| config.properties.get(key).map(String::as_str);
        let source = match security.and_then(|s| s.mechanism) {
            Some(SaslMechanism::OAuthBearer) => {
                let oauth = security
                    .and_then(|s| s.oauth.as_ref())
                    .context("kafka.security.oauth is required with mechanism oauthbearer")?;
                Some(Source::ClientCredentials(oauth::ClientCredentials::new(
                    oauth,
                )?))
            }
            Some(SaslMechanism::AwsMskIam) => {
                let aws = security.map(|s| s.aws.clone()).unwrap_or_default();
                let region = aws
                    .region
                    .clone()
                    .or_else(|| msk_region_of(&config.brokers));
                Some(Source::MskIam(MskIamTokens::new(aws, region)))
            }
            _ if raw("enable.sasl.oauthbearer.unsecure.jwt")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")) =>
            {
                Some(Source::Unsecured)
            }
            _ => None,
        };
        let worker = match &source {
            Some(Source::ClientCredentials(_) | Source::MskIam(_)) => Some(Worker::start()?),
            _ => None,
        };
        // What is in effect: the typed settings, then the raw properties over them.
        let mut protocol = "plaintext".to_owned();
        let mut mechanism = None;
        let mut user = None;
        if let Some(s) = security {
            protocol = s.effective_protocol().as_str().to_owned();
            mechanism = s.mechanism.map(|m| match m {
                SaslMechanism::AwsMskIam => "OAUTHBEARER (AWS MSK IAM)".to_owned(),
                m => m.wire_name().to_owned(),
            });
            user = s.username.clone();
        }
        if let Some(p) = raw("security.protocol") {
            protocol = p.to_lowercase();
        }
        if let Some(m) = raw("sasl.mechanism").or(raw("sasl.mechanisms")) {
            mechanism = Some(m.to_owned());
        }
        if let Some(u) = raw("sasl.username") {
            user = Some(u.to_owned());
        }
        let mut describe = format!("brokers {} over {protocol}", config.brokers);
        if let Some(m) = mechanism.filter(|_| protocol.starts_with("sasl")) {
            describe.push_str(&format!(" with SASL {m}"));
            if let Some(u) = user {
                describe.push_str(&format!(" as {u}"));
            }
        }
        Ok(Self {
            source: source.map(Arc::new),
            worker,
            last: Mutex::new(None),
            describe,
        })
    }

    /// A token for librdkafka (rdkafka's `ClientContext::generate_oauth_token`).
    pub(crate) fn token(
        &self,
        oauthbearer_config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn Error>> {
        let fetched = match (self.source.as_deref(), &self.worker) {
            (Some(Source::Unsecured), _) => oauth::unsecured_jwt(oauthbearer_config),
            (Some(_), Some(worker)) => {
                let source = self.source.clone();
                worker.run(async move {
                    match source.as_deref() {
                        Some(Source::ClientCredentials(c)) => c.token().await,
                        Some(Source::MskIam(m)) => m.token().await,
                        _ => Err("no token source".to_owned()),
                    }
                })
            }
            _ => Err(format!(
                "SASL OAUTHBEARER needs a token source: set kafka.security mechanism = \"oauthbearer\" (with [kafka.security.oauth]) or \"aws-msk-iam\"; {}",
                self.describe
            )),
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match fetched {
            Ok(token) => {
                info!(principal = %token.principal, expires_in_s = (token.lifetime_ms - Utc::now().timestamp_millis()) / 1000, "Kafka OAUTHBEARER token obtained");
                *last = Some(token.clone());
                Ok(token.into())
            }
            Err(reason) => match last
                .as_ref()
                .filter(|t| t.lifetime_ms - Utc::now().timestamp_millis() > MIN_LIFE_LEFT_MS)
            {
                Some(current) => {
                    warn!(%reason, "could not renew the Kafka OAUTHBEARER token; keeping the current one while it is valid");
                    Ok(current.clone().into())
                }
                None => {
                    error!(%reason, "no Kafka OAUTHBEARER token for {}", self.describe);
                    Err(reason.into())
                }
            },
        }
    }

    /// Logs an error librdkafka reports (rdkafka's `ClientContext::error`); authentication and
    /// TLS failures say which brokers, protocol, mechanism and user they are about.
    pub(crate) fn report(&self, error: &KafkaError, reason: &str) {
        use RDKafkaErrorCode::*;
        let what = match error.rdkafka_error_code() {
            Some(
                Authentication
                | SaslAuthenticationFailed
                | UnsupportedSASLMechanism
                | IllegalSASLState,
            ) => "Kafka authentication failed",
            Some(SSL) => "Kafka TLS failed",
            Some(
                TopicAuthorizationFailed | GroupAuthorizationFailed | ClusterAuthorizationFailed,
            ) => "Kafka refused access",
            _ => {
                error!("librdkafka: {error}: {reason}");
                return;
            }
        };
        error!("{what} ({}): {reason}", self.describe);
    }
}

/// How much earlier than its expiry librdkafka is told a token expires. librdkafka checks for
/// renewal once a second, so its renewal at 80% of the lifetime can land up to a second late,
/// while the broker has each connection re-authenticate at 90% of its session (KIP-368). On a
/// short-lived token a late renewal let a connection re-authenticate with the old token into a
/// session under a second long, and the broker refuses a second re-authentication within a
/// second. Reporting 1.25 s less keeps the renewal ahead for any lifetime.
const RENEWAL_SLACK_MS: i64 = 1_250;

impl From<Token> for OAuthToken {
    fn from(t: Token) -> Self {
        let early = t.lifetime_ms - RENEWAL_SLACK_MS;
        OAuthToken {
            token: t.value,
            principal_name: t.principal,
            // librdkafka refuses a token that has already expired.
            lifetime_ms: if early > Utc::now().timestamp_millis() {
                early
            } else {
                t.lifetime_ms
            },
        }
    }
}

/// A thread running a current-thread runtime for the token sources' network calls, so that
/// they can be awaited from librdkafka's synchronous callback wherever it runs.
struct Worker {
    handle: tokio::runtime::Handle,
    /// Dropping it ends the thread, which drops its runtime there.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Worker {
    fn start() -> anyhow::Result<Self> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("kafka-auth".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => {
                        let _ = handle_tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                    }
                }
            })
            .context("starting the Kafka token thread")?;
        let handle = handle_rx
            .recv()
            .context("the Kafka token thread stopped")?
            .context("the Kafka token thread's runtime")?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }

    /// Runs `fut` on the worker and waits for it, at most [`TOKEN_TIMEOUT`].
    fn run(
        &self,
        fut: impl Future<Output = Result<Token, String>> + Send + 'static,
    ) -> Result<Token, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv_timeout(TOKEN_TIMEOUT)
            .map_err(|_| format!("no token after {TOKEN_TIMEOUT:?}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakesink_config::Config;

    fn kafka(text: &str) -> KafkaConfig {
        let text = format!("[kafka]\nbrokers = \"b:9096\"\ntopics = [\"t\"]\n{text}");
        Config::from_toml(&text, "test.toml", std::iter::empty())
            .expect("valid config")
            .kafka
    }

    fn props(k: &KafkaConfig) -> Vec<(&'static str, String)> {
        properties(k.security.as_ref()).expect("properties")
    }

    #[test]
    fn scram_over_tls_maps_onto_librdkafka() {
        let ca = std::env::temp_dir().join(format!("lakesink-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, "not checked here").expect("ca");
        let k = kafka(&format!(
            "[kafka.security]\nmechanism = \"scram-sha-512\"\nusername = \"ls\"\npassword = \"pw\"\nca-file = \"{}\"\n",
            ca.display()
        ));
        assert_eq!(
            props(&k),
            vec![
                ("security.protocol", "sasl_ssl".to_owned()),
                ("ssl.ca.location", ca.display().to_string()),
                ("ssl.endpoint.identification.algorithm", "https".to_owned()),
                ("sasl.mechanism", "SCRAM-SHA-512".to_owned()),
                ("sasl.username", "ls".to_owned()),
                ("sasl.password", "pw".to_owned()),
            ]
        );
        let auth = KafkaAuth::new(&k).expect("auth");
        assert_eq!(
            auth.describe,
            "brokers b:9096 over sasl_ssl with SASL SCRAM-SHA-512 as ls"
        );
        let _ = std::fs::remove_file(&ca);
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let k = kafka("[kafka.security]\nca-file = \"/nonexistent/ca.pem\"\n");
        let err = properties(k.security.as_ref()).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("kafka.security.ca-file /nonexistent/ca.pem:"),
            "{err:#}"
        );
    }

    #[test]
    fn tls_without_a_ca_uses_the_system_store_and_can_skip_the_host_check() {
        let k = kafka("[kafka.security]\nprotocol = \"ssl\"\nverify-hostname = false\n");
        assert_eq!(
            props(&k),
            vec![
                ("security.protocol", "ssl".to_owned()),
                ("ssl.ca.location", "probe".to_owned()),
                ("ssl.endpoint.identification.algorithm", "none".to_owned()),
            ]
        );
    }

    #[test]
    fn msk_iam_is_oauthbearer_over_tls_with_lakesinks_tokens() {
        let k = kafka("[kafka.security]\nmechanism = \"aws-msk-iam\"\n");
        assert_eq!(
            props(&k),
            vec![
                ("security.protocol", "sasl_ssl".to_owned()),
                ("ssl.ca.location", "probe".to_owned()),
                ("ssl.endpoint.identification.algorithm", "https".to_owned()),
                ("sasl.mechanism", "OAUTHBEARER".to_owned()),
            ]
        );
        let auth = KafkaAuth::new(&k).expect("auth");
        assert!(matches!(auth.source.as_deref(), Some(Source::MskIam(_))));
        assert!(
            auth.describe
                .ends_with("with SASL OAUTHBEARER (AWS MSK IAM)"),
            "{}",
            auth.describe
        );
    }

    #[test]
    fn raw_properties_are_described_over_the_typed_ones() {
        let k = kafka(
            "properties = { \"security.protocol\" = \"SASL_PLAINTEXT\", \"sasl.mechanism\" = \"PLAIN\", \"sasl.username\" = \"raw\" }\n",
        );
        let auth = KafkaAuth::new(&k).expect("auth");
        assert_eq!(
            auth.describe,
            "brokers b:9096 over sasl_plaintext with SASL PLAIN as raw"
        );
        // No token source: asking for a token says how to configure one.
        let Err(err) = auth.token(None) else {
            panic!("a token without a source");
        };
        assert!(
            err.to_string().contains("mechanism = \"oauthbearer\""),
            "{err}"
        );
    }

    #[test]
    fn a_failed_renewal_keeps_a_valid_token() {
        let k = kafka(
            "properties = { \"security.protocol\" = \"SASL_PLAINTEXT\", \"sasl.mechanism\" = \"OAUTHBEARER\", \"enable.sasl.oauthbearer.unsecure.jwt\" = \"true\" }\n",
        );
        let auth = KafkaAuth::new(&k).expect("auth");
        let first = auth.token(Some("principal=ls")).expect("token");
        assert!(first.token.ends_with('.'));
        // A bad config cannot make a token; the first one is still valid for an hour.
        let again = auth.token(Some("nonsense")).expect("kept");
        assert_eq!(again.token, first.token);
    }
}
