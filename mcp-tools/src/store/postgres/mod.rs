//! The PostgreSQL store: one database shared by replicas on many hosts.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::{
    ClientWrapper, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use futures_util::future::join_all;
use sha2::{Digest, Sha256};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

mod conninfo;
mod outbox;
mod schema;
mod tasks;
mod turns;
mod txn;

use schema::{Sql, backend, describe};
use turns::Turns;
use txn::{
    Need, PgTxn, effect_statements, history_from, item_from, item_statements, know_opened,
    record_from, statements,
};

use crate::auth::Principal;
use crate::store::api::{
    CreateRequest, MutationRequest, PruneReport, ReadRequest, Store, StoreConfig, Transition,
};
use crate::store::boundary;
use crate::store::clock::duration_millis;
use crate::store::collection::StoredItem;
use crate::store::columns::version_from_sql;
use crate::store::error::{StoreError, StoreFuture};
use crate::store::handle::has_prefix;
use crate::store::outcome::{MutationOutcome, ReadOutcome};
use crate::store::step::{StepOutcome, StepRequest, StepTransition};

/// Where a [`PostgresStore`] reads the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TimeSource {
    /// The database's clock (the default): one clock for every replica.
    #[default]
    Database,
    /// [`StoreConfig::clock`], for tests that step time with a
    /// [`ManualClock`](crate::store::ManualClock).
    StoreClock,
}

/// Settings of a [`PostgresStore`] besides the connection string.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The schema that holds the store's tables, created if missing (default `public`).
    pub schema: String,
    /// Put before each table's name (default `mcp_`), so several stores can share a schema.
    pub table_prefix: String,
    /// Connections the store keeps open at most (default 16). A busy resource holds at most
    /// one of them at a time: its other calls wait for their turn without one.
    pub pool_size: usize,
    /// How long one store call may take in all: waiting for a connection, each lock, each
    /// statement, and the transition between them (default 10 s). Past it the call answers
    /// `STORE_UNAVAILABLE` and its transaction is rolled back.
    pub timeout: Duration,
    /// Where expiry and retention read the time (default: the database's clock).
    pub time: TimeSource,
    /// How often a replica sweeps expired records when it is not told to by its writes
    /// (default 60 s). One replica sweeps at a time.
    pub sweep_interval: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "public".into(),
            table_prefix: "mcp_".into(),
            pool_size: 16,
            timeout: Duration::from_secs(10),
            time: TimeSource::Database,
            sweep_interval: Duration::from_secs(60),
        }
    }
}

