//! Apache Iceberg's Kafka Connect sink (and Tabular's, which it grew from) → `[lake]`,
//! `[lake.catalog-properties]`, `[lake.store]` and `[lake.store.options]`.

use std::collections::BTreeSet;

use toml::Value;

use super::cfg::{Cfg, Connector, Topics, has_provider_reference, last_segment, split_list};
use super::transforms::Unwrap;
use super::{ImportError, jdbc_url};
use crate::PartitionField;

const CATALOG: &str = "iceberg.catalog.";
const JDBC: &str = "iceberg.catalog.jdbc.";
/// Per-table settings: `iceberg.table.<namespace>.<table>.<setting>`.
const TABLE: &str = "iceberg.table.";
const WRITE_PROPS: &str = "iceberg.tables.write-props.";
const REST_CATALOG: &str = "org.apache.iceberg.rest.RESTCatalog";
const JDBC_CATALOG: &str = "org.apache.iceberg.jdbc.JdbcCatalog";
/// `iceberg.catalog` when not set.
const DEFAULT_CATALOG_NAME: &str = "iceberg";
/// `iceberg.control.commit.interval-ms` when not set: 5 minutes.
const DEFAULT_COMMIT_INTERVAL_MS: i64 = 300_000;
/// Stand-ins for what the connector config does not say, each with a note.
const PLACEHOLDER_CATALOG_URI: &str = "http://localhost:8181";
const PLACEHOLDER_WAREHOUSE: &str = "s3://lake/warehouse";
/// The warehouse URL schemes lakesink's store writes to.
const STORE_SCHEMES: [&str; 7] = ["s3", "s3a", "gs", "az", "abfs", "abfss", "file"];
/// File IOs over stores lakesink's own store client reaches (set up by `lake.store`).
const FILE_IOS: [&str; 4] = ["S3FileIO", "ResolvingFileIO", "GCSFileIO", "ADLSFileIO"];
/// REST catalog properties the `iceberg` crate's client reads, and the variables standing
/// for the secret ones.
const REST_SECRETS: [(&str, &str); 2] = [
    ("credential", "LAKESINK_LAKE_CREDENTIAL"),
    ("token", "LAKESINK_LAKE_TOKEN"),
];
const REST_PLAIN: [&str; 5] = [
    "oauth2-server-uri",
    "scope",
    "prefix",
    "audience",
    "resource",
];

const BY_TOPIC: &str = "lakesink routes by topic: each topic's rows go to a table of its own, named by lake.table-name-format over ${topic} in lake.namespace";
const NO_COORDINATOR: &str = "lakesink has no coordinator or control topic: each instance commits its partitions' files to the tables itself, with their Kafka offsets in the snapshot";
const APPEND_ONLY: &str = "the sink's upsert mode is off, so lakesink's lake tables are append tables, one row per change event (lake.mode = \"upsert\" holds the source table's current rows)";
const ID_COLUMNS: &str = "id columns key the rows of upsert and CDC mode";
const BY_RECORD_KEY: &str = "lakesink keys an upsert table by the record key (the source table's primary key, as Debezium sends it), not by named columns: check they are the same";
const BRANCH: &str = "lakesink commits to each table's main branch";
const NO_HADOOP: &str =
    "Hadoop configuration: lakesink reads none; it reaches the warehouse through lake.store";

