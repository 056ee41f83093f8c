//! Arrow columns into PostgreSQL's binary `COPY` format, and Debezium's placeholder for
//! unchanged TOASTed values.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, BinaryArray, GenericListArray, StringArray, StructArray};
use arrow_schema::{DataType, TimeUnit};

use lakesink_schema_registry::avro::{
    INFINITY_DAYS, INFINITY_MICROS, NEG_INFINITY_DAYS, NEG_INFINITY_MICROS,
};

use super::types::{ColumnType, Conv, Wire};

/// Debezium's `unavailable.value.placeholder` default.
pub(crate) const PLACEHOLDER: &str = "__debezium_unavailable_value";

/// 2000-01-01, PostgreSQL's epoch, from the Unix epoch.
const PG_EPOCH_DAYS: i32 = 10_957;
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
const DAY_MICROS: i64 = 86_400_000_000;

/// PostgreSQL's binary date, from days since the Unix epoch. `infinity` and `-infinity` arrive
/// as the decoder holds them (DuckDB's `i32::MAX` and `-i32::MAX`) and leave as PostgreSQL's
/// (`i32::MAX`, `i32::MIN`); a finite date PostgreSQL cannot hold is refused, never wrapped.
pub(crate) fn pg_date(days: i32) -> Result<i32, String> {
    match days {
        INFINITY_DAYS => Ok(i32::MAX),
        NEG_INFINITY_DAYS => Ok(i32::MIN),
        // PostgreSQL's range: 4714-11-24 BC (Julian day 0) to 5874897-12-31.
        -2_440_588..=2_145_042_905 => Ok(days - PG_EPOCH_DAYS),
        _ => Err(format!(
            "{days} days from 1970-01-01 is outside PostgreSQL's dates (4714-11-24 BC to 5874897-12-31)"
        )),
    }
}

/// PostgreSQL's binary timestamp, from microseconds since the Unix epoch, with `infinity` as
/// for [`pg_date`] (`i64::MAX`, `-i64::MAX` in, in any unit; `i64::MAX`, `i64::MIN` out).
pub(crate) fn pg_timestamp(us: i64) -> Result<i64, String> {
    // 4714-11-24 00:00 BC, PostgreSQL's first timestamp; its last (294276 AD) is past what
    // Unix microseconds in an i64 reach.
    const MIN: i64 = -210_866_803_200_000_000;
    match us {
        INFINITY_MICROS => Ok(i64::MAX),
        NEG_INFINITY_MICROS => Ok(i64::MIN),
        MIN.. => Ok(us - PG_EPOCH_MICROS),
        _ => Err(format!(
            "{us} µs from 1970-01-01 is before PostgreSQL's first timestamp (4714-11-24 BC)"
        )),
    }
}

/// Nanoseconds as PostgreSQL's microseconds, rounded half to even as PostgreSQL rounds the
/// digits of a timestamp's text (SQL Server's `datetime2(7)`, Db2's `TIMESTAMP(9)`), so a
/// value reads the same whichever way it arrived. The raw layer keeps the nanoseconds.
pub(crate) fn nanos_to_micros(ns: i64) -> i64 {
    let (q, r) = (ns.div_euclid(1_000), ns.rem_euclid(1_000));
    // `q` is at most i64::MAX / 1000, so the step up cannot overflow.
    if r > 500 || (r == 500 && q % 2 != 0) {
        q + 1
    } else {
        q
    }
}

/// Whether a timestamp's text has a nonzero digit past the microsecond, which PostgreSQL
/// rounds away (`2020-01-01T10:00:00.1234567+05:30`).
pub(crate) fn loses_digits(text: &str) -> bool {
    text.split_once('.').is_some_and(|(_, frac)| {
        frac.bytes()
            .take_while(u8::is_ascii_digit)
            .skip(6)
            .any(|d| d != b'0')
    })
}

/// A binary COPY stream being written.
pub(crate) struct CopyBuf {
    pub buf: Vec<u8>,
}

impl CopyBuf {
    pub(crate) fn new() -> Self {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        Self { buf }
    }

    pub(crate) fn row(&mut self, fields: usize) {
        self.buf.extend_from_slice(&(fields as i16).to_be_bytes());
    }

