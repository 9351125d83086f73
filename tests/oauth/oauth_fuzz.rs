//! Model-based fuzzing of the authenticated request path: one OAuth 2.1 resource server (JWTs
//! checked against the JWKS of a test issuer, `w` implying `r`) serving four tools, which require
//! `r`, `w`, both, and nothing.
//!
//! Every case starts as a `tools/call` carrying a token the issuer signed (either key, a random
//! subset of scopes, as `scope` or `scp`), and then changes the credentials: no `Authorization`
//! header; the token under scheme variants (case, extra spaces and tabs, `Basic`, none, glued);
//! a byte flipped, replaced, inserted or deleted anywhere, non-ASCII inserted; a segment
//! replaced by random base64url, segments swapped, dropped, padded or added; the JOSE header
//! re-encoded with another `alg` or `kid` (absent, unknown, another key's, not a string); the
//! claims re-encoded with some missing or of the wrong type, under the original signature or
//! signed anew; two headers; a signed token a few bytes either side of the 8 KiB limit; random
//! bytes. A valid token may also travel in `?access_token=`, which must change nothing. The
//! routing headers name the body's tool, another tool, an unknown one, a Base64 sentinel of the
//! body's or nothing, and now and then the body is not JSON.
//!
//! The model reads the wire as the server must: the single `Authorization` header, its
//! whitespace trimmed, is `Bearer` (any case) and one or more spaces before the token. A token
//! spelled as issued means what its claims say (judged by RFC 7519 and RFC 9068, not by the
//! verifier's code); one whose three segments decode to the issued bytes but are spelled
//! otherwise (padding, stray low bits) may be served as the issued one or refused; any other
//! token cannot carry a valid signature and must be refused as `invalid_token`. Past the token,
//! a tool the routing headers name is checked against the token's scopes (widened by the
//! implication) before the body is read, then the body, the routing headers against the body,
//! the tool's existence, and the body's tool against the scopes again (what a Base64 sentinel
//! hides from the first check).
//!
//! The oracle requires of every reply: no 5xx; an outcome the model allows; for a 401 one
//! `Bearer` challenge with the configured metadata URL, the scopes the named tool needs (or
//! all the server's), and `error="invalid_token"` exactly when an `Authorization` header was
//! sent; for a 403 `insufficient_scope` naming exactly the scopes of the refused tool, in the
//! challenge and in `data.requiredScopes`; the id echoed exactly when the body was read; a body
//! valid against the official schema; and that a tool ran exactly when the reply says it did.
//! After the run the server still serves and the JWKS was fetched no more often than its
//! refresh age and the 30 s cooldown on unknown key ids allow.
//!
//! The default 2,000 cases take a few seconds, so CI runs them. Outside CI, raise the count with
//! `MCP_OAUTH_FUZZ_CASES` (`MCP_OAUTH_FUZZ_CASES=100000 cargo test --release --test oauth --
//! oauth_fuzz:: --nocapture` also prints the distribution); `PROPTEST_RNG_SEED=<n>` replays a run. Tokens are
//! re-issued as they age, so a campaign may run for any length of time.

use crate::common;
use crate::ensure;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{
    GeneralPurpose, GeneralPurposeConfig, STANDARD, URL_SAFE_NO_PAD,
};
use common::oauth::{Challenge, Issuer, Key, METADATA_URL, RESOURCE, now, sign};
use common::{TestServer, VERSION, conforms, fuzz_cases, fuzz_runtime, official, within};
use mcp_tools::auth::{
    DEFAULT_JWKS_COOLDOWN, DEFAULT_JWKS_MAX_AGE, DEFAULT_LEEWAY, DEFAULT_MAX_TOKEN_BYTES,
    JwtVerifier, OAuth,
};
use mcp_tools::tools::{NoArgs, Tool, ToolInfo, ToolSet};
use mcp_tools::{Context, McpServer};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

const DEFAULT_CASES: u32 = 2_000;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
const HEADER_MISMATCH: i64 = -32020;

/// The tools served and the scopes each requires, sorted as challenges list them.
const TOOLS: [(&str, &[&str]); 4] = [
    ("docs_read", &["r"]),
    ("docs_write", &["w"]),
    ("docs_move", &["r", "w"]),
    ("status", &[]),
];

/// Names no tool has: one close to a served name in case only, one extending one.
const UNKNOWN_TOOLS: [&str; 4] = ["docs_delete", "Docs_Read", "docs_read/extra", ""];

/// What a token may grant: the two scopes the tools require, one they do not, and one that
/// differs from `r` only in case.
const GRANTABLE: [&str; 4] = ["r", "w", "x", "R"];

/// Every scope a tool requires: the server's `scopes_supported`, which a challenge names when
/// the request names no tool that requires any.
const SUPPORTED: &str = "r w";

/// Issued tokens live an hour; they are re-issued well before.
const REISSUE_AFTER: Duration = Duration::from_secs(600);

/// `granted` with what the server is told it implies: `w` grants `r`.
fn widened<'a>(granted: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut scopes: BTreeSet<String> = granted
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if scopes.contains("w") {
        scopes.insert("r".to_owned());
    }
    scopes
}

fn allows(granted: &BTreeSet<String>, tool: usize) -> bool {
    TOOLS[tool].1.iter().all(|scope| granted.contains(*scope))
}

fn tool_index(name: &str) -> Option<usize> {
    TOOLS.iter().position(|(n, _)| *n == name)
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// One of [`TOOLS`], counting its calls: a refused request must leave every count unchanged.
struct Counted {
    tool: usize,
    calls: Arc<[AtomicUsize; 4]>,
}

impl Tool for Counted {
    type Args = NoArgs;
    type Output = &'static str;
    fn info(&self) -> ToolInfo {
        let (name, scopes) = TOOLS[self.tool];
        ToolInfo::new(name, "Counts its calls.").scopes(scopes.iter().copied())
    }
    async fn call(&self, _: NoArgs, _: Context) -> &'static str {
        self.calls[self.tool].fetch_add(1, Ordering::SeqCst);
        TOOLS[self.tool].0
    }
}

fn server(issuer: &Issuer, calls: &Arc<[AtomicUsize; 4]>) -> McpServer {
    let tools = (0..TOOLS.len()).fold(ToolSet::new(), |set, tool| {
        set.with(Counted {
            tool,
            calls: Arc::clone(calls),
        })
    });
    let verifier = JwtVerifier::with_jwks(&issuer.url, &issuer.jwks_url()).unwrap();
    McpServer::builder("oauth-fuzz", "1.0.0")
        .tools(tools)
        .oauth(
            OAuth::new(RESOURCE, verifier)
                .authorization_server(&issuer.url)
                .implies("w", ["r"]),
        )
        .build()
        .unwrap()
}

