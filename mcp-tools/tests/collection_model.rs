//! A model-based test of `Collection` fields: items stored one by one, versioned one by one.
//!
//! Random sequences of appends, item edits and removals (planned on the current version or on an
//! older one), scalar changes, finishes, resent operation ids, paged reads and reads since a
//! version run against each store and against `Model`, a small reference implementation written
//! from the documented semantics of `ConflictPolicy::Items`, item pages and item deltas; every
//! outcome a store gives is compared with the model's, field by field.
//!
//! A concurrent run then checks what a sequential model cannot: agents that read an item and
//! write it back with a token appended, under `ConflictPolicy::Items`, lose no update and apply
//! every operation id once; with the version check switched off the same check must fail.
//!
//! `MCP_MODEL_CASES` sets how many sequences each store runs (and scales the concurrent rounds).

#[cfg(feature = "postgres")]
mod pg;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_tools::ToolError;
use mcp_tools::auth::Principal;
use mcp_tools::protocol::framework::code;
use mcp_tools::store::{
    Applied, Changes, Collection, ConflictPolicy, CreateRequest, EffectState, EffectTicket, Entity,
    FieldChange, Fingerprint, Lifecycle, ManualClock, MutationOutcome, MutationRequest,
    PartVersion, ReadOutcome, ReadRequest, RecordedApplied, RecordedOutcome, RecordedStaleView,
    RecordedStep, Rejected, Replayed, Resumption, Snapshot, StaleView, StepOutcome, StepPart,
    StepRequest, StepTransition, Store, StoreConfig, Transition, format_rfc3339,
};
use mcp_tools::{MemoryStore, Recovery, SqliteStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// 2026-07-28T09:30:00Z: the stores' clock, which never moves, so every record is stamped with it.
const T0: i64 = 1_785_231_000_000;
/// Far more versions than a sequence makes: no history, and no remembered removal, is forgotten
/// during a sequence, so the model never guesses about forgetting.
const HISTORY_LIMIT: u64 = 1000;
/// The most items a read's page holds.
const PAGE: usize = 50;
/// The most item changes a read since a version lists.
const MAX_ITEM_DELTA: usize = 100;
/// The collection field, as paths and pages name it.
const FIELD: &str = "steps";

/// How long any single store call, barrier or join may take before the test fails instead of
/// hanging.
const STEP: Duration = Duration::from_secs(30);
/// How long a whole concurrent round may take.
const WORKLOAD: Duration = Duration::from_secs(180);

/// Awaits `future`, failing the test with `what` if it takes longer than [`STEP`].
async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    within_for(STEP, what, future).await
}

/// Awaits `future`, failing the test with `what` if it takes longer than `limit`.
async fn within_for<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// How many sequences each store runs: `MCP_MODEL_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("MCP_MODEL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// A plan of steps: a scalar title and a collection stored item by item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "plan", prefix = "pln", lifecycle = lifecycle)]
struct Plan {
    title: String,
    steps: Collection<String>,
    done: bool,
}

impl Plan {
    fn lifecycle(&self) -> Lifecycle {
        if self.done {
            Lifecycle::Terminal
        } else {
            Lifecycle::Active
        }
    }
}

/// What a plan's changes emit: a note per appended step, and the finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum PlanEvent {
    Noted(String),
    Finished,
}

impl mcp_tools::effects::Effect for PlanEvent {
    const KIND: &'static str = "plan_event";
}

fn alice() -> Principal {
    Principal::subject("alice")
}

/// The tool's own error for an item that is not there; the model makes the same one.
fn no_such_step(id: u64) -> ToolError {
    ToolError::new("NO_SUCH_STEP", format!("no step {id}"))
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

/// The field-level changes between two stored documents, written from the contract's
/// description of a delta (objects member by member in key order, anything else whole),
/// independently of the library's own diff.
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
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            path: path.to_owned(),
            before: Some(a.clone()),
            after: Some(b.clone()),
        }),
    }
}

/// An item as a delta shows it: the item now, or no `after` for a removal; never a `before`.
fn item_change(id: u64, version: u64, value: Option<&str>) -> FieldChange {
    FieldChange {
        path: format!("/{FIELD}/items/{id}"),
        before: None,
        after: value.map(|value| json!({ "id": id, "version": version, "value": value })),
    }
}

/// The id an item change's path names.
fn item_id(change: &FieldChange) -> Option<u64> {
    change
        .path
        .strip_prefix(&format!("/{FIELD}/items/"))?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// What a change does. The store runs it as a typed transition over `Plan`; the model works it
/// out on its own item map.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    /// Appends these texts, one item each, without an expected version.
    Append(Vec<String>),
    /// Sets the text of an item, under `ConflictPolicy::Items`.
    Edit(u64, String),
    /// Removes an item, under `ConflictPolicy::Items`.
    Remove(u64),
    /// Sets the title, under `ConflictPolicy::Reject`.
    Retitle(String),
    /// Sets `done`: the plan turns terminal.
    Finish,
}

impl Action {
    fn describe(&self) -> Value {
        match self {
            Action::Append(texts) => json!({ "append": texts }),
            Action::Edit(id, text) => json!({ "edit": id, "to": text }),
            Action::Remove(id) => json!({ "remove": id }),
            Action::Retitle(title) => json!({ "retitle": title }),
            Action::Finish => json!("finish"),
        }
    }

    fn policy(&self) -> ConflictPolicy {
        match self {
            Action::Append(_) | Action::Edit(..) | Action::Remove(_) => ConflictPolicy::Items,
            Action::Retitle(_) | Action::Finish => ConflictPolicy::Reject,
        }
    }

    fn transition(&self) -> Transition {
        match self.clone() {
            Action::Append(texts) => Transition::typed_with_effects(
                move |plan: &mut Plan, events: &mut mcp_tools::effects::Effects<PlanEvent>| {
                    let mut ids = Vec::new();
                    for text in &texts {
                        ids.push(plan.steps.push(text.clone()));
                        events.emit(PlanEvent::Noted(text.clone()));
                    }
                    Ok::<_, ToolError>(ids)
                },
            ),
            Action::Edit(id, text) => {
                Transition::typed(move |plan: &mut Plan| match plan.steps.get_mut(id) {
                    Some(step) => {
                        step.clone_from(&text);
                        Ok(json!({ "edited": id }))
                    }
                    None => Err(no_such_step(id)),
                })
            }
            Action::Remove(id) => {
                Transition::typed(move |plan: &mut Plan| match plan.steps.remove(id) {
                    Some(_) => Ok(plan.steps.len()),
                    None => Err(no_such_step(id)),
                })
            }
            Action::Retitle(title) => Transition::typed(move |plan: &mut Plan| {
                plan.title.clone_from(&title);
                Ok::<_, ToolError>(())
            }),
            Action::Finish => Transition::typed_with_effects(
                |plan: &mut Plan, events: &mut mcp_tools::effects::Effects<PlanEvent>| {
                    plan.done = true;
                    events.emit(PlanEvent::Finished);
                    Ok::<_, ToolError>(())
                },
            ),
        }
    }

    /// Another payload, for an operation id sent again.
    fn varied(&self) -> Action {
        match self {
            Action::Append(texts) => {
                Action::Append(texts.iter().map(|text| format!("{text}'")).collect())
            }
            Action::Edit(id, text) => Action::Edit(*id, format!("{text}'")),
            Action::Remove(id) => Action::Remove(id + 1),
            Action::Retitle(title) => Action::Retitle(format!("{title}'")),
            Action::Finish => Action::Append(vec!["after finish".into()]),
        }
    }

