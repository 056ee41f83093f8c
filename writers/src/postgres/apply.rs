//! One table's share of an apply: truncate, binary COPY of the net rows into a temp staging
//! table, then one `DELETE … USING` and one `INSERT … SELECT … ON CONFLICT` per set of
//! columns written. Nothing is sent per row.
//!
//! Rows whose key the table should not hold yet (first seen as a `c` or `r`, or after a
//! truncate), and a keyless table's rows, skip the staging table where they can: when every
//! column they write has the type its values travel as, they are copied straight into the
//! table, under a savepoint. Otherwise they are tried with a plain `INSERT … SELECT` under a
//! savepoint. Either way that spares PostgreSQL `ON CONFLICT`'s speculative insertion per
//! row, which more than doubles its work on a snapshot; the direct COPY also spares it the
//! staging table, halving its work again. If a key is there after all (a re-snapshot), the
//! savepoint is rolled back and the same rows are upserted through the staging table; the
//! caller then stops trying on that table for a while.
//!
//! With the stale-event guard, every row written carries its change's source position, and
//! staged rows whose stored row holds a later position are dropped from the staging table
//! (and counted) before anything is written; the delete and the upsert check it again, for a
//! row another transaction wrote meanwhile.
//!
//! The new key of a key change takes the columns its create left untouched from the old
//! key's stored row: the staging table holds the old key too, and one `UPDATE … FROM` per
//! group fills those columns in from the table before the `DELETE` removes the old row.

use arrow_array::cast::AsArray;
use lakesink_schema_registry::ChangeBatch;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgConnection;

use super::collapse::{Collapsed, Mark, Net, RowRef};
use super::ddl::TableMeta;
use super::encode::{CopyBuf, Enc, loses_digits, pg_timestamp};
use super::error::{At, ReplicaError};
use super::naming::quote;
use super::plan::{ColumnDef, TableWork, View};
use super::types::{Conv, unbounded};

/// Stage rows are sent to the server in chunks of about this size.
const CHUNK: usize = 1 << 20;

/// What one table's apply did.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub upserted: u64,
    pub deleted: u64,
    pub inserted: u64,
    pub truncated: bool,
    /// A plain insert of fresh rows met a stored key and was redone as an upsert.
    pub fresh_conflict: bool,
    /// Rows of keys moved from another key, with columns copied from the old key's row.
    pub moved: u64,
    /// Per column (key columns included) whose values the replica rounds to the microsecond
    /// (SQL Server's `datetimeoffset(7)` text, nanosecond times and timestamps): how many
    /// values written lose digits.
    pub rounded: Vec<(String, u64)>,
    /// Per column: values written NULL because the replica could not know them (an
    /// unchanged TOASTed column of a key change, or of an update, whose old row it did not
    /// hold).
    pub unknown: Vec<(String, u64)>,
    /// Bytes of COPY data sent (the table's own and its staging table's).
    pub copied_bytes: u64,
    /// Writes and deletes left out by the stale-event guard: the row held a later change.
    pub stale: u64,
}

/// Per column whose values the replica rounds to the microsecond (text PostgreSQL rounds,
/// [`Conv::ZonedText`], or nanoseconds): how many of the values `rows` write lose digits.
fn rounded<'e>(
    work: &TableWork<'_>,
    rows: &[Row<'_>],
    cell: impl Fn(Option<&Net>, Option<RowRef>, usize) -> Option<(&'e Enc<'e>, usize)>,
) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let written = || rows.iter().filter(|r| r.grp > 0);
    for (k, col) in work.pk.iter().enumerate() {
        if col.ty.conv == Conv::ZonedText {
            let n = written()
                .filter(|r| key_field(r.key, k).is_some_and(loses_digits))
                .count();
            out.push((col.name.clone(), n as u64));
        }
    }
    for (c, col) in work.cols.iter().enumerate() {
        let nanos = work.encs.values().any(|e| {
            e.vals
                .get(c)
                .is_some_and(|e| e.as_ref().is_some_and(Enc::may_round))
        });
        if col.ty.conv == Conv::ZonedText || nanos {
            let n = written()
                .filter_map(|r| cell(r.net, r.base, c))
                .filter(|(enc, i)| enc.rounds(*i) || enc.text(*i).is_some_and(loses_digits))
                .count();
            out.push((col.name.clone(), n as u64));
        }
    }
    // A written row's key holds what its base row holds (the key record's fields, or the
    // after image's: the same values).
    let key_enc = |r: RowRef, k: usize| {
        let e = work.encs.get(&r.batch)?;
        e.key_in_key.as_ref().or(e.key_in_after.as_ref())?.get(k)
    };
    for (k, col) in work.pk.iter().enumerate() {
        let nanos = work.encs.values().any(|e| {
            [&e.key_in_key, &e.key_in_after].iter().any(|v| {
                v.as_ref()
                    .and_then(|v| v.get(k))
                    .is_some_and(Enc::may_round)
            })
        });
        if nanos {
            let n = written()
                .filter_map(|r| r.net.map_or(r.base, Net::base))
                .filter(|b| key_enc(*b, k).is_some_and(|e| e.rounds(b.row as usize)))
                .count();
            out.push((col.name.clone(), n as u64));
        }
    }
    out.retain(|(_, n)| *n > 0);
    out
}

/// Field `k` of an encoded key, as text.
fn key_field(key: &[u8], k: usize) -> Option<&str> {
    let mut rest = key;
    for _ in 0..k {
        rest = split_field(rest)?.1;
    }
    std::str::from_utf8(split_field(rest)?.0).ok()
}

