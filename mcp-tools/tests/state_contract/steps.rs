//! Steps over several resources on every store: all or nothing, a `stale_view` naming each
//! resource that moved, each resource checked as a single change checks it, one ledger record
//! per step, and concurrent moves between two resources that conserve what they move and never
//! wait for each other in a circle.

use mcp_tools::store::{RecordedStep, StepOutcome, StepPart, StepRequest, StepTransition};

use super::collections::{Plan, append, apply, change, create_plan, plan, read_plan};
use super::*;

/// Moves step `id` of the first plan to the end of the second: its new id there.
fn move_step(id: u64) -> StepTransition {
    StepTransition::typed2(move |from: &mut Plan, to: &mut Plan| {
        let text = from
            .steps
            .remove(id)
            .ok_or_else(|| ToolError::new("NO_SUCH_STEP", format!("no step {id}")))?;
        Ok::<_, ToolError>(to.steps.push(text))
    })
}

fn step_request(
    parts: &[(&str, Option<u64>)],
    operation_id: Option<&str>,
    payload: Value,
) -> StepRequest {
    let parts = parts
        .iter()
        .map(|(handle, expected)| {
            let part = StepPart::new(Plan::kind(), *handle);
            match expected {
                Some(version) => part.expect_version(*version),
                None => part,
            }
        })
        .collect();
    let mut request = StepRequest::new(alice(), parts);
    if let Some(operation_id) = operation_id {
        request = request.operation(operation_id, Fingerprint::of(&payload));
    }
    request
}

async fn step<S: Store>(
    store: &S,
    request: StepRequest,
    transition: StepTransition,
) -> StepOutcome {
    let outcome = within("a step", store.mutate_step(request, transition))
        .await
        .unwrap();
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&StepOutcome::json_schema())
        .unwrap();
    let value = serde_json::to_value(&outcome).unwrap();
    assert!(
        validator.is_valid(&value),
        "{value} does not match the StepOutcome schema"
    );
    let back: StepOutcome = serde_json::from_value(value).unwrap();
    assert_eq!(back, outcome);
    outcome
}

/// Two plans, the first with steps `a`, `b`, `c` (ids 1 to 3, version 4), the second empty
/// (version 1).
async fn two_plans<S: Store>(store: &S) -> (String, String) {
    let (from, to) = (create_plan(store).await, create_plan(store).await);
    for text in ["a", "b", "c"] {
        apply(
            store,
            change(&from, None, None, json!(text)),
            append(text.into()),
        )
        .await;
    }
    (from, to)
}

async fn texts<S: Store>(store: &S, handle: &str) -> (u64, Vec<String>) {
    let (snapshot, items, _) = read_plan(store, handle, None, None).await;
    (
        snapshot.version,
        items.into_iter().map(|(_, _, text)| text).collect(),
    )
}

/// A step changes every resource, or none: a move applies to both plans at once, a refused
/// move (its step is gone) changes neither, and a retry of the move replays it.
pub(super) async fn a_step_changes_every_resource_or_none<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let (from, to) = two_plans(&store).await;
    let request = step_request(
        &[(&from, Some(4)), (&to, Some(1))],
        Some("move-b"),
        json!("b"),
    );
    let outcome = step(&store, request.clone(), move_step(2)).await;
    let StepOutcome::Applied(applied) = &outcome else {
        panic!("the move applies: {outcome:?}");
    };
    let versions: Vec<(&str, u64)> = applied
        .resources
        .iter()
        .map(|part| (part.handle.as_str(), part.version))
        .collect();
    assert_eq!(versions, [(from.as_str(), 5), (to.as_str(), 2)]);
    assert_eq!(applied.result, json!(1), "the step's id in the second plan");
    assert_eq!(applied.resources[0].resumption.basis_version, 5);
    assert_eq!(
        texts(&store, &from).await,
        (5, vec!["a".into(), "c".into()])
    );
    assert_eq!(texts(&store, &to).await, (2, vec!["b".into()]));

    // The same request again: the recorded outcome, the plans as they are, nothing moved.
    let replay = step(&store, request, move_step(2)).await;
    let StepOutcome::Replayed(replayed) = &replay else {
        panic!("a retry is a replay: {replay:?}");
    };
    let RecordedStep::Applied { resources, .. } = &replayed.original else {
        panic!("{replay:?}");
    };
    assert_eq!(resources.len(), 2);
    assert_eq!((resources[0].version, resources[1].version), (5, 2));
    assert_eq!(replayed.current.len(), 2);
    assert_eq!(texts(&store, &to).await, (2, vec!["b".into()]));
    // The same id for another payload.
    let reused = step_request(
        &[(&from, Some(5)), (&to, Some(2))],
        Some("move-b"),
        json!("c"),
    );
    let reused = step(&store, reused, move_step(3)).await;
    assert_eq!(reused.code(), Some(code::OPERATION_ID_REUSED), "{reused:?}");

    // Step 2 is no longer in the first plan: refused, recorded, and neither plan changed.
    let missing = step_request(
        &[(&from, Some(5)), (&to, Some(2))],
        Some("move-2"),
        json!(2),
    );
    let refused = step(&store, missing.clone(), move_step(2)).await;
    assert_eq!(refused.code(), Some("NO_SUCH_STEP"), "{refused:?}");
    assert_eq!(texts(&store, &from).await.0, 5);
    assert_eq!(texts(&store, &to).await.0, 2);
    let again = step(&store, missing, move_step(3)).await;
    assert!(
        matches!(&again, StepOutcome::Replayed(replayed)
            if matches!(replayed.original, RecordedStep::Rejected(_))),
        "a recorded refusal replays: {again:?}"
    );
}

