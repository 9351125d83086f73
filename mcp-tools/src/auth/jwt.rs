//! JWT access tokens (RFC 9068) checked against the authorization server's keys: a JWKS fetched
//! from its URL and cached, or keys given up front.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;

use super::claims::{OneOrMany, scope_list};
use super::error::ConfigError;
use super::fetch::{DEFAULT_FETCH_TIMEOUT, Fetcher};
use super::verifier::{TokenRejection, TokenVerifier, VerifiedToken, VerifyFuture};

pub use jsonwebtoken::Algorithm;

/// Clock skew tolerated on `exp` and `nbf` by default: 60 s.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);

/// How long after a refetch caused by an unknown key id another one may happen, by default:
/// 30 s. Tokens naming unknown keys are refused meanwhile, so a flood of them costs the
/// authorization server one fetch per period.
pub const DEFAULT_JWKS_COOLDOWN: Duration = Duration::from_secs(30);

/// How long fetched keys are used before they are fetched again, by default: 10 minutes.
/// Older keys are refreshed in the background while requests go on using them, so no request
/// waits for the refresh of a key it has; keys that cannot be refreshed stay in use until a
/// fetch succeeds, and a failed refresh is retried after [`DEFAULT_JWKS_COOLDOWN`], then after
/// twice as long each time, up to the max age.
pub const DEFAULT_JWKS_MAX_AGE: Duration = Duration::from_secs(600);

/// The largest JWKS document accepted: 256 KiB.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The algorithms accepted by default: the asymmetric ones. A symmetric algorithm would need the
/// authorization server's secret here, and accepting both kinds invites key confusion.
const DEFAULT_ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The `typ` headers of access tokens accepted by default (RFC 9068): an ID token or a logout
/// token of the same issuer, whose audience may happen to match, is refused for its type.
pub const ACCESS_TOKEN_TYPES: &[&str] = &["at+jwt", "application/at+jwt"];

/// Verifies JWT access tokens: signature by an accepted algorithm with a key of the issuer, the
/// `typ` header of an access token (RFC 9068; see [`token_types`](Self::token_types)), `iss`,
/// `exp` and `nbf` (with leeway), and a `sub`. The audience is checked by the resource server
/// against its canonical URI. Scopes come from `scope` (space separated) or `scp`.
pub struct JwtVerifier {
    issuer: String,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    /// The accepted `typ` headers, lowercase; `None` accepts any, or none.
    types: Option<Vec<String>>,
    keys: Keys,
}

enum Keys {
    Fixed(KeySet),
    Remote(Arc<RemoteKeys>),
}

impl JwtVerifier {
    /// Tokens of `issuer`, signed with keys from the JWKS at `jwks_url` (HTTPS; plain HTTP to
    /// loopback only). The keys are fetched on first use, refreshed after
    /// [`DEFAULT_JWKS_MAX_AGE`], and fetched again when a token names an unknown key (at most
    /// once per [`DEFAULT_JWKS_COOLDOWN`]).
    pub fn with_jwks(issuer: impl Into<String>, jwks_url: &str) -> Result<Self, ConfigError> {
        Ok(JwtVerifier {
            issuer: issuer.into(),
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: DEFAULT_LEEWAY,
            types: Some(default_types()),
            keys: Keys::Remote(Arc::new(RemoteKeys {
                fetcher: Fetcher::new(jwks_url, "JWKS", MAX_JWKS_BYTES, DEFAULT_FETCH_TIMEOUT)?,
                cooldown: DEFAULT_JWKS_COOLDOWN,
                max_age: DEFAULT_JWKS_MAX_AGE,
                cache: RwLock::new(Cache::default()),
                refresh: tokio::sync::Mutex::new(()),
                refreshing: AtomicBool::new(false),
            })),
        })
    }

    /// Tokens of `issuer`, signed with a key of `jwks`, a JWKS document (`{"keys": [...]}`)
    /// given up front.
    pub fn with_key_set(issuer: impl Into<String>, jwks: &str) -> Result<Self, ConfigError> {
        let keys = KeySet::parse(jwks.as_bytes())
            .map_err(|e| ConfigError::Invalid(format!("the key set is not a JWKS: {e}")))?;
        if keys.is_empty() {
            return Err(ConfigError::Invalid(
                "the key set holds no usable signing key".into(),
            ));
        }
        Ok(JwtVerifier {
            issuer: issuer.into(),
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: DEFAULT_LEEWAY,
            types: Some(default_types()),
            keys: Keys::Fixed(keys),
        })
    }

