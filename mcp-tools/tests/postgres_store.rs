//! What only the PostgreSQL store has: TLS as `sslmode` asks, its schema's migrations, its
//! names quoted, and its answers when the database is slow, locked or out of connections.

#![cfg(all(feature = "postgres", feature = "test-hooks"))]

mod pg;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tools::PostgresStore;
use mcp_tools::auth::Principal;
use mcp_tools::store::Outbox;
use mcp_tools::store::{
    CreateRequest, Entity, Fingerprint, MutationOutcome, MutationRequest, PostgresOptions,
    ReadOutcome, ReadRequest, RecordedOutcome, Store, StoreConfig, StoreError, Transition,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Counter {
    count: u64,
}

impl Entity for Counter {
    const KIND: &'static str = "counter";
    const PREFIX: &'static str = "ctr";
}

const STEP: Duration = Duration::from_secs(30);

/// Bounds a whole test: every await in it is under this timeout, besides each step's own.
async fn whole_test(test: impl Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(180), test)
        .await
        .expect("the test did not finish within 3 minutes");
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {STEP:?}: {what}"))
}

fn alice() -> Principal {
    Principal::subject("alice")
}

async fn create(store: &PostgresStore) -> String {
    let request = CreateRequest::typed(alice(), &Counter { count: 0 }).unwrap();
    let outcome = within("a create", store.create(request)).await.unwrap();
    outcome.applied().expect("created").handle.clone()
}

fn increment() -> Transition {
    Transition::typed(|counter: &mut Counter| {
        counter.count += 1;
        Ok::<_, String>(counter.count)
    })
}

async fn read_count(store: &PostgresStore, handle: &str) -> u64 {
    let request = ReadRequest::new(Counter::kind(), alice(), handle);
    match within("a read", store.read(request)).await.unwrap() {
        ReadOutcome::Current(snapshot) => snapshot.state["count"].as_u64().unwrap(),
        other => panic!("not readable: {other:?}"),
    }
}

/// Whether a session of `application_name` is connected with TLS, as the server sees it.
async fn tls_in_use(schema: &pg::Schema, application_name: &str) -> Vec<bool> {
    let client = schema.client().await;
    client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn with_query(url: &str, query: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{query}")
}

/// `verify-full` and `verify-ca` against the root that signed the cluster's certificate: the
/// server's chain (and, for `verify-full`, its name) is checked, and the sessions are encrypted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_servers_root_connects_over_tls() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let Ok(ca) = std::env::var("MCP_TOOLS_POSTGRES_CA") else {
            assert!(std::env::var_os("CI").is_none(), "CI runs the TLS tests");
            eprintln!("SKIPPED: MCP_TOOLS_POSTGRES_CA is not set");
            return;
        };
        let url = with_query(
            &schema.url,
            &format!("sslmode=verify-full&sslrootcert={ca}&application_name=tls_full"),
        );
        let store = pg::connect_to(&url, StoreConfig::default(), schema.options()).await;
        let handle = create(&store).await;
        assert_eq!(read_count(&store, &handle).await, 0);
        let sessions = tls_in_use(&schema, "tls_full").await;
        assert!(
            !sessions.is_empty() && sessions.iter().all(|ssl| *ssl),
            "{sessions:?}"
        );

        // verify-ca: the chain against the same root, the name unchecked.
        let url = with_query(
            &schema.url,
            &format!("sslmode=verify-ca&sslrootcert={ca}&application_name=tls_ca"),
        );
        let store = pg::connect_to(&url, StoreConfig::default(), schema.options()).await;
        create(&store).await;
        let sessions = tls_in_use(&schema, "tls_ca").await;
        assert!(
            !sessions.is_empty() && sessions.iter().all(|ssl| *ssl),
            "{sessions:?}"
        );
    })
    .await;
}

/// `sslmode=disable` is plain text, and `verify-full` against roots that did not sign the
/// server's certificate is refused with a message naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_are_honoured() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let plain = with_query(&schema.url, "sslmode=disable&application_name=tls_off");
        let store = pg::connect_to(&plain, StoreConfig::default(), schema.options()).await;
        create(&store).await;
        let sessions = tls_in_use(&schema, "tls_off").await;
        assert!(
            !sessions.is_empty() && sessions.iter().all(|ssl| !*ssl),
            "{sessions:?}"
        );

        let required = with_query(&schema.url, "sslmode=require&application_name=tls_required");
        let store = pg::connect_to(&required, StoreConfig::default(), schema.options()).await;
        create(&store).await;
        let sessions = tls_in_use(&schema, "tls_required").await;
        assert!(
            !sessions.is_empty() && sessions.iter().all(|ssl| *ssl),
            "{sessions:?}"
        );

        let system_roots = "/etc/ssl/certs/ca-certificates.crt";
        if std::path::Path::new(system_roots).exists() {
            let untrusted = with_query(
                &schema.url,
                &format!("sslmode=verify-full&sslrootcert={system_roots}"),
            );
            let error = within(
                "connecting",
                PostgresStore::connect_with(&untrusted, StoreConfig::default(), schema.options()),
            )
            .await
            .expect_err("a certificate no trusted root signed is refused");
            let message = error.to_string();
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
    })
    .await;
}

