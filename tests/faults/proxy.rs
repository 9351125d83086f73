//! A loopback TCP proxy that injects faults into what passes through it: connections cut before
//! a request reaches the server, answers lost after the server gave them (for PostgreSQL, only
//! once `COMMIT` has been confirmed, so the change is surely made and its caller surely does not
//! know), and random latency that reorders requests across connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pg::Frames;

/// What the bytes through the proxy speak, which tells what answer ends a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// PostgreSQL's frontend/backend protocol, without TLS: an answer is lost only after the
    /// server confirmed a `COMMIT`.
    Postgres,
    /// HTTP/1.1: any answer may be lost, after the server sent it.
    Http,
}

/// The faults injected, changeable while the proxy runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Faults {
    /// Everything passes.
    None,
    /// Each flight of bytes a client sends is cut, before it reaches the server, with
    /// probability `cut`; an answer that ends a transaction is lost, after the server gave it,
    /// with probability `lose_answer`. Either way both connections close.
    Cut { cut: f64, lose_answer: f64 },
    /// Each flight, either way, waits up to `max` (uniformly) before it goes on: requests on
    /// different connections overtake each other.
    Delay { max: Duration },
}

/// What the proxy did so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub connections: u64,
    /// Flights cut before they reached the server.
    pub cut: u64,
    /// Answers lost after the server gave them (PostgreSQL: after `COMMIT` was confirmed).
    pub lost_answers: u64,
    pub delayed: u64,
}

struct Shared {
    upstream: SocketAddr,
    protocol: Protocol,
    faults: Mutex<Faults>,
    random: Mutex<u64>,
    connections: AtomicU64,
    cut: AtomicU64,
    lost_answers: AtomicU64,
    delayed: AtomicU64,
}

impl Shared {
    /// A uniform draw in [0, 1), from the proxy's seed, so a run can be replayed from the seed
    /// it prints.
    fn draw(&self) -> f64 {
        super::draw(&mut self.random.lock().unwrap())
    }

    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap()
    }

    /// The pause a flight takes under [`Faults::Delay`], if any.
    fn delay(&self) -> Option<Duration> {
        match self.faults() {
            Faults::Delay { max } => {
                self.delayed.fetch_add(1, Ordering::Relaxed);
                Some(max.mul_f64(self.draw()))
            }
            _ => None,
        }
    }
}

/// A proxy listening on loopback in front of `upstream`; it stops with the runtime.
pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    pub async fn start(upstream: SocketAddr, protocol: Protocol, seed: u64) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            protocol,
            faults: Mutex::new(Faults::None),
            random: Mutex::new(seed),
            connections: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            lost_answers: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, Arc::clone(&accepting)));
            }
        });
        FaultProxy { addr, shared }
    }

    /// From now on, for new flights on every connection.
    pub fn set(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap() = faults;
    }

    pub fn counts(&self) -> Counts {
        Counts {
            connections: self.shared.connections.load(Ordering::Relaxed),
            cut: self.shared.cut.load(Ordering::Relaxed),
            lost_answers: self.shared.lost_answers.load(Ordering::Relaxed),
            delayed: self.shared.delayed.load(Ordering::Relaxed),
        }
    }

    /// `url` (a `postgres://` URL) with its address replaced by the proxy's, TLS off so the
    /// messages can be read, and `application_name` set so the test can find its connections.
    pub fn postgres_url(&self, url: &str, application_name: &str) -> String {
        rewrite_postgres_url(url, Some(self.addr), application_name)
    }
}

/// `url` (a `postgres://` URL) pointed at `addr` if given, with TLS off and `application_name`
/// set.
pub fn rewrite_postgres_url(url: &str, addr: Option<SocketAddr>, application_name: &str) -> String {
    let crate::pg::UrlParts {
        scheme,
        user,
        target,
        path,
    } = crate::pg::UrlParts::of(url);
    let target = addr.map_or(target, |addr| addr.to_string());
    let separator = if path.contains('?') { '&' } else { '?' };
    format!(
        "{scheme}://{user}{target}/{path}{separator}sslmode=disable&application_name={application_name}"
    )
}

/// The upstream address of a `postgres://` URL on loopback (`host:port`, port 5432 if absent).
pub fn postgres_addr(url: &str) -> SocketAddr {
    let rest = url.split_once("://").expect("a postgres:// URL").1;
    let authority = rest.split(['/', '?']).next().unwrap();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, target)| target);
    let host_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    };
    let host_port = host_port.replacen("localhost", "127.0.0.1", 1);
    host_port.parse().unwrap_or_else(|_| {
        panic!("the fault tests need the database on a loopback TCP address, not {url}")
    })
}

async fn relay(client: TcpStream, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_reads, mut client_writes) = client.into_split();
    let (mut server_reads, mut server_writes) = server.into_split();
    // Set by a request whose answer is to be lost.
    let lose = Arc::new(AtomicBool::new(false));
    let requests = {
        let (shared, lose) = (Arc::clone(&shared), Arc::clone(&lose));
        async move {
            let mut frames = Frames::frontend();
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let read = match client_reads.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => read,
                };
                let ends_transaction = match shared.protocol {
                    Protocol::Postgres => commits_in(&mut frames, &buffer[..read]),
                    Protocol::Http => true,
                };
                if let Faults::Cut { cut, lose_answer } = shared.faults() {
                    let draw = shared.draw();
                    if draw < cut {
                        shared.cut.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    if ends_transaction && draw < cut + lose_answer {
                        lose.store(true, Ordering::SeqCst);
                    }
                }
                if let Some(pause) = shared.delay() {
                    tokio::time::sleep(pause).await;
                }
                if server_writes.write_all(&buffer[..read]).await.is_err() {
                    return;
                }
            }
        }
    };
    let answers = async move {
        let mut frames = Frames::backend();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match server_reads.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            let committed = match shared.protocol {
                Protocol::Postgres => commit_confirmed_in(&mut frames, &buffer[..read]),
                Protocol::Http => true,
            };
            if committed && lose.load(Ordering::SeqCst) {
                shared.lost_answers.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if let Some(pause) = shared.delay() {
                tokio::time::sleep(pause).await;
            }
            if client_writes.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    };
    // The first side to end (a cut, a lost answer, a close) drops both connections.
    tokio::select! {
        () = requests => {}
        () = answers => {}
    }
}

/// Whether the messages `bytes` completes hold a `COMMIT` (a simple query).
fn commits_in(frames: &mut Frames, bytes: &[u8]) -> bool {
    let mut commits = false;
    frames.messages_in(bytes, |kind, body| {
        commits |= kind == b'Q' && body.eq_ignore_ascii_case(b"COMMIT\0");
    });
    commits
}

/// Whether the messages `bytes` completes confirm a `COMMIT` (a `CommandComplete` tagged
/// `COMMIT`; a failed transaction's is tagged `ROLLBACK`).
fn commit_confirmed_in(frames: &mut Frames, bytes: &[u8]) -> bool {
    let mut confirmed = false;
    frames.messages_in(bytes, |kind, body| {
        confirmed |= kind == b'C' && body == b"COMMIT\0";
    });
    confirmed
}