    /// The accepted signing algorithms, replacing the default asymmetric ones. Symmetric (`HS*`)
    /// algorithms are refused: this server holds no shared secret of the authorization server.
    pub fn algorithms(
        mut self,
        algorithms: impl IntoIterator<Item = Algorithm>,
    ) -> Result<Self, ConfigError> {
        let algorithms: Vec<Algorithm> = algorithms.into_iter().collect();
        if algorithms.is_empty() {
            return Err(ConfigError::Invalid(
                "accept at least one signing algorithm".into(),
            ));
        }
        if let Some(symmetric) = algorithms
            .iter()
            .find(|alg| matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        {
            return Err(ConfigError::Invalid(format!(
                "{symmetric:?} is symmetric: accept only asymmetric algorithms, whose public keys the JWKS holds"
            )));
        }
        self.algorithms = algorithms;
        Ok(self)
    }

    /// The `typ` headers accepted (compared without case), replacing [`ACCESS_TOKEN_TYPES`]:
    /// for an authorization server that types its access tokens otherwise. `typ` is then
    /// required, and must be one of them.
    pub fn token_types<I, S>(mut self, types: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let types: Vec<String> = types
            .into_iter()
            .map(|t| t.into().to_ascii_lowercase())
            .collect();
        if types.is_empty() {
            return Err(ConfigError::Invalid(
                "accept at least one token type, or call any_token_type".into(),
            ));
        }
        self.types = Some(types);
        Ok(self)
    }

    /// Accepts a token whatever its `typ` header says, or without one: for an authorization
    /// server that does not type its access tokens (RFC 9068 asks it to). Then only the
    /// audience keeps another token of the same issuer out.
    pub fn any_token_type(mut self) -> Self {
        self.types = None;
        self
    }

    /// Clock skew tolerated on `exp` and `nbf` (default [`DEFAULT_LEEWAY`]).
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The least time between two fetches caused by unknown key ids (default
    /// [`DEFAULT_JWKS_COOLDOWN`]). No effect with fixed keys.
    pub fn jwks_cooldown(mut self, cooldown: Duration) -> Self {
        if let Some(remote) = self.remote_mut() {
            remote.cooldown = cooldown;
        }
        self
    }

    /// How long fetched keys are used before being fetched again (default
    /// [`DEFAULT_JWKS_MAX_AGE`]). No effect with fixed keys.
    pub fn jwks_max_age(mut self, max_age: Duration) -> Self {
        if let Some(remote) = self.remote_mut() {
            remote.max_age = max_age;
        }
        self
    }

    /// How long one JWKS fetch may take (default 5 s). No effect with fixed keys.
    pub fn fetch_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        if let Some(remote) = self.remote_mut() {
            remote.fetcher =
                Fetcher::new(remote.fetcher.url.as_str(), "JWKS", MAX_JWKS_BYTES, timeout)?;
        }
        Ok(self)
    }

    /// The remote keys to configure: the verifier is configured before anything shares them.
    fn remote_mut(&mut self) -> Option<&mut RemoteKeys> {
        match &mut self.keys {
            Keys::Remote(remote) => Arc::get_mut(remote),
            Keys::Fixed(_) => None,
        }
    }

    async fn check(&self, token: &str) -> Result<VerifiedToken, TokenRejection> {
        let invalid = |reason: &str| TokenRejection::Invalid(reason.to_owned());
        // `alg: none` and unknown algorithms fail here: the header does not parse.
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| invalid("The bearer token is not a well-formed signed JWT"))?;
        // RFC 7515 §4.1.11: a token whose `crit` header names an extension the recipient does
        // not understand is invalid, and this verifier understands none (the JWT library parses
        // the member but enforces nothing). An issuer marks an extension critical precisely so
        // that a verifier that would ignore it refuses the token instead.
        if header.crit.is_some() {
            return Err(invalid(
                "The bearer token's header marks extensions critical (`crit`), and this server understands none",
            ));
        }
        if let Some(types) = &self.types {
            let typ = header.typ.as_deref().map(str::to_ascii_lowercase);
            if !typ.as_ref().is_some_and(|typ| types.contains(typ)) {
                return Err(TokenRejection::Invalid(format!(
                    "The bearer token is not an access token: its `typ` header is {}, not {}",
                    header
                        .typ
                        .as_deref()
                        .map_or("missing".to_owned(), |typ| format!("{typ:?}")),
                    types.first().map_or("", String::as_str)
                )));
            }
        }
        if !self.algorithms.contains(&header.alg) {
            return Err(TokenRejection::Invalid(format!(
                "The bearer token is signed with {:?}, which this server does not accept",
                header.alg
            )));
        }
        let key = match &self.keys {
            Keys::Fixed(keys) => keys.find(header.kid.as_deref(), header.alg).cloned(),
            Keys::Remote(remote) => remote.find(header.kid.as_deref(), header.alg).await?,
        };
        let Some(key) = key else {
            return Err(invalid(
                "The bearer token is signed with a key this server does not know",
            ));
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        // The resource server compares the audience with its own URI, for every verifier.
        validation.validate_aud = false;
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| TokenRejection::Invalid(describe(e.kind(), &self.issuer)))?
            .claims;
        // `scp` is a list (or, from some servers, one space-separated string like `scope`).
        let scp = claims.scp.map(OneOrMany::into_vec).unwrap_or_default();
        let scopes = scope_list(
            claims
                .scope
                .as_deref()
                .into_iter()
                .chain(scp.iter().map(String::as_str)),
        );
        let (Some(issuer), Some(subject)) = (claims.iss, claims.sub) else {
            return Err(invalid("The bearer token has no `iss` or no `sub` claim"));
        };
        Ok(VerifiedToken::new(
            issuer,
            subject,
            claims.aud.map(OneOrMany::into_vec).unwrap_or_default(),
            scopes,
        ))
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        Box::pin(self.check(token))
    }
}

