//! Faults that must lose nothing: three basket replicas (processes of their own) on one
//! PostgreSQL schema, 32 agents doing read-modify-write over real HTTP and retrying each change
//! under its operation id, with a fault-injecting proxy between the replicas and the database
//! (connections cut, answers lost after `COMMIT` was confirmed), between the agents and the
//! replicas (answers lost on the HTTP leg), latency on both legs, and the replicas' database
//! connections killed with `pg_terminate_backend`. Each run's history is checked for
//! linearizability and its baskets for exactly-once application.

use crate::basket_client;
use crate::common;
use crate::faults::{self, Workload, history::History, proxy};
use crate::pg;

use std::sync::Arc;
use std::time::Duration;

use mcp_tools::store::{PostgresOptions, StoreConfig};

use common::children::{self, Child};
use proxy::{FaultProxy, Faults, Protocol};

const CHILD_TEST: &str = concat!(
    module_path!(),
    "::a_child_process_serves_the_basket_through_faults"
);

/// The body of a child process; does nothing unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the fault tests"]
fn a_child_process_serves_the_basket_through_faults() {
    // Stale views are recorded too: more than the default share of ledger records per basket.
    let config = StoreConfig {
        ledger_quota: 1_000_000,
        ..StoreConfig::default()
    };
    let options = PostgresOptions {
        timeout: Duration::from_secs(5),
        ..PostgresOptions::default()
    };
    children::serve_postgres(basket_client::server, config, options);
}

const WORKLOAD: Workload = Workload {
    agents: 32,
    baskets: 8,
    operations: 12,
    abandon: 0.1,
};

/// Three replicas on `schema`, reaching the database at `url`.
fn replicas(url: &str, schema: &pg::Schema) -> Vec<Child> {
    children::start(CHILD_TEST, &children::postgres_env(url, &schema.name), 3)
}

fn urls(replicas: &[Child]) -> Vec<String> {
    replicas.iter().map(|child| child.url.clone()).collect()
}

/// Creates the schema's tables before the replicas race to.
async fn tables(schema: &pg::Schema) {
    drop(schema.connect(StoreConfig::default()).await);
}

/// Runs the workload, then checks it once the faults are off; prints the figures.
async fn run_and_check(
    label: &str,
    seed: u64,
    urls: &[String],
    faults_off: impl FnOnce(),
    proxies: &[&FaultProxy],
) -> faults::Report {
    let history = Arc::new(History::default());
    let report = faults::run(urls, WORKLOAD, Arc::clone(&history), seed).await;
    faults_off();
    let verdict = faults::assert_exactly_once(&urls[0], &report, &history).await;
    let counts: Vec<_> = proxies.iter().map(|proxy| proxy.counts()).collect();
    println!(
        "{label} (seed {seed}): {} operations, {} applied, {} stale_view, {} replayed, {} retried calls; \
         proxy {counts:?}; {verdict}",
        report.operations, report.applied, report.stale, report.replayed, report.retries
    );
    report
}

/// The proxy in front of the test database.
async fn database_proxy(schema: &pg::Schema, seed: u64) -> FaultProxy {
    FaultProxy::start(proxy::postgres_addr(&schema.url), Protocol::Postgres, seed).await
}

/// A proxy in front of each replica, each seeded from `seed`, and their URLs.
async fn http_proxies(replicas: &[Child], seed: u64) -> (Vec<FaultProxy>, Vec<String>) {
    let mut proxies = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        let addr = replica
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp");
        let seed = seed.wrapping_add(index as u64 + 1);
        proxies.push(FaultProxy::start(addr.parse().unwrap(), Protocol::Http, seed).await);
    }
    let urls = proxies
        .iter()
        .map(|proxy| format!("http://{}/mcp", proxy.addr))
        .collect();
    (proxies, urls)
}