/// The first field of an encoded key (binary COPY fields: a length, then the bytes) and what
/// follows it. A NULL (-1) has no bytes.
fn split_field(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = i32::from_be_bytes(key.get(..4)?.try_into().ok()?);
    let rest = &key[4..];
    let len = usize::try_from(len).unwrap_or(0);
    (len <= rest.len()).then(|| rest.split_at(len))
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

/// How a group of rows is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// Upsert: the key may be stored.
    Upsert,
    /// Keys the table should not hold yet: a plain insert is tried first.
    Fresh,
    /// A keyless table's rows.
    Insert,
}

/// Rows written alike: the same kind, the same set of columns written, and the same set of
/// those copied from the stored row of the key they moved from.
struct Group {
    kind: Kind,
    present: Vec<bool>,
    from_old: Vec<bool>,
    /// Columns left as stored (an unchanged-TOAST placeholder): a row this group inserts,
    /// the key not being stored, has no value for them.
    kept: Vec<bool>,
}

impl Group {
    fn moves(&self) -> bool {
        self.from_old.iter().any(|c| *c)
    }
}

/// The staging table's name for column `c`: `k<i>` for the i-th key column, `c<i>` for the
/// i-th value column.
fn staged_as(work: &TableWork<'_>, c: &ColumnDef) -> String {
    if let Some(k) = work.pk.iter().position(|k| k.name == c.name) {
        return format!("k{k}");
    }
    match work.cols.iter().position(|v| v.name == c.name) {
        Some(i) => format!("c{i}"),
        // Not one of the table's columns: its own name, which the staging table lacks, so
        // the statement fails rather than reading another column.
        None => quote(&c.name),
    }
}

/// The key columns, then the columns `g` writes.
fn columns_of<'w>(work: &'w TableWork<'_>, g: &Group) -> impl Iterator<Item = &'w ColumnDef> {
    let written = work.cols.iter().zip(&g.present).filter(|(_, p)| **p);
    work.pk.iter().chain(written.map(|(c, _)| c))
}

/// A row to write: its encoded key, its net effect (none for a keyless insert), its row for
/// a keyless insert, its group (0: a delete; otherwise 1 + an index into the groups), and
/// with soft deletes the delete that marks it.
struct Row<'a> {
    key: &'a [u8],
    net: Option<&'a Net>,
    base: Option<RowRef>,
    grp: usize,
    mark: Option<Mark>,
}

/// Applies `work` to its table within `conn`'s transaction; `seq` names its staging table.
pub(crate) async fn apply_table(
    conn: &mut PgConnection,
    batches: &[ChangeBatch],
    mut work: TableWork<'_>,
    meta: &TableMeta,
    seq: usize,
    try_plain_insert: bool,
) -> Result<Counts, ReplicaError> {
    let table = work.name.quoted();
    let Collapsed {
        truncated: truncate,
        truncate_mark,
        entries,
        fresh,
        marks,
    } = std::mem::take(&mut work.collapser).finish();
    let try_plain_insert = try_plain_insert && !work.keyless();
    let mut counts = Counts {
        truncated: truncate,
        ..Counts::default()
    };
    if truncate {
        let sql = match &work.soft {
            None => format!("TRUNCATE {table}"),
            Some(soft) => soft_truncate_sql(&table, meta, soft, truncate_mark),
        };
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .map_err(db(&work.at))?;
    }
    if entries.is_empty() && work.inserts.is_empty() {
        return Ok(counts);
    }

    let work = &work;
    let (groups, rows) = group_rows(
        work,
        &entries,
        &fresh,
        &marks,
        try_plain_insert,
        &mut counts,
    );
    counts.rounded = rounded(work, &rows, |net, base, c| {
        cell(work, net, base, c).map(|(enc, r)| (enc, r.row as usize))
    });
    let views = match work.guard() {
        Some(_) => batches.iter().map(|b| View::new(b).ok()).collect(),
        None => Vec::new(),
    };
    let a = Apply {
        batches,
        views,
        work,
        meta,
        table,
        groups,
        rows,
    };
    let (done, conflicted) = a.copy_straight(conn, &mut counts).await?;
    if !a.rows.iter().any(|r| staged(r, &done)) {
        crate::failpoint::hit(crate::failpoint::REPLICA_AFTER_COPY);
        return Ok(counts);
    }
    let stage = quote(&format!("lakesink_stage_{seq}"));
    counts.copied_bytes += a.stage(conn, &stage, &done).await?;
    crate::failpoint::hit(crate::failpoint::REPLICA_AFTER_COPY);
    let stale = a.drop_stale(conn, &stage, &mut counts).await?;
    let any_delete = a.rows.iter().any(|r| r.grp == 0);
    a.fill_moved(conn, &stage, &stale, &mut counts).await?;
    if any_delete {
        a.delete(conn, &stage).await?;
    }
    a.upsert(conn, &stage, (&done, &conflicted), &stale, &mut counts)
        .await?;
    Ok(counts)
}

/// A database error, placed at `at`.
fn db(at: &At) -> impl FnOnce(sqlx::Error) -> ReplicaError + use<> {
    let at = at.clone();
    move |e| ReplicaError::from_sqlx(e, Some(at))
}

/// Where column `c` of a row comes from; `None`: not written.
fn cell<'a, 'w>(
    work: &'a TableWork<'w>,
    net: Option<&Net>,
    base: Option<RowRef>,
    c: usize,
) -> Option<(&'a Enc<'w>, RowRef)> {
    let r = net.map_or(base, |n| n.source(c))?;
    let enc = work.encs.get(&r.batch)?.vals.get(c)?.as_ref()?;
    Some((enc, r))
}

