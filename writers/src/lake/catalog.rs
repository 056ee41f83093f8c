//! The catalog the lake tables live in: a SQL catalog in PostgreSQL (Iceberg's JDBC catalog
//! layout) or an Iceberg REST catalog, both reading and writing files through
//! [`LakeStorage`].

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, Error, ErrorKind, Result, TableCommit, TableIdent};
use iceberg_catalog_rest::{
    REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE, RestCatalogBuilder,
};
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle,
    SqlCatalogBuilder,
};
use lakesink_config::{CatalogKind, LakeConfig};

use super::storage::{LakeStorage, LakeStorageFactory};

/// Opens the configured catalog.
pub async fn open(config: &LakeConfig, storage: &LakeStorage) -> Result<OneAttempt> {
    let factory = Arc::new(LakeStorageFactory(storage.clone()));
    let mut props: HashMap<String, String> = config
        .catalog_properties
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_owned()))
        .collect();
    let name = config.catalog_name.clone();
    let uri = config.catalog_uri.expose().to_owned();
    let catalog: Arc<dyn Catalog> = match config.catalog {
        CatalogKind::Sql => {
            props.insert(SQL_CATALOG_PROP_URI.into(), uri);
            props.insert(SQL_CATALOG_PROP_WAREHOUSE.into(), config.warehouse.clone());
            props.insert(
                SQL_CATALOG_PROP_BIND_STYLE.into(),
                SqlBindStyle::DollarNumeric.to_string(),
            );
            Arc::new(
                SqlCatalogBuilder::default()
                    .with_storage_factory(factory)
                    .load(name, props)
                    .await?,
            )
        }
        CatalogKind::Rest => {
            props.insert(REST_CATALOG_PROP_URI.into(), uri);
            props
                .entry(REST_CATALOG_PROP_WAREHOUSE.into())
                .or_insert_with(|| config.warehouse.clone());
            Arc::new(
                RestCatalogBuilder::default()
                    .with_storage_factory(factory)
                    .load(name, props)
                    .await?,
            )
        }
    };
    Ok(OneAttempt(catalog))
}

/// The `Catalog` impl of a wrapper around another catalog (`self.$inner`): every method is
/// passed on to it, but `load_table` and `update_table`, which the wrapper gives (`$own`).
macro_rules! wrapper_catalog {
    ($ty:ty, $inner:tt, $($own:tt)*) => {
        #[async_trait::async_trait]
        impl iceberg::Catalog for $ty {
            async fn list_namespaces(
                &self,
                parent: Option<&iceberg::NamespaceIdent>,
            ) -> iceberg::Result<Vec<iceberg::NamespaceIdent>> {
                self.$inner.list_namespaces(parent).await
            }
            async fn create_namespace(
                &self,
                namespace: &iceberg::NamespaceIdent,
                properties: std::collections::HashMap<String, String>,
            ) -> iceberg::Result<iceberg::Namespace> {
                self.$inner.create_namespace(namespace, properties).await
            }
            async fn get_namespace(
                &self,
                namespace: &iceberg::NamespaceIdent,
            ) -> iceberg::Result<iceberg::Namespace> {
                self.$inner.get_namespace(namespace).await
            }
            async fn namespace_exists(
                &self,
                namespace: &iceberg::NamespaceIdent,
            ) -> iceberg::Result<bool> {
                self.$inner.namespace_exists(namespace).await
            }
            async fn update_namespace(
                &self,
                namespace: &iceberg::NamespaceIdent,
                properties: std::collections::HashMap<String, String>,
            ) -> iceberg::Result<()> {
                self.$inner.update_namespace(namespace, properties).await
            }
            async fn drop_namespace(&self, namespace: &iceberg::NamespaceIdent) -> iceberg::Result<()> {
                self.$inner.drop_namespace(namespace).await
            }
            async fn list_tables(
                &self,
                namespace: &iceberg::NamespaceIdent,
            ) -> iceberg::Result<Vec<iceberg::TableIdent>> {
                self.$inner.list_tables(namespace).await
            }
            async fn create_table(
                &self,
                namespace: &iceberg::NamespaceIdent,
                creation: iceberg::TableCreation,
            ) -> iceberg::Result<iceberg::table::Table> {
                self.$inner.create_table(namespace, creation).await
            }
            async fn drop_table(&self, table: &iceberg::TableIdent) -> iceberg::Result<()> {
                self.$inner.drop_table(table).await
            }
            async fn purge_table(&self, table: &iceberg::TableIdent) -> iceberg::Result<()> {
                self.$inner.purge_table(table).await
            }
            async fn table_exists(&self, table: &iceberg::TableIdent) -> iceberg::Result<bool> {
                self.$inner.table_exists(table).await
            }
            async fn rename_table(
                &self,
                src: &iceberg::TableIdent,
                dest: &iceberg::TableIdent,
            ) -> iceberg::Result<()> {
                self.$inner.rename_table(src, dest).await
            }
            async fn register_table(
                &self,
                table: &iceberg::TableIdent,
                metadata_location: String,
            ) -> iceberg::Result<iceberg::table::Table> {
                self.$inner.register_table(table, metadata_location).await
            }
            $($own)*
        }
    };
}
pub(crate) use wrapper_catalog;

/// The catalog, with a commit conflict returned to lakesink instead of retried inside the
/// `iceberg` crate: its retry re-applies the same snapshot properties on the newer table,
/// which would write back the Kafka offsets another instance has moved since. lakesink
/// reloads the table, merges the offsets and tries again itself ([`super::commit`]).
#[derive(Debug, Clone)]
pub struct OneAttempt(pub Arc<dyn Catalog>);

wrapper_catalog! {
    OneAttempt,
    0,
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.0.load_table(table).await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.0.update_table(commit).await.map_err(|e| {
            if e.retryable() {
                Error::new(e.kind(), e.message().to_owned()).with_source(e)
            } else {
                e
            }
        })
    }
}

/// Whether an error is a lost race with another commit (the table moved under it).
pub fn is_conflict(e: &Error) -> bool {
    e.kind() == ErrorKind::CatalogCommitConflicts
}
