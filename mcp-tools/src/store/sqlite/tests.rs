//! The SQLite store's own tests: lanes, statements, batches, checkpoints and layouts.

use rusqlite::{StatementStatus, params};
use serde_json::Value;

use super::txn::{LOAD_SQL, PREFETCH_SQL};
use super::*;
use crate::store::api::{Creation, Making};
use crate::store::boundary::Txn;

/// A thread reads on a connection of its own lane: one another thread left idle is not
/// handed over, and a thread's second read takes the connection its first one left.
#[test]
fn each_thread_reads_on_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("lanes.db"), StoreConfig::default()).unwrap();
    let inner = &*store.inner;
    let idle = |lane: usize| lock(&inner.readers[lane]).len();
    let read = || inner.with_reader(|_| Ok(())).unwrap();
    let first = reader_lane();
    read();
    assert_eq!(idle(first), 1);
    // Threads take lanes in turn; other tests' threads may take some meanwhile.
    let second = (0..READER_LANES)
        .find_map(|_| {
            std::thread::scope(|scope| {
                let other = scope.spawn(|| {
                    let lane = reader_lane();
                    (lane != first).then(|| {
                        read();
                        lane
                    })
                });
                other.join().unwrap()
            })
        })
        .expect("threads take different lanes");
    assert_eq!(
        idle(first),
        1,
        "the first thread's connection stayed in its lane"
    );
    assert_eq!(
        idle(second),
        1,
        "the second thread opened a connection of its own"
    );
    read();
    assert_eq!((idle(first), idle(second)), (1, 1));
}

/// A file with the store's layout, and the prune steps run on it as the sweep runs them, one
/// transaction each, with the steps recorded.
fn pruned(fill: impl FnOnce(&rusqlite::Transaction<'_>)) -> (PruneReport, Vec<String>, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let mut connection = connect(&dir.path().join("prune.db"), &SqliteOptions::default()).unwrap();
    connection.execute_batch(SCHEMA).unwrap();
    let txn = connection.transaction().unwrap();
    fill(&txn);
    txn.commit().unwrap();
    let states = StateCache::new(0);
    let mut steps = Vec::new();
    let report = prune_in_steps(Duration::ZERO, |step| {
        steps.push(format!("{step:?}"));
        let txn = connection.transaction()?;
        let removed = step.run(&mut SqlTxn::new(&txn, &states), 1_000)?;
        txn.commit()?;
        Ok(removed)
    })
    .unwrap();
    (report, steps, connection)
}

fn count(connection: &Connection, table: &str) -> i64 {
    connection
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap()
}

/// A prune takes every expired ledger record off, however far apart their rowids are
/// (records replaced or given up leave gaps), a batch of rows at a time.
#[test]
fn a_prune_takes_every_expired_record_whatever_the_gaps() {
    let records = 3 * SWEEP_BATCH + 10;
    let (report, steps, connection) = pruned(|txn| {
        let mut insert = txn
            .prepare(
                "INSERT INTO mcp_ledger
                 (seq, principal, operation_id, fingerprint, outcome, recorded_at, expires_at)
                 VALUES (?1, 'p', ?1, 'f', '{}', 0, 1)",
            )
            .unwrap();
        for n in 1..=records {
            insert.execute([5 * n]).unwrap();
        }
    });
    assert_eq!(report.ledger_records, records as u64);
    assert_eq!(count(&connection, "mcp_ledger"), 0);
    let ledger_steps = steps.iter().filter(|step| *step == "Ledger").count();
    assert_eq!(ledger_steps, 4, "{steps:?}");
}

/// A prune deletes expired resources, with their history, a batch at a time, each batch a
/// transaction of its own: one transaction for all of them would hold the writer (and every
/// other process's writers) for as long as they take.
#[test]
fn a_prune_deletes_expired_resources_a_batch_at_a_time() {
    let resources = SWEEP_BATCH + 10;
    let (report, steps, connection) = pruned(|txn| {
        let mut resource = txn
            .prepare(
                "INSERT INTO mcp_resources
                 (handle, kind, owner, version, state, lifecycle, expires_at)
                 VALUES (?1, 'thing', 'p', 2, '{}', 'active', ?2)",
            )
            .unwrap();
        let mut change = txn
            .prepare("INSERT INTO mcp_changes (handle, version, undo) VALUES (?1, 2, '[]')")
            .unwrap();
        for n in 0..resources {
            let handle = format!("thg_{n}");
            resource.execute(params![handle, 1]).unwrap();
            change.execute([&handle]).unwrap();
        }
        // Expires after the prune's clock: kept.
        resource.execute(params!["thg_live", 2_000]).unwrap();
    });
    assert_eq!(report.resources, resources as u64);
    assert_eq!(count(&connection, "mcp_resources"), 1);
    assert_eq!(count(&connection, "mcp_changes"), 0);
    let resource_steps = steps
        .iter()
        .filter(|step| step.starts_with("Resources"))
        .count();
    assert_eq!(resource_steps, 2, "{steps:?}");
}

/// The load statement is prepared once and searches the primary key, whatever the handle.
#[test]
fn load_is_not_re_prepared() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut connection = connect(&path, &SqliteOptions::default()).unwrap();
    connection.execute_batch(SCHEMA).unwrap();
    let txn = connection.transaction().unwrap();
    let states = StateCache::new(0);
    for handle in ["ctr_a", "ctr_b", "ctr_c"] {
        let mut sql = SqlTxn::new(&txn, &states);
        assert!(sql.load(handle).unwrap().is_none());
    }
    let plan: String = txn
        .query_row(
            &format!("EXPLAIN QUERY PLAN {LOAD_SQL}"),
            ["ctr_a"],
            |row| row.get(3),
        )
        .unwrap();
    assert!(plan.contains("(handle=?)"), "{plan}");
    let statement = txn.prepare_cached(LOAD_SQL).unwrap();
    assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
}