/// The rows to write, each in its group: the keys' net effects, then a keyless table's rows.
fn group_rows<'a>(
    work: &'a TableWork<'_>,
    entries: &'a [(Vec<u8>, Net)],
    fresh: &[bool],
    marks: &[Option<Mark>],
    try_plain_insert: bool,
    counts: &mut Counts,
) -> (Vec<Group>, Vec<Row<'a>>) {
    let mut grouping = Grouping::new(work.cols.len());
    let mut rows: Vec<Row<'_>> = Vec::with_capacity(entries.len() + work.inserts.len());
    let keyed = entries
        .iter()
        .zip(fresh)
        .enumerate()
        .map(|(i, ((k, n), &f))| {
            let kind = if f && try_plain_insert {
                Kind::Fresh
            } else {
                Kind::Upsert
            };
            let mark = marks.get(i).copied().flatten();
            (k.as_slice(), Some(n), None, kind, mark)
        });
    let keyless = work.inserts.iter().enumerate().map(|(i, r)| {
        let mark = work.insert_marks.get(i).copied().flatten();
        (&[][..], None, Some(*r), Kind::Insert, mark)
    });
    for (key, net, base, kind, mark) in keyed.chain(keyless) {
        let grp = match net {
            Some(Net::Delete(_)) => {
                counts.deleted += 1;
                0
            }
            _ => {
                if net.is_some() {
                    counts.upserted += 1;
                } else {
                    counts.inserted += 1;
                }
                grouping.group_of(work, net, base, kind)
            }
        };
        rows.push(Row {
            key,
            net,
            base,
            grp,
            mark,
        });
    }
    (grouping.groups, rows)
}

/// The groups found so far, and the column sets of the row being grouped (kept to spare an
/// allocation per row).
struct Grouping {
    groups: Vec<Group>,
    present: Vec<bool>,
    from_old: Vec<bool>,
    kept: Vec<bool>,
}

impl Grouping {
    fn new(ncols: usize) -> Self {
        Self {
            groups: Vec::new(),
            present: Vec::with_capacity(ncols),
            from_old: Vec::with_capacity(ncols),
            kept: Vec::with_capacity(ncols),
        }
    }

    /// The group of a row written from `net` (or a keyless table's `base`) as `kind`, added
    /// when new: 1 + its index.
    fn group_of(
        &mut self,
        work: &TableWork<'_>,
        net: Option<&Net>,
        base: Option<RowRef>,
        kind: Kind,
    ) -> usize {
        let Self {
            groups,
            present,
            from_old,
            kept,
        } = self;
        let ncols = work.cols.len();
        from_old.clear();
        from_old.extend((0..ncols).map(|c| net.is_some_and(|n| n.copies_old(c))));
        present.clear();
        present.extend((0..ncols).map(|c| from_old[c] || cell(work, net, base, c).is_some()));
        // Kept as stored because of a placeholder: the column is in the record's schema
        // (one it lacks is left alone rightly, or gets its default).
        let in_schema = |c: usize| {
            net.and_then(Net::base)
                .and_then(|b| work.encs.get(&b.batch))
                .is_some_and(|e| e.vals.get(c).is_some_and(Option::is_some))
        };
        kept.clear();
        kept.extend(
            (0..ncols).map(|c| !from_old[c] && net.is_some_and(|n| n.keeps(c)) && in_schema(c)),
        );
        // Groups are few (kinds times sets of columns a run leaves untouched).
        match groups.iter().position(|g| {
            g.kind == kind && g.present == *present && g.from_old == *from_old && g.kept == *kept
        }) {
            Some(g) => g + 1,
            None => {
                groups.push(Group {
                    kind,
                    present: present.clone(),
                    from_old: from_old.clone(),
                    kept: kept.clone(),
                });
                groups.len()
            }
        }
    }
}

/// Whether a row goes through the staging table: a delete, or a row of a group not copied
/// straight into the table (`done`, per group).
fn staged(r: &Row<'_>, done: &[bool]) -> bool {
    r.grp == 0 || !done[r.grp - 1]
}

/// `rows` ordered by their keys, for the staging table. It is scanned in the order it was
/// written, and the delete and the upsert look each of its keys up in the table's key index:
/// in key order, neighbouring lookups share index and heap pages, where the order of arrival
/// (random keys, for updates) sends each to pages of its own. Each key is staged once, so the
/// order changes nothing else. A keyless table's rows (empty keys) keep their order.
fn by_key<'r, 'k>(rows: impl Iterator<Item = &'r Row<'k>>) -> Vec<&'r Row<'k>> {
    let mut rows: Vec<&Row<'k>> = rows.collect();
    rows.sort_by(|a, b| key_order(a.key, b.key));
    rows
}

/// Encoded keys (binary COPY fields: a length, then the bytes) compared field by field, each
/// by its bytes: big-endian integers ascend (negatives after positives) and text sorts as in
/// the "C" collation, close enough to PostgreSQL's own order to keep neighbours together.
fn key_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (split_field(a), split_field(b)) {
            (Some((fa, ra)), Some((fb, rb))) => match fa.cmp(fb) {
                std::cmp::Ordering::Equal => (a, b) = (ra, rb),
                unequal => return unequal,
            },
            _ => return a.cmp(b),
        }
    }
}

/// The staging table's column for the old key's `k`-th column.
fn old_col(k: usize) -> String {
    format!("o{k}")
}

