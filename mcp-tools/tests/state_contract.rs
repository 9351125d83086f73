//! One contract suite for every state store: each scenario is a generic function, instantiated for
//! `MemoryStore`, `SqliteStore` and `PostgresStore` by the `contract!` macro at the bottom.

#[path = "state_contract/collections.rs"]
mod collections;

use collections::{
    a_plain_list_migrates_on_its_first_change, a_replay_appends_nothing,
    appends_commute_and_reads_page, items_are_versioned_one_by_one,
    items_made_with_the_entity_are_kept, items_reached_in_rounds,
    removals_and_changes_since_a_version,
};
#[path = "state_contract/effects.rs"]
mod effects;
use effects::{
    concurrent_claims_share_nothing, effects_exist_exactly_when_their_change_committed,
    expired_ids_and_deep_effects, leases_settle_and_retry,
};
#[path = "state_contract/steps.rs"]
mod steps;
use steps::{
    a_stale_step_names_each_resource_that_moved, a_step_changes_every_resource_or_none,
    a_step_checks_each_resource, a_step_over_two_kinds,
    concurrent_moves_conserve_and_never_deadlock,
};
#[cfg(feature = "postgres")]
mod pg;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use mcp_tools::ToolError;
use mcp_tools::auth::Principal;
use mcp_tools::protocol::framework::code;
use mcp_tools::store::{
    Applied, ConflictPolicy, CreateRequest, Creation, Entity, Fingerprint, Lifecycle, MAX_DEPTH,
    ManualClock, MutationOutcome, MutationRequest, PruneReport, ReadOutcome, ReadRequest,
    RecordedApplied, RecordedOutcome, RecordedStaleView, Rejected, StaleView, Store, StoreConfig,
    StoreError, Transition, format_rfc3339,
};
use mcp_tools::{MemoryStore, Recovery, SqliteStore};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Basket {
    memory_gib: u32,
    storage_gib: u32,
    notes: Vec<String>,
    checked_out: bool,
    count: u64,
}

impl Entity for Basket {
    const KIND: &'static str = "basket";
    const PREFIX: &'static str = "bsk";
    const TTL: Option<Duration> = Some(Duration::from_secs(3600));
    fn lifecycle(&self) -> Lifecycle {
        if self.checked_out {
            Lifecycle::Terminal
        } else {
            Lifecycle::Active
        }
    }
}

/// An entity whose outcomes show a view: its balance and how many entries it has, never its
/// secret or the entries themselves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Account {
    secret: String,
    balance: i64,
    entries: Vec<i64>,
}

impl Entity for Account {
    const KIND: &'static str = "account";
    const PREFIX: &'static str = "acc";
    const VIEW: Option<fn(&Self) -> Value> =
        Some(|account| json!({ "balance": account.balance, "entry_count": account.entries.len() }));
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Note {
    text: String,
}

impl Entity for Note {
    const KIND: &'static str = "note";
    const PREFIX: &'static str = "nte";
}

/// An entity holding any JSON, for states of any shape.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Document {
    body: Value,
}

impl Entity for Document {
    const KIND: &'static str = "document";
    const PREFIX: &'static str = "doc";
}

/// 2026-07-28T09:30:00Z.
const T0: i64 = 1_785_231_000_000;

fn laptop() -> Basket {
    Basket {
        memory_gib: 16,
        storage_gib: 512,
        notes: vec![],
        checked_out: false,
        count: 0,
    }
}

fn alice() -> Principal {
    Principal::subject("alice")
}

/// How long any single store call or join may take before the test fails instead of hanging.
const STEP: Duration = Duration::from_secs(30);

/// How long a whole concurrent workload may take. Its agents' calls queue behind one another on
/// one resource (on PostgreSQL, 32 agents took 10 s alone and over 30 s beside the rest of the
/// suite on a 2-core machine), so its bound is many steps; a hang still fails.
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

fn config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    }
}

async fn create<S: Store>(store: &S, principal: Principal, basket: &Basket) -> String {
    let request = CreateRequest::typed(principal, basket).unwrap();
    expect_applied(&create_outcome(store, request).await)
        .handle
        .clone()
}

async fn create_outcome<S: Store>(store: &S, request: CreateRequest<'_>) -> MutationOutcome {
    let what = format!("a create of a {}", request.kind.kind);
    within(&what, store.create(request)).await.unwrap()
}

async fn prune<S: Store>(store: &S) -> PruneReport {
    within("a prune", store.prune()).await.unwrap()
}

/// How many resources a store actually holds, whatever its outcomes said.
trait CountResources {
    fn resources(&self) -> u64;
}

impl CountResources for MemoryStore {
    fn resources(&self) -> u64 {
        self.resource_count_for_tests() as u64
    }
}

impl CountResources for SqliteStore {
    fn resources(&self) -> u64 {
        self.resource_count_for_tests().unwrap()
    }
}

#[cfg(feature = "postgres")]
impl CountResources for mcp_tools::PostgresStore {
    fn resources(&self) -> u64 {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                tokio::time::timeout(STEP, self.resource_count_for_tests())
                    .await
                    .expect("counting resources timed out")
                    .unwrap()
            })
        })
    }
}

/// A create request with an operation id whose fingerprint covers the tool name and arguments.
fn create_request(
    principal: Principal,
    operation_id: &str,
    basket: &Basket,
) -> CreateRequest<'static> {
    let arguments = json!({ "operation_id": operation_id, "basket": basket });
    CreateRequest::typed(principal, basket)
        .unwrap()
        .operation(operation_id, Fingerprint::of_call("create", &arguments))
}

async fn read<S: Store>(store: &S, principal: Principal, handle: &str) -> ReadOutcome {
    let request = ReadRequest::new(Basket::kind(), principal, handle);
    within(&format!("a read of {handle}"), store.read(request))
        .await
        .unwrap()
}

async fn state<S: Store>(store: &S, handle: &str) -> (u64, Basket) {
    match read(store, alice(), handle).await {
        ReadOutcome::Current(snapshot) => (
            snapshot.version,
            serde_json::from_value(Value::clone(&snapshot.state)).unwrap(),
        ),
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

/// A mutation request whose fingerprint covers the tool name and all its arguments.
fn request(
    principal: Principal,
    handle: &str,
    tool: &str,
    expected: Option<u64>,
    operation_id: Option<&str>,
    payload: Value,
) -> MutationRequest {
    let mut request = MutationRequest::new(Basket::kind(), principal, handle);
    if let Some(expected) = expected {
        request = request.expect_version(expected);
    }
    if let Some(operation_id) = operation_id {
        let arguments = json!({
            "basket_id": handle,
            "expected_version": expected,
            "operation_id": operation_id,
            "payload": payload,
        });
        request = request.operation(operation_id, Fingerprint::of_call(tool, &arguments));
    }
    request
}

fn set_memory(gib: u32, calls: &Arc<AtomicUsize>) -> Transition {
    let calls = Arc::clone(calls);
    Transition::typed(move |basket: &mut Basket| {
        calls.fetch_add(1, Ordering::SeqCst);
        basket.memory_gib = gib;
        Ok::<_, ToolError>(json!({ "memory_gib": gib }))
    })
}

fn set_storage(gib: u32) -> Transition {
    Transition::typed(move |basket: &mut Basket| {
        basket.storage_gib = gib;
        Ok::<_, ToolError>(gib)
    })
}

fn expect_applied(outcome: &MutationOutcome) -> &Applied {
    match outcome {
        MutationOutcome::Applied(applied) => applied,
        other => panic!("expected applied, got {other:?}"),
    }
}

fn expect_stale(outcome: &MutationOutcome) -> &StaleView {
    match outcome {
        MutationOutcome::StaleView(stale) => stale,
        other => panic!("expected stale_view, got {other:?}"),
    }
}

fn expect_rejected<'a>(outcome: &'a MutationOutcome, code: &str) -> &'a Rejected {
    match outcome {
        MutationOutcome::Rejected(rejected) if rejected.code == code => rejected,
        other => panic!("expected rejected {code}, got {other:?}"),
    }
}

/// Every outcome must validate against the published output schema and survive a round trip.
fn assert_matches_schema(outcome: &MutationOutcome) {
    let schema = MutationOutcome::json_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&schema)
        .unwrap();
    let instance = serde_json::to_value(outcome).unwrap();
    assert!(
        validator.is_valid(&instance),
        "{instance} does not match the outcome schema"
    );
    let back: MutationOutcome = serde_json::from_value(instance).unwrap();
    assert_eq!(&back, outcome);
}

async fn mutate<S: Store>(
    store: &S,
    request: MutationRequest,
    transition: Transition,
) -> MutationOutcome {
    let what = format!("a mutation of {}", request.handle);
    within(&what, store.mutate(request, transition))
        .await
        .unwrap()
}

type Open<'a, S> = &'a dyn Fn(StoreConfig) -> S;

async fn create_and_read<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let request = CreateRequest::typed(alice(), &laptop()).unwrap();
    let outcome = create_outcome(&store, request).await;
    assert_matches_schema(&outcome);
    let created = expect_applied(&outcome).clone();
    assert_eq!(created.result, Value::Null);
    assert!(created.handle.starts_with("bsk_") && created.handle.len() >= 4 + 22);
    assert_eq!(created.version, 1);
    assert_eq!(created.resumption.basis_version, 1);
    assert_eq!(created.resumption.lifecycle, Lifecycle::Active);
    assert_eq!(
        created.resumption.expires_at.as_deref(),
        Some("2026-07-28T10:30:00.000Z")
    );
    let ReadOutcome::Current(snapshot) = read(&store, alice(), &created.handle).await else {
        panic!("read failed");
    };
    assert_eq!(snapshot.version, 1);
    assert_eq!(*snapshot.state, serde_json::to_value(laptop()).unwrap());
    assert_eq!(snapshot.resumption, created.resumption);
    let other = create(&store, alice(), &laptop()).await;
    assert_ne!(other, created.handle);
}

async fn replay_comes_before_the_stale_check<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let send = || {
        request(
            alice(),
            &handle,
            "upgrade_memory",
            Some(1),
            Some("op-1"),
            json!(32),
        )
    };

    let first = mutate(&store, send(), set_memory(32, &calls)).await;
    let applied = expect_applied(&first).clone();
    assert_eq!(applied.version, 2);
    assert_eq!(applied.result, json!({"memory_gib": 32}));
    assert!(!first.is_error());
    assert_matches_schema(&first);

    // The response was lost; the client retries the identical request, whose expected_version 1
    // is stale by now. The ledger answers first.
    clock.advance(Duration::from_secs(5));
    let again = mutate(&store, send(), set_memory(32, &calls)).await;
    let MutationOutcome::Replayed(replayed) = &again else {
        panic!("expected replay, got {again:?}")
    };
    assert_eq!(replayed.operation_id, "op-1");
    assert_eq!(replayed.recorded_at, format_rfc3339(T0));
    assert_eq!(
        replayed.original,
        RecordedOutcome::Applied(RecordedApplied::from(&applied))
    );
    // The replay shows the resource as it is now, and records no copy of the state.
    let current = replayed
        .current
        .as_ref()
        .expect("the basket is still there");
    assert_eq!(current.version, applied.version);
    assert_eq!(current.state, applied.state);
    assert_eq!(again.committed_handle(), Some(applied.handle.as_str()));
    assert!(!again.is_error());
    assert!(again.text().starts_with("Already done"));
    assert_matches_schema(&again);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the transition ran twice");
    assert_eq!(state(&store, &handle).await.0, 2);
}

/// An operation id whose record is about another resource, sent with the payload it was recorded
/// with, is replayed as that resource's change: the replay shows that resource as it is now,
/// and the resource the request names is left alone.
async fn a_replay_shows_the_resource_its_record_names<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let recorded = create(&store, alice(), &laptop()).await;
    let named = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let first = request(
        alice(),
        &recorded,
        "upgrade_memory",
        Some(1),
        Some("op-1"),
        json!(32),
    );
    let fingerprint = first.operation.clone().expect("an operation id").1;
    let applied = expect_applied(&mutate(&store, first, set_memory(32, &calls)).await).clone();

    let elsewhere = MutationRequest::new(Basket::kind(), alice(), &named)
        .expect_version(1)
        .operation("op-1", fingerprint);
    let again = mutate(&store, elsewhere, set_memory(32, &calls)).await;
    let MutationOutcome::Replayed(replayed) = &again else {
        panic!("expected a replay, got {again:?}")
    };
    let current = replayed
        .current
        .as_ref()
        .expect("the resource is still there");
    assert_eq!(current.handle, recorded);
    assert_eq!(current.version, applied.version);
    assert_eq!(current.state, applied.state);
    assert_eq!(again.committed_handle(), Some(recorded.as_str()));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the transition ran twice");
    assert_eq!(state(&store, &named).await.0, 1);
    assert_eq!(state(&store, &recorded).await.0, 2);
}

