//! Decoding Debezium change events of a 20-column table (inserts: `after` only; updates:
//! `before` and `after`; with the PostgreSQL `source` block, op, ts_ms) into Arrow: the direct
//! decoder, the two-pass path (validation, then arrow-avro) it replaced, arrow-avro alone, and
//! apache-avro's `Value` path; and the whole `ChangeDecoder` (framing, the schema cache, the topic checks,
//! the change model) over Confluent-framed records. Run it on one core: `taskset -c 1 cargo
//! bench …`.
//!
//!     cargo bench -p lakesink-schema-registry --bench decode

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lakesink_schema_registry::avro::{AvroBatchDecoder, WriterSchema, validate};
use lakesink_schema_registry::{
    ChangeDecoder, FixedResolver, Format, IdKind, KafkaRecord, SchemaRef,
};

const ROWS: usize = 8192;
/// Rows per Arrow batch: small enough for the builders to stay in cache.
const BATCH: usize = 1024;

fn schema() -> String {
    let ts =
        r#"{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}"#;
    let date = r#"{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}"#;
    let dec = |p: u32, s: u32| {
        format!(
            r#"{{"type":"bytes","scale":{s},"precision":{p},"connect.version":1,"connect.parameters":{{"scale":"{s}","connect.decimal.precision":"{p}"}},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}"#
        )
    };
    let columns = [
        ("id".to_owned(), "\"long\"".to_owned()),
        ("customer_id".into(), "[\"null\",\"long\"]".into()),
        ("name".into(), "[\"null\",\"string\"]".into()),
        ("email".into(), "[\"null\",\"string\"]".into()),
        ("city".into(), "[\"null\",\"string\"]".into()),
        ("country".into(), "[\"null\",\"string\"]".into()),
        ("status".into(), r#"[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"new,paid,shipped"},"connect.name":"io.debezium.data.Enum"},"null"]"#.into()),
        ("price".into(), format!("[\"null\",{}]", dec(10, 2))),
        ("amount".into(), format!("[\"null\",{}]", dec(20, 4))),
        ("qty".into(), "[\"null\",\"int\"]".into()),
        ("active".into(), "[\"null\",\"boolean\"]".into()),
        ("weight".into(), "[\"null\",\"double\"]".into()),
        ("created_at".into(), format!("[\"null\",{ts}]")),
        ("updated_at".into(), format!("[\"null\",{ts}]")),
        ("ship_date".into(), format!("[\"null\",{date}]")),
        ("note".into(), "[\"null\",\"string\"]".into()),
        ("ref".into(), "[\"null\",\"long\"]".into()),
        ("score".into(), "[\"null\",\"float\"]".into()),
        ("tags".into(), "[\"null\",{\"type\":\"array\",\"items\":[\"null\",\"string\"]}]".into()),
        ("version".into(), "\"long\"".into()),
    ];
    let fields: Vec<String> = columns
        .iter()
        .map(|(n, t)| {
            format!(r#"{{"name":"{n}","type":{t},"default":null}}"#)
                .replace(r#""type":"long","default":null"#, r#""type":"long""#)
        })
        .collect();
    format!(
        r#"{{"type":"record","name":"Envelope","namespace":"bench.public.orders","fields":[
        {{"name":"before","type":["null",{{"type":"record","name":"Value","fields":[{}]}}],"default":null}},
        {{"name":"after","type":["null","Value"],"default":null}},
        {{"name":"source","type":{{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
          {{"name":"version","type":"string"}},{{"name":"connector","type":"string"}},{{"name":"name","type":"string"}},
          {{"name":"ts_ms","type":"long"}},{{"name":"snapshot","type":["string","null"],"default":"false"}},
          {{"name":"db","type":"string"}},{{"name":"sequence","type":["null","string"],"default":null}},
          {{"name":"schema","type":"string"}},{{"name":"table","type":"string"}},
          {{"name":"txId","type":["null","long"],"default":null}},{{"name":"lsn","type":["null","long"],"default":null}},
          {{"name":"xmin","type":["null","long"],"default":null}}]}}}},
        {{"name":"op","type":"string"}},
        {{"name":"ts_ms","type":["null","long"],"default":null}}]}}"#,
        fields.join(",")
    )
}