/// The catalog the sink wrote to.
#[derive(Debug, Clone, PartialEq)]
enum Catalog {
    Rest,
    /// Iceberg's JDBC catalog in PostgreSQL: lakesink's SQL catalog.
    Sql,
    /// One lakesink does not talk to: the key that says so, and what it is.
    Other(&'static str, String),
}

pub(super) fn iceberg(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    unwrap: Option<(Unwrap, String)>,
) -> Result<(), ImportError> {
    let catalog = catalog(cfg, part)?;
    store(cfg, part, &catalog)?;
    catalog_properties(cfg, part, &catalog);
    let tables = tables(cfg, part)?;
    content(cfg, part, unwrap.as_ref());
    commits(cfg, part)?;
    writing(cfg, part);
    partition_by(cfg, part, &tables);
    table_settings(cfg, part)?;
    not_carried(cfg, part);
    Ok(())
}

/// The catalog: its kind, URI, name and warehouse.
fn catalog(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<Catalog, ImportError> {
    let name = cfg
        .plain("iceberg.catalog")
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_CATALOG_NAME.into());
    let ty = cfg.plain("iceberg.catalog.type");
    let implementation = cfg.plain("iceberg.catalog.catalog-impl");
    let mut catalog = match (ty, implementation) {
        (Some(_), Some(_)) => {
            return Err(cfg.err(
                "sets both `iceberg.catalog.type` and `iceberg.catalog.catalog-impl` (Iceberg rejects that too)",
            ));
        }
        (Some(t), None) => match t.trim().to_ascii_lowercase().as_str() {
            "rest" => Catalog::Rest,
            "jdbc" => Catalog::Sql,
            other => Catalog::Other("iceberg.catalog.type", format!("the {other} catalog")),
        },
        (None, Some(c)) => match c.trim() {
            REST_CATALOG => Catalog::Rest,
            JDBC_CATALOG => Catalog::Sql,
            other => Catalog::Other("iceberg.catalog.catalog-impl", last_segment(other).into()),
        },
        (None, None) => Catalog::Other(
            "iceberg.catalog.type",
            "the hive catalog (Iceberg's default when neither iceberg.catalog.type nor iceberg.catalog.catalog-impl is set)".into(),
        ),
    };
    let uri = cfg
        .plain("iceberg.catalog.uri")
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    if catalog == Catalog::Sql {
        match uri.as_deref() {
            None => {
                return Err(cfg.err("a JDBC catalog without `iceberg.catalog.uri`, its database"));
            }
            Some(u) if !u.starts_with("jdbc:postgresql:") => {
                let db = u
                    .strip_prefix("jdbc:")
                    .and_then(|r| r.split(':').next())
                    .filter(|d| !d.is_empty())
                    .unwrap_or("non-JDBC");
                catalog = Catalog::Other("iceberg.catalog.uri", format!("a {db} JDBC catalog"));
            }
            Some(_) => {}
        }
    }
    match (&catalog, uri) {
        (Catalog::Rest, None) => {
            return Err(cfg.err("a REST catalog without `iceberg.catalog.uri`"));
        }
        (Catalog::Rest, Some(uri)) => {
            if !uri.starts_with("http://") && !uri.starts_with("https://") {
                return Err(cfg.err(format!(
                    "`iceberg.catalog.uri` = {uri:?}: a REST catalog's URI is http:// or https://"
                )));
            }
            part.lake.set("catalog", "rest");
            part.lake.set("catalog-uri", uri);
        }
        (Catalog::Sql, uri) => sql(cfg, part, &uri.unwrap_or_default())?,
        (Catalog::Other(key, what), uri) => {
            cfg.list_dropped(
                *key,
                format!(
                    "{what}: lakesink's lake catalogs are Iceberg REST catalogs and SQL catalogs in PostgreSQL (Iceberg's JDBC catalog); where these tables are also served over Iceberg's REST API (Nessie serves it at /iceberg), set lake.catalog-uri to it"
                ),
            );
            if uri.is_some() && *key != "iceberg.catalog.uri" {
                cfg.list_dropped(
                    "iceberg.catalog.uri",
                    format!("the URI of {what}, which is not carried"),
                );
            }
            part.lake.set("catalog", "rest");
            part.lake.set("catalog-uri", PLACEHOLDER_CATALOG_URI);
            cfg.note(format!(
                "{}: lake.catalog-uri = \"{PLACEHOLDER_CATALOG_URI}\" stands in for a REST catalog's URI ({what} is not carried): set it (LAKESINK__LAKE__CATALOG_URI)",
                cfg.file
            ));
        }
    }
    part.lake.set("catalog-name", name);
    warehouse(cfg, part, &catalog);
    Ok(catalog)
}

/// Iceberg's JDBC catalog in PostgreSQL: `iceberg.catalog.uri` with `jdbc.user` and the
/// driver's other `jdbc.*` properties → `lake.catalog-uri`; the password is never printed.
fn sql(cfg: &mut Cfg<'_>, part: &mut Connector, uri: &str) -> Result<(), ImportError> {
    let user = cfg.plain(&format!("{JDBC}user"));
    let password = cfg.take(&format!("{JDBC}password"));
    let version = cfg.plain(&format!("{JDBC}schema-version"));
    // The driver's other properties, as URL parameters: pgjdbc reads them either way.
    let mut jdbc = uri.to_owned();
    let mut properties = Vec::new();
    for k in cfg.keys_with_prefix(JDBC) {
        let Some(v) = cfg.plain(&k) else { continue };
        let name = k[JDBC.len()..].to_owned();
        jdbc.push(if jdbc.contains('?') { '&' } else { '?' });
        jdbc.push_str(&format!("{name}={}", jdbc_url::percent_encode(&v)));
        properties.push(name);
    }
    let pg = jdbc_url::convert(&jdbc, user.as_deref())
        .map_err(|e| cfg.err(format!("iceberg.catalog.uri: {e}")))?;
    for (k, reason) in pg.dropped {
        let key = match k.strip_prefix("connection.url parameter ") {
            Some(p) if properties.iter().any(|q| q == p) => format!("{JDBC}{p}"),
            Some(p) => format!("iceberg.catalog.uri parameter {p}"),
            None => k.replacen("connection.url", "iceberg.catalog.uri", 1),
        };
        cfg.list_dropped(key, reason);
    }
    let mut url = pg.url;
    if let Some(schema) = pg.current_schema {
        if url.contains("options=") {
            cfg.list_dropped(
                "iceberg.catalog.uri parameter currentSchema",
                "the URL sets options already: add -c search_path=… to them in lake.catalog-uri",
            );
        } else {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("options=");
            url.push_str(&jdbc_url::percent_encode(&format!(
                "-c search_path={schema}"
            )));
        }
    }
    part.lake.set("catalog", "sql");
    part.lake.set("catalog-uri", url.clone());
    let source = match (pg.password, password) {
        (Some(_), _) => Some("the password in `iceberg.catalog.uri`".to_owned()),
        (None, Some(p)) if has_provider_reference(&p) => {
            Some(format!("`{}` (iceberg.catalog.jdbc.password)", p.trim()))
        }
        (None, Some(_)) => Some("the value of `iceberg.catalog.jdbc.password`".to_owned()),
        (None, None) => None,
    };
    if let Some(source) = source {
        let with_password = match url.strip_prefix("postgres://") {
            Some(rest) => match rest.split_once('@') {
                Some((u, host)) if !u.contains('/') => format!("postgres://{u}:PASSWORD@{host}"),
                _ => format!("postgres://USER:PASSWORD@{rest}"),
            },
            None => url.clone(),
        };
        cfg.note(format!(
            "{}: lake.catalog-uri holds no password (secrets are never printed, and the URL is one value): set LAKESINK__LAKE__CATALOG_URI to {with_password}, PASSWORD being {source} of {}, percent-encoded",
            cfg.file, cfg.file
        ));
    }
    if !version
        .as_deref()
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("V1"))
    {
        cfg.note(format!(
            "{}: Iceberg's JDBC catalog makes its iceberg_tables table without the iceberg_type column unless jdbc.schema-version = V1, and lakesink's SQL catalog reads that column: if the table lacks it, add it first (ALTER TABLE iceberg_tables ADD COLUMN iceberg_type VARCHAR(5)), as Iceberg does for V1",
            cfg.file
        ));
    }
    Ok(())
}

