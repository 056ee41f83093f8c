//! What a target table looks like, and making it fit the records: create it with its key,
//! add the columns the writer schema gained. Never drop, never narrow.

use std::collections::HashMap;

use lakesink_config::SchemaEvolution;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use super::defaults::{ColumnDefault, default_sql};
use super::error::ReplicaError;
use super::naming::quote;
use super::plan::{ColumnDef, TableWork};
use super::types::{SourceType, adjusted_from};

/// A table's columns (name → type as `format_type` writes it) and primary key, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TableMeta {
    pub types: HashMap<String, String>,
    pub pk: Vec<String>,
    /// Columns outside the key that are `NOT NULL` without a default: an insert must write
    /// them.
    pub needs_value: Vec<String>,
    /// Columns outside the key that are `NOT NULL` (identity and generated columns aside).
    pub not_null: Vec<String>,
}

/// Reads the table from the catalog; `None` when it does not exist.
pub(crate) async fn load(
    conn: &mut PgConnection,
    work: &TableWork<'_>,
) -> Result<Option<TableMeta>, ReplicaError> {
    let rows = sqlx::query(include_str!("sql/table_columns.sql"))
        .bind(&work.name.schema)
        .bind(&work.name.table)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| ReplicaError::from_sqlx(e, Some(work.at.clone())))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut meta = TableMeta::default();
    let mut pk: Vec<(i32, String)> = Vec::new();
    for r in rows {
        let get = || -> Result<(String, String, Option<i32>, bool, bool), sqlx::Error> {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
            ))
        };
        let (name, ty, pos, not_null, needs_value) =
            get().map_err(|e| ReplicaError::from_sqlx(e, Some(work.at.clone())))?;
        match pos {
            Some(p) => pk.push((p, name.clone())),
            None => {
                if not_null {
                    meta.not_null.push(name.clone());
                }
                if needs_value {
                    meta.needs_value.push(name.clone());
                }
            }
        }
        meta.types.insert(name, ty);
    }
    pk.sort();
    meta.pk = pk.into_iter().map(|(_, n)| n).collect();
    Ok(Some(meta))
}