fn long(b: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        b.push((n as u8) | 0x80);
        n >>= 7;
    }
    b.push(n as u8);
}

fn string(b: &mut Vec<u8>, s: &str) {
    long(b, s.len() as i64);
    b.extend(s.as_bytes());
}

fn some_string(b: &mut Vec<u8>, s: &str) {
    long(b, 1);
    string(b, s);
}

fn row(b: &mut Vec<u8>, i: i64, version: i64) {
    let cities = ["Lisbon", "Seoul", "São Paulo", "Kraków", "Austin"];
    long(b, i);
    long(b, 1);
    long(b, i % 977);
    some_string(b, &format!("customer number {i}"));
    some_string(b, &format!("c{i}@example.com"));
    some_string(b, cities[i as usize % cities.len()]);
    some_string(b, "PT");
    long(b, 0); // status: branch 0 is the string
    string(b, "paid");
    for (scale_value, width) in [(i * 101 % 1_000_000, 4usize), (i * 7_919, 8)] {
        long(b, 1);
        long(b, width as i64);
        b.extend(&scale_value.to_be_bytes()[8 - width..]);
    }
    long(b, 1);
    long(b, i % 50);
    long(b, 1);
    b.push(u8::from(i % 2 == 0));
    long(b, 1);
    b.extend((i as f64 * 0.25).to_le_bytes());
    long(b, 1);
    long(b, 1_700_000_000_000_000 + i);
    long(b, 1);
    long(b, 1_700_000_500_000_000 + i);
    long(b, 1);
    long(b, 19_000 + i % 365);
    if i % 3 == 0 {
        long(b, 0);
    } else {
        some_string(b, "leave at the door");
    }
    long(b, 0);
    long(b, 1);
    b.extend((i as f32).to_le_bytes());
    long(b, 1);
    long(b, 2);
    some_string(b, "vip");
    some_string(b, "eu");
    long(b, 0);
    long(b, version);
}

/// An update carries both images; an insert (`c`, `r`) only `after`.
fn event(i: i64, update: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(512);
    if update {
        long(&mut b, 1);
        row(&mut b, i, 1);
    } else {
        long(&mut b, 0);
    }
    long(&mut b, 1);
    row(&mut b, i, 2);
    for s in ["3.6.1.Final", "postgresql", "bench"] {
        string(&mut b, s);
    }
    long(&mut b, 1_700_000_000_000 + i);
    long(&mut b, 0);
    string(&mut b, "false");
    string(&mut b, "source");
    long(&mut b, 0);
    string(&mut b, "public");
    string(&mut b, "orders");
    long(&mut b, 1);
    long(&mut b, 700 + i);
    long(&mut b, 1);
    long(&mut b, 26_000_000 + i * 64);
    long(&mut b, 0);
    string(&mut b, if update { "u" } else { "c" });
    long(&mut b, 1);
    long(&mut b, 1_700_000_000_100 + i);
    b
}

fn bench(c: &mut Criterion) {
    for update in [false, true] {
        events(c, update);
    }
}

