//! The PostgreSQL replica against the real replica database: hand-built change batches
//! (`hand`), and real Debezium on the source database compared row for row (`e2e`), special
//! values included (`extremes`) and identifiers of every kind (`identifiers`); SQL Server
//! and Db2 records built by hand (`sqlserver_db2`).

mod decimals;
mod e2e;
mod extremes;
mod failure;
mod fidelity;
mod hand;
mod identifiers;
mod mariadb;
mod sqlserver_db2;
mod support;
mod types;
