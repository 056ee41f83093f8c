//! OAUTHBEARER tokens from an OAuth 2 token endpoint (client credentials), and the unsecured
//! JWTs (`alg: none`) that librdkafka makes with `enable.sasl.oauthbearer.unsecure.jwt`.

use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use lakesink_config::KafkaOAuth;
use serde::Deserialize;
use tracing::warn;

use super::Token;

/// Attempts at the token endpoint before a refresh counts as failed.
const ATTEMPTS: u32 = 3;
/// A token without `expires_in` or an `exp` claim is renewed this often.
const DEFAULT_LIFETIME_MS: i64 = 300_000;

/// The OAuth 2 client-credentials grant against `token-url`.
pub(crate) struct ClientCredentials {
    settings: KafkaOAuth,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<i64>,
}

impl ClientCredentials {
    pub(crate) fn new(settings: &KafkaOAuth) -> anyhow::Result<Self> {
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5));
        if let Some(path) = &settings.ca_file {
            let pem = std::fs::read(path).with_context(|| {
                format!("reading kafka.security.oauth.ca-file {}", path.display())
            })?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                format!("kafka.security.oauth.ca-file {} is not PEM", path.display())
            })? {
                http = http.add_root_certificate(cert);
            }
        }
        Ok(Self {
            settings: settings.clone(),
            http: http.build().context("building the OAuth token client")?,
        })
    }

    /// A token from the endpoint; transport errors and 5xx answers are tried again.
    pub(crate) async fn token(&self) -> Result<Token, String> {
        let url = &self.settings.token_url;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
            }
            match self.request().await {
                Ok(token) => return Ok(token),
                Err((retry, reason)) => {
                    last = format!("token endpoint {url}: {reason}");
                    if !retry {
                        break;
                    }
                    warn!(attempt, reason = %last, "OAuth token request failed");
                }
            }
        }
        Err(last)
    }

    /// One request; the error says whether another attempt may help.
    async fn request(&self) -> Result<Token, (bool, String)> {
        let s = &self.settings;
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", s.client_id.as_str()),
            ("client_secret", s.client_secret.expose()),
        ];
        if let Some(scope) = &s.scope {
            form.push(("scope", scope));
        }
        let resp = self
            .http
            .post(&s.token_url)
            .form(&form)
            .send()
            .await
            .map_err(|e| (true, format!("{e}")))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let body: String = body.chars().take(200).collect();
            return Err((status.is_server_error(), format!("{status}: {body}")));
        }
        let body: TokenResponse = resp
            .json()
            .await
            .map_err(|e| (false, format!("the answer is not a token response: {e}")))?;
        let claims = jwt_claims(&body.access_token);
        let now_ms = Utc::now().timestamp_millis();
        let lifetime_ms = lifetime_ms(now_ms, body.expires_in, claim_i64(&claims, "exp"));
        let principal = claims
            .as_ref()
            .and_then(|c| c.get("sub"))
            .and_then(|v| v.as_str())
            .unwrap_or(&s.client_id)
            .to_owned();
        Ok(Token {
            value: body.access_token,
            principal,
            lifetime_ms,
        })
    }
}

/// When a token expires, in ms since the epoch: the earlier of `expires_in` and the JWT's
/// `exp`. The broker ends the session at `exp`, which is in whole seconds and so can come up
/// to a second before `expires_in` says.
fn lifetime_ms(now_ms: i64, expires_in: Option<i64>, exp: Option<i64>) -> i64 {
    match (expires_in.map(|s| now_ms + s * 1000), exp.map(|e| e * 1000)) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => now_ms + DEFAULT_LIFETIME_MS,
    }
}

