//! Answers lost after the server committed: a proxy in front of two replicas lets a change
//! through, drops its answer once the server sent it, and sends the next connection to the
//! other replica. The harness sends the same call again, with the same operation id and the
//! same arguments: the answer is `replayed`, and the change is applied once, as the basket
//! itself shows. On SQLite (two servers on one file) and on PostgreSQL (two servers on one
//! database).

use std::net::SocketAddr;

use mcp_tools::client::{Harness, Outcome};
use mcp_tools::store::{RecordedOutcome, StoreConfig};
use mcp_tools::{MemoryStore, SqliteStore};
use serde_json::{Value, json};

use crate::common::TestServer;
use crate::pg;
use crate::support::{self, FaultProxy, Loss, Seen, basket_server, call};

/// Runs the lost answers through `proxy` (in front of `replicas`); `direct` reads a replica
/// without the proxy.
async fn lose_answers(proxy: &FaultProxy, direct: &str, replicas: usize) {
    let harness: Harness = support::harness(&proxy.url()).await;

    // A lost create: the retry is replayed with the handle minted the first time.
    proxy.lose_answers(1);
    let created = call(&harness, "basket_create", json!({})).await;
    let Outcome::Replayed(replayed) = created else {
        panic!("a create whose answer was lost comes back replayed: {created:?}");
    };
    let RecordedOutcome::Applied(original) = &replayed.original else {
        panic!("the original create was applied: {replayed:?}");
    };
    let handle = original.handle.clone();
    assert_eq!(original.version, 1);
    assert_eq!(proxy.lost(), 1);
    let sent = proxy.seen_of("tools/call", Some("basket_create"));
    assert_eq!(sent.len(), 2, "the lost create and its retry");
    same_call(&sent[0], &sent[1]);

    let Outcome::Current(read) = call(&harness, "basket_get", json!({ "basket_id": handle })).await
    else {
        panic!("the basket reads");
    };
    assert_eq!(read.version, 1);

    // A lost change based on what was read: replayed, applied once.
    let before = proxy
        .seen_of("tools/call", Some("basket_replace_configuration"))
        .len();
    proxy.lose_answers(1);
    let changed = call(
        &harness,
        "basket_replace_configuration",
        json!({ "basket_id": handle, "memory_gib": 24, "storage_gib": 512 }),
    )
    .await;
    let Outcome::Replayed(replayed) = changed else {
        panic!("a change whose answer was lost comes back replayed: {changed:?}");
    };
    assert!(
        matches!(&replayed.original, RecordedOutcome::Applied(applied) if applied.version == 2)
    );
    assert_eq!(
        replayed.current.as_ref().map(|current| current.version),
        Some(2)
    );
    let sent = proxy.seen_of("tools/call", Some("basket_replace_configuration"));
    assert_eq!(
        sent.len() - before,
        2,
        "sent twice: the lost one and its retry"
    );
    let (first, retry) = (&sent[sent.len() - 2], &sent[sent.len() - 1]);
    same_call(first, retry);
    if replicas > 1 {
        assert_ne!(
            first.replica, retry.replica,
            "the retry lands on the other replica"
        );
    }

    // A lost note, which takes no version: replayed, appended once.
    proxy.lose_answers(1);
    let noted = call(
        &harness,
        "basket_add_note",
        json!({ "basket_id": handle, "text": "once" }),
    )
    .await;
    assert!(matches!(noted, Outcome::Replayed(_)), "{noted:?}");
    assert_eq!(proxy.lost(), 3);
    let sent = proxy.seen_of("tools/call", Some("basket_add_note"));
    same_call(&sent[sent.len() - 2], &sent[sent.len() - 1]);

    // Counted on the server: each change applied exactly once.
    let basket = support::current(direct, &handle).await;
    assert_eq!(
        basket.version, 3,
        "create, change, note: three versions, no more"
    );
    assert_eq!(basket.state["memory_gib"], 24);
    assert_eq!(support::notes(&basket.state), ["once"]);
    println!(
        "{} answers lost, each change applied once; the basket is at version {}",
        proxy.lost(),
        basket.version
    );
}

/// A retry is the lost call again: the same arguments (the operation id minted for it
/// included) and the same basis in `_meta`.
fn same_call(lost: &Seen, retry: &Seen) {
    let (lost, retry) = (lost.body(), retry.body());
    let id = &lost["params"]["arguments"]["operation_id"];
    assert!(id.is_string(), "the harness minted an operation id: {lost}");
    assert_eq!(
        lost["params"]["arguments"], retry["params"]["arguments"],
        "a retry never changes arguments"
    );
    let validator = |body: &Value| body["params"]["_meta"]["io.github.mcp-tools/validator"].clone();
    assert_eq!(validator(&lost), validator(&retry), "nor the basis");
}

