//! The outbox on every store: effects exist exactly when their change was committed, each is
//! claimed by one worker at a time under a lease, settled only by its lease's owner, retried
//! when due, and forgotten after the retention once settled.

use std::collections::HashMap;

use mcp_tools::effects::{Effect, Effects};
use mcp_tools::store::{Claim, ClaimedEffect, EffectState, EffectStatus, Settlement};

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Charge {
    amount_eur: u32,
}

impl Effect for Charge {
    const KIND: &'static str = "charge";
}

/// Checks out the basket, charging `amounts` (one effect each); fails with `REFUSED` after
/// emitting them when `refuse`.
fn checkout(amounts: Vec<u32>, refuse: bool) -> Transition {
    Transition::typed_with_effects(move |basket: &mut Basket, effects: &mut Effects<Charge>| {
        for amount_eur in &amounts {
            effects.emit(Charge {
                amount_eur: *amount_eur,
            });
        }
        if refuse {
            return Err(ToolError::new("REFUSED", "no"));
        }
        basket.count += 1;
        Ok(basket.count)
    })
}

fn charge_request(
    handle: &str,
    expected: Option<u64>,
    operation_id: Option<&str>,
) -> MutationRequest {
    let mut request = MutationRequest::new(Basket::kind(), alice(), handle);
    if let Some(expected) = expected {
        request = request.expect_version(expected);
    }
    if let Some(operation_id) = operation_id {
        request = request.operation(operation_id, Fingerprint::of(&json!(operation_id)));
    }
    request
}

fn claim(owner: &str, limit: usize) -> Claim {
    Claim::new(owner, 10_000, limit, vec!["charge".to_owned()])
}

async fn claim_now<S: Store>(store: &S, owner: &str, limit: usize) -> Vec<ClaimedEffect> {
    within("a claim", store.claim_effects(claim(owner, limit)))
        .await
        .unwrap()
}

async fn settle<S: Store>(store: &S, key: &str, owner: &str, settlement: Settlement) -> bool {
    within("a settlement", store.settle_effect(key, owner, settlement))
        .await
        .unwrap()
}

async fn statuses<S: Store>(store: &S, handle: &str) -> Vec<EffectStatus> {
    within("the statuses", store.effect_statuses(handle, 20))
        .await
        .unwrap()
}

/// An effect exists exactly when its change was committed: an applied change names each, a
/// replay names them again and emits none, and a refused, stale or panicking change leaves
/// none behind.
pub(super) async fn effects_exist_exactly_when_their_change_committed<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;

    let applied = mutate(
        &store,
        charge_request(&handle, Some(1), Some("op-pay")),
        checkout(vec![1200, 30], false),
    )
    .await;
    let tickets = expect_applied(&applied).effects.clone();
    assert_eq!(tickets.len(), 2, "{applied:?}");
    assert!(
        tickets
            .iter()
            .all(|t| t.kind == "charge" && t.key.starts_with("eff_"))
    );
    assert_ne!(tickets[0].key, tickets[1].key);
    assert_matches_schema(&applied);

    let replay = mutate(
        &store,
        charge_request(&handle, Some(1), Some("op-pay")),
        checkout(vec![1200, 30], false),
    )
    .await;
    let MutationOutcome::Replayed(replayed) = &replay else {
        panic!("a retry is a replay: {replay:?}");
    };
    let RecordedOutcome::Applied(original) = &replayed.original else {
        panic!("the replay names the applied change: {replay:?}");
    };
    assert_eq!(original.effects, tickets, "a replay names the same effects");

    // Stale, refused, and a bug: nothing committed, nothing emitted.
    let stale = mutate(
        &store,
        charge_request(&handle, Some(1), Some("op-stale")),
        checkout(vec![5], false),
    )
    .await;
    expect_stale(&stale);
    let refused = mutate(
        &store,
        charge_request(&handle, Some(2), Some("op-refused")),
        checkout(vec![6], true),
    )
    .await;
    expect_rejected(&refused, "REFUSED");
    let panicking =
        Transition::typed_with_effects(|_: &mut Basket, effects: &mut Effects<Charge>| {
            effects.emit(Charge { amount_eur: 7 });
            panic!("a bug after the emit");
            #[allow(unreachable_code)]
            Ok::<u64, ToolError>(0)
        });
    let panicked = mutate(&store, charge_request(&handle, Some(2), None), panicking).await;
    expect_rejected(&panicked, code::TRANSITION_PANICKED);

    let listed = statuses(&store, &handle).await;
    let keys: Vec<&str> = listed.iter().map(|status| status.key.as_str()).collect();
    assert_eq!(keys, [tickets[0].key.as_str(), tickets[1].key.as_str()]);
    assert!(
        listed
            .iter()
            .all(|status| status.state == EffectState::Pending && status.attempts == 0),
        "{listed:?}"
    );

    // Without an operation id, the keys follow the version the change made: a second change
    // gets new ones.
    let first = mutate(
        &store,
        charge_request(&handle, None, None),
        checkout(vec![1], false),
    )
    .await;
    let second = mutate(
        &store,
        charge_request(&handle, None, None),
        checkout(vec![1], false),
    )
    .await;
    let (first, second) = (expect_applied(&first), expect_applied(&second));
    assert_ne!(first.effects[0].key, second.effects[0].key);
    assert_eq!(statuses(&store, &handle).await.len(), 4);

    // The claimed payload is the effect as emitted, in emission order.
    let claimed = claim_now(&store, "worker-a", 10).await;
    let amounts: Vec<Value> = claimed
        .iter()
        .map(|effect| effect.payload.clone())
        .collect();
    assert_eq!(
        amounts,
        [
            json!({ "amount_eur": 1200 }),
            json!({ "amount_eur": 30 }),
            json!({ "amount_eur": 1 }),
            json!({ "amount_eur": 1 })
        ]
    );
    assert!(
        claimed
            .iter()
            .all(|effect| effect.handle == handle && effect.attempt == 1)
    );
}

