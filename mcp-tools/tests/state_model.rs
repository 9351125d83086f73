//! A model-based test of the `Store` contract.
//!
//! Random sequences of creates, reads, mutations, prunes and clock steps run against each store
//! and against `Model`, a small reference implementation of the contract written from its
//! documentation; every outcome the store gives is compared with the model's. Where the contract
//! leaves a detail open (whether an automatic sweep already removed something, whether a replay
//! shows an expired resource), the model accepts each answer the contract allows and follows the
//! one the store chose.
//!
//! Concurrent runs then check what a sequential model cannot: under contention every operation id
//! applies at most once, every acknowledged change is in the final state exactly once, and versions
//! stay contiguous; with the version check switched off the same checks must fail.
//!
//! `MCP_MODEL_CASES` sets how many sequences each store runs (and scales the concurrent rounds).

#[cfg(feature = "postgres")]
mod pg;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_tools::ToolError;
use mcp_tools::auth::Principal;
use mcp_tools::protocol::framework::code;
use mcp_tools::store::{
    Applied, ConflictPolicy, CreateRequest, EntityKind, FieldChange, Fingerprint, Lifecycle,
    ManualClock, MutationOutcome, MutationRequest, PruneReport, ReadOutcome, ReadRequest,
    RecordedApplied, RecordedOutcome, RecordedStaleView, Rejected, Resumption, Snapshot, StaleView,
    Store, StoreConfig, Transition, format_rfc3339,
};
use mcp_tools::{MemoryStore, Recovery, SqliteStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// 2026-07-28T09:30:00Z.
const T0: i64 = 1_785_231_000_000;
/// Every clock step is a whole number of ticks and no deadline below is, so no request lands
/// exactly on a deadline: which side of it an instant falls on is not what this test is about.
/// Every expiry is then a whole number of 100 ms, the step stores round [`TTL`] up to, so the
/// model's `now + TTL` is the expiry a store computes (`state_contract` tests the rounding).
const TICK_SECS: u64 = 10;
const TTL: Duration = Duration::from_secs(103);
const RETENTION: Duration = Duration::from_secs(254);
const HISTORY_LIMIT: u64 = 3;
const LEDGER_QUOTA: u64 = 5;
/// The top-level members of every state, in the order the delta lists them.
const FIELDS: [&str; 4] = ["a", "b", "done", "items"];
/// A kind with a time to live, a lifecycle read from the state and a view that hides `b`, so the
/// model sees the difference between what outcomes show and what rebase compares.
const KIND: EntityKind = EntityKind::new("ledgerbook", "lbk")
    .with_ttl(TTL)
    .with_lifecycle(lifecycle_of)
    .with_view(view_of);

/// How long any single store call or join may take before the test fails instead of hanging.
const STEP: Duration = Duration::from_secs(30);

/// Awaits `future`, failing the test with `what` if it takes longer than [`STEP`].
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {STEP:?}: {what}"),
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap()
}

fn lifecycle_of(state: &Value) -> Lifecycle {
    if state["done"] == json!(true) {
        Lifecycle::Terminal
    } else if state["items"].as_array().is_some_and(Vec::is_empty) {
        Lifecycle::Draft
    } else {
        Lifecycle::Active
    }
}

fn view_of(state: &Value) -> Value {
    let mut view = state.clone();
    if let Some(members) = view.as_object_mut() {
        members.remove("b");
    }
    view
}

fn principal(who: usize) -> Principal {
    match who {
        0 => Principal::subject("alice"),
        1 => Principal::subject("bob"),
        _ => Principal::Anonymous,
    }
}

/// How many sequences each store runs: `MCP_MODEL_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("MCP_MODEL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// The field-level changes between two states, written from the contract's description of a
/// delta (objects member by member in key order, arrays item by item by position, an appended
/// item without `before`), independently of the library's own diff.
fn model_delta(path: &str, before: &Value, after: &Value, out: &mut Vec<FieldChange>) {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = format!("{path}/{key}");
                match (old.get(key), new.get(key)) {
                    (Some(a), Some(b)) => model_delta(&child, a, b, out),
                    (a, b) => out.push(FieldChange {
                        path: child,
                        before: a.cloned(),
                        after: b.cloned(),
                    }),
                }
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            for index in 0..old.len().max(new.len()) {
                let child = format!("{path}/{index}");
                match (old.get(index), new.get(index)) {
                    (Some(a), Some(b)) => model_delta(&child, a, b, out),
                    (a, b) => out.push(FieldChange {
                        path: child,
                        before: a.cloned(),
                        after: b.cloned(),
                    }),
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            path: path.to_owned(),
            before: Some(a.clone()),
            after: Some(b.clone()),
        }),
    }
}

/// The top-level members that differ between two states.
fn touched(before: &Value, after: &Value) -> HashSet<&'static str> {
    FIELDS
        .iter()
        .copied()
        .filter(|field| before[*field] != after[*field])
        .collect()
}

/// The ledger's summary of an outcome a request produced.
fn summary(outcome: &MutationOutcome) -> RecordedOutcome {
    match outcome {
        MutationOutcome::Applied(applied) => {
            RecordedOutcome::Applied(RecordedApplied::from(applied))
        }
        MutationOutcome::StaleView(stale) => {
            RecordedOutcome::StaleView(RecordedStaleView::from(stale))
        }
        MutationOutcome::Rejected(rejected) => RecordedOutcome::Rejected(rejected.clone()),
        MutationOutcome::Replayed(replayed) => replayed.original.clone(),
        other => panic!("an outcome the model does not know: {other:?}"),
    }
}

fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    expected: &T,
    actual: &T,
) -> Result<(), String> {
    if expected == actual {
        Ok(())
    } else {
        Err(format!(
            "{what}:\n  expected {expected:?}\n  got      {actual:?}"
        ))
    }
}

fn is_code(outcome: &MutationOutcome, wanted: &str) -> bool {
    matches!(outcome, MutationOutcome::Rejected(rejected) if rejected.code == wanted)
}

