//! The Kafka side: the consumer group, rebalance notifications and decoding a message.

mod first_start;

use std::sync::{Arc, Mutex};

use anyhow::Context;
use lakesink_config::{KafkaConfig, NonDataAction, NonDataConfig};
use lakesink_model::{Classify, Failure, Fault, System};
use lakesink_schema_registry::{
    ChangeBatch, ChangeDecoder, KafkaRecord, NonData, Pushed, Route, Routes, SchemaResolver,
};
use rdkafka::Timestamp;
use rdkafka::client::OAuthToken;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Headers;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientConfig, ClientContext, Message};
use tracing::{debug, error, info, warn};

use crate::kafka_auth::{self, KafkaAuth};
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::NonDataLabels;
use first_start::FirstStarts;
use lakesink_writers::sink::TopicPartition;

/// Partitions taken away by the group, collected during `recv` and handled by the loop
/// before it looks at the next message.
#[derive(Default, Clone)]
pub(crate) struct Revoked(Arc<Mutex<Vec<TopicPartition>>>);

impl Revoked {
    pub(crate) fn take(&self) -> Vec<TopicPartition> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

pub(crate) struct GroupContext {
    revoked: Revoked,
    telemetry: Option<Arc<Telemetry>>,
    auth: KafkaAuth,
    first_starts: FirstStarts,
}

impl GroupContext {
    /// For lakesink's other clients (the dead-letter producer and reader): the group
    /// consumer's security and tokens, nothing else.
    pub(crate) fn plain(config: &KafkaConfig) -> anyhow::Result<Self> {
        Ok(Self {
            revoked: Revoked::default(),
            telemetry: None,
            auth: KafkaAuth::new(config)?,
            // Assigned by hand, never by the group: no rebalance to start early in.
            first_starts: FirstStarts::new(None),
        })
    }
}

impl ClientContext for GroupContext {
    // lakesink makes its own OAUTHBEARER tokens (kafka_auth).
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        oauthbearer_config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.auth.token(oauthbearer_config)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(all) = transport(&error) {
            // Reported once per outage by the brokers' state, not once per attempt.
            if let Some(t) = &self.telemetry {
                t.brokers.unreachable(reason, all);
            }
            debug!(target: "lakesink::kafka", "librdkafka: {error}: {reason}");
            return;
        }
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition)
        ) {
            // A subscribed pattern that matches no topic yet: Debezium makes topics with their
            // first event. The consuming loop says so once.
            debug!(target: "lakesink::kafka", "librdkafka: {error}: {reason}");
            return;
        }
        self.auth.report(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        forward_log(level, fac, log_message);
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): each partition's end for
    /// the lag, and whether a broker is up.
    fn stats(&self, stats: Statistics) {
        let Some(t) = &self.telemetry else { return };
        if stats.brokers.values().any(|b| b.state == "UP") {
            t.brokers.reachable();
        }
        for (topic, st) in stats.topics {
            for (partition, p) in st.partitions {
                // -1 is librdkafka's internal "unassigned" partition.
                if partition < 0 || !p.desired {
                    continue;
                }
                // Under read_committed the end is the last stable offset.
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                t.partitions.end(&topic, partition, end, p.consumer_lag);
            }
        }
    }
}

/// A Kafka client's error, classified: a refusal (credentials, authorization, a setting, a
/// client librdkafka declared dead) needs an operator; anything else is the cluster being
/// unavailable, which librdkafka or the loop retries.
#[derive(Debug)]
pub(crate) struct KafkaFailure(pub(crate) KafkaError);

