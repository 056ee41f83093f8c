//! Walks an Avro binary datum against its writer schema without building anything, so that a
//! datum reaches the Arrow decoder only when it decodes completely: a bad record then never
//! leaves half a row behind in a batch of good ones.
//!
//! Checked: truncation, varints longer than their type, negative or oversized lengths, booleans
//! other than 0/1, union and enum indexes out of range, UTF-8 in strings and map keys, and
//! trailing bytes after the datum.

use super::schema::Node;
use super::zoned::{check_zoned_timestamp_text, zoned_timestamp_micros};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatumError {
    #[error("datum ends at byte {at}, in the middle of a value")]
    Truncated { at: usize },
    #[error("malformed varint at byte {at}")]
    BadVarint { at: usize },
    #[error("int at byte {at} does not fit 32 bits")]
    IntOutOfRange { at: usize },
    #[error("negative length {len} at byte {at}")]
    NegativeLength { at: usize, len: i64 },
    #[error("boolean byte {byte:#04x} at byte {at}")]
    BadBoolean { at: usize, byte: u8 },
    #[error("union branch {index} at byte {at}; the schema has {branches}")]
    BadUnionIndex {
        at: usize,
        index: i64,
        branches: usize,
    },
    #[error("enum symbol {index} at byte {at}; the schema has {symbols}")]
    BadEnumIndex {
        at: usize,
        index: i64,
        symbols: usize,
    },
    #[error("string at byte {at} is not UTF-8")]
    BadUtf8 { at: usize },
    #[error(
        "decimal at byte {at} takes {len} bytes, more than its {width}-byte Arrow decimal holds"
    )]
    DecimalOverflow { at: usize, len: usize, width: usize },
    #[error("uuid at byte {at} is {value:?}, not a UUID")]
    BadUuid { at: usize, value: String },
    #[error("ZonedTimestamp at byte {at} is {value:?}: {reason}")]
    BadTimestamp {
        at: usize,
        value: String,
        reason: &'static str,
    },
    #[error("array or map at byte {at} claims {count} items, more than the datum can hold")]
    TooManyItems { at: usize, count: i64 },
    #[error("the value at byte {at} would take its batch's column past 2 GiB")]
    BatchOverflow { at: usize },
    #[error("{extra} bytes follow the datum, which ends at byte {at}: wrong schema?")]
    TrailingBytes { at: usize, extra: usize },
}

/// Items of zero encoded size (null, empty records) an array may claim: they cost no bytes, so
/// the datum's length cannot bound them.
const MAX_EMPTY_ITEMS: i64 = 1 << 20;

/// The longest value [`Cursor::copy_short`] takes.
const SHORT: usize = 32;

/// For a short value of `len` bytes, the top bit of each of its bytes in the window's two
/// halves: a table, as computing the masks (128-bit shifts) cost a fifth of a short string.
const TOP_BITS: [[u128; 2]; SHORT + 1] = {
    const fn top_bits(n: usize) -> u128 {
        let all = u128::MAX / 0xff * 0x80;
        if n >= 16 {
            all
        } else {
            all & ((1 << (8 * n)) - 1)
        }
    }
    let mut table = [[0; 2]; SHORT + 1];
    let mut len = 0;
    while len <= SHORT {
        table[len] = [top_bits(len), top_bits(len.saturating_sub(16))];
        len += 1;
    }
    table
};

/// Checks that `datum` is exactly one value of `node`.
pub fn validate(node: &Node, datum: &[u8]) -> Result<(), DatumError> {
    let mut c = Cursor::new(datum);
    c.value(node)?;
    c.end()
}

pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

