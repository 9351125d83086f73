//! The PostgreSQL the tests use: `MCP_TOOLS_POSTGRES_URL` (`.ci/postgres` starts one and sets
//! it). Without it the PostgreSQL tests skip, loudly, on a developer's machine, and fail in CI
//! (`CI` set), where a skipped store would hide a broken one.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use mcp_tools::PostgresStore;
use mcp_tools::store::{PostgresOptions, StoreConfig, TimeSource};

/// The database URL, or `None` (after saying so) when the tests must skip.
pub fn url() -> Option<String> {
    match std::env::var("MCP_TOOLS_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI is set but MCP_TOOLS_POSTGRES_URL is not: start PostgreSQL with .ci/postgres"
            )
        }
        _ => {
            eprintln!(
                "SKIPPED: no PostgreSQL (set MCP_TOOLS_POSTGRES_URL, or run `eval \"$(bash .ci/postgres start)\"`)"
            );
            None
        }
    }
}

/// A store on `url` (the test database's, or another way to reach it), which must open.
pub async fn connect_to(url: &str, config: StoreConfig, options: PostgresOptions) -> PostgresStore {
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        PostgresStore::connect_with(url, config, options),
    )
    .await
    .expect("connecting to PostgreSQL timed out")
    .expect("the PostgreSQL store opens")
}

/// A schema of its own for one test, dropped with it, so tests run side by side on one database.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new() -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let url = url()?;
        let name = format!(
            "t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros()
        );
        Some(Schema { url, name })
    }

    /// Options for this schema, with the time read from the store's clock so tests can step it.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            schema: self.name.clone(),
            time: TimeSource::StoreClock,
            ..PostgresOptions::default()
        }
    }

    /// [`Schema::options`] with a pool of one connection: every statement runs on it.
    pub fn one_connection(&self) -> PostgresOptions {
        PostgresOptions {
            pool_size: 1,
            ..self.options()
        }
    }

    pub async fn connect(&self, config: StoreConfig) -> PostgresStore {
        self.connect_with(config, self.options()).await
    }

    pub async fn connect_with(
        &self,
        config: StoreConfig,
        options: PostgresOptions,
    ) -> PostgresStore {
        connect_to(&self.url, config, options).await
    }

    /// Opens a store from synchronous code inside a multi-threaded runtime.
    pub fn open(&self, config: StoreConfig) -> PostgresStore {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.connect(config))
        })
    }

    /// `count` stores on one set of tables (`prefix` before their names), standing for replicas
    /// on as many hosts; opened from synchronous code inside a multi-threaded runtime.
    #[allow(dead_code)]
    pub fn replicas(&self, count: usize, prefix: &str) -> Vec<PostgresStore> {
        let options = PostgresOptions {
            table_prefix: prefix.to_owned(),
            ..self.options()
        };
        (0..count)
            .map(|_| {
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current()
                        .block_on(self.connect_with(StoreConfig::default(), options.clone()))
                })
            })
            .collect()
    }

    /// A plain client on the test database.
    pub async fn client(&self) -> tokio_postgres::Client {
        let connecting = tokio_postgres::connect(&self.url, tokio_postgres::NoTls);
        let (client, connection) =
            tokio::time::timeout(std::time::Duration::from_secs(30), connecting)
                .await
                .expect("connecting to PostgreSQL timed out")
                .expect("a plain connection to PostgreSQL");
        tokio::spawn(connection);
        client
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // On a thread of its own: the test's runtime may be gone or single-threaded.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let dropping = async move {
                let (client, connection) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .await
            };
            runtime.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(30), dropping).await
            })
        })
        .join();
        match dropped {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => eprintln!("could not drop test schema {}: {error}", self.name),
            _ => eprintln!("could not drop test schema {} in time", self.name),
        }
    }
}

/// What one connection through a [`Wire`] sent, counted from the PostgreSQL protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Flights of messages the client sent, each after an answer from the server: the round
    /// trips it waited for.
    pub round_trips: u64,
    /// Statements the server was asked to run: simple queries (`Q`) and executions of a
    /// prepared statement (`E`).
    pub statements: u64,
}

impl std::ops::Sub for Traffic {
    type Output = Traffic;

    fn sub(self, earlier: Traffic) -> Traffic {
        Traffic {
            round_trips: self.round_trips - earlier.round_trips,
            statements: self.statements - earlier.statements,
        }
    }
}

/// A loopback proxy in front of the test database that reads the frontend protocol as it
/// passes, so a test can count what a store call costs on the wire.
pub struct Wire {
    /// The test database's URL with its address replaced by the proxy's (and TLS off, so the
    /// messages can be read).
    pub url: String,
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
}

/// What the proxy counted on all its connections, and from when it holds answers back.
struct Seen {
    traffic: Traffic,
    /// The round trip whose connection stops getting answers (`u64::MAX`: none).
    hold_from: u64,
}

/// Who spoke last on the proxied connection.
struct Turn {
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
    server_spoke: bool,
    /// Set once the client sent the round trip [`Seen::hold_from`] names on this connection:
    /// from then on the server's answers go no further than the proxy.
    holding: bool,
}

/// A `postgres://` URL taken apart: what a proxy keeps (scheme, user, path) and what it
/// replaces (the host and port it points at).
pub struct UrlParts<'u> {
    pub scheme: &'u str,
    /// `user@`, or empty.
    pub user: String,
    /// `host:port`.
    pub target: String,
    /// The database and its query, without the leading `/`.
    pub path: &'u str,
}

