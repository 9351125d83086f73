//! The outbox: effects a transition emits, stored in the same atomic unit as the change and its
//! ledger record, then delivered by a worker that leases them through the store.
//!
//! A transition cannot call an external API itself (it runs inside the store's transaction and
//! may run more than once); it *emits* an [`Effect`], a typed value saying what should happen
//! outside. The store writes it beside the new version, so an effect exists exactly when its
//! change was committed: a refused change, a `stale_view`, a replay or a transition that ran
//! again with more items in hand emits nothing more. Each effect gets an idempotency key derived
//! from its change (the caller, the operation id, the resource, the version made, the effect's
//! index: [`effect_key`]), stored with it, so it is the same however often delivery is retried,
//! for the external API to deduplicate on.
//!
//! The [`Outbox`] trait is what every store offers the delivery worker: claim due effects under
//! a lease (one replica delivers each), settle them (delivered, retry later, failed for good),
//! and report their states by resource.

use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::StoreFuture;

/// A side effect outside the store (a payment, an e-mail, a call to another service) that a
/// `mutates` tool emits through [`Effects`] and a handler registered on the server delivers.
///
/// ```
/// use mcp_tools::effects::Effect;
/// use serde::{Deserialize, Serialize};
///
/// /// Charge the customer's card.
/// #[derive(Serialize, Deserialize)]
/// struct Charge {
///     amount_eur: u32,
///     description: String,
/// }
///
/// impl Effect for Charge {
///     const KIND: &'static str = "charge";
/// }
/// ```
pub trait Effect: Serialize + DeserializeOwned + Send + 'static {
    /// The effect's name: the delivery handler registered for it receives it. Unique per
    /// server; stored with each effect, so renaming it strands the effects already emitted.
    const KIND: &'static str;
}

/// What a transition emits: the effects of type `E` to deliver once its change is committed.
///
/// A `mutates` tool takes `effects: &mut Effects<E>` next to its resource; the runtime hands it
/// an empty one on each run of the transition, so only the effects of the run that was
/// committed are kept.
pub struct Effects<E> {
    emitted: Vec<Value>,
    unencodable: Option<String>,
    kind: PhantomData<fn(E)>,
}

impl<E: Effect> Effects<E> {
    pub(crate) fn new() -> Self {
        Effects {
            emitted: Vec::new(),
            unencodable: None,
            kind: PhantomData,
        }
    }

    /// Emits `effect`: it is delivered after the change is committed, and not at all when the
    /// transition fails.
    pub fn emit(&mut self, effect: E) {
        match serde_json::to_value(&effect) {
            Ok(value) => self.emitted.push(value),
            Err(error) => {
                self.unencodable
                    .get_or_insert_with(|| format!("cannot encode a {} effect: {error}", E::KIND));
            }
        }
    }

    /// How many effects were emitted so far.
    pub fn len(&self) -> usize {
        self.emitted.len()
    }

    /// Whether none was emitted.
    pub fn is_empty(&self) -> bool {
        self.emitted.is_empty()
    }

    /// The emitted effects as the store keeps them, or why one could not be encoded.
    pub(crate) fn into_emitted(self) -> Result<Vec<Emitted>, String> {
        if let Some(error) = self.unencodable {
            return Err(error);
        }
        Ok(self
            .emitted
            .into_iter()
            .map(|payload| Emitted {
                kind: E::KIND,
                payload,
            })
            .collect())
    }
}

impl<E> fmt::Debug for Effects<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Effects")
            .field("emitted", &self.emitted.len())
            .finish()
    }
}

/// One effect as a transition emitted it.
#[derive(Debug, Clone)]
pub(crate) struct Emitted {
    pub(crate) kind: &'static str,
    pub(crate) payload: Value,
}

/// An effect as the boundary hands it to the store, to write with the change.
#[derive(Debug, Clone)]
pub(crate) struct OutboxEntry {
    pub(crate) key: String,
    pub(crate) kind: String,
    pub(crate) handle: String,
    pub(crate) principal: String,
    pub(crate) payload: Value,
    pub(crate) created_at: i64,
}

