//! A test authorization server: signing keys, a JWKS endpoint on loopback that counts its
//! fetches and can be rotated or taken down, and tokens minted with any claims; a test
//! introspection endpoint; a resource server counting its calls; and a strict parser of the
//! challenges resource servers answer with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_tools::auth::OAuth;
use mcp_tools::tools::ToolSet;
use mcp_tools::{McpServer, McpServerBuilder};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::tools::Bump;
use super::{Call, Reply, TestServer, assert_conforms};

/// The canonical URI of the servers under test (what tokens name as their audience). It need
/// not be the address tests connect to: the resource is configuration, never the `Host`.
pub const RESOURCE: &str = "http://localhost:8080/mcp";

/// Where the metadata of [`RESOURCE`] lives, as challenges name it.
pub const METADATA_URL: &str = "http://localhost:8080/.well-known/oauth-protected-resource/mcp";

/// Serves `router` on an ephemeral loopback port until the sender is used or dropped.
async fn serve(router: Router) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, tx)
}

/// A signing key of the test issuer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// RSA, `RS256`, kid `rsa-a`: published from the start.
    RsaA,
    /// RSA, `RS256`, kid `rsa-b`: published only after [`Issuer::rotate`].
    RsaB,
    /// P-256, `ES256`, kid `ec-c`: published from the start.
    EcC,
}

impl Key {
    pub fn kid(self) -> &'static str {
        match self {
            Key::RsaA => "rsa-a",
            Key::RsaB => "rsa-b",
            Key::EcC => "ec-c",
        }
    }

    pub fn algorithm(self) -> Algorithm {
        match self {
            Key::RsaA | Key::RsaB => Algorithm::RS256,
            Key::EcC => Algorithm::ES256,
        }
    }

    fn pem(self) -> &'static [u8] {
        match self {
            Key::RsaA => include_bytes!("../fixtures/oauth/rsa-a.pem"),
            Key::RsaB => include_bytes!("../fixtures/oauth/rsa-b.pem"),
            Key::EcC => include_bytes!("../fixtures/oauth/ec-c.pem"),
        }
    }

    pub fn encoding_key(self) -> EncodingKey {
        match self {
            Key::RsaA | Key::RsaB => EncodingKey::from_rsa_pem(self.pem()).unwrap(),
            Key::EcC => EncodingKey::from_ec_pem(self.pem()).unwrap(),
        }
    }

    /// The public JWK, with `kid`, `alg` and `use`.
    pub fn jwk(self) -> Value {
        let jwk = Jwk::from_encoding_key(&self.encoding_key(), self.algorithm()).unwrap();
        let mut jwk = serde_json::to_value(jwk).unwrap();
        jwk["kid"] = json!(self.kid());
        jwk["use"] = json!("sig");
        jwk
    }
}

/// The PEM of [`Key::RsaA`]'s public half, for the algorithm-confusion attack (an HS256 token
/// whose HMAC secret is the public key).
pub const RSA_A_PUBLIC_PEM: &[u8] = include_bytes!("../fixtures/oauth/rsa-a.pub.pem");

struct Shared {
    published: Mutex<Vec<Key>>,
    fetches: AtomicUsize,
    /// The fetches so far, for a test to wait on.
    fetched: tokio::sync::watch::Sender<usize>,
    down: AtomicBool,
    hanging: AtomicBool,
}

/// The test authorization server, on a loopback port until dropped.
pub struct Issuer {
    /// The issuer identifier (`iss`): the server's base URL.
    pub url: String,
    shared: Arc<Shared>,
    /// Dropping it stops the endpoint.
    _shutdown: oneshot::Sender<()>,
}