/// A schema of an earlier release (version 1: no task or item tables) is upgraded in place, and its
/// state kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_an_earlier_release_gains_the_newer_tables() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let store = schema.connect(StoreConfig::default()).await;
        let handle = create(&store).await;
        drop(store);
        let client = schema.client().await;
        client
            .batch_execute(&format!(
                "DROP TABLE \"{0}\".mcp_tasks, \"{0}\".mcp_items, \"{0}\".mcp_item_removals,
                     \"{0}\".mcp_outbox;
                 DELETE FROM \"{0}\".mcp_migrations WHERE version >= 2",
                schema.name
            ))
            .await
            .unwrap();
        let store = schema.connect(StoreConfig::default()).await;
        assert_eq!(read_count(&store, &handle).await, 0, "the state is kept");
        let task = mcp_tools::tasks::TaskRecord::for_tests("tsk_upgraded", "", 1, 1_000);
        let inserted = mcp_tools::tasks::TaskStore::insert_task(&store, task)
            .await
            .unwrap();
        assert!(matches!(inserted, mcp_tools::tasks::TaskInsert::Inserted));
        let statuses = mcp_tools::store::Outbox::effect_statuses(&store, &handle, 20)
            .await
            .unwrap();
        assert!(statuses.is_empty(), "the outbox is there, and empty");
        let versions: Vec<i32> = client
            .query(
                &format!(
                    "SELECT version FROM \"{}\".mcp_migrations ORDER BY version",
                    schema.name
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(versions, [1, 2, 3, 4]);
    })
    .await;
}

/// A newer schema this code is compatible with is used as it is; one it is not, or a table no
/// migration made, is refused and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_or_unknown_schemas_are_refused() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        drop(schema.connect(StoreConfig::default()).await);
        let client = schema.client().await;
        // A newer, additive schema that this code may still use: a rolling deploy's next release.
        client
            .batch_execute(&format!(
                "INSERT INTO \"{}\".mcp_migrations (version, compatible_from, description)
                 VALUES (5, 1, 'an additive change')",
                schema.name
            ))
            .await
            .unwrap();
        let store = schema.connect(StoreConfig::default()).await;
        let handle = create(&store).await;
        assert_eq!(read_count(&store, &handle).await, 0);
        // A newer schema this code may not use.
        client
            .batch_execute(&format!(
                "INSERT INTO \"{}\".mcp_migrations (version, compatible_from, description)
                 VALUES (99, 99, 'from the future')",
                schema.name
            ))
            .await
            .unwrap();
        let message = within(
            "connecting",
            PostgresStore::connect_with(&schema.url, StoreConfig::default(), schema.options()),
        )
        .await
        .expect_err("a newer schema is refused")
        .to_string();
        assert!(message.contains("schema version 99"), "{message}");
        assert!(message.contains("newer"), "{message}");

        let foreign = pg::Schema::new().unwrap();
        let client = foreign.client().await;
        client
            .batch_execute(&format!(
                "CREATE SCHEMA \"{0}\"; CREATE TABLE \"{0}\".mcp_ledger (id int)",
                foreign.name
            ))
            .await
            .unwrap();
        let message = within(
            "connecting",
            PostgresStore::connect_with(&foreign.url, StoreConfig::default(), foreign.options()),
        )
        .await
        .expect_err("a table no migration made is refused")
        .to_string();
        assert!(message.contains("mcp_ledger"), "{message}");
        let untouched: i64 = client
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
                &[&foreign.name],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(untouched, 1, "nothing was added beside the foreign table");
    })
    .await;
}

/// Replicas that start together create the tables once (the migration holds an advisory lock),
/// and odd schema names and prefixes are quoted, never spliced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_migrate_once_under_quoted_names() {
    whole_test(async {
        let Some(mut schema) = pg::Schema::new() else {
            return;
        };
        schema.name = format!("{} we\"ird; DROP", schema.name);
        let options = PostgresOptions {
            table_prefix: "a-b \"c\"_".into(),
            ..schema.options()
        };
        let opening: Vec<_> = (0..6)
            .map(|_| {
                let (url, options) = (schema.url.clone(), options.clone());
                tokio::spawn(async move {
                    PostgresStore::connect_with(&url, StoreConfig::default(), options).await
                })
            })
            .collect();
        let mut stores = Vec::new();
        for store in opening {
            stores.push(within("a replica to start", store).await.unwrap().unwrap());
        }
        let handle = create(&stores[0]).await;
        assert_eq!(read_count(&stores[5], &handle).await, 0);
        let client = schema.client().await;
        let migrations: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{}\".\"a-b \"\"c\"\"_migrations\"",
                    schema.name.replace('"', "\"\"")
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(migrations, 4, "each of the four migrations applied once");
    })
    .await;
}

