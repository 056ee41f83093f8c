//! The secure endpoints of the local stack: `dev/stack`'s kafka-secure broker (one listener
//! per way in, a throwaway CA, a user known to PLAIN and SCRAM) and its TLS-only PostgreSQL.

use std::path::PathBuf;

use rdkafka::ClientConfig;

/// The secure endpoints and credentials, from the variables `dev/stack env` prints.
#[derive(Debug, Clone)]
pub struct SecureStack {
    /// SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
    pub sasl_brokers: String,
    /// SSL, the server certificate signed by `ca_file`.
    pub ssl_brokers: String,
    /// SASL_SSL: PLAIN, SCRAM-SHA-512.
    pub sasl_ssl_brokers: String,
    /// SASL_PLAINTEXT: OAUTHBEARER with Kafka's unsecured validator (tokens with `alg: none`).
    pub oauth_brokers: String,
    /// The CA's certificate (PEM). Beside it: `server-cert.pem` and `server-key.pem`, a
    /// certificate for localhost and 127.0.0.1 that tests use for their own TLS endpoints.
    pub ca_file: PathBuf,
    pub username: String,
    pub password: String,
    /// A replica database that admits TCP clients over TLS only (server certificate from
    /// `ca_file`).
    pub tls_pg_url: String,
}

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

impl SecureStack {
    pub fn from_env() -> Self {
        let ca_file = std::env::var("LAKESINK_KAFKA_CA_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| default_stack_dir().join("kafka-secure/tls/ca.pem"));
        Self {
            sasl_brokers: var("LAKESINK_KAFKA_SASL_BROKERS", "127.0.0.1:9094"),
            ssl_brokers: var("LAKESINK_KAFKA_SSL_BROKERS", "127.0.0.1:9095"),
            sasl_ssl_brokers: var("LAKESINK_KAFKA_SASL_SSL_BROKERS", "127.0.0.1:9096"),
            oauth_brokers: var("LAKESINK_KAFKA_OAUTH_BROKERS", "127.0.0.1:9097"),
            ca_file,
            username: var("LAKESINK_KAFKA_USERNAME", "lakesink"),
            password: var("LAKESINK_KAFKA_PASSWORD", "lakesink-secret"),
            tls_pg_url: var(
                "LAKESINK_TLS_PG_URL",
                "postgres://lakesink:lakesink@127.0.0.1:5440/replica",
            ),
        }
    }

    /// The directory of the CA and the server certificate and key.
    pub fn tls_dir(&self) -> PathBuf {
        self.ca_file.parent().map(PathBuf::from).unwrap_or_default()
    }

    /// A client of the SASL_PLAINTEXT listener, as the user, with SCRAM-SHA-512.
    pub fn sasl_client(&self) -> ClientConfig {
        let mut c = client(&self.sasl_brokers);
        c.set("security.protocol", "SASL_PLAINTEXT");
        self.scram(&mut c);
        c
    }

    /// A client of the SSL listener, trusting the stack's CA.
    pub fn ssl_client(&self) -> ClientConfig {
        let mut c = client(&self.ssl_brokers);
        c.set("security.protocol", "SSL")
            .set("ssl.ca.location", self.ca_file.display().to_string());
        c
    }

    /// A client of the SASL_SSL listener, with SCRAM-SHA-512.
    pub fn sasl_ssl_client(&self) -> ClientConfig {
        let mut c = client(&self.sasl_ssl_brokers);
        c.set("security.protocol", "SASL_SSL")
            .set("ssl.ca.location", self.ca_file.display().to_string());
        self.scram(&mut c);
        c
    }

    /// A client of the OAUTHBEARER listener with librdkafka's unsecured JWTs.
    pub fn oauth_client(&self) -> ClientConfig {
        let mut c = client(&self.oauth_brokers);
        c.set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "OAUTHBEARER")
            .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
            .set("sasl.oauthbearer.config", "principal=admin");
        c
    }

    fn scram(&self, c: &mut ClientConfig) {
        c.set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", &self.username)
            .set("sasl.password", &self.password);
    }
}

fn client(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// `$LAKESINK_STACK_DIR`, else `$LAKESINK_CACHE/stack`, the cache defaulting to
/// `~/.cache/lakesink` as in `dev/stack`.
fn default_stack_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("LAKESINK_STACK_DIR") {
        return dir.into();
    }
    let cache = std::env::var("LAKESINK_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lakesink",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    PathBuf::from(cache).join("stack")
}