/// The DDL that makes the table fit `work`, and the table as it will then be.
pub(crate) fn plan_ddl(
    work: &TableWork<'_>,
    existing: Option<&TableMeta>,
    auto_create: bool,
    evolution: SchemaEvolution,
) -> Result<(Vec<String>, TableMeta), String> {
    let table = work.name.quoted();
    let Some(existing) = existing else {
        if !auto_create {
            return Err("the table does not exist and auto-create is off".into());
        }
        let mut defs: Vec<String> = work
            .pk
            .iter()
            .map(|k| format!("{} {} NOT NULL", quote(&k.name), k.ty.ddl))
            .collect();
        defs.extend(work.cols.iter().map(|c| {
            let not_null = if c.required { " NOT NULL" } else { "" };
            format!(
                "{} {}{}{not_null}",
                quote(&c.name),
                c.ty.ddl,
                default_clause(work, c)
            )
        }));
        defs.extend(soft_columns(work).map(|(name, ty, _)| format!("{} {ty}", quote(name))));
        if !work.pk.is_empty() {
            let keys: Vec<String> = work.pk.iter().map(|k| quote(&k.name)).collect();
            defs.push(format!("PRIMARY KEY ({})", keys.join(", ")));
        }
        let meta = TableMeta {
            types: work
                .pk
                .iter()
                .chain(&work.cols)
                .map(|c| (c.name.clone(), c.ty.ddl.clone()))
                .chain(soft_columns(work).map(|(n, _, ty)| (n.to_owned(), ty.to_owned())))
                .collect(),
            pk: work.pk.iter().map(|k| k.name.clone()).collect(),
            needs_value: work
                .cols
                .iter()
                .filter(|c| c.required && !has_default(c))
                .map(|c| c.name.clone())
                .collect(),
            not_null: work
                .cols
                .iter()
                .filter(|c| c.required)
                .map(|c| c.name.clone())
                .collect(),
        };
        return Ok((
            vec![
                format!("CREATE SCHEMA IF NOT EXISTS {}", quote(&work.name.schema)),
                format!("CREATE TABLE IF NOT EXISTS {table} ({})", defs.join(", ")),
            ],
            meta,
        ));
    };
    if let Some(soft) = &work.soft
        && let Some(ty) = existing.types.get(&soft.flag)
        && !(ty == "boolean" || ty == "text" || ty.starts_with("character"))
    {
        return Err(format!(
            "the soft-delete column `{}` is {ty}: it must be boolean (or text, as a JDBC sink's __deleted is)",
            soft.flag
        ));
    }
    if let Some(guard) = work.guard()
        && let Some(ty) = existing.types.get(guard)
        && ty != "text"
    {
        return Err(format!(
            "the stale-event guard's column `{guard}` is {ty}: it must be text (the source position)"
        ));
    }
    let want: Vec<&str> = work.pk.iter().map(|k| k.name.as_str()).collect();
    if !want.is_empty() && existing.pk != want {
        return Err(format!(
            "the table's primary key is ({}) but the records are keyed by ({}); an upsert needs them equal",
            existing.pk.join(", "),
            want.join(", ")
        ));
    }
    if let Some(k) = work
        .pk
        .iter()
        .find(|k| !existing.types.contains_key(&k.name))
    {
        return Err(format!("the table has no key column `{}`", k.name));
    }
    let missing: Vec<_> = work
        .cols
        .iter()
        .filter(|c| !existing.types.contains_key(&c.name))
        .collect();
    let soft_missing: Vec<_> = soft_columns(work)
        .filter(|(n, _, _)| !existing.types.contains_key(*n))
        .collect();
    let widened: Vec<&ColumnDef> = work
        .pk
        .iter()
        .chain(&work.cols)
        .filter(|_| evolution == SchemaEvolution::Evolve)
        .filter(|c| {
            existing
                .types
                .get(&c.name)
                .is_some_and(|have| widens(have, &c.ty.ddl))
        })
        .collect();
    // Under `evolve`, nullability follows the source: a column the table must be given a value
    // for that no record of the call has (the source dropped it) is kept and made nullable,
    // so rows without it can be written; and so is one the source made nullable.
    let evolve = evolution == SchemaEvolution::Evolve && !work.cols.is_empty();
    let gone = existing
        .needs_value
        .iter()
        .filter(|n| !work.cols.iter().any(|c| &c.name == *n))
        .filter(|n| work.soft.as_ref().is_none_or(|s| !s.flag.eq(*n)));
    let loosened = existing
        .not_null
        .iter()
        .filter(|_| work.follows_nulls)
        .filter(|n| work.cols.iter().any(|c| &c.name == *n && !c.required));
    let dropped: Vec<&String> = gone.chain(loosened).filter(|_| evolve).collect();
    if missing.is_empty() && soft_missing.is_empty() && widened.is_empty() && dropped.is_empty() {
        return Ok((Vec::new(), existing.clone()));
    }
    if evolution == SchemaEvolution::None {
        let names: Vec<&str> = missing
            .iter()
            .map(|c| c.name.as_str())
            .chain(soft_missing.iter().map(|(n, _, _)| *n))
            .collect();
        let soft: Vec<String> = soft_missing
            .iter()
            .map(|(n, ddl, _)| format!("{} {ddl}", quote(n)))
            .collect();
        let hint = if soft.is_empty() {
            String::new()
        } else {
            format!(
                " (soft deletes and the stale-event guard need {}: add them, or set schema-evolution = \"basic\")",
                soft.join(", ")
            )
        };
        return Err(format!(
            "the table lacks column(s) {} and schema-evolution is none{hint}",
            names.join(", ")
        ));
    }
    let mut meta = existing.clone();
    let mut adds: Vec<String> = missing
        .iter()
        .map(|c| {
            meta.types.insert(c.name.clone(), c.ty.ddl.clone());
            let default = default_clause(work, c);
            // The rows the table holds need a value: NOT NULL only with a default for them.
            let not_null = match (c.required, default.is_empty()) {
                (true, false) => {
                    meta.not_null.push(c.name.clone());
                    " NOT NULL"
                }
                (true, true) => {
                    tracing::warn!(
                        table = %work.name,
                        column = c.name,
                        "the source column is NOT NULL without a default the replica can \
                         take: added nullable, as the rows the replica holds have no value for it"
                    );
                    ""
                }
                (false, _) => "",
            };
            format!(
                "ADD COLUMN IF NOT EXISTS {} {}{default}{not_null}",
                quote(&c.name),
                c.ty.ddl,
            )
        })
        .collect();
    for name in dropped {
        meta.needs_value.retain(|n| n != name);
        meta.not_null.retain(|n| n != name);
        tracing::warn!(
            table = %work.name,
            column = name,
            "the records no longer have this NOT NULL column, or no longer declare it NOT NULL \
             (changed at the source): it is kept, and made nullable"
        );
        adds.push(format!("ALTER COLUMN {} DROP NOT NULL", quote(name)));
    }
    for (name, ddl, ty) in soft_missing {
        meta.types.insert(name.to_owned(), ty.to_owned());
        adds.push(format!("ADD COLUMN IF NOT EXISTS {} {ddl}", quote(name)));
    }
    for c in widened {
        meta.types.insert(c.name.clone(), c.ty.ddl.clone());
        adds.push(format!("ALTER COLUMN {} TYPE {}", quote(&c.name), c.ty.ddl));
    }
    Ok((
        vec![format!("ALTER TABLE {table} {}", adds.join(", "))],
        meta,
    ))
}