/// Resources that moved after the versions a step was based on are each named, with their
/// delta; nothing changes on any of them.
pub(super) async fn a_stale_step_names_each_resource_that_moved<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let (from, to) = two_plans(&store).await;
    let retitle = |title: &'static str| {
        Transition::typed(move |plan: &mut Plan| {
            plan.title = title.to_owned();
            Ok::<_, ToolError>(())
        })
    };
    apply(
        &store,
        change(&to, None, None, json!("t")),
        retitle("moved"),
    )
    .await;
    let request = step_request(
        &[(&from, Some(4)), (&to, Some(1))],
        Some("stale-1"),
        json!(1),
    );
    let outcome = step(&store, request, move_step(1)).await;
    let StepOutcome::StaleView(stale) = &outcome else {
        panic!("the second plan moved: {outcome:?}");
    };
    assert_eq!(stale.code, code::STALE_VIEW);
    assert_eq!(stale.moved.len(), 1, "only the plan that moved: {stale:?}");
    let moved = &stale.moved[0];
    assert_eq!(
        (
            moved.handle.as_str(),
            moved.expected_version,
            moved.current_version
        ),
        (to.as_str(), 1, 2)
    );
    assert!(moved.delta_available);
    assert_eq!(moved.delta[0].path, "/title");
    assert_eq!(moved.resumption.basis_version, 2);
    assert_eq!(texts(&store, &from).await.0, 4, "nothing changed");

    apply(
        &store,
        change(&from, None, None, json!("u")),
        retitle("also"),
    )
    .await;
    let request = step_request(
        &[(&from, Some(4)), (&to, Some(1))],
        Some("stale-2"),
        json!(2),
    );
    let StepOutcome::StaleView(stale) = step(&store, request, move_step(1)).await else {
        panic!("both moved");
    };
    let moved: Vec<&str> = stale
        .moved
        .iter()
        .map(|part| part.handle.as_str())
        .collect();
    assert_eq!(moved, [from.as_str(), to.as_str()]);
    // From the current versions, it applies.
    let request = step_request(&[(&from, Some(5)), (&to, Some(2))], Some("fresh"), json!(3));
    assert!(matches!(
        step(&store, request, move_step(1)).await,
        StepOutcome::Applied(_)
    ));
}

/// Each resource is checked as a single change checks it: a finished plan refuses the step
/// (naming it), an unknown or foreign handle is `NOT_FOUND` (unrecorded), and a step must name
/// two resources or more, each once.
pub(super) async fn a_step_checks_each_resource<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let (from, to) = two_plans(&store).await;
    let finish = Transition::typed(|plan: &mut Plan| {
        plan.done = true;
        Ok::<_, ToolError>(())
    });
    apply(&store, change(&to, None, None, json!("finish")), finish).await;
    let request = step_request(&[(&from, None), (&to, None)], Some("to-finished"), json!(1));
    let outcome = step(&store, request, move_step(1)).await;
    let StepOutcome::Rejected(rejected) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(rejected.code, code::TERMINAL);
    assert_eq!(rejected.details, Some(json!({ "handle": to })));
    assert_eq!(
        texts(&store, &from).await.0,
        4,
        "the first plan did not change"
    );

    let other = create_plan(&store).await;
    let unknown = "pln_AAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let request = step_request(&[(&from, None), (unknown, None)], Some("unknown"), json!(1));
    let outcome = step(&store, request.clone(), move_step(1)).await;
    assert_eq!(outcome.code(), Some(code::NOT_FOUND), "{outcome:?}");
    let outcome = step(&store, request, move_step(1)).await;
    assert_eq!(
        outcome.code(),
        Some(code::NOT_FOUND),
        "not recorded: {outcome:?}"
    );
    let bob = Principal::subject("bob");
    let theirs = StepRequest::new(
        bob,
        vec![
            StepPart::new(Plan::kind(), &from),
            StepPart::new(Plan::kind(), &other),
        ],
    );
    assert_eq!(
        step(&store, theirs, move_step(1)).await.code(),
        Some(code::NOT_FOUND)
    );

    let twice = step_request(&[(&from, None), (&from, None)], None, json!(1));
    let outcome = step(&store, twice, move_step(1)).await;
    assert_eq!(outcome.code(), Some(code::INVALID_ARGUMENTS), "{outcome:?}");
    let alone = step_request(&[(&from, None)], None, json!(1));
    let alone = StepRequest::new(alice(), alone.parts);
    assert_eq!(
        step(&store, alone, move_step(1)).await.code(),
        Some(code::INVALID_ARGUMENTS)
    );
    assert_eq!(texts(&store, &from).await.0, 4);
    let _ = plan();
}

