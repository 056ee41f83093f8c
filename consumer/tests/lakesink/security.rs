//! lakesink against the stack's secure endpoints (`dev/stack`'s kafka-secure broker and TLS-only
//! PostgreSQL): Avro Debezium records produced over each listener are read back by
//! `lakesink tail` configured for that listener's protocol and mechanism, `lakesink run` writes
//! them to a replica over verified TLS, and wrong credentials or an untrusted certificate stop
//! it with an error that names the brokers and the mechanism.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use lakesink_tests::secure::SecureStack;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use rdkafka::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BASE_TS: i64 = 1_714_568_400_000;
const ROWS: i64 = 5;

/// A topic of `ROWS` inserts on the cluster `kafka` reaches.
async fn topic(stack: &Stack, kafka: &ClientConfig, name: &str) -> String {
    let topic = unique(name);
    let table = Table::create_in(stack, kafka, &topic, 1).await;
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || table.produce_in(&kafka, 1, ROWS, BASE_TS))
        .await
        .expect("produce");
    topic
}

/// A config reading `topic` from `brokers`; `kafka_extra` goes into `[kafka]` (before its
/// subtables), `security` is the `[kafka.security]` section or empty, `registry_extra` goes
/// into `[registry]`.
fn config(
    brokers: &str,
    topic: &str,
    kafka_extra: &str,
    security: &str,
    registry_url: &str,
    registry_extra: &str,
) -> PathBuf {
    let dir = std::env::temp_dir().join(unique("lakesink-security"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("lakesink.toml");
    let text = format!(
        "[kafka]\nbrokers = \"{brokers}\"\ngroup-id = \"{group}\"\ntopics = [\"{topic}\"]\n{kafka_extra}\n\n{security}\n\n[registry]\nurl = \"{registry_url}\"\n{registry_extra}\n",
        group = unique("group"),
    );
    std::fs::write(&path, text).expect("config written");
    path
}

/// A running `lakesink tail`: its stdout lines, its stderr in a file beside the config.
struct Tail {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
}

impl Tail {
    /// `lakesink tail --from-beginning --config CONFIG` (a tail starts at the end by default).
    fn start(config: &Path) -> Self {
        Self::with_env(&["tail", "--from-beginning"], config, &[])
    }

    /// `lakesink COMMAND --config CONFIG`.
    fn command(command: &str, config: &Path) -> Self {
        Self::with_env(&[command], config, &[])
    }

    fn with_env(command: &[&str], config: &Path, env: &[(&str, &str)]) -> Self {
        let log = config.with_file_name("lakesink.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_lakesink"))
            .args(command)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("lakesink starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first `n` rows printed, or a failure with the log.
    fn rows(&mut self, n: usize, within: Duration) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + within;
        let mut rows = Vec::new();
        while rows.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(500)))
            {
                Ok(line) => {
                    let (_, json) = line.split_once(' ').expect("`topic[p] json`");
                    rows.push(serde_json::from_str(json).expect("a JSON row"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if let Some(status) = self.child.try_wait().expect("wait") {
                        panic!(
                            "lakesink exited ({status}) after {} rows; log:\n{}",
                            rows.len(),
                            self.log()
                        );
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "{} of {n} rows after {within:?}; log:\n{}",
                        rows.len(),
                        self.log()
                    );
                }
            }
        }
        rows
    }

    /// Waits for lakesink to exit by itself; its exit status and log.
    fn exit(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status, self.log());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("lakesink still runs after {within:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows of the workload: inserts of ids 0..ROWS.
fn assert_workload(rows: &[serde_json::Value]) {
    let mut ids: Vec<i64> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["__op"], "c", "{r}");
            r["key"]["id"].as_i64().expect("key id")
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..ROWS).collect::<Vec<_>>());
}