/// Whether a column of type `have` (as `format_type` writes it) must change to `want` to hold
/// every value of `want`, and can without losing any of its own: a wider integer or float,
/// a `numeric` with at least as many digits on both sides of the point (or unbounded), a
/// longer `character(n)`; arrays of those alike.
pub(crate) fn widens(have: &str, want: &str) -> bool {
    let (have, want) = match (have.strip_suffix("[]"), want.strip_suffix("[]")) {
        (Some(h), Some(w)) => (h, w),
        (None, None) => (have, want),
        _ => return false,
    };
    const INTS: [&str; 3] = ["smallint", "integer", "bigint"];
    const FLOATS: [&str; 2] = ["real", "double precision"];
    for family in [&INTS[..], &FLOATS[..]] {
        if let (Some(h), Some(w)) = (
            family.iter().position(|t| *t == have),
            family.iter().position(|t| *t == want),
        ) {
            return w > h;
        }
    }
    // `numeric(p,s)` → (p, s); `numeric` → None (any precision and scale).
    let numeric = |t: &str| -> Option<Option<(i32, i32)>> {
        if t == "numeric" {
            return Some(None);
        }
        let (p, s) = t
            .strip_prefix("numeric(")?
            .strip_suffix(')')?
            .split_once(',')?;
        Some(Some((p.trim().parse().ok()?, s.trim().parse().ok()?)))
    };
    if let (Some(h), Some(w)) = (numeric(have), numeric(want)) {
        return match (h, w) {
            (Some(_), None) => true,
            (Some((hp, hs)), Some((wp, ws))) => {
                (wp, ws) != (hp, hs) && ws >= hs && wp - ws >= hp - hs
            }
            (None, _) => false,
        };
    }
    let chars = |t: &str| -> Option<u32> {
        t.strip_prefix("character(")?
            .strip_suffix(')')?
            .parse()
            .ok()
    };
    matches!((chars(have), chars(want)), (Some(h), Some(w)) if w > h)
}

/// The columns lakesink keeps in `work`'s table: the soft-delete columns and the stale-event
/// guard's: name, definition, and type as `format_type` writes it. Rows there before soft
/// deletes were turned on are live; rows there before the guard have no position, and any
/// event overwrites them.
fn soft_columns<'w>(
    work: &'w TableWork<'_>,
) -> impl Iterator<Item = (&'w str, &'static str, &'static str)> {
    let soft = work.soft.as_ref();
    let flag = soft.map(|s| (s.flag.as_str(), "boolean NOT NULL DEFAULT false", "boolean"));
    let at = soft
        .and_then(|s| s.at.as_deref())
        .map(|a| (a, "timestamptz", "timestamp with time zone"));
    // Compared bytewise: the positions are made to sort so.
    let guard = work.guard().map(|g| (g, "text COLLATE \"C\"", "text"));
    flag.into_iter().chain(at).chain(guard)
}

/// Whether the column gets a default (one the replica can take).
fn has_default(c: &ColumnDef) -> bool {
    matches!(&c.default, ColumnDefault::Sql(v) if default_sql(v, &c.ty).is_ok())
}

/// ` DEFAULT <literal>` when the schema declares a default the replica can take; a WARN
/// when it declares one it cannot.
fn default_clause(work: &TableWork<'_>, c: &ColumnDef) -> String {
    match &c.default {
        ColumnDefault::None => String::new(),
        ColumnDefault::Sql(value) => match default_sql(value, &c.ty) {
            Ok(sql) => format!(" DEFAULT {sql}"),
            Err(why) => unusable(work, c, &why),
        },
        ColumnDefault::Unusable(why) => unusable(work, c, why),
    }
}

fn unusable(work: &TableWork<'_>, c: &ColumnDef, why: &str) -> String {
    tracing::warn!(
        table = %work.name,
        column = c.name,
        reason = why,
        "column added without the schema's default: rows the source gave it without \
         a change event stay NULL in the replica"
    );
    String::new()
}

/// Runs the DDL inside the apply's transaction, so a failed apply leaves no half schema.
pub(crate) async fn run(
    conn: &mut PgConnection,
    work: &TableWork<'_>,
    statements: Vec<String>,
) -> Result<(), ReplicaError> {
    // Concurrent applies (partitions of one topic) may create the same table: PostgreSQL's
    // IF NOT EXISTS is not safe against that race, so DDL on one table is serialised.
    lock(conn, &work.name.quoted())
        .await
        .map_err(|e| ReplicaError::from_sqlx(e, Some(work.at.clone())))?;
    for sql in statements {
        tracing::info!(table = %work.name, sql, "replica schema change");
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .map_err(|e| ReplicaError::from_sqlx(e, Some(work.at.clone())))?;
    }
    Ok(())
}

