//! Rate limits on tool calls, per principal and per principal and tool (feature `rate-limits`):
//! the tools part of the protocol requires servers to limit tool invocations, and a model in a
//! loop is the usual reason a server needs to.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::auth::Principal;
use crate::protocol::error::RpcError;

/// How many calls fit in a period: `calls` at once, then one more every `period / calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallRate {
    pub(crate) calls: u32,
    pub(crate) period: Duration,
}

impl CallRate {
    fn quota(self) -> Option<Quota> {
        let calls = NonZeroU32::new(self.calls)?;
        let every = self.period.checked_div(self.calls)?;
        Some(Quota::with_period(every)?.allow_burst(calls))
    }
}

/// How often the limiters forget principals that have been quiet long enough to be back at a
/// full allowance, so their state does not grow with every principal ever seen.
const FORGET_EVERY: u64 = 4096;

type Limiter<C> = RateLimiter<
    Principal,
    DefaultKeyedStateStore<Principal>,
    C,
    NoOpMiddleware<<C as Clock>::Instant>,
>;

/// The limiters a server checks before running a tool.
pub(crate) struct RateLimits<C: Clock = DefaultClock> {
    principal: Option<Limiter<C>>,
    tools: HashMap<String, Limiter<C>>,
    clock: C,
    checks: AtomicU64,
}

impl RateLimits {
    /// The limiters for the configured rates; `Err` names a rate that cannot be one.
    pub(crate) fn new(
        principal: Option<CallRate>,
        tools: Vec<(String, CallRate)>,
    ) -> Result<RateLimits, &'static str> {
        RateLimits::with_clock(principal, tools, DefaultClock::default())
    }
}

impl<C: Clock + Clone> RateLimits<C> {
    fn with_clock(
        principal: Option<CallRate>,
        tools: Vec<(String, CallRate)>,
        clock: C,
    ) -> Result<RateLimits<C>, &'static str> {
        const INVALID: &str =
            "a rate limit needs at least 1 call in a period of at least 1 ns per call";
        let limiter = |rate: CallRate| -> Result<Limiter<C>, &'static str> {
            Ok(RateLimiter::new(
                rate.quota().ok_or(INVALID)?,
                DefaultKeyedStateStore::default(),
                clock.clone(),
            ))
        };
        let principal = principal.map(limiter).transpose()?;
        let tools = tools
            .into_iter()
            .map(|(tool, rate)| Ok((tool, limiter(rate)?)))
            .collect::<Result<_, &'static str>>()?;
        Ok(RateLimits {
            principal,
            tools,
            clock,
            checks: AtomicU64::new(0),
        })
    }

    /// Counts a call of `tool` by `principal`, or refuses it with HTTP 429 and `Retry-After`.
    /// The tool's own limit is checked first, so a refused call does not use up the
    /// principal's allowance for other tools.
    pub(crate) fn check(&self, principal: &Principal, tool: &str) -> Result<(), RpcError> {
        if self.principal.is_none() && self.tools.is_empty() {
            return Ok(());
        }
        if self.checks.fetch_add(1, Ordering::Relaxed) % FORGET_EVERY == FORGET_EVERY - 1 {
            self.forget_quiet();
        }
        let now = self.clock.now();
        if let Some(limiter) = self.tools.get(tool)
            && let Err(not_until) = limiter.check_key(principal)
        {
            return Err(RpcError::rate_limited(
                &format!("calls of the tool {tool}"),
                not_until.wait_time_from(now),
            ));
        }
        if let Some(limiter) = &self.principal
            && let Err(not_until) = limiter.check_key(principal)
        {
            return Err(RpcError::rate_limited(
                "calls (tools/call, tasks/* and subscriptions/listen)",
                not_until.wait_time_from(now),
            ));
        }
        Ok(())
    }

    fn forget_quiet(&self) {
        if let Some(limiter) = &self.principal {
            limiter.retain_recent();
        }
        for limiter in self.tools.values() {
            limiter.retain_recent();
        }
    }

    /// How many principals the limiters remember, for the test of their growth.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.principal.as_ref().map_or(0, |limiter| limiter.len())
            + self
                .tools
                .values()
                .map(|limiter| limiter.len())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(calls: u32, period: Duration) -> CallRate {
        CallRate { calls, period }
    }

    #[test]
    fn a_burst_passes_then_the_next_call_waits() {
        let limits = RateLimits::new(Some(rate(3, Duration::from_secs(60))), Vec::new()).unwrap();
        let alice = Principal::subject("alice");
        for _ in 0..3 {
            limits.check(&alice, "t").unwrap();
        }
        let refused = limits.check(&alice, "t").unwrap_err();
        assert_eq!(refused.status(), http::StatusCode::TOO_MANY_REQUESTS);
        let wait = refused.retry_after().unwrap();
        assert!(
            wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        limits.check(&Principal::subject("bob"), "t").unwrap();
    }

    #[test]
    fn quiet_principals_are_forgotten() {
        let clock = governor::clock::FakeRelativeClock::default();
        let limits = RateLimits::with_clock(
            Some(rate(10, Duration::from_secs(1))),
            vec![("t".into(), rate(10, Duration::from_secs(1)))],
            clock.clone(),
        )
        .unwrap();
        for n in 0..100 {
            limits
                .check(&Principal::subject(format!("p{n}")), "t")
                .unwrap();
        }
        assert_eq!(limits.remembered(), 200);
        clock.advance(Duration::from_millis(50));
        limits.forget_quiet();
        assert_eq!(limits.remembered(), 200, "not yet back at a full allowance");
        clock.advance(Duration::from_secs(1));
        limits.forget_quiet();
        assert_eq!(limits.remembered(), 0, "every allowance is full again");
    }

    /// Forgetting happens by itself, once every `FORGET_EVERY` checks, not on every check.
    #[test]
    fn checks_forget_quiet_principals_now_and_then() {
        let clock = governor::clock::FakeRelativeClock::default();
        let limits = RateLimits::with_clock(
            Some(rate(1_000_000, Duration::from_secs(1))),
            Vec::new(),
            clock.clone(),
        )
        .unwrap();
        let regular = Principal::subject("regular");
        for n in 0..100 {
            limits
                .check(&Principal::subject(format!("p{n}")), "t")
                .unwrap();
        }
        clock.advance(Duration::from_secs(1));
        // Up to the check before the cadence, everyone is remembered.
        for _ in 100..FORGET_EVERY - 1 {
            limits.check(&regular, "t").unwrap();
        }
        assert_eq!(limits.remembered(), 101);
        limits.check(&regular, "t").unwrap();
        assert_eq!(limits.remembered(), 1, "the quiet hundred are forgotten");
    }

    #[test]
    fn impossible_rates_are_refused() {
        assert!(RateLimits::new(Some(rate(0, Duration::from_secs(1))), Vec::new()).is_err());
        assert!(RateLimits::new(None, vec![("t".into(), rate(5, Duration::ZERO))]).is_err());
    }
}
