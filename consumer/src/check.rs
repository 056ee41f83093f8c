//! `lakesink check`: the config against the live systems, one line per check (OK, WARN or
//! FAIL with the reason), each check bounded by a timeout. Nothing is left behind: the
//! object-store probe is deleted, the database probe is rolled back.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use lakesink_config::{Config, RecordFormat, ReplicaConfig};
use lakesink_schema_registry::{Backoff, HttpRegistry};
use lakesink_writers::parquet::describe_store;
use lakesink_writers::postgres::quote;
use lakesink_writers::{describe_pg, is_auth_failure};
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

mod brokers;

/// Each check's bound.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, status: Status, check: &str, text: &str) {
        let tag = match status {
            Status::Ok => "OK  ",
            Status::Warn => "WARN",
            Status::Fail => {
                self.failed = true;
                "FAIL"
            }
        };
        println!("{tag}  {check:<12}  {text}");
    }

    fn result(&mut self, check: &str, r: Result<String, String>) {
        match r {
            Ok(t) => self.line(Status::Ok, check, &t),
            Err(e) => self.line(Status::Fail, check, &e),
        }
    }
}

async fn bounded<T>(what: &str, f: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(format!("{what}: no answer within {}s", TIMEOUT.as_secs())),
    }
}

/// Runs every check that applies to the config (and the source connectors' configs given);
/// true when none failed.
pub(crate) async fn run(path: &Path, source_connectors: &[std::path::PathBuf]) -> bool {
    let mut report = Report { failed: false };
    let config = match crate::loading::load(path).await {
        Ok(c) => {
            report.line(Status::Ok, "config", &format!("{} loads", path.display()));
            c
        }
        Err(e) => {
            report.line(Status::Fail, "config", &crate::loading::describe(&e));
            return false;
        }
    };
    kafka(&config, &mut report).await;
    if config.kafka.format == RecordFormat::Avro || config.registry.url.is_some() {
        let r = bounded("registry", registry(&config)).await;
        report.result("registry", r);
    }
    if let Some(raw) = &config.raw {
        let r = bounded(
            &format!("object store {}", raw.url),
            object_store_probe(raw),
        )
        .await;
        report.result("object store", r);
    }
    for file in source_connectors {
        let connector = match std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|text| lakesink_config::connect_import::connector_config(&text))
        {
            Ok(c) => c,
            Err(e) => {
                report.line(
                    Status::Fail,
                    "connector",
                    &format!("{}: {e}", file.display()),
                );
                continue;
            }
        };
        let (status, text) = source_connector(&config, file, &connector);
        report.line(status, "connector", &text);
        if config.replica.is_some()
            && let Some((status, text)) = source_types(file, &connector)
        {
            report.line(status, "source types", &text);
        }
        if let Some((status, text)) = flattening(&config, file, &connector) {
            report.line(status, "flattened", &text);
        }
    }
    if let Some(lake) = &config.lake {
        let r = bounded(
            &format!("lake catalog {}", lake.catalog_uri.redacted()),
            lakesink_writers::lake::probe::probe(lake),
        )
        .await;
        report.result("lake", r);
    }
    if let Some(replica) = &config.replica {
        let topics = config.kafka.topics.clone();
        let r = bounded(
            &format!("database {}", replica.url),
            database(replica, &topics),
        )
        .await;
        report.result("database", r);
        if let Some((status, text)) = table_settings(replica, &topics) {
            report.line(status, "tables", &text);
        }
    }
    if !config.columns.is_empty() {
        // The same checks as at start: each pattern compiles and matches a listed topic.
        let r = crate::columns::Columns::new(&config.columns, &config.kafka.topics)
            .map(|_| {
                format!(
                    "{} column {} apply to every sink",
                    config.columns.len(),
                    if config.columns.len() == 1 {
                        "policy"
                    } else {
                        "policies"
                    }
                )
            })
            .map_err(|e| format!("{e:#}"));
        report.result("columns", r);
    }
    if let Some(email) = config.alerts.as_ref().and_then(|a| a.email.as_ref()) {
        let r = bounded("SMTP server (alerts.email)", async {
            let mailer = crate::telemetry::email::Mailer::new(email, TIMEOUT)
                .map_err(|e| format!("{e:#}"))?;
            mailer.test().await
        })
        .await;
        report.result("alerts email", r);
    }
    !report.failed
}

