//! One table's share of an apply: truncate, binary COPY of the net rows into a temp staging
//! table, then one `DELETE … USING` and one `INSERT … SELECT … ON CONFLICT` per set of
//! columns written. Nothing is sent per row.
//!
//! Rows whose key the table should not hold yet (first seen as a `c` or `r`, or after a
//! truncate) are tried first with a plain `INSERT` under a savepoint: PostgreSQL's
//! `ON CONFLICT` costs a speculative insertion per row, which more than doubles the server's
//! work on a snapshot. If a key is there after all (a re-snapshot), the savepoint is rolled
//! back and the same rows are upserted; the caller then stops trying on that table for a
//! while.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use lakesink_schema_registry::ChangeBatch;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgConnection;

use super::collapse::{Collapsed, Net, RowRef};
use super::ddl::TableMeta;
use super::encode::{CopyBuf, Enc};
use super::error::{At, ReplicaError};
use super::naming::quote;
use super::plan::TableWork;

/// Stage rows are sent to the server in chunks of about this size.
const CHUNK: usize = 1 << 20;

/// What one table's apply did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub upserted: u64,
    pub deleted: u64,
    pub inserted: u64,
    pub truncated: bool,
    /// A plain insert of fresh rows met a stored key and was redone as an upsert.
    pub fresh_conflict: bool,
}

fn row_at(batches: &[ChangeBatch], work: &TableWork<'_>, r: RowRef) -> At {
    let b = &batches[r.batch as usize];
    let offset = b
        .rows
        .column_by_name("__offset")
        .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
        .map_or(b.first_offset, |o| o.value(r.row as usize));
    At {
        topic: b.topic.to_string(),
        partition: b.partition,
        offsets: (offset, offset),
        table: Some(work.name.to_string()),
    }
}

