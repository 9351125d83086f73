//! The writer of a SQLite store, with group commit: a request queues its atomic unit, and whoever
//! finds the writer connection free leads: it runs every queued unit in one transaction (a
//! savepoint each, so a failed unit leaves no trace), commits once and answers them all. A
//! request that finds a leader at work awaits its answer without holding a thread, so writers
//! never pile up on the lock, and an uncontended write runs on its caller's thread.
//!
//! Where a commit waits for the disk (`synchronous=FULL`), a leader on a runtime worker hands the
//! worker's other tasks to another thread first (`block_in_place`). Where it does not (`NORMAL`:
//! the commit appends to the log), it runs up to a batch's worth of units in place, which spares
//! every write that hand-off, and hands off only if more are waiting after them, or when a
//! checkpoint falls due: a commit that leaves the log past [`CHECKPOINT_PAGES`] no longer copies
//! it into the file itself (which syncs both, SQLite's default), it marks the checkpoint due, and
//! the leader runs it once it may block, before the next batch.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;

use super::SqlTxn;
use crate::store::clock::Clock;
use crate::store::contract::StoreError;

/// Units committed together at most: bounds how long one commit keeps the others waiting.
const MAX_BATCH: usize = 64;

/// Pages in the write-ahead log past which a checkpoint falls due (SQLite's default).
pub(super) const CHECKPOINT_PAGES: i32 = 1000;

/// What a leader may do on the thread it runs on.
#[derive(Debug, Clone, Copy)]
enum Leading {
    /// On a runtime worker: this many more units, and nothing that waits for the disk.
    InPlace(usize),
    /// On a thread that may block: everything queued, and any checkpoint that falls due.
    Blocking,
}

/// One atomic unit, run by the writer thread inside the batch's transaction.
trait Job: Send {
    /// Runs the unit; `false` when it failed and its writes must be undone.
    fn run(&mut self, connection: &Connection, now: i64) -> bool;
    /// Answers the request once the batch's commit is known (`Err` with its failure).
    fn finish(self: Box<Self>, committed: Result<(), &str>);
}

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, StoreError>>;

struct Unit<F, T> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: Reply<T>,
}

impl<F, T> Job for Unit<F, T>
where
    F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send,
    T: Send,
{
    fn run(&mut self, connection: &Connection, now: i64) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        // A panic in the store's own code fails this unit only; the thread and the batch go on.
        let result =
            panic::catch_unwind(AssertUnwindSafe(|| work(&mut SqlTxn::new(connection), now)))
                .unwrap_or_else(|payload| Err(StoreError::Task(panic_message(&*payload))));
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, committed: Result<(), &str>) {
        let answer = match (self.result, committed) {
            (Some(Err(error)), _) => Err(error),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (Some(Ok(_)), Err(failure)) => Err(StoreError::Backend(failure.to_owned())),
            (None, Err(failure)) => Err(StoreError::Backend(failure.to_owned())),
            (None, Ok(())) => Err(StoreError::Task("the unit did not run".into())),
        };
        // The request may have gone away (its client disconnected); the outcome stands.
        let _ = self.reply.send(answer);
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panicked");
    format!("the store task panicked: {message}")
}

