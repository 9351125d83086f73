//! Tasks across replicas: basket server processes on one SQLite file, and on one PostgreSQL
//! schema, called over real HTTP. A task made on one replica is read, answered and cancelled on
//! another; the replica running a task is killed with SIGKILL and its task turns `failed` once
//! the lease lapses; a replica started later still answers for finished tasks.

use crate::basket;
use crate::basket_client;
use crate::common;
use crate::pg;

use std::time::{Duration, Instant};

use mcp_tools::McpServer;
use mcp_tools::SqliteStore;
use mcp_tools::store::{PostgresOptions, Store, StoreConfig};
use mcp_tools::tasks::TaskOptions;
use serde_json::{Value, json};

use basket_client::{remove_db, temp_db};
use common::children::{self, Child};
use common::{Call, tasks, within};

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_basket_tasks_from_the_store_it_is_given"
);
const CHILD_DB: &str = "MCP_TOOLS_TEST_TASK_CHILD_DB";

/// The lease the replicas hold on their tasks, and how often they poll them.
const LEASE: Duration = Duration::from_millis(1_500);
const POLL: Duration = Duration::from_millis(250);

fn server(store: impl Store) -> McpServer {
    McpServer::builder("basket", "0.0.0")
        .tools(basket::tool_set_with_quote())
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .task_options(TaskOptions::default().lease(LEASE).poll_interval(POLL))
        .build()
        .unwrap()
}

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the task replica tests"]
fn a_child_process_serves_basket_tasks_from_the_store_it_is_given() {
    if let Ok(path) = std::env::var(CHILD_DB) {
        children::run(async move {
            let store = SqliteStore::open(&path, StoreConfig::default()).unwrap();
            children::serve(server(store)).await;
        });
        return;
    }
    children::serve_postgres(server, StoreConfig::default(), PostgresOptions::default());
}

async fn call_tool(url: &str, tool: &str, arguments: Value) -> Value {
    let reply = within(
        "a tool call",
        tasks::tool_call(tool, arguments).send_to(url),
    )
    .await;
    assert_eq!(reply.status, 200, "{tool}: {}", reply.text);
    reply.result()
}

async fn task_method(url: &str, method: &str, id: &str, extra: Value) -> Value {
    let reply = within(method, tasks::method_call(method, id, extra).send_to(url)).await;
    assert_eq!(reply.status, 200, "{method}: {}", reply.text);
    reply.result()
}

/// Polls `tasks/get` on `url`, as a client would, until the task's status is `status`.
async fn until_status(url: &str, id: &str, status: &str) -> Value {
    tasks::until_status(status, POLL / 2, || {
        task_method(url, "tasks/get", id, json!({}))
    })
    .await
}

