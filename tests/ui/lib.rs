//! The compile-time contract of mcp-tools' attribute macros: each case under `fail/` pins the
//! error a user sees (message, fix hint and span) in its `.stderr`; each case under `pass/` must
//! build. The cases run as this package's `ui` test (`cargo test -p mcp-tools-ui`).
