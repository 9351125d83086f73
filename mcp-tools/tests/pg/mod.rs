//! The PostgreSQL the tests use: `MCP_TOOLS_POSTGRES_URL` (`.ci/postgres` starts one and sets
//! it). Without it the PostgreSQL tests skip, loudly, on a developer's machine, and fail in CI
//! (`CI` set), where a skipped store would hide a broken one.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use mcp_tools::store::{PostgresOptions, PostgresStore, StoreConfig, TimeSource};

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
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            PostgresStore::connect_with(&self.url, config, options),
        )
        .await
        .expect("connecting to PostgreSQL timed out")
        .expect("the PostgreSQL store opens")
    }

    /// Opens a store from synchronous code inside a multi-threaded runtime.
    pub fn open(&self, config: StoreConfig) -> PostgresStore {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.connect(config))
        })
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