/// The read that starts a mutation finds the resource and the ledger record by their keys,
/// with no scan.
#[test]
fn the_prefetch_searches_both_keys() {
    let connection = Connection::open_in_memory().unwrap();
    connection.execute_batch(SCHEMA).unwrap();
    let plan: Vec<String> = connection
        .prepare(&format!("EXPLAIN QUERY PLAN {PREFETCH_SQL}"))
        .unwrap()
        .query_map(params!["bsk_a", "alice", "op"], |row| row.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("SEARCH r USING INDEX")),
        "{plan:?}"
    );
    assert!(
        plan.iter()
            .any(|step| step.contains("SEARCH l USING INDEX mcp_ledger_key")),
        "{plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|step| step.starts_with("SCAN r") || step.starts_with("SCAN l")),
        "{plan:?}"
    );
}

/// The sweep of expired resources searches the expiry index, not the whole table.
#[test]
fn reclaim_uses_the_expiry_index() {
    let connection = Connection::open_in_memory().unwrap();
    connection.execute_batch(SCHEMA).unwrap();
    let plan: Vec<String> = connection
        .prepare(&format!("EXPLAIN QUERY PLAN {RECLAIMABLE_SQL}"))
        .unwrap()
        .query_map([0], |row| row.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("mcp_resources_expiry")),
        "{plan:?}"
    );
}

/// The outbox's statements use its indexes: claims the pending effects' in emission order,
/// statuses the resource's, the sweep the settled effects'.
#[test]
fn the_outbox_statements_search_their_indexes() {
    let connection = Connection::open_in_memory().unwrap();
    connection.execute_batch(SCHEMA).unwrap();
    let plan = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> String {
        connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params, |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .join("; ")
    };
    let claim = plan(outbox::CLAIM_SQL, &[&"w", &10, &0, &"[\"charge\"]", &16]);
    // The pending effects' partial index, in emission order; never the whole table.
    assert!(claim.contains("USING INDEX mcp_outbox_pending"), "{claim}");
    assert!(
        !claim.split("; ").any(|step| step == "SCAN mcp_outbox"),
        "{claim}"
    );
    let statuses = plan(outbox::STATUSES_SQL, &[&"bsk_a", &20]);
    assert!(statuses.contains("mcp_outbox_handle"), "{statuses}");
    let prune = plan(outbox::PRUNE_SQL, &[&0]);
    assert!(prune.contains("mcp_outbox_settled"), "{prune}");
}

