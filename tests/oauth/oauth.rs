//! The OAuth 2.1 resource server over real HTTP: tokens from a test authorization server whose
//! JWKS is served on loopback.

use crate::common;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::oauth::{
    Guarded, Issuer, Key, RESOURCE, RSA_A_PUBLIC_PEM, assert_asks_for_token, assert_invalid_token,
    assert_retry_later, assert_served, now, sign,
};
use common::tools;
use common::{Call, Reply, TestServer, assert_conforms, client, within};
use mcp_tools::auth::{Algorithm, ConfigError, JwtVerifier, OAuth};
use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{BuildError, Context, McpServer};
use serde_json::{Value, json};
use tokio::task::JoinSet;

fn server(issuer: &Issuer) -> McpServer {
    let verifier = JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap();
    McpServer::builder("oauth-test", "1.0.0")
        .tools(mcp_tools::tools::ToolSet::new().with(tools::Echo))
        .oauth(OAuth::new(RESOURCE, verifier).authorization_server(&issuer.url))
        .build()
        .unwrap()
}

/// The constructors of [`Guarded`] for JWTs from `issuer`. A trait of this module's own: the
/// introspection tests, in the same binary, give `Guarded` constructors of the same names.
trait JwtGuarded {
    async fn start(issuer: &Issuer) -> Guarded {
        Guarded::start_with(
            issuer,
            |verifier| verifier,
            |oauth| oauth,
            |builder| builder,
        )
        .await
    }

    async fn start_with(
        issuer: &Issuer,
        verifier: impl FnOnce(JwtVerifier) -> JwtVerifier,
        oauth: impl FnOnce(OAuth) -> OAuth,
        builder: impl FnOnce(mcp_tools::McpServerBuilder) -> mcp_tools::McpServerBuilder,
    ) -> Guarded {
        let jwt = verifier(JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap());
        let oauth = oauth(OAuth::new(RESOURCE, jwt).authorization_server(&issuer.url));
        Guarded::serve("oauth-test", oauth, builder).await
    }
}

impl JwtGuarded for Guarded {}

fn bump() -> Call {
    Call::call_tool("bump", json!({}))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `claims` signed with `key` as an access token under any key id.
fn sign_with_kid(key: Key, kid: &str, claims: &BTreeMap<String, Value>) -> String {
    let mut header = jsonwebtoken::Header::new(key.algorithm());
    header.typ = Some("at+jwt".to_owned());
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &key.encoding_key()).unwrap()
}

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// A token valid but for `edit` of its claims.
fn token_with(issuer: &Issuer, edit: impl FnOnce(&mut BTreeMap<String, Value>)) -> String {
    let mut claims = issuer.claims("alice", "");
    edit(&mut claims);
    sign(Key::RsaA, &claims)
}

/// Claims that expired `ago` seconds ago, issued an hour before that.
fn expired(issuer: &Issuer, ago: u64) -> BTreeMap<String, Value> {
    let mut claims = issuer.claims("alice", "");
    let exp = now() - ago;
    claims.insert("exp".into(), json!(exp));
    claims.insert("iat".into(), json!(exp - 3600));
    claims.insert("nbf".into(), json!(exp - 3600));
    claims
}

/// GET on the server's origin, without credentials.
async fn get(server: &TestServer, path: &str) -> Reply {
    let url = format!("http://{}{path}", server.addr);
    within(&format!("GET {url}"), async {
        Reply::from(client().get(&url).send().await.unwrap()).await
    })
    .await
}

/// Sends every call at once and waits for all the replies. One client serves them all: building
/// a client per request, as `Call::send` does, costs more than the request itself.
async fn concurrently(server: &TestServer, calls: Vec<Call>, what: &str) -> Vec<Reply> {
    let client = client();
    let url = server.url();
    let mut set = JoinSet::new();
    for call in calls {
        let mut request = client
            .post(&url)
            .body(serde_json::to_vec(&call.body).unwrap());
        for (name, value) in &call.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        set.spawn(async move { Reply::from(request.send().await.unwrap()).await });
    }
    within(what, set.join_all()).await
}

