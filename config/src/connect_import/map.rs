//! Connect keys → lakesink keys, per connector, and the merge of several connectors.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use toml::Value;

use super::{Dropped, ImportError, Input, Options, jdbc_url, parse};

const S3_SINK: &str = "io.confluent.connect.s3.S3SinkConnector";
const CONFLUENT_JDBC_SINK: &str = "io.confluent.connect.jdbc.JdbcSinkConnector";
const DEBEZIUM_JDBC_SINK: &str = "io.debezium.connector.jdbc.JdbcSinkConnector";
const UNWRAP: &str = "io.debezium.transforms.ExtractNewRecordState";
const PARTITIONER_PKG: &str = "io.confluent.connect.storage.partitioner.";

const NO_SMT: &str = "lakesink applies no single message transforms";
const RETRIES: &str = "lakesink retries an unreachable registry, object store or database with capped backoff and no deadline; other errors stop it";
const SOURCE_SETTING: &str = "a source connector setting: no effect in a sink";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    S3,
    ConfluentJdbc,
    DebeziumJdbc,
}

impl Kind {
    fn is_jdbc(self) -> bool {
        matches!(self, Kind::ConfluentJdbc | Kind::DebeziumJdbc)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Topics {
    List(Vec<String>),
    Regex(String),
}

/// An ordered TOML table being built.
#[derive(Debug, Clone, Default)]
struct Section(Vec<(String, Value)>);

impl Section {
    fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn render(&self, out: &mut String) {
        for (k, v) in &self.0 {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
}

/// What one connector config gives.
#[derive(Debug)]
pub(crate) struct Part {
    file: String,
    name: String,
    class: String,
    kind: Kind,
    topics: Topics,
    brokers: Option<String>,
    format: Option<&'static str>,
    registry: Section,
    oauth: Section,
    raw: Section,
    store: Section,
    store_options: Section,
    replica: Section,
    errors: Section,
    dropped: Vec<Dropped>,
    notes: Vec<String>,
}

/// A connector's remaining keys, taken one by one as they are mapped.
struct Cfg<'a> {
    file: &'a str,
    map: BTreeMap<String, String>,
    dropped: Vec<Dropped>,
    notes: Vec<String>,
}

impl<'a> Cfg<'a> {
    fn err(&self, message: impl Into<String>) -> ImportError {
        ImportError::Connector {
            file: self.file.to_owned(),
            message: message.into(),
        }
    }

    fn take(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    /// OAuth client credentials (`[id, secret, scope]` keys) into `[registry.oauth]`; the
    /// secret becomes a reference to `secret_var`.
    fn oauth_client(
        &mut self,
        oauth: &mut Section,
        [id, secret, scope]: [&str; 3],
        secret_var: &str,
    ) {
        if let Some(v) = self.plain(id) {
            oauth.set("client-id", v);
        }
        if let Some(v) = self.take(secret) {
            let r = self.secret(secret, &v, secret_var, "registry.oauth.client-secret");
            oauth.set("client-secret", r);
        }
        if let Some(v) = self.plain(scope) {
            oauth.set("scope", v);
        }
    }

    /// A non-secret value; a config-provider reference (`${file:…}`) cannot be carried.
    fn plain(&mut self, key: &str) -> Option<String> {
        let v = self.take(key)?;
        if has_provider_reference(&v) {
            self.drop(
                key,
                "a config-provider reference in a key lakesink does not resolve references in; set the value in the config",
            );
            return None;
        }
        Some(v)
    }

    fn drop(&mut self, key: &str, reason: impl Into<String>) {
        self.map.remove(key);
        self.dropped.push(Dropped {
            file: self.file.to_owned(),
            key: key.to_owned(),
            reason: reason.into(),
        });
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn int(&mut self, key: &str) -> Result<Option<i64>, ImportError> {
        match self.plain(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.err(format!("`{key}` = {v:?} is not an integer"))),
        }
    }

    fn bool(&mut self, key: &str) -> Result<Option<bool>, ImportError> {
        match self.plain(key) {
            None => Ok(None),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                _ => Err(self.err(format!("`{key}` = {v:?} is not true or false"))),
            },
        }
    }

    fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.map
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Translates a secret for lakesink: a Connect config-provider reference into `env:` or
    /// `file:` where one matches, else a reference to `var` that the user is told to set.
    fn secret(&mut self, key: &str, value: &str, var: &str, lakesink_key: &str) -> String {
        let what = if key.contains(" ") {
            key.to_owned()
        } else {
            format!("the value of `{key}`")
        };
        let fallback = |this: &mut Self, why: String| {
            this.note(format!(
                "{lakesink_key} = \"env:{var}\": set {var} to {what} of {} ({why})",
                this.file
            ));
            format!("env:{var}")
        };
        match provider_reference(value) {
            None => fallback(self, "not copied: secrets are never printed".into()),
            Some((provider, path, name)) => match provider.as_str() {
                "env" => {
                    self.note(format!(
                        "{lakesink_key} = \"env:{name}\": read from the variable {name}, as `{value}` of {} was",
                        self.file
                    ));
                    format!("env:{name}")
                }
                "directory" | "dir" if !path.is_empty() => {
                    let file = format!("{}/{name}", path.trim_end_matches('/'));
                    self.note(format!(
                        "{lakesink_key} = \"file:{file}\": read from that file, as `{value}` of {} was",
                        self.file
                    ));
                    format!("file:{file}")
                }
                "file" => fallback(
                    self,
                    format!(
                        "it came from `{value}`, a key in a properties file; lakesink's `file:` reads a whole file, so a file holding only the secret also works"
                    ),
                ),
                _ => fallback(
                    self,
                    format!("it came from `{value}`: lakesink has no `{provider}` provider"),
                ),
            },
        }
    }
}

/// Whether text holds a config-provider reference, `${provider:…}` (not a placeholder such
/// as `${topic}`).
fn has_provider_reference(text: &str) -> bool {
    text.split("${").skip(1).any(|rest| {
        rest.split('}')
            .next()
            .is_some_and(|inner| inner.contains(':'))
    })
}

/// `${provider:path:key}` or `${provider:key}` → (provider, path, key).
fn provider_reference(value: &str) -> Option<(String, String, String)> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    let (provider, rest) = inner.split_once(':')?;
    let (path, key) = match rest.rsplit_once(':') {
        Some((p, k)) => (p.to_owned(), k.to_owned()),
        None => (String::new(), rest.to_owned()),
    };
    Some((provider.to_owned(), path, key))
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn last_segment(class: &str) -> &str {
    class.rsplit(['.', '$']).next().unwrap_or(class)
}

/// Maps one file.
pub(crate) fn map(input: &Input) -> Result<Part, ImportError> {
    let connector = parse::parse(&input.text).map_err(|message| ImportError::Connector {
        file: input.name.clone(),
        message,
    })?;
    let mut cfg = Cfg {
        file: &input.name,
        map: connector.config,
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    let class = cfg
        .take("connector.class")
        .ok_or_else(|| cfg.err("no `connector.class`"))?;
    let kind = match class.as_str() {
        S3_SINK | "S3SinkConnector" => Kind::S3,
        CONFLUENT_JDBC_SINK => Kind::ConfluentJdbc,
        DEBEZIUM_JDBC_SINK => Kind::DebeziumJdbc,
        other => {
            let what = if other.contains("Source") || other.starts_with("io.debezium.connector.") {
                "a source connector: lakesink replaces sink connectors"
            } else {
                "not a connector lakesink replaces"
            };
            return Err(cfg.err(format!(
                "connector.class {other} is {what} (the Confluent S3 sink {S3_SINK}, the Confluent JDBC sink {CONFLUENT_JDBC_SINK}, the Debezium JDBC sink {DEBEZIUM_JDBC_SINK})"
            )));
        }
    };
    let name = cfg
        .take("name")
        .or(connector.name)
        .unwrap_or_else(|| "(unnamed)".into());
    let mut part = Part {
        file: input.name.clone(),
        name,
        class,
        kind,
        topics: Topics::List(Vec::new()),
        brokers: None,
        format: None,
        registry: Section::default(),
        oauth: Section::default(),
        raw: Section::default(),
        store: Section::default(),
        store_options: Section::default(),
        replica: Section::default(),
        errors: Section::default(),
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    common(&mut cfg, &mut part)?;
    let unwrap = transforms(&mut cfg, kind);
    match kind {
        Kind::S3 => s3(&mut cfg, &mut part, unwrap)?,
        Kind::ConfluentJdbc | Kind::DebeziumJdbc => jdbc(&mut cfg, &mut part)?,
    }
    leftovers(&mut cfg);
    part.dropped = cfg.dropped;
    part.dropped.sort_by(|a, b| a.key.cmp(&b.key));
    part.notes = cfg.notes;
    Ok(part)
}

/// Keys of every sink connector: topics, converters, errors, Connect framework settings.
fn common(cfg: &mut Cfg<'_>, part: &mut Part) -> Result<(), ImportError> {
    if let Some(n) = cfg.plain("tasks.max")
        && n.trim() != "1"
    {
        cfg.drop(
            "tasks.max",
            "lakesink reads with one consumer per process: run more processes with the same kafka.group-id to spread the partitions",
        );
    }
    let topics = cfg.plain("topics").map(|t| split_list(&t));
    let regex = cfg.plain("topics.regex").filter(|r| !r.trim().is_empty());
    part.topics = match (topics, regex) {
        (Some(t), None) if !t.is_empty() => Topics::List(t),
        (None, Some(r)) => Topics::Regex(anchor(&r)),
        (Some(t), Some(_)) if !t.is_empty() => {
            return Err(cfg.err("sets both `topics` and `topics.regex` (Connect rejects that too)"));
        }
        _ => return Err(cfg.err("sets neither `topics` nor `topics.regex`")),
    };
    if let Some(b) = cfg.plain("confluent.topic.bootstrap.servers") {
        part.brokers = Some(b);
    }
    for k in cfg.keys_with_prefix("confluent.") {
        cfg.drop(&k, "Confluent licensing: lakesink needs no license topic");
    }
    converters(cfg, part)?;
    errors(cfg, part)?;
    for k in cfg.keys_with_prefix("consumer.override.") {
        cfg.drop(
            &k,
            "a Java consumer setting: put librdkafka's equivalent in kafka.properties",
        );
    }
    for k in cfg.keys_with_prefix("predicates") {
        cfg.drop(&k, NO_SMT);
    }
    if let Some(h) = cfg.take("header.converter")
        && !h.ends_with("SimpleHeaderConverter")
    {
        cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "header.converter".into(),
            reason: "lakesink reads only the Apicurio id headers, as bytes".into(),
        });
    }
    Ok(())
}

/// Connect's `topics.regex` must match the whole name; librdkafka's matches anywhere, so
/// the imported regex is anchored at both ends.
fn anchor(regex: &str) -> String {
    let r = regex.trim();
    let body = r.strip_prefix('^').unwrap_or(r);
    let body = body.strip_suffix('$').unwrap_or(body);
    if body.contains('|') {
        format!("^({body})$")
    } else {
        format!("^{body}$")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    Apicurio,
    Confluent,
    Json,
}

fn family(class: &str) -> Option<Family> {
    if class.starts_with("io.apicurio.") && class.ends_with("AvroConverter") {
        Some(Family::Apicurio)
    } else if class == "io.confluent.connect.avro.AvroConverter" {
        Some(Family::Confluent)
    } else if class == "org.apache.kafka.connect.json.JsonConverter" {
        Some(Family::Json)
    } else {
        None
    }
}

/// Serializer settings: a sink's converter only reads, so they have no effect in Connect
/// either and are consumed silently.
const SERIALIZER_ONLY: [&str; 13] = [
    "apicurio.registry.auto-register",
    "apicurio.registry.auto-register.if-exists",
    "apicurio.registry.find-latest",
    "apicurio.registry.artifact-resolver-strategy",
    "apicurio.registry.artifact.group-id",
    "apicurio.registry.artifact.artifact-id",
    "apicurio.registry.artifact.version",
    "apicurio.registry.dereference-schema",
    "auto.register.schemas",
    "use.latest.version",
    "latest.compatibility.strict",
    "key.subject.name.strategy",
    "value.subject.name.strategy",
];

/// `key.converter`, `value.converter` and their settings → `kafka.format` and `[registry]`.
fn converters(cfg: &mut Cfg<'_>, part: &mut Part) -> Result<(), ImportError> {
    let original = cfg.map.clone();
    let value_class = cfg.take("value.converter");
    let value_family = match &value_class {
        None => {
            cfg.note(format!(
                "{}: value.converter is not set, so the Connect worker's applies: kafka.format is left at avro; set it if the worker's converter is JsonConverter",
                cfg.file
            ));
            // Guess from the converter settings present.
            if cfg.map.contains_key("value.converter.apicurio.registry.url") {
                Some(Family::Apicurio)
            } else if cfg.map.contains_key("value.converter.schema.registry.url") {
                Some(Family::Confluent)
            } else {
                None
            }
        }
        Some(class) => Some(family(class).ok_or_else(|| {
            cfg.err(format!(
                "value.converter {class}: lakesink reads Avro (the Apicurio or Confluent AvroConverter) and JSON (JsonConverter)"
            ))
        })?),
    };
    if let Some(f) = value_family {
        part.format = Some(match f {
            Family::Json => {
                if cfg.bool("value.converter.schemas.enable")?.unwrap_or(true) {
                    "connect-json"
                } else {
                    "json"
                }
            }
            Family::Apicurio | Family::Confluent => "avro",
        });
        if value_class.is_some() || f != Family::Json {
            converter_settings(cfg, part, "value.converter.", f)?;
        }
    }
    // Keys are decoded with the values' format; a key converter of the same kind, with the
    // same settings, says nothing more.
    let key_class = cfg.take("key.converter");
    let key_family = key_class.as_deref().and_then(family);
    let same = key_class.is_none() || (key_family.is_some() && key_family == value_family);
    if !same {
        let class = key_class.unwrap_or_default();
        cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "key.converter".into(),
            reason: format!(
                "{}: lakesink decodes keys with the values' format (kafka.format, from value.converter)",
                last_segment(&class)
            ),
        });
        for k in cfg.keys_with_prefix("key.converter.") {
            cfg.drop(
                &k,
                "a setting of the key converter, which is not carried over",
            );
        }
        return Ok(());
    }
    for k in cfg.keys_with_prefix("key.converter.") {
        let setting = &k["key.converter.".len()..];
        let value = cfg.map.get(&k).cloned().unwrap_or_default();
        let as_value = original.get(&format!("value.converter.{setting}"));
        let default_same = setting == "schemas.enable"
            && as_value.is_none()
            && value.trim().eq_ignore_ascii_case("true");
        if as_value == Some(&value) || default_same || SERIALIZER_ONLY.contains(&setting) {
            cfg.map.remove(&k);
        } else {
            cfg.drop(
                &k,
                format!(
                    "differs from value.converter.{setting}: lakesink reads keys with the values' converter settings"
                ),
            );
        }
    }
    Ok(())
}

/// A converter's settings under `prefix` (`value.converter.`) → `[registry]`.
fn converter_settings(
    cfg: &mut Cfg<'_>,
    part: &mut Part,
    prefix: &str,
    family: Family,
) -> Result<(), ImportError> {
    let k = |s: &str| format!("{prefix}{s}");
    let secret_var = |s: &str| format!("LAKESINK_REGISTRY_{s}");
    match family {
        Family::Json => {}
        Family::Apicurio => {
            if let Some(url) = cfg.plain(&k("apicurio.registry.url")) {
                part.registry.set("url", url);
            }
            let use_id = cfg.plain(&k("apicurio.registry.use-id"));
            let as_confluent = cfg.bool(&k("apicurio.registry.as-confluent"))?;
            let headers = cfg.bool(&k("apicurio.registry.headers.enabled"))?;
            // 4- or 8-byte ids are both read, whatever the handler.
            cfg.take(&k("apicurio.registry.id-handler"));
            match use_id.as_deref() {
                Some("globalId") => part.registry.set("payload-ids", "global-id"),
                Some("contentId") => part.registry.set("payload-ids", "content-id"),
                Some(other) => {
                    return Err(cfg.err(format!(
                        "`{}` = {other:?}: expected globalId or contentId",
                        k("apicurio.registry.use-id")
                    )));
                }
                // `as-confluent` exists in the 2.x converter only, whose ids are globalIds.
                None if as_confluent == Some(true) => {
                    part.registry.set("payload-ids", "global-id");
                }
                None if headers == Some(false) => cfg.note(format!(
                    "{}: ids are framed in the payload and `apicurio.registry.use-id` is not set: the Apicurio 3.x converter writes contentIds (lakesink's default), the 2.x converter globalIds; with 2.x set registry.payload-ids = \"global-id\"",
                    cfg.file
                )),
                None => {}
            }
            if let Some(enc) = cfg.plain(&k("apicurio.registry.avro.encoding"))
                && !enc.eq_ignore_ascii_case("BINARY")
            {
                cfg.dropped.push(Dropped {
                    file: cfg.file.to_owned(),
                    key: k("apicurio.registry.avro.encoding"),
                    reason: "lakesink decodes Avro's binary encoding only".into(),
                });
            }
            // Basic auth: 3.x names, then 2.x names.
            for (user, pass) in [
                (
                    "apicurio.registry.auth.username",
                    "apicurio.registry.auth.password",
                ),
                ("apicurio.auth.username", "apicurio.auth.password"),
            ] {
                if let Some(u) = cfg.plain(&k(user)) {
                    part.registry.set("username", u);
                }
                if let Some(p) = cfg.take(&k(pass)) {
                    let r = cfg.secret(&k(pass), &p, &secret_var("PASSWORD"), "registry.password");
                    part.registry.set("password", r);
                }
            }
            // OAuth client credentials: 3.x gives the token endpoint, 2.x the Keycloak
            // server and realm.
            let token_url = match cfg.plain(&k("apicurio.registry.auth.service.token.endpoint")) {
                Some(t) => Some(t),
                None => {
                    let server = cfg.plain(&k("apicurio.auth.service.url"));
                    let realm = cfg.plain(&k("apicurio.auth.realm"));
                    match (server, realm) {
                        (Some(s), Some(r)) => Some(format!(
                            "{}/realms/{r}/protocol/openid-connect/token",
                            s.trim_end_matches('/')
                        )),
                        (s, _) => s,
                    }
                }
            };
            if let Some(t) = token_url {
                part.oauth.set("token-url", t);
            }
            for base in ["apicurio.registry.auth.", "apicurio.auth."] {
                cfg.oauth_client(
                    &mut part.oauth,
                    [
                        &k(&format!("{base}client.id")),
                        &k(&format!("{base}client.secret")),
                        &k(&format!("{base}client.scope")),
                    ],
                    &secret_var("CLIENT_SECRET"),
                );
            }
        }
        Family::Confluent => {
            if let Some(urls) = cfg.plain(&k("schema.registry.url")) {
                let mut urls = split_list(&urls).into_iter();
                if let Some(first) = urls.next() {
                    let names_api = first.contains("/apis/");
                    part.registry.set("url", first);
                    if !names_api {
                        part.registry.set("api", "ccompat");
                    }
                }
                if urls.next().is_some() {
                    cfg.dropped.push(Dropped {
                        file: cfg.file.to_owned(),
                        key: format!("{} (URLs after the first)", k("schema.registry.url")),
                        reason: "lakesink asks one registry URL".into(),
                    });
                }
            }
            let source = cfg.plain(&k("basic.auth.credentials.source"));
            let info_key = [
                k("basic.auth.user.info"),
                k("schema.registry.basic.auth.user.info"),
            ]
            .into_iter()
            .find(|key| cfg.map.contains_key(key));
            if let Some(info_key) = info_key {
                let info = cfg.take(&info_key).unwrap_or_default();
                match (source.as_deref(), info.split_once(':')) {
                    (None | Some("USER_INFO"), Some((user, pass)))
                        if !has_provider_reference(&info) =>
                    {
                        part.registry.set("username", user);
                        let r = cfg.secret(
                            &info_key,
                            pass,
                            &secret_var("PASSWORD"),
                            "registry.password",
                        );
                        part.registry.set("password", r);
                    }
                    _ => {
                        cfg.dropped.push(Dropped {
                            file: cfg.file.to_owned(),
                            key: info_key.clone(),
                            reason: "not a literal user:password: set registry.username and registry.password (env:NAME)".into(),
                        });
                    }
                }
            }
            // OAuth client credentials.
            let bearer = cfg.plain(&k("bearer.auth.credentials.source"));
            if bearer.as_deref().is_none_or(|b| b == "OAUTHBEARER") {
                if let Some(t) = cfg.plain(&k("bearer.auth.issuer.endpoint.url")) {
                    part.oauth.set("token-url", t);
                }
                cfg.oauth_client(
                    &mut part.oauth,
                    [
                        &k("bearer.auth.client.id"),
                        &k("bearer.auth.client.secret"),
                        &k("bearer.auth.scope"),
                    ],
                    &secret_var("CLIENT_SECRET"),
                );
            } else if let Some(b) = bearer {
                cfg.dropped.push(Dropped {
                    file: cfg.file.to_owned(),
                    key: k("bearer.auth.credentials.source"),
                    reason: format!(
                        "{b}: lakesink's registry auth is basic or OAuth client credentials"
                    ),
                });
            }
        }
    }
    for s in SERIALIZER_ONLY {
        cfg.take(&k(s));
    }
    for key in cfg.keys_with_prefix(prefix) {
        let reason = if key.contains("ssl.truststore") || key.contains("ssl.keystore") {
            "lakesink trusts extra CAs from a PEM file: registry.ca-file"
        } else {
            "a converter setting with no lakesink equivalent"
        };
        cfg.drop(&key, reason);
    }
    Ok(())
}

fn errors(cfg: &mut Cfg<'_>, part: &mut Part) -> Result<(), ImportError> {
    let tolerance = cfg.take("errors.tolerance");
    let dlq = cfg.take("errors.deadletterqueue.topic.name");
    match (tolerance.as_deref().map(str::trim), dlq) {
        (Some("all"), Some(topic)) if !topic.trim().is_empty() => {
            part.errors.set("tolerance", "all");
            part.errors.set("dead-letter-topic", topic);
            if let Some(h) = cfg.bool("errors.deadletterqueue.context.headers.enable")? {
                part.errors.set("dead-letter-context-headers", h);
            }
        }
        (Some("all"), _) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "errors.tolerance".into(),
            reason: "lakesink tolerates bad records only into a dead-letter topic (errors.dead-letter-topic), never by skipping them; without one it stops at the record, naming its topic, partition and offset".into(),
        }),
        _ => {}
    }
    cfg.take("errors.deadletterqueue.context.headers.enable");
    cfg.take("errors.log.enable");
    if cfg.bool("errors.log.include.messages")? == Some(true) {
        cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "errors.log.include.messages".into(),
            reason:
                "lakesink logs a failing record's topic, partition and offset, never its contents"
                    .into(),
        });
    }
    for k in cfg.keys_with_prefix("errors.deadletterqueue.") {
        cfg.drop(
            &k,
            "the dead-letter topic is created by the broker's defaults (auto.create.topics.enable) or beforehand",
        );
    }
    for k in ["errors.retry.timeout", "errors.retry.delay.max.ms"] {
        if cfg.map.contains_key(k) {
            cfg.drop(k, RETRIES);
        }
    }
    Ok(())
}