fn default_types() -> Vec<String> {
    ACCESS_TOKEN_TYPES.iter().map(|t| (*t).to_owned()).collect()
}

/// What a validation failure tells the caller.
fn describe(kind: &ErrorKind, issuer: &str) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "The bearer token has expired".into(),
        ErrorKind::ImmatureSignature => "The bearer token is not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => format!("The bearer token was not issued by {issuer}"),
        ErrorKind::InvalidSignature => "The bearer token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => {
            format!("The bearer token has no `{claim}` claim")
        }
        ErrorKind::InvalidClaimFormat(claim) => {
            format!("The bearer token's `{claim}` claim is malformed")
        }
        ErrorKind::InvalidAlgorithm => "The bearer token's algorithm does not match its key".into(),
        _ => "The bearer token is invalid".into(),
    }
}

#[derive(Deserialize)]
struct Claims {
    // Optional here so that a missing one gets its own message rather than a parse failure.
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    aud: Option<OneOrMany>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<OneOrMany>,
}

/// Signing keys by key id, each with the one algorithm it may verify when the JWKS says.
#[derive(Default)]
struct KeySet {
    keys: Vec<(Option<String>, Option<Algorithm>, DecodingKey)>,
}

impl KeySet {
    /// The usable signing keys of a JWKS document; keys of unknown types, for encryption, or
    /// malformed, are skipped rather than failing the whole set.
    fn parse(document: &[u8]) -> Result<KeySet, String> {
        #[derive(Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let document: Document = serde_json::from_slice(document).map_err(|e| e.to_string())?;
        Ok(KeySet::from_values(document.keys))
    }

