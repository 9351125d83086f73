//! Bad input gets a clear typed error, never a panic, and nothing is sent twice: a corrupted or
//! foreign record file, a record of another server, an upstream that does not serve 2026-07-28.

use std::sync::atomic::Ordering;

use mcp_tools::MemoryStore;
use mcp_tools::client::{
    Client, ClientError, RecordError, ResumptionRecord, load_records, save_records,
};
use serde_json::json;

use crate::common::{TestServer, within};
use crate::support::{
    self, EarlierServer, ExampleServer, FaultProxy, basket_at_version_7, basket_server, example,
};

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "mcp-tools-client-{name}-{}-{}.json",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

/// A record of the basket server at version 7, saved to a file.
async fn saved_record() -> (TestServer, ResumptionRecord) {
    let server = TestServer::start(basket_server(MemoryStore::default())).await;
    let harness = support::harness(&server.url()).await;
    let handle = basket_at_version_7(&harness).await;
    (server, harness.record(&handle).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_or_foreign_records_file_is_refused_whole() {
    let (_server, record) = saved_record().await;
    let path = temp("records");
    save_records(&path, std::slice::from_ref(&record)).unwrap();
    assert_eq!(load_records(&path).unwrap(), std::slice::from_ref(&record));
    let text = std::fs::read_to_string(&path).unwrap();

    let cut = &text[..text.len() - 20];
    std::fs::write(&path, cut).unwrap();
    assert!(matches!(
        load_records(&path),
        Err(RecordError::Malformed(_))
    ));

    let altered = text.replace("\"basis_version\": 7", "\"basis_version\": -7");
    std::fs::write(&path, altered).unwrap();
    assert!(matches!(
        load_records(&path),
        Err(RecordError::Malformed(_))
    ));

    std::fs::write(&path, r#"{"tools": [], "ttlMs": 0}"#).unwrap();
    let foreign = load_records(&path).unwrap_err();
    assert!(matches!(foreign, RecordError::Malformed(_)), "{foreign}");
    assert!(
        foreign
            .to_string()
            .contains("not a file of resumption records"),
        "{foreign}"
    );

    std::fs::write(
        &path,
        text.replace("mcp-tools/resumption@1", "other/format@3"),
    )
    .unwrap();
    assert!(matches!(
        load_records(&path),
        Err(RecordError::Format { found }) if found == "other/format@3"
    ));

    std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
    assert!(matches!(
        load_records(&path),
        Err(RecordError::Io { .. } | RecordError::Malformed(_))
    ));
    let _ = std::fs::remove_file(&path);
    assert!(matches!(load_records(&path), Err(RecordError::Io { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_another_server_is_refused_before_anything_is_sent() {
    let (_basket, record) = saved_record().await;
    let quickstart = ExampleServer::start("quickstart", &[]).await;
    let proxy = FaultProxy::start(vec![
        format!("127.0.0.1:{}", quickstart.port).parse().unwrap(),
    ])
    .await;
    let harness = support::harness(&proxy.url()).await;
    let before = proxy.seen().len();
    let refused = within("resuming", harness.resume(&record))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            ClientError::Record(RecordError::OtherServer { recorded, connected })
                if recorded == "basket" && connected == "quickstart"
        ),
        "{refused}"
    );
    assert!(matches!(
        harness.remember(record.clone()),
        Err(ClientError::Record(RecordError::OtherServer { .. }))
    ));
    assert_eq!(proxy.seen().len(), before, "nothing sent");
}

/// A record of another deployment of the same server: its handle and validator mean nothing
/// here. The server's answer says so, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_another_deployment_is_refused_by_the_server_once() {
    let (_first, record) = saved_record().await;
    let second = TestServer::start(basket_server(MemoryStore::default())).await;
    let proxy = FaultProxy::start(vec![second.addr]).await;
    let harness = support::harness(&proxy.url()).await;
    let outcome = within("resuming", harness.resume(&record)).await;
    match outcome {
        Ok(mcp_tools::client::Resumed::Gone(rejected)) => assert_eq!(rejected.code, "NOT_FOUND"),
        Err(ClientError::Record(RecordError::BasisRefused { code, .. })) => {
            assert_eq!(code, "INVALID_VALIDATOR")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.seen_of("tools/call", None).len(), 1, "asked once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_of_an_earlier_revision_is_refused_once() {
    let earlier = EarlierServer::start().await;
    let refused = within("connecting", Client::builder().connect_http(&earlier.url()))
        .await
        .unwrap_err();
    match &refused {
        ClientError::Unsupported { reason, .. } => {
            assert!(reason.contains("server/discover"), "{reason}")
        }
        other => panic!("{other}"),
    }
    assert_eq!(earlier.requests.load(Ordering::SeqCst), 1, "asked once");

    // The drop-in harness exits with 2 and says why.
    let output = within(
        "the harness to exit",
        tokio::process::Command::new(example("quickstart"))
            .args(["harness", "--upstream", &earlier.url()])
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a 2026-07-28 server"), "{stderr}");
    assert_eq!(
        earlier.requests.load(Ordering::SeqCst),
        2,
        "once more, once"
    );

    // Nothing listens: a transport error that says nothing was sent.
    let port = crate::common::examples::free_port();
    let nobody = within(
        "connecting to nobody",
        Client::builder().connect_http(&format!("http://127.0.0.1:{port}/mcp")),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&nobody, ClientError::Transport(error) if error.kind == mcp_tools::client::TransportErrorKind::Connect),
        "{nobody}"
    );
    let bad_url = within(
        "a URL that is not one",
        Client::builder().connect_http("ftp://x"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(bad_url, ClientError::InvalidRequest(_)),
        "{bad_url}"
    );
}

/// A server that refuses the version (`-32022`): asked once when it does not list 2026-07-28,
/// and once more, no more, when it lists it and refuses it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_version_is_asked_again_only_when_the_server_lists_it() {
    let older = EarlierServer::answering(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2025-11-25"],"requested":"2026-07-28"}}}"#,
    )
    .await;
    let refused = within("connecting", Client::builder().connect_http(&older.url()))
        .await
        .unwrap_err();
    match &refused {
        ClientError::Unsupported { supported, .. } => assert_eq!(supported, &["2025-11-25"]),
        other => panic!("{other}"),
    }
    assert_eq!(older.requests.load(Ordering::SeqCst), 1, "asked once");

    let contradictory = EarlierServer::answering(
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2026-07-28"}}}"#,
    )
    .await;
    let refused = within(
        "connecting",
        Client::builder().connect_http(&contradictory.url()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&refused, ClientError::Unsupported { .. }),
        "{refused}"
    );
    assert_eq!(
        contradictory.requests.load(Ordering::SeqCst),
        2,
        "asked again once"
    );
}

/// The drop-in harness refuses to start on a records file it cannot use, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drop_in_harness_refuses_a_records_file_it_cannot_use() {
    let (basket, record) = saved_record().await;
    let quickstart = ExampleServer::start("quickstart", &[]).await;
    let path = temp("dropin-records");
    for (contents, upstream, says) in [
        (
            "{\"format\": \"mcp-tools/resumption@1\", \"records\": [{}]}".to_owned(),
            basket.url(),
            "not a resumption record",
        ),
        ("garbage".to_owned(), basket.url(), "not JSON"),
        (
            serde_json::to_string(
                &json!({ "format": "mcp-tools/resumption@1", "records": [record] }),
            )
            .unwrap(),
            quickstart.url.clone(),
            "server \"basket\"",
        ),
    ] {
        std::fs::write(&path, contents).unwrap();
        let output = within(
            "the harness to exit",
            tokio::process::Command::new(example("quickstart"))
                .args(["harness", "--upstream", &upstream, "--records"])
                .arg(&path)
                .stdin(std::process::Stdio::null())
                .output(),
        )
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    let _ = std::fs::remove_file(&path);
}
