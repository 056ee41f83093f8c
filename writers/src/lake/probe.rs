//! `lakesink check` for `[lake]`: the catalog answers, the namespace is there (or is made, as
//! `run` would make it), and a table can be created, written to and dropped in it: a probe
//! table that is gone again when the check ends.

use std::collections::HashMap;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use lakesink_config::LakeConfig;
use object_store::{ObjectStoreExt, PutPayload};

use super::catalog::{OneAttempt, open};
use super::storage::LakeStorage;

/// Runs the probe; `Ok` says what it did, `Err` which step failed and what to check.
pub async fn probe(config: &LakeConfig) -> Result<String, String> {
    let uri = config.catalog_uri.redacted();
    let kind = match config.catalog {
        lakesink_config::CatalogKind::Sql => "SQL catalog",
        lakesink_config::CatalogKind::Rest => "REST catalog",
    };
    let storage = LakeStorage::open(&config.warehouse, &config.store)
        .map_err(|e| format!("lake.warehouse {}: {e}", config.warehouse))?;
    let catalog = open(config, &storage).await.map_err(|e| {
        format!("{kind} {uri}: {e}; check lake.catalog-uri and lake.catalog-properties")
    })?;
    let ns = NamespaceIdent::from_vec(config.namespace_levels())
        .map_err(|e| format!("lake.namespace: {e}"))?;
    let made = namespace(&catalog, &ns)
        .await
        .map_err(|e| format!("{kind} {uri}: namespace {}: {e}", config.namespace))?;
    let name = format!(
        "lakesink_check_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let ident = TableIdent::new(ns.clone(), name);
    let result = table(&catalog, &storage, &ident).await;
    let dropped = drop(&catalog, &storage, &ident).await;
    let location = result.map_err(|e| format!("{kind} {uri}: probe table {ident}: {e}"))?;
    dropped.map_err(|e| {
        format!("{kind} {uri}: created the probe table {ident} but could not drop it: {e}")
    })?;
    Ok(format!(
        "{kind} {uri}: namespace {} {}; created, wrote to and dropped {ident} at {location}",
        config.namespace,
        if made { "created" } else { "exists" },
    ))
}

/// Whether the namespace had to be made.
async fn namespace(catalog: &OneAttempt, ns: &NamespaceIdent) -> Result<bool, String> {
    if catalog
        .namespace_exists(ns)
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(false);
    }
    catalog
        .create_namespace(ns, HashMap::new())
        .await
        .map_err(|e| format!("cannot create it: {e}"))?;
    Ok(true)
}

/// Creates the probe table and writes an object where its data files would go; its location.
async fn table(
    catalog: &OneAttempt,
    storage: &LakeStorage,
    ident: &TableIdent,
) -> Result<String, String> {
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "probe", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .map_err(|e| e.to_string())?;
    let creation = TableCreation::builder()
        .name(ident.name().to_owned())
        .schema(schema)
        .build();
    let t = catalog
        .create_table(ident.namespace(), creation)
        .await
        .map_err(|e| format!("cannot create it: {e}"))?;
    let location = t.metadata().location().trim_end_matches('/').to_owned();
    let key = storage
        .key(&format!("{location}/data/lakesink-check"))
        .map_err(|e| format!("its location {location} is outside lake.warehouse: {e}"))?;
    let store = storage.store().map_err(|e| e.to_string())?;
    store
        .put(&key, PutPayload::from_static(b"lakesink check"))
        .await
        .map_err(|e| {
            format!(
                "cannot write {key}: {}; check lake.store",
                crate::parquet::describe_store(&e)
            )
        })?;
    Ok(location)
}

/// Drops the probe table and deletes what it left under its location.
async fn drop(
    catalog: &OneAttempt,
    storage: &LakeStorage,
    ident: &TableIdent,
) -> Result<(), String> {
    let location = match catalog.load_table(ident).await {
        Ok(t) => Some(t.metadata().location().trim_end_matches('/').to_owned()),
        Err(_) => None,
    };
    if catalog.table_exists(ident).await.unwrap_or(false) {
        catalog.drop_table(ident).await.map_err(|e| e.to_string())?;
    }
    let Some(location) = location else {
        return Ok(());
    };
    let (Ok(prefix), Ok(store)) = (storage.key(&location), storage.store()) else {
        return Ok(());
    };
    use futures::TryStreamExt;
    let keys: Vec<_> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| format!("listing {prefix}: {e}"))?;
    for k in keys {
        store
            .delete(&k)
            .await
            .map_err(|e| format!("deleting {k}: {e}"))?;
    }
    Ok(())
}
