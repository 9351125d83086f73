//! The delivery worker: claims due effects from the store under a lease, runs their handlers
//! concurrently, each under a timeout, and settles each attempt.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use futures_util::FutureExt;
use futures_util::future::join_all;

use super::{DeliveryPolicy, EffectError, Handler};
use serde_json::Value;

use crate::store::outbox::keepable;
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
        // The process id and the time as well as random bytes: two workers never share a name,
        // even where the system's randomness failed.
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let mut id = format!("worker-{}-{started:x}-", std::process::id());
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
        if attempt > self.policy.max_attempts {
            // Every attempt ended with its worker (its process died, or its settlement was
            // lost): the cap holds for those too.
            let gave_up = Settlement::Failed(format!(
                "no attempt finished: {} were started and none settled",
                attempt - 1
            ));
            self.settle(&key, owner, gave_up, &span).await;
            return;
        }
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
            Ok(result) if keepable(&result) => Settlement::Delivered(result),
            // Delivered all the same: only what it returned is not kept.
            Ok(_) => Settlement::Delivered(Value::String(
                "the handler's result nests too deeply to keep".to_owned(),
            )),
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
        self.settle(&key, owner, settlement, &span).await;
    }

    /// Records how an attempt ended, if `owner` still holds the effect's lease.
    async fn settle(&self, key: &str, owner: &str, settlement: Settlement, span: &tracing::Span) {
        let settled = self.store.settle_effect(key, owner, settlement).await;
        let _entered = span.enter();
        match settled {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::auth::Principal;
    use crate::effects::{Delivery, Effect, Effects};
    use crate::store::memory::MemoryStore;
    use crate::store::{
        CreateRequest, EffectState, Entity, ManualClock, MutationRequest, Outbox, StoreConfig,
        Transition,
    };

    #[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
    struct Gauge {
        level: u32,
    }

    impl Entity for Gauge {
        const KIND: &'static str = "gauge";
        const PREFIX: &'static str = "gau";
    }

    #[derive(Serialize, Deserialize)]
    struct Ping;

    impl Effect for Ping {
        const KIND: &'static str = "ping";
    }

    /// An effect whose every attempt ended with its worker (claimed, never settled) is failed
    /// once its attempts run out, without calling its handler again.
    #[tokio::test]
    async fn attempts_whose_workers_died_count_against_the_cap() {
        let clock = ManualClock::at_millis(1_000_000);
        let store = Arc::new(MemoryStore::new(StoreConfig {
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        }));
        let alice = Principal::subject("alice");
        let created = store
            .create(CreateRequest::typed(alice.clone(), &Gauge { level: 1 }).unwrap())
            .await
            .unwrap();
        let handle = created.applied().unwrap().handle.clone();
        let emit = Transition::typed_with_effects(|_: &mut Gauge, effects: &mut Effects<Ping>| {
            effects.emit(Ping);
            Ok::<_, String>(())
        });
        let request = MutationRequest::new(Gauge::kind(), alice, &handle);
        store.mutate(request, emit).await.unwrap();
        // Two workers claim it and die: their leases lapse.
        for dead in ["dead-1", "dead-2"] {
            let claim = Claim::new(dead, 10, 1, vec!["ping".to_owned()]);
            assert_eq!(store.claim_effects(claim).await.unwrap().len(), 1);
            clock.advance(Duration::from_millis(20));
        }
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let handler = Handler::new(move |_: Delivery<Ping>| {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<_, EffectError>(()))
        });
        let deliverer = Deliverer::new(
            store.clone() as Arc<dyn Store>,
            vec![handler],
            DeliveryPolicy::default().max_attempts(2),
            HashSet::new(),
        );
        assert_eq!(deliverer.round().await, 1);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the handler was not called a third time"
        );
        let statuses = store.effect_statuses(&handle, 10).await.unwrap();
        assert_eq!(statuses[0].state, EffectState::Failed, "{statuses:?}");
        assert_eq!(statuses[0].attempts, 3);
        assert!(
            statuses[0]
                .error
                .as_deref()
                .unwrap()
                .contains("none settled")
        );
    }
}
