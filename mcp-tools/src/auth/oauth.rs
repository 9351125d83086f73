//! The OAuth 2.1 resource server: its settings, the checks of each request's bearer token, the
//! challenges it answers with, and its RFC 9728 metadata.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::json;

use super::error::ConfigError;
use super::scope::{Granted, Hierarchy, Required, is_scope_token};
use super::verifier::{TokenRejection, TokenVerifier};
use crate::auth::Principal;
use crate::protocol::error::RpcError;

/// Tokens longer than this many bytes are refused unread by default (8 KiB): a JWT with a
/// generous set of claims is well under 4 KiB, and a verifier should not parse megabytes.
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8 * 1024;

/// How long a client is asked to wait when a token cannot be checked right now.
const UNAVAILABLE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// The well-known path of RFC 9728 protected resource metadata.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Settings of an OAuth 2.1 resource server: every request must carry a bearer token that
/// `verifier` accepts, issued for `resource`; see
/// [`McpServerBuilder::oauth`](crate::McpServerBuilder::oauth).
///
/// ```
/// # #[cfg(feature = "oauth")] {
/// use mcp_tools::auth::{JwtVerifier, OAuth};
///
/// let verifier = JwtVerifier::with_jwks(
///     "https://auth.example.com",
///     "https://auth.example.com/.well-known/jwks.json",
/// )
/// .unwrap();
/// let oauth = OAuth::new("https://mcp.example.com/mcp", verifier)
///     .authorization_server("https://auth.example.com")
///     .implies("basket:write", ["basket:read"]);
/// # }
/// ```
#[must_use]
pub struct OAuth {
    resource: String,
    authorization_servers: Vec<String>,
    scopes_supported: Option<Vec<String>>,
    default_scopes: Vec<Cow<'static, str>>,
    hierarchy: Hierarchy,
    verifier: Arc<dyn TokenVerifier>,
    max_token_bytes: usize,
    resource_name: Option<String>,
    resource_documentation: Option<String>,
}

impl OAuth {
    /// A resource server whose canonical URI is `resource` (RFC 8707: the URI clients put in
    /// their token requests, e.g. `https://mcp.example.com/mcp`), checking tokens with
    /// `verifier`. Tokens must name `resource` in their audience.
    pub fn new(resource: impl Into<String>, verifier: impl TokenVerifier) -> Self {
        OAuth {
            resource: resource.into(),
            authorization_servers: Vec::new(),
            scopes_supported: None,
            default_scopes: Vec::new(),
            hierarchy: Hierarchy::default(),
            verifier: Arc::new(verifier),
            max_token_bytes: DEFAULT_MAX_TOKEN_BYTES,
            resource_name: None,
            resource_documentation: None,
        }
    }

    /// An authorization server whose tokens this server accepts (its issuer identifier),
    /// published in the metadata. At least one is required.
    pub fn authorization_server(mut self, issuer: impl Into<String>) -> Self {
        self.authorization_servers.push(issuer.into());
        self
    }

    /// The scopes published as `scopes_supported`. By default: every scope a tool, resource,
    /// prompt or [`default_scopes`](Self::default_scopes) requires.
    pub fn scopes_supported<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes_supported = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The scopes required by every tool, resource and prompt that requires none of its own.
    pub fn default_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.default_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// A token granting `broader` also grants each of `narrower` (and whatever they imply in
    /// turn): `implies("basket:write", ["basket:read"])`.
    pub fn implies<I, S>(mut self, broader: impl Into<String>, narrower: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hierarchy
            .add(&broader.into(), narrower.into_iter().map(Into::into));
        self
    }

    /// The largest bearer token accepted, in bytes (default [`DEFAULT_MAX_TOKEN_BYTES`]).
    pub fn max_token_bytes(mut self, bytes: usize) -> Self {
        self.max_token_bytes = bytes;
        self
    }

    /// A human-readable name of the resource, published as `resource_name`.
    pub fn resource_name(mut self, name: impl Into<String>) -> Self {
        self.resource_name = Some(name.into());
        self
    }