/// Column names, quoted, for a column list.
fn quoted_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| quote(n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One table's rows, grouped, and what the steps that write them read.
struct Apply<'a, 'w> {
    batches: &'a [ChangeBatch],
    /// With the stale-event guard: each batch's columns, for the rows' source positions.
    views: Vec<Option<View<'a>>>,
    work: &'a TableWork<'w>,
    meta: &'a TableMeta,
    /// The table's name, quoted.
    table: String,
    groups: Vec<Group>,
    rows: Vec<Row<'a>>,
}

impl Apply<'_, '_> {
    /// How many rows group `grp` (1 + its index) holds.
    fn members(&self, grp: usize) -> u64 {
        self.rows.iter().filter(|r| r.grp == grp).count() as u64
    }

    /// How many rows of group `grp` the stale-event guard left in the staging table.
    fn left(&self, grp: usize, stale: &[u64]) -> u64 {
        self.members(grp)
            .saturating_sub(stale.get(grp).copied().unwrap_or(0))
    }

    /// With the stale-event guard, the row's field holding its change's source position
    /// (written after the soft-delete fields): NULL where the source has none.
    fn write_position(&self, buf: &mut CopyBuf, row: &Row<'_>) {
        if self.work.guard().is_none() {
            return;
        }
        // A marked row's latest change is the delete or truncate that marked it.
        let from = match (row.mark, row.net) {
            (Some(m), _) => Some(m.1),
            (None, Some(Net::Delete(r))) => Some(*r),
            (None, Some(n)) => n.base(),
            (None, None) => row.base,
        };
        let position = from.and_then(|r| {
            let view = self.views.get(r.batch as usize)?.as_ref()?;
            view.position(r.row as usize)
        });
        match position {
            Some(p) => {
                let len = i32::try_from(p.len()).unwrap_or(i32::MAX);
                buf.buf.extend_from_slice(&len.to_be_bytes());
                buf.buf.extend_from_slice(p.as_bytes());
            }
            None => buf.null(),
        }
    }

    /// The guard's condition for writing over the stored row `stored` (an alias) with the
    /// position `new`: unless the stored row's change is later.
    fn unless_later(&self, stored: &str, new: &str) -> Option<String> {
        let g = quote(self.work.guard()?);
        Some(format!(
            "({stored}.{g} IS NULL OR {new} IS NULL OR {stored}.{g} COLLATE \"C\" <= {new})"
        ))
    }

    /// Writes a row's column fields (its key is written before them): every column (`all`)
    /// or only those written.
    fn write_fields(
        &self,
        buf: &mut CopyBuf,
        row: &Row<'_>,
        all: bool,
    ) -> Result<(), ReplicaError> {
        let p = (row.grp > 0).then(|| &self.groups[row.grp - 1].present);
        for c in 0..self.work.cols.len() {
            let written = p.is_some_and(|p| p[c]);
            if !written && !all {
                continue;
            }
            match cell(self.work, row.net, row.base, c).filter(|_| written) {
                Some((enc, r)) => enc.write(r.row as usize, &mut buf.buf).map_err(|reason| {
                    ReplicaError::BadData {
                        at: row_at(self.batches, self.work, r),
                        reason: format!("column `{}`: {reason}", self.work.cols[c].name),
                    }
                })?,
                None => buf.null(),
            }
        }
        Ok(())
    }

    /// With soft deletes, the row's marking fields (written after its columns): deleted or
    /// not, and when.
    fn write_soft(&self, buf: &mut CopyBuf, row: &Row<'_>) -> Result<(), ReplicaError> {
        let Some(soft) = &self.work.soft else {
            return Ok(());
        };
        let deleted = row.grp == 0 || row.mark.is_some();
        buf.buf.extend_from_slice(&1i32.to_be_bytes());
        buf.buf.push(u8::from(deleted));
        if soft.at.is_some() {
            match row.mark.and_then(|m| m.0) {
                Some(us) => {
                    let ts = pg_timestamp(us).map_err(|reason| ReplicaError::BadData {
                        at: self.work.at.clone(),
                        reason: format!("the delete's time: {reason}"),
                    })?;
                    buf.buf.extend_from_slice(&8i32.to_be_bytes());
                    buf.buf.extend_from_slice(&ts.to_be_bytes());
                }
                None => buf.null(),
            }
        }
        Ok(())
    }

    /// The soft-delete columns' names (none for hard deletes).
    fn soft_names(&self) -> Vec<&str> {
        self.work.soft.as_ref().map_or_else(Vec::new, |s| {
            std::iter::once(s.flag.as_str())
                .chain(s.at.as_deref())
                .collect()
        })
    }

    /// The soft-delete columns' staged values, cast to their types in the table.
    fn soft_casts(&self) -> Vec<String> {
        let names = self.soft_names();
        names
            .iter()
            .zip(["s.d", "s.dt"])
            .map(|(n, staged)| {
                let ty = self.meta.types.get(*n).map_or("text", String::as_str);
                format!("{staged}::{}", unbounded(ty))
            })
            .collect()
    }

    /// The key columns, the columns `g` writes, the soft-delete columns, then the guard's.
    fn names_of(&self, g: &Group) -> Vec<&str> {
        let mut names: Vec<&str> = columns_of(self.work, g).map(|c| c.name.as_str()).collect();
        names.extend(self.soft_names());
        names.extend(self.work.guard());
        names
    }

    /// Whether `g`'s rows can be copied straight into the table: every column's wire type is
    /// the column's type.
    fn fits(&self, g: &Group) -> bool {
        let soft = self.soft_names();
        let soft_fits = soft
            .iter()
            .zip(["boolean", "timestamp with time zone"])
            .all(|(n, wire)| self.meta.types.get(*n).is_some_and(|t| t == wire));
        let guard_fits = self
            .work
            .guard()
            .is_none_or(|n| self.meta.types.get(n).is_some_and(|t| t == "text"));
        !g.moves()
            && soft_fits
            && guard_fits
            && columns_of(self.work, g).all(|c| {
                self.meta
                    .types
                    .get(&c.name)
                    .is_some_and(|t| c.ty.wire.fits(t))
            })
    }

    /// The column's type in the table.
    fn actual(&self, c: &ColumnDef) -> &str {
        self.meta.types.get(&c.name).map_or("text", String::as_str)
    }

    /// The staged value of `c`, cast to the column's type.
    fn cast(&self, c: &ColumnDef) -> String {
        c.ty.cast_staged(&format!("s.{}", staged_as(self.work, c)), self.actual(c))
    }

    /// Rows the table cannot hold yet go straight in by binary COPY, where every column's
    /// wire type is the column's type: no staging table, no second pass over the rows.
    /// Returns, per group: copied straight into the table; a fresh group's copy met a
    /// stored key.
    async fn copy_straight(
        &self,
        conn: &mut PgConnection,
        counts: &mut Counts,
    ) -> Result<(Vec<bool>, Vec<bool>), ReplicaError> {
        let (at, table) = (&self.work.at, &self.table);
        let mut done = vec![false; self.groups.len()];
        let mut conflicted = vec![false; self.groups.len()];
        for (g, group) in self.groups.iter().enumerate() {
            if group.kind == Kind::Upsert || !self.fits(group) {
                continue;
            }
            let fresh = group.kind == Kind::Fresh;
            let names = self.names_of(group);
            let sql = format!(
                "COPY {table} ({}) FROM STDIN (FORMAT binary)",
                quoted_list(&names)
            );
            let nfields = names.len();
            if fresh {
                savepoint(conn, "SAVEPOINT lakesink_fresh")
                    .await
                    .map_err(db(at))?;
            }
            let members = self.rows.iter().filter(|r| r.grp == g + 1);
            let copied = copy_rows(conn, &sql, members, |buf, row| {
                buf.row(nfields);
                buf.buf.extend_from_slice(row.key);
                self.write_fields(buf, row, false)?;
                self.write_soft(buf, row)?;
                self.write_position(buf, row);
                Ok(())
            });
            match copied.await {
                Ok(bytes) => {
                    counts.copied_bytes += bytes;
                    if fresh {
                        savepoint(conn, "RELEASE SAVEPOINT lakesink_fresh")
                            .await
                            .map_err(db(at))?;
                    }
                    done[g] = true;
                    kept_unknown(self.work, group, self.members(g + 1), counts);
                }
                Err(CopyError::Db(e)) if fresh && is_unique_violation(&e) => {
                    savepoint(conn, "ROLLBACK TO SAVEPOINT lakesink_fresh")
                        .await
                        .map_err(db(at))?;
                    conflicted[g] = true;
                    counts.fresh_conflict = true;
                }
                Err(e) => return Err(e.at(at)),
            }
        }
        Ok((done, conflicted))
    }

    /// The rest through a staging table: grp (0 delete, else the group), keys, columns, and
    /// when keys moved, the old keys. Its columns are named by position, so no source column
    /// name (`grp`, say) can clash with them.
    async fn stage(
        &self,
        conn: &mut PgConnection,
        stage: &str,
        done: &[bool],
    ) -> Result<u64, ReplicaError> {
        let work = self.work;
        let moves = self.groups.iter().any(Group::moves);
        let mut defs = vec!["grp integer".to_owned()];
        defs.extend(
            work.pk
                .iter()
                .chain(&work.cols)
                .map(|c| format!("{} {}", staged_as(work, c), c.ty.wire.sql())),
        );
        let soft = self.soft_names().len();
        defs.extend(
            ["d boolean", "dt timestamptz"]
                .into_iter()
                .take(soft)
                .map(String::from),
        );
        let guard = usize::from(work.guard().is_some());
        if guard > 0 {
            defs.push("pos text COLLATE \"C\"".to_owned());
        }
        if moves {
            defs.extend(
                work.pk
                    .iter()
                    .enumerate()
                    .map(|(k, c)| format!("{} {}", old_col(k), c.ty.wire.sql())),
            );
        }
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TEMP TABLE {stage} ({}) ON COMMIT DROP",
            defs.join(", ")
        )))
        .execute(&mut *conn)
        .await
        .map_err(db(&work.at))?;
        let nfields = 1
            + work.pk.len()
            + work.cols.len()
            + soft
            + guard
            + if moves { work.pk.len() } else { 0 };
        let sql = format!("COPY {stage} FROM STDIN (FORMAT binary)");
        let rows = by_key(self.rows.iter().filter(|r| staged(r, done)));
        copy_rows(conn, &sql, rows.into_iter(), |buf, row| {
            buf.row(nfields);
            let grp = i32::try_from(row.grp).unwrap_or(i32::MAX);
            buf.buf.extend_from_slice(&4i32.to_be_bytes());
            buf.buf.extend_from_slice(&grp.to_be_bytes());
            buf.buf.extend_from_slice(row.key);
            self.write_fields(buf, row, true)?;
            self.write_soft(buf, row)?;
            self.write_position(buf, row);
            if moves {
                match row.net.and_then(Net::moved) {
                    Some(m) => buf.buf.extend_from_slice(&m.old_key),
                    None => work.pk.iter().for_each(|_| buf.null()),
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| e.at(&work.at))
    }

    /// With the stale-event guard: drops the staged rows whose stored row holds a later
    /// change, and counts them; per group (0: deletes), how many.
    async fn drop_stale(
        &self,
        conn: &mut PgConnection,
        stage: &str,
        counts: &mut Counts,
    ) -> Result<Vec<u64>, ReplicaError> {
        let Some(guard) = self.work.guard() else {
            return Ok(Vec::new());
        };
        let sql = format!(
            "WITH d AS (DELETE FROM {stage} AS s USING {} AS t WHERE {} \
             AND t.{} COLLATE \"C\" > s.pos RETURNING s.grp) \
             SELECT grp, count(*) FROM d GROUP BY grp",
            self.table,
            self.key_match("t"),
            quote(guard)
        );
        let found: Vec<(i32, i64)> = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_all(&mut *conn)
            .await
            .map_err(db(&self.work.at))?;
        let mut stale = vec![0u64; self.groups.len() + 1];
        for (grp, n) in found {
            if let Some(s) = usize::try_from(grp).ok().and_then(|g| stale.get_mut(g)) {
                *s += n.unsigned_abs();
                counts.stale += n.unsigned_abs();
            }
        }
        if counts.stale > 0 {
            tracing::debug!(
                table = %self.work.name,
                topic = self.work.at.topic,
                partition = self.work.at.partition,
                offsets = ?self.work.at.offsets,
                stale = counts.stale,
                "changes older than what the replica holds for their keys left out"
            );
        }
        Ok(stale)
    }

    /// Moved keys take their old key's stored values, before the old key's delete.
    async fn fill_moved(
        &self,
        conn: &mut PgConnection,
        stage: &str,
        stale: &[u64],
        counts: &mut Counts,
    ) -> Result<(), ReplicaError> {
        for (g, group) in self.groups.iter().enumerate().filter(|(_, g)| g.moves()) {
            let grp = g + 1;
            let copied = sqlx::query(AssertSqlSafe(self.fill_sql(stage, grp, group)))
                .execute(&mut *conn)
                .await
                .map_err(db(&self.work.at))?
                .rows_affected();
            let members = self.left(grp, stale);
            counts.moved += members;
            count_unknown(
                self.work,
                &group.from_old,
                members - copied.min(members),
                "a key change's old row is not in the replica: the new row's unchanged (TOASTed) \
                 columns are left NULL",
                counts,
            );
        }
        Ok(())
    }

    /// The `UPDATE … FROM` that fills group `grp`'s moved keys in from their old keys' rows.
    fn fill_sql(&self, stage: &str, grp: usize, group: &Group) -> String {
        let (work, table) = (self.work, &self.table);
        let set: Vec<String> = work
            .cols
            .iter()
            .zip(&group.from_old)
            .filter(|(_, copy)| **copy)
            .map(|(c, _)| {
                let stored = format!("o.{}", quote(&c.name));
                format!(
                    "{} = {}",
                    staged_as(work, c),
                    c.ty.cast_stored(&stored, self.actual(c))
                )
            })
            .collect();
        let on: Vec<String> = work
            .pk
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let old = format!("s.{}", old_col(k));
                format!(
                    "o.{} = {}",
                    quote(&c.name),
                    c.ty.cast_staged(&old, self.actual(c))
                )
            })
            .collect();
        format!(
            "UPDATE {stage} AS s SET {} FROM {table} AS o WHERE s.grp = {grp} AND {}",
            set.join(", "),
            on.join(" AND ")
        )
    }

    /// `alias`'s key columns equal to the staged key (`s`), for a join.
    fn key_match(&self, alias: &str) -> String {
        let on: Vec<String> = self
            .work
            .pk
            .iter()
            .map(|k| format!("{alias}.{} = {}", quote(&k.name), self.cast(k)))
            .collect();
        on.join(" AND ")
    }

    /// Deletes the staged deletes' keys; with soft deletes, marks their rows deleted (as of
    /// the earlier delete, for a row marked already).
    async fn delete(&self, conn: &mut PgConnection, stage: &str) -> Result<(), ReplicaError> {
        let table = &self.table;
        let on = self.key_match("t");
        let on = match self.unless_later("t", "s.pos") {
            Some(guard) => format!("{on} AND {guard}"),
            None => on,
        };
        let sql = match &self.work.soft {
            None => format!("DELETE FROM {table} AS t USING {stage} AS s WHERE s.grp = 0 AND {on}"),
            Some(soft) => {
                let casts = self.soft_casts();
                let flag = quote(&soft.flag);
                let mut set = vec![format!("{flag} = {}", casts[0])];
                if let (Some(at), Some(cast)) = (&soft.at, casts.get(1)) {
                    let at = quote(at);
                    set.push(format!(
                        "{at} = CASE WHEN t.{flag}::text = 'true' THEN LEAST(t.{at}, {cast}) ELSE {cast} END"
                    ));
                }
                // The row keeps the delete's position: an older write must not revive it.
                if let Some(guard) = self.work.guard() {
                    set.push(format!("{} = s.pos", quote(guard)));
                }
                format!(
                    "UPDATE {table} AS t SET {} FROM {stage} AS s WHERE s.grp = 0 AND {on}",
                    set.join(", ")
                )
            }
        };
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .map_err(db(&self.work.at))?;
        Ok(())
    }

    /// Writes the staged groups not copied straight in: a fresh group by a plain insert
    /// first, unless its copy met a stored key (`conflicted`), else by an upsert.
    async fn upsert(
        &self,
        conn: &mut PgConnection,
        stage: &str,
        (done, conflicted): (&[bool], &[bool]),
        stale: &[u64],
        counts: &mut Counts,
    ) -> Result<(), ReplicaError> {
        let at = &self.work.at;
        let keys: Vec<String> = self.work.pk.iter().map(|k| quote(&k.name)).collect();
        for (g, group) in self.groups.iter().enumerate().filter(|(g, _)| !done[*g]) {
            let grp = g + 1;
            let (insert, upsert) = self.upsert_sql(stage, grp, group, &keys);
            let fresh = group.kind == Kind::Fresh;
            if fresh && !conflicted[g] && plain_insert(conn, &insert).await.map_err(db(at))? {
                kept_unknown(self.work, group, self.left(grp, stale), counts);
                continue;
            }
            counts.fresh_conflict |= fresh;
            if group.kept.iter().any(|k| *k) {
                // Which rows found no stored row to keep the columns of: PostgreSQL's upsert
                // leaves `xmax` 0 on a row it inserted.
                let inserted: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                    "WITH w AS ({upsert} RETURNING (xmax = 0) AS inserted) \
                     SELECT count(*) FILTER (WHERE inserted) FROM w"
                )))
                .fetch_one(&mut *conn)
                .await
                .map_err(db(at))?;
                kept_unknown(self.work, group, inserted.unsigned_abs(), counts);
            } else {
                sqlx::query(AssertSqlSafe(upsert))
                    .execute(&mut *conn)
                    .await
                    .map_err(db(at))?;
            }
        }
        Ok(())
    }

    /// Group `grp`'s plain `INSERT … SELECT` from the staging table, and its upsert (`keys`:
    /// the key columns, quoted).
    fn upsert_sql(
        &self,
        stage: &str,
        grp: usize,
        group: &Group,
        keys: &[String],
    ) -> (String, String) {
        let table = &self.table;
        let mut names = self.names_of(group);
        let written: Vec<&str> = names[self.work.pk.len()..].to_vec();
        let mut casts: Vec<String> = columns_of(self.work, group).map(|c| self.cast(c)).collect();
        casts.extend(self.soft_casts());
        if self.work.guard().is_some() {
            casts.push("s.pos".to_owned());
        }
        // Columns left as stored that the table has NOT NULL without a default: PostgreSQL
        // checks the row an upsert proposes before it finds the stored one, so the proposed
        // row carries the stored value (NULL, and refused, only where no row is stored).
        let strict: Vec<&str> = self
            .work
            .cols
            .iter()
            .zip(&group.kept)
            .filter(|(c, kept)| **kept && self.meta.needs_value.contains(&c.name))
            .map(|(c, _)| c.name.as_str())
            .collect();
        let mut from = format!("{stage} AS s");
        if !strict.is_empty() && group.kind != Kind::Insert {
            from = format!("{from} LEFT JOIN {table} AS o ON {}", self.key_match("o"));
            names.extend(&strict);
            casts.extend(strict.iter().map(|c| format!("o.{}", quote(c))));
        }
        let insert = format!(
            "INSERT INTO {table} AS t ({}) SELECT {} FROM {from} WHERE s.grp = {grp}",
            quoted_list(&names),
            casts.join(", "),
        );
        let upsert = if group.kind == Kind::Insert {
            insert.clone()
        } else if written.is_empty() || self.work.history {
            // A history row is never rewritten: its key is its record's coordinates.
            format!("{insert} ON CONFLICT ({}) DO NOTHING", keys.join(", "))
        } else {
            let set: Vec<String> = written
                .iter()
                .map(|n| format!("{0} = EXCLUDED.{0}", quote(n)))
                .collect();
            let guard = self
                .work
                .guard()
                .and_then(|g| self.unless_later("t", &format!("EXCLUDED.{}", quote(g))))
                .map_or_else(String::new, |g| format!(" WHERE {g}"));
            format!(
                "{insert} ON CONFLICT ({}) DO UPDATE SET {}{guard}",
                keys.join(", "),
                set.join(", ")
            )
        };
        (insert, upsert)
    }
}