async fn reused_operation_id_is_rejected<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let first = request(
        alice(),
        &handle,
        "upgrade_memory",
        Some(1),
        Some("op-1"),
        json!(32),
    );
    expect_applied(&mutate(&store, first, set_memory(32, &calls)).await);

    let different = request(
        alice(),
        &handle,
        "upgrade_memory",
        Some(2),
        Some("op-1"),
        json!(64),
    );
    let outcome = mutate(&store, different, set_memory(64, &calls)).await;
    let rejected = expect_rejected(&outcome, "OPERATION_ID_REUSED");
    assert_eq!(rejected.recovery, Some(Recovery::NewOperationId));
    assert!(outcome.is_error());
    assert_matches_schema(&outcome);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let upgraded = Basket {
        memory_gib: 32,
        ..laptop()
    };
    assert_eq!(state(&store, &handle).await, (2, upgraded));

    // The same id on another handle is a different payload too.
    let elsewhere = create(&store, alice(), &laptop()).await;
    let send = request(
        alice(),
        &elsewhere,
        "upgrade_memory",
        Some(1),
        Some("op-1"),
        json!(32),
    );
    expect_rejected(
        &mutate(&store, send, set_memory(32, &calls)).await,
        "OPERATION_ID_REUSED",
    );

    // The ledger is keyed by principal: bob's op-1 is his own.
    let bob = Principal::subject("bob");
    let his = create(&store, bob.clone(), &laptop()).await;
    let send = request(
        bob,
        &his,
        "upgrade_memory",
        Some(1),
        Some("op-1"),
        json!(32),
    );
    expect_applied(&mutate(&store, send, set_memory(32, &calls)).await);
}

async fn stale_view_reports_the_delta<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    // A and B both read version 1; A upgrades memory.
    let a = request(
        alice(),
        &handle,
        "upgrade_memory",
        Some(1),
        Some("a-1"),
        json!(32),
    );
    expect_applied(&mutate(&store, a, set_memory(32, &calls)).await);
    // B sends a full configuration built from version 1.
    let b = || {
        request(
            alice(),
            &handle,
            "replace_configuration",
            Some(1),
            Some("b-1"),
            json!([16, 1024]),
        )
    };
    let replace = Transition::typed(|basket: &mut Basket| {
        *basket = Basket {
            storage_gib: 1024,
            ..laptop()
        };
        Ok::<_, ToolError>(Value::Null)
    });
    let outcome = mutate(&store, b(), replace).await;
    let stale = expect_stale(&outcome).clone();
    assert_eq!(stale.code, "STALE_VIEW");
    assert_eq!((stale.expected_version, stale.current_version), (1, 2));
    assert_eq!(stale.recovery, Recovery::RefreshAndReplan);
    assert!(stale.delta_available);
    assert_eq!(
        serde_json::to_value(&stale.delta).unwrap(),
        json!([{"path": "/memory_gib", "before": 16, "after": 32}])
    );
    assert_eq!(stale.current_state["memory_gib"], 32);
    assert_eq!(stale.resumption.basis_version, 2);
    assert_eq!(outcome.code(), Some("STALE_VIEW"));
    assert!(outcome.text().contains("/memory_gib"));
    assert_matches_schema(&outcome);
    let result = outcome.clone().into_call_tool_result();
    assert!(result.is_error);
    assert_eq!(result.structured_content.unwrap()["outcome"], "stale_view");

    // Nothing changed; the stale outcome is recorded, so a retry of b-1 replays it.
    assert_eq!(state(&store, &handle).await.1.storage_gib, 512);
    let again = mutate(&store, b(), set_storage(1024)).await;
    assert!(
        matches!(&again, MutationOutcome::Replayed(r) if r.original == RecordedOutcome::StaleView(RecordedStaleView::from(&stale)))
    );
    assert_eq!(again.code(), Some("STALE_VIEW"));
    assert!(again.is_error());

    // B refreshes and replans with a new operation id: both upgrades survive.
    let b2 = request(
        alice(),
        &handle,
        "replace_configuration",
        Some(2),
        Some("b-2"),
        json!([32, 1024]),
    );
    expect_applied(&mutate(&store, b2, set_storage(1024)).await);
    let (version, basket) = state(&store, &handle).await;
    assert_eq!(
        (version, basket.memory_gib, basket.storage_gib),
        (3, 32, 1024)
    );
}

async fn reconfirm_policy<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let change = request(alice(), &handle, "m", Some(1), None, json!(1));
    expect_applied(&mutate(&store, change, set_memory(32, &calls)).await);
    let checkout = request(
        alice(),
        &handle,
        "checkout",
        Some(1),
        Some("c-1"),
        json!(null),
    )
    .policy(ConflictPolicy::Reconfirm);
    let outcome = mutate(&store, checkout, set_storage(1)).await;
    assert_eq!(expect_stale(&outcome).recovery, Recovery::Reconfirm);
    assert!(outcome.text().contains("confirm"));
    assert_matches_schema(&outcome);
}

async fn rebase_policy<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let memory = request(alice(), &handle, "m", Some(1), Some("m-1"), json!(32));
    expect_applied(&mutate(&store, memory, set_memory(32, &calls)).await);

    let storage = || ConflictPolicy::Rebase {
        touches: vec!["storage_gib".into()],
    };
    let upgrade = request(
        alice(),
        &handle,
        "upgrade_storage",
        Some(1),
        Some("s-1"),
        json!(1024),
    )
    .policy(storage());
    let outcome = mutate(&store, upgrade, set_storage(1024)).await;
    let applied = expect_applied(&outcome);
    assert_eq!((applied.version, applied.rebased_from), (3, Some(1)));
    assert_eq!(applied.state["memory_gib"], 32);
    assert_eq!(applied.state["storage_gib"], 1024);
    assert!(outcome.text().contains("based on version 1"));
    assert_matches_schema(&outcome);

    // Versions 1 -> 3 now include a storage change: the rebase is refused.
    let again = request(
        alice(),
        &handle,
        "upgrade_storage",
        Some(1),
        Some("s-2"),
        json!(2048),
    )
    .policy(storage());
    let outcome = mutate(&store, again, set_storage(2048)).await;
    let stale = expect_stale(&outcome);
    assert_eq!(stale.recovery, Recovery::RefreshAndReplan);
    assert_eq!(stale.delta.len(), 2);
    assert_eq!(state(&store, &handle).await.1.storage_gib, 1024);
}

async fn terminal_lifecycle<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let checkout = || {
        request(
            alice(),
            &handle,
            "checkout",
            Some(1),
            Some("co-1"),
            json!(null),
        )
        .policy(ConflictPolicy::Reconfirm)
    };
    let close = || {
        Transition::typed(|basket: &mut Basket| {
            basket.checked_out = true;
            Ok::<_, ToolError>("ordered")
        })
    };
    let outcome = mutate(&store, checkout(), close()).await;
    assert_eq!(
        expect_applied(&outcome).resumption.lifecycle,
        Lifecycle::Terminal
    );
    // A retry of the checkout replays; it is not judged against the terminal state.
    let again = mutate(&store, checkout(), close()).await;
    assert!(matches!(again, MutationOutcome::Replayed(_)), "{again:?}");

    let calls = Arc::new(AtomicUsize::new(0));
    let more = request(alice(), &handle, "m", Some(2), Some("m-1"), json!(64));
    let outcome = mutate(&store, more, set_memory(64, &calls)).await;
    let rejected = expect_rejected(&outcome, "TERMINAL");
    assert_eq!(rejected.recovery, Some(Recovery::Stop));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_matches_schema(&outcome);
    let ReadOutcome::Current(snapshot) = read(&store, alice(), &handle).await else {
        panic!("a terminal resource stays readable")
    };
    assert_eq!(snapshot.resumption.lifecycle, Lifecycle::Terminal);
}

async fn expiry<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    // An applied change renews the time to live.
    clock.advance(Duration::from_secs(50 * 60));
    let change = request(alice(), &handle, "m", Some(1), None, json!(32));
    let outcome = mutate(&store, change, set_memory(32, &calls)).await;
    assert_eq!(
        expect_applied(&outcome).resumption.expires_at.as_deref(),
        Some("2026-07-28T11:20:00.000Z")
    );
    clock.advance(Duration::from_secs(50 * 60));
    assert!(matches!(
        read(&store, alice(), &handle).await,
        ReadOutcome::Current(_)
    ));
    clock.advance(Duration::from_secs(10 * 60));
    let late = request(alice(), &handle, "m", Some(2), Some("late"), json!(64));
    let outcome = mutate(&store, late, set_memory(64, &calls)).await;
    let rejected = expect_rejected(&outcome, "EXPIRED");
    assert_eq!(rejected.recovery, Some(Recovery::CreateNew));
    assert_eq!(
        rejected.details,
        Some(json!({"expired_at": "2026-07-28T11:20:00.000Z"}))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_matches_schema(&outcome);
    let ReadOutcome::Rejected(rejected) = read(&store, alice(), &handle).await else {
        panic!("read of an expired handle succeeded")
    };
    assert_eq!(rejected.code, "EXPIRED");
}

/// A change's expiry is rounded up to its step (a second for this hour-long time to live): the
/// next change within that second keeps it, the store keeps what the answer said, and the
/// resource lives until then, at least its time to live after its last change.
async fn expiry_moves_in_steps<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let mut answered = Vec::new();
    for (version, elapsed) in [(1, 250), (2, 500), (3, 500)] {
        clock.advance(Duration::from_millis(elapsed));
        let change = request(alice(), &handle, "m", Some(version), None, json!(version));
        let outcome = mutate(&store, change, set_memory(version as u32, &calls)).await;
        answered.push(
            expect_applied(&outcome)
                .resumption
                .expires_at
                .clone()
                .unwrap(),
        );
    }
    assert_eq!(
        answered,
        [
            "2026-07-28T10:30:01.000Z",
            "2026-07-28T10:30:01.000Z",
            "2026-07-28T10:30:02.000Z"
        ]
    );
    // The last change was at 09:30:01.250; an hour later the basket is there.
    clock.advance(Duration::from_secs(3_600));
    let ReadOutcome::Current(snapshot) = read(&store, alice(), &handle).await else {
        panic!("the basket expired before its time to live had passed")
    };
    assert_eq!(
        snapshot.resumption.expires_at.as_deref(),
        Some("2026-07-28T10:30:02.000Z")
    );
    clock.advance(Duration::from_millis(749));
    assert!(matches!(
        read(&store, alice(), &handle).await,
        ReadOutcome::Current(_)
    ));
    clock.advance(Duration::from_millis(1));
    let ReadOutcome::Rejected(rejected) = read(&store, alice(), &handle).await else {
        panic!("the basket outlived its expiry")
    };
    assert_eq!(rejected.code, "EXPIRED");
    assert_eq!(
        rejected.details,
        Some(json!({"expired_at": "2026-07-28T10:30:02.000Z"}))
    );
}