/// `iceberg.catalog.warehouse` → `lake.warehouse`, the object store URL lakesink writes the
/// files under; a REST catalog's warehouse name → `catalog-properties.warehouse`.
fn warehouse(cfg: &mut Cfg<'_>, part: &mut Connector, catalog: &Catalog) {
    let warehouse = cfg
        .plain("iceberg.catalog.warehouse")
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty());
    let scheme = warehouse
        .as_deref()
        .and_then(|w| w.split_once("://"))
        .map(|(s, _)| s.to_ascii_lowercase());
    let why = match (warehouse, scheme) {
        (Some(w), Some(s)) if STORE_SCHEMES.contains(&s.as_str()) => {
            part.lake.set("warehouse", w);
            return;
        }
        (Some(w), None) if *catalog == Catalog::Rest => {
            let why = format!(
                "the REST catalog's warehouse is `{w}`, a name, passed on as lake.catalog-properties.warehouse"
            );
            part.lake_properties.set("warehouse", w);
            why
        }
        (Some(_), Some(s)) => {
            cfg.list_dropped(
                "iceberg.catalog.warehouse",
                format!(
                    "a {s}:// URL: lakesink's store writes to s3, s3a, gs, az, abfs, abfss and file URLs"
                ),
            );
            "the sink's warehouse is in a store lakesink does not write to".into()
        }
        (Some(_), None) => {
            cfg.list_dropped(
                "iceberg.catalog.warehouse",
                "not a URL: lakesink's lake.warehouse is the URL new tables live under (s3://bucket/prefix)",
            );
            "the sink's warehouse is not a URL".into()
        }
        (None, _) => "the connector config names no warehouse".into(),
    };
    part.lake.set("warehouse", PLACEHOLDER_WAREHOUSE);
    cfg.note(format!(
        "{}: lake.warehouse = \"{PLACEHOLDER_WAREHOUSE}\" stands in for the object store URL the tables' files are under ({why}); lakesink writes the files itself, through lake.store: set it (LAKESINK__LAKE__WAREHOUSE)",
        cfg.file
    ));
}

