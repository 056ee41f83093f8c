//! Arbitrary records of a Debezium-like topic (key and envelope, with the SQL Server or the
//! PostgreSQL `source`, tombstones included) through `ChangeDecoder`, then every batch it
//! makes through the raw layer's shaping (envelope and flattened content, tombstones split
//! off) and parquet's `ArrowWriter` (against lakesink's `ParallelWriter`, byte for byte), and
//! through the lake's: Iceberg types, schema evolution against the first batch's table, the
//! rows conformed to the table, a data file and its manifest entry with bounds. A refusal is an error, never a panic; a batch Iceberg can type
//! is written and described.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use lakesink_config::Content;
use lakesink_schema_registry::{
    ChangeBatch, ChangeDecoder, FixedResolver, Format, IdKind, KafkaRecord, SchemaRef,
};
use lakesink_writers::lake::files::{OpenFile, data_file, properties};
use lakesink_writers::lake::types::{conform, evolution, iceberg_schema};
use lakesink_writers::parquet::ParallelWriter;
use lakesink_writers::parquet::content::{shape, shape_apart, tombstones_alone};
use libfuzzer_sys::fuzz_target;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

const KEY: &str = r#"{"type":"record","name":"Key","namespace":"fuzz.dbo.t","fields":[
 {"name":"id","type":"long"},
 {"name":"at","type":{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}}]}"#;

