//! The Confluent and Debezium JDBC sinks → `[replica]`.

use toml::Value;

use super::cfg::{Cfg, Connector, Kind, RETRIES, split_list};
use super::transforms::Unwrap;
use super::{ImportError, jdbc_url};

pub(super) fn jdbc(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    unwrap: Option<&Unwrap>,
) -> Result<(), ImportError> {
    let dz = part.kind == Kind::DebeziumJdbc;
    connection(cfg, part, dz)?;
    table_names(cfg, part, dz);
    primary_key(cfg, part, dz);
    applied(cfg, part, dz, unwrap)?;
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
    not_carried(cfg, dz);
    Ok(())
}

/// The database: `connection.url`, the user and the password.
fn connection(cfg: &mut Cfg<'_>, part: &mut Connector, dz: bool) -> Result<(), ImportError> {
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
        cfg.list_dropped(k, reason);
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
    Ok(())
}

/// Table names: Confluent substitutes the topic as is and splits on dots; Debezium's
/// default naming strategy first replaces the topic's dots with underscores.
fn table_names(cfg: &mut Cfg<'_>, part: &mut Connector, dz: bool) {
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
    identifier_case(cfg, part, dz);
    if !dz {
        part.replica.set("dots-to-underscores", false);
        return;
    }
    for k in ["collection.naming.strategy", "table.naming.strategy"] {
        match cfg.plain(k) {
            None => {}
            Some(s) if s.ends_with("DefaultCollectionNamingStrategy") => {}
            Some(s) if s.ends_with("PassthroughCollectionNamingStrategy") => {
                part.replica.set("dots-to-underscores", false);
            }
            Some(s) => cfg.list_dropped(
                k,
                format!(
                    "{s}: a custom naming strategy; lakesink substitutes table-name-format with dots-to-underscores"
                ),
            ),
        }
    }
}

/// Quoted names keep their case; unquoted ones PostgreSQL folds to lower case. The Debezium
/// sink quotes only with `quote.identifiers = true` (default false), Confluent's unless
/// `quote.sql.identifiers = never` (default always).
fn identifier_case(cfg: &mut Cfg<'_>, part: &mut Connector, dz: bool) {
    let quoted = if dz {
        cfg.plain("quote.identifiers")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    } else {
        cfg.plain("quote.sql.identifiers")
            .is_none_or(|v| !v.trim().eq_ignore_ascii_case("never"))
    };
    if !quoted {
        part.replica.set("identifier-case", "lower");
        let key = if dz {
            "quote.identifiers is off (its default)"
        } else {
            "quote.sql.identifiers = never"
        };
        cfg.note(format!(
            "{}: {key}, so PostgreSQL folded the sink's table and column names to lower case → identifier-case = \"lower\", writing to the same tables",
            cfg.file
        ));
    }
}

/// How rows are keyed: `pk.mode`/`primary.key.mode` and the fields.
fn primary_key(cfg: &mut Cfg<'_>, part: &mut Connector, dz: bool) {
    let (mode_key, fields_key) = if dz {
        ("primary.key.mode", "primary.key.fields")
    } else {
        ("pk.mode", "pk.fields")
    };
    let keyed_by_value = part.value_to_key.clone().filter(|f| !f.is_empty());
    match cfg.plain(mode_key).as_deref().map(str::to_ascii_lowercase) {
        None => {}
        // ValueToKey made the key of these value fields: the same rows, keyed by value.
        Some(m) if m == "record_key" && keyed_by_value.is_some() => {
            part.replica.set("pk-mode", "record-value");
            // `pk.fields` picks among the key's fields: here, those value fields.
            let fields = cfg
                .plain(fields_key)
                .map(|f| split_list(&f))
                .filter(|f| !f.is_empty())
                .or(keyed_by_value)
                .unwrap_or_default();
            part.replica.set(
                "pk-fields",
                Value::Array(fields.into_iter().map(Value::String).collect()),
            );
            return;
        }
        Some(m) if m == "record_key" => part.replica.set("pk-mode", "record-key"),
        Some(m) if m == "record_value" => part.replica.set("pk-mode", "record-value"),
        Some(m) => cfg.list_dropped(
            mode_key,
            format!(
                "{m}: lakesink keys rows by the record key (record_key) or value fields (record_value); record_key is used"
            ),
        ),
    }
    if let Some(fields) = cfg.plain(fields_key) {
        let list: Vec<Value> = split_list(&fields).into_iter().map(Value::String).collect();
        if !list.is_empty() {
            part.replica.set("pk-fields", Value::Array(list));
        }
    }
}

