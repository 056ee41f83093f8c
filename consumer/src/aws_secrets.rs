//! Secrets by reference from AWS Secrets Manager: a secret key holding
//! `aws-secretsmanager:NAME` takes the secret's string, `aws-secretsmanager:NAME#KEY` the
//! value of KEY in the JSON object the secret holds (as RDS and most rotation lambdas store
//! `{"username": …, "password": …}`). Fetched once, right after the config loads, by
//! `GetSecretValue` signed with SigV4 (`aws-sigv4`) and credentials from the AWS default chain,
//! as MSK IAM's are. The endpoint is `AWS_ENDPOINT_URL_SECRETS_MANAGER`, else `AWS_ENDPOINT_URL`,
//! else `https://secretsmanager.<region>.amazonaws.com`, as the AWS SDKs choose it.
//!
//! A hand-written call rather than `aws-sdk-secretsmanager`: one POST needs no generated
//! client, and the SDK crate would add minutes to a 2-core build.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use aws_config::BehaviorVersion;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{self, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use lakesink_config::{AWS_SECRETS_MANAGER, Config};
use tracing::info;

/// Replaces every `aws-secretsmanager:` reference in `config` by its value.
pub(crate) async fn resolve(config: &mut Config) -> anyhow::Result<()> {
    let wanted: Vec<(String, String)> = config
        .remote_secrets()
        .into_iter()
        .map(|(k, v)| (k, v.clone()))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let client = Client::load().await?;
    let mut fetched: HashMap<String, String> = HashMap::new();
    let mut values: HashMap<String, String> = HashMap::new();
    for (key, reference) in &wanted {
        let text = reference.trim_start_matches(AWS_SECRETS_MANAGER);
        let (name, field) = match text.split_once('#') {
            Some((n, f)) => (n, Some(f)),
            None => (text, None),
        };
        if !fetched.contains_key(name) {
            let secret = client
                .get(name)
                .await
                .with_context(|| format!("{key} = \"{reference}\""))?;
            fetched.insert(name.to_owned(), secret);
        }
        let secret = &fetched[name];
        let value = match field {
            None => secret.clone(),
            Some(field) => {
                pick(secret, field).map_err(|why| anyhow!("{key} = \"{reference}\": {why}"))?
            }
        };
        values.insert(key.clone(), value);
    }
    for (key, slot) in config.remote_secrets() {
        if let Some(v) = values.remove(&key) {
            *slot = v;
        }
    }
    config.validate_secrets()?;
    info!(
        secrets = wanted.len(),
        region = %client.region,
        "secrets read from AWS Secrets Manager"
    );
    Ok(())
}

/// The string value of `field` in the JSON object `secret`; the error never shows values.
fn pick(secret: &str, field: &str) -> Result<String, String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(secret)
        .map_err(|_| format!("the secret is not a JSON object, so it has no key {field:?}"))?;
    match object.get(field) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
        Some(_) => Err(format!("key {field:?} holds neither a string nor a number")),
        None => {
            let keys: Vec<&str> = object.keys().map(String::as_str).collect();
            Err(format!(
                "the secret has no key {field:?} (its keys: {})",
                keys.join(", ")
            ))
        }
    }
}

struct Client {
    http: reqwest::Client,
    endpoint: String,
    region: String,
    credentials: aws_credential_types::Credentials,
}

impl Client {
    async fn load() -> anyhow::Result<Self> {
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let region = sdk.region().map(ToString::to_string).ok_or_else(|| {
            anyhow!("aws-secretsmanager: references need an AWS region: set AWS_REGION")
        })?;
        let provider = sdk.credentials_provider().ok_or_else(|| {
            anyhow!("aws-secretsmanager: the AWS configuration has no credentials provider")
        })?;
        let credentials = provider.provide_credentials().await.map_err(|e| {
            anyhow!(
                "aws-secretsmanager: no AWS credentials: {}",
                lakesink_model::with_causes(&e)
            )
        })?;
        // The SDKs' order: the service's own variable, then the general one.
        let endpoint = std::env::var("AWS_ENDPOINT_URL_SECRETS_MANAGER")
            .ok()
            .or_else(|| sdk.endpoint_url().map(str::to_owned))
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| format!("https://secretsmanager.{region}.amazonaws.com"));
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            endpoint: endpoint.trim_end_matches('/').to_owned() + "/",
            region,
            credentials,
        })
    }

    /// `GetSecretValue` for `name`: its `SecretString`.
    async fn get(&self, name: &str) -> anyhow::Result<String> {
        let body = serde_json::json!({ "SecretId": name }).to_string();
        let host = reqwest::Url::parse(&self.endpoint)
            .with_context(|| format!("AWS Secrets Manager endpoint {}", self.endpoint))?;
        let host = match (host.host_str(), host.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => bail!("AWS Secrets Manager endpoint {} has no host", self.endpoint),
        };
        let headers = [
            ("host", host.as_str()),
            ("content-type", "application/x-amz-json-1.1"),
            ("x-amz-target", "secretsmanager.GetSecretValue"),
        ];
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("secretsmanager")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| anyhow!("signing parameters: {e}"))?
            .into();
        let request = SignableRequest::new(
            "POST",
            &self.endpoint,
            headers.iter().copied(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| anyhow!("signing: {e}"))?;
        let (instructions, _) = http_request::sign(request, &params)
            .map_err(|e| anyhow!("signing: {e}"))?
            .into_parts();
        let mut req = self.http.post(&self.endpoint).body(body);
        for (k, v) in headers.iter().filter(|(k, _)| *k != "host") {
            req = req.header(*k, *v);
        }
        for (k, v) in instructions.headers() {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|e| {
            anyhow!(
                "AWS Secrets Manager at {} unreachable: {}",
                self.endpoint,
                lakesink_model::with_causes(&e.without_url())
            )
        })?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if !status.is_success() {
            // AWS errors say their type and message; never a secret's value.
            let kind = answer["__type"]
                .as_str()
                .unwrap_or("")
                .rsplit('#')
                .next()
                .unwrap_or("");
            let message = answer["message"]
                .as_str()
                .or_else(|| answer["Message"].as_str())
                .unwrap_or("");
            bail!(
                "AWS Secrets Manager refused GetSecretValue for {name:?} ({status}): {kind}: {message}"
            );
        }
        answer["SecretString"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                anyhow!("secret {name:?} holds no SecretString (a binary secret cannot be used)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_picked_from_the_json_object_and_errors_show_no_value() {
        let secret = r#"{"username": "ls", "password": "hunter2", "port": 5432}"#;
        assert_eq!(pick(secret, "password").as_deref(), Ok("hunter2"));
        assert_eq!(pick(secret, "port").as_deref(), Ok("5432"));
        let missing = pick(secret, "pw").unwrap_err();
        assert!(
            missing.contains("its keys: password, port, username"),
            "{missing}"
        );
        let plain = pick("hunter2", "password").unwrap_err();
        assert!(!plain.contains("hunter2"), "{plain}");
    }
}