/// A transaction-scoped advisory lock named by `what`.
pub(crate) async fn lock(conn: &mut PgConnection, what: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(what)
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// Names `work`'s columns as `existing` has them where the records alone cannot tell:
/// - a column whose source name (`__debezium.source.column.name`) the table lacks but whose
///   field name it has: the table was made from records without source names (an earlier
///   lakesink, a connector without `column.propagate.source.type`), and keeps its column;
/// - a key column of a batch of tombstones alone, which carry no value schema and so no source
///   names: the table's key column at its position, where the field is that name with
///   characters turned into `_` (`Id_Key` for `"Id Key"`).
pub(crate) fn resolve_names(work: &mut TableWork<'_>, existing: Option<&TableMeta>) {
    let Some(existing) = existing else {
        return;
    };
    let same_len = work.pk.len() == existing.pk.len();
    for (i, c) in work.pk.iter_mut().enumerate() {
        if existing.types.contains_key(&c.name) {
            continue;
        }
        if existing.types.contains_key(&c.field) {
            c.name.clone_from(&c.field);
        } else if c.name == c.field && same_len && adjusted_from(&c.field, &existing.pk[i]) {
            c.name.clone_from(&existing.pk[i]);
        }
    }
    for c in &mut work.cols {
        if !existing.types.contains_key(&c.name) && existing.types.contains_key(&c.field) {
            c.name.clone_from(&c.field);
        }
    }
}

/// Gives each column about to be created (absent from `existing`) the source's own type where
/// the replica has it; otherwise it keeps its fallback, with a WARN naming table and column.
/// Types are read back as `format_type` spells them, so the table's shape compares equal.
pub(crate) async fn resolve_source_types(
    conn: &mut PgConnection,
    work: &mut TableWork<'_>,
    existing: Option<&TableMeta>,
) -> Result<(), ReplicaError> {
    let name = work.name.to_string();
    let at = work.at.clone();
    let db = |e| ReplicaError::from_sqlx(e, Some(at.clone()));
    for c in work.pk.iter_mut().chain(work.cols.iter_mut()) {
        if existing.is_some_and(|m| m.types.contains_key(&c.name)) {
            continue;
        }
        let Some(source) = c.ty.source.take() else {
            continue;
        };
        let (found, wanted) = match &source {
            SourceType::Named(ty) => {
                let found: Option<String> = sqlx::query_scalar("SELECT to_regtype($1)::text")
                    .bind(ty)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(db)?;
                (found, ty.clone())
            }
            SourceType::Enum {
                name,
                labels,
                array,
            } => {
                let found: Vec<String> = sqlx::query_scalar(include_str!("sql/enum_type.sql"))
                    .bind(name)
                    .bind(labels)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(db)?;
                let brackets = if *array { "[]" } else { "" };
                let found = match found.as_slice() {
                    [one] => Some(format!("{one}{brackets}")),
                    _ => None,
                };
                (found, format!("the enum {name} with labels {labels:?}"))
            }
        };
        match found {
            Some(ty) => c.ty.ddl = ty,
            None => tracing::warn!(
                table = name,
                column = c.name,
                source_type = wanted,
                fallback = c.ty.ddl,
                "the replica has no such type (an extension not installed, an enum not \
                 created, or two enums of that name): the column gets the fallback type"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::widens;

    #[test]
    fn widening_only_where_every_value_still_fits() {
        for (have, want) in [
            ("smallint", "integer"),
            ("integer", "bigint"),
            ("real", "double precision"),
            ("numeric(5,2)", "numeric(12,4)"),
            ("numeric(5,2)", "numeric(6,2)"),
            ("numeric(10,2)", "numeric"),
            ("character(3)", "character(10)"),
            ("integer[]", "bigint[]"),
        ] {
            assert!(widens(have, want), "{have} → {want}");
        }
        for (have, want) in [
            ("bigint", "integer"),
            ("integer", "integer"),
            ("numeric(12,4)", "numeric(12,5)"), // one digit fewer before the point
            ("numeric(12,4)", "numeric(12,3)"), // a digit fewer after it
            ("numeric", "numeric(38,6)"),
            ("integer", "double precision"),
            ("integer", "text"),
            ("text", "character varying(5)"),
            ("character(10)", "character(3)"),
            ("integer", "bigint[]"),
            ("inet", "text"),
        ] {
            assert!(!widens(have, want), "{have} → {want}");
        }
    }
}
