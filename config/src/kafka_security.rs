//! `[kafka.security]`: how lakesink encrypts its connections to the brokers and authenticates.
//! The consumer maps it onto librdkafka properties; raw `kafka.properties` are applied after
//! it, so they still work and win.

use std::path::PathBuf;

use serde::Deserialize;

use crate::{ConfigError, Secret};

/// TLS and SASL settings towards the brokers.
///
/// `protocol` defaults from the rest: `sasl-ssl` with a `mechanism`, `ssl` with only TLS
/// settings (`ca-file`, `cert-file`). TLS verifies the broker's certificate against the system
/// store, or `ca-file`, and its host name unless `verify-hostname = false`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaSecurity {
    pub protocol: Option<SecurityProtocol>,
    pub mechanism: Option<SaslMechanism>,
    /// For `plain` and the `scram-*` mechanisms.
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// A PEM file of the CA certificates that sign the brokers' certificates.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for brokers that authenticate clients by TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub key_password: Option<Secret>,
    /// Check that the broker's certificate names the host connected to.
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
    /// For `mechanism = "oauthbearer"`: where lakesink gets its tokens.
    pub oauth: Option<KafkaOAuth>,
    /// For `mechanism = "aws-msk-iam"`.
    #[serde(default)]
    pub aws: MskIam,
}

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecurityProtocol {
    #[serde(alias = "PLAINTEXT")]
    Plaintext,
    #[serde(alias = "SSL")]
    Ssl,
    #[serde(alias = "SASL_PLAINTEXT", alias = "sasl_plaintext")]
    SaslPlaintext,
    #[serde(alias = "SASL_SSL", alias = "sasl_ssl")]
    SaslSsl,
}

impl SecurityProtocol {
    /// librdkafka's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    pub fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    pub fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// The SASL mechanism; Kafka's spellings (`SCRAM-SHA-512`, `AWS_MSK_IAM`) are accepted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "plain", alias = "PLAIN")]
    Plain,
    #[serde(rename = "scram-sha-256", alias = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "scram-sha-512", alias = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAUTHBEARER with tokens from an OAuth 2 token endpoint (`[kafka.security.oauth]`).
    #[serde(rename = "oauthbearer", alias = "OAUTHBEARER")]
    OAuthBearer,
    /// Amazon MSK's IAM access control: OAUTHBEARER with tokens signed by AWS credentials.
    #[serde(rename = "aws-msk-iam", alias = "AWS_MSK_IAM")]
    AwsMskIam,
}

impl SaslMechanism {
    /// The mechanism on the wire (`sasl.mechanism`).
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer | Self::AwsMskIam => "OAUTHBEARER",
        }
    }

    fn needs_password(self) -> bool {
        matches!(self, Self::Plain | Self::ScramSha256 | Self::ScramSha512)
    }
}

/// OAuth 2 client credentials: lakesink asks `token-url` for a token and hands it to the
/// brokers, renewing it before it expires.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaOAuth {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Secret,
    pub scope: Option<String>,
    /// A PEM file of extra CA certificates for the token endpoint.
    pub ca_file: Option<PathBuf>,
}

/// Where the MSK IAM tokens' credentials and region come from. Credentials come from the AWS
/// default chain (environment, shared config and credentials files, web identity, container
/// and instance metadata), optionally through `profile`, then `role-arn` is assumed if set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MskIam {
    /// The cluster's region; by default taken from the broker host names
    /// (`b-1.x.y.kafka.us-east-1.amazonaws.com`), else from the AWS configuration.
    pub region: Option<String>,
    /// A profile of the shared AWS config files instead of the default one.
    pub profile: Option<String>,
    /// A role to assume with the chain's credentials.
    pub role_arn: Option<String>,
    pub role_session_name: Option<String>,
}

