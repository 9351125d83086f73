//! The memory store's own tests.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::auth::Principal;
use crate::store::api::{Creation, Making};
use crate::store::clock::ManualClock;
use crate::store::entity::EntityKind;
use crate::store::fingerprint::Fingerprint;

const SHORT_LIVED: EntityKind = EntityKind::new("ticket", "tkt").with_ttl(Duration::from_secs(60));
const LASTING: EntityKind = EntityKind::new("note", "nte");

/// How long a test waits for any one step before it fails instead of hanging.
const STEP: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {STEP:?}: {what}"))
}

/// Retries `request` until it is applied (a claim on its id given up), within [`STEP`]:
/// the version it was applied at.
async fn applied_once_free(
    store: &MemoryStore,
    request: impl Fn() -> CreateRequest<'static>,
) -> u64 {
    within("the claim on the id to be given up", async {
        loop {
            let retry = store.create(request()).await.unwrap();
            match retry.applied() {
                Some(applied) => break applied.version,
                None => tokio::task::yield_now().await,
            }
        }
    })
    .await
}

/// A create by alice with the operation id `dropped`, which the tests drop part way.
fn dropped_create(making: Creation<'static>) -> CreateRequest<'static> {
    CreateRequest::deferred(LASTING, Principal::subject("alice"), making)
        .operation("dropped", Fingerprint::of_call("create", &json!({})))
}

fn create(store: &MemoryStore, kind: EntityKind, operation_id: Option<&str>) {
    let mut request = CreateRequest::new(kind, Principal::subject("alice"), json!({}));
    if let Some(operation_id) = operation_id {
        request = request.operation(operation_id, Fingerprint::of_call("create", &json!({})));
    }
    futures_util::FutureExt::now_or_never(boundary::create(store, request))
        .expect("a ready creation completes at once")
        .unwrap();
}

/// Per shard: ledger records and resources that expire.
fn census(inner: &Inner) -> Vec<(usize, usize)> {
    (0..SHARDS)
        .map(|shard| {
            let expiring = inner.resources[shard]
                .read()
                .unwrap()
                .values()
                .filter(|cell| cell.current.load().expires_at.is_some())
                .count();
            (lock(&inner.ledger[shard]).len(), expiring)
        })
        .collect()
}

/// `count` operation ids other than `taken` whose keys fall on the same lock.
fn sharing_a_lock_with(taken: &str, count: usize) -> Vec<String> {
    let lock = operation_lock(&ledger_key("alice", taken));
    (0..)
        .map(|n| format!("op-{n}"))
        .filter(|id| id != taken && operation_lock(&ledger_key("alice", id)) == lock)
        .take(count)
        .collect()
}

/// A change stopped in its transition keeps its runtime worker, as a slow transition does
/// (one that decodes and encodes a large state). Another change of that resource waits for
/// its turn without holding a worker, and so do a read of what changed in it and a change
/// and a create whose operation ids share the first change's lock, so the runtime's other
/// worker still serves a read of another resource. Blocked on the resource's lock or the
/// operation id's instead, any of them kept the other worker too, and the read waited for
/// the first change to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_busy_resource_or_operation_id_leave_the_workers_to_others() {
    let store = Arc::new(MemoryStore::new(StoreConfig::default()));
    let created = |store: Arc<MemoryStore>| async move {
        let request = CreateRequest::new(LASTING, Principal::subject("alice"), json!({"n": 0}));
        let outcome = store.create(request).await.unwrap();
        outcome.applied().expect("created").handle.clone()
    };
    let (busy, other, third) = (
        created(Arc::clone(&store)).await,
        created(Arc::clone(&store)).await,
        created(Arc::clone(&store)).await,
    );
    let change = |handle: &str| MutationRequest::new(LASTING, Principal::subject("alice"), handle);
    let busy_id = "op-busy";
    let [sharing_id, create_id] =
        <[String; 2]>::try_from(sharing_a_lock_with(busy_id, 2)).expect("ids fall on every lock");
    let fingerprint = || Fingerprint::of_call("change", &json!({}));

    let (entered, entered_here) = tokio::sync::oneshot::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let mut entered = Some(entered);
    let holding = Transition::new(move |state| {
        if let Some(entered) = entered.take() {
            let _ = entered.send(());
        }
        released.recv_timeout(STEP).map_err(|_| {
            crate::protocol::tool_error::ToolError::new("HELD", "the test never let the change go")
        })?;
        state["n"] = json!(1);
        Ok(Value::Null)
    });
    let first = tokio::spawn({
        let (store, request) = (
            Arc::clone(&store),
            change(&busy).operation(busy_id, fingerprint()),
        );
        async move { store.mutate(request, holding).await }
    });
    within("the first change stops in its transition", entered_here)
        .await
        .unwrap();

    // Runs on the other worker up to its wait, without yielding before it.
    let (started, started_here) = tokio::sync::oneshot::channel();
    let second = tokio::spawn({
        let (store, request) = (Arc::clone(&store), change(&busy));
        async move {
            let _ = started.send(());
            let increment = Transition::new(|state| {
                state["n"] = json!(state["n"].as_u64().unwrap_or(0) + 1);
                Ok(Value::Null)
            });
            store.mutate(request, increment).await
        }
    });
    within("the second change starts", started_here)
        .await
        .unwrap();
    // A read of what changed in the busy resource waits for its turn the same way.
    let (started, started_here) = tokio::sync::oneshot::channel();
    let since = tokio::spawn({
        let (store, busy) = (Arc::clone(&store), busy.clone());
        async move {
            let _ = started.send(());
            let mut request = ReadRequest::new(LASTING, Principal::subject("alice"), busy);
            request.since = Some(1);
            store.read(request).await
        }
    });
    within("the read of what changed starts", started_here)
        .await
        .unwrap();
    // A change of another resource, and a create, whose operation ids share the first
    // change's lock.
    let (started, started_here) = tokio::sync::oneshot::channel();
    let sharing = tokio::spawn({
        let request = change(&third).operation(sharing_id, fingerprint());
        let store = Arc::clone(&store);
        async move {
            let _ = started.send(());
            let increment = Transition::new(|state| {
                state["n"] = json!(1);
                Ok(Value::Null)
            });
            store.mutate(request, increment).await
        }
    });
    within(
        "the change sharing the operation-id lock starts",
        started_here,
    )
    .await
    .unwrap();
    let (started, started_here) = tokio::sync::oneshot::channel();
    let create = tokio::spawn({
        let request = CreateRequest::new(LASTING, Principal::subject("alice"), json!({}))
            .operation(create_id, fingerprint());
        let store = Arc::clone(&store);
        async move {
            let _ = started.send(());
            store.create(request).await
        }
    });
    within(
        "the create sharing the operation-id lock starts",
        started_here,
    )
    .await
    .unwrap();

    let read = tokio::spawn({
        let (store, other) = (Arc::clone(&store), other.clone());
        async move {
            let request = ReadRequest::new(LASTING, Principal::subject("alice"), other);
            store.read(request).await
        }
    });
    let read = within("a read of another resource", read)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !first.is_finished(),
        "the read waited for the busy resource's change to end"
    );
    assert_eq!(read.snapshot().expect("readable").state["n"], json!(0));

    release.send(()).unwrap();
    for change in [first, second, sharing] {
        let outcome = within("the changes of the busy resource end", change)
            .await
            .unwrap()
            .unwrap();
        assert!(outcome.applied().is_some(), "{outcome:?}");
    }
    let outcome = within("the create ends", create).await.unwrap().unwrap();
    assert!(outcome.applied().is_some(), "{outcome:?}");
    let request = ReadRequest::new(LASTING, Principal::subject("alice"), busy);
    let outcome = store.read(request).await.unwrap();
    assert_eq!(outcome.snapshot().expect("readable").state["n"], json!(2));
    let since = within("the read of what changed ends", since)
        .await
        .unwrap()
        .unwrap();
    let snapshot = since.snapshot().expect("readable");
    assert!(
        snapshot.changes.is_some() && snapshot.version > 1,
        "{since:?}"
    );
}

