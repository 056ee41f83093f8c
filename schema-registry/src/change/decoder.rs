//! The decoder: each record's sides unframed (or converted from JSON), their writer schemas
//! resolved and checked against the topic, and the record appended to its partition's open
//! batch.

use std::borrow::Cow;
// Per-record lookups: foldhash, not SipHash (keys are topic names and schema ids).
use foldhash::{HashMap, HashSet};
use std::sync::Arc;

use super::batch::{Open, finish};
use super::error::other;
use super::{
    ChangeBatch, ChangeError, ChangeErrorKind, Format, KafkaRecord, Mismatch, Pushed, ValueShape,
};
use crate::avro::{AvroBatchDecoder, Node, Semantics, WriterSchema};
use crate::connect_json;
use crate::framing::{SchemaRef, Side, unframe};
use crate::non_data::{NonData, Route, Routes, is_signal};
use crate::registry::{Registration, RegistryError, ResolvedSchema, SchemaResolver};

/// The registry's answer on where it holds a schema.
type Registrations = Result<Option<Vec<Registration>>, RegistryError>;

/// What a side needs from the registry (see [`ChangeDecoder::asks`]).
struct Asks {
    schema: SchemaRef,
    resolve: bool,
    registrations: bool,
}

/// A side's registry answers, asked for together; None where nothing was asked.
#[derive(Default)]
struct Fetched {
    resolved: Option<Result<Arc<ResolvedSchema>, RegistryError>>,
    registered: Option<Registrations>,
}

/// Asks the registry what `asks` lists, both at once.
async fn fetch<R: SchemaResolver>(resolver: &R, asks: Option<Asks>) -> Fetched {
    let Some(asks) = asks else {
        return Fetched::default();
    };
    let resolve = async {
        if asks.resolve {
            Some(resolver.resolve(&asks.schema).await)
        } else {
            None
        }
    };
    let registrations = async {
        if asks.registrations {
            Some(resolver.registrations(&asks.schema).await)
        } else {
            None
        }
    };
    let (resolved, registered) = tokio::join!(resolve, registrations);
    Fetched {
        resolved,
        registered,
    }
}

/// One side of a record: the schema it names and its Avro datum.
pub(super) struct Split<'a> {
    schema: SchemaRef,
    pub(super) datum: Cow<'a, [u8]>,
    /// The id came from the payload: its kind is `registry.payload-ids`'.
    id_in_payload: bool,
}

/// A writer schema ready to decode, cached by reference.
struct Prepared {
    schema: WriterSchema,
    shape: Result<ValueShape, NonData>,
    /// As a key schema: the kind of non-data record it keys (`ServerNameKey`, …), if any.
    key_kind: Option<NonData>,
    /// The root record's full name (of the record branch of a root union), if any.
    name: Option<String>,
    /// The first (topic, side) this schema was found to belong to: a string compare per
    /// record instead of hashing into [`ChangeDecoder::belongs`].
    belongs: std::sync::OnceLock<(Arc<str>, Side)>,
    /// As a value schema: what its connector's types mean.
    semantics: Semantics,
}

impl Prepared {
    fn new(schema: WriterSchema, fallback: Option<&str>) -> Arc<Self> {
        let shape = classify(&schema.root);
        let key_kind = match &schema.root {
            Node::Record { name, .. } => NonData::of_key_record_name(name),
            _ => None,
        };
        let name = record_name(&schema.root).map(str::to_owned);
        let semantics = Semantics::of_schema(&schema, fallback);
        Arc::new(Self {
            schema,
            shape,
            key_kind,
            name,
            belongs: std::sync::OnceLock::new(),
            semantics,
        })
    }

    fn describe(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| "a schema that is not a record".to_owned())
    }
}

/// Spare decoders kept per schema: enough for a schema's partitions, bounded for the odd
/// topic with very many.
const MAX_SPARE_DECODERS: usize = 64;