/// A store in a PostgreSQL database (15 or later), shared by any number of replicas on any
/// number of hosts.
///
/// The tables are created on first use under a schema version recorded in `{prefix}migrations`;
/// a database whose schema is newer than this code's is refused.
///
/// # How a change is made atomic
///
/// Every unit runs in one transaction at PostgreSQL's default isolation, `READ COMMITTED`, made
/// atomic by locks, not by serialization checks, so no unit ever fails with a serialization
/// error the model could not act on:
///
/// 1. **First round trip**, pipelined: `BEGIN`; two transaction-scoped advisory locks,
///    `pg_advisory_xact_lock`, on 64-bit digests of (schema, table prefix, handle) and of
///    (schema, table prefix, principal, operation id): every unit that writes one resource
///    queues on the first, every unit of one operation id on the second, on every replica,
///    whether or not the row or the ledger record exists yet; then one statement that reads the
///    database's clock, the ledger record and the resource (for a create, the resource the
///    ledger record names). That statement starts after both locks are held, so in
///    `READ COMMITTED` its snapshot holds everything committed by the units it waited for.
///    Advisory locks write nothing (a `SELECT … FOR UPDATE` would write the row's lock into the
///    table and its log).
/// 2. The boundary runs in this process on what was read: version comparison, lifecycle,
///    expiry, the ledger's answer, the transition, the undo patch. If it needs a row it was not
///    given (the undo patches back to a stale `expected_version`, a replay naming another
///    resource), that row is read in the same transaction and the boundary starts over, before
///    its transition runs. The opening read leaves them out because most mutations need
///    neither, and each join costs every mutation time to set up and run.
/// 3. **Second round trip**, pipelined: the writes and `COMMIT`. The usual mutation is one
///    statement: the conditional `UPDATE … WHERE version = $2 - 1` with the undo patch and the
///    ledger record inserted from its `RETURNING`, so neither is written unless the update was.
///    Every other write is one statement too: a change without a ledger record, a new
///    resource with its record, a recorded outcome that changes nothing with its count.
///    A unit without an operation id sends `COMMIT` only once its writes have answered (a third
///    round trip): abandoned past its timeout before then, it commits nothing, where a unit
///    with an operation id leaves what it sent to the ledger to tell its retry.
///    A failing statement aborts the transaction, and the `COMMIT` then rolls it back: the
///    change, its history and its ledger record commit or vanish together.
///
/// So a mutation costs **two round trips** (three when its version is stale and its delta is
/// rebuilt from the history), a read one, a create whose state is known up front two, and a
/// create whose state the tool makes four (claim, then store). A mutation runs five
/// statements (`BEGIN`, the locks, the read, the write, `COMMIT`), where a hand-written
/// read-then-conditional-update runs two. The locks are always taken in the same order
/// (resource, then operation id), so these units cannot deadlock one another; the sweep, which
/// takes no advisory lock, deletes a ledger record before it touches a resource row, as units do,
/// so it cannot deadlock with them either. (A unit that replaces an expired record naming another
/// resource can still meet another such unit in a deadlock PostgreSQL breaks: the loser answers
/// `STORE_UNAVAILABLE`, and its retry is safe. A mutation is never run again by the store: its
/// transition runs once per attempt.) A unit is bounded in time: the pool wait, each statement
/// (`statement_timeout`), each lock wait (`lock_timeout`) and the time a transaction may sit
/// idle holding its locks while the transition runs (`idle_in_transaction_session_timeout`) are
/// all set from [`PostgresOptions::timeout`], and the whole unit is abandoned past it (these
/// settings, and `plan_cache_mode` below, are sent when connecting after the `options` of the
/// connection string or `PGOPTIONS`, so they win over the same settings there; the others
/// there apply as given). A
/// connection whose unit did not finish is closed, never reused: the server rolls its
/// transaction back and lets its locks go once it notices, within the statement and lock
/// timeouts at worst.
///
/// Call by call, the flights of messages the store waits on (round trips) and the statements it
/// asks the server to run:
///
/// | call | round trips | statements |
/// |---|---|---|
/// | read (`basket_get`) | 1 | 1 |
/// | mutation, `applied` | 2 | 5 |
/// | mutation, `stale_view` with its delta | 3 | 6 |
/// | mutation, rebased over a concurrent change | 3 | 6 |
/// | mutation, `stale_view` past the history limit, or a recorded rejection | 2 | 5 |
/// | replay | 2 | 4 |
/// | an operation id recorded about another resource | 3 | 5 |
/// | create, state known up front | 2 | 5 |
/// | create whose function makes the state | 4 (claim, then store) | 11 |
/// | mutation or create without an operation id | 3 | 5 |
/// | read of an entity with collections | 1 | 4 |
/// | append to a collection, `applied` | 2 | 6 |
/// | change of an item, fetched first | 3 | 7 |
/// | mutation that emits effects, `applied` | 2 | 6 |
/// | a claim of due effects | 1 | 1 |
/// | an effect's settlement | 1 | 1 |
/// | the effects of a resource (a read of a kind whose tools emit them) | 1 | 1 |
///
/// A read of an entity with collections runs in a read-only repeatable-read transaction, its
/// first page of each collection asked for in the same flight (`BEGIN`, the read, one query a
/// collection, `COMMIT`). A change writes the items it made or changed in one statement, and
/// those it removed in another; an item the transition reaches that the unit has not read yet
/// costs one more round trip (all the items a run asks for in one query), then the boundary
/// runs again. The effects a change emits go into the outbox in one statement more in the same
/// flight as its other writes and `COMMIT`; claiming, settling and listing effects take one
/// statement each, outside any resource's locks.
///
/// `round_trips_per_call_are_those_documented` (`mcp-tools/tests/postgres_store.rs`) holds this
/// table: it runs each call through a proxy that reads the PostgreSQL protocol on its way to the
/// database and compares what it counts with the table, read from this file.
///
/// # Connecting
///
/// The connection string is a `postgres://` URL or libpq `key=value` pairs; what it leaves out
/// comes from libpq's environment variables (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
/// `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`, `PGOPTIONS`), so a
/// password need not appear on a command line. TLS goes through rustls as `sslmode` says:
/// `disable`, `prefer` (the default, as libpq: encrypted if offered, unverified), `require`
/// (encrypted; verified against `sslrootcert` when one is given), `verify-ca` (the chain, against
/// `sslrootcert`, which it requires) and `verify-full` (the chain and the host name, against
/// `sslrootcert` or, without it or with `sslrootcert=system`, the system's roots).
/// [`PostgresOptions`] sets the schema (default `public`, created if missing) and a table prefix
/// (default `mcp_`), both always quoted, the pool size (16) and the one `timeout` (10 s) that
/// bounds each store call.
///
/// # Connections while a resource is busy
///
/// A unit holds its pooled connection while it waits for its locks. So that calls piling up
/// on one busy resource (or one operation id) do not take every connection of the pool while
/// they wait, leaving reads and changes of other resources to wait for one, the units of one
/// process take turns by lock key before they take a connection: the first in line for a key
/// goes on to the database, and the others wait in the process, holding no connection, in the
/// order they came (within the same timeout). Each process then has at most one unit per
/// resource or operation id in the database; replicas still queue on the database's locks. A
/// read takes no lock and no turn.
///
/// # Plans
///
/// Every statement on the request path is prepared once per connection and looks rows up by
/// key, so its connections run with `plan_cache_mode = force_generic_plan`: each statement is
/// planned once, for any value. Under the default (`auto`), PostgreSQL plans a statement anew
/// on each call whenever a plan for the call's values looks cheaper than the generic one, as
/// it does for the history's `version > $n` once statistics show a handle with many versions;
/// a fresh plan costs more than the statement it plans (60–190 µs against 10–20 µs, measured
/// in the store bench). The sweeps, whose range scans do depend on how much has expired, are
/// planned on every call (`force_custom_plan`), and so is the batch a request sweeps when its
/// resource's ledger share is full.
///
/// # Time
///
/// Expiry, ledger retention and creation leases are judged by the database's clock
/// (`clock_timestamp()`, read after the locks), so replicas whose clocks disagree still agree
/// on what has expired. [`TimeSource::StoreClock`] uses [`StoreConfig::clock`] instead, for
/// tests that step time.
///
/// # Failures
///
/// A lost connection, a restarted database, a statement or lock timeout, and a full pool all
/// answer [`StoreError::Backend`] (the tool result `STORE_UNAVAILABLE`, which tells the model to
/// retry with the same `operation_id`); the pool opens new connections as the database comes
/// back. A commit whose acknowledgement was lost either happened, and the retry is answered
/// from the ledger (`replayed`), or did not, and the retry applies it.
///
/// # Engines speaking PostgreSQL's protocol
///
/// The SQL is plain (text, bigint, bytea, CTEs, `ARRAY(subquery)`), except the
/// advisory locks (`pg_advisory_xact_lock`) and `to_regclass`/`to_regnamespace`, which some such
/// engines lack or treat as no-ops, and the `plan_cache_mode` setting sent when connecting
/// (PostgreSQL 12 and later), which an engine without it refuses; only PostgreSQL 15 and later
/// is tested.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: StoreConfig,
    options: PostgresOptions,
    sql: Sql,
    sweep: Arc<tokio::sync::Notify>,
    writes: std::sync::atomic::AtomicU64,
    /// This process's units of one advisory lock key, in turn.
    turns: Turns,
    /// How far the database's clock was ahead of this process's when it last told its time.
    clock_offset: std::sync::atomic::AtomicI64,
    /// Wakes this process's effect delivery.
    outbox_signal: Arc<tokio::sync::Notify>,
}