/// What a claim costs follows the effects pending, not those the outbox keeps: the virtual
/// machine's steps for one claim of 16 over 16 pending effects, beside 10 or 10,000 settled.
#[test]
fn a_claim_costs_the_same_beside_ten_or_ten_thousand_settled_effects() {
    let steps = |settled: i64| -> i32 {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA).unwrap();
        let mut insert = connection
            .prepare(
                "INSERT INTO mcp_outbox (key, kind, handle, principal, payload, state, next_at,
                     created_at, settled_at)
                 VALUES (?1, 'charge', 'bsk_a', 'alice', '{}', ?2, 0, 0, ?3)",
            )
            .unwrap();
        for n in 0..settled {
            insert
                .execute(params![format!("eff_s{n}"), "delivered", 1])
                .unwrap();
        }
        for n in 0..16 {
            insert
                .execute(params![format!("eff_p{n}"), "pending", Option::<i64>::None])
                .unwrap();
        }
        let mut claim = connection.prepare(outbox::CLAIM_SQL).unwrap();
        let claimed = claim
            .query_map(params!["w", 10_000, 5, "[\"charge\"]", 16], |_| Ok(()))
            .unwrap()
            .count();
        assert_eq!(claimed, 16);
        claim.get_status(StatementStatus::VmStep)
    };
    let (few, many) = (steps(10), steps(10_000));
    println!("a claim's VM steps: {few} beside 10 settled effects, {many} beside 10,000");
    assert!(
        f64::from(many) <= f64::from(few) * 1.1,
        "{few} steps beside 10 settled, {many} beside 10,000"
    );
}