fn counts(calls: &[AtomicUsize; 4]) -> [usize; 4] {
    std::array::from_fn(|tool| calls[tool].load(Ordering::SeqCst))
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

/// base64url as leniently as any decoder reads it: padding optional, stray low bits ignored.
/// Two spellings that decode alike here carry the same bytes.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The bytes of a compact JWS's three segments, when it has three that decode.
fn segments(token: &str) -> Option<[Vec<u8>; 3]> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some([
        LENIENT.decode(header).ok()?,
        LENIENT.decode(payload).ok()?,
        LENIENT.decode(signature).ok()?,
    ])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Form {
    /// `scope`: space separated.
    Scope,
    /// `scp`: an array.
    Scp,
}

/// The token a case starts from.
#[derive(Clone, Debug)]
struct Grant {
    key: Key,
    /// Which of [`GRANTABLE`] it grants, a bit each.
    mask: u8,
    form: Form,
}

impl Grant {
    fn scopes(&self) -> Vec<&'static str> {
        GRANTABLE
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.mask & (1 << bit) != 0)
            .map(|(_, scope)| *scope)
            .collect()
    }

    fn claims(&self, issuer: &Issuer) -> BTreeMap<String, Value> {
        let scopes = self.scopes();
        let mut claims = issuer.claims("fuzzer", &scopes.join(" "));
        if self.form == Form::Scp {
            claims.remove("scope");
            claims.insert("scp".into(), json!(scopes));
        }
        claims
    }
}

/// What a token says if it reaches the verifier as it was signed.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    /// Accepted, granting these scopes (already widened).
    Valid(BTreeSet<String>),
    /// Legal but unusual: a verifier may accept it, granting these, or refuse it.
    Doubtful(BTreeSet<String>),
    Invalid,
}

/// What a verifier must make of a correctly signed token with `claims` (RFC 7519, RFC 9068):
/// `iss` the issuer, a non-empty `sub`, an `aud` naming the resource, an `exp` not past and an
/// `nbf` not ahead (with the leeway), `scope` a space-separated string and `scp` one or an
/// array of them. A claim of the wrong type makes the token malformed; `null` for an optional
/// claim and a non-integer date are doubtful.
fn judge(claims: &BTreeMap<String, Value>, issuer: &str) -> Verdict {
    use Verdict::Invalid;
    let now = now() as f64;
    let leeway = DEFAULT_LEEWAY.as_secs_f64();
    let mut doubtful = false;
    if claims.get("iss").and_then(Value::as_str) != Some(issuer) {
        return Invalid;
    }
    if claims
        .get("sub")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Invalid;
    }
    let addressed = match claims.get("aud") {
        Some(Value::String(aud)) => aud == RESOURCE,
        Some(Value::Array(auds)) => {
            auds.iter().all(Value::is_string) && auds.contains(&json!(RESOURCE))
        }
        _ => false,
    };
    if !addressed {
        return Invalid;
    }
    let Some(Value::Number(exp)) = claims.get("exp") else {
        return Invalid;
    };
    match (exp.as_u64(), exp.as_f64()) {
        (Some(exp), _) if exp as f64 >= now - leeway => {}
        (None, Some(exp)) if exp.is_finite() && exp >= now - leeway => doubtful = true,
        _ => return Invalid,
    }
    match claims.get("nbf") {
        None => {}
        Some(Value::Null) => doubtful = true,
        Some(Value::Number(nbf)) => match (nbf.as_u64(), nbf.as_f64()) {
            (Some(nbf), _) if nbf as f64 <= now + leeway => {}
            (None, Some(nbf)) if nbf <= now + leeway => doubtful = true,
            _ => return Invalid,
        },
        Some(_) => return Invalid,
    }
    // Nothing is checked against `iat`, but it is a date.
    if claims.get("iat").is_some_and(|iat| !iat.is_number()) {
        doubtful = true;
    }
    let mut scopes: Vec<&str> = Vec::new();
    match claims.get("scope") {
        None => {}
        Some(Value::Null) => doubtful = true,
        Some(Value::String(scope)) => scopes.extend(scope.split(' ')),
        Some(_) => return Invalid,
    }
    match claims.get("scp") {
        None => {}
        Some(Value::Null) => doubtful = true,
        Some(Value::String(scp)) => scopes.extend(scp.split(' ')),
        Some(Value::Array(scp)) if scp.iter().all(Value::is_string) => {
            scopes.extend(scp.iter().filter_map(Value::as_str));
        }
        Some(_) => return Invalid,
    }
    let granted = widened(scopes);
    if doubtful {
        Verdict::Doubtful(granted)
    } else {
        Verdict::Valid(granted)
    }
}

/// The token a case's credentials were made from, and what it says as signed.
#[derive(Clone, Debug)]
struct Reference {
    token: String,
    segments: Option<[Vec<u8>; 3]>,
    verdict: Verdict,
}

impl Reference {
    fn new(token: String, verdict: Verdict) -> Reference {
        Reference {
            segments: segments(&token),
            token,
            verdict,
        }
    }
}

/// Signs tokens, keeping the plain ones of each grant for a while: RSA signing in a debug
/// build costs more than a request.
struct Minter<'a> {
    issuer: &'a Issuer,
    /// By key, scope mask and form: when each was signed, and the token.
    issued: Mutex<BTreeMap<GrantId, (Instant, String)>>,
}

type GrantId = (Key, u8, Form);

