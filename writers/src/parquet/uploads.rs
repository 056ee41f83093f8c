//! Sealed segments being made visible, a few files at a time, and the memory budget over the
//! open segments and the uploads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::ObjectStore;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, info};

use super::error::RawError;
use super::file::Sealed;
use super::marker::Marker;
use super::writer::ParquetWriter;
use crate::failpoint;
use crate::sink::TopicPartition;

/// A segment whose files are all visible: offsets up to `next_offset` are durable.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub topic: Arc<str>,
    pub partition: i32,
    pub start: i64,
    pub next_offset: i64,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
    /// Each file's size.
    pub file_sizes: Vec<u64>,
    /// When the segment was closed: its files were complete in memory from then on.
    pub sealed_at: std::time::Instant,
}

/// The running uploads, one task per segment; the permits bound the files in flight.
pub(super) struct Uploads {
    tasks: JoinSet<Result<Receipt, RawError>>,
    bytes: Arc<AtomicUsize>,
    permits: Arc<Semaphore>,
}

impl Uploads {
    pub(super) fn new(concurrency: usize) -> Self {
        Self {
            tasks: JoinSet::new(),
            bytes: Arc::new(AtomicUsize::new(0)),
            permits: Arc::new(Semaphore::new(concurrency)),
        }
    }

    /// Bytes of the files being uploaded.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Starts making the files of the segment `marker` records visible.
    pub(super) fn start(
        &mut self,
        store: Arc<dyn ObjectStore>,
        key: &TopicPartition,
        marker: &Marker,
        sealed: Vec<Sealed>,
    ) {
        let bytes: usize = sealed.iter().map(Sealed::len).sum();
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let permits = self.permits.clone();
        let receipt = Receipt {
            topic: key.topic.clone(),
            partition: key.partition,
            start: marker.start,
            next_offset: marker.last + 1,
            files: sealed.len(),
            rows: marker.rows,
            bytes: bytes as u64,
            file_sizes: sealed.iter().map(|f| f.len() as u64).collect(),
            sealed_at: std::time::Instant::now(),
        };
        self.tasks.spawn(async move {
            failpoint::hit(failpoint::RAW_BEFORE_UPLOAD);
            let uploads = sealed.into_iter().map(|file| {
                let store = store.clone();
                let permits = permits.clone();
                let receipt = &receipt;
                async move {
                    let _permit = permits.acquire().await;
                    let fkey = file.key().to_string();
                    file.complete(&store)
                        .await
                        .map_err(|source| RawError::File {
                            topic: receipt.topic.to_string(),
                            partition: receipt.partition,
                            key: fkey,
                            source,
                        })
                }
            });
            futures::future::try_join_all(uploads).await?;
            failpoint::hit(failpoint::RAW_AFTER_UPLOAD);
            Ok(receipt)
        });
    }

    /// Stops every upload.
    pub(super) fn abort_all(&mut self) {
        // Dropping the set aborts the uploads (and frees their permits).
        self.tasks = JoinSet::new();
        self.bytes.store(0, Ordering::Relaxed);
    }
}

impl ParquetWriter {
    /// Whether uploads are running; [`Self::next_receipt`] waits for the next one.
    pub fn uploading(&self) -> bool {
        !self.uploads.tasks.is_empty()
    }

    /// Bytes held: open files plus files being uploaded.
    pub fn memory(&self) -> usize {
        self.open_memory + self.uploads.bytes()
    }

    /// Past the budget with nothing left to close: the caller waits for uploads.
    pub fn over_budget(&self) -> bool {
        self.memory() > self.s.budget
    }

    /// The next finished upload; None when none is running.
    pub async fn next_receipt(&mut self) -> Option<Result<Receipt, RawError>> {
        let joined = self.uploads.tasks.join_next().await?;
        Some(match joined {
            Err(e) => Err(RawError::Task(e)),
            Ok(Err(e)) => Err(e),
            Ok(Ok(r)) => {
                self.uploads
                    .bytes
                    .fetch_sub(r.bytes as usize, Ordering::Relaxed);
                if let Some(st) = self
                    .parts
                    .get_mut(&TopicPartition::new(r.topic.clone(), r.partition))
                {
                    st.uploading.remove(&r.start);
                }
                info!(
                    topic = %r.topic,
                    partition = r.partition,
                    start = r.start,
                    next_offset = r.next_offset,
                    files = r.files,
                    rows = r.rows,
                    bytes = r.bytes,
                    "segment uploaded"
                );
                Ok(r)
            }
        })
    }

    /// Closes the largest open segments while past the budget.
    pub(super) async fn enforce_budget(&mut self, now: i64) -> Result<(), RawError> {
        while self.memory() > self.s.budget {
            let largest = self
                .parts
                .iter()
                .filter_map(|(k, st)| Some((k, st.segment.as_ref()?.mem)))
                .filter(|(_, m)| *m > 0)
                .max_by_key(|(_, m)| *m)
                .map(|(k, _)| k.clone());
            let Some(key) = largest else { break };
            debug!(topic = %key.topic, partition = key.partition, "memory budget: closing early");
            self.cut(&key, now).await?;
        }
        Ok(())
    }
}
