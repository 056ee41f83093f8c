//! One open Parquet file: encoded as rows arrive, and once it outgrows a part, streamed to the
//! store as a multipart upload that is completed only when the segment is committed, so a
//! file is never visible half written.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::parallel::{ParallelWriter, encode_threads};
use crate::failpoint;

/// Part uploads in flight per file.
const PART_CONCURRENCY: usize = 2;

pub(crate) struct FileWriter {
    pub(crate) key: Path,
    pub(crate) schema: SchemaRef,
    pub(crate) encoded: Arc<str>,
    pub(crate) rows: u64,
    writer: ParallelWriter,
    multipart: Option<WriteMultipart>,
    part_size: usize,
    /// Bytes already handed to the multipart upload.
    streamed: usize,
}

/// A file ready to be made visible.
pub(crate) enum Sealed {
    /// Small enough for one PUT.
    Whole { key: Path, bytes: Bytes },
    /// The tail of a multipart upload whose earlier parts are already stored.
    Multipart {
        key: Path,
        upload: WriteMultipart,
        tail: Vec<u8>,
    },
}

impl FileWriter {
    pub(crate) fn new(
        key: Path,
        encoded: Arc<str>,
        schema: SchemaRef,
        props: WriterProperties,
        part_size: usize,
    ) -> Result<Self, parquet::errors::ParquetError> {
        Ok(Self {
            writer: ParallelWriter::new(
                ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))?,
                schema.clone(),
                encode_threads(),
            )?,
            key,
            schema,
            encoded,
            rows: 0,
            multipart: None,
            part_size,
            streamed: 0,
        })
    }

    pub(crate) async fn write(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        rows: &RecordBatch,
    ) -> Result<(), FileError> {
        self.writer.write(rows)?;
        self.rows += rows.num_rows() as u64;
        if self.writer.inner().len() >= self.part_size {
            if self.multipart.is_none() {
                let upload = store.put_multipart(&self.key).await?;
                self.multipart = Some(WriteMultipart::new_with_chunk_size(upload, self.part_size));
            }
            // Only bytes the Parquet writer already wrote are taken; it tracks offsets itself.
            let bytes = std::mem::take(self.writer.inner_mut());
            self.streamed += bytes.len();
            if let Some(upload) = &mut self.multipart {
                upload.write(&bytes);
                upload.wait_for_capacity(PART_CONCURRENCY).await?;
                failpoint::hit(failpoint::RAW_MID_MULTIPART);
            }
        }
        Ok(())
    }

    /// Bytes held in memory: the open row group and encoded bytes not yet streamed.
    pub(crate) fn memory(&self) -> usize {
        self.writer.memory_size()
            + self.writer.inner().len()
            + if self.multipart.is_some() {
                self.part_size
            } else {
                0
            }
    }

    /// Encoded size so far.
    pub(crate) fn bytes(&self) -> usize {
        self.writer.bytes_written() + self.writer.in_progress_size()
    }

    /// Writes the footer.
    pub(crate) fn seal(self) -> Result<Sealed, FileError> {
        let tail = self.writer.into_inner()?;
        Ok(match self.multipart {
            None => Sealed::Whole {
                key: self.key,
                bytes: Bytes::from(tail),
            },
            Some(upload) => Sealed::Multipart {
                key: self.key,
                upload,
                tail,
            },
        })
    }

    /// Drops the file; a started multipart upload is aborted in the background.
    pub(crate) fn abandon(self) {
        if let Some(upload) = self.multipart {
            tokio::spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

impl Sealed {
    pub(crate) fn key(&self) -> &Path {
        match self {
            Self::Whole { key, .. } | Self::Multipart { key, .. } => key,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Whole { bytes, .. } => bytes.len(),
            Self::Multipart { tail, .. } => tail.len(),
        }
    }

    /// Makes the file visible under its key.
    pub(crate) async fn complete(self, store: &Arc<dyn ObjectStore>) -> Result<(), FileError> {
        match self {
            Self::Whole { key, bytes } => {
                store.put(&key, bytes.into()).await?;
            }
            Self::Multipart {
                mut upload, tail, ..
            } => {
                upload.write(&tail);
                upload.finish().await?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("object store: {}", super::error::describe_store(.0))]
    Store(#[from] object_store::Error),
}