// Transparent: it says what librdkafka said.
impl std::fmt::Display for KafkaFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for KafkaFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Classify for KafkaFailure {
    fn fault(&self) -> Fault {
        use RDKafkaErrorCode::*;
        match &self.0 {
            // lakesink's Kafka settings (kafka.properties, kafka.security), and a client
            // librdkafka declared dead (a fatal error: fenced by another member with this
            // kafka.instance-id, an idempotence violation). Retrying does not help.
            KafkaError::ClientConfig(..)
            | KafkaError::ClientCreation(_)
            | KafkaError::Nul(_)
            | KafkaError::MessageConsumptionFatal(_) => Fault::Refused(Some(System::Kafka)),
            e => match e.rdkafka_error_code() {
                // Refused credentials or authorization (a transient authentication failure
                // librdkafka retries by itself never reaches here).
                Some(
                    SaslAuthenticationFailed | TopicAuthorizationFailed | GroupAuthorizationFailed,
                ) => Fault::Refused(Some(System::Kafka)),
                _ => Fault::Unavailable(System::Kafka),
            },
        }
    }
}

/// `e` as the run's error, classified.
pub(crate) fn failure(e: KafkaError) -> Failure {
    Failure::new(KafkaFailure(e))
}

/// Whether `error` is a broker that cannot be reached: `Some(true)` when every one is down.
pub(crate) fn transport(error: &KafkaError) -> Option<bool> {
    use RDKafkaErrorCode::*;
    match error.rdkafka_error_code() {
        Some(AllBrokersDown) => Some(true),
        Some(BrokerTransportFailure | Resolve) => Some(false),
        _ => None,
    }
}

/// librdkafka's log lines under lakesink's Kafka target. Connection failures are repeated on
/// every reconnect attempt and summed up by the brokers' state: debug.
pub(crate) fn forward_log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    use RDKafkaLogLevel::*;
    let transport = matches!(fac, "FAIL" | "BROKERFAIL" | "CONNECT" | "RESOLVE");
    match level {
        _ if transport => debug!(target: "lakesink::kafka", "librdkafka {fac}: {message}"),
        Emerg | Alert | Critical | Error => {
            error!(target: "lakesink::kafka", "librdkafka {fac}: {message}")
        }
        Warning => warn!(target: "lakesink::kafka", "librdkafka {fac}: {message}"),
        Notice | Info => info!(target: "lakesink::kafka", "librdkafka {fac}: {message}"),
        Debug => debug!(target: "lakesink::kafka", "librdkafka {fac}: {message}"),
    }
}

/// Partitions as the log shows them: `topic[partition]`.
fn shown(parts: &[TopicPartition]) -> Vec<String> {
    parts.iter().map(ToString::to_string).collect()
}

fn partitions(list: &rdkafka::TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let parts = partitions(list);
                info!(parts = ?shown(&parts), "partitions revoked");
                if let Some(t) = &self.telemetry {
                    t.partitions.revoked(&parts);
                }
                if let Ok(mut v) = self.revoked.0.lock() {
                    v.extend(parts);
                }
            }
            Rebalance::Assign(list) => {
                // The list is the one librdkafka assigns after this returns.
                self.first_starts.resolve(consumer, list);
                let parts = partitions(list);
                info!(parts = ?shown(&parts), "partitions assigned");
                if let Some(t) = &self.telemetry {
                    t.status.set_assigned();
                    t.partitions.assigned(&parts);
                }
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
        }
    }
}

pub(crate) type GroupConsumer = StreamConsumer<GroupContext>;

/// A consumer in the configured group, subscribed; offsets are stored by the caller only.
pub(crate) fn subscribe(
    config: &KafkaConfig,
    telemetry: Option<Arc<Telemetry>>,
) -> anyhow::Result<(GroupConsumer, Revoked)> {
    let mut cc = fetch_config(config);
    cc.set("group.id", &config.group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        // A regex subscription sees new topics only on a metadata refresh (default 5 min).
        .set("topic.metadata.refresh.interval.ms", "10000")
        // A member that died (SIGKILL, a lost node) holds its partitions until the session
        // times out: 10 s, as Kafka Connect's workers, not librdkafka's 45. Heartbeats come
        // from librdkafka's own thread, so a busy pipeline does not miss them.
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "3000");
    if let Some(id) = &config.instance_id {
        cc.set("group.instance.id", id);
    }
    if telemetry.is_some() {
        // For the lag gauges, fresh within a second, and the brokers' state.
        cc.set("statistics.interval.ms", "1000");
    }
    kafka_auth::configure(config, &mut cc)?;
    for (k, v) in &config.properties {
        cc.set(k, v);
    }
    let revoked = Revoked::default();
    let consumer: GroupConsumer = cc
        .create_with_context(GroupContext {
            revoked: revoked.clone(),
            telemetry,
            auth: KafkaAuth::new(config)?,
            first_starts: FirstStarts::new(cc.get("auto.offset.reset")),
        })
        .map_err(failure)
        .context("creating the Kafka consumer")?;
    let subscription = match &config.topics_regex {
        // librdkafka treats a topic starting with `^` as a regex.
        Some(regex) if regex.starts_with('^') => vec![regex.clone()],
        Some(regex) => vec![format!("^{regex}")],
        None => config.topics.clone(),
    };
    let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(failure)
        .with_context(|| format!("subscribing to {topics:?}"))?;
    info!(brokers = %config.brokers, group = %config.group_id,
        instance = config.instance_id.as_deref().unwrap_or("-"), ?topics, "consuming");
    Ok((consumer, revoked))
}

