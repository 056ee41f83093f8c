use std::fmt;
use std::time::{Duration, Instant};

use lakesink_model::with_causes;
use serde::Deserialize;
use tokio::sync::Mutex;

use super::RegistryError;

/// How requests to the registry authenticate.
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Basic {
        username: String,
        password: String,
    },
    /// OAuth 2 client credentials (Keycloak and other OIDC providers): a bearer token from
    /// `token_url`, refreshed before it expires and whenever the registry answers 401.
    ClientCredentials {
        token_url: String,
        client_id: String,
        client_secret: String,
        scope: Option<String>,
    },
}

// Secrets never reach logs or error messages.
impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}, ****)"),
            Auth::ClientCredentials {
                token_url,
                client_id,
                ..
            } => write!(f, "ClientCredentials({client_id} at {token_url}, ****)"),
        }
    }
}

/// A bearer token and when to stop using it.
#[derive(Default)]
pub(super) struct TokenCache {
    token: Mutex<Option<(String, Instant)>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<u64>,
}

impl TokenCache {
    /// Adds credentials to a request, fetching a token first when one is needed; with the
    /// bearer token it carries, if any, for [`invalidate`](Self::invalidate).
    pub(super) async fn apply(
        &self,
        auth: &Auth,
        http: &reqwest::Client,
        req: reqwest::RequestBuilder,
    ) -> Result<(reqwest::RequestBuilder, Option<String>), RegistryError> {
        match auth {
            Auth::None => Ok((req, None)),
            Auth::Basic { username, password } => {
                Ok((req.basic_auth(username, Some(password)), None))
            }
            Auth::ClientCredentials {
                token_url,
                client_id,
                client_secret,
                scope,
            } => {
                let mut slot = self.token.lock().await;
                if let Some((token, until)) = slot.as_ref()
                    && Instant::now() < *until
                {
                    return Ok((req.bearer_auth(token), Some(token.clone())));
                }
                let mut form = vec![
                    ("grant_type", "client_credentials"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                ];
                if let Some(scope) = scope {
                    form.push(("scope", scope));
                }
                let unavailable = |reason: String| RegistryError::Unavailable {
                    url: token_url.clone(),
                    reason,
                };
                let resp = http
                    .post(token_url)
                    .form(&form)
                    .send()
                    .await
                    .map_err(|e| unavailable(with_causes(&e.without_url())))?;
                let status = resp.status();
                if status.is_server_error() {
                    return Err(unavailable(status.to_string()));
                }
                if !status.is_success() {
                    return Err(RegistryError::Unauthorized {
                        url: token_url.clone(),
                        status: status.as_u16(),
                    });
                }
                let body: TokenResponse =
                    resp.json().await.map_err(|e| RegistryError::BadResponse {
                        url: token_url.clone(),
                        reason: format!("token response: {e}"),
                    })?;
                // Renew a little early so a request never carries a token that just expired.
                let lifetime =
                    Duration::from_secs(body.expires_in.unwrap_or(60).saturating_sub(10));
                let req = req.bearer_auth(&body.access_token);
                let token = body.access_token.clone();
                *slot = Some((body.access_token, Instant::now() + lifetime));
                Ok((req, Some(token)))
            }
        }
    }

    /// Forgets `refused`, after the registry refused it. A token fetched since by a
    /// concurrent request is kept: each refusal must not fetch yet another one.
    pub(super) async fn invalidate(&self, refused: &str) {
        let mut slot = self.token.lock().await;
        if slot.as_ref().is_some_and(|(token, _)| token == refused) {
            *slot = None;
        }
    }
}
