//! The store's tables in PostgreSQL: their names (in a configurable schema, with a configurable
//! prefix, always quoted), the statements that use them, and the migrations that create them.

use super::txn::Statement;
use crate::store::error::StoreError;

/// The newest schema version this code writes and reads.
///
/// Migrations are additive (new tables, new nullable columns, new indexes), so replicas of the
/// release before and of this one run side by side during a rolling deploy. Each migration
/// records `compatible_from`: the oldest schema version whose code may still use a database
/// that has it. Code finding a newer schema it is compatible with uses it as it is; one finding
/// a schema it is not compatible with, or tables no migration made, refuses to start.
pub(crate) const LATEST: i32 = 4;

/// The migrations, in order: version, the oldest version whose code may use the result, what
/// it does, its statements.
const MIGRATIONS: &[(i32, i32, &str, &str)] = &[
    (
        1,
        1,
        "resources, their undo history and the operation-id ledger",
        "
CREATE TABLE {resources} (
    handle      text PRIMARY KEY,
    kind        text NOT NULL,
    owner       text NOT NULL,
    version     bigint NOT NULL,
    state       text NOT NULL,
    lifecycle   text NOT NULL,
    expires_at  bigint,
    ledger_live bigint NOT NULL DEFAULT 0
);
CREATE INDEX {resources_expiry} ON {resources} (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE {changes} (
    handle  text NOT NULL,
    version bigint NOT NULL,
    undo    text NOT NULL,
    PRIMARY KEY (handle, version)
);
CREATE TABLE {ledger} (
    seq          bigserial PRIMARY KEY,
    principal    text NOT NULL,
    operation_id text NOT NULL,
    fingerprint  bytea NOT NULL,
    outcome      text,
    claim        bigint,
    handle       text,
    recorded_at  bigint NOT NULL,
    expires_at   bigint NOT NULL
);
CREATE UNIQUE INDEX {ledger_key} ON {ledger} (principal, operation_id);
",
    ),
    (
        2,
        1,
        "task records of the Tasks extension",
        "
CREATE TABLE {tasks} (
    id         text PRIMARY KEY,
    expires_at bigint NOT NULL,
    record     bytea NOT NULL
);
CREATE INDEX {tasks_expiry} ON {tasks} (expires_at);
",
    ),
    (
        3,
        1,
        "collection items, one row each, and their remembered removals",
        "
CREATE TABLE {items} (
    handle  text NOT NULL,
    field   text NOT NULL,
    id      bigint NOT NULL,
    version bigint NOT NULL,
    value   text NOT NULL,
    PRIMARY KEY (handle, field, id)
);
CREATE INDEX {items_version} ON {items} (handle, version);
CREATE TABLE {item_removals} (
    handle  text NOT NULL,
    version bigint NOT NULL,
    field   text NOT NULL,
    id      bigint NOT NULL,
    PRIMARY KEY (handle, version, field, id)
);
",
    ),
    (
        4,
        1,
        "the outbox: effects emitted by changes, with their delivery",
        "
CREATE TABLE {outbox} (
    seq         bigserial PRIMARY KEY,
    key         text NOT NULL UNIQUE,
    kind        text NOT NULL,
    handle      text NOT NULL,
    principal   text NOT NULL,
    payload     text NOT NULL,
    state       text NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    next_at     bigint NOT NULL,
    lease_owner text,
    lease_until bigint,
    result      text,
    error       text,
    created_at  bigint NOT NULL,
    settled_at  bigint
);
CREATE INDEX {outbox_pending} ON {outbox} (seq) WHERE state = 'pending';
CREATE INDEX {outbox_handle} ON {outbox} (handle, seq);
CREATE INDEX {outbox_settled} ON {outbox} (settled_at) WHERE settled_at IS NOT NULL;
",
    ),
];

/// A PostgreSQL identifier, quoted: any name is safe in SQL this way.
pub(crate) fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Checks a schema name or table prefix: PostgreSQL truncates identifiers past 63 bytes, which
/// would silently merge two stores' tables.
pub(crate) fn check_names(schema: &str, prefix: &str) -> Result<(), StoreError> {
    if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
        return Err(StoreError::Backend(format!(
            "the PostgreSQL schema name {schema:?} must be 1 to 63 bytes with no NUL"
        )));
    }
    if schema.contains(['{', '}']) || prefix.contains(['{', '}']) {
        return Err(StoreError::Backend(format!(
            "the PostgreSQL schema name {schema:?} and table prefix {prefix:?} may not contain \
             braces"
        )));
    }
    if prefix.len() > 40 || prefix.contains('\0') {
        return Err(StoreError::Backend(format!(
            "the table prefix {prefix:?} must be at most 40 bytes with no NUL, so every table \
             and index name fits PostgreSQL's 63"
        )));
    }
    Ok(())
}

