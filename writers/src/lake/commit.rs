//! Commits a table's updates and requirements to the catalog as they are built, for the
//! snapshots the `iceberg` crate's transactions cannot make (a row delta's data and delete
//! files in one snapshot): its `TableCommit` comes only out of its own transactions (the
//! builder is crate-private), so lakesink speaks the two catalogs' commit protocols itself.
//!
//! - SQL (Iceberg's JDBC catalog layout in PostgreSQL): the requirements are checked against
//!   the table as loaded, the updates applied to its metadata, the new metadata file written
//!   beside the old one, and the catalog row swapped from the old location to the new one only
//!   if it still names the old one. Java's `JdbcTableOperations` and the crate's `SqlCatalog`
//!   commit the same way.
//! - REST: `POST /v1/{prefix}/namespaces/{namespace}/tables/{table}` with the requirements and
//!   updates (the REST spec's `CommitTableRequest`); the server checks and applies them. 409
//!   is a lost race. Authentication as the crate's REST catalog does it: `token`, or
//!   `credential` (`client_id:client_secret`, OAuth2 client credentials at `oauth2-server-uri`
//!   or `{uri}/v1/oauth/tokens`, with `scope`, `audience`, `resource`), and `header.*`.
//!
//! A lost race is `CatalogCommitConflicts`: the caller reloads the table and builds the commit
//! again on the newer one.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, MetadataLocation, Result, TableIdent, TableRequirement, TableUpdate,
};
use lakesink_config::{CatalogKind, LakeConfig};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// The catalog's commit endpoint.
#[derive(Clone)]
pub enum Committer {
    Sql(SqlCommitter),
    Rest(Arc<RestCommitter>),
    /// The unit tests' catalog.
    #[cfg(test)]
    Fake(Arc<super::fake::Fake>),
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sql(s) => write!(f, "SqlCommitter({})", s.catalog_name),
            Self::Rest(r) => write!(f, "RestCommitter({})", r.uri),
            #[cfg(test)]
            Self::Fake(_) => write!(f, "Fake"),
        }
    }
}

impl Committer {
    /// The committer for the configured catalog. Connects lazily.
    pub fn open(config: &LakeConfig) -> Result<Self> {
        let props: HashMap<String, String> = config
            .catalog_properties
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().to_owned()))
            .collect();
        let uri = config.catalog_uri.expose().to_owned();
        Ok(match config.catalog {
            CatalogKind::Sql => Self::Sql(SqlCommitter::open(&uri, &config.catalog_name)?),
            CatalogKind::Rest => {
                let warehouse = props
                    .get("warehouse")
                    .cloned()
                    .unwrap_or_else(|| config.warehouse.clone());
                Self::Rest(Arc::new(RestCommitter::new(&uri, &warehouse, props)?))
            }
        })
    }

    /// Commits `updates` to `table` if `requirements` hold; the table as committed.
    pub async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        match self {
            Self::Sql(s) => s.commit(table, requirements, updates).await,
            Self::Rest(r) => r.commit(table, requirements, updates).await,
            #[cfg(test)]
            Self::Fake(c) => c.commit(table, requirements, updates).await,
        }
    }
}

fn conflict(ident: &TableIdent, what: &str) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("commit to {ident} lost a race: {what}"),
    )
}

fn unexpected(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unexpected, what.to_string())
}

/// The table `metadata` at `location`, with the file I/O and identity of `base`.
pub(super) fn rebuilt(base: &Table, metadata: TableMetadata, location: String) -> Result<Table> {
    Table::builder()
        .runtime(iceberg::Runtime::try_current()?)
        .identifier(base.identifier().clone())
        .file_io(base.file_io().clone())
        .metadata(Arc::new(metadata))
        .metadata_location(location)
        .build()
}

/// The SQL catalog's row swap, on lakesink's own PostgreSQL driver.
#[derive(Clone)]
pub struct SqlCommitter {
    pool: sqlx::PgPool,
    catalog_name: String,
}