/// The FileIO's settings → `[lake.store]` and `[lake.store.options]`.
fn store(cfg: &mut Cfg<'_>, part: &mut Connector, catalog: &Catalog) -> Result<(), ImportError> {
    let k = |s: &str| format!("{CATALOG}{s}");
    if let Some(r) = cfg.plain(&k("client.region")) {
        part.lake_store.set("region", r);
    }
    let endpoint = cfg.plain(&k("s3.endpoint"));
    if let Some(e) = &endpoint {
        part.lake_store.set("endpoint", e.clone());
        if e.starts_with("http://") {
            part.lake_store.set("allow-http", true);
        }
    }
    let s3 = part
        .lake
        .get("warehouse")
        .and_then(Value::as_str)
        .is_some_and(|w| w.starts_with("s3://") || w.starts_with("s3a://"));
    // S3FileIO's default is virtual-hosted-style requests, lakesink's path style. A REST
    // catalog may have set the style for the sink in its config answer: left to lake.store.
    match cfg.bool(&k("s3.path-style-access"))? {
        Some(true) => {}
        Some(false) => part.lake_store.set("virtual-hosted", true),
        None if s3 && *catalog != Catalog::Rest => part.lake_store.set("virtual-hosted", true),
        None => {}
    }
    if let Some(id) = cfg.take(&k("s3.access-key-id")) {
        if has_provider_reference(&id) {
            cfg.list_dropped(
                k("s3.access-key-id"),
                "a config-provider reference: set lake.store.access-key-id (or LAKESINK__LAKE__STORE__ACCESS_KEY_ID)",
            );
        } else {
            part.lake_store.set("access-key-id", id);
        }
    }
    if let Some(s) = cfg.take(&k("s3.secret-access-key")) {
        let r = cfg.secret(
            &k("s3.secret-access-key"),
            &s,
            "LAKESINK_LAKE_SECRET_ACCESS_KEY",
            "lake.store.secret-access-key",
        );
        part.lake_store.set("secret-access-key", r);
    }
    if let Some(t) = cfg.take(&k("s3.session-token")) {
        let r = cfg.secret(
            &k("s3.session-token"),
            &t,
            "LAKESINK_LAKE_SESSION_TOKEN",
            "lake.store.options.aws_session_token",
        );
        part.lake_store_options.set("aws_session_token", r);
    }
    match cfg
        .plain(&k("s3.sse.type"))
        .map(|t| t.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("none") => {}
        Some("s3") => part
            .lake_store_options
            .set("aws_server_side_encryption", "AES256"),
        Some("kms") => {
            part.lake_store_options
                .set("aws_server_side_encryption", "aws:kms");
            if let Some(key) = cfg.plain(&k("s3.sse.key")) {
                part.lake_store_options.set("aws_sse_kms_key_id", key);
            }
        }
        Some(other) => cfg.list_dropped(
            k("s3.sse.type"),
            format!("{other}: lakesink's store encrypts with S3's keys (s3) or KMS keys (kms)"),
        ),
    }
    match cfg.plain(&k("io-impl")) {
        None => {}
        Some(io) if FILE_IOS.contains(&last_segment(&io)) => {}
        Some(io) => cfg.list_dropped(
            k("io-impl"),
            format!(
                "{}: lakesink reads and writes the tables' files through its own object store client, set up by lake.store",
                last_segment(&io)
            ),
        ),
    }
    for key in cfg.keys_with_prefix(&k("s3.")) {
        cfg.drop(&key, "an S3FileIO setting with no lakesink equivalent");
    }
    for key in cfg.keys_with_prefix(&k("client.")) {
        cfg.drop(
            &key,
            "an AWS client setting: lakesink takes S3 credentials from lake.store or the AWS environment and instance-metadata chain",
        );
    }
    for prefix in ["gcs.", "adls."] {
        for key in cfg.keys_with_prefix(&k(prefix)) {
            cfg.drop(
                &key,
                "a FileIO setting: lakesink's store takes object_store's options in lake.store.options (google_*, azure_*)",
            );
        }
    }
    if s3 && *catalog == Catalog::Rest && part.lake_store.get("access-key-id").is_none() {
        cfg.note(format!(
            "{}: lakesink writes the tables' files itself, through lake.store, not with storage credentials a REST catalog hands out: give lake.store the warehouse's endpoint and credentials, or set the AWS environment",
            cfg.file
        ));
    }
    Ok(())
}

