//! Keyed collections on every store: appends that commute and cost the same at any size, reads
//! that page, per-item versions, removals and deltas, replays, and items reached in rounds.

use mcp_tools::store::{Collection, Snapshot};

use super::*;

/// A plan of steps: a scalar title and a collection stored item by item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "plan", prefix = "pln", ttl_secs = 3600, lifecycle = lifecycle)]
pub(super) struct Plan {
    pub(super) title: String,
    pub(super) steps: Collection<String>,
    pub(super) done: bool,
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

pub(super) fn plan() -> Plan {
    Plan {
        title: "move".into(),
        steps: Collection::new(),
        done: false,
    }
}

pub(super) async fn create_plan<S: Store>(store: &S) -> String {
    let request = CreateRequest::typed(alice(), &plan()).unwrap();
    expect_applied(&create_outcome(store, request).await)
        .handle
        .clone()
}

pub(super) fn change(
    handle: &str,
    expected: Option<u64>,
    operation_id: Option<&str>,
    payload: Value,
) -> MutationRequest {
    let mut request =
        MutationRequest::new(Plan::kind(), alice(), handle).policy(ConflictPolicy::Items);
    if let Some(expected) = expected {
        request = request.expect_version(expected);
    }
    if let Some(operation_id) = operation_id {
        let arguments = json!({ "handle": handle, "expected": expected, "payload": payload });
        request = request.operation(operation_id, Fingerprint::of_call("plan", &arguments));
    }
    request
}

pub(super) fn append(text: String) -> Transition {
    Transition::typed(move |plan: &mut Plan| {
        let id = plan.steps.push(text.clone());
        Ok::<_, ToolError>(id)
    })
}

fn edit(id: u64, text: &'static str) -> Transition {
    Transition::typed(move |plan: &mut Plan| match plan.steps.get_mut(id) {
        Some(step) => {
            *step = text.to_owned();
            Ok(id)
        }
        None => Err(ToolError::new("NO_SUCH_STEP", format!("no step {id}"))),
    })
}

fn remove(id: u64) -> Transition {
    Transition::typed(move |plan: &mut Plan| match plan.steps.remove(id) {
        Some(_) => Ok(plan.steps.len()),
        None => Err(ToolError::new("NO_SUCH_STEP", format!("no step {id}"))),
    })
}

pub(super) async fn apply<S: Store>(
    store: &S,
    request: MutationRequest,
    transition: Transition,
) -> Applied {
    expect_applied(&mutate(store, request, transition).await).clone()
}

/// A read of the plan: its version, its stored document and its page of steps as
/// `(id, version, text)`, with whether more follow.
pub(super) async fn read_plan<S: Store>(
    store: &S,
    handle: &str,
    after: Option<u64>,
    since: Option<u64>,
) -> (Snapshot, Vec<(u64, u64, String)>, bool) {
    let mut request = ReadRequest::new(Plan::kind(), alice(), handle);
    request.since = since;
    request.page_after = after.map(|after| ("steps".to_owned(), after));
    let ReadOutcome::Current(snapshot) = within("a read of a plan", store.read(request))
        .await
        .unwrap()
    else {
        panic!("the plan reads");
    };
    let [page] = &snapshot.pages[..] else {
        panic!("one page per collection: {:?}", snapshot.pages);
    };
    assert_eq!(page.field, "steps");
    let items = page
        .items
        .iter()
        .map(|item| {
            let text = item.value.as_ref().expect("a live item").as_str().unwrap();
            (item.id, item.version, text.to_owned())
        })
        .collect();
    let more = page.more;
    (snapshot, items, more)
}

/// 120 appends without a version, each at the version it finds: ids 1 to 120 in order, the
/// stored document holding counts only, and reads handing out 50 items a page.
pub(super) async fn appends_commute_and_reads_page<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = create_plan(&store).await;
    for n in 1..=120u64 {
        let applied = apply(
            &store,
            change(&handle, None, None, json!(n)),
            append(format!("step {n}")),
        )
        .await;
        assert_eq!(applied.result, json!(n));
        assert_eq!(applied.version, n + 1);
    }
    let (snapshot, first, more) = read_plan(&store, &handle, None, None).await;
    assert_eq!(snapshot.version, 121);
    assert_eq!(
        *snapshot.state,
        json!({ "title": "move", "done": false, "steps": { "len": 120, "next_id": 121 } }),
        "the document holds the counts, never the items"
    );
    assert!(more);
    assert_eq!(first.len(), 50);
    assert_eq!(first[0], (1, 2, "step 1".to_owned()));
    assert_eq!(first[49].0, 50);
    let (_, second, more) = read_plan(&store, &handle, Some(50), None).await;
    assert!(more);
    assert_eq!(second.first().map(|item| item.0), Some(51));
    let (_, last, more) = read_plan(&store, &handle, Some(100), None).await;
    assert!(!more);
    assert_eq!(
        last.iter().map(|item| item.0).collect::<Vec<_>>(),
        (101..=120).collect::<Vec<_>>()
    );
}