/// The unwrap SMT's `drop.tombstones` (default true), when the connector applies it.
#[derive(Debug, Clone, Copy)]
struct Unwrap {
    drop_tombstones: bool,
}

fn transforms(cfg: &mut Cfg<'_>, kind: Kind) -> Option<(Unwrap, String)> {
    let list = cfg.take("transforms").map(|t| split_list(&t))?;
    let mut unwrap = None;
    for alias in list {
        let prefix = format!("transforms.{alias}.");
        let ty = cfg.take(&format!("{prefix}type")).unwrap_or_default();
        if ty != UNWRAP {
            let mut reason = format!("{}: {NO_SMT}", last_segment(&ty));
            if ty.contains("Router") {
                reason.push_str("; tables and paths are named after the topic as read");
            }
            cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: format!("{prefix}*"),
                reason,
            });
            for k in cfg.keys_with_prefix(&prefix) {
                cfg.map.remove(&k);
            }
            continue;
        }
        let drop_tombstones = match cfg.take(&format!("{prefix}drop.tombstones")) {
            Some(v) => !v.trim().eq_ignore_ascii_case("false"),
            None => true,
        };
        for k in cfg.keys_with_prefix(&prefix) {
            let option = &k[prefix.len()..];
            let value = cfg.map.get(&k).cloned().unwrap_or_default();
            let harmless = kind.is_jdbc()
                && ((option == "delete.handling.mode" && value != "rewrite")
                    || (option == "delete.tombstone.handling.mode"
                        && !value.starts_with("rewrite")));
            if harmless {
                cfg.map.remove(&k);
                continue;
            }
            let reason = if kind.is_jdbc() {
                "lakesink applies change events itself: replica tables hold the source's columns, deletes follow replica.delete-enabled"
            } else {
                "lakesink's flattened rows always carry __op, __deleted and __source_ts_ms, whatever the SMT's options"
            };
            cfg.drop(&k, reason);
        }
        unwrap = Some((Unwrap { drop_tombstones }, alias));
    }
    unwrap
}