/// A row lock held elsewhere past the timeout, and a pool with no free connection, answer
/// `StoreError::Backend` (the tool result `STORE_UNAVAILABLE`) soon after the timeout (the bound
/// is loose, ten times the timeout, so a loaded machine does not fail it; a hang would), and the
/// store serves again once the obstacle is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_and_a_full_pool_are_bounded_in_time() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let timeout = Duration::from_millis(500);
        let store = schema
            .connect_with(
                StoreConfig::default(),
                PostgresOptions {
                    timeout,
                    ..schema.one_connection()
                },
            )
            .await;
        let handle = create(&store).await;
        let request = || MutationRequest::new(Counter::kind(), alice(), &handle);

        // Another session holds the row.
        let mut other = schema.client().await;
        let holder = other.transaction().await.unwrap();
        holder
            .execute(
                &format!(
                    "SELECT 1 FROM \"{}\".mcp_resources WHERE handle = $1 FOR UPDATE",
                    schema.name
                ),
                &[&handle],
            )
            .await
            .unwrap();
        let started = Instant::now();
        let blocked = within(
            "a mutation behind a lock",
            store.mutate(request(), increment()),
        )
        .await;
        assert!(
            matches!(blocked, Err(StoreError::Backend(_))),
            "{blocked:?}"
        );
        assert!(started.elapsed() < timeout * 10, "{:?}", started.elapsed());
        holder.rollback().await.unwrap();

        // A transition that outlives the timeout holds the only connection.
        let running = Arc::new(tokio::sync::Notify::new());
        let slow = Transition::typed({
            let running = Arc::clone(&running);
            move |counter: &mut Counter| {
                running.notify_one();
                std::thread::sleep(Duration::from_millis(1500));
                counter.count += 100;
                Ok::<_, String>(counter.count)
            }
        });
        let store = Arc::new(store);
        let held = tokio::spawn({
            let (store, request) = (Arc::clone(&store), request());
            async move { store.mutate(request, slow).await }
        });
        within("the slow transition to start", running.notified()).await;
        let started = Instant::now();
        let queued = within(
            "a mutation with no free connection",
            store.mutate(request(), increment()),
        )
        .await;
        assert!(matches!(queued, Err(StoreError::Backend(_))), "{queued:?}");
        assert!(started.elapsed() < timeout * 10, "{:?}", started.elapsed());
        let slow = within("the slow transition", held).await.unwrap();
        assert!(matches!(slow, Err(StoreError::Backend(_))), "{slow:?}");

        // Nothing of the abandoned units was committed, and the store serves again.
        assert_eq!(read_count(&store, &handle).await, 0);
        let outcome = within("a mutation", store.mutate(request(), increment()))
            .await
            .unwrap();
        assert!(
            matches!(outcome, MutationOutcome::Applied(_)),
            "{outcome:?}"
        );
        assert_eq!(read_count(&store, &handle).await, 1);
    })
    .await;
}

/// Changes piling up on one busy resource, or on one operation id, wait for their turn in the
/// process, holding no connection. With a pool of two, one change of the busy resource stopped
/// inside its transition (holding a connection, the resource's lock and its operation id's),
/// two more changes of it started behind it and a change of a third resource reusing that
/// operation id, a read and a change of another resource still answer at once: without either
/// turn, a change queued behind took the second connection to wait in the database, and the
/// others waited for the pool until the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_queued_on_a_busy_resource_leave_the_pool_to_the_others() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let store = schema
            .connect_with(
                StoreConfig::default(),
                PostgresOptions {
                    pool_size: 2,
                    // Long enough for all the test does while the first change waits (its
                    // transaction idles meanwhile), on a loaded machine; without turns the read
                    // of the other resource fails when it runs out.
                    timeout: Duration::from_secs(20),
                    ..schema.options()
                },
            )
            .await;
        let (busy, other, third) = (
            create(&store).await,
            create(&store).await,
            create(&store).await,
        );
        let request = |handle: &str| MutationRequest::new(Counter::kind(), alice(), handle);
        let with_held_id = |handle: &str, call: &str| {
            let fingerprint = Fingerprint::of_call(call, &serde_json::json!({ "on": handle }));
            request(handle).operation("the-held-change-s-operation-id", fingerprint)
        };

        let (entered, entered_here) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let mut entered = Some(entered);
        let holding = Transition::typed(move |counter: &mut Counter| {
            if let Some(entered) = entered.take() {
                let _ = entered.send(());
            }
            // Blocking as a transition that takes long would, handing this worker's other
            // tasks (the connections' among them) to another thread meanwhile.
            tokio::task::block_in_place(|| released.recv_timeout(STEP))
                .map_err(|_| "the test never let the change go".to_string())?;
            counter.count += 1;
            Ok::<_, String>(counter.count)
        });
        let first = tokio::spawn({
            let (store, request) = (store.clone(), with_held_id(&busy, "held"));
            async move { store.mutate(request, holding).await }
        });
        within("the first change to stop in its transition", entered_here)
            .await
            .unwrap();

        // Each polled until it waits: for its turn, or (without turns) for a lock, on the
        // pool's second connection. The last one waits for the operation id's turn.
        let mut queued: Vec<_> = (0..2)
            .map(|_| store.mutate(request(&busy), increment()))
            .collect();
        queued.push(store.mutate(with_held_id(&third, "reused"), increment()));
        for change in &mut queued {
            let waiting = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(change.as_mut().poll(cx).is_pending())
            })
            .await;
            assert!(waiting, "a change behind a held lock finished");
        }

        assert_eq!(read_count(&store, &other).await, 0);
        let changed = within("a change of another resource", async {
            store.mutate(request(&other), increment()).await
        })
        .await
        .unwrap();
        assert!(changed.applied().is_some(), "{changed:?}");
        assert_eq!(read_count(&store, &other).await, 1);

        release.send(()).unwrap();
        let first = within("the held change", first).await.unwrap().unwrap();
        assert!(first.applied().is_some(), "{first:?}");
        let reused = queued.pop().unwrap();
        for change in queued {
            let outcome = within("a queued change", change).await.unwrap();
            assert!(outcome.applied().is_some(), "{outcome:?}");
        }
        assert_eq!(read_count(&store, &busy).await, 3);
        // The id was recorded about the busy resource with another payload.
        let reused = within("the change reusing the operation id", reused)
            .await
            .unwrap();
        assert!(reused.applied().is_none(), "{reused:?}");
        assert_eq!(read_count(&store, &third).await, 0);
    })
    .await;
}

