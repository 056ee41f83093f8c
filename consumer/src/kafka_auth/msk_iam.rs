//! Amazon MSK IAM access control: the OAUTHBEARER token is a SigV4-presigned
//! `https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect` URL, base64url-encoded
//! without padding, made as AWS's signers (aws-msk-iam-sasl-signer-python, -go, -js) make it.
//!
//! Credentials come from the AWS default chain through `aws-config`. This is the one place in
//! lakesink, besides the config crate, that reads the process environment: the chain's
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, `AWS_WEB_IDENTITY_TOKEN_FILE`,
//! `AWS_CONTAINER_CREDENTIALS_*`, …) and the shared config files belong to the AWS SDKs'
//! contract, which operators expect lakesink to honour as every other AWS client does.

use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, ConfigLoader, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    self, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use lakesink_config::MskIam;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::Token;

/// How long a token is valid, as the official signers make them.
const EXPIRES_SECONDS: i64 = 900;
const SIGNING_NAME: &str = "kafka-cluster";
const ACTION: &str = "kafka-cluster:Connect";
/// Credentials closer than this to their expiry are fetched again.
const CREDENTIALS_MARGIN: Duration = Duration::from_secs(300);

/// The `User-Agent` query parameter, which MSK logs (it is not signed).
pub(super) fn user_agent() -> String {
    format!("lakesink/{}", env!("CARGO_PKG_VERSION"))
}

/// The token for `region`, signed with `credentials` at `at`, and when it expires (ms since
/// the epoch). `aws-sigv4` signs (the canonical request, the signing key, the signature);
/// the URL is laid out as botocore lays it out (the operation's parameter, then the auth
/// ones, the session token before the signature), so tokens equal the official signers'.
pub(crate) fn sign(
    region: &str,
    credentials: &Credentials,
    at: DateTime<Utc>,
    user_agent: &str,
) -> Result<(String, i64), String> {
    let host = format!("kafka.{region}.amazonaws.com");
    let action = format!("Action={}", encode(ACTION));
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(EXPIRES_SECONDS.unsigned_abs()));
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(SystemTime::from(at))
        .settings(settings)
        .build()
        .map_err(|e| format!("MSK IAM signing parameters: {e}"))?
        .into();
    let url = format!("https://{host}/?{action}");
    // A presigned GET carries no payload: its hash is that of the empty body.
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::empty(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| format!("MSK IAM signing: {e}"))?;
    let (instructions, signature) = http_request::sign(request, &params)
        .map_err(|e| format!("MSK IAM signing: {e}"))?
        .into_parts();
    let mut query = vec![action];
    let mut token = None;
    for (k, v) in instructions.params() {
        match *k {
            "X-Amz-Signature" => {}
            "X-Amz-Security-Token" => token = Some(format!("{k}={}", encode(v))),
            _ => query.push(format!("{k}={}", encode(v))),
        }
    }
    query.extend(token);
    query.push(format!("X-Amz-Signature={signature}"));
    query.push(format!("User-Agent={}", encode(user_agent)));
    let url = format!("https://{host}/?{}", query.join("&"));
    let expiry_ms = (at.timestamp() + EXPIRES_SECONDS) * 1000;
    Ok((URL_SAFE_NO_PAD.encode(url), expiry_ms))
}

/// Percent-encodes all but RFC 3986's unreserved characters, as SigV4 requires.
fn encode(s: &str) -> String {
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(s, RESERVED).to_string()
}

/// Makes MSK IAM tokens from the AWS credential chain.
pub(crate) struct MskIamTokens {
    settings: MskIam,
    /// From the config or the broker names; else the AWS configuration's.
    region: Option<String>,
    /// Adjusts the AWS loader (tests point it at their own files and environment).
    tune: fn(ConfigLoader) -> ConfigLoader,
    chain: Mutex<Option<Chain>>,
}

struct Chain {
    region: String,
    provider: SharedCredentialsProvider,
    /// The last credentials, reused until shortly before they expire.
    cached: Option<Credentials>,
}

impl MskIamTokens {
    pub(crate) fn new(settings: MskIam, region: Option<String>) -> Self {
        Self::tuned(settings, region, |loader| loader)
    }