/// A source connector's settings that decide what reaches the sinks: Debezium drops truncates
/// before Kafka unless `skipped.operations` leaves `t` out (its default is `t`), so with
/// `truncate-enabled` on the replica, or with upsert lake tables, they would keep rows the
/// source truncated.
fn source_connector(config: &Config, file: &Path, connector: &Connector) -> (Status, String) {
    let shown = file.display();
    let replica = config.replica.as_ref().is_some_and(|r| r.truncate_enabled);
    let upsert = lakesink_config::LakeMode::Upsert;
    let lake = config
        .lake
        .as_ref()
        .is_some_and(|l| l.mode == upsert || l.tables.values().any(|t| t.mode == Some(upsert)));
    let applying: Vec<&str> = [
        (replica, "the replica (replica.truncate-enabled is on)"),
        (lake, "the lake's upsert tables"),
    ]
    .into_iter()
    .filter_map(|(on, who)| on.then_some(who))
    .collect();
    let skipped = connector.get("skipped.operations").map(String::as_str);
    let drops_truncates = skipped.is_none_or(|ops| ops.split(',').any(|op| op.trim() == "t"));
    match (applying.is_empty(), drops_truncates) {
        (false, true) => (
            Status::Warn,
            format!(
                "{shown}: skipped.operations is {}, so Debezium drops truncates before Kafka and \
                 {} would keep truncated rows; set \"skipped.operations\": \"none\" in the \
                 connector",
                skipped.map_or("unset (Debezium's default: \"t\")".to_owned(), |s| format!(
                    "{s:?}"
                )),
                applying.join(" and ")
            ),
        ),
        (false, false) => (
            Status::Ok,
            format!(
                "{shown}: truncates reach Kafka and {} apply them",
                applying.join(" and ")
            ),
        ),
        (true, _) => (
            Status::Ok,
            format!(
                "{shown}: replica.truncate-enabled is off and no lake table is an upsert table: \
                 truncates are not applied"
            ),
        ),
    }
}

type Connector = std::collections::BTreeMap<String, String>;

/// A PostgreSQL source connector propagates its column types
/// (`column.propagate.source.type` or `datatype.propagate.source.type`), without which the
/// replica cannot tell `json` from `jsonb` and makes `char(n)`, `inet`, ranges, enums and the
/// like `text`. `None` for other connectors.
fn source_types(file: &Path, connector: &Connector) -> Option<(Status, String)> {
    let class = connector.get("connector.class")?;
    if !class.contains("postgresql") {
        return None;
    }
    let shown = file.display();
    let set = [
        "column.propagate.source.type",
        "datatype.propagate.source.type",
    ]
    .into_iter()
    .find_map(|k| Some((k, connector.get(k).filter(|v| !v.trim().is_empty())?)));
    Some(match set {
        Some((key, re)) => (
            Status::Ok,
            format!(
                "{shown}: {key} is {re:?}: the replica gives the columns it matches the \
                 source's own types"
            ),
        ),
        None => (
            Status::Warn,
            format!(
                "{shown}: column.propagate.source.type is unset, so the replica cannot tell \
                 json from jsonb (both become json) and makes char(n), inet, cidr, macaddr, \
                 ranges, hstore, citext and enums text; set \"column.propagate.source.type\": \
                 \".*\" in the connector"
            ),
        ),
    })
}