fn set_all(proxies: &[&FaultProxy], faults: Faults) {
    for proxy in proxies {
        proxy.set(faults);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_lost_after_commit_between_replicas_and_postgres_apply_exactly_once() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    tables(&schema).await;
    let seed = faults::seed();
    let database = database_proxy(&schema, seed).await;
    let replicas = replicas(
        &database.postgres_url(&schema.url, "faults_commit"),
        &schema,
    );
    database.set(Faults::Cut {
        cut: 0.02,
        lose_answer: 0.2,
    });
    let proxies = [&database];
    let report = run_and_check(
        "answers lost after COMMIT",
        seed,
        &urls(&replicas),
        || set_all(&proxies, Faults::None),
        &proxies,
    )
    .await;
    let counts = database.counts();
    assert!(
        counts.lost_answers > 0 && counts.cut > 0,
        "no fault was injected: the test proved nothing"
    );
    assert!(
        report.replayed > 0,
        "no retry met a commit it did not hear of"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_lost_on_the_http_leg_apply_exactly_once() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    tables(&schema).await;
    let seed = faults::seed();
    let replicas = replicas(&schema.url, &schema);
    let (proxies, urls) = http_proxies(&replicas, seed).await;
    let proxies: Vec<&FaultProxy> = proxies.iter().collect();
    set_all(
        &proxies,
        Faults::Cut {
            cut: 0.03,
            lose_answer: 0.1,
        },
    );
    let report = run_and_check(
        "answers lost on the HTTP leg",
        seed,
        &urls,
        || set_all(&proxies, Faults::None),
        &proxies,
    )
    .await;
    let lost: u64 = proxies
        .iter()
        .map(|proxy| proxy.counts().lost_answers)
        .sum();
    assert!(lost > 0, "no answer was lost: the test proved nothing");
    assert!(
        report.replayed > 0,
        "no retry met a change it did not hear of"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_on_both_legs_reorders_calls_and_loses_nothing() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    tables(&schema).await;
    let seed = faults::seed();
    let database = database_proxy(&schema, seed).await;
    let replicas = replicas(
        &database.postgres_url(&schema.url, "faults_latency"),
        &schema,
    );
    let (http, urls) = http_proxies(&replicas, seed).await;
    database.set(Faults::Delay {
        max: Duration::from_millis(3),
    });
    let mut proxies: Vec<&FaultProxy> = http.iter().collect();
    set_all(
        &proxies,
        Faults::Delay {
            max: Duration::from_millis(6),
        },
    );
    proxies.push(&database);
    run_and_check(
        "latency and reordering",
        seed,
        &urls,
        || set_all(&proxies, Faults::None),
        &proxies,
    )
    .await;
    assert!(database.counts().delayed > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_terminated_mid_workload_lose_nothing() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    tables(&schema).await;
    let application = format!("faults_terminate_{}", schema.name);
    let replicas = replicas(
        &proxy::rewrite_postgres_url(&schema.url, None, &application),
        &schema,
    );
    let admin = schema.client().await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let terminator = tokio::spawn(async move {
        let mut terminated = 0u64;
        let mut every = tokio::time::interval(Duration::from_millis(150));
        loop {
            tokio::select! {
                _ = stopped.changed() => return terminated,
                _ = every.tick() => {
                    let rows = admin
                        .query(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                             WHERE application_name = $1",
                            &[&application],
                        )
                        .await
                        .unwrap();
                    terminated += rows.len() as u64;
                }
            }
        }
    });
    let history = Arc::new(History::default());
    let seed = faults::seed();
    let report = faults::run(&urls(&replicas), WORKLOAD, Arc::clone(&history), seed).await;
    stop.send(true).unwrap();
    let terminated = common::within("the terminator to stop", terminator)
        .await
        .unwrap();
    let verdict = faults::assert_exactly_once(&replicas[0].url, &report, &history).await;
    println!(
        "pg_terminate_backend every 150 ms (seed {seed}): {terminated} backends terminated; {} operations, \
         {} applied, {} stale_view, {} replayed, {} retried calls; {verdict}",
        report.operations, report.applied, report.stale, report.replayed, report.retries
    );
    assert!(
        terminated > 0,
        "no backend was terminated: the test proved nothing"
    );
    assert!(report.retries > 0, "no call met a terminated backend");
}