/// A field path as the S3 sink saw it (in the unwrapped row when the SMT ran) → a path in
/// the change event, as lakesink reads it.
fn event_path(field: &str, unwrapped: bool) -> String {
    if !unwrapped {
        return field.to_owned();
    }
    match field {
        "__source_ts_ms" => "source.ts_ms".into(),
        "__ts_ms" => "ts_ms".into(),
        "__op" => "op".into(),
        f => match f.strip_prefix("__source_") {
            Some(s) => format!("source.{s}"),
            None => format!("after.{f}"),
        },
    }
}

fn s3(
    cfg: &mut Cfg<'_>,
    part: &mut Part,
    unwrap: Option<(Unwrap, String)>,
) -> Result<(), ImportError> {
    let bucket = cfg
        .plain("s3.bucket.name")
        .ok_or_else(|| cfg.err("no `s3.bucket.name`"))?;
    part.raw.set("url", format!("s3://{bucket}"));
    if let Some(dir) = cfg.plain("topics.dir")
        && dir != "topics"
    {
        part.raw.set("topics-dir", dir);
    }
    // The key layout: delimiters and the offset's padding.
    let dir_delim = cfg.plain("directory.delim").unwrap_or_else(|| "/".into());
    let file_delim = cfg.plain("file.delim").unwrap_or_else(|| "+".into());
    let pad = cfg.int("filename.offset.zero.pad.width")?.unwrap_or(10);
    if dir_delim != "/" || file_delim != "+" || pad != 10 {
        let offset = if pad == 10 {
            "{start-offset}".to_owned()
        } else {
            format!("{{start-offset:{pad}}}")
        };
        part.raw.set(
            "file-key",
            format!(
                "{{topics-dir}}{d}{{topic}}{d}{{encoded}}{d}{{topic}}{f}{{partition}}{f}{offset}{{ext}}",
                d = dir_delim,
                f = file_delim
            ),
        );
    }
    // Partitioning.
    let partitioner = cfg.plain("partitioner.class");
    let short = partitioner
        .as_deref()
        .map(|p| p.trim_start_matches(PARTITIONER_PKG));
    let mut time = false;
    match short {
        None | Some("DefaultPartitioner") => {}
        Some("TimeBasedPartitioner") => {
            part.raw.set("partitioner", "time");
            time = true;
        }
        Some(fixed @ ("HourlyPartitioner" | "DailyPartitioner")) => {
            part.raw.set("partitioner", "time");
            time = true;
            let (format, ms) = if fixed == "HourlyPartitioner" {
                ("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH", 3_600_000)
            } else {
                ("'year'=YYYY/'month'=MM/'day'=dd", 86_400_000)
            };
            part.raw.set("path-format", format);
            part.raw.set("partition-duration-ms", ms as i64);
            for k in ["path.format", "partition.duration.ms"] {
                if cfg.map.contains_key(k) {
                    cfg.drop(k, format!("ignored by {fixed}, which has its own"));
                }
            }
        }
        Some("FieldPartitioner") => part.raw.set("partitioner", "field"),
        Some(_) => {
            let class = partitioner.clone().unwrap_or_default();
            cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: "partitioner.class".into(),
                reason: format!(
                    "{class}: a custom partitioner; lakesink has default, time and field partitioners (the default one is used)"
                ),
            });
        }
    }
    let unwrapped = unwrap.is_some();
    if let Some(f) = cfg.plain("path.format") {
        part.raw
            .set("path-format", f.trim_end_matches('/').to_owned());
    }
    if let Some(ms) = cfg.int("partition.duration.ms")?
        && ms > 0
    {
        part.raw.set("partition-duration-ms", ms);
    }
    if let Some(fields) = cfg.plain("partition.field.name") {
        let fields: Vec<Value> = split_list(&fields)
            .iter()
            .map(|f| Value::String(event_path(f, unwrapped)))
            .collect();
        part.raw.set("partition-fields", Value::Array(fields));
    }
    if let Some(tz) = cfg.plain("timezone")
        && !tz.is_empty()
        && tz != "UTC"
    {
        part.raw.set("timezone", tz);
    }
    if let Some(locale) = cfg.plain("locale")
        && !locale.is_empty()
    {
        if !locale.to_ascii_lowercase().starts_with("en") {
            cfg.note(format!(
                "{}: locale {locale}: lakesink writes month and day names (MMM, EEE) in English only; numeric path formats are unaffected",
                cfg.file
            ));
        }
        part.raw.set("locale", locale);
    }
    let extractor = cfg.plain("timestamp.extractor");
    match extractor.as_deref() {
        // Connect's default is the wall clock.
        None if time => part.raw.set("timestamp", "wallclock"),
        None => {}
        Some("Wallclock") => part.raw.set("timestamp", "wallclock"),
        Some("Record") => part.raw.set("timestamp", "record"),
        Some("RecordField") => {
            part.raw.set("timestamp", "field");
            let field = cfg.plain("timestamp.field").unwrap_or_else(|| "timestamp".into());
            part.raw.set("timestamp-field", event_path(&field, unwrapped));
        }
        Some(other) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "timestamp.extractor".into(),
            reason: format!(
                "{other}: a custom extractor; lakesink has Record, RecordField and Wallclock (Record is used)"
            ),
        }),
    }
    if cfg.map.contains_key("timestamp.field") {
        cfg.drop(
            "timestamp.field",
            "only read with timestamp.extractor = RecordField",
        );
    }
    // Rotation.
    if let Some(n) = cfg.int("flush.size")? {
        if n < 1 {
            return Err(cfg.err(format!("`flush.size` = {n}: must be at least 1")));
        }
        part.raw.set("flush-size", n);
    }
    if let Some(ms) = cfg.int("rotate.interval.ms")?
        && ms > 0
    {
        part.raw.set("rotate-interval-ms", ms);
        if !time {
            cfg.note(format!(
                "{}: rotate.interval.ms is ignored by the S3 sink without a time-based partitioner; lakesink applies it (rotate-interval-ms)",
                cfg.file
            ));
        }
    }
    if let Some(ms) = cfg.int("rotate.schedule.interval.ms")?
        && ms > 0
    {
        part.raw.set("rotate-schedule-interval-ms", ms);
    }
    // Content.
    if let Some((u, alias)) = &unwrap {
        part.raw.set("content", "flattened");
        cfg.note(format!(
            "{}: transforms.{alias} (ExtractNewRecordState) → raw.content = \"flattened\": the row image as columns, with __op, __deleted and __source_ts_ms",
            cfg.file
        ));
        if u.drop_tombstones {
            part.raw.set("tombstones", "skip");
        }
    }
    match cfg.plain("behavior.on.null.values").as_deref().map(str::to_ascii_lowercase) {
        None => {}
        Some(b) if b == "ignore" => part.raw.set("tombstones", "skip"),
        Some(b) if b == "write" && part.raw.get("tombstones").is_none() => {
            part.raw.set("tombstones", "keep");
        }
        Some(b) if b == "write" => {}
        Some(_) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "behavior.on.null.values".into(),
            reason: "lakesink never stops at a tombstone: it writes it as a key-only row (tombstones = \"keep\") or skips it (\"skip\")".into(),
        }),
    }
    // Format.
    match cfg.plain("format.class") {
        None => {}
        Some(f) if f.ends_with("ParquetFormat") => {}
        Some(f) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "format.class".into(),
            reason: format!("{}: lakesink writes Parquet only", last_segment(&f)),
        }),
    }
    if let Some(codec) = cfg.plain("parquet.codec") {
        match codec.to_ascii_lowercase().as_str() {
            c @ ("snappy" | "gzip" | "zstd" | "lz4") => {
                if c != "snappy" {
                    part.raw.set("codec", c);
                }
            }
            "none" | "uncompressed" => part.raw.set("codec", "none"),
            other => cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: "parquet.codec".into(),
                reason: format!(
                    "{other}: lakesink writes snappy, gzip, zstd, lz4 or none (snappy is used)"
                ),
            }),
        }
    }
    if let Some(p) = cfg.int("s3.part.size")? {
        part.raw.set("part-size-bytes", p);
    }
    match cfg.plain("schema.compatibility").as_deref() {
        None | Some("NONE") => {}
        Some(c) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "schema.compatibility".into(),
            reason: format!(
                "{c}: lakesink never projects records to another schema version; each writer schema gets its own file in a segment"
            ),
        }),
    }
    match cfg.plain("storage.class") {
        None => {}
        Some(s) if s.ends_with("S3Storage") => {}
        Some(s) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "storage.class".into(),
            reason: format!("{s}: lakesink writes to S3 through its own client"),
        }),
    }
    // The object store.
    match cfg.plain("s3.region") {
        Some(r) => part.store.set("region", r),
        // The S3 sink's default.
        None => part.store.set("region", "us-west-2"),
    }
    if let Some(url) = cfg.plain("store.url") {
        if url.starts_with("http://") {
            part.store.set("endpoint", url);
            part.store.set("allow-http", true);
        } else {
            part.store.set("endpoint", url);
        }
    }
    if cfg.bool("s3.path.style.access.enabled")? == Some(false) {
        part.store.set("virtual-hosted", true);
    }
    if let Some(id) = cfg.take("aws.access.key.id") {
        if has_provider_reference(&id) {
            cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: "aws.access.key.id".into(),
                reason: "a config-provider reference: set raw.store.access-key-id (or LAKESINK__RAW__STORE__ACCESS_KEY_ID)".into(),
            });
        } else {
            part.store.set("access-key-id", id);
        }
    }
    if let Some(s) = cfg.take("aws.secret.access.key") {
        let r = cfg.secret(
            "aws.secret.access.key",
            &s,
            "LAKESINK_RAW_SECRET_ACCESS_KEY",
            "raw.store.secret-access-key",
        );
        part.store.set("secret-access-key", r);
    }
    if let Some(sse) = cfg.plain("s3.ssea.name")
        && !sse.is_empty()
    {
        part.store_options.set("aws_server_side_encryption", sse);
    }
    if let Some(kms) = cfg.plain("s3.sse.kms.key.id")
        && !kms.is_empty()
    {
        part.store_options.set("aws_sse_kms_key_id", kms);
    }
    if cfg.map.contains_key("s3.credentials.provider.class") {
        cfg.drop(
            "s3.credentials.provider.class",
            "lakesink takes S3 credentials from raw.store or the AWS environment and instance-metadata chain",
        );
    }
    for k in ["s3.part.retries", "s3.retry.backoff.ms", "retry.backoff.ms"] {
        if cfg.map.contains_key(k) {
            cfg.drop(k, RETRIES);
        }
    }
    for k in [
        "s3.elastic.buffer.enable",
        "s3.elastic.buffer.init.capacity",
    ] {
        if cfg.map.contains_key(k) {
            cfg.drop(
                k,
                "lakesink streams row groups into parts; memory is bounded by raw.memory-budget-bytes",
            );
        }
    }
    for k in ["store.kafka.keys", "store.kafka.headers"] {
        if cfg.bool(k)? == Some(true) {
            cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: k.into(),
                reason: "no sidecar files: the key is a column of every row (content = \"envelope\"), headers are not stored".into(),
            });
        }
    }
    if let Some(c) = cfg.plain("s3.compression.type")
        && c != "none"
    {
        cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "s3.compression.type".into(),
            reason: "ignored by the S3 sink for Parquet (parquet.codec compresses)".into(),
        });
    }
    Ok(())
}