/// The store's qualified, quoted table names and the statements built from them once.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) schema: String,
    pub(crate) migrations: String,
    pub(crate) resources: String,
    pub(crate) changes: String,
    pub(crate) ledger: String,
    pub(crate) tasks: String,
    pub(crate) items: String,
    pub(crate) item_removals: String,
    pub(crate) outbox: String,
    /// What names a table of the store without the schema (for `to_regclass`).
    unqualified: Vec<String>,
    pub(crate) open_create: String,
    pub(crate) open_mutation: String,
    pub(crate) read: String,
    pub(crate) insert_resource: String,
    pub(crate) insert_recorded: String,
    pub(crate) update_resource: String,
    pub(crate) update_recorded: String,
    pub(crate) insert_ledger: String,
    pub(crate) insert_ledger_counted: String,
    pub(crate) delete_ledger: String,
    pub(crate) prune_ledger: String,
    pub(crate) prune_resources: String,
    /// Collection items of handle $1 by (collection, id) from the arrays $2 and $3, with the
    /// version of a remembered removal where there is no item.
    pub(crate) items_get: String,
    /// Up to $4 items of handle $1's collection $2 after id $3, in id order.
    pub(crate) items_page: String,
    /// Up to $3 items of handle $1 written after version $2, and up to $3 removals.
    pub(crate) items_since: String,
    pub(crate) upsert_items: String,
    pub(crate) remove_items: String,
    pub(crate) forget_removals: String,
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    pub(crate) resource_count: String,
    /// The task statements: by id, by id locking the row, insert unless present, write back,
    /// purge what expired.
    pub(crate) task_load: String,
    pub(crate) task_lock: String,
    pub(crate) task_insert: String,
    pub(crate) task_update: String,
    pub(crate) task_purge: String,
    /// The outbox: a change's effects (keys $1, kinds $2, payloads $6 of handle $3 by principal
    /// $4 at $5), a claim, a settlement, a resource's statuses, a sweep batch.
    pub(crate) insert_effects: String,
    pub(crate) claim_effects: String,
    pub(crate) settle_effect: String,
    pub(crate) effect_statuses: String,
    pub(crate) prune_effects: String,
}

/// The database's clock in milliseconds since the epoch, read when the statement runs (after
/// any lock it waited for).
pub(crate) const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::int8";

/// The columns of a ledger row (alias `l`), in the order [`super::txn::entry_from`] reads them.
const LEDGER_COLUMNS: &str =
    "l.fingerprint, l.outcome, l.claim, l.handle, l.recorded_at, l.expires_at";

/// The columns a new resource row is written with, in the order of its parameters.
const RESOURCE_INSERT: &str =
    "handle, kind, owner, version, state, lifecycle, expires_at, ledger_live";

/// The columns a ledger record is written with, in the order of its parameters.
const LEDGER_INSERT: &str =
    "principal, operation_id, fingerprint, outcome, claim, handle, recorded_at, expires_at";