// Errors are built lazily: DatumError owns strings, so an eager `ok_or` value costs a drop call
// on every success, which showed in profiles.
#[allow(clippy::unnecessary_lazy_evaluations)]
impl<'a> Cursor<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Whether the datum ends here.
    pub(super) fn end(&self) -> Result<(), DatumError> {
        if self.pos < self.buf.len() {
            return Err(DatumError::TrailingBytes {
                at: self.pos,
                extra: self.buf.len() - self.pos,
            });
        }
        Ok(())
    }

    #[inline]
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], DatumError> {
        let rest = &self.buf[self.pos..];
        if n > rest.len() {
            return Err(DatumError::Truncated { at: self.buf.len() });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// Most longs on the wire (union branches, lengths, small numbers) are one byte.
    #[inline(always)]
    fn one_byte_long(&mut self) -> Option<i64> {
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Some(i64::from(b >> 1) ^ -i64::from(b & 1));
        }
        None
    }

    #[inline]
    pub(super) fn long(&mut self) -> Result<i64, DatumError> {
        match self.one_byte_long() {
            Some(v) => Ok(v),
            None => self.long_slow(),
        }
    }

    /// [`Cursor::long`] with the multi-byte path out of line, for lengths, counts and the
    /// validator's recursive `value`, which run faster small.
    #[inline]
    fn long_compact(&mut self) -> Result<i64, DatumError> {
        match self.one_byte_long() {
            Some(v) => Ok(v),
            None => self.long_outlined(),
        }
    }

    #[inline(never)]
    fn long_outlined(&mut self) -> Result<i64, DatumError> {
        self.long_slow()
    }

    /// Inlined: out of line, its call and the result passed through memory cost a fifth of
    /// each multi-byte value.
    #[inline(always)]
    fn long_slow(&mut self) -> Result<i64, DatumError> {
        // Ids, timestamps and LSNs take 2 to 8 bytes: read eight at once, find the last by its
        // clear top bit, and gather the 7-bit groups without a loop (whose exit, a different
        // length each value, the branch predictor kept missing). Near the datum's end the
        // word is zero-padded: a clear top bit found in the padding means a cut varint.
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let word = match rest.first_chunk::<8>() {
            Some(word) => u64::from_le_bytes(*word),
            None => padded_word(rest),
        };
        let ends = !word & 0x8080_8080_8080_8080;
        if ends == 0 {
            return self.long_bytewise();
        }
        let len = ends.trailing_zeros() / 8 + 1;
        if len as usize > rest.len() {
            return Err(DatumError::Truncated { at: self.buf.len() });
        }
        let kept = word & (u64::MAX >> (64 - 8 * len)) & 0x7f7f_7f7f_7f7f_7f7f;
        // Pairs of groups, then pairs of pairs: three steps, not eight.
        let x = (kept & 0x007f_007f_007f_007f) | ((kept & 0x7f00_7f00_7f00_7f00) >> 1);
        let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        let value = (x & 0x0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
        self.pos += len as usize;
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    /// Nine- and ten-byte varints.
    #[cold]
    #[inline(never)]
    fn long_bytewise(&mut self) -> Result<i64, DatumError> {
        let at = self.pos;
        let mut value: u64 = 0;
        for i in 0..10 {
            let &b = self
                .buf
                .get(self.pos)
                .ok_or_else(|| DatumError::Truncated { at: self.buf.len() })?;
            self.pos += 1;
            // The tenth byte may carry only the top bit.
            if i == 9 && b > 1 {
                return Err(DatumError::BadVarint { at });
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(DatumError::BadVarint { at })
    }

    pub(super) fn int(&mut self) -> Result<i32, DatumError> {
        let at = self.pos;
        i32::try_from(self.long()?).map_err(|_| DatumError::IntOutOfRange { at })
    }

    /// Lengths are nearly always one byte: the rest is out of line.
    #[inline]
    pub(super) fn length(&mut self) -> Result<usize, DatumError> {
        let at = self.pos;
        let len = self.long_compact()?;
        usize::try_from(len).map_err(|_| DatumError::NegativeLength { at, len })
    }

    fn value(&mut self, node: &Node) -> Result<(), DatumError> {
        match node {
            Node::Null => Ok(()),
            Node::Boolean => {
                let at = self.pos;
                match self.take(1)?[0] {
                    0 | 1 => Ok(()),
                    byte => Err(DatumError::BadBoolean { at, byte }),
                }
            }
            Node::Int => self.int().map(drop),
            Node::Long => self.long_compact().map(drop),
            Node::Float => self.take(4).map(drop),
            Node::Double => self.take(8).map(drop),
            Node::Bytes => {
                let len = self.length()?;
                self.take(len).map(drop)
            }
            Node::String => self.text().map(drop),
            Node::ZonedTimestamp | Node::ZonedText => {
                let at = self.pos;
                let text = self.string()?;
                let checked = match node {
                    Node::ZonedText => check_zoned_timestamp_text(text),
                    _ => zoned_timestamp_micros(text).map(drop),
                };
                checked.map_err(|reason| DatumError::BadTimestamp {
                    at,
                    value: text.to_owned(),
                    reason,
                })
            }
            Node::Fixed(size) => self.take(*size).map(drop),
            Node::Decimal { width, fixed } => {
                let len = match fixed {
                    Some(size) => *size,
                    None => self.length()?,
                };
                let at = self.pos;
                let raw = self.take(len)?;
                if fits(raw, *width) {
                    Ok(())
                } else {
                    Err(DatumError::DecimalOverflow {
                        at,
                        len,
                        width: *width,
                    })
                }
            }
            Node::Uuid => {
                let at = self.pos;
                let text = self.string()?;
                if is_uuid(text) {
                    Ok(())
                } else {
                    Err(DatumError::BadUuid {
                        at,
                        value: text.to_owned(),
                    })
                }
            }
            Node::Enum(symbols) => {
                let at = self.pos;
                let index = self.long_compact()?;
                if usize::try_from(index).is_ok_and(|i| i < *symbols) {
                    Ok(())
                } else {
                    Err(DatumError::BadEnumIndex {
                        at,
                        index,
                        symbols: *symbols,
                    })
                }
            }
            Node::Union(branches) => {
                let at = self.pos;
                let index = self.long_compact()?;
                let branch = usize::try_from(index)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| DatumError::BadUnionIndex {
                        at,
                        index,
                        branches: branches.len(),
                    })?;
                self.value(branch)
            }
            Node::Record { fields, .. } => fields.iter().try_for_each(|f| self.value(f)),
            Node::Array(items) => self.blocks(|c| c.value(items), encoded_size_can_be_zero(items)),
            Node::Map(values) => self.blocks(
                |c| {
                    c.string()?;
                    c.value(values)
                },
                false,
            ),
        }
    }

    /// A string's UTF-8 bytes: most are short and ASCII, which [`is_ascii`] settles faster
    /// than `from_utf8`.
    pub(super) fn text(&mut self) -> Result<&[u8], DatumError> {
        let len = self.length()?;
        let at = self.pos;
        let bytes = self.take(len)?;
        if is_ascii(bytes) || std::str::from_utf8(bytes).is_ok() {
            Ok(bytes)
        } else {
            Err(DatumError::BadUtf8 { at })
        }
    }

    /// A value of at most [`SHORT`] bytes whose length is one varint byte, appended to `out`
    /// by a fixed-size copy, with the ASCII check (when `text`) on the same two words: no
    /// `memcpy` call and no loop for the short strings most columns hold. False, with nothing
    /// read, when the value is longer, cut short, or not ASCII: the caller then
    /// takes [`Cursor::text`] or [`Cursor::take`].
    #[inline(always)]
    pub(super) fn copy_short(&mut self, out: &mut Vec<u8>, text: bool) -> bool {
        let Some((&first, rest)) = self.buf.get(self.pos..).and_then(<[u8]>::split_first) else {
            return false;
        };
        // A one-byte zigzag varint of a length 0..=63 is an even byte below 0x80.
        let len = usize::from(first >> 1);
        if first & 0x81 != 0 || len > SHORT {
            return false;
        }
        let Some(window) = rest.first_chunk::<SHORT>() else {
            return self.copy_last(out, len, text);
        };
        if text {
            let (Some(low), Some(high)) = (window.first_chunk::<16>(), window.last_chunk::<16>())
            else {
                return false;
            };
            let [low_mask, high_mask] = TOP_BITS[len];
            if (u128::from_le_bytes(*low) & low_mask) | (u128::from_le_bytes(*high) & high_mask)
                != 0
            {
                return false;
            }
        }
        out.extend_from_slice(window);
        out.truncate(out.len() - (SHORT - len));
        self.pos += 1 + len;
        true
    }

    /// [`Cursor::copy_short`] for a value in the datum's last [`SHORT`] bytes, which end
    /// most datums with a string or two (the table's name, the op). It reads the value again
    /// from the cursor: passing it in from `copy_short`, inlined at every string column, cost
    /// 1% of decoding.
    #[inline(never)]
    fn copy_last(&mut self, out: &mut Vec<u8>, len: usize, text: bool) -> bool {
        let Some(value) = self
            .buf
            .get(self.pos + 1..)
            .and_then(|rest| rest.get(..len))
        else {
            return false;
        };
        if text && !is_ascii(value) {
            return false;
        }
        out.extend_from_slice(value);
        self.pos += 1 + len;
        true
    }

    pub(super) fn string(&mut self) -> Result<&str, DatumError> {
        let len = self.length()?;
        let at = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| DatumError::BadUtf8 { at })
    }

    /// Array and map blocks: a count (negative: followed by the block's byte size), items, and
    /// a zero count at the end.
    pub(super) fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), DatumError>,
        zero_size_items: bool,
    ) -> Result<(), DatumError> {
        let mut empty_items = 0i64;
        loop {
            let at = self.pos;
            let mut count = self.long_compact()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                count = count
                    .checked_neg()
                    .ok_or_else(|| DatumError::TooManyItems { at, count })?;
                self.length()?;
            }
            let remaining = (self.buf.len() - self.pos) as i64;
            let too_many = if zero_size_items {
                empty_items = empty_items.saturating_add(count);
                empty_items > MAX_EMPTY_ITEMS.max(remaining)
            } else {
                count > remaining
            };
            if too_many {
                return Err(DatumError::TooManyItems { at, count });
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }
}

/// The last bytes of a datum, fewer than eight, zero-padded to a word.
#[cold]
fn padded_word(rest: &[u8]) -> u64 {
    let mut word = [0; 8];
    let n = rest.len().min(8);
    word[..n].copy_from_slice(&rest[..n]);
    u64::from_le_bytes(word)
}

/// Whether every byte is ASCII, for the short strings of table rows: words ORed together,
/// the last one overlapping, so no byte-at-a-time tail (a third of a string's cost in
/// profiles of `fold`, and `<[u8]>::is_ascii` loops bytewise under eight).
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let word = |at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let half = |at: usize| {
        let mut w = [0; 4];
        w.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(w)
    };
    let n = bytes.len();
    match n {
        0..4 => bytes.iter().fold(0u8, |acc, &b| acc | b) < 0x80,
        4..8 => (half(0) | half(n - 4)) & 0x8080_8080 == 0,
        _ => {
            let mut acc = word(n - 8);
            let mut at = 0;
            while at + 8 < n {
                acc |= word(at);
                at += 8;
            }
            acc & HIGH == 0
        }
    }
}