/// A connector that flattens its records (ExtractNewRecordState) drops `source`, which names
/// the connector; `kafka.source-connector` must then name it. `None` when nothing flattens.
fn flattening(config: &Config, file: &Path, connector: &Connector) -> Option<(Status, String)> {
    let flattens = connector.iter().any(|(k, v)| {
        k.starts_with("transforms.")
            && k.ends_with(".type")
            && v.trim() == "io.debezium.transforms.ExtractNewRecordState"
    });
    if !flattens {
        return None;
    }
    let shown = file.display();
    // `io.debezium.connector.mysql.MySqlConnector` → `mysql`.
    let named = connector
        .get("connector.class")
        .and_then(|c| c.strip_prefix("io.debezium.connector.")?.split('.').next())
        .map(str::to_owned);
    let set = config.kafka.source_connector.as_deref();
    Some(match (set, named.as_deref()) {
        (Some(s), Some(n)) if s != n => (
            Status::Fail,
            format!(
                "{shown}: the connector is Debezium's {n}, but kafka.source-connector is                  {s:?}; set kafka.source-connector = \"{n}\""
            ),
        ),
        (Some(s), _) => (
            Status::Ok,
            format!("{shown}: flattened records are read as {s}'s (kafka.source-connector)"),
        ),
        (None, n) => (
            Status::Warn,
            format!(
                "{shown}: ExtractNewRecordState drops the `source` block that names the \
                 connector, so a MySQL TIME span would stop the pipeline and SQL Server's \
                 datetimeoffset(7) is refused; set kafka.source-connector = \"{}\"",
                n.unwrap_or("<the connector>")
            ),
        ),
    })
}

/// The brokers answer a metadata request; the configured topics are there (or the regex
/// matches some).
async fn kafka(config: &Config, report: &mut Report) {
    let k = config.kafka.clone();
    let fetched = tokio::task::spawn_blocking(move || brokers::metadata(&k))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
    let brokers = &config.kafka.brokers;
    let (count, topics) = match fetched {
        Ok(x) => x,
        Err(e) => {
            report.line(Status::Fail, "kafka", &format!("{brokers}: {e}"));
            return;
        }
    };
    report.line(
        Status::Ok,
        "kafka",
        &format!("{brokers}: {count} broker(s) in the cluster"),
    );
    match &config.kafka.topics_regex {
        Some(regex) => {
            let anchored = if regex.starts_with('^') {
                regex.clone()
            } else {
                format!("^{regex}")
            };
            match regex::Regex::new(&anchored) {
                Err(e) => report.line(
                    Status::Fail,
                    "topics",
                    &format!("topics-regex {regex:?} is not a regex: {e}"),
                ),
                Ok(re) => {
                    let matched: Vec<&String> = topics.iter().filter(|t| re.is_match(t)).collect();
                    if matched.is_empty() {
                        report.line(
                            Status::Warn,
                            "topics",
                            &format!(
                                "topics-regex {regex:?} matches no topic yet (they are read once they appear)"
                            ),
                        );
                    } else {
                        report.line(
                            Status::Ok,
                            "topics",
                            &format!(
                                "topics-regex {regex:?} matches {} topic(s): {}",
                                matched.len(),
                                list(&matched)
                            ),
                        );
                    }
                }
            }
        }
        None => {
            let have: BTreeSet<&String> = topics.iter().collect();
            let missing: Vec<&String> = config
                .kafka
                .topics
                .iter()
                .filter(|t| !have.contains(t))
                .collect();
            if missing.is_empty() {
                report.line(
                    Status::Ok,
                    "topics",
                    &format!("all {} visible", config.kafka.topics.len()),
                );
            } else {
                report.line(
                    Status::Fail,
                    "topics",
                    &format!(
                        "not in the cluster (or not visible to this client): {}",
                        list(&missing)
                    ),
                );
            }
        }
    }
}

fn list(names: &[&String]) -> String {
    const SHOWN: usize = 5;
    let mut s: Vec<&str> = names.iter().take(SHOWN).map(|n| n.as_str()).collect();
    let more = names.len().saturating_sub(SHOWN);
    let more_text = format!("… and {more} more");
    if more > 0 {
        s.push(&more_text);
    }
    s.join(", ")
}

