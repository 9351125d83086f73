//! The basket example as its users run it, with `--issuer --audience --jwks-url`: a real process,
//! a test authorization server on loopback, tokens with and without the basket scopes.

use crate::common;

use std::process::{Command, Stdio};

use common::examples::{self, Process, free_port};
use common::oauth::Issuer;
use common::{Call, Reply, assert_conforms, within};
use serde_json::json;

async fn start(issuer: &Issuer, audience: &str, port: u16) -> Process {
    let server = Process(
        Command::new(examples::binary("basket"))
            .args(["--memory", "--bind", &format!("127.0.0.1:{port}")])
            .args(["--issuer", &issuer.url, "--audience", audience])
            .args(["--jwks-url", &issuer.jwks_url()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    examples::healthy(port).await;
    server
}

fn bearer(call: Call, token: &str) -> Call {
    call.header("authorization", &format!("Bearer {token}"))
}

fn challenge(reply: &Reply) -> String {
    reply.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_basket_flags_make_an_oauth_resource_server_with_read_and_write_scopes() {
    let issuer = Issuer::start().await;
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let _server = start(&issuer, &audience, port).await;
    let url = audience.clone();
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");

    let metadata: serde_json::Value = within("the metadata", async {
        common::client()
            .get(&metadata_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(metadata["resource"], audience);
    assert_eq!(metadata["authorization_servers"], json!([issuer.url]));
    assert_eq!(
        metadata["scopes_supported"],
        json!(["basket:read", "basket:write"])
    );

    let create = Call::call_tool(
        "basket_create",
        json!({ "operation_id": "9b2f4c1e-7d3a-4e8b-a6f5-0c1d2e3f4a5b" }),
    );
    let anonymous = create.send_to(&url).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.text);
    assert_eq!(
        challenge(&anonymous),
        format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"basket:write\"")
    );
    assert_conforms("JSONRPCErrorResponse", &anonymous.json());

    let mint = |scopes: &str| {
        let mut claims = issuer.claims("ann", scopes);
        claims.insert("aud".into(), json!(audience));
        common::oauth::sign(common::oauth::Key::RsaA, &claims)
    };
    let reader = mint("basket:read");
    let refused = bearer(create.clone(), &reader).send_to(&url).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(
        challenge(&refused)
            .starts_with("Bearer error=\"insufficient_scope\", scope=\"basket:write\""),
        "{}",
        challenge(&refused)
    );

    // `basket:write` also grants `basket:read`, so one token creates and reads.
    let writer = mint("basket:write");
    let created = bearer(create, &writer).send_to(&url).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let handle = created.json()["result"]["structuredContent"]["handle"].clone();
    assert!(
        handle.as_str().is_some_and(|h| h.starts_with("bsk_")),
        "{}",
        created.text
    );
    let read = bearer(
        Call::call_tool("basket_get", json!({ "basket_id": handle })),
        &writer,
    )
    .send_to(&url)
    .await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(
        read.json()["result"]["structuredContent"]["outcome"],
        "current"
    );
    // The reader may read it too only if it is the same principal: it is (same issuer, same sub).
    let by_reader = bearer(
        Call::call_tool("basket_get", json!({ "basket_id": handle })),
        &reader,
    )
    .send_to(&url)
    .await;
    assert_eq!(
        by_reader.json()["result"]["structuredContent"]["outcome"],
        "current"
    );
}

#[test]
fn oauth_needs_all_three_flags() {
    let output = Command::new(examples::binary("basket"))
        .args(["--memory", "--issuer", "https://auth.example.com"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--audience <URI>") && stderr.contains("--jwks-url <URL>"),
        "{stderr}"
    );
}