    fn from_values(values: Vec<serde_json::Value>) -> KeySet {
        let mut keys = Vec::new();
        for value in values {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
                continue;
            };
            if matches!(
                jwk.common.public_key_use,
                Some(ref key_use) if *key_use != jsonwebtoken::jwk::PublicKeyUse::Signature
            ) {
                continue;
            }
            let algorithm = match jwk.common.key_algorithm {
                // Encryption algorithms (`RSA-OAEP`, ...) name no signing algorithm.
                Some(alg) => match alg.to_string().parse::<Algorithm>() {
                    Ok(alg) => Some(alg),
                    Err(_) => continue,
                },
                None => None,
            };
            if let Ok(key) = DecodingKey::from_jwk(&jwk) {
                keys.push((jwk.common.key_id.clone(), algorithm, key));
            }
        }
        KeySet { keys }
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key named `kid` that may verify `alg`; without a `kid`, the only such key.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<&DecodingKey> {
        let usable = |(_, key_alg, _): &&(Option<String>, Option<Algorithm>, DecodingKey)| {
            key_alg.is_none_or(|key_alg| key_alg == alg)
        };
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(usable)
                .find(|(id, _, _)| id.as_deref() == Some(kid))
                .map(|(_, _, key)| key),
            None => {
                let mut candidates = self.keys.iter().filter(usable);
                match (candidates.next(), candidates.next()) {
                    (Some((_, _, key)), None) => Some(key),
                    _ => None,
                }
            }
        }
    }
}

/// Keys fetched from a JWKS URL and cached.
struct RemoteKeys {
    fetcher: Fetcher,
    cooldown: Duration,
    max_age: Duration,
    cache: RwLock<Cache>,
    /// One fetch at a time: concurrent misses wait for it and then look again.
    refresh: tokio::sync::Mutex<()>,
    /// Whether a background refresh of old keys is under way.
    refreshing: AtomicBool,
}

#[derive(Default)]
struct Cache {
    keys: KeySet,
    fetched_at: Option<Instant>,
    /// When a token's unknown key id last caused a fetch.
    miss_fetched_at: Option<Instant>,
    /// Fetches finished so far, answered or not. A request that saw the cache before a fetch
    /// finished must not fetch again once it gets its turn, even when that fetch started before
    /// it came: it takes that fetch's result instead, so an authorization server that is down
    /// gets one attempt per wave of requests, not one per request.
    generation: u64,
    /// Why the last fetch failed, if it did.
    last_failure: Option<String>,
    /// Background refreshes of old keys that failed in a row, and when the next may start.
    stale_failures: u32,
    stale_retry_at: Option<Instant>,
}

/// Why the keys were fetched.
#[derive(Clone, Copy, PartialEq)]
enum Reason {
    /// None fetched yet, or the fetched ones are old.
    Stale,
    /// A token named a key id the cache does not hold.
    Miss,
}