/// The catalog's other `iceberg.catalog.*` properties: a REST catalog's → `[lake.catalog-properties]`
/// where the `iceberg` crate's client reads them; the rest are listed.
fn catalog_properties(cfg: &mut Cfg<'_>, part: &mut Connector, catalog: &Catalog) {
    if *catalog == Catalog::Rest {
        for (name, var) in REST_SECRETS {
            let key = format!("{CATALOG}{name}");
            if let Some(v) = cfg.take(&key) {
                let r = cfg.secret(&key, &v, var, &format!("lake.catalog-properties.{name}"));
                part.lake_properties.set(name, r);
            }
        }
        for name in REST_PLAIN {
            if let Some(v) = cfg.plain(&format!("{CATALOG}{name}")) {
                part.lake_properties.set(name, v);
            }
        }
        // Extra HTTP headers; one that may carry a credential is a secret.
        for key in cfg.keys_with_prefix(&format!("{CATALOG}header.")) {
            let name = key[CATALOG.len()..].to_owned();
            let header = name["header.".len()..].to_ascii_lowercase();
            let v = cfg.take(&key).unwrap_or_default();
            let secret = ["auth", "token", "key", "secret", "cookie", "password"]
                .iter()
                .any(|s| header.contains(s));
            if secret || has_provider_reference(&v) {
                let var: String = header
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_uppercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let r = cfg.secret(
                    &key,
                    &v,
                    &format!("LAKESINK_LAKE_HEADER_{var}"),
                    &format!("lake.catalog-properties.\"{name}\""),
                );
                part.lake_properties.set(&name, r);
            } else {
                part.lake_properties.set(&name, v);
            }
        }
        for key in cfg.keys_with_prefix(&format!("{CATALOG}rest.")) {
            let reason = if key.contains("sigv4") || key.contains("signing") {
                "SigV4 request signing (AWS Glue's and S3 Tables' REST endpoints): lakesink's REST catalog client does not sign requests"
            } else {
                "a catalog property lakesink's REST catalog client does not read"
            };
            cfg.drop(&key, reason);
        }
    }
    let reason = match catalog {
        Catalog::Rest => "a catalog property lakesink's REST catalog client does not read".into(),
        Catalog::Sql => "a catalog property lakesink's SQL catalog does not read".into(),
        Catalog::Other(_, what) => format!("a property of {what}, which is not carried"),
    };
    for key in cfg.keys_with_prefix(CATALOG) {
        cfg.drop(&key, reason.clone());
    }
}

