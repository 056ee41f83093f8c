//! The direct decoder against the validator + arrow-avro path on the same datums: random valid
//! datums of schemas covering every type it builds, with random damage mixed in. The two must
//! accept and refuse the same datums, with the same errors, and flush equal batches.

use serde_json::{Value, json};

use super::encode;
use super::*;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn decimal(precision: u32, on: Value) -> Value {
    let mut d = json!({"logicalType": "decimal", "precision": precision, "scale": 2,
        "connect.name": "org.apache.kafka.connect.data.Decimal"});
    match on {
        Value::String(_) => d["type"] = on,
        Value::Object(fixed) => {
            for (k, v) in fixed {
                d[k] = v;
            }
        }
        _ => unreachable!(),
    }
    d
}

/// Every type the direct decoder builds, nullable both ways, nested.
fn wide_schema() -> Value {
    let leaf = json!({"type": "record", "name": "Leaf", "fields": [
        {"name": "id", "type": "long"},
        {"name": "label", "type": ["null", "string"]}
    ]});
    let value = json!({"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "small", "type": ["null", {"type": "int", "connect.type": "int16"}]},
        {"name": "b", "type": ["boolean", "null"]},
        {"name": "f", "type": ["null", "float"]},
        {"name": "d", "type": "double"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "raw", "type": ["null", "bytes"]},
        {"name": "dec", "type": ["null", decimal(10, json!("bytes"))]},
        {"name": "wide", "type": ["null", decimal(64, json!("bytes"))]},
        {"name": "fdec", "type": ["null", decimal(20, json!({"type": "fixed", "name": "F9", "size": 9}))]},
        {"name": "fwide", "type": decimal(50, json!({"type": "fixed", "name": "F30", "size": 30}))},
        {"name": "fx", "type": ["null", {"type": "fixed", "name": "Four", "size": 4}]},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "zts", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}]},
        {"name": "day", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}]},
        {"name": "avro_day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": ["null", {"type": "int", "logicalType": "time-millis"}]},
        {"name": "us", "type": ["null", {"type": "long", "logicalType": "time-micros"}]},
        {"name": "ts_ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
        {"name": "mts", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}]},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}]},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "leaves", "type": ["null", {"type": "array", "items": leaf}]},
        {"name": "maybe", "type": ["null", "Leaf"]},
        {"name": "empties", "type": {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "string"]}},
        {"name": "counts", "type": ["null", {"type": "map", "values": "long"}]},
        {"name": "nested", "type": {"type": "map", "values": {"type": "array", "items": "Leaf"}}},
        {"name": "mood", "type": {"type": "enum", "name": "Mood", "symbols": ["sad", "ok", "glad"]}},
        {"name": "moods", "type": ["null", {"type": "array", "items": ["null", "Mood"]}]},
        {"name": "maybe_mood", "type": ["Mood", "null"]}
    ]});
    json!({"type": "record", "name": "Envelope", "namespace": "t.public.wide", "fields": [
        {"name": "before", "type": ["null", value]},
        {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"]}
    ]})
}

fn long(rng: &mut Rng) -> i64 {
    match rng.below(6) {
        0 => i64::MIN,
        1 => i64::MAX,
        2 => rng.below(100) as i64 - 50,
        _ => rng.next() as i64 >> rng.below(64),
    }
}

fn text(rng: &mut Rng) -> String {
    let pieces = [
        "a",
        "Ünïcødé",
        "😀",
        " ",
        "x",
        "naïve",
        "\u{0}",
        "long text ",
    ];
    (0..rng.below(6))
        .map(|_| pieces[rng.below(pieces.len() as u64) as usize])
        .collect()
}

/// The big-endian two's-complement bytes of a random value fitting `width` bytes, sometimes
/// padded with sign bytes past it.
fn twos_complement(rng: &mut Rng, len: usize, width: usize) -> Vec<u8> {
    let mut raw: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    if len > width {
        let sign = if raw[len - width] & 0x80 == 0 {
            0
        } else {
            0xff
        };
        raw[..len - width].fill(sign);
    }
    raw
}