async fn not_found_hides_existence<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let mallory = Principal::subject("mallory");
    let unknown = mcp_tools::store::mint_handle("bsk").unwrap();
    let note = CreateRequest::typed(mallory.clone(), &Note { text: "n".into() }).unwrap();
    let note = expect_applied(&create_outcome(&store, note).await)
        .handle
        .clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut answers = Vec::new();
    for (who, target) in [
        (mallory.clone(), handle.as_str()),
        (mallory.clone(), unknown.as_str()),
        (mallory.clone(), note.as_str()),
        (Principal::Anonymous, handle.as_str()),
        (mallory.clone(), "garbage"),
    ] {
        let send = request(who.clone(), target, "m", Some(1), None, json!(1));
        let outcome = mutate(&store, send, set_memory(1, &calls)).await;
        expect_rejected(&outcome, "NOT_FOUND");
        assert_matches_schema(&outcome);
        answers.push(serde_json::to_value(&outcome).unwrap());
        answers.push(serde_json::to_value(read(&store, who, target).await).unwrap());
    }
    for pair in answers.chunks(2) {
        assert_eq!(pair[0], answers[0]);
        assert_eq!(pair[1], answers[1]);
    }
    assert_eq!(answers[1]["code"], "NOT_FOUND");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(state(&store, &handle).await.0, 1);
}

async fn domain_error_is_recorded<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let failing = || {
        let calls = Arc::clone(&calls);
        Transition::typed(move |basket: &mut Basket| {
            calls.fetch_add(1, Ordering::SeqCst);
            basket.memory_gib = 4096; // discarded: the transition fails
            Err::<(), _>(
                ToolError::new("OUT_OF_STOCK", "No 4 TiB modules left.")
                    .with_details(json!({"sku": "m4t"})),
            )
        })
    };
    let send = || request(alice(), &handle, "m", Some(1), Some("big"), json!(4096));
    let outcome = mutate(&store, send(), failing()).await;
    let rejected = expect_rejected(&outcome, "OUT_OF_STOCK");
    assert_eq!(rejected.message, "No 4 TiB modules left.");
    assert_eq!(rejected.details, Some(json!({"sku": "m4t"})));
    assert_matches_schema(&outcome);
    let again = mutate(&store, send(), failing()).await;
    assert_eq!(again.code(), Some("OUT_OF_STOCK"));
    assert!(matches!(again, MutationOutcome::Replayed(_)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(state(&store, &handle).await, (1, laptop()));
}

async fn commutative_without_expected_version<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    for (index, text) in ["first", "second", "third"].into_iter().enumerate() {
        let append = Transition::typed(move |basket: &mut Basket| {
            basket.notes.push(text.to_owned());
            Ok::<_, ToolError>(basket.notes.len())
        });
        let id = format!("note-{index}");
        let send = request(alice(), &handle, "add_note", None, Some(&id), json!(text));
        let outcome = mutate(&store, send, append).await;
        assert_eq!(expect_applied(&outcome).result, json!(index + 1));
    }
    let (version, basket) = state(&store, &handle).await;
    assert_eq!(version, 4);
    assert_eq!(basket.notes, ["first", "second", "third"]);
}

async fn history_is_pruned_by_count<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        history_limit: 3,
        ..config(&clock)
    });
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    for gib in 1..=5u32 {
        let send = request(alice(), &handle, "m", None, None, json!(gib));
        expect_applied(&mutate(&store, send, set_memory(gib, &calls)).await);
    }
    // Versions 4, 5 and 6 are kept.
    let send = request(alice(), &handle, "s", Some(3), None, json!(0));
    let pruned = mutate(&store, send, set_storage(0)).await;
    let stale = expect_stale(&pruned);
    assert!(!stale.delta_available);
    assert!(stale.delta.is_empty());
    assert_eq!(stale.current_state["memory_gib"], 5);
    assert!(pruned.text().contains("no longer kept"));
    assert_matches_schema(&pruned);
    let send = request(alice(), &handle, "s", Some(4), None, json!(0));
    let kept = mutate(&store, send, set_storage(0)).await;
    let stale = expect_stale(&kept);
    assert!(stale.delta_available);
    assert_eq!(
        serde_json::to_value(&stale.delta).unwrap(),
        json!([{"path": "/memory_gib", "before": 3, "after": 5}])
    );
    // A version the basket never reached was not read: its own code, and nothing applied.
    let send = request(alice(), &handle, "s", Some(9), None, json!(0));
    let ahead = mutate(&store, send, set_storage(0)).await;
    let rejected = expect_rejected(&ahead, code::FUTURE_VERSION);
    assert_eq!(rejected.recovery, Some(Recovery::RefreshAndReplan));
    assert_eq!(rejected.details, Some(json!({ "current_version": 6 })));
    assert!(ahead.text().contains("Read the basket first"));
    assert_matches_schema(&ahead);
    for beyond in [i64::MAX as u64 + 1, u64::MAX] {
        let send = request(alice(), &handle, "s", Some(beyond), None, json!(0));
        expect_rejected(
            &mutate(&store, send, set_storage(0)).await,
            code::FUTURE_VERSION,
        );
    }
    let read = store
        .read(ReadRequest::new(Basket::kind(), alice(), handle.clone()))
        .await
        .unwrap();
    assert_eq!(read.snapshot().unwrap().version, 6, "nothing was applied");
}

/// A read since a version answers what changed in the view since then: nothing at the current
/// version, the delta within the history limit, "no longer kept" past it, and `FUTURE_VERSION`
/// for a version the resource never reached. The delta never shows what the view hides.
async fn reads_since_a_version<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        history_limit: 3,
        ..config(&clock)
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let handle = create(&store, alice(), &laptop()).await;
    for gib in 1..=5u32 {
        let send = request(alice(), &handle, "m", None, None, json!(gib));
        expect_applied(&mutate(&store, send, set_memory(gib, &calls)).await);
    }
    // Versions 4, 5 and 6 are kept.
    let since = |version: u64| {
        let read = ReadRequest::new(Basket::kind(), alice(), &handle).since(version);
        let store = &store;
        async move {
            within(&format!("a read since {version}"), store.read(read))
                .await
                .unwrap()
        }
    };
    let changes = |outcome: ReadOutcome| match outcome {
        ReadOutcome::Current(snapshot) => {
            assert_eq!(snapshot.version, 6);
            assert_eq!(snapshot.state["memory_gib"], 5);
            let changes = snapshot.changes.expect("the changes asked for");
            let delta = serde_json::to_value(&changes.delta).unwrap();
            (changes.since_version, changes.delta_available, delta)
        }
        other => panic!("expected the basket, got {other:?}"),
    };
    assert_eq!(changes(since(6).await), (6, true, json!([])));
    assert_eq!(
        changes(since(4).await),
        (
            4,
            true,
            json!([{"path": "/memory_gib", "before": 3, "after": 5}])
        )
    );
    assert_eq!(changes(since(3).await), (3, false, json!([])));
    let ahead = since(7).await;
    let ReadOutcome::Rejected(rejected) = &ahead else {
        panic!("expected FUTURE_VERSION, got {ahead:?}");
    };
    assert_eq!(rejected.code, code::FUTURE_VERSION);
    assert_eq!(rejected.details, Some(json!({ "current_version": 6 })));
    // Past what a signed 64-bit column holds, too: one answer on every store, never a failure
    // of the store.
    for beyond in [i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX] {
        let ahead = since(beyond).await;
        let ReadOutcome::Rejected(rejected) = &ahead else {
            panic!("expected FUTURE_VERSION since {beyond}, got {ahead:?}");
        };
        assert_eq!(rejected.code, code::FUTURE_VERSION, "since {beyond}");
    }
    let unknown = ReadRequest::new(Basket::kind(), alice(), "bsk_AAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .since(u64::MAX);
    let unknown = within("a read of an unknown basket", store.read(unknown))
        .await
        .unwrap();
    assert!(
        matches!(&unknown, ReadOutcome::Rejected(rejected) if rejected.code == code::NOT_FOUND),
        "{unknown:?}"
    );

    let opened = open_account(&store).await;
    let deposit = Transition::typed(|account: &mut Account| {
        account.balance += 10;
        account.entries.push(10);
        account.secret = "s-1".into();
        Ok::<_, ToolError>(())
    });
    expect_applied(&mutate(&store, account_request(&opened, Some(1), "d-1"), deposit).await);
    let read = ReadRequest::new(Account::kind(), alice(), &opened).since(1);
    let ReadOutcome::Current(snapshot) = within("a read of the account", store.read(read))
        .await
        .unwrap()
    else {
        panic!("expected the account");
    };
    let delta = serde_json::to_value(&snapshot.changes.unwrap().delta).unwrap();
    assert_eq!(
        delta,
        json!([
            {"path": "/balance", "before": 0, "after": 10},
            {"path": "/entry_count", "before": 0, "after": 1},
        ])
    );
}

async fn ledger_retention<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_retention: Duration::from_secs(10 * 60),
        ..config(&clock)
    });
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let send = |payload: u32| request(alice(), &handle, "m", None, Some("op"), json!(payload));
    expect_applied(&mutate(&store, send(1), set_memory(1, &calls)).await);
    assert_eq!(prune(&store).await.ledger_records, 0);
    clock.advance(Duration::from_secs(5 * 60));
    let replay = mutate(&store, send(1), set_memory(1, &calls)).await;
    assert!(matches!(replay, MutationOutcome::Replayed(_)));
    clock.advance(Duration::from_secs(6 * 60));
    assert_eq!(prune(&store).await.ledger_records, 1);
    // Forgotten: the id is free again.
    expect_applied(&mutate(&store, send(2), set_memory(2, &calls)).await);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        StoreConfig::default().ledger_retention,
        Duration::from_secs(24 * 3600)
    );
}

/// An expired resource answers `EXPIRED` for one ledger retention; then a prune removes it with
/// its history and it answers `NOT_FOUND`.
async fn expired_resources_are_reclaimed<S: Store + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_retention: Duration::from_secs(10 * 60),
        ..config(&clock)
    });
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    for gib in 1..=20u32 {
        let send = request(alice(), &handle, "m", None, None, json!(gib));
        expect_applied(&mutate(&store, send, set_memory(gib, &calls)).await);
    }
    // Expires at T0 + 60 min; the second basket, created 30 minutes later, at T0 + 90 min.
    clock.advance(Duration::from_secs(30 * 60));
    let live = create(&store, alice(), &laptop()).await;
    clock.advance(Duration::from_secs(31 * 60));
    let expired = |outcome: ReadOutcome| matches!(outcome, ReadOutcome::Rejected(rejected) if rejected.code == "EXPIRED");
    assert!(expired(read(&store, alice(), &handle).await));
    assert_eq!(prune(&store).await.resources, 0);
    // Still within the grace period: expired, not forgotten.
    clock.advance(Duration::from_secs(8 * 60));
    assert_eq!(prune(&store).await.resources, 0);
    assert!(expired(read(&store, alice(), &handle).await));
    assert_eq!(store.resources(), 2);
    clock.advance(Duration::from_secs(2 * 60));
    assert_eq!(prune(&store).await.resources, 1);
    let ReadOutcome::Rejected(rejected) = read(&store, alice(), &handle).await else {
        panic!("a reclaimed handle is still readable")
    };
    assert_eq!(rejected.code, "NOT_FOUND");
    let send = request(alice(), &handle, "m", None, Some("after"), json!(1));
    expect_rejected(
        &mutate(&store, send, set_memory(1, &calls)).await,
        "NOT_FOUND",
    );
    assert_eq!(store.resources(), 1);
    assert_eq!(state(&store, &live).await.0, 1);
    assert_eq!(prune(&store).await.resources, 0);
}

/// 200 concurrent requests with one operation id: one transition, 199 identical replays.
async fn same_operation_id_storm<S: Store + Clone>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (store, handle, calls) = (store.clone(), handle.clone(), Arc::clone(&calls));
        tasks.push(tokio::spawn(async move {
            let send = request(
                alice(),
                &handle,
                "upgrade_memory",
                Some(1),
                Some("storm"),
                json!(32),
            );
            mutate(&store, send, set_memory(32, &calls)).await
        }));
    }
    let mut applied = Vec::new();
    let mut replayed = Vec::new();
    for (index, task) in tasks.into_iter().enumerate() {
        match within(&format!("storm request {index}"), task)
            .await
            .unwrap()
        {
            MutationOutcome::Applied(a) => applied.push(a),
            MutationOutcome::Replayed(r) => replayed.push(r),
            other => panic!("unexpected {other:?}"),
        }
    }
    eprintln!(
        "same-id storm: {} applied, {} replayed, {} transition runs",
        applied.len(),
        replayed.len(),
        calls.load(Ordering::SeqCst)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!((applied.len(), replayed.len()), (1, 199));
    for replay in &replayed {
        assert_eq!(
            replay.original,
            RecordedOutcome::Applied(RecordedApplied::from(&applied[0]))
        );
    }
    assert_eq!(state(&store, &handle).await.0, 2);
}

