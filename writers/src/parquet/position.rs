//! The raw layer's own position per partition, kept beside its markers, so that it resumes
//! from what it holds rather than from Kafka's committed offset, which a group reset, an
//! offset tool or another client in the group can move past it.
//!
//! Two facts, both from the store: the *durable* point (`position.json`: every record below it
//! is in a visible file, or was deliberately not kept), written every few seconds after the
//! segments below it were uploaded, so it may lag; and the *cut* end (the last marker's last
//! offset + 1), which no committed offset of lakesink's own can pass, since lakesink commits
//! only what the raw layer made durable.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use super::{StoreFailure, marker};

#[derive(Debug, Serialize, Deserialize)]
struct Position {
    topic: String,
    partition: i32,
    next: i64,
}

/// What the raw layer holds of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Every record below this is durable; `None` before the first position was written.
    pub durable: Option<i64>,
    /// The end of the last segment cut (its files may still have been uploading).
    pub cut_end: i64,
}

/// Reads and writes the raw layer's positions.
#[derive(Clone)]
pub struct Positions {
    store: Arc<dyn ObjectStore>,
    marker_prefix: String,
    prefix: String,
}

impl Positions {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, marker_prefix: &str, prefix: &str) -> Self {
        Self {
            store,
            marker_prefix: marker_prefix.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    /// The directory of a partition's markers.
    fn dir(&self, topic: &str, partition: i32) -> Path {
        let first = marker::key(&self.marker_prefix, &self.prefix, topic, partition, 0);
        Path::from_iter(first.parts().take(first.parts().count() - 1))
    }

    fn key(&self, topic: &str, partition: i32) -> Path {
        self.dir(topic, partition).join("position.json")
    }

    /// Records that every record of the partition below `next` is durable.
    pub async fn write(&self, topic: &str, partition: i32, next: i64) -> Result<(), StoreFailure> {
        let body = serde_json::to_vec(&Position {
            topic: topic.to_owned(),
            partition,
            next,
        })
        .map_err(|e| StoreFailure::other(e.to_string()))?;
        let key = self.key(topic, partition);
        self.store
            .put(&key, body.into())
            .await
            .map(drop)
            .map_err(|e| StoreFailure::store(&key, &e))
    }

    /// What the raw layer holds of the partition; `None` when it holds nothing (no marker).
    pub async fn held(&self, topic: &str, partition: i32) -> Result<Option<Held>, StoreFailure> {
        let key = self.key(topic, partition);
        let durable = match self.store.get(&key).await {
            Ok(got) => {
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| StoreFailure::store(&key, &e))?;
                let p: Position = serde_json::from_slice(&bytes)
                    .map_err(|e| StoreFailure::other(format!("{key} is not a position: {e}")))?;
                Some(p.next)
            }
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(StoreFailure::store(&key, &e)),
        };
        // Marker keys sort by start offset: list only those from the durable point on.
        let dir = self.dir(topic, partition);
        let from =
            durable.map(|d| marker::key(&self.marker_prefix, &self.prefix, topic, partition, d));
        let listing = match &from {
            Some(from) => self.store.list_with_offset(Some(&dir), from),
            None => self.store.list(Some(&dir)),
        };
        let metas: Vec<_> = listing
            .try_collect()
            .await
            .map_err(|e| StoreFailure::store(format!("listing {dir}"), &e))?;
        // `from` itself is not listed (the offset is exclusive), but may be a marker.
        let last_start = metas
            .iter()
            .map(|m| &m.location)
            .chain(from.as_ref())
            .filter_map(|k| k.filename()?.strip_suffix(".json")?.parse::<i64>().ok())
            .max();
        let cut_end = match last_start {
            Some(start) => {
                let mkey = marker::key(&self.marker_prefix, &self.prefix, topic, partition, start);
                match marker::read(&self.store, &mkey).await? {
                    Some(m) => m.last.checked_add(1).ok_or_else(|| {
                        StoreFailure::other(format!("marker {mkey} ends at i64::MAX"))
                    })?,
                    // `from`, when it is no marker: the position alone.
                    None => start,
                }
            }
            None => match durable {
                Some(d) => d,
                None => return Ok(None),
            },
        };
        Ok(Some(Held {
            durable,
            cut_end: cut_end.max(durable.unwrap_or(i64::MIN)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn marker(start: i64, last: i64) -> marker::Marker {
        marker::Marker {
            topic: "t".into(),
            partition: 0,
            start,
            last,
            wall_ms: 0,
            rows: (last - start + 1) as u64,
            files: Vec::new(),
        }
    }

    #[tokio::test]
    async fn the_durable_point_and_the_end_of_the_last_cut() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let p = Positions::new(store.clone(), "_lakesink/segments", "root");
        assert_eq!(p.held("t", 0).await, Ok(None), "nothing held");
        for (start, last) in [(0, 99), (100, 199), (200, 250)] {
            let key = marker::key("_lakesink/segments", "root", "t", 0, start);
            marker::write(&store, &key, &marker(start, last))
                .await
                .unwrap();
        }
        let held = |durable, cut_end| Ok(Some(Held { durable, cut_end }));
        assert_eq!(p.held("t", 0).await, held(None, 251), "markers alone");
        p.write("t", 0, 100).await.unwrap();
        assert_eq!(p.held("t", 0).await, held(Some(100), 251));
        p.write("t", 0, 251).await.unwrap();
        assert_eq!(p.held("t", 0).await, held(Some(251), 251));
        // Records skipped after the last segment (not rows, tombstones left out).
        p.write("t", 0, 300).await.unwrap();
        assert_eq!(p.held("t", 0).await, held(Some(300), 300));
        assert_eq!(p.held("t", 1).await, Ok(None), "another partition");
        assert_eq!(
            store
                .list(None)
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .len(),
            4,
            "three markers and one position"
        );
    }
}