/// The unit's locks, in one order for every unit: the resource's, then the operation id's (a
/// null key takes no lock). Transaction-scoped advisory locks: held until commit or rollback,
/// written nowhere.
const LOCKS: &str = "SELECT pg_advisory_xact_lock($1::int8), pg_advisory_xact_lock($2::int8)";

/// One more resource's lock, taken before [`LOCKS`] by a step over several resources.
const LOCK_ONE: &str = "SELECT pg_advisory_xact_lock($1::int8)";

/// Plans the rest of the transaction's statements on every call, for the values they are given:
/// the sweeps' range scans, whose best plan depends on how much has expired (the session plans
/// every statement once, for any value, and a generic plan of the ledger's sweep scans the whole
/// table to delete a batch). Sent after `BEGIN` by the sweeps and the task purge, and around the
/// one sweep a request makes, which [`PLAN_ONCE`] then ends.
const PLAN_PER_CALL: &str = "SET LOCAL plan_cache_mode = force_custom_plan";

/// Back to the session's one plan per statement, for the rest of a unit.
const PLAN_ONCE: &str = "SET LOCAL plan_cache_mode = force_generic_plan";

/// Writes between two sweeps prompted by writes.
const SWEEP_EVERY: u64 = 1024;

/// Ledger records or resources one prune statement deletes at most.
const SWEEP_BATCH: i64 = 4096;

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.options.schema)
            .field("table_prefix", &self.inner.options.table_prefix)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects with default [`PostgresOptions`]: see [`PostgresStore::connect_with`].
    pub async fn connect(conninfo: &str, config: StoreConfig) -> Result<Self, StoreError> {
        PostgresStore::connect_with(conninfo, config, PostgresOptions::default()).await
    }

    /// Connects to the database `conninfo` names (a `postgres://` URL or libpq `key=value`
    /// pairs; what it leaves out comes from libpq's `PG*` environment variables, so a password
    /// can stay out of the command line), with TLS as its `sslmode` and `sslrootcert` ask
    /// (`prefer` by default, as libpq), creates or checks the tables, and starts the sweep.
    ///
    /// Must be called within a Tokio runtime, which the sweep task runs on.
    pub async fn connect_with(
        conninfo: &str,
        config: StoreConfig,
        options: PostgresOptions,
    ) -> Result<Self, StoreError> {
        schema::check_names(&options.schema, &options.table_prefix)?;
        let mut info = conninfo::parse(conninfo, |name| std::env::var(name).ok())?;
        let tls = conninfo::tls(&info)?;
        let millis = duration_millis(options.timeout).max(1);
        let settings = format!(
            "-c statement_timeout={millis} -c lock_timeout={millis} \
             -c idle_in_transaction_session_timeout={millis} \
             -c plan_cache_mode=force_generic_plan"
        );
        let startup = match info.config.get_options() {
            Some(given) => format!("{given} {settings}"),
            None => settings,
        };
        info.config.options(startup);
        let manager = Manager::from_config(
            info.config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.timeout))
            .create_timeout(Some(options.timeout))
            .recycle_timeout(Some(options.timeout))
            .build()
            .map_err(|error| StoreError::Backend(format!("PostgreSQL pool: {error}")))?;
        let sql = Sql::new(&options.schema, &options.table_prefix);
        let migrated = tokio::time::timeout(options.timeout, async {
            let mut object = pool.get().await.map_err(pool_error)?;
            let client: &mut Client = &mut object;
            let key = lock_key(&["migrate", &options.schema, &options.table_prefix]);
            schema::migrate(client, &sql, &options.schema, &options.table_prefix, key).await?;
            // The database's clock from the start, for tasks read before any state call.
            let local = config.clock.now_millis();
            let database: i64 = client
                .query_one(&format!("SELECT {}", schema::NOW_MS), &[])
                .await
                .map_err(backend)?
                .get(0);
            Ok::<_, StoreError>(database.saturating_sub(local))
        })
        .await;
        let clock_offset = match migrated {
            Ok(result) => result?,
            Err(_) => {
                return Err(StoreError::Backend(format!(
                    "PostgreSQL did not finish checking the store's tables within {:?}",
                    options.timeout
                )));
            }
        };
        let inner = Arc::new(Inner {
            pool,
            config,
            options,
            sql,
            sweep: Arc::new(tokio::sync::Notify::new()),
            writes: std::sync::atomic::AtomicU64::new(0),
            turns: Turns::new(),
            clock_offset: std::sync::atomic::AtomicI64::new(clock_offset),
            outbox_signal: Arc::default(),
        });
        tokio::spawn(sweep_loop(
            Arc::downgrade(&inner),
            Arc::clone(&inner.sweep),
            inner.options.sweep_interval,
        ));
        Ok(PostgresStore { inner })
    }

    /// How many resources the tables hold, expired ones included (for tests that count what
    /// was actually created).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub async fn resource_count_for_tests(&self) -> Result<u64, StoreError> {
        let session = self.inner.session().await?;
        let row = session
            .client()
            .query_one(&self.inner.sql.resource_count, &[])
            .await
            .map_err(backend)?;
        session.release();
        Ok(row.get::<_, i64>(0) as u64)
    }
}

