//! The lost-update story replayed through the harness (`mcp_tools::client::Harness`): two
//! agents, one basket, version 7.
//!
//! `cargo run --example harness` serves the basket example's tools in this process and reaches
//! them through a link that can lose an answer; `-- --upstream URL` uses a running basket
//! server instead (`cargo run --example basket -- --memory`). Three scenes:
//!
//! 1. Agents A and B read the basket at version 7. A upgrades the memory; B, planning from
//!    version 7, sends a configuration with more storage and the old memory. Neither names a
//!    version: each harness supplies the one its agent was shown. B's write is refused as a
//!    stale view, with what changed; B re-plans from it, and the basket holds both intents.
//! 2. A adds a note and the link loses the answer after the server applied it: the harness
//!    sends the same call again, with the same operation id, and the note is there once.
//! 3. A saves its resumption record and starts over as a new harness: resuming from the
//!    record finds the basket unchanged, then, after B's next change, changed, with the delta.

#[path = "support/basket.rs"]
mod basket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mcp_tools::client::{Client, Harness, Outcome, Resumed, load_records, save_records};
use mcp_tools::store::Snapshot;
use mcp_tools::{McpServer, MemoryStore};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Failure = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let upstream = match std::env::args()
        .skip_while(|arg| arg != "--upstream")
        .nth(1)
    {
        Some(url) => url,
        None => serve_basket().await?,
    };
    let link = Link::start(&upstream).await?;
    let url = link.url(&upstream)?;
    println!("basket server: {upstream} (through a link that can lose an answer: {url})\n");
    let a = agent(&url).await?;
    let b = agent(&url).await?;

    // 1. Two agents, one basket, version 7.
    let Outcome::Applied(created) = a.call("basket_create", json!({})).await? else {
        return Err("the basket was not created".into());
    };
    let basket = created.handle;
    for note in 1..=6 {
        let note = json!({ "basket_id": basket, "text": format!("note {note}") });
        a.call("basket_add_note", note).await?;
    }
    for (name, agent) in [("A", &a), ("B", &b)] {
        let read = current(
            agent
                .call("basket_get", json!({ "basket_id": basket }))
                .await?,
        )?;
        println!(
            "read {name}  -> {basket} @ v{} {}",
            read.version,
            laptop(&read.state)
        );
    }
    let write_a = a
        .call(
            "basket_replace_configuration",
            json!({ "basket_id": basket, "memory_gib": 32, "storage_gib": 512 }),
        )
        .await?;
    let Outcome::Applied(applied) = write_a else {
        return Err(format!("A's write: {write_a:?}").into());
    };
    println!(
        "write A -> applied: v{} {}",
        applied.version,
        laptop(&applied.state)
    );
    let write_b = b
        .call(
            "basket_replace_configuration",
            json!({ "basket_id": basket, "memory_gib": 16, "storage_gib": 1024 }),
        )
        .await?;
    let Outcome::StaleView(stale) = write_b else {
        return Err(format!("B's stale write was not refused: {write_b:?}").into());
    };
    let changed: Vec<String> = stale
        .delta
        .iter()
        .map(|change| {
            let show =
                |value: &Option<Value>| value.as_ref().map_or("-".to_owned(), Value::to_string);
            format!(
                "{} {} -> {}",
                change.path,
                show(&change.before),
                show(&change.after)
            )
        })
        .collect();
    println!(
        "write B -> refused, stale view: planned on v{}, the basket is at v{}; changed since: {} (recovery: {})",
        stale.expected_version,
        stale.current_version,
        changed.join(", "),
        stale.recovery
    );
    let replanned = b
        .call(
            "basket_replace_configuration",
            json!({
                "basket_id": basket,
                "memory_gib": stale.current_state["memory_gib"],
                "storage_gib": 1024,
            }),
        )
        .await?;
    let Outcome::Applied(replanned) = replanned else {
        return Err(format!("B's re-planned write: {replanned:?}").into());
    };
    println!(
        "write B -> re-planned on v{}: applied: v{} {}: both intents kept\n",
        stale.current_version,
        replanned.version,
        laptop(&replanned.state)
    );

    // 2. A lost answer, retried once, applied once.
    link.lose_next_answer();
    let noted = a
        .call(
            "basket_add_note",
            json!({ "basket_id": basket, "text": "rush" }),
        )
        .await?;
    let Outcome::Replayed(replayed) = noted else {
        return Err(format!("the retried note: {noted:?}").into());
    };
    let now = current(a.call("basket_get", json!({ "basket_id": basket })).await?)?;
    // The basket's first page of notes (`notes.items`) holds all of them here: seven.
    let rush = now.state["notes"]["items"].as_array().map_or(0, |notes| {
        notes.iter().filter(|note| note["value"] == "rush").count()
    });
    println!(
        "note \"rush\" -> the answer was lost after the server applied it; sent again with operation id {}: replayed (recorded at {}); the basket holds the note {} time(s), at v{}\n",
        replayed.operation_id, replayed.recorded_at, rush, now.version
    );

    // 3. A restarts and resumes from its record.
    let file = std::env::temp_dir().join(format!("harness-example-{}.json", std::process::id()));
    let record = a
        .record(&basket)
        .ok_or("A saw the basket")?
        .with_next_operation("compare configurations");
    save_records(&file, &[record])?;
    drop(a);
    println!("A saved its record to {} and stopped", file.display());
    let a = agent(&url).await?;
    let record = load_records(&file)?.remove(0);
    println!(
        "A again: resumption record {} @ v{} ({:?}, expires {}), next: {}",
        record.handle,
        record.basis_version,
        record.lifecycle,
        record.expires_at.as_deref().unwrap_or("never"),
        record.next_operation.as_deref().unwrap_or("-")
    );
    describe(a.resume(&record).await?);
    // B reads first: its last view, v9, is older than the note.
    current(b.call("basket_get", json!({ "basket_id": basket })).await?)?;
    let upgraded = b
        .call(
            "basket_upgrade_memory",
            json!({ "basket_id": basket, "memory_gib": 64 }),
        )
        .await?;
    let Outcome::Applied(upgraded) = upgraded else {
        return Err(format!("B's upgrade: {upgraded:?}").into());
    };
    println!(
        "B reads the basket and upgrades the memory: v{}",
        upgraded.version
    );
    describe(a.resume(&record).await?);
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// A harness over a new client of `url`.
async fn agent(url: &str) -> Result<Harness, Failure> {
    let client = Client::builder()
        .client_info("harness-example", "1.0.0")
        .connect_http(url)
        .await?;
    Ok(Harness::new(client))
}

