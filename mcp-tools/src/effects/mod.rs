//! External effects, exactly once per idempotency key: a `mutates` tool emits them, the store
//! keeps them with the change, and a delivery worker hands each to the handler registered for
//! its kind.
//!
//! A transition runs inside the store's atomic unit and may run more than once, so it must not
//! call a payment API itself. It emits an [`Effect`] through [`Effects`]; the store writes the
//! effect in the same transaction as the new version and the operation id's ledger record (the
//! *outbox*), so an effect exists exactly when its change was committed. The outcome names each
//! effect (`applied.effects`: key and kind), and a replay of the same operation id never emits
//! it again.
//!
//! The tool set registers a handler per kind ([`ToolSet::effect_handler`](crate::tools::ToolSet::effect_handler));
//! the server's delivery worker claims due effects through the store under a lease (on
//! PostgreSQL or a shared SQLite file, one replica delivers each), calls the handler with a
//! [`Delivery`], and records how it went: delivered with the handler's result, retried later
//! with a growing delay, or failed for good after [`DeliveryPolicy::max_attempts`] (or at once
//! when the handler says the failure is permanent). A worker that dies mid-delivery leaves its
//! lease to lapse, and the effect is delivered again, with the same
//! [`idempotency key`](Delivery::idempotency_key): pass it to the external API, which is what
//! makes the effect happen once. Reads of the resource report each effect's state
//! (`effects` in the outcome).
//!
//! ```
//! use mcp_tools::effects::{Delivery, Effect, EffectError, Effects};
//! use mcp_tools::store::{Entity, Lifecycle};
//! use mcp_tools::{McpServer, MemoryStore, tool, tools};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Serialize, Deserialize, JsonSchema, Entity)]
//! #[entity(kind = "order", prefix = "ord", lifecycle = lifecycle)]
//! struct Order {
//!     total_eur: u32,
//!     paid: bool,
//! }
//!
//! impl Order {
//!     fn lifecycle(&self) -> Lifecycle {
//!         if self.paid { Lifecycle::Terminal } else { Lifecycle::Active }
//!     }
//! }
//!
//! /// Charge the customer.
//! #[derive(Serialize, Deserialize)]
//! struct Charge {
//!     amount_eur: u32,
//! }
//!
//! impl Effect for Charge {
//!     const KIND: &'static str = "charge";
//! }
//!
//! /// Pays the order: the charge is made once the payment is recorded.
//! #[tool(mutates = Order, terminal)]
//! fn order_pay(order: &mut Order, effects: &mut Effects<Charge>) -> u32 {
//!     order.paid = true;
//!     effects.emit(Charge { amount_eur: order.total_eur });
//!     order.total_eur
//! }
//!
//! async fn charge(delivery: Delivery<Charge>) -> Result<String, EffectError> {
//!     // A real handler sends `delivery.idempotency_key()` with the request, so a repeat
//!     // delivery is not a second charge.
//!     Ok(format!("charged {} EUR under {}", delivery.effect().amount_eur, delivery.idempotency_key()))
//! }
//!
//! let server = McpServer::builder("shop", "1.0.0")
//!     .store(MemoryStore::default())
//!     .tools(tools![order_pay].effect_handler(charge))
//!     .build()
//!     .unwrap();
//! # drop(server);
//! ```

pub(crate) mod deliver;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::store::ClaimedEffect;
pub use crate::store::outbox::{Effect, Effects};

/// One delivery attempt of an effect, handed to its handler.
#[derive(Debug, Clone)]
pub struct Delivery<E> {
    effect: E,
    key: String,
    attempt: u32,
    handle: String,
}

impl<E> Delivery<E> {
    /// The effect, as the transition emitted it.
    pub fn effect(&self) -> &E {
        &self.effect
    }

    /// The effect, taken.
    pub fn into_effect(self) -> E {
        self.effect
    }

    /// The effect's idempotency key (`eff_` and 32 hex digits): the same on every attempt, and
    /// derived from the change that emitted it (the caller, the operation id, the resource, the
    /// version it made, the effect's index); a retried request replays that change and makes no
    /// new one. Send it to the external API as its idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.key
    }

    /// This attempt's number, from 1 (attempts whose worker died count too).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The resource whose change emitted the effect.
    pub fn handle(&self) -> &str {
        &self.handle
    }
}

/// Why a delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectError {
    message: String,
    permanent: bool,
}

impl EffectError {
    /// A failure worth retrying (the service was unreachable, answered 5xx, timed out): the
    /// effect is attempted again later, until [`DeliveryPolicy::max_attempts`].
    pub fn retry(message: impl Into<String>) -> Self {
        EffectError {
            message: message.into(),
            permanent: false,
        }
    }