/// Which tables the records went to: `iceberg.tables` → `lake.namespace` and, for one table
/// named after one topic, `lake.table-name-format`; field routing is listed. The static
/// tables, if any.
fn tables(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<Vec<String>, ImportError> {
    let dynamic = cfg.bool("iceberg.tables.dynamic-enabled")?.unwrap_or(false);
    let field = cfg
        .plain("iceberg.tables.route-field")
        .filter(|f| !f.trim().is_empty());
    let tables = cfg
        .plain("iceberg.tables")
        .map(|t| split_list(&t))
        .filter(|t| !t.is_empty());
    let regexes: Vec<String> = cfg
        .keys_with_prefix(TABLE)
        .into_iter()
        .filter(|k| k.ends_with(".route-regex"))
        .collect();
    match (tables, dynamic, field) {
        (Some(_), true, _) => Err(cfg.err(
            "sets `iceberg.tables` with `iceberg.tables.dynamic-enabled` = true (the Iceberg sink rejects that too)",
        )),
        (None, false, _) => Err(cfg.err(
            "sets neither `iceberg.tables` nor `iceberg.tables.dynamic-enabled` (the Iceberg sink rejects that too)",
        )),
        (None, true, None) => Err(cfg.err(
            "sets `iceberg.tables.dynamic-enabled` = true without `iceberg.tables.route-field` (the Iceberg sink rejects that too)",
        )),
        (None, true, Some(field)) => {
            cfg.list_dropped(
                "iceberg.tables.dynamic-enabled",
                format!(
                    "the sink wrote each record to the table its `{field}` field named; {BY_TOPIC}. Debezium's topics are one per source table, so the tables split alike: set lake.namespace and lake.table-name-format for their names"
                ),
            );
            cfg.list_dropped(
                "iceberg.tables.route-field",
                "read by dynamic routing, which is not carried",
            );
            // No effect with dynamic routing, in the sink too.
            for k in regexes {
                cfg.map.remove(&k);
            }
            Ok(Vec::new())
        }
        (Some(tables), false, Some(field)) => {
            cfg.list_dropped(
                "iceberg.tables.route-field",
                format!(
                    "the sink wrote each record to the listed tables whose route-regex matches its `{field}` field; {BY_TOPIC}"
                ),
            );
            for k in regexes {
                cfg.drop(&k, "read by iceberg.tables.route-field, which is not carried");
            }
            if let Some(problem) = namespace(part, &tables).err() {
                cfg.list_dropped("iceberg.tables", problem);
            }
            Ok(tables)
        }
        (Some(tables), false, None) => {
            // No effect without a route field, in the sink too.
            for k in regexes {
                cfg.map.remove(&k);
            }
            let mut problems = Vec::new();
            let ns = namespace(part, &tables).unwrap_or_else(|p| {
                problems.push(p);
                "lakesink".into()
            });
            problems.extend(names(part, &tables, &ns));
            if !problems.is_empty() {
                cfg.list_dropped("iceberg.tables", problems.join("; "));
            }
            Ok(tables)
        }
    }
}

/// `lake.namespace` from the tables' namespace when they share one (the part of each name
/// before its last dot), or why not.
fn namespace(part: &mut Connector, tables: &[String]) -> Result<String, String> {
    let namespaces: BTreeSet<Option<&str>> = tables
        .iter()
        .map(|t| t.rsplit_once('.').map(|(ns, _)| ns))
        .collect();
    match namespaces.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(ns)] => {
            part.lake.set("namespace", *ns);
            Ok((*ns).to_owned())
        }
        [None] => Err(format!(
            "`{}` names no namespace: lakesink creates tables in lake.namespace (`lakesink` unless set)",
            tables.join(",")
        )),
        _ => Err(
            "the tables are in several namespaces: lakesink creates every table in one, lake.namespace (`lakesink` unless set)"
                .into(),
        ),
    }
}

/// `lake.table-name-format` for one table named after one topic (`cdc_orders` for `orders`:
/// `cdc_${topic}`), or what lakesink does instead.
fn names(part: &mut Connector, tables: &[String], ns: &str) -> Option<String> {
    let names: Vec<&str> = tables
        .iter()
        .map(|t| t.rsplit_once('.').map_or(t.as_str(), |(_, n)| n))
        .collect();
    let per_topic = format!("{ns}.${{topic}} (dots as underscores)");
    match (&part.topics, names.as_slice()) {
        (Topics::List(topics), [name]) if topics.len() == 1 => {
            let topic = topics[0].replace('.', "_");
            if *name == topic {
                return None;
            }
            if let Some(at) = name.find(&topic) {
                let format = format!("{}${{topic}}{}", &name[..at], &name[at + topic.len()..]);
                part.lake.set("table-name-format", format);
                return None;
            }
            Some(format!(
                "`{}`: lakesink names a topic's table by lake.table-name-format, which must contain ${{topic}}, so topic {} goes to table {ns}.{topic}; a fixed name without the topic's in it cannot be kept: rename the table, or read the new one",
                tables[0], topics[0]
            ))
        }
        (_, [_]) => Some(format!(
            "the sink wrote every topic's records to the one table `{}`; lakesink writes each topic to a table of its own, {per_topic}",
            tables[0]
        )),
        (topics, several) => {
            let same = match topics {
                Topics::List(l) => {
                    let topics: BTreeSet<String> = l.iter().map(|t| t.replace('.', "_")).collect();
                    let tables: BTreeSet<String> = several.iter().map(|s| s.to_string()).collect();
                    topics == tables
                }
                Topics::Regex(_) => false,
            };
            Some(format!(
                "without iceberg.tables.route-field the sink wrote every record to each of the {} tables; lakesink writes each topic to a table of its own, {per_topic}{}",
                several.len(),
                if same {
                    ", which here are the listed tables by name"
                } else {
                    ""
                }
            ))
        }
    }
}