/// Decodes records into [`ChangeBatch`]es, holding one open batch per partition.
pub struct ChangeDecoder<R> {
    resolver: R,
    format: Format,
    routes: Routes,
    batch_rows: usize,
    prepared: HashMap<SchemaRef, Arc<Prepared>>,
    open: HashMap<(Arc<str>, i32), Open>,
    /// Topic names seen, so a record costs no string allocation.
    topics: HashSet<Arc<str>>,
    last_topic: Option<Arc<str>>,
    /// Decoders of closed batches, by schema, for the next batch of that schema: building one
    /// means compiling the schema again, and batches close every few hundred rows.
    pub(super) spare: HashMap<SchemaRef, Vec<AvroBatchDecoder>>,
    /// Closed batches not yet handed over: a record that fails after closing a batch must not
    /// take that batch down with it.
    ready: Vec<ChangeBatch>,
    cache: CacheStats,
    /// Decoders built on the two-pass path (validation, then arrow-avro).
    two_pass: u64,
    /// (topic, side, schema) found to belong together: checked once per process.
    belongs: HashSet<(Arc<str>, Side, SchemaRef)>,
    /// The semantics of the last value schema seen with each key schema.
    key_semantics: HashMap<SchemaRef, Semantics>,
    /// The connector for schemas that name none (`kafka.source-connector`).
    source_connector: Option<String>,
}

/// Writer-schema lookups: answered from the decoder's cache, or sent to the resolver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

impl<R: SchemaResolver> ChangeDecoder<R> {
    /// `batch_rows` bounds the rows of one batch.
    pub fn new(resolver: R, format: Format, batch_rows: usize) -> Self {
        Self {
            resolver,
            format,
            routes: Routes::default(),
            batch_rows: batch_rows.max(1),
            prepared: HashMap::default(),
            open: HashMap::default(),
            topics: HashSet::default(),
            last_topic: None,
            spare: HashMap::default(),
            ready: Vec::new(),
            cache: CacheStats::default(),
            two_pass: 0,
            belongs: HashSet::default(),
            key_semantics: HashMap::default(),
            source_connector: None,
        }
    }

    /// The connector that wrote records whose schemas name none (a flattened value has no
    /// `source`), for the types whose meaning depends on it (see [`Semantics`]).
    pub fn with_source_connector(mut self, connector: Option<String>) -> Self {
        self.source_connector = connector;
        self
    }

    /// The semantics of records that name no connector.
    fn fallback_semantics(&self) -> Semantics {
        self.source_connector
            .as_deref()
            .map_or_else(Semantics::unknown, Semantics::of_connector)
    }

    /// How many batch decoders were built for schemas the one-pass decoder does not cover.
    pub fn two_pass_decoders(&self) -> u64 {
        self.two_pass
    }

    /// What to do with each kind of non-data record (all skipped by default).
    pub fn with_routes(mut self, routes: Routes) -> Self {
        self.routes = routes;
        self
    }