/// The columns of a resource row, in the order [`super::txn::record_from`] reads them.
const RESOURCE_COLUMNS: &str = "kind, owner, version, state, lifecycle, expires_at, ledger_live";

impl Sql {
    /// The text of a write statement.
    pub(crate) fn of(&self, statement: Statement) -> &str {
        match statement {
            Statement::InsertResource => &self.insert_resource,
            Statement::InsertRecorded => &self.insert_recorded,
            Statement::UpdateResource => &self.update_resource,
            Statement::UpdateRecorded => &self.update_recorded,
            Statement::InsertLedger => &self.insert_ledger,
            Statement::InsertLedgerCounted => &self.insert_ledger_counted,
            Statement::DeleteLedger => &self.delete_ledger,
            Statement::UpsertItems => &self.upsert_items,
            Statement::RemoveItems => &self.remove_items,
            Statement::ForgetRemovals => &self.forget_removals,
            Statement::InsertEffects => &self.insert_effects,
        }
    }

    pub(crate) fn new(schema: &str, prefix: &str) -> Self {
        let table = |name: &str| format!("{}.{}", quote(schema), quote(&format!("{prefix}{name}")));
        let (resources, changes, ledger) = (table("resources"), table("changes"), table("ledger"));
        // A change, its undo patch and the history beyond the limit ($7: versions up to it, 0 for
        // none) in one statement, the resource's ledger share growing by `counted`; `more` adds
        // statements that read `u`. The handle's advisory lock is held; should the row still
        // have moved (or gone), the division by zero aborts the transaction, so the `COMMIT`
        // sent with it rolls everything back.
        let change = |counted: &str, more: &str| {
            format!(
                "WITH u AS (
                     UPDATE {resources} SET version = $2::int8, state = $3, lifecycle = $4,
                         expires_at = $5::int8, ledger_live = ledger_live + {counted}
                     WHERE handle = $1 AND version = $2::int8 - 1
                     RETURNING handle),
                 c AS (INSERT INTO {changes} (handle, version, undo)
                       SELECT handle, $2::int8, $6 FROM u),
                 d AS (DELETE FROM {changes}
                       WHERE handle = $1 AND version <= $7::int8
                         AND EXISTS (SELECT 1 FROM u)){more}
                 SELECT 1 / count(*)::int FROM u"
            )
        };
        let tasks = table("tasks");
        let (items, item_removals) = (table("items"), table("item_removals"));
        let outbox = table("outbox");
        let columns = |alias: &str| {
            RESOURCE_COLUMNS
                .split(", ")
                .map(|column| format!("{alias}.{column}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (r_columns, lr_columns) = (columns("r"), columns("lr"));
        // The undo patches of handle `$h` after version `$v` (none when `$v` is null), newest
        // first, as two arrays from one scan of the history's key.
        let history = |handle: &str, since: &str| {
            format!(
                "CROSS JOIN LATERAL (
                     SELECT coalesce(array_agg(c.version ORDER BY c.version DESC), '{{}}')
                                AS versions,
                            coalesce(array_agg(c.undo ORDER BY c.version DESC), '{{}}')
                                AS patches
                     FROM {changes} AS c
                     WHERE c.handle = {handle}::text AND c.version > {since}::int8) AS h"
            )
        };
        Sql {
            schema: quote(schema),
            migrations: table("migrations"),
            unqualified: [
                "resources",
                "changes",
                "ledger",
                "tasks",
                "items",
                "item_removals",
                "outbox",
            ]
            .iter()
            .map(|name| format!("{prefix}{name}"))
            .collect(),
            // After the locks: the clock, and the ledger record of (principal, operation id)
            // with the resource it names (a replay shows it); one statement, so one snapshot.
            open_create: format!(
                "SELECT {NOW_MS}, {LEDGER_COLUMNS}, {lr_columns}
                 FROM (SELECT 1) AS one
                 LEFT JOIN {ledger} AS l ON l.principal = $1::text AND l.operation_id = $2::text
                 LEFT JOIN {resources} AS lr ON lr.handle = l.handle"
            ),
            // After the locks: the clock, the ledger record and the resource the request names.
            // What only a stale version or a replay about another resource needs (the undo
            // patches, that resource) is read after it, when the boundary asks: a statement
            // costs more to start than these lookups cost to run.
            open_mutation: format!(
                "SELECT {NOW_MS}, {LEDGER_COLUMNS}, {r_columns}
                 FROM (SELECT 1) AS one
                 LEFT JOIN {ledger} AS l ON l.principal = $1::text AND l.operation_id = $2::text
                 LEFT JOIN {resources} AS r ON r.handle = $3::text"
            ),
            // One statement, so one snapshot: the state and its history agree.
            read: format!(
                "SELECT {NOW_MS}, {r_columns}, h.versions, h.patches
                 FROM (SELECT 1) AS one
                 LEFT JOIN {resources} AS r ON r.handle = $1::text
                 {history}",
                history = history("$1", "$2"),
            ),
            insert_resource: format!(
                "INSERT INTO {resources} ({RESOURCE_INSERT}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            ),
            // A new resource and the ledger record about it, in one statement: a create with an
            // operation id.
            insert_recorded: format!(
                "WITH r AS (
                     INSERT INTO {resources} ({RESOURCE_INSERT})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 1))
                 INSERT INTO {ledger} ({LEDGER_INSERT})
                 VALUES ($8, $9, $10, $11, NULL, $1, $12, $13)"
            ),
            update_resource: change("$8::int8", ""),
            // The same with the ledger record about it, the usual mutation: the record's insert
            // reads `u` too.
            update_recorded: change(
                "1",
                &format!(
                    ",
                 l AS (INSERT INTO {ledger} ({LEDGER_INSERT})
                       SELECT $8, $9, $10, $11, NULL, handle, $12::int8, $13::int8 FROM u)"
                ),
            ),
            insert_ledger: format!(
                "INSERT INTO {ledger} ({LEDGER_INSERT}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            ),
            // A record that names a resource no write of this transaction counts it in: the
            // resource may be gone, so its count is not required to change.
            insert_ledger_counted: format!(
                "WITH l AS (
                     INSERT INTO {ledger} ({LEDGER_INSERT})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8))
                 UPDATE {resources} SET ledger_live = ledger_live + 1 WHERE handle = $6"
            ),
            // A record a sweep already took is not there, nor counted, any more: the count goes
            // down only for a record this statement removed.
            delete_ledger: format!(
                "WITH gone AS (
                     DELETE FROM {ledger} WHERE principal = $1 AND operation_id = $2
                     RETURNING handle, outcome IS NOT NULL AS counted)
                 UPDATE {resources} AS r SET ledger_live = greatest(r.ledger_live - 1, 0)
                 FROM gone WHERE r.handle = gone.handle AND gone.counted"
            ),
            // Up to $2 expired records, oldest first, taken off their resources' counts in the
            // same statement. Records are in recording order, so the batch is found before the
            // first live one without an expiry index.
            prune_ledger: format!(
                "WITH gone AS (
                     DELETE FROM {ledger} WHERE seq IN (
                         SELECT seq FROM {ledger}
                         WHERE expires_at <= $1::int8
                           AND seq < coalesce(
                               (SELECT min(seq) FROM {ledger} WHERE expires_at > $1::int8),
                               9223372036854775807)
                         ORDER BY seq LIMIT $2::int8)
                     RETURNING handle, outcome IS NOT NULL AS counted),
                 counted AS (
                     SELECT handle, count(*) AS n FROM gone
                     WHERE handle IS NOT NULL AND counted GROUP BY handle),
                 uncounted AS (
                     UPDATE {resources} AS r
                     SET ledger_live = greatest(r.ledger_live - counted.n, 0)
                     FROM counted WHERE r.handle = counted.handle)
                 SELECT count(*) FROM gone"
            ),
            // Resources that expired before $1, with their history, $2 at a time.
            prune_resources: format!(
                "WITH gone AS (
                     DELETE FROM {resources} WHERE handle IN (
                         SELECT handle FROM {resources} WHERE expires_at <= $1::int8 LIMIT $2::int8)
                     RETURNING handle),
                 history AS (
                     DELETE FROM {changes} AS c USING gone WHERE c.handle = gone.handle),
                 owned AS (
                     DELETE FROM {items} AS i USING gone WHERE i.handle = gone.handle),
                 removed AS (
                     DELETE FROM {item_removals} AS x USING gone WHERE x.handle = gone.handle)
                 SELECT count(*) FROM gone"
            ),
            items_get: format!(
                "SELECT u.field, u.id, i.version, i.value,
                        (SELECT max(x.version) FROM {item_removals} AS x
                         WHERE x.handle = $1::text AND x.field = u.field AND x.id = u.id)
                 FROM unnest($2::text[], $3::int8[]) AS u(field, id)
                 LEFT JOIN {items} AS i
                     ON i.handle = $1::text AND i.field = u.field AND i.id = u.id"
            ),
            items_page: format!(
                "SELECT id, version, value FROM {items}
                 WHERE handle = $1::text AND field = $2::text AND id > $3::int8
                 ORDER BY id LIMIT $4::int8"
            ),
            items_since: format!(
                "(SELECT field, id, version, value FROM {items}
                  WHERE handle = $1::text AND version > $2::int8 ORDER BY version LIMIT $3::int8)
                 UNION ALL
                 (SELECT field, id, version, NULL FROM {item_removals}
                  WHERE handle = $1::text AND version > $2::int8 ORDER BY version LIMIT $3::int8)"
            ),
            upsert_items: format!(
                "INSERT INTO {items} (handle, field, id, version, value)
                 SELECT $1::text, u.field, u.id, $2::int8, u.value
                 FROM unnest($3::text[], $4::int8[], $5::text[]) AS u(field, id, value)
                 ON CONFLICT (handle, field, id)
                 DO UPDATE SET version = excluded.version, value = excluded.value"
            ),
            remove_items: format!(
                "WITH gone AS (
                     DELETE FROM {items} AS i
                     USING unnest($3::text[], $4::int8[]) AS u(field, id)
                     WHERE i.handle = $1::text AND i.field = u.field AND i.id = u.id)
                 INSERT INTO {item_removals} (handle, version, field, id)
                 SELECT $1::text, $2::int8, u.field, u.id
                 FROM unnest($3::text[], $4::int8[]) AS u(field, id)"
            ),
            forget_removals: format!(
                "DELETE FROM {item_removals} WHERE handle = $1::text AND version <= $2::int8"
            ),
            resource_count: format!("SELECT count(*) FROM {resources}"),
            // One row even for an unknown id, for the clock reading it carries.
            task_load: format!("SELECT (SELECT record FROM {tasks} WHERE id = $1), {NOW_MS}"),
            task_lock: format!("SELECT record, {NOW_MS} FROM {tasks} WHERE id = $1 FOR UPDATE"),
            task_insert: format!(
                "INSERT INTO {tasks} AS t (id, expires_at, record) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE
                     SET expires_at = excluded.expires_at, record = excluded.record
                     WHERE t.expires_at <= $4"
            ),
            task_update: format!("UPDATE {tasks} SET record = $2 WHERE id = $1"),
            task_purge: format!("DELETE FROM {tasks} WHERE expires_at < $1"),
            insert_effects: format!(
                "INSERT INTO {outbox}
                     (key, kind, handle, principal, payload, state, next_at, created_at)
                 SELECT e.key, e.kind, $3::text, $4::text, e.payload, 'pending', $5::int8, $5::int8
                 FROM unnest($1::text[], $2::text[], $6::text[]) AS e(key, kind, payload)"
            ),
            // At $5, the store's clock (the database's, as this replica last saw it): what is
            // due and when a lease lapses. A worker that holds a row does not stall the others
            // (they skip it).
            claim_effects: format!(
                "UPDATE {outbox} AS o
                 SET attempts = o.attempts + 1, lease_owner = $1::text,
                     lease_until = $5::int8 + $2::int8
                 WHERE o.seq IN (
                     SELECT seq FROM {outbox}
                     WHERE state = 'pending' AND next_at <= $5::int8
                       AND (lease_until IS NULL OR lease_until <= $5::int8)
                       AND kind = ANY($3::text[])
                     ORDER BY seq LIMIT $4::int8
                     FOR UPDATE SKIP LOCKED)
                 RETURNING o.seq, o.key, o.kind, o.handle, o.principal, o.payload, o.attempts"
            ),
            settle_effect: format!(
                "UPDATE {outbox}
                 SET state = $3::text, result = $4::text, error = $5::text,
                     next_at = coalesce($6::int8, next_at),
                     settled_at = CASE WHEN $3::text = 'pending' THEN NULL ELSE $7::int8 END,
                     lease_owner = NULL, lease_until = NULL
                 WHERE key = $1::text AND lease_owner = $2::text AND state = 'pending'"
            ),
            effect_statuses: format!(
                "SELECT key, kind, state, attempts, result, error FROM (
                     SELECT seq, key, kind, state, attempts, result, error FROM {outbox}
                     WHERE handle = $1::text ORDER BY seq DESC LIMIT $2::int8) AS s
                 ORDER BY seq"
            ),
            prune_effects: format!(
                "WITH gone AS (
                     DELETE FROM {outbox} WHERE seq IN (
                         SELECT seq FROM {outbox}
                         WHERE settled_at IS NOT NULL AND settled_at <= $1::int8
                         LIMIT $2::int8)
                     RETURNING 1)
                 SELECT count(*) FROM gone"
            ),
            outbox,
            resources,
            changes,
            ledger,
            tasks,
            items,
            item_removals,
        }
    }

    /// The statements of migration `version`, with this store's names.
    fn migration(&self, statements: &str, prefix: &str) -> String {
        statements
            .replace(
                "{resources_expiry}",
                &quote(&format!("{prefix}resources_expiry")),
            )
            .replace("{ledger_key}", &quote(&format!("{prefix}ledger_key")))
            .replace("{tasks_expiry}", &quote(&format!("{prefix}tasks_expiry")))
            .replace("{items_version}", &quote(&format!("{prefix}items_version")))
            .replace(
                "{outbox_pending}",
                &quote(&format!("{prefix}outbox_pending")),
            )
            .replace("{outbox_handle}", &quote(&format!("{prefix}outbox_handle")))
            .replace(
                "{outbox_settled}",
                &quote(&format!("{prefix}outbox_settled")),
            )
            .replace("{outbox}", &self.outbox)
            .replace("{item_removals}", &self.item_removals)
            .replace("{items}", &self.items)
            .replace("{tasks}", &self.tasks)
            .replace("{resources}", &self.resources)
            .replace("{changes}", &self.changes)
            .replace("{ledger}", &self.ledger)
    }
}

