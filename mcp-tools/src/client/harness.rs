//! The harness: a client that drives stateful tools by the concurrency rules they publish, so
//! the caller (a model, an agent loop) never copies an id or a version.
//!
//! - Every change the caller did not name gets a fresh `operation_id`, and a call whose answer
//!   was lost is sent again with the same one and the same arguments: applied once.
//! - A change the caller gave no basis for is based on the version of that resource the caller
//!   last saw (its validator, in `_meta`), never on one it did not see.
//! - Every stateful answer is an [`Outcome`] to match on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::api::{Client, Submitted, ToolCall};
use super::catalog::{ListedTool, StateRules};
use super::error::ClientError;
use super::records::ResumptionRecord;
use super::result::ToolResult;
use crate::protocol::framework::{VALIDATOR_META_KEY, code};
use crate::protocol::recovery::Recovery;
use crate::store::{
    Applied, MutationOutcome, ReadOutcome, Rejected, Replayed, Resumption, Snapshot, StaleView,
};
use crate::sync::lock;

/// How a harness retries a call whose answer was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(super) attempts: u32,
    first: Duration,
    max: Duration,
}

impl Default for RetryPolicy {
    /// Four attempts, 100 ms apart at first, doubling up to 2 s.
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// At most `attempts` sends of one call, the first included (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The pause before the first retry, doubled before each next one up to `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.first = first;
        self.max = max.max(first);
        self
    }

    /// The pause before retry number `retry` (1 for the first), or the server's `Retry-After`
    /// when it asked for one within `max`; a little random spread keeps retries of many
    /// callers apart.
    pub(super) fn pause(&self, retry: u32, asked: Option<Duration>) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
            .min(self.max);
        let pause = asked.map_or(doubled, |asked| asked.min(self.max).max(doubled));
        let mut spread = [0u8; 1];
        let _ = getrandom::fill(&mut spread);
        pause + pause.mul_f64(f64::from(spread[0]) / 1024.0)
    }
}

/// A stateful tool's answer, to match on instead of parsing JSON.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The change was committed (or the resource created): its new version and state.
    Applied(Applied),
    /// Refused because the resource changed after the version the change was based on: the
    /// current state, what changed since, and what to do (`refresh_and_replan`, `reconfirm`).
    StaleView(StaleView),
    /// A repeat of an earlier request with the same operation id: nothing was done again;
    /// what was recorded then, and the resource now.
    Replayed(Replayed),
    /// The state of a resource, read.
    Current(Snapshot),
    /// The resource outlived its time to live (`EXPIRED`).
    Expired(Rejected),
    /// The resource is finished and accepts no change (`TERMINAL`).
    Terminal(Rejected),
    /// Refused with another code (`NOT_FOUND`, `OPERATION_ID_REUSED`, `INVALID_ARGUMENTS`, the
    /// tool's own codes...), with what to do next.
    Rejected(Rejected),
    /// The answer of a tool that publishes no concurrency rules, as it is.
    Plain(ToolResult),
}

impl Outcome {
    /// Reads a result: a stateful tool's outcome, or the plain result.
    pub(super) fn read(result: ToolResult, stateful: bool) -> Outcome {
        let Some(structured) = result.structured_content.as_ref().filter(|_| stateful) else {
            return Outcome::Plain(result);
        };
        let typed = match structured.get("outcome").and_then(Value::as_str) {
            Some("current") => ReadOutcome::deserialize(structured)
                .ok()
                .map(|read| match read {
                    ReadOutcome::Current(snapshot) => Outcome::Current(snapshot),
                    ReadOutcome::Rejected(rejected) => Outcome::refused(rejected),
                }),
            Some(_) => MutationOutcome::deserialize(structured)
                .ok()
                .map(|outcome| match outcome {
                    MutationOutcome::Applied(applied) => Outcome::Applied(applied),
                    MutationOutcome::StaleView(stale) => Outcome::StaleView(stale),
                    MutationOutcome::Replayed(replayed) => Outcome::Replayed(replayed),
                    MutationOutcome::Rejected(rejected) => Outcome::refused(rejected),
                }),
            // A tool error: `{"code", "message", "recovery"?, "details"?}`.
            None if result.is_error => Rejected::deserialize(structured).ok().map(Outcome::refused),
            None => None,
        };
        typed.unwrap_or(Outcome::Plain(result))
    }

    fn refused(rejected: Rejected) -> Outcome {
        match rejected.code.as_str() {
            code::EXPIRED => Outcome::Expired(rejected),
            code::TERMINAL => Outcome::Terminal(rejected),
            _ => Outcome::Rejected(rejected),
        }
    }