#[tokio::test]
async fn a_valid_token_is_served_and_no_token_is_challenged() {
    let issuer = Issuer::start().await;
    let server = TestServer::start(server(&issuer)).await;
    let call = Call::call_tool("echo", json!({ "text": "hi" }));
    assert_asks_for_token(&call.send(&server).await, None);
    let served = call
        .header(
            "authorization",
            &format!("Bearer {}", issuer.token("alice", "")),
        )
        .send(&server)
        .await;
    assert_eq!(served.status, 200, "{}", served.text);
    assert_eq!(served.result()["content"][0]["text"], "hi");
}

#[tokio::test]
async fn a_request_without_an_authorization_header_is_asked_for_a_token_and_not_run() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let reply = bump().send(&server.http).await;
    assert_asks_for_token(&reply, None);
    assert_eq!(server.bumps(), 0);
    assert_eq!(issuer.fetches(), 0, "no token, nothing to verify");
}

#[tokio::test]
async fn a_token_only_in_the_query_string_is_refused_as_if_absent() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let token = issuer.token("alice", "");
    let url = format!("{}?access_token={token}", server.http.url());
    let reply = bump().send_to(&url).await;
    assert_asks_for_token(&reply, None);
    assert_eq!(server.bumps(), 0);
    assert_eq!(
        issuer.fetches(),
        0,
        "the query-string token was not looked at"
    );
}

#[tokio::test]
async fn a_malformed_authorization_header_is_an_invalid_token_and_not_run() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let token = issuer.token("alice", "");
    let cases: Vec<(&str, Call, &str)> = vec![
        (
            "Basic credentials",
            bump().header("authorization", "Basic YWxpY2U6c2VjcmV0"),
            "Bearer scheme",
        ),
        (
            "Bearer with no token",
            bump().header("authorization", "Bearer"),
            "`Bearer <token>`",
        ),
        (
            "Bearer and a space with no token",
            bump().header("authorization", "Bearer "),
            "Bearer",
        ),
        (
            "two Authorization headers, each with a valid token",
            bump()
                .header("authorization", &bearer(&token))
                .also_header("authorization", &bearer(&token)),
            "exactly one Authorization header",
        ),
        (
            "a token with `$` and `!`",
            bump().header("authorization", "Bearer abc$def!"),
            "malformed",
        ),
        (
            "a token with a space inside",
            bump().header("authorization", &format!("Bearer {token} {token}")),
            "malformed",
        ),
        (
            "a token with a quote",
            bump().header("authorization", "Bearer ab\"cd"),
            "malformed",
        ),
        (
            "a token with non-ASCII bytes",
            bump().header("authorization", "Bearer t\u{f6}k\u{e9}n"),
            "not ASCII",
        ),
    ];
    for (case, call, because) in cases {
        // Shown with the failure: which case it was.
        println!("case: {case}");
        let reply = call.send(&server.http).await;
        assert_invalid_token(&reply, None, because);
    }
    assert_eq!(server.bumps(), 0);
    assert_eq!(
        issuer.fetches(),
        0,
        "no malformed header reached the verifier"
    );
}

/// `claims` signed with [`Key::RsaA`] under the `typ` header `typ` (none when `None`).
fn sign_typed(typ: Option<&str>, claims: &BTreeMap<String, Value>) -> String {
    let mut header = jsonwebtoken::Header::new(Key::RsaA.algorithm());
    header.typ = typ.map(str::to_owned);
    header.kid = Some(Key::RsaA.kid().to_owned());
    jsonwebtoken::encode(&header, claims, &Key::RsaA.encoding_key()).unwrap()
}