async fn new_basket(url: &str) -> String {
    let arguments = json!({ "operation_id": basket_client::operation_id("create") });
    let created = call_tool(url, "basket_create", arguments).await;
    created["structuredContent"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned()
}

/// Starts a quote on `url`; its task id.
async fn quote(url: &str, basket: &str, seconds: f64, confirm: bool) -> String {
    let created = call_tool(
        url,
        "basket_quote",
        json!({ "basket_id": basket, "seconds": seconds, "confirm": confirm }),
    )
    .await;
    assert_eq!(created["resultType"], "task", "{created}");
    for member in ["result", "error", "inputRequests", "requestState"] {
        assert!(created.get(member).is_none(), "{member} in {created}");
    }
    assert!(
        created["ttlMs"].is_u64() && created["pollIntervalMs"].is_u64(),
        "{created}"
    );
    created["taskId"].as_str().unwrap().to_owned()
}

/// The whole story on `replicas` (at least two) sharing one store; `restart` starts one more.
async fn tasks_across_replicas(label: &str, mut replicas: Vec<Child>, restart: impl Fn() -> Child) {
    let (a, b) = (replicas[0].url.clone(), replicas[1].url.clone());
    let basket = new_basket(&a).await;

    // Made on A, read, listened to and answered on B, finished on A.
    let id = quote(&a, &basket, 0.1, true).await;
    let waiting = until_status(&b, &id, "input_required").await;
    let listen = Call::new(
        "subscriptions/listen",
        json!(11),
        json!({ "notifications": { "taskIds": [id, "tsk_not_mine"] } }),
    )
    .capabilities(tasks::taking_tasks());
    let mut events = common::events::Events::open(&b, &listen).await;
    let acknowledged = events.next().await;
    assert_eq!(
        acknowledged["params"]["notifications"]["taskIds"],
        json!([id]),
        "only the caller's tasks are followed: {acknowledged}"
    );
    let keys: Vec<String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys.len(), 1, "{waiting}");
    let answer = json!({ keys[0].clone(): { "action": "accept", "content": { "accept": true } } });
    let ack = task_method(&b, "tasks/update", &id, json!({ "inputResponses": answer })).await;
    assert_eq!(ack["resultType"], "complete");
    let done = until_status(&a, &id, "completed").await;
    let heard = within("a notification that the task completed", async {
        loop {
            let event = events.next().await;
            assert_eq!(event["method"], "notifications/tasks", "{event}");
            assert_eq!(event["params"]["taskId"], json!(id), "{event}");
            if event["params"]["status"] == "completed" {
                return event;
            }
        }
    })
    .await;
    assert_eq!(heard["params"]["result"], done["result"], "{heard}");
    drop(events);
    let priced = &done["result"]["structuredContent"]["state"];
    assert_eq!(priced["accepted"], true, "{done}");
    assert_eq!(priced["price_eur"], 900 + 16 * 6 + 512 / 4, "{done}");

    // Cancelled on B while it runs on A: every replica sees it cancelled at once.
    let id = quote(&a, &basket, 600.0, false).await;
    assert_eq!(
        task_method(&b, "tasks/cancel", &id, json!({})).await["resultType"],
        "complete"
    );
    assert_eq!(
        task_method(&a, "tasks/get", &id, json!({})).await["status"],
        "cancelled"
    );

    // A finished task outlives the replica that ran it.
    let finished = quote(&b, &basket, 0.1, false).await;
    until_status(&a, &finished, "completed").await;

    // A task that runs for three leases on a live replica keeps renewing its lease. It is read
    // all along, so a lapse would be seen (and written as `failed`) as soon as it happened.
    let long = quote(&b, &basket, (LEASE * 3).as_secs_f64(), false).await;
    let watched = tokio::spawn({
        let (b, long) = (b.clone(), long.clone());
        async move { until_status(&b, &long, "completed").await }
    });

    // A's tasks fail once its lease lapses after a SIGKILL.
    let orphan = quote(&a, &basket, 600.0, false).await;
    until_status(&b, &orphan, "working").await;
    replicas[0].kill();
    let killed = Instant::now();
    let failed = until_status(&b, &orphan, "failed").await;
    let after = killed.elapsed();
    assert!(
        failed["statusMessage"]
            .as_str()
            .unwrap()
            .contains("lease expired"),
        "{failed}"
    );
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    // The lease, a renewal that may have just happened, and a loaded machine's polling.
    assert!(
        after <= LEASE * 3,
        "{label}: the orphaned task failed {after:?} after the kill, past the lease of {LEASE:?}"
    );
    println!("{label}: a killed replica's task failed {after:?} after SIGKILL (lease {LEASE:?})");

    let fresh = restart();
    let read = task_method(&fresh.url, "tasks/get", &finished, json!({})).await;
    assert_eq!(read["status"], "completed", "{read}");
    assert!(
        read["result"]["structuredContent"]["state"]["price_eur"].is_u64(),
        "{read}"
    );
    let outlived = within("the long task to complete", watched).await.unwrap();
    assert!(
        outlived["result"]["structuredContent"]["state"]["price_eur"].is_u64(),
        "{outlived}"
    );
    replicas.push(fresh);
}