    /// A failure no retry can fix (the service refused the request as invalid): the effect is
    /// failed at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        EffectError {
            message: message.into(),
            permanent: true,
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying cannot help.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

impl fmt::Display for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EffectError {}

/// How effects are delivered: attempts, delays, leases.
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    pub(crate) max_attempts: u32,
    pub(crate) first_retry: Duration,
    pub(crate) max_retry: Duration,
    pub(crate) timeout: Duration,
    pub(crate) lease: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) batch: usize,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            max_attempts: 8,
            first_retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(300),
            timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            batch: 16,
        }
    }
}

impl DeliveryPolicy {
    /// How many attempts an effect gets before it is failed (default 8, at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// The delay before the second attempt (default 1 s); each later one doubles it, up to
    /// [`max_retry`](DeliveryPolicy::max_retry).
    pub fn first_retry(mut self, delay: Duration) -> Self {
        self.first_retry = delay;
        self
    }

    /// The longest delay between two attempts (default 5 minutes).
    pub fn max_retry(mut self, delay: Duration) -> Self {
        self.max_retry = delay;
        self
    }

    /// How long one attempt may take before it counts as failed (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a worker holds the effects it claimed (default 60 s, longer than the timeout):
    /// when its process dies, another replica delivers them once the lease lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the worker looks for effects emitted by other processes, or due for a retry
    /// (default 1 s). Effects emitted by this process wake it at once.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The most effects one claim takes, delivered concurrently (default 16, at least 1).
    pub fn batch(mut self, effects: usize) -> Self {
        self.batch = effects;
        self
    }

    /// Why the policy cannot work, if it cannot.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self.max_attempts == 0 {
            return Err("DeliveryPolicy::max_attempts must be at least 1");
        }
        if self.batch == 0 {
            return Err("DeliveryPolicy::batch must be at least 1");
        }
        if self.poll_interval.is_zero() {
            return Err("DeliveryPolicy::poll_interval must be longer than zero");
        }
        if self.timeout.is_zero() {
            return Err("DeliveryPolicy::timeout must be longer than zero");
        }
        if self.lease <= self.timeout {
            return Err(
                "DeliveryPolicy::lease must be longer than its timeout, or a slow attempt's \
                 effect would be claimed again while it still runs",
            );
        }
        Ok(())
    }

    /// The delay before attempt `attempt + 1`.
    pub(crate) fn delay_after(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.first_retry
            .saturating_mul(1 << doublings)
            .min(self.max_retry)
    }
}

/// The future a registered handler returns, erased.
type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, EffectError>> + Send>>;

/// A handler for one effect kind, erased: decodes the stored effect and calls the author's.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(crate) kind: &'static str,
    call: Arc<dyn Fn(ClaimedEffect) -> HandlerFuture + Send + Sync>,
}

impl Handler {
    pub(crate) fn new<E, F, Fut, T>(handler: F) -> Self
    where
        E: Effect,
        F: Fn(Delivery<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, EffectError>> + Send + 'static,
        T: Serialize,
    {
        let handler = Arc::new(handler);
        Handler {
            kind: E::KIND,
            call: Arc::new(move |claimed: ClaimedEffect| {
                let effect = match serde_json::from_value::<E>(claimed.payload) {
                    Ok(effect) => effect,
                    Err(error) => {
                        let error = EffectError::permanent(format!(
                            "the stored {} effect does not decode: {error}",
                            E::KIND
                        ));
                        return Box::pin(std::future::ready(Err(error)));
                    }
                };
                let delivery = Delivery {
                    effect,
                    key: claimed.key,
                    attempt: claimed.attempt,
                    handle: claimed.handle,
                };
                let attempt = handler(delivery);
                Box::pin(async move {
                    let result = attempt.await?;
                    serde_json::to_value(result).map_err(|error| {
                        EffectError::permanent(format!(
                            "the handler's result does not encode: {error}"
                        ))
                    })
                })
            }),
        }
    }

    pub(crate) fn call(&self, claimed: ClaimedEffect) -> HandlerFuture {
        (self.call)(claimed)
    }
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handler").field("kind", &self.kind).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_longest() {
        let policy = DeliveryPolicy::default()
            .first_retry(Duration::from_millis(100))
            .max_retry(Duration::from_millis(700));
        let delays: Vec<u128> = (1..=6)
            .map(|attempt| policy.delay_after(attempt).as_millis())
            .collect();
        assert_eq!(delays, [100, 200, 400, 700, 700, 700]);
        assert_eq!(policy.delay_after(u32::MAX).as_millis(), 700);
    }

    #[test]
    fn a_policy_that_cannot_work_is_refused() {
        assert!(DeliveryPolicy::default().check().is_ok());
        assert!(DeliveryPolicy::default().max_attempts(0).check().is_err());
        assert!(DeliveryPolicy::default().batch(0).check().is_err());
        assert!(
            DeliveryPolicy::default()
                .timeout(Duration::from_secs(60))
                .check()
                .is_err()
        );
        assert!(
            DeliveryPolicy::default()
                .poll_interval(Duration::ZERO)
                .check()
                .is_err()
        );
        assert!(
            DeliveryPolicy::default()
                .timeout(Duration::ZERO)
                .check()
                .is_err()
        );
    }
}