impl SqlCommitter {
    fn open(uri: &str, catalog_name: &str) -> Result<Self> {
        let options = sqlx::postgres::PgConnectOptions::from_str(uri)
            .map_err(|e| Error::new(ErrorKind::DataInvalid, format!("lake.catalog-uri: {e}")))?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy_with(options);
        Ok(Self {
            pool,
            catalog_name: catalog_name.to_owned(),
        })
    }

    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let ident = table.identifier();
        let old = table.metadata_location_result()?.to_owned();
        let (metadata, location) = applied(table, &old, requirements, updates)?;
        metadata.write_to(table.file_io(), &location).await?;
        let location = location.to_string();
        let swapped = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
             WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 \
               AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) \
               AND metadata_location = $2",
        )
        .bind(&location)
        .bind(&old)
        .bind(&self.catalog_name)
        .bind(ident.namespace().join("."))
        .bind(ident.name())
        .execute(&self.pool)
        .await
        .map_err(|e| unexpected(format!("the SQL catalog: {e}")))?;
        if swapped.rows_affected() == 0 {
            // The new metadata file is left behind, never referred to: `lake maintain`'s
            // orphan pass deletes it.
            return Err(conflict(ident, "its metadata location moved"));
        }
        rebuilt(table, metadata, location)
    }
}

/// `table`'s metadata with `updates` applied once `requirements` hold, and where it goes:
/// the next version's file beside `old`.
pub(super) fn applied(
    table: &Table,
    old: &str,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
) -> Result<(TableMetadata, MetadataLocation)> {
    for r in &requirements {
        r.check(Some(table.metadata())).map_err(|e| {
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                e
            } else {
                conflict(table.identifier(), &e.to_string())
            }
        })?;
    }
    let mut builder = table.metadata().clone().into_builder(Some(old.to_owned()));
    for u in updates {
        builder = u.apply(builder)?;
    }
    let metadata = builder.build()?.metadata;
    let location = MetadataLocation::from_str(old)?
        .with_next_version()
        .with_new_metadata(&metadata);
    Ok((metadata, location))
}

/// The REST spec's `CommitTableRequest`.
#[derive(Serialize)]
struct CommitRequest<'a> {
    identifier: &'a TableIdent,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
}

/// The REST spec's `CommitTableResponse`.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CommitResponse {
    metadata_location: String,
    metadata: TableMetadata,
}

#[derive(Deserialize)]
struct CatalogConfig {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
}

/// A REST catalog's commit endpoint.
pub struct RestCommitter {
    uri: String,
    warehouse: String,
    /// The catalog's properties as configured; the server's `/v1/config` defaults and
    /// overrides are merged in on first use.
    props: HashMap<String, String>,
    http: reqwest::Client,
    /// The merged properties and the bearer token, once known.
    session: Mutex<Option<Session>>,
}

#[derive(Clone)]
struct Session {
    prefix: Option<String>,
    token: Option<String>,
}