/// A create dropped while somebody holds its operation id's lock gives its claim up once
/// the lock is free, so a retry need not wait for the claim to lapse (the clock here never
/// moves, so it would wait for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_dropped_while_its_id_is_held_gives_its_claim_up_later() {
    let clock = ManualClock::at_millis(1_785_231_000_000);
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(clock),
        ..StoreConfig::default()
    });
    let alice = Principal::subject("alice");
    let request = dropped_create;
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let stalled = tokio::spawn({
        let (store, request) = (
            store.clone(),
            request(Creation(Making::Deferred(Box::pin(async move {
                let _ = started.send(());
                std::future::pending::<Result<Value, crate::protocol::tool_error::ToolError>>()
                    .await
            })))),
        );
        async move { store.create(request).await }
    });
    within("the create to start making its state", running)
        .await
        .unwrap();
    let held = within("the id's lock", store.inner.hold(alice.key(), "dropped")).await;
    stalled.abort();
    let _ = within("the aborted create to stop", stalled).await;
    drop(held);
    let version = applied_once_free(&store, || request(Creation::ready(json!({})))).await;
    assert_eq!(version, 1);
}

/// A create dropped while its claim waits for the id's lock wrote nothing, so it gives
/// nothing up: no task is left behind to take the lock after it.
#[tokio::test]
async fn a_create_dropped_before_claiming_leaves_nothing_to_give_up() {
    use futures_util::FutureExt;
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
        ..StoreConfig::default()
    });
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    let held = within("the id's lock", store.inner.hold("alice", "dropped")).await;
    let mut create = store.create(dropped_create(Creation(Making::Deferred(Box::pin(
        async { Ok(json!({})) },
    )))));
    assert!(
        (&mut create).now_or_never().is_none(),
        "waiting for the id's lock"
    );
    drop(create);
    assert_eq!(
        tasks(),
        before,
        "a task was left to give up a claim never made"
    );
    drop(held);
    let version = applied_once_free(&store, || dropped_create(Creation::ready(json!({})))).await;
    assert_eq!(version, 1);
}

