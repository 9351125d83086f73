//! The JWT and JWKS parsers (`mcp_tools::auth::JwtVerifier`, feature `oauth`). The first byte of
//! an input chooses what the rest is:
//!
//! - `0`: a JWKS document for `JwtVerifier::with_key_set`. Whatever it holds, a token signed by
//!   one of the test issuer's keys is accepted only if the document holds that very public key
//!   (its modulus, or its curve point).
//! - `1`: a token string, verified against the test issuer's key set (`rsa-a`, `ec-c`). Only a
//!   token whose signed part (`header.payload`) is one the issuer signed with valid claims is
//!   accepted, and it reads back the claims it carries: no forged, altered, expired, foreign,
//!   mistyped, `alg: none` or algorithm-confused (`HS256` keyed with the public key) token
//!   passes.
//! - anything else: a token made from fuzzed header members (`alg`, `typ`, `kid`) and claims
//!   (`iss`, `sub`, `exp`, `nbf`, `aud`, `scope`, `scp`, others), signed with `ec-c` (or with
//!   the RSA public key as an HMAC secret, or not at all), then maybe altered. A reference model
//!   of the rules (RFC 9068 `typ`, the accepted algorithms, the key lookup by `kid`, `iss`,
//!   `sub`, `exp`/`nbf` with 60 s of leeway, the claim types) decides: a token accepted has an
//!   unaltered signed part and claims the model accepts, and reads back as the model says; an
//!   unaltered token the model accepts (clear of the leeway's edges) is accepted.
//!
//! Every refusal is `Invalid` (never `Unavailable`: the keys are fixed), and its reason never
//! quotes the token.

#![no_main]

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use arbitrary::{Result, Unstructured};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey};
use libfuzzer_sys::fuzz_target;
use mcp_tools::auth::{JwtVerifier, TokenRejection, TokenVerifier, VerifiedToken};
use mcp_tools_fuzz::{block_on, json};
use serde_json::{Map, Value, json};

const ISSUER: &str = "https://auth.example.com";
const RSA_A: &[u8] = include_bytes!("../../tests/fixtures/oauth/rsa-a.pem");
const RSA_A_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/oauth/rsa-a.pub.pem");
const RSA_B: &[u8] = include_bytes!("../../tests/fixtures/oauth/rsa-b.pem");
const EC_C: &[u8] = include_bytes!("../../tests/fixtures/oauth/ec-c.pem");
/// 2100-01-01: far in the future, so committed tokens stay valid.
const FAR_FUTURE: u64 = 4_102_444_800;

struct Keys {
    ec_c: EncodingKey,
    verifier: JwtVerifier,
    /// Tokens the issuer signed: (signed part, what a verifier must read from it if valid).
    signed: Vec<(String, Option<VerifiedToken>)>,
    /// The valid tokens whole, each with the JWK of the key that signed it.
    valid: Vec<(String, Value, VerifiedToken)>,
}

fn jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> Value {
    let mut jwk = serde_json::to_value(Jwk::from_encoding_key(key, alg).unwrap()).unwrap();
    jwk["kid"] = json!(kid);
    jwk["use"] = json!("sig");
    jwk
}

/// `header.payload.signature`, signed with `key` under `alg` (`None`: unsigned).
fn token(header: &Value, claims: &Value, sign: Option<(&EncodingKey, Algorithm)>) -> String {
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(header).unwrap()),
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap())
    );
    let signature = match sign {
        Some((key, alg)) => jsonwebtoken::crypto::sign(message.as_bytes(), key, alg).unwrap(),
        None => String::new(),
    };
    format!("{message}.{signature}")
}

