//! The deployment the deploying guide describes, proven: nginx in front of three basket replicas
//! on one PostgreSQL database, with one signing key. Through the proxy: the lost-update schedule
//! of many agents, a progress stream that arrives as it is sent, and a `subscriptions/listen`
//! stream; then one replica restarted gracefully (SIGTERM, drain, start again) under load,
//! with no failed call and nothing lost or applied twice.
//!
//! Needs nginx (`MCP_TOOLS_NGINX`, the binary; CI installs Debian's) and PostgreSQL
//! (`MCP_TOOLS_POSTGRES_URL`); skipped loudly without them on a developer's machine, failed in
//! CI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::events::Events;
use crate::common::examples::{Process, binary, free_port, healthy};
use crate::common::{Call, within};

/// The nginx binary, or `None` (skipped) on a machine without it.
fn nginx() -> Option<PathBuf> {
    match std::env::var_os("MCP_TOOLS_NGINX") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but MCP_TOOLS_NGINX is not: .ci/run installs nginx")
        }
        _ => {
            eprintln!("SKIPPED: no nginx (set MCP_TOOLS_NGINX to its binary)");
            None
        }
    }
}

/// The proxy configuration the deploying guide recommends, for `replicas` on loopback.
fn nginx_conf(dir: &Path, port: u16, replicas: &[u16]) -> String {
    let servers: String = replicas
        .iter()
        .map(|replica| format!("        server 127.0.0.1:{replica} max_fails=0;\n"))
        .collect();
    let dir = dir.display();
    format!(
        r#"daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream mcp {{
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            # A new connection to a replica per request (no upstream keep-alive), so a replica
            # that drains never has an idle connection closed under a request.
            proxy_set_header Connection "";
            # The replicas judge the host the client named (their allowed hosts), not the
            # upstream's name.
            proxy_set_header Host $http_host;
            # A replica that stops closes its listener: a request that reached its backlog
            # first is reset before anything ran, and goes to the next replica. POSTs included:
            # every state-changing tool takes an operation id, so a request that did run is
            # answered `replayed` there, never applied twice.
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 3;
            proxy_connect_timeout 2s;
            # Event streams (progress, subscriptions) go out as they are written.
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }}
    }}
}}
"#
    )
}

struct Deployment {
    _dir: tempfile::TempDir,
    url: String,
    replicas: Vec<(u16, Process)>,
    args: Vec<String>,
    _nginx: Nginx,
}

fn replica(args: &[String], port: u16) -> Process {
    let child = Command::new(binary("basket"))
        .args(args)
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the basket example starts");
    Process(child)
}

