use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use lakesink_model::{Backoff, with_causes};
use reqwest::Url;
use serde::Deserialize;
use tracing::warn;

use super::auth::TokenCache;
use super::{Auth, NamedSchema, Registration, RegistryError, ResolvedSchema, SchemaResolver};
use crate::{IdKind, SchemaRef};

/// Which REST API the registry speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Apicurio 3.x native API, `/apis/registry/v3`.
    ApicurioV3,
    /// Apicurio 2.x native API, `/apis/registry/v2` (3.x servers serve it too).
    ApicurioV2,
    /// The Confluent Schema Registry API, as Confluent and Apicurio's `/apis/ccompat/v7` serve
    /// it. Its ids are contentIds on Apicurio, unless the server runs in legacy-id mode.
    Ccompat,
}

impl Api {
    fn default_path(self) -> &'static str {
        match self {
            Api::ApicurioV3 => "apis/registry/v3",
            Api::ApicurioV2 => "apis/registry/v2",
            Api::Ccompat => "apis/ccompat/v7",
        }
    }

    /// The API a URL already names by its path, if it does.
    fn from_path(path: &str) -> Option<Self> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/apis/registry/v3") {
            Some(Api::ApicurioV3)
        } else if path.ends_with("/apis/registry/v2") {
            Some(Api::ApicurioV2)
        } else if ["/apis/ccompat/v6", "/apis/ccompat/v7", "/apis/ccompat/v8"]
            .iter()
            .any(|p| path.ends_with(p))
        {
            Some(Api::Ccompat)
        } else {
            None
        }
    }
}

/// How a request is retried on a transient failure (connection errors, timeouts, 429, 5xx):
/// lakesink's one backoff, capped and jittered, with a few retries, after which the caller
/// hears `Unavailable` and retries in its own way (the pipeline, with no deadline).
pub const REQUEST_RETRIES: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(5),
    attempts: Some(5),
};

#[derive(Debug, Clone)]
pub struct HttpRegistryConfig {
    /// The server root (`http://host:8080`), or a URL that ends in an API path
    /// (`…/apis/registry/v2`, `…/apis/ccompat/v7`), which then decides the API.
    pub url: String,
    /// The API when the URL does not name one; Apicurio v3 by default.
    pub api: Option<Api>,
    pub auth: Auth,
    /// Extra trusted CA certificates, PEM.
    pub ca_pem: Option<Vec<u8>>,
    /// Per request.
    pub timeout: Duration,
    pub backoff: Backoff,
}

impl HttpRegistryConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            api: None,
            auth: Auth::None,
            ca_pem: None,
            timeout: Duration::from_secs(10),
            backoff: REQUEST_RETRIES,
        }
    }
}

/// A schema registry over HTTP. Put a [`super::CachedResolver`] in front of it.
#[derive(Debug)]
pub struct HttpRegistry {
    root: Url,
    api: Api,
    http: reqwest::Client,
    auth: Auth,
    tokens: Arc<TokenCache>,
    backoff: Backoff,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCache")
    }
}

/// Where one schema and the list of its references live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Loc {
    Id(IdKind, i64),
    Artifact {
        group: String,
        artifact: String,
        version: Option<String>,
    },
    Subject {
        subject: String,
        version: String,
    },
}

/// A reference as Apicurio lists it (`/references`) or as ccompat embeds it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    name: String,
    #[serde(default)]
    group_id: Option<String>,
    #[serde(default)]
    artifact_id: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default, deserialize_with = "version_text")]
    version: Option<String>,
}

/// ccompat versions are numbers, Apicurio's are strings.
fn version_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(s)) => Some(s),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

#[derive(Deserialize)]
struct CcompatSchema {
    schema: String,
    #[serde(default)]
    references: Vec<Reference>,
}

struct Node {
    text: String,
    references: Vec<Reference>,
}

/// More references than any real schema has: a cycle, or a broken registry.
const MAX_REFERENCES: usize = 512;