impl Minter<'_> {
    fn issued(&self, grant: &Grant) -> String {
        let mut issued = self.issued.lock().unwrap();
        let id = (grant.key, grant.mask, grant.form);
        match issued.get(&id) {
            Some((at, token)) if at.elapsed() < REISSUE_AFTER => token.clone(),
            _ => {
                let token = sign(grant.key, &grant.claims(self.issuer));
                issued.insert(id, (Instant::now(), token.clone()));
                token
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/// How the token is presented.
#[derive(Clone, Copy, Debug)]
enum Scheme {
    Bearer,
    Lowercase,
    Uppercase,
    /// More than one space after the scheme.
    Spaces(usize),
    /// Whitespace before the scheme, which HTTP strips.
    Leading,
    /// Whitespace after the token, which HTTP strips.
    Trailing,
    /// A tab instead of the space.
    Tab,
    Basic,
    DPoP,
    /// The token alone.
    Bare,
    /// No space between scheme and token.
    Glued,
    /// A second credential after a comma.
    Listed,
}

impl Scheme {
    fn render(self, token: &[u8]) -> Vec<u8> {
        let (before, after) = match self {
            Scheme::Bearer => ("Bearer ".to_owned(), ""),
            Scheme::Lowercase => ("bearer ".to_owned(), ""),
            Scheme::Uppercase => ("BEARER ".to_owned(), ""),
            Scheme::Spaces(n) => (format!("Bearer{}", " ".repeat(n)), ""),
            Scheme::Leading => (" \t Bearer ".to_owned(), ""),
            Scheme::Trailing => ("Bearer ".to_owned(), "  \t "),
            Scheme::Tab => ("Bearer\t".to_owned(), ""),
            Scheme::Basic => ("Basic ".to_owned(), ""),
            Scheme::DPoP => ("DPoP ".to_owned(), ""),
            Scheme::Bare => (String::new(), ""),
            Scheme::Glued => ("Bearer".to_owned(), ""),
            Scheme::Listed => ("Bearer ".to_owned(), ", Bearer other"),
        };
        [before.as_bytes(), token, after.as_bytes()].concat()
    }
}

#[derive(Clone, Debug)]
enum ByteEdit {
    Flip { at: Index, bit: u8 },
    Replace { at: Index, byte: u8 },
    Insert { at: Index, bytes: Vec<u8> },
    Delete { at: Index, len: usize },
    NonAscii { at: Index, text: &'static str },
}

#[derive(Clone, Debug)]
enum SegmentEdit {
    Replace {
        which: usize,
        with: String,
    },
    Swap {
        which: usize,
        with: usize,
    },
    Drop(usize),
    Pad {
        which: usize,
        n: usize,
    },
    Append(String),
    /// `-` and `_` spelled as standard Base64's `+` and `/`.
    StandardAlphabet,
}

/// The JOSE header re-encoded with a member set (or removed, `None`).
#[derive(Clone, Debug)]
enum HeaderEdit {
    Alg(Option<Value>),
    Kid(Option<Value>),
}

#[derive(Clone, Debug)]
enum ClaimEdit {
    Remove(&'static str),
    Set(&'static str, Value),
    /// A date written as a string of its digits.
    Stringify(&'static str),
    /// An extra claim nested this deep.
    Nest(usize),
    /// `scope: "r w"`, and no `scp`.
    Escalate,
    Expired,
    NotYet,
}

impl ClaimEdit {
    fn apply(&self, claims: &mut BTreeMap<String, Value>) {
        match self {
            ClaimEdit::Remove(claim) => {
                claims.remove(*claim);
            }
            ClaimEdit::Set(claim, value) => {
                claims.insert((*claim).to_owned(), value.clone());
            }
            ClaimEdit::Stringify(claim) => {
                if let Some(value) = claims.get_mut(*claim) {
                    *value = json!(value.to_string());
                }
            }
            ClaimEdit::Nest(depth) => {
                let nested = (0..*depth).fold(json!("core"), |inner, level| {
                    if level % 2 == 0 {
                        json!([inner, level])
                    } else {
                        json!({ "level": inner })
                    }
                });
                claims.insert("ctx".into(), nested);
            }
            ClaimEdit::Escalate => {
                claims.remove("scp");
                claims.insert("scope".into(), json!("r w"));
            }
            ClaimEdit::Expired => {
                claims.insert("exp".into(), json!(now() - 3600));
            }
            ClaimEdit::NotYet => {
                claims.insert("nbf".into(), json!(now() + 3600));
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Auth {
    Absent,
    /// The issued token, presented under `Scheme`.
    Issued(Scheme),
    Bytes(ByteEdit),
    Segments(SegmentEdit),
    Header(HeaderEdit),
    /// The claims re-encoded with an edit, keeping the original signature or signed anew.
    Claims {
        edit: ClaimEdit,
        resign: bool,
    },
    /// Two `Authorization` headers: the issued token, then it again or a `Basic` credential.
    Twice {
        again: bool,
    },
    /// A token signed with a filler claim that brings its length to the limit plus this.
    Large(i64),
    Random(Vec<u8>),
}

impl Auth {
    fn label(&self, query: bool) -> &'static str {
        match self {
            Auth::Absent if query => "absent, one in the query",
            Auth::Absent => "absent",
            Auth::Issued(Scheme::Bearer) => "issued",
            Auth::Issued(_) => "issued, other spelling",
            Auth::Bytes(_) => "byte edit",
            Auth::Segments(_) => "segment edit",
            Auth::Header(HeaderEdit::Alg(_)) => "alg edit",
            Auth::Header(HeaderEdit::Kid(_)) => "kid edit",
            Auth::Claims { resign: false, .. } => "claims, old signature",
            Auth::Claims { resign: true, .. } => "claims, signed anew",
            Auth::Twice { .. } => "two headers",
            Auth::Large(_) => "near the size limit",
            Auth::Random(_) => "random bytes",
        }
    }
}

#[derive(Clone, Debug)]
enum MethodHeader {
    Exact,
    /// `tools/call` in the Base64 sentinel form.
    Sentinel,
    Absent,
    Other(&'static str),
}

#[derive(Clone, Debug)]
enum NameHeader {
    Body,
    /// The body's name in the Base64 sentinel form.
    Sentinel,
    Tool(usize),
    Unknown(&'static str),
    Absent,
}

#[derive(Clone, Debug)]
enum BodyForm {
    Json,
    /// The JSON cut short after this many bytes.
    Truncated(Index),
    Garbage(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Plan {
    grant: Grant,
    auth: Auth,
    /// A valid token in `?access_token=` as well.
    query: bool,
    method: MethodHeader,
    name: NameHeader,
    tool: &'static str,
    body: BodyForm,
    id: i64,
}

/// A byte an HTTP field value may hold: base64url most often, then separators, anything
/// visible, and obs-text.
fn header_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => select(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".to_vec()),
        2 => select(b".=+/~ \t,\"\\".to_vec()),
        1 => 0x20u8..0x7f,
        1 => 0x80u8..=0xff,
    ]
}

fn grant() -> impl Strategy<Value = Grant> {
    (
        select(vec![Key::RsaA, Key::EcC]),
        0u8..16,
        prop_oneof![3 => Just(Form::Scope), 1 => Just(Form::Scp)],
    )
        .prop_map(|(key, mask, form)| Grant { key, mask, form })
}

fn scheme() -> impl Strategy<Value = Scheme> {
    prop_oneof![
        12 => Just(Scheme::Bearer),
        1 => Just(Scheme::Lowercase),
        1 => Just(Scheme::Uppercase),
        1 => (2usize..5).prop_map(Scheme::Spaces),
        1 => Just(Scheme::Leading),
        1 => Just(Scheme::Trailing),
        1 => Just(Scheme::Tab),
        1 => Just(Scheme::Basic),
        1 => Just(Scheme::DPoP),
        1 => Just(Scheme::Bare),
        1 => Just(Scheme::Glued),
        1 => Just(Scheme::Listed),
    ]
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| ByteEdit::Flip { at, bit }),
        (any::<Index>(), header_byte()).prop_map(|(at, byte)| ByteEdit::Replace { at, byte }),
        (any::<Index>(), prop::collection::vec(header_byte(), 1..4))
            .prop_map(|(at, bytes)| ByteEdit::Insert { at, bytes }),
        (any::<Index>(), 1usize..4).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        (any::<Index>(), select(vec!["é", "€", "\u{a0}", "漢字"]))
            .prop_map(|(at, text)| ByteEdit::NonAscii { at, text }),
    ]
}

fn segment_edit() -> impl Strategy<Value = SegmentEdit> {
    prop_oneof![
        (0usize..3, "[A-Za-z0-9_-]{0,400}")
            .prop_map(|(which, with)| SegmentEdit::Replace { which, with }),
        (0usize..3, 1usize..3).prop_map(|(which, by)| SegmentEdit::Swap {
            which,
            with: (which + by) % 3
        }),
        (0usize..3).prop_map(SegmentEdit::Drop),
        (0usize..3, 1usize..4).prop_map(|(which, n)| SegmentEdit::Pad { which, n }),
        "[A-Za-z0-9_-]{0,40}".prop_map(SegmentEdit::Append),
        Just(SegmentEdit::StandardAlphabet),
    ]
}

fn not_a_string() -> impl Strategy<Value = Value> {
    select(vec![
        json!(256),
        json!(null),
        json!(true),
        json!(["RS256"]),
        json!({ "kid": "rsa-a" }),
    ])
}

fn header_edit() -> impl Strategy<Value = HeaderEdit> {
    let alg = prop_oneof![
        4 => select(vec!["none", "HS256", "RS512", "ES256", "", "RS256", "PS256", "EdDSA"])
            .prop_map(|alg| Some(json!(alg))),
        1 => "[ -~]{0,12}".prop_map(|alg| Some(json!(alg))),
        1 => Just(None),
        1 => not_a_string().prop_map(Some),
    ];
    let kid = prop_oneof![
        3 => "[ -~]{0,16}".prop_map(|kid| Some(json!(kid))),
        1 => select(vec!["rsa-a", "rsa-b", "ec-c"]).prop_map(|kid| Some(json!(kid))),
        1 => Just(None),
        1 => not_a_string().prop_map(Some),
    ];
    prop_oneof![alg.prop_map(HeaderEdit::Alg), kid.prop_map(HeaderEdit::Kid)]
}

/// Values of the wrong type, out of range, or merely unusual for some claim.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        select(vec![
            json!(u64::MAX),
            json!(1e300),
            json!(-1),
            json!(0),
            json!(i64::MIN),
            json!(1.5),
            json!(null),
            json!(true),
            json!(["r", "w"]),
            json!([RESOURCE]),
            json!([RESOURCE, "https://other.example/mcp"]),
            json!([1, 2]),
            json!({ "r": true }),
            json!({ "nested": { "deeper": [1, { "x": null }] } }),
            json!("r w"),
            json!(""),
            json!(RESOURCE),
            json!("https://other.example"),
        ]),
        "[ -~]{0,16}".prop_map(Value::from),
    ]
}

fn claim_edit() -> impl Strategy<Value = ClaimEdit> {
    let claim = || {
        select(vec![
            "exp", "nbf", "iat", "iss", "sub", "aud", "scope", "scp",
        ])
    };
    prop_oneof![
        2 => claim().prop_map(ClaimEdit::Remove),
        6 => (claim(), odd_value()).prop_map(|(claim, value)| ClaimEdit::Set(claim, value)),
        1 => select(vec!["exp", "nbf", "iat"]).prop_map(ClaimEdit::Stringify),
        1 => (1usize..100).prop_map(ClaimEdit::Nest),
        1 => Just(ClaimEdit::Escalate),
        1 => Just(ClaimEdit::Expired),
        1 => Just(ClaimEdit::NotYet),
    ]
}

fn auth() -> impl Strategy<Value = Auth> {
    prop_oneof![
        6 => Just(Auth::Absent),
        34 => scheme().prop_map(Auth::Issued),
        12 => byte_edit().prop_map(Auth::Bytes),
        8 => segment_edit().prop_map(Auth::Segments),
        7 => header_edit().prop_map(Auth::Header),
        12 => (claim_edit(), any::<bool>())
            .prop_map(|(edit, resign)| Auth::Claims { edit, resign }),
        3 => any::<bool>().prop_map(|again| Auth::Twice { again }),
        6 => prop_oneof![-400i64..400, -3i64..=3].prop_map(Auth::Large),
        3 => prop::collection::vec(header_byte(), 0..300).prop_map(Auth::Random),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    let method = prop_oneof![
        20 => Just(MethodHeader::Exact),
        4 => Just(MethodHeader::Sentinel),
        1 => Just(MethodHeader::Absent),
        2 => select(vec!["tools/list", "prompts/get", "resources/read", "TOOLS/CALL"])
            .prop_map(MethodHeader::Other),
    ];
    let name = prop_oneof![
        10 => Just(NameHeader::Body),
        6 => Just(NameHeader::Sentinel),
        3 => (0..TOOLS.len()).prop_map(NameHeader::Tool),
        2 => select(UNKNOWN_TOOLS.to_vec()).prop_map(NameHeader::Unknown),
        2 => Just(NameHeader::Absent),
    ];
    let tool = prop_oneof![
        6 => select(TOOLS.map(|(name, _)| name).to_vec()),
        1 => select(UNKNOWN_TOOLS.to_vec()),
    ];
    let body = prop_oneof![
        23 => Just(BodyForm::Json),
        1 => any::<Index>().prop_map(BodyForm::Truncated),
        1 => prop::collection::vec(any::<u8>(), 0..32)
            .prop_map(|bytes| BodyForm::Garbage([b"\xffnot json ".as_slice(), &bytes].concat())),
    ];
    (
        grant(),
        auth(),
        prop::bool::weighted(0.1),
        method,
        name,
        tool,
        body,
        1i64..1_000_000,
    )
        .prop_map(|(grant, auth, query, method, name, tool, body, id)| Plan {
            grant,
            auth,
            query,
            method,
            name,
            tool,
            body,
            id,
        })
}

// ---------------------------------------------------------------------------------------------
// The request on the wire
// ---------------------------------------------------------------------------------------------

/// One HTTP request exactly as it is sent.
struct Case {
    path: String,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

impl Case {
    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "POST {}", self.path)?;
        for (name, value) in &self.headers {
            writeln!(
                f,
                "{name}: {}",
                String::from_utf8_lossy(value).escape_debug()
            )?;
        }
        write!(f, "\n{}", String::from_utf8_lossy(&self.body))
    }
}

fn sentinel(text: &str) -> Vec<u8> {
    format!("=?base64?{}?=", STANDARD.encode(text)).into_bytes()
}

fn with_segments(token: &str, edit: impl FnOnce(&mut Vec<String>)) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    edit(&mut parts);
    parts.join(".")
}

fn is_field_byte(byte: u8) -> bool {
    byte == b'\t' || (0x20..0x7f).contains(&byte) || byte >= 0x80
}

fn edit_bytes(token: &str, edit: &ByteEdit) -> Vec<u8> {
    let mut bytes = token.as_bytes().to_vec();
    let len = bytes.len();
    match edit {
        ByteEdit::Flip { at, bit } => {
            let at = at.index(len);
            let flipped = bytes[at] ^ (1 << bit);
            // A control character cannot travel in a field value; its obs-text twin can.
            bytes[at] = if is_field_byte(flipped) {
                flipped
            } else {
                flipped | 0x80
            };
        }
        ByteEdit::Replace { at, byte } => {
            let at = at.index(len);
            bytes[at] = match *byte {
                same if same == bytes[at] && same == b'A' => b'B',
                same if same == bytes[at] => b'A',
                other => other,
            };
        }
        ByteEdit::Insert { at, bytes: new } => {
            let at = at.index(len + 1);
            bytes.splice(at..at, new.iter().copied());
        }
        ByteEdit::Delete { at, len: n } => {
            let at = at.index(len);
            bytes.drain(at..(at + n).min(len));
        }
        ByteEdit::NonAscii { at, text } => {
            let at = at.index(len + 1);
            bytes.splice(at..at, text.bytes());
        }
    }
    bytes
}

fn edit_segments(token: &str, edit: &SegmentEdit) -> String {
    match edit {
        SegmentEdit::Replace { which, with } => {
            with_segments(token, |parts| parts[*which] = with.clone())
        }
        SegmentEdit::Swap { which, with } => {
            with_segments(token, |parts| parts.swap(*which, *with))
        }
        SegmentEdit::Drop(which) => with_segments(token, |parts| {
            parts.remove(*which);
        }),
        SegmentEdit::Pad { which, n } => {
            with_segments(token, |parts| parts[*which].push_str(&"=".repeat(*n)))
        }
        SegmentEdit::Append(extra) => format!("{token}.{extra}"),
        SegmentEdit::StandardAlphabet => token.replace('-', "+").replace('_', "/"),
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(segment: &str) -> T {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).unwrap()).unwrap()
}

fn encode_json(value: &impl serde::Serialize) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap())
}

fn edit_header(token: &str, edit: &HeaderEdit) -> String {
    with_segments(token, |parts| {
        let mut header: serde_json::Map<String, Value> = decode_json(&parts[0]);
        let (member, value) = match edit {
            HeaderEdit::Alg(value) => ("alg", value),
            HeaderEdit::Kid(value) => ("kid", value),
        };
        match value {
            Some(value) => header.insert(member.to_owned(), value.clone()),
            None => header.remove(member),
        };
        parts[0] = encode_json(&header);
    })
}

/// The credentials of `plan` on the wire, and the token they were made from.
fn credentials(plan: &Plan, minter: &Minter<'_>) -> (Vec<Vec<u8>>, Reference) {
    let issued = minter.issued(&plan.grant);
    let bearer = |token: &str| Scheme::Bearer.render(token.as_bytes());
    let reference = Reference::new(
        issued.clone(),
        judge(&plan.grant.claims(minter.issuer), &minter.issuer.url),
    );
    match &plan.auth {
        Auth::Absent => (vec![], reference),
        Auth::Issued(scheme) => (vec![scheme.render(issued.as_bytes())], reference),
        Auth::Bytes(edit) => (
            vec![Scheme::Bearer.render(&edit_bytes(&issued, edit))],
            reference,
        ),
        Auth::Segments(edit) => (vec![bearer(&edit_segments(&issued, edit))], reference),
        Auth::Header(edit) => (vec![bearer(&edit_header(&issued, edit))], reference),
        Auth::Claims { edit, resign } => {
            let parts: Vec<&str> = issued.split('.').collect();
            let mut claims: BTreeMap<String, Value> = decode_json(parts[1]);
            edit.apply(&mut claims);
            if *resign {
                let token = sign(plan.grant.key, &claims);
                let verdict = judge(&claims, &minter.issuer.url);
                (vec![bearer(&token)], Reference::new(token, verdict))
            } else {
                let token = format!("{}.{}.{}", parts[0], encode_json(&claims), parts[2]);
                (vec![bearer(&token)], reference)
            }
        }
        Auth::Twice { again } => {
            let second = if *again {
                bearer(&issued)
            } else {
                b"Basic ZnV6emVyOnNlY3JldA==".to_vec()
            };
            (vec![bearer(&issued), second], reference)
        }
        Auth::Large(offset) => {
            let target = DEFAULT_MAX_TOKEN_BYTES as i64 + offset;
            // The filler grows the payload by its length plus `,"pad":""`, and Base64 by 4/3.
            let filler = ((target - issued.len() as i64) * 3 / 4 - 9).max(0) as usize;
            let mut claims = plan.grant.claims(minter.issuer);
            claims.insert("pad".into(), json!("p".repeat(filler)));
            let token = sign(plan.grant.key, &claims);
            let verdict = judge(&claims, &minter.issuer.url);
            (vec![bearer(&token)], Reference::new(token, verdict))
        }
        Auth::Random(bytes) => (vec![bytes.clone()], reference),
    }
}

fn build(plan: &Plan, minter: &Minter<'_>) -> (Case, Reference) {
    let (authorization, reference) = credentials(plan, minter);
    let mut headers: Vec<(&'static str, Vec<u8>)> = vec![
        ("content-type", b"application/json".to_vec()),
        ("accept", b"application/json, text/event-stream".to_vec()),
        ("mcp-protocol-version", VERSION.as_bytes().to_vec()),
    ];
    match &plan.method {
        MethodHeader::Exact => headers.push(("mcp-method", b"tools/call".to_vec())),
        MethodHeader::Sentinel => headers.push(("mcp-method", sentinel("tools/call"))),
        MethodHeader::Absent => {}
        MethodHeader::Other(method) => headers.push(("mcp-method", method.as_bytes().to_vec())),
    }
    match &plan.name {
        NameHeader::Body => headers.push(("mcp-name", plan.tool.as_bytes().to_vec())),
        NameHeader::Sentinel => headers.push(("mcp-name", sentinel(plan.tool))),
        NameHeader::Tool(tool) => headers.push(("mcp-name", TOOLS[*tool].0.as_bytes().to_vec())),
        NameHeader::Unknown(name) => headers.push(("mcp-name", name.as_bytes().to_vec())),
        NameHeader::Absent => {}
    }
    headers.extend(
        authorization
            .into_iter()
            .map(|value| ("authorization", value)),
    );
    let path = if plan.query {
        format!("/mcp?access_token={}", minter.issued(&plan.grant))
    } else {
        "/mcp".to_owned()
    };
    let json = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": plan.id,
        "method": "tools/call",
        "params": { "name": plan.tool, "arguments": {}, "_meta": common::meta() },
    }))
    .unwrap();
    let body = match &plan.body {
        BodyForm::Json => json,
        // A strict prefix of a JSON object never closes it.
        BodyForm::Truncated(at) => json[..1 + at.index(json.len() - 1)].to_vec(),
        BodyForm::Garbage(bytes) => bytes.clone(),
    };
    (
        Case {
            path,
            headers,
            body,
        },
        reference,
    )
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// What the server must make of the credentials.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// No `Authorization` header.
    Nothing,
    Refused,
    /// A token that grants these.
    Granting(BTreeSet<String>),
    /// Either granting these or refused.
    Either(BTreeSet<String>),
}

impl Seen {
    fn label(&self) -> &'static str {
        match self {
            Seen::Nothing => "no credentials",
            Seen::Refused => "refused",
            Seen::Granting(_) => "accepted",
            Seen::Either(_) => "doubtful",
        }
    }
}