/// What a row holds: the unwrap SMT (or Iceberg's `DebeziumTransform`) → flattened rows.
fn content(cfg: &mut Cfg<'_>, part: &mut Connector, unwrap: Option<&(Unwrap, String)>) {
    if let Some((u, alias)) = unwrap {
        part.lake.set("content", "flattened");
        let instead = if u.smt == "DebeziumTransform" {
            " in place of the transform's _cdc struct"
        } else {
            ""
        };
        cfg.note(format!(
            "{}: transforms.{alias} ({}) → lake.content = \"flattened\": the row image as columns, with __op, __deleted and __source_ts_ms{instead}",
            cfg.file, u.smt
        ));
    }
}

/// `iceberg.control.commit.interval-ms` → `lake.commit-interval-ms`, the sink's default
/// when not set.
fn commits(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    match cfg.int("iceberg.control.commit.interval-ms")? {
        Some(ms) if ms < 1 => {
            return Err(cfg.err(format!(
                "`iceberg.control.commit.interval-ms` = {ms}: must be at least 1"
            )));
        }
        Some(ms) => part.lake.set("commit-interval-ms", ms),
        None => {
            part.lake
                .set("commit-interval-ms", DEFAULT_COMMIT_INTERVAL_MS);
            cfg.note(format!(
                "{}: lake.commit-interval-ms = {DEFAULT_COMMIT_INTERVAL_MS}, the Iceberg sink's default commit interval (5 minutes); lakesink's own is 60000",
                cfg.file
            ));
        }
    }
    Ok(())
}

/// `iceberg.tables.write-props.*`: the Parquet codec → `lake.codec`.
fn writing(cfg: &mut Cfg<'_>, part: &mut Connector) {
    for k in cfg.keys_with_prefix(WRITE_PROPS) {
        let Some(v) = cfg.plain(&k) else { continue };
        let value = v.trim().to_ascii_lowercase();
        match &k[WRITE_PROPS.len()..] {
            "write.parquet.compression-codec" => match value.as_str() {
                // lakesink's default, and Iceberg's since 1.4.
                "zstd" => {}
                c @ ("snappy" | "gzip" | "lz4") => part.lake.set("codec", c),
                "none" | "uncompressed" => part.lake.set("codec", "none"),
                other => cfg.list_dropped(
                    k.as_str(),
                    format!(
                        "{other}: lakesink writes zstd, snappy, gzip, lz4 or none (zstd is used)"
                    ),
                ),
            },
            "write.format.default" if value == "parquet" => {}
            "write.format.default" => {
                cfg.list_dropped(k.as_str(), format!("{value}: lakesink writes Parquet only"))
            }
            _ => cfg.list_dropped(
                k.as_str(),
                "an Iceberg writer property lakesink has no setting for",
            ),
        }
    }
}

/// `iceberg.tables.default-partition-by` (or the one table's own `partition-by`) →
/// `lake.partition-by`; other tables' own specs are listed.
fn partition_by(cfg: &mut Cfg<'_>, part: &mut Connector, tables: &[String]) {
    let own = match tables {
        [t] => format!("{TABLE}{t}.partition-by"),
        _ => String::new(),
    };
    let mut spec = cfg
        .plain("iceberg.tables.default-partition-by")
        .map(|s| ("iceberg.tables.default-partition-by".to_owned(), s));
    for k in cfg.keys_with_prefix(TABLE) {
        if !k.ends_with(".partition-by") {
            continue;
        }
        if k == own {
            // The table's own spec wins over the default, as in the sink.
            if let Some(s) = cfg.plain(&k) {
                if let Some((default, _)) = &spec {
                    cfg.list_dropped(default.clone(), format!("{own} overrides it"));
                }
                spec = Some((k, s));
            }
        } else {
            cfg.drop(
                &k,
                "lakesink gives every table the spec of lake.partition-by",
            );
        }
    }
    let Some((key, text)) = spec else { return };
    let entries = split_outside_parens(&text);
    match entries
        .iter()
        .map(|e| PartitionField::parse(e))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(_) if entries.is_empty() => {}
        Ok(_) => part.lake.set(
            "partition-by",
            Value::Array(entries.into_iter().map(Value::String).collect()),
        ),
        Err(e) => cfg.list_dropped(key, e),
    }
}

/// A comma list whose entries may hold commas in parentheses: `bucket(id, 16), days(ts)`.
fn split_outside_parens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect()
}