async fn registry(config: &Config) -> Result<String, String> {
    let mut c = crate::registry::config(&config.registry).map_err(|e| format!("{e:#}"))?;
    c.timeout = TIMEOUT;
    // One attempt: the check reports, it does not wait out an outage.
    c.backoff = Backoff {
        attempts: Some(0),
        ..lakesink_schema_registry::REQUEST_RETRIES
    };
    let url = c.url.clone();
    let registry = HttpRegistry::new(c).map_err(|e| e.to_string())?;
    let info = registry.probe().await.map_err(|e| format!("{url}: {e}"))?;
    Ok(format!("{url}: {info}"))
}

/// PUT then DELETE a small object under the raw layer's prefix.
async fn object_store_probe(raw: &lakesink_config::RawConfig) -> Result<String, String> {
    let (store, prefix) = lakesink_writers::parquet::store::open(&raw.url, &raw.store)?;
    let name = format!(
        "_lakesink/check/{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let key = if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    };
    let path = StorePath::from(key.as_str());
    store
        .put(&path, PutPayload::from_static(b"lakesink check"))
        .await
        .map_err(|e| format!("{}: cannot write {key}: {}", raw.url, describe_store(&e)))?;
    store.delete(&path).await.map_err(|e| {
        format!(
            "{}: wrote {key} but cannot delete it: {}",
            raw.url,
            describe_store(&e)
        )
    })?;
    Ok(format!("{}: wrote and deleted {key}", raw.url))
}

/// Connects, then does in a rolled-back transaction what lakesink needs: the offsets
/// schema and table, and a table in each target schema known in advance.
async fn database(replica: &ReplicaConfig, topics: &[String]) -> Result<String, String> {
    let shown = replica.url.redacted();
    let mut options = PgConnectOptions::from_str(replica.url.expose())
        .map_err(|e| format!("{shown}: not a PostgreSQL URL: {e}"))?;
    if let Some(p) = &replica.password {
        options = options.password(p.expose());
    }
    let mut conn = options.connect().await.map_err(|e| {
        let hint = if is_auth_failure(&e) {
            ": check the user in replica.url and replica.password"
        } else {
            ""
        };
        format!("{shown}: cannot connect: {}{hint}", describe_pg(&e))
    })?;
    let (user, db): (String, String) =
        sqlx::query_as("SELECT current_user::text, current_database()::text")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| format!("{shown}: {}", describe_pg(&e)))?;
    let (schemas, dynamic) = target_schemas(replica, topics);
    let schemas: BTreeSet<String> = schemas
        .iter()
        .map(|s| replica.identifier_case.apply(s))
        .collect();
    let mut tx = conn
        .begin()
        .await
        .map_err(|e| format!("{shown}: {}", describe_pg(&e)))?;
    let probe = format!("_lakesink_check_{}", std::process::id());
    let mut create_in: BTreeSet<&str> = BTreeSet::new();
    create_in.insert(&replica.offsets_schema);
    if replica.auto_create {
        create_in.extend(schemas.iter().map(String::as_str));
    }
    for schema in &create_in {
        for sql in [
            format!("CREATE SCHEMA IF NOT EXISTS {}", quote(schema)),
            format!("CREATE TABLE {}.{} (id int)", quote(schema), quote(&probe)),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    format!(
                        "{shown}: user {user} cannot create tables in schema {schema}: {}",
                        describe_pg(&e)
                    )
                })?;
        }
    }
    if !replica.auto_create {
        for schema in &schemas {
            let usable: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) \
                 AND has_schema_privilege($1, 'USAGE')",
            )
            .bind(schema)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| format!("{shown}: {}", describe_pg(&e)))?;
            if !usable {
                return Err(format!(
                    "{shown}: schema {schema} is missing or not usable by {user}, and auto-create is off"
                ));
            }
        }
    }
    tx.rollback()
        .await
        .map_err(|e| format!("{shown}: {}", describe_pg(&e)))?;
    let names: Vec<&str> = create_in.iter().copied().collect();
    let mut text = format!(
        "{shown}: connected to {db} as {user}; can create tables in {}",
        names.join(", ")
    );
    if !replica.auto_create && !schemas.is_empty() {
        let used: Vec<&str> = schemas.iter().map(String::as_str).collect();
        text.push_str(&format!("; can use {}", used.join(", ")));
    }
    if dynamic {
        text.push_str(" (schemas from ${source.…} are known only when written)");
    }
    Ok(text)
}

