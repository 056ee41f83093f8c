//! Avro datums of one writer schema into Arrow record batches.
//!
//! Two engines, one result. Debezium's schemas go through [`DirectDecoder`], which checks and
//! appends each value in one pass. Anything it does not cover goes through the validator, then
//! arrow-avro: arrow-avro can leave half a row in its builders when a datum fails partway,
//! which would poison every good row of the batch, so each datum is validated first and a
//! validated datum always decodes whole.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_avro::reader::{Decoder, DecoderMode, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, SchemaStore};
use arrow_schema::SchemaRef;

use super::direct::DirectDecoder;
use super::error::{DecodeError, internal};
use super::schema::{Node, WriterSchema};
use super::semantic::{self, Semantics};
use super::validate::{Cursor, validate};

/// Where the record lies in the root: the root itself, or one branch of a `["null", record]`
/// root union (Debezium's flattened values can be registered that way).
#[derive(Debug, Clone, Copy)]
enum Root {
    Record,
    UnionBranch { record: usize },
}

/// Data a batch may hold before it counts as full, whatever its rows: the columns' offsets are
/// 32-bit.
const MAX_BATCH_BYTES: usize = 1 << 30;

/// Decodes datums of one writer schema into batches of at most `batch_size` rows.
pub struct AvroBatchDecoder {
    node: Node,
    root: Root,
    engine: Engine,
    /// Chosen once, from the connector the schema names.
    semantics: Semantics,
    /// The batches' schema before and after the semantic types, worked out at the first flush.
    plan: Option<(SchemaRef, SchemaRef)>,
    rows: usize,
    bytes: usize,
    batch_size: usize,
}

enum Engine {
    Direct(DirectDecoder),
    /// The validator, then arrow-avro.
    ArrowAvro(Box<Decoder>),
}