impl HttpRegistry {
    pub fn new(config: HttpRegistryConfig) -> Result<Self, RegistryError> {
        let mut root = Url::parse(&config.url).map_err(|e| {
            RegistryError::Config(format!("registry url {:?} is not a URL: {e}", config.url))
        })?;
        let api = match Api::from_path(root.path()) {
            Some(api) => api,
            None => {
                let api = config.api.unwrap_or(Api::ApicurioV3);
                let base = root.path().trim_end_matches('/').to_owned();
                root.set_path(&format!("{base}/{}", api.default_path()));
                api
            }
        };
        let mut http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)));
        if let Some(pem) = &config.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| RegistryError::Config(format!("registry CA certificate: {e}")))?
            {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| RegistryError::Config(format!("registry HTTP client: {e}")))?;
        Ok(Self {
            root,
            api,
            http,
            auth: config.auth,
            tokens: Arc::default(),
            backoff: config.backoff,
        })
    }

    pub fn api(&self) -> Api {
        self.api
    }

    /// One cheap request that shows the registry answers and takes the credentials: the
    /// system info of Apicurio's APIs, the schema types of the Confluent API. Returns what
    /// the registry says it is.
    pub async fn probe(&self) -> Result<String, RegistryError> {
        let (url, what) = match self.api {
            Api::ApicurioV3 | Api::ApicurioV2 => {
                (self.url(&["system", "info"]), "the registry's system info")
            }
            Api::Ccompat => (
                self.url(&["schemas", "types"]),
                "the registry's schema types",
            ),
        };
        let body = self.get(url, what).await?;
        #[derive(Deserialize)]
        struct Info {
            name: String,
            version: String,
        }
        Ok(match serde_json::from_str::<Info>(&body) {
            Ok(info) => format!("{} {} ({:?} API)", info.name, info.version, self.api),
            Err(_) => format!("answered ({:?} API)", self.api),
        })
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.root.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// GET with auth and retries; the body as text.
    async fn get(&self, url: Url, what: &str) -> Result<String, RegistryError> {
        let mut waits = self.backoff.delays();
        let mut refreshed = false;
        loop {
            let (req, token) = self
                .tokens
                .apply(&self.auth, &self.http, self.http.get(url.clone()))
                .await?;
            // The URL is said once, by the error; the causes say why (refused, no such host).
            let failure = match req.send().await {
                Err(e) => with_causes(&e.without_url()),
                Ok(resp) => {
                    let status = resp.status();
                    match status.as_u16() {
                        200..=299 => match resp.text().await {
                            Ok(body) => return Ok(body),
                            Err(e) => with_causes(&e.without_url()),
                        },
                        404 => {
                            return Err(RegistryError::NotFound {
                                what: what.to_owned(),
                            });
                        }
                        401 if token.is_some() && !refreshed => {
                            refreshed = true;
                            if let Some(token) = &token {
                                self.tokens.invalidate(token).await;
                            }
                            continue;
                        }
                        401 | 403 => {
                            return Err(RegistryError::Unauthorized {
                                url: url.to_string(),
                                status: status.as_u16(),
                            });
                        }
                        429 | 500..=599 => status.to_string(),
                        _ => {
                            return Err(RegistryError::BadResponse {
                                url: url.to_string(),
                                reason: status.to_string(),
                            });
                        }
                    }
                }
            };
            let Some(delay) = waits.next() else {
                return Err(RegistryError::Unavailable {
                    url: url.to_string(),
                    reason: failure,
                });
            };
            warn!(url = %url, error = %failure, ?delay, "schema registry request failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: Url,
        what: &str,
    ) -> Result<T, RegistryError> {
        let body = self.get(url.clone(), what).await?;
        serde_json::from_str(&body).map_err(|e| RegistryError::BadResponse {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    /// One schema's text and the references it lists.
    async fn node(&self, loc: &Loc) -> Result<Node, RegistryError> {
        let what = describe(loc);
        if self.api == Api::Ccompat {
            let url = match loc {
                Loc::Id(_, id) => self.url(&["schemas", "ids", &id.to_string()]),
                Loc::Subject { subject, version } => {
                    self.url(&["subjects", subject, "versions", version])
                }
                Loc::Artifact {
                    artifact, version, ..
                } => self.url(&[
                    "subjects",
                    artifact,
                    "versions",
                    version.as_deref().unwrap_or("latest"),
                ]),
            };
            let s: CcompatSchema = self.get_json(url, &what).await?;
            return Ok(Node {
                text: s.schema,
                references: s.references,
            });
        }
        let (content, refs) = match loc {
            Loc::Id(kind, id) => {
                let kind = match kind {
                    IdKind::GlobalId => "globalIds",
                    IdKind::ContentId => "contentIds",
                };
                let id = id.to_string();
                (
                    self.url(&["ids", kind, &id]),
                    self.url(&["ids", kind, &id, "references"]),
                )
            }
            Loc::Artifact {
                group,
                artifact,
                version,
            } => {
                let version = match (self.api, version.as_deref()) {
                    (_, Some(v)) => v,
                    (Api::ApicurioV3, None) => "branch=latest",
                    (_, None) => "latest",
                };
                let base = ["groups", group, "artifacts", artifact, "versions", version];
                let content = match self.api {
                    Api::ApicurioV3 => self.url(&[&base[..], &["content"]].concat()),
                    _ => self.url(&base),
                };
                (content, self.url(&[&base[..], &["references"]].concat()))
            }
            Loc::Subject { .. } => {
                return Err(RegistryError::Config(format!(
                    "{what}: subjects exist only on the Confluent-compatible API"
                )));
            }
        };
        // Independent requests: one round trip, not two.
        let (text, references) = tokio::join!(
            self.get(content, &what),
            self.get_json::<Vec<Reference>>(refs, &what)
        );
        Ok(Node {
            text: text?,
            references: references?,
        })
    }

    fn reference_loc(&self, r: &Reference) -> Result<Loc, RegistryError> {
        let missing = || RegistryError::BadResponse {
            url: self.root.to_string(),
            reason: format!("reference {} names no artifact or subject", r.name),
        };
        if self.api == Api::Ccompat {
            return Ok(Loc::Subject {
                subject: r.subject.clone().ok_or_else(missing)?,
                version: r.version.clone().unwrap_or_else(|| "latest".into()),
            });
        }
        Ok(Loc::Artifact {
            // Apicurio lists the default group as null.
            group: r.group_id.clone().unwrap_or_else(|| "default".into()),
            artifact: r.artifact_id.clone().ok_or_else(missing)?,
            version: r.version.clone(),
        })
    }

    /// The schema at `root` with its references, resolved recursively: dependencies first,
    /// each name once.
    async fn tree(&self, root: &Loc) -> Result<ResolvedSchema, RegistryError> {
        let node = self.node(root).await?;
        let mut out: Vec<NamedSchema> = Vec::new();
        let mut done: HashSet<String> = HashSet::new();
        let mut open: HashSet<String> = HashSet::new();
        let mut stack: Vec<(Reference, Option<String>)> = node
            .references
            .into_iter()
            .rev()
            .map(|r| (r, None))
            .collect();
        let mut fetched = 0;
        while let Some((r, text)) = stack.pop() {
            if let Some(text) = text {
                open.remove(&r.name);
                if done.insert(r.name.clone()) {
                    out.push(NamedSchema { name: r.name, text });
                }
                continue;
            }
            if done.contains(&r.name) || open.contains(&r.name) {
                continue;
            }
            fetched += 1;
            if fetched > MAX_REFERENCES {
                return Err(RegistryError::BadResponse {
                    url: self.root.to_string(),
                    reason: format!(
                        "{} has more than {MAX_REFERENCES} references",
                        describe(root)
                    ),
                });
            }
            let child = self.node(&self.reference_loc(&r)?).await?;
            open.insert(r.name.clone());
            let grandchildren = child.references;
            stack.push((r, Some(child.text)));
            stack.extend(grandchildren.into_iter().rev().map(|g| (g, None)));
        }
        Ok(ResolvedSchema {
            text: node.text,
            references: out,
        })
    }
}

/// More artifacts than one content is shared by in practice; the rest are not looked at.
const MAX_REGISTRATIONS: &str = "1000";

impl HttpRegistry {
    /// Where the registry holds an id, from its search API: Apicurio v3 `/search/versions`,
    /// v2 `/search/artifacts` (both by globalId or contentId), ccompat
    /// `/schemas/ids/{id}/versions`. A registry that cannot answer (no such endpoint, search
    /// not allowed) gives None; only an unreachable one is an error.
    async fn find_registrations(
        &self,
        kind: IdKind,
        id: i64,
    ) -> Result<Option<Vec<Registration>>, RegistryError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Found {
            #[serde(default)]
            group_id: Option<String>,
            #[serde(default, alias = "id")]
            artifact_id: Option<String>,
            #[serde(default)]
            subject: Option<String>,
        }
        #[derive(Deserialize)]
        struct Page {
            #[serde(default, alias = "artifacts")]
            versions: Vec<Found>,
        }
        let what = describe(&Loc::Id(kind, id));
        let param = match kind {
            IdKind::GlobalId => "globalId",
            IdKind::ContentId => "contentId",
        };
        let search = |segments: &[&str]| {
            let mut url = self.url(segments);
            url.query_pairs_mut()
                .append_pair(param, &id.to_string())
                .append_pair("limit", MAX_REGISTRATIONS);
            url
        };
        let found: Result<Vec<Found>, RegistryError> = match self.api {
            Api::ApicurioV3 => self
                .get_json::<Page>(search(&["search", "versions"]), &what)
                .await
                .map(|p| p.versions),
            Api::ApicurioV2 => self
                .get_json::<Page>(search(&["search", "artifacts"]), &what)
                .await
                .map(|p| p.versions),
            Api::Ccompat => {
                let url = self.url(&["schemas", "ids", &id.to_string(), "versions"]);
                self.get_json::<Vec<Found>>(url, &what).await
            }
        };
        let found = match found {
            Ok(found) => found,
            Err(e @ RegistryError::Unavailable { .. }) => return Err(e),
            Err(e) => {
                warn!(id = %what, error = %e, "the registry does not say which artifact holds this id; not checked against the topic");
                return Ok(None);
            }
        };
        let registrations: Vec<Registration> = found
            .into_iter()
            .filter_map(|f| {
                Some(Registration {
                    group: f.group_id.filter(|g| g != "default"),
                    artifact: f.artifact_id.or(f.subject)?,
                })
            })
            .collect();
        // Content no artifact holds any more (its versions deleted) tells nothing.
        Ok((!registrations.is_empty()).then_some(registrations))
    }
}

fn describe(loc: &Loc) -> String {
    match loc {
        Loc::Id(IdKind::GlobalId, id) => format!("globalId {id}"),
        Loc::Id(IdKind::ContentId, id) => format!("contentId {id}"),
        Loc::Artifact {
            group,
            artifact,
            version,
        } => format!(
            "artifact {group}/{artifact} version {}",
            version.as_deref().unwrap_or("latest")
        ),
        Loc::Subject { subject, version } => format!("subject {subject} version {version}"),
    }
}

impl SchemaResolver for HttpRegistry {
    async fn resolve(&self, schema: &SchemaRef) -> Result<Arc<ResolvedSchema>, RegistryError> {
        let loc = match schema {
            SchemaRef::Inline { .. } => {
                return Err(RegistryError::Config(format!(
                    "{schema} travels in the record; no registry holds it"
                )));
            }
            SchemaRef::Id { kind, id } => Loc::Id(*kind, *id),
            SchemaRef::Coordinates {
                group_id,
                artifact_id,
                version,
            } => Loc::Artifact {
                group: group_id.clone().unwrap_or_else(|| "default".into()),
                artifact: artifact_id.clone(),
                version: version.clone(),
            },
        };
        self.tree(&loc).await.map(Arc::new)
    }

    async fn registrations(
        &self,
        schema: &SchemaRef,
    ) -> Result<Option<Vec<Registration>>, RegistryError> {
        match schema {
            SchemaRef::Id { kind, id } => self.find_registrations(*kind, *id).await,
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_from_url_or_default() {
        let r = HttpRegistry::new(HttpRegistryConfig::new("http://h:8080")).unwrap();
        assert_eq!(r.api(), Api::ApicurioV3);
        assert_eq!(
            r.url(&["ids", "globalIds", "5"]).as_str(),
            "http://h:8080/apis/registry/v3/ids/globalIds/5"
        );
        let r =
            HttpRegistry::new(HttpRegistryConfig::new("http://h:8080/apis/ccompat/v7/")).unwrap();
        assert_eq!(r.api(), Api::Ccompat);
        assert_eq!(
            r.url(&["schemas", "ids", "5"]).as_str(),
            "http://h:8080/apis/ccompat/v7/schemas/ids/5"
        );
        let mut c = HttpRegistryConfig::new("http://h:8080/prefix/");
        c.api = Some(Api::ApicurioV2);
        let r = HttpRegistry::new(c).unwrap();
        assert_eq!(
            r.url(&["groups", "a b"]).as_str(),
            "http://h:8080/prefix/apis/registry/v2/groups/a%20b"
        );
    }

    #[test]
    fn bad_url_is_a_config_error() {
        let err = HttpRegistry::new(HttpRegistryConfig::new("not a url")).unwrap_err();
        assert!(matches!(err, RegistryError::Config(_)), "{err}");
    }

    #[test]
    fn requests_are_retried_a_few_times_with_jittered_capped_waits() {
        let waits: Vec<Duration> = REQUEST_RETRIES.delays().collect();
        assert_eq!(waits.len(), 5);
        assert!(
            waits
                .iter()
                .all(|w| *w >= Duration::from_millis(100) && *w <= REQUEST_RETRIES.max),
            "{waits:?}"
        );
        // Two registries restarting together do not wait in lockstep.
        let other: Vec<Duration> = REQUEST_RETRIES.delays().collect();
        assert_ne!(waits, other);
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let auth = Auth::ClientCredentials {
            token_url: "http://idp/token".into(),
            client_id: "lakesink".into(),
            client_secret: "hunter2".into(),
            scope: None,
        };
        assert!(!format!("{auth:?}").contains("hunter2"));
    }
}