impl RemoteKeys {
    async fn find(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Option<DecodingKey>, TokenRejection> {
        let seen = self.read().generation;
        let (found, fresh, cooling) = self.look(kid, alg);
        if found.is_some() {
            // Old keys are still good keys: the request uses them now, and the refresh runs
            // beside it, so an authorization server that is slow or down delays no request.
            if !fresh {
                self.refresh_in_background(seen);
            }
            return Ok(found);
        }
        let reason = if self.has_fetched() {
            Reason::Miss
        } else {
            Reason::Stale
        };
        if reason == Reason::Miss && cooling {
            return Ok(None);
        }
        self.fetch(reason, seen)
            .await
            .map_err(TokenRejection::Unavailable)?;
        Ok(self.look(kid, alg).0)
    }

    /// Starts refreshing old keys on the runtime, unless a refresh is under way or the last one
    /// failed less than its back-off ago.
    fn refresh_in_background(self: &Arc<Self>, seen: u64) {
        if self
            .read()
            .stale_retry_at
            .is_some_and(|at| Instant::now() < at)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let remote = Arc::clone(self);
        runtime.spawn(async move {
            let refreshed = remote.fetch(Reason::Stale, seen).await;
            {
                let mut cache = remote.write();
                match refreshed {
                    Ok(()) => {
                        cache.stale_failures = 0;
                        cache.stale_retry_at = None;
                    }
                    Err(_) => {
                        cache.stale_failures = cache.stale_failures.saturating_add(1);
                        let backoff = remote.backoff(cache.stale_failures);
                        cache.stale_retry_at = Instant::now().checked_add(backoff);
                    }
                }
            }
            remote.refreshing.store(false, Ordering::Release);
        });
    }

    /// How long to wait after `failures` failed refreshes in a row: the cooldown, doubled for
    /// each further failure, at most the max age.
    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.cooldown
            .saturating_mul(1 << doublings)
            .min(self.max_age.max(self.cooldown))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    fn has_fetched(&self) -> bool {
        self.read().fetched_at.is_some()
    }

    /// The cached key, whether the cache is fresh, and whether a miss may not fetch yet.
    fn look(&self, kid: Option<&str>, alg: Algorithm) -> (Option<DecodingKey>, bool, bool) {
        let cache = self.read();
        let fresh = cache
            .fetched_at
            .is_some_and(|at| at.elapsed() < self.max_age);
        let cooling = cache
            .miss_fetched_at
            .is_some_and(|at| at.elapsed() < self.cooldown);
        (cache.keys.find(kid, alg).cloned(), fresh, cooling)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Fetches the key set, unless a fetch completed since the cache showed generation `seen`.
    async fn fetch(&self, reason: Reason, seen: u64) -> Result<(), String> {
        let _one_at_a_time = self.refresh.lock().await;
        {
            let cache = self.read();
            if cache.generation != seen {
                return cache.last_failure.clone().map_or(Ok(()), Err);
            }
            let cooling = cache
                .miss_fetched_at
                .is_some_and(|at| at.elapsed() < self.cooldown);
            if reason == Reason::Miss && cooling {
                return Ok(());
            }
        }
        let started = Instant::now();
        if reason == Reason::Miss {
            self.cache
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .miss_fetched_at = Some(started);
        }
        let fetched = self.fetch_keys().await;
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        cache.generation += 1;
        match fetched {
            Ok(keys) => {
                cache.keys = keys;
                cache.fetched_at = Some(started);
                cache.last_failure = None;
                Ok(())
            }
            Err(failure) => {
                cache.last_failure = Some(failure.clone());
                Err(failure)
            }
        }
    }

    async fn fetch_keys(&self) -> Result<KeySet, String> {
        let document: serde_json::Value = self
            .fetcher
            .json(self.fetcher.client().get(self.fetcher.url.clone()))
            .await?;
        match document.get("keys") {
            Some(serde_json::Value::Array(keys)) => Ok(KeySet::from_values(keys.clone())),
            _ => Err(format!("{} is not a JWKS document", self.fetcher.url)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ec_key(kid: Option<&str>, alg: Option<&str>, key_use: Option<&str>) -> serde_json::Value {
        let mut key = json!({
            "kty": "EC",
            "crv": "P-256",
            "x": "mOS5fIxPX_GrKtXrReD3J1ds517P3bpZAEUSZVZmG8o",
            "y": "_hQ7sFpSOpVcIBCZUVkwUubXpb4tkK4P4VgWDJoKBVI"
        });
        if let Some(kid) = kid {
            key["kid"] = json!(kid);
        }
        if let Some(alg) = alg {
            key["alg"] = json!(alg);
        }
        if let Some(key_use) = key_use {
            key["use"] = json!(key_use);
        }
        key
    }

    #[test]
    fn a_key_set_keeps_only_usable_signing_keys() {
        let keys = KeySet::from_values(vec![
            ec_key(Some("sig"), Some("ES256"), Some("sig")),
            ec_key(Some("enc"), None, Some("enc")),
            ec_key(Some("oaep"), Some("RSA-OAEP"), None),
            json!({ "kty": "OKP-unknown", "kid": "odd" }),
            json!({ "kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB" }),
            json!("not even an object"),
        ]);
        let kids: Vec<_> = keys.keys.iter().map(|(kid, _, _)| kid.as_deref()).collect();
        assert_eq!(kids, [Some("sig")]);
    }

    #[test]
    fn a_key_is_found_by_kid_only_for_its_own_algorithm() {
        let keys = KeySet::from_values(vec![
            ec_key(Some("a"), Some("ES256"), None),
            ec_key(Some("b"), None, None),
        ]);
        assert!(keys.find(Some("a"), Algorithm::ES256).is_some());
        assert!(keys.find(Some("a"), Algorithm::ES384).is_none());
        assert!(keys.find(Some("b"), Algorithm::ES384).is_some());
        assert!(keys.find(Some("c"), Algorithm::ES256).is_none());
        // Without a kid, a key is used only when it is the one candidate.
        assert!(keys.find(None, Algorithm::ES256).is_none());
        assert!(keys.find(None, Algorithm::ES384).is_some());
    }

    #[test]
    fn symmetric_algorithms_cannot_be_accepted() {
        let jwks = json!({ "keys": [ec_key(Some("a"), Some("ES256"), None)] }).to_string();
        let verifier = JwtVerifier::with_key_set("https://auth.example.com", &jwks).unwrap();
        let error = verifier
            .algorithms([Algorithm::ES256, Algorithm::HS256])
            .err()
            .expect("HS256 is refused");
        assert!(error.to_string().contains("HS256"), "{error}");
        let empty = JwtVerifier::with_key_set("https://auth.example.com", &jwks)
            .unwrap()
            .algorithms([]);
        assert!(empty.is_err());
        assert!(JwtVerifier::with_key_set("https://auth.example.com", r#"{"keys":[]}"#).is_err());
        assert!(JwtVerifier::with_key_set("https://auth.example.com", "[]").is_err());
    }

    /// The test issuer's P-256 key (`tests/fixtures/oauth/ec-c.pem`), whose public half is the
    /// point of [`ec_key`].
    const EC_C_PEM: &[u8] = b"-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgkU6lnA7dscNX7sFK
Rh5qEtNn6ikOUvTzQu4O0NBf3R2hRANCAASY5Ll8jE9f8asq1etF4PcnV2znXs/d
ulkARRJlVmYbyv4UO7BaUjqVXCAQmVFZMFLm16W+LZCuD+FYFgyaCgVS
-----END PRIVATE KEY-----
";

    /// Found by the `jwt` fuzz target: a token whose header lists critical extensions (`crit`)
    /// was accepted, though RFC 7515 makes it invalid for a verifier that understands none of
    /// them.
    #[tokio::test]
    async fn a_token_with_critical_extensions_is_refused() {
        let issuer = "https://auth.example.com";
        let jwks = json!({ "keys": [ec_key(Some("ec-c"), Some("ES256"), Some("sig"))] });
        let verifier = JwtVerifier::with_key_set(issuer, &jwks.to_string()).unwrap();
        let key = jsonwebtoken::EncodingKey::from_ec_pem(EC_C_PEM).unwrap();
        let claims = json!({ "iss": issuer, "sub": "user-1", "exp": 4_102_444_800_u64 });
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.typ = Some("at+jwt".into());
        header.kid = Some("ec-c".into());
        let plain = jsonwebtoken::encode(&header, &claims, &key).unwrap();
        assert!(
            verifier.check(&plain).await.is_ok(),
            "the token without `crit`"
        );
        for crit in [vec!["exp"], vec!["b64"], vec![]] {
            header.crit = Some(crit.iter().map(|c| (*c).to_owned()).collect());
            let token = jsonwebtoken::encode(&header, &claims, &key).unwrap();
            match verifier.check(&token).await {
                Err(TokenRejection::Invalid(reason)) => {
                    assert!(reason.contains("`crit`"), "{crit:?}: {reason}")
                }
                other => panic!("crit {crit:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn audiences_and_scopes_come_as_one_string_or_many() {
        let claims: Claims = serde_json::from_value(json!({
            "iss": "i", "sub": "s", "aud": "https://a", "scp": ["x", "y"], "scope": "z"
        }))
        .unwrap();
        assert_eq!(claims.aud.unwrap().into_vec(), ["https://a"]);
        assert_eq!(claims.scp.unwrap().into_vec(), ["x", "y"]);
        let spaced: Claims = serde_json::from_value(json!({
            "iss": "i", "sub": "s", "aud": "https://other https://a"
        }))
        .unwrap();
        assert_eq!(spaced.aud.unwrap().into_vec(), ["https://other https://a"]);
    }

    #[test]
    fn a_failed_refresh_backs_off_doubling_up_to_the_max_age() {
        let verifier =
            JwtVerifier::with_jwks("https://as.example.com", "https://as.example.com/jwks")
                .unwrap()
                .jwks_cooldown(Duration::from_secs(30))
                .jwks_max_age(Duration::from_secs(600));
        let Keys::Remote(remote) = &verifier.keys else {
            panic!("remote keys");
        };
        let waits: Vec<u64> = (1..=7).map(|n| remote.backoff(n).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(remote.backoff(u32::MAX).as_secs(), 600);
    }
}
