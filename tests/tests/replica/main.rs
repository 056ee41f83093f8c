//! The PostgreSQL replica against the real replica database: hand-built change batches
//! (`hand`), and real Debezium on the source database compared row for row (`e2e`), special
//! values included (`extremes`).

mod decimals;
mod e2e;
mod extremes;
mod failure;
mod fidelity;
mod hand;
mod mariadb;
mod support;
mod types;