#[cfg(feature = "test-hooks")]
impl PostgresStore {
    /// The plans PostgreSQL made for the statements prepared on one pooled connection so far:
    /// (generic, custom). With a pool of one, that is every statement the store ran.
    #[doc(hidden)]
    pub async fn plans_for_tests(&self) -> Result<(i64, i64), StoreError> {
        let session = self.inner.session().await?;
        let row = session
            .client()
            .query_one(
                "SELECT coalesce(sum(generic_plans), 0)::int8, coalesce(sum(custom_plans), 0)::int8
                 FROM pg_prepared_statements",
                &[],
            )
            .await
            .map_err(backend)?;
        session.release();
        Ok((row.get(0), row.get(1)))
    }

    /// The value of the setting `name` in a pooled connection's session.
    #[doc(hidden)]
    pub async fn setting_for_tests(&self, name: &str) -> Result<String, StoreError> {
        let session = self.inner.session().await?;
        let row = session
            .client()
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map_err(backend)?;
        session.release();
        Ok(row.get(0))
    }
}

/// A 64-bit advisory lock key: a digest of `parts`, so keys of different stores, operation ids
/// or purposes rarely meet (when they do, two units wait for each other needlessly, nothing
/// worse).
fn lock_key(parts: &[&str]) -> i64 {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(bytes)
}

fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => backend(error),
        other => StoreError::Backend(format!("PostgreSQL connection pool: {other}")),
    }
}

/// A pooled connection, closed instead of returned when its unit did not finish: its
/// transaction may still be open, and closing the connection is what rolls it back.
struct Session {
    object: Option<Object>,
}

impl Session {
    fn client(&self) -> &ClientWrapper {
        self.object
            .as_ref()
            .expect("a session holds its connection until released")
    }

    /// Returns the connection to the pool: its last unit ended.
    fn release(mut self) {
        self.object.take();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}

/// What the first round trip of a unit locks and reads.
struct Opening<'a> {
    /// The resource to lock and read.
    handle: Option<&'a str>,
    /// The operation id to lock, and whose ledger record to read.
    operation: Option<(&'a str, &'a str)>,
}

/// The advisory lock keys of an [`Opening`]: the resource's, then the operation id's.
type LockKeys = (Option<i64>, Option<i64>);

impl Inner {
    async fn session(&self) -> Result<Session, StoreError> {
        let object = self.pool.get().await.map_err(pool_error)?;
        Ok(Session {
            object: Some(object),
        })
    }

    fn now(&self, database: i64) -> i64 {
        match self.options.time {
            TimeSource::Database => {
                // Every reading of the database's clock also tells tasks how far it is from
                // this process's (within a round trip), for free.
                let local = self.config.clock.now_millis();
                self.clock_offset.store(
                    database.saturating_sub(local),
                    std::sync::atomic::Ordering::Relaxed,
                );
                database
            }
            TimeSource::StoreClock => self.config.clock.now_millis(),
        }
    }

    fn resource_key(&self, handle: &str) -> i64 {
        lock_key(&[
            "resource",
            &self.options.schema,
            &self.options.table_prefix,
            handle,
        ])
    }

    fn op_key(&self, principal: &str, operation_id: &str) -> i64 {
        lock_key(&[
            "operation",
            &self.options.schema,
            &self.options.table_prefix,
            principal,
            operation_id,
        ])
    }

    fn lock_keys(&self, opening: &Opening<'_>) -> LockKeys {
        (
            opening.handle.map(|handle| self.resource_key(handle)),
            opening
                .operation
                .map(|(principal, operation_id)| self.op_key(principal, operation_id)),
        )
    }

    /// The first round trip: `BEGIN`, the locks, and what the boundary reads.
    async fn open(
        &self,
        session: &Session,
        opening: &Opening<'_>,
        earlier: &[i64],
        (resource_lock, operation_lock): LockKeys,
    ) -> Result<(PgTxn, i64), StoreError> {
        let client = session.client();
        let (principal, operation_id) = opening.operation.unzip();
        let read_params: [&(dyn ToSql + Sync); 3] = [&principal, &operation_id, &opening.handle];
        let (read_sql, read_params) = match opening.handle {
            Some(_) => (&self.sql.open_mutation, &read_params[..]),
            None => (&self.sql.open_create, &read_params[..2]),
        };
        let (locks, read) = tokio::try_join!(
            client.prepare_cached(LOCKS),
            client.prepare_cached(read_sql),
        )
        .map_err(backend)?;
        let lock_params: [&(dyn ToSql + Sync); 2] = [&resource_lock, &operation_lock];
        // Each request is sent when its future is first polled: `biased` polls them in this
        // order (and `join_all` its own in theirs), which is the order the server runs them in.
        // The read starts after the locks are held, so it sees all that the units it waited for
        // committed.
        let lock_one = match earlier {
            [] => None,
            _ => Some(client.prepare_cached(LOCK_ONE).await.map_err(backend)?),
        };
        let earlier_params: Vec<[&(dyn ToSql + Sync); 1]> = earlier
            .iter()
            .map(|key| [key as &(dyn ToSql + Sync)])
            .collect();
        let earlier_locks = join_all(earlier_params.iter().map(|params| {
            let statement = lock_one
                .as_ref()
                .expect("prepared when there are earlier locks");
            client.execute(statement, params)
        }));
        let earlier_locked = async {
            for locked in earlier_locks.await {
                locked?;
            }
            Ok(())
        };
        let (_, (), _, fetched) = tokio::try_join!(
            biased;
            client.batch_execute("BEGIN"),
            earlier_locked,
            client.execute(&locks, &lock_params),
            client.query_one(&read, read_params),
        )
        .map_err(backend)?;
        let mut pg = PgTxn::new();
        know_opened(&mut pg, &fetched, opening.handle, opening.operation)?;
        let now = self.now(fetched.try_get(0).map_err(corrupt)?);
        Ok((pg, now))
    }