/// RFC 6750 section 2.1 over RFC 9110's field syntax: one header, `Bearer` in any case, one or
/// more spaces, then the token; whitespace around the value is not part of it. A token over the
/// size limit is refused unread; any token but the reference, or a respelling of its bytes,
/// cannot carry a signature that verifies.
fn seen(values: &[&[u8]], reference: &Reference) -> Seen {
    let value = match values {
        [] => return Seen::Nothing,
        [value] => value.trim_ascii_start().trim_ascii_end(),
        _ => return Seen::Refused,
    };
    let Some(token) = std::str::from_utf8(value)
        .ok()
        .filter(|text| text.is_ascii())
        .and_then(|text| text.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim_start_matches(' '))
    else {
        return Seen::Refused;
    };
    if token.len() > DEFAULT_MAX_TOKEN_BYTES {
        return Seen::Refused;
    }
    let same_bytes = token != reference.token
        && reference.segments.is_some()
        && segments(token) == reference.segments;
    match &reference.verdict {
        Verdict::Valid(granted) if token == reference.token => Seen::Granting(granted.clone()),
        Verdict::Valid(granted) | Verdict::Doubtful(granted)
            if same_bytes || token == reference.token =>
        {
            Seen::Either(granted.clone())
        }
        _ => Seen::Refused,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// 401 without `error`: no token was sent.
    AskForToken,
    /// 401 with `error="invalid_token"`.
    InvalidToken,
    /// 403 `insufficient_scope` for `tool`; `from_body` when the body had been read, so its id
    /// is echoed.
    Forbidden {
        tool: usize,
        from_body: bool,
    },
    ParseError,
    HeaderMismatch,
    UnknownTool,
    Ran(usize),
}

impl Outcome {
    fn label(self) -> String {
        match self {
            Outcome::AskForToken => "asks for a token".into(),
            Outcome::InvalidToken => "invalid_token".into(),
            Outcome::Forbidden { tool, from_body } => format!(
                "insufficient_scope {} (from the {})",
                TOOLS[tool].0,
                if from_body { "body" } else { "headers" }
            ),
            Outcome::ParseError => PARSE_ERROR.to_string(),
            Outcome::HeaderMismatch => HEADER_MISMATCH.to_string(),
            Outcome::UnknownTool => format!("{INVALID_PARAMS} unknown tool"),
            Outcome::Ran(tool) => format!("result {}", TOOLS[tool].0),
        }
    }
}

#[derive(Debug)]
struct Prediction {
    seen: Seen,
    allowed: Vec<Outcome>,
    /// What a 401's `scope` may say.
    challenge_scopes: Vec<String>,
}

/// The tool the routing headers name, read verbatim as an intermediary routes on them, or with
/// Base64 sentinels `decoded`.
fn named_by_headers(plan: &Plan, decoded: bool) -> Option<usize> {
    let calls = match plan.method {
        MethodHeader::Exact => true,
        MethodHeader::Sentinel => decoded,
        MethodHeader::Absent | MethodHeader::Other(_) => false,
    };
    match plan.name {
        _ if !calls => None,
        NameHeader::Body => tool_index(plan.tool),
        NameHeader::Sentinel if decoded => tool_index(plan.tool),
        NameHeader::Tool(tool) => Some(tool),
        _ => None,
    }
}

/// How the routing headers may be read before the body is: verbatim, and where a sentinel is
/// sent also decoded, since whether the check before the body decodes it is the server's choice.
fn readings(plan: &Plan) -> &'static [bool] {
    let sentinel =
        matches!(plan.method, MethodHeader::Sentinel) || matches!(plan.name, NameHeader::Sentinel);
    if sentinel { &[false, true] } else { &[false] }
}