/// Creates or upgrades the store's tables, serialized with every other replica by an advisory
/// lock, and refuses a schema this code does not know.
pub(crate) async fn migrate(
    client: &mut tokio_postgres::Client,
    sql: &Sql,
    schema: &str,
    prefix: &str,
    lock_key: i64,
) -> Result<(), StoreError> {
    let txn = client.transaction().await.map_err(backend)?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key])
        .await
        .map_err(backend)?;
    let flag = |row: tokio_postgres::Row| row.try_get::<_, bool>(0).map_err(backend);
    let exists = flag(
        txn.query_one("SELECT to_regnamespace($1) IS NOT NULL", &[&quote(schema)])
            .await
            .map_err(backend)?,
    )?;
    if !exists {
        txn.batch_execute(&format!("CREATE SCHEMA {}", sql.schema))
            .await
            .map_err(backend)?;
    }
    let table_exists = async |table: &str| {
        flag(
            txn.query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{}.{}", quote(schema), quote(table))],
            )
            .await
            .map_err(backend)?,
        )
    };
    let (current, compatible_from) = if table_exists(&format!("{prefix}migrations")).await? {
        let row = txn
            .query_one(
                &format!(
                    "SELECT max(version), max(compatible_from) FROM {}",
                    sql.migrations
                ),
                &[],
            )
            .await
            .map_err(|error| {
                StoreError::Backend(format!(
                    "{}: not the migrations table of an mcp-tools store ({})",
                    sql.migrations,
                    describe(&error)
                ))
            })?;
        let read = |at: usize| {
            row.try_get::<_, Option<i32>>(at)
                .map(Option::unwrap_or_default)
                .map_err(|error| {
                    StoreError::Backend(format!(
                        "{}: not the migrations table of an mcp-tools store ({error})",
                        sql.migrations
                    ))
                })
        };
        (read(0)?, read(1)?)
    } else {
        for table in &sql.unqualified {
            if table_exists(table).await? {
                return Err(StoreError::Backend(format!(
                    "schema {schema:?} already has a table {table:?} that no mcp-tools migration \
                     created: refusing to use or change it (choose another schema or table prefix)"
                )));
            }
        }
        txn.batch_execute(&format!(
            "CREATE TABLE {} (
                 version         integer PRIMARY KEY,
                 compatible_from integer NOT NULL,
                 description     text NOT NULL,
                 applied_at      timestamptz NOT NULL DEFAULT now())",
            sql.migrations
        ))
        .await
        .map_err(backend)?;
        (0, 0)
    };
    if compatible_from > LATEST {
        return Err(StoreError::Backend(format!(
            "the state store in schema {schema:?} is at schema version {current}, which code of \
             schema version {compatible_from} or later must run: this version of mcp-tools knows \
             {LATEST}; run a newer mcp-tools against it"
        )));
    }
    if current > LATEST {
        tracing::info!(
            schema,
            current,
            "the state store's schema is newer than this code's and compatible with it: \
             using it as it is"
        );
    }
    for (version, compatible_from, description, statements) in MIGRATIONS {
        if *version <= current {
            continue;
        }
        txn.batch_execute(&sql.migration(statements, prefix))
            .await
            .map_err(backend)?;
        txn.execute(
            &format!(
                "INSERT INTO {} (version, compatible_from, description) VALUES ($1, $2, $3)",
                sql.migrations
            ),
            &[version, compatible_from, description],
        )
        .await
        .map_err(backend)?;
    }
    txn.commit().await.map_err(backend)
}

pub(crate) fn backend(error: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(describe(&error))
}

/// A database error with its SQLSTATE and message, or the client's own.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("PostgreSQL {}: {}", db.code().code(), db.message()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("PostgreSQL: {error}: {source}"),
            None => format!("PostgreSQL: {error}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted() {
        assert_eq!(quote("my\"schema"), "\"my\"\"schema\"");
        let sql = Sql::new("tenant \"a\"", "x_");
        assert_eq!(sql.resources, "\"tenant \"\"a\"\"\".\"x_resources\"");
        let ddl = sql.migration(MIGRATIONS[0].3, "x_");
        assert!(ddl.contains("CREATE INDEX \"x_resources_expiry\""), "{ddl}");
        assert!(!ddl.contains('{'), "{ddl}");
    }

    #[test]
    fn names_that_would_be_truncated_are_refused() {
        assert!(check_names("public", "mcp_").is_ok());
        assert!(check_names("", "mcp_").is_err());
        assert!(check_names(&"s".repeat(64), "mcp_").is_err());
        assert!(check_names("public", &"p".repeat(41)).is_err());
        assert!(check_names("public", "{ledger}").is_err());
        assert!(check_names("{resources}", "mcp_").is_err());
    }
}