/// A change under `ConflictPolicy::Items` conflicts only with changes of the items it reaches:
/// an edit of step 1 based on an old version applies (rebased) after step 2 and the title
/// changed, and an edit of step 2 based on that version is `stale_view` naming step 2.
pub(super) async fn items_are_versioned_one_by_one<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = create_plan(&store).await;
    apply(
        &store,
        change(&handle, None, None, json!(1)),
        append("pack".into()),
    )
    .await;
    apply(
        &store,
        change(&handle, None, None, json!(2)),
        append("load".into()),
    )
    .await;
    let seen = 3;
    apply(
        &store,
        change(&handle, Some(seen), Some("e2"), json!("e2")),
        edit(2, "load the van"),
    )
    .await;
    let retitle = Transition::typed(|plan: &mut Plan| {
        plan.title = "move out".into();
        Ok::<_, ToolError>(())
    });
    let request = MutationRequest::new(Plan::kind(), alice(), &handle);
    apply(&store, request, retitle).await;

    let applied = apply(
        &store,
        change(&handle, Some(seen), Some("e1"), json!("e1")),
        edit(1, "pack boxes"),
    )
    .await;
    assert_eq!(applied.rebased_from, Some(seen));
    assert_eq!(applied.version, 6);

    let outcome = mutate(
        &store,
        change(&handle, Some(seen), Some("e2b"), json!("e2b")),
        edit(2, "load it"),
    )
    .await;
    let stale = expect_stale(&outcome);
    assert_eq!((stale.expected_version, stale.current_version), (seen, 6));
    assert_eq!(stale.delta.len(), 1, "{:?}", stale.delta);
    assert_eq!(stale.delta[0].path, "/steps/items/2");
    assert_eq!(
        stale.delta[0].after,
        Some(json!({ "id": 2, "version": 4, "value": "load the van" }))
    );
    // Recorded: the same operation id answers the same.
    let replay = mutate(
        &store,
        change(&handle, Some(seen), Some("e2b"), json!("e2b")),
        edit(2, "load it"),
    )
    .await;
    assert!(matches!(replay, MutationOutcome::Replayed(_)), "{replay:?}");
    // Planned from the current version, it applies.
    apply(
        &store,
        change(&handle, Some(6), Some("e2c"), json!("e2c")),
        edit(2, "load it"),
    )
    .await;
    let (_, items, _) = read_plan(&store, &handle, None, None).await;
    assert_eq!(
        items,
        vec![
            (1, 6, "pack boxes".to_owned()),
            (2, 7, "load it".to_owned())
        ]
    );
    // A missing item is the tool's own answer, not a conflict.
    let outcome = mutate(
        &store,
        change(&handle, Some(7), None, json!(9)),
        edit(9, "x"),
    )
    .await;
    expect_rejected(&outcome, "NO_SUCH_STEP");
    // The aggregate's lifecycle still holds for item changes.
    let finish = Transition::typed(|plan: &mut Plan| {
        plan.done = true;
        Ok::<_, ToolError>(())
    });
    apply(
        &store,
        MutationRequest::new(Plan::kind(), alice(), &handle),
        finish,
    )
    .await;
    let outcome = mutate(
        &store,
        change(&handle, None, None, json!(3)),
        append("late".into()),
    )
    .await;
    expect_rejected(&outcome, "TERMINAL");
}