    /// A page documenting the resource, published as `resource_documentation`.
    pub fn resource_documentation(mut self, url: impl Into<String>) -> Self {
        self.resource_documentation = Some(url.into());
        self
    }

    /// Checks the settings and serializes the metadata; `declared` are the scopes the offer's
    /// tools, resources and prompts require.
    pub(crate) fn compile(mut self, declared: Vec<String>) -> Result<ResourceServer, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid(reason);
        let origin = canonical_origin(&self.resource).map_err(invalid)?;
        if self.authorization_servers.is_empty() {
            return Err(invalid(
                "name at least one authorization server with `authorization_server(issuer)`".into(),
            ));
        }
        if self.max_token_bytes == 0 {
            return Err(invalid("max_token_bytes must be at least 1".into()));
        }
        let default_scopes = Required::new(self.default_scopes);
        if let Some(scope) = default_scopes.first_invalid() {
            return Err(ConfigError::InvalidScope {
                owner: "the server's default scopes".into(),
                scope: scope.to_owned(),
            });
        }
        if let Some(scope) = self.hierarchy.scopes().find(|s| !is_scope_token(s)) {
            return Err(ConfigError::InvalidScope {
                owner: "a scope implication".into(),
                scope: scope.to_owned(),
            });
        }
        self.hierarchy.close();
        let scopes_supported = match self.scopes_supported {
            Some(scopes) => scopes,
            None => {
                let mut scopes = declared;
                scopes.extend(default_scopes.iter().map(str::to_owned));
                scopes.sort();
                scopes.dedup();
                scopes
            }
        };
        let path = self.resource[origin.len()..].trim_end_matches('/');
        let metadata_path = format!("{WELL_KNOWN}{path}");
        let metadata_url = format!("{origin}{metadata_path}");
        let mut metadata = json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
        });
        if let Some(name) = &self.resource_name {
            metadata["resource_name"] = json!(name);
        }
        if let Some(url) = &self.resource_documentation {
            metadata["resource_documentation"] = json!(url);
        }
        Ok(ResourceServer {
            resource: self.resource,
            metadata_path,
            metadata: Bytes::from(metadata.to_string()),
            resource_metadata: quoted(&metadata_url),
            scopes_supported: Required::new(scopes_supported),
            default_scopes,
            hierarchy: self.hierarchy,
            verifier: self.verifier,
            max_token_bytes: self.max_token_bytes,
        })
    }
}

/// `scheme://authority` of an absolute `https` URI (or `http` on a loopback host, for tests and
/// local development), refusing what RFC 8707 does not allow in a resource indicator.
fn canonical_origin(resource: &str) -> Result<String, String> {
    let uri: http::Uri = resource
        .parse()
        .map_err(|_| format!("the resource {resource:?} is not an absolute URI"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!(
            "the resource {resource:?} must be an absolute URI such as https://mcp.example.com/mcp"
        ));
    };
    if resource.contains('#') || uri.query().is_some() {
        return Err(format!(
            "the resource {resource:?} must have neither a query nor a fragment"
        ));
    }
    let host = authority.host();
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
    if scheme != "https" && !(scheme == "http" && loopback) {
        return Err(format!(
            "the resource {resource:?} must use https (http is accepted on loopback only)"
        ));
    }
    let origin = format!("{scheme}://{authority}");
    if !resource.starts_with(&origin) || origin.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "the resource {resource:?} must be canonical: lowercase scheme and host"
        ));
    }
    Ok(origin)
}