/// With the id's lock free, a dropped create gives its claim up at once, on the dropping
/// thread, so it needs no runtime to spawn on: here there is none, and the clock never
/// moves, so a claim left behind would answer every retry `OPERATION_IN_PROGRESS`.
#[test]
fn a_create_dropped_with_its_id_free_gives_its_claim_up_at_once() {
    use futures_util::FutureExt;
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
        ..StoreConfig::default()
    });
    let request = dropped_create;
    let mut create = store.create(request(Creation(Making::Deferred(Box::pin(
        std::future::pending::<Result<Value, crate::protocol::tool_error::ToolError>>(),
    )))));
    assert!(
        (&mut create).now_or_never().is_none(),
        "claimed, and making its state"
    );
    drop(create);
    let retry = store
        .create(request(Creation::ready(json!({}))))
        .now_or_never()
        .expect("a ready create with a free id completes at once")
        .unwrap();
    assert_eq!(retry.applied().map(|applied| applied.version), Some(1));
}

/// Operation ids spread over every one of the locks, so two ids wait for each other only
/// as often as [`OPERATION_LOCKS`] says.
#[test]
fn operation_ids_spread_over_every_lock() {
    let used: std::collections::HashSet<usize> = (0..=u16::MAX)
        .map(|spread| {
            let mut key: LedgerKey = [0; 32];
            key[1..3].copy_from_slice(&spread.to_be_bytes());
            operation_lock(&key)
        })
        .collect();
    assert_eq!(used.len(), OPERATION_LOCKS);
}

/// A create dropped after making its state, while its last unit waits for the operation
/// id's lock, gives its claim up too: a retry need not wait for the claim to lapse (the
/// clock here never moves, so it would wait for ever).
#[tokio::test]
async fn a_create_dropped_waiting_to_finish_gives_its_claim_up() {
    use futures_util::FutureExt;
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
        ..StoreConfig::default()
    });
    let request = dropped_create;
    let (made, made_here) = tokio::sync::oneshot::channel::<()>();
    let mut create = store.create(request(Creation(Making::Deferred(Box::pin(async move {
        let _ = made_here.await;
        Ok(json!({}))
    })))));
    assert!(
        (&mut create).now_or_never().is_none(),
        "claimed, and making its state"
    );
    let held = store.inner.hold("alice", "dropped").await;
    made.send(()).unwrap();
    assert!(
        (&mut create).now_or_never().is_none(),
        "made, and waiting for the lock"
    );
    drop(create);
    drop(held);
    let version = applied_once_free(&store, || request(Creation::ready(json!({})))).await;
    assert_eq!(version, 1);
}

