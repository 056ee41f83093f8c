//! Iceberg's file I/O over lakesink's object store: the lake's data files, manifests and
//! metadata go through the same `object_store` client, settings and credentials as the raw
//! layer, so there is one S3 client and one set of store settings to get right.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

/// The store under the warehouse, and the URL prefix (`s3://bucket/`) its root stands for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LakeStorage {
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
    base: String,
}

impl LakeStorage {
    /// `base` is the URL of the store's root, ending in `/`.
    pub fn new(store: Arc<dyn ObjectStore>, base: String) -> Self {
        Self {
            store: Some(store),
            base,
        }
    }

    /// The store and the URL of its root for a warehouse URL.
    pub fn open(
        warehouse: &str,
        config: &lakesink_config::StoreConfig,
    ) -> std::result::Result<Self, String> {
        let (store, prefix) = crate::parquet::store::open(warehouse, config)?;
        let url = warehouse.trim_end_matches('/');
        let root = url
            .strip_suffix(prefix.as_str())
            .unwrap_or(url)
            .trim_end_matches('/');
        Ok(Self::new(store, format!("{root}/")))
    }

    pub fn store(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "lakesink's lake storage was deserialized without its store",
            )
        })
    }

    /// The object key of a file URL.
    pub fn key(&self, url: &str) -> Result<Path> {
        let rest = url.strip_prefix(&self.base).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{url} lies outside the lake's store {} (lake.warehouse): a table whose \
                     location is elsewhere cannot be written with these store settings",
                    self.base
                ),
            )
        })?;
        Path::parse(rest).map_err(|e| failed(url, e))
    }
}

fn failed(path: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    let kind = ErrorKind::Unexpected;
    Error::new(kind, format!("object store: {path}")).with_source(e)
}

#[async_trait]
#[typetag::serde]
impl Storage for LakeStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(failed(path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = self
            .store()?
            .head(&self.key(path)?)
            .await
            .map_err(|e| failed(path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let got = self
            .store()?
            .get(&self.key(path)?)
            .await
            .map_err(|e| failed(path, e))?;
        got.bytes().await.map_err(|e| failed(path, e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(Reader {
            store: self.store()?.clone(),
            key: self.key(path)?,
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.store()?
            .put(&self.key(path)?, bs.into())
            .await
            .map_err(|e| failed(path, e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(Writer {
            store: self.store()?.clone(),
            key: self.key(path)?,
            parts: Vec::new(),
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.store()?.delete(&self.key(path)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(failed(path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let store = self.store()?;
        let prefix = self.key(path.trim_end_matches('/'))?;
        let mut listed = store.list(Some(&prefix));
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(|e| failed(path, e))?;
            match store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(failed(path, e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}

struct Reader {
    store: Arc<dyn ObjectStore>,
    key: Path,
}

#[async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(|e| failed(self.key.as_ref(), e))
    }
}

/// Manifests and metadata files are small: held, then put in one request on close, so a
/// reader never sees one half written.
struct Writer {
    store: Arc<dyn ObjectStore>,
    key: Path,
    parts: Vec<Bytes>,
    closed: bool,
}

#[async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.parts.push(bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("{} closed twice", self.key),
            ));
        }
        self.closed = true;
        let payload: object_store::PutPayload =
            std::mem::take(&mut self.parts).into_iter().collect();
        self.store
            .put(&self.key, payload)
            .await
            .map_err(|e| failed(self.key.as_ref(), e))?;
        Ok(())
    }
}

/// Hands the catalogs [`LakeStorage`] whatever their file I/O properties say: the lake's
/// store settings are lakesink's, not the catalog's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LakeStorageFactory(pub LakeStorage);

#[typetag::serde]
impl StorageFactory for LakeStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        self.0.store()?;
        Ok(Arc::new(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_round_trip_under_the_warehouse_and_nowhere_else() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let s = LakeStorage::new(store, "s3://lake/".into());
        let url = "s3://lake/wh/ns/t/metadata/v1.json";
        assert!(!s.exists(url).await.expect("head"));
        let mut w = s.writer(url).await.expect("writer");
        w.write(Bytes::from_static(b"{\"a\":"))
            .await
            .expect("write");
        w.write(Bytes::from_static(b"1}")).await.expect("write");
        assert!(!s.exists(url).await.expect("head"), "visible before close");
        w.close().await.expect("close");
        assert!(w.close().await.is_err());
        assert_eq!(s.read(url).await.expect("read").as_ref(), b"{\"a\":1}");
        assert_eq!(s.metadata(url).await.expect("meta").size, 7);
        let r = s.reader(url).await.expect("reader");
        assert_eq!(r.read(1..4).await.expect("range").as_ref(), b"\"a\"");
        s.delete_prefix("s3://lake/wh/ns").await.expect("delete");
        assert!(!s.exists(url).await.expect("head"));
        let e = s.read("s3://other/x").await.expect_err("outside");
        assert!(e.to_string().contains("lake.warehouse"), "{e}");
    }
}