fn default_true() -> bool {
    true
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

impl KafkaSecurity {
    /// The protocol in effect: the configured one, else the one the other settings imply.
    pub fn effective_protocol(&self) -> SecurityProtocol {
        match (self.protocol, self.mechanism) {
            (Some(p), _) => p,
            (None, Some(_)) => SecurityProtocol::SaslSsl,
            (None, None) if self.ca_file.is_some() || self.cert_file.is_some() => {
                SecurityProtocol::Ssl
            }
            (None, None) => SecurityProtocol::Plaintext,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let protocol = self.effective_protocol();
        match (protocol.is_sasl(), self.mechanism) {
            (true, None) => {
                return Err(invalid(
                    "kafka.security.mechanism",
                    format!(
                        "protocol {} needs a mechanism: plain, scram-sha-256, scram-sha-512, oauthbearer or aws-msk-iam",
                        protocol.as_str()
                    ),
                ));
            }
            (false, Some(m)) => {
                return Err(invalid(
                    "kafka.security.protocol",
                    format!(
                        "mechanism {} needs sasl-ssl or sasl-plaintext, not {}",
                        m.wire_name(),
                        protocol.as_str()
                    ),
                ));
            }
            _ => {}
        }
        let tls_set = self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if tls_set && !protocol.is_tls() {
            return Err(invalid(
                "kafka.security.protocol",
                format!(
                    "ca-file, cert-file and key-file need a TLS protocol (ssl or sasl-ssl), not {}",
                    protocol.as_str()
                ),
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "kafka.security.cert-file",
                "cert-file and key-file go together",
            ));
        }
        if self.key_password.is_some() && self.key_file.is_none() {
            return Err(invalid(
                "kafka.security.key-password",
                "a key password is set without a key-file",
            ));
        }
        let mechanism = self.mechanism;
        let password_based = mechanism.is_some_and(SaslMechanism::needs_password);
        if password_based {
            if self.username.as_deref().is_none_or(str::is_empty) {
                return Err(invalid(
                    "kafka.security.username",
                    "is required with mechanism plain, scram-sha-256 and scram-sha-512",
                ));
            }
            if self.password.is_none() {
                return Err(invalid(
                    "kafka.security.password",
                    "is required with mechanism plain, scram-sha-256 and scram-sha-512",
                ));
            }
        } else if self.username.is_some() || self.password.is_some() {
            return Err(invalid(
                "kafka.security.username",
                "username and password only apply to mechanism plain, scram-sha-256 and scram-sha-512",
            ));
        }
        match (mechanism, &self.oauth) {
            (Some(SaslMechanism::OAuthBearer), None) => {
                return Err(invalid(
                    "kafka.security.oauth",
                    "mechanism oauthbearer needs [kafka.security.oauth] (token-url, client-id, client-secret); \
                     for librdkafka's own OAUTHBEARER handling set kafka.properties instead",
                ));
            }
            (Some(SaslMechanism::OAuthBearer), Some(o)) if o.token_url.trim().is_empty() => {
                return Err(invalid(
                    "kafka.security.oauth.token-url",
                    "must not be empty",
                ));
            }
            (Some(SaslMechanism::OAuthBearer), _) | (_, None) => {}
            (_, Some(_)) => {
                return Err(invalid(
                    "kafka.security.oauth",
                    "only applies with mechanism = \"oauthbearer\"",
                ));
            }
        }
        if mechanism == Some(SaslMechanism::AwsMskIam) {
            if protocol != SecurityProtocol::SaslSsl {
                return Err(invalid(
                    "kafka.security.protocol",
                    "aws-msk-iam runs over sasl-ssl (MSK's IAM listener, port 9098)",
                ));
            }
        } else if self.aws != MskIam::default() {
            return Err(invalid(
                "kafka.security.aws",
                "only applies with mechanism = \"aws-msk-iam\"",
            ));
        }
        Ok(())
    }
}

/// The AWS region named by an MSK broker host name: `b-1.c.x.c2.kafka.us-east-1.amazonaws.com`
/// (provisioned) or `boot-x.c1.kafka-serverless.eu-west-1.amazonaws.com` (serverless).
pub fn msk_region_of(brokers: &str) -> Option<String> {
    brokers.split(',').find_map(|broker| {
        let host = broker
            .trim()
            .rsplit_once(':')
            .map_or(broker.trim(), |(h, _)| h);
        let labels: Vec<&str> = host.split('.').collect();
        let n = labels.len();
        (n >= 4
            && labels[n - 2] == "amazonaws"
            && labels[n - 1] == "com"
            && matches!(labels[n - 4], "kafka" | "kafka-serverless"))
        .then(|| labels[n - 3].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn parse(security: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "[kafka]\nbrokers = \"b-1.demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098\"\ntopics = [\"t\"]\n[kafka.security]\n{security}\n"
        );
        Config::from_toml(&text, "test.toml", std::iter::empty())
    }

    fn field(err: ConfigError) -> &'static str {
        match err {
            ConfigError::Invalid { field, .. } => field,
            other => panic!("not a validation error: {other}"),
        }
    }

    #[test]
    fn scram_over_tls_parses_and_hides_the_password() {
        let c = parse(
            "mechanism = \"SCRAM-SHA-512\"\nusername = \"ls\"\npassword = \"hunter2\"\nca-file = \"/etc/ca.pem\"",
        )
        .expect("valid");
        let s = c.kafka.security.as_ref().expect("security");
        assert_eq!(s.mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(s.effective_protocol(), SecurityProtocol::SaslSsl);
        assert!(s.verify_hostname);
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn protocol_defaults_follow_the_settings() {
        let s = parse("ca-file = \"/ca.pem\"")
            .expect("valid")
            .kafka
            .security;
        assert_eq!(
            s.expect("security").effective_protocol(),
            SecurityProtocol::Ssl
        );
        let s = parse("protocol = \"SASL_PLAINTEXT\"\nmechanism = \"plain\"\nusername = \"u\"\npassword = \"p\"")
            .expect("valid")
            .kafka
            .security;
        assert_eq!(
            s.expect("security").effective_protocol(),
            SecurityProtocol::SaslPlaintext
        );
    }

    #[test]
    fn inconsistent_settings_name_the_field() {
        for (text, want) in [
            ("protocol = \"sasl-ssl\"", "kafka.security.mechanism"),
            (
                "protocol = \"ssl\"\nmechanism = \"plain\"\nusername = \"u\"\npassword = \"p\"",
                "kafka.security.protocol",
            ),
            (
                "mechanism = \"scram-sha-256\"\npassword = \"p\"",
                "kafka.security.username",
            ),
            (
                "mechanism = \"plain\"\nusername = \"u\"",
                "kafka.security.password",
            ),
            ("mechanism = \"oauthbearer\"", "kafka.security.oauth"),
            (
                "mechanism = \"aws-msk-iam\"\nusername = \"u\"",
                "kafka.security.username",
            ),
            (
                "mechanism = \"aws-msk-iam\"\nprotocol = \"sasl-plaintext\"",
                "kafka.security.protocol",
            ),
            (
                "protocol = \"plaintext\"\nca-file = \"/ca\"",
                "kafka.security.protocol",
            ),
            ("cert-file = \"/c.pem\"", "kafka.security.cert-file"),
            (
                "mechanism = \"plain\"\nusername = \"u\"\npassword = \"p\"\n[kafka.security.aws]\nregion = \"x\"",
                "kafka.security.aws",
            ),
            (
                "mechanism = \"plain\"\nusername = \"u\"\npassword = \"p\"\n[kafka.security.oauth]\ntoken-url = \"http://idp\"\nclient-id = \"c\"\nclient-secret = \"s\"",
                "kafka.security.oauth",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(field(err), want, "{text}");
        }
    }

    #[test]
    fn msk_iam_and_oauth_parse() {
        let c = parse("mechanism = \"aws-msk-iam\"\n[kafka.security.aws]\nrole-arn = \"arn:aws:iam::1:role/r\"")
            .expect("valid");
        let s = c.kafka.security.expect("security");
        assert_eq!(s.aws.role_arn.as_deref(), Some("arn:aws:iam::1:role/r"));
        let c = parse(
            "mechanism = \"oauthbearer\"\nprotocol = \"sasl-plaintext\"\n[kafka.security.oauth]\ntoken-url = \"http://idp/token\"\nclient-id = \"ls\"\nclient-secret = \"s3cret\"\nscope = \"kafka\"",
        )
        .expect("valid");
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn msk_region_comes_from_the_broker_names() {
        assert_eq!(
            msk_region_of("b-1.demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098,b-2.x:9098")
                .as_deref(),
            Some("us-east-1")
        );
        assert_eq!(
            msk_region_of("boot-abc.c1.kafka-serverless.eu-west-1.amazonaws.com:9098").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(msk_region_of("127.0.0.1:9092"), None);
        assert_eq!(msk_region_of("kafka.example.com:9098"), None);
    }
}
