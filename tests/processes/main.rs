//! Servers as real processes: the stdio transport, the standard command line of the example
//! binaries, and server processes sharing one SQLite file or one PostgreSQL database, through
//! faults.
//!
//! One test binary for the area, each module a former binary of its own: every test binary
//! links the whole runtime, and linking dominated the suite's build. The fixtures are modules
//! here, once per binary.

#[path = "../../examples/support/basket.rs"]
mod basket;
#[path = "../basket_client/mod.rs"]
mod basket_client;
#[path = "../common/mod.rs"]
mod common;
#[path = "../faults/mod.rs"]
mod faults;
#[path = "../../mcp-tools/tests/pg/mod.rs"]
mod pg;

mod cli;
mod deployment;
mod effects;
mod faults_postgres;
mod postgres_replicas;
mod soak;
mod sqlite_processes;
mod stdio;
mod steps;