/// Awaits a store call; fails the test after 30 s instead of hanging, or on an error.
async fn within<T>(what: &str, call: impl Future<Output = Result<T, StoreError>>) -> T {
    tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap_or_else(|_| panic!("{what} timed out"))
        .unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// A store whose clock never moves, so a claim left behind would never lapse.
fn still_store(path: &Path, options: SqliteOptions) -> SqliteStore {
    let clock = crate::store::clock::ManualClock::at_millis(1_785_231_000_000);
    let config = StoreConfig {
        clock: Arc::new(clock),
        ..StoreConfig::default()
    };
    SqliteStore::open_with(path, config, options).unwrap()
}

/// A create of a note with the operation id `claimed`.
fn claiming(making: Creation<'static>) -> CreateRequest<'static> {
    const NOTE: crate::store::EntityKind = crate::store::EntityKind::new("note", "nte");
    let fingerprint = crate::store::Fingerprint::of_call("create", &serde_json::json!({}));
    CreateRequest::deferred(NOTE, crate::auth::Principal::subject("alice"), making)
        .operation("claimed", fingerprint)
}

/// Retries a ready create of `claiming` until it is applied (the claim on its id given
/// up), within the test's bound: the version it was applied at.
async fn applied_once_free(store: &SqliteStore) -> u64 {
    within("the claim on the id to be given up", async {
        loop {
            let retry = store
                .create(claiming(Creation::ready(serde_json::json!({}))))
                .await?;
            match retry.applied() {
                Some(applied) => break Ok(applied.version),
                None => tokio::task::yield_now().await,
            }
        }
    })
    .await
}

/// A create dropped while its claim waits in the writer's queue gives the claim up once the
/// writer has committed it (the writer runs what it was given, whoever still waits): a retry
/// with the id then runs, instead of answering `OPERATION_IN_PROGRESS` until the lease ends.
#[tokio::test]
async fn a_create_dropped_before_its_claim_committed_gives_it_up() {
    use futures_util::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let store = still_store(&dir.path().join("claims.db"), SqliteOptions::default());
    let (started, writer_busy) = tokio::sync::oneshot::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let writer = Arc::clone(&store.inner.writer);
    let busy = tokio::spawn(async move {
        writer
            .run(move |_, _| {
                let _ = started.send(());
                let _ = released.recv();
                Ok(())
            })
            .await
    });
    within("the writer to start the blocking unit", async {
        writer_busy.await.unwrap();
        Ok(())
    })
    .await;
    let mut create = store.create(claiming(Creation(Making::Deferred(Box::pin(async {
        Ok(serde_json::json!({}))
    })))));
    assert!(
        (&mut create).now_or_never().is_none(),
        "the claim waits behind the busy writer"
    );
    drop(create);
    release.send(()).unwrap();
    within("the blocking unit", async { busy.await.unwrap() }).await;
    assert_eq!(applied_once_free(&store).await, 1);
}

/// A create whose last unit failed (rolled back, so its claim is still there) gives the
/// claim up: the retry runs at once instead of waiting for the lease to end.
#[tokio::test]
async fn a_create_whose_last_unit_failed_gives_its_claim_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("claims.db");
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(100),
        ..SqliteOptions::default()
    };
    let store = still_store(&path, options);
    // Another process, which takes the file's write lock while the state is made (waiting
    // as long as it takes for the store's sweep, should it run then).
    let other = Arc::new(Mutex::new(
        connect(&path, &SqliteOptions::default()).unwrap(),
    ));
    let making = {
        let other = Arc::clone(&other);
        Box::pin(async move {
            lock(&other).execute_batch("BEGIN IMMEDIATE").unwrap();
            Ok(serde_json::json!({}))
        })
    };
    let failed = tokio::time::timeout(
        Duration::from_secs(30),
        store.create(claiming(Creation(Making::Deferred(making)))),
    )
    .await
    .expect("the create timed out");
    assert!(failed.is_err(), "{failed:?}");
    // Released before this task yields, so before the claim is given up.
    lock(&other).execute_batch("ROLLBACK").unwrap();
    assert_eq!(applied_once_free(&store).await, 1);
}

/// A transition setting one member of a JSON state.
fn set(member: &'static str, value: serde_json::Value) -> Transition {
    Transition::new(move |state| {
        state[member] = value.clone();
        Ok(serde_json::Value::Null)
    })
}

/// A change that leaves the expiry where it was does not write the expiry column (so the
/// expiry index is not rewritten); one that moves it writes it, and a read finds it.
#[tokio::test]
async fn an_expiry_that_did_not_move_is_not_written() {
    const CART: crate::store::EntityKind =
        crate::store::EntityKind::new("cart", "crt").with_ttl(Duration::from_secs(3_600));
    // 2026-07-28T09:30:00Z; the time to live's step is one second.
    let clock = crate::store::clock::ManualClock::at_millis(1_785_231_000_000);
    let config = StoreConfig {
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path, config).unwrap();
    let owner = Principal::subject("writer");
    let request = CreateRequest::new(CART, owner.clone(), serde_json::json!({ "n": 0 }));
    let created = within("the create", store.create(request)).await;
    let handle = created.applied().unwrap().handle.clone();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE expiry_writes (n INTEGER NOT NULL);
             INSERT INTO expiry_writes VALUES (0);
             CREATE TRIGGER count_expiry_writes AFTER UPDATE OF expires_at ON mcp_resources
             BEGIN UPDATE expiry_writes SET n = n + 1; END;",
        )
        .unwrap();
    let writes = || -> i64 {
        Connection::open(&path)
            .unwrap()
            .query_row("SELECT n FROM expiry_writes", [], |row| row.get(0))
            .unwrap()
    };
    let mut expiries = Vec::new();
    // After 250 ms the expiry moves to the next second; after 750 ms it is that one still;
    // after 1,250 ms it moves again.
    for (n, elapsed) in [(1, 250), (2, 500), (3, 500)] {
        clock.advance(Duration::from_millis(elapsed));
        let request = MutationRequest::new(CART, owner.clone(), &handle);
        let outcome = within("a change", store.mutate(request, set("n", n.into()))).await;
        let MutationOutcome::Applied(applied) = outcome else {
            panic!("{outcome:?}")
        };
        expiries.push((applied.resumption.expires_at.unwrap(), writes()));
    }
    let expected = [
        ("2026-07-28T10:30:01.000Z", 1),
        ("2026-07-28T10:30:01.000Z", 1),
        ("2026-07-28T10:30:02.000Z", 2),
    ];
    assert_eq!(expiries, expected.map(|(at, n)| (at.to_owned(), n)));
    let request = ReadRequest::new(CART, owner, &handle);
    let read = within("the read", store.read(request)).await;
    let snapshot = read.snapshot().expect("the cart is current");
    assert_eq!(snapshot.version, 4);
    assert_eq!(
        snapshot.resumption.expires_at.as_deref(),
        Some("2026-07-28T10:30:02.000Z")
    );
}