impl std::fmt::Debug for AvroBatchDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroBatchDecoder")
            .field("rows", &self.rows)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl AvroBatchDecoder {
    /// A decoder with the semantics of the connector `schema` names, if any.
    pub fn new(schema: &WriterSchema, batch_size: usize) -> Result<Self, DecodeError> {
        Self::with_semantics(schema, batch_size, Semantics::of_schema(schema, None))
    }

    /// A decoder with the given semantics: a key schema names no connector, so a key takes
    /// its value schema's.
    pub fn with_semantics(
        schema: &WriterSchema,
        batch_size: usize,
        semantics: Semantics,
    ) -> Result<Self, DecodeError> {
        let mut decoder = Self::via_arrow_avro_with(schema, batch_size, semantics)?;
        if let Engine::ArrowAvro(inner) = &decoder.engine {
            let record = match (&decoder.root, &decoder.node) {
                (Root::UnionBranch { record }, Node::Union(branches)) => &branches[*record],
                (_, node) => node,
            };
            match DirectDecoder::new(record, inner.schema()) {
                Some(direct) => decoder.engine = Engine::Direct(direct),
                None => tracing::debug!(
                    schema = %schema.json,
                    "schema has types the one-pass decoder does not build; validating, then arrow-avro"
                ),
            }
        }
        Ok(decoder)
    }

    /// A decoder that always validates each datum, then decodes it with arrow-avro: the path
    /// for schemas the direct decoder does not cover, and its reference in tests and benches.
    pub fn via_arrow_avro(schema: &WriterSchema, batch_size: usize) -> Result<Self, DecodeError> {
        Self::via_arrow_avro_with(schema, batch_size, Semantics::of_schema(schema, None))
    }

    fn via_arrow_avro_with(
        schema: &WriterSchema,
        batch_size: usize,
        semantics: Semantics,
    ) -> Result<Self, DecodeError> {
        let (root, json) = match &schema.root {
            Node::Record { .. } => (Root::Record, schema.json.clone()),
            Node::Union(branches) => {
                let records: Vec<usize> = branches
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| matches!(b, Node::Record { .. }))
                    .map(|(i, _)| i)
                    .collect();
                let only_null_besides = branches.len() == 2 && branches.contains(&Node::Null);
                match (records.as_slice(), only_null_besides) {
                    ([record], true) => (
                        Root::UnionBranch { record: *record },
                        schema.json[*record].clone(),
                    ),
                    _ => {
                        return Err(DecodeError::Schema(
                            "a root union other than [\"null\", record]".into(),
                        ));
                    }
                }
            }
            // A bare key or value (a string key, say): a record of one field has the same
            // datum as the field, so it decodes as a one-column record named `value`.
            _ => (
                Root::Record,
                serde_json::json!({
                    "type": "record",
                    "name": "lakesink_wrapped",
                    "fields": [{"name": "value", "type": schema.json}]
                }),
            ),
        };
        let top_fields = match (&schema.root, root) {
            (Node::Record { fields, .. }, _) => fields.as_slice(),
            (Node::Union(branches), Root::UnionBranch { record }) => match &branches[record] {
                Node::Record { fields, .. } => fields.as_slice(),
                _ => &[],
            },
            (bare, _) => std::slice::from_ref(bare),
        };
        if top_fields
            .iter()
            .any(|f| *f != Node::Null && holds_bare_null(f))
        {
            return Err(DecodeError::Schema(
                "a \"null\" type outside a union below the top-level fields (arrow-avro makes \
                 it a non-nullable column, which Arrow cannot build)"
                    .into(),
            ));
        }
        let mut store = SchemaStore::new();
        let fingerprint = store
            .register(AvroSchema::new(json.to_string()))
            .map_err(|e| DecodeError::Schema(e.to_string()))?;
        let inner = ReaderBuilder::new()
            .with_writer_schema_store(store)
            .with_active_fingerprint(fingerprint)
            .with_decoder_mode(DecoderMode::UnframedDatum)
            .with_batch_size(batch_size.max(1))
            .build_decoder()
            .map_err(|e| DecodeError::Schema(e.to_string()))?;
        let node = if semantics.zoned_timestamps_as_text {
            schema.root.zoned_as_text()
        } else {
            schema.root.clone()
        };
        Ok(Self {
            node,
            root,
            engine: Engine::ArrowAvro(Box::new(inner)),
            semantics,
            plan: None,
            rows: 0,
            bytes: 0,
            batch_size: batch_size.max(1),
        })
    }

    /// The semantics the decoder applies.
    pub fn semantics(&self) -> Semantics {
        self.semantics
    }

    /// Rows waiting for [`AvroBatchDecoder::flush`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn is_full(&self) -> bool {
        self.rows >= self.batch_size || self.bytes >= MAX_BATCH_BYTES
    }

    /// Whether datums are decoded in one pass (the schema is one the direct decoder covers).
    pub fn is_direct(&self) -> bool {
        matches!(self.engine, Engine::Direct(_))
    }

    /// Appends one datum as a row. On error nothing is appended and the decoder stays usable.
    /// Call [`AvroBatchDecoder::flush`] first when it is full.
    pub fn push(&mut self, datum: &[u8]) -> Result<(), DecodeError> {
        if self.is_full() {
            return Err(DecodeError::Internal(
                "push into a full batch; flush first".into(),
            ));
        }
        match &mut self.engine {
            Engine::Direct(direct) => {
                let mut c = Cursor::new(datum);
                if let Root::UnionBranch { record } = self.root
                    && usize::try_from(c.long()?).ok() != Some(record)
                {
                    // Not the record: the null branch if the datum is valid at all.
                    validate(&self.node, datum)?;
                    return Err(DecodeError::NullRoot);
                }
                direct.push(&mut c)?;
            }
            Engine::ArrowAvro(inner) => push_validated(&self.node, self.root, inner, datum)?,
        }
        self.rows += 1;
        self.bytes += datum.len();
        Ok(())
    }

    /// The rows pushed since the last flush, with Debezium's semantic types applied.
    pub fn flush(&mut self) -> Result<Option<RecordBatch>, DecodeError> {
        let rows = std::mem::take(&mut self.rows);
        self.bytes = 0;
        let batch = match &mut self.engine {
            Engine::Direct(_) if rows == 0 => None,
            Engine::Direct(direct) => Some(direct.flush().map_err(internal)?),
            Engine::ArrowAvro(inner) => inner.flush().map_err(internal)?,
        };
        let Some(batch) = batch else {
            return Ok(None);
        };
        let schema = batch.schema();
        let planned = match &self.plan {
            Some((from, to)) if Arc::ptr_eq(from, &schema) || **from == *schema => to.clone(),
            _ => {
                let to = semantic::plan(&schema, self.semantics)?;
                self.plan = Some((schema, to.clone()));
                to
            }
        };
        semantic::apply(batch, &planned, self.semantics).map(Some)
    }
}

/// Whether a `"null"` type stands anywhere in `node` but as a union branch.
fn holds_bare_null(node: &Node) -> bool {
    match node {
        Node::Null => true,
        Node::Array(item) | Node::Map(item) => holds_bare_null(item),
        Node::Union(branches) => branches
            .iter()
            .any(|b| *b != Node::Null && holds_bare_null(b)),
        Node::Record { fields, .. } => fields.iter().any(holds_bare_null),
        _ => false,
    }
}

/// Validates the datum, then decodes it with arrow-avro.
fn push_validated(
    node: &Node,
    root: Root,
    inner: &mut Decoder,
    datum: &[u8],
) -> Result<(), DecodeError> {
    validate(node, datum)?;
    let body = match root {
        Root::Record => datum,
        Root::UnionBranch { record } => {
            // Validated: one small varint, then the branch.
            let (index, len) = branch_index(datum);
            if index != record {
                return Err(DecodeError::NullRoot);
            }
            &datum[len..]
        }
    };
    let used = inner.decode(body).map_err(internal)?;
    if used != body.len() {
        return Err(DecodeError::Internal(format!(
            "decoder used {used} of {} bytes of a valid datum",
            body.len()
        )));
    }
    Ok(())
}

/// The zigzag varint union index at the start of a validated datum, and its length.
fn branch_index(datum: &[u8]) -> (usize, usize) {
    let mut value = 0u64;
    for (i, b) in datum.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let index = (value >> 1) as i64 ^ -((value & 1) as i64);
            return (usize::try_from(index).unwrap_or(usize::MAX), i + 1);
        }
    }
    (usize::MAX, 0)
}
