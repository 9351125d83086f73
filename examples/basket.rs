//! The basket server of the lost-update story: versioned, idempotent stateful tools over MCP.
//!
//! `cargo run --example basket` serves on 127.0.0.1:8080 with the SQLite file `basket.db`;
//! `-- --help` lists the commands of the standard command line (`serve`, `schema`, `docs`,
//! `list`, `contract check`, `contract diff`, `call`, `probe`). Its own options, taken by `serve`
//! (and by the bare command) and `call`: `--db PATH` (another SQLite file), `--memory` (keep
//! state in memory), `--postgres URL` (a PostgreSQL database shared by replicas on many hosts;
//! a URL or libpq `key=value` string, completed from the `PG*` environment variables), and
//! `--signing-key-file PATH` (the secret replicas share to sign cursors, request states, validators
//! and task ids), `--task-lease-ms MS` (how soon a task whose replica died is marked failed), and
//! `--max-running-tasks N` / `--max-running-tasks-per-principal N` (the caps on running tasks),
//! and `--effect-timeout-ms MS` / `--effect-retry-ms MS` / `--effect-attempts N` (how a
//! checkout's charge is delivered).
//! `schema`, `docs`, `list` and `contract` open no store.
//!
//! `basket_checkout` charges the basket's price through an outbox: the charge is stored with
//! the checkout and delivered after it commits, by whichever replica claims it, to the payment
//! service at `BASKET_PAYMENT_URL` (only logged without one), with an idempotency key that is
//! the same on every attempt.
//!
//! `basket_quote` runs as a task for clients that take tasks (the Tasks extension): the task
//! record lives in the same store, so any replica answers `tasks/get`, `tasks/update` and
//! `tasks/cancel` for it.
//!
//! Without OAuth every caller is the anonymous principal and a basket handle is a bearer
//! capability: whoever holds it can use it. `--issuer URL --audience URI --jwks-url URL` (all
//! three) make the server an OAuth resource server: every request needs a JWT access token of
//! that issuer, for that audience (the server's canonical URI), signed with a key of that JWKS;
//! `basket_get` needs the scope `basket:read`, creates and changes `basket:write` (which also
//! grants `basket:read`), and each basket belongs to the token's issuer and subject.

#[path = "support/basket.rs"]
mod basket;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use mcp_tools::McpServer;
use mcp_tools::auth::{JwtVerifier, OAuth};
use mcp_tools::cli::{self, BuildFailure, Mode};
use mcp_tools::store::{Store, StoreConfig};
use mcp_tools::{MemoryStore, PostgresStore, SqliteStore};

/// The basket server's own options.
#[derive(clap::Args, Debug)]
struct Options {
    /// Keep state in the SQLite file PATH.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "basket.db",
        env = "BASKET_DB"
    )]
    db: PathBuf,
    /// Keep state in memory (lost when the server stops).
    #[arg(long, conflicts_with_all = ["db", "postgres"], env = "BASKET_MEMORY")]
    memory: bool,
    /// Keep state in the PostgreSQL database URL (a `postgres://` URL or libpq `key=value`
    /// pairs; what it leaves out, a password say, comes from PGHOST, PGUSER, PGPASSWORD, ...).
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "db",
        env = "BASKET_POSTGRES"
    )]
    postgres: Option<String>,
    /// Sign cursors, request states, validators and task ids with the secret in PATH (32 bytes
    /// or more): every replica behind one load balancer reads the same file. With a SQLite file
    /// and no key file, the key is kept in `<db>.key` (made on the first start), so processes on
    /// this host and restarts share it; PostgreSQL replicas must be given one.
    #[arg(long, value_name = "PATH", env = "MCP_SIGNING_KEY_FILE")]
    signing_key_file: Option<PathBuf>,
    /// How long a task's lease lasts past its last renewal, in milliseconds: a task whose
    /// replica died is marked failed this long after (default 10000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..), env = "BASKET_TASK_LEASE_MS")]
    task_lease_ms: Option<u64>,
    /// How many tasks may run at once on this process (default 64); past it a new task is
    /// refused with 429 and Retry-After.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), env = "BASKET_MAX_RUNNING_TASKS")]
    max_running_tasks: Option<u64>,
    /// How many tasks one principal may have running at once on this process (default 16;
    /// without OAuth every caller is the one anonymous principal).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), env = "BASKET_MAX_RUNNING_TASKS_PER_PRINCIPAL")]
    max_running_tasks_per_principal: Option<u64>,
    /// How long one attempt to deliver an effect (a checkout's charge) may take, in
    /// milliseconds (default 30000). A replica that dies mid-delivery leaves the effect to
    /// another replica twice this long (plus a second) later.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..), env = "BASKET_EFFECT_TIMEOUT_MS")]
    effect_timeout_ms: Option<u64>,
    /// The delay before a failed delivery is attempted again, in milliseconds (default 1000),
    /// doubling on each further failure up to 5 minutes.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..), env = "BASKET_EFFECT_RETRY_MS")]
    effect_retry_ms: Option<u64>,
    /// How many attempts an effect gets before it is failed (default 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), env = "BASKET_EFFECT_ATTEMPTS")]
    effect_attempts: Option<u32>,
    /// OAuth: the issuer identifier of the authorization server whose tokens are accepted.
    #[arg(long, value_name = "URL", requires_all = ["audience", "jwks_url"], env = "BASKET_ISSUER")]
    issuer: Option<String>,
    /// OAuth: this server's canonical URI, the audience tokens must be for.
    #[arg(long, value_name = "URI", requires_all = ["issuer", "jwks_url"], env = "BASKET_AUDIENCE")]
    audience: Option<String>,
    /// OAuth: where the issuer publishes its signing keys (JWKS).
    #[arg(long, value_name = "URL", requires_all = ["issuer", "audience"], env = "BASKET_JWKS_URL")]
    jwks_url: Option<String>,
    /// A host name clients may reach this server by (`Host` and `Origin`), besides `localhost`,
    /// `127.0.0.1` and `[::1]`: the public name behind a proxy or load balancer. Repeat it, or
    /// give several separated by commas in the environment.
    #[arg(
        long = "allowed-host",
        value_name = "HOST",
        env = "BASKET_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
}

