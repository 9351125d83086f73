//! Resumption records across a restart: a worker process reads a basket and saves its record;
//! new processes load the record and resume from it against the server's read-since-basis:
//! `Unchanged`, then `Changed` with exactly what another agent changed, then `Expired` once the
//! basket outlived its time to live.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcp_tools::MemoryStore;
use mcp_tools::client::{Outcome, Resumed, load_records, save_records};
use mcp_tools::store::{ManualClock, StoreConfig};
use serde_json::{Value, json};

use crate::common::TestServer;
use crate::support::{self, basket_at_version_7, basket_server, call, run_child};

const CHILD: &str = concat!(
    module_path!(),
    "::a_child_process_saves_or_resumes_a_record"
);

const URL: &str = "MCP_TOOLS_TEST_RESUME_URL";
const RECORDS: &str = "MCP_TOOLS_TEST_RESUME_RECORDS";
const PHASE: &str = "MCP_TOOLS_TEST_RESUME_PHASE";
const HANDLE: &str = "MCP_TOOLS_TEST_RESUME_HANDLE";

/// The body of a worker process: `save` reads the basket and saves its record, `resume` loads
/// the record and resumes from it; each prints what it got as a `RESULT` line. Does nothing
/// unless a parent test started it.
#[test]
#[ignore = "runs only as a child process of the resumption tests"]
fn a_child_process_saves_or_resumes_a_record() {
    let (Ok(url), Ok(records), Ok(phase), Ok(handle)) = (
        std::env::var(URL),
        std::env::var(RECORDS),
        std::env::var(PHASE),
        std::env::var(HANDLE),
    ) else {
        return;
    };
    let records = PathBuf::from(records);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(async {
        let harness = support::harness(&url).await;
        match phase.as_str() {
            "save" => {
                let read = call(&harness, "basket_get", json!({ "basket_id": handle })).await;
                assert!(matches!(read, Outcome::Current(_)), "{read:?}");
                let record = harness
                    .record(&handle)
                    .expect("what was read is recorded")
                    .with_next_operation("compare_configurations");
                save_records(&records, std::slice::from_ref(&record)).unwrap();
                json!({ "saved": record.basis_version })
            }
            "resume" => {
                let record = load_records(&records).unwrap().remove(0);
                assert_eq!(
                    record.next_operation.as_deref(),
                    Some("compare_configurations")
                );
                let resumed = crate::common::within("resuming", harness.resume(&record)).await;
                match resumed {
                    Ok(Resumed::Unchanged(current)) => {
                        json!({ "resumed": "unchanged", "version": current.version })
                    }
                    Ok(Resumed::Changed {
                        since,
                        delta,
                        current,
                    }) => json!({
                        "resumed": "changed",
                        "since": since,
                        "version": current.version,
                        "delta": delta,
                    }),
                    Ok(Resumed::Expired(rejected)) => {
                        json!({ "resumed": "expired", "code": rejected.code })
                    }
                    Ok(Resumed::Gone(rejected)) => {
                        json!({ "resumed": "gone", "code": rejected.code })
                    }
                    Ok(other) => json!({ "resumed": format!("{other:?}") }),
                    Err(error) => json!({ "error": error.to_string() }),
                }
            }
            other => panic!("no phase {other}"),
        }
    });
    println!("RESULT {result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_resumes_unchanged_then_changed_then_expired() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let clock = ManualClock::at_millis(i64::try_from(now).unwrap());
    let store = MemoryStore::new(StoreConfig {
        clock: Arc::new(clock.clone()),
        ..StoreConfig::default()
    });
    let server = TestServer::start(basket_server(store)).await;
    let url = server.url();
    let owner = support::harness(&url).await;
    let handle = basket_at_version_7(&owner).await;
    let records = std::env::temp_dir().join(format!(
        "mcp-tools-client-records-{}-{now}.json",
        std::process::id()
    ));
    let child = |phase: &'static str| {
        let env = [
            (URL, url.clone()),
            (RECORDS, records.to_str().unwrap().to_owned()),
            (PHASE, phase.to_owned()),
            (HANDLE, handle.clone()),
        ];
        async move {
            // The child's wait blocks: off the runtime that serves the basket.
            let results = tokio::task::spawn_blocking(move || {
                let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
                run_child(CHILD, &env)
            })
            .await
            .unwrap();
            assert_eq!(results.len(), 1, "one RESULT: {results:?}");
            results.into_iter().next().unwrap()
        }
    };

    assert_eq!(child("save").await, json!({ "saved": 7 }));
    let saved = load_records(&records).unwrap();
    assert_eq!(saved[0].handle, handle);
    assert!(saved[0].validator.is_some());

    assert_eq!(
        child("resume").await,
        json!({ "resumed": "unchanged", "version": 7 })
    );

    let upgraded = call(
        &owner,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 32 }),
    )
    .await;
    assert!(matches!(upgraded, Outcome::Applied(_)), "{upgraded:?}");
    let changed: Value = child("resume").await;
    assert_eq!(
        changed,
        json!({
            "resumed": "changed",
            "since": 7,
            "version": 8,
            "delta": [{ "path": "/memory_gib", "before": 16, "after": 32 }],
        })
    );

    // The time to live, and the minute an expiry is rounded up to.
    clock.advance(Duration::from_secs(86_400 + 120));
    assert_eq!(
        child("resume").await,
        json!({ "resumed": "expired", "code": "EXPIRED" })
    );
    let _ = std::fs::remove_file(&records);
}

/// A record whose resource is gone resumes `Gone`; a record the caller takes back is what the
/// next change is based on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_taken_back_is_the_basis_of_the_next_change() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let first = support::harness(&server.url()).await;
    let handle = basket_at_version_7(&first).await;
    let record = first.record(&handle).expect("recorded");
    assert_eq!(record.basis_version, 7);

    let second = support::harness(&server.url()).await;
    second.remember(record.clone()).unwrap();
    let noted = call(
        &first,
        "basket_add_note",
        json!({ "basket_id": handle, "text": "8" }),
    )
    .await;
    assert!(matches!(noted, Outcome::Applied(_)));
    let stale = call(
        &second,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 32 }),
    )
    .await;
    assert!(
        matches!(&stale, Outcome::StaleView(stale) if stale.expected_version == 7),
        "{stale:?}"
    );

    let mut gone = record.clone();
    gone.handle = "bsk_00000000000000000000000000".into();
    gone.validator = None;
    let resumed = crate::common::within("resuming", second.resume(&gone))
        .await
        .unwrap();
    assert!(
        matches!(&resumed, Resumed::Gone(rejected) if rejected.code == "NOT_FOUND"),
        "{resumed:?}"
    );
}