    /// The code of a refusal (`STALE_VIEW`, `EXPIRED`, ...), or of the refusal a replay
    /// repeats.
    pub fn code(&self) -> Option<&str> {
        match self {
            Outcome::StaleView(stale) => Some(&stale.code),
            Outcome::Expired(rejected)
            | Outcome::Terminal(rejected)
            | Outcome::Rejected(rejected) => Some(&rejected.code),
            Outcome::Replayed(replayed) => replayed.original.code(),
            _ => None,
        }
    }

    /// What to do next, when the answer says.
    pub fn recovery(&self) -> Option<&Recovery> {
        match self {
            Outcome::StaleView(stale) => Some(&stale.recovery),
            Outcome::Expired(rejected)
            | Outcome::Terminal(rejected)
            | Outcome::Rejected(rejected) => rejected.recovery.as_ref(),
            _ => None,
        }
    }

    /// Where to resume from, when the answer describes the resource as it is now.
    pub fn resumption(&self) -> Option<&Resumption> {
        match self {
            Outcome::Applied(applied) => Some(&applied.resumption),
            Outcome::StaleView(stale) => Some(&stale.resumption),
            Outcome::Replayed(replayed) => {
                replayed.current.as_ref().map(|current| &current.resumption)
            }
            Outcome::Current(snapshot) => Some(&snapshot.resumption),
            _ => None,
        }
    }

    /// Whether the same request, with the same operation id, may succeed later: the store was
    /// unavailable, or the answer says to retry later.
    pub(super) fn retry_later(&self) -> bool {
        match self {
            Outcome::Rejected(rejected) => {
                rejected.code == code::STORE_UNAVAILABLE
                    || rejected.recovery == Some(Recovery::RetryLater)
            }
            _ => false,
        }
    }
}

/// A call made ready to send: the arguments the harness supplies are in, and it is known
/// whether sending it again is safe.
pub(super) struct Prepared {
    /// The `tools/call` params.
    pub(super) params: Map<String, Value>,
    /// The tool's rules, when it publishes them.
    pub(super) rules: Option<StateRules>,
    /// The resource the call is about, when it names one.
    pub(super) handle: Option<String>,
    /// Whether a retry cannot do anything twice: an operation id is sent, or the tool only
    /// reads.
    pub(super) retry_safe: bool,
}

/// A client that drives stateful tools by their published concurrency rules. Cheap to clone:
/// clones share the connection and what the caller has seen.
///
/// ```no_run
/// # async fn run() -> Result<(), mcp_tools::client::ClientError> {
/// use mcp_tools::client::{Client, Harness, Outcome};
/// use serde_json::json;
///
/// let client = Client::builder().connect_http("http://127.0.0.1:8080/mcp").await?;
/// let harness = Harness::new(client);
/// let Outcome::Current(basket) = harness.call("basket_get", json!({ "basket_id": "bsk_42" })).await? else {
///     return Ok(());
/// };
/// // No expected_version, no operation_id: the harness supplies both.
/// match harness.call("basket_upgrade_memory", json!({ "basket_id": basket.handle, "memory_gib": 32 })).await? {
///     Outcome::Applied(applied) => println!("now at version {}", applied.version),
///     Outcome::StaleView(stale) => println!("changed since: {:?}", stale.delta),
///     other => println!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Harness {
    pub(super) inner: Arc<HarnessInner>,
}

#[derive(Debug)]
pub(super) struct HarnessInner {
    pub(super) client: Client,
    pub(super) retry: RetryPolicy,
    /// The server's name, which the records carry.
    pub(super) server: String,
    // What the caller last saw of each resource, by handle; each critical section inserts,
    // removes or reads one entry: consistent after a panic.
    pub(super) seen: Mutex<HashMap<String, ResumptionRecord>>,
}

impl Harness {
    /// A harness over `client`, retrying with [`RetryPolicy::default`].
    pub fn new(client: Client) -> Harness {
        Harness::with_retry(client, RetryPolicy::default())
    }

