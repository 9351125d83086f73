//! Checkpoints of the write-ahead log, copied into the database file by a thread of their own so
//! that a commit does not wait for them.
//!
//! SQLite's own automatic checkpoint runs inside the commit that takes the log past its limit:
//! that commit, the mutations committed with it and every write queued behind them wait while a
//! thousand pages are copied and synced twice. Under load on the basket example's upgrades the
//! slowest tenth of the answers waited 9 ms or more. Here the commit only wakes the checkpoint
//! thread, which copies the log while the writer goes on. What that copy cannot do is start the
//! log over: SQLite restarts it at the beginning of a write transaction only when every frame in
//! it was copied, and a busy writer always adds frames during the copy. So once the thread has
//! copied, the writer's next commit runs a checkpoint of its own, which copies only the frames
//! added meanwhile, and its next transaction starts the log over.
//!
//! If the thread cannot keep up (or could not start), a commit past twice the limit checkpoints
//! itself when the thread is not copying, as SQLite would have, and one past four times the
//! limit waits for the thread's copy first (SQLite refuses a second checkpointer at once): the
//! log stays bounded either way. A checkpoint never changes what a reader sees, so none of this
//! touches correctness, only when the copying happens.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

use super::{SqliteOptions, connect, lock};
use crate::store::error::StoreError;

/// What the writer and the checkpoint thread share.
#[derive(Default)]
struct Shared {
    /// Set by the thread when it copied the log: the writer's next commit past the limit
    /// finishes the checkpoint.
    caught_up: AtomicBool,
    /// Held while a checkpoint of this store copies. SQLite answers a second checkpointer
    /// `SQLITE_BUSY` at once, busy handler or not: a commit that may checkpoint tries it and
    /// goes on if the thread is copying; one at the log's hard bound waits here for the copy
    /// to end instead of giving up and letting the log grow.
    copying: Mutex<()>,
}

/// The writer's side of the checkpoints.
struct Policy {
    /// The log size, in frames, at which the writer wakes the thread.
    limit: u32,
    shared: Arc<Shared>,
    /// Wakes the thread, which ends once this is dropped with the writer's connection; `None`
    /// when the thread could not start.
    wake: Option<SyncSender<()>>,
}

/// What a commit does about the log it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Nothing (it may have woken the thread).
    Goes,
    /// Checkpoints, unless the thread is copying: its copy ends in a catch-up that the next
    /// commit finishes.
    CheckpointsIfFree,
    /// Checkpoints, after the thread's copy if one is under way: the log's hard bound.
    Checkpoints,
}

impl Policy {
    /// Decides, after a commit that left `frames` in the log, what this commit does.
    fn commit(&self, frames: u32) -> Commit {
        if frames < self.limit {
            // The log was started over: a catch-up reported before then is stale.
            self.shared.caught_up.store(false, Ordering::Relaxed);
            return Commit::Goes;
        }
        if frames >= self.limit.saturating_mul(4) {
            return Commit::Checkpoints;
        }
        if self.shared.caught_up.swap(false, Ordering::Relaxed) {
            return Commit::CheckpointsIfFree;
        }
        if let Some(wake) = &self.wake {
            // A full channel means a wake-up is already pending.
            let _ = wake.try_send(());
        }
        if frames >= self.limit.saturating_mul(2) {
            Commit::CheckpointsIfFree
        } else {
            Commit::Goes
        }
    }
}

/// Installs the checkpoint policy on the writer's connection and starts the thread that does
/// the copying. `options.checkpoint_pages` of 0 leaves checkpoints to the application, as
/// SQLite's `wal_autocheckpoint` does.
///
/// Returns the thread, which ends once `writer` is dropped, if it started.
pub(super) fn install(
    writer: &mut Connection,
    path: &Path,
    options: &SqliteOptions,
) -> Result<Option<JoinHandle<()>>, StoreError> {
    // SQLite's own checkpoint after a commit is replaced by the hook below.
    writer.pragma_update(None, "wal_autocheckpoint", 0)?;
    if options.checkpoint_pages == 0 {
        return Ok(None);
    }
    let shared = Arc::new(Shared::default());
    let (wake, woken) = mpsc::sync_channel::<()>(1);
    let spawned = std::thread::Builder::new()
        // Within the 15 bytes Linux keeps of a thread name.
        .name("mcp-tools-ckpt".into())
        .spawn({
            let (shared, path, options) =
                (Arc::clone(&shared), path.to_path_buf(), options.clone());
            move || run(&path, &options, &shared, &woken)
        });
    let (wake, thread) = match spawned {
        Ok(thread) => (Some(wake), Some(thread)),
        Err(error) => {
            tracing::warn!(%error, "could not start the store's checkpoint thread; commits checkpoint");
            (None, None)
        }
    };
    let policy = Policy {
        limit: options.checkpoint_pages,
        shared,
        wake,
    };
    writer.wal_hook(Some(move |wal: &mut Wal, frames: std::ffi::c_int| {
        let copying = match policy.commit(u32::try_from(frames).unwrap_or(0)) {
            Commit::Goes => None,
            Commit::CheckpointsIfFree => match policy.shared.copying.try_lock() {
                Ok(copying) => Some(copying),
                // The lock guards no data: a panic while it was held leaves nothing to repair.
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            },
            Commit::Checkpoints => Some(lock(&policy.shared.copying)),
        };
        if copying.is_some()
            && let Err(error) = wal.checkpoint_v2(CheckpointMode::PASSIVE)
        {
            // Another process's checkpoint may hold the checkpoint lock: it copies the log.
            tracing::debug!(%error, "a commit's checkpoint did not run");
        }
        // The commit happened whatever the checkpoint did: an error here would be reported as
        // the commit's.
        Ok(())
    }))?;
    Ok(thread)
}

