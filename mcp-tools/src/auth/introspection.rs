//! Opaque access tokens checked by asking the authorization server: RFC 7662 token
//! introspection, with a short, bounded cache of its answers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};

use super::claims::{OneOrMany, scope_list};
use super::error::ConfigError;
use super::fetch::{DEFAULT_FETCH_TIMEOUT, Fetcher};
use super::jwt::DEFAULT_LEEWAY;
use super::verifier::{TokenRejection, TokenVerifier, VerifiedToken, VerifyFuture};
// The cache and the flights change by whole map operations: a poisoned lock guards whole maps.
use crate::sync::lock;
use crate::sync::shared::Shared;

/// How long an introspection answer is reused by default: 30 s. A revoked token is refused at
/// most this long after its revocation; an active answer is never reused past the token's `exp`.
pub const DEFAULT_INTROSPECTION_CACHE_TTL: Duration = Duration::from_secs(30);

/// How many introspection answers are kept by default: 10,000.
pub const DEFAULT_INTROSPECTION_MAX_CACHED: usize = 10_000;

/// The largest introspection answer accepted: 64 KiB. An answer is a handful of claims; more
/// means the endpoint is not what it should be.
pub const MAX_INTROSPECTION_BYTES: usize = 64 * 1024;

/// Verifies opaque access tokens by RFC 7662 token introspection: each token is posted to the
/// authorization server's introspection endpoint, which says whether it is active and what it
/// grants.
///
/// A token is refused (HTTP 401) when the answer's `active` is not `true`, its `exp` has passed
/// or its `nbf` has not come (both with [`leeway`](Self::leeway)), its `iss` names another
/// issuer than the configured one (a missing `iss` means the configured issuer), it names no
/// `sub`, or its `token_type` is neither `Bearer` nor `access_token`. The audience (`aud`, a
/// string or an array) is checked by the resource server against its canonical URI, so the
/// authorization server must include it. Scopes come from `scope` (space separated).
///
/// When the endpoint is unreachable, times out, or answers anything but a 2xx JSON document of
/// at most [`MAX_INTROSPECTION_BYTES`], the token cannot be checked: HTTP 503 with
/// `Retry-After`. That includes the endpoint refusing this server's own client credentials
/// (typically a 401): the server's misconfiguration is not the caller's fault, and a 401 would
/// send the caller through a new authorization that could not help.
///
/// Answers are cached for [`cache_ttl`](Self::cache_ttl), keyed by the SHA-256 of the token
/// (the token itself is neither stored, logged nor quoted in an error). Answers saying the token
/// is not active are cached too, so a replayed revoked token costs the endpoint one call per
/// period. Concurrent requests with the same uncached token share one introspection.
///
/// ```
/// # #[cfg(feature = "oauth")] {
/// use std::time::Duration;
/// use mcp_tools::auth::{IntrospectionVerifier, OAuth};
///
/// let verifier = IntrospectionVerifier::new(
///     "https://auth.example.com",
///     "https://auth.example.com/oauth/introspect",
///     "mcp-server",
///     "the client secret",
/// )
/// .unwrap()
/// .cache_ttl(Duration::from_secs(10));
/// let oauth = OAuth::new("https://mcp.example.com/mcp", verifier)
///     .authorization_server("https://auth.example.com");
/// # }
/// ```
pub struct IntrospectionVerifier {
    issuer: String,
    fetcher: Fetcher,
    /// `Basic` credentials of this server as a client of the authorization server.
    authorization: HeaderValue,
    leeway: Duration,
    cache_ttl: Duration,
    cache: Mutex<Cache>,
    in_flight: Shared<Key, Flight>,
}

/// The SHA-256 of a token: what the cache and the in-flight introspections are keyed by.
type Key = [u8; 32];

/// One introspection that concurrent requests with the same token wait for; `Err` says why the
/// endpoint gave no usable answer.
type Flight = tokio::sync::OnceCell<Result<Answer, String>>;

