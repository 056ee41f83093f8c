//! The replica's binary COPY encoder over arbitrary Arrow columns of every type its type map
//! takes (docs/replica.md), each value and null taken from the input, plain or in a list: a
//! value the map refuses is an error, never a panic.
#![no_main]

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, StringBuilder,
};
use arrow_array::types::*;
use arrow_array::{ArrayRef, ListArray, PrimitiveArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer, i256};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use lakesink_writers::postgres::fuzzing::encode_column;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Debezium's names for the text-carried types, and others.
const TEXT_NAMES: &[&str] = &[
    "",
    "io.debezium.data.Uuid",
    "io.debezium.data.Json",
    "io.debezium.data.Xml",
    "io.debezium.time.ZonedTime",
    "io.debezium.time.Interval",
    "io.debezium.data.Tsvector",
    "io.debezium.time.ZonedTimestamp",
    "io.debezium.data.Enum",
];

fn meta(name: &str, u: &mut Unstructured) -> Result<HashMap<String, String>> {
    let mut m = HashMap::new();
    if !name.is_empty() {
        m.insert("connect.name".to_owned(), name.to_owned());
    }
    if u.ratio(1, 4)? {
        let default: String = u.arbitrary()?;
        m.insert("connect.default".to_owned(), default);
    }
    if u.ratio(1, 4)? {
        let len: u16 = u.arbitrary()?;
        m.insert(
            "connect.parameters".to_owned(),
            format!(r#"{{"length":"{len}"}}"#),
        );
    }
    Ok(m)
}

fn prim<T: ArrowPrimitiveType>(
    u: &mut Unstructured,
    n: usize,
    dt: DataType,
    v: impl Fn(&mut Unstructured) -> Result<T::Native>,
) -> Result<ArrayRef> {
    let mut vals = Vec::with_capacity(n);
    for _ in 0..n {
        vals.push(if u.ratio(1, 5)? { None } else { Some(v(u)?) });
    }
    Ok(Arc::new(
        PrimitiveArray::<T>::from_iter(vals).with_data_type(dt),
    ))
}

fn strings(u: &mut Unstructured, n: usize) -> Result<ArrayRef> {
    let forms = [
        "__debezium_unavailable_value",
        "2020-01-01T10:00:00.1234567+05:30",
        "9999-12-31T23:59:59.9999999-14:00",
        "0.5",
    ];
    let mut b = StringBuilder::new();
    for _ in 0..n {
        match u.int_in_range(0..=5u8)? {
            0 => b.append_null(),
            1 => b.append_value(*u.choose(&forms)?),
            _ => b.append_value(u.arbitrary::<&str>()?),
        }
    }
    Ok(Arc::new(b.finish()))
}

fn binary(u: &mut Unstructured, n: usize) -> Result<ArrayRef> {
    let mut b = BinaryBuilder::new();
    for _ in 0..n {
        if u.ratio(1, 5)? {
            b.append_null();
        } else {
            b.append_value(u.arbitrary::<&[u8]>()?);
        }
    }
    Ok(Arc::new(b.finish()))
}

fn ints(u: &mut Unstructured, n: usize) -> Result<ArrayRef> {
    let mut b = Int32Builder::new();
    for _ in 0..n {
        if u.ratio(1, 5)? {
            b.append_null();
        } else {
            b.append_value(u.arbitrary()?);
        }
    }
    Ok(Arc::new(b.finish()))
}

fn nulls(u: &mut Unstructured, n: usize) -> Result<Option<NullBuffer>> {
    if !u.arbitrary::<bool>()? {
        return Ok(None);
    }
    let mut valid = Vec::with_capacity(n);
    for _ in 0..n {
        valid.push(!u.ratio(1, 4)?);
    }
    Ok(Some(NullBuffer::from(valid)))
}

/// A column of one of the type map's types: its field and values.
fn column(u: &mut Unstructured, n: usize) -> Result<(Field, ArrayRef)> {
    use DataType as D;
    use TimeUnit::*;
    let kind = u.int_in_range(0..=24u8)?;
    let long = |u: &mut Unstructured| -> Result<i64> {
        // The ends of the range and the infinities, often.
        Ok(match u.int_in_range(0..=3u8)? {
            0 => *u.choose(&[i64::MAX, -i64::MAX, i64::MIN, 0, 86_400_000_000, -1])?,
            _ => u.arbitrary()?,
        })
    };
    let (dt, name, array): (DataType, &str, ArrayRef) = match kind {
        0 => {
            let mut b = BooleanBuilder::new();
            for _ in 0..n {
                b.append_option(if u.ratio(1, 5)? { None } else { Some(u.arbitrary()?) });
            }
            (D::Boolean, "", Arc::new(b.finish()))
        }
        1 => (D::Int8, "", prim::<Int8Type>(u, n, D::Int8, |u| u.arbitrary())?),
        2 => (D::Int16, "", prim::<Int16Type>(u, n, D::Int16, |u| u.arbitrary())?),
        3 => (D::Int32, "", ints(u, n)?),
        4 => (D::Int64, "", prim::<Int64Type>(u, n, D::Int64, long)?),
        5 => {
            let mut b = Float32Builder::new();
            for _ in 0..n {
                b.append_option(Some(f32::from_bits(u.arbitrary()?)));
            }
            (D::Float32, "", Arc::new(b.finish()))
        }
        6 => {
            let mut b = Float64Builder::new();
            for _ in 0..n {
                b.append_option(Some(f64::from_bits(u.arbitrary()?)));
            }
            (D::Float64, "", Arc::new(b.finish()))
        }
        7 => (D::Utf8, *u.choose(TEXT_NAMES)?, strings(u, n)?),
        8 => (D::Binary, "", binary(u, n)?),
        9 => (D::Binary, "io.debezium.data.Bits", binary(u, n)?),
        10 => {
            let p = u.int_in_range(1..=38u8)?;
            let s = u.int_in_range(-10..=38i8)?;
            let dt = D::Decimal128(p, s);
            let a = prim::<Decimal128Type>(u, n, dt.clone(), |u| u.arbitrary())?;
            (dt, "org.apache.kafka.connect.data.Decimal", a)
        }
        11 => {
            let p = u.int_in_range(39..=76u8)?;
            let s = u.int_in_range(-10..=76i8)?;
            let dt = D::Decimal256(p, s);
            let a = prim::<Decimal256Type>(u, n, dt.clone(), |u| {
                Ok(i256::from_le_bytes(u.arbitrary()?))
            })?;
            (dt, "org.apache.kafka.connect.data.Decimal", a)
        }
        12 => {
            let fields = Fields::from(vec![
                Field::new("scale", D::Int32, false),
                Field::new("value", D::Binary, false),
            ]);
            let mut scale = Int32Builder::new();
            let mut value = BinaryBuilder::new();
            for _ in 0..n {
                scale.append_value(u.arbitrary()?);
                value.append_value(u.arbitrary::<&[u8]>()?);
            }
            let s = StructArray::new(
                fields.clone(),
                vec![Arc::new(scale.finish()), Arc::new(value.finish())],
                nulls(u, n)?,
            );
            (
                D::Struct(fields),
                "io.debezium.data.VariableScaleDecimal",
                Arc::new(s),
            )
        }
        13 => (
            D::Date32,
            "io.debezium.time.Date",
            prim::<Date32Type>(u, n, D::Date32, |u| {
                Ok(*u.choose(&[i32::MAX, -i32::MAX, i32::MIN, 2_145_042_905, -2_440_588])?
                    ^ if u.arbitrary()? { u.arbitrary()? } else { 0 })
            })?,
        ),
        14 => (
            D::Time32(Millisecond),
            "io.debezium.time.Time",
            prim::<Time32MillisecondType>(u, n, D::Time32(Millisecond), |u| u.arbitrary())?,
        ),
        15 => (
            D::Time64(Microsecond),
            "io.debezium.time.MicroTime",
            prim::<Time64MicrosecondType>(u, n, D::Time64(Microsecond), long)?,
        ),
        16 => (
            D::Time64(Nanosecond),
            "io.debezium.time.NanoTime",
            prim::<Time64NanosecondType>(u, n, D::Time64(Nanosecond), long)?,
        ),
        17 => {
            let unit = *u.choose(&[Millisecond, Microsecond, Nanosecond])?;
            let dt = D::Timestamp(unit, None);
            let a = match unit {
                Millisecond => prim::<TimestampMillisecondType>(u, n, dt.clone(), long)?,
                Microsecond => prim::<TimestampMicrosecondType>(u, n, dt.clone(), long)?,
                _ => prim::<TimestampNanosecondType>(u, n, dt.clone(), long)?,
            };
            (dt, "io.debezium.time.MicroTimestamp", a)
        }
        18 => {
            let dt = D::Timestamp(Microsecond, Some("UTC".into()));
            let a = prim::<TimestampMicrosecondType>(u, n, dt.clone(), long)?;
            (dt, "io.debezium.time.ZonedTimestamp", a)
        }
        19 => (
            D::Duration(Microsecond),
            "io.debezium.time.MicroDuration",
            prim::<DurationMicrosecondType>(u, n, D::Duration(Microsecond), long)?,
        ),
        20 => (
            D::Duration(Nanosecond),
            "io.debezium.time.NanoDuration",
            prim::<DurationNanosecondType>(u, n, D::Duration(Nanosecond), long)?,
        ),
        21 | 22 => {
            let point = kind == 22;
            let mut fields = Vec::new();
            let mut cols: Vec<ArrayRef> = Vec::new();
            if point {
                for axis in ["x", "y"] {
                    let mut b = Float64Builder::new();
                    for _ in 0..n {
                        b.append_value(f64::from_bits(u.arbitrary()?));
                    }
                    fields.push(Field::new(axis, D::Float64, false));
                    cols.push(Arc::new(b.finish()));
                }
            }
            fields.push(Field::new("wkb", D::Binary, true));
            cols.push(binary(u, n)?);
            fields.push(Field::new("srid", D::Int32, true));
            cols.push(ints(u, n)?);
            let fields = Fields::from(fields);
            let s = StructArray::try_new(fields.clone(), cols, nulls(u, n)?)
                .map_err(|_| libfuzzer_sys::arbitrary::Error::IncorrectFormat)?;
            let name = if point {
                "io.debezium.data.geometry.Point"
            } else {
                "io.debezium.data.geometry.Geometry"
            };
            (D::Struct(fields), name, Arc::new(s))
        }
        23 => (D::Utf8, "io.debezium.time.ZonedTimestamp", strings(u, n)?),
        _ => (D::Binary, "io.debezium.data.geometry.Geography", binary(u, n)?),
    };
    let field = Field::new("c", dt, true).with_metadata(meta(name, u)?);
    Ok((field, array))
}

/// The column as the values of a list column of `rows` rows, cut at offsets from the input.
fn listed(u: &mut Unstructured, item: Field, values: ArrayRef) -> Result<(Field, ArrayRef)> {
    let mut lens = Vec::new();
    let mut left = values.len();
    while left > 0 {
        // The rest in one list once the input runs out, so the loop ends.
        let take = if u.is_empty() || lens.len() > 64 {
            left
        } else {
            u.int_in_range(0..=left.min(4))?
        };
        lens.push(take);
        left -= take;
    }
    let offsets = OffsetBuffer::from_lengths(lens.iter().copied());
    let valid = nulls(u, lens.len())?;
    let item = Arc::new(item.with_name("item"));
    let list = ListArray::try_new(item.clone(), offsets, values, valid)
        .map_err(|_| libfuzzer_sys::arbitrary::Error::IncorrectFormat)?;
    let metadata = item.metadata().clone();
    let field = Field::new("c", DataType::List(item), true).with_metadata(metadata);
    Ok((field, Arc::new(list)))
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let n = u.int_in_range(0..=16usize)?;
    let (field, array) = column(&mut u, n)?;
    let (field, array) = if u.ratio(1, 3)? {
        listed(&mut u, field, array)?
    } else {
        (field, array)
    };
    let _ = encode_column(&field, &array);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