static KEYS: LazyLock<Keys> = LazyLock::new(|| {
    let rsa_a = EncodingKey::from_rsa_pem(RSA_A).unwrap();
    let rsa_b = EncodingKey::from_rsa_pem(RSA_B).unwrap();
    let ec_c = EncodingKey::from_ec_pem(EC_C).unwrap();
    let hs = EncodingKey::from_secret(RSA_A_PUBLIC);
    let rsa_a_jwk = jwk(&rsa_a, Algorithm::RS256, "rsa-a");
    let ec_c_jwk = jwk(&ec_c, Algorithm::ES256, "ec-c");
    let jwks = json!({ "keys": [rsa_a_jwk.clone(), ec_c_jwk.clone()] }).to_string();
    let verifier = JwtVerifier::with_key_set(ISSUER, &jwks).unwrap();
    let claims = json!({ "iss": ISSUER, "sub": "user-1", "exp": FAR_FUTURE, "scope": "a b", "aud": "https://mcp.example.com" });
    let valid = Some(VerifiedToken::new(
        ISSUER,
        "user-1",
        ["https://mcp.example.com".to_owned()],
        ["a".to_owned(), "b".to_owned()],
    ));
    let header = |alg: &str, kid: Option<&str>| {
        let mut header = json!({ "alg": alg, "typ": "at+jwt" });
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        header
    };
    let mut expired = claims.clone();
    expired["exp"] = json!(1_000_000_000);
    let mut foreign = claims.clone();
    foreign["iss"] = json!("https://evil.example.com");
    let tokens = [
        (token(&header("RS256", Some("rsa-a")), &claims, Some((&rsa_a, Algorithm::RS256))), valid.clone()),
        (token(&header("ES256", Some("ec-c")), &claims, Some((&ec_c, Algorithm::ES256))), valid.clone()),
        (token(&header("ES256", None), &claims, Some((&ec_c, Algorithm::ES256))), valid.clone()),
        (token(&header("RS256", Some("rsa-a")), &expired, Some((&rsa_a, Algorithm::RS256))), None),
        (token(&header("RS256", Some("rsa-a")), &foreign, Some((&rsa_a, Algorithm::RS256))), None),
        (token(&json!({ "alg": "RS256", "typ": "JWT", "kid": "rsa-a" }), &claims, Some((&rsa_a, Algorithm::RS256))), None),
        (token(&header("HS256", Some("rsa-a")), &claims, Some((&hs, Algorithm::HS256))), None),
        (token(&header("RS256", Some("rsa-b")), &claims, Some((&rsa_b, Algorithm::RS256))), None),
        (token(&header("RS256", Some("rsa-a")), &claims, Some((&rsa_b, Algorithm::RS256))), None),
        (token(&json!({ "alg": "none", "typ": "at+jwt" }), &claims, None), None),
        // RFC 7515: an extension the verifier does not understand, marked critical.
        (token(&json!({ "alg": "ES256", "typ": "at+jwt", "kid": "ec-c", "crit": ["exp"] }), &claims, Some((&ec_c, Algorithm::ES256))), None),
    ];
    if let Some(dir) = std::env::var_os("MCP_FUZZ_WRITE_JWT_SEEDS") {
        // The seed corpus: each token behind mode byte 1, the key set behind mode byte 0.
        let dir = std::path::PathBuf::from(dir);
        for (i, (token, _)) in tokens.iter().enumerate() {
            let mut seed = vec![1u8];
            seed.extend(token.as_bytes());
            std::fs::write(dir.join(format!("token-{i}")), seed).unwrap();
        }
        let mut seed = vec![0u8];
        seed.extend(jwks.as_bytes());
        std::fs::write(dir.join("jwks"), seed).unwrap();
    }
    let valid = vec![
        (tokens[0].0.clone(), rsa_a_jwk.clone(), tokens[0].1.clone().unwrap()),
        (tokens[1].0.clone(), ec_c_jwk.clone(), tokens[1].1.clone().unwrap()),
        (tokens[2].0.clone(), ec_c_jwk.clone(), tokens[2].1.clone().unwrap()),
    ];
    let signed = tokens
        .into_iter()
        .map(|(token, valid)| (signed_part(&token).to_owned(), valid))
        .collect();
    Keys { ec_c, verifier, signed, valid }
});

