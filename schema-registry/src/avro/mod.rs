//! Avro datums to Arrow: the writer schema made self-contained, each datum validated, then
//! decoded by arrow-avro, then Debezium's semantic types applied.

mod decode;
mod schema;
mod semantic;
mod validate;

pub use decode::{AvroBatchDecoder, DecodeError};
pub use schema::{Node, SchemaError, WriterSchema};
pub use semantic::target_type;
pub use validate::{DatumError, validate};

#[cfg(test)]
pub(crate) mod testing {
    /// Avro's zigzag varint encoding of a long (and of int, lengths, counts, indexes).
    pub(crate) fn zigzag(v: i64) -> Vec<u8> {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    pub(crate) fn string(s: &str) -> Vec<u8> {
        let mut out = zigzag(s.len() as i64);
        out.extend(s.as_bytes());
        out
    }
}

#[cfg(test)]
mod tests;
