//! Opaque bearer tokens checked by RFC 7662 token introspection over real HTTP: a test
//! introspection endpoint on loopback that counts its calls and checks this server's client
//! credentials.

use crate::common;

use std::time::Duration;

use common::oauth::{
    self, Guarded, Introspection, RESOURCE, assert_retry_later, assert_served, now,
};
use common::{Reply, assert_conforms, within_for};
use mcp_tools::auth::{IntrospectionVerifier, OAuth};
use serde_json::json;

const ISSUER: &str = "https://auth.example.com";
/// Credentials whose characters change when form-urlencoded, so a client that skips the
/// encoding (or splits at the wrong colon) is refused by the endpoint.
const CLIENT_ID: &str = "mcp server:1";
const CLIENT_SECRET: &str = "s3=cr+t/é";

/// The constructors of [`Guarded`] for tokens introspected at `url`. A trait of this module's
/// own: the JWT tests, in the same binary, give `Guarded` constructors of the same names.
trait IntrospectedGuarded {
    async fn start(url: &str) -> Guarded {
        Guarded::start_with(url, CLIENT_SECRET, |v| v, |o| o).await
    }

    async fn start_with(
        url: &str,
        secret: &str,
        verifier: impl FnOnce(IntrospectionVerifier) -> IntrospectionVerifier,
        oauth: impl FnOnce(OAuth) -> OAuth,
    ) -> Guarded {
        let verifier =
            verifier(IntrospectionVerifier::new(ISSUER, url, CLIENT_ID, secret).unwrap());
        let oauth = oauth(OAuth::new(RESOURCE, verifier).authorization_server(ISSUER));
        Guarded::serve("introspection-test", oauth, |b| b).await
    }
}

impl IntrospectedGuarded for Guarded {}

/// A 401 refusing the token, whose description says `because`, with no trace of the token.
fn assert_invalid_token(reply: &Reply, token: &str, because: &str) {
    oauth::assert_invalid_token(reply, None, because);
    let challenge = reply.headers["www-authenticate"].to_str().unwrap();
    assert!(!challenge.contains(token), "the challenge quotes the token");
    assert!(!reply.text.contains(token), "the error quotes the token");
}

/// A 503 asking to retry (the token was not found wanting), with no trace of the token.
fn assert_unavailable(reply: &Reply, token: &str) {
    assert_retry_later(reply);
    assert!(!reply.text.contains(token), "the error quotes the token");
}

/// A loopback URL nothing listens on.
async fn closed_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/introspect")
}

#[tokio::test]
async fn an_active_token_is_served_with_the_scopes_its_introspection_grants() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "other bump:call");
    endpoint.activate("opaque-bob", ISSUER, "bob", "other");
    let server = Guarded::start_with(
        &endpoint.url,
        CLIENT_SECRET,
        |v| v,
        |o| o.default_scopes(["bump:call"]),
    )
    .await;

    assert_served(&server.bump_with("opaque-alice").await);
    assert_eq!(server.bumps(), 1);
    assert_eq!(endpoint.calls(), 1);

    let refused = server.bump_with("opaque-bob").await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert_conforms("JSONRPCErrorResponse", &refused.json());
    assert_eq!(server.bumps(), 1);
}

#[tokio::test]
async fn a_second_request_with_the_same_token_within_the_ttl_does_not_ask_again() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "");
    endpoint.activate("opaque-bob", ISSUER, "bob", "");
    let server = Guarded::start(&endpoint.url).await;

    assert_served(&server.bump_with("opaque-alice").await);
    assert_served(&server.bump_with("opaque-alice").await);
    assert_eq!(server.bumps(), 2);
    assert_eq!(endpoint.calls(), 1, "the answer was reused");

    assert_served(&server.bump_with("opaque-bob").await);
    assert_eq!(endpoint.calls(), 2, "another token is introspected");
}