/// The idempotency key of the `index`-th effect of a change: derived from the caller, the
/// operation id, the resource and the version the change produced, so the external API sees one
/// key however often the effect is delivered (the key is stored with it) and a retry of the
/// request replays the change instead of emitting again; an operation id reused after its
/// ledger record expired makes a new change, and so new keys. 128 bits: `eff_` and 32 hex digits.
pub(crate) fn effect_key(
    principal: &str,
    operation_id: Option<&str>,
    handle: &str,
    version: u64,
    index: usize,
) -> String {
    let mut digest = Sha256::new();
    digest.update(b"mcp-tools effect\0");
    for part in [principal, operation_id.unwrap_or(""), handle] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    digest.update([u8::from(operation_id.is_some())]);
    digest.update(version.to_be_bytes());
    digest.update((index as u64).to_be_bytes());
    let bytes = digest.finalize();
    let mut key = String::with_capacity(36);
    key.push_str("eff_");
    for byte in &bytes[..16] {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// Whether a value can be kept in the outbox and read back: no deeper than a stored state may
/// be (a JSON parser refuses what nests too deep).
pub(crate) fn keepable(value: &Value) -> bool {
    !super::depth::deeper_than(value, super::depth::MAX_DEPTH)
}

/// Where an effect is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EffectState {
    /// Not delivered yet: waiting for its first attempt, being delivered, or waiting to be
    /// retried after a failed attempt (`error` says why it failed).
    Pending,
    /// The handler succeeded; `result` is what it returned.
    Delivered,
    /// Given up: the handler refused it for good, or every attempt failed (`error` says why).
    /// Nothing delivers it again.
    Failed,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl EffectState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EffectState::Pending => "pending",
            EffectState::Delivered => "delivered",
            EffectState::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(EffectState::Pending),
            "delivered" => Some(EffectState::Delivered),
            "failed" => Some(EffectState::Failed),
            _ => None,
        }
    }
}

/// An effect a change emitted, as its outcome names it: deliver state `pending` at first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EffectTicket {
    /// The effect's idempotency key, the one its handler passes to the external API.
    pub key: String,
    /// The effect's kind ([`Effect::KIND`]).
    pub kind: String,
}

/// An effect's delivery, as a read of its resource reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EffectStatus {
    /// The effect's idempotency key.
    pub key: String,
    /// The effect's kind.
    pub kind: String,
    /// Where its delivery is.
    pub state: EffectState,
    /// How many delivery attempts were started.
    pub attempts: u32,
    /// What the handler returned, once delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the last attempt failed (pending: it will be retried; failed: it will not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A due effect a delivery worker claimed: nobody else delivers it until its lease lapses.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimedEffect {
    /// The idempotency key.
    pub key: String,
    /// The kind.
    pub kind: String,
    /// The resource whose change emitted it.
    pub handle: String,
    /// The principal that made the change (its key).
    pub principal: String,
    /// The effect as emitted.
    pub payload: Value,
    /// This attempt's number, from 1: attempts whose worker died count too.
    pub attempt: u32,
}

/// What a delivery worker asks of [`Outbox::claim_effects`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Claim {
    /// The lease's owner, unique per claim: only it may settle what it claimed.
    pub owner: String,
    /// How long the lease lasts, in milliseconds: past it, another worker may claim the effect
    /// again (its worker is presumed dead).
    pub lease_ms: i64,
    /// The most effects to claim.
    pub limit: usize,
    /// The kinds this worker has handlers for.
    pub kinds: Vec<String>,
}

impl Claim {
    /// A claim of up to `limit` effects of `kinds` for `lease_ms` milliseconds, by `owner`.
    pub fn new(owner: impl Into<String>, lease_ms: i64, limit: usize, kinds: Vec<String>) -> Self {
        Claim {
            owner: owner.into(),
            lease_ms,
            limit,
            kinds,
        }
    }
}

/// How a delivery attempt ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Settlement {
    /// Delivered; the handler's result.
    Delivered(Value),
    /// Failed; try again at `at_ms` (the store's clock, milliseconds since the Unix epoch).
    Retry {
        /// Why the attempt failed.
        error: String,
        /// When the next attempt is due.
        at_ms: i64,
    },
    /// Failed for good (dead-lettered): nothing delivers it again.
    Failed(String),
}

/// The outbox every store keeps beside its resources (see [`effects`](crate::effects)). Every
/// method is atomic.
pub trait Outbox: Send + Sync {
    /// Claims up to `claim.limit` pending effects of `claim.kinds` that are due and not leased
    /// (or whose lease lapsed), oldest first: each gets its attempt counted and a lease for
    /// `claim.owner`. Two concurrent claims never get the same effect.
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>>;

    /// Settles effect `key` for the lease `owner` holds: `false`, and nothing changes, when the
    /// effect is no longer leased by `owner` (its lease lapsed and another worker claimed it)
    /// or is no longer pending.
    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool>;

    /// The effects emitted by changes of resource `handle`, oldest first, at most `limit` of
    /// the newest.
    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>>;

    /// Wakes this process's delivery worker: an effect was just committed here.
    fn effects_emitted(&self) {
        self.outbox_signal().notify_one();
    }

