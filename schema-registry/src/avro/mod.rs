//! Avro datums to Arrow: the writer schema made self-contained, each datum checked and decoded
//! in one pass (or, for types that pass does not cover, validated then decoded by arrow-avro),
//! then Debezium's semantic types applied.

mod decode;
mod direct;
mod error;
mod schema;
mod semantic;
mod validate;
mod zoned;

pub use decode::AvroBatchDecoder;
pub use error::DecodeError;
pub use schema::{Node, SchemaError, WriterSchema};
pub use semantic::{Semantics, target_type};
pub use validate::{DatumError, validate};
pub use zoned::{INFINITY_DAYS, INFINITY_MICROS, NEG_INFINITY_DAYS, NEG_INFINITY_MICROS};

/// Avro binary writing, for datums converted from other formats (and for tests).
pub(crate) mod encode {
    /// Avro's zigzag varint: longs, ints, lengths, counts, union and enum indexes.
    pub(crate) fn long(out: &mut Vec<u8>, v: i64) {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    /// Length-prefixed bytes (and strings).
    pub(crate) fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        long(out, b.len() as i64);
        out.extend_from_slice(b);
    }
}

#[cfg(test)]
pub(crate) mod testing {
    pub(crate) fn zigzag(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        super::encode::long(&mut out, v);
        out
    }

    pub(crate) fn string(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        super::encode::bytes(&mut out, s.as_bytes());
        out
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod direct_tests;
