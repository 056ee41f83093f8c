//! Row deltas (`lakesink_writers::lake::row_delta`) committed by lakesink's own catalog commit
//! (`lake::commit`) to both real catalogs, and read back by Apache Spark with Iceberg's Spark
//! runtime, which applies equality deletes: an update is the key's equality delete and its new
//! row in one snapshot, a delete the key's equality delete, a truncate a snapshot that removes
//! every file. pyiceberg reads what has no equality deletes (it refuses them).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use lakesink_config::LakeConfig;
use lakesink_tests::{Stack, unique};
use lakesink_writers::lake::catalog::{self, OneAttempt};
use lakesink_writers::lake::commit::Committer;
use lakesink_writers::lake::files::put_file;
use lakesink_writers::lake::row_delta::RowDelta;
use lakesink_writers::lake::storage::LakeStorage;
use lakesink_writers::lake::types::iceberg_schema;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Sql,
    Rest,
}

struct Lake {
    stack: Stack,
    kind: Kind,
    config: LakeConfig,
    storage: LakeStorage,
    catalog: OneAttempt,
    committer: Committer,
    ident: TableIdent,
}

fn config(stack: &Stack, kind: Kind, name: &str, namespace: &str) -> LakeConfig {
    let (kind, uri) = match kind {
        Kind::Sql => ("sql", &stack.replica_pg_url),
        Kind::Rest => ("rest", &stack.iceberg_rest_url),
    };
    let text = format!(
        r#"
catalog = "{kind}"
catalog-uri = "{uri}"
catalog-name = "{name}"
warehouse = "s3://{bucket}/{name}"
namespace = "{namespace}"

[store]
{store}"#,
        bucket = stack.s3_bucket,
        store = stack.store_keys(),
    );
    toml::from_str(&text).expect("[lake]")
}

fn arrow() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn keys_arrow() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]))
}

impl Lake {
    async fn new(kind: Kind) -> Self {
        let stack = Stack::from_env();
        let name = unique("rowdelta");
        let namespace = unique("cdc").replace('-', "_");
        let config = config(&stack, kind, &name, &namespace);
        let storage = LakeStorage::open(&config.warehouse, &config.store).expect("storage");
        let catalog = catalog::open(&config, &storage).await.unwrap_or_else(|e| {
            panic!(
                "{}",
                lakesink_tests::unreachable("the Iceberg catalog", config.catalog_uri.expose(), e)
            )
        });
        let committer = Committer::open(&config).expect("committer");
        let ns = NamespaceIdent::new(namespace);
        catalog
            .create_namespace(&ns, HashMap::new())
            .await
            .expect("namespace");
        let creation = TableCreation::builder()
            .name("orders".into())
            .schema(iceberg_schema(&arrow()).expect("schema"))
            .build();
        catalog.create_table(&ns, creation).await.expect("table");
        Self {
            stack,
            kind,
            config,
            storage,
            catalog,
            committer,
            ident: TableIdent::new(ns, "orders".into()),
        }
    }

    async fn table(&self) -> Table {
        self.catalog.load_table(&self.ident).await.expect("load")
    }

    /// A Parquet file of `batch` under the table's `data/`, uploaded; its sealed bytes' entry.
    async fn upload(
        &self,
        table: &Table,
        batch: RecordBatch,
        deletes: bool,
    ) -> iceberg::spec::DataFile {
        let ids = deletes.then(|| {
            let schema = table.metadata().current_schema();
            vec![schema.field_id_by_name("id").expect("id")]
        });
        put_file(&self.storage, table, &batch, ids)
            .await
            .expect("upload")
    }

