//! Transports: how messages reach the request path. Streamable HTTP is the one served today.

pub(crate) mod http;