/// What each table receives (mirror, history) and how it deletes, and `[replica.tables]` keys
/// that name no table the topics are written to (a misspelt name would leave its table with
/// the defaults). `None` when every table is a hard-deleting mirror and none is named.
fn table_settings(replica: &ReplicaConfig, topics: &[String]) -> Option<(Status, String)> {
    use lakesink_config::{DeleteMode, DeletePolicy, TableMode};
    if replica.delete_mode == DeleteMode::Hard
        && replica.mode == TableMode::Mirror
        && !replica.stale_guard
        && replica.tables.is_empty()
    {
        return None;
    }
    let describe = |t: &str| {
        let mut deletes = match replica.delete_policy(t) {
            DeletePolicy::Hard => "hard deletes".to_owned(),
            DeletePolicy::Soft { flag, at: Some(at) } => format!("soft deletes ({flag}, {at})"),
            DeletePolicy::Soft { flag, at: None } => format!("soft deletes ({flag})"),
        };
        if let Some(position) = replica.guard_column(t) {
            deletes.push_str(&format!(", stale-event guard ({position})"));
        }
        let history = format!("history in {t}{}", replica.history_suffix);
        match replica.table_mode(t) {
            TableMode::Mirror => format!("{t}: {deletes}"),
            TableMode::History => format!("{t}: no mirror, {history}"),
            TableMode::Both => format!("{t}: {deletes}, {history}"),
        }
    };
    let mut default = match (replica.mode, replica.delete_mode) {
        (TableMode::History, _) => "history only".to_owned(),
        (mode, DeleteMode::Hard) => format!("{mode:?} with hard deletes").to_lowercase(),
        (mode, DeleteMode::Soft) => format!("{mode:?} with soft deletes").to_lowercase(),
    };
    if replica.stale_guard && replica.mode != TableMode::History {
        default.push_str(" and the stale-event guard");
    }
    // The tables the topics go to, where the template names them without the records.
    let regex = topics.iter().any(|t| t.starts_with('^'));
    let known: Option<Vec<String>> = topics
        .iter()
        .filter(|_| !regex)
        .map(|t| {
            lakesink_writers::postgres::topic_table(replica, t)
                .ok()
                .flatten()
                .map(|n| format!("{}.{}", n.schema, n.table))
        })
        .collect();
    let Some(known) = known.filter(|k| !k.is_empty()) else {
        let named: Vec<String> = replica.tables.keys().map(|t| describe(t)).collect();
        return Some((
            Status::Ok,
            format!(
                "tables are {default} by default; the tables are known only from the records{}",
                if named.is_empty() {
                    String::new()
                } else {
                    format!(", per table: {}", named.join("; "))
                }
            ),
        ));
    };
    let unknown: Vec<&String> = replica
        .tables
        .keys()
        .filter(|t| !known.contains(t))
        .collect();
    if !unknown.is_empty() {
        return Some((
            Status::Fail,
            format!(
                "replica.tables names {} but the topics are written to {}: a misspelt name leaves that table {default}",
                list(&unknown),
                known.join(", ")
            ),
        ));
    }
    let each: Vec<String> = known.iter().map(|t| describe(t)).collect();
    Some((Status::Ok, each.join("; ")))
}

/// The schemas tables will be in, where the name template says in advance; and whether
/// some depend on the records.
fn target_schemas(replica: &ReplicaConfig, topics: &[String]) -> (BTreeSet<String>, bool) {
    let format = &replica.table_name_format;
    let only_topic = !format.replace("${topic}", "").contains("${");
    let names: Vec<String> = if !format.contains("${") {
        vec![format.clone()]
    } else if only_topic && !topics.is_empty() {
        topics
            .iter()
            .map(|t| {
                let t = if replica.dots_to_underscores {
                    t.replace('.', "_")
                } else {
                    t.clone()
                };
                format.replace("${topic}", &t)
            })
            .collect()
    } else {
        // Placeholders stand for one segment each (dots in values become underscores, or
        // the topic is unknown): the schema is known when its segment is literal.
        let parts = segments(format);
        if parts.len() < 2 {
            return (BTreeSet::from([replica.default_schema.clone()]), false);
        }
        let schema = parts[parts.len() - 2];
        if schema.contains("${") {
            return (BTreeSet::new(), true);
        }
        return (BTreeSet::from([schema.to_owned()]), false);
    };
    let mut out = BTreeSet::new();
    for name in names {
        let parts = segments(&name);
        if parts.len() >= 2 {
            out.insert(parts[parts.len() - 2].to_owned());
        } else {
            out.insert(replica.default_schema.clone());
        }
    }
    (out, false)
}

