//! Resolving a [`SchemaRef`] to schema text: the [`SchemaResolver`] trait, the HTTP client for
//! Apicurio (v3, v2) and Confluent-compatible registries, a cache in front of any resolver, and
//! a fixed resolver for tests.

mod auth;
mod cache;
mod fixed;
mod http;
#[cfg(test)]
mod tests;

use lakesink_model::{Classify, Fault, System};
use std::future::Future;
use std::sync::Arc;

pub use auth::Auth;
pub use cache::CachedResolver;
pub use fixed::FixedResolver;
pub use http::{Api, HttpRegistry, HttpRegistryConfig, REQUEST_RETRIES};
pub use lakesink_model::Backoff;

use crate::SchemaRef;

/// A writer schema as the registry stores it, with every schema it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSchema {
    /// The schema text the reference names (Avro JSON).
    pub text: String,
    /// Named schemas the text refers to by name, dependencies before their dependents, each
    /// once. Empty when the registry stored the schema inlined.
    pub references: Vec<NamedSchema>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSchema {
    pub name: String,
    pub text: String,
}

/// Where the registry holds a schema id: an artifact (Apicurio) or a subject (the
/// Confluent-compatible API, whose subjects have no group).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Registration {
    /// None for Apicurio's default group, and for subjects.
    pub group: Option<String>,
    pub artifact: String,
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.group {
            Some(g) => write!(f, "{g}/{}", self.artifact),
            None => f.write_str(&self.artifact),
        }
    }
}

/// Turns a schema reference into schema text.
pub trait SchemaResolver: Send + Sync {
    fn resolve(
        &self,
        schema: &SchemaRef,
    ) -> impl Future<Output = Result<Arc<ResolvedSchema>, RegistryError>> + Send;

    /// The artifacts (subjects) that hold the schema an id names: one for a globalId, every
    /// artifact sharing the content for a contentId. `None` when this resolver cannot tell
    /// (not an id, a registry without search, a fixed set of schemas), and then nothing is
    /// checked against it. Not cached: a content can gain artifacts.
    fn registrations(
        &self,
        _schema: &SchemaRef,
    ) -> impl Future<Output = Result<Option<Vec<Registration>>, RegistryError>> + Send {
        async { Ok(None) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered that it has no such schema: bad data, or the wrong registry.
    #[error("the registry has no schema for {what}")]
    NotFound { what: String },
    /// The registry could not be reached or failed; retrying later can help.
    #[error("schema registry unavailable at {url}: {reason}")]
    Unavailable { url: String, reason: String },
    #[error("schema registry refused {url} with {status}: check the registry credentials")]
    Unauthorized { url: String, status: u16 },
    #[error("schema registry answered {url} with something unexpected: {reason}")]
    BadResponse { url: String, reason: String },
    #[error("{0}")]
    Config(String),
}

impl Classify for RegistryError {
    fn fault(&self) -> Fault {
        match self {
            Self::NotFound { .. } => Fault::BadData,
            Self::Unavailable { .. } => Fault::Unavailable(System::Registry),
            Self::Unauthorized { .. } | Self::BadResponse { .. } => {
                Fault::Refused(Some(System::Registry))
            }
            Self::Config(_) => Fault::Refused(None),
        }
    }
}