/// Whether a big-endian two's-complement integer fits `width` bytes: any bytes beyond are
/// sign extension (the rule arrow-avro applies, which errors mid-row otherwise).
pub(super) fn fits(raw: &[u8], width: usize) -> bool {
    if raw.len() <= width {
        return true;
    }
    let sign = if raw[0] & 0x80 == 0 { 0x00 } else { 0xff };
    let extra = raw.len() - width;
    raw[..extra].iter().all(|&b| b == sign) && (raw[extra] ^ sign) & 0x80 == 0
}

/// Parsed as arrow-avro parses it, so what passes here decodes there.
pub(super) fn is_uuid(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok()
}

/// Whether a value of `node` can take no bytes at all.
pub(super) fn encoded_size_can_be_zero(node: &Node) -> bool {
    match node {
        Node::Null => true,
        Node::Fixed(0) => true,
        Node::Record { fields, .. } => fields.iter().all(encoded_size_can_be_zero),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::avro::testing::zigzag;

    fn record() -> Node {
        Node::Record {
            name: "R".into(),
            fields: vec![
                Node::Long,
                Node::Union(vec![Node::Null, Node::String]),
                Node::Boolean,
                Node::Array(Box::new(Node::Int)),
                Node::Map(Box::new(Node::Bytes)),
                Node::Enum(2),
            ],
        }
    }

    fn good() -> Vec<u8> {
        let mut d = zigzag(-12345);
        d.extend(zigzag(1));
        d.extend(zigzag(3));
        d.extend(b"abc");
        d.push(1);
        d.extend(zigzag(-2)); // a block of 2 items with its byte size
        d.extend(zigzag(2));
        d.extend(zigzag(7));
        d.extend(zigzag(8));
        d.extend(zigzag(0));
        d.extend(zigzag(1));
        d.extend(zigzag(1));
        d.extend(b"k");
        d.extend(zigzag(2));
        d.extend([0xff, 0x00]);
        d.extend(zigzag(0));
        d.extend(zigzag(1));
        d
    }

    /// The eight-byte read against the byte loop: every varint length, with and without
    /// bytes after it (the fast path needs eight), and overlong encodings.
    #[test]
    fn longs_read_alike_on_the_fast_path_and_the_byte_loop() {
        let mut values = vec![0, -1, 1, i64::MIN, i64::MAX];
        for bits in 0..64 {
            let v = 1i64 << bits;
            values.extend([
                v,
                v.wrapping_sub(1),
                v.wrapping_neg(),
                1i64.wrapping_sub(v),
                v.wrapping_mul(3),
            ]);
        }
        values.push(1_700_000_000_000_000);
        // And arbitrary bit patterns at every width, for the gather of the 7-bit groups.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..4_096 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            values.push((state >> (n % 64)) as i64);
        }
        for v in values {
            let wire = zigzag(v);
            for tail in [&[][..], &[0x55], &[0xff; 9]] {
                let datum = [&wire[..], tail].concat();
                let mut fast = Cursor::new(&datum);
                let mut slow = Cursor::new(&datum);
                assert_eq!(fast.long().unwrap(), v, "{v} before {tail:?}");
                assert_eq!(slow.long_bytewise().unwrap(), v);
                assert_eq!(fast.pos, wire.len());
                assert_eq!(slow.pos, wire.len());
            }
            // Cut by the datum's end, at every byte: the zero-padded word must not end it.
            for cut in 1..wire.len() {
                let mut c = Cursor::new(&wire[..cut]);
                assert!(
                    matches!(c.long(), Err(DatumError::Truncated { at }) if at == cut),
                    "{v} cut to {cut} bytes"
                );
            }
        }
        // Overlong: 5 as three bytes, 0 as eight; a varint of ten bytes and one of eleven.
        for (wire, value) in [
            (vec![0x8a, 0x80, 0x00], Some(5)),
            (
                vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
                Some(0),
            ),
            ([vec![0x80; 9], vec![0x01]].concat(), Some(1 << 62)),
            ([vec![0x80; 10], vec![0x00]].concat(), None),
        ] {
            let datum = [&wire[..], &[0; 8]].concat();
            let mut c = Cursor::new(&datum);
            assert_eq!(c.long().ok(), value, "{wire:02x?}");
            if value.is_some() {
                assert_eq!(c.pos, wire.len());
            }
        }
    }

    /// A short value cut by the datum's end is left to the general path, which refuses it.
    #[test]
    fn a_cut_short_value_is_not_copied() {
        for len in 1..=SHORT {
            let datum = [zigzag(len as i64), vec![b'a'; len]].concat();
            for cut in 1..len {
                for text in [true, false] {
                    let cut = &datum[..datum.len() - cut];
                    let mut c = Cursor::new(cut);
                    let mut out = Vec::new();
                    assert!(
                        !c.copy_short(&mut out, text),
                        "len {len}, {} bytes",
                        cut.len()
                    );
                    assert_eq!((c.pos, out.len()), (0, 0));
                    assert!(matches!(c.text(), Err(DatumError::Truncated { .. })));
                }
            }
        }
    }

    /// The fixed-size copy against `text` and `take`: every length around the window's,
    /// ASCII or with one high byte anywhere, with from none to more than a window of bytes
    /// after it. It takes a value exactly when the value is short and ASCII (for text), near
    /// the datum's end too, and then takes what the general path takes.
    #[test]
    fn short_values_copy_as_the_general_path_reads_them() {
        for len in 0..=SHORT + 8 {
            for high in (0..len).map(Some).chain([None]) {
                let mut value: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                if let Some(at) = high {
                    value[at] = 0xc3;
                }
                for tail in 0..=SHORT + 2 {
                    let datum = [zigzag(len as i64), value.clone(), vec![0xee; tail]].concat();
                    for text in [true, false] {
                        let mut c = Cursor::new(&datum);
                        let mut out = b"xy".to_vec();
                        let took = c.copy_short(&mut out, text);
                        let fits = len <= SHORT;
                        let case = format!("len {len}, high byte at {high:?}, tail {tail}");
                        assert_eq!(took, fits && !(text && high.is_some()), "{case}");
                        if took {
                            assert_eq!(out, [&b"xy"[..], &value].concat(), "{case}");
                            assert_eq!(c.pos, datum.len() - tail, "{case}");
                            let mut general = Cursor::new(&datum);
                            let read = if text {
                                general.text().map(<[u8]>::to_vec)
                            } else {
                                general
                                    .length()
                                    .and_then(|n| general.take(n).map(<[u8]>::to_vec))
                            };
                            assert_eq!(read.as_deref(), Ok(&value[..]), "{case}");
                        } else {
                            assert_eq!((out.as_slice(), c.pos), (&b"xy"[..], 0), "{case}");
                        }
                    }
                }
            }
        }
        // A negative length, and a length of two varint bytes: left to the general path.
        for wire in [zigzag(-3), zigzag(64)] {
            let datum = [wire, vec![b'a'; 80]].concat();
            let mut out = Vec::new();
            assert!(!Cursor::new(&datum).copy_short(&mut out, true));
            assert!(out.is_empty());
        }
    }

    #[test]
    fn is_ascii_finds_a_high_byte_at_every_length_and_place() {
        for n in 0..40 {
            let plain = vec![b'a'; n];
            assert!(is_ascii(&plain), "{n}");
            for at in 0..n {
                let mut high = plain.clone();
                high[at] = 0x80;
                assert!(!is_ascii(&high), "{n} bytes, high at {at}");
            }
        }
    }

    #[test]
    fn a_good_datum_passes() {
        validate(&record(), &good()).unwrap();
        validate(&Node::Long, &zigzag(i64::MIN)).unwrap();
        validate(&Node::Long, &zigzag(i64::MAX)).unwrap();
    }

    #[test]
    fn every_truncation_fails_without_panicking() {
        let d = good();
        for len in 0..d.len() {
            assert!(
                validate(&record(), &d[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
    }

    #[test]
    fn each_defect_is_named() {
        let r = record();
        let mut extra = good();
        extra.push(0);
        assert_eq!(
            validate(&r, &extra),
            Err(DatumError::TrailingBytes {
                at: extra.len() - 1,
                extra: 1
            })
        );
        let mut union = zigzag(1);
        union.extend(zigzag(2));
        assert!(matches!(
            validate(&r, &union),
            Err(DatumError::BadUnionIndex { index: 2, .. })
        ));
        let mut utf8 = zigzag(1);
        utf8.extend(zigzag(1));
        utf8.extend(zigzag(2));
        utf8.extend([0xc3, 0x28]);
        assert!(matches!(
            validate(&r, &utf8),
            Err(DatumError::BadUtf8 { .. })
        ));
        assert!(matches!(
            validate(&Node::Boolean, &[2]),
            Err(DatumError::BadBoolean { .. })
        ));
        assert!(matches!(
            validate(&Node::Enum(2), &zigzag(2)),
            Err(DatumError::BadEnumIndex { .. })
        ));
        assert!(matches!(
            validate(&Node::Int, &zigzag(1 << 40)),
            Err(DatumError::IntOutOfRange { .. })
        ));
        assert!(matches!(
            validate(&Node::Bytes, &zigzag(-1)),
            Err(DatumError::NegativeLength { .. })
        ));
        assert!(matches!(
            validate(&Node::Long, &[0xff; 11]),
            Err(DatumError::BadVarint { .. })
        ));
        // A length of 2^40 in a short datum: truncated, with no allocation.
        assert!(matches!(
            validate(&Node::String, &zigzag(1 << 40)),
            Err(DatumError::Truncated { .. })
        ));
    }

    #[test]
    fn decimals_must_fit_their_arrow_width() {
        let dec = Node::Decimal {
            width: 16,
            fixed: None,
        };
        let mut d = zigzag(17);
        d.extend([0x00; 17]);
        validate(&dec, &d).unwrap();
        let mut d = zigzag(17);
        d.extend([0x01; 17]);
        assert!(matches!(
            validate(&dec, &d),
            Err(DatumError::DecimalOverflow { len: 17, .. })
        ));
        // 0xff then a first kept byte without the sign bit: overflow, not sign extension.
        let mut d = zigzag(17);
        d.push(0xff);
        d.extend([0x01; 16]);
        assert!(matches!(
            validate(&dec, &d),
            Err(DatumError::DecimalOverflow { .. })
        ));
        let fixed = Node::Decimal {
            width: 16,
            fixed: Some(20),
        };
        assert!(validate(&fixed, &[0x7f; 20]).is_err());
        validate(
            &Node::Uuid,
            &crate::avro::testing::string("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        )
        .unwrap();
        for bad in ["not-a-uuid", "a0eebc999c0b-4ef8-bb6d-6bb9-bd380a11"] {
            assert!(
                validate(&Node::Uuid, &crate::avro::testing::string(bad)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn absurd_item_counts_are_refused_up_front() {
        let ints = Node::Array(Box::new(Node::Int));
        assert!(matches!(
            validate(&ints, &zigzag(1 << 40)),
            Err(DatumError::TooManyItems { .. })
        ));
        let nulls = Node::Array(Box::new(Node::Null));
        assert!(matches!(
            validate(&nulls, &zigzag(1 << 28)),
            Err(DatumError::TooManyItems { .. })
        ));
        let mut few = zigzag(3);
        few.extend(zigzag(0));
        validate(&nulls, &few).unwrap();
        assert!(matches!(
            validate(&ints, &zigzag(i64::MIN)),
            Err(DatumError::TooManyItems { .. })
        ));
    }
}