/// Only access tokens are accepted (RFC 9068): an ID token or a logout token of the same issuer,
/// whose audience may match, is refused for its type; a server told its authorization server
/// types tokens otherwise, or not at all, accepts those.
#[tokio::test]
async fn only_tokens_typed_as_access_tokens_are_served() {
    let issuer = Issuer::start().await;
    let strict = Guarded::start(&issuer).await;
    let claims = issuer.claims("alice", "");
    for typ in ["at+jwt", "application/at+jwt", "AT+JWT"] {
        assert_served(&strict.bump_with(&sign_typed(Some(typ), &claims)).await);
    }
    for (typ, because) in [
        (Some("JWT"), "not an access token"),
        (Some("logout+jwt"), "not an access token"),
        (None, "not an access token"),
    ] {
        assert_invalid_token(
            &strict.bump_with(&sign_typed(typ, &claims)).await,
            None,
            because,
        );
    }
    assert_eq!(strict.bumps(), 3, "a refused token runs nothing");

    let lenient = Guarded::start_with(
        &issuer,
        |verifier| verifier.any_token_type(),
        |oauth| oauth,
        |builder| builder,
    )
    .await;
    for typ in [Some("JWT"), None] {
        assert_served(&lenient.bump_with(&sign_typed(typ, &claims)).await);
    }
    let custom = Guarded::start_with(
        &issuer,
        |verifier| {
            verifier
                .token_types(["application/okta-internal-at+jwt"])
                .unwrap()
        },
        |oauth| oauth,
        |builder| builder,
    )
    .await;
    assert_served(
        &custom
            .bump_with(&sign_typed(
                Some("application/okta-internal-at+jwt"),
                &claims,
            ))
            .await,
    );
    assert_invalid_token(
        &custom.bump_with(&sign_typed(Some("at+jwt"), &claims)).await,
        None,
        "not an access token",
    );
    assert!(matches!(
        JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url())
            .unwrap()
            .token_types(Vec::<String>::new()),
        Err(ConfigError::Invalid(_))
    ));
}

#[tokio::test]
async fn tokens_that_fail_verification_are_invalid_tokens_and_not_run() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let claims = issuer.claims("alice", "");
    let valid = sign(Key::RsaA, &claims);
    let (header, payload, signature) = {
        let parts: Vec<&str> = valid.split('.').collect();
        (
            parts[0].to_owned(),
            parts[1].to_owned(),
            parts[2].to_owned(),
        )
    };
    let mut edited = claims.clone();
    edited.insert("sub".into(), json!("mallory"));
    let alg_none_header = json!({ "alg": "none", "typ": "JWT", "kid": "rsa-a" });
    let hs256 = {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.typ = Some("at+jwt".to_owned());
        header.kid = Some("rsa-a".into());
        let secret = jsonwebtoken::EncodingKey::from_secret(RSA_A_PUBLIC_PEM);
        jsonwebtoken::encode(&header, &claims, &secret).unwrap()
    };
    let not_yet = {
        let mut claims = claims.clone();
        claims.insert("nbf".into(), json!(now() + 120));
        sign(Key::RsaA, &claims)
    };
    let cases: Vec<(&str, String, String)> = vec![
        (
            "expired 120 s ago (beyond the 60 s leeway)",
            sign(Key::RsaA, &expired(&issuer, 120)),
            "expired".into(),
        ),
        (
            "nbf 120 s ahead (beyond the leeway)",
            not_yet,
            "not valid yet".into(),
        ),
        (
            "issued for another resource",
            token_with(&issuer, |c| {
                c.insert("aud".into(), json!("https://other.example.com/mcp"));
            }),
            format!("its audience must include {RESOURCE}"),
        ),
        (
            "issued for no audience",
            token_with(&issuer, |c| {
                c.remove("aud");
            }),
            format!("its audience must include {RESOURCE}"),
        ),
        (
            "issued by another issuer",
            token_with(&issuer, |c| {
                c.insert("iss".into(), json!("https://other-issuer.example.com"));
            }),
            format!("not issued by {}", issuer.url),
        ),
        (
            "alg none",
            format!("{}.{}.", b64(&alg_none_header), b64(&json!(claims))),
            "not a well-formed signed JWT".into(),
        ),
        (
            "HS256 keyed with the RSA public key",
            hs256,
            "HS256, which this server does not accept".into(),
        ),
        (
            "claims edited after signing",
            format!("{header}.{}.{signature}", b64(&json!(edited))),
            "signature does not verify".into(),
        ),
        (
            "signed with the key of another token's signature",
            format!(
                "{header}.{payload}.{}",
                sign(Key::RsaA, &expired(&issuer, 1))
                    .rsplit('.')
                    .next()
                    .unwrap()
            ),
            "signature does not verify".into(),
        ),
        (
            "an unknown kid",
            sign_with_kid(Key::RsaA, "nobody-knows", &claims),
            "a key this server does not know".into(),
        ),
        (
            "no sub",
            token_with(&issuer, |c| {
                c.remove("sub");
            }),
            "The bearer token has no `sub` claim".into(),
        ),
        (
            "an empty sub",
            token_with(&issuer, |c| {
                c.insert("sub".into(), json!(""));
            }),
            "no usable issuer and subject".into(),
        ),
    ];
    for (case, token, because) in cases {
        println!("case: {case}");
        let reply = server.bump_with(&token).await;
        assert_invalid_token(&reply, None, &because);
    }
    assert_eq!(server.bumps(), 0, "no refused token ran the tool");
    assert_served(&server.bump_with(&valid).await);
    assert_eq!(server.bumps(), 1, "the server itself serves valid tokens");
}

