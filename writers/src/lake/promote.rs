//! Widening a column's type (int to long, float to double, a decimal's precision), which the
//! `iceberg` crate's schema update cannot do: it only adds and deletes columns.
//!
//! The update it builds is the one a promotion needs, though: a new schema with the same field
//! ids (`AddSchema`, `SetCurrentSchema`) under a check that the table's current schema has not
//! moved. So the transaction is shown the table with its current schema already widened, under
//! the same schema id, by a catalog that returns that table when the transaction loads it; the
//! commit itself goes to the real catalog, which checks the schema id as usual. No data file
//! is rewritten: Iceberg readers read the narrower values as the wider type.

use std::collections::HashMap;

use iceberg::spec::{PrimitiveType, TableMetadata};
use iceberg::table::Table;
use iceberg::{Result, Runtime, TableCommit, TableIdent};
use serde_json::Value;

use super::LakeError;
use super::catalog::{OneAttempt, wrapper_catalog};
use super::types::Promote;

/// The table as it would be with the promotions made in its current schema, in place.
pub fn widened(table: &Table, promote: &[Promote]) -> std::result::Result<Table, LakeError> {
    let data =
        |e: String| LakeError::Data(format!("lake table {}: widening: {e}", table.identifier()));
    let m = table.metadata();
    let mut json = serde_json::to_value(m).map_err(|e| data(e.to_string()))?;
    let current = m.current_schema_id();
    let to: HashMap<i32, &PrimitiveType> = promote.iter().map(|p| (p.id, &p.to)).collect();
    let schema = json
        .get_mut("schemas")
        .and_then(Value::as_array_mut)
        .and_then(|all| {
            all.iter_mut()
                .find(|s| s.get("schema-id").and_then(Value::as_i64) == Some(i64::from(current)))
        })
        .ok_or_else(|| data(format!("no schema {current} in the table's metadata")))?;
    let mut done = 0;
    retype(schema, &to, &mut done).map_err(|e| data(e.to_string()))?;
    if done != to.len() {
        return Err(data(format!(
            "found {done} of the {} columns to widen in the current schema",
            to.len()
        )));
    }
    let metadata: TableMetadata = serde_json::from_value(json).map_err(|e| data(e.to_string()))?;
    let mut b = Table::builder()
        .metadata(metadata)
        .identifier(table.identifier().clone())
        .file_io(table.file_io().clone())
        .runtime(Runtime::try_current().map_err(LakeError::Catalog)?);
    if let Some(at) = table.metadata_location() {
        b = b.metadata_location(at);
    }
    b.build().map_err(LakeError::Catalog)
}

/// Sets the `type` of the struct fields whose ids are in `to`, at any depth.
fn retype(
    v: &mut Value,
    to: &HashMap<i32, &PrimitiveType>,
    done: &mut usize,
) -> serde_json::Result<()> {
    match v {
        Value::Object(o) => {
            let id = o.get("id").and_then(Value::as_i64);
            if let (Some(id), Some(t)) = (id.and_then(|i| i32::try_from(i).ok()), o.get("type"))
                && t.is_string()
                && let Some(p) = to.get(&id)
            {
                o.insert("type".into(), serde_json::to_value(p)?);
                *done += 1;
            }
            for (_, child) in o.iter_mut() {
                retype(child, to, done)?;
            }
        }
        Value::Array(a) => {
            for child in a {
                retype(child, to, done)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The catalog, but loading the table being widened returns it widened (see the module doc).
pub struct Promoting<'a> {
    pub inner: &'a OneAttempt,
    pub base: Table,
}

impl std::fmt::Debug for Promoting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promoting")
            .field("table", self.base.identifier())
            .finish()
    }
}

wrapper_catalog! {
    Promoting<'_>,
    inner,
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.base.identifier() {
            return Ok(self.base.clone());
        }
        self.inner.load_table(table).await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await
    }
}