async fn deploy(nginx: &Path, postgres: &str) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    for temp in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.path().join(temp)).unwrap();
    }
    let key = dir.path().join("signing.key");
    std::fs::File::create(&key)
        .unwrap()
        .write_all(b"the deployment test's key, the same on every replica")
        .unwrap();
    let args: Vec<String> = [
        "serve",
        "--postgres",
        postgres,
        "--signing-key-file",
        key.to_str().unwrap(),
        "--allowed-host",
        "localhost",
    ]
    .map(String::from)
    .into();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    for port in &ports {
        replicas.push((*port, replica(&args, *port)));
    }
    for port in &ports {
        healthy(*port).await;
    }
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(dir.path(), port, &ports)).unwrap();
    let proxy = Command::new(nginx)
        .args([
            "-p",
            dir.path().to_str().unwrap(),
            "-c",
            conf.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("nginx starts");
    let proxy = Nginx(proxy);
    healthy(port).await;
    Deployment {
        _dir: dir,
        url: format!("http://localhost:{port}/mcp"),
        replicas,
        args,
        _nginx: proxy,
    }
}

/// The proxy's master process. Killed outright, it would leave its workers running, holding the
/// port; asked to stop (SIGTERM), it stops them first and exits after them.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let stopped = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .is_ok_and(|status| status.success());
        // Bounded: a master that has not exited within 10 s is killed, workers or not.
        for _ in 0..100 {
            if !stopped || matches!(self.0.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One tool call through the proxy; `Err` with what went wrong for anything but HTTP 200 with a
/// JSON-RPC result.
async fn call(url: &str, tool: &str, arguments: Value) -> Result<Value, String> {
    let reply = Call::call_tool(tool, arguments)
        .try_send_to(url)
        .await
        .map_err(|error| format!("transport: {error}"))?;
    if reply.status != 200 {
        return Err(format!("HTTP {}: {}", reply.status, reply.text));
    }
    let body = reply.json();
    body.get("result")
        .cloned()
        .ok_or_else(|| format!("not a result: {body}"))
}

fn operation_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn three_replicas_behind_nginx_serve_streams_and_restart_without_a_failed_call() {
    let (Some(nginx), Some(postgres)) = (nginx(), crate::pg::url()) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut deployment = deploy(&nginx, &postgres).await;
        let url = deployment.url.clone();

        // A progress stream reaches the client as it is written: its first event comes well
        // before the call ends (the call takes 2 s in four steps).
        let created = call(&url, "basket_create", json!({ "operation_id": operation_id() }))
            .await
            .unwrap();
        let basket = created["structuredContent"]["handle"].as_str().unwrap().to_owned();
        let started = Instant::now();
        let quote = Call::call_tool("basket_quote", json!({ "basket_id": basket, "seconds": 2.0 }))
            .meta("progressToken", json!("quote"));
        let mut stream = Events::open(&url, &quote).await;
        let first = stream.next().await;
        let first_after = started.elapsed();
        assert_eq!(first["method"], "notifications/progress", "{first}");
        let mut last = first;
        while last.get("result").is_none() {
            last = stream.next().await;
        }
        stream.end().await;
        assert!(
            first_after < Duration::from_millis(1500),
            "the first progress event arrived after {first_after:?}: the proxy buffered the stream"
        );
        assert!(
            last["result"]["structuredContent"]["state"]["configuration"].is_string(),
            "{last}"
        );

        // A subscription through the proxy is acknowledged at once and stays open.
        let listen = Call::new(
            "subscriptions/listen",
            json!(7),
            json!({ "notifications": { "toolsListChanged": true } }),
        );
        let mut listen = Events::open(&url, &listen).await;
        let acknowledged = listen.next().await;
        assert_eq!(
            acknowledged["method"], "notifications/subscriptions/acknowledged",
            "{acknowledged}"
        );
        drop(listen);

        // Agents bump notes on shared baskets through the proxy while a replica restarts.
        let baskets: Vec<String> = {
            let mut handles = Vec::new();
            for _ in 0..4 {
                let created = call(&url, "basket_create", json!({ "operation_id": operation_id() }))
                    .await
                    .unwrap();
                handles.push(created["structuredContent"]["handle"].as_str().unwrap().to_owned());
            }
            handles
        };
        let applied = Arc::new(AtomicU64::new(0));
        let calls = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut agents = tokio::task::JoinSet::new();
        for agent in 0..16usize {
            let (url, basket) = (url.clone(), baskets[agent % baskets.len()].clone());
            let (applied, calls, stop) = (applied.clone(), calls.clone(), stop.clone());
            agents.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let arguments = json!({
                        "basket_id": basket,
                        "text": format!("agent {agent} note {n}"),
                        "operation_id": operation_id(),
                    });
                    calls.fetch_add(1, Ordering::SeqCst);
                    let result = call(&url, "basket_add_note", arguments).await?;
                    match result["structuredContent"]["outcome"].as_str() {
                        Some("applied") => applied.fetch_add(1, Ordering::SeqCst),
                        other => return Err(format!("agent {agent}: {other:?}: {result}")),
                    };
                }
                Ok::<(), String>(())
            });
        }
        // Let the load run, then restart the second replica gracefully: SIGTERM, wait for it to
        // drain and exit, start it again on its port.
        let running = |calls: &AtomicU64, at_least: u64| {
            let calls = calls.load(Ordering::SeqCst);
            async move { calls >= at_least }
        };
        within("some load before the restart", async {
            while !running(&calls, 200).await {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let (port, process) = deployment.replicas.remove(1);
        let pid = process.0.id();
        assert!(
            Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success()
        );
        let mut process = process;
        let exited = within("the replica to drain and exit", async {
            loop {
                if let Some(status) = process.0.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(exited.success(), "a graceful shutdown exits 0: {exited}");
        let before_restart = calls.load(Ordering::SeqCst);
        let restarted = replica(&deployment.args, port);
        healthy(port).await;
        deployment.replicas.push((port, restarted));
        within("load after the restart", async {
            while !running(&calls, before_restart + 200).await {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        stop.store(true, Ordering::SeqCst);
        while let Some(agent) = within("the agents to stop", agents.join_next()).await {
            agent.unwrap().unwrap_or_else(|failed| panic!("a call failed: {failed}"));
        }

        // Every acknowledged note is in its basket, once.
        let mut notes = 0;
        for basket in &baskets {
            let read = call(&url, "basket_get", json!({ "basket_id": basket })).await.unwrap();
            notes += read["structuredContent"]["state"]["notes"]["len"]
                .as_u64()
                .unwrap();
        }
        let applied = applied.load(Ordering::SeqCst);
        assert_eq!(notes, applied, "every applied note is kept, once");
        eprintln!(
            "deployment: {applied} notes applied through nginx over 3 replicas, {} calls, 0 failed, one replica restarted",
            calls.load(Ordering::SeqCst)
        );
    });
}
