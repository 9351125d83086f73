//! The store's tables in PostgreSQL: their names (in a configurable schema, with a configurable
//! prefix, always quoted), the statements that use them, and the migrations that create them.

use crate::store::contract::StoreError;

/// The newest schema version this code writes and reads. Migrations are additive (new tables,
/// new nullable columns, new indexes), so replicas of the version before and this one can run
/// side by side during a rolling deploy; a database whose schema is newer is refused.
pub(crate) const LATEST: i32 = 1;

/// The migrations, in order: version, what it does, its statements.
const MIGRATIONS: &[(i32, &str, &str)] = &[(
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
)];

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
    /// What names a table of the store without the schema (for `to_regclass`).
    unqualified: Vec<String>,
    pub(crate) fetch: String,
    pub(crate) read: String,
    pub(crate) insert_resource: String,
    pub(crate) update_resource: String,
    pub(crate) update_recorded: String,
    pub(crate) insert_change: String,
    pub(crate) drop_changes: String,
    pub(crate) count: String,
    pub(crate) insert_ledger: String,
    pub(crate) delete_ledger: String,
    pub(crate) prune_ledger: String,
    pub(crate) prune_resources: String,
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    pub(crate) resource_count: String,
}

/// The database's clock in milliseconds since the epoch, read when the statement runs (after
/// any lock it waited for).
pub(crate) const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::int8";

/// The columns of a resource row, in the order [`super::txn::record_from`] reads them.
const RESOURCE_COLUMNS: &str = "kind, owner, version, state, lifecycle, expires_at, ledger_live";

