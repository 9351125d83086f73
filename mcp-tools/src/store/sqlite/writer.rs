//! The writer of a SQLite store, with group commit: a request queues its atomic unit, and whoever
//! leads runs every queued unit in one transaction (a savepoint each, so a failed unit leaves no
//! trace), commits once and answers them all.
//!
//! A request on a runtime's task hands its unit to a thread of the store's own, which leads, and
//! awaits the answer: a commit never blocks a runtime worker, and the write work stays on one
//! thread, with its caches and the allocator arena the connection's memory comes from. (Leading
//! on the requesting worker itself, with `block_in_place` handing the worker's other requests to
//! another thread, moved the HTTP work from thread to thread: an upgrade over HTTP cost 15% more
//! CPU and answered 13% fewer requests a second. The price is two thread wake-ups per write
//! when the writer thread sleeps, as with a lone client: about 60 µs at the median there, on a
//! virtual machine.) A caller that is not a task (a thread outside
//! any runtime, or `block_on` on a multi-threaded runtime, which runs no other task) leads on its
//! own thread when the connection is free, and saves the two hand-offs.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;

use super::SqlTxn;
use super::states::{Decoded, StateCache};
use crate::store::clock::Clock;
use crate::store::contract::StoreError;
// A batch that panics is rolled back before its leader lets go of the connection (see
// `run_batch_guarded`), and the queue is only pushed to and drained, so what a poisoned lock
// guards is intact.
use crate::sync::lock;

/// Units committed together at most: bounds how long one commit keeps the others waiting.
const MAX_BATCH: usize = 64;

/// One atomic unit, run by the writer thread inside the batch's transaction.
trait Job: Send {
    /// Runs the unit; `false` when it failed and its writes must be undone.
    fn run(&mut self, connection: &Connection, states: &StateCache, now: i64) -> bool;
    /// Answers the request once the batch's commit is known (`Err` with its failure), after
    /// giving `states` what a committed unit decoded and wrote.
    fn finish(self: Box<Self>, committed: Result<(), &str>, states: &StateCache);
}

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, StoreError>>;

struct Unit<F, T> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    decoded: Vec<Decoded>,
    reply: Reply<T>,
}

impl<F, T> Job for Unit<F, T>
where
    F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send,
    T: Send,
{
    fn run(&mut self, connection: &Connection, states: &StateCache, now: i64) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let mut txn = SqlTxn::new(connection, states);
        // A panic in the store's own code fails this unit only; the thread and the batch go on.
        let result = panic::catch_unwind(AssertUnwindSafe(|| work(&mut txn, now)))
            .unwrap_or_else(|payload| Err(StoreError::Task(panic_message(&*payload))));
        let ok = result.is_ok();
        if ok {
            self.decoded = txn.take_decoded();
        }
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, committed: Result<(), &str>, states: &StateCache) {
        // A unit that failed kept nothing to publish.
        if committed.is_ok() {
            states.publish(self.decoded);
        }
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
    /// Where committed units leave the states they decoded and wrote.
    states: Arc<StateCache>,
    /// Set by a task before it wakes the thread: the thread leads only when a task asked, so
    /// while no task writes, callers that run their unit in place keep the connection.
    wanted: Arc<AtomicBool>,
    /// The thread that leads for tasks. It ends once the writer is dropped, which joins it
    /// unless the thread holds the last handle itself (`None` only from then on).
    thread: Option<JoinHandle<()>>,
    /// Dropped by the thread as it ends.
    #[cfg(test)]
    alive: Weak<()>,
}