/// A unit whose writes reached the server but whose answers never came back (the proxy holds
/// them, as a network that fails after the request went out would). Without an operation id
/// nothing may commit, since nothing would tell the retry that the change was made: `COMMIT`
/// waits for the writes' answers, and the abandoned transaction is rolled back and lets the row
/// go. With an operation id the `COMMIT` goes out with the writes; the change commits, and the
/// retry is answered from the ledger instead of applied again. On a current-thread runtime each
/// flight is queued before the connection's task sends it, so the statement counts do not
/// depend on timing.
#[tokio::test]
async fn a_unit_whose_answers_are_lost_commits_only_what_its_retry_can_find() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let wire = pg::Wire::start(&schema.url).await;
        // Short, since each abandoned unit waits for it, but roomy enough for the setup's
        // migration and logins on a busy machine.
        let options = PostgresOptions {
            timeout: Duration::from_secs(2),
            sweep_interval: Duration::from_secs(3600),
            ..schema.one_connection()
        };
        let proxied = pg::connect_to(&wire.url, StoreConfig::default(), options).await;
        let direct = schema.connect(StoreConfig::default()).await;
        let handle = create(&proxied).await;
        let request = || MutationRequest::new(Counter::kind(), alice(), &handle);
        let fingerprint = mcp_tools::store::Fingerprint::of_call("counter", &serde_json::json!(1));
        let recorded = |id: &str| request().operation(id, fingerprint);
        // A unit of the same kind runs in full on the proxied connection first, so that its
        // statements are prepared there and the held round trip is its writes'. (The
        // connection of an abandoned unit is closed, so the next one prepares them anew.)
        let warm_up = async |request: MutationRequest| {
            let outcome = within("a warm-up", proxied.mutate(request, increment()))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::Applied(_)),
                "{outcome:?}"
            );
        };

        warm_up(request()).await;
        wire.hold_answers_from(2);
        let before = wire.traffic();
        let lost = within(
            "a unit without an operation id",
            proxied.mutate(request(), increment()),
        )
        .await;
        assert!(matches!(lost, Err(StoreError::Backend(_))), "{lost:?}");
        // What reached the server: `BEGIN`, the locks and the read, then the write, no `COMMIT`.
        let sent = wire.traffic() - before;
        assert_eq!((sent.round_trips, sent.statements), (2, 4), "{sent:?}");
        assert_eq!(read_count(&direct, &handle).await, 1, "nothing committed");
        let outcome = within(
            "a mutation of the row the abandoned unit wrote",
            direct.mutate(request().expect_version(2), increment()),
        )
        .await
        .unwrap();
        assert!(
            matches!(outcome, MutationOutcome::Applied(_)),
            "{outcome:?}"
        );

        warm_up(recorded("warm-up")).await;
        wire.hold_answers_from(2);
        let before = wire.traffic();
        let lost = within(
            "a unit with an operation id",
            proxied.mutate(recorded("lost"), increment()),
        )
        .await;
        assert!(matches!(lost, Err(StoreError::Backend(_))), "{lost:?}");
        // The write and `COMMIT` went out together.
        let sent = wire.traffic() - before;
        assert_eq!((sent.round_trips, sent.statements), (2, 5), "{sent:?}");
        let retried = within("its retry", direct.mutate(recorded("lost"), increment()))
            .await
            .unwrap();
        let MutationOutcome::Replayed(replayed) = &retried else {
            panic!("not replayed: {retried:?}");
        };
        assert!(
            matches!(&replayed.original, RecordedOutcome::Applied(applied) if applied.version == 5),
            "{retried:?}"
        );
        assert_eq!(read_count(&direct, &handle).await, 4, "applied once");
    })
    .await;
}