/// The soft truncate: every row of the table not marked yet is marked deleted, as of the
/// truncate.
fn soft_truncate_sql(
    table: &str,
    meta: &TableMeta,
    soft: &super::plan::Soft,
    mark: Option<Mark>,
) -> String {
    let flag = quote(&soft.flag);
    let flag_ty = meta.types.get(&soft.flag).map_or("boolean", String::as_str);
    let mut set = vec![format!("{flag} = true::{}", unbounded(flag_ty))];
    if let Some(at) = &soft.at {
        let ty = meta.types.get(at).map_or("timestamptz", String::as_str);
        let when = match mark.and_then(|m| m.0) {
            // Whole microseconds from the epoch, read as an interval: exact at any date.
            Some(us) => format!("(timestamptz 'epoch' + interval '{us} microseconds')"),
            None => "NULL::timestamptz".to_owned(),
        };
        set.push(format!("{} = {when}::{}", quote(at), unbounded(ty)));
    }
    format!(
        "UPDATE {table} SET {} WHERE {flag}::text IS DISTINCT FROM 'true'",
        set.join(", ")
    )
}

/// `rows` rows were written with no value for the `columns` marked (left NULL): the values
/// are unknown, counted, with a WARN saying `why`.
fn count_unknown(
    work: &TableWork<'_>,
    columns: &[bool],
    rows: u64,
    why: &str,
    counts: &mut Counts,
) {
    if rows == 0 {
        return;
    }
    let cols: Vec<&str> = work
        .cols
        .iter()
        .zip(columns)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c.name.as_str())
        .collect();
    if cols.is_empty() {
        return;
    }
    tracing::warn!(
        table = %work.name,
        topic = work.at.topic,
        partition = work.at.partition,
        offsets = ?work.at.offsets,
        columns = ?cols,
        rows,
        "{why}"
    );
    for c in cols {
        counts.unknown.push((c.to_owned(), rows));
    }
}