impl Writer {
    /// The writer of `connection`, with its thread.
    pub(super) fn spawn(
        connection: Connection,
        clock: Arc<dyn Clock>,
        states: Arc<StateCache>,
    ) -> Result<Arc<Self>, StoreError> {
        let (hand_over, handed) = std::sync::mpsc::sync_channel::<Weak<Writer>>(1);
        let wanted = Arc::new(AtomicBool::new(false));
        #[cfg(test)]
        let (alive, watched) = {
            let alive = Arc::new(());
            let watched = Arc::downgrade(&alive);
            (alive, watched)
        };
        let thread = std::thread::Builder::new()
            // Named like the sweep thread, within the 15 bytes Linux keeps of a thread name.
            .name("mcp-tools-write".into())
            .spawn({
                let wanted = Arc::clone(&wanted);
                move || {
                    #[cfg(test)]
                    let _alive = alive;
                    if let Ok(writer) = handed.recv() {
                        lead_when_asked(&writer, &wanted);
                    }
                }
            })
            .map_err(|error| {
                StoreError::Backend(format!("could not start the SQLite writer thread: {error}"))
            })?;
        let writer = Arc::new(Writer {
            connection: Mutex::new(connection),
            queue: Mutex::new(Vec::new()),
            clock,
            states,
            wanted,
            thread: Some(thread),
            #[cfg(test)]
            alive: watched,
        });
        // The channel has room for this one message, so the send cannot block.
        let _ = hand_over.send(Arc::downgrade(&writer));
        Ok(writer)
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
            decoded: Vec::new(),
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
                let committed =
                    run_batch_guarded(&connection, &mut batch, &self.states, &*self.clock);
                let committed = committed.as_ref().map(|_| ()).map_err(String::as_str);
                for job in batch {
                    // An answer that panics as it is handed over (its value's `Drop`) costs
                    // that request its answer, not the leader its batch or its thread.
                    let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                        job.finish(committed, &self.states)
                    }));
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

    /// Runs `work` as one atomic unit and awaits its committed answer: a task hands it to the
    /// writer thread; any other caller leads itself when the connection is free.
    pub(super) async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut SqlTxn<'_>, i64) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let answer = self.enqueue(work);
        if may_block_here() {
            self.lead();
        } else if let Some(thread) = &self.thread {
            self.wanted.store(true, Ordering::Release);
            thread.thread().unpark();
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

impl Drop for Writer {
    fn drop(&mut self) {
        // The thread wakes (or looks before it waits), finds the writer gone and ends. It is
        // parked, about to be, or not yet through the hand-over's `recv`: while it leads it
        // holds the writer, so this is not the last handle. The last handle can be its own,
        // dropped after it led; it then ends on its own.
        let Some(thread) = self.thread.take() else {
            return;
        };
        thread.thread().unpark();
        if thread.thread().id() != std::thread::current().id() {
            let _ = thread.join();
        }
    }
}

/// The writer thread's loop: leads whenever a task asks it to, until the writer is dropped.
///
/// It looks for a request and for the drop before every wait, the first included. A wake-up is
/// a single token, and std's `recv` parks too: the hand-over's own wake-up and a later one (a
/// task's or the drop's) can merge into the token `recv` takes, and a thread that waited first
/// would then miss that task's unit or the drop that joins it. The same check after leading
/// covers the drop of the writer's fields when this thread held the last handle.
fn lead_when_asked(writer: &Weak<Writer>, wanted: &AtomicBool) {
    loop {
        if wanted.swap(false, Ordering::AcqRel) {
            let Some(writer) = writer.upgrade() else {
                return;
            };
            writer.lead();
        }
        if writer.strong_count() == 0 {
            return;
        }
        std::thread::park();
    }
}

/// Whether the calling thread may wait for a commit: true outside any runtime, and in
/// `block_on` on a multi-threaded runtime, whose thread runs no other task. A runtime's worker,
/// or the thread of a current-thread runtime, must not. (Futures joined inside such a `block_on`,
/// a `LocalSet`'s included, wait while it commits, as they would for any blocking call there.)
fn may_block_here() -> bool {
    match tokio::runtime::Handle::try_current() {
        Err(_) => true,
        Ok(runtime) => {
            runtime.runtime_flavor() == RuntimeFlavor::MultiThread
                && tokio::task::try_id().is_none()
        }
    }
}

/// [`run_batch`], with a panic outside the units (the store's clock, say) failing the batch
/// instead of the leader: its transaction is rolled back, so the next batch starts afresh.
fn run_batch_guarded(
    connection: &Connection,
    batch: &mut [Box<dyn Job>],
    states: &StateCache,
    clock: &dyn Clock,
) -> Result<(), String> {
    panic::catch_unwind(AssertUnwindSafe(|| {
        run_batch(connection, batch, states, clock)
    }))
    .unwrap_or_else(|payload| {
        if !connection.is_autocommit() {
            let _ = connection.execute_batch("ROLLBACK");
        }
        Err(panic_message(&*payload))
    })
}

/// Runs a batch in one `BEGIN IMMEDIATE` transaction, a savepoint per unit when there are
/// several, and commits it.
fn run_batch(
    connection: &Connection,
    batch: &mut [Box<dyn Job>],
    states: &StateCache,
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
            failed_alone = !job.run(connection, states, clock.now_millis());
            break;
        }
        let unit = step("SAVEPOINT unit").and_then(|()| {
            if job.run(connection, states, clock.now_millis()) {
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

    /// Inserts `value`, and notes it as the state of handle `value` at version 1.
    fn insert(txn: &mut SqlTxn<'_>, value: i64) -> Result<(), StoreError> {
        txn.connection
            .execute("INSERT INTO t (v) VALUES (?1)", [value])?;
        txn.note_state(&value.to_string(), 1, &Arc::new(value.into()));
        Ok(())
    }

    /// The values 0 to 9 whose states the writer published.
    fn published(writer: &Writer) -> Vec<i64> {
        (0..10)
            .filter(|value| writer.states.get(&value.to_string(), 1).is_some())
            .collect()
    }

    const TABLE: &str = "CREATE TABLE t (v INTEGER)";

    /// A writer on `w.db` in a new directory, after `schema` ran there.
    fn writer_on(schema: &str, clock: Arc<dyn Clock>) -> (tempfile::TempDir, Arc<Writer>) {
        let dir = tempfile::tempdir().unwrap();
        let connection = Connection::open(dir.path().join("w.db")).unwrap();
        connection.execute_batch(schema).unwrap();
        (
            dir,
            Writer::spawn(connection, clock, Arc::new(StateCache::new(1 << 20))).unwrap(),
        )
    }

    fn kept(path: &std::path::Path) -> Vec<i64> {
        Connection::open(path)
            .unwrap()
            .prepare("SELECT v FROM t ORDER BY v")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Units queued behind a running one commit together, and a unit that fails in that batch
    /// leaves nothing behind while the others keep their writes.
    #[test]
    fn a_failed_unit_of_a_batch_leaves_no_trace() {
        let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        let path = dir.path().join("w.db");

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
        assert_eq!(kept(&path), [1, 4]);
        assert_eq!(published(&writer), [1, 4]);
    }

    /// A unit that fails alone is rolled back, and what it noted is not published.
    #[test]
    fn a_unit_that_fails_alone_publishes_nothing() {
        let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        let failed = writer.run_blocking(|txn, _| {
            insert(txn, 5)?;
            Err::<(), _>(StoreError::Backend("refused".into()))
        });
        assert!(failed.is_err());
        writer.run_blocking(|txn, _| insert(txn, 6)).unwrap();
        assert_eq!(kept(&dir.path().join("w.db")), [6]);
        assert_eq!(published(&writer), [6]);
    }

    /// Inserts `value` from a task of a current-thread runtime, so the writer thread leads.
    fn write_from_a_task(writer: &Writer, value: i64) -> Result<(), StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                writer.run(move |txn, _| insert(txn, value)),
            )
            .await
            .expect("answered in time")
        })
    }

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(str::to_owned)
    }

    /// A task's unit runs on the writer thread, on either kind of runtime; `block_on` on a
    /// multi-threaded runtime and a thread outside any runtime run theirs in place.
    #[test]
    fn tasks_hand_their_units_to_the_writer_thread() {
        let (_dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        let ran_on = |runtime: &tokio::runtime::Runtime, in_task: bool| {
            let writer = Arc::clone(&writer);
            let unit = async move { writer.run(|_, _| Ok(thread_name())).await.unwrap() };
            if in_task {
                runtime.block_on(async {
                    tokio::time::timeout(Duration::from_secs(30), tokio::spawn(unit))
                        .await
                        .unwrap()
                        .unwrap()
                })
            } else {
                runtime.block_on(async {
                    tokio::time::timeout(Duration::from_secs(30), unit)
                        .await
                        .unwrap()
                })
            }
        };
        let writer_thread = Some("mcp-tools-write".to_owned());
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let single = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // In place first: once the writer thread has led, it may still hold the connection for
        // a moment after answering, and a caller that finds it taken leaves its unit queued.
        assert_eq!(ran_on(&multi, false), thread_name());
        assert_eq!(
            writer.run_blocking(|_, _| Ok(thread_name())).unwrap(),
            thread_name()
        );
        assert_eq!(ran_on(&multi, true), writer_thread);
        assert_eq!(ran_on(&single, true), writer_thread);
        assert_eq!(ran_on(&single, false), writer_thread);
    }

    /// A clock that panics on its first reading, then reads 0.
    #[derive(Debug, Default)]
    struct PanicsOnce(std::sync::atomic::AtomicBool);

    impl Clock for PanicsOnce {
        fn now_millis(&self) -> i64 {
            if !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
                panic!("the clock broke");
            }
            0
        }
    }

    /// A panic in the batch outside any unit fails that batch's units, and the writer thread
    /// goes on leading the next ones.
    #[test]
    fn a_panic_outside_the_units_fails_the_batch_not_the_writer() {
        let (dir, writer) = writer_on(TABLE, Arc::new(PanicsOnce::default()));
        let path = dir.path().join("w.db");
        let write = |value: i64| write_from_a_task(&writer, value);
        assert!(
            matches!(write(1), Err(StoreError::Backend(message)) if message.contains("the clock broke"))
        );
        assert!(write(2).is_ok());
        assert_eq!(kept(&path), [2]);
        assert_eq!(published(&writer), [2]);
    }

    /// A `COMMIT` that fails (here a deferred foreign key) answers the batch's units with the
    /// failure and leaves no transaction open for the next batch.
    #[test]
    fn a_failed_commit_leaves_the_connection_ready() {
        let schema = "PRAGMA foreign_keys = ON;
             CREATE TABLE t (v INTEGER PRIMARY KEY);
             CREATE TABLE child (v INTEGER REFERENCES t (v) DEFERRABLE INITIALLY DEFERRED);";
        let (dir, writer) = writer_on(schema, Arc::new(SystemClock));
        let path = dir.path().join("w.db");
        let orphan = writer.run_blocking(|txn, _| {
            txn.connection
                .execute("INSERT INTO child (v) VALUES (7)", [])?;
            txn.note_state("7", 1, &Arc::new(7.into()));
            Ok(())
        });
        assert!(
            matches!(&orphan, Err(StoreError::Backend(message)) if message.contains("FOREIGN KEY")),
            "{orphan:?}"
        );
        assert!(writer.run_blocking(|txn, _| insert(txn, 1)).is_ok());
        assert_eq!(kept(&path), [1]);
        assert_eq!(published(&writer), [1]);
    }

    /// Dropping the writer ends its thread.
    #[test]
    fn the_thread_ends_with_its_writer() {
        let (_dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        writer.run_blocking(|txn, _| insert(txn, 1)).unwrap();
        let alive = writer.alive.clone();
        assert!(alive.upgrade().is_some());
        drop(writer);
        assert!(alive.upgrade().is_none());
    }

    /// A new writer's thread neither misses the first unit a task hands it nor the drop that
    /// joins it, however its start interleaves with the hand-over of the writer: it looks for
    /// both before it first waits, so a wake-up taken by the hand-over is not lost. Three shapes
    /// in turn: dropped at once, a unit run in place and then dropped (the thread never held
    /// the writer, so the drop joins it), and a unit handed over by a task.
    #[test]
    fn a_new_writer_leads_its_first_unit_and_ends_with_its_drop() {
        const REPEATS: usize = 6_000;
        let (progress, reports) = std_mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            for repeat in 0..REPEATS {
                let connection = Connection::open_in_memory().unwrap();
                let writer = Writer::spawn(
                    connection,
                    Arc::new(SystemClock),
                    Arc::new(StateCache::new(0)),
                )
                .unwrap();
                let alive = writer.alive.clone();
                let joined = match repeat % 3 {
                    0 => true,
                    1 => {
                        let ran_on = writer
                            .run_blocking(|_, _| Ok(std::thread::current().id()))
                            .unwrap();
                        if ran_on != std::thread::current().id() {
                            let failure =
                                format!("repeat {repeat}: the thread took a unit in place");
                            let _ = progress.send(Err(failure));
                            return;
                        }
                        true
                    }
                    _ => {
                        let first = runtime.block_on(async {
                            tokio::time::timeout(Duration::from_secs(5), writer.run(|_, _| Ok(())))
                                .await
                        });
                        if !matches!(first, Ok(Ok(()))) {
                            let failure = format!("repeat {repeat}: first unit not led: {first:?}");
                            let _ = progress.send(Err(failure));
                            return;
                        }
                        false
                    }
                };
                drop(writer);
                if joined && alive.upgrade().is_some() {
                    let failure = format!("repeat {repeat}: the drop left the thread running");
                    let _ = progress.send(Err(failure));
                    return;
                }
                let _ = progress.send(Ok(repeat));
            }
        });
        let mut last = None;
        while last != Some(REPEATS - 1) {
            match reports.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(repeat)) => last = Some(repeat),
                Ok(Err(failure)) => panic!("{failure}"),
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    panic!("stuck after repeat {last:?}: a drop joins a thread that sleeps")
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the repeating thread failed after repeat {last:?} (its panic is above)")
                }
            }
        }
    }

    /// A value whose drop panics.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("a value that panics as it is dropped");
        }
    }

    /// An answer that panics as it is handed over (its request went away, so the answer is
    /// dropped there) costs that request only: the batch's other units are answered and the
    /// writer thread goes on.
    #[test]
    fn an_answer_that_panics_costs_only_its_request() {
        let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        let path = dir.path().join("w.db");
        let write = |value: i64| write_from_a_task(&writer, value);
        drop(writer.enqueue(|_, _| Ok(Bomb)));
        // Queued behind the bomb, in the same batch.
        assert!(write(1).is_ok());
        assert!(write(2).is_ok());
        assert_eq!(kept(&path), [1, 2]);
    }
}