fn current(outcome: Outcome) -> Result<Snapshot, Failure> {
    match outcome {
        Outcome::Current(snapshot) => Ok(snapshot),
        other => Err(format!("a read answered {other:?}").into()),
    }
}

fn laptop(state: &Value) -> String {
    format!(
        "{{ memory: {} GiB, storage: {} GiB }}",
        state["memory_gib"], state["storage_gib"]
    )
}

fn describe(resumed: Resumed) {
    match resumed {
        Resumed::Unchanged(current) => {
            println!(
                "resume  -> unchanged: still v{}, the plan holds",
                current.version
            )
        }
        Resumed::Changed {
            since,
            delta,
            current,
        } => {
            let changes: Vec<String> = delta
                .unwrap_or_default()
                .iter()
                .map(|change| {
                    format!(
                        "{} {} -> {}",
                        change.path,
                        change.before.clone().unwrap_or(Value::Null),
                        change.after.clone().unwrap_or(Value::Null)
                    )
                })
                .collect();
            println!(
                "resume  -> changed since v{since}, now v{}: {}; re-plan before acting",
                current.version,
                changes.join(", ")
            );
        }
        Resumed::Expired(rejected) | Resumed::Gone(rejected) => {
            println!("resume  -> {}: {}", rejected.code, rejected.message)
        }
        other => println!("resume  -> {other:?}"),
    }
}

/// Serves the basket's tools on a loopback port, in memory; returns the endpoint's URL.
async fn serve_basket() -> Result<String, Failure> {
    let server = McpServer::builder("basket", env!("CARGO_PKG_VERSION"))
        .tools(basket::tool_set())
        .store(MemoryStore::default())
        .per_process_signing_key()
        .build()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = server
            .serve_listener(listener, std::future::pending::<()>())
            .await;
    });
    Ok(url)
}

/// A TCP link to the server that, when asked, loses the next answer once the server has sent
/// it: the request reached the server and was applied, and the client sees its connection
/// close.
struct Link {
    addr: SocketAddr,
    lose: Arc<AtomicBool>,
}

impl Link {
    async fn start(upstream: &str) -> Result<Link, Failure> {
        let target = authority(upstream)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let lose = Arc::new(AtomicBool::new(false));
        let losing = Arc::clone(&lose);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let lose = Arc::clone(&losing);
                let target = target.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(target.as_str()).await {
                        relay(client, server, lose).await;
                    }
                });
            }
        });
        Ok(Link { addr, lose })
    }

    /// The upstream URL with the link's address in place of the server's.
    fn url(&self, upstream: &str) -> Result<String, Failure> {
        let authority = authority(upstream)?;
        Ok(upstream.replacen(&authority, &self.addr.to_string(), 1))
    }

    fn lose_next_answer(&self) {
        self.lose.store(true, Ordering::SeqCst);
    }
}

/// `host:port` of an `http://host:port/path` URL.
fn authority(url: &str) -> Result<String, Failure> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("the upstream must be an http:// URL")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.contains(':') {
        Ok(authority.to_owned())
    } else {
        Ok(format!("{authority}:80"))
    }
}

async fn relay(mut client: TcpStream, mut server: TcpStream, lose: Arc<AtomicBool>) {
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let requests = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read @ 1..) = client_read.read(&mut buffer).await {
            if server_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
    };
    let answers = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read @ 1..) = server_read.read(&mut buffer).await {
            if lose.swap(false, Ordering::SeqCst) {
                break;
            }
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = answers => {}
    }
}