/// What is applied: inserts, deletes, truncates, and which tables and columns are made.
/// `unwrap`: the unwrap SMT, which may rewrite deletes as rows with `__deleted = "true"`.
fn applied(
    cfg: &mut Cfg<'_>,
    part: &mut Connector,
    dz: bool,
    unwrap: Option<&Unwrap>,
) -> Result<(), ImportError> {
    match cfg
        .plain("insert.mode")
        .as_deref()
        .map(str::to_ascii_lowercase)
    {
        None => {}
        Some(m) if m == "upsert" => {}
        Some(m) => cfg.list_dropped(
            "insert.mode",
            format!(
                "{m}: lakesink always upserts, so a replayed record converges instead of failing"
            ),
        ),
    }
    // Connect's default is false for both.
    let delete = cfg.bool("delete.enabled")?.unwrap_or(false);
    // The sink wrote each rewritten delete as its row with `__deleted` = 'true', and removed
    // it only on a tombstone with deletes on: soft deletes in that column otherwise, with no
    // time column, which the table never had.
    let soft = unwrap.is_some_and(|u| u.rewrite && !(delete && u.tombstones));
    if soft {
        part.replica.set("delete-enabled", true);
        part.replica.set("delete-mode", "soft");
        part.replica.set("deleted-column", "__deleted");
        part.replica.set("deleted-at-column", "");
        cfg.note(format!(
            "{}: the unwrap SMT rewrites deletes (__deleted = 'true') and the sink never deleted rows → delete-mode = \"soft\" in the table's __deleted column, so deleted rows stay, marked, as before",
            cfg.file
        ));
    } else {
        part.replica.set("delete-enabled", delete);
    }
    if !dz {
        part.replica
            .set("auto-create", cfg.bool("auto.create")?.unwrap_or(false));
        let evolve = cfg.bool("auto.evolve")?.unwrap_or(false);
        part.replica
            .set("schema-evolution", if evolve { "basic" } else { "none" });
        return Ok(());
    }
    if cfg.bool("truncate.enabled")? == Some(true) {
        part.replica.set("truncate-enabled", true);
    }
    schema_evolution(cfg, part)?;
    if let Some(max) = cfg.int("connection.pool.max_size")? {
        part.replica.set("pool-size", max);
    }
    for k in cfg.keys_with_prefix("connection.pool.") {
        cfg.drop(&k, "lakesink's pool has one setting, replica.pool-size");
    }
    Ok(())
}

/// Debezium's `schema.evolution`: `none` (the default) creates and alters nothing; `basic`
/// both.
fn schema_evolution(cfg: &mut Cfg<'_>, part: &mut Connector) -> Result<(), ImportError> {
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
    Ok(())
}

/// Retries, column filters and time zones: lakesink has its own behaviour for each.
fn not_carried(cfg: &mut Cfg<'_>, dz: bool) {
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
    cfg.drop_set(retries, RETRIES);
    cfg.drop_set(
        &[
            "fields.whitelist",
            "field.include.list",
            "field.exclude.list",
        ],
        "lakesink replicates every column",
    );
    for k in ["db.timezone", "use.time.zone", "database.time_zone"] {
        if let Some(tz) = cfg.plain(k)
            && tz != "UTC"
        {
            cfg.list_dropped(
                k,
                "lakesink writes instants as timestamptz and local times as written",
            );
        }
    }
}
