//! Arbitrary datums against a Debezium envelope schema: each is decoded whole or refused with a
//! typed error, never a panic, and whatever was refused leaves the batch decodable.
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

thread_local! {
    // One decoder for the whole run, as in the pipeline: refusals must not leak into later rows.
    static DECODER: RefCell<AvroBatchDecoder> = RefCell::new(
        AvroBatchDecoder::new(&WriterSchema::parse_text(SCHEMA).expect("schema"), 64).expect("decoder"),
    );
}

fuzz_target!(|data: &[u8]| DECODER.with_borrow_mut(|decoder| {
    let mut accepted = 0;
    // Split the input into several datums on 0xfe 0xfe, so one run mixes good and bad ones.
    for datum in data.split(|&b| b == 0xfe).filter(|d| !d.is_empty()) {
        if decoder.is_full() {
            break;
        }
        if decoder.push(datum).is_ok() {
            accepted += 1;
        }
    }
    let rows = decoder
        .flush()
        .expect("a batch of validated datums always flushes");
    assert_eq!(rows.map_or(0, |b| b.num_rows()), accepted);
}));