/// An `auth-param` value: a quoted string with `"` and `\` escaped.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        // Control characters cannot travel in a header value at all.
        if !c.is_control() {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// `scopes` with what the resource server's settings say they imply.
pub(crate) fn granted(oauth: Option<&ResourceServer>, scopes: Vec<String>) -> Granted {
    match oauth {
        Some(oauth) => oauth.hierarchy.expand(scopes),
        None => Hierarchy::default().expand(scopes),
    }
}

/// The compiled resource server the request path consults.
pub(crate) struct ResourceServer {
    resource: String,
    /// Where the metadata is served: `/.well-known/oauth-protected-resource` plus the
    /// resource's path.
    pub(crate) metadata_path: String,
    /// The metadata document, serialized once.
    pub(crate) metadata: Bytes,
    /// The metadata URL, quoted for challenges. From configuration, never from `Host`.
    resource_metadata: String,
    scopes_supported: Required,
    default_scopes: Required,
    hierarchy: Hierarchy,
    verifier: Arc<dyn TokenVerifier>,
    max_token_bytes: usize,
}

/// The well-known metadata path at the root, served next to the path form.
pub(crate) const ROOT_METADATA_PATH: &str = WELL_KNOWN;

impl ResourceServer {
    /// What an item requires: its own scopes, or the server's default ones.
    pub(crate) fn requirement<'a>(&'a self, own: &'a Required) -> &'a Required {
        if own.is_empty() {
            &self.default_scopes
        } else {
            own
        }
    }

    /// Checks the request's bearer token. `needed` is what the operation the routing headers
    /// name requires, when they name one, so a 401 tells the client which scopes to ask for.
    pub(crate) async fn authenticate(
        &self,
        headers: &HeaderMap,
        needed: Option<&Required>,
    ) -> Result<(Principal, Granted), RpcError> {
        let token = match bearer_token(headers) {
            Ok(token) => token,
            Err(Missing) => {
                return Err(self.unauthorized(
                    needed,
                    None,
                    "This server requires an OAuth bearer token in the Authorization header",
                ));
            }
        };
        let token = match token {
            Ok(token) => token,
            Err(reason) => return Err(self.unauthorized(needed, Some(reason), reason)),
        };
        if token.len() > self.max_token_bytes {
            let reason = format!(
                "The bearer token is longer than the {}-byte limit",
                self.max_token_bytes
            );
            return Err(self.unauthorized(needed, Some(&reason), &reason));
        }
        let verified = match self.verifier.verify(token).await {
            Ok(verified) => verified,
            Err(TokenRejection::Invalid(reason)) => {
                return Err(self.unauthorized(needed, Some(&reason), &reason));
            }
            Err(TokenRejection::Unavailable(reason)) => {
                tracing::warn!(reason = %reason, "bearer token could not be verified");
                return Err(RpcError::internal(format!(
                    "The bearer token cannot be checked right now: {reason}; retry later"
                ))
                .with_status(StatusCode::SERVICE_UNAVAILABLE)
                .with_retry_after(UNAVAILABLE_RETRY_AFTER));
            }
        };
        if !verified.audiences.contains(&self.resource) {
            let reason = format!(
                "The bearer token was not issued for this server: its audience must include {}",
                self.resource
            );
            return Err(self.unauthorized(needed, Some(&reason), &reason));
        }
        if verified.issuer.contains('#') || verified.subject.is_empty() {
            let reason = "The bearer token names no usable issuer and subject";
            return Err(self.unauthorized(needed, Some(reason), reason));
        }
        // An issuer identifier has no fragment (RFC 8414), so `#` separates it from the
        // subject unambiguously.
        let principal = Principal::subject(format!("{}#{}", verified.issuer, verified.subject));
        Ok((principal, self.hierarchy.expand(verified.scopes)))
    }

    /// HTTP 401 with a `WWW-Authenticate: Bearer` challenge; `error="invalid_token"` when a
    /// token was sent and refused.
    fn unauthorized(
        &self,
        needed: Option<&Required>,
        invalid: Option<&str>,
        message: &str,
    ) -> RpcError {
        let mut challenge = format!("Bearer resource_metadata={}", self.resource_metadata);
        let scope = needed
            .filter(|needed| !needed.is_empty())
            .unwrap_or(&self.scopes_supported);
        if !scope.is_empty() {
            challenge.push_str(&format!(", scope={}", quoted(&scope.joined())));
        }
        if let Some(reason) = invalid {
            challenge.push_str(&format!(
                ", error=\"invalid_token\", error_description={}",
                quoted(reason)
            ));
        }
        RpcError::invalid_request(message)
            .with_status(StatusCode::UNAUTHORIZED)
            .with_challenge(challenge)
    }

    /// HTTP 403 with `error="insufficient_scope"` naming every scope `what` requires.
    pub(crate) fn insufficient_scope(&self, required: &Required, what: &str) -> RpcError {
        let scopes = required.joined();
        let description = format!("{what} requires the scopes: {scopes}");
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope={}, resource_metadata={}, error_description={}",
            quoted(&scopes),
            self.resource_metadata,
            quoted(&description)
        );
        RpcError::invalid_request(format!(
            "{description}; ask the authorization server for a token that grants them"
        ))
        .with_status(StatusCode::FORBIDDEN)
        .with_challenge(challenge)
        .with_data(json!({ "requiredScopes": required.iter().collect::<Vec<_>>() }))
    }
}