/// The value schema, with the `source` record of `connector`.
fn envelope(connector: &str) -> String {
    format!(
        r#"{{"type":"record","name":"Envelope","namespace":"fuzz.dbo.t","fields":[
 {{"name":"before","type":["null",{{"type":"record","name":"Value","fields":[
   {{"name":"id","type":"long"}},
   {{"name":"at","type":{{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}}}},
   {{"name":"name","type":["null","string"],"default":null}},
   {{"name":"price","type":["null",{{"type":"bytes","scale":4,"precision":19,"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}],"default":null}},
   {{"name":"big","type":["null",{{"type":"bytes","scale":2,"precision":64,"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}],"default":null}},
   {{"name":"n","type":["null",{{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{{"name":"scale","type":"int"}},{{"name":"value","type":"bytes"}}],"connect.name":"io.debezium.data.VariableScaleDecimal"}}],"default":null}},
   {{"name":"d","type":["null",{{"type":"int","connect.name":"io.debezium.time.Date"}}],"default":null}},
   {{"name":"t","type":["null",{{"type":"long","connect.name":"io.debezium.time.NanoTime"}}],"default":null}},
   {{"name":"ts","type":["null",{{"type":"long","connect.name":"io.debezium.time.NanoTimestamp"}}],"default":null}},
   {{"name":"tz","type":["null",{{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}}],"default":null}},
   {{"name":"dur","type":["null",{{"type":"long","connect.name":"io.debezium.time.MicroDuration"}}],"default":null}},
   {{"name":"tags","type":["null",{{"type":"array","items":["null","string"]}}],"default":null}},
   {{"name":"attrs","type":["null",{{"type":"map","values":"long"}}],"default":null}},
   {{"name":"g","type":["null",{{"type":"record","name":"Geometry","namespace":"io.debezium.data.geometry","fields":[{{"name":"wkb","type":"bytes"}},{{"name":"srid","type":["null","int"],"default":null}}],"connect.name":"io.debezium.data.geometry.Geometry"}}],"default":null}},
   {{"name":"f","type":["null","double"],"default":null}},
   {{"name":"b","type":["null","bytes"],"default":null}}
 ]}}],"default":null}},
 {{"name":"after","type":["null","Value"],"default":null}},
 {{"name":"source","type":{{"type":"record","name":"Source","namespace":"io.debezium.connector.{connector}","fields":[
   {{"name":"connector","type":"string"}},{{"name":"ts_ms","type":"long"}},{{"name":"table","type":"string"}}]}}}},
 {{"name":"op","type":"string"}},
 {{"name":"ts_ms","type":["null","long"],"default":null}}]}}"#
    )
}

fn id(n: i64) -> SchemaRef {
    SchemaRef::Id {
        kind: IdKind::ContentId,
        id: n,
    }
}

fn framed(id: i64, datum: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend((id as i32).to_be_bytes());
    out.extend_from_slice(datum);
    out
}

/// Polls a future the fixed resolver never makes wait.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// Through parquet's `ArrowWriter`, and through lakesink's `ParallelWriter` with every write
/// on three threads, both in two writes (the second into a part-filled row group of 3 rows),
/// snappy, with the Arrow schema in the footer and without it (the lake's): the files must be
/// the same bytes.
fn parquet(rows: &arrow_array::RecordBatch) {
    let half = rows.num_rows() / 2;
    let parts = [
        rows.slice(0, half),
        rows.slice(half, rows.num_rows() - half),
    ];
    for skip_arrow_metadata in [false, true] {
        let writer = || {
            let props = WriterProperties::builder()
                .set_max_row_group_row_count(Some(3))
                .set_compression(Compression::SNAPPY)
                .build();
            let options = ArrowWriterOptions::new()
                .with_properties(props)
                .with_skip_arrow_metadata(skip_arrow_metadata);
            ArrowWriter::try_new_with_options(Vec::new(), rows.schema(), options).expect("writer")
        };
        let mut w = writer();
        let mut p = ParallelWriter::new(writer(), rows.schema(), 3)
            .expect("parallel writer")
            .with_min_values(0);
        for part in &parts {
            w.write(part).expect("a shaped batch is writable");
            p.write(part)
                .expect("a shaped batch is writable in parallel");
        }
        let want = w.into_inner().expect("closes");
        let got = p.into_inner().expect("closes in parallel");
        assert!(
            got == want,
            "the parallel writer's file differs from ArrowWriter's"
        );
    }
}

fn write(batch: &ChangeBatch, tables: &mut [Option<iceberg::spec::Schema>; 2]) {
    for (content, table) in [Content::Envelope, Content::Flattened]
        .into_iter()
        .zip(tables)
    {
        if let Ok(rows) = shape(batch, content) {
            parquet(&rows);
        }
        if let Ok(Some(rows)) = tombstones_alone(batch, content) {
            parquet(&rows);
        }
        if let Ok(apart) = shape_apart(batch, content) {
            for rows in apart {
                lake(&rows, table);
            }
        }
    }
}

/// The lake's path: the first batch Iceberg can type makes the table; a later one is checked
/// against it (evolution) and, when it fits as it is, conformed to it and written.
fn lake(rows: &arrow_array::RecordBatch, table: &mut Option<iceberg::spec::Schema>) {
    let Ok(own) = iceberg_schema(&rows.schema()) else {
        return;
    };
    let schema = match table {
        Some(t) => match evolution(&rows.schema(), t.as_struct()) {
            Ok(ev) if ev.is_empty() => t.clone(),
            _ => own,
        },
        None => table.insert(own).clone(),
    };
    let Ok(conformed) = conform(rows, schema.as_struct()) else {
        return;
    };
    let mut file = OpenFile::new(
        conformed.schema(),
        properties(lakesink_config::Codec::Snappy, 3),
    )
    .expect("a conformed batch opens a file");
    file.write(&conformed)
        .expect("a conformed batch is writable");
    let sealed = file.seal().expect("seals");
    let entry = data_file(
        "s3://fuzz/f.parquet".into(),
        &sealed,
        &schema,
        0,
        iceberg::spec::Struct::empty(),
    )
    .expect("a written file has a manifest entry");
    assert_eq!(entry.record_count(), conformed.num_rows() as u64);
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let resolver = FixedResolver::new()
        .with(id(1), KEY)
        .with(id(2), envelope("sqlserver"))
        .with(id(3), envelope("postgresql"));
    let format = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: false,
    };
    let mut dec = ChangeDecoder::new(resolver, format, 1 + usize::from(first % 8));
    let value_id = 2 + i64::from(first >> 7);
    let mut batches = Vec::new();
    let mut offset = 0;
    // Records: [key length][key][value length, 0 for a tombstone][value].
    while let [klen, tail @ ..] = rest {
        let (key, tail) = tail.split_at(usize::from(*klen).min(tail.len()));
        let Some((&vlen, tail)) = tail.split_first() else {
            break;
        };
        let (value, tail) = tail.split_at(usize::from(vlen).min(tail.len()));
        rest = tail;
        let key = framed(1, key);
        let value = (vlen > 0).then(|| framed(value_id, value));
        let pushed = now(dec.push(KafkaRecord {
            topic: "fuzz.dbo.t",
            partition: 0,
            offset,
            timestamp: Some(offset),
            key: Some(&key),
            value: value.as_deref(),
            headers: &|_: &str| None,
        }));
        offset += 1;
        if let Ok(p) = pushed {
            batches.extend(p.completed);
        }
    }
    if let Ok(rest) = dec.finish_all() {
        batches.extend(rest);
    }
    let mut tables = [None, None];
    for b in &batches {
        write(b, &mut tables);
    }
});