/// `mcp.example.com` of `https://mcp.example.com:8443/mcp`.
fn audience_host(audience: &str) -> &str {
    let authority = audience.split("://").nth(1).unwrap_or(audience);
    let authority = authority.split('/').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// The OAuth resource server the options ask for, if any.
fn oauth(options: &Options) -> Result<Option<OAuth>, BuildFailure> {
    let (Some(issuer), Some(audience), Some(jwks_url)) =
        (&options.issuer, &options.audience, &options.jwks_url)
    else {
        return Ok(None);
    };
    let verifier = JwtVerifier::with_jwks(issuer.as_str(), jwks_url)?;
    Ok(Some(
        OAuth::new(audience.as_str(), verifier)
            .authorization_server(issuer.as_str())
            .implies("basket:write", ["basket:read"])
            .resource_name("Laptop baskets"),
    ))
}

/// Writes 32 random bytes to `path`, readable by this user only, unless the file exists.
fn make_key_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(std::io::Error::other)?;
            file.write_all(&key)
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// The basket server for what the command needs: only its declarations to describe it, its
/// store and OAuth settings to serve or call it.
async fn server(mode: Mode<Options>) -> Result<McpServer, BuildFailure> {
    let builder = McpServer::builder("basket", env!("CARGO_PKG_VERSION"))
        .instructions(
            "Laptop baskets shared by handle. Read a basket before changing it and pass its \
             version as expected_version; give every change a new operation_id and reuse it \
             only to retry the same change.",
        )
        .tools(basket::tool_set_with_quote());
    let Some(options) = mode.args() else {
        // Only the declarations are read: a memory store, which opens nothing, stands in.
        return Ok(builder.store(MemoryStore::default()).build()?);
    };
    // Standard output may be the stdio transport: everything else goes to standard error.
    let store = if options.memory {
        tracing::info!("state in memory (lost when the server stops)");
        Arc::new(MemoryStore::default()) as Arc<dyn Store>
    } else if let Some(url) = &options.postgres {
        tracing::info!("state in PostgreSQL");
        Arc::new(PostgresStore::connect(url, StoreConfig::default()).await?) as Arc<dyn Store>
    } else {
        tracing::info!(path = %options.db.display(), "state in a SQLite file");
        Arc::new(SqliteStore::open(&options.db, StoreConfig::default())?)
    };
    let mut tasks = mcp_tools::tasks::TaskOptions::default();
    if let Some(lease) = options.task_lease_ms {
        // Four polls per lease: the lease is written every other poll, so one late poll does
        // not lose it.
        let lease = std::time::Duration::from_millis(lease);
        tasks = tasks.lease(lease).poll_interval(lease / 4);
    }
    if let Some(max) = options.max_running_tasks {
        tasks = tasks.max_running(usize::try_from(max).unwrap_or(usize::MAX));
    }
    if let Some(max) = options.max_running_tasks_per_principal {
        tasks = tasks.max_running_per_principal(usize::try_from(max).unwrap_or(usize::MAX));
    }
    let mut delivery = mcp_tools::effects::DeliveryPolicy::default();
    if let Some(timeout) = options.effect_timeout_ms {
        let timeout = std::time::Duration::from_millis(timeout);
        delivery = delivery
            .timeout(timeout)
            .lease(timeout * 2 + std::time::Duration::from_secs(1))
            .poll_interval(timeout.min(std::time::Duration::from_secs(1)));
    }
    if let Some(retry) = options.effect_retry_ms {
        delivery = delivery.first_retry(std::time::Duration::from_millis(retry));
    }
    if let Some(attempts) = options.effect_attempts {
        delivery = delivery.max_attempts(attempts);
    }
    let mut builder = builder
        .store(store)
        .task_options(tasks)
        .delivery_policy(delivery);
    let key_file = match &options.signing_key_file {
        Some(path) => Some(path.clone()),
        // One host: the key lives next to the database file, made once.
        None if !options.memory && options.postgres.is_none() => {
            let mut path = options.db.clone().into_os_string();
            path.push(".key");
            let path = PathBuf::from(path);
            make_key_file(&path).map_err(|error| {
                BuildFailure::from(format!("signing key {}: {error}", path.display()))
            })?;
            Some(path)
        }
        None => None,
    };
    if let Some(path) = key_file {
        let key = std::fs::read(&path).map_err(|error| {
            BuildFailure::from(format!("--signing-key-file {}: {error}", path.display()))
        })?;
        builder = builder.signing_key(key);
    }
    if let Some(oauth) = oauth(options)? {
        tracing::info!(
            resource = options.audience.as_deref().unwrap_or_default(),
            issuer = options.issuer.as_deref().unwrap_or_default(),
            "OAuth resource server"
        );
        builder = builder.oauth(oauth);
    }
    // Behind a proxy, requests name the public host (with OAuth, the audience's); loopback stays
    // allowed for probes.
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
    hosts.extend(options.allowed_hosts.iter().cloned());
    if let Some(audience) = &options.audience {
        hosts.push(audience_host(audience).to_owned());
    }
    if hosts.len() > 3 {
        builder = builder.allowed_hosts(hosts);
    }
    Ok(builder.build()?)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    cli::run_with(server).await
}
