//! The one thread that writes a SQLite store: requests hand it their atomic units and await the
//! answer, so no async worker blocks on the write lock, and the units queued while a commit was
//! under way are committed together (group commit), each in a savepoint of its own.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use rusqlite::Connection;

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

/// The handle to the writer thread; the thread ends when the handle is dropped.
pub(super) struct Writer {
    jobs: Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the thread that owns `connection`.
    pub(super) fn spawn(connection: Connection, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Box<dyn Job>>();
        std::thread::Builder::new()
            .name("mcp-tools-sqlite-writer".into())
            .spawn(move || serve(&connection, &queue, &*clock))
            .map_err(|error| StoreError::Backend(format!("cannot start the writer: {error}")))?;
        Ok(Writer { jobs })
    }

    pub(super) fn submit<T, F>(
        &self,
        work: F,
    ) -> tokio::sync::oneshot::Receiver<Result<T, StoreError>>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let unit = Unit {
            work: Some(work),
            result: None,
            reply,
        };
        // The thread only stops once every handle is gone, so this cannot fail while `self`
        // lives; if it did, the dropped reply answers the request with an error below.
        let _ = self.jobs.send(Box::new(unit));
        answer
    }

    /// Runs `work` as one atomic unit and awaits its committed answer.
    pub(super) async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work)
            .await
            .unwrap_or_else(|_| Err(StoreError::Task("the writer thread stopped".into())))
    }

    /// [`Writer::run`] for a thread outside any runtime (the sweeper).
    pub(super) fn run_blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work)
            .blocking_recv()
            .unwrap_or_else(|_| Err(StoreError::Task("the writer thread stopped".into())))
    }
}

/// The writer's loop: take what is queued, run it in one `BEGIN IMMEDIATE` transaction (a
/// savepoint per unit when there are several, so a failed unit leaves no trace), commit, answer.
fn serve(connection: &Connection, queue: &Receiver<Box<dyn Job>>, clock: &dyn Clock) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let committed = run_batch(connection, &mut batch, clock);
        let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
        for job in batch {
            job.finish(committed);
        }
    }
}

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
        let writer = Writer::spawn(connection, Arc::new(SystemClock)).unwrap();

        let (started, running) = std_mpsc::channel::<()>();
        let (release, released) = std_mpsc::channel::<()>();
        let first = writer.submit(move |txn, _| {
            insert(txn, 1)?;
            let _ = started.send(());
            let _ = released.recv_timeout(Duration::from_secs(30));
            Ok(())
        });
        running.recv_timeout(Duration::from_secs(30)).unwrap();
        // Queued while the first runs: taken as one batch once it returns.
        let failing = writer.submit(|txn, _| {
            insert(txn, 2)?;
            Err::<(), _>(StoreError::Backend("refused".into()))
        });
        let panicking = writer.submit(|txn, _| -> Result<(), StoreError> {
            insert(txn, 3)?;
            panic!("a bug in a unit")
        });
        let last = writer.submit(|txn, _| insert(txn, 4));
        release.send(()).unwrap();

        assert!(first.blocking_recv().unwrap().is_ok());
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