/// The brokers and the fetch sizes, shared by the group consumer and `tail`'s.
fn fetch_config(config: &KafkaConfig) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.brokers)
        // What librdkafka holds is about one fetch response: it is queued whole, inflated
        // (lz4 about threefold here) plus a 304-byte op per record. A 4 MiB response in
        // 1 MiB per partition kept the raw layer at 221-239 MiB against 315-339 with 16 MiB
        // in 4 MiB, at the same speed, and four partitions still come in each response
        // (docs/raw-layer.md, Smaller fetches, fetched sooner).
        .set("max.partition.fetch.bytes", "1048576")
        .set("fetch.max.bytes", "4194304")
        .set("queued.max.messages.kbytes", "16384")
        // librdkafka keeps fetching until its queue (all partitions together, the queues being
        // forwarded to the consumer's) holds 100,000 messages, whatever the bytes. At 10,000 it
        // fetches again while 10,000 records still wait.
        .set("queued.min.messages", "10000")
        // When the queue is over those bounds, librdkafka looks again after
        // fetch.queue.backoff.ms (1 s by default). A response now holds about a tenth of a
        // second of records, so the next fetch must be asked for within milliseconds: at
        // 100 ms the replica snapshot lost 8-15% with 4 MiB responses.
        .set("fetch.queue.backoff.ms", "10");
    cc
}

