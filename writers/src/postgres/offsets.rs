//! The offsets table: per (group, topic, partition), the next offset the replica needs.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use super::error::ReplicaError;
use super::naming::{TableName, quote};
use crate::sink::TopicPartition;

/// The offsets table's statements, with its (quoted) name filled in.
#[derive(Debug, Clone)]
pub(crate) struct OffsetsSql {
    pub schema: String,
    pub create: String,
    pub lock: String,
    pub read: String,
    pub upsert: String,
}

impl OffsetsSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let q = table.quoted();
        let fill = |s: &str| s.replace("{offsets}", &q);
        Self {
            schema: format!("CREATE SCHEMA IF NOT EXISTS {}", quote(&table.schema)),
            create: fill(include_str!("sql/offsets_create.sql")),
            lock: fill(include_str!("sql/offsets_lock.sql")),
            read: fill(include_str!("sql/offsets_read.sql")),
            upsert: fill(include_str!("sql/offsets_upsert.sql")),
        }
    }
}

fn setup(e: sqlx::Error) -> ReplicaError {
    ReplicaError::from_sqlx(e, None)
}

/// Locks and reads the stored next offsets of `parts` for `group`.
pub(crate) async fn lock(
    conn: &mut PgConnection,
    sql: &OffsetsSql,
    group: &str,
    parts: &[TopicPartition],
) -> Result<HashMap<TopicPartition, i64>, ReplicaError> {
    let (topics, partitions): (Vec<&str>, Vec<i32>) =
        parts.iter().map(|p| (&*p.topic, p.partition)).unzip();
    let rows = sqlx::query(AssertSqlSafe(sql.lock.clone()))
        .bind(group)
        .bind(&topics)
        .bind(&partitions)
        .fetch_all(&mut *conn)
        .await
        .map_err(setup)?;
    rows.iter()
        .map(|r| {
            Ok((
                TopicPartition::new(r.try_get::<String, _>(0)?, r.try_get::<i32, _>(1)?),
                r.try_get::<i64, _>(2)?,
            ))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(setup)
}

/// Stores `next` offsets for `group`; offsets never move back.
pub(crate) async fn store(
    conn: &mut PgConnection,
    sql: &OffsetsSql,
    group: &str,
    next: &[(TopicPartition, i64)],
) -> Result<(), ReplicaError> {
    let topics: Vec<&str> = next.iter().map(|(p, _)| &*p.topic).collect();
    let partitions: Vec<i32> = next.iter().map(|(p, _)| p.partition).collect();
    let offsets: Vec<i64> = next.iter().map(|(_, o)| *o).collect();
    sqlx::query(AssertSqlSafe(sql.upsert.clone()))
        .bind(group)
        .bind(&topics)
        .bind(&partitions)
        .bind(&offsets)
        .execute(&mut *conn)
        .await
        .map_err(setup)?;
    Ok(())
}
