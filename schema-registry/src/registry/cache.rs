use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::{Registration, RegistryError, ResolvedSchema, SchemaResolver};
use crate::SchemaRef;

type Slot = Arc<OnceCell<Arc<ResolvedSchema>>>;

/// Caches what an inner resolver returns, for the life of the process: a schema id always
/// names the same content. Concurrent misses for one reference make one request. Failures
/// are not cached, so an id registered a moment later, or a registry back from an outage,
/// resolves on the next try. References to an artifact's latest version are never cached.
#[derive(Debug)]
pub struct CachedResolver<R> {
    inner: R,
    slots: Mutex<HashMap<SchemaRef, Slot>>,
}

impl<R> CachedResolver<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// How many references are cached.
    pub fn len(&self) -> usize {
        self.lock().values().filter(|s| s.initialized()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SchemaRef, Slot>> {
        // A panic elsewhere while holding the lock leaves the map itself consistent.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn immutable(schema: &SchemaRef) -> bool {
    !matches!(schema, SchemaRef::Coordinates { version: None, .. })
}

impl<R: SchemaResolver> SchemaResolver for CachedResolver<R> {
    async fn resolve(&self, schema: &SchemaRef) -> Result<Arc<ResolvedSchema>, RegistryError> {
        if !immutable(schema) {
            return self.inner.resolve(schema).await;
        }
        let slot = self.lock().entry(schema.clone()).or_default().clone();
        slot.get_or_try_init(|| self.inner.resolve(schema))
            .await
            .cloned()
    }

    async fn registrations(
        &self,
        schema: &SchemaRef,
    ) -> Result<Option<Vec<Registration>>, RegistryError> {
        self.inner.registrations(schema).await
    }
}

#[cfg(test)]
mod tests {
    use lakesink_model::Classify;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::future::join_all;

    use super::*;
    use crate::IdKind;

    /// Counts calls; fails the first `failures` of them.
    struct Counting {
        calls: AtomicUsize,
        failures: usize,
    }

    impl SchemaResolver for Counting {
        async fn resolve(&self, schema: &SchemaRef) -> Result<Arc<ResolvedSchema>, RegistryError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            if n < self.failures {
                return Err(RegistryError::Unavailable {
                    url: "test".into(),
                    reason: "down".into(),
                });
            }
            Ok(Arc::new(ResolvedSchema {
                text: schema.to_string(),
                references: Vec::new(),
            }))
        }
    }

    fn counting(failures: usize) -> CachedResolver<Counting> {
        CachedResolver::new(Counting {
            calls: AtomicUsize::new(0),
            failures,
        })
    }

    const ID: SchemaRef = SchemaRef::Id {
        kind: IdKind::GlobalId,
        id: 7,
    };

    #[tokio::test]
    async fn concurrent_misses_make_one_request() {
        let cache = counting(0);
        let results = join_all((0..16).map(|_| cache.resolve(&ID))).await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().is_ok_and(|s| s.text == "globalId 7"))
        );
        assert_eq!(cache.inner.calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.len(), 1);
        // A content id with the same number is another schema.
        let other = SchemaRef::Id {
            kind: IdKind::ContentId,
            id: 7,
        };
        assert_eq!(cache.resolve(&other).await.unwrap().text, "contentId 7");
        assert_eq!(cache.inner.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn failures_are_not_cached() {
        let cache = counting(1);
        assert!(cache.resolve(&ID).await.unwrap_err().retryable());
        assert!(cache.is_empty());
        assert_eq!(cache.resolve(&ID).await.unwrap().text, "globalId 7");
        cache.resolve(&ID).await.unwrap();
        assert_eq!(cache.inner.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn latest_versions_are_not_cached() {
        let cache = counting(0);
        let latest = SchemaRef::Coordinates {
            group_id: None,
            artifact_id: "t-value".into(),
            version: None,
        };
        cache.resolve(&latest).await.unwrap();
        cache.resolve(&latest).await.unwrap();
        assert_eq!(cache.inner.calls.load(Ordering::SeqCst), 2);
    }
}