/// Rows of `group` inserted, not updated: the columns it keeps as stored (an update of a
/// row the replica does not hold, its TOAST values unchanged) have no value.
fn kept_unknown(work: &TableWork<'_>, group: &Group, rows: u64, counts: &mut Counts) {
    count_unknown(
        work,
        &group.kept,
        rows,
        "an update left these (TOASTed) columns unchanged, but the replica does not hold the \
         row: they are left NULL",
        counts,
    );
}

/// Why a COPY failed: a row that cannot be encoded (the COPY was aborted), or the server.
enum CopyError {
    Row(ReplicaError),
    Db(sqlx::Error),
}

impl CopyError {
    fn at(self, at: &At) -> ReplicaError {
        match self {
            CopyError::Row(e) => e,
            CopyError::Db(e) => ReplicaError::from_sqlx(e, Some(at.clone())),
        }
    }
}

/// Runs `sql` (a binary `COPY … FROM STDIN`) with `rows`, each written by `put`, sent in
/// chunks of about [`CHUNK`]; the bytes sent.
async fn copy_rows<'r, 'k: 'r>(
    conn: &mut PgConnection,
    sql: &str,
    rows: impl Iterator<Item = &'r Row<'k>>,
    mut put: impl FnMut(&mut CopyBuf, &Row<'k>) -> Result<(), ReplicaError>,
) -> Result<u64, CopyError> {
    let mut copy = conn.copy_in_raw(sql).await.map_err(CopyError::Db)?;
    let mut buf = CopyBuf::new();
    let mut sent = 0u64;
    for row in rows {
        if let Err(e) = put(&mut buf, row) {
            let _ = copy.abort("lakesink: bad row").await;
            return Err(CopyError::Row(e));
        }
        if buf.buf.len() >= CHUNK {
            let chunk = std::mem::take(&mut buf.buf);
            sent += chunk.len() as u64;
            copy.send(chunk).await.map_err(CopyError::Db)?;
        }
    }
    let last = buf.finish();
    sent += last.len() as u64;
    copy.send(last).await.map_err(CopyError::Db)?;
    copy.finish().await.map_err(CopyError::Db)?;
    Ok(sent)
}