/// A create retried with its operation id is replayed with the handle minted the first time.
async fn idempotent_create<S: Store + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let before = store.resources();
    let first = create_outcome(&store, create_request(alice(), "c-1", &laptop())).await;
    assert_matches_schema(&first);
    let created = expect_applied(&first).clone();
    assert_eq!(created.version, 1);
    assert_eq!(store.resources(), before + 1);

    // The first response was lost; the retry, a little later, gets the recorded outcome.
    clock.advance(Duration::from_secs(30));
    let retry = create_outcome(&store, create_request(alice(), "c-1", &laptop())).await;
    assert_matches_schema(&retry);
    let MutationOutcome::Replayed(replayed) = &retry else {
        panic!("expected replayed, got {retry:?}");
    };
    assert_eq!(replayed.operation_id, "c-1");
    assert_eq!(replayed.recorded_at, format_rfc3339(T0));
    assert_eq!(
        replayed.original,
        RecordedOutcome::Applied(RecordedApplied::from(&created))
    );
    assert_eq!(retry.committed_handle(), Some(created.handle.as_str()));
    assert_eq!(replayed.current.as_ref().map(|now| now.version), Some(1));
    assert!(!retry.is_error());
    assert_eq!(store.resources(), before + 1);

    // A replay after a change still returns the version-1 outcome it recorded.
    let calls = Arc::new(AtomicUsize::new(0));
    let send = request(
        alice(),
        &created.handle,
        "m",
        Some(1),
        Some("m-1"),
        json!(32),
    );
    expect_applied(&mutate(&store, send, set_memory(32, &calls)).await);
    let again = create_outcome(&store, create_request(alice(), "c-1", &laptop())).await;
    let MutationOutcome::Replayed(replayed) = &again else {
        panic!("expected replayed, got {again:?}");
    };
    // The record says what the create did (version 1); `current` says where the basket is now.
    let RecordedOutcome::Applied(original) = &replayed.original else {
        panic!("expected a recorded create, got {replayed:?}");
    };
    assert_eq!(
        (original.handle.as_str(), original.version),
        (created.handle.as_str(), 1)
    );
    let current = replayed
        .current
        .as_ref()
        .expect("the basket is still there");
    assert_eq!(current.version, 2);
    assert_eq!(current.state["memory_gib"], 32);
    assert_eq!(state(&store, &created.handle).await.0, 2);

    // The same id with another payload is refused, and nothing is created.
    let mut other = laptop();
    other.memory_gib = 64;
    let reused = create_outcome(&store, create_request(alice(), "c-1", &other)).await;
    assert_matches_schema(&reused);
    expect_rejected(&reused, code::OPERATION_ID_REUSED);
    assert!(reused.is_error());
    // Creates and mutations share one ledger: a mutation's id cannot mint a resource.
    let crossed = create_outcome(&store, create_request(alice(), "m-1", &laptop())).await;
    expect_rejected(&crossed, code::OPERATION_ID_REUSED);
    assert_eq!(store.resources(), before + 1);

    // The ledger is keyed by principal: another caller's id is its own.
    let bob = create_outcome(
        &store,
        create_request(Principal::subject("bob"), "c-1", &laptop()),
    )
    .await;
    assert_ne!(expect_applied(&bob).handle, created.handle);
    assert_eq!(store.resources(), before + 2);
}

/// A create's ledger record expires like a mutation's: then the id mints a new resource.
async fn create_ledger_retention<S: Store + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_retention: Duration::from_secs(10 * 60),
        ..config(&clock)
    });
    let first = create_outcome(&store, create_request(alice(), "c", &laptop())).await;
    let handle = expect_applied(&first).handle.clone();
    clock.advance(Duration::from_secs(5 * 60));
    let replay = create_outcome(&store, create_request(alice(), "c", &laptop())).await;
    assert!(matches!(replay, MutationOutcome::Replayed(_)));
    clock.advance(Duration::from_secs(6 * 60));
    assert_eq!(prune(&store).await.ledger_records, 1);
    let later = create_outcome(&store, create_request(alice(), "c", &laptop())).await;
    assert_ne!(expect_applied(&later).handle, handle);
    assert_eq!(store.resources(), 2);
}

const CREATE_STORM: usize = 100;

/// `CREATE_STORM` concurrent creates, with one operation id (`Some`) or none; agent `i` uses
/// `stores[i % stores.len()]`. Returns the outcomes and how many resources were actually added.
async fn create_storm<S: Store + Clone + CountResources>(
    stores: &[S],
    operation_id: Option<&str>,
) -> (Vec<MutationOutcome>, u64) {
    let before = stores[0].resources();
    let mut tasks = Vec::new();
    for agent in 0..CREATE_STORM {
        let store = stores[agent % stores.len()].clone();
        let operation_id = operation_id.map(str::to_owned);
        tasks.push(tokio::spawn(async move {
            let request = match &operation_id {
                Some(id) => create_request(alice(), id, &laptop()),
                None => CreateRequest::typed(alice(), &laptop()).unwrap(),
            };
            create_outcome(&store, request).await
        }));
    }
    let mut outcomes = Vec::new();
    for (agent, task) in tasks.into_iter().enumerate() {
        outcomes.push(
            within(&format!("create agent {agent}"), task)
                .await
                .unwrap(),
        );
    }
    (outcomes, stores[0].resources() - before)
}

/// Concurrent creates with one operation id mint exactly one resource; the others are replays
/// of it.
async fn check_create_storm<S: Store + Clone + CountResources>(stores: &[S], label: &str) {
    let (outcomes, created) = create_storm(stores, Some("create-storm")).await;
    let applied: Vec<&Applied> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            MutationOutcome::Applied(applied) => Some(applied),
            _ => None,
        })
        .collect();
    let replayed = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, MutationOutcome::Replayed(_)))
        .count();
    eprintln!(
        "{label}: {CREATE_STORM} concurrent creates with one operation id: {} applied, {replayed} replayed, {created} resources created",
        applied.len()
    );
    assert_eq!(created, 1, "resources actually created");
    assert_eq!((applied.len(), replayed), (1, CREATE_STORM - 1));
    for outcome in &outcomes {
        assert_eq!(
            outcome.committed_handle(),
            Some(applied[0].handle.as_str()),
            "{outcome:?}"
        );
    }
    assert_eq!(state(&stores[0], &applied[0].handle).await.0, 1);
}

/// The negative control of the storm: without an operation id every create mints a resource,
/// so the count above can see duplicates.
async fn check_create_storm_without_operation_id<S: Store + Clone + CountResources>(
    stores: &[S],
    label: &str,
) {
    let (outcomes, created) = create_storm(stores, None).await;
    let handles: std::collections::HashSet<&str> = outcomes
        .iter()
        .map(|outcome| outcome.applied().unwrap().handle.as_str())
        .collect();
    eprintln!(
        "{label}: {CREATE_STORM} concurrent creates without an operation id: {created} resources created"
    );
    assert_eq!(created, CREATE_STORM as u64);
    assert_eq!(handles.len(), CREATE_STORM);
}

struct Tally {
    applied: u64,
    stale: u64,
    final_count: u64,
    final_version: u64,
}

/// `agents` concurrent read-modify-write loops, each applying `ops` increments computed from what
/// it read (a full-value write: the lost-update shape) and retrying with a new operation id on
/// `stale_view`. Agent `i` uses `stores[i % stores.len()]`.
async fn read_modify_write<S: Store + Clone>(stores: &[S], agents: usize, ops: u64) -> Tally {
    let handle = create(&stores[0], alice(), &laptop()).await;
    let mut tasks = Vec::new();
    for agent in 0..agents {
        let (store, handle) = (stores[agent % stores.len()].clone(), handle.clone());
        tasks.push(tokio::spawn(async move {
            let (mut applied, mut stale, mut attempt) = (0u64, 0u64, 0u64);
            while applied < ops {
                attempt += 1;
                let (version, basket) = state(&store, &handle).await;
                tokio::task::yield_now().await;
                let next = basket.count + 1;
                let id = format!("agent-{agent}-{attempt}");
                let send = request(
                    alice(),
                    &handle,
                    "set_count",
                    Some(version),
                    Some(&id),
                    json!(next),
                );
                let write = Transition::typed(move |basket: &mut Basket| {
                    basket.count = next;
                    Ok::<_, ToolError>(next)
                });
                match mutate(&store, send, write).await {
                    MutationOutcome::Applied(_) => applied += 1,
                    MutationOutcome::StaleView(_) => stale += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            (applied, stale)
        }));
    }
    let (mut applied, mut stale) = (0, 0);
    for (agent, task) in tasks.into_iter().enumerate() {
        let (a, s) = within_for(WORKLOAD, &format!("read-modify-write agent {agent}"), task)
            .await
            .unwrap();
        applied += a;
        stale += s;
    }
    let (final_version, basket) = state(&stores[0], &handle).await;
    Tally {
        applied,
        stale,
        final_count: basket.count,
        final_version,
    }
}

const AGENTS: usize = 32;
const OPS: u64 = 10;

async fn no_lost_update<S: Store + Clone>(stores: &[S], label: &str) {
    let tally = read_modify_write(stores, AGENTS, OPS).await;
    eprintln!(
        "{label}: {AGENTS} agents x {OPS} ops: {} applied, {} stale_view retries, final count {}, final version {}",
        tally.applied, tally.stale, tally.final_count, tally.final_version
    );
    assert_eq!(tally.applied, AGENTS as u64 * OPS);
    assert_eq!(tally.final_count, tally.applied, "lost update");
    assert_eq!(tally.final_version, tally.applied + 1);
}

async fn lost_updates_without_the_version_check<S: Store + Clone>(stores: &[S], label: &str) {
    let tally = read_modify_write(stores, AGENTS, OPS).await;
    eprintln!(
        "{label} with the version check off: {} applied, final count {}: {} updates lost",
        tally.applied,
        tally.final_count,
        tally.applied - tally.final_count
    );
    assert_eq!(tally.stale, 0);
    assert!(
        tally.final_count < tally.applied,
        "the workload did not detect lost updates"
    );
}

fn unchecked() -> StoreConfig {
    StoreConfig {
        unchecked_versions_for_tests: true,
        ..StoreConfig::default()
    }
}

/// Each resource holds at most `ledger_quota` live records: a new operation id beyond that is
/// `LEDGER_FULL` (nothing applied, nothing recorded) until records expire, while replays of
/// recorded ids, changes without an operation id and every other resource go on as before, and
/// guessed handles record nothing at all.
/// A change confirmed against the version a `stale_view` showed replaces that record under the
/// same operation id, applies once, and never replaces an applied record.
async fn a_confirmed_retry_replaces_its_stale_view<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_quota: 3,
        ..config(&clock)
    });
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let send = request(alice(), &handle, "m", Some(1), Some("other"), json!(32));
    expect_applied(&mutate(&store, send, set_memory(32, &calls)).await);

    let checkout = |expected: u64, confirmed: Option<u64>| {
        let mut send = request(alice(), &handle, "m", Some(expected), Some("co"), json!(64))
            .policy(ConflictPolicy::Reconfirm);
        if let Some(version) = confirmed {
            send.expected_version = Some(version);
            send = send.reconfirmed();
        }
        send
    };
    let stale = mutate(&store, checkout(1, None), set_memory(64, &calls)).await;
    assert_eq!(expect_stale(&stale).recovery, Recovery::Reconfirm);
    // Unconfirmed, the same request replays its `stale_view`.
    let replay = mutate(&store, checkout(1, None), set_memory(64, &calls)).await;
    assert!(
        matches!(&replay, MutationOutcome::Replayed(r) if matches!(r.original, RecordedOutcome::StaleView(_))),
        "{replay:?}"
    );
    // A confirmation against an older version than now is stale again, and still replaceable.
    let again = mutate(&store, checkout(1, Some(1)), set_memory(64, &calls)).await;
    expect_stale(&again);
    let applied = mutate(&store, checkout(1, Some(2)), set_memory(64, &calls)).await;
    assert_eq!(expect_applied(&applied).version, 3);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "applied once");
    // Once applied, no confirmation applies it again.
    for confirmed in [Some(3), Some(2), None] {
        let replay = mutate(&store, checkout(1, confirmed), set_memory(64, &calls)).await;
        assert!(
            matches!(&replay, MutationOutcome::Replayed(r) if matches!(r.original, RecordedOutcome::Applied(_))),
            "{confirmed:?}: {replay:?}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Another payload under the id is still another request.
    let mut other = request(alice(), &handle, "m", Some(1), Some("co"), json!(128));
    other.expected_version = Some(3);
    let reused = mutate(&store, other.reconfirmed(), set_memory(128, &calls)).await;
    expect_rejected(&reused, code::OPERATION_ID_REUSED);
    // The replaced record took its count with it: two ids are recorded, so a third fits.
    let send = request(alice(), &handle, "m", Some(3), Some("third"), json!(8));
    expect_applied(&mutate(&store, send, set_memory(8, &calls)).await);
    let send = request(alice(), &handle, "m", Some(4), Some("fourth"), json!(9));
    let full = mutate(&store, send, set_memory(9, &calls)).await;
    expect_rejected(&full, code::LEDGER_FULL);
}

async fn ledger_is_bounded_per_resource<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_quota: 3,
        ledger_retention: Duration::from_secs(600),
        ..config(&clock)
    });
    let a = create(&store, alice(), &laptop()).await;
    let b = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    for n in 1..=3u32 {
        let send = request(alice(), &a, "m", None, Some(&format!("a-{n}")), json!(n));
        expect_applied(&mutate(&store, send, set_memory(n, &calls)).await);
    }
    clock.advance(Duration::from_secs(300));
    let send = request(alice(), &a, "m", None, Some("a-4"), json!(4));
    let full = mutate(&store, send, set_memory(4, &calls)).await;
    assert_matches_schema(&full);
    let rejected = expect_rejected(&full, code::LEDGER_FULL);
    assert_eq!(rejected.recovery, Some(Recovery::RetryLater));
    assert_eq!(state(&store, &a).await.0, 4, "nothing was applied");
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // A recorded id still replays; a change without an id is not recorded, so it applies.
    let send = request(alice(), &a, "m", None, Some("a-1"), json!(1));
    assert!(matches!(
        mutate(&store, send, set_memory(1, &calls)).await,
        MutationOutcome::Replayed(_)
    ));
    let send = request(alice(), &a, "m", None, None, json!(5));
    expect_applied(&mutate(&store, send, set_memory(5, &calls)).await);
    // Another resource has a share of its own.
    let send = request(alice(), &b, "m", None, Some("b-1"), json!(6));
    expect_applied(&mutate(&store, send, set_memory(6, &calls)).await);
    // Guessed handles with fresh ids cost nothing: the same id on a guessed handle is judged
    // again (not replayed), and no share fills up.
    for n in 0..50 {
        let guess = format!("bsk_guess{n}");
        for _ in 0..2 {
            let send = request(
                alice(),
                &guess,
                "m",
                None,
                Some(&format!("g-{n}")),
                json!(1),
            );
            let outcome = mutate(&store, send, set_memory(1, &calls)).await;
            expect_rejected(&outcome, code::NOT_FOUND);
        }
    }
    // The same id refused for a full share is free once the share has room again: records
    // expire and no longer count, whether or not a sweep has run.
    clock.advance(Duration::from_secs(301));
    let send = request(alice(), &a, "m", None, Some("a-4"), json!(4));
    expect_applied(&mutate(&store, send, set_memory(4, &calls)).await);
}

