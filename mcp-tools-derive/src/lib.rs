//! Attribute macros for `mcp-tools`. Use them through the `mcp_tools` crate, which re-exports them.