/// Removed items leave the page and show in what changed since a version, as long as that
/// version's history is kept; more changes than a delta lists answer "re-read".
pub(super) async fn removals_and_changes_since_a_version<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig {
        history_limit: 256,
        ..StoreConfig::default()
    });
    let handle = create_plan(&store).await;
    for n in 1..=4u64 {
        apply(
            &store,
            change(&handle, None, None, json!(n)),
            append(format!("step {n}")),
        )
        .await;
    }
    let seen = 5;
    let applied = apply(
        &store,
        change(&handle, Some(seen), None, json!("r")),
        remove(2),
    )
    .await;
    assert_eq!(applied.result, json!(3));
    apply(
        &store,
        change(&handle, Some(6), None, json!("e")),
        edit(3, "step three"),
    )
    .await;
    apply(
        &store,
        change(&handle, None, None, json!(5)),
        append("step 5".into()),
    )
    .await;
    let (snapshot, items, _) = read_plan(&store, &handle, None, Some(seen)).await;
    assert_eq!(
        items.iter().map(|item| item.0).collect::<Vec<_>>(),
        [1, 3, 4, 5]
    );
    let changes = snapshot.changes.expect("asked since a version");
    assert!(changes.delta_available);
    let steps: Vec<(&str, Option<&Value>)> = changes
        .delta
        .iter()
        .filter(|change| change.path.starts_with("/steps/items/"))
        .map(|change| (change.path.as_str(), change.after.as_ref()))
        .collect();
    assert_eq!(
        steps,
        vec![
            ("/steps/items/2", None),
            (
                "/steps/items/3",
                Some(&json!({ "id": 3, "version": 7, "value": "step three" }))
            ),
            (
                "/steps/items/5",
                Some(&json!({ "id": 5, "version": 8, "value": "step 5" }))
            ),
        ]
    );
    // The removed item is gone for a change too; its removal is a conflict for a change
    // planned before it.
    let outcome = mutate(
        &store,
        change(&handle, Some(seen), None, json!("e2")),
        edit(2, "x"),
    )
    .await;
    let stale = expect_stale(&outcome);
    assert_eq!(stale.delta[0].path, "/steps/items/2");
    assert_eq!(stale.delta[0].after, None);
    let outcome = mutate(
        &store,
        change(&handle, Some(8), None, json!("e2")),
        edit(2, "x"),
    )
    .await;
    expect_rejected(&outcome, "NO_SUCH_STEP");

    // 101 appends since version 8: too many to list.
    for n in 0..101u64 {
        apply(
            &store,
            change(&handle, None, None, json!(n)),
            append(format!("more {n}")),
        )
        .await;
    }
    // The history of version 8 is still kept (256 versions): only the count is past the bound.
    let (snapshot, _, _) = read_plan(&store, &handle, None, Some(8)).await;
    let changes = snapshot.changes.unwrap();
    assert!(!changes.delta_available, "{changes:?}");
    assert!(changes.delta.is_empty());
}

/// A retried append with its operation id is replayed: one item, one version.
pub(super) async fn a_replay_appends_nothing<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = create_plan(&store).await;
    let first = apply(
        &store,
        change(&handle, None, Some("a1"), json!("x")),
        append("x".into()),
    )
    .await;
    for _ in 0..3 {
        let outcome = mutate(
            &store,
            change(&handle, None, Some("a1"), json!("x")),
            append("x".into()),
        )
        .await;
        let MutationOutcome::Replayed(replayed) = outcome else {
            panic!("expected a replay, got {outcome:?}");
        };
        assert_eq!(
            replayed.original,
            RecordedOutcome::Applied(RecordedApplied::from(&first))
        );
    }
    let (snapshot, items, _) = read_plan(&store, &handle, None, None).await;
    assert_eq!(snapshot.version, 2);
    assert_eq!(items, vec![(1, 2, "x".to_owned())]);
}

/// A transition that finds each item through the one before reaches them in rounds, each
/// fetching what the last run asked for; past the bound it is refused, unrecorded.
pub(super) async fn items_reached_in_rounds<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let handle = create_plan(&store).await;
    // Step n names step n + 1: a chain.
    for n in 1..=30u64 {
        apply(
            &store,
            change(&handle, None, None, json!(n)),
            append(format!("{}", n + 1)),
        )
        .await;
    }
    let follow = |hops: usize| {
        Transition::typed(move |plan: &mut Plan| {
            let mut at = 1u64;
            for _ in 0..hops {
                let Some(next) = plan.steps.get(at) else {
                    return Err(ToolError::new("BROKEN", format!("no step {at}")));
                };
                at = next.parse().unwrap();
            }
            // Every step of the chain is reached, and all of them at once: one more round.
            let all: Vec<u64> = (1..=30).collect();
            let total = all
                .iter()
                .filter(|id| plan.steps.get(**id).is_some())
                .count();
            Ok::<_, ToolError>((at, total))
        })
    };
    let applied = apply(
        &store,
        change(&handle, None, Some("f"), json!(5)),
        follow(5),
    )
    .await;
    assert_eq!(applied.result, json!([6, 30]));
    let outcome = mutate(
        &store,
        change(&handle, None, Some("g"), json!(20)),
        follow(20),
    )
    .await;
    let rejected = expect_rejected(&outcome, code::INVALID_STATE);
    assert!(
        rejected.message.contains("one after another"),
        "{rejected:?}"
    );
    // Unrecorded: the same request applies once the transition needs fewer rounds.
    let applied = apply(
        &store,
        change(&handle, None, Some("g"), json!(20)),
        follow(3),
    )
    .await;
    assert_eq!(applied.result, json!([4, 30]));
}