/// What a resource retains is bounded by the history limit, not by how often it changed: undo
/// patches beyond the limit are deleted (every few versions) in the mutations' own writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_beyond_the_limit_is_deleted() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let limit = 8;
        let store = schema
            .connect(StoreConfig {
                history_limit: limit,
                ..StoreConfig::default()
            })
            .await;
        let handle = create(&store).await;
        for _ in 0..100 {
            let request = MutationRequest::new(Counter::kind(), alice(), &handle);
            let outcome = within("a mutation", store.mutate(request, increment()))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::Applied(_)),
                "{outcome:?}"
            );
        }
        let client = schema.client().await;
        let kept: i64 = within(
            "counting patches",
            client.query_one(
                &format!(
                    "SELECT count(*) FROM \"{}\".mcp_changes WHERE handle = $1",
                    schema.name
                ),
                &[&handle],
            ),
        )
        .await
        .unwrap()
        .get(0);
        // At most the limit, plus the versions written since the last deletion.
        assert!(kept >= (limit - 1) as i64, "{kept}");
        assert!(
            kept <= (limit + 16) as i64,
            "{kept} patches kept for 100 versions"
        );
        assert_eq!(read_count(&store, &handle).await, 100);
    })
    .await;
}

/// Changes of a resource with a time to live, within one step of its expiry, update its row in
/// place (heap-only tuples): the expiry, the one indexed column a change writes, keeps its value,
/// so the row's indexes take no new entry per change. A change in the next step moves the expiry,
/// and that update is not in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_within_an_expiry_step_update_the_row_in_place() {
    const CHANGES: i64 = 40;
    const LEASE: mcp_tools::store::EntityKind =
        mcp_tools::store::EntityKind::new("lease", "lse").with_ttl(Duration::from_secs(86_400));
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        // Just past a whole minute, the step of a day's time to live: the create and the changes
        // below all fall within the step that ends a day after 09:31:00.
        let clock = mcp_tools::store::ManualClock::at_millis(1_785_231_000_001);
        let config = StoreConfig {
            clock: Arc::new(clock.clone()),
            ..StoreConfig::default()
        };
        let store = schema.connect(config).await;
        let request = CreateRequest::new(LEASE, alice(), serde_json::json!({ "n": 0 }));
        let created = within("a create", store.create(request)).await.unwrap();
        let handle = created.applied().expect("created").handle.clone();
        for change in 0..=CHANGES {
            // 40 changes within the step, then one a minute later.
            clock.advance(Duration::from_millis(if change < CHANGES {
                250
            } else {
                60_000
            }));
            let request = MutationRequest::new(LEASE, alice(), &handle);
            let transition = Transition::new(|state| {
                state["n"] = serde_json::json!(state["n"].as_i64().unwrap_or(0) + 1);
                Ok(serde_json::Value::Null)
            });
            let outcome = within("a change", store.mutate(request, transition))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::Applied(_)),
                "{outcome:?}"
            );
        }
        // A backend reports its table statistics when it ends: close the store's connections,
        // then wait (bounded) for the counts to arrive.
        drop(store);
        let client = schema.client().await;
        let statistics = format!(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
             WHERE schemaname = '{}' AND relname = 'mcp_resources'",
            schema.name
        );
        let (updated, in_place) = within("the statistics of the changes", async {
            loop {
                let row = client.query_one(&statistics, &[]).await.unwrap();
                let counts: (i64, i64) = (row.get(0), row.get(1));
                if counts.0 > CHANGES {
                    break counts;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(
            (updated, in_place),
            (CHANGES + 1, CHANGES),
            "updates of the resource row, and how many of them were in place"
        );
    })
    .await;
}

/// The request path plans each statement once, for any value: mutations (fresh, replayed and
/// stale), reads and creates make no plan for their values. The task purge and the sweep plan
/// per call, and so does the batch a request sweeps at a full ledger share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_path_plans_each_statement_once() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let store = schema
            .connect_with(StoreConfig::default(), schema.one_connection())
            .await;
        let handle = create(&store).await;
        for call in 0..12 {
            let request = || {
                MutationRequest::new(Counter::kind(), alice(), &handle)
                    .expect_version(call + 1)
                    .operation(
                        format!("op-{call}"),
                        mcp_tools::store::Fingerprint::of_call(
                            "increment",
                            &serde_json::json!(call),
                        ),
                    )
            };
            let outcome = within("a mutation", store.mutate(request(), increment()))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::Applied(_)),
                "{outcome:?}"
            );
            let outcome = within("a replay", store.mutate(request(), increment()))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::Replayed(_)),
                "{outcome:?}"
            );
            let stale = MutationRequest::new(Counter::kind(), alice(), &handle).expect_version(1);
            let outcome = within("a stale mutation", store.mutate(stale, increment()))
                .await
                .unwrap();
            assert!(
                matches!(outcome, MutationOutcome::StaleView(_)),
                "{outcome:?}"
            );
            assert_eq!(read_count(&store, &handle).await, call + 1);
        }
        let (generic, custom) = store.plans_for_tests().await.unwrap();
        assert_eq!(custom, 0, "{custom} plans made for the values of one call");
        assert!(generic > 0, "no statement was planned");

        within(
            "a purge of tasks",
            mcp_tools::tasks::TaskStore::purge_tasks(&store, 0),
        )
        .await
        .unwrap();
        let (_, purged) = store.plans_for_tests().await.unwrap();
        assert!(
            purged > 0,
            "the task purge planned its statement once, for any value"
        );

        within("a sweep", store.prune()).await.unwrap();
        let (_, custom) = store.plans_for_tests().await.unwrap();
        assert!(
            custom > purged,
            "the sweep planned its statements once, for any value"
        );

        // At a full ledger share a request sweeps a batch itself, planned for its values too.
        let config = StoreConfig {
            ledger_quota: 2,
            ..StoreConfig::default()
        };
        let store = schema.connect_with(config, schema.one_connection()).await;
        let handle = create(&store).await;
        for call in 0..3 {
            let request = MutationRequest::new(Counter::kind(), alice(), &handle).operation(
                format!("op-full-{call}"),
                mcp_tools::store::Fingerprint::of_call("increment", &serde_json::json!(call)),
            );
            let outcome = within("a mutation", store.mutate(request, increment()))
                .await
                .unwrap();
            match call {
                2 => assert!(
                    matches!(&outcome, MutationOutcome::Rejected(rejected) if rejected.code == "LEDGER_FULL"),
                    "{outcome:?}"
                ),
                _ => assert!(
                    matches!(outcome, MutationOutcome::Applied(_)),
                    "{outcome:?}"
                ),
            }
        }
        let (_, custom) = store.plans_for_tests().await.unwrap();
        assert!(
            custom > 0,
            "the sweep at a full share planned once, for any value"
        );
    })
    .await;
}