const NOTE: crate::store::EntityKind = crate::store::EntityKind::new("note", "nte");

/// A store on `path` keeping `state_cache_bytes` of decoded states.
fn cached_store(path: &Path, state_cache_bytes: usize) -> SqliteStore {
    let options = SqliteOptions {
        state_cache_bytes,
        ..SqliteOptions::default()
    };
    SqliteStore::open_with(path, StoreConfig::default(), options).unwrap()
}

async fn read_state(store: &SqliteStore, owner: &Principal, handle: &str) -> Arc<Value> {
    let read = within(
        "a read",
        store.read(ReadRequest::new(NOTE, owner.clone(), handle)),
    )
    .await;
    Arc::clone(&read.snapshot().expect("the note is current").state)
}

async fn change(store: &SqliteStore, owner: &Principal, handle: &str, text: &str) -> Arc<Value> {
    let request = MutationRequest::new(NOTE, owner.clone(), handle);
    let outcome = within("a change", store.mutate(request, set("text", text.into()))).await;
    let MutationOutcome::Applied(applied) = outcome else {
        panic!("{outcome:?}")
    };
    applied.state
}

/// A state the process wrote or decoded is not parsed again: reads answer the very value
/// the last write made, until the next write; with no cache every read parses its own.
#[tokio::test]
async fn reads_share_the_state_the_last_write_made() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Principal::subject("writer");
    for (budget, shared) in [(1 << 20, true), (0, false)] {
        let store = cached_store(&dir.path().join(format!("{budget}.db")), budget);
        let request = CreateRequest::new(NOTE, owner.clone(), serde_json::json!({ "text": "a" }));
        let created = within("the create", store.create(request)).await;
        let handle = created.applied().unwrap().handle.clone();
        let written = change(&store, &owner, &handle, "b").await;
        let first = read_state(&store, &owner, &handle).await;
        let second = read_state(&store, &owner, &handle).await;
        assert_eq!(*first, serde_json::json!({ "text": "b" }));
        assert_eq!(first, second);
        assert_eq!(Arc::ptr_eq(&written, &first), shared, "budget {budget}");
        assert_eq!(Arc::ptr_eq(&first, &second), shared, "budget {budget}");
    }
}

