//! The stack tests in one binary (each binary links the whole dependency tree: on 2 cores
//! that is most of a test build): each component answers (`smoke`), the registry client
//! (`registry`), decoding real Debezium events (`decode`), the compose file (`compose`), the
//! replica (`replica`), raw-layer files read back by DuckDB and pyarrow (`raw_readback`), and lake
//! row deltas read back by Spark (`lake_row_delta`).

mod compose;
mod decode;
mod lake_row_delta;
mod raw_readback;
mod registry;
mod replica;
mod smoke;