    /// How many effects the action emits when it applies.
    fn emits(&self) -> usize {
        match self {
            Action::Append(texts) => texts.len(),
            Action::Finish => 1,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Call {
    resource: usize,
    expected: Option<u64>,
    operation: Option<String>,
    action: Action,
}

impl Call {
    fn fingerprint(&self, handle: &str) -> Fingerprint {
        Fingerprint::of_call(
            "plan_change",
            &json!({
                "handle": handle,
                "expected_version": self.expected,
                "change": self.action.describe(),
            }),
        )
    }

    fn request(&self, handle: &str) -> MutationRequest {
        let mut request =
            MutationRequest::new(Plan::kind(), alice(), handle).policy(self.action.policy());
        if let Some(expected) = self.expected {
            request = request.expect_version(expected);
        }
        if let Some(operation) = &self.operation {
            request = request.operation(operation.clone(), self.fingerprint(handle));
        }
        request
    }
}

// ---------------------------------------------------------------------------------------------
// Generated operations, resolved against the model when they run
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum IdChoice {
    Without,
    Fresh,
    /// One of a few ids reused with whatever payload comes along.
    Pool(u8),
}

#[derive(Debug, Clone)]
enum ItemPick {
    /// One of the items there now (another kind of id when there is none).
    Present(usize),
    /// One of the items removed (a present one, when none was).
    Removed(usize),
    /// An id never minted: 0, or the next ids to be minted.
    Never(u64),
}

#[derive(Debug, Clone)]
enum Basis {
    Current,
    /// This many versions back (at most to version 1).
    Behind(u64),
    /// Any older version the test remembers.
    Older(usize),
    /// A version the resource never reached.
    Future(u64),
}

#[derive(Debug, Clone)]
enum PageAfter {
    First,
    /// After an id from 0 to a little past the last one minted.
    After(u64),
    /// After an id of a collection the entity does not have: the first page.
    OtherField(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        resource: usize,
        /// Items at once, when not one.
        bulk: Option<usize>,
        id: IdChoice,
    },
    Edit {
        resource: usize,
        item: ItemPick,
        basis: Basis,
        id: IdChoice,
    },
    Remove {
        resource: usize,
        item: ItemPick,
        basis: Basis,
        id: IdChoice,
    },
    Retitle {
        resource: usize,
        basis: Basis,
        id: IdChoice,
    },
    Finish {
        resource: usize,
        id: IdChoice,
    },
    /// Sends an earlier request that had an operation id again: the same request (a retry),
    /// or another payload under the same id.
    Resend {
        pick: usize,
        same_payload: bool,
    },
    ReadPage {
        resource: usize,
        after: PageAfter,
    },
    ReadSince {
        resource: usize,
        since: Basis,
    },
}

fn id_choice() -> impl Strategy<Value = IdChoice> {
    prop_oneof![
        3 => Just(IdChoice::Without),
        5 => Just(IdChoice::Fresh),
        2 => (0u8..3).prop_map(IdChoice::Pool),
    ]
}

fn item_pick() -> impl Strategy<Value = ItemPick> {
    prop_oneof![
        6 => any::<usize>().prop_map(ItemPick::Present),
        3 => any::<usize>().prop_map(ItemPick::Removed),
        1 => (0u64..3).prop_map(ItemPick::Never),
    ]
}

fn basis() -> impl Strategy<Value = Basis> {
    prop_oneof![
        4 => Just(Basis::Current),
        3 => (1u64..4).prop_map(Basis::Behind),
        3 => any::<usize>().prop_map(Basis::Older),
        1 => (1u64..3).prop_map(Basis::Future),
    ]
}

fn page_after() -> impl Strategy<Value = PageAfter> {
    prop_oneof![
        2 => Just(PageAfter::First),
        4 => any::<u64>().prop_map(PageAfter::After),
        1 => any::<u64>().prop_map(PageAfter::OtherField),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let resource = 0usize..2;
    prop_oneof![
        16 => (
            resource.clone(),
            prop::option::weighted(0.15, prop_oneof![3 => 20usize..60, 1 => 95usize..130]),
            id_choice(),
        )
            .prop_map(|(resource, bulk, id)| Op::Append { resource, bulk, id }),
        16 => (resource.clone(), item_pick(), basis(), id_choice())
            .prop_map(|(resource, item, basis, id)| Op::Edit { resource, item, basis, id }),
        8 => (resource.clone(), item_pick(), basis(), id_choice())
            .prop_map(|(resource, item, basis, id)| Op::Remove { resource, item, basis, id }),
        6 => (resource.clone(), basis(), id_choice())
            .prop_map(|(resource, basis, id)| Op::Retitle { resource, basis, id }),
        1 => (resource.clone(), id_choice()).prop_map(|(resource, id)| Op::Finish { resource, id }),
        8 => (any::<usize>(), prop::bool::weighted(0.6))
            .prop_map(|(pick, same_payload)| Op::Resend { pick, same_payload }),
        6 => (resource.clone(), page_after())
            .prop_map(|(resource, after)| Op::ReadPage { resource, after }),
        8 => (resource, basis()).prop_map(|(resource, since)| Op::ReadSince { resource, since }),
    ]
}

/// One or two plans, then the operations.
fn sequence() -> impl Strategy<Value = (bool, Vec<Op>)> {
    (any::<bool>(), prop::collection::vec(op(), 1..50))
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

/// An item as the model keeps it: the version that last wrote it, and its text (`None`: removed
/// at that version).
#[derive(Debug, Clone)]
struct Item {
    version: u64,
    value: Option<String>,
}

struct Resource {
    handle: String,
    /// Every version's stored document (title, counts, done), version 1 first.
    docs: Vec<Value>,
    /// Every item ever minted, by id; removed ones are remembered (the history never drops).
    items: BTreeMap<u64, Item>,
    /// The keys of the effects its applied changes emitted, in order.
    effects: Vec<String>,
}

impl Resource {
    fn new(handle: String) -> Self {
        Resource {
            handle,
            docs: vec![json!({
                "title": "move",
                "steps": { "len": 0, "next_id": 1 },
                "done": false,
            })],
            items: BTreeMap::new(),
            effects: Vec::new(),
        }
    }

    fn version(&self) -> u64 {
        self.docs.len() as u64
    }

    fn doc(&self) -> &Value {
        self.docs.last().unwrap()
    }

    fn doc_at(&self, version: u64) -> &Value {
        &self.docs[usize::try_from(version - 1).unwrap()]
    }

    fn terminal(&self) -> bool {
        self.doc()["done"] == json!(true)
    }

    fn next_id(&self) -> u64 {
        self.doc()["steps"]["next_id"].as_u64().unwrap()
    }

    fn present(&self) -> Vec<u64> {
        self.items
            .iter()
            .filter(|(_, item)| item.value.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    fn removed(&self) -> Vec<u64> {
        self.items
            .iter()
            .filter(|(_, item)| item.value.is_none())
            .map(|(id, _)| *id)
            .collect()
    }

    fn resumption(&self) -> Resumption {
        Resumption {
            handle: self.handle.clone(),
            basis_version: self.version(),
            lifecycle: if self.terminal() {
                Lifecycle::Terminal
            } else {
                Lifecycle::Active
            },
            expires_at: None,
            validator: None,
        }
    }

    /// The resource as a replay shows it: no changes, no pages.
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            handle: self.handle.clone(),
            version: self.version(),
            state: self.doc().clone().into(),
            resumption: self.resumption(),
            changes: None,
            effects: Vec::new(),
            pages: Vec::new(),
        }
    }

    /// The items written after `since` (removals too), each as a delta entry with the version
    /// that wrote it, in version order (ids in order within one version).
    fn items_since(&self, since: u64) -> Vec<(u64, FieldChange)> {
        let mut changes: Vec<(u64, u64, FieldChange)> = self
            .items
            .iter()
            .filter(|(_, item)| item.version > since)
            .map(|(id, item)| {
                let change = item_change(*id, item.version, item.value.as_deref());
                (item.version, *id, change)
            })
            .collect();
        changes.sort_by_key(|(version, id, _)| (*version, *id));
        changes
            .into_iter()
            .map(|(version, _, change)| (version, change))
            .collect()
    }
}

struct Record {
    fingerprint: Fingerprint,
    original: RecordedOutcome,
    resource: usize,
}

/// The ledger's summary of an outcome.
fn summary(outcome: &MutationOutcome) -> RecordedOutcome {
    match outcome {
        MutationOutcome::Applied(applied) => {
            RecordedOutcome::Applied(RecordedApplied::from(applied))
        }
        MutationOutcome::StaleView(stale) => {
            RecordedOutcome::StaleView(RecordedStaleView::from(stale))
        }
        MutationOutcome::Rejected(rejected) => RecordedOutcome::Rejected(rejected.clone()),
        other => panic!("an outcome the model does not record: {other:?}"),
    }
}

#[derive(Default)]
struct Model {
    resources: Vec<Resource>,
    /// By operation id (one principal).
    ledger: HashMap<String, Record>,
    /// Every request sent with an operation id, for resends.
    sent: Vec<Call>,
    /// Mints fresh operation ids and texts.
    counter: u64,
    /// How often each outcome was seen; shared so a check can count while it holds a borrow.
    coverage: RefCell<BTreeMap<&'static str, u64>>,
    /// Every effect key a store has named, to check each is new.
    effect_keys: HashSet<String>,
}

impl Model {
    fn saw(&self, what: &'static str) {
        *self.coverage.borrow_mut().entry(what).or_default() += 1;
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn resource_of(&self, pick: usize) -> usize {
        pick % self.resources.len()
    }

    fn operation(&mut self, id: &IdChoice) -> Option<String> {
        match id {
            IdChoice::Without => None,
            IdChoice::Fresh => Some(format!("op-{}", self.next())),
            IdChoice::Pool(n) => Some(format!("pool-{n}")),
        }
    }

    fn version_of(&self, resource: usize, basis: &Basis) -> u64 {
        let current = self.resources[resource].version();
        match basis {
            Basis::Current => current,
            Basis::Behind(back) => current.saturating_sub(*back).max(1),
            Basis::Older(pick) if current > 1 => 1 + (*pick as u64) % (current - 1),
            Basis::Older(_) => current,
            Basis::Future(ahead) => current + ahead,
        }
    }

    fn item_of(&self, resource: usize, pick: &ItemPick) -> u64 {
        let resource = &self.resources[resource];
        let (present, removed) = (resource.present(), resource.removed());
        let never = |n: u64| {
            if n == 0 {
                0
            } else {
                resource.next_id() + n - 1
            }
        };
        match pick {
            ItemPick::Removed(n) if !removed.is_empty() => removed[n % removed.len()],
            ItemPick::Present(n) | ItemPick::Removed(n) if !present.is_empty() => {
                present[n % present.len()]
            }
            ItemPick::Present(n) | ItemPick::Removed(n) => never((*n % 3) as u64),
            ItemPick::Never(n) => never(*n),
        }
    }

    /// The request an operation sends, or `None` for a resend with nothing sent yet.
    fn call(&mut self, op: &Op) -> Option<Call> {
        let call = match op {
            Op::Append { resource, bulk, id } => {
                let n = self.next();
                let texts = (0..bulk.unwrap_or(1))
                    .map(|i| format!("step {n}.{i}"))
                    .collect();
                Call {
                    resource: self.resource_of(*resource),
                    expected: None,
                    operation: self.operation(id),
                    action: Action::Append(texts),
                }
            }
            Op::Edit {
                resource,
                item,
                basis,
                id,
            }
            | Op::Remove {
                resource,
                item,
                basis,
                id,
            } => {
                let resource = self.resource_of(*resource);
                let item = self.item_of(resource, item);
                let action = if matches!(op, Op::Edit { .. }) {
                    Action::Edit(item, format!("edit {}", self.next()))
                } else {
                    Action::Remove(item)
                };
                Call {
                    resource,
                    expected: Some(self.version_of(resource, basis)),
                    operation: self.operation(id),
                    action,
                }
            }
            Op::Retitle {
                resource,
                basis,
                id,
            } => {
                let resource = self.resource_of(*resource);
                Call {
                    resource,
                    expected: Some(self.version_of(resource, basis)),
                    operation: self.operation(id),
                    action: Action::Retitle(format!("title {}", self.next())),
                }
            }
            Op::Finish { resource, id } => Call {
                resource: self.resource_of(*resource),
                expected: None,
                operation: self.operation(id),
                action: Action::Finish,
            },
            Op::Resend { pick, same_payload } => {
                if self.sent.is_empty() {
                    return None;
                }
                let mut call = self.sent[pick % self.sent.len()].clone();
                if !same_payload {
                    if self.resources.len() > 1 && pick % 3 == 0 {
                        call.resource = 1 - call.resource;
                    } else {
                        call.action = call.action.varied();
                    }
                }
                call
            }
            Op::ReadPage { .. } | Op::ReadSince { .. } => return None,
        };
        Some(call)
    }

    /// What the store must answer `call`, and the model's state after it.
    fn expect(&mut self, call: &Call) -> MutationOutcome {
        let handle = self.resources[call.resource].handle.clone();
        let fingerprint = call.fingerprint(&handle);
        if let Some(operation) = &call.operation
            && let Some(record) = self.ledger.get(operation)
        {
            if record.fingerprint != fingerprint {
                self.saw("operation id reused");
                return MutationOutcome::Rejected(Rejected::operation_id_reused(operation));
            }
            let replayed = Replayed {
                operation_id: operation.clone(),
                recorded_at: format_rfc3339(T0),
                original: record.original.clone(),
                current: Some(self.resources[record.resource].snapshot()),
                effects: Vec::new(),
            };
            self.saw("replayed");
            return MutationOutcome::Replayed(replayed);
        }
        let outcome = self.decide(call);
        if let Some(operation) = &call.operation {
            self.ledger.insert(
                operation.clone(),
                Record {
                    fingerprint,
                    original: summary(&outcome),
                    resource: call.resource,
                },
            );
            self.sent.push(call.clone());
        }
        outcome
    }

    fn decide(&mut self, call: &Call) -> MutationOutcome {
        let kind = Plan::KIND;
        let resource = &self.resources[call.resource];
        let handle = resource.handle.clone();
        let current = resource.version();
        if resource.terminal() {
            self.saw("terminal");
            return MutationOutcome::Rejected(Rejected::terminal(kind, &handle));
        }
        if let Some(expected) = call.expected
            && expected > current
        {
            self.saw("future version");
            return MutationOutcome::Rejected(Rejected::future_version(
                kind, &handle, expected, current,
            ));
        }
        let behind = call.expected.filter(|expected| *expected < current);
        let stale = |resource: &Resource, delta: Vec<FieldChange>, expected: u64| {
            MutationOutcome::StaleView(StaleView {
                code: code::STALE_VIEW.to_owned(),
                handle: handle.clone(),
                expected_version: expected,
                current_version: current,
                recovery: Recovery::RefreshAndReplan,
                delta_available: true,
                delta,
                current_state: resource.doc().clone().into(),
                resumption: resource.resumption(),
                confirmation: None,
            })
        };
        let mut doc = resource.doc().clone();
        let version = current + 1;
        let mut writes: Vec<(u64, Option<String>)> = Vec::new();
        let result = match &call.action {
            Action::Append(texts) => {
                let first = resource.next_id();
                let ids: Vec<u64> = (first..first + texts.len() as u64).collect();
                for (id, text) in ids.iter().zip(texts) {
                    writes.push((*id, Some(text.clone())));
                }
                let len = doc["steps"]["len"].as_u64().unwrap();
                doc["steps"] =
                    json!({ "len": len + ids.len() as u64, "next_id": first + ids.len() as u64 });
                self.saw(if ids.len() > 1 {
                    "bulk append"
                } else {
                    "append"
                });
                json!(ids)
            }
            Action::Edit(id, _) | Action::Remove(id) => {
                let item = resource.items.get(id);
                if let (Some(expected), Some(item)) = (behind, item)
                    && item.version > expected
                {
                    let change = item_change(*id, item.version, item.value.as_deref());
                    let outcome = stale(resource, vec![change], expected);
                    self.saw(if item.value.is_some() {
                        "stale: item changed"
                    } else {
                        "stale: item removed"
                    });
                    return outcome;
                }
                if item.is_none_or(|item| item.value.is_none()) {
                    self.saw(if item.is_some() {
                        "domain error: removed item"
                    } else {
                        "domain error: item never made"
                    });
                    return MutationOutcome::Rejected(Rejected::domain(&no_such_step(*id)));
                }
                match &call.action {
                    Action::Edit(_, text) => {
                        writes.push((*id, Some(text.clone())));
                        json!({ "edited": id })
                    }
                    _ => {
                        writes.push((*id, None));
                        let len = doc["steps"]["len"].as_u64().unwrap() - 1;
                        doc["steps"]["len"] = json!(len);
                        json!(len)
                    }
                }
            }
            Action::Retitle(title) => {
                if let Some(expected) = behind {
                    let mut delta = Vec::new();
                    model_delta("", resource.doc_at(expected), resource.doc(), &mut delta);
                    let outcome = stale(resource, delta, expected);
                    self.saw("stale: whole plan");
                    return outcome;
                }
                doc["title"] = json!(title);
                Value::Null
            }
            Action::Finish => {
                doc["done"] = json!(true);
                self.saw("finished");
                Value::Null
            }
        };
        let rebased_from = match &call.action {
            Action::Edit(..) | Action::Remove(_) => behind,
            _ => None,
        };
        if rebased_from.is_some() {
            self.saw("rebased");
        }
        self.saw("applied");
        let resource = &mut self.resources[call.resource];
        for (id, value) in writes {
            resource.items.insert(id, Item { version, value });
        }
        resource.docs.push(doc);
        MutationOutcome::Applied(Applied {
            handle,
            version,
            state: resource.doc().clone().into(),
            result,
            rebased_from,
            resumption: resource.resumption(),
            // The keys are the store's to derive: `adopt_effects` checks and takes them.
            effects: vec![
                EffectTicket {
                    key: String::new(),
                    kind: "plan_event".into(),
                };
                call.action.emits()
            ],
        })
    }

    /// An applied change names as many effects as its action emits, each under a key never
    /// named before; the model takes the store's keys (for the outcome, the ledger's record
    /// and the resource's list). A replay names what its record names.
    fn adopt_effects(
        &mut self,
        call: &Call,
        expected: &mut MutationOutcome,
        actual: &MutationOutcome,
    ) -> Result<(), String> {
        let (MutationOutcome::Applied(expected), MutationOutcome::Applied(actual)) =
            (expected, actual)
        else {
            return Ok(());
        };
        let kinds = |tickets: &[EffectTicket]| -> Vec<String> {
            tickets.iter().map(|ticket| ticket.kind.clone()).collect()
        };
        same(
            "effect kinds",
            &kinds(&expected.effects),
            &kinds(&actual.effects),
        )?;
        for ticket in &actual.effects {
            if !ticket.key.starts_with("eff_") || !self.effect_keys.insert(ticket.key.clone()) {
                return Err(format!("effect key {:?} is not new", ticket.key));
            }
            self.resources[call.resource]
                .effects
                .push(ticket.key.clone());
        }
        if !actual.effects.is_empty() {
            self.saw("effects emitted");
        }
        expected.effects.clone_from(&actual.effects);
        if let Some(operation) = &call.operation
            && let Some(record) = self.ledger.get_mut(operation)
        {
            record.original = RecordedOutcome::Applied(RecordedApplied::from(&*expected));
        }
        Ok(())
    }

    /// The outbox holds, for each resource, exactly the effects its applied changes emitted,
    /// in order, none delivered.
    async fn check_outbox<S: Store>(&self, store: &S) -> Result<(), String> {
        for resource in &self.resources {
            let statuses = within(
                "the statuses",
                store.effect_statuses(&resource.handle, 10_000),
            )
            .await
            .map_err(|error| format!("statuses: {error}"))?;
            let keys: Vec<String> = statuses.iter().map(|status| status.key.clone()).collect();
            same("the outbox's effects", &resource.effects, &keys)?;
            if let Some(status) = statuses
                .iter()
                .find(|status| status.state != EffectState::Pending || status.attempts != 0)
            {
                return Err(format!("an effect nobody delivered moved: {status:?}"));
            }
        }
        Ok(())
    }

    /// Checks a read's snapshot (or rejection) against the model.
    fn check_read(
        &mut self,
        resource: usize,
        after: Option<(String, u64)>,
        since: Option<u64>,
        actual: &ReadOutcome,
    ) -> Result<(), String> {
        let model = &self.resources[resource];
        let current = model.version();
        if let Some(since) = since
            && since > current
        {
            self.saw("read since a future version");
            let expected = ReadOutcome::Rejected(Rejected::future_version(
                Plan::KIND,
                &model.handle,
                since,
                current,
            ));
            return same("read since a future version", &expected, actual);
        }
        let ReadOutcome::Current(snapshot) = actual else {
            return Err(format!("expected the plan, got {actual:?}"));
        };
        same("read: handle", &model.handle, &snapshot.handle)?;
        same("read: version", &current, &snapshot.version)?;
        same("read: state", model.doc(), &snapshot.state)?;
        same(
            "read: resumption",
            &model.resumption(),
            &snapshot.resumption,
        )?;

        // The page.
        let after = match after {
            Some((field, after)) if field == FIELD => after,
            _ => 0,
        };
        let listed: Vec<(u64, u64, String)> = model
            .items
            .iter()
            .filter(|(id, _)| **id > after)
            .filter_map(|(id, item)| Some((*id, item.version, item.value.clone()?)))
            .collect();
        let more = listed.len() > PAGE;
        let page: Vec<(u64, u64, String)> = listed.into_iter().take(PAGE).collect();
        let [actual_page] = &snapshot.pages[..] else {
            return Err(format!("one page per collection: {:?}", snapshot.pages));
        };
        same("page: field", &FIELD, &actual_page.field)?;
        let actual_items: Vec<(u64, u64, String)> = actual_page
            .items
            .iter()
            .map(|item| {
                let text = match &item.value {
                    Some(Value::String(text)) => text.clone(),
                    other => format!("<not a live text item: {other:?}>"),
                };
                (item.id, item.version, text)
            })
            .collect();
        same(&format!("page after {after}"), &page, &actual_items)?;
        same(
            &format!("page after {after}: more"),
            &more,
            &actual_page.more,
        )?;
        if more {
            self.saw("page with more");
        }
        if after > 0 && !page.is_empty() {
            self.saw("page after an id");
        }

        // What changed since a version.
        let Some(since) = since else {
            return same("read: changes", &None, &snapshot.changes);
        };
        let Some(changes) = &snapshot.changes else {
            return Err(format!("asked since {since}, got no changes"));
        };
        same("changes: since", &since, &changes.since_version)?;
        if since == current {
            self.saw("read since the current version");
            let expected = Changes {
                since_version: since,
                delta_available: true,
                delta: Vec::new(),
            };
            return same("changes since the current version", &expected, changes);
        }
        let items = model.items_since(since);
        if items.len() > MAX_ITEM_DELTA {
            self.saw("read since: too many item changes");
            let expected = Changes {
                since_version: since,
                delta_available: false,
                delta: Vec::new(),
            };
            return same(
                &format!("changes since {since} ({} item changes)", items.len()),
                &expected,
                changes,
            );
        }
        same("changes: delta available", &true, &changes.delta_available)?;
        let mut view = Vec::new();
        model_delta("", model.doc_at(since), model.doc(), &mut view);
        if changes.delta.len() < view.len()
            || changes.delta[..view.len()] != view[..]
            || changes.delta.len() != view.len() + items.len()
        {
            return Err(format!(
                "changes since {since}:\n  expected the view's {view:?}\n  then the items' {items:?}\n  got      {:?}",
                changes.delta
            ));
        }
        // Item changes in version order; within one version (a bulk append) any order.
        let mut listed = Vec::new();
        for change in &changes.delta[view.len()..] {
            let version = item_id(change)
                .and_then(|id| model.items.get(&id))
                .map(|item| item.version)
                .ok_or_else(|| format!("changes since {since}: an item never made: {change:?}"))?;
            if listed.last().is_some_and(|(last, _)| *last > version) {
                return Err(format!(
                    "changes since {since}: not in version order: {:?}",
                    changes.delta
                ));
            }
            listed.push((version, change.clone()));
        }
        listed.sort_by_key(|(version, change)| (*version, item_id(change)));
        same(&format!("item changes since {since}"), &items, &listed)?;
        self.saw(if items.iter().any(|(_, c)| c.after.is_none()) {
            "read since: a removal"
        } else if items.is_empty() {
            "read since: no item changes"
        } else {
            "read since: item changes"
        });
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Running sequences
// ---------------------------------------------------------------------------------------------

fn model_config() -> StoreConfig {
    StoreConfig {
        history_limit: HISTORY_LIMIT,
        clock: Arc::new(ManualClock::at_millis(T0)),
        ..StoreConfig::default()
    }
}

async fn run_sequence<S: Store>(
    store: &S,
    two: bool,
    ops: &[Op],
) -> Result<BTreeMap<&'static str, u64>, String> {
    let mut model = Model::default();
    for _ in 0..if two { 2 } else { 1 } {
        let plan = Plan {
            title: "move".into(),
            steps: Collection::new(),
            done: false,
        };
        let request = CreateRequest::typed(alice(), &plan).unwrap();
        let outcome = within("a create", store.create(request))
            .await
            .map_err(|error| format!("create: {error}"))?;
        let MutationOutcome::Applied(applied) = &outcome else {
            return Err(format!("create: {outcome:?}"));
        };
        let resource = Resource::new(applied.handle.clone());
        let expected = Applied {
            handle: applied.handle.clone(),
            version: 1,
            state: resource.doc().clone().into(),
            result: Value::Null,
            rebased_from: None,
            resumption: resource.resumption(),
            effects: Vec::new(),
        };
        same("create", &expected, applied)?;
        model.resources.push(resource);
    }
    for (n, op) in ops.iter().enumerate() {
        let context = |error: String| format!("operation {n}, {op:?}: {error}");
        match op {
            Op::ReadPage { resource, after } => {
                let resource = model.resource_of(*resource);
                let next_id = model.resources[resource].next_id();
                let after = match after {
                    PageAfter::First => None,
                    PageAfter::After(after) => Some((FIELD.to_owned(), after % (next_id + 3))),
                    PageAfter::OtherField(after) => Some(("tasks".to_owned(), after % 10)),
                };
                let mut request =
                    ReadRequest::new(Plan::kind(), alice(), &model.resources[resource].handle);
                request.page_after = after.clone();
                let actual = within("a read", store.read(request))
                    .await
                    .map_err(|error| context(format!("read: {error}")))?;
                model
                    .check_read(resource, after, None, &actual)
                    .map_err(context)?;
            }
            Op::ReadSince { resource, since } => {
                let resource = model.resource_of(*resource);
                let since = model.version_of(resource, since);
                let request =
                    ReadRequest::new(Plan::kind(), alice(), &model.resources[resource].handle)
                        .since(since);
                let actual = within("a read since a version", store.read(request))
                    .await
                    .map_err(|error| context(format!("read: {error}")))?;
                model
                    .check_read(resource, None, Some(since), &actual)
                    .map_err(context)?;
            }
            _ => {
                let Some(call) = model.call(op) else {
                    continue;
                };
                let handle = model.resources[call.resource].handle.clone();
                let actual = within(
                    &format!("{call:?}"),
                    store.mutate(call.request(&handle), call.action.transition()),
                )
                .await
                .map_err(|error| context(format!("{call:?}: {error}")))?;
                let mut expected = model.expect(&call);
                model
                    .adopt_effects(&call, &mut expected, &actual)
                    .map_err(context)?;
                same(&format!("{call:?}"), &expected, &actual).map_err(context)?;
            }
        }
    }
    model.check_outbox(store).await?;
    Ok(model.coverage.into_inner())
}

/// What a run at the default case count must have exercised.
const MUST_SEE: &[&str] = &[
    "append",
    "bulk append",
    "applied",
    "rebased",
    "stale: item changed",
    "stale: item removed",
    "stale: whole plan",
    "domain error: removed item",
    "domain error: item never made",
    "future version",
    "terminal",
    "finished",
    "replayed",
    "operation id reused",
    "page with more",
    "page after an id",
    "read since the current version",
    "read since a future version",
    "read since: item changes",
    "read since: a removal",
    "read since: too many item changes",
];

fn run_model<S: Store, F: Future<Output = S>>(
    label: &str,
    default_cases: u32,
    open: impl Fn(&std::path::Path) -> F,
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
    let result = runner.run(&sequence(), |(two, ops)| {
        let dir = tempfile::tempdir().unwrap();
        let store = runtime.block_on(open(dir.path()));
        let seen = runtime
            .block_on(run_sequence(&store, two, &ops))
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
    run_model("MemoryStore", 1000, |_| {
        std::future::ready(MemoryStore::new(model_config()))
    });
}

#[test]
fn sqlite_store_answers_every_sequence_as_the_model_does() {
    run_model("SqliteStore", 400, |dir| {
        std::future::ready(SqliteStore::open(dir.join("model.db"), model_config()).unwrap())
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
    run_model("PostgresStore", 150, |_| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let options = mcp_tools::store::PostgresOptions {
            table_prefix: format!("m{n}_"),
            ..schema.options()
        };
        let schema = &schema;
        async move { schema.connect_with(model_config(), options).await }
    });
}

// ---------------------------------------------------------------------------------------------
// Steps over two plans, against a reference of two lists
// ---------------------------------------------------------------------------------------------

/// An operation of a sequence over two plans.
#[derive(Debug, Clone)]
enum StepOp {
    /// Moves a step from plan `from` to the other: an existing one (`pick` among them) or, when
    /// `missing`, one never made; each plan's version as read, or one behind.
    Move {
        from: usize,
        pick: usize,
        missing: bool,
        behind: [bool; 2],
    },
    /// Sends the last move again, same operation id and payload.
    Resend,
    /// Appends a step to a plan, without a version.
    Append { plan: usize },
    /// Finishes a plan: it turns terminal.
    Finish { plan: usize },
}

fn step_op() -> impl Strategy<Value = StepOp> {
    prop_oneof![
        10 => (0..2usize, any::<usize>(), prop::bool::weighted(0.15), any::<[bool; 2]>().prop_map(|b| b))
            .prop_map(|(from, pick, missing, behind)| StepOp::Move {
                from,
                pick,
                missing,
                // A plan read behind in about one move of four, both in about one of eight.
                behind: [behind[0] && pick % 2 == 0, behind[1] && pick % 2 == 0],
            }),
        2 => Just(StepOp::Resend),
        6 => (0..2usize).prop_map(|plan| StepOp::Append { plan }),
        1 => (0..2usize).prop_map(|plan| StepOp::Finish { plan }),
    ]
}

/// A plan as the reference keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
struct RefPlan {
    version: u64,
    items: BTreeMap<u64, String>,
    next_id: u64,
    done: bool,
}

/// What the reference expects of a move: its outcome's shape.
#[derive(Debug, Clone, PartialEq)]
enum Expected {
    /// `(version, version)` after, and the step's id in the plan it moved to.
    Applied([u64; 2], u64),
    /// The plans that moved, as `(index, expected, current)`.
    Stale(Vec<(usize, u64, u64)>),
    Rejected(&'static str),
}

fn move_transition(id: u64) -> StepTransition {
    StepTransition::typed2(move |from: &mut Plan, to: &mut Plan| {
        let text = from.steps.remove(id).ok_or_else(|| no_such_step(id))?;
        Ok::<_, ToolError>(to.steps.push(text))
    })
}

async fn run_steps<S: Store>(
    store: &S,
    ops: &[StepOp],
) -> Result<BTreeMap<&'static str, u64>, String> {
    let mut seen = BTreeMap::<&'static str, u64>::new();
    let mut handles = Vec::new();
    let mut plans = [RefPlan::default(), RefPlan::default()];
    for plan in &mut plans {
        let request = CreateRequest::typed(
            alice(),
            &Plan {
                title: "move".into(),
                steps: Collection::new(),
                done: false,
            },
        )
        .unwrap();
        let outcome = within("a create", store.create(request))
            .await
            .map_err(|e| e.to_string())?;
        handles.push(outcome.applied().ok_or("create")?.handle.clone());
        *plan = RefPlan {
            version: 1,
            next_id: 1,
            ..RefPlan::default()
        };
    }
    // The last move sent: its request, its transition's id, and what it answered.
    let mut last: Option<(StepRequest, u64, StepOutcome)> = None;
    let mut texts = 0u64;
    for (n, op) in ops.iter().enumerate() {
        let context = |error: String| format!("operation {n}, {op:?}: {error}");
        match op {
            StepOp::Append { plan } => {
                texts += 1;
                let text = format!("t{texts}");
                let transition = {
                    let text = text.clone();
                    Transition::typed(move |p: &mut Plan| {
                        Ok::<_, ToolError>(p.steps.push(text.clone()))
                    })
                };
                let request = MutationRequest::new(Plan::kind(), alice(), &handles[*plan]);
                let outcome = within("an append", store.mutate(request, transition))
                    .await
                    .map_err(|e| context(e.to_string()))?;
                let reference = &mut plans[*plan];
                if reference.done {
                    same(
                        "append to a finished plan",
                        &Some(code::TERMINAL),
                        &outcome.code(),
                    )
                    .map_err(context)?;
                    continue;
                }
                same("append", &None, &outcome.code()).map_err(context)?;
                reference.items.insert(reference.next_id, text);
                reference.next_id += 1;
                reference.version += 1;
            }
            StepOp::Finish { plan } => {
                let request = MutationRequest::new(Plan::kind(), alice(), &handles[*plan]);
                let finish = Transition::typed(|p: &mut Plan| {
                    p.done = true;
                    Ok::<_, ToolError>(())
                });
                let outcome = within("a finish", store.mutate(request, finish))
                    .await
                    .map_err(|e| context(e.to_string()))?;
                let reference = &mut plans[*plan];
                if !reference.done {
                    reference.done = true;
                    reference.version += 1;
                } else {
                    same("finish twice", &Some(code::TERMINAL), &outcome.code())
                        .map_err(context)?;
                }
            }
            StepOp::Resend => {
                let Some((request, id, answered)) = &last else {
                    continue;
                };
                let outcome = within(
                    "a resend",
                    store.mutate_step(request.clone(), move_transition(*id)),
                )
                .await
                .map_err(|e| context(e.to_string()))?;
                let StepOutcome::Replayed(replayed) = &outcome else {
                    return Err(context(format!("a resend is a replay: {outcome:?}")));
                };
                let recorded = match answered {
                    StepOutcome::Replayed(earlier) => Some(earlier.original.clone()),
                    StepOutcome::Applied(_)
                    | StepOutcome::StaleView(_)
                    | StepOutcome::Rejected(_) => answered_summary(answered),
                    _ => None,
                };
                match recorded {
                    Some(recorded) => same("the replayed outcome", &recorded, &replayed.original)
                        .map_err(context)?,
                    // An unrecorded answer (none here) would not replay.
                    None => return Err(context("an unrecorded answer replayed".into())),
                }
                *seen.entry("step replayed").or_default() += 1;
            }
            StepOp::Move {
                from,
                pick,
                missing,
                behind,
            } => {
                let (f, t) = (*from, 1 - *from);
                let id = match (plans[f].items.keys().copied().collect::<Vec<_>>(), missing) {
                    (ids, false) if !ids.is_empty() => ids[pick % ids.len()],
                    _ => plans[f].next_id + (*pick % 5) as u64,
                };
                let expected_of = |i: usize| {
                    let version = plans[i].version;
                    if behind[if i == f { 0 } else { 1 }] && version > 1 {
                        version - 1
                    } else {
                        version
                    }
                };
                let (ef, et) = (expected_of(f), expected_of(t));
                let operation = format!("move-{n}");
                let payload = json!({ "from": f, "id": id, "expected": [ef, et] });
                let request = StepRequest::new(
                    alice(),
                    vec![
                        StepPart::new(Plan::kind(), &handles[f]).expect_version(ef),
                        StepPart::new(Plan::kind(), &handles[t]).expect_version(et),
                    ],
                )
                .operation(operation, Fingerprint::of(&payload));
                let outcome = within(
                    "a move",
                    store.mutate_step(request.clone(), move_transition(id)),
                )
                .await
                .map_err(|e| context(e.to_string()))?;
                // The reference, in the store's order of checks.
                let expected = if plans[f].done || plans[t].done {
                    Expected::Rejected(code::TERMINAL)
                } else {
                    let moved: Vec<(usize, u64, u64)> = [(f, ef), (t, et)]
                        .into_iter()
                        .filter(|(i, e)| *e != plans[*i].version)
                        .map(|(i, e)| (i, e, plans[i].version))
                        .collect();
                    if !moved.is_empty() {
                        Expected::Stale(moved)
                    } else if !plans[f].items.contains_key(&id) {
                        Expected::Rejected("NO_SUCH_STEP")
                    } else {
                        let text = plans[f].items.remove(&id).unwrap();
                        let new_id = plans[t].next_id;
                        plans[t].items.insert(new_id, text);
                        plans[t].next_id += 1;
                        plans[f].version += 1;
                        plans[t].version += 1;
                        let mut versions = [0; 2];
                        versions[0] = plans[f].version;
                        versions[1] = plans[t].version;
                        Expected::Applied(versions, new_id)
                    }
                };
                let actual = match &outcome {
                    StepOutcome::Applied(applied) => {
                        let versions: Vec<u64> =
                            applied.resources.iter().map(|p| p.version).collect();
                        let handles_in_order: Vec<&str> = applied
                            .resources
                            .iter()
                            .map(|p| p.handle.as_str())
                            .collect();
                        same(
                            "applied handles",
                            &vec![handles[f].as_str(), handles[t].as_str()],
                            &handles_in_order,
                        )
                        .map_err(context)?;
                        Expected::Applied(
                            [versions[0], versions[1]],
                            applied.result.as_u64().unwrap_or(0),
                        )
                    }
                    StepOutcome::StaleView(stale) => Expected::Stale(
                        stale
                            .moved
                            .iter()
                            .map(|part| {
                                let index =
                                    handles.iter().position(|h| *h == part.handle).unwrap_or(9);
                                (index, part.expected_version, part.current_version)
                            })
                            .collect(),
                    ),
                    StepOutcome::Rejected(rejected) => {
                        Expected::Rejected(match rejected.code.as_str() {
                            code::TERMINAL => code::TERMINAL,
                            "NO_SUCH_STEP" => "NO_SUCH_STEP",
                            _ => return Err(context(format!("{outcome:?}"))),
                        })
                    }
                    other => return Err(context(format!("{other:?}"))),
                };
                same("the move", &expected, &actual).map_err(context)?;
                *seen
                    .entry(match expected {
                        Expected::Applied(..) => "step applied",
                        Expected::Stale(ref moved) if moved.len() == 2 => "step stale: both moved",
                        Expected::Stale(_) => "step stale: one moved",
                        Expected::Rejected(code::TERMINAL) => "step terminal",
                        Expected::Rejected(_) => "step domain error",
                    })
                    .or_default() += 1;
                last = Some((request, id, outcome));
            }
        }
        // Both plans are as the reference says: versions, items, lifecycle.
        for (i, handle) in handles.iter().enumerate() {
            let mut items = BTreeMap::new();
            let mut after = None;
            let version = loop {
                let mut request = ReadRequest::new(Plan::kind(), alice(), handle);
                request.page_after = after.map(|after| (FIELD.to_owned(), after));
                let ReadOutcome::Current(snapshot) = within("a read", store.read(request))
                    .await
                    .map_err(|e| context(e.to_string()))?
                else {
                    return Err(context("a plan does not read".into()));
                };
                let page = &snapshot.pages[0];
                for item in &page.items {
                    let text = item
                        .value
                        .as_ref()
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    items.insert(item.id, text.to_owned());
                }
                after = page.items.last().map(|item| item.id);
                if !page.more {
                    break snapshot.version;
                }
            };
            same(&format!("plan {i}: version"), &plans[i].version, &version).map_err(context)?;
            same(&format!("plan {i}: items"), &plans[i].items, &items).map_err(context)?;
        }
    }
    Ok(seen)
}

/// The recorded summary of an outcome a store answered (a refusal of the transition is recorded,
/// as is every outcome of these moves).
fn answered_summary(outcome: &StepOutcome) -> Option<RecordedStep> {
    Some(match outcome {
        StepOutcome::Applied(applied) => RecordedStep::Applied {
            resources: applied
                .resources
                .iter()
                .map(|part| PartVersion {
                    handle: part.handle.clone(),
                    version: part.version,
                })
                .collect(),
            result: applied.result.clone(),
        },
        StepOutcome::StaleView(stale) => RecordedStep::StaleView {
            code: stale.code.clone(),
            moved: stale
                .moved
                .iter()
                .map(|part| PartVersion {
                    handle: part.handle.clone(),
                    version: part.current_version,
                })
                .collect(),
        },
        StepOutcome::Rejected(rejected) => RecordedStep::Rejected(rejected.clone()),
        _ => return None,
    })
}

fn run_step_model<S: Store, F: Future<Output = S>>(
    label: &str,
    default_cases: u32,
    open: impl Fn(&std::path::Path) -> F,
) {
    let cases = cases(default_cases);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let coverage = Mutex::new(BTreeMap::<&'static str, u64>::new());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let started = Instant::now();
    let result = runner.run(&prop::collection::vec(step_op(), 1..40), |ops| {
        let dir = tempfile::tempdir().unwrap();
        let store = runtime.block_on(open(dir.path()));
        let seen = runtime
            .block_on(run_steps(&store, &ops))
            .map_err(TestCaseError::fail)?;
        let mut total = coverage.lock().unwrap();
        for (what, count) in seen {
            *total.entry(what).or_default() += count;
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{label}'s steps depart from the reference: {error}");
    }
    let coverage = coverage.into_inner().unwrap();
    eprintln!(
        "{label} steps: {cases} sequences in {:?}; outcomes seen: {coverage:?}",
        started.elapsed()
    );
    if cases >= default_cases {
        for what in [
            "step applied",
            "step stale: one moved",
            "step stale: both moved",
            "step terminal",
            "step domain error",
            "step replayed",
        ] {
            assert!(
                coverage.contains_key(what),
                "{label}: never exercised {what:?}"
            );
        }
    }
}

#[test]
fn memory_store_steps_as_the_reference_does() {
    run_step_model("MemoryStore", 300, |_| {
        std::future::ready(MemoryStore::new(model_config()))
    });
}

#[test]
fn sqlite_store_steps_as_the_reference_does() {
    run_step_model("SqliteStore", 100, |dir| {
        std::future::ready(SqliteStore::open(dir.join("steps.db"), model_config()).unwrap())
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_steps_as_the_reference_does() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    run_step_model("PostgresStore", 40, |_| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let options = mcp_tools::store::PostgresOptions {
            table_prefix: format!("s{n}_"),
            ..schema.options()
        };
        let schema = &schema;
        async move { schema.connect_with(model_config(), options).await }
    });
}

// ---------------------------------------------------------------------------------------------
// Concurrent runs
// ---------------------------------------------------------------------------------------------

const AGENTS: usize = 8;
const ITEMS: u64 = 16;
const EDITS: usize = 40;
/// How often one edit may meet `stale_view` before the agent gives up on it.
const ATTEMPTS: usize = 200;

/// SplitMix64: a seeded source of choices, so a failing round can be told apart by its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// The plan's version and its items' texts, by id.
async fn read_items<S: Store>(
    store: &S,
    handle: &str,
) -> Result<(u64, BTreeMap<u64, String>), String> {
    let request = ReadRequest::new(Plan::kind(), alice(), handle);
    let snapshot = match within("a read", store.read(request)).await {
        Ok(ReadOutcome::Current(snapshot)) => snapshot,
        other => return Err(format!("read: {other:?}")),
    };
    let [page] = &snapshot.pages[..] else {
        return Err(format!("one page per collection: {:?}", snapshot.pages));
    };
    let mut items = BTreeMap::new();
    for item in &page.items {
        let Some(Value::String(text)) = &item.value else {
            return Err(format!("not a live text item: {item:?}"));
        };
        items.insert(item.id, text.clone());
    }
    Ok((snapshot.version, items))
}

/// An edit that writes the text its agent computed from what it read: the shape that loses an
/// update when a change made on a stale view is let through.
fn write_back(
    handle: &str,
    item: u64,
    text: &str,
    expected: u64,
    operation: &str,
) -> (MutationRequest, Transition) {
    let fingerprint = Fingerprint::of_call(
        "plan_edit",
        &json!({ "handle": handle, "item": item, "text": text, "expected_version": expected }),
    );
    let request = MutationRequest::new(Plan::kind(), alice(), handle)
        .policy(ConflictPolicy::Items)
        .expect_version(expected)
        .operation(operation, fingerprint);
    let text = text.to_owned();
    let transition = Transition::typed(move |plan: &mut Plan| match plan.steps.get_mut(item) {
        Some(step) => {
            step.clone_from(&text);
            Ok(item)
        }
        None => Err(no_such_step(item)),
    });
    (request, transition)
}

/// What one agent did.
#[derive(Default)]
struct AgentLog {
    /// (item, token) of every edit acknowledged as applied.
    acknowledged: Vec<(u64, String)>,
    /// Applied outcomes, first sends and retries with the same operation id.
    applied: usize,
    stale: usize,
    replays: usize,
    /// Outcomes a correct store never gives (a replay of something else, an applied change
    /// whose `rebased_from` is wrong, a `stale_view` that names no changed item...).
    odd: Vec<String>,
}

/// One agent: `EDITS` times, in step with the others (all read, then all write), it reads an
/// item and the plan's version and writes the item back with its token appended, under
/// `ConflictPolicy::Items` on the version it read; on `stale_view` it reads again and retries
/// with a fresh operation id. Now and then it sends an applied request again, as a client that
/// lost the answer: that must be a replay.
async fn agent<S: Store>(
    store: S,
    handle: Arc<String>,
    agent: usize,
    seed: u64,
    barrier: Arc<tokio::sync::Barrier>,
) -> AgentLog {
    let mut rng = Rng(seed ^ (agent as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut log = AgentLog::default();
    for step in 0..EDITS {
        let item = 1 + rng.below(ITEMS);
        let token = format!("a{agent}s{step}");
        within("the barrier before reading", barrier.wait()).await;
        let read = read_items(&store, &handle).await;
        within("the barrier before writing", barrier.wait()).await;
        let (mut version, mut items) = match read {
            Ok(read) => read,
            Err(error) => {
                log.odd.push(error);
                continue;
            }
        };
        for attempt in 0..=ATTEMPTS {
            if attempt == ATTEMPTS {
                log.odd
                    .push(format!("{token}: stale {ATTEMPTS} times in a row"));
                break;
            }
            let Some(text) = items.get(&item) else {
                log.odd
                    .push(format!("{token}: item {item} is not on the page"));
                break;
            };
            let text = format!("{text} {token}");
            let operation = format!("{token}-{attempt}");
            let (request, transition) = write_back(&handle, item, &text, version, &operation);
            let outcome = match within(&operation, store.mutate(request, transition)).await {
                Ok(outcome) => outcome,
                Err(error) => {
                    log.odd.push(format!("{operation}: {error}"));
                    break;
                }
            };
            match &outcome {
                MutationOutcome::Applied(applied) => {
                    log.applied += 1;
                    log.acknowledged.push((item, token.clone()));
                    let rebased = (applied.version != version + 1).then_some(version);
                    if applied.version <= version || applied.rebased_from != rebased {
                        log.odd.push(format!(
                            "{operation} based on version {version} applied as {} (rebased_from {:?})",
                            applied.version, applied.rebased_from
                        ));
                    }
                    if rng.below(4) == 0 {
                        let (request, transition) =
                            write_back(&handle, item, &text, version, &operation);
                        let again = within(&operation, store.mutate(request, transition)).await;
                        let original = RecordedOutcome::Applied(RecordedApplied::from(applied));
                        match again {
                            Ok(MutationOutcome::Replayed(replayed))
                                if replayed.original == original =>
                            {
                                log.replays += 1;
                            }
                            other => log.odd.push(format!(
                                "{operation} sent again after it applied: {other:?}"
                            )),
                        }
                    }
                    break;
                }
                MutationOutcome::StaleView(stale) => {
                    log.stale += 1;
                    let path = format!("/{FIELD}/items/{item}");
                    let names_item = stale.delta.len() == 1
                        && stale.delta[0].path == path
                        && stale.delta[0]
                            .after
                            .as_ref()
                            .and_then(|after| after["version"].as_u64())
                            > Some(version);
                    if stale.expected_version != version
                        || stale.current_version <= version
                        || !names_item
                    {
                        log.odd
                            .push(format!("{operation}: a stale view it was not: {stale:?}"));
                    }
                    match read_items(&store, &handle).await {
                        Ok(read) => (version, items) = read,
                        Err(error) => {
                            log.odd.push(error);
                            break;
                        }
                    }
                }
                other => {
                    log.odd.push(format!("{operation}: {other:?}"));
                    break;
                }
            }
        }
    }
    log
}

/// What a concurrent round found.
struct Round {
    /// Outcomes a correct store never gives.
    odd: Vec<String>,
    /// The check this test is about: every acknowledged token in its item's text exactly once,
    /// nothing else there, and one version per applied change.
    lost_updates: Result<(), String>,
    applied: usize,
    stale: usize,
    replays: usize,
}

async fn concurrent_round<S: Store + Clone>(stores: &[S], seed: u64) -> Round {
    let plan = Plan {
        title: "move".into(),
        steps: Collection::new(),
        done: false,
    };
    let request = CreateRequest::typed(alice(), &plan).unwrap();
    let handle = match within("a create", stores[0].create(request)).await {
        Ok(MutationOutcome::Applied(applied)) => applied.handle,
        other => panic!("create: {other:?}"),
    };
    let texts: Vec<String> = (1..=ITEMS).map(|id| format!("item{id}")).collect();
    let request =
        MutationRequest::new(Plan::kind(), alice(), &handle).policy(ConflictPolicy::Items);
    match within(
        "the first items",
        stores[0].mutate(request, Action::Append(texts).transition()),
    )
    .await
    {
        Ok(MutationOutcome::Applied(applied)) if applied.version == 2 => {}
        other => panic!("the first items: {other:?}"),
    }
    let handle = Arc::new(handle);
    let barrier = Arc::new(tokio::sync::Barrier::new(AGENTS));
    let tasks: Vec<_> = (0..AGENTS)
        .map(|n| {
            tokio::spawn(agent(
                stores[n % stores.len()].clone(),
                Arc::clone(&handle),
                n,
                seed,
                Arc::clone(&barrier),
            ))
        })
        .collect();
    let mut round = Round {
        odd: Vec::new(),
        lost_updates: Ok(()),
        applied: 0,
        stale: 0,
        replays: 0,
    };
    let mut acknowledged: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (n, task) in tasks.into_iter().enumerate() {
        let log = within_for(WORKLOAD, &format!("agent {n}"), task)
            .await
            .unwrap_or_else(|error| panic!("agent {n}: {error}"));
        for (item, token) in log.acknowledged {
            acknowledged.entry(item).or_default().push(token);
        }
        round.odd.extend(log.odd);
        round.applied += log.applied;
        round.stale += log.stale;
        round.replays += log.replays;
    }
    round.lost_updates = check_tokens(&stores[0], &handle, &acknowledged, round.applied).await;
    round
}

/// Every acknowledged token is in its item's text exactly once, and nothing else is; the plan
/// is at one version per applied change.
async fn check_tokens<S: Store>(
    store: &S,
    handle: &str,
    acknowledged: &BTreeMap<u64, Vec<String>>,
    applied: usize,
) -> Result<(), String> {
    let (version, items) = read_items(store, handle).await?;
    let mut problems = Vec::new();
    for id in 1..=ITEMS {
        let Some(text) = items.get(&id) else {
            problems.push(format!("item {id} is gone"));
            continue;
        };
        let mut words = text.split(' ');
        if words.next() != Some(format!("item{id}").as_str()) {
            problems.push(format!("item {id} lost its first text: {text:?}"));
        }
        let words: Vec<&str> = words.collect();
        let tokens = acknowledged.get(&id).map_or(&[][..], Vec::as_slice);
        for token in tokens {
            match words.iter().filter(|word| **word == token).count() {
                1 => {}
                0 => problems.push(format!(
                    "item {id} lost the acknowledged {token}: a lost update"
                )),
                n => problems.push(format!("item {id} holds {token} {n} times")),
            }
        }
        for word in &words {
            if !tokens.iter().any(|token| token == word) {
                problems.push(format!("item {id} holds {word}, never acknowledged for it"));
            }
        }
    }
    if version != 2 + applied as u64 {
        problems.push(format!(
            "the plan is at version {version} after {applied} applied changes on version 2"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} problems: {}",
            problems.len(),
            problems.join("; ")
        ))
    }
}

fn rounds(default: u64) -> u64 {
    let scale = cases(0);
    if scale == 0 {
        default
    } else {
        default.max(u64::from(scale) / 200)
    }
}

async fn concurrent<S: Store + Clone>(label: &str, open: impl Fn() -> Vec<S>) {
    let started = Instant::now();
    let rounds = rounds(2);
    let (mut applied, mut stale, mut replays) = (0, 0, 0);
    for round in 0..rounds {
        let seed = 0x5eed_0000 + round;
        let found = concurrent_round(&open(), seed).await;
        if let Err(error) = &found.lost_updates {
            panic!("{label}, seed {seed:#x}: {error}");
        }
        assert!(
            found.odd.is_empty(),
            "{label}, seed {seed:#x}: {:?}",
            found.odd
        );
        assert!(
            found.stale > 0,
            "{label}, seed {seed:#x}: the agents never met a stale view"
        );
        applied += found.applied;
        stale += found.stale;
        replays += found.replays;
    }
    eprintln!(
        "{label}: {rounds} rounds of {AGENTS} agents x {EDITS} edits on {ITEMS} items: {applied} applied, {stale} stale views, {replays} replays, in {:?}",
        started.elapsed()
    );
}

/// The same check fails once changes made on a stale view are let through.
async fn concurrent_without_the_version_check<S: Store + Clone>(label: &str, stores: Vec<S>) {
    let found = concurrent_round(&stores, 0x5eed_dead).await;
    let error = found
        .lost_updates
        .expect_err("the token check did not notice updates lost to unchecked versions");
    assert!(error.contains("a lost update"), "{label}: {error}");
    let first = error.split("; ").next().unwrap_or_default();
    eprintln!("{label} with the version check off: {first}; ...");
}

fn unchecked() -> StoreConfig {
    StoreConfig {
        unchecked_versions_for_tests: true,
        ..StoreConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_loses_no_item_update_under_contention() {
    concurrent("MemoryStore", || {
        let store = MemoryStore::new(StoreConfig::default());
        vec![store.clone(), store]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sqlite_stores_on_one_file_lose_no_item_update() {
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

/// Two stores on one database stand for two replicas on two hosts.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_postgres_stores_on_one_database_lose_no_item_update() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    concurrent("two PostgresStores on one database", || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        schema.replicas(2, &format!("c{n}_"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_token_check_fails_on_a_memory_store_without_the_version_check() {
    let store = MemoryStore::new(unchecked());
    concurrent_without_the_version_check("MemoryStore", vec![store.clone(), store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_token_check_fails_on_sqlite_stores_without_the_version_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unchecked.db");
    let stores = vec![
        SqliteStore::open(&path, unchecked()).unwrap(),
        SqliteStore::open(&path, unchecked()).unwrap(),
    ];
    concurrent_without_the_version_check("two SqliteStores", stores).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_token_check_fails_on_postgres_stores_without_the_version_check() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..2 {
        stores.push(schema.connect(unchecked()).await);
    }
    concurrent_without_the_version_check("two PostgresStores", stores).await;
}