    /// A harness over `client`, retrying lost answers as `retry` says.
    pub fn with_retry(client: Client, retry: RetryPolicy) -> Harness {
        let server = client
            .discovery()
            .and_then(|discovery| discovery.server_name().map(str::to_owned))
            .unwrap_or_else(|| client.endpoint().to_owned());
        Harness {
            inner: Arc::new(HarnessInner {
                client,
                retry,
                server,
                seen: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The client underneath.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Calls `tool` with `arguments` (see [`call_with`](Self::call_with)).
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Outcome, ClientError> {
        self.call_with(ToolCall::new(tool, arguments)).await
    }

    /// Calls a tool. For a tool that publishes concurrency rules:
    ///
    /// - an `operation_id` the call does not name is minted (a random UUID);
    /// - a change with neither `expected_version` nor a validator in `_meta` is based on the
    ///   resource as the caller last saw it, through any result this harness returned (its
    ///   validator in `_meta["io.github.mcp-tools/validator"]`, or its version when the server
    ///   issued no validator); a resource the caller never saw is sent without a basis, and the
    ///   server's own rule decides;
    /// - a call whose answer was lost (a dropped connection, a timeout, `5xx`,
    ///   `STORE_UNAVAILABLE`) is sent again with the same operation id and arguments, as the
    ///   [`RetryPolicy`] allows: the change is applied once, and a retry after a lost answer
    ///   comes back [`Outcome::Replayed`].
    ///
    /// A tool that publishes no rules is called as it is, without retries, and answers
    /// [`Outcome::Plain`].
    pub async fn call_with(&self, call: ToolCall) -> Result<Outcome, ClientError> {
        let tool = self.listed(call.name()).await?;
        let params = self.inner.client.call_params(call)?;
        let prepared = self.prepare(tool.as_ref(), params)?;
        let stateful = prepared.rules.is_some();
        let mut retry = 0;
        loop {
            let answer = match self
                .inner
                .client
                .submit_params(prepared.params.clone())
                .await
            {
                Ok(Submitted::Done(result)) => Ok(result),
                Ok(Submitted::Task(task)) => self.inner.client.wait_task(&task.task_id).await,
                Err(error) => Err(error),
            };
            retry += 1;
            let last = retry >= self.inner.retry.attempts;
            match answer {
                Ok(result) => {
                    let outcome = Outcome::read(result, stateful);
                    if prepared.retry_safe && !last && outcome.retry_later() {
                        tokio::time::sleep(self.inner.retry.pause(retry, None)).await;
                        continue;
                    }
                    self.observe(&prepared, &outcome);
                    return Ok(outcome);
                }
                Err(error) if prepared.retry_safe && !last && error.is_retryable() => {
                    tracing::debug!(%error, retry, "the answer was lost; sending the same call again");
                    let pause = self.inner.retry.pause(retry, error.retry_after());
                    tokio::time::sleep(pause).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The tool as listed (listing again when the last listing is stale), a listing whose answer
    /// was lost sent again as the [`RetryPolicy`] allows: it changes nothing.
    pub(super) async fn listed(&self, name: &str) -> Result<Option<ListedTool>, ClientError> {
        let mut retry = 0;
        loop {
            retry += 1;
            match self.inner.client.tool(name).await {
                Err(error) if error.is_retryable() && retry < self.inner.retry.attempts => {
                    let pause = self.inner.retry.pause(retry, error.retry_after());
                    tokio::time::sleep(pause).await;
                }
                listed => return listed,
            }
        }
    }

    /// Supplies what the caller left out of a call to a stateful tool.
    pub(super) fn prepare(
        &self,
        tool: Option<&ListedTool>,
        mut params: Map<String, Value>,
    ) -> Result<Prepared, ClientError> {
        let Some(rules) = tool.and_then(ListedTool::state_rules).cloned() else {
            return Ok(Prepared {
                params,
                rules: None,
                handle: None,
                retry_safe: false,
            });
        };
        let arguments = match params.get_mut("arguments") {
            Some(Value::Object(arguments)) => arguments,
            _ => {
                return Err(ClientError::InvalidRequest(
                    "the arguments of a tool call must be a JSON object".into(),
                ));
            }
        };
        let handle = rules
            .handle_argument()
            .and_then(|name| arguments.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut retry_safe = rules.reads();
        if let Some(name) = rules.idempotency_argument() {
            match arguments.get(name) {
                None | Some(Value::Null) => {
                    arguments.insert(name.to_owned(), Value::String(operation_id()?));
                    retry_safe = true;
                }
                Some(Value::String(_)) => retry_safe = true,
                Some(_) => {}
            }
        }
        if let (Some(name), Some(handle)) = (rules.precondition_argument(), &handle) {
            let given = arguments.get(name).is_some_and(|value| !value.is_null());
            let meta_given = params
                .get("_meta")
                .and_then(|meta| meta.get(VALIDATOR_META_KEY))
                .is_some();
            if !given && !meta_given {
                let seen = lock(&self.inner.seen).get(handle).cloned();
                match seen {
                    Some(ResumptionRecord {
                        validator: Some(validator),
                        ..
                    }) => {
                        let meta = params
                            .entry("_meta")
                            .or_insert_with(|| Value::Object(Map::new()));
                        if let Value::Object(meta) = meta {
                            meta.insert(VALIDATOR_META_KEY.into(), Value::String(validator));
                        }
                    }
                    Some(record) => {
                        if let Some(Value::Object(arguments)) = params.get_mut("arguments") {
                            arguments.insert(name.to_owned(), record.basis_version.into());
                        }
                    }
                    // Never seen: no basis is invented; the server's rule decides.
                    None => {}
                }
            }
        }
        Ok(Prepared {
            params,
            rules: Some(rules),
            handle,
            retry_safe,
        })
    }

    /// Remembers what an answer showed the caller of its resource.
    pub(super) fn observe(&self, prepared: &Prepared, outcome: &Outcome) {
        let Some(rules) = &prepared.rules else {
            return;
        };
        let gone = matches!(outcome, Outcome::Expired(_) | Outcome::Rejected(_))
            && matches!(outcome.code(), Some(code::EXPIRED | code::NOT_FOUND));
        if gone {
            if let Some(handle) = &prepared.handle {
                lock(&self.inner.seen).remove(handle);
            }
        } else if let Some(resumption) = outcome.resumption() {
            self.saw(rules.resource(), resumption);
        }
    }

    /// Remembers `resumption` as what the caller saw of its resource, unless it saw a newer
    /// version already.
    pub(super) fn saw(&self, resource: &str, resumption: &Resumption) {
        let mut seen = lock(&self.inner.seen);
        let next_operation = match seen.get(&resumption.handle) {
            Some(known) if known.basis_version > resumption.basis_version => return,
            Some(known) => known.next_operation.clone(),
            None => None,
        };
        let record =
            ResumptionRecord::new(&self.inner.server, resource, resumption, next_operation);
        seen.insert(resumption.handle.clone(), record);
    }
}

/// A new operation id: a random UUID (version 4), which no other caller can guess.
pub(super) fn operation_id() -> Result<String, ClientError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|error| {
        ClientError::Local(format!("no random numbers for an operation id: {error}"))
    })?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_random_uuids() {
        let first = operation_id().unwrap();
        let second = operation_id().unwrap();
        assert_ne!(first, second);
        assert_eq!(first.len(), 36);
        assert_eq!(&first[14..15], "4", "version 4");
        assert!(
            matches!(&first[19..20], "8" | "9" | "a" | "b"),
            "the RFC 4122 variant"
        );
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'));
    }

    #[test]
    fn pauses_double_up_to_the_bound() {
        let policy =
            RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_millis(350));
        let within = |pause: Duration, base: u64| {
            let base = Duration::from_millis(base);
            pause >= base && pause <= base + base / 4
        };
        assert!(within(policy.pause(1, None), 100));
        assert!(within(policy.pause(2, None), 200));
        assert!(within(policy.pause(3, None), 350));
        assert!(within(policy.pause(30, None), 350));
        assert!(
            within(policy.pause(1, Some(Duration::from_millis(300))), 300),
            "Retry-After"
        );
        assert!(
            within(policy.pause(1, Some(Duration::from_secs(60))), 350),
            "bounded"
        );
        assert_eq!(RetryPolicy::default().attempts(0).attempts, 1);
    }

    #[test]
    fn answers_are_read_as_outcomes() {
        let result = |structured: Value, is_error: bool| ToolResult {
            content: Vec::new(),
            structured_content: Some(structured),
            is_error,
            meta: Map::new(),
        };
        let expired = result(
            serde_json::json!({"outcome": "rejected", "code": "EXPIRED", "message": "gone", "recovery": "create_new"}),
            true,
        );
        assert!(matches!(
            Outcome::read(expired.clone(), true),
            Outcome::Expired(_)
        ));
        assert!(
            matches!(Outcome::read(expired, false), Outcome::Plain(_)),
            "no rules: plain"
        );
        let unavailable = result(
            serde_json::json!({"code": "STORE_UNAVAILABLE", "message": "retry"}),
            true,
        );
        let outcome = Outcome::read(unavailable, true);
        assert!(outcome.retry_later(), "{outcome:?}");
        let other = result(serde_json::json!({"sum": 3}), false);
        assert!(matches!(Outcome::read(other, true), Outcome::Plain(_)));
    }
}