impl IntrospectionVerifier {
    /// Tokens of `issuer`, introspected at `introspection_url` (HTTPS; plain HTTP to loopback
    /// only) with HTTP Basic client authentication as `client_id` with `client_secret`
    /// (RFC 7662 section 2.1; both form-urlencoded before base64, as RFC 6749 section 2.3.1
    /// says).
    pub fn new(
        issuer: impl Into<String>,
        introspection_url: &str,
        client_id: &str,
        client_secret: &str,
    ) -> Result<Self, ConfigError> {
        let invalid = |reason: &str| ConfigError::Invalid(reason.to_owned());
        let issuer = issuer.into();
        if issuer.is_empty() || issuer.contains('#') {
            return Err(invalid(
                "the issuer must be an issuer identifier: not empty, without a fragment",
            ));
        }
        if client_id.is_empty() {
            return Err(invalid(
                "the introspection endpoint needs this server's client id",
            ));
        }
        let fetcher = Fetcher::new(
            introspection_url,
            "introspection endpoint",
            MAX_INTROSPECTION_BYTES,
            DEFAULT_FETCH_TIMEOUT,
        )?;
        // Credentials in the URL would be sent instead of, or next to, the configured ones, and
        // quoted in every error that names the endpoint.
        if !fetcher.url.username().is_empty() || fetcher.url.password().is_some() {
            return Err(invalid(
                "the introspection URL must not hold credentials: pass them as client id and secret",
            ));
        }
        Ok(IntrospectionVerifier {
            issuer,
            fetcher,
            authorization: basic_credentials(client_id, client_secret),
            leeway: DEFAULT_LEEWAY,
            cache_ttl: DEFAULT_INTROSPECTION_CACHE_TTL,
            cache: Mutex::new(Cache::new(DEFAULT_INTROSPECTION_MAX_CACHED)),
            in_flight: Shared::new(),
        })
    }

    /// How long an answer is reused (default [`DEFAULT_INTROSPECTION_CACHE_TTL`]), never past
    /// the token's `exp`. Zero asks the endpoint on every request.
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// How many answers are kept (default [`DEFAULT_INTROSPECTION_MAX_CACHED`]). When the cache
    /// is full, expired answers make room; if none has expired, the new answer is not kept.
    pub fn max_cached(self, entries: usize) -> Self {
        lock(&self.cache).max = entries;
        self
    }

    /// Clock skew tolerated on `exp` and `nbf` (default [`DEFAULT_LEEWAY`]).
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// How long one introspection may take (default
    /// [`DEFAULT_FETCH_TIMEOUT`](crate::auth::DEFAULT_FETCH_TIMEOUT)); a slower endpoint makes
    /// the request fail with 503.
    pub fn fetch_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.fetcher = Fetcher::new(
            self.fetcher.url.as_str(),
            "introspection endpoint",
            MAX_INTROSPECTION_BYTES,
            timeout,
        )?;
        Ok(self)
    }

    async fn check(&self, token: &str) -> Result<VerifiedToken, TokenRejection> {
        let key: Key = Sha256::digest(token.as_bytes()).into();
        let answer = match self.cached(&key) {
            Some(answer) => answer,
            None => self
                .introspect_once(key, token)
                .await
                .map_err(TokenRejection::Unavailable)?,
        };
        // Decided at every use, so a cached answer stops being accepted the moment its token
        // expires and starts being accepted when its `nbf` comes.
        decide(&answer, &self.issuer, unix_now(), self.leeway)
    }

    fn cached(&self, key: &Key) -> Option<Answer> {
        lock(&self.cache).get(key, Instant::now())
    }

    /// Introspects `token`, or waits for the introspection another request with the same token
    /// already started.
    async fn introspect_once(&self, key: Key, token: &str) -> Result<Answer, String> {
        // Joined for as long as this request waits: the last one to leave, even a cancelled
        // one, removes the flight.
        let flight = self.in_flight.join(key);
        flight
            .value()
            .get_or_init(|| async {
                // A flight that finished just before this one was joined has cached its answer.
                if let Some(answer) = self.cached(&key) {
                    return Ok(answer);
                }
                let answer = self.introspect(token).await?;
                let lifetime = lifetime(&answer, self.cache_ttl, unix_now());
                let now = Instant::now();
                if let Some(until) = now.checked_add(lifetime) {
                    lock(&self.cache).insert(key, answer.clone(), until, now);
                }
                Ok(answer)
            })
            .await
            .clone()
    }

    async fn introspect(&self, token: &str) -> Result<Answer, String> {
        let request = self
            .fetcher
            .client()
            .post(self.fetcher.url.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")]);
        self.fetcher.json(request).await
    }
}

impl TokenVerifier for IntrospectionVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        Box::pin(self.check(token))
    }
}

