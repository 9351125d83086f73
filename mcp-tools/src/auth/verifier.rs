//! What checks a bearer token: the trait every verifier implements, and what it answers.

use std::future::Future;
use std::pin::Pin;

/// A token that passed its verifier: who it names and what it grants.
///
/// The audience is checked by the resource server itself, against its canonical URI, so a
/// verifier cannot forget it: report what the token says and leave the comparison to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedToken {
    /// The issuer (`iss`): the authorization server that minted the token.
    pub issuer: String,
    /// The subject (`sub`): who the token was issued to.
    pub subject: String,
    /// The audiences (`aud`, or the introspection answer's `aud`): the resources it is for.
    pub audiences: Vec<String>,
    /// The granted scopes (`scope`, space separated, or `scp`).
    pub scopes: Vec<String>,
}

impl VerifiedToken {
    /// A verified token from `issuer` for `subject`, addressed to `audiences`, granting `scopes`.
    pub fn new(
        issuer: impl Into<String>,
        subject: impl Into<String>,
        audiences: impl IntoIterator<Item = String>,
        scopes: impl IntoIterator<Item = String>,
    ) -> Self {
        VerifiedToken {
            issuer: issuer.into(),
            subject: subject.into(),
            audiences: audiences.into_iter().collect(),
            scopes: scopes.into_iter().collect(),
        }
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRejection {
    /// The token is malformed, forged, expired, not yet valid, revoked, or from an issuer this
    /// server does not trust: HTTP 401 with `error="invalid_token"`. The reason goes to the
    /// caller as the `error_description`, so it must not quote the token.
    #[error("{0}")]
    Invalid(String),
    /// The token could not be checked right now (the authorization server's keys or its
    /// introspection endpoint are unreachable): HTTP 503 with `Retry-After`, so a client retries
    /// the same token instead of sending its user through a new authorization.
    #[error("{0}")]
    Unavailable(String),
}

/// The future a [`TokenVerifier`] returns.
pub type VerifyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<VerifiedToken, TokenRejection>> + Send + 'a>>;

/// Checks a bearer token: its signature or its introspection, its expiry, its issuer.
///
/// Called on every request that carries a token (nothing is remembered between requests but
/// what the verifier caches itself). `JwtVerifier` and `IntrospectionVerifier` (feature
/// `oauth`) are the provided ones; implement this trait for any other token format.
pub trait TokenVerifier: Send + Sync + 'static {
    /// Verifies `token`, the credentials of an `Authorization: Bearer` header.
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a>;
}