fn jdbc(cfg: &mut Cfg<'_>, part: &mut Part) -> Result<(), ImportError> {
    let kind = part.kind;
    let dz = kind == Kind::DebeziumJdbc;
    let user_key = if dz {
        "connection.username"
    } else {
        "connection.user"
    };
    let url = cfg
        .plain("connection.url")
        .ok_or_else(|| cfg.err("no `connection.url`"))?;
    let user = cfg.plain(user_key);
    let pg = jdbc_url::convert(&url, user.as_deref())
        .map_err(|e| cfg.err(format!("connection.url: {e}")))?;
    part.replica.set("url", pg.url);
    for (k, reason) in pg.dropped {
        cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: k,
            reason,
        });
    }
    let password = cfg.take("connection.password");
    let (pw_key, pw) = match (pg.password, password) {
        (Some(p), _) => ("the password in `connection.url`", Some(p)),
        (None, Some(p)) => ("connection.password", Some(p)),
        (None, None) => ("", None),
    };
    if let Some(p) = pw {
        let r = cfg.secret(pw_key, &p, "LAKESINK_REPLICA_PASSWORD", "replica.password");
        part.replica.set("password", r);
    }
    if let Some(schema) = pg.current_schema {
        part.replica.set("default-schema", schema);
    }
    // Table names: Confluent substitutes the topic as is and splits on dots; Debezium's
    // default naming strategy first replaces the topic's dots with underscores.
    let format_keys: &[&str] = if dz {
        &["collection.name.format", "table.name.format"]
    } else {
        &["table.name.format"]
    };
    for k in format_keys {
        if let Some(f) = cfg.plain(k) {
            part.replica.set("table-name-format", f);
        }
    }
    if dz {
        for k in ["collection.naming.strategy", "table.naming.strategy"] {
            match cfg.plain(k) {
                None => {}
                Some(s) if s.ends_with("DefaultCollectionNamingStrategy") => {}
                Some(s) if s.ends_with("PassthroughCollectionNamingStrategy") => {
                    part.replica.set("dots-to-underscores", false);
                }
                Some(s) => cfg.dropped.push(Dropped {
                    file: cfg.file.to_owned(),
                    key: k.into(),
                    reason: format!(
                        "{s}: a custom naming strategy; lakesink substitutes table-name-format with dots-to-underscores"
                    ),
                }),
            }
        }
    } else {
        part.replica.set("dots-to-underscores", false);
    }
    // Keys.
    let (mode_key, fields_key) = if dz {
        ("primary.key.mode", "primary.key.fields")
    } else {
        ("pk.mode", "pk.fields")
    };
    match cfg.plain(mode_key).as_deref().map(str::to_ascii_lowercase) {
        None => {}
        Some(m) if m == "record_key" => part.replica.set("pk-mode", "record-key"),
        Some(m) if m == "record_value" => part.replica.set("pk-mode", "record-value"),
        Some(m) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: mode_key.into(),
            reason: format!(
                "{m}: lakesink keys rows by the record key (record_key) or value fields (record_value); record_key is used"
            ),
        }),
    }
    if let Some(fields) = cfg.plain(fields_key) {
        let list: Vec<Value> = split_list(&fields).into_iter().map(Value::String).collect();
        if !list.is_empty() {
            part.replica.set("pk-fields", Value::Array(list));
        }
    }
    // What is applied.
    match cfg
        .plain("insert.mode")
        .as_deref()
        .map(str::to_ascii_lowercase)
    {
        None => {}
        Some(m) if m == "upsert" => {}
        Some(m) => cfg.dropped.push(Dropped {
            file: cfg.file.to_owned(),
            key: "insert.mode".into(),
            reason: format!(
                "{m}: lakesink always upserts, so a replayed record converges instead of failing"
            ),
        }),
    }
    // Connect's default is false for both.
    let delete = cfg.bool("delete.enabled")?.unwrap_or(false);
    part.replica.set("delete-enabled", delete);
    if dz {
        if cfg.bool("truncate.enabled")? == Some(true) {
            part.replica.set("truncate-enabled", true);
        }
        // `none` (the default) creates and alters nothing; `basic` both.
        match cfg.plain("schema.evolution").as_deref() {
            None | Some("none") => {
                part.replica.set("auto-create", false);
                part.replica.set("schema-evolution", "none");
            }
            Some("basic") => {
                part.replica.set("auto-create", true);
                part.replica.set("schema-evolution", "basic");
            }
            Some("validate-only") => {
                part.replica.set("auto-create", false);
                part.replica.set("schema-evolution", "none");
                cfg.note(format!(
                    "{}: schema.evolution = validate-only → auto-create = false, schema-evolution = \"none\": a missing table or column fails at its first write rather than at startup",
                    cfg.file
                ));
            }
            Some(other) => {
                return Err(cfg.err(format!(
                    "`schema.evolution` = {other:?}: expected none, basic or validate-only"
                )));
            }
        }
        if let Some(max) = cfg.int("connection.pool.max_size")? {
            part.replica.set("pool-size", max);
        }
        for k in cfg.keys_with_prefix("connection.pool.") {
            cfg.drop(&k, "lakesink's pool has one setting, replica.pool-size");
        }
    } else {
        part.replica
            .set("auto-create", cfg.bool("auto.create")?.unwrap_or(false));
        let evolve = cfg.bool("auto.evolve")?.unwrap_or(false);
        part.replica
            .set("schema-evolution", if evolve { "basic" } else { "none" });
    }
    if let Some(n) = cfg.int("batch.size")? {
        part.replica.set("batch-max-rows", n);
    }
    match cfg.plain("dialect.name") {
        None => {}
        Some(d) if d.starts_with("PostgreSql") || d.starts_with("Postgres") => {}
        Some(d) => {
            return Err(cfg.err(format!(
                "dialect.name {d}: lakesink's replica is PostgreSQL"
            )));
        }
    }
    let retries: &[&str] = if dz {
        &[
            "flush.max.retries",
            "flush.retry.delay.ms",
            "connection.attempts",
            "connection.backoff.ms",
        ]
    } else {
        &[
            "max.retries",
            "retry.backoff.ms",
            "connection.attempts",
            "connection.backoff.ms",
        ]
    };
    for k in retries {
        if cfg.map.contains_key(*k) {
            cfg.drop(k, RETRIES);
        }
    }
    for k in [
        "fields.whitelist",
        "field.include.list",
        "field.exclude.list",
    ] {
        if cfg.map.contains_key(k) {
            cfg.drop(k, "lakesink replicates every column");
        }
    }
    for k in ["db.timezone", "use.time.zone", "database.time_zone"] {
        if let Some(tz) = cfg.plain(k)
            && tz != "UTC"
        {
            cfg.dropped.push(Dropped {
                file: cfg.file.to_owned(),
                key: k.into(),
                reason: "lakesink writes instants as timestamptz and local times as written".into(),
            });
        }
    }
    Ok(())
}