async fn savepoint(conn: &mut PgConnection, sql: &'static str) -> Result<(), sqlx::Error> {
    sqlx::query(sql).execute(&mut *conn).await.map(|_| ())
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).as_deref() == Some("23505")
}

/// Runs `insert` under a savepoint: false, with the savepoint rolled back, when a key was
/// stored already.
async fn plain_insert(conn: &mut PgConnection, insert: &str) -> Result<bool, sqlx::Error> {
    savepoint(conn, "SAVEPOINT lakesink_fresh").await?;
    match sqlx::query(AssertSqlSafe(insert.to_owned()))
        .execute(&mut *conn)
        .await
    {
        Ok(_) => {
            savepoint(conn, "RELEASE SAVEPOINT lakesink_fresh").await?;
            Ok(true)
        }
        Err(e) if is_unique_violation(&e) => {
            savepoint(conn, "ROLLBACK TO SAVEPOINT lakesink_fresh").await?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &[u8], grp: usize) -> Row<'_> {
        Row {
            key,
            net: None,
            base: None,
            grp,
            mark: None,
        }
    }

    /// A binary COPY field of a bigint.
    fn bigint(v: i64) -> Vec<u8> {
        let mut f = 8i32.to_be_bytes().to_vec();
        f.extend_from_slice(&v.to_be_bytes());
        f
    }

    #[test]
    fn staged_rows_go_in_key_order_and_keyless_rows_in_theirs() {
        let keys: Vec<Vec<u8>> = [907, 3, -5, 40, 12, -1].map(bigint).to_vec();
        let rows: Vec<Row<'_>> = keys.iter().enumerate().map(|(i, k)| row(k, i)).collect();
        let order: Vec<usize> = by_key(rows.iter()).iter().map(|r| r.grp).collect();
        // Ascending, negatives (ascending) after positives: neighbours together.
        assert_eq!(order, [1, 4, 3, 0, 2, 5]);

        // Text by its bytes, whatever its length; then the next field.
        let text = |parts: &[&str]| -> Vec<u8> {
            let mut k = Vec::new();
            for p in parts {
                k.extend_from_slice(&(p.len() as i32).to_be_bytes());
                k.extend_from_slice(p.as_bytes());
            }
            k
        };
        let keys = [
            text(&["user_99", "b"]),
            text(&["user_123", "a"]),
            text(&["user_99", "a"]),
            text(&["user_1", "z"]),
            text(&["", "q"]),
        ];
        let rows: Vec<Row<'_>> = keys.iter().enumerate().map(|(i, k)| row(k, i)).collect();
        let order: Vec<usize> = by_key(rows.iter()).iter().map(|r| r.grp).collect();
        assert_eq!(order, [4, 3, 1, 2, 0]);

        let keyless: Vec<Row<'_>> = (0..5).map(|i| row(&[], i)).collect();
        let order: Vec<usize> = by_key(keyless.iter()).iter().map(|r| r.grp).collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
    }
}