#[tokio::test]
async fn a_zero_cache_ttl_introspects_every_request() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "");
    let server = Guarded::start_with(
        &endpoint.url,
        CLIENT_SECRET,
        |v| v.cache_ttl(Duration::ZERO),
        |o| o,
    )
    .await;
    assert_served(&server.bump_with("opaque-alice").await);
    assert_served(&server.bump_with("opaque-alice").await);
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test]
async fn an_inactive_token_gets_invalid_token_the_tool_does_not_run_and_the_answer_is_reused() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    // A revoked token whose answer still carries its claims: `active` alone decides.
    let now = now();
    endpoint.answer(
        "opaque-revoked",
        json!({
            "active": false,
            "iss": ISSUER,
            "sub": "mallory",
            "aud": RESOURCE,
            "exp": now + 3600,
        }),
    );
    let server = Guarded::start(&endpoint.url).await;

    let reply = server.bump_with("opaque-revoked").await;
    assert_invalid_token(&reply, "opaque-revoked", "not active");
    let again = server.bump_with("opaque-revoked").await;
    assert_invalid_token(&again, "opaque-revoked", "not active");
    assert_eq!(endpoint.calls(), 1, "the refusal was cached");

    // A token the endpoint has never heard of.
    let unknown = server.bump_with("opaque-unknown").await;
    assert_invalid_token(&unknown, "opaque-unknown", "not active");
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn a_token_whose_audience_does_not_name_this_server_is_refused() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    let now = now();
    let answer = |aud| json!({ "active": true, "sub": "alice", "aud": aud, "exp": now + 3600 });
    endpoint.answer(
        "opaque-elsewhere",
        answer(json!("http://localhost:8080/other")),
    );
    endpoint.answer(
        "opaque-both",
        answer(json!(["http://localhost:8080/other", RESOURCE])),
    );
    let server = Guarded::start(&endpoint.url).await;

    let reply = server.bump_with("opaque-elsewhere").await;
    assert_invalid_token(&reply, "opaque-elsewhere", "audience");
    assert_eq!(server.bumps(), 0);
    assert_served(&server.bump_with("opaque-both").await);
    assert_eq!(server.bumps(), 1);
}

#[tokio::test]
async fn the_leeway_tolerates_a_recent_expiry_and_zero_refuses_it() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    // The endpoint's clock is behind: it still calls the token active 30 s after its expiry.
    let answer = json!({ "active": true, "sub": "alice", "aud": RESOURCE, "exp": now() - 30 });
    endpoint.answer("opaque-late", answer);
    let lenient = Guarded::start(&endpoint.url).await;
    assert_served(&lenient.bump_with("opaque-late").await);

    let strict = Guarded::start_with(
        &endpoint.url,
        CLIENT_SECRET,
        |v| v.leeway(Duration::ZERO),
        |o| o,
    )
    .await;
    assert_invalid_token(
        &strict.bump_with("opaque-late").await,
        "opaque-late",
        "expired",
    );
    assert_eq!(strict.bumps(), 0);
}

#[tokio::test]
async fn an_unreachable_endpoint_answers_503_with_retry_after() {
    let server = Guarded::start(&closed_url().await).await;
    let reply = server.bump_with("opaque-alice").await;
    assert_unavailable(&reply, "opaque-alice");
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn a_failing_endpoint_answers_503_and_the_failure_is_not_cached() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "");
    let server = Guarded::start(&endpoint.url).await;
    endpoint.set_down(true);
    assert_unavailable(&server.bump_with("opaque-alice").await, "opaque-alice");
    assert_eq!(server.bumps(), 0);

    endpoint.set_down(false);
    assert_served(&server.bump_with("opaque-alice").await);
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test]
async fn an_endpoint_slower_than_the_fetch_timeout_answers_503() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "");
    endpoint.set_hanging(true);
    let server = Guarded::start_with(
        &endpoint.url,
        CLIENT_SECRET,
        |v| v.fetch_timeout(Duration::from_millis(200)).unwrap(),
        |o| o,
    )
    .await;
    // Well under the default fetch timeout, so only the configured one can answer in time.
    let reply = within_for(
        Duration::from_secs(3),
        "a 503 once the 200 ms fetch timeout has passed",
        server.bump_with("opaque-alice"),
    )
    .await;
    assert_unavailable(&reply, "opaque-alice");
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn an_endpoint_refusing_this_servers_client_secret_is_a_503_not_the_callers_401() {
    let endpoint = Introspection::start(CLIENT_ID, CLIENT_SECRET).await;
    endpoint.activate("opaque-alice", ISSUER, "alice", "");
    let server = Guarded::start_with(&endpoint.url, "not the secret", |v| v, |o| o).await;
    let reply = server.bump_with("opaque-alice").await;
    assert_unavailable(&reply, "opaque-alice");
    assert_eq!(
        endpoint.calls(),
        1,
        "the endpoint was asked and refused the client"
    );
    assert_eq!(server.bumps(), 0);
}