/// The connection string's own `options` apply, except for the settings the store's bounds and
/// plans rest on, which the store's values override.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_settings_win_over_the_connection_strings() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let options = "options=-c%20work_mem%3D7MB%20-c%20statement_timeout%3D0\
                       %20-c%20plan_cache_mode%3Dforce_custom_plan";
        let url = with_query(&schema.url, options);
        let store = pg::connect_to(&url, StoreConfig::default(), schema.one_connection()).await;
        let setting = async |name| within(name, store.setting_for_tests(name)).await.unwrap();
        assert_eq!(setting("work_mem").await, "7MB");
        assert_eq!(setting("statement_timeout").await, "10s");
        assert_eq!(setting("plan_cache_mode").await, "force_generic_plan");
    })
    .await;
}

/// By default the database's clock judges time, whatever the replica's clock says: a store whose
/// own clock stands in the year 2000 records the database's instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_databases_clock_is_the_default() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let config = StoreConfig {
            clock: Arc::new(mcp_tools::store::ManualClock::at_millis(946_684_800_000)),
            ..StoreConfig::default()
        };
        let options = PostgresOptions {
            time: mcp_tools::store::TimeSource::Database,
            ..schema.options()
        };
        let store = schema.connect_with(config, options).await;
        let handle = create(&store).await;
        let request = || {
            MutationRequest::new(Counter::kind(), alice(), &handle).operation(
                "op-clock",
                mcp_tools::store::Fingerprint::of_call("increment", &serde_json::json!({})),
            )
        };
        within("a mutation", store.mutate(request(), increment()))
            .await
            .unwrap();
        let replay = within("a replay", store.mutate(request(), increment()))
            .await
            .unwrap();
        let MutationOutcome::Replayed(replayed) = replay else {
            panic!("not a replay: {replay:?}");
        };
        assert!(
            !replayed.recorded_at.starts_with("2000-"),
            "recorded by the replica's clock: {}",
            replayed.recorded_at
        );
        let client = schema.client().await;
        let year: f64 = within(
            "the database's year",
            client.query_one("SELECT extract(year FROM now())::float8", &[]),
        )
        .await
        .unwrap()
        .get(0);
        assert!(
            replayed.recorded_at.starts_with(&format!("{year}-")),
            "{} is not in the database's year {year}",
            replayed.recorded_at
        );
    })
    .await;
}

/// A resource with two independent members, so that a change to one can rebase over a change
/// to the other.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Pair {
    left: u64,
    right: u64,
}

impl Entity for Pair {
    const KIND: &'static str = "pair";
    const PREFIX: &'static str = "par";
}

fn bump_left() -> Transition {
    Transition::typed(|pair: &mut Pair| {
        pair.left += 1;
        Ok::<_, String>(pair.left)
    })
}

fn bump_right() -> Transition {
    Transition::typed(|pair: &mut Pair| {
        pair.right += 1;
        Ok::<_, String>(pair.right)
    })
}

/// A resource whose items are stored one by one.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, mcp_tools::store::Entity)]
#[entity(kind = "tray", prefix = "try")]
struct Tray {
    slots: mcp_tools::store::Collection<u64>,
}

