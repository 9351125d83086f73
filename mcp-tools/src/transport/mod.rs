//! Transports: how messages reach the request path. Streamable HTTP for remote clients, stdio
//! for a client that runs the server as its own child process.

pub(crate) mod http;
pub(crate) mod stdio;