#[tokio::test]
async fn a_token_over_the_size_limit_is_refused_without_fetching_keys() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let bulky = token_with(&issuer, |c| {
        c.insert(
            "pad".into(),
            json!("x".repeat(mcp_tools::auth::DEFAULT_MAX_TOKEN_BYTES)),
        );
    });
    let reply = server.bump_with(&bulky).await;
    assert_invalid_token(&reply, None, "longer than the 8192-byte limit");
    assert_eq!(server.bumps(), 0);
    assert_eq!(
        issuer.fetches(),
        0,
        "the oversized token reached the verifier"
    );

    // The limit is configurable and inclusive.
    let token = issuer.token("alice", "");
    let tight = Guarded::start_with(
        &issuer,
        |v| v,
        |o| o.max_token_bytes(token.len() - 1),
        |b| b,
    )
    .await;
    let reply = tight.bump_with(&token).await;
    assert_invalid_token(
        &reply,
        None,
        &format!("longer than the {}-byte limit", token.len() - 1),
    );
    assert_eq!(tight.bumps(), 0);
    assert_eq!(issuer.fetches(), 0);
    let exact =
        Guarded::start_with(&issuer, |v| v, |o| o.max_token_bytes(token.len()), |b| b).await;
    assert_served(&exact.bump_with(&token).await);
    assert_eq!(exact.bumps(), 1);
}

#[tokio::test]
async fn valid_rs256_and_es256_tokens_are_served() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let claims = issuer.claims("alice", "");
    assert_served(&server.bump_with(&sign(Key::RsaA, &claims)).await);
    assert_served(&server.bump_with(&sign(Key::EcC, &claims)).await);
    // The scheme is case-insensitive (RFC 9110 section 11.1).
    let lower = bump()
        .header(
            "authorization",
            &format!("bearer {}", sign(Key::RsaA, &claims)),
        )
        .send(&server.http)
        .await;
    assert_served(&lower);
    assert_eq!(server.bumps(), 3);
}

#[tokio::test]
async fn a_token_within_the_leeway_is_served() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    assert_served(
        &server
            .bump_with(&sign(Key::RsaA, &expired(&issuer, 30)))
            .await,
    );
    let early = token_with(&issuer, |c| {
        c.insert("nbf".into(), json!(now() + 30));
    });
    assert_served(&server.bump_with(&early).await);
    assert_eq!(server.bumps(), 2);
}