    /// Fetches what the boundary asked for, inside the unit's transaction.
    async fn fetch(
        &self,
        session: &Session,
        pg: &mut PgTxn,
        need: Need,
        now: i64,
    ) -> Result<(), StoreError> {
        let client = session.client();
        match need {
            Need::Resource(handle) => {
                let row = self.read_row(client, &handle, None).await?;
                pg.know_resource(&handle, record_from(&row, 1)?);
            }
            Need::Undo(handle, since) => {
                let row = self.read_row(client, &handle, Some(since)).await?;
                pg.know_history(history_from(&row, handle, since)?);
            }
            Need::Ledger(principal, operation_id) => {
                let read = client
                    .prepare_cached(&self.sql.open_create)
                    .await
                    .map_err(backend)?;
                let row = client
                    .query_one(&read, &[&principal, &operation_id])
                    .await
                    .map_err(backend)?;
                know_opened(pg, &row, None, Some((&principal, &operation_id)))?;
            }
            Need::Count(handle) => {
                // At the limit, expired records may still be counted: take a batch of them off
                // (bounded: this runs inside a request), then count again.
                let prune = client
                    .prepare_cached(&self.sql.prune_ledger)
                    .await
                    .map_err(backend)?;
                let params: [&(dyn ToSql + Sync); 2] = [&now, &SWEEP_BATCH];
                tokio::try_join!(
                    biased;
                    client.batch_execute(PLAN_PER_CALL),
                    client.query_one(&prune, &params),
                    client.batch_execute(PLAN_ONCE),
                )
                .map_err(backend)?;
                let row = self.read_row(client, &handle, None).await?;
                let live = record_from(&row, 1)?.map_or(0, |(_, live)| live);
                pg.know_exact_count(&handle, live);
            }
            Need::Items(handle, wanted) => {
                let found = self.fetch_items(client, &handle, &wanted).await?;
                pg.know_items(&handle, &wanted, found);
            }
            Need::Page(handle, field, after, limit) => {
                let read = client
                    .prepare_cached(&self.sql.items_page)
                    .await
                    .map_err(backend)?;
                let params: [&(dyn ToSql + Sync); 4] =
                    [&handle, &field, &to_sql(after), &to_sql(limit as u64)];
                let rows = client.query(&read, &params).await.map_err(backend)?;
                let items = rows
                    .iter()
                    .map(|row| item_from(row, 0, Some(2)))
                    .collect::<Result<_, _>>()?;
                pg.know_page((handle, field, after, limit), items);
            }
            Need::Since(handle, version, limit) => {
                let read = client
                    .prepare_cached(&self.sql.items_since)
                    .await
                    .map_err(backend)?;
                let params: [&(dyn ToSql + Sync); 3] =
                    [&handle, &to_sql(version), &to_sql(limit as u64)];
                let rows = client.query(&read, &params).await.map_err(backend)?;
                let mut items = rows
                    .iter()
                    .map(|row| {
                        let field: String = row.try_get(0).map_err(corrupt)?;
                        Ok((field, item_from(row, 1, Some(3))?))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                items.sort_by_key(|(field, item)| (item.version, field.clone(), item.id));
                items.truncate(limit);
                pg.know_since((handle, version, limit), items);
            }
        }
        Ok(())
    }

    /// The items of `handle` among `wanted`, and the remembered removals among the rest.
    async fn fetch_items(
        &self,
        client: &ClientWrapper,
        handle: &str,
        wanted: &[(&'static str, u64)],
    ) -> Result<Vec<(&'static str, StoredItem)>, StoreError> {
        let read = client
            .prepare_cached(&self.sql.items_get)
            .await
            .map_err(backend)?;
        let fields: Vec<&str> = wanted.iter().map(|(field, _)| *field).collect();
        let ids: Vec<i64> = wanted.iter().map(|(_, id)| to_sql(*id)).collect();
        let rows = client
            .query(&read, &[&handle, &fields, &ids])
            .await
            .map_err(backend)?;
        let mut found = Vec::new();
        for row in &rows {
            let (field, id): (&str, i64) = (
                row.try_get(0).map_err(corrupt)?,
                row.try_get(1).map_err(corrupt)?,
            );
            let Some(&(field, _)) = wanted.iter().find(|(wanted, _)| *wanted == field) else {
                continue;
            };
            let version: Option<i64> = row.try_get(2).map_err(corrupt)?;
            let removed: Option<i64> = row.try_get(4).map_err(corrupt)?;
            let item = match (version, removed) {
                (Some(_), _) => item_from(row, 1, Some(3))?,
                (None, Some(at)) => StoredItem {
                    id: version_from_sql(id)?,
                    version: version_from_sql(at)?,
                    value: None,
                },
                (None, None) => continue,
            };
            found.push((field, item));
        }
        Ok(found)
    }

    async fn read_row(
        &self,
        client: &ClientWrapper,
        handle: &str,
        since: Option<u64>,
    ) -> Result<tokio_postgres::Row, StoreError> {
        let read = client
            .prepare_cached(&self.sql.read)
            .await
            .map_err(backend)?;
        // No version past `i64::MAX` exists, so asking since one reads no history, as asking
        // since any version the resource never reached does; the boundary then answers
        // FUTURE_VERSION, as every store does, instead of the bind failing the store.
        let since = since.map(|version| i64::try_from(version).unwrap_or(i64::MAX));
        client
            .query_one(&read, &[&handle, &since])
            .await
            .map_err(backend)
    }

    /// Runs the boundary step `step` on `pg`, fetching what it asks for until it has all it
    /// reads.
    async fn settle<T>(
        &self,
        session: &Session,
        pg: &mut PgTxn,
        now: i64,
        mut step: impl FnMut(&mut PgTxn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        loop {
            match step(pg) {
                Err(error) => match pg.need.take() {
                    Some(need) => {
                        self.fetch(session, pg, need, now).await?;
                        pg.restart();
                    }
                    None => return Err(error),
                },
                Ok(value) => return Ok(value),
            }
        }
    }

    /// The second round trip: the writes and `COMMIT`, pipelined when the unit has an operation
    /// id. A unit abandoned past its timeout may still commit what it already sent; with an
    /// operation id its retry reads the outcome from the ledger, so that costs nothing. Without
    /// one, nothing would tell a retry that the change was made, so `COMMIT` goes out only
    /// once the writes have answered (one more round trip): a unit abandoned before then never
    /// commits.
    async fn commit(&self, session: &Session, pg: PgTxn, ledgered: bool) -> Result<(), StoreError> {
        let client = session.client();
        let mut list = Vec::new();
        statements(pg.writes, &mut list)?;
        item_statements(pg.item_writes, &mut list);
        effect_statements(pg.effects, &mut list);
        let mut prepared = Vec::with_capacity(list.len());
        for (statement, _, _) in &list {
            let sql = self.sql.of(*statement);
            prepared.push(client.prepare_cached(sql).await.map_err(backend)?);
        }
        let writes = join_all(
            list.iter()
                .zip(&prepared)
                .map(|((_, params, _), statement)| {
                    client.execute_raw(
                        statement,
                        params
                            .iter()
                            .map(|param| param.as_ref() as &(dyn ToSql + Sync)),
                    )
                }),
        );
        // With nothing written, there is nothing a lost answer could hide.
        let pipelined = ledgered || list.is_empty();
        let (written, committed) = if pipelined {
            tokio::join!(biased; writes, client.batch_execute("COMMIT"))
        } else {
            (writes.await, Ok(()))
        };
        for (result, (statement, _, exact)) in written.into_iter().zip(&list) {
            let rows = result.map_err(backend)?;
            if *exact && rows != 1 {
                return Err(StoreError::Corrupt(format!(
                    "{statement:?} changed {rows} rows, not 1, under the unit's locks"
                )));
            }
        }
        committed.map_err(backend)?;
        if !pipelined {
            client.batch_execute("COMMIT").await.map_err(backend)?;
        }
        Ok(())
    }

    /// Runs one unit: the opening round trip, the boundary step, the commit round trip; the
    /// connection goes back to the pool only when all of it succeeded. Before it takes a
    /// connection, the unit waits for the turn of each lock it will take, in the locks' order,
    /// behind this process's units that asked first (see [`turns`]).
    async fn unit<T>(
        &self,
        opening: Opening<'_>,
        step: impl FnMut(&mut PgTxn, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let keys = self.lock_keys(&opening);
        self.unit_locking(opening, &[], keys, step).await
    }

    /// [`unit`](Self::unit), taking the locks `earlier` (resource keys, in order) before the
    /// opening's own `keys`: a step locks every resource it names, sorted.
    async fn unit_locking<T>(
        &self,
        opening: Opening<'_>,
        earlier: &[i64],
        keys: LockKeys,
        step: impl FnMut(&mut PgTxn, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut step = step;
        let mut _earlier_turns = Vec::with_capacity(earlier.len());
        for key in earlier {
            _earlier_turns.push(self.turns.take(*key).await);
        }
        let _resource_turn = self.turns.take_if(keys.0).await;
        let _operation_turn = self.turns.take_if(keys.1).await;
        let session = self.session().await?;
        let (mut pg, now) = self.open(&session, &opening, earlier, keys).await?;
        let value = self
            .settle(&session, &mut pg, now, |pg| step(pg, now))
            .await?;
        self.commit(&session, pg, opening.operation.is_some())
            .await?;
        session.release();
        self.count_write();
        Ok(value)
    }

    fn count_write(&self) {
        let writes = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if (writes + 1).is_multiple_of(SWEEP_EVERY) {
            self.sweep.notify_one();
        }
    }

    async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.options.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Backend(format!(
                "PostgreSQL did not answer within {:?}",
                self.options.timeout
            ))),
        }
    }

    async fn read(&self, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        if !request.kind.collections.is_empty() {
            return self.read_with_items(request).await;
        }
        let session = self.session().await?;
        let row = self
            .read_row(session.client(), &request.handle, request.since)
            .await?;
        let mut pg = PgTxn::new();
        pg.know_resource(&request.handle, record_from(&row, 1)?);
        if let Some(since) = request.since {
            pg.know_history(history_from(&row, request.handle.clone(), since)?);
        }
        let now = self.now(row.try_get(0).map_err(corrupt)?);
        session.release();
        boundary::read(&mut pg, &self.config, request, now)
    }

    /// A read of a resource with collections: its state, history and items from one snapshot
    /// (a read-only repeatable-read transaction). The first page of each collection is asked
    /// for with the state, and without a `since` the `COMMIT` too: one round trip. What changed
    /// since a version is fetched as the boundary asks, before the `COMMIT`.
    async fn read_with_items(&self, request: &ReadRequest) -> Result<ReadOutcome, StoreError> {
        let session = self.session().await?;
        let client = session.client();
        let (read, page) = tokio::try_join!(
            client.prepare_cached(&self.sql.read),
            client.prepare_cached(&self.sql.items_page),
        )
        .map_err(backend)?;
        let since = request
            .since
            .map(|version| i64::try_from(version).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 2] = [&request.handle, &since];
        let pages: Vec<(&'static str, u64, usize)> = request
            .kind
            .collections
            .iter()
            .map(|field| {
                let (after, limit) = boundary::page_of(request, field);
                (*field, after, limit)
            })
            .collect();
        let page_params: Vec<(i64, i64)> = pages
            .iter()
            .map(|(_, after, limit)| (to_sql(*after), to_sql(*limit as u64)))
            .collect();
        let page_bindings: Vec<[&(dyn ToSql + Sync); 4]> = pages
            .iter()
            .zip(&page_params)
            .map(|((field, ..), (after, limit))| {
                [&request.handle as &(dyn ToSql + Sync), field, after, limit]
            })
            .collect();
        let page_queries = page_bindings
            .iter()
            .map(|params| client.query(&page, params));
        let one_trip = request.since.is_none();
        let commit = async {
            match one_trip {
                true => client.batch_execute("COMMIT").await,
                false => Ok(()),
            }
        };
        let (_, row, page_rows, ()) = tokio::try_join!(
            biased;
            client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
            client.query_one(&read, &params),
            futures_util::future::try_join_all(page_queries),
            commit,
        )
        .map_err(backend)?;
        let mut pg = PgTxn::new();
        pg.know_resource(&request.handle, record_from(&row, 1)?);
        if let Some(since) = request.since {
            pg.know_history(history_from(&row, request.handle.clone(), since)?);
        }
        for ((field, after, limit), rows) in pages.into_iter().zip(page_rows) {
            let items = rows
                .iter()
                .map(|row| item_from(row, 0, Some(2)))
                .collect::<Result<_, _>>()?;
            pg.know_page((request.handle.clone(), field, after, limit), items);
        }
        let now = self.now(row.try_get(0).map_err(corrupt)?);
        let outcome = self
            .settle(&session, &mut pg, now, |pg| {
                boundary::read(pg, &self.config, request, now)
            })
            .await?;
        if !one_trip {
            client.batch_execute("COMMIT").await.map_err(backend)?;
        }
        session.release();
        Ok(outcome)
    }

    async fn mutate(
        &self,
        request: &MutationRequest,
        transition: &mut Transition,
    ) -> Result<MutationOutcome, StoreError> {
        let principal = request.principal.key();
        let opening = Opening {
            handle: has_prefix(&request.handle, request.kind.prefix)
                .then_some(request.handle.as_str()),
            operation: request
                .operation
                .as_ref()
                .map(|(operation_id, _)| (principal, operation_id.as_str())),
        };
        self.unit(opening, |pg, now| {
            boundary::mutate(pg, &self.config, request, transition, now)
        })
        .await
    }

    async fn step(
        &self,
        request: &StepRequest,
        transition: &mut StepTransition,
    ) -> Result<StepOutcome, StoreError> {
        let principal = request.principal.key();
        let first = request.parts.first();
        // Every resource's lock, sorted by key: the last is taken with the operation id's, the
        // others just before, in the opening round trip.
        let mut resource_keys: Vec<i64> = request
            .parts
            .iter()
            .map(|part| self.resource_key(&part.handle))
            .collect();
        resource_keys.sort_unstable();
        resource_keys.dedup();
        let last = resource_keys.pop();
        let operation = request
            .operation
            .as_ref()
            .map(|(operation_id, _)| (principal, operation_id.as_str()));
        let keys = (
            last,
            operation.map(|(principal, operation_id)| self.op_key(principal, operation_id)),
        );
        let opening = Opening {
            handle: first
                .filter(|part| has_prefix(&part.handle, part.kind.prefix))
                .map(|part| part.handle.as_str()),
            operation,
        };
        self.unit_locking(opening, &resource_keys, keys, |pg, now| {
            boundary::step::step(pg, &self.config, request, transition, now)
        })
        .await
    }

    /// One prune step in its own transaction, if this replica holds the sweep lock (`wait`:
    /// until it does); the rows it removed.
    async fn prune_step(&self, step: PruneStep, wait: bool) -> Result<Option<u64>, StoreError> {
        let session = self.session().await?;
        let client = session.client();
        let key = lock_key(&["sweep", &self.options.schema, &self.options.table_prefix]);
        tokio::try_join!(
            biased;
            client.batch_execute("BEGIN"),
            client.batch_execute(PLAN_PER_CALL),
        )
        .map_err(backend)?;
        let lock = if wait {
            format!(
                "SELECT true, {} FROM (SELECT pg_advisory_xact_lock($1)) AS locked",
                schema::NOW_MS
            )
        } else {
            format!("SELECT pg_try_advisory_xact_lock($1), {}", schema::NOW_MS)
        };
        let row = client.query_one(&lock, &[&key]).await.map_err(backend)?;
        let held: bool = row.try_get(0).map_err(corrupt)?;
        if !held {
            client.batch_execute("COMMIT").await.map_err(backend)?;
            session.release();
            return Ok(None);
        }
        let now = self.now(row.try_get(1).map_err(corrupt)?);
        let cutoff = now.saturating_sub(duration_millis(self.config.ledger_retention));
        let (sql, before) = match step {
            PruneStep::Ledger => (&self.sql.prune_ledger, now),
            PruneStep::Resources => (&self.sql.prune_resources, cutoff),
            PruneStep::Effects => (&self.sql.prune_effects, cutoff),
        };
        let prune = client.prepare_cached(sql).await.map_err(backend)?;
        let removed: i64 = client
            .query_one(&prune, &[&before, &SWEEP_BATCH])
            .await
            .map_err(backend)?
            .try_get(0)
            .map_err(corrupt)?;
        client.batch_execute("COMMIT").await.map_err(backend)?;
        session.release();
        Ok(Some(removed as u64))
    }

    /// A prune as short transactions: the ledger a batch at a time, then the resources, then
    /// the settled effects.
    async fn prune(&self, wait: bool) -> Result<PruneReport, StoreError> {
        let mut report = PruneReport::default();
        for step in [PruneStep::Ledger, PruneStep::Resources, PruneStep::Effects] {
            loop {
                let Some(removed) = self.bounded(self.prune_step(step, wait)).await? else {
                    return Ok(report);
                };
                *match step {
                    PruneStep::Ledger => &mut report.ledger_records,
                    PruneStep::Resources => &mut report.resources,
                    PruneStep::Effects => &mut report.effects,
                } += removed;
                if removed < SWEEP_BATCH as u64 {
                    break;
                }
            }
        }
        Ok(report)
    }
}

/// What one prune transaction removes a batch of.
#[derive(Debug, Clone, Copy)]
enum PruneStep {
    /// Expired ledger records.
    Ledger,
    /// Resources expired longer ago than the ledger retention, with their history and items.
    Resources,
    /// Effects settled longer ago than the ledger retention.
    Effects,
}

/// The automatic sweep: every so many writes or every [`PostgresOptions::sweep_interval`], one
/// replica at a time (the others find the sweep lock held and skip). The one sweep on a request
/// is the one SQLite also makes: a resource whose ledger share is full has a batch of expired
/// records taken off before its share is judged.
async fn sweep_loop(store: Weak<Inner>, wake: Arc<tokio::sync::Notify>, interval: Duration) {
    loop {
        // Waits holding no reference to the store, so dropping the store ends the loop.
        let _ = tokio::time::timeout(interval, wake.notified()).await;
        let Some(inner) = store.upgrade() else {
            return;
        };
        if let Err(error) = inner.prune(false).await {
            tracing::warn!(%error, "the state store's sweep failed; it will run again");
        }
    }
}

/// An id, version or count as PostgreSQL's `int8`; none this store makes reaches past it.
fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn corrupt(error: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(describe(&error))
}

impl boundary::CreateUnits for PostgresStore {
    type Txn<'t> = PgTxn;

    fn unit<T, F>(
        &self,
        principal: &Principal,
        operation_id: Option<&str>,
        work: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut PgTxn, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let principal = principal.key().to_owned();
        let operation_id = operation_id.map(str::to_owned);
        async move {
            let opening = Opening {
                handle: None,
                operation: operation_id
                    .as_deref()
                    .map(|operation_id| (principal.as_str(), operation_id)),
            };
            // The create's steps read only the ledger record and the resource it names, both
            // fetched up front, so `work` runs once.
            let mut work = Some(work);
            let config = &inner.config;
            inner
                .bounded(inner.unit(opening, |pg, now| match work.take() {
                    Some(work) => work(pg, config, now),
                    None => Err(StoreError::Backend(
                        "a create step asked for a read it was not given".into(),
                    )),
                }))
                .await
        }
    }

    fn abandon(&self, principal: &Principal, operation_id: &str, token: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.clone();
        let (principal, operation_id) = (principal.clone(), operation_id.to_owned());
        runtime.spawn(async move {
            // The claim's own failure is often the connection's: a few tries on fresh ones,
            // spaced out, before leaving the claim to lapse (which holds retries off that long).
            let mut pause = ABANDON_FIRST_PAUSE;
            for attempt in 1..=ABANDON_ATTEMPTS {
                let (who, id) = (principal.clone(), operation_id.clone());
                let released = boundary::CreateUnits::unit(
                    &store,
                    &principal,
                    Some(&operation_id),
                    move |txn, _, _| boundary::abandon(txn, &who, &id, token),
                )
                .await;
                match released {
                    Ok(()) => return,
                    Err(error) if attempt == ABANDON_ATTEMPTS => tracing::warn!(
                        %error,
                        "could not give up an abandoned create's claim; it lapses on its own"
                    ),
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        pause *= 2;
                    }
                }
            }
        });
    }
}

/// How many times an abandoned create's claim is given up before it is left to lapse, and the
/// pause after the first failure (doubling after each).
const ABANDON_ATTEMPTS: u32 = 5;
const ABANDON_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

impl Store for PostgresStore {
    /// A database replicas on many hosts share.
    fn shared_by_processes(&self) -> bool {
        true
    }

    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        Box::pin(boundary::create(self, request))
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        Box::pin(async move { self.inner.bounded(self.inner.read(&request)).await })
    }

    fn mutate(
        &self,
        request: MutationRequest,
        mut transition: Transition,
    ) -> StoreFuture<'_, MutationOutcome> {
        // Never run again here once it failed: the transition may have run, and it runs once
        // per attempt. A retry with the same operation id is the caller's, and it is safe.
        Box::pin(async move {
            self.inner
                .bounded(self.inner.mutate(&request, &mut transition))
                .await
        })
    }

    fn mutate_step(
        &self,
        request: StepRequest,
        mut transition: StepTransition,
    ) -> StoreFuture<'_, StepOutcome> {
        Box::pin(async move {
            self.inner
                .bounded(self.inner.step(&request, &mut transition))
                .await
        })
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        Box::pin(self.inner.prune(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_tell_their_parts_apart() {
        assert_ne!(lock_key(&["ab", "c"]), lock_key(&["a", "bc"]));
        assert_eq!(lock_key(&["a", "b"]), lock_key(&["a", "b"]));
    }
}