async fn reads_back(brokers: &str, topic: &str, kafka_extra: &str, security: &str) {
    let stack = Stack::from_env();
    let config = config(
        brokers,
        topic,
        kafka_extra,
        security,
        &stack.registry_url,
        "",
    );
    let mut tail = Tail::start(&config);
    let rows = tail.rows(ROWS as usize, Duration::from_secs(60));
    assert_workload(&rows);
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_over_sasl_plaintext() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.sasl_client(), "sec-plain").await;
    let security = format!(
        "[kafka.security]\nprotocol = \"sasl-plaintext\"\nmechanism = \"plain\"\nusername = \"{}\"\npassword = \"{}\"",
        k.username, k.password
    );
    reads_back(&k.sasl_brokers, &topic, "", &security).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scram_sha_512_over_sasl_plaintext() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.sasl_client(), "sec-scram").await;
    let security = format!(
        "[kafka.security]\nprotocol = \"sasl-plaintext\"\nmechanism = \"scram-sha-512\"\nusername = \"{}\"\npassword = \"{}\"",
        k.username, k.password
    );
    reads_back(&k.sasl_brokers, &topic, "", &security).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scram_sha_512_over_sasl_ssl() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.sasl_ssl_client(), "sec-sasl-ssl").await;
    let security = format!(
        "[kafka.security]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"{}\"\npassword = \"{}\"\nca-file = \"{}\"",
        k.username,
        k.password,
        k.ca_file.display()
    );
    reads_back(&k.sasl_ssl_brokers, &topic, "", &security).await;
}

/// Raw librdkafka properties still work: here librdkafka's own unsecured JWTs.
#[tokio::test(flavor = "multi_thread")]
async fn oauthbearer_with_raw_properties() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.oauth_client(), "sec-oauth-raw").await;
    let props = "properties = { \"security.protocol\" = \"SASL_PLAINTEXT\", \"sasl.mechanism\" = \"OAUTHBEARER\", \"enable.sasl.oauthbearer.unsecure.jwt\" = \"true\", \"sasl.oauthbearer.config\" = \"principal=lakesink\" }";
    reads_back(&k.oauth_brokers, &topic, props, "").await;
}

/// SSL verified against the stack's CA, and the registry over TLS too (a TLS proxy in front
/// of Apicurio with a certificate from the same CA, trusted through `registry.ca-file`).
#[tokio::test(flavor = "multi_thread")]
async fn ssl_to_kafka_and_to_the_registry() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.ssl_client(), "sec-ssl").await;
    let upstream = stack
        .registry_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let registry = tls_proxy(&k.tls_dir(), upstream).await;
    let security = format!(
        "[kafka.security]\nprotocol = \"ssl\"\nca-file = \"{}\"",
        k.ca_file.display()
    );
    let config = config(
        &k.ssl_brokers,
        &topic,
        "",
        &security,
        &registry,
        &format!("ca-file = \"{}\"", k.ca_file.display()),
    );
    let mut tail = Tail::start(&config);
    assert_workload(&tail.rows(ROWS as usize, Duration::from_secs(60)));
}

/// lakesink's own token path: `mechanism = "oauthbearer"` gets tokens from an OAuth token
/// endpoint (here a fake one issuing unsecured JWTs, which the broker's validator accepts)
/// and renews them before they expire.
#[tokio::test(flavor = "multi_thread")]
async fn oauthbearer_with_tokens_from_a_token_endpoint() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.oauth_client(), "sec-oauth").await;
    // Tokens live 6 s (whole seconds in `exp`, as real providers issue them), so librdkafka
    // asks for a new one after about 5.
    let idp = TokenEndpoint::start("lakesink-client", "idp-secret", 6).await;
    let security = format!(
        "[kafka.security]\nprotocol = \"sasl-plaintext\"\nmechanism = \"oauthbearer\"\n[kafka.security.oauth]\ntoken-url = \"{}\"\nclient-id = \"lakesink-client\"\nclient-secret = \"idp-secret\"\nscope = \"kafka\"",
        idp.url
    );
    let config = config(
        &k.oauth_brokers,
        &topic,
        "",
        &security,
        &stack.registry_url,
        "",
    );
    let mut tail = Tail::start(&config);
    assert_workload(&tail.rows(ROWS as usize, Duration::from_secs(60)));
    // Three tokens: the connections re-authenticate with each (KIP-368), so this runs
    // through two renewals and the re-authentications that follow them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while idp.issued() < 3 {
        assert!(
            Instant::now() < deadline,
            "the token was not renewed twice; log:\n{}",
            tail.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The re-authentications with the third token.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log = tail.log();
    assert!(log.contains("Kafka OAUTHBEARER token obtained"), "{log}");
    assert!(!log.contains("authentication failed"), "{log}");
}