fn addr(server: &TestServer) -> SocketAddr {
    server.addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_retried_once_and_applied_once_on_one_server() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![addr(&server)]).await;
    lose_answers(&proxy, &server.url(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_retried_on_the_other_sqlite_replica_and_applied_once() {
    let path = std::env::temp_dir().join(format!(
        "mcp-tools-client-lost-{}-{}.db",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let one = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let two = SqliteStore::open(&path, StoreConfig::default()).unwrap();
    let one = TestServer::start(basket_server(one)).await;
    let two = TestServer::start(basket_server(two)).await;
    let proxy = FaultProxy::start(vec![addr(&one), addr(&two)]).await;
    lose_answers(&proxy, &one.url(), 2).await;
    drop((proxy, one, two));
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_retried_on_the_other_postgres_replica_and_applied_once() {
    let Some(schema) = pg::Schema::new() else {
        return;
    };
    let one = schema.connect(StoreConfig::default()).await;
    let two = schema.connect(StoreConfig::default()).await;
    let one = TestServer::start(basket_server(one)).await;
    let two = TestServer::start(basket_server(two)).await;
    let proxy = FaultProxy::start(vec![addr(&one), addr(&two)]).await;
    lose_answers(&proxy, &one.url(), 2).await;
}

/// Every way of losing an answer the harness retries: a connection reset, a gateway's `502`, no
/// answer before the client's timeout, and `STORE_UNAVAILABLE` in its place. Each note is sent
/// twice with the same operation id, comes back replayed, and is there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_lost_answer_is_retried_once_and_applied_once() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![addr(&server)]).await;
    let client = crate::common::within(
        "connecting",
        mcp_tools::client::Client::builder()
            .timeout(Some(std::time::Duration::from_millis(800)))
            .connect_http(&proxy.url()),
    )
    .await
    .unwrap();
    let harness = Harness::new(client);
    let Outcome::Applied(created) = call(&harness, "basket_create", json!({})).await else {
        panic!("created");
    };
    let losses = [
        Loss::Drop,
        Loss::BadGateway,
        Loss::Hold,
        Loss::StoreUnavailable,
    ];
    for loss in losses {
        proxy.lose_answers_as(1, loss);
        let text = format!("{loss:?}");
        let note = json!({ "basket_id": created.handle, "text": text });
        let noted = call(&harness, "basket_add_note", note).await;
        assert!(matches!(noted, Outcome::Replayed(_)), "{loss:?}: {noted:?}");
        let sent = proxy.seen_of("tools/call", Some("basket_add_note"));
        same_call(&sent[sent.len() - 2], &sent[sent.len() - 1]);
    }
    assert_eq!(proxy.lost(), losses.len());
    assert_eq!(
        proxy.seen_of("tools/call", Some("basket_add_note")).len(),
        2 * losses.len(),
        "each sent twice: the lost one and its retry"
    );
    let basket = support::current(&server.url(), &created.handle).await;
    assert_eq!(
        support::notes(&basket.state),
        ["Drop", "BadGateway", "Hold", "StoreUnavailable"],
        "each applied once"
    );
    assert_eq!(basket.version, 1 + losses.len() as u64);
}

/// The proof that the harness is what makes it once: the same lost answer, seen by the plain
/// client and sent again with a new operation id (what a caller that does not keep the id
/// does), applies the change twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_same_operation_id_a_retry_applies_twice() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![addr(&server)]).await;
    let harness = support::harness(&proxy.url()).await;
    let Outcome::Applied(created) = call(&harness, "basket_create", json!({})).await else {
        panic!("created");
    };
    proxy.lose_answers(1);
    let note = json!({ "basket_id": created.handle, "text": "twice" });
    let mut lost = note.clone();
    lost["operation_id"] = json!(uuid());
    let first = crate::common::within(
        "a call whose answer is lost",
        harness.client().call_tool("basket_add_note", lost),
    )
    .await;
    assert!(
        first.unwrap_err().is_retryable(),
        "the plain client reports the lost answer"
    );
    let mut again = note.clone();
    again["operation_id"] = json!(uuid());
    assert!(matches!(
        call(&harness, "basket_add_note", again).await,
        Outcome::Applied(_)
    ));
    let basket = support::current(&server.url(), &created.handle).await;
    assert_eq!(support::notes(&basket.state), ["twice", "twice"]);
}

fn uuid() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
