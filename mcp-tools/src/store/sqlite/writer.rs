//! The writer of a SQLite store, with group commit: a request queues its atomic unit, and whoever
//! finds the writer connection free leads: it runs every queued unit in one transaction (a
//! savepoint each, so a failed unit leaves no trace), commits once and answers them all. A
//! request that finds a leader at work awaits its answer without holding a thread, so writers
//! never pile up on the lock, and an uncontended write runs on its caller's thread, with no
//! hand-off.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;

use super::SqlTxn;
use crate::store::clock::Clock;
use crate::store::contract::StoreError;

/// Units committed together at most: bounds how long one commit keeps the others waiting.
const MAX_BATCH: usize = 64;

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
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Units run under catch_unwind and transactions roll back as a panic unwinds, so what a
    // poisoned lock guards is intact.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Writer {
    pub(super) fn new(connection: Connection, clock: Arc<dyn Clock>) -> Self {
        Writer {
            connection: Mutex::new(connection),
            queue: Mutex::new(Vec::new()),
            clock,
        }
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
            self.lead_holding(connection);
        }
    }

    /// Runs what is queued with the connection held, until the queue is empty. Every leader
    /// looks at the queue again after it let go of the connection, so a unit queued while it was
    /// letting go is never left behind.
    fn lead_holding<'w>(&'w self, mut connection: MutexGuard<'w, Connection>) {
        loop {
            loop {
                let mut batch: Vec<Box<dyn Job>> = {
                    let mut queue = lock(&self.queue);
                    let take = queue.len().min(MAX_BATCH);
                    queue.drain(..take).collect()
                };
                if batch.is_empty() {
                    break;
                }
                let committed = run_batch(&connection, &mut batch, &*self.clock);
                let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
                for job in batch {
                    job.finish(committed);
                }
            }
            drop(connection);
            if lock(&self.queue).is_empty() {
                return;
            }
            match self.try_connection() {
                Some(again) => connection = again,
                None => return,
            }
        }
    }

    /// Runs `work` as one atomic unit and awaits its committed answer. A request that finds the
    /// connection free leads: on a multi-threaded runtime in place (`block_in_place`, entered
    /// only by the leader, so a request that waits hands no worker over), elsewhere on the
    /// blocking pool, so a current-thread runtime is never blocked.
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
                tokio::task::block_in_place(|| self.lead_holding(connection));
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
        let writer = Arc::new(Writer::new(connection, Arc::new(SystemClock)));

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
}
