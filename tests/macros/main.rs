//! What the macros and the builder declare, observed through the in-process client and over
//! real HTTP: `#[tool]`, `#[derive(IntoToolError)]`, and what the builder refuses or merges.
//!
//! One test binary for the area, each module a former binary of its own: every test binary
//! links the whole runtime, and linking dominated the suite's build. The fixtures are modules
//! here, once per binary.

#[path = "../../examples/support/basket.rs"]
mod basket;
#[path = "../common/mod.rs"]
mod common;

mod build_errors;
mod macro_tools;
mod tool_error_codes;