/// The writer connection and the units waiting for it.
pub(super) struct Writer {
    connection: Mutex<Connection>,
    queue: Mutex<Vec<Box<dyn Job>>>,
    clock: Arc<dyn Clock>,
    /// Whether a leader on a runtime worker runs a batch in place (see the module docs).
    commits_in_place: bool,
    /// Set by a commit that left the log past [`CHECKPOINT_PAGES`], when commits run in place.
    checkpoint_due: Arc<AtomicBool>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Units run under catch_unwind and transactions roll back as a panic unwinds, so what a
    // poisoned lock guards is intact.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Writer {
    /// A writer on `connection`. With `commits_in_place`, the caller promises that a commit on
    /// it syncs nothing (`synchronous=NORMAL`), and the writer takes the checkpoints out of the
    /// commits.
    pub(super) fn new(
        mut connection: Connection,
        clock: Arc<dyn Clock>,
        commits_in_place: bool,
    ) -> Result<Self, StoreError> {
        let checkpoint_due = Arc::new(AtomicBool::new(false));
        if commits_in_place {
            // Replaces SQLite's own hook, which would checkpoint inside the commit.
            let due = Arc::clone(&checkpoint_due);
            connection.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages| {
                if pages >= CHECKPOINT_PAGES {
                    due.store(true, Ordering::Release);
                }
                Ok(())
            }))?;
        }
        Ok(Writer {
            connection: Mutex::new(connection),
            queue: Mutex::new(Vec::new()),
            clock,
            commits_in_place,
            checkpoint_due,
        })
    }

    fn enqueue<T, F>(&self, work: F) -> tokio::sync::oneshot::Receiver<Result<T, StoreError>>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        lock(&self.queue).push(Box::new(Unit {
            work: Some(work),
            result: None,
            reply,
        }));
        answer
    }

    /// The writer connection, if nobody holds it.
    fn try_connection(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.connection.try_lock() {
            Ok(connection) => Some(connection),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Runs what is queued if nobody else is; returns when the queue is empty or another
    /// request leads.
    fn lead(&self) {
        if let Some(connection) = self.try_connection() {
            self.lead_holding(connection, Leading::Blocking);
        }
    }

    /// Runs what is queued with the connection held, until the queue is empty, as `leading`
    /// allows (in place, a batch it starts runs whole). Every leader looks at the queue again
    /// after it let go of the connection, so a unit queued while it was letting go is never left
    /// behind. Returns the connection, still held, when a leader in place must hand off: units
    /// wait after its budget ran out, or a checkpoint is due.
    fn lead_holding<'w>(
        &'w self,
        mut connection: MutexGuard<'w, Connection>,
        mut leading: Leading,
    ) -> Option<MutexGuard<'w, Connection>> {
        loop {
            loop {
                if self.checkpoint_due.load(Ordering::Acquire) {
                    match leading {
                        Leading::InPlace(_) => return Some(connection),
                        Leading::Blocking => self.checkpoint(&connection),
                    }
                }
                let mut batch: Vec<Box<dyn Job>> = {
                    let mut queue = lock(&self.queue);
                    if matches!(leading, Leading::InPlace(0)) && !queue.is_empty() {
                        return Some(connection);
                    }
                    let take = queue.len().min(MAX_BATCH);
                    queue.drain(..take).collect()
                };
                if batch.is_empty() {
                    break;
                }
                if let Leading::InPlace(budget) = &mut leading {
                    *budget = budget.saturating_sub(batch.len());
                }
                let committed = run_batch(&connection, &mut batch, &*self.clock);
                let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
                for job in batch {
                    job.finish(committed);
                }
            }
            drop(connection);
            if lock(&self.queue).is_empty() {
                return None;
            }
            match self.try_connection() {
                Some(again) => connection = again,
                None => return None,
            }
        }
    }

    /// Copies the log into the database file, as SQLite's own hook would have inside the commit
    /// (a passive checkpoint: what readers still use stays in the log). No commit runs meanwhile,
    /// so the next one starts the log afresh.
    fn checkpoint(&self, connection: &Connection) {
        self.checkpoint_due.store(false, Ordering::Release);
        if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            // Nothing is lost: the log keeps every commit, and the next commit past the limit
            // marks the checkpoint due again.
            tracing::warn!(%error, "the state store's checkpoint failed");
        }
    }

    /// Runs `work` as one atomic unit and awaits its committed answer. A request that finds the
    /// connection free leads: on a multi-threaded runtime in place (a batch's worth of units on
    /// the worker when commits wait for no disk; the rest, checkpoints included, after
    /// `block_in_place`, entered only by the leader, so a request that waits hands no worker
    /// over), elsewhere on the blocking pool, so a current-thread runtime is never blocked.
    pub(super) async fn run<T, F>(self: &Arc<Self>, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let answer = self.enqueue(work);
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread);
        if multi_thread {
            if let Some(connection) = self.try_connection() {
                let rest = match self.commits_in_place {
                    true => self.lead_holding(connection, Leading::InPlace(MAX_BATCH)),
                    false => Some(connection),
                };
                if let Some(connection) = rest {
                    tokio::task::block_in_place(|| {
                        self.lead_holding(connection, Leading::Blocking)
                    });
                }
            }
        } else {
            let writer = Arc::clone(self);
            let _ = tokio::task::spawn_blocking(move || writer.lead()).await;
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Task("the unit was dropped unanswered".into())))
    }

    /// [`Writer::run`] for a thread outside any runtime (the sweeper).
    pub(super) fn run_blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let answer = self.enqueue(work);
        self.lead();
        answer
            .blocking_recv()
            .unwrap_or_else(|_| Err(StoreError::Task("the unit was dropped unanswered".into())))
    }
}