/// Whatever no mapping took.
fn leftovers(cfg: &mut Cfg<'_>) {
    let keys: Vec<String> = cfg.map.keys().cloned().collect();
    for k in keys {
        let source_prefixes = [
            "schema.history.internal.",
            "schema.name.adjustment.mode",
            "database.",
            "topic.prefix",
            "topic.creation.",
            "snapshot.",
            "table.include.list",
            "plugin.name",
            "slot.name",
            "publication.",
        ];
        let reason = if source_prefixes.iter().any(|p| k.starts_with(p)) {
            SOURCE_SETTING
        } else if k.starts_with("transforms.") {
            "belongs to no transform listed in `transforms`"
        } else {
            "no lakesink equivalent"
        };
        cfg.drop(&k, reason);
    }
}

/// All connectors, as one config.
pub(crate) struct Merged {
    brokers: String,
    topics: Topics,
    format: Option<&'static str>,
    registry: Section,
    oauth: Section,
    raw: Option<(Section, Section, Section)>,
    replica: Option<Section>,
    errors: Section,
    pub(crate) dropped: Vec<Dropped>,
    pub(crate) notes: Vec<String>,
    pub(crate) sources: Vec<(String, String, String)>,
}

pub(crate) fn merge(parts: Vec<Part>, options: &Options) -> Result<Merged, ImportError> {
    let first = &parts[0];
    let conflict = |what: &str, a: &Part, av: String, b: &Part, bv: String| {
        ImportError::Conflict(format!(
            "{} and {} disagree on {what}: {av} in {}, {bv} in {}; one lakesink config reads one set of topics with one format: import them into separate configs",
            a.file, b.file, a.file, b.file
        ))
    };
    let describe = |t: &Topics| match t {
        Topics::List(l) => format!("topics {}", l.join(",")),
        Topics::Regex(r) => format!("topics.regex {r}"),
    };
    let norm = |t: &Topics| match t {
        Topics::List(l) => {
            let mut l = l.clone();
            l.sort();
            l.dedup();
            Topics::List(l)
        }
        r => r.clone(),
    };
    let mut notes = Vec::new();
    let mut dropped = Vec::new();
    let mut sources = Vec::new();
    let mut format: Option<(&'static str, usize)> = None;
    let mut registry = Section::default();
    let mut oauth = Section::default();
    let mut errors = Section::default();
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    let mut raw = None;
    let mut replica = None;
    let mut raw_from: Option<usize> = None;
    let mut replica_from: Option<usize> = None;
    for (i, p) in parts.iter().enumerate() {
        if norm(&p.topics) != norm(&first.topics) {
            return Err(conflict(
                "the topics",
                first,
                describe(&first.topics),
                p,
                describe(&p.topics),
            ));
        }
        if let Some(f) = p.format {
            match format {
                Some((g, j)) if g != f => {
                    return Err(conflict(
                        "the format (value.converter)",
                        &parts[j],
                        g.into(),
                        p,
                        f.into(),
                    ));
                }
                None => format = Some((f, i)),
                _ => {}
            }
        }
        for (section, name, target) in [
            (&p.registry, "registry", &mut registry),
            (&p.oauth, "registry.oauth", &mut oauth),
            (&p.errors, "errors", &mut errors),
        ] {
            for (k, v) in &section.0 {
                let full = format!("{name}.{k}");
                match target.get(k) {
                    Some(w) if w != v => {
                        let j = owner[&full];
                        return Err(conflict(&full, &parts[j], w.to_string(), p, v.to_string()));
                    }
                    Some(_) => {}
                    None => {
                        target.set(k, v.clone());
                        owner.insert(full, i);
                    }
                }
            }
        }
        if p.kind == Kind::S3 {
            if let Some(j) = raw_from {
                return Err(ImportError::Conflict(format!(
                    "{} and {} are both S3 sinks: a lakesink config has one [raw] section; import them into separate configs",
                    parts[j].file, p.file
                )));
            }
            raw_from = Some(i);
            raw = Some((p.raw.clone(), p.store.clone(), p.store_options.clone()));
        } else {
            if let Some(j) = replica_from {
                return Err(ImportError::Conflict(format!(
                    "{} and {} are both JDBC sinks: a lakesink config has one [replica] section; import them into separate configs",
                    parts[j].file, p.file
                )));
            }
            replica_from = Some(i);
            replica = Some(p.replica.clone());
        }
        dropped.extend(p.dropped.iter().cloned());
        notes.extend(p.notes.iter().cloned());
        sources.push((p.file.clone(), p.name.clone(), p.class.clone()));
    }
    let brokers = match options
        .brokers
        .clone()
        .or_else(|| parts.iter().find_map(|p| p.brokers.clone()))
    {
        Some(b) => {
            if options.brokers.is_none() {
                notes.push(
                    "kafka.brokers is confluent.topic.bootstrap.servers: check that it names the cluster the topics are in".into(),
                );
            }
            b
        }
        None => {
            notes.push(
                "kafka.brokers: connector configs do not name the brokers (the Connect worker's config does); set it, pass --brokers, or set LAKESINK__KAFKA__BROKERS".into(),
            );
            "localhost:9092".into()
        }
    };
    let format = format.map(|(f, _)| f);
    if format == Some("avro") && registry.get("url").is_none() {
        notes.push(
            "registry.url: the converters name no registry URL; set it (LAKESINK__REGISTRY__URL)"
                .into(),
        );
        registry.set("url", "http://localhost:8080");
    }
    Ok(Merged {
        brokers,
        topics: first.topics.clone(),
        format,
        registry,
        oauth,
        raw,
        replica,
        errors,
        dropped,
        notes,
        sources,
    })
}

impl Merged {
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let files: Vec<&str> = self.sources.iter().map(|(f, _, _)| f.as_str()).collect();
        let _ = writeln!(
            out,
            "# Imported by `lakesink import-connect` from {}.",
            files.join(", ")
        );
        out.push_str("\n[kafka]\n");
        let mut kafka = Section::default();
        kafka.set("brokers", self.brokers.clone());
        match &self.topics {
            Topics::List(l) => kafka.set(
                "topics",
                Value::Array(l.iter().cloned().map(Value::String).collect()),
            ),
            Topics::Regex(r) => kafka.set("topics-regex", r.clone()),
        }
        if let Some(f) = self.format
            && f != "avro"
        {
            kafka.set("format", f);
        }
        kafka.render(&mut out);
        if !self.registry.is_empty()
            && self.format != Some("json")
            && self.format != Some("connect-json")
        {
            out.push_str("\n[registry]\n");
            self.registry.render(&mut out);
            if !self.oauth.is_empty() {
                out.push_str("\n[registry.oauth]\n");
                self.oauth.render(&mut out);
            }
        }
        if let Some((raw, store, options)) = &self.raw {
            out.push_str("\n[raw]\n");
            raw.render(&mut out);
            if !store.is_empty() {
                out.push_str("\n[raw.store]\n");
                store.render(&mut out);
            }
            if !options.is_empty() {
                out.push_str("\n[raw.store.options]\n");
                options.render(&mut out);
            }
        }
        if let Some(replica) = &self.replica {
            out.push_str("\n[replica]\n");
            replica.render(&mut out);
        }
        if !self.errors.is_empty() {
            out.push_str("\n[errors]\n");
            self.errors.render(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_are_anchored_whole() {
        assert_eq!(anchor("demo\\..*"), "^demo\\..*$");
        assert_eq!(anchor("^a.*$"), "^a.*$");
        assert_eq!(anchor("a|b"), "^(a|b)$");
    }

    #[test]
    fn provider_references() {
        assert_eq!(
            provider_reference("${file:/opt/s.properties:pw}"),
            Some(("file".into(), "/opt/s.properties".into(), "pw".into()))
        );
        assert_eq!(
            provider_reference("${env:PG_PW}"),
            Some(("env".into(), String::new(), "PG_PW".into()))
        );
        assert_eq!(provider_reference("plain"), None);
        assert!(has_provider_reference("x${vault:secret/pg:pw}"));
        assert!(!has_provider_reference("${topic}"));
        assert!(!has_provider_reference("${source.schema}.${source.table}"));
    }

    #[test]
    fn unwrapped_fields_are_paths_in_the_event() {
        assert_eq!(event_path("region", true), "after.region");
        assert_eq!(event_path("__source_ts_ms", true), "source.ts_ms");
        assert_eq!(event_path("__source_db", true), "source.db");
        assert_eq!(event_path("source.ts_ms", false), "source.ts_ms");
    }

    fn secret_of(value: &str) -> (String, Vec<String>) {
        let mut cfg = Cfg {
            file: "f.json",
            map: BTreeMap::new(),
            dropped: Vec::new(),
            notes: Vec::new(),
        };
        let r = cfg.secret("connection.password", value, "VAR", "replica.password");
        (r, cfg.notes)
    }

    #[test]
    fn secrets_become_references() {
        let (r, notes) = secret_of("hunter2");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("set VAR") && !notes[0].contains("hunter2"));
        assert_eq!(secret_of("${env:PG}").0, "env:PG");
        assert_eq!(
            secret_of("${directory:/run/secrets/:pg}").0,
            "file:/run/secrets/pg"
        );
        let (r, notes) = secret_of("${file:/etc/c.properties:pw}");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("${file:/etc/c.properties:pw}"));
        let (r, notes) = secret_of("${secretsmanager:db:password}");
        assert_eq!(r, "env:VAR");
        assert!(notes[0].contains("secretsmanager"));
    }
}