/// A kept record reads back as the entry that was recorded, whatever its outcome, and an
/// `applied` one about the resource shares the resource's handle instead of copying it.
#[test]
fn a_kept_record_reads_back_as_recorded() {
    let shared: Arc<str> = Arc::from("bsk_0123456789abcdefghijklmnop");
    let entry = |handle: Option<&str>, state: LedgerState| LedgerEntry {
        fingerprint: Fingerprint::of_call("tool", &json!({ "n": 1 })),
        state,
        handle: handle.map(str::to_owned),
        recorded_at: 1_000,
        expires_at: 2_000,
    };
    let rebased = |handle: &str, rebased_from: Option<u64>| {
        LedgerState::Done(RecordedOutcome::Applied(RecordedApplied {
            handle: handle.to_owned(),
            version: 7,
            result: json!({ "memory_gib": 32 }),
            rebased_from,
            effects: Vec::new(),
        }))
    };
    let charged = LedgerState::Done(RecordedOutcome::Applied(RecordedApplied {
        handle: shared.to_string(),
        version: 7,
        result: json!(null),
        rebased_from: None,
        effects: vec![crate::store::EffectTicket {
            key: "eff_0".into(),
            kind: "charge".into(),
        }],
    }));
    let applied = |handle: &str| rebased(handle, Some(5));
    let cases = [
        entry(Some(&shared), applied(&shared)),
        entry(Some(&shared), rebased(&shared, None)),
        // No version 0 is ever rebased from, but one that says so is kept as it says.
        entry(Some(&shared), rebased(&shared, Some(0))),
        // An applied summary about another handle than the record's is kept whole.
        entry(Some(&shared), applied("bsk_other")),
        entry(None, applied(&shared)),
        entry(
            Some(&shared),
            LedgerState::Done(RecordedOutcome::Rejected(
                crate::store::outcome::Rejected::terminal("basket", &shared),
            )),
        ),
        entry(None, LedgerState::Pending { token: 42 }),
        // One that emitted effects is kept whole, so a replay names them.
        entry(Some(&shared), charged),
    ];
    for recorded in cases {
        let kept = Kept::keep(recorded.clone(), Some(&shared));
        assert_eq!(format!("{:?}", kept.entry()), format!("{recorded:?}"));
        if recorded.handle.as_deref() == Some(&*shared) {
            assert!(Arc::ptr_eq(kept.handle.as_ref().unwrap(), &shared));
        }
    }
    let kept = Kept::keep(
        entry(Some(&shared), applied(&shared)),
        Some(&Arc::from("bsk_elsewhere")),
    );
    assert_eq!(kept.handle.as_deref(), Some(&*shared));
    assert!(matches!(kept.outcome, KeptOutcome::Applied { .. }));
}

/// The ledger's table holds one slot of this size for every record it keeps, for hours: it
/// grows only by decision.
#[test]
fn a_kept_record_fills_a_small_slot() {
    let slot = std::mem::size_of::<(LedgerKey, Kept)>();
    assert!(slot <= 144, "a ledger slot takes {slot} bytes");
}

/// A record is swept at the instant its retention ends, not a millisecond before.
#[test]
fn a_record_is_swept_when_its_retention_ends() {
    let clock = ManualClock::at_millis(1_785_231_000_000);
    let retention = Duration::from_secs(60);
    let store = MemoryStore::new(StoreConfig {
        ledger_retention: retention,
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    });
    let inner = &*store.inner;
    create(&store, LASTING, Some("op-1"));
    let records = || {
        census(inner)
            .iter()
            .map(|&(records, _)| records)
            .sum::<usize>()
    };
    clock.advance(retention - Duration::from_millis(1));
    assert_eq!(inner.prune().ledger_records, 0);
    assert_eq!(records(), 1);
    clock.advance(Duration::from_millis(1));
    assert_eq!(inner.prune().ledger_records, 1);
    assert_eq!(records(), 0);
}

/// A sweep reclaims what is past its retention, in every shard, and nothing else.
#[test]
fn a_sweep_reclaims_exactly_what_expired() {
    let clock = ManualClock::at_millis(1_785_231_000_000);
    let store = MemoryStore::new(StoreConfig {
        ledger_retention: Duration::from_secs(10 * 60),
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    });
    let inner = &*store.inner;
    for i in 0..2000 {
        create(&store, SHORT_LIVED, Some(&format!("op-{i}")));
    }
    for _ in 0..100 {
        create(&store, LASTING, None);
    }
    assert!(
        census(inner)
            .iter()
            .all(|&(records, expiring)| records > 0 && expiring > 0)
    );
    inner.sweep();
    assert_eq!(inner.resource_count(), 2100, "nothing had expired yet");
    clock.advance(Duration::from_secs(20 * 60));
    inner.sweep();
    assert!(census(inner).iter().all(|&shard| shard == (0, 0)));
    assert_eq!(inner.resource_count(), 100);
}