impl Issuer {
    /// Starts the JWKS endpoint with [`Key::RsaA`] and [`Key::EcC`] published.
    pub async fn start() -> Issuer {
        let shared = Arc::new(Shared {
            published: Mutex::new(vec![Key::RsaA, Key::EcC]),
            fetches: AtomicUsize::new(0),
            fetched: tokio::sync::watch::channel(0).0,
            down: AtomicBool::new(false),
            hanging: AtomicBool::new(false),
        });
        let (addr, tx) = serve(
            Router::new()
                .route("/jwks.json", get(jwks))
                .with_state(shared.clone()),
        )
        .await;
        Issuer {
            url: format!("http://{addr}"),
            shared,
            _shutdown: tx,
        }
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks.json", self.url)
    }

    /// How many times the JWKS was fetched (answered or not).
    pub fn fetches(&self) -> usize {
        self.shared.fetches.load(Ordering::SeqCst)
    }

    /// Publishes [`Key::RsaB`] next to the others.
    pub fn rotate(&self) {
        self.shared.published.lock().unwrap().push(Key::RsaB);
    }

    /// Makes the JWKS endpoint answer 503 (or serve again).
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Makes the JWKS endpoint take requests and never answer them (or answer again).
    pub fn set_hanging(&self, hanging: bool) {
        self.shared.hanging.store(hanging, Ordering::SeqCst);
    }

    /// Waits until the JWKS was fetched at least `count` times, for at most 10 s.
    pub async fn fetched(&self, count: usize) {
        let mut fetched = self.shared.fetched.subscribe();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            fetched.wait_for(|fetches| *fetches >= count),
        )
        .await
        .unwrap_or_else(|_| panic!("the JWKS was not fetched {count} times within 10 s"))
        .expect("the issuer is running");
    }

    /// Claims of a valid token for `subject` granting `scopes`, valid for an hour.
    pub fn claims(&self, subject: &str, scopes: &str) -> BTreeMap<String, Value> {
        let now = now();
        BTreeMap::from([
            ("iss".to_owned(), json!(self.url)),
            ("sub".to_owned(), json!(subject)),
            ("aud".to_owned(), json!(RESOURCE)),
            ("scope".to_owned(), json!(scopes)),
            ("iat".to_owned(), json!(now)),
            ("nbf".to_owned(), json!(now)),
            ("exp".to_owned(), json!(now + 3600)),
        ])
    }

    /// A valid token for `subject` granting `scopes`, signed with [`Key::RsaA`].
    pub fn token(&self, subject: &str, scopes: &str) -> String {
        sign(Key::RsaA, &self.claims(subject, scopes))
    }
}

/// `claims` signed with `key` as an access token (`typ: at+jwt`, RFC 9068), its header naming
/// the key's `kid`.
pub fn sign(key: Key, claims: &BTreeMap<String, Value>) -> String {
    let mut header = Header::new(key.algorithm());
    header.typ = Some("at+jwt".to_owned());
    header.kid = Some(key.kid().to_owned());
    jsonwebtoken::encode(&header, claims, &key.encoding_key()).unwrap()
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn jwks(State(shared): State<Arc<Shared>>) -> Response {
    let fetches = shared.fetches.fetch_add(1, Ordering::SeqCst) + 1;
    shared.fetched.send_replace(fetches);
    if shared.hanging.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if shared.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let keys: Vec<Value> = shared
        .published
        .lock()
        .unwrap()
        .iter()
        .map(|key| key.jwk())
        .collect();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({ "keys": keys }).to_string(),
    )
        .into_response()
}

/// What [`Introspection`] shares with its handler.
struct IntrospectionShared {
    /// The client id and secret a client must present, as `Basic` credentials.
    expected_credentials: (String, String),
    answers: Mutex<BTreeMap<String, Value>>,
    calls: AtomicUsize,
    down: AtomicBool,
    hanging: AtomicBool,
}

/// A test RFC 7662 introspection endpoint on a loopback port until dropped: it checks the
/// client's Basic credentials (form-urlencoded before base64) and the form it posts, counts its
/// calls, and answers `{"active": false}` for any token it was not told about.
pub struct Introspection {
    /// The endpoint's URL.
    pub url: String,
    shared: Arc<IntrospectionShared>,
    /// Dropping it stops the endpoint.
    _shutdown: oneshot::Sender<()>,
}