#[tokio::test]
async fn a_zero_leeway_refuses_a_token_that_expired_30_seconds_ago() {
    let issuer = Issuer::start().await;
    let server = Guarded::start_with(&issuer, |v| v.leeway(Duration::ZERO), |o| o, |b| b).await;
    let reply = server
        .bump_with(&sign(Key::RsaA, &expired(&issuer, 30)))
        .await;
    assert_invalid_token(&reply, None, "expired");
    let early = token_with(&issuer, |c| {
        c.insert("nbf".into(), json!(now() + 30));
    });
    assert_invalid_token(&server.bump_with(&early).await, None, "not valid yet");
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn keys_that_cannot_be_fetched_answer_503_until_the_issuer_is_back() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    issuer.set_down(true);
    let token = issuer.token("alice", "");
    let body = assert_retry_later(&server.bump_with(&token).await);
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(server.bumps(), 0);
    assert_eq!(issuer.fetches(), 1);

    issuer.set_down(false);
    assert_served(&server.bump_with(&token).await);
    assert_eq!(server.bumps(), 1);
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_when_a_token_first_names_it() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    assert_served(&server.bump_with(&issuer.token("alice", "")).await);
    assert_eq!(issuer.fetches(), 1);
    issuer.rotate();
    let rotated = sign(Key::RsaB, &issuer.claims("alice", ""));
    assert_served(&server.bump_with(&rotated).await);
    assert_eq!(
        issuer.fetches(),
        2,
        "the unknown kid caused exactly one refetch"
    );
    assert_served(&server.bump_with(&rotated).await);
    assert_served(&server.bump_with(&issuer.token("alice", "")).await);
    assert_eq!(issuer.fetches(), 2, "the new key set is cached");
    assert_eq!(server.bumps(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_unknown_key_ids_costs_the_issuer_at_most_two_fetches() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let claims = issuer.claims("alice", "");
    let random = RandomState::new();
    let mut replies = Vec::new();
    for wave in 0..4u64 {
        let calls = (0..50u64)
            .map(|i| {
                let kid = format!("kid-{:016x}", random.hash_one((wave, i)));
                bump().header(
                    "authorization",
                    &bearer(&sign_with_kid(Key::RsaA, &kid, &claims)),
                )
            })
            .collect();
        replies.extend(concurrently(&server.http, calls, "a wave of unknown kids").await);
    }
    assert_eq!(replies.len(), 200);
    for reply in &replies {
        assert_invalid_token(reply, None, "a key this server does not know");
    }
    assert!(issuer.fetches() <= 2, "{} JWKS fetches", issuer.fetches());
    assert!(issuer.fetches() >= 1);
    assert_eq!(server.bumps(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_requests_share_one_key_fetch() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    let calls = (0..50)
        .map(|i| {
            bump().header(
                "authorization",
                &bearer(&issuer.token(&format!("user-{i}"), "")),
            )
        })
        .collect();
    let replies = concurrently(&server.http, calls, "50 first requests").await;
    for reply in &replies {
        assert_served(reply);
    }
    assert_eq!(issuer.fetches(), 1, "single flight");
    assert_eq!(server.bumps(), 50);
}

/// `basket_add`: requires two scopes, so they show up in the metadata and in challenges.
struct Scoped;

impl Tool for Scoped {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("basket_add", "Adds to the basket.").scopes(["basket:write", "basket:read"])
    }
    async fn call(&self, _: NoArgs, _: Context) -> &'static str {
        "added"
    }
}

async fn scoped_server(issuer: &Issuer, oauth: impl FnOnce(OAuth) -> OAuth) -> Guarded {
    Guarded::start_with(
        issuer,
        |v| v,
        oauth,
        |b| b.tools(ToolSet::new().with(Scoped)),
    )
    .await
}

fn assert_metadata(reply: &Reply, issuer: &Issuer, scopes: &[&str]) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.headers.get("content-type").unwrap(),
        "application/json",
        "{:?}",
        reply.headers
    );
    let document: Value = serde_json::from_str(&reply.text).unwrap();
    assert_eq!(document["resource"], RESOURCE);
    assert_eq!(document["authorization_servers"], json!([issuer.url]));
    assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    assert_eq!(document["scopes_supported"], json!(scopes));
}