fn refuse() -> Transition {
    Transition::typed(|_: &mut Pair| Err::<u64, _>("refused"))
}

/// A notice sent when a pair moves.
#[derive(serde::Serialize, serde::Deserialize)]
struct Moved {
    left: u64,
}

impl mcp_tools::effects::Effect for Moved {
    const KIND: &'static str = "moved";
}

fn bump_left_and_tell() -> Transition {
    Transition::typed_with_effects(
        |pair: &mut Pair, effects: &mut mcp_tools::effects::Effects<Moved>| {
            pair.left += 1;
            effects.emit(Moved { left: pair.left });
            Ok::<_, String>(pair.left)
        },
    )
}

/// The README's table of round trips and statements per call ("How a change stays atomic
/// across hosts"), counted on the wire by a proxy that reads the frontend protocol. Each kind of
/// call runs twice, the first time to prepare its statements on the one pooled connection, and
/// is counted the second time. On a current-thread runtime every pipelined batch is queued
/// before the connection's task runs, so the counts do not depend on timing.
#[tokio::test]
async fn round_trips_per_call_are_those_documented() {
    whole_test(async {
        let Some(schema) = pg::Schema::new() else {
            return;
        };
        let wire = pg::Wire::start(&schema.url).await;
        let config = StoreConfig {
            history_limit: 3,
            ..StoreConfig::default()
        };
        let options = PostgresOptions {
            sweep_interval: Duration::from_secs(3600),
            ..schema.one_connection()
        };
        let store = pg::connect_to(&wire.url, config, options).await;
        let fingerprint = |payload: &str| {
            mcp_tools::store::Fingerprint::of_call("pair", &serde_json::json!(payload))
        };
        let mutation = |handle: &str| MutationRequest::new(Pair::kind(), alice(), handle);

        let mut measured = Vec::new();
        for round in 0..2 {
            macro_rules! count {
                ($call:expr, $future:expr) => {{
                    let before = wire.traffic();
                    let outcome = within($call, $future).await.unwrap();
                    measured.push((round, $call, wire.traffic() - before));
                    outcome
                }};
            }
            let op = |name: &str| format!("wire-{round}-{name}");

            let create = CreateRequest::typed(alice(), &Pair { left: 0, right: 0 }).unwrap();
            let create = create.operation(op("create"), fingerprint("create"));
            let created = count!("create, state known up front", store.create(create));
            let handle = created.applied().expect("created").handle.clone();
            let plain = CreateRequest::typed(alice(), &Pair { left: 0, right: 0 }).unwrap();
            count!("mutation or create without an operation id", store.create(plain));
            let making = mcp_tools::store::Creation::typed(async {
                Ok::<_, String>(Pair { left: 0, right: 0 })
            });
            let made = CreateRequest::deferred(Pair::kind(), alice(), making)
                .operation(op("made"), fingerprint("made"));
            let made = count!("create whose function makes the state", store.create(made));
            assert!(made.applied().is_some(), "{made:?}");

            let read = ReadRequest::new(Pair::kind(), alice(), &handle);
            count!("read (`basket_get`)", store.read(read));

            // Each mutation below carries an operation id, as the README's rows do, but one.
            let recorded = |name: &str| mutation(&handle).operation(op(name), fingerprint(name));
            let plain = mutation(&handle).expect_version(1);
            let outcome = count!(
                "mutation or create without an operation id",
                store.mutate(plain, bump_left())
            );
            assert!(matches!(outcome, MutationOutcome::Applied(_)), "{outcome:?}");
            let applied = recorded("v3").expect_version(2);
            let outcome = count!("mutation, `applied`", store.mutate(applied, bump_left()));
            assert!(matches!(outcome, MutationOutcome::Applied(_)), "{outcome:?}");
            store.mutate(recorded("v4"), bump_left()).await.unwrap();
            store.mutate(recorded("v5"), bump_left()).await.unwrap();

            let replay = count!("replay", store.mutate(recorded("v5"), bump_left()));
            assert!(matches!(replay, MutationOutcome::Replayed(_)), "{replay:?}");
            let other = made.applied().unwrap().handle.clone();
            let elsewhere = mutation(&other).operation(op("v5"), fingerprint("v5"));
            let replay = count!(
                "an operation id recorded about another resource",
                store.mutate(elsewhere, bump_left())
            );
            assert!(
                matches!(&replay, MutationOutcome::Replayed(replayed)
                    if replayed.current.as_ref().is_some_and(|now| now.handle == handle)),
                "{replay:?}"
            );

            // Collections: a read with its first page, an append, a change of an item the
            // transition reaches (fetched first).
            let tray = CreateRequest::typed(alice(), &Tray { slots: Default::default() }).unwrap();
            let tray = store.create(tray).await.unwrap().applied().unwrap().handle.clone();
            let read = ReadRequest::new(Tray::kind(), alice(), &tray);
            count!("read of an entity with collections", store.read(read));
            let push = Transition::typed(|tray: &mut Tray| Ok::<_, String>(tray.slots.push(7)));
            let append = MutationRequest::new(Tray::kind(), alice(), &tray)
                .operation(op("push"), fingerprint("push"));
            let outcome = count!("append to a collection, `applied`", store.mutate(append, push));
            let MutationOutcome::Applied(pushed) = outcome else {
                panic!("{outcome:?}");
            };
            let slot = pushed.result.as_u64().unwrap();
            let bump = Transition::typed(move |tray: &mut Tray| {
                let value = tray.slots.get_mut(slot).ok_or("no such slot")?;
                *value += 1;
                Ok::<_, &str>(*value)
            });
            let change = MutationRequest::new(Tray::kind(), alice(), &tray)
                .operation(op("bump"), fingerprint("bump"));
            let outcome = count!("change of an item, fetched first", store.mutate(change, bump));
            assert!(matches!(outcome, MutationOutcome::Applied(_)), "{outcome:?}");

            // Effects: written with the change, in the same flight; claimed, settled and listed
            // in one statement each.
            let told = recorded("told");
            let outcome = count!(
                "mutation that emits effects, `applied`",
                store.mutate(told, bump_left_and_tell())
            );
            let MutationOutcome::Applied(told) = outcome else {
                panic!("{outcome:?}");
            };
            assert_eq!(told.effects.len(), 1);
            let claim = mcp_tools::store::Claim::new(op("worker"), 60_000, 16, vec!["moved".into()]);
            let claimed = count!("a claim of due effects", store.claim_effects(claim));
            assert_eq!(claimed.len(), 1, "{claimed:?}");
            let settled = count!(
                "an effect's settlement",
                store.settle_effect(
                    &claimed[0].key,
                    &op("worker"),
                    mcp_tools::store::Settlement::Delivered(serde_json::json!(true))
                )
            );
            assert!(settled);
            let statuses = count!(
                "the effects of a resource (a read of a kind whose tools emit them)",
                store.effect_statuses(&handle, 20)
            );
            assert!(!statuses.is_empty());

            let stale = recorded("stale").expect_version(4);
            let outcome = count!(
                "mutation, `stale_view` with its delta",
                store.mutate(stale, bump_left())
            );
            assert!(
                matches!(&outcome, MutationOutcome::StaleView(stale) if stale.delta_available),
                "{outcome:?}"
            );
            let rebased = recorded("rebased")
                .expect_version(4)
                .policy(mcp_tools::store::ConflictPolicy::rebase::<Pair>(&["right"]));
            let outcome = count!(
                "mutation, rebased over a concurrent change",
                store.mutate(rebased, bump_right())
            );
            assert!(
                matches!(&outcome, MutationOutcome::Applied(applied) if applied.rebased_from == Some(4)),
                "{outcome:?}"
            );
            let past = recorded("past").expect_version(1);
            let outcome = count!(
                "mutation, `stale_view` past the history limit, or a recorded rejection",
                store.mutate(past, bump_left())
            );
            assert!(
                matches!(&outcome, MutationOutcome::StaleView(stale) if !stale.delta_available),
                "{outcome:?}"
            );
            let outcome = count!(
                "mutation, `stale_view` past the history limit, or a recorded rejection",
                store.mutate(recorded("refused"), refuse())
            );
            assert!(matches!(outcome, MutationOutcome::Rejected(_)), "{outcome:?}");
        }

        // The README's table is the expectation: a row it documents and the store stops
        // matching, or a row no call here measures, fails the test.
        let documented = documented_round_trips();
        let counted: Vec<_> = measured
            .iter()
            .filter(|(round, _, _)| *round == 1)
            .map(|(_, call, traffic)| (*call, (traffic.round_trips, traffic.statements)))
            .collect();
        let expected: Vec<_> = counted
            .iter()
            .map(|(call, _)| {
                let row = documented.get(*call);
                (*call, *row.unwrap_or_else(|| panic!("the documented table has no row {call:?}")))
            })
            .collect();
        assert_eq!(counted, expected, "(round trips, statements) per call");
        let unmeasured: Vec<_> = documented
            .keys()
            .filter(|row| !counted.iter().any(|(call, _)| call == row))
            .collect();
        assert!(unmeasured.is_empty(), "documented rows no call measures: {unmeasured:?}");
    })
    .await;
}

/// The "round trips / statements" table of `PostgresStore`'s documentation: each row's call and
/// the leading number of its two other cells.
fn documented_round_trips() -> std::collections::BTreeMap<String, (u64, u64)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/postgres/mod.rs");
    let source = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let docs: String = source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("/// "))
        .map(|line| format!("{line}\n"))
        .collect();
    let (_, table) = docs
        .split_once("| call | round trips | statements |\n")
        .expect("the round-trip table of PostgresStore's documentation");
    let leading = |cell: &str| -> u64 {
        let number = cell.split_whitespace().next().unwrap_or_default();
        number
            .parse()
            .unwrap_or_else(|_| panic!("{cell:?} does not start with a count"))
    };
    table
        .lines()
        .skip(1) // the |---| line
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {line}");
            (cells[0].to_owned(), (leading(cells[1]), leading(cells[2])))
        })
        .collect()
}