impl Introspection {
    /// Starts the endpoint, accepting the client `client_id` with `client_secret`.
    pub async fn start(client_id: &str, client_secret: &str) -> Introspection {
        let shared = Arc::new(IntrospectionShared {
            expected_credentials: (client_id.to_owned(), client_secret.to_owned()),
            answers: Mutex::new(BTreeMap::new()),
            calls: AtomicUsize::new(0),
            down: AtomicBool::new(false),
            hanging: AtomicBool::new(false),
        });
        let (addr, tx) = serve(
            Router::new()
                .route("/introspect", axum::routing::post(introspect))
                .with_state(shared.clone()),
        )
        .await;
        Introspection {
            url: format!("http://{addr}/introspect"),
            shared,
            _shutdown: tx,
        }
    }

    /// Answers `answer` when `token` is introspected.
    pub fn answer(&self, token: &str, answer: Value) {
        self.shared
            .answers
            .lock()
            .unwrap()
            .insert(token.to_owned(), answer);
    }

    /// An active answer for `token`: issued by `issuer` to `subject`, for [`RESOURCE`],
    /// granting `scopes`, expiring in an hour.
    pub fn activate(&self, token: &str, issuer: &str, subject: &str, scopes: &str) {
        let now = now();
        self.answer(
            token,
            json!({
                "active": true,
                "iss": issuer,
                "sub": subject,
                "aud": RESOURCE,
                "scope": scopes,
                "exp": now + 3600,
                "nbf": now,
                "token_type": "Bearer",
            }),
        );
    }

    /// How many requests reached the endpoint (answered or not).
    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// Makes the endpoint answer 500 (or answer again).
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Makes the endpoint never answer (or answer again).
    pub fn set_hanging(&self, hanging: bool) {
        self.shared.hanging.store(hanging, Ordering::SeqCst);
    }
}

/// The name-value pairs of an `application/x-www-form-urlencoded` string.
fn form_pairs(form: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://form.invalid/?{form}"))
        .unwrap()
        .query_pairs()
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect()
}

/// The client id and secret of a `Basic` authorization, each form-urldecoded.
fn basic_credentials(headers: &axum::http::HeaderMap) -> Option<(String, String)> {
    use base64::Engine;
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let pairs = form_pairs(&format!("id={id}&secret={secret}"));
    match &pairs[..] {
        [(_, id), (_, secret)] => Some((id.clone(), secret.clone())),
        _ => None,
    }
}