/// A state read back from the file is the state that was written, floats to the last bit:
/// the value a process holds decoded and the one another process parses are the same.
#[tokio::test]
async fn a_state_parsed_from_the_file_is_the_state_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floats.db");
    let (writer, reader) = (cached_store(&path, 1 << 20), cached_store(&path, 0));
    let owner = Principal::subject("writer");
    // The first: a parse that is not correctly rounded reads it one bit off; the others are
    // further full-precision floats.
    let totals = [30.366074329203574, 0.1 + 0.2, 1e-7 / 3.0, 987.654321012345];
    let state = serde_json::json!({ "text": "a", "totals": totals });
    let created = within(
        "the create",
        writer.create(CreateRequest::new(NOTE, owner.clone(), state)),
    )
    .await;
    let handle = created.applied().unwrap().handle.clone();
    let written = change(&writer, &owner, &handle, "b").await;
    let parsed = read_state(&reader, &owner, &handle).await;
    let bits = |state: &Value| -> Vec<u64> {
        state["totals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|total| total.as_f64().unwrap().to_bits())
            .collect()
    };
    assert_eq!(bits(&parsed), bits(&written));
    assert_eq!(bits(&written), totals.map(f64::to_bits));
}

/// Two stores on one file, as two processes would open it: each one's decoded states never
/// hide the other's writes, from its reads or from its own next write.
#[tokio::test]
async fn a_write_by_another_process_is_never_answered_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (one, two) = (cached_store(&path, 1 << 20), cached_store(&path, 1 << 20));
    let owner = Principal::subject("writer");
    let request = CreateRequest::new(NOTE, owner.clone(), serde_json::json!({ "text": "a" }));
    let created = within("the create", one.create(request)).await;
    let handle = created.applied().unwrap().handle.clone();
    assert_eq!(
        *read_state(&one, &owner, &handle).await,
        serde_json::json!({ "text": "a" })
    );
    assert_eq!(
        *read_state(&two, &owner, &handle).await,
        serde_json::json!({ "text": "a" })
    );

    change(&two, &owner, &handle, "b").await;
    // `one` holds version 1 decoded; its write bases version 3 on the file's version 2.
    let request = MutationRequest::new(NOTE, owner.clone(), &handle);
    let appended = Transition::new(|state| {
        let text = format!("{}c", state["text"].as_str().unwrap_or_default());
        state["text"] = text.into();
        Ok(Value::Null)
    });
    let outcome = within("an append", one.mutate(request, appended)).await;
    let MutationOutcome::Applied(applied) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (applied.version, &*applied.state),
        (3, &serde_json::json!({ "text": "bc" }))
    );
    // `two` holds version 2: its read finds version 3.
    assert_eq!(
        *read_state(&two, &owner, &handle).await,
        serde_json::json!({ "text": "bc" })
    );
    change(&two, &owner, &handle, "d").await;
    change(&one, &owner, &handle, "e").await;
    for store in [&one, &two] {
        let read = within(
            "a read",
            store.read(ReadRequest::new(NOTE, owner.clone(), &handle)),
        )
        .await;
        let snapshot = read.snapshot().expect("current");
        assert_eq!(
            (snapshot.version, &*snapshot.state),
            (5, &serde_json::json!({ "text": "e" }))
        );
    }
    let history = within(
        "a read since version 2",
        two.read(ReadRequest::new(NOTE, owner.clone(), &handle).since(2)),
    )
    .await;
    assert!(
        history
            .snapshot()
            .unwrap()
            .changes
            .as_ref()
            .unwrap()
            .delta_available
    );
}

/// A file of the earlier layout, which kept a copy of the state per version, is refused
/// with a message that says so, and is left as it was.
#[test]
fn a_file_of_the_earlier_layout_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let old = Connection::open(&path).unwrap();
    old.execute_batch(
        "CREATE TABLE mcp_versions (handle TEXT, version INTEGER, kind TEXT, owner TEXT,
             state TEXT, lifecycle TEXT, expires_at INTEGER, PRIMARY KEY (handle, version));
         INSERT INTO mcp_versions VALUES ('bsk_a', 1, 'basket', 'anonymous', '{}', 'active', NULL);",
    )
    .unwrap();
    drop(old);
    let error = SqliteStore::open(&path, StoreConfig::default())
        .err()
        .expect("the old layout is refused");
    let message = error.to_string();
    assert!(message.contains("earlier pre-release"), "{message}");
    assert!(message.contains("new file"), "{message}");
    let tables: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'mcp_resources'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "nothing was added to the old file");
}

