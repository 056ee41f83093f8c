//! `key.converter`, `value.converter` and their settings → `kafka.format` and `[registry]`.

use super::ImportError;
use super::cfg::{Cfg, Connector, Section, has_provider_reference, last_segment, split_list};

const PASSWORD_VAR: &str = "LAKESINK_REGISTRY_PASSWORD";
const CLIENT_SECRET_VAR: &str = "LAKESINK_REGISTRY_CLIENT_SECRET";

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

pub(super) fn converters(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    let original = cfg.map.clone();
    let value_family = value_converter(cfg, part)?;
    key_converter(cfg, &original, value_family);
    Ok(())
}

/// `value.converter` and its settings; the family it reads, when known.
fn value_converter(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<Option<Family>, ImportError> {
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
    Ok(value_family)
}

/// Keys are decoded with the values' format; a key converter of the same kind, with the
/// same settings (`original`: as the file gave them), says nothing more.
fn key_converter(
    cfg: &mut Cfg<'_>,
    original: &std::collections::BTreeMap<String, String>,
    value_family: Option<Family>,
) {
    let key_class = cfg.take("key.converter");
    let key_family = key_class.as_deref().and_then(family);
    let same = key_class.is_none() || (key_family.is_some() && key_family == value_family);
    if !same {
        let class = key_class.unwrap_or_default();
        cfg.list_dropped(
            "key.converter",
            format!(
                "{}: lakesink decodes keys with the values' format (kafka.format, from value.converter)",
                last_segment(&class)
            ),
        );
        for k in cfg.keys_with_prefix("key.converter.") {
            cfg.drop(
                &k,
                "a setting of the key converter, which is not carried over",
            );
        }
        return;
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
}

/// A converter's settings under `prefix` (`value.converter.`) → `[registry]`.
fn converter_settings(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    prefix: &str,
    family: Family,
) -> Result<(), ImportError> {
    let k = |s: &str| format!("{prefix}{s}");
    match family {
        Family::Json => {}
        Family::Apicurio => apicurio(cfg, part, prefix)?,
        Family::Confluent => confluent(cfg, part, prefix),
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

/// The Apicurio converter's settings (2.x and 3.x names).
fn apicurio(cfg: &mut Cfg<'_>, part: &mut Connector, prefix: &str) -> Result<(), ImportError> {
    let k = |s: &str| format!("{prefix}{s}");
    if let Some(url) = cfg.plain(&k("apicurio.registry.url")) {
        part.registry.set("url", url);
    }
    apicurio_ids(cfg, part, prefix)?;
    if let Some(enc) = cfg.plain(&k("apicurio.registry.avro.encoding"))
        && !enc.eq_ignore_ascii_case("BINARY")
    {
        cfg.list_dropped(
            k("apicurio.registry.avro.encoding"),
            "lakesink decodes Avro's binary encoding only",
        );
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
            let r = cfg.secret(&k(pass), &p, PASSWORD_VAR, "registry.password");
            part.registry.set("password", r);
        }
    }
    // OAuth client credentials: 3.x gives the token endpoint, 2.x the Keycloak server and
    // realm.
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
        oauth_client(
            cfg,
            &mut part.oauth,
            [
                &k(&format!("{base}client.id")),
                &k(&format!("{base}client.secret")),
                &k(&format!("{base}client.scope")),
            ],
        );
    }
    Ok(())
}

/// Which ids the Apicurio converter framed: `registry.payload-ids`.
fn apicurio_ids(cfg: &mut Cfg<'_>, part: &mut Connector, prefix: &str) -> Result<(), ImportError> {
    let k = |s: &str| format!("{prefix}{s}");
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
    Ok(())
}

/// The Confluent converter's settings: registry URLs, basic auth, OAuth bearer auth.
fn confluent(cfg: &mut Cfg<'_>, part: &mut Connector, prefix: &str) {
    let k = |s: &str| format!("{prefix}{s}");
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
            cfg.list_dropped(
                format!("{} (URLs after the first)", k("schema.registry.url")),
                "lakesink asks one registry URL",
            );
        }
    }
    confluent_basic_auth(cfg, part, prefix);
    // OAuth client credentials.
    let bearer = cfg.plain(&k("bearer.auth.credentials.source"));
    if bearer.as_deref().is_none_or(|b| b == "OAUTHBEARER") {
        if let Some(t) = cfg.plain(&k("bearer.auth.issuer.endpoint.url")) {
            part.oauth.set("token-url", t);
        }
        oauth_client(
            cfg,
            &mut part.oauth,
            [
                &k("bearer.auth.client.id"),
                &k("bearer.auth.client.secret"),
                &k("bearer.auth.scope"),
            ],
        );
    } else if let Some(b) = bearer {
        cfg.list_dropped(
            k("bearer.auth.credentials.source"),
            format!("{b}: lakesink's registry auth is basic or OAuth client credentials"),
        );
    }
}

/// `basic.auth.user.info` (`user:password`) → `registry.username` and `registry.password`.
fn confluent_basic_auth(cfg: &mut Cfg<'_>, part: &mut Connector, prefix: &str) {
    let k = |s: &str| format!("{prefix}{s}");
    let source = cfg.plain(&k("basic.auth.credentials.source"));
    let info_key = [
        k("basic.auth.user.info"),
        k("schema.registry.basic.auth.user.info"),
    ]
    .into_iter()
    .find(|key| cfg.map.contains_key(key));
    let Some(info_key) = info_key else {
        return;
    };
    let info = cfg.take(&info_key).unwrap_or_default();
    match (source.as_deref(), info.split_once(':')) {
        (None | Some("USER_INFO"), Some((user, pass))) if !has_provider_reference(&info) => {
            part.registry.set("username", user);
            let r = cfg.secret(&info_key, pass, PASSWORD_VAR, "registry.password");
            part.registry.set("password", r);
        }
        _ => {
            cfg.list_dropped(
                info_key.clone(),
                "not a literal user:password: set registry.username and registry.password (env:NAME)",
            );
        }
    }
}

/// OAuth client credentials (`[id, secret, scope]` keys) into `[registry.oauth]`; the secret
/// becomes a reference to LAKESINK_REGISTRY_CLIENT_SECRET.
fn oauth_client(cfg: &mut Cfg<'_>, oauth: &mut Section, [id, secret, scope]: [&str; 3]) {
    if let Some(v) = cfg.plain(id) {
        oauth.set("client-id", v);
    }
    if let Some(v) = cfg.take(secret) {
        let r = cfg.secret(
            secret,
            &v,
            CLIENT_SECRET_VAR,
            "registry.oauth.client-secret",
        );
        oauth.set("client-secret", r);
    }
    if let Some(v) = cfg.plain(scope) {
        oauth.set("scope", v);
    }
}