fn events(c: &mut Criterion, update: bool) {
    let text = schema();
    let writer = WriterSchema::parse_text(&text).expect("schema");
    let datums: Vec<Vec<u8>> = (0..ROWS as i64).map(|i| event(i, update)).collect();
    let bytes: usize = datums.iter().map(Vec::len).sum();
    let kind = if update { "updates" } else { "inserts" };
    eprintln!("{ROWS} {kind}, {} bytes on average", bytes / ROWS);
    let direct = AvroBatchDecoder::new(&writer, BATCH).expect("decoder");
    assert!(direct.is_direct());
    let two_pass = AvroBatchDecoder::via_arrow_avro(&writer, BATCH).expect("decoder");

    let mut group = c.benchmark_group(format!("debezium_envelope_20_columns/{kind}"));
    group.throughput(Throughput::Elements(ROWS as u64));
    for (name, mut decoder) in [
        (
            "lakesink: direct decoder + Debezium types -> RecordBatch",
            direct,
        ),
        (
            "lakesink, two-pass: validate + arrow-avro + Debezium types -> RecordBatch",
            two_pass,
        ),
    ] {
        let mut rows = 0;
        for chunk in datums.chunks(BATCH) {
            for d in chunk {
                decoder.push(d).expect("valid datum");
            }
            let batch = decoder.flush().expect("flush").expect("rows");
            // The release build takes its string and offset buffers unchecked: check them all
            // here, where the tests (debug builds) cannot.
            for column in batch.columns() {
                column.to_data().validate_full().expect("valid arrays");
            }
            rows += batch.num_rows();
        }
        assert_eq!(rows, ROWS);
        group.bench_function(name, |b| {
            b.iter(|| {
                for chunk in datums.chunks(BATCH) {
                    for d in chunk {
                        decoder.push(d).expect("push");
                    }
                    black_box(decoder.flush().expect("flush"));
                }
            })
        });
    }
    // Confluent framing: magic byte, 4-byte content id, datum.
    let id = SchemaRef::Id {
        kind: IdKind::ContentId,
        id: 1,
    };
    let framed: Vec<Vec<u8>> = datums
        .iter()
        .map(|d| [&[0u8, 0, 0, 0, 1][..], d].concat())
        .collect();
    let topic = "bench.public.orders";
    let resolver = FixedResolver::new()
        .with(id.clone(), text.clone())
        .registered(id, format!("{topic}-value"));
    for check_artifacts in [true, false] {
        let format = Format::Avro {
            payload_ids: IdKind::ContentId,
            check_artifacts,
        };
        let mut changes = ChangeDecoder::new(resolver.clone(), format, BATCH);
        let no_headers = |_: &str| None;
        let mut offset = 0i64;
        let mut push_all = |changes: &mut ChangeDecoder<FixedResolver>| {
            let mut rows = 0;
            for v in &framed {
                let record = KafkaRecord {
                    topic,
                    partition: 0,
                    offset,
                    timestamp: Some(1_700_000_000_000),
                    key: None,
                    value: Some(v),
                    headers: &no_headers,
                };
                offset += 1;
                // As the consumer calls it: the future only for what needs the registry.
                let pushed = match changes.try_push(record) {
                    Some(pushed) => pushed,
                    None => futures::executor::block_on(changes.push(record)),
                }
                .expect("push");
                rows += pushed
                    .completed
                    .iter()
                    .map(|b| b.rows.num_rows())
                    .sum::<usize>();
            }
            let rest = changes.finish_all().expect("finish");
            rows + rest.iter().map(|b| b.rows.num_rows()).sum::<usize>()
        };
        assert_eq!(push_all(&mut changes), ROWS);
        let check = if check_artifacts { "on" } else { "off" };
        group.bench_function(
            format!("lakesink: ChangeDecoder, topic check {check}"),
            |b| b.iter(|| black_box(push_all(&mut changes))),
        );
    }
    // arrow-avro by itself, as its own benches run it: no check of each datum first (so a bad
    // one can leave half a row in its builders), no Debezium types.
    let mut store = arrow_avro::schema::SchemaStore::new();
    let fingerprint = store
        .register(arrow_avro::schema::AvroSchema::new(text.clone()))
        .expect("schema");
    let mut arrow_avro = arrow_avro::reader::ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(fingerprint)
        .with_decoder_mode(arrow_avro::reader::DecoderMode::UnframedDatum)
        .with_batch_size(BATCH)
        .build_decoder()
        .expect("decoder");
    group.bench_function("arrow-avro 60 alone -> RecordBatch", |b| {
        b.iter(|| {
            for chunk in datums.chunks(BATCH) {
                for d in chunk {
                    arrow_avro.decode(d).expect("decode");
                }
                black_box(arrow_avro.flush().expect("flush"));
            }
        })
    });
    group.bench_function("validate only", |b| {
        b.iter(|| {
            for d in &datums {
                validate(&writer.root, d).expect("valid");
            }
        })
    });
    let avro = apache_avro::Schema::parse_str(&text).expect("apache-avro schema");
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(&avro)
        .build()
        .expect("reader");
    group.bench_function(
        "apache-avro 0.22: GenericDatumReader -> Value (no Arrow)",
        |b| {
            b.iter(|| {
                for d in &datums {
                    black_box(reader.read_value(&mut d.as_slice()).expect("value"));
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