    pub(crate) fn null(&mut self) {
        self.buf.extend_from_slice(&(-1i32).to_be_bytes());
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

/// One Arrow column, ready to write row by row as its wire type.
pub(crate) enum Enc<'a> {
    Bool(&'a arrow_array::BooleanArray),
    /// Integers of any width, widened to the wire's.
    Int(&'a dyn Array, IntVals<'a>, Wire),
    F32(&'a arrow_array::Float32Array),
    /// A `real` column the source widened to `double precision`: each value exactly.
    F32Wide(&'a arrow_array::Float32Array),
    F64(&'a arrow_array::Float64Array),
    Utf8(&'a StringArray),
    Bin(&'a BinaryArray),
    Decimal(&'a dyn Array),
    VariableScale(&'a StructArray),
    Bits(&'a BinaryArray, Option<usize>),
    Date(&'a arrow_array::Date32Array),
    /// Times, timestamps and durations: the raw count and its unit.
    Micros(&'a dyn Array, IntVals<'a>, TimeUnit, Wire),
    Wkb(&'a StructArray),
    Point(&'a StructArray),
    List(&'a GenericListArray<i32>, Box<Enc<'a>>, u32),
}

pub(crate) enum IntVals<'a> {
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
}

/// The raw integers of an integer or temporal array, of whatever width and unit.
fn int_values(a: &dyn Array) -> Option<IntVals<'_>> {
    use TimeUnit::*;
    Some(match a.data_type() {
        DataType::Int8 => IntVals::I8(a.as_primitive_opt::<Int8Type>()?.values()),
        DataType::Int16 => IntVals::I16(a.as_primitive_opt::<Int16Type>()?.values()),
        DataType::Int32 => IntVals::I32(a.as_primitive_opt::<Int32Type>()?.values()),
        DataType::Int64 => IntVals::I64(a.as_primitive_opt::<Int64Type>()?.values()),
        DataType::Time32(Second) => {
            IntVals::I32(a.as_primitive_opt::<Time32SecondType>()?.values())
        }
        DataType::Time32(Millisecond) => {
            IntVals::I32(a.as_primitive_opt::<Time32MillisecondType>()?.values())
        }
        DataType::Time64(Microsecond) => {
            IntVals::I64(a.as_primitive_opt::<Time64MicrosecondType>()?.values())
        }
        DataType::Time64(Nanosecond) => {
            IntVals::I64(a.as_primitive_opt::<Time64NanosecondType>()?.values())
        }
        DataType::Timestamp(Second, _) => {
            IntVals::I64(a.as_primitive_opt::<TimestampSecondType>()?.values())
        }
        DataType::Timestamp(Millisecond, _) => {
            IntVals::I64(a.as_primitive_opt::<TimestampMillisecondType>()?.values())
        }
        DataType::Timestamp(Microsecond, _) => {
            IntVals::I64(a.as_primitive_opt::<TimestampMicrosecondType>()?.values())
        }
        DataType::Timestamp(Nanosecond, _) => {
            IntVals::I64(a.as_primitive_opt::<TimestampNanosecondType>()?.values())
        }
        DataType::Duration(Second) => {
            IntVals::I64(a.as_primitive_opt::<DurationSecondType>()?.values())
        }
        DataType::Duration(Millisecond) => {
            IntVals::I64(a.as_primitive_opt::<DurationMillisecondType>()?.values())
        }
        DataType::Duration(Microsecond) => {
            IntVals::I64(a.as_primitive_opt::<DurationMicrosecondType>()?.values())
        }
        DataType::Duration(Nanosecond) => {
            IntVals::I64(a.as_primitive_opt::<DurationNanosecondType>()?.values())
        }
        _ => return None,
    })
}

impl IntVals<'_> {
    fn get(&self, i: usize) -> i64 {
        match self {
            IntVals::I8(v) => i64::from(v[i]),
            IntVals::I16(v) => i64::from(v[i]),
            IntVals::I32(v) => i64::from(v[i]),
            IntVals::I64(v) => v[i],
        }
    }
}

fn mismatch(array: &dyn Array, ty: &ColumnType) -> String {
    format!(
        "an Arrow {} column cannot be written as {}",
        array.data_type(),
        ty.ddl
    )
}

impl<'a> Enc<'a> {
    pub(crate) fn new(array: &'a ArrayRef, ty: &ColumnType) -> Result<Self, String> {
        Self::of(array.as_ref(), &ty.wire, &ty.conv).map_err(|()| mismatch(array.as_ref(), ty))
    }

    fn of(a: &'a dyn Array, wire: &Wire, conv: &Conv) -> Result<Self, ()> {
        let ints = |a: &'a dyn Array| int_values(a).ok_or(());
        Ok(match (wire, conv, a.data_type()) {
            (Wire::Array(elem), conv, DataType::List(_)) => {
                let list = a.as_list::<i32>();
                let inner = Self::of(list.values().as_ref(), elem, conv)?;
                // Lists borrow their values array from `a`, which outlives this encoder.
                Enc::List(list, Box::new(inner), elem.oid())
            }
            (Wire::Bool, _, DataType::Boolean) => Enc::Bool(a.as_boolean()),
            (Wire::Int2 | Wire::Int4 | Wire::Int8, _, _) => Enc::Int(a, ints(a)?, wire.clone()),
            (Wire::Float4, _, DataType::Float32) => Enc::F32(a.as_primitive()),
            (Wire::Float8, _, DataType::Float32) => Enc::F32Wide(a.as_primitive()),
            (Wire::Float8, _, DataType::Float64) => Enc::F64(a.as_primitive()),
            (Wire::Numeric, Conv::Decimal, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
                Enc::Decimal(a)
            }
            (Wire::Numeric, Conv::VariableScale, DataType::Struct(_)) => {
                Enc::VariableScale(a.as_struct())
            }
            (Wire::Text, Conv::Bits(n), DataType::Binary) => Enc::Bits(a.as_binary(), *n),
            (Wire::Text, _, DataType::Utf8) => Enc::Utf8(a.as_string()),
            (Wire::Bytea, Conv::Wkb, DataType::Struct(_)) => Enc::Wkb(a.as_struct()),
            (Wire::Bytea, _, DataType::Binary) => Enc::Bin(a.as_binary()),
            (Wire::Date, _, DataType::Date32) => Enc::Date(a.as_primitive()),
            (Wire::Point, Conv::Point, DataType::Struct(_)) => Enc::Point(a.as_struct()),
            (
                Wire::Time | Wire::Timestamp | Wire::Timestamptz | Wire::Interval,
                _,
                DataType::Time32(u)
                | DataType::Time64(u)
                | DataType::Timestamp(u, _)
                | DataType::Duration(u),
            ) => Enc::Micros(a, ints(a)?, *u, wire.clone()),
            _ => return Err(()),
        })
    }

    /// The same values encoded as `ty` (a wider type of the same kind: an earlier batch of a
    /// column a later one widened).
    pub(crate) fn recast(&self, ty: &ColumnType) -> Result<Enc<'a>, String> {
        let a = self.array();
        Self::of(a, &ty.wire, &ty.conv).map_err(|()| mismatch(a, ty))
    }

    fn array(&self) -> &'a dyn Array {
        match self {
            Enc::Bool(a) => *a,
            Enc::Int(a, ..) | Enc::Decimal(a) | Enc::Micros(a, ..) => *a,
            Enc::F32(a) | Enc::F32Wide(a) => *a,
            Enc::F64(a) => *a,
            Enc::Utf8(a) => *a,
            Enc::Bin(a) | Enc::Bits(a, _) => *a,
            Enc::VariableScale(a) | Enc::Wkb(a) | Enc::Point(a) => *a,
            Enc::Date(a) => *a,
            Enc::List(a, ..) => *a,
        }
    }

    pub(crate) fn is_null(&self, i: usize) -> bool {
        self.array().is_null(i)
    }

    /// Row `i` of a text column; `None` when null or not text.
    pub(crate) fn text(&self, i: usize) -> Option<&str> {
        match self {
            Enc::Utf8(a) if a.is_valid(i) => Some(a.value(i)),
            _ => None,
        }
    }

    /// Whether row `i` holds digits past the microsecond that the replica rounds away: a
    /// nanosecond time or timestamp that is not whole microseconds.
    pub(crate) fn rounds(&self, i: usize) -> bool {
        match self {
            Enc::Micros(a, v, TimeUnit::Nanosecond, _) if a.is_valid(i) => {
                let raw = v.get(i);
                raw % 1_000 != 0 && raw != INFINITY_MICROS && raw != NEG_INFINITY_MICROS
            }
            _ => false,
        }
    }

    /// Whether this column may hold values [`Self::rounds`] finds.
    pub(crate) fn may_round(&self) -> bool {
        matches!(self, Enc::Micros(_, _, TimeUnit::Nanosecond, _))
    }

    /// Whether row `i` is Debezium's stand-in for an unchanged TOASTed value: the placeholder
    /// text, its bytes, or a one-element array of either, or an int array of its bytes.
    pub(crate) fn is_placeholder(&self, i: usize) -> bool {
        if self.is_null(i) {
            return false;
        }
        match self {
            Enc::Utf8(a) => a.value(i) == PLACEHOLDER,
            Enc::Bin(a) => a.value(i) == PLACEHOLDER.as_bytes(),
            Enc::List(l, inner, _) => {
                let (start, end) = (
                    l.value_offsets()[i] as usize,
                    l.value_offsets()[i + 1] as usize,
                );
                match inner.as_ref() {
                    Enc::Utf8(_) | Enc::Bin(_) => end - start == 1 && inner.is_placeholder(start),
                    Enc::Int(a, v, _) => {
                        end - start == PLACEHOLDER.len()
                            && PLACEHOLDER.bytes().enumerate().all(|(k, b)| {
                                !a.is_null(start + k) && v.get(start + k) == i64::from(b)
                            })
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    /// Whether any row may be the placeholder: false when no text or bytes value has its
    /// length (one pass over the offsets), so that most columns skip [`Self::is_placeholder`].
    pub(crate) fn may_hold_placeholder(&self) -> bool {
        let of_len = |offsets: &[i32]| {
            offsets
                .windows(2)
                .any(|w| (w[1] - w[0]) as usize == PLACEHOLDER.len())
        };
        match self {
            Enc::Utf8(a) => of_len(a.value_offsets()),
            Enc::Bin(a) => of_len(a.value_offsets()),
            Enc::List(..) => true,
            _ => false,
        }
    }

    /// Appends row `i` as one COPY field (length-prefixed, or -1 for NULL).
    pub(crate) fn write(&self, i: usize, out: &mut Vec<u8>) -> Result<(), String> {
        if self.is_null(i) {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            return Ok(());
        }
        let at = out.len();
        out.extend_from_slice(&0i32.to_be_bytes());
        self.write_value(i, out)?;
        let len = i32::try_from(out.len() - at - 4).map_err(|_| "a value over 2 GiB".to_owned())?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }

    fn write_value(&self, i: usize, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Enc::Bool(a) => out.push(u8::from(a.value(i))),
            Enc::Int(_, v, wire) => {
                let x = v.get(i);
                let range = || format!("{x} does not fit {}", wire.sql());
                match wire {
                    Wire::Int2 => {
                        out.extend_from_slice(&i16::try_from(x).map_err(|_| range())?.to_be_bytes())
                    }
                    Wire::Int4 => {
                        out.extend_from_slice(&i32::try_from(x).map_err(|_| range())?.to_be_bytes())
                    }
                    _ => out.extend_from_slice(&x.to_be_bytes()),
                }
            }
            Enc::F32(a) => out.extend_from_slice(&a.value(i).to_be_bytes()),
            Enc::F32Wide(a) => out.extend_from_slice(&f64::from(a.value(i)).to_be_bytes()),
            Enc::F64(a) => out.extend_from_slice(&a.value(i).to_be_bytes()),
            Enc::Utf8(a) => {
                let v = a.value(i).as_bytes();
                // MySQL, SQL Server and Db2 text may hold U+0000; PostgreSQL's cannot. The raw
                // layer keeps it; here it is refused by name rather than by the server's
                // "invalid byte sequence".
                if v.contains(&0) {
                    return Err(
                        "the text holds a NUL character (U+0000), which PostgreSQL text cannot \
                         store; the raw layer keeps the value"
                            .into(),
                    );
                }
                out.extend_from_slice(v);
            }
            Enc::Bin(a) => out.extend_from_slice(a.value(i)),
            Enc::Decimal(a) => match a.data_type() {
                DataType::Decimal128(_, scale) => {
                    let v = a.as_primitive::<Decimal128Type>().value(i);
                    let mut digits = [0u8; 39];
                    let d = ascii_digits(v.unsigned_abs(), &mut digits);
                    numeric_binary(v < 0, d, i32::from(*scale), out)?;
                }
                DataType::Decimal256(_, scale) => {
                    let text = a.as_primitive::<Decimal256Type>().value(i).to_string();
                    let (negative, d) = match text.strip_prefix('-') {
                        Some(d) => (true, d),
                        None => (false, text.as_str()),
                    };
                    numeric_binary(negative, d.as_bytes(), i32::from(*scale), out)?;
                }
                _ => return Err("a decimal column that is not Decimal128/256".into()),
            },
            Enc::VariableScale(s) => {
                let scale = s
                    .column_by_name("scale")
                    .and_then(|c| c.as_primitive_opt::<Int32Type>())
                    .ok_or("VariableScaleDecimal without an int scale")?;
                let value = s
                    .column_by_name("value")
                    .and_then(|c| c.as_binary_opt::<i32>())
                    .ok_or("VariableScaleDecimal without a bytes value")?;
                let (negative, digits) = decimal_digits(value.value(i));
                numeric_binary(negative, &digits, scale.value(i), out)?;
            }
            Enc::Bits(a, n) => out.extend_from_slice(bit_string(a.value(i), *n).as_bytes()),
            Enc::Date(a) => out.extend_from_slice(&pg_date(a.value(i))?.to_be_bytes()),
            Enc::Micros(_, v, unit, wire) => {
                let raw = v.get(i);
                let infinite = raw == INFINITY_MICROS || raw == NEG_INFINITY_MICROS;
                let us = match unit {
                    // The infinities are the ends of the range in every unit.
                    _ if infinite && matches!(wire, Wire::Timestamp | Wire::Timestamptz) => {
                        Some(raw)
                    }
                    TimeUnit::Second => raw.checked_mul(1_000_000),
                    TimeUnit::Millisecond => raw.checked_mul(1_000),
                    TimeUnit::Microsecond => Some(raw),
                    TimeUnit::Nanosecond => Some(nanos_to_micros(raw)),
                }
                .ok_or_else(|| format!("{raw} {unit:?} is out of range"))?;
                match wire {
                    Wire::Timestamp | Wire::Timestamptz => {
                        out.extend_from_slice(&pg_timestamp(us)?.to_be_bytes())
                    }
                    Wire::Interval => {
                        // Whole days as days, so `3 days 04:00` reads back as written; months
                        // stay 0: Debezium already folded them into microseconds.
                        let days = i32::try_from(us / DAY_MICROS)
                            .map_err(|_| format!("{us} µs is out of an interval's range"))?;
                        out.extend_from_slice(&(us % DAY_MICROS).to_be_bytes());
                        out.extend_from_slice(&days.to_be_bytes());
                        out.extend_from_slice(&0i32.to_be_bytes());
                    }
                    // `time` holds 00:00 to 24:00 inclusive, as PostgreSQL's own check.
                    Wire::Time if !(0..=DAY_MICROS).contains(&us) => {
                        return Err(format!(
                            "{us} µs is not a time of day (00:00 to 24:00), which `time` holds"
                        ));
                    }
                    _ => out.extend_from_slice(&us.to_be_bytes()),
                }
            }
            Enc::Wkb(s) => {
                let wkb = s
                    .column_by_name("wkb")
                    .and_then(|c| c.as_binary_opt::<i32>())
                    .ok_or("geometry without wkb bytes")?;
                out.extend_from_slice(wkb.value(i));
            }
            Enc::Point(s) => {
                for axis in ["x", "y"] {
                    let c = s
                        .column_by_name(axis)
                        .and_then(|c| c.as_primitive_opt::<Float64Type>())
                        .ok_or("point without float x, y")?;
                    out.extend_from_slice(&c.value(i).to_be_bytes());
                }
            }
            Enc::List(l, inner, oid) => {
                let (start, end) = (
                    l.value_offsets()[i] as usize,
                    l.value_offsets()[i + 1] as usize,
                );
                let has_null = (start..end).any(|k| inner.is_null(k));
                let n = i32::try_from(end - start).map_err(|_| "array too long".to_owned())?;
                out.extend_from_slice(&i32::from(n > 0).to_be_bytes()); // dimensions
                out.extend_from_slice(&i32::from(has_null).to_be_bytes());
                out.extend_from_slice(&oid.to_be_bytes());
                if n > 0 {
                    out.extend_from_slice(&n.to_be_bytes());
                    out.extend_from_slice(&1i32.to_be_bytes()); // lower bound
                }
                for k in start..end {
                    inner.write(k, out)?;
                }
            }
        }
        Ok(())
    }
}

/// The decimal digits of `v` (most significant first, none for zero), in `buf`.
fn ascii_digits(mut v: u128, buf: &mut [u8; 39]) -> &[u8] {
    let mut at = buf.len();
    // u64 arithmetic where it fits: u128 division is a library call.
    while v > u128::from(u64::MAX) {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    let mut w = v as u64;
    while w > 0 {
        at -= 1;
        buf[at] = b'0' + (w % 10) as u8;
        w /= 10;
    }
    &buf[at..]
}

/// PostgreSQL's binary numeric (as `numeric_send` writes it) of the unscaled decimal `digits`
/// (ASCII, most significant first) times 10^-`scale`: base-10000 digit groups aligned on the
/// decimal point, the weight of the first, and the display scale.
pub(crate) fn numeric_binary(
    negative: bool,
    digits: &[u8],
    scale: i32,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    const DSCALE_MAX: i32 = 0x3FFF;
    let first = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    let digits = &digits[first..];
    let dscale = scale.max(0);
    if dscale > DSCALE_MAX {
        return Err(format!(
            "decimal scale {scale} exceeds PostgreSQL's numeric"
        ));
    }
    let sign: u16 = if negative && !digits.is_empty() {
        0x4000
    } else {
        0
    };
    if digits.is_empty() {
        for v in [0i16, 0, sign as i16, dscale as i16] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        return Ok(());
    }
    let len = digits.len() as i64;
    let scale = i64::from(scale);
    // The digit at 10^e, e relative to the decimal point.
    let at = |e: i64| -> u16 {
        let i = len - 1 - scale - e;
        if (0..len).contains(&i) {
            u16::from(digits[i as usize] - b'0')
        } else {
            0
        }
    };
    let (hi, lo) = ((len - 1 - scale).div_euclid(4), (-scale).div_euclid(4));
    let too_big =
        || format!("a decimal of {len} digits at scale {scale} is out of PostgreSQL's range");
    let weight = i16::try_from(hi).map_err(|_| too_big())?;
    let ndigits = i16::try_from(hi - lo + 1).map_err(|_| too_big())?;
    for v in [ndigits, weight, sign as i16, dscale as i16] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    for g in (lo..=hi).rev() {
        let e = 4 * g;
        let group = at(e + 3) * 1000 + at(e + 2) * 100 + at(e + 1) * 10 + at(e);
        out.extend_from_slice(&group.to_be_bytes());
    }
    Ok(())
}

/// A two's-complement big-endian integer as its sign and decimal digits (ASCII, most
/// significant first; none for zero).
pub(crate) fn decimal_digits(bytes: &[u8]) -> (bool, Vec<u8>) {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut mag: Vec<u8> = if negative {
        // Negate: invert and add one.
        let mut m: Vec<u8> = bytes.iter().map(|b| !b).collect();
        for b in m.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
        m
    } else {
        bytes.to_vec()
    };
    let mut digits = Vec::new();
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in mag.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    digits.reverse();
    (negative, digits)
}

/// Debezium's little-endian bit bytes (bit i is bit i % 8 of byte i / 8) as a bit string of
/// `len` bits, most significant first as PostgreSQL writes them.
pub(crate) fn bit_string(bytes: &[u8], len: Option<usize>) -> String {
    let len = len.unwrap_or(bytes.len() * 8);
    (0..len)
        .rev()
        .map(|bit| {
            let set = bytes.get(bit / 8).is_some_and(|b| b >> (bit % 8) & 1 == 1);
            if set { '1' } else { '0' }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_past_the_microsecond_are_found() {
        for (text, loses) in [
            ("2020-01-01T10:00:00.1234567+05:30", true),
            ("2020-01-01T10:00:00.1234560+05:30", false),
            ("2020-01-01T10:00:00.123456+05:30", false),
            ("2020-01-01T10:00:00.000000001Z", true),
            ("2020-01-01T10:00:00Z", false),
            ("-0001-01-01T10:00:00.5-01:00", false),
        ] {
            assert_eq!(loses_digits(text), loses, "{text}");
        }
    }
    use std::sync::Arc;

    /// Binary numeric back to text, as `numeric_out` writes it.
    fn numeric_text(b: &[u8]) -> String {
        let word = |k: usize| i16::from_be_bytes([b[2 * k], b[2 * k + 1]]);
        let (n, weight, sign, dscale) = (word(0), word(1), word(2) as u16, word(3));
        assert_eq!(b.len(), 8 + 2 * n as usize);
        let group = |g: i16| -> i16 {
            let k = weight - g; // index into the digit groups
            if (0..n).contains(&k) {
                word(4 + k as usize)
            } else {
                0
            }
        };
        let mut int: String = (0..=weight.max(0))
            .rev()
            .map(|g| format!("{:04}", group(g)))
            .collect();
        int = int.trim_start_matches('0').to_owned();
        if int.is_empty() {
            int.push('0');
        }
        let frac: String = (1..=(dscale + 3) / 4)
            .map(|g| format!("{:04}", group(-g)))
            .collect();
        let mut text = if sign == 0x4000 {
            format!("-{int}")
        } else {
            int
        };
        if dscale > 0 {
            text.push('.');
            text.push_str(&frac[..dscale as usize]);
        }
        text
    }

    fn numeric(negative: bool, digits: &str, scale: i32) -> String {
        let mut out = Vec::new();
        numeric_binary(negative, digits.as_bytes(), scale, &mut out).unwrap();
        numeric_text(&out)
    }

    #[test]
    fn decimals_in_binary_numeric() {
        assert_eq!(numeric(false, "12345", 2), "123.45");
        assert_eq!(numeric(true, "12345", 2), "-123.45");
        assert_eq!(numeric(false, "5", 3), "0.005");
        assert_eq!(numeric(false, "", 0), "0");
        assert_eq!(numeric(true, "000", 2), "0.00");
        assert_eq!(numeric(false, "7", -2), "700");
        assert_eq!(numeric(false, "123456789", -5), "12345678900000");
        assert_eq!(numeric(false, "100000000", 4), "10000.0000");
        assert_eq!(numeric(false, "1", 9), "0.000000001");
        let max38 = "9".repeat(38);
        assert_eq!(
            numeric(true, &max38, 10),
            format!("-{}.{}", &max38[..28], &max38[28..])
        );
        let mut buf = [0u8; 39];
        assert_eq!(
            ascii_digits(u128::MAX, &mut buf),
            u128::MAX.to_string().as_bytes()
        );
        assert_eq!(ascii_digits(0, &mut buf), b"");
        assert!(numeric_binary(false, b"1", 20_000, &mut Vec::new()).is_err());
    }

    #[test]
    fn decimals_from_twos_complement() {
        let d = |b: &[u8]| {
            let (neg, digits) = decimal_digits(b);
            (neg, String::from_utf8(digits).unwrap())
        };
        assert_eq!(d(&[0x30, 0x39]), (false, "12345".into()));
        assert_eq!(d(&[0xcf, 0xc7]), (true, "12345".into()));
        assert_eq!(d(&[]), (false, String::new()));
        assert_eq!(d(&[0xff]), (true, "1".into()));
        assert_eq!(d(&[0x80]), (true, "128".into()));
    }

    #[test]
    fn bits_are_written_most_significant_first() {
        assert_eq!(bit_string(&[0b1010], Some(4)), "1010");
        assert_eq!(bit_string(&[0b101], Some(8)), "00000101");
        assert_eq!(bit_string(&[0x01, 0x80], None), "1000000000000001");
    }

    #[test]
    fn placeholders_in_text_bytes_and_arrays() {
        let ty = |f: &arrow_schema::Field| super::super::types::column_type(f, false).unwrap();
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some(PLACEHOLDER), Some("x"), None]));
        let t = ty(&arrow_schema::Field::new("t", DataType::Utf8, true));
        let e = Enc::new(&text, &t).unwrap();
        assert!(e.is_placeholder(0) && !e.is_placeholder(1) && !e.is_placeholder(2));
        assert!(e.may_hold_placeholder());
        let plain: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None, Some("")]));
        assert!(!Enc::new(&plain, &t).unwrap().may_hold_placeholder());
        let ints: Vec<Option<i32>> = PLACEHOLDER.bytes().map(|b| Some(i32::from(b))).collect();
        let list: ArrayRef = Arc::new(
            arrow_array::ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                Some(ints),
                Some(vec![Some(1)]),
            ]),
        );
        let t = ty(&arrow_schema::Field::new(
            "l",
            list.data_type().clone(),
            true,
        ));
        let e = Enc::new(&list, &t).unwrap();
        assert!(e.is_placeholder(0) && !e.is_placeholder(1));
    }

    /// The column type of a nullable column of `a`'s type.
    fn ty_of(a: &ArrayRef) -> ColumnType {
        let field = arrow_schema::Field::new("c", a.data_type().clone(), true);
        super::super::types::column_type(&field, false).unwrap()
    }

    #[test]
    fn extreme_dates_and_timestamps_are_written_or_refused_never_wrapped() {
        assert_eq!(pg_date(INFINITY_DAYS), Ok(i32::MAX));
        assert_eq!(pg_date(NEG_INFINITY_DAYS), Ok(i32::MIN));
        assert_eq!(
            pg_date(-2_440_588),
            Ok(-2_451_545),
            "4714-11-24 BC, Julian day 0"
        );
        assert_eq!(pg_date(2_145_042_905), Ok(2_145_031_948), "5874897-12-31");
        for outside in [i32::MIN, -2_440_589, 2_145_042_906] {
            assert!(pg_date(outside).is_err(), "{outside}");
        }
        assert_eq!(pg_timestamp(INFINITY_MICROS), Ok(i64::MAX));
        assert_eq!(pg_timestamp(NEG_INFINITY_MICROS), Ok(i64::MIN));
        assert_eq!(
            pg_timestamp(-210_866_803_200_000_000),
            Ok(-211_813_488_000_000_000)
        );
        assert_eq!(
            pg_timestamp(i64::MAX - 1),
            Ok(i64::MAX - 1 - PG_EPOCH_MICROS)
        );
        // Debezium's wrapped `timestamp` past 294247 AD lands here: refused, not -infinity.
        for outside in [
            i64::MIN,
            -9_223_372_036_853_775_810,
            -210_866_803_200_000_001,
        ] {
            assert!(pg_timestamp(outside).is_err(), "{outside}");
        }
    }

    /// Every temporal and integer Arrow type, at the ends of its range and around zero, is
    /// written or refused with a reason: never a panic, never a wrapped value.
    #[test]
    fn extreme_values_of_every_type_never_panic() {
        use arrow_array::*;
        let ends = [i64::MIN, -i64::MAX, -1, 0, 1, i64::MAX - 1, i64::MAX];
        let ends32: Vec<i32> = [i32::MIN, -i32::MAX, -1, 0, 1, i32::MAX - 1, i32::MAX].to_vec();
        let utc = || Some(std::sync::Arc::<str>::from("UTC"));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int8Array::from(vec![i8::MIN, i8::MAX])),
            Arc::new(Int16Array::from(vec![i16::MIN, i16::MAX])),
            Arc::new(Int32Array::from(ends32.clone())),
            Arc::new(Int64Array::from(ends.to_vec())),
            Arc::new(Date32Array::from(ends32.clone())),
            Arc::new(Time32SecondArray::from(ends32.clone())),
            Arc::new(Time32MillisecondArray::from(ends32)),
            Arc::new(Time64MicrosecondArray::from(ends.to_vec())),
            Arc::new(Time64NanosecondArray::from(ends.to_vec())),
            Arc::new(TimestampSecondArray::from(ends.to_vec())),
            Arc::new(TimestampMillisecondArray::from(ends.to_vec()).with_timezone_opt(utc())),
            Arc::new(TimestampMicrosecondArray::from(ends.to_vec())),
            Arc::new(TimestampMicrosecondArray::from(ends.to_vec()).with_timezone_opt(utc())),
            Arc::new(TimestampNanosecondArray::from(ends.to_vec())),
            Arc::new(DurationSecondArray::from(ends.to_vec())),
            Arc::new(DurationMillisecondArray::from(ends.to_vec())),
            Arc::new(DurationMicrosecondArray::from(ends.to_vec())),
            Arc::new(DurationNanosecondArray::from(ends.to_vec())),
        ];
        let mut written = 0;
        for column in &columns {
            let field = arrow_schema::Field::new("c", column.data_type().clone(), true);
            let Ok(ty) = super::super::types::column_type(&field, false) else {
                continue;
            };
            let enc = Enc::new(column, &ty).unwrap();
            for i in 0..column.len() {
                let mut out = Vec::new();
                written += usize::from(enc.write(i, &mut out).is_ok());
            }
        }
        assert!(written > 40, "{written}");
        // A time of day holds 00:00 to 24:00 and nothing else.
        let t: ArrayRef = Arc::new(Time64MicrosecondArray::from(vec![
            -1,
            0,
            DAY_MICROS,
            DAY_MICROS + 1,
        ]));
        let ty = ty_of(&t);
        let e = Enc::new(&t, &ty).unwrap();
        let ok: Vec<bool> = (0..4)
            .map(|i| e.write(i, &mut Vec::new()).is_ok())
            .collect();
        assert_eq!(ok, [false, true, true, false]);
        // Infinity in milliseconds is infinity, not an overflow.
        let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![i64::MAX, -i64::MAX]));
        let ty = ty_of(&ms);
        let e = Enc::new(&ms, &ty).unwrap();
        let mut out = Vec::new();
        e.write(0, &mut out).unwrap();
        e.write(1, &mut out).unwrap();
        assert_eq!(out[4..12], i64::MAX.to_be_bytes());
        assert_eq!(out[16..24], i64::MIN.to_be_bytes());
    }

    #[test]
    fn arrays_and_timestamps_in_binary() {
        let list: ArrayRef = Arc::new(
            arrow_array::ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                Some(vec![Some(1), None]),
                Some(vec![]),
            ]),
        );
        let t = ty_of(&list);
        let e = Enc::new(&list, &t).unwrap();
        let mut out = Vec::new();
        e.write(0, &mut out).unwrap();
        let expect: Vec<u8> = [32i32, 1, 1, 23, 2, 1, 4, 1, -1]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        assert_eq!(out, expect);
        out.clear();
        e.write(1, &mut out).unwrap();
        assert_eq!(out.len(), 4 + 12);
        let ts: ArrayRef = Arc::new(arrow_array::TimestampNanosecondArray::from(vec![
            PG_EPOCH_MICROS * 1000,
            1,
        ]));
        let t = ty_of(&ts);
        let e = Enc::new(&ts, &t).unwrap();
        out.clear();
        e.write(0, &mut out).unwrap();
        assert_eq!(&out[4..], &0i64.to_be_bytes());
        // 1 ns rounds to the epoch, and says so.
        assert!(e.rounds(1) && !e.rounds(0));
        out.clear();
        e.write(1, &mut out).unwrap();
        assert_eq!(&out[4..], &(-PG_EPOCH_MICROS).to_be_bytes());
    }

    /// Half to even, as PostgreSQL rounds a timestamp's text, on both sides of zero, and
    /// the last nanosecond of a day is `24:00:00`, which `time` holds.
    #[test]
    fn nanoseconds_round_half_to_even() {
        let cases = [
            (1_499, 1),
            (1_500, 2),
            (2_500, 2),
            (2_501, 3),
            (-1, 0),
            (-500, 0),
            (-1_500, -2),
            (-1_501, -2),
            (-2_500, -2),
            (i64::MAX - 7, i64::MAX / 1_000 + 1),
            (i64::MIN, i64::MIN / 1_000 - 1),
        ];
        for (ns, us) in cases {
            assert_eq!(nanos_to_micros(ns), us, "{ns} ns");
        }
        let t: ArrayRef = Arc::new(arrow_array::Time64NanosecondArray::from(vec![
            DAY_MICROS * 1_000 - 100,
        ]));
        let ty = ty_of(&t);
        let e = Enc::new(&t, &ty).unwrap();
        let mut out = Vec::new();
        e.write(0, &mut out).unwrap();
        assert_eq!(&out[4..], &DAY_MICROS.to_be_bytes());
        assert!(e.rounds(0) && e.may_round());
    }
}
