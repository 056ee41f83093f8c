//! Segment markers: before the files of a segment are made visible, a small object records
//! where the segment was cut (and the wall-clock time its rows were stamped with). A restart
//! that reads a segment again finds the marker and cuts at the same offset, so it rewrites
//! the same keys instead of adding overlapping files. The markers also list each segment's
//! files: a manifest of the raw layer.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use super::StoreFailure;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub topic: String,
    pub partition: i32,
    /// Offset of the segment's first record.
    pub start: i64,
    /// Offset of its last record.
    pub last: i64,
    /// Wall-clock time the segment was opened, epoch ms.
    pub wall_ms: i64,
    pub rows: u64,
    pub files: Vec<String>,
}

pub fn key(prefix: &str, root: &str, topic: &str, partition: i32, start: i64) -> Path {
    let mut k = String::new();
    for part in [root, prefix] {
        let part = part.trim_matches('/');
        if !part.is_empty() {
            k.push_str(part);
            k.push('/');
        }
    }
    Path::from(format!("{k}{topic}/{partition}/{start:020}.json"))
}

pub async fn read(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
) -> Result<Option<Marker>, StoreFailure> {
    match store.get(key).await {
        Ok(got) => {
            let bytes = got
                .bytes()
                .await
                .map_err(|e| StoreFailure::store(key, &e))?;
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| StoreFailure::other(format!("marker {key} is not valid: {e}")))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(StoreFailure::store(key, &e)),
    }
}

pub async fn write(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    marker: &Marker,
) -> Result<(), StoreFailure> {
    let body = serde_json::to_vec(marker).map_err(|e| StoreFailure::other(e.to_string()))?;
    store
        .put(key, body.into())
        .await
        .map(|_| ())
        .map_err(|e| StoreFailure::store(key, &e))
}