    pub(crate) fn tuned(
        settings: MskIam,
        region: Option<String>,
        tune: fn(ConfigLoader) -> ConfigLoader,
    ) -> Self {
        Self {
            settings,
            region,
            tune,
            chain: Mutex::new(None),
        }
    }

    /// A fresh token, signed now.
    pub(crate) async fn token(&self) -> Result<Token, String> {
        let mut slot = self.chain.lock().await;
        if slot.is_none() {
            *slot = Some(self.load().await?);
        }
        let chain = slot
            .as_mut()
            .ok_or("the AWS credential chain is not loaded")?;
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_some_and(|e| e > SystemTime::now() + CREDENTIALS_MARGIN)
        };
        let credentials = match chain.cached.as_ref().filter(|c| fresh(c)) {
            Some(c) => c.clone(),
            None => {
                let c = chain.provider.provide_credentials().await.map_err(|e| {
                    format!(
                        "no AWS credentials for MSK IAM: {}",
                        lakesink_model::with_causes(&e)
                    )
                })?;
                debug!(access_key_id = c.access_key_id(), expiry = ?c.expiry(), "AWS credentials loaded");
                chain.cached = Some(c.clone());
                c
            }
        };
        let (value, lifetime_ms) = sign(&chain.region, &credentials, Utc::now(), &user_agent())?;
        Ok(Token {
            value,
            principal: credentials.access_key_id().to_owned(),
            lifetime_ms,
        })
    }

    async fn load(&self) -> Result<Chain, String> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(profile) = &self.settings.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let sdk: SdkConfig = (self.tune)(loader).load().await;
        let region = sdk
            .region()
            .map(ToString::to_string)
            .ok_or("no AWS region for MSK IAM: set kafka.security.aws.region (or AWS_REGION)")?;
        let mut provider = sdk
            .credentials_provider()
            .ok_or("the AWS configuration has no credentials provider")?;
        if let Some(role) = &self.settings.role_arn {
            let mut builder = aws_config::sts::AssumeRoleProvider::builder(role)
                .configure(&sdk)
                .region(Region::new(region.clone()));
            if let Some(name) = &self.settings.role_session_name {
                builder = builder.session_name(name);
            }
            provider = SharedCredentialsProvider::new(builder.build().await);
        }
        info!(%region, profile = ?self.settings.profile, role = ?self.settings.role_arn, "MSK IAM: AWS credential chain loaded");
        Ok(Chain {
            region,
            provider,
            cached: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON_AGENT: &str = "aws-msk-iam-sasl-signer-python/1.0.2";

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    /// Tokens made by aws-msk-iam-sasl-signer-python 1.0.2 for the same credentials and
    /// signing time: tests/python/msk_iam_token.py prints them.
    #[test]
    fn tokens_match_the_official_python_signer() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let (token, expiry) = sign(
            "us-east-1",
            &creds,
            at("2024-05-01T13:00:00Z"),
            PYTHON_AGENT,
        )
        .expect("signed");
        assert_eq!(
            token,
            "aHR0cHM6Ly9rYWZrYS51cy1lYXN0LTEuYW1hem9uYXdzLmNvbS8_QWN0aW9uPWthZmthLWNsdXN0ZXIlM0FDb25uZWN0JlgtQW16LUFsZ29yaXRobT1BV1M0LUhNQUMtU0hBMjU2JlgtQW16LUNyZWRlbnRpYWw9QUtJREVYQU1QTEUlMkYyMDI0MDUwMSUyRnVzLWVhc3QtMSUyRmthZmthLWNsdXN0ZXIlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDI0MDUwMVQxMzAwMDBaJlgtQW16LUV4cGlyZXM9OTAwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCZYLUFtei1TaWduYXR1cmU9NDc5M2E1Y2Q2MGU0Mzc5ZmFmMjcwMDBmNDA0OTVlNzE3MDMwMjg3ZmE0YjYxNjQ2ODIwNjFmZGU4MTIwM2RjYSZVc2VyLUFnZW50PWF3cy1tc2staWFtLXNhc2wtc2lnbmVyLXB5dGhvbiUyRjEuMC4y"
        );
        assert_eq!(expiry, 1_714_569_300_000);

        let creds = Credentials::new(
            "ASIAEXAMPLE",
            "secret/with+special=chars",
            Some("IQoJb3JpZ2luX2VjE//token+/=".to_owned()),
            None,
            "test",
        );
        let (token, expiry) = sign(
            "eu-west-1",
            &creds,
            at("2025-12-31T23:59:59Z"),
            PYTHON_AGENT,
        )
        .expect("signed");
        assert_eq!(
            token,
            "aHR0cHM6Ly9rYWZrYS5ldS13ZXN0LTEuYW1hem9uYXdzLmNvbS8_QWN0aW9uPWthZmthLWNsdXN0ZXIlM0FDb25uZWN0JlgtQW16LUFsZ29yaXRobT1BV1M0LUhNQUMtU0hBMjU2JlgtQW16LUNyZWRlbnRpYWw9QVNJQUVYQU1QTEUlMkYyMDI1MTIzMSUyRmV1LXdlc3QtMSUyRmthZmthLWNsdXN0ZXIlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDI1MTIzMVQyMzU5NTlaJlgtQW16LUV4cGlyZXM9OTAwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCZYLUFtei1TZWN1cml0eS1Ub2tlbj1JUW9KYjNKcFoybHVYMlZqRSUyRiUyRnRva2VuJTJCJTJGJTNEJlgtQW16LVNpZ25hdHVyZT1kNzEzMjg2NjkzMDViN2ZmYTBmOGMwMmQ2ZjJlMjcxNzk2MDc3ZTBmNDE4OWNmNTczMzJkOGUxMTMwNTliNGE0JlVzZXItQWdlbnQ9YXdzLW1zay1pYW0tc2FzbC1zaWduZXItcHl0aG9uJTJGMS4wLjI"
        );
        assert_eq!(expiry, 1_767_226_499_000);
    }

    #[test]
    fn the_token_decodes_to_the_presigned_url() {
        let creds = Credentials::new("AKID", "secret", None, None, "test");
        let (token, _) = sign("ap-south-1", &creds, Utc::now(), &user_agent()).expect("signed");
        let url =
            String::from_utf8(URL_SAFE_NO_PAD.decode(token).expect("base64url")).expect("utf8");
        assert!(
            url.starts_with(
                "https://kafka.ap-south-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"
            ),
            "{url}"
        );
        assert!(url.contains("&X-Amz-Expires=900&"), "{url}");
        assert!(
            url.ends_with(&format!(
                "&User-Agent=lakesink%2F{}",
                env!("CARGO_PKG_VERSION")
            )),
            "{url}"
        );
    }

    /// The chain as lakesink loads it, from a profile in a shared credentials file and no
    /// environment at all.
    #[tokio::test]
    async fn credentials_come_from_a_named_profile() {
        let dir = std::env::temp_dir().join(format!("lakesink-msk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\n[msk]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = s\naws_session_token = t\n",
        )
        .expect("credentials file");
        // A test cannot hand a closure with state to `tuned`: the file's path goes through
        // a process-wide cell.
        static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        let _ = FILE.set(file);
        #[allow(deprecated)]
        fn tune(loader: ConfigLoader) -> ConfigLoader {
            use aws_config::profile::profile_file::{ProfileFileKind, ProfileFiles};
            let path = FILE.get().expect("file set");
            loader.empty_test_environment().profile_files(
                ProfileFiles::builder()
                    .with_file(ProfileFileKind::Credentials, path)
                    .build(),
            )
        }
        let tokens = MskIamTokens::tuned(
            MskIam {
                profile: Some("msk".into()),
                ..MskIam::default()
            },
            Some("us-east-1".into()),
            tune,
        );
        let token = tokens.token().await.expect("token");
        assert_eq!(token.principal, "AKIDPROFILE");
        let url =
            String::from_utf8(URL_SAFE_NO_PAD.decode(&token.value).expect("b64")).expect("utf8");
        assert!(url.contains("X-Amz-Security-Token=t&"), "{url}");
        let now_ms = Utc::now().timestamp_millis();
        assert!(token.lifetime_ms > now_ms + 800_000 && token.lifetime_ms <= now_ms + 900_000);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