/// An expired operation id used again counts once: at a full share the expired record is swept
/// and replaced, and the share stays exact, so the next new id is refused.
async fn a_reused_expired_id_counts_once<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_quota: 3,
        ledger_retention: Duration::from_secs(600),
        ..config(&clock)
    });
    let a = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let change = |id: &str, gib: u32| request(alice(), &a, "m", None, Some(id), json!(gib));
    expect_applied(&mutate(&store, change("a-1", 1), set_memory(1, &calls)).await);
    clock.advance(Duration::from_secs(300));
    expect_applied(&mutate(&store, change("a-2", 2), set_memory(2, &calls)).await);
    expect_applied(&mutate(&store, change("a-3", 3), set_memory(3, &calls)).await);
    // a-1 has expired; a-2 and a-3 are live. Sent again, a-1 is a new operation.
    clock.advance(Duration::from_secs(301));
    expect_applied(&mutate(&store, change("a-1", 4), set_memory(4, &calls)).await);
    // Three live records now: a-2, a-3 and the new a-1.
    let full = mutate(&store, change("a-4", 5), set_memory(5, &calls)).await;
    expect_rejected(&full, code::LEDGER_FULL);
    assert_eq!(state(&store, &a).await.0, 5);
}

/// A create whose claim lapsed while its state was being made (a stalled caller) does not mint a
/// second entity when it finally finishes: the retry that took the id over stands, and the
/// stalled create answers with its outcome.
async fn a_create_whose_claim_lapsed_gives_way<S: Store + Clone + CountResources>(
    open: Open<'_, S>,
) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        creation_lease: Duration::from_secs(10),
        ..config(&clock)
    });
    let before = store.resources();
    let (stalled, release) = stalled_create(&store, "c-1").await;
    // While the claim holds, a retry is told to come back.
    let retry = || {
        CreateRequest::typed(alice(), &laptop())
            .unwrap()
            .operation("c-1", Fingerprint::of(&json!("c-1")))
    };
    let busy = create_outcome(&store, retry()).await;
    expect_rejected(&busy, code::OPERATION_IN_PROGRESS);
    // Past the lease the retry takes the id over.
    clock.advance(Duration::from_secs(11));
    let taken = create_outcome(&store, retry()).await;
    let handle = expect_applied(&taken).handle.clone();
    release.send(()).unwrap();
    let late = within("the stalled create to finish", stalled)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(late.committed_handle(), Some(handle.as_str()), "{late:?}");
    assert!(matches!(late, MutationOutcome::Replayed(_)), "{late:?}");
    assert_eq!(store.resources(), before + 1);
}

/// A create whose state could not be made records nothing and gives its claim up: a failing
/// function and a panicking one are both run again by a retry with the same id, and a retry
/// after a create was dropped mid-way (its caller went away) need not wait for the lease.
/// Starts a create of `operation_id` whose function waits for the returned sender, and returns
/// once the function runs (the operation id is claimed).
async fn stalled_create<S: Store + Clone>(
    store: &S,
    operation_id: &'static str,
) -> (
    tokio::task::JoinHandle<Result<MutationOutcome, StoreError>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let create = tokio::spawn({
        let store = store.clone();
        async move {
            let making = Creation::typed(async move {
                let _ = started.send(());
                let _ = released.await;
                Ok::<_, ToolError>(laptop())
            });
            let request = CreateRequest::deferred(Basket::kind(), alice(), making)
                .operation(operation_id, Fingerprint::of(&json!(operation_id)));
            store.create(request).await
        }
    });
    within(&format!("{operation_id} to claim its id"), running)
        .await
        .unwrap();
    (create, release)
}

/// Creates whose claims lapse one after another: a create that finishes while a later attempt
/// holds the id is told it is in progress, and one that finishes at the very instant the later
/// claim lapses (a claim lasts until its end, exclusive, as in every lookup) stores its resource;
/// the later attempt then replays it.
async fn claims_lapse_in_turn<S: Store + Clone + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let lease = Duration::from_secs(10);
    let store = open(StoreConfig {
        creation_lease: lease,
        ..config(&clock)
    });
    let before = store.resources();
    type Stalled = tokio::task::JoinHandle<Result<MutationOutcome, StoreError>>;
    let finished = |create: Stalled| async move {
        within("a stalled create to finish", create)
            .await
            .unwrap()
            .unwrap()
    };
    let (first, release_first) = stalled_create(&store, "c").await;
    clock.advance(lease + Duration::from_secs(1));
    let (second, release_second) = stalled_create(&store, "c").await;
    release_first.send(()).unwrap();
    expect_rejected(&finished(first).await, code::OPERATION_IN_PROGRESS);
    clock.advance(lease);
    let (third, release_third) = stalled_create(&store, "c").await;
    clock.advance(lease);
    release_second.send(()).unwrap();
    let handle = expect_applied(&finished(second).await).handle.clone();
    release_third.send(()).unwrap();
    let late = finished(third).await;
    assert!(matches!(late, MutationOutcome::Replayed(_)), "{late:?}");
    assert_eq!(late.committed_handle(), Some(handle.as_str()), "{late:?}");
    assert_eq!(store.resources(), before + 1);
}

async fn a_create_that_did_not_finish_leaves_the_id_free<S: Store + Clone + CountResources>(
    open: Open<'_, S>,
) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let before = store.resources();
    let runs = Arc::new(AtomicUsize::new(0));
    let request = |id: &str, outcome: fn() -> Result<Basket, ToolError>| {
        let runs = Arc::clone(&runs);
        let making = Creation::typed(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            outcome()
        });
        CreateRequest::deferred(Basket::kind(), alice(), making)
            .operation(id, Fingerprint::of(&json!(id)))
    };
    let refused = || Err(ToolError::new("SEAT_TAKEN", "taken"));
    let made = || Ok(laptop());
    for _ in 0..2 {
        let failed = create_outcome(&store, request("fails", refused)).await;
        expect_rejected(&failed, "SEAT_TAKEN");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "a failed create was replayed"
    );
    let panicked = create_outcome(&store, request("panics", || panic!("a bug in the tool"))).await;
    expect_rejected(&panicked, code::TRANSITION_PANICKED);
    expect_applied(&create_outcome(&store, request("panics", made)).await);
    assert_eq!(runs.load(Ordering::SeqCst), 4);

    // A create dropped while its function runs gives the claim up on its own.
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let stalled = tokio::spawn({
        let store = store.clone();
        async move {
            let making = Creation::typed(async move {
                let _ = started.send(());
                std::future::pending::<Result<Basket, ToolError>>().await
            });
            let request = CreateRequest::deferred(Basket::kind(), alice(), making)
                .operation("dropped", Fingerprint::of(&json!("dropped")));
            store.create(request).await
        }
    });
    within("the create to start making its state", running)
        .await
        .unwrap();
    stalled.abort();
    let _ = within("the aborted create to stop", stalled).await;
    within("the dropped create's claim to be given up", async {
        loop {
            let retry = create_outcome(&store, request("dropped", made)).await;
            match retry.code() {
                Some(code::OPERATION_IN_PROGRESS) => tokio::task::yield_now().await,
                _ => break expect_applied(&retry).version,
            }
        }
    })
    .await;
    assert_eq!(store.resources(), before + 2);
}