#[tokio::test]
async fn the_protected_resource_metadata_needs_no_token_and_lists_the_declared_scopes() {
    let issuer = Issuer::start().await;
    let server = scoped_server(&issuer, |o| o).await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let reply = get(&server.http, path).await;
        assert_metadata(&reply, &issuer, &["basket:read", "basket:write"]);
    }
    // Challenges name what the request needs: the tool's scopes, or every scope offered.
    let tool = Call::call_tool("basket_add", json!({}))
        .send(&server.http)
        .await;
    assert_asks_for_token(&tool, Some("basket:read basket:write"));
    let unscoped = bump().send(&server.http).await;
    assert_asks_for_token(&unscoped, Some("basket:read basket:write"));
    assert_eq!(issuer.fetches(), 0);
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn configured_scopes_supported_replace_the_declared_ones() {
    let issuer = Issuer::start().await;
    let server = scoped_server(&issuer, |o| o.scopes_supported(["mcp:use", "basket:read"])).await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let reply = get(&server.http, path).await;
        assert_metadata(&reply, &issuer, &["mcp:use", "basket:read"]);
    }
    let unscoped = bump().send(&server.http).await;
    assert_asks_for_token(&unscoped, Some("basket:read mcp:use"));
    let tool = Call::call_tool("basket_add", json!({}))
        .send(&server.http)
        .await;
    assert_asks_for_token(&tool, Some("basket:read basket:write"));
    let expired = sign(Key::RsaA, &expired(&issuer, 120));
    assert_invalid_token(
        &server.bump_with(&expired).await,
        Some("basket:read mcp:use"),
        "expired",
    );
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn challenges_name_the_configured_metadata_url_whatever_the_host_header_says() {
    let issuer = Issuer::start().await;
    let server = Guarded::start_with(&issuer, |v| v, |o| o, |b| b.allow_any_host()).await;
    let evil = bump().header("host", "evil.example");
    assert_asks_for_token(&evil.send(&server.http).await, None);
    let expired = sign(Key::RsaA, &expired(&issuer, 120));
    let reply = evil
        .header("authorization", &bearer(&expired))
        .send(&server.http)
        .await;
    assert_invalid_token(&reply, None, "expired");
    assert_eq!(server.bumps(), 0);

    // The forged Host does reach the server: one that checks hosts refuses it.
    let checking = Guarded::start(&issuer).await;
    let refused = bump()
        .header("host", "evil.example")
        .send(&checking.http)
        .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
}

#[tokio::test]
async fn discovery_needs_a_token_too() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    assert_asks_for_token(&Call::discover().send(&server.http).await, None);
    let served = Call::discover()
        .header("authorization", &bearer(&issuer.token("alice", "")))
        .send(&server.http)
        .await;
    assert_eq!(served.status, 200, "{}", served.text);
    assert_conforms("DiscoverResultResponse", &served.json());
}

fn build_error(oauth: OAuth) -> BuildError {
    match McpServer::builder("oauth-test", "1.0.0")
        .tools(tools::tool_set(0))
        .oauth(oauth)
        .build()
    {
        Ok(_) => panic!("the server was built"),
        Err(error) => error,
    }
}

#[test]
fn incomplete_or_unsafe_oauth_settings_do_not_build() {
    let issuer = "https://auth.example.com";
    let jwks = "https://auth.example.com/jwks.json";
    let verifier = || JwtVerifier::with_jwks(issuer, jwks).unwrap();
    let no_issuer = build_error(OAuth::new(RESOURCE, verifier()));
    assert!(
        matches!(&no_issuer, BuildError::InvalidOAuth(reason) if reason.contains("authorization_server")),
        "{no_issuer:?}"
    );
    let plain_http = build_error(
        OAuth::new("http://mcp.example.com/mcp", verifier()).authorization_server(issuer),
    );
    assert!(
        matches!(&plain_http, BuildError::InvalidOAuth(reason) if reason.contains("https")),
        "{plain_http:?}"
    );
    let plain_jwks = JwtVerifier::with_jwks(issuer, "http://auth.example.com/jwks");
    assert!(
        matches!(&plain_jwks, Err(ConfigError::Invalid(reason)) if reason.contains("https")),
        "plain-HTTP JWKS accepted"
    );
    let symmetric = verifier().algorithms([Algorithm::HS256]);
    assert!(
        matches!(&symmetric, Err(ConfigError::Invalid(reason)) if reason.contains("HS256")),
        "HS256 accepted"
    );
    // What is allowed next to them still builds.
    assert!(
        McpServer::builder("oauth-test", "1.0.0")
            .tools(tools::tool_set(0))
            .oauth(
                OAuth::new(
                    "https://mcp.example.com/mcp",
                    verifier()
                        .algorithms([Algorithm::RS256, Algorithm::ES256])
                        .unwrap()
                )
                .authorization_server(issuer)
            )
            .build()
            .is_ok()
    );
}

