//! The file's layout and how a connection to it is opened: the schema, the layout check, WAL
//! mode and the settings every connection shares.

use super::{SqliteOptions, Synchronous};
use crate::store::error::StoreError;
use rusqlite::{Connection, OptionalExtension};
use std::path::Path;
use std::time::{Duration, Instant};

/// The layout of a store file, recorded as `layout` in `mcp_meta`.
///
/// - `mcp_resources` holds the current state of each resource once, with its version, owner,
///   kind, lifecycle, expiry and how many ledger records count against it (`ledger_live`).
/// - `mcp_changes` holds the undo patch of each kept version, keyed by (handle, version): what
///   takes that version's state back to the one before. Patches beyond the history limit are
///   deleted in batches.
/// - `mcp_ledger` appends one row per recorded operation (or claim): its rowid order is recording
///   order, so with one retention the oldest rows expire first and a sweep deletes a rowid range
///   without an expiry index; the unique index on (principal, operation id) serves lookups. A row
///   holds the outcome's summary, never a state.
/// - `mcp_items` holds each item of the resources' collections (`Collection` fields) by
///   (handle, collection, id), with the version that last wrote it; its index by (handle,
///   version) finds what changed since a version. `mcp_item_removals` remembers each removal
///   (handle, version, collection, id) as long as the history of that version is kept. Files of
///   this layout made before collections existed get both tables when they are next opened.
/// - `mcp_outbox` holds each effect a change emitted, written in the change's transaction, in
///   emission order (`seq`), with its delivery state, attempts, lease and result; the pending
///   ones indexed in emission order (a claim reads those, however many settled ones are kept),
///   all by resource, the settled ones by when (for the sweep).
///   Files of this layout made before effects existed get the table when they are next opened.
/// - `mcp_tasks` holds one row per task of the Tasks extension: its record as a JSON document
///   and its expiry, for the purge. Files of this layout made before tasks existed get the
///   table when they are next opened.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mcp_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mcp_resources (
    handle      TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    owner       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    lifecycle   TEXT NOT NULL,
    expires_at  INTEGER,
    ledger_live INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX IF NOT EXISTS mcp_resources_expiry ON mcp_resources (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS mcp_changes (
    handle  TEXT NOT NULL,
    version INTEGER NOT NULL,
    undo    TEXT NOT NULL,
    PRIMARY KEY (handle, version)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mcp_ledger (
    seq          INTEGER PRIMARY KEY,
    principal    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    outcome      TEXT,
    claim        INTEGER,
    handle       TEXT,
    recorded_at  INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS mcp_ledger_key ON mcp_ledger (principal, operation_id);
CREATE TABLE IF NOT EXISTS mcp_tasks (
    id         TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    record     BLOB NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mcp_tasks_expiry ON mcp_tasks (expires_at);
CREATE TABLE IF NOT EXISTS mcp_items (
    handle  TEXT NOT NULL,
    field   TEXT NOT NULL,
    id      INTEGER NOT NULL,
    version INTEGER NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (handle, field, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mcp_items_version ON mcp_items (handle, version);
CREATE TABLE IF NOT EXISTS mcp_item_removals (
    handle  TEXT NOT NULL,
    version INTEGER NOT NULL,
    field   TEXT NOT NULL,
    id      INTEGER NOT NULL,
    PRIMARY KEY (handle, version, field, id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mcp_outbox (
    seq         INTEGER PRIMARY KEY,
    key         TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    handle      TEXT NOT NULL,
    principal   TEXT NOT NULL,
    payload     TEXT NOT NULL,
    state       TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until INTEGER,
    result      TEXT,
    error       TEXT,
    created_at  INTEGER NOT NULL,
    settled_at  INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS mcp_outbox_pending ON mcp_outbox (seq) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS mcp_outbox_handle ON mcp_outbox (handle, seq);
CREATE INDEX IF NOT EXISTS mcp_outbox_settled ON mcp_outbox (settled_at)
    WHERE settled_at IS NOT NULL;
";

/// The layout this version writes and reads.
pub(super) const LAYOUT: &str = "2";

/// Checks the file's layout before anything is written: a new file gets this layout; a file of
/// another layout is refused, never misread.
pub(super) fn check_layout(connection: &Connection, path: &Path) -> Result<(), StoreError> {
    let tables: Vec<String> = connection
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'mcp\\_%' ESCAPE '\\'")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let has = |name: &str| tables.iter().any(|table| table == name);
    if has("mcp_versions") || (has("mcp_resources") && !has("mcp_meta")) {
        return Err(StoreError::Backend(format!(
            "{} was written by an earlier pre-release of mcp-tools, which kept a full copy of the \
             state for every version; this version keeps each state once and its history as \
             changes, and does not read or migrate that layout: start from a new file",
            path.display()
        )));
    }
    if has("mcp_meta") {
        let layout: Option<String> = connection
            .query_row(
                "SELECT value FROM mcp_meta WHERE key = 'layout'",
                [],
                |row| row.get(0),
            )
            .optional()?;
        if layout.as_deref() != Some(LAYOUT) {
            return Err(StoreError::Backend(format!(
                "{} has storage layout {}, and this version of mcp-tools reads layout {LAYOUT} \
                 only: open it with the version that wrote it",
                path.display(),
                layout.as_deref().unwrap_or("(none)")
            )));
        }
    }
    Ok(())
}

/// Switches the file to WAL and returns the journal mode in force. The switch needs the file to
/// itself for a moment, and SQLite answers "database is locked" at once, without the busy
/// handler, while another process opening the same new file holds it: wait as the busy timeout
/// would.
pub(super) fn wal_mode(
    connection: &Connection,
    busy_timeout: Duration,
) -> Result<String, StoreError> {
    let deadline = Instant::now() + busy_timeout;
    loop {
        match connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if matches!(
                    error.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return Ok(result?),
        }
    }
}

/// Opens a connection with the settings every connection of the store shares.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(options.busy_timeout)?;
    let mode = wal_mode(&connection, options.busy_timeout)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend(format!(
            "SQLite refused WAL mode for {} (journal mode {mode})",
            path.display()
        )));
    }
    let synchronous = match options.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    connection.pragma_update(None, "synchronous", synchronous)?;
    Ok(connection)
}
