//! Stateful tools end to end, over real HTTP on the basket example: versions, replays, bad
//! input, validators, reconfirmation, lost updates, outcomes as results, and the contracts and
//! schemas the tools publish.
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

mod basket_http;
mod basket_inputs;
mod contract_diff;
mod lost_update;
mod outcomes_as_results;
mod reconfirm;
mod schemas;
mod state_edges;
mod validators;
