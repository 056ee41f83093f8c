//! The PostgreSQL replica against the real replica database: hand-built change batches
//! (`hand`), and real Debezium on the source database compared row for row (`e2e`), special
//! values included (`extremes`), identifiers of every kind (`identifiers`) and JsonConverter
//! without schemas (`schemaless`); SQL Server and Db2 records built by hand (`sqlserver_db2`).

mod decimals;
mod e2e;
mod extremes;
mod failure;
mod fidelity;
mod hand;
mod history;
mod identifiers;
mod mariadb;
mod postgis;
mod schemaless;
mod soft_deletes;
mod sqlserver_db2;
mod stale;
mod support;
mod types;
