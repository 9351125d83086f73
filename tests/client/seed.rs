//! The schedule of the lost-update story, through two harnesses: agents A and B both read the
//! basket at version 7; A upgrades the memory; B, planning from version 7, sends a complete
//! configuration with more storage and the old memory. Neither agent names a version: the
//! harnesses supply what each was shown. B's write comes back `stale_view` with the delta, never
//! a lost update, and after re-planning from what it was shown, the basket holds both intents.

use mcp_tools::MemoryStore;
use mcp_tools::client::{Client, Harness, Outcome};
use mcp_tools::store::FieldChange;
use serde_json::json;

use crate::common::{TestServer, within};
use crate::support::{self, basket_at_version_7, basket_server, call, example};

/// The schedule on harnesses `a` and `b`, which share one basket server; `reader` reads the
/// final basket.
async fn schedule(a: &Harness, b: &Harness, reader: &Harness) {
    let handle = basket_at_version_7(a).await;
    let get = json!({ "basket_id": handle });
    for (who, harness) in [("A", a), ("B", b)] {
        let Outcome::Current(read) = call(harness, "basket_get", get.clone()).await else {
            panic!("{who} could not read the basket");
        };
        assert_eq!(read.version, 7, "{who} reads version 7");
        assert_eq!(
            (
                read.state["memory_gib"].as_u64(),
                read.state["storage_gib"].as_u64()
            ),
            (Some(16), Some(512))
        );
    }

    let write_a = call(
        a,
        "basket_replace_configuration",
        json!({ "basket_id": handle, "memory_gib": 32, "storage_gib": 512 }),
    )
    .await;
    let Outcome::Applied(applied) = write_a else {
        panic!("A's write: {write_a:?}");
    };
    assert_eq!(applied.version, 8);

    let write_b = call(
        b,
        "basket_replace_configuration",
        json!({ "basket_id": handle, "memory_gib": 16, "storage_gib": 1024 }),
    )
    .await;
    let Outcome::StaleView(stale) = write_b else {
        panic!("B's stale write must be refused, not applied: {write_b:?}");
    };
    assert_eq!((stale.expected_version, stale.current_version), (7, 8));
    assert_eq!(
        stale.delta,
        [FieldChange {
            path: "/memory_gib".into(),
            before: Some(json!(16)),
            after: Some(json!(32)),
        }]
    );
    assert_eq!(stale.current_state["memory_gib"], 32);
    println!(
        "B's write planned from version 7 was refused: the basket is at version {}, changed: {:?}",
        stale.current_version, stale.delta
    );

    // B re-plans from what the refusal showed it: its storage intent on the current memory.
    let replanned = call(
        b,
        "basket_replace_configuration",
        json!({
            "basket_id": handle,
            "memory_gib": stale.current_state["memory_gib"],
            "storage_gib": 1024,
        }),
    )
    .await;
    let Outcome::Applied(replanned) = replanned else {
        panic!("B's re-planned write: {replanned:?}");
    };
    assert_eq!(replanned.version, 9);

    let Outcome::Current(last) = call(reader, "basket_get", get).await else {
        panic!("the final read");
    };
    assert_eq!(last.version, 9);
    assert_eq!(last.state["memory_gib"], 32, "A's intent");
    assert_eq!(last.state["storage_gib"], 1024, "B's intent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_schedule_over_http_is_a_stale_view_not_a_lost_update() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let url = server.url();
    let (a, b, reader) = (
        support::harness(&url).await,
        support::harness(&url).await,
        support::harness(&url).await,
    );
    schedule(&a, &b, &reader).await;
}

/// The same schedule with each agent running its own basket server process over stdio, the
/// two sharing one SQLite file (and the signing key made next to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_schedule_over_stdio_with_two_server_processes() {
    let db = std::env::temp_dir().join(format!(
        "mcp-tools-client-seed-{}-{}.db",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let db_arg = db.to_str().unwrap().to_owned();
    // One process first, so the signing key file is made once.
    let mut harnesses = Vec::new();
    for _ in 0..3 {
        let client = within(
            "starting a basket server over stdio",
            Client::builder().connect_stdio(example("basket"), ["--db", &db_arg, "--stdio"]),
        )
        .await
        .unwrap();
        harnesses.push(Harness::new(client));
    }
    schedule(&harnesses[0], &harnesses[1], &harnesses[2]).await;
    drop(harnesses);
    for suffix in ["", "-wal", "-shm", ".key"] {
        let mut path = db.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
}

/// The `harness` example replays the schedule, a lost answer and a resumption, in process and
/// against the basket example as a process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_example_replays_the_story() {
    let basket = crate::support::ExampleServer::start("basket", &["--memory"]).await;
    for upstream in [None, Some(basket.url.clone())] {
        let mut command = tokio::process::Command::new(example("harness"));
        if let Some(upstream) = &upstream {
            command.args(["--upstream", upstream]);
        }
        let output = within("the example", command.kill_on_drop(true).output())
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{upstream:?}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in [
            "write B -> refused, stale view: planned on v7, the basket is at v8; changed since: /memory_gib 16 -> 32 (recovery: refresh_and_replan)",
            "applied: v9 { memory: 32 GiB, storage: 1024 GiB }: both intents kept",
            "replayed (recorded at",
            "the basket holds the note 1 time(s), at v10",
            "resume  -> unchanged: still v10, the plan holds",
            "resume  -> changed since v10, now v11: /memory_gib 32 -> 64; re-plan before acting",
        ] {
            assert!(
                stdout.contains(line),
                "{upstream:?}: no {line:?} in\n{stdout}"
            );
        }
    }
}