/// A step over resources of two kinds.
pub(super) async fn a_step_over_two_kinds<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let basket = create(&store, alice(), &laptop()).await;
    let plan = create_plan(&store).await;
    let request = StepRequest::new(
        alice(),
        vec![
            StepPart::new(Basket::kind(), &basket).expect_version(1),
            StepPart::new(Plan::kind(), &plan).expect_version(1),
        ],
    );
    let transition = StepTransition::typed2(|basket: &mut Basket, plan: &mut Plan| {
        basket.count += 1;
        plan.title = format!("basket count {}", basket.count);
        Ok::<_, ToolError>(basket.count)
    });
    let outcome = step(&store, request, transition).await;
    let StepOutcome::Applied(applied) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(applied.resources[0].state["count"], 1);
    assert_eq!(applied.resources[1].state["title"], "basket count 1");
    let (version, state) = super::state(&store, &basket).await;
    assert_eq!((version, state.count), (2, 1));
}

/// Agents move steps back and forth between two plans over `stores` (replicas of one store),
/// each from the versions it read: every step ends in exactly one plan (none lost, none
/// copied), every refusal is a `stale_view` naming a plan that moved, and nothing waits for
/// ever.
pub(super) async fn concurrent_moves_conserve_and_never_deadlock<S: Store + Clone>(
    stores: &[S],
    agents: usize,
    moves: usize,
    label: &str,
) -> (u64, u64) {
    let store = &stores[0];
    let (a, b) = (create_plan(store).await, create_plan(store).await);
    for n in 0..20 {
        apply(
            store,
            change(&a, None, None, json!(n)),
            append(format!("step {n}")),
        )
        .await;
    }
    // Every round, every agent reads both plans, waits for the others, then moves: the moves
    // of a round race each other.
    let barrier = Arc::new(tokio::sync::Barrier::new(agents));
    let workers = (0..agents)
        .map(|agent| {
            let store = stores[agent % stores.len()].clone();
            let (a, b) = (a.clone(), b.clone());
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let (mut applied, mut stale) = (0u64, 0u64);
                for round in 0..moves {
                    // Half the agents move from a to b, half from b to a, in turn.
                    let (from, to) = if (agent + round) % 2 == 0 {
                        (&a, &b)
                    } else {
                        (&b, &a)
                    };
                    let (from_read, from_items, _) = read_plan(&store, from, None, None).await;
                    let (to_read, _, _) = read_plan(&store, to, None, None).await;
                    barrier.wait().await;
                    let Some((id, _, _)) = from_items.get(agent % from_items.len().max(1)).cloned()
                    else {
                        continue;
                    };
                    let request = step_request(
                        &[(from, Some(from_read.version)), (to, Some(to_read.version))],
                        Some(&format!("move-{agent}-{round}")),
                        json!([agent, round]),
                    );
                    match store.mutate_step(request, move_step(id)).await.unwrap() {
                        StepOutcome::Applied(_) => applied += 1,
                        StepOutcome::StaleView(moved) => {
                            assert!(!moved.moved.is_empty());
                            for part in &moved.moved {
                                assert!(part.handle == *from || part.handle == *to);
                                assert!(part.current_version > part.expected_version, "{part:?}");
                            }
                            stale += 1;
                        }
                        other => panic!("agent {agent}: {other:?}"),
                    }
                }
                (applied, stale)
            })
        })
        .collect::<Vec<_>>();
    let (mut applied, mut stale) = (0, 0);
    for worker in workers {
        let (a, s) = within_for(Duration::from_secs(120), "an agent", worker)
            .await
            .unwrap();
        applied += a;
        stale += s;
    }
    let all = |handle: String| async move {
        let mut texts = Vec::new();
        let mut after = None;
        loop {
            let (_, items, more) = read_plan(store, &handle, after, None).await;
            after = items.last().map(|(id, _, _)| *id);
            texts.extend(items.into_iter().map(|(_, _, text)| text));
            if !more {
                return texts;
            }
        }
    };
    let mut everything = all(a).await;
    everything.extend(all(b).await);
    everything.sort();
    let mut expected: Vec<String> = (0..20).map(|n| format!("step {n}")).collect();
    expected.sort();
    assert_eq!(
        everything, expected,
        "{label}: every step in exactly one plan"
    );
    println!("{label}: {applied} moves applied, {stale} refused as stale_view, 20 steps conserved");
    assert!(
        applied > 0 && stale > 0,
        "{applied} applied, {stale} stale: no race happened"
    );
    (applied, stale)
}
