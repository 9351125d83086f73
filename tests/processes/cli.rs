//! The standard command line of `mcp_tools::cli`, as users run it: the example binaries as real
//! processes, their output and exit statuses.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::examples::{self, Process, free_port};
use common::{assert_conforms, within};
use mcp_tools::contract::Contract;
use serde_json::{Value, json};

fn run(example: &str, args: &[&str]) -> Output {
    Command::new(examples::binary(example))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn committed(example: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/contracts")
        .join(format!("{example}.json"));
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn schema_prints_the_contract_every_tool_of_which_is_a_valid_tool() {
    for example in ["quickstart", "basket"] {
        let output = run(example, &["schema"]);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = stdout(&output);
        assert_eq!(text, committed(example), "the committed {example} contract");
        let contract = Contract::parse(&text).unwrap();
        assert!(!contract.tools().is_empty());
        for tool in contract.tools() {
            assert_conforms("Tool", tool);
        }
        let document: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(document["formatVersion"], 1);
    }
}

#[test]
fn schema_and_docs_write_to_a_file_with_out() {
    let dir = tempdir();
    let schema = dir.join("contract.json");
    let docs = dir.join("tools.md");
    let output = run("basket", &["schema", "--out", schema.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(output.stdout.is_empty());
    assert_eq!(
        std::fs::read_to_string(&schema).unwrap(),
        committed("basket")
    );
    let output = run("basket", &["docs", "--out", docs.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let page = std::fs::read_to_string(&docs).unwrap();
    assert!(page.starts_with("# Tools\n") && page.contains("## `basket_add_note`"));
}

#[test]
fn describing_commands_open_no_store() {
    let dir = tempdir();
    let db = dir.join("never.db");
    for args in [&["schema"][..], &["docs"], &["list"]] {
        let output = Command::new(examples::binary("basket"))
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    }
    assert!(!db.exists());
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing was created in the working directory (the default basket.db included)"
    );
}

#[test]
fn docs_to_a_closed_pipe_end_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    // The reader is gone before the first byte is written, so every write fails with EPIPE.
    drop(reader);
    let output = Command::new(examples::binary("basket"))
        .arg("docs")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        output.stderr.is_empty(),
        "no panic, no error: {}",
        stderr(&output)
    );
}

#[test]
fn list_prints_each_tool_with_its_summary() {
    let output = run("quickstart", &["list"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "add     Adds two integers and returns their sum.");
    assert!(lines[1].starts_with("echo    Returns the given text unchanged."));
    assert!(lines[2].starts_with("whoami  "));
}

#[test]
fn an_unknown_argument_is_a_usage_error() {
    for args in [
        &["--frobnicate"][..],
        &["call"],
        &["serve", "--bind"],
        &["contract"],
    ] {
        let output = run("quickstart", args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stdout(&output)
        );
        let text = stderr(&output);
        assert!(
            text.contains("Usage:") || text.contains("--help"),
            "{args:?}: {text}"
        );
        assert!(output.stdout.is_empty(), "nothing was served or printed");
    }
}

/// A PostgreSQL store that cannot be opened stops the server before it serves, with exit
/// status 2 and the cause on standard error: a database nobody listens for, a connection string
/// it cannot use, and options that exclude each other.
#[test]
fn an_unusable_postgres_option_says_why() {
    let port = free_port();
    let unreachable = format!("postgres://nobody@127.0.0.1:{port}/db?connect_timeout=5");
    let create = r#"{"operation_id": "cli-unreachable-000000000001"}"#;
    for (args, cause) in [
        (
            vec![
                "call",
                "basket_create",
                create,
                "--postgres",
                unreachable.as_str(),
            ],
            "Connection refused",
        ),
        (
            vec![
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--postgres",
                "host=h sslmode=sometimes",
            ],
            "sslmode \"sometimes\"",
        ),
        (
            vec!["serve", "--memory", "--postgres", unreachable.as_str()],
            "cannot be used with",
        ),
    ] {
        let output = run("basket", &args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let text = stderr(&output);
        assert!(text.contains(cause), "{args:?}: {text}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: nothing was served or printed"
        );
    }
}

#[test]
fn contract_check_passes_on_the_committed_file_and_fails_on_a_changed_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("examples/contracts/basket.json");
    let output = run("basket", &["contract", "check", file.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(stdout(&output).contains("matches the code's contract"));

    // The committed contract with an argument the code no longer has: the code removed it.
    let mut document: Value = serde_json::from_str(&committed("basket")).unwrap();
    let tools = document["tools"].as_array_mut().unwrap();
    let note = tools
        .iter_mut()
        .find(|tool| tool["name"] == "basket_add_note")
        .unwrap();
    note["inputSchema"]["properties"]["tag"] = json!({"type": "string"});
    note["description"] = json!("Appends a note.");
    let dir = tempdir();
    let changed = dir.join("basket.json");
    std::fs::write(&changed, serde_json::to_string_pretty(&document).unwrap()).unwrap();
    let output = run("basket", &["contract", "check", changed.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.contains("breaking"), "{text}");
    assert!(text.contains("basket_add_note"), "{text}");
    assert!(
        text.contains("schema --out"),
        "says how to regenerate it: {text}"
    );

    let output = run(
        "basket",
        &[
            "contract",
            "check",
            changed.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(report["breaking"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["cosmetic"].as_u64().unwrap() >= 1, "{report}");
}

#[test]
fn contract_check_refuses_what_is_not_a_contract() {
    let dir = tempdir();
    let file = dir.join("broken.json");
    std::fs::write(&file, "{\"tools\": [").unwrap();
    let output = run("quickstart", &["contract", "check", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("broken.json"),
        "{}",
        stderr(&output)
    );
    let missing = dir.join("missing.json");
    let output = run(
        "quickstart",
        &["contract", "check", missing.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("missing.json"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn contract_diff_exits_with_1_on_a_breaking_change_only() {
    let dir = tempdir();
    let base: Value = serde_json::from_str(&committed("quickstart")).unwrap();
    let write = |name: &str, document: &Value| {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(document).unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let old = write("old.json", &base);

    let mut cosmetic = base.clone();
    cosmetic["tools"][0]["description"] = json!("Sums two integers.");
    let new = write("cosmetic.json", &cosmetic);
    let output = run("quickstart", &["contract", "diff", &old, &new]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).contains("cosmetic"), "{}", stdout(&output));

    let mut breaking = base.clone();
    breaking["tools"].as_array_mut().unwrap().remove(0);
    let new = write("breaking.json", &breaking);
    let output = run(
        "quickstart",
        &["contract", "diff", &old, &new, "--format", "json"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["breaking"], 1, "{report}");
    assert_eq!(report["changes"][0]["severity"], "breaking");

    let output = run("quickstart", &["contract", "diff", &old, &old]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        stdout(&output).contains("no changes"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn call_runs_a_stateless_tool_through_the_request_path() {
    let output = run("quickstart", &["call", "add", r#"{"a": 2, "b": 40}"#]);
    assert!(output.status.success(), "{}", stderr(&output));
    let result: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_conforms("CallToolResult", &result);
    assert_eq!(result["structuredContent"]["sum"], 42);

    // A tool error, a bad argument, is printed and fails the command; so does an unknown
    // tool, a JSON-RPC error.
    let output = run(
        "quickstart",
        &["call", "add", &format!(r#"{{"a": {}, "b": 1}}"#, i64::MAX)],
    );
    assert_eq!(output.status.code(), Some(1));
    let result: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(result["isError"], true);
    let output = run("quickstart", &["call", "add", r#"{"a": "two"}"#]);
    assert_eq!(output.status.code(), Some(1));
    let result: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_conforms("CallToolResult", &result);
    assert_eq!(result["isError"], true);
    let output = run("quickstart", &["call", "nope"]);
    assert_eq!(output.status.code(), Some(1));
    let error: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_conforms("JSONRPCErrorResponse", &error);
    assert_eq!(error["error"]["code"], -32602);

    for bad in ["{", "[1]"] {
        let output = run("quickstart", &["call", "add", bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}");
        assert!(stderr(&output).contains("JSON"), "{}", stderr(&output));
    }
}

#[test]
fn call_runs_stateful_tools_on_the_configured_store() {
    let dir = tempdir();
    let db = dir.join("baskets.db");
    let db = db.to_str().unwrap();
    let output = run(
        "basket",
        &[
            "call",
            "basket_create",
            r#"{"operation_id": "9b2f4c1e-8d3a-4e6f-a1b2-c3d4e5f60718"}"#,
            "--db",
            db,
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let created: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        created["structuredContent"]["outcome"], "applied",
        "{created}"
    );
    let handle = created["structuredContent"]["handle"].as_str().unwrap();

    // Another process, the same file: the basket is there.
    let arguments = json!({ "basket_id": handle }).to_string();
    let output = run("basket", &["call", "basket_get", &arguments, "--db", db]);
    assert!(output.status.success(), "{}", stderr(&output));
    let read: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(read["structuredContent"]["outcome"], "current", "{read}");
    assert_eq!(read["structuredContent"]["version"], 1);

    // In memory it is gone with the process that made it.
    let output = run("basket", &["call", "basket_get", &arguments, "--memory"]);
    assert_eq!(output.status.code(), Some(1));
    let gone: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(gone["structuredContent"]["code"], "NOT_FOUND", "{gone}");

    // Another subject does not see the anonymous principal's basket.
    let output = run(
        "basket",
        &[
            "call",
            "basket_get",
            &arguments,
            "--db",
            db,
            "--as",
            "mallory",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let hidden: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(hidden["structuredContent"]["code"], "NOT_FOUND", "{hidden}");
}

#[tokio::test]
async fn probe_classifies_the_answers_of_servers() {
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let _server = Process(
        Command::new(examples::binary("basket"))
            .args(["--memory", "--bind", &bind])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    examples::healthy(port).await;
    let url = format!("http://{bind}/mcp");
    let probe = |args: Vec<String>| async move {
        within(
            "the probe to finish",
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                run("quickstart", &args)
            }),
        )
        .await
        .unwrap()
    };

    let output = probe(vec!["probe".into(), url.clone()]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(
        stdout(&output).starts_with("healthy: serves 2026-07-28"),
        "{}",
        stdout(&output)
    );

    let output = probe(vec![
        "probe".into(),
        url.clone(),
        "--protocol-version".into(),
        "2099-01-01".into(),
    ])
    .await;
    assert_eq!(output.status.code(), Some(4), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("2026-07-28"),
        "names what it serves: {}",
        stdout(&output)
    );

    // A server of an earlier revision knows no `server/discover`.
    let earlier = earlier_revision_server().await;
    let output = probe(vec!["probe".into(), format!("http://{earlier}/mcp")]).await;
    assert_eq!(output.status.code(), Some(3), "{}", stdout(&output));

    let closed = format!("http://127.0.0.1:{}/mcp", free_port());
    let output = probe(vec!["probe".into(), closed]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).starts_with("unhealthy:"),
        "{}",
        stdout(&output)
    );

    // The health path answers, but it is not an MCP endpoint.
    let output = probe(vec!["probe".into(), format!("http://{bind}/healthz")]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
}

/// A stand-in for a server of an earlier revision: every method it does not know, and
/// `server/discover` is one, gets 404 with `-32601`.
async fn earlier_revision_server() -> std::net::SocketAddr {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/mcp",
        post(|body: axum::body::Bytes| async move {
            let request: Value = serde_json::from_slice(&body).unwrap_or_default();
            let answer = json!({
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": -32601, "message": "Method not found"},
            });
            (
                axum::http::StatusCode::NOT_FOUND,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                answer.to_string(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// A fresh directory of this test process, left behind so a failing test leaves its files to
/// look at (they are small).
fn tempdir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mcp-tools-cli-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_unusable_option_value_is_an_input_error_that_says_what_to_fix() {
    for timeout in ["0", "-1", "NaN"] {
        let option = format!("--timeout={timeout}");
        let output = run("quickstart", &["probe", "http://127.0.0.1:9/mcp", &option]);
        assert_eq!(output.status.code(), Some(2), "--timeout {timeout}");
        assert!(
            stderr(&output).contains("--timeout"),
            "{timeout}: {}",
            stderr(&output)
        );
    }
    let dir = tempdir();
    let nowhere = dir.join("no-such-dir").join("contract.json");
    let output = run(
        "quickstart",
        &["schema", "--out", nowhere.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no-such-dir"),
        "names the file it could not write: {}",
        stderr(&output)
    );
}