/// SCRAM over TLS from Kafka, and the replica over verified TLS: the database admits TCP
/// clients over TLS only, and `verify-full` checks its certificate against the stack's CA.
#[tokio::test(flavor = "multi_thread")]
async fn the_replica_over_verified_tls() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let topic = topic(&stack, &k.sasl_ssl_client(), "sec-replica").await;
    let security = format!(
        "[kafka.security]\nmechanism = \"scram-sha-512\"\nusername = \"{}\"\npassword = \"{}\"\nca-file = \"{}\"",
        k.username,
        k.password,
        k.ca_file.display()
    );
    let config = config(
        &k.sasl_ssl_brokers,
        &topic,
        "",
        &security,
        &stack.registry_url,
        "",
    );
    let tls_url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        k.tls_pg_url,
        k.ca_file.display()
    );
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("\n[replica]\nurl = \"{tls_url}\"\n"));
    std::fs::write(&config, text).expect("config written");
    let run = Tail::command("run", &config);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&tls_url)
        .await
        .expect("the TLS replica is reachable over verified TLS");
    let count = format!("SELECT count(*) FROM public.\"{topic}\"");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let rows: Result<(i64,), _> = sqlx::query_as(sqlx::AssertSqlSafe(count.clone()))
            .fetch_one(&pool)
            .await;
        if matches!(rows, Ok((n,)) if n == ROWS) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica has {rows:?} rows; log:\n{}",
            run.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (tls,): (bool,) = sqlx::query_as(
        "SELECT bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE usename = 'lakesink' AND client_addr IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .expect("pg_stat_ssl");
    assert!(tls, "every connection to the replica is TLS");
}