/// The claims of a JWT, if the token is one (opaque tokens are fine too).
fn jwt_claims(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn claim_i64(
    claims: &Option<serde_json::Map<String, serde_json::Value>>,
    name: &str,
) -> Option<i64> {
    let v = claims.as_ref()?.get(name)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

/// An unsecured JWT as librdkafka makes it from `sasl.oauthbearer.config`
/// (`principal=… [principalClaimName=…] [scope=a,b] [scopeClaimName=…] [lifeSeconds=…]`),
/// for brokers with Kafka's unsecured validator (development and tests only).
pub(crate) fn unsecured_jwt(config: Option<&str>) -> Result<Token, String> {
    let mut principal = None;
    let mut principal_claim = "sub";
    let mut scope = None;
    let mut scope_claim = "scope";
    let mut life_seconds: i64 = 3600;
    for part in config.unwrap_or_default().split_whitespace() {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("sasl.oauthbearer.config: {part:?} is not name=value"))?;
        match key {
            "principal" => principal = Some(value),
            "principalClaimName" => principal_claim = value,
            "scope" => scope = Some(value),
            "scopeClaimName" => scope_claim = value,
            "lifeSeconds" => {
                life_seconds = value
                    .parse()
                    .map_err(|_| format!("sasl.oauthbearer.config: lifeSeconds={value:?}"))?;
            }
            k if k.starts_with("extension_") => {
                return Err(format!(
                    "sasl.oauthbearer.config: SASL extensions ({k}) are not supported"
                ));
            }
            other => return Err(format!("sasl.oauthbearer.config: unknown name {other:?}")),
        }
    }
    let principal = principal
        .ok_or("sasl.oauthbearer.config needs principal=… for an unsecured JWT")?
        .to_owned();
    let now = Utc::now().timestamp_millis();
    let mut claims = serde_json::Map::new();
    claims.insert(principal_claim.to_owned(), principal.clone().into());
    claims.insert("iat".to_owned(), (now as f64 / 1000.0).into());
    claims.insert(
        "exp".to_owned(),
        ((now + life_seconds * 1000) as f64 / 1000.0).into(),
    );
    if let Some(scope) = scope {
        let scopes: Vec<serde_json::Value> = scope.split(',').map(Into::into).collect();
        claims.insert(scope_claim.to_owned(), scopes.into());
    }
    let claims = serde_json::Value::Object(claims).to_string();
    Ok(Token {
        // {"alg":"none"}, the claims, and an empty signature.
        value: format!("eyJhbGciOiJub25lIn0.{}.", URL_SAFE_NO_PAD.encode(claims)),
        principal,
        lifetime_ms: now + life_seconds * 1000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsecured_jwts_carry_the_configured_claims() {
        let t = unsecured_jwt(Some("principal=ls scope=a,b lifeSeconds=60")).expect("token");
        assert_eq!(t.principal, "ls");
        let parts: Vec<&str> = t.value.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#));
        assert_eq!(parts[2], "");
        let claims = jwt_claims(&t.value).expect("claims");
        assert_eq!(claims["sub"], "ls");
        assert_eq!(claims["scope"], serde_json::json!(["a", "b"]));
        let exp = claims["exp"].as_f64().expect("exp");
        let iat = claims["iat"].as_f64().expect("iat");
        assert!((exp - iat - 60.0).abs() < 0.01);
        assert!(unsecured_jwt(None).is_err());
        assert!(unsecured_jwt(Some("principal=a extension_x=1")).is_err());
    }

    #[test]
    fn the_earlier_of_expires_in_and_exp_is_the_lifetime() {
        let now = 1_700_000_000_900;
        assert_eq!(
            lifetime_ms(now, Some(6), Some(1_700_000_006)),
            1_700_000_006_000
        );
        assert_eq!(lifetime_ms(now, Some(6), Some(1_700_000_600)), now + 6_000);
        assert_eq!(
            lifetime_ms(now, None, Some(1_700_000_006)),
            1_700_000_006_000
        );
        assert_eq!(lifetime_ms(now, Some(6), None), now + 6_000);
        assert_eq!(lifetime_ms(now, None, None), now + DEFAULT_LIFETIME_MS);
    }

    #[test]
    fn jwt_claims_tolerate_opaque_tokens() {
        assert!(jwt_claims("opaque-token").is_none());
        let jwt = format!(
            "h.{}.s",
            URL_SAFE_NO_PAD.encode(r#"{"sub":"svc","exp":1700000000}"#)
        );
        let claims = jwt_claims(&jwt);
        assert_eq!(claim_i64(&claims, "exp"), Some(1_700_000_000));
    }
}