/// What a request whose token grants `granted` gets.
fn served(plan: &Plan, granted: &BTreeSet<String>, decoded: bool) -> Outcome {
    if let Some(tool) = named_by_headers(plan, decoded).filter(|tool| !allows(granted, *tool)) {
        return Outcome::Forbidden {
            tool,
            from_body: false,
        };
    }
    if !matches!(plan.body, BodyForm::Json) {
        return Outcome::ParseError;
    }
    if !matches!(plan.method, MethodHeader::Exact | MethodHeader::Sentinel) {
        return Outcome::HeaderMismatch;
    }
    let name_agrees = match plan.name {
        NameHeader::Body | NameHeader::Sentinel => true,
        NameHeader::Tool(tool) => TOOLS[tool].0 == plan.tool,
        NameHeader::Unknown(name) => name == plan.tool,
        NameHeader::Absent => false,
    };
    if !name_agrees {
        return Outcome::HeaderMismatch;
    }
    let Some(tool) = tool_index(plan.tool) else {
        return Outcome::UnknownTool;
    };
    if !allows(granted, tool) {
        return Outcome::Forbidden {
            tool,
            from_body: true,
        };
    }
    Outcome::Ran(tool)
}

fn predict(plan: &Plan, case: &Case, reference: &Reference) -> Prediction {
    let seen = seen(&case.values("authorization"), reference);
    let mut allowed = Vec::new();
    let mut challenge_scopes = Vec::new();
    for &decoded in readings(plan) {
        match &seen {
            Seen::Nothing => allowed.push(Outcome::AskForToken),
            Seen::Refused => allowed.push(Outcome::InvalidToken),
            Seen::Granting(granted) => allowed.push(served(plan, granted, decoded)),
            Seen::Either(granted) => {
                allowed.extend([served(plan, granted, decoded), Outcome::InvalidToken]);
            }
        }
        // A challenge names what the named tool requires, or everything the server's tools do.
        challenge_scopes.push(
            named_by_headers(plan, decoded)
                .map(|tool| TOOLS[tool].1.join(" "))
                .filter(|scopes| !scopes.is_empty())
                .unwrap_or_else(|| SUPPORTED.to_owned()),
        );
    }
    allowed.dedup();
    challenge_scopes.dedup();
    Prediction {
        seen,
        allowed,
        challenge_scopes,
    }
}