/// MSK IAM end to end as far as a broker without MSK can take it: credentials from the AWS
/// chain (the environment here), a signed token handed to librdkafka, and SASL OAUTHBEARER
/// over TLS, where the broker's validator (which only knows unsecured JWTs) refuses the
/// token; the refusal stops lakesink and names the mechanism.
#[tokio::test(flavor = "multi_thread")]
async fn msk_iam_tokens_reach_the_broker_over_sasl_ssl() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let security = format!(
        "[kafka.security]\nmechanism = \"aws-msk-iam\"\nca-file = \"{}\"\n[kafka.security.aws]\nregion = \"eu-west-1\"",
        k.ca_file.display()
    );
    let config = config(
        &k.sasl_ssl_brokers,
        &unique("sec-msk"),
        "",
        &security,
        &stack.registry_url,
        "",
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIALAKESINKTEST"),
        ("AWS_SECRET_ACCESS_KEY", "not-a-real-secret"),
        ("AWS_SESSION_TOKEN", "session-token"),
        ("AWS_CONFIG_FILE", "/nonexistent"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let (status, log) = Tail::with_env(&["tail"], &config, &env).exit(Duration::from_secs(60));
    assert!(
        !status.success(),
        "the broker cannot accept an MSK token; log:\n{log}"
    );
    assert!(
        log.contains("MSK IAM: AWS credential chain loaded"),
        "{log}"
    );
    assert!(log.contains("principal=AKIALAKESINKTEST"), "{log}");
    assert!(log.contains("Kafka authentication failed"), "{log}");
    assert!(log.contains("OAUTHBEARER (AWS MSK IAM)"), "{log}");
    assert!(!log.contains("not-a-real-secret"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_stops_lakesink_naming_brokers_and_mechanism() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let security = format!(
        "[kafka.security]\nprotocol = \"sasl-plaintext\"\nmechanism = \"scram-sha-512\"\nusername = \"{}\"\npassword = \"not-the-password\"",
        k.username
    );
    let config = config(
        &k.sasl_brokers,
        &unique("sec-denied"),
        "",
        &security,
        &stack.registry_url,
        "",
    );
    let (status, log) = Tail::start(&config).exit(Duration::from_secs(60));
    assert!(!status.success(), "lakesink should fail; log:\n{log}");
    assert!(log.contains("Kafka authentication failed"), "{log}");
    assert!(log.contains(&k.sasl_brokers), "{log}");
    assert!(log.contains("SCRAM-SHA-512"), "{log}");
    assert!(
        !log.contains("not-the-password"),
        "the password is never logged:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_broker_certificate_stops_lakesink() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    // Without ca-file the system store is used, which does not know the stack's CA.
    let config = config(
        &k.ssl_brokers,
        &unique("sec-untrusted"),
        "",
        "[kafka.security]\nprotocol = \"ssl\"",
        &stack.registry_url,
        "",
    );
    let (status, log) = Tail::start(&config).exit(Duration::from_secs(60));
    assert!(!status.success(), "lakesink should fail; log:\n{log}");
    assert!(log.contains("Kafka TLS failed"), "{log}");
    assert!(log.contains(&k.ssl_brokers), "{log}");
    assert!(log.contains("certificate verify failed"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_client_secret_stops_lakesink() {
    let (stack, k) = (Stack::from_env(), SecureStack::from_env());
    let idp = TokenEndpoint::start("lakesink-client", "idp-secret", 60).await;
    let security = format!(
        "[kafka.security]\nprotocol = \"sasl-plaintext\"\nmechanism = \"oauthbearer\"\n[kafka.security.oauth]\ntoken-url = \"{}\"\nclient-id = \"lakesink-client\"\nclient-secret = \"wrong\"",
        idp.url
    );
    let config = config(
        &k.oauth_brokers,
        &unique("sec-idp"),
        "",
        &security,
        &stack.registry_url,
        "",
    );
    let (status, log) = Tail::start(&config).exit(Duration::from_secs(60));
    assert!(!status.success(), "lakesink should fail; log:\n{log}");
    assert!(log.contains("401"), "{log}");
    assert!(log.contains(&idp.url), "{log}");
}

/// A TLS endpoint on 127.0.0.1 forwarding to `upstream`, with the stack's server certificate
/// (localhost, 127.0.0.1). Returns its `https://localhost:port` URL.
async fn tls_proxy(tls_dir: &Path, upstream: String) -> String {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(tls_dir.join("server-cert.pem"))
            .expect("server-cert.pem")
            .collect::<Result<_, _>>()
            .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(tls_dir.join("server-key.pem")).expect("server-key.pem");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                if let Ok(mut plain) = TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    format!("https://localhost:{port}")
}

/// A fake OAuth 2 token endpoint: the client-credentials grant for one client, answered with
/// unsecured JWTs (`alg: none`, subject `lakesink`) that live `lifetime_s` seconds.
struct TokenEndpoint {
    url: String,
    issued: Arc<AtomicUsize>,
}

impl TokenEndpoint {
    async fn start(client_id: &'static str, secret: &'static str, lifetime_s: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "http://127.0.0.1:{}/oauth/token",
            listener.local_addr().expect("addr").port()
        );
        let issued = Arc::new(AtomicUsize::new(0));
        let count = issued.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let Some(form) = read_form(&mut socket).await else {
                        return;
                    };
                    let field = |name: &str| {
                        form.split('&')
                            .filter_map(|kv| kv.split_once('='))
                            .find(|(k, _)| *k == name)
                            .map(|(_, v)| v.to_owned())
                    };
                    let authorized = field("grant_type").as_deref() == Some("client_credentials")
                        && field("client_id").as_deref() == Some(client_id)
                        && field("client_secret").as_deref() == Some(secret);
                    let (status, body) = if authorized {
                        count.fetch_add(1, Ordering::SeqCst);
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .expect("clock")
                            .as_secs();
                        let claims = serde_json::json!({
                            "sub": "lakesink", "iat": now, "exp": now + lifetime_s, "scope": "kafka"
                        });
                        let jwt = format!(
                            "{}.{}.",
                            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
                            URL_SAFE_NO_PAD.encode(claims.to_string())
                        );
                        let body = serde_json::json!({
                            "access_token": jwt, "token_type": "Bearer", "expires_in": lifetime_s
                        });
                        ("200 OK", body.to_string())
                    } else {
                        (
                            "401 Unauthorized",
                            r#"{"error":"invalid_client"}"#.to_owned(),
                        )
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(resp.as_bytes()).await;
                });
            }
        });
        Self { url, issued }
    }

    fn issued(&self) -> usize {
        self.issued.load(Ordering::SeqCst)
    }
}

/// The body of one HTTP request (headers, then `content-length` bytes).
async fn read_form(socket: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return Some(body[..length].to_owned());
            }
        }
    }
}