async fn introspect(
    State(shared): State<Arc<IntrospectionShared>>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    shared.calls.fetch_add(1, Ordering::SeqCst);
    if shared.hanging.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if shared.down.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if basic_credentials(&headers).as_ref() != Some(&shared.expected_credentials) {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Basic")],
            json!({ "error": "invalid_client" }).to_string(),
        )
            .into_response();
    }
    let is_form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/x-www-form-urlencoded");
    let pairs = form_pairs(&body);
    let field = |name: &str| {
        let mut values = pairs.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
        match (values.next(), values.next()) {
            (Some(value), None) => Some(value.clone()),
            _ => None,
        }
    };
    let (Some(token), Some(hint)) = (field("token"), field("token_type_hint")) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if !is_form || hint != "access_token" || pairs.len() != 2 {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let answer = shared
        .answers
        .lock()
        .unwrap()
        .get(&token)
        .cloned()
        .unwrap_or_else(|| json!({ "active": false }));
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// A resource server serving [`Bump`], and the count of its calls: a refused request must leave
/// it at zero. Each test file adds the constructors for its kind of verifier.
pub struct Guarded {
    pub http: TestServer,
    bumps: Arc<AtomicUsize>,
}

impl Guarded {
    /// Serves `bump` as `name` behind `oauth`, with `configure` applied to the builder last.
    pub async fn serve(
        name: &str,
        oauth: OAuth,
        configure: impl FnOnce(McpServerBuilder) -> McpServerBuilder,
    ) -> Guarded {
        let bumps = Arc::new(AtomicUsize::new(0));
        let server = configure(
            McpServer::builder(name, "1.0.0")
                .tools(ToolSet::new().with(Bump(Arc::clone(&bumps))))
                .oauth(oauth),
        )
        .build()
        .unwrap();
        Guarded {
            http: TestServer::start(server).await,
            bumps,
        }
    }

    pub fn bumps(&self) -> usize {
        self.bumps.load(Ordering::SeqCst)
    }

    /// `tools/call bump` with `token` as the bearer token.
    pub async fn bump_with(&self, token: &str) -> Reply {
        Call::call_tool("bump", json!({}))
            .header("authorization", &format!("Bearer {token}"))
            .send(&self.http)
            .await
    }
}

/// The one challenge of a 401, after checking what every refusal of a token shares: the status,
/// the scheme, the configured metadata URL, the scope parameter, and a schema-valid JSON-RPC
/// `-32600` error body.
pub fn challenge_of(reply: &Reply, scope: Option<&str>) -> Challenge {
    assert_eq!(reply.status, 401, "{}", reply.text);
    let challenge = Challenge::bearer(&reply.headers);
    assert_eq!(
        challenge.quoted("resource_metadata"),
        Some(METADATA_URL),
        "{challenge:?}"
    );
    assert_eq!(challenge.get("scope"), scope, "{challenge:?}");
    assert!(
        reply.headers.get("retry-after").is_none(),
        "{:?}",
        reply.headers
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    challenge
}

/// A 401 asking for a token: no `error`, since none was sent.
pub fn assert_asks_for_token(reply: &Reply, scope: Option<&str>) {
    let challenge = challenge_of(reply, scope);
    let mut expected = vec!["resource_metadata"];
    expected.extend(scope.map(|_| "scope"));
    expected.sort_unstable();
    assert_eq!(challenge.names(), expected, "{challenge:?}");
}

/// A 401 refusing the token sent: `error="invalid_token"` with a description mentioning
/// `because`.
pub fn assert_invalid_token(reply: &Reply, scope: Option<&str>, because: &str) {
    let challenge = challenge_of(reply, scope);
    let mut expected = vec!["error", "error_description", "resource_metadata"];
    expected.extend(scope.map(|_| "scope"));
    expected.sort_unstable();
    assert_eq!(challenge.names(), expected, "{challenge:?}");
    assert_eq!(
        challenge.quoted("error"),
        Some("invalid_token"),
        "{challenge:?}"
    );
    let description = challenge.get("error_description").unwrap();
    assert!(
        description.contains(because),
        "the description {description:?} should say {because:?}"
    );
}

/// A served call of [`Guarded`]'s `bump`.
pub fn assert_served(reply: &Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.headers.get("www-authenticate").is_none());
    assert_conforms("CallToolResultResponse", &reply.json());
}

/// Asserts `reply` is a 503 asking to retry: a `Retry-After` in seconds and no challenge, since
/// the token may be fine and must not send the client back to authorize; returns its error,
/// checked against the schema.
pub fn assert_retry_later(reply: &Reply) -> Value {
    assert_eq!(reply.status, 503, "{}", reply.text);
    let retry_after = reply.headers.get("retry-after").expect("a Retry-After");
    assert!(
        retry_after
            .to_str()
            .unwrap()
            .parse::<u64>()
            .is_ok_and(|s| s > 0),
        "{retry_after:?}"
    );
    assert!(
        reply.headers.get("www-authenticate").is_none(),
        "the token may be fine: no challenge sends the client back to authorize: {:?}",
        reply.headers
    );
    let body = reply.json();
    assert_conforms("JSONRPCErrorResponse", &body);
    body
}

/// A `WWW-Authenticate` challenge taken apart (RFC 9110 section 11.6.1): its scheme and its
/// auth-params in order, their values unquoted.
#[derive(Debug)]
pub struct Challenge {
    /// The header as received, for the messages of failed assertions.
    pub text: String,
    pub scheme: String,
    params: Vec<AuthParam>,
}

#[derive(Debug)]
struct AuthParam {
    name: String,
    value: String,
    /// Sent as a quoted-string rather than a token.
    quoted: bool,
}

/// RFC 9110 `tchar`: what a token is made of.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

impl Challenge {
    /// Parses `scheme param=token, param="quoted \" value", ...`; anything else is an `Err`
    /// saying what is wrong: a param without `=`, a name outside `[A-Za-z0-9_]` (every Bearer
    /// param is spelled so), space around `=`, a value neither a token nor a terminated
    /// quoted-string, params not comma separated, or a param named twice (names compare
    /// case-insensitively, and each may occur once per challenge).
    pub fn try_parse(header: &str) -> Result<Challenge, String> {
        let (scheme, mut rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.is_empty() || !scheme.chars().all(is_tchar) {
            return Err(format!("auth-scheme {scheme:?} in {header:?}"));
        }
        let mut params: Vec<AuthParam> = Vec::new();
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if rest.is_empty() {
                break;
            }
            let (name, after) = rest
                .split_once('=')
                .ok_or_else(|| format!("an auth-param without `=` in {header:?}"))?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("auth-param name {name:?} in {header:?}"));
            }
            let (value, quoted, after) = if let Some(quoted) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, escaped)) => value.push(escaped),
                            None => return Err(format!("a dangling escape in {header:?}")),
                        },
                        Some((at, '"')) => break at,
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("an unterminated quoted-string in {header:?}")),
                    }
                };
                (value, true, &quoted[end + 1..])
            } else {
                let end = after.find([',', ' ']).unwrap_or(after.len());
                let token = &after[..end];
                if token.is_empty() || !token.chars().all(is_tchar) {
                    return Err(format!("the value of {name} is not a token in {header:?}"));
                }
                (token.to_owned(), false, &after[end..])
            };
            let after = after.trim_start_matches(' ');
            if !(after.is_empty() || after.starts_with(',')) {
                return Err(format!("auth-params not comma separated in {header:?}"));
            }
            if params.iter().any(|p| p.name.eq_ignore_ascii_case(name)) {
                return Err(format!("a repeated auth-param {name:?} in {header:?}"));
            }
            params.push(AuthParam {
                name: name.to_owned(),
                value,
                quoted,
            });
            rest = after;
        }
        Ok(Challenge {
            text: header.to_owned(),
            scheme: scheme.to_owned(),
            params,
        })
    }

    /// [`Challenge::try_parse`], failing the test on a malformed header.
    pub fn parse(header: &str) -> Challenge {
        Challenge::try_parse(header).unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// The one `Bearer` challenge of a response; none, several, a non-ASCII or a malformed one,
    /// or another scheme is an `Err`.
    pub fn try_bearer(headers: &reqwest::header::HeaderMap) -> Result<Challenge, String> {
        let values: Vec<_> = headers.get_all("www-authenticate").iter().collect();
        if values.len() != 1 {
            return Err(format!("one challenge expected: {values:?}"));
        }
        let text = values[0]
            .to_str()
            .map_err(|_| format!("a non-ASCII challenge: {:?}", values[0]))?;
        let challenge = Challenge::try_parse(text)?;
        if challenge.scheme != "Bearer" {
            return Err(format!("not a Bearer challenge: {text:?}"));
        }
        Ok(challenge)
    }

    /// [`Challenge::try_bearer`], failing the test unless there is exactly one well-formed
    /// `Bearer` challenge.
    pub fn bearer(headers: &reqwest::header::HeaderMap) -> Challenge {
        Challenge::try_bearer(headers).unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// The value of the param `name`, sent as a token or a quoted-string.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value.as_str())
    }

    /// The value of the param `name` if it was sent as a quoted-string.
    pub fn quoted(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|p| p.name == name && p.quoted)
            .map(|p| p.value.as_str())
    }

    /// The names of the params, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        names
    }
}
