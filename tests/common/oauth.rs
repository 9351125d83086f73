//! A test authorization server: signing keys, a JWKS endpoint on loopback that counts its
//! fetches and can be rotated or taken down, and tokens minted with any claims.

use std::collections::BTreeMap;
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
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The canonical URI of the servers under test (what tokens name as their audience). It need
/// not be the address tests connect to: the resource is configuration, never the `Host`.
pub const RESOURCE: &str = "http://localhost:8080/mcp";

/// Where the metadata of [`RESOURCE`] lives, as challenges name it.
pub const METADATA_URL: &str = "http://localhost:8080/.well-known/oauth-protected-resource/mcp";

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
    down: AtomicBool,
}

/// The test authorization server, on a loopback port until dropped.
pub struct Issuer {
    /// The issuer identifier (`iss`): the server's base URL.
    pub url: String,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Issuer {
    /// Starts the JWKS endpoint with [`Key::RsaA`] and [`Key::EcC`] published.
    pub async fn start() -> Issuer {
        let shared = Arc::new(Shared {
            published: Mutex::new(vec![Key::RsaA, Key::EcC]),
            fetches: AtomicUsize::new(0),
            down: AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/jwks.json", get(jwks))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Issuer {
            url: format!("http://{addr}"),
            shared,
            shutdown: Some(tx),
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

impl Drop for Issuer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// `claims` signed with `key`, its header naming the key's `kid`.
pub fn sign(key: Key, claims: &BTreeMap<String, Value>) -> String {
    let mut header = Header::new(key.algorithm());
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
    shared.fetches.fetch_add(1, Ordering::SeqCst);
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
    shutdown: Option<oneshot::Sender<()>>,
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
        let app = Router::new()
            .route("/introspect", axum::routing::post(introspect))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Introspection {
            url: format!("http://{addr}/introspect"),
            shared,
            shutdown: Some(tx),
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

impl Drop for Introspection {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
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