/// A state written when the field was a plain list still decodes, and its next change, an
/// append here, stores every item one by one: ids in list order, the document left with counts.
pub(super) async fn a_plain_list_migrates_on_its_first_change<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let old = json!({ "title": "move", "steps": ["pack", "load"], "done": false });
    let request = CreateRequest::new(Plan::kind(), alice(), old.clone());
    let handle = expect_applied(&create_outcome(&store, request).await)
        .handle
        .clone();
    let (snapshot, items, _) = read_plan(&store, &handle, None, None).await;
    assert_eq!((*snapshot.state).clone(), old, "untouched until it changes");
    assert!(items.is_empty());
    let applied = apply(
        &store,
        change(&handle, None, Some("m"), json!("drive")),
        append("drive".into()),
    )
    .await;
    assert_eq!(applied.result, json!(3));
    let (snapshot, items, _) = read_plan(&store, &handle, None, None).await;
    assert_eq!(
        *snapshot.state,
        json!({ "title": "move", "done": false, "steps": { "len": 3, "next_id": 4 } })
    );
    assert_eq!(
        items,
        vec![
            (1, 2, "pack".to_owned()),
            (2, 2, "load".to_owned()),
            (3, 2, "drive".to_owned())
        ]
    );
}

/// SQLite keeps each item as a row and each removal while its version's history is kept; an
/// aggregate reclaimed after its expiry takes its items and removals with it, and no other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_items_live_and_go_with_their_aggregate() {
    let fixture = Fixture::new("sqlite").unwrap();
    let clock = ManualClock::at_millis(T0);
    let store = fixture.sqlite(StoreConfig {
        ledger_retention: Duration::from_secs(60),
        history_limit: 4,
        ..config(&clock)
    });
    let connection = rusqlite::Connection::open(fixture.dir.path().join("state.db")).unwrap();
    let count = |sql: &str| -> i64 { connection.query_row(sql, [], |row| row.get(0)).unwrap() };
    let gone = create_plan(&store).await;
    for n in 1..=3u64 {
        apply(
            &store,
            change(&gone, None, None, json!(n)),
            append(format!("{n}")),
        )
        .await;
    }
    apply(&store, change(&gone, Some(4), None, json!("r")), remove(1)).await;
    assert_eq!(count("SELECT count(*) FROM mcp_items"), 2);
    assert_eq!(count("SELECT count(*) FROM mcp_item_removals"), 1);
    // The plan expires an hour after its last change; a second plan is made half an hour in.
    clock.advance(Duration::from_secs(30 * 60));
    let kept = create_plan(&store).await;
    apply(
        &store,
        change(&kept, None, None, json!(1)),
        append("kept".into()),
    )
    .await;
    clock.advance(Duration::from_secs(32 * 60));
    assert_eq!(prune(&store).await.resources, 1);
    assert_eq!(
        count("SELECT count(*) FROM mcp_items"),
        1,
        "the other plan's item stays"
    );
    assert_eq!(count("SELECT count(*) FROM mcp_item_removals"), 0);
    let (_, items, _) = read_plan(&store, &kept, None, None).await;
    assert_eq!(items, vec![(1, 2, "kept".to_owned())]);
}

/// Items a create pushes are kept: a read shows them (without versions, not yet stored one by
/// one), a transition reaches them, and the entity's first change stores them as items, the
/// document then holding counts only.
pub(super) async fn items_made_with_the_entity_are_kept<S: Store>(open: Open<'_, S>) {
    let store = open(StoreConfig::default());
    let mut steps = Collection::new();
    for text in ["pack", "load", "drive"] {
        steps.push(text.to_owned());
    }
    let made = Plan {
        title: "move".into(),
        steps,
        done: false,
    };
    let request = CreateRequest::typed(alice(), &made).unwrap();
    let handle = expect_applied(&create_outcome(&store, request).await)
        .handle
        .clone();
    let reach = Transition::typed(|plan: &mut Plan| {
        let load = plan.steps.get(2).cloned().ok_or("no step 2")?;
        plan.steps.remove(3).ok_or("no step 3")?;
        Ok::<_, &str>(load)
    });
    let applied = apply(&store, change(&handle, None, None, json!("reach")), reach).await;
    assert_eq!(
        applied.result,
        json!("load"),
        "the created items are reachable"
    );
    let (snapshot, items, _) = read_plan(&store, &handle, None, None).await;
    assert_eq!(
        items,
        [(1, 2, "pack".to_owned()), (2, 2, "load".to_owned())],
        "stored one by one at the first change"
    );
    assert_eq!(
        *snapshot.state,
        json!({ "title": "move", "done": false, "steps": { "len": 2, "next_id": 4 } })
    );
}
