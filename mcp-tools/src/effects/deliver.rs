//! The delivery worker: claims due effects from the store under a lease, runs their handlers
//! concurrently, each under a timeout, and settles each attempt.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use futures_util::FutureExt;
use futures_util::future::join_all;

use super::{DeliveryPolicy, EffectError, Handler};
use crate::store::{Claim, ClaimedEffect, Settlement, Store};
use crate::sync::{read, write};

/// The server's delivery of effects: its handlers, its policy, and the worker it starts on the
/// first request (or when the server starts serving), which ends once the server is dropped.
pub(crate) struct Deliverer {
    store: Arc<dyn Store>,
    handlers: HashMap<&'static str, Handler>,
    kinds: Vec<String>,
    policy: DeliveryPolicy,
    /// The entity kinds some tool emits effects for: reads of them report effects.
    reporting: RwLock<HashSet<&'static str>>,
    /// This worker's name, unique across processes: its leases' owners start with it.
    id: String,
    claims: AtomicU64,
    started: AtomicBool,
}

impl Deliverer {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        handlers: Vec<Handler>,
        policy: DeliveryPolicy,
        reporting: HashSet<&'static str>,
    ) -> Self {
        let mut id = String::from("worker-");
        let random: [u8; 8] = rand_bytes();
        for byte in random {
            id.push_str(&format!("{byte:02x}"));
        }
        let kinds = handlers
            .iter()
            .map(|handler| handler.kind.to_owned())
            .collect();
        Deliverer {
            store,
            handlers: handlers
                .into_iter()
                .map(|handler| (handler.kind, handler))
                .collect(),
            kinds,
            policy,
            reporting: RwLock::new(reporting),
            id,
            claims: AtomicU64::new(0),
            started: AtomicBool::new(false),
        }
    }

    /// Whether a handler is registered for effects of `kind`.
    pub(crate) fn handles(&self, kind: &str) -> bool {
        self.handlers.contains_key(kind)
    }

    /// Whether reads of entity `kind` report effects.
    pub(crate) fn reports(&self, kind: &str) -> bool {
        read(&self.reporting).contains(kind)
    }

    /// Reads of entity `kind` report effects from now on (a tool emitting them was added).
    pub(crate) fn report(&self, kind: &'static str) {
        write(&self.reporting).insert(kind);
    }

    /// Starts the worker on the current tokio runtime, once; outside one, nothing happens and
    /// the next call tries again.
    pub(crate) fn start(self: &Arc<Self>) {
        if self.started.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        runtime.spawn(run(Arc::downgrade(self), self.store.outbox_signal()));
    }

    /// One claim and its deliveries: how many effects it claimed.
    async fn round(&self) -> usize {
        let owner = format!(
            "{}-{}",
            self.id,
            self.claims.fetch_add(1, Ordering::Relaxed)
        );
        let lease_ms = i64::try_from(self.policy.lease.as_millis()).unwrap_or(i64::MAX);
        let claim = Claim::new(&owner, lease_ms, self.policy.batch, self.kinds.clone());
        let claimed = match self.store.claim_effects(claim).await {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::warn!(%error, "claiming effects to deliver failed; trying again later");
                return 0;
            }
        };
        let count = claimed.len();
        join_all(
            claimed
                .into_iter()
                .map(|effect| self.deliver(&owner, effect)),
        )
        .await;
        count
    }

    /// Runs one attempt and records how it ended.
    async fn deliver(&self, owner: &str, effect: ClaimedEffect) {
        let Some(handler) = self.handlers.get(effect.kind.as_str()) else {
            return;
        };
        let (key, kind, attempt) = (effect.key.clone(), effect.kind.clone(), effect.attempt);
        let span = tracing::info_span!("effect", key = %key, kind = %kind, attempt);
        let call = std::panic::AssertUnwindSafe(handler.call(effect)).catch_unwind();
        let outcome = match tokio::time::timeout(self.policy.timeout, call).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(EffectError::retry("the effect's handler panicked")),
            Err(_) => Err(EffectError::retry(format!(
                "the handler did not finish within {:?}",
                self.policy.timeout
            ))),
        };
        let settlement = match outcome {
            Ok(result) => Settlement::Delivered(result),
            Err(error) if error.is_permanent() => Settlement::Failed(error.message),
            Err(error) if attempt >= self.policy.max_attempts => Settlement::Failed(format!(
                "{} (gave up after {attempt} attempts)",
                error.message
            )),
            Err(error) => {
                let delay =
                    i64::try_from(self.policy.delay_after(attempt).as_millis()).unwrap_or(i64::MAX);
                let now = i64::try_from(self.store.now_millis()).unwrap_or(i64::MAX);
                Settlement::Retry {
                    error: error.message,
                    at_ms: now.saturating_add(delay),
                }
            }
        };
        let _entered = span.enter();
        match self.store.settle_effect(&key, owner, settlement).await {
            Ok(true) => {}
            // Its lease lapsed while the handler ran, and another worker took it over: that
            // worker's attempt, with the same key, decides.
            Ok(false) => tracing::warn!("an effect's lease lapsed before its attempt was settled"),
            // The lease lapses and the effect is attempted again, with the same key.
            Err(error) => tracing::warn!(%error, "settling an effect's attempt failed"),
        }
    }
}

/// The worker's loop: a round whenever this process emitted an effect, and every poll
/// interval for the others' and for retries. It holds only the store's signal while it waits,
/// so dropping the server ends it.
async fn run(deliverer: Weak<Deliverer>, signal: Arc<tokio::sync::Notify>) {
    loop {
        let Some(this) = deliverer.upgrade() else {
            return;
        };
        let (batch, interval) = (this.policy.batch, this.policy.poll_interval);
        let claimed = this.round().await;
        drop(this);
        if claimed < batch {
            let _ = tokio::time::timeout(interval, signal.notified()).await;
        }
    }
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    // Without system randomness the name is still unique enough within a process; leases of
    // two processes with the same name would only let one settle the other's attempt.
    let _ = getrandom::fill(&mut bytes);
    bytes
}