/// A valid datum of `node`, written to `out`.
fn datum(node: &Node, rng: &mut Rng, out: &mut Vec<u8>) {
    match node {
        Node::Null => {}
        Node::Boolean => out.push(rng.below(2) as u8),
        Node::Int => encode::long(out, i64::from(long(rng) as i32)),
        Node::Long => encode::long(out, long(rng)),
        Node::Float => out.extend((rng.next() as f32 / 3.0).to_le_bytes()),
        Node::Double => out.extend(f64::from_bits(rng.next()).to_le_bytes()),
        Node::Bytes => {
            let b: Vec<u8> = (0..rng.below(9)).map(|_| rng.next() as u8).collect();
            encode::bytes(out, &b);
        }
        Node::String => encode::bytes(out, text(rng).as_bytes()),
        Node::ZonedTimestamp => {
            let forms = [
                "2024-02-29T12:34:56.789012Z",
                "1970-01-01T00:00:00Z",
                "2024-02-29T13:34:56+01:00",
                "1600-01-01T00:00:00.1Z",
            ];
            encode::bytes(out, forms[rng.below(4) as usize].as_bytes());
        }
        Node::ZonedText => {
            let forms = [
                "2020-01-01T10:00:00.1234567+05:30",
                "1970-01-01T00:00:00Z",
                "9999-12-31T23:59:59.9999999-14:00",
            ];
            encode::bytes(out, forms[rng.below(3) as usize].as_bytes());
        }
        Node::Uuid => {
            let u = uuid::Uuid::from_u64_pair(rng.next(), rng.next());
            let s = if rng.chance(2) {
                u.hyphenated().to_string()
            } else {
                u.simple().to_string().to_uppercase()
            };
            encode::bytes(out, s.as_bytes());
        }
        Node::Decimal { width, fixed } => match fixed {
            Some(size) => out.extend(twos_complement(rng, *size, *width)),
            None => {
                let len = rng.below(*width as u64 + 4) as usize;
                encode::bytes(out, &twos_complement(rng, len, *width));
            }
        },
        Node::Fixed(size) => out.extend((0..*size).map(|_| rng.next() as u8)),
        Node::Enum(symbols) => encode::long(out, rng.below(*symbols as u64) as i64),
        Node::Union(branches) => {
            let i = rng.below(branches.len() as u64) as usize;
            encode::long(out, i as i64);
            datum(&branches[i], rng, out);
        }
        Node::Record { fields, .. } => fields.iter().for_each(|f| datum(f, rng, out)),
        Node::Array(items) | Node::Map(items) => {
            let map = matches!(node, Node::Map(_));
            for _ in 0..rng.below(3) {
                let count = 1 + rng.below(3) as i64;
                let mut block = Vec::new();
                for _ in 0..count {
                    if map {
                        encode::bytes(&mut block, text(rng).as_bytes());
                    }
                    datum(items, rng, &mut block);
                }
                if rng.chance(2) {
                    encode::long(out, -count);
                    encode::long(out, block.len() as i64);
                } else {
                    encode::long(out, count);
                }
                out.extend(block);
            }
            encode::long(out, 0);
        }
    }
}

/// Damage of the kinds real input has: cut short, a byte changed, bytes added.
fn damage(rng: &mut Rng, d: &mut Vec<u8>) {
    match rng.below(4) {
        0 => d.truncate(rng.below(d.len() as u64 + 1) as usize),
        1 | 2 if !d.is_empty() => {
            let at = rng.below(d.len() as u64) as usize;
            d[at] = rng.next() as u8;
        }
        _ => d.push(rng.next() as u8),
    }
}

/// Decodes the same datums through both engines and demands the same outcome.
fn agree(schema: &Value, seed: u64, datums: usize) {
    let writer = WriterSchema::parse_text(&schema.to_string()).unwrap();
    let mut direct = AvroBatchDecoder::new(&writer, 64).unwrap();
    assert!(direct.is_direct(), "{schema}");
    let mut reference = AvroBatchDecoder::via_arrow_avro(&writer, 64).unwrap();
    assert!(!reference.is_direct());
    let mut rng = Rng(seed);
    let (mut accepted, mut refused) = (0, 0);
    for n in 0..datums {
        let mut d = Vec::new();
        datum(&writer.root, &mut rng, &mut d);
        if rng.chance(3) {
            damage(&mut rng, &mut d);
        }
        let a = direct.push(&d).map_err(|e| e.to_string());
        let b = reference.push(&d).map_err(|e| e.to_string());
        assert_eq!(a, b, "datum {n} of seed {seed}: {d:02x?}");
        match a {
            Ok(()) => accepted += 1,
            Err(_) => refused += 1,
        }
        if direct.is_full() || n + 1 == datums {
            assert_eq!(direct.rows(), reference.rows());
            let (a, b) = (direct.flush().unwrap(), reference.flush().unwrap());
            assert_eq!(a, b, "batch ending at datum {n} of seed {seed}");
        }
    }
    assert!(
        accepted > datums / 4 && refused > datums / 20,
        "{accepted} / {refused}"
    );
}