/// Seconds since the epoch, as introspection answers give times.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// `Authorization: Basic` for `client_id` and `client_secret`, each form-urlencoded first.
fn basic_credentials(client_id: &str, client_secret: &str) -> HeaderValue {
    let pair = format!(
        "{}:{}",
        form_urlencode(client_id),
        form_urlencode(client_secret)
    );
    let mut value = HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(pair)))
        .expect("base64 is a valid header value");
    // Kept out of HTTP/2 header compression tables and debug output.
    value.set_sensitive(true);
    value
}

/// `application/x-www-form-urlencoded` serialization of one value.
fn form_urlencode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The introspection answer's members this server uses (RFC 7662 section 2.2).
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Answer {
    /// Only a JSON `true` is active: a missing member, `"true"` or `1` is not.
    #[serde(default, deserialize_with = "exactly_true")]
    active: bool,
    iss: Option<String>,
    sub: Option<String>,
    aud: Option<OneOrMany>,
    scope: Option<String>,
    /// Seconds since the epoch, as an integer (or, leniently, a fraction).
    exp: Option<f64>,
    nbf: Option<f64>,
    token_type: Option<String>,
}

fn exactly_true<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(serde_json::Value::deserialize(deserializer)? == serde_json::Value::Bool(true))
}

/// Whether the answer accepts the token now (`now` in seconds since the epoch), and what for.
fn decide(
    answer: &Answer,
    issuer: &str,
    now: f64,
    leeway: Duration,
) -> Result<VerifiedToken, TokenRejection> {
    let invalid = |reason: String| Err(TokenRejection::Invalid(reason));
    if !answer.active {
        return invalid("The bearer token is not active (revoked, expired or unknown)".into());
    }
    if let Some(token_type) = &answer.token_type
        && !(token_type.eq_ignore_ascii_case("bearer") || token_type == "access_token")
    {
        return invalid("The bearer token is not a bearer access token".into());
    }
    let leeway = leeway.as_secs_f64();
    if answer.exp.is_some_and(|exp| exp + leeway < now) {
        return invalid("The bearer token has expired".into());
    }
    if answer.nbf.is_some_and(|nbf| nbf - leeway > now) {
        return invalid("The bearer token is not valid yet (nbf)".into());
    }
    if answer.iss.as_deref().is_some_and(|iss| iss != issuer) {
        return invalid(format!("The bearer token was not issued by {issuer}"));
    }
    let Some(subject) = answer.sub.as_deref().filter(|sub| !sub.is_empty()) else {
        return invalid("The bearer token names no subject (`sub`)".into());
    };
    let audiences = answer
        .aud
        .clone()
        .map(OneOrMany::into_vec)
        .unwrap_or_default();
    let scopes = scope_list(answer.scope.as_deref());
    Ok(VerifiedToken::new(issuer, subject, audiences, scopes))
}

/// How long `answer` may be reused: `ttl`, and for an active token never past its `exp`.
fn lifetime(answer: &Answer, ttl: Duration, now: f64) -> Duration {
    match answer.exp {
        Some(exp) if answer.active => {
            Duration::try_from_secs_f64((exp - now).max(0.0)).map_or(ttl, |left| left.min(ttl))
        }
        _ => ttl,
    }
}

/// Introspection answers by token hash, each until a deadline, at most `max` of them.
struct Cache {
    entries: HashMap<Key, (Answer, Instant)>,
    max: usize,
    /// No entry expires before this, so a full cache is swept only when a sweep can free room.
    /// Earlier than the true soonest deadline at worst, which only costs a needless sweep.
    soonest: Option<Instant>,
}

impl Cache {
    fn new(max: usize) -> Self {
        Cache {
            entries: HashMap::new(),
            max,
            soonest: None,
        }
    }