fn rejected(
    outcome: &MutationOutcome,
    wanted: &str,
    recovery: Option<Recovery>,
    details: Option<Value>,
) -> Result<(), String> {
    match outcome {
        MutationOutcome::Rejected(rejected)
            if rejected.code == wanted
                && rejected.recovery == recovery
                && rejected.details == details
                && !rejected.message.is_empty() =>
        {
            Ok(())
        }
        other => Err(format!(
            "expected {wanted} (recovery {recovery:?}, details {details:?}), got {other:?}"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// What a transition does; its own behaviour is not under test, so the store's transition and
/// the model share [`Change::apply`].
#[derive(Debug, Clone, PartialEq)]
enum Change {
    Append(String),
    Set(&'static str, i64),
    Finish,
    Fail,
}

impl Change {
    fn describe(&self) -> Value {
        match self {
            Change::Append(token) => json!({ "append": token }),
            Change::Set(field, value) => json!({ "set": field, "to": value }),
            Change::Finish => json!("finish"),
            Change::Fail => json!("fail"),
        }
    }

    fn apply(&self, state: &mut Value) -> Result<Value, ToolError> {
        match self {
            Change::Append(token) => {
                let items = state["items"]
                    .as_array_mut()
                    .ok_or_else(|| ToolError::new("INVALID_STATE", "no items"))?;
                items.push(json!(token));
                Ok(json!({ "appended": token, "len": items.len() }))
            }
            Change::Set(field, value) => {
                state[*field] = json!(value);
                Ok(json!({ *field: value }))
            }
            Change::Finish => {
                state["done"] = json!(true);
                Ok(json!("finished"))
            }
            Change::Fail => Err(
                ToolError::new("OVER_LIMIT", "the ledgerbook refuses this change")
                    .with_details(json!({ "limit": 3 })),
            ),
        }
    }

    fn transition(&self) -> Transition {
        let change = self.clone();
        Transition::new(move |state| change.apply(state))
    }

    /// Another payload under the same operation id.
    fn varied(&self, token: String) -> Change {
        match self {
            Change::Append(old) => Change::Append(format!("{old}'")),
            Change::Set(field, value) => Change::Set(field, value + 100),
            Change::Finish | Change::Fail => Change::Append(token),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Reject,
    /// A bit mask over [`FIELDS`].
    Rebase(u8),
    Reconfirm,
}

impl Policy {
    fn touches(mask: u8) -> Vec<String> {
        FIELDS
            .iter()
            .enumerate()
            .filter(|(bit, _)| mask & (1 << bit) != 0)
            .map(|(_, field)| (*field).to_owned())
            .collect()
    }

    fn conflict(self) -> ConflictPolicy {
        match self {
            Policy::Reject => ConflictPolicy::Reject,
            Policy::Rebase(mask) => ConflictPolicy::Rebase {
                touches: Policy::touches(mask),
            },
            Policy::Reconfirm => ConflictPolicy::Reconfirm,
        }
    }

    fn describe(self) -> Value {
        match self {
            Policy::Reject => json!("reject"),
            Policy::Rebase(mask) => json!({ "rebase": Policy::touches(mask) }),
            Policy::Reconfirm => json!("reconfirm"),
        }
    }
}

#[derive(Debug, Clone)]
struct CreateCall {
    who: usize,
    operation: Option<String>,
    initial: Value,
}

impl CreateCall {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_call("ledgerbook_create", &json!({ "initial": self.initial }))
    }
}

#[derive(Debug, Clone)]
struct MutateCall {
    who: usize,
    handle: String,
    expected: Option<u64>,
    operation: Option<String>,
    policy: Policy,
    change: Change,
}

impl MutateCall {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_call(
            "ledgerbook_change",
            &json!({
                "handle": self.handle,
                "expected_version": self.expected,
                "policy": self.policy.describe(),
                "change": self.change.describe(),
            }),
        )
    }
}

#[derive(Debug, Clone)]
enum Call {
    Create(CreateCall),
    Mutate(MutateCall),
}

// ---------------------------------------------------------------------------------------------
// Generated operations, resolved against what exists when they run
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum IdChoice {
    Without,
    Fresh,
    /// One of a few ids every principal keeps reusing, with whatever payload comes along.
    Pool(u8),
}

#[derive(Debug, Clone)]
enum Target {
    /// A handle the caller owns (any handle if it owns none).
    Own(usize),
    /// Any handle, often another principal's.
    Any(usize),
    /// A well-formed handle no store minted.
    Unknown,
    /// A real handle's random part under another kind's prefix.
    OtherPrefix(usize),
    Malformed(u8),
}

#[derive(Debug, Clone)]
enum Basis {
    Absent,
    Current,
    Behind(u64),
}

#[derive(Debug, Clone)]
enum ChangeChoice {
    Append,
    Set(bool, i64),
    Finish,
    Fail,
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        who: usize,
        id: IdChoice,
        a: i64,
        seeded: bool,
    },
    Read {
        who: usize,
        target: Target,
    },
    Mutate {
        who: usize,
        target: Target,
        basis: Basis,
        id: IdChoice,
        policy: Policy,
        change: ChangeChoice,
    },
    /// Sends an earlier request that had an operation id again: the same payload (a retry), or
    /// another payload under the same id, and maybe as another principal.
    Resend {
        pick: usize,
        same_payload: bool,
        who: Option<usize>,
    },
    Prune,
    Advance(u64),
}

fn who() -> impl Strategy<Value = usize> {
    prop_oneof![6 => Just(0usize), 2 => Just(1usize), 1 => Just(2usize)]
}

fn id_choice() -> impl Strategy<Value = IdChoice> {
    prop_oneof![
        2 => Just(IdChoice::Without),
        5 => Just(IdChoice::Fresh),
        3 => (0u8..4).prop_map(IdChoice::Pool),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        20 => any::<usize>().prop_map(Target::Own),
        4 => any::<usize>().prop_map(Target::Any),
        1 => Just(Target::Unknown),
        1 => any::<usize>().prop_map(Target::OtherPrefix),
        1 => (0u8..4).prop_map(Target::Malformed),
    ]
}

fn basis() -> impl Strategy<Value = Basis> {
    prop_oneof![
        2 => Just(Basis::Absent),
        5 => Just(Basis::Current),
        3 => (1u64..5).prop_map(Basis::Behind),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        4 => Just(Policy::Reject),
        4 => (0u8..16).prop_map(Policy::Rebase),
        2 => Just(Policy::Reconfirm),
    ]
}

fn change_choice() -> impl Strategy<Value = ChangeChoice> {
    prop_oneof![
        8 => Just(ChangeChoice::Append),
        5 => (any::<bool>(), 0i64..3).prop_map(|(a, value)| ChangeChoice::Set(a, value)),
        1 => Just(ChangeChoice::Finish),
        2 => Just(ChangeChoice::Fail),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (who(), id_choice(), 0i64..3, any::<bool>())
            .prop_map(|(who, id, a, seeded)| Op::Create { who, id, a, seeded }),
        2 => (who(), target()).prop_map(|(who, target)| Op::Read { who, target }),
        12 => (who(), target(), basis(), id_choice(), policy(), change_choice()).prop_map(
            |(who, target, basis, id, policy, change)| Op::Mutate {
                who,
                target,
                basis,
                id,
                policy,
                change,
            }
        ),
        4 => (any::<usize>(), prop::bool::weighted(0.6), prop::option::weighted(0.2, 0usize..3))
            .prop_map(|(pick, same_payload, who)| Op::Resend { pick, same_payload, who }),
        1 => Just(Op::Prune),
        2 => prop::sample::select(vec![1u64, 2, 5, 10, 25, 37]).prop_map(Op::Advance),
    ]
}

/// A sequence starts with a resource to work on: without one almost every request would be
/// answered `NOT_FOUND`.
fn sequence() -> impl Strategy<Value = Vec<Op>> {
    (id_choice(), 0i64..3, prop::collection::vec(op(), 1..60)).prop_map(|(id, a, rest)| {
        let first = Op::Create {
            who: 0,
            id,
            a,
            seeded: false,
        };
        std::iter::once(first).chain(rest).collect()
    })
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

struct Resource {
    handle: String,
    owner: usize,
    /// Every version's state, version 1 first.
    versions: Vec<Value>,
    expires_at: i64,
    /// Known to be removed: an explicit prune reclaimed it, or the store already answered
    /// `NOT_FOUND` once it was reclaimable.
    gone: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Live,
    /// Expired less than the ledger retention ago: still answers `EXPIRED`.
    Expired,
    /// Expired longer ago than the retention: `EXPIRED` until a sweep removes it.
    Reclaimable,
    Gone,
}

impl Resource {
    fn current(&self) -> &Value {
        self.versions.last().unwrap()
    }

    fn version(&self) -> u64 {
        self.versions.len() as u64
    }

    fn resumption(&self) -> Resumption {
        Resumption {
            handle: self.handle.clone(),
            basis_version: self.version(),
            lifecycle: lifecycle_of(self.current()),
            expires_at: Some(format_rfc3339(self.expires_at)),
            validator: None,
        }
    }

    fn snapshot(&self, state: Value) -> Snapshot {
        Snapshot {
            handle: self.handle.clone(),
            version: self.version(),
            state: state.into(),
            resumption: self.resumption(),
            changes: None,
            effects: Vec::new(),
            pages: Vec::new(),
        }
    }
}

struct Record {
    fingerprint: Fingerprint,
    recorded_at: i64,
    original: RecordedOutcome,
    /// The resource the request was about.
    resource: usize,
}

impl Record {
    fn live(&self, now: i64) -> bool {
        now < self.recorded_at + millis(RETENTION)
    }
}

#[derive(Default)]
struct Model {
    now: i64,
    resources: Vec<Resource>,
    /// By (principal, operation id); a record leaves only when an explicit prune is due to
    /// remove it (an automatic sweep may have removed it earlier, unobserved).
    ledger: HashMap<(usize, String), Record>,
    /// How often each outcome was seen; shared so a check can count while it holds a borrow.
    coverage: RefCell<BTreeMap<&'static str, u64>>,
}

impl Model {
    fn new() -> Self {
        Model {
            now: T0,
            ..Model::default()
        }
    }

    fn saw(&self, what: &'static str) {
        *self.coverage.borrow_mut().entry(what).or_default() += 1;
    }

    fn find(&self, handle: &str) -> Option<usize> {
        self.resources.iter().position(|r| r.handle == handle)
    }

    fn status(&self, index: usize) -> Status {
        let resource = &self.resources[index];
        if resource.gone {
            Status::Gone
        } else if self.now < resource.expires_at {
            Status::Live
        } else if self.now < resource.expires_at + millis(RETENTION) {
            Status::Expired
        } else {
            Status::Reclaimable
        }
    }

    /// The caller's resource behind `handle`, if it is still there. A reclaimable resource may
    /// already have been swept: `answered_not_found` says whether the store says so, and from
    /// then on the model agrees.
    fn resolve(&mut self, who: usize, handle: &str, answered_not_found: bool) -> Option<usize> {
        let index = self
            .find(handle)
            .filter(|&i| self.resources[i].owner == who)?;
        match self.status(index) {
            Status::Gone => None,
            Status::Reclaimable if answered_not_found => {
                self.saw("reclaimable already swept");
                self.resources[index].gone = true;
                None
            }
            _ => Some(index),
        }
    }

    /// The ledger's answer to a repeated operation id, when it has one; `Ok(false)` when the
    /// request goes on to be judged.
    fn ledger_answer(
        &mut self,
        who: usize,
        operation: Option<&String>,
        fingerprint: &Fingerprint,
        actual: &MutationOutcome,
    ) -> Result<bool, String> {
        let Some(id) = operation else {
            return Ok(false);
        };
        let Some(record) = self.ledger.get(&(who, id.clone())) else {
            return Ok(false);
        };
        if !record.live(self.now) {
            return Ok(false);
        }
        if record.fingerprint != *fingerprint {
            self.saw("operation id reused");
            rejected(
                actual,
                code::OPERATION_ID_REUSED,
                Some(Recovery::NewOperationId),
                None,
            )?;
            return Ok(true);
        }
        let MutationOutcome::Replayed(replayed) = actual else {
            return Err(format!(
                "expected a replay of {id} ({:?}), got {actual:?}",
                record.original
            ));
        };
        same("replayed operation id", id, &replayed.operation_id)?;
        same(
            "replayed recorded_at",
            &format_rfc3339(record.recorded_at),
            &replayed.recorded_at,
        )?;
        same("replayed original", &record.original, &replayed.original)?;
        // Every record names the resource it counts against, rejections included.
        // Every record names the resource it counts against, rejections included; the replay
        // shows it while it is available (live), and nothing once it expired or went.
        let index = record.resource;
        let resource = &self.resources[index];
        let now = resource.snapshot(view_of(resource.current()));
        match self.status(index) {
            Status::Live => {
                same("replay: the resource now", &Some(now), &replayed.current)?;
                self.saw("replayed with current");
            }
            Status::Gone | Status::Expired | Status::Reclaimable => {
                same(
                    "replay: a resource no longer available",
                    &None,
                    &replayed.current,
                )?;
                self.saw("replayed without current");
            }
        }
        self.saw("replayed");
        Ok(true)
    }

    fn record(
        &mut self,
        who: usize,
        operation: Option<&String>,
        fingerprint: Fingerprint,
        outcome: &MutationOutcome,
        resource: usize,
    ) {
        if let Some(id) = operation {
            self.ledger.insert(
                (who, id.clone()),
                Record {
                    fingerprint,
                    recorded_at: self.now,
                    original: summary(outcome),
                    resource,
                },
            );
        }
    }

    /// How many records count against `resource`: every live record about it, whatever its
    /// outcome; an expired record no longer counts, swept or not.
    fn ledger_share(&self, resource: usize) -> u64 {
        self.ledger
            .values()
            .filter(|record| record.resource == resource && record.live(self.now))
            .count() as u64
    }

    fn create(&mut self, call: &CreateCall, actual: &MutationOutcome) -> Result<(), String> {
        let fingerprint = call.fingerprint();
        if self.ledger_answer(call.who, call.operation.as_ref(), &fingerprint, actual)? {
            self.saw("create answered by the ledger");
            return Ok(());
        }
        let MutationOutcome::Applied(applied) = actual else {
            return Err(format!("expected a new resource, got {actual:?}"));
        };
        if !applied.handle.starts_with("lbk_") || self.find(&applied.handle).is_some() {
            return Err(format!(
                "not a fresh handle of the kind: {}",
                applied.handle
            ));
        }
        let resource = Resource {
            handle: applied.handle.clone(),
            owner: call.who,
            versions: vec![call.initial.clone()],
            expires_at: self.now + millis(TTL),
            gone: false,
        };
        // What a create returns as its result is not specified; a replay must repeat it.
        let expected = Applied {
            handle: resource.handle.clone(),
            version: 1,
            state: view_of(&call.initial).into(),
            result: applied.result.clone(),
            rebased_from: None,
            resumption: resource.resumption(),
            effects: Vec::new(),
        };
        same("created", &expected, applied)?;
        self.resources.push(resource);
        let index = self.resources.len() - 1;
        self.record(
            call.who,
            call.operation.as_ref(),
            fingerprint,
            actual,
            index,
        );
        self.saw("created");
        Ok(())
    }

    fn read(&mut self, who: usize, handle: &str, actual: &ReadOutcome) -> Result<(), String> {
        let not_found = Rejected::not_found(KIND.kind);
        let answered_not_found = matches!(actual, ReadOutcome::Rejected(r) if *r == not_found);
        let Some(index) = self.resolve(who, handle, answered_not_found) else {
            self.saw("read not found");
            return same(
                "read of a handle not available",
                &ReadOutcome::Rejected(not_found),
                actual,
            );
        };
        let resource = &self.resources[index];
        if self.status(index) == Status::Live {
            // Reads return the whole state, not the view.
            let expected = ReadOutcome::Current(resource.snapshot(resource.current().clone()));
            self.saw("read");
            return same("read", &expected, actual);
        }
        let expired_at = format_rfc3339(resource.expires_at);
        match actual {
            ReadOutcome::Rejected(rejected)
                if rejected.code == code::EXPIRED
                    && rejected.recovery == Some(Recovery::CreateNew)
                    && rejected.details == Some(json!({ "expired_at": expired_at })) =>
            {
                self.saw("read expired");
                Ok(())
            }
            other => Err(format!("expected EXPIRED at {expired_at}, got {other:?}")),
        }
    }

    fn mutate(&mut self, call: &MutateCall, actual: &MutationOutcome) -> Result<(), String> {
        let fingerprint = call.fingerprint();
        if self.ledger_answer(call.who, call.operation.as_ref(), &fingerprint, actual)? {
            return Ok(());
        }
        let not_found = Rejected::not_found(KIND.kind);
        let answered_not_found = matches!(actual, MutationOutcome::Rejected(r) if *r == not_found);
        let Some(index) = self.resolve(call.who, &call.handle, answered_not_found) else {
            self.saw("not found");
            // Never recorded: the same id stays free for another payload.
            return same(
                "change of a handle not available",
                &MutationOutcome::Rejected(not_found),
                actual,
            );
        };
        let operation = call.operation.as_ref();
        // At a full share a terminal or expired answer is given but not recorded.
        let full = operation.is_some() && self.ledger_share(index) >= LEDGER_QUOTA;
        let resource = &self.resources[index];
        if lifecycle_of(resource.current()) == Lifecycle::Terminal {
            rejected(actual, code::TERMINAL, Some(Recovery::Stop), None)?;
            if !full {
                self.record(call.who, operation, fingerprint, actual, index);
            }
            self.saw("terminal");
            return Ok(());
        }
        if self.status(index) != Status::Live {
            let details = json!({ "expired_at": format_rfc3339(resource.expires_at) });
            rejected(
                actual,
                code::EXPIRED,
                Some(Recovery::CreateNew),
                Some(details),
            )?;
            if !full {
                self.record(call.who, operation, fingerprint, actual, index);
            }
            self.saw("expired");
            return Ok(());
        }
        if operation.is_some() {
            let live = self.ledger_share(index);
            let full = is_code(actual, code::LEDGER_FULL);
            if live >= LEDGER_QUOTA {
                let details = json!({ "limit": LEDGER_QUOTA });
                rejected(
                    actual,
                    code::LEDGER_FULL,
                    Some(Recovery::RetryLater),
                    Some(details),
                )?;
                self.saw("ledger full");
                return Ok(());
            }
            if full {
                return Err(format!(
                    "LEDGER_FULL with {live} of {LEDGER_QUOTA} live records on the resource"
                ));
            }
        }
        let resource = &self.resources[index];
        let version = resource.version();
        let mut rebased_from = None;
        if let Some(expected) = call.expected.filter(|&e| e != version) {
            assert!(
                expected < version,
                "the generator only sends versions it saw"
            );
            let available = expected + HISTORY_LIMIT > version;
            let before = &resource.versions[usize::try_from(expected).unwrap() - 1];
            let rebase = match call.policy {
                Policy::Rebase(mask) if available => {
                    let touches = Policy::touches(mask);
                    let spared = |changed: &HashSet<&str>| {
                        !touches.iter().any(|t| changed.contains(t.as_str()))
                    };
                    // "No intervening change touched" holds for the net difference, or for
                    // every change on the way (a member changed and changed back); the
                    // contract does not say which, so where they differ either answer goes.
                    let net = touched(before, resource.current());
                    let mut each = HashSet::new();
                    for pair in
                        resource.versions[usize::try_from(expected).unwrap() - 1..].windows(2)
                    {
                        each.extend(touched(&pair[0], &pair[1]));
                    }
                    match (spared(&net), spared(&each)) {
                        (false, _) => false,
                        (true, true) => true,
                        (true, false) => {
                            self.saw("rebase left open");
                            matches!(
                                actual,
                                MutationOutcome::Applied(_) | MutationOutcome::Rejected(_)
                            )
                        }
                    }
                }
                _ => false,
            };
            if !rebase {
                let mut delta = Vec::new();
                if available {
                    model_delta(
                        "",
                        &view_of(before),
                        &view_of(resource.current()),
                        &mut delta,
                    );
                }
                let expected = MutationOutcome::StaleView(StaleView {
                    code: code::STALE_VIEW.to_owned(),
                    handle: call.handle.clone(),
                    expected_version: expected,
                    current_version: version,
                    recovery: match call.policy {
                        Policy::Reconfirm => Recovery::Reconfirm,
                        _ => Recovery::RefreshAndReplan,
                    },
                    delta_available: available,
                    delta,
                    current_state: view_of(resource.current()).into(),
                    resumption: resource.resumption(),
                    confirmation: None,
                });
                same("stale view", &expected, actual)?;
                self.record(call.who, operation, fingerprint, actual, index);
                self.saw(match (available, call.policy) {
                    (_, Policy::Reconfirm) => "stale view, reconfirm",
                    (true, _) => "stale view with delta",
                    (false, _) => "stale view without delta",
                });
                return Ok(());
            }
            rebased_from = Some(expected);
            self.saw("rebased");
        }
        let mut next = resource.current().clone();
        match call.change.apply(&mut next) {
            Err(error) => {
                same(
                    "domain error",
                    &MutationOutcome::Rejected(Rejected::domain(&error)),
                    actual,
                )?;
                self.saw("domain error");
            }
            Ok(result) => {
                let now = self.now;
                let resource = &mut self.resources[index];
                resource.versions.push(next);
                resource.expires_at = now + millis(TTL);
                let expected = MutationOutcome::Applied(Applied {
                    handle: call.handle.clone(),
                    version: version + 1,
                    state: view_of(resource.current()).into(),
                    result,
                    rebased_from,
                    resumption: resource.resumption(),
                    effects: Vec::new(),
                });
                same("applied", &expected, actual)?;
                self.saw("applied");
            }
        }
        self.record(call.who, operation, fingerprint, actual, index);
        Ok(())
    }

    fn prune(&mut self, report: PruneReport) -> Result<(), String> {
        let now = self.now;
        let records_due: Vec<(usize, String)> = self
            .ledger
            .iter()
            .filter(|(_, record)| !record.live(now))
            .map(|(key, _)| key.clone())
            .collect();
        let resources_due: Vec<usize> = (0..self.resources.len())
            .filter(|&i| self.status(i) == Status::Reclaimable)
            .collect();
        // Automatic sweeps may have removed some of them already, unobserved.
        if report.ledger_records > records_due.len() as u64
            || report.resources > resources_due.len() as u64
        {
            return Err(format!(
                "prune removed {report:?}, but only {} ledger records and {} resources were due",
                records_due.len(),
                resources_due.len()
            ));
        }
        if report.ledger_records > 0 {
            self.saw("prune removed ledger records");
        }
        if report.resources > 0 {
            self.saw("prune removed resources");
        }
        for key in records_due {
            self.ledger.remove(&key);
        }
        for index in resources_due {
            self.resources[index].gone = true;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Running a sequence
// ---------------------------------------------------------------------------------------------

struct Run<'s, S> {
    store: &'s S,
    clock: ManualClock,
    model: Model,
    sent: Vec<Call>,
    fresh: usize,
}

impl<S: Store> Run<'_, S> {
    fn target(&self, who: usize, target: &Target) -> String {
        let all = &self.model.resources;
        let unknown = || format!("lbk_{}", "A".repeat(27));
        match target {
            Target::Own(pick) => {
                let owned: Vec<&Resource> = all.iter().filter(|r| r.owner == who).collect();
                if owned.is_empty() {
                    self.target(who, &Target::Any(*pick))
                } else {
                    owned[pick % owned.len()].handle.clone()
                }
            }
            Target::Any(pick) if !all.is_empty() => all[pick % all.len()].handle.clone(),
            Target::Any(_) | Target::Unknown => unknown(),
            Target::OtherPrefix(pick) if !all.is_empty() => {
                let handle = &all[pick % all.len()].handle;
                format!("bsk_{}", &handle["lbk_".len()..])
            }
            Target::OtherPrefix(_) => format!("bsk_{}", "A".repeat(27)),
            Target::Malformed(pick) => {
                ["", "lbk_", "lbk", "LBK_AAAA"][usize::from(*pick) % 4].to_owned()
            }
        }
    }

    fn operation(&mut self, id: &IdChoice) -> Option<String> {
        match id {
            IdChoice::Without => None,
            IdChoice::Fresh => {
                self.fresh += 1;
                Some(format!("fresh-{}", self.fresh))
            }
            IdChoice::Pool(n) => Some(format!("pool-{n}")),
        }
    }

    async fn step(&mut self, step: usize, op: &Op) -> Result<(), String> {
        match op {
            Op::Create { who, id, a, seeded } => {
                let items = if *seeded { json!(["seed"]) } else { json!([]) };
                let call = CreateCall {
                    who: *who,
                    operation: self.operation(id),
                    initial: json!({ "a": a, "b": 0, "done": false, "items": items }),
                };
                self.send(Call::Create(call)).await
            }
            Op::Read { who, target } => {
                let handle = self.target(*who, target);
                let request = ReadRequest::new(KIND, principal(*who), handle.clone());
                let outcome = within(&format!("a read of {handle}"), self.store.read(request))
                    .await
                    .map_err(|error| format!("read failed: {error}"))?;
                self.model
                    .read(*who, &handle, &outcome)
                    .map_err(|error| format!("read of {handle} by {who}: {error}"))
            }
            Op::Mutate {
                who,
                target,
                basis,
                id,
                policy,
                change,
            } => {
                let handle = self.target(*who, target);
                let version = self
                    .model
                    .find(&handle)
                    .map_or(1, |i| self.model.resources[i].version());
                let expected = match basis {
                    Basis::Absent => None,
                    Basis::Current => Some(version),
                    Basis::Behind(by) => Some(version.saturating_sub(*by).max(1)),
                };
                let change = match change {
                    ChangeChoice::Append => Change::Append(format!("token-{step}")),
                    ChangeChoice::Set(a, value) => Change::Set(if *a { "a" } else { "b" }, *value),
                    ChangeChoice::Finish => Change::Finish,
                    ChangeChoice::Fail => Change::Fail,
                };
                let call = MutateCall {
                    who: *who,
                    handle,
                    expected,
                    operation: self.operation(id),
                    policy: *policy,
                    change,
                };
                self.send(Call::Mutate(call)).await
            }
            Op::Resend {
                pick,
                same_payload,
                who,
            } => {
                if self.sent.is_empty() {
                    return Ok(());
                }
                let mut call = self.sent[pick % self.sent.len()].clone();
                match &mut call {
                    Call::Create(create) => {
                        create.who = who.unwrap_or(create.who);
                        if !same_payload {
                            create.initial["a"] = json!(create.initial["a"].as_i64().unwrap() + 10);
                        }
                    }
                    Call::Mutate(mutate) => {
                        mutate.who = who.unwrap_or(mutate.who);
                        if !same_payload {
                            mutate.change = mutate.change.varied(format!("token-{step}"));
                        }
                    }
                }
                self.send(call).await
            }
            Op::Prune => {
                let report = within("a prune", self.store.prune())
                    .await
                    .map_err(|error| format!("prune failed: {error}"))?;
                self.model.prune(report)
            }
            Op::Advance(ticks) => {
                let by = Duration::from_secs(TICK_SECS * ticks);
                self.clock.advance(by);
                self.model.now += millis(by);
                Ok(())
            }
        }
    }

    async fn send(&mut self, call: Call) -> Result<(), String> {
        let checked = match &call {
            Call::Create(create) => {
                let mut request =
                    CreateRequest::new(KIND, principal(create.who), create.initial.clone());
                if let Some(id) = &create.operation {
                    request = request.operation(id.clone(), create.fingerprint());
                }
                let outcome = within("a create", self.store.create(request))
                    .await
                    .map_err(|error| format!("create failed: {error}"))?;
                self.model.create(create, &outcome)
            }
            Call::Mutate(mutate) => {
                let mut request = MutationRequest::new(KIND, principal(mutate.who), &mutate.handle)
                    .policy(mutate.policy.conflict());
                if let Some(expected) = mutate.expected {
                    request = request.expect_version(expected);
                }
                if let Some(id) = &mutate.operation {
                    request = request.operation(id.clone(), mutate.fingerprint());
                }
                let outcome = within(
                    &format!("a change of {}", mutate.handle),
                    self.store.mutate(request, mutate.change.transition()),
                )
                .await
                .map_err(|error| format!("mutate failed: {error}"))?;
                self.model.mutate(mutate, &outcome)
            }
        };
        checked.map_err(|error| format!("{call:?}\n  {error}"))?;
        let has_id = match &call {
            Call::Create(create) => create.operation.is_some(),
            Call::Mutate(mutate) => mutate.operation.is_some(),
        };
        if has_id {
            self.sent.push(call);
        }
        Ok(())
    }
}

/// Replays `ops` against `store` (fresh, on `clock` at [`T0`]) and the model.
async fn run_sequence<S: Store>(
    store: &S,
    clock: ManualClock,
    ops: &[Op],
) -> Result<BTreeMap<&'static str, u64>, String> {
    let mut run = Run {
        store,
        clock,
        model: Model::new(),
        sent: Vec::new(),
        fresh: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        run.step(step, op)
            .await
            .map_err(|error| format!("at step {step} ({op:?}):\n  {error}"))?;
    }
    Ok(run.model.coverage.into_inner())
}

fn model_config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        ledger_retention: RETENTION,
        history_limit: HISTORY_LIMIT,
        ledger_quota: LEDGER_QUOTA,
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    }
}

/// What every run of the default size must have exercised, so a generator that stops reaching
/// a branch fails instead of passing vacuously.
const MUST_SEE: [&str; 17] = [
    "created",
    "create answered by the ledger",
    "operation id reused",
    "replayed with current",
    "replayed without current",
    "not found",
    "read not found",
    "terminal",
    "expired",
    "read expired",
    "ledger full",
    "stale view with delta",
    "stale view without delta",
    "stale view, reconfirm",
    "rebased",
    "domain error",
    "prune removed resources",
];

fn run_model<S: Store, F: Future<Output = S>>(
    label: &str,
    default_cases: u32,
    open: impl Fn(ManualClock, &Path) -> F,
) {
    let cases = cases(default_cases);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let coverage = Mutex::new(BTreeMap::<&'static str, u64>::new());
    let operations = Mutex::new(0usize);
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        // Failures are reported with their shrunk sequence; nothing is written to the tree.
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&sequence(), |ops| {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at_millis(T0);
        let store = runtime.block_on(open(clock.clone(), dir.path()));
        let seen = runtime
            .block_on(run_sequence(&store, clock, &ops))
            .map_err(TestCaseError::fail)?;
        *operations.lock().unwrap() += ops.len();
        let mut total = coverage.lock().unwrap();
        for (what, count) in seen {
            *total.entry(what).or_default() += count;
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{label} departs from the model: {error}");
    }
    let coverage = coverage.into_inner().unwrap();
    eprintln!(
        "{label}: {cases} sequences, {} operations in {:?}; outcomes seen: {coverage:?}",
        operations.into_inner().unwrap(),
        started.elapsed()
    );
    if cases >= default_cases {
        let missing: Vec<&str> = MUST_SEE
            .iter()
            .copied()
            .filter(|what| !coverage.contains_key(what))
            .collect();
        assert!(missing.is_empty(), "{label}: never exercised {missing:?}");
    }
}

#[test]
fn memory_store_answers_every_sequence_as_the_model_does() {
    run_model("MemoryStore", 2000, |clock, _| {
        std::future::ready(MemoryStore::new(model_config(&clock)))
    });
}

#[test]
fn sqlite_store_answers_every_sequence_as_the_model_does() {
    run_model("SqliteStore", 1000, |clock, dir| {
        std::future::ready(SqliteStore::open(dir.join("model.db"), model_config(&clock)).unwrap())
    });
}

/// Each sequence gets tables of its own (a table prefix per sequence in one schema).
#[cfg(feature = "postgres")]
#[test]
fn postgres_store_answers_every_sequence_as_the_model_does() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    run_model("PostgresStore", 300, |clock, _| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let options = mcp_tools::store::PostgresOptions {
            table_prefix: format!("m{n}_"),
            ..schema.options()
        };
        let schema = &schema;
        async move { schema.connect_with(model_config(&clock), options).await }
    });
}

/// The model is strict enough to notice a store that applies changes made on a stale view.
#[test]
fn the_model_rejects_a_store_that_skips_the_version_check() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ops = [
        Op::Create {
            who: 0,
            id: IdChoice::Without,
            a: 0,
            seeded: false,
        },
        Op::Mutate {
            who: 0,
            target: Target::Own(0),
            basis: Basis::Current,
            id: IdChoice::Without,
            policy: Policy::Reject,
            change: ChangeChoice::Append,
        },
        Op::Mutate {
            who: 0,
            target: Target::Own(0),
            basis: Basis::Behind(1),
            id: IdChoice::Without,
            policy: Policy::Reject,
            change: ChangeChoice::Append,
        },
    ];
    let clock = ManualClock::at_millis(T0);
    let store = MemoryStore::new(StoreConfig {
        unchecked_versions_for_tests: true,
        ..model_config(&clock)
    });
    let error = runtime
        .block_on(run_sequence(&store, clock, &ops))
        .expect_err("a stale change was applied and the model did not notice");
    assert!(error.contains("stale view"), "{error}");
}

/// A resource whose ledger share is full (five applied changes under fresh operation ids, the
/// last one `last`), then `then`, then one more change under a fresh operation id.
fn after_a_full_share(last: ChangeChoice, then: Option<Op>) -> Vec<Op> {
    let change = |change| Op::Mutate {
        who: 0,
        target: Target::Own(0),
        basis: Basis::Current,
        id: IdChoice::Fresh,
        policy: Policy::Reject,
        change,
    };
    let mut ops = vec![Op::Create {
        who: 0,
        id: IdChoice::Fresh,
        a: 0,
        seeded: false,
    }];
    ops.extend(
        [
            ChangeChoice::Append,
            ChangeChoice::Append,
            ChangeChoice::Append,
            last,
        ]
        .map(change),
    );
    ops.extend(then);
    ops.push(change(ChangeChoice::Append));
    ops
}

/// The boundary judges lifecycle and expiry before the ledger share, so a finished or expired
/// resource says so (recovery `stop`, `create_new`) instead of "retry later" with `LEDGER_FULL`,
/// advice that can never succeed.
fn terminal_and_expired_come_before_ledger_full<S: Store, F: Future<Output = S>>(
    open: impl Fn(ManualClock, &Path) -> F,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let finished = after_a_full_share(ChangeChoice::Finish, None);
    // Past the time to live, well within the ledger retention.
    let expired = after_a_full_share(ChangeChoice::Append, Some(Op::Advance(11)));
    for (what, ops) in [
        ("a finished resource", finished),
        ("an expired resource", expired),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at_millis(T0);
        let store = runtime.block_on(open(clock.clone(), dir.path()));
        if let Err(error) = runtime.block_on(run_sequence(&store, clock, &ops)) {
            panic!("{what} with a full ledger share: {error}");
        }
    }
}

#[test]
fn memory_store_answers_terminal_and_expired_before_ledger_full() {
    terminal_and_expired_come_before_ledger_full(|clock, _| {
        std::future::ready(MemoryStore::new(model_config(&clock)))
    });
}

#[test]
fn sqlite_store_answers_terminal_and_expired_before_ledger_full() {
    terminal_and_expired_come_before_ledger_full(|clock, dir| {
        std::future::ready(SqliteStore::open(dir.join("model.db"), model_config(&clock)).unwrap())
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_answers_terminal_and_expired_before_ledger_full() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    terminal_and_expired_come_before_ledger_full(|clock, _| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let options = mcp_tools::store::PostgresOptions {
            table_prefix: format!("f{n}_"),
            ..schema.options()
        };
        let schema = &schema;
        async move { schema.connect_with(model_config(&clock), options).await }
    });
}

// ---------------------------------------------------------------------------------------------
// Concurrent runs
// ---------------------------------------------------------------------------------------------

/// A kind without view or expiry: the final state shows every applied change.
const TALLY: EntityKind = EntityKind::new("tally", "tly");
const RESOURCES: usize = 3;
const AGENTS: usize = 8;
const AGENT_OPS: usize = 30;

/// SplitMix64: a seeded source of choices, so a failing round can be told apart by its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// How a change sets `count`: to the value it computed from the version it saw (the shape that
/// loses updates without the version check), or by one on whatever is there.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Write {
    Blind(u64),
    Increment,
}

#[derive(Debug, Clone)]
struct Sent {
    id: String,
    resource: usize,
    expected: Option<u64>,
    write: Write,
    token: String,
}

impl Sent {
    fn request(&self, handle: &str) -> (MutationRequest, Transition) {
        let fingerprint = Fingerprint::of_call(
            "tally_append",
            &json!({
                "handle": handle,
                "expected_version": self.expected,
                "write": format!("{:?}", self.write),
                "token": self.token,
            }),
        );
        let mut request = MutationRequest::new(TALLY, Principal::subject("alice"), handle)
            .operation(self.id.clone(), fingerprint);
        if let Some(expected) = self.expected {
            request = request.expect_version(expected);
        }
        let (write, token) = (self.write, self.token.clone());
        let transition = Transition::new(move |state: &mut Value| {
            let count = state["count"].as_u64().unwrap_or(0);
            state["count"] = json!(match write {
                Write::Blind(count) => count,
                Write::Increment => count + 1,
            });
            state["items"].as_array_mut().unwrap().push(json!(token));
            Ok(json!(token))
        });
        (request, transition)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Intent {
    /// The first send of an id, or a retry of it with the same payload.
    Send,
    /// The id again with another payload.
    Reuse,
}

async fn send<S: Store>(
    store: &S,
    handles: &[String],
    sent: &Sent,
) -> Result<MutationOutcome, String> {
    let handle = &handles[sent.resource];
    let (request, transition) = sent.request(handle);
    within(
        &format!("{} on {handle}", sent.id),
        store.mutate(request, transition),
    )
    .await
    .map_err(|error| format!("{}: {error}", sent.id))
}

/// The (version, count) pairs an outcome shows.
fn shown(outcome: &MutationOutcome) -> Option<(u64, u64)> {
    let count = |state: &Value| state["count"].as_u64().unwrap_or(0);
    match outcome {
        MutationOutcome::Applied(applied) => Some((applied.version, count(&applied.state))),
        MutationOutcome::StaleView(stale) => {
            Some((stale.current_version, count(&stale.current_state)))
        }
        MutationOutcome::Replayed(replayed) => replayed
            .current
            .as_ref()
            .map(|now| (now.version, count(&now.state))),
        MutationOutcome::Rejected(_) => None,
        other => panic!("an outcome the model does not know: {other:?}"),
    }
}

type Log = Vec<(Sent, Intent, MutationOutcome)>;

async fn agent<S: Store + Clone>(
    stores: Vec<S>,
    handles: Arc<Vec<String>>,
    agent: usize,
    seed: u64,
    done: Arc<Mutex<Vec<Sent>>>,
) -> Result<Log, String> {
    let mut rng = Rng(seed ^ (agent as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    // Per resource, the (version -> count) pairs this agent has been shown.
    let mut seen: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::from([(1, 0)]); RESOURCES];
    let mut log = Log::new();
    for step in 0..AGENT_OPS {
        let resource = rng.below(RESOURCES);
        let store = &stores[rng.below(stores.len())];
        let id = format!("agent-{agent}-{step}");
        let fresh = |expected: Option<(u64, u64)>| Sent {
            id: id.clone(),
            resource,
            expected: expected.map(|(version, _)| version),
            write: expected.map_or(Write::Increment, |(_, count)| Write::Blind(count + 1)),
            token: id.clone(),
        };
        let latest = seen[resource].last_key_value().map(|(v, c)| (*v, *c));
        let roll = rng.below(100);
        let (sent, intent) = if roll < 15 {
            let request = ReadRequest::new(
                TALLY,
                Principal::subject("alice"),
                handles[resource].clone(),
            );
            match within("a read", store.read(request)).await {
                Ok(ReadOutcome::Current(now)) => {
                    seen[resource].insert(now.version, now.state["count"].as_u64().unwrap());
                }
                other => return Err(format!("read: {other:?}")),
            }
            (
                fresh(seen[resource].last_key_value().map(|(v, c)| (*v, *c))),
                Intent::Send,
            )
        } else if roll < 50 {
            (fresh(latest), Intent::Send)
        } else if roll < 62 {
            (fresh(None), Intent::Send)
        } else if roll < 74 {
            // A version this agent knows is superseded.
            let older: Vec<(u64, u64)> = seen[resource]
                .iter()
                .rev()
                .skip(1)
                .map(|(v, c)| (*v, *c))
                .collect();
            match older.get(rng.below(older.len().max(1))) {
                Some(old) => (fresh(Some(*old)), Intent::Send),
                None => (fresh(latest), Intent::Send),
            }
        } else if roll < 92 {
            let earlier = {
                let done = done.lock().unwrap();
                (!done.is_empty()).then(|| done[rng.below(done.len())].clone())
            };
            match earlier {
                Some(earlier) if roll < 86 => (earlier, Intent::Send),
                Some(mut earlier) => {
                    earlier.token = format!("{}-reused", earlier.token);
                    (earlier, Intent::Reuse)
                }
                None => (fresh(latest), Intent::Send),
            }
        } else {
            // The same request twice at once, as a client retrying before the first answer.
            let sent = fresh(latest);
            let tasks: Vec<_> = [stores[0].clone(), stores[stores.len() - 1].clone()]
                .into_iter()
                .map(|store| {
                    let (handles, sent) = (Arc::clone(&handles), sent.clone());
                    tokio::spawn(async move { send(&store, &handles, &sent).await })
                })
                .collect();
            for task in tasks {
                let outcome = within("a duplicated send", task)
                    .await
                    .map_err(|e| e.to_string())??;
                if let Some((version, count)) = shown(&outcome) {
                    seen[resource].insert(version, count);
                }
                log.push((sent.clone(), Intent::Send, outcome));
            }
            done.lock().unwrap().push(sent);
            continue;
        };
        let outcome = send(store, &handles, &sent).await?;
        if let Some((version, count)) = shown(&outcome) {
            seen[sent.resource].insert(version, count);
        }
        if intent == Intent::Send {
            done.lock().unwrap().push(sent.clone());
        }
        log.push((sent, intent, outcome));
    }
    Ok(log)
}

/// One concurrent round on `stores` (several handles on one storage); `Err` says which
/// invariant broke.
async fn concurrent_round<S: Store + Clone>(
    stores: &[S],
    seed: u64,
) -> Result<(usize, usize), String> {
    let mut handles = Vec::new();
    for _ in 0..RESOURCES {
        let request = CreateRequest::new(
            TALLY,
            Principal::subject("alice"),
            json!({ "count": 0, "items": [] }),
        );
        match within("a create", stores[0].create(request)).await {
            Ok(MutationOutcome::Applied(applied)) => handles.push(applied.handle),
            other => return Err(format!("create: {other:?}")),
        }
    }
    let handles = Arc::new(handles);
    let done = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..AGENTS)
        .map(|n| {
            tokio::spawn(agent(
                stores.to_vec(),
                Arc::clone(&handles),
                n,
                seed,
                Arc::clone(&done),
            ))
        })
        .collect();
    let mut log = Log::new();
    for (n, task) in tasks.into_iter().enumerate() {
        log.extend(
            within(&format!("agent {n}"), task)
                .await
                .map_err(|e| e.to_string())??,
        );
    }

    // The outcome each id's one execution produced; every other send of it is a replay of that.
    let mut executed: HashMap<String, (Sent, MutationOutcome)> = HashMap::new();
    let mut replays = Vec::new();
    for (sent, intent, outcome) in &log {
        match (intent, outcome) {
            (Intent::Reuse, outcome) if is_code(outcome, code::OPERATION_ID_REUSED) => {}
            (Intent::Reuse, other) => {
                return Err(format!("{} with another payload: {other:?}", sent.id));
            }
            (Intent::Send, MutationOutcome::Replayed(replayed)) => replays.push((sent, replayed)),
            (Intent::Send, MutationOutcome::Applied(_) | MutationOutcome::StaleView(_)) => {
                if executed
                    .insert(sent.id.clone(), (sent.clone(), outcome.clone()))
                    .is_some()
                {
                    return Err(format!("operation {} was executed twice", sent.id));
                }
            }
            (Intent::Send, other) => return Err(format!("{}: unexpected {other:?}", sent.id)),
        }
    }
    for (sent, replayed) in &replays {
        let Some((_, original)) = executed.get(&sent.id) else {
            return Err(format!("{} was replayed but never executed", sent.id));
        };
        if replayed.original != summary(original) {
            return Err(format!(
                "the replay of {} answers {:?}, its execution was {original:?}",
                sent.id, replayed.original
            ));
        }
    }
    let mut applied_total = 0;
    for (resource, handle) in handles.iter().enumerate() {
        let mut applied: Vec<(u64, &Sent)> = Vec::new();
        for (sent, outcome) in executed.values().filter(|(s, _)| s.resource == resource) {
            match outcome {
                MutationOutcome::Applied(applied_now) => {
                    if let Some(expected) = sent.expected
                        && applied_now.version != expected + 1
                    {
                        return Err(format!(
                            "{} based on version {expected} was applied as version {}",
                            sent.id, applied_now.version
                        ));
                    }
                    applied.push((applied_now.version, sent));
                }
                MutationOutcome::StaleView(stale) => {
                    if Some(stale.expected_version) != sent.expected
                        || stale.current_version <= stale.expected_version
                    {
                        return Err(format!(
                            "{} got a stale view it was not: {stale:?}",
                            sent.id
                        ));
                    }
                }
                _ => unreachable!(),
            }
        }
        applied.sort_by_key(|(version, _)| *version);
        let request = ReadRequest::new(TALLY, Principal::subject("alice"), handle.clone());
        let now = match within("the final read", stores[0].read(request)).await {
            Ok(ReadOutcome::Current(now)) => now,
            other => return Err(format!("final read: {other:?}")),
        };
        let items: Vec<&str> = now.state["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item.as_str().unwrap())
            .collect();
        let unique: HashSet<&str> = items.iter().copied().collect();
        if unique.len() != items.len() {
            return Err(format!("{handle}: a token appears twice in {items:?}"));
        }
        let tokens: Vec<&str> = applied
            .iter()
            .map(|(_, sent)| sent.token.as_str())
            .collect();
        if items != tokens {
            return Err(format!(
                "{handle}: the state holds {items:?}, the acknowledged changes in version order are {tokens:?}"
            ));
        }
        let versions: Vec<u64> = applied.iter().map(|(version, _)| *version).collect();
        let contiguous: Vec<u64> = (2..2 + applied.len() as u64).collect();
        if versions != contiguous || now.version != 1 + applied.len() as u64 {
            return Err(format!(
                "{handle}: at version {} after applied versions {versions:?}",
                now.version
            ));
        }
        if now.state["count"] != json!(applied.len()) {
            return Err(format!(
                "{handle}: count {} after {} applied changes: updates were lost",
                now.state["count"],
                applied.len()
            ));
        }
        applied_total += applied.len();
    }
    Ok((applied_total, replays.len()))
}

fn rounds(default: u64) -> u64 {
    let scale = cases(0);
    if scale == 0 {
        default
    } else {
        default.max(u64::from(scale) / 100)
    }
}

async fn concurrent<S: Store + Clone>(label: &str, open: impl Fn() -> Vec<S>) {
    let started = Instant::now();
    let rounds = rounds(3);
    let (mut applied, mut replays) = (0, 0);
    for round in 0..rounds {
        let seed = 0x5eed_0000 + round;
        match concurrent_round(&open(), seed).await {
            Ok((a, r)) => {
                applied += a;
                replays += r;
            }
            Err(error) => panic!("{label}, seed {seed:#x}: {error}"),
        }
    }
    eprintln!(
        "{label}: {rounds} rounds of {AGENTS} agents x {AGENT_OPS} operations: {applied} applied, {replays} replays, in {:?}",
        started.elapsed()
    );
}

/// The concurrent checks fail, deterministically, once stale changes are let through.
async fn concurrent_without_the_version_check<S: Store + Clone>(label: &str, stores: Vec<S>) {
    let error = concurrent_round(&stores, 0x5eed_dead)
        .await
        .expect_err("the concurrent checks did not notice changes applied on stale versions");
    eprintln!("{label} with the version check off: {error}");
}

fn unchecked() -> StoreConfig {
    StoreConfig {
        unchecked_versions_for_tests: true,
        ..StoreConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_applies_each_operation_once_under_contention() {
    concurrent("MemoryStore", || {
        let store = MemoryStore::new(StoreConfig::default());
        vec![store.clone(), store]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_applies_each_operation_once_under_contention() {
    let dir = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    concurrent("SqliteStore", || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let store = SqliteStore::open(
            dir.path().join(format!("one-{n}.db")),
            StoreConfig::default(),
        )
        .unwrap();
        vec![store]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sqlite_stores_on_one_file_apply_each_operation_once() {
    let dir = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    concurrent("two SqliteStores on one file", || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("shared-{n}.db"));
        let first = SqliteStore::open(&path, StoreConfig::default()).unwrap();
        let second = SqliteStore::open(&path, StoreConfig::default()).unwrap();
        vec![first, second]
    })
    .await;
}

/// Three stores on one database stand for three replicas on three hosts.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_postgres_stores_on_one_database_apply_each_operation_once() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    concurrent("three PostgresStores on one database", || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        schema.replicas(3, &format!("c{n}_"))
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrent_checks_fail_on_postgres_stores_without_the_version_check() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..2 {
        stores.push(schema.connect(unchecked()).await);
    }
    concurrent_without_the_version_check("two PostgresStores", stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrent_checks_fail_on_a_memory_store_without_the_version_check() {
    let store = MemoryStore::new(unchecked());
    concurrent_without_the_version_check("MemoryStore", vec![store.clone(), store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrent_checks_fail_on_sqlite_stores_without_the_version_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unchecked.db");
    let stores = vec![
        SqliteStore::open(&path, unchecked()).unwrap(),
        SqliteStore::open(&path, unchecked()).unwrap(),
    ];
    concurrent_without_the_version_check("two SqliteStores", stores).await;
}