#[tokio::test]
async fn concurrent_requests_while_the_keys_are_unreachable_share_the_failed_fetch() {
    let issuer = Issuer::start().await;
    let server = Guarded::start(&issuer).await;
    issuer.set_down(true);
    let token = issuer.token("alice", "");
    let calls = (0..40)
        .map(|_| bump().header("authorization", &bearer(&token)))
        .collect();
    let replies = concurrently(&server.http, calls, "40 requests while the JWKS is down").await;
    for reply in &replies {
        assert_eq!(reply.status, 503, "{}", reply.text);
    }
    // Requests that queued behind a failed fetch take its failure instead of trying again;
    // only those arriving after it ended start another.
    assert!(
        issuer.fetches() <= 4,
        "{} fetches for 40 requests",
        issuer.fetches()
    );
    assert_eq!(server.bumps(), 0);
}

#[tokio::test]
async fn old_keys_are_used_at_once_refreshed_beside_the_requests_and_backed_off_after_a_failure() {
    let issuer = Issuer::start().await;
    let server = Guarded::start_with(
        &issuer,
        |verifier| {
            verifier
                .jwks_max_age(Duration::ZERO)
                .jwks_cooldown(Duration::from_secs(3600))
        },
        |oauth| oauth,
        |builder| builder,
    )
    .await;
    let token = issuer.token("alice", "");
    assert_served(&server.bump_with(&token).await);
    assert_served(&server.bump_with(&token).await);
    issuer.fetched(2).await;
    // Keys past their age are fetched again, beside the request that found them old.
    assert_eq!(issuer.fetches(), 2);
    issuer.set_down(true);
    assert_served(&server.bump_with(&token).await);
    issuer.fetched(3).await;
    // The refresh failed: the old keys stay in use, and no request tries again before the
    // back-off (an hour here), however many come.
    for _ in 0..20 {
        assert_served(&server.bump_with(&token).await);
    }
    assert_eq!(issuer.fetches(), 3, "one failed refresh, then the back-off");
    assert_eq!(server.bumps(), 23);

    // An authorization server that hangs delays no request that has keys: each is served at
    // once while one refresh waits for the fetch timeout beside them.
    let hanging = Issuer::start().await;
    let server = Guarded::start_with(
        &hanging,
        |verifier| {
            verifier
                .jwks_max_age(Duration::ZERO)
                .fetch_timeout(Duration::from_secs(30))
                .unwrap()
        },
        |oauth| oauth,
        |builder| builder,
    )
    .await;
    let token = hanging.token("alice", "");
    assert_served(&server.bump_with(&token).await);
    hanging.set_hanging(true);
    for _ in 0..10 {
        let reply = tokio::time::timeout(Duration::from_secs(2), server.bump_with(&token))
            .await
            .expect("a request with cached keys waits for no refresh");
        assert_served(&reply);
    }
    hanging.fetched(2).await;
    assert_eq!(hanging.fetches(), 2, "one refresh at a time");

    let fresh = Issuer::start().await;
    let cached = Guarded::start(&fresh).await;
    let token = fresh.token("alice", "");
    for _ in 0..3 {
        assert_served(&cached.bump_with(&token).await);
    }
    assert_eq!(
        fresh.fetches(),
        1,
        "keys within their age are not fetched again"
    );
}

#[test]
fn a_zero_token_size_limit_is_refused_when_the_server_is_built() {
    let verifier = JwtVerifier::with_key_set(
        "https://auth.example.com",
        &json!({ "keys": [Key::EcC.jwk()] }).to_string(),
    )
    .unwrap();
    let built = McpServer::builder("oauth-test", "1.0.0")
        .oauth(
            OAuth::new(RESOURCE, verifier)
                .authorization_server("https://auth.example.com")
                .max_token_bytes(0),
        )
        .build();
    assert!(
        matches!(&built, Err(BuildError::InvalidOAuth(reason)) if reason.contains("max_token_bytes")),
        "{:?}",
        built.err()
    );
}
