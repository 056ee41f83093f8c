//! Records copied out of librdkafka, a few hundred at a time, so that they can be decoded on
//! another thread than the one consuming: a librdkafka message is borrowed from the consumer
//! and cannot leave it. One copy into a shared buffer costs less than owning each message
//! (three allocations) and far less than decoding beside consuming.

use std::sync::Arc;

use rdkafka::Message;
use rdkafka::Timestamp;
use rdkafka::message::{Header, Headers, OwnedHeaders};

/// A chunk is handed over at this many records, or bytes of keys and values.
pub(super) const CHUNK_RECORDS: usize = 1024;
pub(super) const CHUNK_BYTES: usize = 256 * 1024;

/// Records in consumption order: their keys and values in one buffer.
#[derive(Default)]
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    records: Vec<Meta>,
    /// Topic names, by index: the records of a chunk come from a few topics, and an index is
    /// cheaper to hand across threads than a reference count per record.
    topics: Vec<Arc<str>>,
    headers: Vec<OwnedHeaders>,
}

/// Positions are plain `usize`s, not narrower: a value read at the wrong place would be
/// another record's bytes, or none (a tombstone).
struct Meta {
    topic: usize,
    partition: i32,
    offset: i64,
    timestamp: Timestamp,
    key: Option<(usize, usize)>,
    value: Option<(usize, usize)>,
    headers: Option<usize>,
}

impl Chunk {
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.records.len() >= CHUNK_RECORDS || self.bytes.len() >= CHUNK_BYTES
    }

    /// Empties the chunk, keeping its buffers for the next records (but not one that a very
    /// large record grew: a few circulate, and each would hold it).
    pub(super) fn clear(&mut self) {
        if self.bytes.capacity() > 2 * CHUNK_BYTES {
            self.bytes = Vec::new();
        }
        self.bytes.clear();
        self.records.clear();
        self.topics.clear();
        self.headers.clear();
    }

    /// Copies `msg`; `topic` is its topic's name, as the caller holds it.
    pub(super) fn push(&mut self, msg: &impl Message, topic: &Arc<str>) {
        let topic = match self.topics.iter().rposition(|t| Arc::ptr_eq(t, topic)) {
            Some(i) => i,
            None => {
                self.topics.push(topic.clone());
                self.topics.len() - 1
            }
        };
        let mut copy = |b: Option<&[u8]>| {
            b.map(|b| {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(b);
                (start, b.len())
            })
        };
        let key = copy(msg.key());
        let value = copy(msg.payload());
        let headers = msg.headers().map(|hs| {
            let owned = hs
                .iter()
                .fold(OwnedHeaders::new_with_capacity(hs.count()), |owned, h| {
                    owned.insert(Header {
                        key: h.key,
                        value: h.value,
                    })
                });
            self.headers.push(owned);
            self.headers.len() - 1
        });
        self.records.push(Meta {
            topic,
            partition: msg.partition(),
            offset: msg.offset(),
            timestamp: msg.timestamp(),
            key,
            value,
            headers,
        });
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Record<'_>> {
        self.records.iter().map(|meta| Record { chunk: self, meta })
    }
}

/// One record of a [`Chunk`], read as rdkafka's messages are.
#[derive(Clone, Copy)]
pub(crate) struct Record<'c> {
    chunk: &'c Chunk,
    meta: &'c Meta,
}

impl<'c> Record<'c> {
    fn slice(&self, at: Option<(usize, usize)>) -> Option<&'c [u8]> {
        at.and_then(|(start, len)| self.chunk.bytes.get(start..start.checked_add(len)?))
    }

    /// The topic's name, shared (not copied) with the chunk.
    pub(super) fn topic_name(&self) -> &'c Arc<str> {
        // Set by push to a position in topics, which only grows until clear.
        &self.chunk.topics[self.meta.topic]
    }
}

