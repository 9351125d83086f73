//! RS256 bearer tokens checked by an axum middleware: what an application adds in front of a
//! framework that verifies no tokens itself (the bare axum floor; rmcp, whose server side has no
//! token verifier). It checks what an OAuth 2.1 resource server must: the signature with a key
//! of the given JSON Web Key Set (chosen by `kid`), `typ` `at+jwt`, `iss`, `aud`, `exp` and a
//! `sub`. A request without a valid token is answered 401 with a `WWW-Authenticate` challenge.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Checks tokens of one issuer for one audience against fixed keys.
pub struct Verifier {
    keys: Vec<(Option<String>, DecodingKey)>,
    validation: Validation,
}

#[derive(Deserialize)]
struct Claims {
    #[allow(dead_code)]
    sub: String,
}

impl Verifier {
    /// A verifier of RS256 tokens issued by `issuer` for `audience`, signed with a key of
    /// `jwks` (a JSON Web Key Set document).
    pub fn new(jwks: &str, issuer: &str, audience: &str) -> Result<Verifier, String> {
        let set: JwkSet = serde_json::from_str(jwks).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("unusable key: {e}"))?;
            keys.push((jwk.common.key_id.clone(), key));
        }
        if keys.is_empty() {
            return Err("the JWKS holds no key".into());
        }
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        Ok(Verifier { keys, validation })
    }

    /// Whether `token` is valid.
    pub fn verify(&self, token: &str) -> bool {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return false;
        };
        if !header
            .typ
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("at+jwt"))
        {
            return false;
        }
        let key = match &header.kid {
            Some(kid) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(kid)),
            None => self.keys.first(),
        };
        let Some((_, key)) = key else { return false };
        jsonwebtoken::decode::<Claims>(token, key, &self.validation).is_ok()
    }
}

/// The middleware: `axum::middleware::from_fn_with_state(verifier, jwt::require_bearer)`.
pub async fn require_bearer(
    State(verifier): State<Arc<Verifier>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match token {
        Some(token) if verifier.verify(token) => next.run(request).await,
        Some(_) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, r#"Bearer error="invalid_token""#)],
        )
            .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
        )
            .into_response(),
    }
}