/// Leases: a claimed effect is nobody else's until its lease lapses; only the lease's owner
/// settles it; a retry is due at its time; a lapsed lease gives the effect to the next claim,
/// whose attempt counts on, and the old owner's settlement is then refused.
pub(super) async fn leases_settle_and_retry<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(config(&clock));
    let handle = create(&store, alice(), &laptop()).await;
    let applied = mutate(
        &store,
        charge_request(&handle, Some(1), Some("op-3")),
        checkout(vec![1, 2, 3], false),
    )
    .await;
    let keys: Vec<String> = expect_applied(&applied)
        .effects
        .iter()
        .map(|ticket| ticket.key.clone())
        .collect();

    let a = claim_now(&store, "a", 2).await;
    assert_eq!(
        a.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        [keys[0].as_str(), keys[1].as_str()]
    );
    let b = claim_now(&store, "b", 5).await;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].key, keys[2]);
    assert!(claim_now(&store, "c", 5).await.is_empty(), "all leased");
    // Another kind's worker claims nothing of these.
    let other = Claim::new("d", 10_000, 5, vec!["email".to_owned()]);
    assert!(store.claim_effects(other).await.unwrap().is_empty());

    assert!(!settle(&store, &keys[0], "b", Settlement::Delivered(json!(1))).await);
    assert!(
        settle(
            &store,
            &keys[0],
            "a",
            Settlement::Delivered(json!({ "charge": "ch_1" }))
        )
        .await
    );
    assert!(
        !settle(&store, &keys[0], "a", Settlement::Delivered(json!(2))).await,
        "settled once"
    );
    assert!(
        settle(
            &store,
            &keys[1],
            "a",
            Settlement::Retry {
                error: "502".into(),
                at_ms: T0 + 1_000
            }
        )
        .await
    );
    assert!(claim_now(&store, "c", 5).await.is_empty(), "not due yet");
    clock.advance(Duration::from_millis(1_000));
    let again = claim_now(&store, "c", 5).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].key.as_str(), again[0].attempt),
        (keys[1].as_str(), 2)
    );
    assert!(
        settle(
            &store,
            &keys[1],
            "c",
            Settlement::Failed("card declined".into())
        )
        .await
    );

    // b's lease (10 s) lapses: its effect goes to the next claim, and b can no longer settle it.
    clock.advance(Duration::from_millis(9_000));
    let taken = claim_now(&store, "e", 5).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (taken[0].key.as_str(), taken[0].attempt),
        (keys[2].as_str(), 2)
    );
    assert!(!settle(&store, &keys[2], "b", Settlement::Delivered(json!(3))).await);

    let listed: HashMap<String, EffectStatus> = statuses(&store, &handle)
        .await
        .into_iter()
        .map(|status| (status.key.clone(), status))
        .collect();
    let first = &listed[&keys[0]];
    assert_eq!(
        (
            first.state,
            first.attempts,
            first.result.clone(),
            first.error.clone()
        ),
        (
            EffectState::Delivered,
            1,
            Some(json!({ "charge": "ch_1" })),
            None
        )
    );
    let second = &listed[&keys[1]];
    assert_eq!(
        (second.state, second.attempts, second.error.as_deref()),
        (EffectState::Failed, 2, Some("card declined"))
    );
    let third = &listed[&keys[2]];
    assert_eq!((third.state, third.attempts), (EffectState::Pending, 2));

    // Settled effects (at T0 and T0 + 1 s; it is T0 + 10 s) are forgotten after the ledger
    // retention (a day); pending ones are kept.
    clock.advance(Duration::from_millis(24 * 60 * 60 * 1000 - 20_000));
    assert_eq!(prune(&store).await.effects, 0, "not yet past the retention");
    clock.advance(Duration::from_millis(11_001));
    assert_eq!(prune(&store).await.effects, 2);
    let left = statuses(&store, &handle).await;
    assert_eq!(
        left.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
        [keys[2].as_str()]
    );
}