fn signed_part(token: &str) -> &str {
    token.rsplit_once('.').map_or(token, |(message, _)| message)
}

fn verify(verifier: &JwtVerifier, token: &str) -> std::result::Result<VerifiedToken, String> {
    match block_on(verifier.verify(token)) {
        Ok(verified) => Ok(verified),
        Err(TokenRejection::Invalid(reason)) => {
            if token.len() >= 16 {
                assert!(!reason.contains(token), "the reason quotes the token: {reason}");
            }
            if let Some((_, signature)) = token.rsplit_once('.')
                && signature.len() >= 16
            {
                assert!(!reason.contains(signature), "the reason quotes the signature: {reason}");
            }
            Err(reason)
        }
        Err(other) => panic!("fixed keys answered {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let keys = &*KEYS;
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode {
        0 => key_set(keys, rest),
        1 => {
            let Ok(token) = std::str::from_utf8(rest) else { return };
            any_token(keys, token);
        }
        _ => {
            let _ = made_token(keys, &mut Unstructured::new(rest));
        }
    }
});

/// Whether `document` holds the public key of `jwk` (the same modulus and exponent, or the same
/// curve point), however its members are otherwise written.
fn holds(document: &Value, jwk: &Value) -> bool {
    let number = |value: &Value| -> Option<Vec<u8>> {
        let text = value.as_str()?.trim_end_matches('=');
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        Some(bytes[start..].to_vec())
    };
    let members: &[&str] = if jwk.get("n").is_some() { &["n", "e"] } else { &["x", "y"] };
    let Some(keys) = document.get("keys").and_then(Value::as_array) else { return false };
    keys.iter().any(|key| {
        members.iter().all(|m| {
            key.get(*m).and_then(number).is_some_and(|v| Some(v) == number(&jwk[*m]))
        })
    })
}

fn key_set(keys: &Keys, document: &[u8]) {
    let Ok(text) = std::str::from_utf8(document) else { return };
    let Ok(verifier) = JwtVerifier::with_key_set(ISSUER, text) else { return };
    let parsed: Value = serde_json::from_str(text).expect("a key set that is not JSON was taken");
    for (token, jwk, valid) in &keys.valid {
        if let Ok(verified) = verify(&verifier, token) {
            assert!(holds(&parsed, jwk), "a token of {} accepted by a key set without its key: {text}", jwk["kid"]);
            assert_eq!(&verified, valid);
        }
    }
}

fn any_token(keys: &Keys, token: &str) {
    if let Ok(verified) = verify(&keys.verifier, token) {
        let signed = signed_part(token);
        let known = keys.signed.iter().find(|(part, _)| part == signed);
        match known {
            Some((_, Some(valid))) => assert_eq!(&verified, valid),
            Some((_, None)) => panic!("an invalid token was accepted: {token}"),
            None => panic!("a token the issuer never signed was accepted: {token}"),
        }
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A claim value: usually of the right shape, sometimes not.
fn claim(u: &mut Unstructured<'_>, good: Value) -> Result<Option<Value>> {
    Ok(match u.int_in_range(0..=11)? {
        0..=7 => Some(good),
        8 => None,
        9 => Some(Value::Null),
        10 => Some(json::value(u, 1, &[], &[ISSUER])?),
        _ => Some(json!(json::string(u, &[ISSUER, "a b", ""])?)),
    })
}

fn time(u: &mut Unstructured<'_>, now: u64) -> Result<Value> {
    Ok(match u.int_in_range(0..=7)? {
        0 | 1 => json!(FAR_FUTURE),
        2 => json!(1_000_000_000u64),
        3 => json!(now as i64 + u.int_in_range(-200i64..=200)?),
        4 => json!(FAR_FUTURE as f64 + 0.5),
        5 => json!(now as f64 - 7200.25),
        6 => json::number(u)?,
        _ => json!(format!("{FAR_FUTURE}")),
    })
}

/// What the model says of a claim set: `Some(accepted)`, `None` when too close to call (an
/// `exp` or `nbf` within the leeway's edge, give or take the seconds a run takes).
fn model(header: &Map<String, Value>, claims: &Map<String, Value>, now: u64) -> Option<std::result::Result<VerifiedToken, ()>> {
    let reject = Some(Err(()));
    // RFC 7515: a header with `crit` names extensions the recipient must understand, and this
    // verifier understands none.
    if header.get("crit").is_some_and(|crit| !crit.is_null()) {
        return reject;
    }
    // Other members: the JWT library types some of them; not modelled. (A `null` one is absent
    // to its parser, as `crit: null` is.)
    if header.iter().any(|(k, v)| !matches!(k.as_str(), "alg" | "typ" | "kid") && !(k == "crit" && v.is_null())) {
        return None;
    }
    let typ = header.get("typ").and_then(Value::as_str).map(str::to_ascii_lowercase);
    if !matches!(typ.as_deref(), Some("at+jwt" | "application/at+jwt")) {
        return reject;
    }
    if header.get("alg") != Some(&json!("ES256")) {
        return reject;
    }
    match header.get("kid") {
        // A `null` member is an absent one to the header's parser.
        None | Some(Value::Null) => {}
        Some(kid) if kid == "ec-c" => {}
        Some(_) => return reject,
    }
    // A numeric date as the JWT library reads it: an integer, or a float it rounds.
    let date = |value: Option<&Value>| -> std::result::Result<Option<u64>, ()> {
        match value {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(n) => Ok(Some(n)),
                None => match n.as_f64() {
                    Some(f) if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 => Ok(Some(f.round() as u64)),
                    _ => Err(()),
                },
            },
            Some(_) => Err(()),
        }
    };
    let Ok(exp) = date(claims.get("exp")) else { return reject };
    let Ok(nbf) = date(claims.get("nbf")) else { return reject };
    let Some(exp) = exp else { return reject };
    const EDGE: u64 = 600;
    if exp.abs_diff(now.saturating_sub(60)) < EDGE || nbf.is_some_and(|nbf| nbf.abs_diff(now + 60) < EDGE) {
        return None;
    }
    if exp < now - 60 || nbf.is_some_and(|nbf| nbf > now + 60) {
        return reject;
    }
    let Some(Value::String(iss)) = claims.get("iss") else { return reject };
    if iss != ISSUER {
        return reject;
    }
    let Some(Value::String(sub)) = claims.get("sub") else { return reject };
    let strings = |value: Option<&Value>| -> std::result::Result<Vec<String>, ()> {
        match value {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned).ok_or(()))
                .collect(),
            Some(_) => Err(()),
        }
    };
    let Ok(aud) = strings(claims.get("aud")) else { return reject };
    let Ok(scp) = strings(claims.get("scp")) else { return reject };
    let scope = match claims.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return reject,
    };
    let scopes = scope
        .iter()
        .chain(scp.iter())
        .flat_map(|s| s.split(' '))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect::<Vec<_>>();
    Some(Ok(VerifiedToken::new(iss.clone(), sub.clone(), aud, scopes)))
}

