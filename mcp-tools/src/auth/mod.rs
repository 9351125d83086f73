//! Authorization: an OAuth 2.1 resource server (a bearer token checked on every request, RFC 9728
//! metadata, `WWW-Authenticate` challenges) and scopes per tool, resource and prompt.
//!
//! Configure it with [`McpServerBuilder::oauth`](crate::McpServerBuilder::oauth). Every request
//! then needs a token its [`TokenVerifier`] accepts, issued for the server's canonical URI; the
//! caller's principal is the token's issuer and subject, so handles and operation ids are bound
//! to it. What a tool, resource or prompt requires ([`ToolInfo::scopes`](crate::tools::ToolInfo::scopes),
//! `#[tool(scopes = [..])]`) is checked before it runs, and listings show a caller only what its
//! token allows.

#[cfg(feature = "oauth")]
mod claims;
mod error;
#[cfg(feature = "oauth")]
mod fetch;
pub(crate) mod hook;
#[cfg(feature = "oauth")]
mod introspection;
#[cfg(feature = "oauth")]
mod jwt;
pub(crate) mod oauth;
mod principal;
pub(crate) mod scope;
mod verifier;

pub use error::ConfigError;
#[cfg(feature = "oauth")]
pub use fetch::DEFAULT_FETCH_TIMEOUT;
pub use hook::Unauthorized;
#[cfg(feature = "oauth")]
pub use introspection::{
    DEFAULT_INTROSPECTION_CACHE_TTL, DEFAULT_INTROSPECTION_MAX_CACHED, IntrospectionVerifier,
    MAX_INTROSPECTION_BYTES,
};
#[cfg(feature = "oauth")]
pub use jwt::{
    ACCESS_TOKEN_TYPES, Algorithm, DEFAULT_JWKS_COOLDOWN, DEFAULT_JWKS_MAX_AGE, DEFAULT_LEEWAY,
    JwtVerifier, MAX_JWKS_BYTES,
};
pub use oauth::{DEFAULT_MAX_TOKEN_BYTES, OAuth};
pub use principal::Principal;
pub use scope::Granted;
pub use verifier::{TokenRejection, TokenVerifier, VerifiedToken, VerifyFuture};