/// The checkpoint thread: a checkpoint on each wake-up until the writer's connection (and with
/// it the sender) is dropped with the store.
fn run(path: &Path, options: &SqliteOptions, shared: &Shared, woken: &Receiver<()>) {
    let mut connection = None;
    let mut warned = false;
    while woken.recv().is_ok() {
        let connection = match &mut connection {
            Some(connection) => connection,
            None => match connect(path, options) {
                Ok(opened) => connection.insert(opened),
                Err(error) => {
                    // Every commit past the limit wakes the thread: say it once, not per commit.
                    if !std::mem::replace(&mut warned, true) {
                        tracing::warn!(%error, path = %path.display(), "the checkpoint thread could not open the store; commits checkpoint");
                    }
                    continue;
                }
            },
        };
        // A wake-up that came during the copy runs a second, shorter one, which leaves the
        // writer's finish shorter too.
        catch_up(connection, shared);
    }
}

/// Copies the log as it is now, then tells the writer to finish: its next commit copies what
/// was added meanwhile. (Further passes before that, each copying what the one before let
/// through, cost more CPU and shortened the finish no more than the noise over HTTP.)
fn catch_up(connection: &Connection, shared: &Shared) {
    let _copying = lock(&shared.copying);
    match connection.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
        Ok(_) => shared.caught_up.store(true, Ordering::Relaxed),
        // Busy: another checkpoint (another process's) is copying the same log.
        Err(error) => tracing::debug!(%error, "a background checkpoint did not run"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy(limit: u32) -> (Policy, Receiver<()>) {
        let (wake, woken) = mpsc::sync_channel(1);
        let policy = Policy {
            limit,
            shared: Arc::default(),
            wake: Some(wake),
        };
        (policy, woken)
    }

    /// Below the limit a commit neither checkpoints nor wakes the thread; past it, it wakes the
    /// thread and goes on; once the thread caught up, one commit checkpoints; from twice the
    /// limit a commit checkpoints when the thread is not copying, and from four times it waits
    /// for the thread's copy.
    #[test]
    fn a_commit_checkpoints_to_finish_or_past_twice_the_limit() {
        let (policy, woken) = policy(100);
        assert_eq!(policy.commit(99), Commit::Goes);
        assert!(woken.try_recv().is_err(), "no wake-up below the limit");
        assert_eq!(policy.commit(100), Commit::Goes);
        assert!(woken.try_recv().is_ok(), "a wake-up at the limit");
        assert_eq!(policy.commit(150), Commit::Goes);
        policy.shared.caught_up.store(true, Ordering::Relaxed);
        assert_eq!(policy.commit(151), Commit::CheckpointsIfFree, "the finish");
        assert_eq!(policy.commit(152), Commit::Goes, "once");
        assert!(woken.try_recv().is_ok(), "the thread is woken again");
        assert_eq!(policy.commit(200), Commit::CheckpointsIfFree);
        assert_eq!(policy.commit(399), Commit::CheckpointsIfFree);
        assert_eq!(policy.commit(400), Commit::Checkpoints);
        assert_eq!(policy.commit(401), Commit::Checkpoints);
    }

    /// A catch-up reported for a log that was started over since does not make a commit copy
    /// a whole new log.
    #[test]
    fn a_log_started_over_forgets_the_catch_up() {
        let (policy, _woken) = policy(100);
        policy.shared.caught_up.store(true, Ordering::Relaxed);
        assert_eq!(policy.commit(3), Commit::Goes);
        assert_eq!(policy.commit(120), Commit::Goes);
    }

    /// A connection to a new file in WAL mode whose log holds `rows` commits of a 4 KiB row
    /// each, none of them checkpointed.
    fn logged(dir: &Path, rows: usize) -> (Connection, std::path::PathBuf) {
        let path = dir.join("log.db");
        // SQLite's own checkpoint stays on (at 1,000 pages, more than these rows fill) until
        // the policy is installed, as on the store's writer.
        let writer = connect(&path, &SqliteOptions::default()).unwrap();
        writer.execute_batch("CREATE TABLE t (body BLOB)").unwrap();
        for _ in 0..rows {
            writer
                .execute("INSERT INTO t (body) VALUES (zeroblob(4096))", [])
                .unwrap();
        }
        (writer, path)
    }

    /// [`logged`] with the checkpoint policy of a `limit` installed on the writer; the folder
    /// lives as long as the returned guard.
    fn installed(
        rows: usize,
        limit: u32,
    ) -> (
        tempfile::TempDir,
        Connection,
        std::path::PathBuf,
        Option<JoinHandle<()>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, path) = logged(dir.path(), rows);
        let options = SqliteOptions {
            checkpoint_pages: limit,
            ..SqliteOptions::default()
        };
        let thread = install(&mut writer, &path, &options).unwrap();
        (dir, writer, path, thread)
    }

    /// The thread copies the whole log when nothing writes meanwhile, and reports it.
    #[test]
    fn the_thread_copies_the_log_and_reports_when_it_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, path) = logged(dir.path(), 300);
        let connection = connect(&path, &SqliteOptions::default()).unwrap();
        let shared = Shared::default();
        catch_up(&connection, &shared);
        assert!(shared.caught_up.load(Ordering::Relaxed));
        let (frames, copied) = connection
            .wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE)
            .unwrap();
        assert!(frames >= 300, "{frames} frames");
        assert_eq!(copied, frames, "every frame was copied");
    }

    /// Waits (bounded) for `thread` to end: it ends once the writer's connection is dropped,
    /// after the wake-ups already sent.
    fn joined(thread: JoinHandle<()>) {
        let (ended, joined) = mpsc::channel();
        std::thread::spawn(move || ended.send(thread.join().is_ok()));
        assert_eq!(joined.recv_timeout(Duration::from_secs(10)), Ok(true));
    }

    /// The thread ends with the writer's connection, so a dropped store leaves no thread.
    #[test]
    fn the_thread_ends_with_the_writer() {
        let (_dir, writer, _path, thread) = installed(1, 100);
        drop(writer);
        joined(thread.expect("a thread for a limit above 0"));
    }

    /// With a limit of 0 no thread starts, SQLite's own checkpoint stays off and no commit
    /// checkpoints: the log keeps every frame written.
    #[test]
    fn a_limit_of_zero_leaves_checkpoints_to_the_application() {
        let (_dir, writer, path, thread) = installed(1, 0);
        assert!(thread.is_none());
        let automatic: i64 = writer
            .query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
            .unwrap();
        assert_eq!(automatic, 0);
        for _ in 0..1200 {
            writer
                .execute("INSERT INTO t (body) VALUES (zeroblob(1000))", [])
                .unwrap();
        }
        let frames = frames_in_log(&path);
        assert!(frames >= 1200, "{frames} frames: a commit checkpointed");
    }

    /// Past the limit and short of twice it, the commits leave the copying to the thread: the
    /// database file grows by what the log held without another commit. Each commit of a
    /// 1,000-byte row adds a frame or two to the log, so 120 of them stay under 200 frames.
    /// Dropping the writer then ends the thread once it has answered its wake-up; another
    /// connection stays open meanwhile, since the last one to close a file checkpoints it.
    #[test]
    fn the_thread_copies_what_the_commits_past_the_limit_leave() {
        let (_dir, writer, path, thread) = installed(0, 100);
        let _open = connect(&path, &SqliteOptions::default()).unwrap();
        for _ in 0..120 {
            writer
                .execute("INSERT INTO t (body) VALUES (zeroblob(1000))", [])
                .unwrap();
        }
        let frames = frames_in_log(&path);
        assert!((100..200).contains(&frames), "{frames} frames");
        drop(writer);
        joined(thread.expect("a thread for a limit above 0"));
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(
            size >= 16 * 4096,
            "the database file holds {size} bytes after the thread answered its wake-up"
        );
    }

    /// Frames in the log file at `path`, from its size (a 32-byte header, then frames of a
    /// 24-byte header and a page each).
    fn frames_in_log(path: &Path) -> u64 {
        let log = std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len();
        log.saturating_sub(32) / (24 + 4096)
    }
}