    /// Schema lookups so far.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache
    }

    /// One side of a record: the schema it names and its Avro datum (converted from JSON for
    /// JsonConverter topics, whose schema is registered here on first sight).
    fn split<'a>(
        &mut self,
        side: Side,
        bytes: &'a [u8],
        headers: &dyn Fn(&str) -> Option<&'a [u8]>,
    ) -> Result<Split<'a>, ChangeErrorKind> {
        match &self.format {
            &Format::Avro { payload_ids, .. } => {
                let f = unframe(side, bytes, headers, payload_ids)?;
                Ok(Split {
                    schema: f.schema,
                    datum: Cow::Borrowed(f.datum),
                    id_in_payload: f.id_in_payload,
                })
            }
            Format::ConnectJson => self.json(connect_json::parse(bytes)?),
            Format::PlainJson { value_schema } => {
                let record = match (side, value_schema) {
                    (Side::Value, Some(schema)) => {
                        connect_json::Record::with_schema(schema, bytes)?
                    }
                    _ => connect_json::Record::inferred(bytes)?,
                };
                self.json(record)
            }
        }
    }

    fn topic(&mut self, topic: &str) -> Arc<str> {
        // Records come in runs of one partition: the last name asked for, without hashing.
        if let Some(t) = &self.last_topic
            && **t == *topic
        {
            return t.clone();
        }
        let t = match self.topics.get(topic) {
            Some(t) => t.clone(),
            None => {
                let t: Arc<str> = Arc::from(topic);
                self.topics.insert(t.clone());
                t
            }
        };
        self.last_topic = Some(t.clone());
        t
    }

    /// A JSON record's datum; its schema is prepared here the first time it is seen.
    fn json<'a>(&mut self, record: connect_json::Record) -> Result<Split<'a>, ChangeErrorKind> {
        let schema = SchemaRef::Inline {
            fingerprint: record.fingerprint,
        };
        if !self.prepared.contains_key(&schema) {
            let avro = record.avro_schema()?;
            let prepared = Prepared::new(
                WriterSchema::parse_text(&avro.to_string())?,
                self.source_connector.as_deref(),
            );
            self.prepared.insert(schema.clone(), prepared);
        }
        Ok(Split {
            schema,
            datum: Cow::Owned(record.datum()?),
            id_in_payload: false,
        })
    }

    /// `schema` prepared; `fetched` is its resolution when it was asked for already.
    async fn prepare(
        &mut self,
        schema: &SchemaRef,
        fetched: Option<Result<Arc<ResolvedSchema>, RegistryError>>,
    ) -> Result<Arc<Prepared>, ChangeErrorKind> {
        if let Some(p) = self.prepared.get(schema) {
            self.cache.hits += 1;
            return Ok(p.clone());
        }
        self.cache.misses += 1;
        let resolved = match fetched {
            Some(resolved) => resolved?,
            None => self.resolver.resolve(schema).await?,
        };
        let p = Prepared::new(
            WriterSchema::parse(&resolved)?,
            self.source_connector.as_deref(),
        );
        self.prepared.insert(schema.clone(), p.clone());
        Ok(p)
    }

    /// Checks that the registry holds `side`'s schema for `topic` (once per topic, side and
    /// schema), when it can say where it holds it; `fetched` is the registry's answer when it
    /// was asked for already.
    async fn check_belongs(
        &mut self,
        topic: &str,
        side: Side,
        (split, prepared): (&Split<'_>, &Prepared),
        fetched: Option<Registrations>,
    ) -> Result<(), ChangeErrorKind> {
        if self.belongs_settled(topic, side, split, prepared) {
            return Ok(());
        }
        let SchemaRef::Id { kind, id } = split.schema else {
            return Ok(());
        };
        let seen = (self.topic(topic), side, split.schema.clone());
        let name = prepared.name.as_deref();
        let fits = |r: &Registration| belongs_to(&seen.0, side, name, r);
        let registered = match fetched {
            Some(registered) => registered?,
            None => self.resolver.registrations(&split.schema).await?,
        };
        if let Some(registered) = registered
            && !registered.iter().any(fits)
        {
            // The same number as the other kind of id: the likely fix, when it fits.
            let other_kind = if split.id_in_payload {
                let flipped = SchemaRef::Id {
                    kind: other(kind),
                    id,
                };
                self.resolver
                    .registrations(&flipped)
                    .await?
                    .and_then(|rs| rs.into_iter().find(|r| belongs_to(&seen.0, side, None, r)))
            } else {
                None
            };
            return Err(ChangeErrorKind::Mismatch(Box::new(Mismatch::Artifact {
                topic: seen.0.to_string(),
                side,
                schema: split.schema.clone(),
                in_payload: split.id_in_payload,
                name: prepared.describe(),
                registered,
                other_kind,
            })));
        }
        let _ = prepared.belongs.set((seen.0.clone(), side));
        self.belongs.insert(seen);
        Ok(())
    }

    /// Whether the registry is asked where `split`'s schema is registered: for ids in Avro
    /// topics, unless `registry.check-artifacts` is off.
    fn checks_topic(&self, split: &Split<'_>) -> bool {
        matches!(split.schema, SchemaRef::Id { .. })
            && matches!(
                self.format,
                Format::Avro {
                    check_artifacts: true,
                    ..
                }
            )
    }

    /// Whether `side`'s schema needs no registry lookup to belong to `topic`: no check applies
    /// (coordinates name their artifact themselves, inline schemas have none; the check can
    /// be off), or it passed before.
    fn belongs_settled(
        &mut self,
        topic: &str,
        side: Side,
        split: &Split<'_>,
        prepared: &Prepared,
    ) -> bool {
        if !self.checks_topic(split) {
            return true;
        }
        if let Some((t, s)) = prepared.belongs.get()
            && *s == side
            && **t == *topic
        {
            return true;
        }
        let seen = (self.topic(topic), side, split.schema.clone());
        self.belongs.contains(&seen)
    }

    /// Decodes one record. Records of a partition must come in offset order. On error nothing
    /// of the record is kept and earlier rows stay intact.
    pub async fn push<'a>(&mut self, record: KafkaRecord<'a>) -> Result<Pushed, ChangeError> {
        if let Some(done) = self.try_push(record) {
            return done;
        }
        let (key, value) = match self.split_sides(record) {
            Ok(sides) => sides,
            // Signals are plain JSON that no format here decodes: looked for only on failure.
            Err(_) if is_signal(record.value) => {
                return self
                    .not_a_row(NonData::Signal)
                    .map_err(ChangeError::at(record, Side::Value));
            }
            Err(e) => return Err(e),
        };

        // Both sides' schemas, each checked against the topic, before the value's kind
        // decides anything: a wrong id must stop the topic, not have its rows skipped.
        // Boxed: its lookups' futures are kilobytes, and only a new schema needs them.
        let (key_prepared, value_prepared) =
            Box::pin(self.prepare_sides(record, key.as_ref(), value.as_ref())).await?;
        self.push_prepared(record, (key, key_prepared), (value, value_prepared))
    }

    /// [`push`](Self::push) for a record whose schemas are known and checked against its topic
    /// (nearly every record), without a future: the registry is not asked, and a future's
    /// state, kilobytes moved on each call, is not built. None when the record needs the
    /// registry, or fails to split (the full path says why).
    pub fn try_push(&mut self, record: KafkaRecord<'_>) -> Option<Result<Pushed, ChangeError>> {
        let (key, value) = self.split_sides(record).ok()?;
        let value_prepared = match &value {
            Some(v) => Some(self.known(record.topic, Side::Value, v)?),
            None => None,
        };
        let key_prepared = match &key {
            Some(k) => Some(self.known(record.topic, Side::Key, k)?),
            None => None,
        };
        if let (Some(k), Some(kp), Some(v), Some(vp)) =
            (&key, &key_prepared, &value, &value_prepared)
            && let Err(e) = check_key_fits_value(k, kp, v, vp)
        {
            return Some(Err(ChangeError::at(record, Side::Value)(e)));
        }
        self.cache.hits += u64::from(key_prepared.is_some()) + u64::from(value_prepared.is_some());
        Some(self.push_prepared(record, (key, key_prepared), (value, value_prepared)))
    }

    /// A side's prepared schema, when it is cached and known to belong to `topic` (what
    /// [`prepare_side`](Self::prepare_side) would find without the registry).
    fn known(&mut self, topic: &str, side: Side, split: &Split<'_>) -> Option<Arc<Prepared>> {
        let p = self.prepared.get(&split.schema)?.clone();
        self.belongs_settled(topic, side, split, &p).then_some(p)
    }

    /// The rest of a push, once both sides' schemas are prepared and checked.
    fn push_prepared(
        &mut self,
        record: KafkaRecord<'_>,
        (key, key_prepared): (Option<Split<'_>>, Option<Arc<Prepared>>),
        (value, value_prepared): (Option<Split<'_>>, Option<Arc<Prepared>>),
    ) -> Result<Pushed, ChangeError> {
        let at = |side| ChangeError::at(record, side);
        let mut non_data = None;
        if let Some(p) = &value_prepared
            && let Err(kind) = p.shape
        {
            if self.routes.get(kind) != Route::Keep {
                return self.not_a_row(kind).map_err(at(Side::Value));
            }
            non_data = Some(kind);
        }
        // A tombstone keyed like a non-data record is never a delete; it is not kept either
        // (there is no value to keep).
        if value.is_none()
            && let Some(kind) = key_prepared.as_ref().and_then(|p| p.key_kind)
        {
            return self.not_a_row(kind).map_err(at(Side::Key));
        }

        let part = (self.topic(record.topic), record.partition);
        // Nearly every record joins its partition's open batch: one lookup.
        if let Some(open) = self.open.get_mut(&part)
            && open.joins(
                self.batch_rows,
                key.as_ref().map(|k| &k.schema),
                value.as_ref().map(|v| &v.schema),
            )
        {
            open.push_row(record, key.as_ref(), value.as_ref())?;
            return Ok(Pushed {
                completed: std::mem::take(&mut self.ready),
                non_data,
            });
        }
        // It does not: the open batch (if any) closes into `ready`, and a new one starts here.
        if let Some(open) = self.open.remove(&part) {
            let closed = self.close(&part, open).map_err(at(Side::Value))?;
            self.ready.extend(closed);
        }
        let open = self.open_batch(
            record,
            key.as_ref().map(|k| k.schema.clone()),
            key_prepared.as_deref(),
            value.as_ref().map(|v| v.schema.clone()),
            value_prepared.as_deref(),
        )?;
        let open = self.open.entry(part).or_insert(open);
        open.push_row(record, key.as_ref(), value.as_ref())?;
        Ok(Pushed {
            completed: std::mem::take(&mut self.ready),
            non_data,
        })
    }

    /// Both sides of a record, unframed (or converted); the key's error comes first.
    fn split_sides<'a>(
        &mut self,
        record: KafkaRecord<'a>,
    ) -> Result<(Option<Split<'a>>, Option<Split<'a>>), ChangeError> {
        let mut split = |side: Side, bytes: Option<&'a [u8]>| {
            bytes
                .map(|b| self.split(side, b, record.headers))
                .transpose()
                .map_err(ChangeError::at(record, side))
        };
        let key = split(Side::Key, record.key)?;
        Ok((key, split(Side::Value, record.value)?))
    }

    /// Both sides' writer schemas, each checked against the topic, then against each other.
    async fn prepare_sides(
        &mut self,
        record: KafkaRecord<'_>,
        key: Option<&Split<'_>>,
        value: Option<&Split<'_>>,
    ) -> Result<(Option<Arc<Prepared>>, Option<Arc<Prepared>>), ChangeError> {
        // A side's schema and where the registry holds it are independent lookups, and so
        // are the two sides': all are asked at once, one round trip instead of up to six
        // (a topic's first record waits for them, and so does every record after it).
        let value_asks = value.map(|v| self.asks(record.topic, Side::Value, v));
        let key_asks = key.map(|k| self.asks(record.topic, Side::Key, k));
        let (value_fetched, key_fetched) = tokio::join!(
            fetch(&self.resolver, value_asks),
            fetch(&self.resolver, key_asks)
        );
        // Errors in the order of the lookups one by one: the value's schema, its topic
        // check, the key's schema, its check.
        let value_prepared = self
            .prepare_side(record, Side::Value, value, value_fetched)
            .await?;
        let key_prepared = self
            .prepare_side(record, Side::Key, key, key_fetched)
            .await?;
        if let (Some(k), Some(kp), Some(v), Some(vp)) = (key, &key_prepared, value, &value_prepared)
        {
            check_key_fits_value(k, kp, v, vp).map_err(ChangeError::at(record, Side::Value))?;
        }
        Ok((key_prepared, value_prepared))
    }

    /// One side's writer schema, checked against the record's topic.
    async fn prepare_side(
        &mut self,
        record: KafkaRecord<'_>,
        side: Side,
        split: Option<&Split<'_>>,
        fetched: Fetched,
    ) -> Result<Option<Arc<Prepared>>, ChangeError> {
        let Some(split) = split else {
            return Ok(None);
        };
        let p = self
            .prepare(&split.schema, fetched.resolved)
            .await
            .map_err(ChangeError::at(record, side))?;
        self.check_belongs(record.topic, side, (split, &p), fetched.registered)
            .await
            .map_err(ChangeError::at(record, side))?;
        Ok(Some(p))
    }

    /// What the registry must be asked for a side before it can be decoded: its schema,
    /// unless prepared, and where the registry holds it, unless the topic check is settled.
    fn asks(&mut self, topic: &str, side: Side, split: &Split<'_>) -> Asks {
        let checked = self.checks_topic(split);
        let seen = (self.topic(topic), side, split.schema.clone());
        Asks {
            resolve: !self.prepared.contains_key(&split.schema),
            registrations: checked && !self.belongs.contains(&seen),
            schema: seen.2,
        }
    }

    /// A new batch starting at `record`, with decoders for its key and value schemas.
    fn open_batch(
        &mut self,
        record: KafkaRecord<'_>,
        key_schema: Option<SchemaRef>,
        key_prepared: Option<&Prepared>,
        value_schema: Option<SchemaRef>,
        value_prepared: Option<&Prepared>,
    ) -> Result<Open, ChangeError> {
        let shape = match value_prepared {
            Some(p) => p.shape.unwrap_or_else(ValueShape::NonData),
            None => ValueShape::KeyOnly,
        };
        let semantics = self.batch_semantics(value_prepared, key_schema.as_ref());
        let mut decoder = |s: &Option<SchemaRef>, p: Option<&Prepared>| match (s, p) {
            (Some(s), Some(p)) => self.decoder(s, p, semantics).map(Some),
            _ => Ok(None),
        };
        let at = |side| ChangeError::at(record, side);
        let keys = decoder(&key_schema, key_prepared).map_err(|e| at(Side::Key)(e.into()))?;
        let values =
            decoder(&value_schema, value_prepared).map_err(|e| at(Side::Value)(e.into()))?;
        Ok(Open::new(
            record.offset,
            key_schema,
            value_schema,
            shape,
            keys,
            values,
        ))
    }

    /// The semantics of a new batch's decoders. A key schema names no connector: its decoder
    /// takes the value schema's (the last one seen with this key schema, for a tombstone
    /// opening a batch).
    fn batch_semantics(
        &mut self,
        value_prepared: Option<&Prepared>,
        key_schema: Option<&SchemaRef>,
    ) -> Semantics {
        match (value_prepared, key_schema) {
            (Some(p), key) => {
                let semantics = p.semantics;
                if let Some(k) = key {
                    self.key_semantics.insert(k.clone(), semantics);
                }
                semantics
            }
            (None, Some(k)) => self
                .key_semantics
                .get(k)
                .copied()
                .unwrap_or_else(|| self.fallback_semantics()),
            (None, None) => self.fallback_semantics(),
        }
    }

    /// A non-data record that is not kept: skipped, or refused by its route.
    fn not_a_row(&mut self, kind: NonData) -> Result<Pushed, ChangeErrorKind> {
        match self.routes.get(kind) {
            Route::Refuse => Err(ChangeErrorKind::NonData(kind)),
            Route::Skip | Route::Keep => Ok(Pushed {
                completed: std::mem::take(&mut self.ready),
                non_data: Some(kind),
            }),
        }
    }

    /// A decoder for `schema`: a spare one when there is one.
    fn decoder(
        &mut self,
        schema: &SchemaRef,
        prepared: &Prepared,
        semantics: Semantics,
    ) -> Result<AvroBatchDecoder, crate::avro::DecodeError> {
        let spare = self.spare.get_mut(schema).and_then(|spare| {
            let i = spare.iter().position(|d| d.semantics() == semantics)?;
            Some(spare.swap_remove(i))
        });
        match spare {
            Some(d) => Ok(d),
            None => {
                let decoder =
                    AvroBatchDecoder::with_semantics(&prepared.schema, self.batch_rows, semantics)?;
                self.two_pass += u64::from(!decoder.is_direct());
                Ok(decoder)
            }
        }
    }

    /// Closes a batch; its decoders, flushed empty, are kept for the next batch of their schema.
    fn close(
        &mut self,
        part: &(Arc<str>, i32),
        mut open: Open,
    ) -> Result<Option<ChangeBatch>, ChangeErrorKind> {
        let batch = finish(part, &mut open)?;
        for (schema, decoder) in [
            (open.key_schema, open.keys),
            (open.value_schema, open.values),
        ] {
            // A decoder still holding a stray row (a key whose value failed, in a batch closed
            // with no rows) is dropped rather than carry the row into the next batch.
            if let (Some(schema), Some(decoder)) = (schema, decoder)
                && decoder.rows() == 0
            {
                let spare = self.spare.entry(schema).or_default();
                if spare.len() < MAX_SPARE_DECODERS {
                    spare.push(decoder);
                }
            }
        }
        Ok(batch)
    }

    /// Hands over every batch of one partition, the open one closed (on revoke, or before a
    /// flush of the sinks).
    pub fn finish_partition(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<ChangeBatch>, ChangeError> {
        let (mut out, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|b| &*b.topic == topic && b.partition == partition);
        self.ready = rest;
        let part = (Arc::<str>::from(topic), partition);
        if let Some(open) = self.open.remove(&part) {
            let offset = open.last_offset;
            out.extend(self.close(&part, open).map_err(|kind| ChangeError {
                topic: topic.to_owned(),
                partition,
                offset,
                side: Side::Value,
                kind,
            })?);
        }
        Ok(out)
    }

    /// Closes every open batch; with the closed ones not handed over yet.
    pub fn finish_all(&mut self) -> Result<Vec<ChangeBatch>, ChangeError> {
        let parts: Vec<(Arc<str>, i32)> = self.open.keys().cloned().collect();
        let mut out = std::mem::take(&mut self.ready);
        for (topic, partition) in parts {
            out.extend(self.finish_partition(&topic, partition)?);
        }
        Ok(out)
    }
}