    fn get(&mut self, key: &Key, now: Instant) -> Option<Answer> {
        match self.entries.get(key) {
            Some((answer, until)) if *until > now => Some(answer.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `answer` until `until`, unless that is not after `now` or the cache is full of
    /// unexpired answers.
    fn insert(&mut self, key: Key, answer: Answer, until: Instant, now: Instant) {
        if until <= now {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max {
            if self.soonest.is_some_and(|soonest| soonest <= now) {
                self.entries.retain(|_, (_, until)| *until > now);
                self.soonest = self.entries.values().map(|(_, until)| *until).min();
            }
            if self.entries.len() >= self.max {
                return;
            }
        }
        self.soonest = Some(self.soonest.map_or(until, |soonest| soonest.min(until)));
        self.entries.insert(key, (answer, until));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::json;

    const ISSUER: &str = "https://auth.example.com";
    const NOW: f64 = 1_800_000_000.0;
    const LEEWAY: Duration = Duration::from_secs(60);

    fn answer(value: serde_json::Value) -> Answer {
        serde_json::from_value(value).unwrap()
    }

    fn active() -> serde_json::Value {
        json!({
            "active": true,
            "iss": ISSUER,
            "sub": "alice",
            "aud": "https://mcp.example.com/mcp",
            "scope": "basket:read  basket:write",
            "exp": NOW + 3600.0,
            "nbf": NOW - 10.0,
            "token_type": "Bearer",
        })
    }

    fn with(edit: impl FnOnce(&mut serde_json::Value)) -> Answer {
        let mut value = active();
        edit(&mut value);
        answer(value)
    }

    fn refusal(answer: &Answer) -> String {
        match decide(answer, ISSUER, NOW, LEEWAY) {
            Err(TokenRejection::Invalid(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_active_answer_yields_its_subject_audiences_and_scopes() {
        let verified = decide(&answer(active()), ISSUER, NOW, LEEWAY).unwrap();
        assert_eq!(
            verified,
            VerifiedToken::new(
                ISSUER,
                "alice",
                ["https://mcp.example.com/mcp".to_owned()],
                ["basket:read".to_owned(), "basket:write".to_owned()],
            )
        );
        let many = with(|v| v["aud"] = json!(["https://a.example/x y", "https://b.example"]));
        assert_eq!(
            decide(&many, ISSUER, NOW, LEEWAY).unwrap().audiences,
            ["https://a.example/x y", "https://b.example"]
        );
        let bare = answer(json!({ "active": true, "sub": "bob" }));
        let verified = decide(&bare, ISSUER, NOW, LEEWAY).unwrap();
        assert_eq!(
            verified.issuer, ISSUER,
            "a missing iss means the configured issuer"
        );
        assert!(verified.audiences.is_empty() && verified.scopes.is_empty());
    }

    #[test]
    fn only_a_json_true_is_active() {
        for active in [json!(false), json!("true"), json!(1), json!(null)] {
            let reason = refusal(&with(|v| v["active"] = active.clone()));
            assert!(reason.contains("not active"), "{active}: {reason}");
        }
        let reason = refusal(&with(|v| {
            v.as_object_mut().unwrap().remove("active");
        }));
        assert!(reason.contains("not active"), "{reason}");
    }

    #[test]
    fn expiry_and_not_before_are_checked_with_the_leeway() {
        let at = |exp: f64| with(|v| v["exp"] = json!(exp));
        assert!(decide(&at(NOW - 59.0), ISSUER, NOW, LEEWAY).is_ok());
        assert!(refusal(&at(NOW - 61.0)).contains("expired"));
        let strict = decide(&at(NOW - 1.0), ISSUER, NOW, Duration::ZERO);
        assert!(matches!(strict, Err(TokenRejection::Invalid(r)) if r.contains("expired")));

        let from = |nbf: f64| with(|v| v["nbf"] = json!(nbf));
        assert!(decide(&from(NOW + 59.0), ISSUER, NOW, LEEWAY).is_ok());
        assert!(refusal(&from(NOW + 61.0)).contains("not valid yet"));
        let integer = with(|v| v["exp"] = json!(1_800_000_100u64));
        assert!(decide(&integer, ISSUER, NOW, LEEWAY).is_ok());
    }

    #[test]
    fn another_issuer_no_subject_or_another_token_type_is_refused() {
        let reason = refusal(&with(|v| v["iss"] = json!("https://evil.example.com")));
        assert!(
            reason.contains("not issued by https://auth.example.com"),
            "{reason}"
        );
        let reason = refusal(&with(|v| v["iss"] = json!("https://auth.example.com/")));
        assert!(reason.contains("not issued by"), "{reason}");
        for edit in [
            (|v: &mut serde_json::Value| {
                v.as_object_mut().unwrap().remove("sub");
            }) as fn(&mut serde_json::Value),
            |v| v["sub"] = json!(""),
            |v| v["sub"] = json!(null),
        ] {
            let reason = refusal(&with(edit));
            assert!(reason.contains("no subject"), "{reason}");
        }
        for token_type in ["refresh_token", "DPoP", "mac"] {
            let reason = refusal(&with(|v| v["token_type"] = json!(token_type)));
            assert!(
                reason.contains("not a bearer access token"),
                "{token_type}: {reason}"
            );
        }
        for token_type in ["bearer", "Bearer", "access_token"] {
            let accepted = with(|v| v["token_type"] = json!(token_type));
            assert!(
                decide(&accepted, ISSUER, NOW, LEEWAY).is_ok(),
                "{token_type}"
            );
        }
    }

    #[test]
    fn a_malformed_answer_does_not_parse_and_unknown_members_are_ignored() {
        for bad in [
            json!({ "active": true, "sub": 7 }),
            json!({ "active": true, "sub": "a", "exp": "soon" }),
            json!({ "active": true, "sub": "a", "aud": [1] }),
            json!({ "active": true, "sub": "a", "scope": ["a"] }),
            json!(["active"]),
        ] {
            assert!(
                serde_json::from_value::<Answer>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let extra = answer(json!({ "active": true, "sub": "a", "username": "x", "jti": 1 }));
        assert_eq!(extra.sub.as_deref(), Some("a"));
    }

    #[test]
    fn an_answer_is_reused_for_the_ttl_but_never_past_its_tokens_expiry() {
        let ttl = Duration::from_secs(30);
        let expiring = |exp: f64| with(|v| v["exp"] = json!(exp));
        assert_eq!(lifetime(&expiring(NOW + 3600.0), ttl, NOW), ttl);
        assert_eq!(
            lifetime(&expiring(NOW + 10.0), ttl, NOW),
            Duration::from_secs(10)
        );
        assert_eq!(lifetime(&expiring(NOW - 10.0), ttl, NOW), Duration::ZERO);
        assert_eq!(lifetime(&expiring(1e300), ttl, NOW), ttl);
        let no_exp = with(|v| {
            v.as_object_mut().unwrap().remove("exp");
        });
        assert_eq!(lifetime(&no_exp, ttl, NOW), ttl);
        let inactive = answer(json!({ "active": false, "exp": NOW - 10.0 }));
        assert_eq!(
            lifetime(&inactive, ttl, NOW),
            ttl,
            "a refusal is cached too"
        );
    }

    fn key(n: u8) -> Key {
        [n; 32]
    }

    #[test]
    fn the_cache_forgets_an_answer_at_its_deadline() {
        let now = Instant::now();
        let mut cache = Cache::new(10);
        cache.insert(key(1), answer(active()), now + Duration::from_secs(5), now);
        assert_eq!(
            cache.get(&key(1), now + Duration::from_secs(4)),
            Some(answer(active()))
        );
        assert_eq!(cache.get(&key(1), now + Duration::from_secs(5)), None);
        assert!(
            cache.entries.is_empty(),
            "an expired entry is dropped when found"
        );
        cache.insert(key(2), answer(active()), now, now);
        assert!(
            cache.entries.is_empty(),
            "an answer already out of date is not kept"
        );
    }

    #[test]
    fn a_full_cache_drops_expired_answers_first_and_otherwise_keeps_no_more() {
        let now = Instant::now();
        let later = |secs| now + Duration::from_secs(secs);
        let mut cache = Cache::new(3);
        cache.insert(key(1), answer(active()), later(10), now);
        cache.insert(key(2), answer(active()), later(20), now);
        cache.insert(key(3), answer(active()), later(30), now);
        cache.insert(key(4), answer(active()), later(40), later(1));
        assert_eq!(cache.entries.len(), 3);
        assert!(
            cache.get(&key(4), later(1)).is_none(),
            "full of live answers: not kept"
        );
        // A token already cached is refreshed in place even when the cache is full.
        cache.insert(
            key(3),
            answer(json!({ "active": false })),
            later(35),
            later(1),
        );
        assert_eq!(
            cache.get(&key(3), later(1)),
            Some(answer(json!({ "active": false })))
        );

        cache.insert(key(4), answer(active()), later(40), later(15));
        assert_eq!(cache.entries.len(), 3);
        assert!(
            cache.get(&key(1), later(15)).is_none(),
            "the expired answer made room"
        );
        assert!(cache.get(&key(4), later(15)).is_some());
        assert!(
            cache.get(&key(2), later(15)).is_some(),
            "live answers are kept"
        );

        let mut off = Cache::new(0);
        off.insert(key(1), answer(active()), later(10), now);
        assert!(off.entries.is_empty(), "max_cached(0) keeps nothing");
    }

    #[test]
    fn client_credentials_are_form_urlencoded_before_base64() {
        assert_eq!(form_urlencode("aZ09*-._"), "aZ09*-._");
        assert_eq!(form_urlencode("a b:c/+%é"), "a+b%3Ac%2F%2B%25%C3%A9");
        let header = basic_credentials("mcp server:1", "s=cr+t");
        assert!(header.is_sensitive());
        let encoded = header.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let decoded = STANDARD.decode(encoded).unwrap();
        assert_eq!(decoded, b"mcp+server%3A1:s%3Dcr%2Bt");
    }

    #[test]
    fn the_endpoint_and_credentials_are_checked_when_built() {
        let build = |issuer: &str, url: &str, id: &str| {
            IntrospectionVerifier::new(issuer, url, id, "secret").map(|_| ())
        };
        assert!(build(ISSUER, "https://auth.example.com/introspect", "mcp").is_ok());
        assert!(build(ISSUER, "http://127.0.0.1:9/introspect", "mcp").is_ok());
        for (issuer, url, id) in [
            (ISSUER, "http://auth.example.com/introspect", "mcp"),
            (ISSUER, "not a url", "mcp"),
            (
                ISSUER,
                "https://mcp:secret@auth.example.com/introspect",
                "mcp",
            ),
            (ISSUER, "https://auth.example.com/introspect", ""),
            ("", "https://auth.example.com/introspect", "mcp"),
            (
                "https://auth.example.com#x",
                "https://auth.example.com/introspect",
                "mcp",
            ),
        ] {
            assert!(
                matches!(build(issuer, url, id), Err(ConfigError::Invalid(_))),
                "{issuer} {url} {id:?}"
            );
        }
    }

    /// An introspection endpoint on loopback that holds each answer until released (one per
    /// `notify_one`), and counts its calls.
    async fn held_endpoint(
        release: Arc<tokio::sync::Notify>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    ) -> String {
        let app = axum::Router::new().route(
            "/introspect",
            axum::routing::post(move || {
                let release = Arc::clone(&release);
                let calls = Arc::clone(&calls);
                async move {
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    release.notified().await;
                    (
                        [(http::header::CONTENT_TYPE, "application/json")],
                        json!({ "active": true, "sub": "alice" }).to_string(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/introspect", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn concurrent_requests_with_one_token_share_one_introspection() {
        let release = Arc::new(tokio::sync::Notify::new());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let url = held_endpoint(Arc::clone(&release), Arc::clone(&calls)).await;
        let verifier = Arc::new(IntrospectionVerifier::new(ISSUER, &url, "mcp", "s").unwrap());
        let key: Key = Sha256::digest(b"opaque-token").into();
        let step = Duration::from_secs(30);

        let mut requests = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let verifier = Arc::clone(&verifier);
            requests.spawn(async move { verifier.verify("opaque-token").await });
        }
        // Both requests have joined the flight.
        tokio::time::timeout(step, async {
            loop {
                let joined = verifier.in_flight.members(&key);
                if joined == 2 && calls.load(std::sync::atomic::Ordering::SeqCst) == 1 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("both requests waiting on one introspection");
        release.notify_one();
        let mut results = Vec::new();
        while let Some(result) = tokio::time::timeout(step, requests.join_next())
            .await
            .expect("both verifications finish once the endpoint answers")
        {
            results.push(result.unwrap());
        }
        assert_eq!(results.len(), 2);
        for result in results {
            assert_eq!(result.unwrap().subject, "alice");
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(
            verifier.in_flight.len() == 0,
            "the finished flight is removed"
        );
        assert!(lock(&verifier.cache).entries.contains_key(&key));
        assert!(
            !lock(&verifier.cache)
                .entries
                .keys()
                .any(|k| k.as_slice() == b"opaque-token"),
            "keyed by the token's hash"
        );
    }

    #[tokio::test]
    async fn an_abandoned_introspection_leaves_nothing_in_flight() {
        let release = Arc::new(tokio::sync::Notify::new());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let url = held_endpoint(Arc::clone(&release), Arc::clone(&calls)).await;
        let verifier = IntrospectionVerifier::new(ISSUER, &url, "mcp", "s").unwrap();
        let step = Duration::from_secs(30);
        let mut request = verifier.verify("opaque-token");
        tokio::time::timeout(step, async {
            loop {
                tokio::select! {
                    _ = &mut request => panic!("the held endpoint answered"),
                    _ = tokio::task::yield_now() => {}
                }
                if calls.load(std::sync::atomic::Ordering::SeqCst) == 1 {
                    break;
                }
            }
        })
        .await
        .expect("the introspection reached the endpoint");
        assert_eq!(verifier.in_flight.len(), 1);
        drop(request);
        assert_eq!(verifier.in_flight.len(), 0);
        release.notify_one();
    }
}