#[test]
fn direct_decoding_equals_validation_then_arrow_avro() {
    for seed in 1..=8u64 {
        agree(
            &wide_schema(),
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            2_000,
        );
    }
}

#[test]
fn bare_and_union_rooted_schemas_decode_directly_too() {
    let flattened = json!(["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "__deleted", "type": ["null", "string"]}
    ]}]);
    for (i, schema) in [
        json!("string"),
        json!("long"),
        json!({"type": "string", "logicalType": "uuid"}),
        flattened,
    ]
    .iter()
    .enumerate()
    {
        agree(schema, 7 + i as u64, 600);
    }
}

#[test]
fn schemas_beyond_the_direct_decoder_fall_back() {
    for field in [
        json!(["null", "int", "string"]),
        json!(["int", "string"]),
        json!({"type": "fixed", "name": "Twelve", "size": 12, "logicalType": "duration"}),
    ] {
        let schema =
            json!({"type": "record", "name": "R", "fields": [{"name": "x", "type": field}]});
        let writer = WriterSchema::parse_text(&schema.to_string()).unwrap();
        let decoder = AvroBatchDecoder::new(&writer, 8).unwrap();
        assert!(!decoder.is_direct(), "{field}");
    }
}

#[test]
fn a_row_refused_deep_inside_leaves_nothing_behind() {
    let schema = json!({"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"},
        {"name": "rows", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
            {"name": "s", "type": "string"}, {"name": "ok", "type": "boolean"}]}}}
    ]});
    let writer = WriterSchema::parse_text(&schema.to_string()).unwrap();
    let mut dec = AvroBatchDecoder::new(&writer, 8).unwrap();
    assert!(dec.is_direct());
    let row = |id: i64, last_flag: u8| {
        let mut d = Vec::new();
        encode::long(&mut d, id);
        encode::long(&mut d, 2);
        encode::bytes(&mut d, b"first");
        d.push(1);
        encode::bytes(&mut d, b"second");
        d.push(last_flag);
        encode::long(&mut d, 0);
        d
    };
    dec.push(&row(1, 0)).unwrap();
    // Fails on the second item's boolean, after its string went into the builders.
    assert!(matches!(
        dec.push(&row(2, 7)),
        Err(DecodeError::Datum(DatumError::BadBoolean { byte: 7, .. }))
    ));
    dec.push(&row(3, 1)).unwrap();
    let batch = dec.flush().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 2);
    let mut reference = AvroBatchDecoder::via_arrow_avro(&writer, 8).unwrap();
    reference.push(&row(1, 0)).unwrap();
    reference.push(&row(3, 1)).unwrap();
    assert_eq!(batch, reference.flush().unwrap().unwrap());
}

#[test]
fn a_null_type_arrow_cannot_hold_is_refused_with_the_schema() {
    let inner =
        || json!({"type": "record", "name": "In", "fields": [{"name": "z", "type": "null"}]});
    for field in [
        json!({"type": "array", "items": "null"}),
        json!({"type": "map", "values": "null"}),
        json!(["null", inner()]),
        json!({"type": "array", "items": inner()}),
    ] {
        let schema =
            json!({"type": "record", "name": "R", "fields": [{"name": "n", "type": field}]});
        let writer = WriterSchema::parse_text(&schema.to_string()).unwrap();
        let err = AvroBatchDecoder::new(&writer, 8).unwrap_err();
        assert!(
            matches!(&err, DecodeError::Schema(m) if m.contains("\"null\"")),
            "{field}: {err}"
        );
    }
    // A top-level null column, a null union branch, and a bare null datum are fine.
    let schema = json!({"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "null"},
        {"name": "items", "type": {"type": "array", "items": ["null", "long"]}}]});
    agree(&schema, 3, 200);
    for (writer, datum) in [(schema, &[0u8][..]), (json!("null"), &[][..])] {
        let writer = WriterSchema::parse_text(&writer.to_string()).unwrap();
        let mut dec = AvroBatchDecoder::new(&writer, 8).unwrap();
        dec.push(datum).unwrap();
        assert_eq!(dec.flush().unwrap().unwrap().num_rows(), 1);
    }
}