/// The size of the write-ahead log after [`LOG_WRITES`] mutations that each rewrite a 32 KB
/// body (SQLite skips the pages of a row that did not change) and keep the old one as
/// history, on a store that checkpoints past `checkpoint_pages`; and the file's page size.
/// A log file never shrinks, so its size is the most it ever held.
async fn log_after(checkpoint_pages: u32) -> (u64, u64) {
    const DOCUMENT: crate::store::EntityKind = crate::store::EntityKind::new("document", "doc");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let options = SqliteOptions {
        checkpoint_pages,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, StoreConfig::default(), options).unwrap();
    let owner = Principal::subject("writer");
    let body = |write: u64| {
        char::from(b'a' + (write % 26) as u8)
            .to_string()
            .repeat(32 << 10)
    };
    let request = CreateRequest::new(
        DOCUMENT,
        owner.clone(),
        serde_json::json!({ "body": body(25) }),
    );
    let created = within("the create", store.create(request)).await;
    let handle = created.applied().unwrap().handle.clone();
    for write in 0..LOG_WRITES {
        let request = MutationRequest::new(DOCUMENT, owner.clone(), &handle);
        let outcome = within(
            "a write",
            store.mutate(request, set("body", body(write).into())),
        )
        .await;
        assert!(
            matches!(outcome, MutationOutcome::Applied(_)),
            "{outcome:?}"
        );
    }
    let page_size: i64 = store
        .inner
        .with_reader(|connection| {
            Ok(connection.query_row("PRAGMA page_size", [], |row| row.get(0))?)
        })
        .unwrap();
    let log = std::fs::metadata(dir.path().join("state.db-wal"))
        .unwrap()
        .len();
    (log, page_size as u64)
}

/// The checkpoint limit of the two log tests, in pages.
const LOG_LIMIT: u32 = 200;
/// The writes of the two log tests: twenty times [`LOG_LIMIT`] in pages of 4 KiB.
const LOG_WRITES: u64 = 250;

/// The pages [`LOG_WRITES`] writes of [`log_after`] put in the log at least: the new body
/// and the old one kept as history, each.
fn written_pages(page_size: u64) -> u64 {
    2 * (32u64 << 10).div_ceil(page_size) * LOG_WRITES
}

/// The write-ahead log stops growing: the checkpoints that follow the commits copy it into
/// the file and let the next commit start it afresh. The writes add up to twenty times the
/// checkpoint limit, which the log would hold without the checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_keep_the_log_short() {
    let (log, page_size) = log_after(LOG_LIMIT).await;
    let written = written_pages(page_size);
    assert!(written >= 20 * u64::from(LOG_LIMIT), "{written} pages");
    let most = 10 * u64::from(LOG_LIMIT) * page_size;
    assert!(
        log < most,
        "the log grew to {log} bytes over {LOG_WRITES} writes; checkpoints past {LOG_LIMIT} \
         pages keep it under {most}"
    );
}

/// The checkpoint limit is the store's, not SQLite's default of 1,000 pages: under a
/// larger one the log holds every write of the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_checkpointed_at_the_configured_size() {
    let limit = 100 * LOG_LIMIT;
    let (log, page_size) = log_after(limit).await;
    let written = written_pages(page_size);
    assert!(written < u64::from(limit), "{written} pages");
    assert!(
        log >= written * page_size,
        "the log holds {log} bytes after {LOG_WRITES} writes of {written} pages or more \
         under a limit of {limit} pages: it was checkpointed sooner"
    );
}

/// A file whose recorded layout is not this version's is refused.
#[test]
fn a_file_of_another_recorded_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE mcp_meta SET value = '3' WHERE key = 'layout'", [])
        .unwrap();
    let message = SqliteStore::open(&path, StoreConfig::default())
        .err()
        .expect("another layout is refused")
        .to_string();
    assert!(message.contains("layout 3"), "{message}");
    assert!(SqliteStore::open(dir.path().join("new.db"), StoreConfig::default()).is_ok());
}