/// Whether an artifact (subject) is one the producer of `topic` registers `side`'s schema
/// under, for the strategies Debezium's converters offer: `<topic>-key`/`-value` (Apicurio's
/// TopicIdStrategy, Confluent's TopicNameStrategy, the defaults), `<topic>`
/// (SimpleTopicIdStrategy), the record's name (RecordIdStrategy: the namespace as group and
/// the simple name; Confluent's RecordNameStrategy: the full name) and `<topic>-<full name>`
/// (TopicRecordNameStrategy). A topic renamed by replication (MirrorMaker's `<source>.<topic>`)
/// matches without its first component too.
pub(super) fn belongs_to(topic: &str, side: Side, name: Option<&str>, r: &Registration) -> bool {
    let a = r.artifact.as_str();
    if let Some(name) = name {
        let (namespace, simple) = match name.rsplit_once('.') {
            Some((ns, simple)) => (Some(ns), simple),
            None => (None, name),
        };
        if a == name || (a == simple && r.group.as_deref() == namespace) {
            return true;
        }
    }
    let suffix = match side {
        Side::Key => "-key",
        Side::Value => "-value",
    };
    let replicated = topic
        .split_once('.')
        .map(|(_, t)| t)
        .filter(|t| !t.is_empty());
    [Some(topic), replicated].into_iter().flatten().any(|t| {
        a == t
            || a.strip_prefix(t).is_some_and(|rest| {
                rest == suffix || name.is_some_and(|n| rest.strip_prefix('-') == Some(n))
            })
    })
}

