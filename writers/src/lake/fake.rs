//! Catalogs for the unit tests: Iceberg's in-memory catalog, and a fake in front of it that
//! also takes lakesink's own commits ([`super::commit::Committer::Fake`]) with the SQL
//! catalog's compare-and-swap, and can let another writer's commit land just before one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalog, MemoryCatalogBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, NamespaceIdent, Result, TableCommit, TableIdent,
    TableRequirement, TableUpdate,
};

use super::catalog::wrapper_catalog;
use super::storage::{LakeStorage, LakeStorageFactory};

/// Iceberg's in-memory catalog over lakesink's storage on an in-memory object store
/// (warehouse `memory://lake/wh`), with the namespace `cdc`.
pub(crate) async fn memory_catalog() -> MemoryCatalog {
    memory_catalog_on(memory_storage()).await
}

/// lakesink's storage on a fresh in-memory object store, for [`memory_catalog_on`].
pub(crate) fn memory_storage() -> LakeStorage {
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    LakeStorage::new(store, "memory://lake/".into())
}

/// [`memory_catalog`] over `storage`, whose files the test reads and writes too.
pub(crate) async fn memory_catalog_on(storage: LakeStorage) -> MemoryCatalog {
    let catalog = MemoryCatalogBuilder::default()
        .with_storage_factory(Arc::new(LakeStorageFactory(storage)))
        .load(
            "test",
            HashMap::from([(
                MEMORY_CATALOG_WAREHOUSE.to_owned(),
                "memory://lake/wh".to_owned(),
            )]),
        )
        .await
        .expect("catalog");
    catalog
        .create_namespace(&NamespaceIdent::new("cdc".into()), HashMap::new())
        .await
        .expect("namespace");
    catalog
}

/// The in-memory catalog, with tables committed to since their creation held here.
pub struct Fake {
    inner: MemoryCatalog,
    tables: Mutex<HashMap<TableIdent, Table>>,
    /// Run before the next commit is checked: another writer's commit that wins the race.
    race: tokio::sync::Mutex<Option<BoxFuture<'static, ()>>>,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    pub(crate) async fn new() -> Arc<Self> {
        Self::on(memory_storage()).await
    }

    /// The fake over `storage`.
    pub(crate) async fn on(storage: LakeStorage) -> Arc<Self> {
        Arc::new(Self {
            inner: memory_catalog_on(storage).await,
            tables: Mutex::default(),
            race: tokio::sync::Mutex::default(),
        })
    }

    /// `other` lands just before the next commit is checked.
    pub(crate) async fn race(&self, other: BoxFuture<'static, ()>) {
        *self.race.lock().await = Some(other);
    }

    fn held(&self, ident: &TableIdent) -> Option<Table> {
        self.tables
            .lock()
            .expect("fake catalog")
            .get(ident)
            .cloned()
    }

    /// lakesink's commit, as the SQL catalog takes it: applied to `table` and swapped in only
    /// if the catalog still holds `table`.
    pub(crate) async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let other = self.race.lock().await.take();
        if let Some(other) = other {
            other.await;
        }
        let now = self.load_table(table.identifier()).await?;
        if now.metadata_location() != table.metadata_location() {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                "the table moved",
            ));
        }
        let old = table.metadata_location_result()?.to_owned();
        let (metadata, location) = super::commit::applied(table, &old, requirements, updates)?;
        let after = super::commit::rebuilt(table, metadata, location.to_string())?;
        self.tables
            .lock()
            .expect("fake catalog")
            .insert(table.identifier().clone(), after.clone());
        Ok(after)
    }
}

wrapper_catalog! {
    Fake,
    inner,
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        match self.held(table) {
            Some(t) => Ok(t),
            None => self.inner.load_table(table).await,
        }
    }
    /// The crate's own transactions (a foreign writer in the tests).
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let now = self.load_table(commit.identifier()).await?;
        let ident = commit.identifier().clone();
        let after = commit.apply(now)?;
        self.tables
            .lock()
            .expect("fake catalog")
            .insert(ident, after.clone());
        Ok(after)
    }
}
