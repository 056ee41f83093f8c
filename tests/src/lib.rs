//! Support for the integration tests: where the stack is, and unique names.
//!
//! Endpoints come from the variables `dev/stack env` prints, with the same loopback defaults,
//! so `cargo test` works after `dev/stack up` without sourcing anything.

pub mod debezium;
pub mod golden;
pub mod raw;
pub mod secure;
pub mod workload;

use std::time::Duration;

/// The endpoints of the local stack.
#[derive(Debug, Clone)]
pub struct Stack {
    pub kafka_brokers: String,
    pub registry_url: String,
    pub connect_url: String,
    pub s3_endpoint: String,
    pub s3_bucket: String,
    pub s3_region: String,
    pub s3_access_key_id: String,
    pub s3_secret_access_key: String,
    pub source_pg_url: String,
    pub replica_pg_url: String,
    /// `mysql://user:password@host:port/database` of the MariaDB source.
    pub mariadb_url: String,
    /// A Python with pyarrow and DuckDB (`dev/stack install` puts one in its cache).
    pub python: String,
    /// Apache Iceberg's REST catalog test server.
    pub iceberg_rest_url: String,
    /// A Python with pyspark and pyarrow, for reading lake tables back with Apache Spark
    /// (`dev/stack install` puts one in its cache).
    pub spark_python: String,
    /// The directory of the jars Spark loads for that: Apache Iceberg's Spark runtime, its AWS
    /// bundle and the PostgreSQL JDBC driver.
    pub spark_jars: String,
}

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

impl Stack {
    pub fn from_env() -> Self {
        Self {
            kafka_brokers: var("LAKESINK_KAFKA_BROKERS", "127.0.0.1:9092"),
            registry_url: var("LAKESINK_REGISTRY_URL", "http://127.0.0.1:8080"),
            connect_url: var("LAKESINK_CONNECT_URL", "http://127.0.0.1:8083"),
            s3_endpoint: var("LAKESINK_S3_ENDPOINT", "http://127.0.0.1:8333"),
            s3_bucket: var("LAKESINK_S3_BUCKET", "lakesink"),
            s3_region: var("LAKESINK_S3_REGION", "us-east-1"),
            s3_access_key_id: var("LAKESINK_S3_ACCESS_KEY_ID", "lakesink"),
            s3_secret_access_key: var("LAKESINK_S3_SECRET_ACCESS_KEY", "lakesink-secret"),
            source_pg_url: var(
                "LAKESINK_SOURCE_PG_URL",
                "postgres://lakesink:lakesink@127.0.0.1:5433/source",
            ),
            replica_pg_url: var(
                "LAKESINK_REPLICA_PG_URL",
                "postgres://lakesink:lakesink@127.0.0.1:5434/replica",
            ),
            mariadb_url: var(
                "LAKESINK_MARIADB_URL",
                "mysql://lakesink:lakesink@127.0.0.1:3307/source",
            ),
            python: std::env::var("LAKESINK_PYTHON").unwrap_or_else(|_| default_python()),
            iceberg_rest_url: var("LAKESINK_ICEBERG_REST_URL", "http://127.0.0.1:8282"),
            spark_python: std::env::var("LAKESINK_SPARK_PYTHON")
                .unwrap_or_else(|_| in_cache(&format!("spark-{SPARK_VERSION}/bin/python"))),
            spark_jars: std::env::var("LAKESINK_SPARK_JARS")
                .unwrap_or_else(|_| in_cache(&format!("spark-jars-{SPARK_ICEBERG_VERSION}"))),
        }
    }

    /// The catalog the Python readers (`tests/python/read_iceberg*.py`) open: `("rest", its
    /// URL)`, or `("sql", the replica's PostgreSQL as a SQLAlchemy URL)`.
    pub fn reader_catalog(&self, rest: bool) -> (&'static str, String) {
        if rest {
            ("rest", self.iceberg_rest_url.clone())
        } else {
            (
                "sql",
                self.replica_pg_url
                    .replacen("postgres://", "postgresql+psycopg2://", 1),
            )
        }
    }

    /// The S3 server's settings as the keys of a store table (`[raw.store]`, `[lake.store]`).
    pub fn store_keys(&self) -> String {
        format!(
            "endpoint = \"{}\"\nregion = \"{}\"\naccess-key-id = \"{}\"\nsecret-access-key = \"{}\"\nallow-http = true\n",
            self.s3_endpoint, self.s3_region, self.s3_access_key_id, self.s3_secret_access_key
        )
    }
}

/// Where `dev/stack install` puts the readers' venv: `$LAKESINK_CACHE/readers`, the cache
/// defaulting to `~/.cache/lakesink` as in the script.
fn default_python() -> String {
    let cache = std::env::var("LAKESINK_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lakesink",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{cache}/readers/bin/python")
}

/// `dev/stack`'s `SPARK_VERSION` and `SPARK_ICEBERG_VERSION`, which name the directories
/// `dev/stack install` puts Spark's venv and jars in.
const SPARK_VERSION: &str = "4.1.4";
const SPARK_ICEBERG_VERSION: &str = "1.12.0";

/// A path in `dev/stack`'s cache, `$LAKESINK_CACHE` (default `~/.cache/lakesink`).
fn in_cache(path: &str) -> String {
    let cache = std::env::var("LAKESINK_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lakesink",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{cache}/{path}")
}

/// The checkout the tests run in. Cargo sets `CARGO_MANIFEST_DIR` when it runs a test, so this
/// is the running test's checkout even when its binary was built in another one that shares the
/// target directory (CI's clone and a developer's tree do): the value compiled in would point at
/// the other checkout's files. Every package sits one level below the root.
pub fn workspace_root() -> std::path::PathBuf {
    let package = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    );
    package.join("..")
}

/// The message every integration test fails with when a component does not answer.
pub fn unreachable(component: &str, endpoint: &str, error: impl std::fmt::Display) -> String {
    format!(
        "{component} is not reachable at {endpoint}: {error}\n\
         The integration tests need the local stack: run `dev/stack up` (or `dev/test`, which starts it)."
    )
}

/// A pool on the source database, or a panic naming it.
pub async fn source_pool(stack: &Stack) -> sqlx::postgres::PgPool {
    sqlx::postgres::PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        })
}

/// A name unique to one test run, safe as a topic, table, slot or object prefix.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &id[..12])
}

/// Polls `f` until it returns `Some`, or gives up after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