/// Runs a batch in one `BEGIN IMMEDIATE` transaction, a savepoint per unit when there are
/// several, and commits it.
fn run_batch(
    connection: &Connection,
    batch: &mut [Box<dyn Job>],
    clock: &dyn Clock,
) -> Result<(), String> {
    let step = |sql: &str| -> Result<(), String> {
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
            .map(|_| ())
            .map_err(|error| format!("storage failed: {error}"))
    };
    step("BEGIN IMMEDIATE")?;
    let alone = batch.len() == 1;
    let mut failed_alone = false;
    for job in batch.iter_mut() {
        if alone {
            failed_alone = !job.run(connection, clock.now_millis());
            break;
        }
        let unit = step("SAVEPOINT unit").and_then(|()| {
            if job.run(connection, clock.now_millis()) {
                Ok(())
            } else {
                step("ROLLBACK TO unit")
            }
        });
        if let Err(failure) = unit.and_then(|()| step("RELEASE unit")) {
            let _ = step("ROLLBACK");
            return Err(failure);
        }
    }
    if failed_alone {
        // Nothing to keep: the unit's own error is its answer.
        step("ROLLBACK")?;
        return Ok(());
    }
    if let Err(failure) = step("COMMIT") {
        if !connection.is_autocommit() {
            let _ = step("ROLLBACK");
        }
        return Err(failure);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use super::*;
    use crate::store::clock::SystemClock;

    fn insert(txn: &mut SqlTxn<'_>, value: i64) -> Result<(), StoreError> {
        txn.connection
            .execute("INSERT INTO t (v) VALUES (?1)", [value])?;
        Ok(())
    }

    /// Units queued behind a running one commit together, and a unit that fails in that batch
    /// leaves nothing behind while the others keep their writes.
    #[test]
    fn a_failed_unit_of_a_batch_leaves_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch("CREATE TABLE t (v INTEGER)")
            .unwrap();
        let writer = Arc::new(Writer::new(connection, Arc::new(SystemClock), false).unwrap());

        let (started, running) = std_mpsc::channel::<()>();
        let (release, released) = std_mpsc::channel::<()>();
        let leader = std::thread::spawn({
            let writer = Arc::clone(&writer);
            move || {
                writer.run_blocking(move |txn, _| {
                    insert(txn, 1)?;
                    let _ = started.send(());
                    let _ = released.recv_timeout(Duration::from_secs(30));
                    Ok(())
                })
            }
        });
        running.recv_timeout(Duration::from_secs(30)).unwrap();
        // Queued while the leader runs its unit: it takes them as one batch afterwards.
        let failing = writer.enqueue(|txn, _| {
            insert(txn, 2)?;
            Err::<(), _>(StoreError::Backend("refused".into()))
        });
        let panicking = writer.enqueue(|txn, _| -> Result<(), StoreError> {
            insert(txn, 3)?;
            panic!("a bug in a unit")
        });
        let last = writer.enqueue(|txn, _| insert(txn, 4));
        // The connection is taken: this caller does not lead and leaves its units queued.
        writer.lead();
        release.send(()).unwrap();

        assert!(leader.join().unwrap().is_ok());
        assert!(matches!(
            failing.blocking_recv().unwrap(),
            Err(StoreError::Backend(_))
        ));
        assert!(matches!(
            panicking.blocking_recv().unwrap(),
            Err(StoreError::Task(_))
        ));
        assert!(last.blocking_recv().unwrap().is_ok());
        let kept: Vec<i64> = Connection::open(&path)
            .unwrap()
            .prepare("SELECT v FROM t ORDER BY v")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept, [1, 4]);
    }

    /// A leader in place stops once its budget is spent and units are still waiting, or once a
    /// checkpoint is due, and gives the connection back held; a blocking leader runs the rest,
    /// checkpoint included. With nothing to do a leader lets go.
    #[test]
    fn a_leader_in_place_hands_back_what_may_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER)")
            .unwrap();
        let writer = Writer::new(connection, Arc::new(SystemClock), true).unwrap();
        let answers: Vec<_> = (0..MAX_BATCH as i64 + 5)
            .map(|value| writer.enqueue(move |txn, _| insert(txn, value)))
            .collect();
        let held = writer.try_connection().unwrap();
        let rest = writer
            .lead_holding(held, Leading::InPlace(1))
            .expect("five units wait after the first batch");
        assert_eq!(lock(&writer.queue).len(), 5);
        assert!(writer.lead_holding(rest, Leading::Blocking).is_none());
        for answer in answers {
            assert!(answer.blocking_recv().unwrap().is_ok());
        }
        let rows: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, MAX_BATCH as i64 + 5);

        // A due checkpoint: handed back even with nothing queued, then run by a blocking leader.
        writer.checkpoint_due.store(true, Ordering::Release);
        let held = writer.try_connection().unwrap();
        let held = writer
            .lead_holding(held, Leading::InPlace(MAX_BATCH))
            .expect("a checkpoint may block");
        assert!(writer.lead_holding(held, Leading::Blocking).is_none());
        assert!(!writer.checkpoint_due.load(Ordering::Acquire));

        // Nothing to do: a spent budget lets go of the connection.
        let held = writer.try_connection().unwrap();
        assert!(writer.lead_holding(held, Leading::InPlace(0)).is_none());
        assert!(writer.try_connection().is_some());
    }
}