pub(crate) async fn apply_table(
    conn: &mut PgConnection,
    batches: &[ChangeBatch],
    mut work: TableWork<'_>,
    meta: &TableMeta,
    seq: usize,
    try_plain_insert: bool,
) -> Result<Counts, ReplicaError> {
    let db = |at: &At| {
        let at = at.clone();
        move |e| ReplicaError::from_sqlx(e, Some(at))
    };
    let table = work.name.quoted();
    let Collapsed {
        truncated: truncate,
        entries,
        fresh,
    } = std::mem::take(&mut work.collapser).finish();
    let try_plain_insert = try_plain_insert && !work.keyless();
    let mut counts = Counts {
        truncated: truncate,
        ..Counts::default()
    };
    if truncate {
        sqlx::query(AssertSqlSafe(format!("TRUNCATE {table}")))
            .execute(&mut *conn)
            .await
            .map_err(db(&work.at))?;
    }
    if entries.is_empty() && work.inserts.is_empty() {
        return Ok(counts);
    }

    // Stage: __grp (0 delete, 1.. the set of columns an upsert writes), keys, other columns.
    let stage = quote(&format!("lakesink_stage_{seq}"));
    let mut defs = vec!["\"__grp\" integer".to_owned()];
    defs.extend(
        work.pk
            .iter()
            .chain(&work.cols)
            .map(|c| format!("{} {}", quote(&c.name), c.ty.wire.sql())),
    );
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TEMP TABLE {stage} ({}) ON COMMIT DROP",
        defs.join(", ")
    )))
    .execute(&mut *conn)
    .await
    .map_err(db(&work.at))?;

    let nfields = 1 + work.pk.len() + work.cols.len();
    let ncols = work.cols.len();
    // Per upsert group, by freshness: the columns written, and the group's number.
    let mut groups: [HashMap<Vec<bool>, i32>; 2] = Default::default();
    let mut ngroups = 0;
    let mut copy = conn
        .copy_in_raw(&format!("COPY {stage} FROM STDIN (FORMAT binary)"))
        .await
        .map_err(db(&work.at))?;
    let mut buf = CopyBuf::new();
    // Per row, reused: where each column's value comes from, and which are written.
    let mut cells: Vec<Option<(&Enc<'_>, RowRef)>> = Vec::with_capacity(ncols);
    let mut present: Vec<bool> = Vec::with_capacity(ncols);
    let mut write_row =
        |buf: &mut CopyBuf, key: &[u8], net: Option<&Net>, base: Option<RowRef>, fresh: bool| {
            buf.row(nfields);
            cells.clear();
            present.clear();
            for c in 0..ncols {
                let src = net.map_or(base, |n| n.source(c));
                let cell = src.and_then(|r| {
                    let enc = work.encs.get(&r.batch)?.vals.get(c)?.as_ref()?;
                    Some((enc, r))
                });
                present.push(cell.is_some());
                cells.push(cell);
            }
            let grp = match net {
                Some(Net::Delete(_)) => 0,
                _ => {
                    let by = &mut groups[usize::from(fresh)];
                    match by.get(present.as_slice()) {
                        Some(&g) => g,
                        None => {
                            ngroups += 1;
                            by.insert(present.clone(), ngroups);
                            ngroups
                        }
                    }
                }
            };
            buf.buf.extend_from_slice(&4i32.to_be_bytes());
            buf.buf.extend_from_slice(&grp.to_be_bytes());
            buf.buf.extend_from_slice(key);
            for (c, cell) in cells.iter().enumerate() {
                match cell {
                    Some((enc, r)) => {
                        enc.write(r.row as usize, &mut buf.buf).map_err(|reason| {
                            ReplicaError::BadData {
                                at: row_at(batches, &work, *r),
                                reason: format!("column `{}`: {reason}", work.cols[c].name),
                            }
                        })?
                    }
                    None => buf.null(),
                }
            }
            Ok::<_, ReplicaError>(grp)
        };
    let mut any_delete = false;
    let rows = entries
        .iter()
        .zip(&fresh)
        .map(|((k, n), &f)| (k.as_slice(), Some(n), None, f && try_plain_insert))
        .chain(
            work.inserts
                .iter()
                .map(|r| (&[][..], None, Some(*r), false)),
        );
    for (key, net, base, fresh) in rows {
        let result = write_row(&mut buf, key, net, base, fresh);
        let grp = match result {
            Ok(g) => g,
            Err(e) => {
                let _ = copy.abort("lakesink: bad row").await;
                return Err(e);
            }
        };
        any_delete |= grp == 0;
        match net {
            Some(Net::Delete(_)) => counts.deleted += 1,
            Some(_) => counts.upserted += 1,
            None => counts.inserted += 1,
        }
        if buf.buf.len() >= CHUNK {
            copy.send(std::mem::take(&mut buf.buf))
                .await
                .map_err(db(&work.at))?;
        }
    }
    copy.send(buf.finish()).await.map_err(db(&work.at))?;
    copy.finish().await.map_err(db(&work.at))?;
    crate::failpoint::hit("replica.after-copy");

    let cast = |name: &str| -> String {
        let ty = meta.types.get(name).map_or("text", String::as_str);
        format!("s.{}::{ty}", quote(name))
    };
    if any_delete {
        let on: Vec<String> = work
            .pk
            .iter()
            .map(|k| format!("t.{} = {}", quote(&k.name), cast(&k.name)))
            .collect();
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {table} AS t USING {stage} AS s WHERE s.\"__grp\" = 0 AND {}",
            on.join(" AND ")
        )))
        .execute(&mut *conn)
        .await
        .map_err(db(&work.at))?;
    }
    let keys: Vec<String> = work.pk.iter().map(|k| quote(&k.name)).collect();
    let [stale, fresh_groups] = groups;
    let mut groups: Vec<((Vec<bool>, bool), i32)> = stale
        .into_iter()
        .map(|(p, g)| ((p, false), g))
        .chain(fresh_groups.into_iter().map(|(p, g)| ((p, true), g)))
        .collect();
    groups.sort_by_key(|(_, g)| *g);
    for ((present, fresh), grp) in groups {
        let written: Vec<&str> = work
            .cols
            .iter()
            .zip(&present)
            .filter(|(_, p)| **p)
            .map(|(c, _)| c.name.as_str())
            .collect();
        let names: Vec<&str> = work
            .pk
            .iter()
            .map(|k| k.name.as_str())
            .chain(written.iter().copied())
            .collect();
        let insert = format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {stage} AS s WHERE s.\"__grp\" = {grp}",
            names
                .iter()
                .map(|n| quote(n))
                .collect::<Vec<_>>()
                .join(", "),
            names.iter().map(|n| cast(n)).collect::<Vec<_>>().join(", "),
        );
        let upsert = if work.keyless() {
            insert.clone()
        } else if written.is_empty() {
            format!("{insert} ON CONFLICT ({}) DO NOTHING", keys.join(", "))
        } else {
            let set: Vec<String> = written
                .iter()
                .map(|n| format!("{0} = EXCLUDED.{0}", quote(n)))
                .collect();
            format!(
                "{insert} ON CONFLICT ({}) DO UPDATE SET {}",
                keys.join(", "),
                set.join(", ")
            )
        };
        if fresh && plain_insert(conn, &insert).await.map_err(db(&work.at))? {
            continue;
        }
        counts.fresh_conflict |= fresh;
        sqlx::query(AssertSqlSafe(upsert))
            .execute(&mut *conn)
            .await
            .map_err(db(&work.at))?;
    }
    Ok(counts)
}

/// Runs `insert` under a savepoint: false, with the savepoint rolled back, when a key was
/// stored already.
async fn plain_insert(conn: &mut PgConnection, insert: &str) -> Result<bool, sqlx::Error> {
    sqlx::query("SAVEPOINT lakesink_fresh")
        .execute(&mut *conn)
        .await?;
    match sqlx::query(AssertSqlSafe(insert.to_owned()))
        .execute(&mut *conn)
        .await
    {
        Ok(_) => {
            sqlx::query("RELEASE SAVEPOINT lakesink_fresh")
                .execute(&mut *conn)
                .await?;
            Ok(true)
        }
        Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("23505") => {
            sqlx::query("ROLLBACK TO SAVEPOINT lakesink_fresh")
                .execute(&mut *conn)
                .await?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
