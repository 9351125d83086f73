//! The basis rule: a harness bases a change the caller gave no basis for on the version of the
//! resource the caller was last shown (its validator, sent in `_meta`), and never on one it was
//! not shown. A harness that never saw the resource sends no basis and the server's own rule
//! decides; one that saw version 7 sends 7 even after another harness advanced the resource
//! to 9.

use mcp_tools::MemoryStore;
use mcp_tools::client::Outcome;
use serde_json::json;

use crate::common::TestServer;
use crate::support::{self, FaultProxy, basket_at_version_7, basket_server, call};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_never_saw_the_resource_sends_no_basis() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![server.addr]).await;
    let owner = support::harness(&server.url()).await;
    let handle = basket_at_version_7(&owner).await;

    let stranger = support::harness(&proxy.url()).await;
    let upgrade = json!({ "basket_id": handle, "memory_gib": 32 });
    let refused = call(&stranger, "basket_upgrade_memory", upgrade).await;
    let Outcome::Rejected(rejected) = refused else {
        panic!("without a basis the server refuses the change: {refused:?}");
    };
    assert_eq!(rejected.code, "INVALID_ARGUMENTS");
    assert!(
        rejected.message.contains("expected_version"),
        "{}",
        rejected.message
    );
    let sent = proxy.seen_of("tools/call", Some("basket_upgrade_memory"));
    assert_eq!(sent.len(), 1, "refused, not retried");
    assert!(!sent[0].text.contains("expected_version"));
    assert!(!sent[0].text.contains("io.github.mcp-tools/validator"));
    assert!(
        sent[0].text.contains("\"operation_id\""),
        "the id is minted all the same"
    );

    // A change that takes no version needs none.
    let noted = call(
        &stranger,
        "basket_add_note",
        json!({ "basket_id": handle, "text": "from a stranger" }),
    )
    .await;
    assert!(matches!(noted, Outcome::Applied(_)), "{noted:?}");
    assert_eq!(
        support::current(&server.url(), &handle).await.state["memory_gib"],
        16
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_saw_version_7_sends_7_after_another_advanced_it() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![server.addr]).await;
    let seen = support::harness(&proxy.url()).await;
    let other = support::harness(&server.url()).await;
    let handle = basket_at_version_7(&other).await;

    let Outcome::Current(read) = call(&seen, "basket_get", json!({ "basket_id": handle })).await
    else {
        panic!("read");
    };
    assert_eq!(read.version, 7);
    let validator = read
        .resumption
        .validator
        .clone()
        .expect("the server issues validators");
    for note in ["eight", "nine"] {
        let noted = call(
            &other,
            "basket_add_note",
            json!({ "basket_id": handle, "text": note }),
        )
        .await;
        assert!(matches!(noted, Outcome::Applied(_)));
    }

    let stale = call(
        &seen,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 32 }),
    )
    .await;
    let Outcome::StaleView(stale) = stale else {
        panic!("based on 7, the change is refused: {stale:?}");
    };
    assert_eq!((stale.expected_version, stale.current_version), (7, 9));
    let sent = proxy.seen_of("tools/call", Some("basket_upgrade_memory"));
    assert!(
        sent[0].text.contains(&validator),
        "the validator of version 7 is sent: {}",
        sent[0].text
    );
    assert!(
        !sent[0].text.contains("expected_version"),
        "in `_meta`, the arguments untouched"
    );

    // What the refusal showed is what the caller saw: the next change is based on 9.
    let Outcome::Applied(applied) = call(
        &seen,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 32 }),
    )
    .await
    else {
        panic!("based on what the refusal showed, the change applies");
    };
    assert_eq!(applied.version, 10);

    // A basis the caller gives is the caller's: sent as it is.
    let explicit = call(
        &seen,
        "basket_upgrade_memory",
        json!({ "basket_id": handle, "memory_gib": 48, "expected_version": 7 }),
    )
    .await;
    assert!(
        matches!(&explicit, Outcome::StaleView(stale) if stale.expected_version == 7),
        "{explicit:?}"
    );
}

/// A rebasing tool shows the basis too: its change is re-applied on the current version, from
/// the version the caller saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebased_change_names_the_version_the_caller_saw() {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let seen = support::harness(&server.url()).await;
    let handle = basket_at_version_7(&seen).await;
    let Outcome::Current(_) = call(&seen, "basket_get", json!({ "basket_id": handle })).await
    else {
        panic!("read");
    };
    let other = support::harness(&server.url()).await;
    let noted = call(
        &other,
        "basket_add_note",
        json!({ "basket_id": handle, "text": "x" }),
    )
    .await;
    assert!(matches!(noted, Outcome::Applied(_)));
    let rebased = call(
        &seen,
        "basket_upgrade_storage",
        json!({ "basket_id": handle, "storage_gib": 1024 }),
    )
    .await;
    let Outcome::Applied(applied) = rebased else {
        panic!("{rebased:?}");
    };
    assert_eq!(applied.rebased_from, Some(7));
    assert_eq!(applied.version, 9);
}