/// Debezium keys each kind of record by its own key schema: a table's rows by the table's
/// key, heartbeats by `ServerNameKey`, schema changes by `SchemaChangeKey`, and so on. A
/// record whose two sides disagree has at least one schema that is not the producer's.
fn check_key_fits_value(
    key: &Split<'_>,
    key_prepared: &Prepared,
    value: &Split<'_>,
    value_prepared: &Prepared,
) -> Result<(), ChangeErrorKind> {
    let fits = match (value_prepared.shape, key_prepared.key_kind) {
        // Notifications: their key is not Debezium's own named schema to go by.
        (Err(NonData::Notification | NonData::Signal), _) => true,
        (Err(kind), key_kind) => key_kind == Some(kind),
        (Ok(_), key_kind) => key_kind.is_none(),
    };
    if fits {
        return Ok(());
    }
    Err(ChangeErrorKind::Mismatch(Box::new(Mismatch::KeyValue {
        key: key.schema.clone(),
        key_name: key_prepared.describe(),
        value: value.schema.clone(),
        value_name: value_prepared.describe(),
        in_payload: value.id_in_payload,
    })))
}

/// The root record's name, or that of the record branch of a root union.
fn record_name(root: &Node) -> Option<&str> {
    match root {
        Node::Record { name, fields: _ } => Some(name.as_str()),
        Node::Union(branches) => branches.iter().find_map(|b| match b {
            Node::Record { name, .. } => Some(name.as_str()),
            _ => None,
        }),
        _ => None,
    }
}

/// Envelope, flattened row, or a record that is not a row at all.
fn classify(root: &Node) -> Result<ValueShape, NonData> {
    let name = record_name(root).unwrap_or_default();
    if let Some(kind) = NonData::of_record_name(name) {
        return Err(kind);
    }
    match name.rsplit('.').next() {
        Some("Envelope") => Ok(ValueShape::Envelope),
        _ => Ok(ValueShape::Flattened),
    }
}