impl<'u> UrlParts<'u> {
    pub fn of(url: &'u str) -> Self {
        let (scheme, rest) = url
            .split_once("://")
            .expect("the test URL is a postgres:// URL");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, target) = match authority.rsplit_once('@') {
            Some((user, target)) => (format!("{user}@"), target.to_owned()),
            None => (String::new(), authority.to_owned()),
        };
        UrlParts {
            scheme,
            user,
            target,
            path,
        }
    }
}

impl Wire {
    /// Starts the proxy on the current runtime.
    pub async fn start(url: &str) -> Wire {
        let UrlParts {
            scheme,
            user,
            target,
            path,
        } = UrlParts::of(url);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let separator = if path.contains('?') { '&' } else { '?' };
        let url = format!("{scheme}://{user}{local}/{path}{separator}sslmode=disable");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen {
            traffic: Traffic::default(),
            hold_from: u64::MAX,
        }));
        let counted = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&target)
                    .await
                    .expect("the proxy reaches the test database");
                let turn = std::sync::Arc::new(std::sync::Mutex::new(Turn {
                    seen: std::sync::Arc::clone(&counted),
                    server_spoke: true,
                    holding: false,
                }));
                tokio::spawn(relay(client, server, turn));
            }
        });
        Wire { url, seen }
    }

    /// What every connection through the proxy sent so far.
    pub fn traffic(&self) -> Traffic {
        self.seen.lock().unwrap().traffic
    }

    /// From the `later`th round trip after this call on (1: the next one), the server's
    /// answers on the connection that sends it stop at the proxy: the server gets and runs what
    /// the client sent, but the client never hears back, as when the network fails after a
    /// request went out. Other connections, and those opened later, are not held. A round trip
    /// starts with the client's first message after any bytes from the server, so what the
    /// server sends unasked (a notice) or late (answers to an earlier pipelined flight) on that
    /// connection is held too.
    pub fn hold_answers_from(&self, later: u64) {
        assert!(later >= 1, "round trips are counted from 1: the next one");
        let mut seen = self.seen.lock().unwrap();
        seen.hold_from = seen.traffic.round_trips + later;
    }
}

async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    turn: std::sync::Arc<std::sync::Mutex<Turn>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_reads, mut client_writes) = client.into_split();
    let (mut server_reads, mut server_writes) = server.into_split();
    let asked = std::sync::Arc::clone(&turn);
    let requests = async move {
        let mut frames = Frames::frontend();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match client_reads.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            // Counted before the bytes go on, so a call's answer never arrives uncounted.
            {
                let mut turn = asked.lock().unwrap();
                let statements = frames.statements_in(&buffer[..read]);
                let mut seen = turn.seen.lock().unwrap();
                seen.traffic.statements += statements;
                if turn.server_spoke {
                    seen.traffic.round_trips += 1;
                }
                let hold = seen.traffic.round_trips >= seen.hold_from;
                if hold {
                    seen.hold_from = u64::MAX;
                }
                drop(seen);
                turn.holding |= hold;
                turn.server_spoke = false;
            }
            if server_writes.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = server_writes.shutdown().await;
    };
    let answers = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match server_reads.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let holding = {
                let mut turn = turn.lock().unwrap();
                turn.server_spoke = true;
                turn.holding
            };
            if holding {
                continue;
            }
            if client_writes.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = client_writes.shutdown().await;
    };
    tokio::join!(requests, answers);
}

/// One side of the protocol, cut into messages as its bytes arrive.
#[derive(Default)]
pub struct Frames {
    pending: Vec<u8>,
    /// Past the frontend's startup message, which has no type byte (the backend has none).
    started: bool,
}

impl Frames {
    /// The frontend's messages, from its first byte.
    pub fn frontend() -> Frames {
        Frames::default()
    }

    /// The backend's messages, from its first byte (with TLS off: no answer to an `SSLRequest`).
    pub fn backend() -> Frames {
        Frames {
            pending: Vec::new(),
            started: true,
        }
    }

    /// Calls `each` with the type byte and the body of every message `bytes` completes (the
    /// frontend's startup message and its TLS and GSS requests, which have no type, excepted).
    pub fn messages_in(&mut self, bytes: &[u8], mut each: impl FnMut(u8, &[u8])) {
        const SSL_REQUEST: u32 = 80_877_103;
        const GSS_REQUEST: u32 = 80_877_104;
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let header = if self.started { 5 } else { 4 };
            let Some(length) = self.pending.get(at + header - 4..at + header) else {
                break;
            };
            let length = u32::from_be_bytes(length.try_into().unwrap()) as usize;
            let end = at + header - 4 + length;
            if self.pending.len() < end {
                break;
            }
            if self.started {
                each(self.pending[at], &self.pending[at + 5..end]);
            } else {
                let code = u32::from_be_bytes(self.pending[at + 4..at + 8].try_into().unwrap());
                self.started = code != SSL_REQUEST && code != GSS_REQUEST;
            }
            at = end;
        }
        self.pending.drain(..at);
    }

    /// The statements among the complete messages `bytes` finishes.
    fn statements_in(&mut self, bytes: &[u8]) -> u64 {
        let mut statements = 0;
        self.messages_in(bytes, |kind, _| {
            if matches!(kind, b'Q' | b'E') {
                statements += 1;
            }
        });
        statements
    }
}
