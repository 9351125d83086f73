//! OAuth 2.1 end to end: the resource server over real HTTP, token introspection, scopes per
//! tool and per caller, the basket example run with OAuth, and model-based fuzzing.
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

mod basket_oauth_cli;
mod oauth;
mod oauth_fuzz;
mod oauth_introspection;
mod oauth_scopes;
mod tool_scopes_macro;