fn made_token(keys: &Keys, u: &mut Unstructured<'_>) -> Result<()> {
    let now = now();
    let mut header = Map::new();
    let alg = *u.choose(&["ES256", "ES256", "ES256", "RS256", "HS256", "none", "ES384", "EdDSA", "es256"])?;
    header.insert("alg".into(), json!(alg));
    let typ = json!(*u.choose(&["at+jwt", "AT+JWT", "application/at+jwt", "JWT", "at+JWT "])?);
    if let Some(typ) = claim(u, typ)? {
        header.insert("typ".into(), typ);
    }
    let kid = json!(*u.choose(&["ec-c", "ec-c", "rsa-a", "EC-C", ""])?);
    if let Some(kid) = claim(u, kid)?
        && u.ratio(3, 4)?
    {
        header.insert("kid".into(), kid);
    }
    if u.ratio(1, 8)? {
        let name = *u.choose(&["crit", "crit", "jku", "x5u", "cty", "jwk", "custom"])?;
        let value = match u.int_in_range(0..=2)? {
            0 => json!(["exp"]),
            1 => json!(json::string(u, &[])?),
            _ => json::value(u, 1, &[], &[])?,
        };
        header.insert(name.into(), value);
    }
    let mut claims = Map::new();
    let subject = json!(json::string(u, &["user-1", ""])?);
    let exp = time(u, now)?;
    let nbf = time(u, now)?;
    let aud = if u.arbitrary()? { json!("https://mcp.example.com") } else { json!(["https://mcp.example.com", "other"]) };
    let scope = json!(json::string(u, &["a b", " a  b ", "", "tools:read"])?);
    let scp = if u.arbitrary()? { json!(["x", "y z"]) } else { json!("x y") };
    for (name, good, present) in [
        ("iss", json!(ISSUER), true),
        ("sub", subject, true),
        ("exp", exp, true),
        ("nbf", nbf, u.arbitrary()?),
        ("aud", aud, u.arbitrary()?),
        ("scope", scope, u.arbitrary()?),
        ("scp", scp, u.ratio(1, 3)?),
    ] {
        if !present {
            continue;
        }
        if let Some(value) = claim(u, good)? {
            claims.insert(name.into(), value);
        }
    }
    if u.ratio(1, 6)? {
        claims.insert(json::string(u, &["jti", "client_id"])?, json::value(u, 1, &[], &[])?);
    }
    let header = Value::Object(header);
    let claims = Value::Object(claims);
    // Signed the way its `alg` says, with the keys an attacker has (`ec-c`'s private key stands
    // for the issuer; the RSA public key is public): `ES256` by `ec-c`; `HS256` keyed with the
    // public key; anything else left unsigned or given the `ec-c` signature.
    let hs = EncodingKey::from_secret(RSA_A_PUBLIC);
    let sign = match alg {
        "HS256" => Some((&hs, Algorithm::HS256)),
        "none" => None,
        _ => Some((&keys.ec_c, Algorithm::ES256)),
    };
    let original = token(&header, &claims, sign);
    // Altered, now and then.
    let mut sent = original.clone();
    match u.int_in_range(0..=9)? {
        0 => {
            if !sent.is_empty() {
                let at = u.choose_index(sent.len())?;
                let mut bytes = sent.into_bytes();
                bytes[at] = *u.choose(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")?;
                sent = String::from_utf8(bytes).unwrap();
            }
        }
        1 => {
            let keep = u.int_in_range(0..=sent.len())?;
            sent.truncate(keep);
        }
        2 => sent.push_str(*u.choose(&["=", ".", "A", " ", ".x"])?),
        3 => sent = format!("{}.", signed_part(&original)),
        _ => {}
    }
    let verified = verify(&keys.verifier, &sent);
    let expected = model(header.as_object().unwrap(), claims.as_object().unwrap(), now);
    match (&verified, &expected) {
        (Ok(verified), _) => {
            assert_eq!(
                signed_part(&sent),
                signed_part(&original),
                "a token accepted with a signed part nobody signed: {sent}"
            );
            match &expected {
                Some(Ok(model)) => assert_eq!(verified, model, "{header} {claims}"),
                Some(Err(())) => panic!("a token the rules refuse was accepted: {header} {claims}"),
                None => {}
            }
        }
        (Err(reason), Some(Ok(_))) if sent == original => {
            panic!("a valid token refused ({reason}): {header} {claims}")
        }
        _ => {}
    }
    Ok(())
}
