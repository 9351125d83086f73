//! Who is calling: an application-supplied check of each request's credentials.
//!
//! Authentication happens on every request (nothing is remembered between requests). Without a
//! configured check every caller is [`Principal::Anonymous`], and handles are bearer
//! capabilities.

use std::sync::Arc;

use http::HeaderMap;

use crate::auth::Principal;

/// Why a request was refused before it was served: HTTP 401 with a `WWW-Authenticate`
/// challenge (or 403 for insufficient scope).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unauthorized {
    pub(crate) status: http::StatusCode,
    pub(crate) challenge: String,
    pub(crate) message: String,
}

impl Unauthorized {
    /// 401: no credentials, or invalid ones. `challenge` is the `WWW-Authenticate` value, e.g.
    /// `Bearer resource_metadata="https://example.com/.well-known/oauth-protected-resource/mcp"`.
    pub fn new(challenge: impl Into<String>, message: impl Into<String>) -> Self {
        Unauthorized {
            status: http::StatusCode::UNAUTHORIZED,
            challenge: challenge.into(),
            message: message.into(),
        }
    }

    /// 403: valid credentials without the scope the request needs.
    pub fn insufficient_scope(challenge: impl Into<String>, message: impl Into<String>) -> Self {
        Unauthorized {
            status: http::StatusCode::FORBIDDEN,
            ..Self::new(challenge, message)
        }
    }
}

/// Maps a request's headers to its principal.
pub(crate) type Authenticate =
    Arc<dyn Fn(&HeaderMap) -> Result<Principal, Unauthorized> + Send + Sync>;

impl From<Unauthorized> for crate::protocol::error::RpcError {
    fn from(refusal: Unauthorized) -> Self {
        crate::protocol::error::RpcError::invalid_request(refusal.message)
            .with_status(refusal.status)
            .with_challenge(refusal.challenge)
    }
}
