//! `headers = true`: each row of the raw layer carries its Kafka record's headers.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{BASE_TS, Run};
use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use futures::TryStreamExt;
use lakesink_tests::workload::Table;
use lakesink_tests::{Stack, unique};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

#[tokio::test(flavor = "multi_thread")]
async fn rows_carry_their_records_headers() {
    let stack = Stack::from_env();
    let topic = unique("raw-headers");
    let table = Table::create(&stack, &topic, 1).await;
    let s = stack.clone();
    let t = topic.clone();
    tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_brokers)
            .create()
            .expect("producer");
        for id in 0..10i64 {
            // Even rows: a repeated key and a null value; odd rows: no headers at all.
            let mut record = BaseRecord::to(&t);
            let key = table.key(id);
            let value = table.event(id, 'c', 1, BASE_TS + id);
            record = record.key(&key).payload(&value);
            if id % 2 == 0 {
                let id_text = id.to_string();
                let headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "trace",
                        value: Some(id_text.as_bytes()),
                    })
                    .insert(Header {
                        key: "trace",
                        value: Some(&b"again"[..]),
                    })
                    .insert(Header {
                        key: "empty",
                        value: None::<&[u8]>,
                    });
                record = record.headers(headers);
            }
            producer.send(record).map_err(|(e, _)| e).expect("send");
        }
        producer.flush(Duration::from_secs(10)).expect("flush");
    })
    .await
    .expect("produce");

    let run = Run::new(stack, &topic, 1, "flush-size = 10\nheaders = true");
    run.run_to_end(&BTreeMap::from([(0, 10)]));

    let store = run.store();
    let prefix = Path::from(format!("{}/topics", run.prefix));
    let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await.expect("list");
    assert_eq!(metas.len(), 1);
    let bytes = store
        .get(&metas[0].location)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    let mut seen = 0;
    for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)
        .expect("parquet")
        .build()
        .expect("reader")
    {
        let batch = batch.expect("batch");
        let offsets = batch.column_by_name("__offset").expect("__offset");
        let offsets = offsets.as_primitive::<Int64Type>();
        let headers = batch.column_by_name("__headers").expect("__headers");
        let headers = headers.as_list::<i32>();
        for row in 0..batch.num_rows() {
            let id = offsets.value(row);
            let items = headers.value(row);
            let items = items.as_struct();
            let keys = items.column(0).as_string::<i32>();
            let values = items.column(1).as_binary::<i32>();
            let got: Vec<(String, Option<Vec<u8>>)> = (0..items.len())
                .map(|i| {
                    let v = values.is_valid(i).then(|| values.value(i).to_vec());
                    (keys.value(i).to_owned(), v)
                })
                .collect();
            let want = if id % 2 == 0 {
                vec![
                    ("trace".to_owned(), Some(id.to_string().into_bytes())),
                    ("trace".to_owned(), Some(b"again".to_vec())),
                    ("empty".to_owned(), None),
                ]
            } else {
                vec![]
            };
            assert_eq!(got, want, "offset {id}");
            seen += 1;
        }
    }
    assert_eq!(seen, 10);
}