/// A consumer outside the configured group, for `tail`: it is given partitions with
/// `assign` and never commits or stores an offset. librdkafka needs a group id for `assign`,
/// so it gets `throwaway_group`, which never joins (no subscription) and never commits.
/// These settings come after `kafka.properties`: no property can make it commit or join.
pub(crate) fn unsubscribed(
    config: &KafkaConfig,
    throwaway_group: &str,
) -> anyhow::Result<GroupConsumer> {
    let mut cc = fetch_config(config);
    kafka_auth::configure(config, &mut cc)?;
    for (k, v) in &config.properties {
        cc.set(k, v);
    }
    cc.remove("group.instance.id");
    cc.set("group.id", throwaway_group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Only when a position falls out of the log while reading (retention).
        .set("auto.offset.reset", "earliest");
    cc.create_with_context(GroupContext::plain(config)?)
        .map_err(failure)
        .context("creating the Kafka consumer")
}

/// The decoder's routes for records that are not rows.
pub(crate) fn routes(config: &NonDataConfig) -> Routes {
    let mut routes = Routes::default();
    for (kind, (name, action)) in NonData::ALL.into_iter().zip(config.actions()) {
        debug_assert_eq!(kind.as_str(), name);
        let route = match action {
            NonDataAction::Skip => Route::Skip,
            NonDataAction::Raw => Route::Keep,
            NonDataAction::Error => Route::Refuse,
        };
        routes.set(kind, route);
    }
    routes
}

/// A consumed record as the decoding side reads it: a message of librdkafka's, or one copied
/// out of it (the pipeline's chunks, which cannot implement rdkafka's `Message`: it has an
/// unsafe method, and the workspace denies unsafe code outside measured hot paths).
pub(crate) trait Incoming: Sync {
    type Headers: Headers + Sync;
    fn key(&self) -> Option<&[u8]>;
    fn payload(&self) -> Option<&[u8]>;
    fn topic(&self) -> &str;
    fn partition(&self) -> i32;
    fn offset(&self) -> i64;
    fn timestamp(&self) -> Timestamp;
    fn headers(&self) -> Option<&Self::Headers>;
}

impl<M: Message + Sync> Incoming for M
where
    M::Headers: Sync,
{
    type Headers = M::Headers;
    fn key(&self) -> Option<&[u8]> {
        Message::key(self)
    }
    fn payload(&self) -> Option<&[u8]> {
        Message::payload(self)
    }
    fn topic(&self) -> &str {
        Message::topic(self)
    }
    fn partition(&self) -> i32 {
        Message::partition(self)
    }
    fn offset(&self) -> i64 {
        Message::offset(self)
    }
    fn timestamp(&self) -> Timestamp {
        Message::timestamp(self)
    }
    fn headers(&self) -> Option<&M::Headers> {
        Message::headers(self)
    }
}

/// Decodes one message; records that are not rows are counted, logged, and yield nothing
/// unless their route keeps them.
pub(crate) async fn push<R: SchemaResolver, M: Incoming>(
    decoder: &mut ChangeDecoder<R>,
    msg: &M,
    telemetry: Option<&Telemetry>,
) -> Result<Vec<ChangeBatch>, lakesink_schema_registry::ChangeError> {
    let headers = msg.headers();
    let header = |name: &str| last_header(headers, name);
    let pushed = decoder
        .push(kafka_record(msg, msg.topic(), &header))
        .await?;
    Ok(pushed_rows(pushed, msg, telemetry))
}

/// [`push`] without a future, for a message whose schemas the decoder knows (see
/// [`ChangeDecoder::try_push`]); None when it needs the registry, or fails (`push` then
/// retries, or says why). `topic` is the message's, read once by the caller.
pub(crate) fn try_push<R: SchemaResolver, M: Incoming>(
    decoder: &mut ChangeDecoder<R>,
    msg: &M,
    topic: &str,
    telemetry: Option<&Telemetry>,
) -> Option<Vec<ChangeBatch>> {
    let headers = msg.headers();
    let header = |name: &str| last_header(headers, name);
    let pushed = decoder.try_push(kafka_record(msg, topic, &header))?.ok()?;
    Some(pushed_rows(pushed, msg, telemetry))
}

/// A header by name, with Kafka's lastHeader semantics, as Apicurio reads them.
fn last_header<'h, H: Headers>(headers: Option<&'h H>, name: &str) -> Option<&'h [u8]> {
    let hs = headers?;
    (0..hs.count())
        .rev()
        .filter_map(|i| hs.try_get(i))
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

fn kafka_record<'m, M: Incoming>(
    msg: &'m M,
    topic: &'m str,
    headers: &'m (dyn Fn(&str) -> Option<&'m [u8]> + Sync),
) -> KafkaRecord<'m> {
    KafkaRecord {
        topic,
        partition: msg.partition(),
        offset: msg.offset(),
        timestamp: msg.timestamp().to_millis(),
        key: msg.key(),
        value: msg.payload(),
        headers,
    }
}

/// The rows a push completed; a record that is not a row is logged and counted.
fn pushed_rows<M: Incoming>(
    pushed: Pushed,
    msg: &M,
    telemetry: Option<&Telemetry>,
) -> Vec<ChangeBatch> {
    if let Some(kind) = pushed.non_data {
        debug!(
            topic = msg.topic(),
            partition = msg.partition(),
            offset = msg.offset(),
            %kind,
            "not a row"
        );
        if let Some(t) = telemetry {
            t.metrics
                .non_data
                .get_or_create(&NonDataLabels {
                    topic: msg.topic().to_owned(),
                    kind: kind.as_str(),
                })
                .inc();
        }
    }
    pushed.completed
}

