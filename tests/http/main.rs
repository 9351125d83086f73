//! The HTTP endpoint end to end, over real HTTP on loopback: the protocol core of both eras,
//! connections, the order of checks, the surface beyond tools, server options, signed values,
//! rate limits, panicking tools, and model-based fuzzing.
//!
//! One test binary for the area, each module a former binary of its own: every test binary
//! links the whole runtime, and linking dominated the suite's build. The fixtures are modules
//! here, once per binary.

#[path = "../../examples/support/basket.rs"]
mod basket;
#[path = "../common/mod.rs"]
mod common;

mod check_order;
mod compiled_once;
mod connections;
mod http_core;
mod http_fuzz;
mod legacy_era;
mod macro_http;
mod rate_limits;
mod request_ladder;
mod sealing;
mod server_info;
mod server_options;
mod surface;
mod tool_panics;