    async fn rows(&self, table: &Table, rows: &[(i64, &str)]) -> iceberg::spec::DataFile {
        let batch = RecordBatch::try_new(
            arrow(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .expect("batch");
        self.upload(table, batch, false).await
    }

    async fn deletes(&self, table: &Table, keys: &[i64]) -> iceberg::spec::DataFile {
        let batch = RecordBatch::try_new(
            keys_arrow(),
            vec![Arc::new(Int64Array::from_iter_values(keys.iter().copied()))],
        )
        .expect("batch");
        self.upload(table, batch, true).await
    }

    /// Commits `delta` through lakesink's own commit; the new snapshot's id.
    async fn commit(&self, delta: RowDelta) -> i64 {
        let table = self.table().await;
        let prepared = delta.prepare(&table).await.expect("prepare");
        let after = self
            .committer
            .commit(&table, prepared.requirements, prepared.updates)
            .await
            .unwrap_or_else(|e| panic!("{:?} commit: {e}", self.kind));
        assert_eq!(
            after.metadata().current_snapshot_id(),
            Some(prepared.snapshot_id)
        );
        // The catalog serves what was committed.
        assert_eq!(
            self.table().await.metadata().current_snapshot_id(),
            Some(prepared.snapshot_id)
        );
        prepared.snapshot_id
    }

    fn request(&self) -> Value {
        let s = &self.stack;
        let (catalog_type, catalog_uri) = s.reader_catalog(matches!(self.kind, Kind::Rest));
        json!({
            "catalog_type": catalog_type,
            "catalog_uri": catalog_uri,
            "catalog_name": self.config.catalog_name,
            "table": format!("{}.{}", self.ident.namespace().join("."), self.ident.name()),
            "s3": {"endpoint": s.s3_endpoint, "key": s.s3_access_key_id,
                   "secret": s.s3_secret_access_key, "region": s.s3_region},
            "bucket": s.s3_bucket,
            "raw_keys": [],
        })
    }

    /// Spark's rows and summary of each snapshot.
    fn spark(&self, snapshots: &[i64]) -> Value {
        let mut request = self.request();
        request["snapshots"] = json!(snapshots);
        let script = lakesink_tests::workspace_root().join("tests/python/read_iceberg_spark.py");
        let out = Command::new(&self.stack.spark_python)
            .arg(script)
            .arg(request.to_string())
            .env("LAKESINK_SPARK_JARS", &self.stack.spark_jars)
            .output()
            .unwrap_or_else(|e| {
                panic!("{}: {e} (run `dev/stack install`)", self.stack.spark_python)
            });
        assert!(
            out.status.success(),
            "read_iceberg_spark.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json from read_iceberg_spark.py")
    }

    /// pyiceberg's rows of the current snapshot, or its error.
    fn pyiceberg(&self) -> Result<Value, String> {
        let script = "import json, sys\n\
from pyiceberg.catalog.rest import RestCatalog\n\
from pyiceberg.catalog.sql import SqlCatalog\n\
req = json.loads(sys.argv[1])\n\
s3 = req['s3']\n\
kind = RestCatalog if req['catalog_type'] == 'rest' else SqlCatalog\n\
c = kind(req['catalog_name'], uri=req['catalog_uri'], **{'s3.endpoint': s3['endpoint'], \
's3.access-key-id': s3['key'], 's3.secret-access-key': s3['secret'], 's3.region': s3['region']})\n\
rows = c.load_table(req['table']).scan().to_arrow().to_pylist()\n\
print(json.dumps(sorted(rows, key=lambda r: r['id'])))\n";
        let out = Command::new(&self.stack.python)
            .args(["-c", script])
            .arg(self.request().to_string())
            .output()
            .expect("python");
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).expect("json"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

/// Rows as Spark's read renders them (numbers as text, as `read_parquet.py` does).
fn table_of(rows: &[(i64, &str)]) -> Value {
    json!(
        rows.iter()
            .map(|(id, name)| json!({"id": id.to_string(), "name": name}))
            .collect::<Vec<_>>()
    )
}

async fn updates_deletes_and_a_truncate(kind: Kind) {
    let lake = Lake::new(kind).await;
    let offsets = |n: i64| {
        HashMap::from([(
            "lakesink.offsets.g".to_owned(),
            format!("{{\"t\": {{\"0\": {n}}}}}"),
        )])
    };

    let t = lake.table().await;
    let f1 = lake
        .rows(&t, &[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")])
        .await;
    let s1 = lake
        .commit(RowDelta {
            data: vec![f1],
            properties: offsets(5),
            ..RowDelta::default()
        })
        .await;

    // Id 2 updated, 3 deleted, 6 inserted; 6's delete (every upserted key has one) applies to
    // older files only, so the new row stays.
    let t = lake.table().await;
    let f2 = lake.rows(&t, &[(2, "B"), (6, "f")]).await;
    let d1 = lake.deletes(&t, &[2, 3, 6]).await;
    let s2 = lake
        .commit(RowDelta {
            data: vec![f2],
            deletes: vec![d1],
            properties: offsets(9),
            ..RowDelta::default()
        })
        .await;

    // Only deletes: 1 goes.
    let t = lake.table().await;
    let d2 = lake.deletes(&t, &[1]).await;
    let s3 = lake
        .commit(RowDelta {
            deletes: vec![d2],
            properties: offsets(10),
            ..RowDelta::default()
        })
        .await;

    // A truncate, then a row in the same snapshot.
    let t = lake.table().await;
    let f3 = lake.rows(&t, &[(7, "g")]).await;
    let s4 = lake
        .commit(RowDelta {
            data: vec![f3],
            remove_all: true,
            properties: offsets(12),
            ..RowDelta::default()
        })
        .await;

    let got = lake.spark(&[s1, s2, s3, s4]);
    let rows = &got["rows"];
    assert_eq!(
        rows[s1.to_string()],
        table_of(&[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")])
    );
    assert_eq!(
        rows[s2.to_string()],
        table_of(&[(1, "a"), (2, "B"), (4, "d"), (5, "e"), (6, "f")]),
        "update, delete and insert in one snapshot"
    );
    assert_eq!(
        rows[s3.to_string()],
        table_of(&[(2, "B"), (4, "d"), (5, "e"), (6, "f")])
    );
    assert_eq!(
        rows[s4.to_string()],
        table_of(&[(7, "g")]),
        "after the truncate"
    );
    let summaries = &got["summaries"];
    for (sid, op, n) in [
        (s1, "append", 5),
        (s2, "overwrite", 9),
        (s3, "delete", 10),
        (s4, "overwrite", 12),
    ] {
        let s = &summaries[sid.to_string()];
        assert_eq!(s["operation"], op, "{s}");
        assert_eq!(
            s["lakesink.offsets.g"],
            format!("{{\"t\": {{\"0\": {n}}}}}"),
            "{s}"
        );
    }
    let last = &summaries[s4.to_string()];
    assert_eq!(last["total-records"], "1", "{last}");
    assert_eq!(last["total-data-files"], "1", "{last}");
    assert_eq!(last["total-delete-files"], "0", "{last}");
    assert_eq!(last["total-equality-deletes"], "0", "{last}");

    // After the truncate nothing is left to delete, and pyiceberg, which refuses equality
    // deletes, reads the table.
    assert_eq!(
        lake.pyiceberg().expect("pyiceberg"),
        json!([{"id": 7, "name": "g"}])
    );
    let t = lake.table().await;
    let d3 = lake.deletes(&t, &[7]).await;
    lake.commit(RowDelta {
        deletes: vec![d3],
        ..RowDelta::default()
    })
    .await;
    let refused = lake
        .pyiceberg()
        .expect_err("pyiceberg and an equality delete");
    assert!(refused.contains("equality deletes"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn row_deltas_in_the_sql_catalog_read_back_in_spark() {
    updates_deletes_and_a_truncate(Kind::Sql).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn row_deltas_in_the_rest_catalog_read_back_in_spark() {
    updates_deletes_and_a_truncate(Kind::Rest).await;
}