/// Errors librdkafka recovers from by itself: a subscribed topic that does not exist yet
/// (Debezium creates it with its first event), or a broker that is briefly unreachable.
pub(crate) fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        e.rdkafka_error_code(),
        Some(
            UnknownTopicOrPartition
                | UnknownTopic
                | BrokerTransportFailure
                | AllBrokersDown
                | OperationTimedOut
        )
    )
}

/// The offset tracker's output as rdkafka calls: the only place that stores, commits,
/// pauses and resumes. Each failure is logged: a partition revoked a moment ago refuses its
/// store, and its new owner starts from what was committed; a failed commit is made again
/// by the next one (or the auto-commit).
pub(crate) mod calls {
    use std::collections::HashSet;
    use std::time::Duration;

    use lakesink_writers::failpoint::{self, KAFKA_AFTER_STORE};
    use lakesink_writers::sink::TopicPartition;
    use rdkafka::consumer::{CommitMode, Consumer};
    use rdkafka::error::KafkaError;
    use rdkafka::{Offset, TopicPartitionList};
    use tracing::{debug, info, warn};

    use super::GroupConsumer;
    use crate::offsets::Mark;

    fn list(marks: &[Mark]) -> TopicPartitionList {
        let mut list = TopicPartitionList::new();
        for m in marks {
            let mut elem = list.add_partition(&m.part.topic, m.part.partition);
            // Offset::Offset always has a raw form.
            let _ = elem.set_offset(Offset::Offset(m.offset));
            if let Some(meta) = &m.metadata {
                elem.set_metadata(meta.clone());
            }
        }
        list
    }