    /// What this process's delivery worker waits on between its polls (shared: every call
    /// gives the same one).
    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify>;
}

impl<S: Outbox + ?Sized> Outbox for std::sync::Arc<S> {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        (**self).claim_effects(claim)
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        (**self).settle_effect(key, owner, settlement)
    }

    fn effect_statuses<'a>(
        &'a self,
        handle: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<EffectStatus>> {
        (**self).effect_statuses(handle, limit)
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        (**self).outbox_signal()
    }
}

/// How many effects a read of a resource reports, the newest.
pub(crate) const STATUSES_PER_READ: usize = 20;

/// A stored effect's row, as the SQL stores read it back for [`Outbox::effect_statuses`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn status_from_columns(
    key: String,
    kind: String,
    state: &str,
    attempts: i64,
    result: Option<&str>,
    error: Option<String>,
) -> Result<EffectStatus, super::error::StoreError> {
    use super::error::StoreError;
    Ok(EffectStatus {
        key,
        kind,
        state: EffectState::parse(state)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown effect state {state:?}")))?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        // A result that does not parse back (written by something else) is shown as its text.
        result: result.map(|text| {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        }),
        error,
    })
}

/// The columns a settlement writes: state, result (JSON text), error, next attempt.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn settlement_columns(
    settlement: &Settlement,
) -> (&'static str, Option<String>, Option<&str>, Option<i64>) {
    match settlement {
        Settlement::Delivered(result) => (
            EffectState::Delivered.as_str(),
            Some(result.to_string()),
            None,
            None,
        ),
        Settlement::Retry { error, at_ms } => (
            EffectState::Pending.as_str(),
            None,
            Some(error.as_str()),
            Some(*at_ms),
        ),
        Settlement::Failed(error) => (
            EffectState::Failed.as_str(),
            None,
            Some(error.as_str()),
            None,
        ),
    }
}

/// A claimed effect's payload, from its JSON column. One that does not parse (written by
/// something else) is handed on as `null`: its handler cannot decode it and fails it for good,
/// rather than every claim failing on it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn payload_from_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_one_effect_of_one_change() {
        let first = effect_key("alice", Some("op-1"), "bsk_a", 2, 0);
        assert_eq!(first, effect_key("alice", Some("op-1"), "bsk_a", 2, 0));
        assert_ne!(first, effect_key("bob", Some("op-1"), "bsk_a", 2, 0));
        assert_ne!(first, effect_key("alice", Some("op-2"), "bsk_a", 2, 0));
        assert_ne!(first, effect_key("alice", Some("op-1"), "bsk_a", 2, 1));
        // The same operation id applied again once its record expired: another change.
        assert_ne!(first, effect_key("alice", Some("op-1"), "bsk_a", 3, 0));
        assert_ne!(first, effect_key("alice", Some("op-1"), "bsk_b", 2, 0));
        assert_eq!(first.len(), 36);
        assert!(first.starts_with("eff_"));
    }

    #[test]
    fn parts_of_a_key_do_not_run_into_each_other() {
        let first = effect_key("alice", None, "bsk_a", 2, 0);
        assert_ne!(first, effect_key("alice", Some(""), "bsk_a", 2, 0));
        assert_ne!(
            effect_key("ab", Some("c"), "h", 1, 0),
            effect_key("a", Some("bc"), "h", 1, 0)
        );
    }

    #[derive(Serialize, Deserialize)]
    struct Ping(u32);
    impl Effect for Ping {
        const KIND: &'static str = "ping";
    }

    #[test]
    fn emitted_effects_keep_their_order_and_kind() {
        let mut effects = Effects::<Ping>::new();
        assert!(effects.is_empty());
        effects.emit(Ping(1));
        effects.emit(Ping(2));
        assert_eq!(effects.len(), 2);
        let emitted = effects.into_emitted().unwrap();
        assert_eq!(emitted.len(), 2);
        assert_eq!(emitted[0].kind, "ping");
        assert_eq!(emitted[1].payload, serde_json::json!(2));
    }

    struct Unencodable;
    impl Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("no"))
        }
    }
    impl<'de> Deserialize<'de> for Unencodable {
        fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
            Ok(Unencodable)
        }
    }
    impl Effect for Unencodable {
        const KIND: &'static str = "unencodable";
    }

    #[test]
    fn an_unencodable_effect_fails_the_transition() {
        let mut effects = Effects::<Unencodable>::new();
        effects.emit(Unencodable);
        let error = effects.into_emitted().unwrap_err();
        assert!(error.contains("unencodable"), "{error}");
    }
}