/// Four workers claim and settle 40 effects concurrently, over `stores` (replicas of one
/// store): every effect is claimed once and delivered once.
pub(super) async fn concurrent_claims_share_nothing<S: Store + Clone>(stores: &[S], label: &str) {
    let store = &stores[0];
    let handle = create(store, alice(), &laptop()).await;
    for round in 0..10u32 {
        let amounts = (0..4).map(|i| round * 4 + i).collect();
        let outcome = mutate(
            store,
            charge_request(&handle, None, None),
            checkout(amounts, false),
        )
        .await;
        expect_applied(&outcome);
    }
    let workers = (0..4)
        .map(|worker| {
            let store = stores[worker % stores.len()].clone();
            tokio::spawn(async move {
                let mut delivered = Vec::new();
                for round in 0.. {
                    let owner = format!("w{worker}-{round}");
                    let claimed = store.claim_effects(claim(&owner, 3)).await.unwrap();
                    if claimed.is_empty() {
                        return delivered;
                    }
                    for effect in claimed {
                        let settled = store
                            .settle_effect(
                                &effect.key,
                                &owner,
                                Settlement::Delivered(effect.payload.clone()),
                            )
                            .await
                            .unwrap();
                        assert!(settled, "a fresh lease settles");
                        delivered.push(effect.key);
                    }
                }
                delivered
            })
        })
        .collect::<Vec<_>>();
    let mut delivered = Vec::new();
    for worker in workers {
        delivered.extend(within("a worker", worker).await.unwrap());
    }
    let total = delivered.len();
    delivered.sort();
    delivered.dedup();
    assert_eq!(
        (total, delivered.len()),
        (40, 40),
        "{label}: each effect once"
    );
    let listed = within("statuses", store.effect_statuses(&handle, 100))
        .await
        .unwrap();
    assert_eq!(listed.len(), 40);
    assert!(
        listed
            .iter()
            .all(|s| s.state == EffectState::Delivered && s.attempts == 1)
    );
}

/// An operation id sent again once its ledger record expired makes a new change, whose effects
/// get new keys (the old ones may still be in the outbox); an effect nested deeper than a state
/// may be is refused with its change, unrecorded, and leaves nothing.
pub(super) async fn expired_ids_and_deep_effects<S: Store>(open: Open<'_, S>) {
    let clock = ManualClock::at_millis(T0);
    let store = open(StoreConfig {
        ledger_retention: Duration::from_secs(60),
        ..config(&clock)
    });
    let handle = create(&store, alice(), &laptop()).await;
    let first = mutate(
        &store,
        charge_request(&handle, None, Some("op-again")),
        checkout(vec![5], false),
    )
    .await;
    let first_key = expect_applied(&first).effects[0].key.clone();
    clock.advance(Duration::from_secs(61));
    let again = mutate(
        &store,
        charge_request(&handle, None, Some("op-again")),
        checkout(vec![5], false),
    )
    .await;
    let again = expect_applied(&again);
    assert_ne!(again.effects[0].key, first_key, "a new change, a new key");
    assert_eq!(statuses(&store, &handle).await.len(), 2);

    let deep = Transition::typed_with_effects(|_: &mut Basket, effects: &mut Effects<Nested>| {
        effects.emit(Nested(super::nested(MAX_DEPTH + 5)));
        Ok::<_, ToolError>(())
    });
    let refused = mutate(&store, charge_request(&handle, None, Some("op-deep")), deep).await;
    expect_rejected(&refused, code::INVALID_STATE);
    assert_eq!(statuses(&store, &handle).await.len(), 2, "nothing emitted");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Nested(Value);

impl Effect for Nested {
    const KIND: &'static str = "nested";
}