/// No `Authorization` header at all.
struct Missing;

/// The credentials of the one `Authorization: Bearer` header, or why there are none usable.
/// Tokens in the query string or the body are never looked at (OAuth 2.1 forbids the query).
fn bearer_token(headers: &HeaderMap) -> Result<Result<&str, &'static str>, Missing> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Missing);
    };
    if values.next().is_some() {
        return Ok(Err("Send exactly one Authorization header"));
    }
    let Ok(value) = value.to_str() else {
        return Ok(Err("The Authorization header is not ASCII"));
    };
    let Some((scheme, token)) = value.split_once(' ') else {
        return Ok(Err("The Authorization header must be `Bearer <token>`"));
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Ok(Err("The Authorization header must use the Bearer scheme"));
    }
    let token = token.trim_matches(' ');
    // RFC 6750 b64token: what a JWT or an opaque token is made of.
    let is_b64token = !token.is_empty()
        && token.trim_end_matches('=').bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        });
    if !is_b64token {
        return Ok(Err("The bearer token is malformed"));
    }
    Ok(Ok(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_must_be_an_absolute_canonical_https_uri() {
        assert_eq!(
            canonical_origin("https://mcp.example.com/mcp").unwrap(),
            "https://mcp.example.com"
        );
        assert_eq!(
            canonical_origin("http://127.0.0.1:8080/mcp").unwrap(),
            "http://127.0.0.1:8080"
        );
        for bad in [
            "/mcp",
            "http://mcp.example.com/mcp",
            "https://mcp.example.com/mcp#frag",
            "https://mcp.example.com/mcp?x=1",
            "https://MCP.example.com/mcp",
            "not a uri",
        ] {
            assert!(canonical_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quoting_escapes_quotes_and_backslashes_and_drops_control_characters() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quoted("line\r\nbreak"), "\"linebreak\"");
    }

    #[test]
    fn only_one_well_formed_bearer_header_yields_a_token() {
        let headers = |values: &[&str]| {
            let mut map = HeaderMap::new();
            for value in values {
                map.append(http::header::AUTHORIZATION, value.parse().unwrap());
            }
            map
        };
        assert!(matches!(bearer_token(&headers(&[])), Err(Missing)));
        assert_eq!(
            bearer_token(&headers(&["Bearer abc.def-_~+/="])).ok(),
            Some(Ok("abc.def-_~+/="))
        );
        assert_eq!(
            bearer_token(&headers(&["bearer abc"])).ok(),
            Some(Ok("abc"))
        );
        for bad in [
            &["Basic dXNlcg=="][..],
            &["Bearer"],
            &["Bearer a b"],
            &["Bearer a", "Bearer b"],
            &["Bearer "],
        ] {
            assert!(matches!(bearer_token(&headers(bad)), Ok(Err(_))), "{bad:?}");
        }
    }
}