impl Sql {
    pub(crate) fn new(schema: &str, prefix: &str) -> Self {
        let table = |name: &str| format!("{}.{}", quote(schema), quote(&format!("{prefix}{name}")));
        let (resources, changes, ledger) = (table("resources"), table("changes"), table("ledger"));
        let columns = |alias: &str| {
            RESOURCE_COLUMNS
                .split(", ")
                .map(|column| format!("{alias}.{column}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (r_columns, lr_columns) = (columns("r"), columns("lr"));
        Sql {
            schema: quote(schema),
            migrations: table("migrations"),
            unqualified: ["resources", "changes", "ledger"]
                .iter()
                .map(|name| format!("{prefix}{name}"))
                .collect(),
            // After the locks: the clock, the ledger record of (principal, operation id) with
            // the resource it names (a replay shows it), the resource the request names, and
            // its undo patches after a version; one statement, so one snapshot.
            fetch: format!(
                "SELECT {NOW_MS}, l.fingerprint, l.outcome, l.claim, l.handle, l.recorded_at,
                        l.expires_at, {lr_columns}, {r_columns},
                        ARRAY(SELECT c.version FROM {changes} AS c
                              WHERE c.handle = $3::text AND c.version > $4::int8
                              ORDER BY c.version DESC),
                        ARRAY(SELECT c.undo FROM {changes} AS c
                              WHERE c.handle = $3::text AND c.version > $4::int8
                              ORDER BY c.version DESC)
                 FROM (SELECT 1) AS one
                 LEFT JOIN {ledger} AS l ON l.principal = $1::text AND l.operation_id = $2::text
                 LEFT JOIN {resources} AS lr ON lr.handle = l.handle
                 LEFT JOIN {resources} AS r ON r.handle = $3::text"
            ),
            // One statement, so one snapshot: the state and its history agree.
            read: format!(
                "SELECT {NOW_MS}, {r_columns},
                        ARRAY(SELECT c.version FROM {changes} AS c
                              WHERE c.handle = $1::text AND c.version > $2::int8
                              ORDER BY c.version DESC),
                        ARRAY(SELECT c.undo FROM {changes} AS c
                              WHERE c.handle = $1::text AND c.version > $2::int8
                              ORDER BY c.version DESC)
                 FROM (SELECT 1) AS one
                 LEFT JOIN {resources} AS r ON r.handle = $1::text"
            ),
            insert_resource: format!(
                "INSERT INTO {resources}
                 (handle, kind, owner, version, state, lifecycle, expires_at, ledger_live)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            ),
            // The row is locked by this transaction; the version condition makes a second writer
            // of one version fail loudly all the same.
            update_resource: format!(
                "UPDATE {resources} SET version = $2::int8, state = $3, lifecycle = $4,
                     expires_at = $5::int8, ledger_live = ledger_live + $6::int8
                 WHERE handle = $1 AND version = $2::int8 - 1"
            ),
            // A change and the ledger record about it, in one statement: the common mutation.
            // Both inserts read `u`, so they happen only if the conditional update did.
            update_recorded: format!(
                "WITH u AS (
                     UPDATE {resources} SET version = $2::int8, state = $3, lifecycle = $4,
                         expires_at = $5::int8, ledger_live = ledger_live + 1
                     WHERE handle = $1 AND version = $2::int8 - 1
                     RETURNING handle),
                 c AS (INSERT INTO {changes} (handle, version, undo)
                       SELECT handle, $2::int8, $6 FROM u),
                 l AS (INSERT INTO {ledger}
                       (principal, operation_id, fingerprint, outcome, claim, handle,
                        recorded_at, expires_at)
                       SELECT $7, $8, $9, $10, NULL, handle, $11::int8, $12::int8 FROM u)
                 SELECT 1 FROM u"
            ),
            insert_change: format!(
                "INSERT INTO {changes} (handle, version, undo) VALUES ($1, $2, $3)"
            ),
            drop_changes: format!("DELETE FROM {changes} WHERE handle = $1 AND version <= $2"),
            count: format!(
                "UPDATE {resources} SET ledger_live = greatest(ledger_live + $2::int8, 0)
                 WHERE handle = $1"
            ),
            insert_ledger: format!(
                "INSERT INTO {ledger}
                 (principal, operation_id, fingerprint, outcome, claim, handle, recorded_at,
                  expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
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
                     UPDATE {resources} AS r SET ledger_live = greatest(r.ledger_live - counted.n, 0)
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
                     DELETE FROM {changes} AS c USING gone WHERE c.handle = gone.handle)
                 SELECT count(*) FROM gone"
            ),
            resource_count: format!("SELECT count(*) FROM {resources}"),
            resources,
            changes,
            ledger,
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
    let exists: bool = txn
        .query_one("SELECT to_regnamespace($1) IS NOT NULL", &[&quote(schema)])
        .await
        .map_err(backend)?
        .get(0);
    if !exists {
        txn.batch_execute(&format!("CREATE SCHEMA {}", sql.schema))
            .await
            .map_err(backend)?;
    }
    let has_migrations: bool = txn
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!(
                "{}.{}",
                quote(schema),
                quote(&format!("{prefix}migrations"))
            )],
        )
        .await
        .map_err(backend)?
        .get(0);
    let current = if has_migrations {
        let version: Option<i32> = txn
            .query_one(&format!("SELECT max(version) FROM {}", sql.migrations), &[])
            .await
            .map_err(backend)?
            .get(0);
        version.unwrap_or(0)
    } else {
        for table in &sql.unqualified {
            let found: bool = txn
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&format!("{}.{}", quote(schema), quote(table))],
                )
                .await
                .map_err(backend)?
                .get(0);
            if found {
                return Err(StoreError::Backend(format!(
                    "schema {schema:?} already has a table {table:?} that no mcp-tools migration \
                     created: refusing to use or change it (choose another schema or table prefix)"
                )));
            }
        }
        txn.batch_execute(&format!(
            "CREATE TABLE {} (
                 version     integer PRIMARY KEY,
                 description text NOT NULL,
                 applied_at  timestamptz NOT NULL DEFAULT now())",
            sql.migrations
        ))
        .await
        .map_err(backend)?;
        0
    };
    if current > LATEST {
        return Err(StoreError::Backend(format!(
            "the state store in schema {schema:?} is at schema version {current}, newer than the \
             {LATEST} this version of mcp-tools knows: run a newer mcp-tools against it"
        )));
    }
    for (version, description, statements) in MIGRATIONS {
        if *version <= current {
            continue;
        }
        txn.batch_execute(&sql.migration(statements, prefix))
            .await
            .map_err(backend)?;
        txn.execute(
            &format!(
                "INSERT INTO {} (version, description) VALUES ($1, $2)",
                sql.migrations
            ),
            &[version, description],
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
        let ddl = sql.migration(MIGRATIONS[0].2, "x_");
        assert!(ddl.contains("CREATE INDEX \"x_resources_expiry\""), "{ddl}");
        assert!(!ddl.contains('{'), "{ddl}");
    }

    #[test]
    fn names_that_would_be_truncated_are_refused() {
        assert!(check_names("public", "mcp_").is_ok());
        assert!(check_names("", "mcp_").is_err());
        assert!(check_names(&"s".repeat(64), "mcp_").is_err());
        assert!(check_names("public", &"p".repeat(41)).is_err());
    }
}
