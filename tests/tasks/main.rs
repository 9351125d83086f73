//! The Tasks extension end to end, over real HTTP: servers in this process, and replicas as
//! processes of their own on one SQLite file or one PostgreSQL schema.
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
#[path = "../../mcp-tools/tests/pg/mod.rs"]
mod pg;

mod task_replicas;
mod tasks;