/// A panic in the entity's own code (its lifecycle or its view) inside a create or a mutation
/// answers `TRANSITION_PANICKED`, as a panicking transition does: nothing is changed or
/// recorded, a create gives its claim up, and the same ids apply once the code is fixed. A
/// replay whose view panics still answers `replayed`, only without the current view: the
/// operation was applied, and a caller told otherwise might apply it again. A read whose view
/// panics unwinds to its caller, as the read tool's own code would. The store stays healthy
/// throughout. (A kind whose functions panic stands for a server deployed with the bug.)
async fn entity_code_panics_are_contained<S: Store + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let fixed = Basket::kind();
    let broken_lifecycle = fixed.with_lifecycle(|_| panic!("a bug in the lifecycle"));
    let broken_view = fixed.with_view(|_| panic!("a bug in the view"));
    let id = |id: &str| Fingerprint::of(&json!(id));
    let assert_panicked = |outcome: &MutationOutcome| {
        let rejected = expect_rejected(outcome, code::TRANSITION_PANICKED);
        assert_eq!(rejected.recovery, Some(Recovery::Stop));
    };
    let before = store.resources();

    let ready = |kind| CreateRequest::new(kind, alice(), serde_json::to_value(laptop()).unwrap());
    let made = |kind| {
        let making = Creation::typed(async { Ok::<_, ToolError>(laptop()) });
        CreateRequest::deferred(kind, alice(), making)
    };
    for broken in [broken_lifecycle, broken_view] {
        assert_panicked(
            &create_outcome(&store, ready(broken).operation("ready", id("ready"))).await,
        );
        assert_panicked(&create_outcome(&store, made(broken).operation("made", id("made"))).await);
    }
    assert_eq!(store.resources(), before);
    let created = create_outcome(&store, ready(fixed).operation("ready", id("ready"))).await;
    let handle = expect_applied(&created).handle.clone();
    expect_applied(&create_outcome(&store, made(fixed).operation("made", id("made"))).await);
    assert_eq!(store.resources(), before + 2);

    // An untyped transition leaves the new state's lifecycle and view to the kind.
    let bump = || {
        Transition::new(|state: &mut Value| {
            state["count"] = json!(state["count"].as_u64().unwrap() + 1);
            Ok(Value::Null)
        })
    };
    let send = |kind, expected: u64, operation_id: &str| {
        MutationRequest::new(kind, alice(), &handle)
            .expect_version(expected)
            .operation(operation_id, id(operation_id))
    };
    for broken in [broken_lifecycle, broken_view] {
        assert_panicked(&mutate(&store, send(broken, 1, "bump"), bump()).await);
    }
    assert_eq!(state(&store, &handle).await, (1, laptop()));
    expect_applied(&mutate(&store, send(fixed, 1, "bump"), bump()).await);

    // Replays, of the change and of the create, with and without the view.
    let replayed = |outcome: MutationOutcome| match outcome {
        MutationOutcome::Replayed(replayed) => replayed.current.map(|current| current.version),
        other => panic!("expected replayed, got {other:?}"),
    };
    let again = |kind| ready(kind).operation("ready", id("ready"));
    for broken in [broken_lifecycle, broken_view] {
        let shown = (broken.view.is_none()).then_some(2);
        assert_eq!(
            replayed(mutate(&store, send(broken, 1, "bump"), bump()).await),
            shown
        );
        assert_eq!(replayed(create_outcome(&store, again(broken)).await), shown);
    }
    assert_eq!(
        replayed(mutate(&store, send(fixed, 1, "bump"), bump()).await),
        Some(2)
    );

    // The stale view's current state and delta.
    assert_panicked(&mutate(&store, send(broken_view, 1, "late"), bump()).await);
    expect_stale(&mutate(&store, send(fixed, 1, "late"), bump()).await);

    let read = ReadRequest::new(broken_view, alice(), &handle).since(1);
    let unwound = within(
        "a read whose view panics",
        std::panic::AssertUnwindSafe(store.read(read)).catch_unwind(),
    )
    .await;
    assert!(unwound.is_err(), "the view's panic was swallowed");
    let (version, basket) = state(&store, &handle).await;
    assert_eq!((version, basket.count), (2, 1));
}

/// `levels` arrays, one inside the other, around a number.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// A state or a result nests at most `MAX_DEPTH` levels of arrays and objects. Past it, a
/// create (ready or made by the tool), a change and a result are refused with `INVALID_STATE`
/// and nothing is stored (a made state gives its claim up, so a retry with the id runs again);
/// at the bound, a resource is created, read back (on SQLite, by a store with a cache of its
/// own, as another process would; PostgreSQL parses on every read) and changed.
async fn nesting_is_bounded<S: Store + CountResources>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let before = store.resources();
    // The document's object is one level, its body the rest.
    let at_bound = || Document {
        body: nested(MAX_DEPTH - 1),
    };
    let past = || Document {
        body: nested(MAX_DEPTH),
    };
    let ready = CreateRequest::typed(alice(), &past()).unwrap();
    expect_rejected(&create_outcome(&store, ready).await, code::INVALID_STATE);
    let made = |document: Document| {
        let making = Creation::typed(async move { Ok::<_, ToolError>(document) });
        CreateRequest::deferred(Document::kind(), alice(), making)
            .operation("deep", Fingerprint::of(&json!("deep")))
    };
    let refused = create_outcome(&store, made(past())).await;
    expect_rejected(&refused, code::INVALID_STATE);
    assert_eq!(
        store.resources(),
        before,
        "a refused create stored a resource"
    );
    let created = create_outcome(&store, made(at_bound())).await;
    let handle = expect_applied(&created).handle.clone();

    let reader = open(config(&clock));
    for (who, store) in [("the writer", &store), ("another store", &reader)] {
        let request = ReadRequest::new(Document::kind(), alice(), &handle);
        match within("a read", store.read(request)).await.unwrap() {
            ReadOutcome::Current(snapshot) => {
                assert_eq!(snapshot.state["body"], nested(MAX_DEPTH - 1), "{who}");
            }
            // A memory store is one process's own.
            ReadOutcome::Rejected(rejected) if who == "another store" => {
                assert_eq!(rejected.code, code::NOT_FOUND);
            }
            other => panic!("{who} read {other:?}"),
        }
    }

    let change = |body: Value, result: Value| {
        let request = MutationRequest::new(Document::kind(), alice(), &handle).expect_version(1);
        let transition = Transition::typed(move |document: &mut Document| {
            document.body = body.clone();
            Ok::<_, ToolError>(result.clone())
        });
        within("a change", store.mutate(request, transition))
    };
    expect_rejected(
        &change(nested(MAX_DEPTH), json!(null)).await.unwrap(),
        code::INVALID_STATE,
    );
    expect_rejected(
        &change(json!(0), nested(MAX_DEPTH + 1)).await.unwrap(),
        code::INVALID_STATE,
    );
    let applied = change(nested(MAX_DEPTH - 1), nested(MAX_DEPTH))
        .await
        .unwrap();
    assert_eq!(expect_applied(&applied).version, 2, "{applied:?}");

    // An error is recorded with its details: past the bound it is refused unrecorded, so the
    // same id applies once the tool is fixed; at the bound it is recorded and replayed.
    let with_id = |operation_id: &str| {
        MutationRequest::new(Document::kind(), alice(), &handle)
            .expect_version(2)
            .operation(operation_id, Fingerprint::of(&json!(operation_id)))
    };
    let failing = |details: Value| {
        Transition::typed(move |_: &mut Document| {
            Err::<Value, _>(ToolError::new("SEAT_TAKEN", "taken").with_details(details.clone()))
        })
    };
    let deep = within(
        "an error past the bound",
        store.mutate(with_id("deep-error"), failing(nested(MAX_DEPTH + 1))),
    )
    .await
    .unwrap();
    expect_rejected(&deep, code::INVALID_STATE);
    for _ in 0..2 {
        let shallow = within(
            "an error at the bound",
            store.mutate(with_id("error"), failing(nested(MAX_DEPTH))),
        )
        .await
        .unwrap();
        assert_eq!(shallow.code(), Some("SEAT_TAKEN"), "{shallow:?}");
    }
    let fixed = Transition::typed(|document: &mut Document| {
        document.body = json!(2);
        Ok::<_, ToolError>(json!(null))
    });
    let applied = within("the fixed tool", store.mutate(with_id("deep-error"), fixed))
        .await
        .unwrap();
    assert_eq!(expect_applied(&applied).version, 3, "{applied:?}");
}

/// A resource (or a store descriptor) that declares a view shows it in every outcome: applied,
/// stale_view (whose delta is computed between views, so it never shows what the view hides)
/// and a replay's `current`; reads return the whole state.
async fn views_shape_outcomes<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let made = Account {
        secret: "s-0".into(),
        balance: 0,
        entries: vec![],
    };
    let created = create_account(&store, &made).await;
    let view = |balance: i64, count: usize| json!({ "balance": balance, "entry_count": count });
    let created = expect_applied(&created).clone();
    assert_eq!(*created.state, view(0, 0));

    let deposit = |amount: i64, secret: &'static str| {
        Transition::typed(move |account: &mut Account| {
            account.balance += amount;
            account.entries.push(amount);
            account.secret = secret.to_owned();
            Ok::<_, ToolError>(account.balance)
        })
    };
    let send = account_request(&created.handle, Some(1), "d-1");
    let first = mutate(&store, send, deposit(10, "s-1")).await;
    assert_eq!(*expect_applied(&first).state, view(10, 1));
    assert_matches_schema(&first);

    // Planned from version 1, sent after version 2: the delta covers the view's fields only.
    let send = account_request(&created.handle, Some(1), "d-2");
    let stale = mutate(&store, send, deposit(5, "s-2")).await;
    let stale = expect_stale(&stale);
    assert_eq!(*stale.current_state, view(10, 1));
    let paths: Vec<&str> = stale
        .delta
        .iter()
        .map(|change| change.path.as_str())
        .collect();
    assert_eq!(paths, ["/balance", "/entry_count"]);
    assert!(!serde_json::to_string(stale).unwrap().contains("s-1"));

    let send = account_request(&created.handle, Some(1), "d-1");
    let again = mutate(&store, send, deposit(10, "s-1")).await;
    let MutationOutcome::Replayed(replayed) = &again else {
        panic!("expected replayed, got {again:?}");
    };
    assert_eq!(*replayed.current.as_ref().unwrap().state, view(10, 1));

    let read = ReadRequest::new(Account::kind(), alice(), created.handle.clone());
    let ReadOutcome::Current(snapshot) = within("a read", store.read(read)).await.unwrap() else {
        panic!("expected the account");
    };
    assert_eq!(
        snapshot.state["secret"], "s-1",
        "reads return the whole state"
    );
}

/// An account under another kind, whose view shows the secret and whose lifecycle ends.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
struct AccountExport(Account);

impl Entity for AccountExport {
    const KIND: &'static str = "account_export";
    const PREFIX: &'static str = "exp";
    const VIEW: Option<fn(&Self) -> Value> = Some(|export| json!({ "secret": export.0.secret }));
    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::Terminal
    }
}

/// A transition typed over another entity than the request's kind changes the state, but the
/// lifecycle and the view stay the request's kind's own: the secret stays hidden and the
/// account open.
async fn a_transition_of_another_type_keeps_the_kinds_view<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = open_account(&store).await;
    let deposit = || {
        Transition::typed(|AccountExport(account): &mut AccountExport| {
            account.balance += 10;
            account.entries.push(10);
            Ok::<_, ToolError>(())
        })
    };
    for (expected, operation_id) in [(1, "export-1"), (2, "export-2")] {
        let send = account_request(&handle, Some(expected), operation_id);
        let applied = mutate(&store, send, deposit()).await;
        let count = expected as usize;
        assert_eq!(
            *expect_applied(&applied).state,
            json!({ "balance": 10 * count as i64, "entry_count": count })
        );
    }
}

/// Opens an empty account with secret `s-0`; its handle.
async fn open_account<S: Store>(store: &S) -> String {
    let account = Account {
        secret: "s-0".into(),
        balance: 0,
        entries: vec![],
    };
    let opened = create_account(store, &account).await;
    expect_applied(&opened).handle.clone()
}

async fn create_account<S: Store>(store: &S, account: &Account) -> MutationOutcome {
    let request = CreateRequest::typed(alice(), account)
        .unwrap()
        .operation("open", Fingerprint::of(&json!("open")));
    create_outcome(store, request).await
}

fn account_request(handle: &str, expected: Option<u64>, operation_id: &str) -> MutationRequest {
    let mut request = MutationRequest::new(Account::kind(), alice(), handle)
        .operation(operation_id, Fingerprint::of(&json!(operation_id)));
    if let Some(expected) = expected {
        request = request.expect_version(expected);
    }
    request
}

/// Per-test storage: a temporary directory, used by the SQLite stores, and a PostgreSQL schema.
struct Fixture {
    dir: tempfile::TempDir,
    #[cfg(feature = "postgres")]
    schema: Option<pg::Schema>,
}

impl Fixture {
    /// `None` when the store `open` names cannot run here (no PostgreSQL outside CI).
    fn new(open: &str) -> Option<Self> {
        Some(Fixture {
            dir: tempfile::tempdir().unwrap(),
            #[cfg(feature = "postgres")]
            schema: if open == "postgres" {
                Some(pg::Schema::new()?)
            } else {
                None
            },
        })
    }

    #[cfg(feature = "postgres")]
    fn postgres(&self, config: StoreConfig) -> mcp_tools::PostgresStore {
        self.schema.as_ref().expect("a schema").open(config)
    }