    fn parts<'a>(parts: impl IntoIterator<Item = &'a TopicPartition>) -> TopicPartitionList {
        let mut list = TopicPartitionList::new();
        for p in parts {
            list.add_partition(&p.topic, p.partition);
        }
        list
    }

    /// The sink loop's offsets: stores and commits on the group's consumer, from the sink
    /// task (both are safe from any thread; seeks and pauses stay with the consuming task).
    pub(crate) struct Committer(pub(crate) std::sync::Arc<GroupConsumer>);

    impl crate::sinks::Offsets for Committer {
        fn store(&self, marks: &[Mark]) {
            store(&self.0, marks);
        }

        fn commit_stored(&self) {
            commit_stored(&self.0);
        }

        fn commit(&self, marks: &[Mark], sync: bool) {
            commit(&self.0, marks, sync);
        }
    }

    pub(crate) fn store(consumer: &GroupConsumer, marks: &[Mark]) {
        match consumer.store_offsets(&list(marks)) {
            Ok(()) => failpoint::hit(KAFKA_AFTER_STORE),
            Err(e) => warn!(error = %e, "storing offsets"),
        }
    }

    /// Commits what is stored now (everything consumed is durable).
    pub(crate) fn commit_stored(consumer: &GroupConsumer) {
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            debug!(error = %e, "committing offsets on catching up");
        }
    }

    /// Commits what is stored, and waits: the last call of a run.
    pub(crate) fn commit_final(consumer: &GroupConsumer) -> Result<(), KafkaError> {
        match consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => info!("offsets committed, stopped"),
            Err(KafkaError::ConsumerCommit(rdkafka::error::RDKafkaErrorCode::NoOffset)) => {
                info!("stopped")
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Commits marks whose metadata moved while their offset did not.
    pub(crate) fn commit(consumer: &GroupConsumer, marks: &[Mark], sync: bool) {
        let mode = if sync {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = consumer.commit(&list(marks), mode) {
            warn!(error = %e, "committing a sink's own position");
        }
    }

    /// Pauses and resumes so that exactly `want` is paused (stuck sink work).
    pub(crate) fn set_paused(
        consumer: &GroupConsumer,
        paused: &mut HashSet<TopicPartition>,
        want: Vec<TopicPartition>,
        by: &[&'static str],
    ) {
        let want: HashSet<TopicPartition> = want.into_iter().collect();
        let by = by.join(", ");
        let pause = parts(want.difference(paused));
        let resume = parts(paused.difference(&want));
        if pause.count() > 0 {
            match consumer.pause(&pause) {
                Ok(()) => info!(
                    parts = pause.count(),
                    sink = %by,
                    "{by} is stuck on some partitions (a locked table, a slow statement): \
                     they are paused, the others go on"
                ),
                Err(e) => warn!(error = %e, "pausing partitions"),
            }
        }
        if resume.count() > 0 {
            match consumer.resume(&resume) {
                Ok(()) => info!(parts = resume.count(), "moving again: partitions resumed"),
                Err(e) => warn!(error = %e, "resuming partitions"),
            }
        }
        *paused = want;
    }

    /// Resumes revoked partitions as they go, so that if they come back to this member they
    /// are not still paused.
    pub(crate) fn resume_revoked(
        consumer: &GroupConsumer,
        paused: &mut HashSet<TopicPartition>,
        revoked: &[TopicPartition],
    ) {
        let gone: Vec<&TopicPartition> = revoked.iter().filter(|p| paused.remove(*p)).collect();
        if !gone.is_empty()
            && let Err(e) = consumer.resume(&parts(gone))
        {
            debug!(error = %e, "resuming a revoked partition");
        }
    }

    pub(crate) fn seek(
        consumer: &GroupConsumer,
        part: &TopicPartition,
        to: i64,
    ) -> Result<(), KafkaError> {
        consumer.seek(
            &part.topic,
            part.partition,
            Offset::Offset(to),
            Duration::from_secs(10),
        )
    }

    /// Where the consumer is on each partition.
    pub(crate) fn positions(consumer: &GroupConsumer) -> Option<TopicPartitionList> {
        consumer.position().ok()
    }

    /// The metadata committed with a partition's offset, read apart from the runtime.
    pub(crate) async fn committed_metadata(
        consumer: &std::sync::Arc<GroupConsumer>,
        part: &TopicPartition,
    ) -> Option<String> {
        let (c, p) = (consumer.clone(), part.clone());
        let found = tokio::task::spawn_blocking(move || {
            let mut list = TopicPartitionList::new();
            list.add_partition(&p.topic, p.partition);
            let list = c.committed_offsets(list, Duration::from_secs(10))?;
            // rdkafka panics on metadata that is not UTF-8, which another client could write.
            let metadata = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                list.elements().first().map(|e| e.metadata().to_owned())
            }));
            Ok::<_, KafkaError>(metadata.ok().flatten())
        })
        .await;
        match found {
            Ok(Ok(metadata)) => metadata,
            Ok(Err(e)) => {
                warn!(topic = %part.topic, partition = part.partition, error = %e,
                    "reading the committed metadata; each sink starts at Kafka's offset or its own");
                None
            }
            Err(e) => {
                warn!(error = %e, "reading the committed metadata");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_by_the_cluster_or_the_settings_is_no_outage() {
        let fault = |e| KafkaFailure(e).fault();
        use RDKafkaErrorCode::*;
        for code in [
            SaslAuthenticationFailed,
            TopicAuthorizationFailed,
            GroupAuthorizationFailed,
        ] {
            assert_eq!(
                fault(KafkaError::MessageConsumption(code)),
                Fault::Refused(Some(System::Kafka)),
                "{code:?}"
            );
        }
        // How librdkafka reports being fenced by another member with this instance id.
        assert_eq!(
            fault(KafkaError::MessageConsumptionFatal(Fatal)),
            Fault::Refused(Some(System::Kafka))
        );
        assert_eq!(
            fault(KafkaError::ClientCreation("bad property".into())),
            Fault::Refused(Some(System::Kafka)),
            "a setting of the Kafka client's"
        );
        for code in [BrokerTransportFailure, AllBrokersDown, OperationTimedOut] {
            assert_eq!(
                fault(KafkaError::MessageConsumption(code)),
                Fault::Unavailable(System::Kafka),
                "{code:?}"
            );
        }
        let e = failure(KafkaError::MessageConsumption(TopicAuthorizationFailed));
        assert_eq!(
            e.to_string(),
            KafkaError::MessageConsumption(TopicAuthorizationFailed).to_string(),
            "says what librdkafka said"
        );
    }
}
