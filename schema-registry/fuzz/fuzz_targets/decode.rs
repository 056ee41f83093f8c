//! Arbitrary datums against Debezium envelope schemas: each is decoded whole or refused with a
//! typed error, never a panic, and whatever was refused leaves the batch decodable. The whole
//! schema goes through the validator + arrow-avro path; without its three-branch union (which
//! only that path decodes), the direct decoder and that path must accept the same datums and
//! flush equal batches.
#![no_main]

use std::cell::RefCell;

use lakesink_schema_registry::avro::{AvroBatchDecoder, WriterSchema};
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = r#"{"type":"record","name":"Envelope","namespace":"fuzz.public.t","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"long"},
   {"name":"name","type":["null","string"],"default":null},
   {"name":"small","type":["null",{"type":"int","connect.type":"int16"}],"default":null},
   {"name":"price","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"money","type":["null",{"type":"bytes","scale":2,"precision":64,"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"n","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}]}],"default":null},
   {"name":"d","type":["null",{"type":"int","connect.name":"io.debezium.time.Date"}],"default":null},
   {"name":"ts","type":["null",{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
   {"name":"tz","type":["null",{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},
   {"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null},
   {"name":"attrs","type":["null",{"type":"map","values":"long"}],"default":null},
   {"name":"flag","type":["boolean","null"],"default":false},
   {"name":"mood","type":["null",{"type":"enum","name":"Mood","symbols":["sad","ok","happy"]}],"default":null},
   {"name":"f","type":["null","float","double"],"default":null},
   {"name":"fx","type":["null",{"type":"fixed","name":"Four","size":4}],"default":null}
 ]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

/// The schema without the three-branch union.
fn direct_schema() -> String {
    SCHEMA
        .lines()
        .filter(|l| !l.contains("\"f\""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn decoder(schema: &str, direct: bool) -> AvroBatchDecoder {
    let writer = WriterSchema::parse_text(schema).expect("schema");
    let decoder = if direct {
        AvroBatchDecoder::new(&writer, 64)
    } else {
        AvroBatchDecoder::via_arrow_avro(&writer, 64)
    }
    .expect("decoder");
    assert_eq!(decoder.is_direct(), direct);
    decoder
}

thread_local! {
    // Decoders for the whole run, as in the pipeline: refusals must not leak into later rows.
    static MIXED: RefCell<AvroBatchDecoder> = RefCell::new(decoder(SCHEMA, false));
    static DIRECT: RefCell<AvroBatchDecoder> = RefCell::new(decoder(&direct_schema(), true));
    static REFERENCE: RefCell<AvroBatchDecoder> = RefCell::new(decoder(&direct_schema(), false));
}

/// Splits the input into several datums on 0xfe, so one run mixes good and bad ones.
fn datums(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|&b| b == 0xfe).filter(|d| !d.is_empty()).take(64)
}

fuzz_target!(|data: &[u8]| {
    MIXED.with_borrow_mut(|decoder| {
        let accepted = datums(data).filter(|d| decoder.push(d).is_ok()).count();
        let rows = decoder
            .flush()
            .expect("a batch of validated datums always flushes");
        assert_eq!(rows.map_or(0, |b| b.num_rows()), accepted);
    });
    DIRECT.with_borrow_mut(|direct| {
        REFERENCE.with_borrow_mut(|reference| {
            for datum in datums(data) {
                let a = direct.push(datum).map_err(|e| e.to_string());
                let b = reference.push(datum).map_err(|e| e.to_string());
                assert_eq!(a, b, "{datum:02x?}");
            }
            let a = direct.flush().expect("direct flush");
            let b = reference.flush().expect("reference flush");
            assert_eq!(a, b);
        })
    });
});