    fn memory(&self, config: StoreConfig) -> MemoryStore {
        MemoryStore::new(config)
    }

    fn sqlite(&self, config: StoreConfig) -> SqliteStore {
        SqliteStore::open(self.dir.path().join("state.db"), config).unwrap()
    }

    /// Two stores on the one file, standing for two server processes sharing it.
    fn two_sqlite(&self, config: impl Fn() -> StoreConfig) -> [SqliteStore; 2] {
        [self.sqlite(config()), self.sqlite(config())]
    }
}

/// The task primitives every store implements: insert once per id, load, change in place,
/// purge what expired (strictly before the instant given).
async fn tasks_are_kept_changed_under_lock_and_purged_after_their_ttl<S: Store>(open: Open<'_, S>) {
    use mcp_tools::tasks::{TaskChange, TaskInsert, TaskRecord, TaskStatus};
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let short = TaskRecord::for_tests("tsk_short", "alice", 1_000, 100);
    let long = TaskRecord::for_tests("tsk_long", "alice", 1_000, 1_000_000);
    for task in [&short, &long] {
        let inserted = store.insert_task(task.clone()).await.unwrap();
        assert!(matches!(inserted, TaskInsert::Inserted), "{inserted:?}");
    }
    let again = TaskRecord::for_tests("tsk_short", "bob", 5, 5);
    match store.insert_task(again).await.unwrap() {
        TaskInsert::Existing(existing) => assert_eq!(*existing, short),
        other => panic!("a second insert of one id stored something: {other:?}"),
    }
    assert_eq!(
        store.load_task("tsk_short").await.unwrap(),
        Some(short.clone())
    );
    assert_eq!(store.load_task("tsk_none").await.unwrap(), None);

    let cancelled = store
        .update_task("tsk_long", TaskChange::cancel_for_tests())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);
    assert_eq!(store.load_task("tsk_long").await.unwrap(), Some(cancelled));
    let unchanged = store
        .update_task("tsk_short", TaskChange::nothing_for_tests())
        .await
        .unwrap();
    assert_eq!(unchanged, Some(short.clone()));
    let missing = store
        .update_task("tsk_none", TaskChange::cancel_for_tests())
        .await
        .unwrap();
    assert_eq!(missing, None);

    // A task whose time to live ended by the time a new one with its id is made (it is no
    // longer visible at its expiry instant) gives way to it.
    let short_again = TaskRecord::for_tests("tsk_short", "alice", 1_100, 100);
    let replaced = store.insert_task(short_again.clone()).await.unwrap();
    assert!(matches!(replaced, TaskInsert::Inserted), "{replaced:?}");
    assert_eq!(
        store.load_task("tsk_short").await.unwrap(),
        Some(short_again)
    );
    let early = TaskRecord::for_tests("tsk_long", "alice", 1_100, 100);
    let kept = store.insert_task(early).await.unwrap();
    assert!(matches!(kept, TaskInsert::Existing(_)), "{kept:?}");
    let last_moment = TaskRecord::for_tests("tsk_long", "bob", 1_000_999, 100);
    let kept = store.insert_task(last_moment).await.unwrap();
    assert!(
        matches!(kept, TaskInsert::Existing(_)),
        "a task keeps its id up to its last millisecond: {kept:?}"
    );

    assert_eq!(
        store.purge_tasks(1_200).await.unwrap(),
        0,
        "a task lives its whole ttl"
    );
    assert_eq!(store.purge_tasks(1_201).await.unwrap(), 1);
    assert_eq!(store.load_task("tsk_short").await.unwrap(), None);
    assert!(store.load_task("tsk_long").await.unwrap().is_some());
}

/// Two instances of one store, as two replicas would hold it: opened twice where a store can
/// be (two processes on one SQLite file, two PostgreSQL replicas), two clones of one memory
/// store (which share it).
fn two_instances<S: Store + Clone>(open: &str, mut make: impl FnMut() -> S) -> [S; 2] {
    let first = make();
    let second = if open == "memory" {
        first.clone()
    } else {
        make()
    };
    [first, second]
}