impl RestCommitter {
    fn new(uri: &str, warehouse: &str, props: HashMap<String, String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| unexpected(format!("the REST catalog's HTTP client: {e}")))?;
        Ok(Self {
            uri: uri.trim_end_matches('/').to_owned(),
            warehouse: warehouse.to_owned(),
            props,
            http,
            session: Mutex::new(None),
        })
    }

    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        token: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, url);
        for (k, v) in &self.props {
            if let Some(name) = k.strip_prefix("header.") {
                r = r.header(name, v);
            }
        }
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// A token from the OAuth2 client-credentials grant, when `credential` is set.
    async fn fetch_token(&self) -> Result<Option<String>> {
        let props = &self.props;
        let Some(credential) = props.get("credential") else {
            return Ok(props.get("token").cloned());
        };
        let (id, secret) = match credential.split_once(':') {
            Some((id, secret)) => (Some(id), secret),
            None => (None, credential.as_str()),
        };
        let endpoint = props
            .get("oauth2-server-uri")
            .cloned()
            .unwrap_or_else(|| format!("{}/v1/oauth/tokens", self.uri));
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        if let Some(id) = id {
            form.push(("client_id", id));
        }
        form.push(("client_secret", secret));
        form.push((
            "scope",
            props.get("scope").map_or("catalog", String::as_str),
        ));
        for p in ["audience", "resource"] {
            if let Some(v) = props.get(p) {
                form.push((p, v));
            }
        }
        let answer = self
            .request(reqwest::Method::POST, &endpoint, None)
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                unexpected(format!("the REST catalog's token endpoint {endpoint}: {e}"))
            })?;
        let token: TokenResponse = answered(
            answer,
            &format!("the REST catalog's token endpoint {endpoint}"),
        )
        .await?;
        Ok(Some(token.access_token))
    }

    /// The prefix and token, from `/v1/config` and the token endpoint on first use.
    async fn session(&self, fresh: bool) -> Result<Session> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref().filter(|_| !fresh) {
            return Ok(s.clone());
        }
        let token = self.fetch_token().await?;
        let url = format!("{}/v1/config", self.uri);
        let answer = self
            .request(reqwest::Method::GET, &url, token.as_deref())
            .query(&[("warehouse", &self.warehouse)])
            .send()
            .await
            .map_err(|e| unexpected(format!("the REST catalog {url}: {e}")))?;
        let config: CatalogConfig = answered(answer, &format!("the REST catalog {url}")).await?;
        let mut props = config.defaults;
        props.extend(self.props.clone());
        props.extend(config.overrides);
        let session = Session {
            prefix: props.get("prefix").filter(|p| !p.is_empty()).cloned(),
            token,
        };
        *guard = Some(session.clone());
        Ok(session)
    }

    /// `{uri}/v1/{prefix}/namespaces/{namespace}/tables/{table}`, each segment percent-encoded
    /// (a nested namespace's parts joined by 0x1F, as the REST spec has it).
    fn table_url(&self, session: &Session, ident: &TableIdent) -> Result<reqwest::Url> {
        let mut url = reqwest::Url::parse(&self.uri)
            .map_err(|e| Error::new(ErrorKind::DataInvalid, format!("lake.catalog-uri: {e}")))?;
        {
            let mut path = url.path_segments_mut().map_err(|()| {
                Error::new(ErrorKind::DataInvalid, "lake.catalog-uri: not a base URL")
            })?;
            path.pop_if_empty().push("v1");
            if let Some(p) = &session.prefix {
                path.extend(p.split('/'));
            }
            path.push("namespaces")
                .push(&ident.namespace().to_url_string())
                .push("tables")
                .push(ident.name());
        }
        Ok(url)
    }

    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let ident = table.identifier();
        let body = serde_json::to_vec(&CommitRequest {
            identifier: ident,
            requirements,
            updates,
        })
        .map_err(|e| unexpected(format!("a commit request for {ident}: {e}")))?;
        let mut session = self.session(false).await?;
        let mut retried = false;
        loop {
            let url = self.table_url(&session, ident)?;
            let answer = self
                .request(
                    reqwest::Method::POST,
                    url.as_str(),
                    session.token.as_deref(),
                )
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await
                .map_err(|e| unexpected(format!("the REST catalog {url}: {e}")))?;
            let status = answer.status();
            if status == StatusCode::UNAUTHORIZED && !retried {
                // The token expired: one more try with a new one.
                retried = true;
                session = self.session(true).await?;
                continue;
            }
            if status == StatusCode::CONFLICT {
                return Err(conflict(ident, "the catalog answered 409"));
            }
            // A 5xx leaves the commit's state unknown: the caller finds out from the offsets
            // in the table, as after a crash.
            let done: CommitResponse =
                answered(answer, &format!("the REST catalog {url}, committing")).await?;
            return rebuilt(table, done.metadata, done.metadata_location);
        }
    }
}

/// A successful answer's JSON body, or an error with the status (in the form
/// [`super::LakeError`]'s classification reads: a 4xx refusal stops the sink, a 5xx is retried)
/// and what the server said.
async fn answered<T: serde::de::DeserializeOwned>(
    answer: reqwest::Response,
    what: &str,
) -> Result<T> {
    let status = answer.status();
    if !status.is_success() {
        let body = answer.text().await.unwrap_or_default();
        return Err(unexpected(format!("{what} answered {status}: {body}"))
            .with_context("status", status.to_string()));
    }
    answer
        .json()
        .await
        .map_err(|e| unexpected(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests;