/// How tables are made and changed: upsert and CDC mode, id columns, branches, creation and
/// schema evolution.
fn table_settings(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
    let upsert = cfg.bool("iceberg.tables.upsert-mode-enabled")? == Some(true);
    let (id_reason, cdc_reason) = if upsert {
        part.lake.set("mode", "upsert");
        cfg.note(format!(
            "{}: iceberg.tables.upsert-mode-enabled = true → lake.mode = \"upsert\": each table holds the source table's current rows, updated and deleted by equality deletes on the record key",
            cfg.file
        ));
        (
            BY_RECORD_KEY.to_owned(),
            "lakesink reads each record's Debezium operation itself (inserts, updates, deletes, truncates)"
                .to_owned(),
        )
    } else {
        (
            format!("{ID_COLUMNS}; {APPEND_ONLY}"),
            format!(
                "the sink applied each record's operation (I, U, D) as an insert, update or delete; {APPEND_ONLY}, whose op (or __op) column says which"
            ),
        )
    };
    if let Some(f) = cfg.plain("iceberg.tables.cdc-field") {
        cfg.list_dropped("iceberg.tables.cdc-field", format!("`{f}`: {cdc_reason}"));
    }
    cfg.drop_set(&["iceberg.tables.default-id-columns"], &id_reason);
    cfg.drop_set(&["iceberg.tables.default-commit-branch"], BRANCH);
    for k in cfg.keys_with_prefix(TABLE) {
        if k.ends_with(".id-columns") {
            cfg.drop(&k, id_reason.clone());
        } else if k.ends_with(".commit-branch") {
            cfg.drop(&k, BRANCH);
        }
    }
    for k in cfg.keys_with_prefix("iceberg.tables.auto-create-props.") {
        cfg.drop(
            &k,
            "a property for new tables: lakesink has no setting for them; set it on a table once made (ALTER TABLE … SET TBLPROPERTIES)",
        );
    }
    let file = cfg.file;
    let default = |v: Option<bool>| if v.is_none() { " (its default)" } else { "" };
    let auto = cfg.bool("iceberg.tables.auto-create-enabled")?;
    if auto != Some(true) {
        cfg.note(format!(
            "{file}: iceberg.tables.auto-create-enabled is off{}: the sink wrote only to tables that existed; lakesink creates a topic's table when it is missing",
            default(auto)
        ));
    }
    match cfg.bool("iceberg.tables.evolve-schema-enabled")? {
        Some(true) => cfg.note(format!(
            "{file}: iceberg.tables.evolve-schema-enabled: lakesink adds new record fields as columns too, but does not widen a column's type (int to long, float to double) as the sink did: a widened type stops it"
        )),
        evolve => cfg.note(format!(
            "{file}: iceberg.tables.evolve-schema-enabled is off{}: the sink left out record fields the table lacked; lakesink adds them to the table as columns",
            default(evolve)
        )),
    }
    if cfg.bool("iceberg.tables.schema-force-optional")? != Some(true) && auto == Some(true) {
        cfg.note(format!(
            "{file}: iceberg.tables.schema-force-optional is off: tables the sink made had required columns where the record schema had them; lakesink makes every column optional"
        ));
    }
    if cfg.bool("iceberg.tables.schema-case-insensitive")? == Some(true) {
        cfg.note(format!(
            "{file}: iceberg.tables.schema-case-insensitive: the sink matched record fields to table columns ignoring case; lakesink matches exact names, so a field that differs from its column only in case is added as a column of its own"
        ));
    }
    Ok(())
}

/// The control topic, the coordinator and Hadoop: nothing lakesink needs. The control
/// topic's brokers stand for `kafka.brokers` when nothing else names them.
fn not_carried(cfg: &mut Cfg<'_>, part: &mut Connector) {
    if let Some(b) = cfg.plain("iceberg.kafka.bootstrap.servers")
        && part.brokers.is_none()
    {
        part.brokers = Some((b, "iceberg.kafka.bootstrap.servers"));
    }
    for k in cfg.keys_with_prefix("iceberg.kafka.") {
        cfg.drop(
            &k,
            "a setting of the sink's control-topic client: lakesink has no control topic (the cluster's security settings go in kafka.security or kafka.properties)",
        );
    }
    for prefix in [
        "iceberg.control.",
        "iceberg.coordinator.",
        "iceberg.connect.group-id",
    ] {
        for k in cfg.keys_with_prefix(prefix) {
            cfg.drop(&k, NO_COORDINATOR);
        }
    }
    for prefix in ["iceberg.hadoop.", "iceberg.hadoop-conf-dir"] {
        for k in cfg.keys_with_prefix(prefix) {
            cfg.drop(&k, NO_HADOOP);
        }
    }
}

#[cfg(test)]
mod tests;
