//! Attribute macros for `mcp-tools`. Use them through the `mcp_tools` crate, which re-exports
//! them and documents them: `#[tool]`, `#[toolbox]` and `#[derive(ToolError)]`.

mod error_derive;
mod expand;
mod model;
mod parse;
mod validate;

use proc_macro::TokenStream;

/// Turns a function into an MCP tool. See `mcp_tools::tool`.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::tool(args.into(), input.into()).into()
}

/// Publishes the `#[tool]` methods of an impl block. See `mcp_tools::toolbox`.
#[proc_macro_attribute]
pub fn toolbox(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::toolbox(args.into(), input.into()).into()
}

/// Implements `IntoToolError` with a stable code per variant. See `mcp_tools::ToolError`.
#[proc_macro_derive(ToolError, attributes(code))]
pub fn derive_tool_error(input: TokenStream) -> TokenStream {
    error_derive::derive(input.into()).into()
}