impl crate::kafka::Incoming for Record<'_> {
    type Headers = OwnedHeaders;

    fn key(&self) -> Option<&[u8]> {
        self.slice(self.meta.key)
    }

    fn payload(&self) -> Option<&[u8]> {
        self.slice(self.meta.value)
    }

    fn topic(&self) -> &str {
        self.topic_name()
    }

    fn partition(&self) -> i32 {
        self.meta.partition
    }

    fn offset(&self) -> i64 {
        self.meta.offset
    }

    fn timestamp(&self) -> Timestamp {
        self.meta.timestamp
    }

    fn headers(&self) -> Option<&OwnedHeaders> {
        let h = self.chunk.headers.get(self.meta.headers?)?;
        // An empty block is no headers, as librdkafka answers for a consumed message.
        (h.count() > 0).then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::Incoming;
    use rdkafka::message::OwnedMessage;

    fn message(
        topic: &str,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
    ) -> OwnedMessage {
        OwnedMessage::new(
            value.map(<[u8]>::to_vec),
            key.map(<[u8]>::to_vec),
            topic.to_owned(),
            Timestamp::CreateTime(1_700_000_000_000 + offset),
            3,
            offset,
            headers,
        )
    }

    #[test]
    fn records_read_back_as_consumed_empty_and_absent_apart() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "apicurio.value.globalId",
                value: Some(&[0u8, 0, 0, 0, 0, 0, 0, 7][..]),
            })
            .insert(Header::<&[u8]> {
                key: "null-valued",
                value: None,
            });
        let msgs = [
            message("a", 10, Some(b"k1"), Some(b"value one"), None),
            // A tombstone, an empty key, an empty value.
            message("a", 11, Some(b"k2"), None, None),
            message("b", 12, Some(b""), Some(b""), None),
            message("b", 13, None, Some(b"v"), Some(headers)),
        ];
        let mut chunk = Chunk::default();
        for (m, t) in msgs.iter().zip([&a, &a, &b, &b]) {
            chunk.push(m, t);
        }
        // One entry per topic, shared with the caller's name.
        assert_eq!(chunk.topics.len(), 2);
        let read: Vec<_> = chunk.iter().collect();
        assert_eq!(read.len(), 4);
        for (r, m) in read.iter().zip(&msgs) {
            assert_eq!(Incoming::key(r), Message::key(m));
            assert_eq!(Incoming::payload(r), Message::payload(m));
            assert_eq!(Incoming::topic(r), Message::topic(m));
            assert_eq!(Incoming::partition(r), 3);
            assert_eq!(Incoming::offset(r), Message::offset(m));
            assert_eq!(Incoming::timestamp(r), Message::timestamp(m));
        }
        assert!(Arc::ptr_eq(read[0].topic_name(), &a));
        assert!(Arc::ptr_eq(read[3].topic_name(), &b));
        assert_eq!(Incoming::key(&read[2]), Some(&b""[..]));
        assert_eq!(Incoming::payload(&read[1]), None);
        assert!(read[..3].iter().all(|r| Incoming::headers(r).is_none()));
        let hs = Incoming::headers(&read[3]).expect("headers");
        let pairs: Vec<_> = hs.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            pairs,
            [
                (
                    "apicurio.value.globalId",
                    Some(&[0u8, 0, 0, 0, 0, 0, 0, 7][..])
                ),
                ("null-valued", None)
            ]
        );
    }

    #[test]
    fn a_chunk_is_full_at_its_records_or_its_bytes_and_empties_for_reuse() {
        let t: Arc<str> = Arc::from("t");
        let mut chunk = Chunk::default();
        let small = message("t", 0, None, Some(b"x"), None);
        for _ in 0..CHUNK_RECORDS - 1 {
            chunk.push(&small, &t);
        }
        assert!(!chunk.is_full());
        chunk.push(&small, &t);
        assert!(chunk.is_full());
        chunk.clear();
        assert!(chunk.is_empty() && !chunk.is_full());
        let big = vec![7u8; CHUNK_BYTES];
        chunk.push(&message("t", 1, None, Some(&big), None), &t);
        assert!(chunk.is_full());
        let read: Vec<_> = chunk.iter().collect();
        assert_eq!(
            Incoming::payload(&read[0]).map(<[u8]>::len),
            Some(CHUNK_BYTES)
        );
    }
}