/// A table name split on the dots outside `${…}`.
fn segments(name: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let bytes = name.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'{' if i > 0 && bytes[i - 1] == b'$' => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b'.' if depth == 0 => {
                out.push(&name[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&name[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_known_in_advance() {
        let mut r = ReplicaConfig::new("postgres://h/db");
        let topics = vec!["demo.inventory.orders".to_owned()];
        // `${topic}` with dots replaced: one-part names, in the default schema.
        assert_eq!(
            target_schemas(&r, &topics),
            (BTreeSet::from(["public".to_owned()]), false)
        );
        r.dots_to_underscores = false;
        assert_eq!(
            target_schemas(&r, &topics),
            (BTreeSet::from(["inventory".to_owned()]), false)
        );
        r.table_name_format = "${source.schema}.${source.table}".into();
        assert_eq!(target_schemas(&r, &topics), (BTreeSet::new(), true));
        r.table_name_format = "repl.${source.table}".into();
        assert_eq!(
            target_schemas(&r, &topics),
            (BTreeSet::from(["repl".to_owned()]), false)
        );
        r.table_name_format = "${source.table}".into();
        assert_eq!(
            target_schemas(&r, &topics),
            (BTreeSet::from(["public".to_owned()]), false)
        );
        assert_eq!(
            segments("a.${source.schema}.t"),
            ["a", "${source.schema}", "t"]
        );
    }

    #[test]
    fn per_table_deletes_name_tables_the_topics_reach() {
        use lakesink_config::{DeleteMode, TableSettings};
        let mut r = ReplicaConfig::new("postgres://h/db");
        let topics = vec![
            "demo.public.orders".to_owned(),
            "demo.public.items".to_owned(),
        ];
        assert_eq!(table_settings(&r, &topics), None, "all hard, nothing named");
        r.delete_mode = DeleteMode::Soft;
        let soft = TableSettings {
            delete_mode: Some(DeleteMode::Hard),
            ..TableSettings::default()
        };
        r.tables
            .insert("public.demo_public_items".into(), soft.clone());
        let (status, text) = table_settings(&r, &topics).expect("a line");
        assert_eq!(status, Status::Ok, "{text}");
        assert_eq!(
            text,
            "public.demo_public_orders: soft deletes (__deleted, __deleted_at); \
             public.demo_public_items: hard deletes"
        );
        r.mode = lakesink_config::TableMode::Both;
        let (_, text) = table_settings(&r, &topics).expect("a line");
        assert!(
            text.contains("public.demo_public_items: hard deletes, history in public.demo_public_items_history"),
            "{text}"
        );
        r.mode = lakesink_config::TableMode::Mirror;
        r.stale_guard = true;
        let (_, text) = table_settings(&r, &topics).expect("a line");
        assert!(
            text.contains(
                "public.demo_public_items: hard deletes, stale-event guard (__source_position)"
            ),
            "{text}"
        );
        r.stale_guard = false;
        r.tables.insert("public.demo_public_item".into(), soft);
        let (status, text) = table_settings(&r, &topics).expect("a line");
        assert_eq!(status, Status::Fail, "{text}");
        assert!(text.contains("public.demo_public_item but"), "{text}");
        r.table_name_format = "${source.schema}.${source.table}".into();
        let (status, text) = table_settings(&r, &topics).expect("a line");
        assert_eq!(status, Status::Ok, "{text}");
        assert!(text.contains("known only from the records"), "{text}");
    }
}