macro_rules! contract {
    ($module:ident, $open:ident) => {
        mod $module {
            use super::*;

            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $name() {
                        let Some(fixture) = Fixture::new(stringify!($open)) else {
                            return;
                        };
                        super::$name(&|config| fixture.$open(config)).await;
                    }
                };
            }

            case!(create_and_read);
            case!(replay_comes_before_the_stale_check);
            case!(a_replay_shows_the_resource_its_record_names);
            case!(reused_operation_id_is_rejected);
            case!(stale_view_reports_the_delta);
            case!(reconfirm_policy);
            case!(rebase_policy);
            case!(terminal_lifecycle);
            case!(expiry);
            case!(expiry_moves_in_steps);
            case!(not_found_hides_existence);
            case!(domain_error_is_recorded);
            case!(commutative_without_expected_version);
            case!(history_is_pruned_by_count);
            case!(reads_since_a_version);
            case!(a_confirmed_retry_replaces_its_stale_view);
            case!(ledger_retention);
            case!(same_operation_id_storm);
            case!(idempotent_create);
            case!(create_ledger_retention);
            case!(expired_resources_are_reclaimed);
            case!(ledger_is_bounded_per_resource);
            case!(a_reused_expired_id_counts_once);
            case!(a_create_whose_claim_lapsed_gives_way);
            case!(claims_lapse_in_turn);
            case!(a_create_that_did_not_finish_leaves_the_id_free);
            case!(views_shape_outcomes);
            case!(a_transition_of_another_type_keeps_the_kinds_view);
            case!(nesting_is_bounded);
            case!(entity_code_panics_are_contained);
            case!(tasks_are_kept_changed_under_lock_and_purged_after_their_ttl);
            case!(appends_commute_and_reads_page);
            case!(items_are_versioned_one_by_one);
            case!(removals_and_changes_since_a_version);
            case!(a_replay_appends_nothing);
            case!(items_reached_in_rounds);
            case!(a_plain_list_migrates_on_its_first_change);
            case!(items_made_with_the_entity_are_kept);
            case!(effects_exist_exactly_when_their_change_committed);
            case!(leases_settle_and_retry);
            case!(expired_ids_and_deep_effects);
            case!(a_step_changes_every_resource_or_none);
            case!(a_stale_step_names_each_resource_that_moved);
            case!(a_step_checks_each_resource);
            case!(a_step_over_two_kinds);

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_moves_between_two_resources_conserve_them() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let stores =
                    two_instances(stringify!($open), || fixture.$open(StoreConfig::default()));
                concurrent_moves_conserve_and_never_deadlock(&stores, 8, 6, stringify!($module))
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_claims_of_effects_share_nothing() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let stores =
                    two_instances(stringify!($open), || fixture.$open(StoreConfig::default()));
                concurrent_claims_share_nothing(&stores, stringify!($module)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn same_operation_id_create_storm_mints_one_resource() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let store = fixture.$open(StoreConfig::default());
                check_create_storm(&[store], stringify!($module)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn negative_control_create_storm_without_operation_id() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let store = fixture.$open(StoreConfig::default());
                check_create_storm_without_operation_id(&[store], stringify!($module)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_read_modify_write_loses_nothing() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let store = fixture.$open(StoreConfig::default());
                no_lost_update(&[store], stringify!($module)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn negative_control_detects_lost_updates() {
                let Some(fixture) = Fixture::new(stringify!($open)) else {
                    return;
                };
                let store = fixture.$open(unchecked());
                lost_updates_without_the_version_check(&[store], stringify!($module)).await;
            }
        }
    };
}

contract!(memory_store, memory);
contract!(sqlite_store, sqlite);
#[cfg(feature = "postgres")]
contract!(postgres_store, postgres);

/// Two stores on one file stand for two server processes sharing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_instances_on_one_file_lose_nothing() {
    let fixture = Fixture::new("sqlite").unwrap();
    let stores = fixture.two_sqlite(StoreConfig::default);
    no_lost_update(&stores, "sqlite, two instances on one file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_instances_negative_control() {
    let fixture = Fixture::new("sqlite").unwrap();
    let stores = fixture.two_sqlite(unchecked);
    lost_updates_without_the_version_check(&stores, "sqlite, two instances on one file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_instances_create_storm_mints_one_resource() {
    let fixture = Fixture::new("sqlite").unwrap();
    let stores = fixture.two_sqlite(StoreConfig::default);
    check_create_storm(&stores, "sqlite, two instances on one file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_state_survives_reopening() {
    let fixture = Fixture::new("sqlite").unwrap();
    let handle = {
        let store = fixture.sqlite(StoreConfig::default());
        let handle = create(&store, alice(), &laptop()).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
        expect_applied(&mutate(&store, send, set_memory(32, &calls)).await);
        handle
    };
    let store = fixture.sqlite(StoreConfig::default());
    assert_eq!(state(&store, &handle).await.1.memory_gib, 32);
    let calls = Arc::new(AtomicUsize::new(0));
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    assert!(matches!(
        mutate(&store, send, set_memory(32, &calls)).await,
        MutationOutcome::Replayed(_)
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn outcome_schemas_are_tagged_unions() {
    let schema = MutationOutcome::json_schema();
    let variants = schema["oneOf"].as_array().expect("a oneOf union");
    let tags: Vec<&Value> = variants
        .iter()
        .map(|variant| &variant["properties"]["outcome"]["const"])
        .collect();
    assert_eq!(
        tags,
        [
            &json!("applied"),
            &json!("stale_view"),
            &json!("rejected"),
            &json!("replayed")
        ]
    );
    let read = ReadOutcome::json_schema();
    assert_eq!(read["oneOf"].as_array().unwrap().len(), 2);
}

/// A panicking transition answers `TRANSITION_PANICKED` (do not retry: it would panic again),
/// records nothing, so the operation id stays free for the same change once the bug is fixed,
/// leaves the state as it was, and leaves the store healthy, on either kind of runtime.
async fn transition_panic_is_contained<S: Store>(store: S) {
    let handle = create(&store, alice(), &laptop()).await;
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    let panicking = Transition::new(|state: &mut Value| {
        state["memory_gib"] = json!(64);
        panic!("transition bug")
    });
    let failed = within(
        "a mutation whose transition panics",
        store.mutate(send, panicking),
    )
    .await
    .expect("a panic is an outcome, not a store failure");
    assert_eq!(failed.code(), Some(code::TRANSITION_PANICKED), "{failed:?}");
    assert_matches_schema(&failed);
    let MutationOutcome::Rejected(rejected) = &failed else {
        panic!("expected a rejection, got {failed:?}");
    };
    assert_eq!(rejected.recovery, Some(Recovery::Stop));
    assert!(failed.into_call_tool_result().is_error);
    assert_eq!(state(&store, &handle).await.0, 1);
    let calls = Arc::new(AtomicUsize::new(0));
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    let applied = mutate(&store, send, set_memory(32, &calls)).await;
    assert_eq!(expect_applied(&applied).version, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_transition_panic_on_multi_thread_runtime() {
    let fixture = Fixture::new("sqlite").unwrap();
    transition_panic_is_contained(fixture.sqlite(StoreConfig::default())).await;
}

#[tokio::test(flavor = "current_thread")]
async fn sqlite_transition_panic_on_current_thread_runtime() {
    let fixture = Fixture::new("sqlite").unwrap();
    transition_panic_is_contained(fixture.sqlite(StoreConfig::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_transition_panic_on_multi_thread_runtime() {
    transition_panic_is_contained(MemoryStore::default()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn memory_transition_panic_on_current_thread_runtime() {
    transition_panic_is_contained(MemoryStore::default()).await;
}

/// A request that records no outcome leaves no ledger slot behind in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_failed_request_leaves_no_ledger_slot() {
    let store = MemoryStore::default();
    let handle = create(&store, alice(), &laptop()).await;
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    let panicking = Transition::new(|state: &mut Value| {
        state["memory_gib"] = json!(64);
        panic!("transition bug")
    });
    let failed = mutate(&store, send, panicking).await;
    assert_eq!(failed.code(), Some(code::TRANSITION_PANICKED));
    assert_eq!(store.ledger_count_for_tests(), 0);
    // A guessed handle records nothing either.
    let send = request(
        alice(),
        "bsk_guessed",
        "m",
        Some(1),
        Some("guess"),
        json!(32),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let missing = mutate(&store, send, set_memory(32, &calls)).await;
    assert_eq!(missing.code(), Some(code::NOT_FOUND));
    assert_eq!(store.ledger_count_for_tests(), 0);
    assert_eq!(state(&store, &handle).await.0, 1);
    // The id is free, and a recorded outcome keeps its slot.
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    expect_applied(&mutate(&store, send, set_memory(32, &calls)).await);
    assert_eq!(store.ledger_count_for_tests(), 1);
    let send = request(alice(), &handle, "m", Some(1), Some("op"), json!(32));
    assert!(matches!(
        mutate(&store, send, set_memory(32, &calls)).await,
        MutationOutcome::Replayed(_)
    ));
    assert_eq!(store.ledger_count_for_tests(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// The durability option reaches the connection that commits: NORMAL by default, FULL on request.
#[test]
fn sqlite_applies_the_synchronous_option_to_its_writer() {
    use mcp_tools::store::{SqliteOptions, Synchronous};
    let fixture = Fixture::new("sqlite").unwrap();
    let default = fixture.sqlite(StoreConfig::default());
    assert_eq!(
        default.synchronous_for_tests().unwrap(),
        Synchronous::Normal
    );
    let full = SqliteStore::open_with(
        fixture.dir.path().join("full.db"),
        StoreConfig::default(),
        SqliteOptions {
            synchronous: Synchronous::Full,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    assert_eq!(full.synchronous_for_tests().unwrap(), Synchronous::Full);
}

/// Files with the layouts of earlier pre-release versions are refused, not misread.
#[test]
fn sqlite_refuses_the_old_layouts() {
    let fixture = Fixture::new("sqlite").unwrap();
    for (name, schema) in [
        (
            "first.db",
            "CREATE TABLE mcp_resources (handle TEXT PRIMARY KEY) STRICT;",
        ),
        (
            "copies.db",
            "CREATE TABLE mcp_versions (handle TEXT, version INTEGER, PRIMARY KEY (handle, version));",
        ),
    ] {
        let path = fixture.dir.path().join(name);
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(schema)
            .unwrap();
        let error = SqliteStore::open(&path, StoreConfig::default())
            .err()
            .expect("the old layout was accepted");
        assert!(
            error.to_string().contains("does not read or migrate"),
            "{name}: {error}"
        );
    }
}

/// SQLite drops undo patches beyond the history limit in batches: the kept rows stay bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_history_rows_stay_bounded() {
    let fixture = Fixture::new("sqlite").unwrap();
    let store = fixture.sqlite(StoreConfig {
        history_limit: 3,
        ..StoreConfig::default()
    });
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    for gib in 1..=100u32 {
        let send = request(alice(), &handle, "m", None, None, json!(gib));
        expect_applied(&mutate(&store, send, set_memory(gib, &calls)).await);
    }
    let rows: i64 = rusqlite::Connection::open(fixture.dir.path().join("state.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM mcp_changes WHERE handle = ?1",
            [&handle],
            |row| row.get(0),
        )
        .unwrap();
    assert!((2..=2 + 16).contains(&rows), "{rows} patches kept");
    assert_eq!(
        state(&store, &handle).await,
        (101, {
            let mut basket = laptop();
            basket.memory_gib = 100;
            basket
        })
    );
}

/// How long a request that must not wait for a held transition may take.
const UNBLOCKED: Duration = Duration::from_secs(5);

/// Runs `work` on a thread of its own with its own runtime: a store call that blocks its thread
/// (the memory store runs the transition inline) then blocks only that thread, and the answer
/// comes back on a channel the test awaits with a timeout.
fn on_own_thread<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = answer.send(runtime.block_on(work));
    });
    answered
}

async fn answered<T>(what: &str, answer: tokio::sync::oneshot::Receiver<T>) -> T {
    within_for(UNBLOCKED, what, answer)
        .await
        .expect("the worker thread panicked")
}

/// Lets a held transition go when dropped, so a failing test does not leave it, and whatever
/// waits behind it, blocked.
struct Release(Option<std::sync::mpsc::Sender<()>>);

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            let _ = release.send(());
        }
    }
}

/// A transition that says it started, then waits until the test releases it (bounded, in case
/// the test is gone), then sets the memory to 64.
fn held(started: tokio::sync::oneshot::Sender<()>) -> (Transition, Release) {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let mut started = Some(started);
    let transition = Transition::typed(move |basket: &mut Basket| {
        if let Some(started) = started.take() {
            let _ = started.send(());
        }
        let _ = released.recv_timeout(Duration::from_secs(60));
        basket.memory_gib = 64;
        Ok::<_, ToolError>(64)
    });
    (transition, Release(Some(release)))
}

/// Starts a held mutation of `handle` at version 1 on its own thread; returns once the
/// transition runs, holding whatever the store holds for it.
async fn hold<S: Store + Clone>(
    store: &S,
    handle: &str,
) -> (tokio::sync::oneshot::Receiver<MutationOutcome>, Release) {
    let (started, running) = tokio::sync::oneshot::channel();
    let (transition, release) = held(started);
    let send = request(alice(), handle, "m", Some(1), Some("held"), json!(64));
    let store = store.clone();
    let outcome = on_own_thread(async move { store.mutate(send, transition).await.unwrap() });
    answered("the held transition to start", running).await;
    (outcome, release)
}

/// The memory store locks per handle: while a transition on A is held inside its boundary, a
/// mutation, a read and a create elsewhere all complete, and A applies once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_held_transition_on_one_handle_blocks_no_other_handle() {
    let store = MemoryStore::default();
    let a = create(&store, alice(), &laptop()).await;
    let b = create(&store, alice(), &laptop()).await;
    let (mut held_a, release) = hold(&store, &a).await;

    let write_b = on_own_thread({
        let (store, b) = (store.clone(), b.clone());
        async move {
            let calls = Arc::new(AtomicUsize::new(0));
            let send = request(alice(), &b, "m", Some(1), Some("b-1"), json!(32));
            store.mutate(send, set_memory(32, &calls)).await.unwrap()
        }
    });
    let written = answered("a mutation of B while A is held", write_b).await;
    assert_eq!(expect_applied(&written).version, 2);
    let read_b = on_own_thread({
        let (store, b) = (store.clone(), b.clone());
        async move { state(&store, &b).await }
    });
    let (version, basket) = answered("a read of B while A is held", read_b).await;
    assert_eq!((version, basket.memory_gib), (2, 32));
    let create_c = on_own_thread({
        let store = store.clone();
        async move { create(&store, alice(), &laptop()).await }
    });
    answered("a create while A is held", create_c).await;
    assert!(
        held_a.try_recv().is_err(),
        "A's transition finished before it was released"
    );

    drop(release);
    let outcome = answered("A's transition once released", held_a).await;
    assert_eq!(expect_applied(&outcome).version, 2);
    let (version, basket) = state(&store, &a).await;
    assert_eq!((version, basket.memory_gib), (2, 64));
}

/// Readers never wait for a writer: while a transition is held inside its boundary (the memory
/// store's per-handle lock, SQLite's write transaction), reads of that resource (at its committed
/// version) and of another complete.
async fn a_held_transition_blocks_no_reader<S: Store + Clone>(store: S) {
    let a = create(&store, alice(), &laptop()).await;
    let b = create(&store, alice(), &laptop()).await;
    let (mut held_a, release) = hold(&store, &a).await;

    for (handle, what) in [
        (&a, "a read of A while A is held"),
        (&b, "a read of B while A is held"),
    ] {
        let read = on_own_thread({
            let (store, handle) = (store.clone(), handle.clone());
            async move { state(&store, &handle).await }
        });
        let (version, basket) = answered(what, read).await;
        assert_eq!((version, basket.memory_gib), (1, 16), "{what}");
    }
    assert!(
        held_a.try_recv().is_err(),
        "A's transition finished before it was released"
    );

    drop(release);
    let outcome = answered("A's transition once released", held_a).await;
    assert_eq!(expect_applied(&outcome).version, 2);
    let (version, basket) = state(&store, &a).await;
    assert_eq!((version, basket.memory_gib), (2, 64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_held_transition_blocks_no_reader() {
    a_held_transition_blocks_no_reader(MemoryStore::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_held_transition_blocks_no_reader() {
    let fixture = Fixture::new("sqlite").unwrap();
    a_held_transition_blocks_no_reader(fixture.sqlite(StoreConfig::default())).await;
}

/// Expired ledger records go without anyone calling `prune`: enough writes wake the store's
/// sweep thread, and no request waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_sweeps_on_its_own_thread() {
    let clock = ManualClock::at_millis(T0);
    let store = MemoryStore::new(StoreConfig {
        ledger_retention: Duration::from_secs(1),
        ..config(&clock)
    });
    for n in 0..100 {
        create_outcome(
            &store,
            create_request(alice(), &format!("c-{n}"), &laptop()),
        )
        .await;
    }
    assert_eq!(store.ledger_count_for_tests(), 100);
    clock.advance(Duration::from_secs(2));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    within("the automatic sweep of the memory store", async {
        let mut writes = 0;
        while store.ledger_count_for_tests() > 0 {
            let send = request(alice(), &handle, "m", None, None, json!(1));
            mutate(&store, send, set_memory(1, &calls)).await;
            writes += 1;
            if writes % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sweeps_on_its_own_thread() {
    let fixture = Fixture::new("sqlite").unwrap();
    let clock = ManualClock::at_millis(T0);
    let store = fixture.sqlite(StoreConfig {
        ledger_retention: Duration::from_secs(1),
        ..config(&clock)
    });
    for n in 0..100 {
        create_outcome(
            &store,
            create_request(alice(), &format!("c-{n}"), &laptop()),
        )
        .await;
    }
    let ledger_rows = || -> i64 {
        rusqlite::Connection::open(fixture.dir.path().join("state.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM mcp_ledger", [], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(ledger_rows(), 100);
    clock.advance(Duration::from_secs(2));
    let handle = create(&store, alice(), &laptop()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    within("the automatic sweep of the SQLite store", async {
        while ledger_rows() > 0 {
            for _ in 0..64 {
                let send = request(alice(), &handle, "m", None, None, json!(1));
                mutate(&store, send, set_memory(1, &calls)).await;
            }
        }
    })
    .await;
}

/// What SQLite retains grows with the change, not with the state: appends to a large basket
/// keep one copy of the state, undo patches of a few bytes, and ledger records without state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_retains_the_change_not_the_state() {
    let fixture = Fixture::new("sqlite").unwrap();
    let store = fixture.sqlite(StoreConfig::default());
    let mut big = laptop();
    big.notes = (0..1000).map(|n| format!("{n:0>100}")).collect();
    let handle = create(&store, alice(), &big).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let append = |n: usize| {
        Transition::typed(move |basket: &mut Basket| {
            basket.notes.push(format!("note {n:0>35}"));
            Ok::<_, ToolError>(basket.notes.len())
        })
    };
    for n in 0..200 {
        let send = request(
            alice(),
            &handle,
            "n",
            None,
            Some(&format!("n-{n}")),
            json!(n),
        );
        expect_applied(&mutate(&store, send, append(n)).await);
    }
    // One stale answer is recorded as a summary too.
    let send = request(alice(), &handle, "m", Some(1), Some("stale"), json!(1));
    expect_stale(&mutate(&store, send, set_memory(1, &calls)).await);
    let connection = rusqlite::Connection::open(fixture.dir.path().join("state.db")).unwrap();
    let bytes = |sql: &str| -> i64 { connection.query_row(sql, [], |row| row.get(0)).unwrap() };
    let state = bytes("SELECT sum(length(state)) FROM mcp_resources");
    assert!(state > 100_000, "{state} bytes of state");
    let history = bytes("SELECT sum(length(undo)) FROM mcp_changes");
    let kept = bytes("SELECT count(*) FROM mcp_changes");
    assert!(
        history <= kept * 64,
        "{history} bytes of history in {kept} patches"
    );
    let ledger = bytes("SELECT max(length(outcome)) FROM mcp_ledger");
    assert!(ledger < 400, "a ledger record of {ledger} bytes");
}