/// The basket example, as its users run it, on the SQLite file `path`.
/// A basket example process on `port` with `store` (`--db PATH` or `--memory`) and `options`.
fn basket_process(port: u16, store: &[&str], options: &[&str]) -> common::examples::Process {
    let process = std::process::Command::new(common::examples::binary("basket"))
        .args(store)
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .args(options)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::examples::Process(process)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_replicas_running_tasks_as_failed_before_it_exits() {
    use common::examples::{free_port, healthy};
    let path = temp_db("tasks-sigterm");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let (port_a, port_b) = (free_port(), free_port());
    let db = ["--db", path.to_str().unwrap()];
    // A lease far longer than the test: only the shutdown itself can end the task soon.
    let long_lease = ["--task-lease-ms", "600000"];
    let mut a = basket_process(port_a, &db, &long_lease);
    let _b = basket_process(port_b, &db, &long_lease);
    healthy(port_a).await;
    healthy(port_b).await;
    let (url_a, url_b) = (
        format!("http://127.0.0.1:{port_a}/mcp"),
        format!("http://127.0.0.1:{port_b}/mcp"),
    );
    let basket = new_basket(&url_a).await;
    let id = quote(&url_a, &basket, 600.0, false).await;
    until_status(&url_b, &id, "working").await;

    let terminated = std::process::Command::new("kill")
        .args(["-TERM", &a.0.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let exit = within("the replica to exit after SIGTERM", async {
        loop {
            if let Some(status) = a.0.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(POLL / 5).await;
        }
    })
    .await;
    assert!(exit.success(), "{exit:?}");
    // Recorded before the process exited: no lease had to lapse.
    let failed = task_method(&url_b, "tasks/get", &id, json!({})).await;
    tasks::assert_shut_down(&failed);
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_basket_servers_task_caps_are_set_on_its_command_line() {
    use common::examples::{free_port, healthy};
    for (cap, limit) in [
        ("--max-running-tasks", "running tasks on this server"),
        (
            "--max-running-tasks-per-principal",
            "running tasks for this caller",
        ),
    ] {
        let port = free_port();
        let _server = basket_process(port, &["--memory"], &[cap, "1"]);
        healthy(port).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let basket = new_basket(&url).await;
        let running = quote(&url, &basket, 600.0, false).await;
        let call = tasks::tool_call(
            "basket_quote",
            json!({ "basket_id": basket, "seconds": 600 }),
        );
        let refused = within("a quote past the cap", call.send_to(&url)).await;
        assert_eq!(refused.status, 429, "{cap}: {}", refused.text);
        assert_eq!(
            refused.error_code(),
            Some(-32000),
            "{cap}: {}",
            refused.text
        );
        assert!(refused.headers.contains_key("retry-after"), "{cap}");
        assert!(refused.text.contains(limit), "{cap}: {}", refused.text);
        task_method(&url, "tasks/cancel", &running, json!({})).await;
        let after = tasks::until_accepted(&url, &call, POLL / 5).await.result();
        assert_eq!(after["resultType"], "task", "{cap}: {after}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_shared_by_processes_on_one_sqlite_file() {
    let path = temp_db("tasks");
    drop(SqliteStore::open(&path, StoreConfig::default()).unwrap());
    let env = [(CHILD_DB, path.display().to_string())];
    let replicas = children::start(CHILD_TEST, &env, 2);
    tasks_across_replicas("SQLite", replicas, || {
        children::start(CHILD_TEST, &env, 1).pop().unwrap()
    })
    .await;
    remove_db(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_shared_by_replicas_on_one_postgres_schema() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    // The schema's tables exist before the replicas race to make them.
    drop(schema.connect(StoreConfig::default()).await);
    let env = children::postgres_env(&schema.url, &schema.name);
    let replicas = children::start(CHILD_TEST, &env, 2);
    tasks_across_replicas("PostgreSQL", replicas, || {
        children::start(CHILD_TEST, &env, 1).pop().unwrap()
    })
    .await;
}

/// This host's clock, two hours fast.
#[derive(Debug)]
struct TwoHoursFast;

impl mcp_tools::store::Clock for TwoHoursFast {
    fn now_millis(&self) -> i64 {
        mcp_tools::store::SystemClock.now_millis() + 2 * 3_600_000
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_whose_clocks_disagree_judge_tasks_by_the_databases() {
    use mcp_tools::store::Clock;
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let options = PostgresOptions {
        schema: schema.name.clone(),
        time: mcp_tools::store::TimeSource::Database,
        ..PostgresOptions::default()
    };
    let right = pg::connect_to(&schema.url, StoreConfig::default(), options.clone()).await;
    let fast = pg::connect_to(
        &schema.url,
        StoreConfig {
            clock: std::sync::Arc::new(TwoHoursFast),
            ..StoreConfig::default()
        },
        options,
    )
    .await;
    assert!(TwoHoursFast.now_millis() > mcp_tools::store::SystemClock.now_millis());
    let (a, b) = (
        common::TestServer::start(server(right)).await,
        common::TestServer::start(server(fast)).await,
    );
    let basket = new_basket(&a.url()).await;
    // A task made and run on A, with a lease of 1.5 s and a time to live under two hours: by
    // B's own clock both ended long ago.
    let id = quote(&a.url(), &basket, 2.0, false).await;
    let seen_on_b = task_method(&b.url(), "tasks/get", &id, json!({})).await;
    assert_eq!(seen_on_b["status"], "working", "{seen_on_b}");
    let done = until_status(&b.url(), &id, "completed").await;
    assert_eq!(done["taskId"], id, "{done}");
}
