//! The stack tests in one binary (each binary links the whole dependency tree: on 2 cores
//! that is most of a test build): each component answers (`smoke`), the registry client
//! (`registry`), decoding real Debezium events (`decode`), the compose file (`compose`), the
//! replica (`replica`) and raw-layer files read back by DuckDB and pyarrow (`raw_readback`).

mod compose;
mod decode;
mod raw_readback;
mod registry;
mod replica;
mod smoke;
