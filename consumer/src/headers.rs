//! Kafka record headers for the raw layer's optional `__headers` column. The decoder does not
//! see them whole, so they are kept here per partition, by offset, and joined to the decoded
//! batches (whose rows carry `__offset`) when the batches are handed over.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema};
use lakesink_schema_registry::ChangeBatch;
use lakesink_writers::parquet::content::HEADERS;
use rdkafka::message::Headers;

type Pairs = Vec<(String, Option<Vec<u8>>)>;

#[derive(Default)]
pub(crate) struct HeaderLog {
    parts: HashMap<String, HashMap<i32, VecDeque<(i64, Pairs)>>>,
}

impl HeaderLog {
    /// Keeps `msg`'s headers (records without any need no entry).
    pub(crate) fn record<M: crate::kafka::Incoming>(&mut self, msg: &M) {
        let Some(hs) = msg.headers() else { return };
        let pairs: Pairs = hs
            .iter()
            .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
            .collect();
        self.push(msg.topic(), msg.partition(), msg.offset(), pairs);
    }

    fn push(&mut self, topic: &str, partition: i32, offset: i64, pairs: Pairs) {
        let parts = match self.parts.get_mut(topic) {
            Some(p) => p,
            None => self.parts.entry(topic.to_owned()).or_default(),
        };
        parts
            .entry(partition)
            .or_default()
            .push_back((offset, pairs));
    }

    pub(crate) fn forget(&mut self, topic: &str, partition: i32) {
        if let Some(p) = self.parts.get_mut(topic) {
            p.remove(&partition);
        }
    }

    /// `batch` with a `__headers` column. Batches of a partition must come in offset order;
    /// entries of records that made no row (non-data records) are dropped on the way.
    pub(crate) fn attach(&mut self, mut batch: ChangeBatch) -> Result<ChangeBatch, String> {
        let offsets = batch
            .rows
            .column_by_name("__offset")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or("the batch has no __offset column")?
            .clone();
        let mut queue = self
            .parts
            .get_mut(&*batch.topic)
            .and_then(|p| p.get_mut(&batch.partition));
        let pair = Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Binary, true),
        ]);
        let mut list = ListBuilder::new(StructBuilder::new(
            pair.clone(),
            vec![
                Box::new(StringBuilder::new()),
                Box::new(BinaryBuilder::new()),
            ],
        ))
        .with_field(Field::new("item", DataType::Struct(pair), false));
        for &offset in offsets.values() {
            let mut found = None;
            if let Some(q) = queue.as_deref_mut() {
                while q.front().is_some_and(|(o, _)| *o < offset) {
                    q.pop_front();
                }
                if q.front().is_some_and(|(o, _)| *o == offset) {
                    found = q.pop_front().map(|(_, p)| p);
                }
            }
            let items = list.values();
            for (k, v) in found.unwrap_or_default() {
                let key = items
                    .field_builder::<StringBuilder>(0)
                    .ok_or("header key builder")?;
                key.append_value(k);
                let value = items
                    .field_builder::<BinaryBuilder>(1)
                    .ok_or("header value builder")?;
                value.append_option(v);
                items.append(true);
            }
            list.append(true);
        }
        let column: ArrayRef = Arc::new(list.finish());
        let mut fields: Vec<Field> = batch
            .rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(HEADERS, column.data_type().clone(), false));
        let mut columns = batch.rows.columns().to_vec();
        columns.push(column);
        batch.rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| e.to_string())?;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};

    fn batch(offsets: Vec<i64>) -> ChangeBatch {
        let schema = Schema::new(vec![Field::new("__offset", DataType::Int64, false)]);
        ChangeBatch {
            topic: Arc::from("t"),
            partition: 0,
            first_offset: offsets[0],
            last_offset: offsets[offsets.len() - 1],
            key_schema: None,
            value_schema: None,
            shape: lakesink_schema_registry::ValueShape::KeyOnly,
            rows: RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from(offsets))])
                .expect("batch"),
        }
    }

    fn pairs(rows: &RecordBatch, row: usize) -> Vec<(String, Option<Vec<u8>>)> {
        let list = rows
            .column_by_name(HEADERS)
            .expect("__headers")
            .as_list::<i32>();
        let items = list.value(row);
        let items = items.as_struct();
        let keys = items.column(0).as_string::<i32>();
        let values = items.column(1).as_binary::<i32>();
        (0..items.len())
            .map(|i| {
                let v = values.is_valid(i).then(|| values.value(i).to_vec());
                (keys.value(i).to_owned(), v)
            })
            .collect()
    }

    #[test]
    fn headers_are_joined_by_offset() {
        let mut log = HeaderLog::default();
        let h = |k: &str, v: Option<&[u8]>| (k.to_owned(), v.map(<[u8]>::to_vec));
        log.push(
            "t",
            0,
            3,
            vec![h("trace", Some(b"a")), h("trace", Some(b"b"))],
        );
        // Offset 4 made no row (a heartbeat): its entry is skipped.
        log.push("t", 0, 4, vec![h("x", None)]);
        log.push("t", 0, 6, vec![h("empty", None)]);
        let first = log.attach(batch(vec![2, 3])).expect("attach");
        assert_eq!(pairs(&first.rows, 0), vec![]);
        assert_eq!(
            pairs(&first.rows, 1),
            vec![h("trace", Some(b"a")), h("trace", Some(b"b"))]
        );
        let second = log.attach(batch(vec![5, 6])).expect("attach");
        assert_eq!(pairs(&second.rows, 0), vec![]);
        assert_eq!(pairs(&second.rows, 1), vec![h("empty", None)]);
        assert!(log.parts["t"][&0].is_empty());
    }
}
