use std::collections::HashMap;
use std::sync::Arc;

use super::{Registration, RegistryError, ResolvedSchema, SchemaResolver};
use crate::SchemaRef;

/// A resolver over a fixed set of schemas: for tests, and for schemas given in files.
#[derive(Debug, Default, Clone)]
pub struct FixedResolver {
    schemas: HashMap<SchemaRef, Arc<ResolvedSchema>>,
    /// Where each schema is registered, for those given one.
    registrations: HashMap<SchemaRef, Vec<Registration>>,
}

impl FixedResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a self-contained schema under `schema`.
    pub fn with(mut self, schema: SchemaRef, text: impl Into<String>) -> Self {
        let resolved = ResolvedSchema {
            text: text.into(),
            references: Vec::new(),
        };
        self.schemas.insert(schema, Arc::new(resolved));
        self
    }

    /// Says `schema` is registered in `artifact` (default group), as a registry's search would.
    pub fn registered(mut self, schema: SchemaRef, artifact: impl Into<String>) -> Self {
        self.registrations
            .entry(schema)
            .or_default()
            .push(Registration {
                group: None,
                artifact: artifact.into(),
            });
        self
    }
}

impl SchemaResolver for FixedResolver {
    async fn resolve(&self, schema: &SchemaRef) -> Result<Arc<ResolvedSchema>, RegistryError> {
        self.schemas
            .get(schema)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound {
                what: schema.to_string(),
            })
    }

    async fn registrations(
        &self,
        schema: &SchemaRef,
    ) -> Result<Option<Vec<Registration>>, RegistryError> {
        Ok(self.registrations.get(schema).cloned())
    }
}