// ---------------------------------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Received {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

async fn send(client: &reqwest::Client, origin: &str, case: &Case) -> Result<Received, String> {
    let mut request = client.post(format!("{origin}{}", case.path));
    for (name, value) in &case.headers {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        request = request.header(*name, value);
    }
    let response = within("the answer's head", request.body(case.body.clone()).send())
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = within("the answer's body", response.bytes())
        .await
        .map_err(|e| format!("body broken: {e}"))?;
    Ok(Received {
        status,
        headers,
        body: body.to_vec(),
    })
}

/// The official schema's response definitions, compiled once.
struct Schemas {
    error: jsonschema::Validator,
    result: jsonschema::Validator,
}

/// The one challenge of a refusal, after what every one shares: the scheme and the metadata URL.
fn challenge_of(reply: &Received) -> Result<Challenge, String> {
    let challenge = Challenge::try_bearer(&reply.headers)?;
    ensure!(
        challenge.quoted("resource_metadata") == Some(METADATA_URL),
        "challenge {:?}",
        challenge.text
    );
    Ok(challenge)
}

/// What the reply says happened, once every invariant of its kind holds.
fn observe(
    reply: &Received,
    plan: &Plan,
    prediction: &Prediction,
    schemas: &Schemas,
) -> Result<Outcome, String> {
    ensure!(reply.status < 500, "a server error");
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    ensure!(
        content_type.starts_with("application/json"),
        "content type {content_type:?}"
    );
    let body: Value = serde_json::from_slice(&reply.body).map_err(|e| format!("not JSON: {e}"))?;
    let id = body.get("id");
    let echoes = id == Some(&json!(plan.id));
    let challenged = reply.headers.contains_key("www-authenticate");
    let Some(error) = body.get("error") else {
        conforms(&schemas.result, "CallToolResultResponse", &body)?;
        ensure!(reply.status == 200, "a result under {}", reply.status);
        ensure!(echoes, "the result's id {id:?} is not the request's");
        ensure!(!challenged, "a challenge with a result");
        let text = body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        return tool_index(text)
            .map(Outcome::Ran)
            .ok_or_else(|| format!("no tool answers {text:?}"));
    };
    conforms(&schemas.error, "JSONRPCErrorResponse", &body)?;
    let code = error["code"].as_i64().unwrap_or_default();
    match (reply.status, code) {
        (401, INVALID_REQUEST) => {
            ensure!(id.is_none(), "the body was not read, yet the id is {id:?}");
            let challenge = challenge_of(reply)?;
            let scope = challenge.get("scope").unwrap_or_default();
            ensure!(
                prediction.challenge_scopes.iter().any(|s| s == scope),
                "the challenge asks for {scope:?}, expected one of {:?}",
                prediction.challenge_scopes
            );
            match challenge.get("error") {
                None => {
                    ensure!(
                        challenge.names() == ["resource_metadata", "scope"],
                        "{challenge:?}"
                    );
                    Ok(Outcome::AskForToken)
                }
                Some("invalid_token") => {
                    ensure!(
                        challenge.names()
                            == ["error", "error_description", "resource_metadata", "scope"],
                        "{challenge:?}"
                    );
                    Ok(Outcome::InvalidToken)
                }
                Some(other) => Err(format!("a 401 with error {other:?}")),
            }
        }
        (403, INVALID_REQUEST) => {
            let challenge = challenge_of(reply)?;
            ensure!(
                challenge.get("error") == Some("insufficient_scope"),
                "{challenge:?}"
            );
            ensure!(
                challenge.names() == ["error", "error_description", "resource_metadata", "scope"],
                "{challenge:?}"
            );
            let asked: BTreeSet<&str> = challenge
                .get("scope")
                .unwrap_or_default()
                .split(' ')
                .collect();
            let tool = TOOLS
                .iter()
                .position(|(_, scopes)| scopes.iter().copied().collect::<BTreeSet<_>>() == asked)
                .ok_or_else(|| format!("no tool requires exactly {asked:?}"))?;
            ensure!(
                error["data"]["requiredScopes"] == json!(TOOLS[tool].1),
                "requiredScopes {} for {}",
                error["data"],
                TOOLS[tool].0
            );
            ensure!(id.is_none() || echoes, "the id {id:?} is not the request's");
            Ok(Outcome::Forbidden {
                tool,
                from_body: id.is_some(),
            })
        }
        (400, PARSE_ERROR) => {
            ensure!(id.is_none(), "an id {id:?} from a body that is not JSON");
            ensure!(!challenged, "a challenge with a parse error");
            Ok(Outcome::ParseError)
        }
        (400, HEADER_MISMATCH) => {
            ensure!(echoes, "the id {id:?} is not the request's");
            ensure!(!challenged, "a challenge with a header mismatch");
            Ok(Outcome::HeaderMismatch)
        }
        (200, INVALID_PARAMS) => {
            ensure!(echoes, "the id {id:?} is not the request's");
            ensure!(!challenged, "a challenge with an unknown tool");
            let message = error["message"].as_str().unwrap_or_default();
            ensure!(message.contains("Unknown tool"), "message {message:?}");
            Ok(Outcome::UnknownTool)
        }
        (status, code) => Err(format!("an unexpected {status} with {code}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// Outcomes counted by credentials and by what the model made of them.
#[derive(Default)]
struct Stats {
    by_outcome: BTreeMap<(u16, String), usize>,
    by_credentials: BTreeMap<(&'static str, &'static str, u16, String), usize>,
}

impl Stats {
    fn record(&mut self, plan: &Plan, seen: &Seen, status: u16, outcome: Outcome) {
        *self
            .by_outcome
            .entry((status, outcome.label()))
            .or_default() += 1;
        *self
            .by_credentials
            .entry((
                plan.auth.label(plan.query),
                seen.label(),
                status,
                outcome.label(),
            ))
            .or_default() += 1;
    }

    fn count(&self, keep: impl Fn(u16, &str) -> bool) -> usize {
        self.by_outcome
            .iter()
            .filter(|((status, label), _)| keep(*status, label))
            .map(|(_, n)| n)
            .sum()
    }

    fn print(&self) {
        println!("status and outcome:");
        for ((status, label), n) in &self.by_outcome {
            println!("  {status:>3} {label:<50} {n:>8}");
        }
        println!("by credentials sent and what the model made of them:");
        for ((sent, seen, status, label), n) in &self.by_credentials {
            println!("  {sent:<24} {seen:<15} {status:>3} {label:<50} {n:>8}");
        }
    }
}

#[test]
fn every_mutated_credential_gets_the_status_and_challenge_its_token_and_scopes_warrant() {
    let runtime = fuzz_runtime();
    let issuer = runtime.block_on(within("the issuer to start", Issuer::start()));
    let calls: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let server = runtime.block_on(within(
        "the resource server to start",
        TestServer::start(server(&issuer, &calls)),
    ));
    let origin = format!("http://{}", server.addr);
    let minter = Minter {
        issuer: &issuer,
        issued: Mutex::new(BTreeMap::new()),
    };
    let schemas = Schemas {
        error: official("JSONRPCErrorResponse"),
        result: official("CallToolResultResponse"),
    };
    let client = common::client();
    let stats = Mutex::new(Stats::default());
    let cases = fuzz_cases("MCP_OAUTH_FUZZ_CASES", DEFAULT_CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let outcome = runner.run(&plan(), |plan| {
        let (case, reference) = build(&plan, &minter);
        let prediction = predict(&plan, &case, &reference);
        let before = counts(&calls);
        let reply = runtime
            .block_on(send(&client, &origin, &case))
            .map_err(TestCaseError::fail)?;
        let ran = counts(&calls);
        let explain = |problem: String| {
            TestCaseError::fail(format!(
                "{problem}\nrequest: {case:?}\nprediction: {prediction:?}\nreply: {} {:?}\n{}",
                reply.status,
                reply.headers,
                String::from_utf8_lossy(&reply.body)
            ))
        };
        let observed = observe(&reply, &plan, &prediction, &schemas).map_err(explain)?;
        if !prediction.allowed.contains(&observed) {
            return Err(explain(format!(
                "{observed:?}, expected one of {:?}",
                prediction.allowed
            )));
        }
        let mut expected = before;
        if let Outcome::Ran(tool) = observed {
            expected[tool] += 1;
        }
        if ran != expected {
            return Err(explain(format!(
                "the tools have run {ran:?} times, expected {expected:?}"
            )));
        }
        stats
            .lock()
            .unwrap()
            .record(&plan, &prediction.seen, reply.status, observed);
        Ok(())
    });
    let elapsed = started.elapsed();
    let stats = stats.into_inner().unwrap();
    stats.print();
    let fetches = issuer.fetches();
    println!(
        "{cases} cases in {elapsed:.1?} ({:.0} a second); the JWKS was fetched {fetches} times",
        f64::from(cases) / elapsed.as_secs_f64()
    );
    if let Err(failure) = outcome {
        panic!("{failure}");
    }

    for label in [
        "asks for a token",
        "invalid_token",
        "-32700",
        "-32020",
        "-32602 unknown tool",
    ] {
        assert!(stats.count(|_, l| l == label) > 0, "no request got {label}");
    }
    for (name, scopes) in TOOLS {
        assert!(
            stats.count(|_, l| l == format!("result {name}")) > 0,
            "{name} never ran"
        );
        if !scopes.is_empty() {
            assert!(
                stats.count(|status, l| status == 403 && l.contains(&format!(" {name} "))) > 0,
                "{name} was never refused"
            );
        }
    }
    for side in ["headers", "body"] {
        assert!(
            stats.count(|status, l| status == 403 && l.ends_with(&format!("the {side})"))) > 0,
            "no tool was refused from the {side}"
        );
    }

    // Unknown key ids cost at most one fetch per cooldown, and known ones one per refresh age.
    let secs = elapsed.as_secs();
    let bound = 2
        + (secs / DEFAULT_JWKS_COOLDOWN.as_secs()) as usize
        + (secs / DEFAULT_JWKS_MAX_AGE.as_secs()) as usize;
    assert!(
        (1..=bound).contains(&fetches),
        "the JWKS was fetched {fetches} times in {elapsed:?}, at most {bound} expected"
    );

    // The server still serves.
    runtime.block_on(async {
        let health = server.healthz().await;
        assert_eq!((health.status, health.text.as_str()), (200, "ok"));
        let token = minter.issued(&Grant {
            key: Key::RsaA,
            mask: 0b10,
            form: Form::Scope,
        });
        let before = counts(&calls);
        let reply = common::Call::call_tool("docs_move", json!({}))
            .header("authorization", &format!("Bearer {token}"))
            .send(&server)
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        common::assert_conforms("CallToolResultResponse", &reply.json());
        assert_eq!(reply.result()["content"][0]["text"], "docs_move");
        let mut expected = before;
        expected[2] += 1;
        assert_eq!(counts(&calls), expected);
    });
}
