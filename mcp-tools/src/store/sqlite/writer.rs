//! The writer of a SQLite store, with group commit: a request queues its atomic unit, and whoever
//! leads runs every queued unit in one transaction, commits once and answers them all (see
//! `run_batch` for what a failed unit does to its batch).
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
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;

use super::SqlTxn;
use super::states::{Decoded, StateCache};
use crate::store::clock::Clock;
use crate::store::error::StoreError;
// A batch that panics is rolled back before its leader lets go of the connection (see
// `run_batch_guarded`), and the queue is only pushed to and drained, so what a poisoned lock
// guards is intact.
use crate::sync::lock;

/// Units committed together at most: bounds how long one commit keeps the others waiting.
const MAX_BATCH: usize = 64;

/// How long after a unit failed the writer gives each unit of a batch a savepoint of its own
/// (see [`run_batch`]), in milliseconds of the store's clock.
const CAREFUL_FOR_MILLIS: i64 = 60_000;

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
    /// Until when (the store's clock, in milliseconds) batches give each unit a savepoint.
    careful_until: AtomicI64,
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
            careful_until: AtomicI64::new(i64::MIN),
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
                while !batch.is_empty() {
                    let ran = run_batch_guarded(&connection, &mut batch, self);
                    // The units the failed transaction did not reach make the next batch.
                    let rest = batch.split_off(ran.units.min(batch.len()));
                    let committed = ran.committed.as_ref().map(|_| ()).map_err(String::as_str);
                    for job in batch {
                        // An answer that panics as it is handed over (its value's `Drop`)
                        // costs that request its answer, not the leader its batch or its
                        // thread.
                        let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                            job.finish(committed, &self.states)
                        }));
                    }
                    batch = rest;
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

/// What one batch's transaction did.
struct Ran {
    /// How it ended: committed, or why not.
    committed: Result<(), String>,
    /// How many of the batch's units, from the first, ran in it. The others did not start,
    /// and run in a transaction of their own.
    units: usize,
}

/// [`run_batch`], with a panic outside the units (the store's clock, say) failing the batch
/// instead of the leader: its transaction is rolled back, so the next batch starts afresh.
fn run_batch_guarded(connection: &Connection, batch: &mut [Box<dyn Job>], writer: &Writer) -> Ran {
    panic::catch_unwind(AssertUnwindSafe(|| run_batch(connection, batch, writer)))
        .unwrap_or_else(|payload| rolled_back(connection, panic_message(&*payload), batch.len()))
}

/// A batch whose first `units` failed with `failure`: its transaction is rolled back, unless
/// SQLite already ended it.
fn rolled_back(connection: &Connection, failure: String, units: usize) -> Ran {
    if !connection.is_autocommit() {
        let _ = connection.execute_batch("ROLLBACK");
    }
    Ran {
        committed: Err(failure),
        units,
    }
}

/// Runs a batch in one `BEGIN IMMEDIATE` transaction and commits it.
///
/// Units answer their outcomes, refusals included, as values: a unit fails only when something
/// went wrong under it (the disk or the database failing, a corrupt row, a bug). Such a unit
/// may have written part of its work, so it rolls its batch back: it and the units before it
/// answer the failure, retryable, and the units after it, which had not started, run in the
/// next transaction. For a minute after, each unit of a batch gets a savepoint of its own, so
/// that a unit failing again (a corrupt row every retry reads) fails alone. Savepoints for
/// every batch would confine every failure, but they cost each unit two more statements and a
/// copy of each page it touches: about 7% of the upgrades a second over HTTP, in the README's
/// measurement.
fn run_batch(connection: &Connection, batch: &mut [Box<dyn Job>], writer: &Writer) -> Ran {
    let step = |sql: &str| -> Result<(), String> {
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
            .map(|_| ())
            .map_err(|error| format!("storage failed: {error}"))
    };
    let clock = &*writer.clock;
    if let Err(failure) = step("BEGIN IMMEDIATE") {
        return rolled_back(connection, failure, batch.len());
    }
    let careful =
        batch.len() > 1 && clock.now_millis() < writer.careful_until.load(Ordering::Relaxed);
    for (index, job) in batch.iter_mut().enumerate() {
        if careful && let Err(failure) = step("SAVEPOINT unit") {
            // This unit did not start: unless it is the first, it goes in the next batch.
            return rolled_back(connection, failure, index.max(1));
        }
        let ran = job.run(connection, &writer.states, clock.now_millis());
        if !ran {
            let until = clock.now_millis().saturating_add(CAREFUL_FOR_MILLIS);
            writer.careful_until.fetch_max(until, Ordering::Relaxed);
        }
        // SQLite rolls the transaction back itself on some failures (a full disk, an I/O
        // error): nothing of the batch is left to commit, and the units after this one must
        // not write outside a transaction.
        if connection.is_autocommit() {
            return rolled_back(
                connection,
                "storage failed: the batch's transaction was rolled back".into(),
                index + 1,
            );
        }
        let settled = match (careful, ran) {
            (true, true) => step("RELEASE unit"),
            (true, false) => step("ROLLBACK TO unit").and_then(|()| step("RELEASE unit")),
            (false, true) => Ok(()),
            (false, false) => Err("storage failed: a unit of the batch failed".into()),
        };
        if let Err(failure) = settled {
            return rolled_back(connection, failure, index + 1);
        }
    }
    // A unit that failed here had a savepoint and was rolled back to it, so its own error is
    // its answer and whatever the others wrote commits, even if that is nothing.
    if let Err(failure) = step("COMMIT") {
        return rolled_back(connection, failure, batch.len());
    }
    Ran {
        committed: Ok(()),
        units: batch.len(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use super::*;
    use crate::store::clock::{ManualClock, SystemClock};

    /// Inserts `value`, and notes it as the state of handle `value` at version 1.
    fn insert(txn: &mut SqlTxn<'_>, value: i64) -> Result<(), StoreError> {
        txn.connection
            .execute("INSERT INTO t (v) VALUES (?1)", [value])?;
        txn.note_state(&value.to_string(), 1, &Arc::new(value.into()));
        Ok(())
    }

    /// The values 0 to 99 whose states the writer published.
    fn published(writer: &Writer) -> Vec<i64> {
        (0..100)
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

    /// Runs `queue` while a leader holds the connection with a unit that inserts `leading`, so
    /// that everything `queue` enqueues is committed as one batch after it.
    fn behind_a_leader<T>(
        writer: &Arc<Writer>,
        leading: i64,
        queue: impl FnOnce(&Writer) -> T,
    ) -> T {
        let (started, running) = std_mpsc::channel::<()>();
        let (release, released) = std_mpsc::channel::<()>();
        let leader = std::thread::spawn({
            let writer = Arc::clone(writer);
            move || {
                writer.run_blocking(move |txn, _| {
                    insert(txn, leading)?;
                    let _ = started.send(());
                    let _ = released.recv_timeout(Duration::from_secs(30));
                    Ok(())
                })
            }
        });
        running.recv_timeout(Duration::from_secs(30)).unwrap();
        let queued = queue(writer);
        // The connection is taken: this caller does not lead and leaves the units queued.
        writer.lead();
        release.send(()).unwrap();
        assert!(leader.join().unwrap().is_ok());
        queued
    }

    /// How a unit of the tests below fails.
    #[derive(Clone, Copy, Debug)]
    enum Failing {
        /// With an error, before it wrote.
        Early,
        /// With an error, after it wrote.
        Late,
        /// By a panic, after it wrote.
        Panicking,
    }

    /// A unit for `value`: it inserts `value`, or fails as `failing` says.
    fn unit(
        value: i64,
        failing: Option<Failing>,
    ) -> impl FnOnce(&mut SqlTxn<'_>, i64) -> Result<(), StoreError> + Send + 'static {
        move |txn, _| {
            if !matches!(failing, Some(Failing::Early)) {
                insert(txn, value)?;
            }
            match failing {
                None => Ok(()),
                Some(Failing::Panicking) => panic!("a bug in a unit"),
                Some(_) => Err(StoreError::Backend("refused".into())),
            }
        }
    }

    /// Queues `units` (value, how it fails) as one batch behind a leader inserting `leading`,
    /// and returns their answers in order.
    fn batch(
        writer: &Arc<Writer>,
        leading: i64,
        units: &[(i64, Option<Failing>)],
    ) -> Vec<Result<(), StoreError>> {
        let answers = behind_a_leader(writer, leading, |writer| {
            units
                .iter()
                .map(|&(value, failing)| writer.enqueue(unit(value, failing)))
                .collect::<Vec<_>>()
        });
        answers
            .into_iter()
            .map(|answer| answer.blocking_recv().unwrap())
            .collect()
    }

    /// Whether `answer` is the failing unit's own.
    fn own_failure(answer: &Result<(), StoreError>, failing: Failing) -> bool {
        match (answer, failing) {
            (Err(StoreError::Task(_)), Failing::Panicking) => true,
            (Err(StoreError::Backend(message)), Failing::Early | Failing::Late) => {
                message == "refused"
            }
            _ => false,
        }
    }

    /// Whether `answer` is that of a unit rolled back with its batch.
    fn rolled_back_with_the_batch(answer: &Result<(), StoreError>) -> bool {
        matches!(answer, Err(StoreError::Backend(message)) if message.starts_with("storage failed"))
    }

    /// A unit that fails, however it fails, rolls its batch back: it and the units before it
    /// keep nothing and answer (it its own failure, they a retryable one), and the units after
    /// it, which had not started, run in a transaction of their own and commit.
    #[test]
    fn a_failed_unit_rolls_its_batch_back_and_the_rest_run_next() {
        for failing in [Failing::Early, Failing::Late, Failing::Panicking] {
            let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
            let answers = batch(
                &writer,
                1,
                &[(2, None), (3, Some(failing)), (4, None), (5, None)],
            );
            assert!(
                rolled_back_with_the_batch(&answers[0]),
                "{failing:?}: {answers:?}"
            );
            assert!(
                own_failure(&answers[1], failing),
                "{failing:?}: {answers:?}"
            );
            assert!(
                answers[2].is_ok() && answers[3].is_ok(),
                "{failing:?}: {answers:?}"
            );
            assert_eq!(kept(&dir.path().join("w.db")), [1, 4, 5], "{failing:?}");
            assert_eq!(published(&writer), [1, 4, 5], "{failing:?}");
        }
    }

    /// A failed unit first in its batch costs no other unit anything.
    #[test]
    fn a_failed_first_unit_fails_alone() {
        let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
        let answers = batch(
            &writer,
            1,
            &[(2, Some(Failing::Late)), (3, None), (4, None)],
        );
        assert!(own_failure(&answers[0], Failing::Late), "{answers:?}");
        assert!(answers[1].is_ok() && answers[2].is_ok(), "{answers:?}");
        assert_eq!(kept(&dir.path().join("w.db")), [1, 3, 4]);
    }

    /// For a minute after a unit failed, every unit gets a savepoint, so a failing unit fails
    /// alone, the units after the first failure of a batch included; a batch whose units all
    /// fail keeps nothing; then batches go without savepoints again.
    #[test]
    fn after_a_failure_units_fail_alone_for_a_minute() {
        let clock = ManualClock::at_millis(1_785_231_000_000);
        let (dir, writer) = writer_on(TABLE, Arc::new(clock.clone()));
        let kept_now = || kept(&dir.path().join("w.db"));

        // The first failure rolls back the unit before it; the rest of the batch, a second
        // failing unit among them, runs with savepoints.
        let late = Some(Failing::Late);
        let answers = batch(
            &writer,
            10,
            &[(11, None), (12, late), (13, None), (14, late), (15, None)],
        );
        assert!(rolled_back_with_the_batch(&answers[0]), "{answers:?}");
        assert!(own_failure(&answers[1], Failing::Late), "{answers:?}");
        assert!(answers[2].is_ok() && answers[4].is_ok(), "{answers:?}");
        assert!(own_failure(&answers[3], Failing::Late), "{answers:?}");
        assert_eq!(kept_now(), [10, 13, 15]);

        // Within the minute.
        clock.advance(Duration::from_millis((CAREFUL_FOR_MILLIS - 1) as u64));
        let answers = batch(&writer, 20, &[(21, None), (22, late), (23, None)]);
        assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
        assert!(own_failure(&answers[1], Failing::Late), "{answers:?}");
        let answers = batch(&writer, 30, &[(31, late), (32, Some(Failing::Panicking))]);
        assert!(own_failure(&answers[0], Failing::Late), "{answers:?}");
        assert!(own_failure(&answers[1], Failing::Panicking), "{answers:?}");
        assert_eq!(kept_now(), [10, 13, 15, 20, 21, 23, 30]);

        // Each failure started another minute; past the last one, the batch goes without.
        clock.advance(Duration::from_millis(CAREFUL_FOR_MILLIS as u64));
        let answers = batch(&writer, 40, &[(41, None), (42, late), (43, None)]);
        assert!(rolled_back_with_the_batch(&answers[0]), "{answers:?}");
        assert!(answers[2].is_ok(), "{answers:?}");
        assert_eq!(kept_now(), [10, 13, 15, 20, 21, 23, 30, 40, 43]);
        assert_eq!(published(&writer), [10, 13, 15, 20, 21, 23, 30, 40, 43]);
    }

    /// A unit whose transaction ended under it (here it ends it itself), failed or not, leaves
    /// nothing of the units before it, and the units after it do not write outside a
    /// transaction: they run in one of their own.
    #[test]
    fn a_batch_whose_transaction_ended_keeps_nothing_before_the_end() {
        for fails in [false, true] {
            let (dir, writer) = writer_on(TABLE, Arc::new(SystemClock));
            let (before, ending, after) = behind_a_leader(&writer, 1, |writer| {
                (
                    writer.enqueue(|txn, _| insert(txn, 2)),
                    writer.enqueue(move |txn, _| {
                        txn.connection.execute_batch("ROLLBACK")?;
                        if fails {
                            return Err(StoreError::Backend("refused".into()));
                        }
                        Ok(())
                    }),
                    writer.enqueue(|txn, _| insert(txn, 4)),
                )
            });
            // Its own error, or the end of the transaction it ran in: it is answered with the
            // batch it ran in, not run again in the next one.
            let ended = ending.blocking_recv().unwrap();
            let expected = if fails { "refused" } else { "rolled back" };
            assert!(
                matches!(&ended, Err(StoreError::Backend(m)) if m.contains(expected)),
                "{ended:?}"
            );
            let before = before.blocking_recv().unwrap();
            assert!(
                matches!(&before, Err(StoreError::Backend(m)) if m.contains("rolled back")),
                "{before:?}"
            );
            assert!(after.blocking_recv().unwrap().is_ok());
            assert_eq!(kept(&dir.path().join("w.db")), [1, 4]);
            assert_eq!(published(&writer), [1, 4]);
        }
    }

    /// A full disk, as SQLite meets it (the file may not grow past its page limit): the unit
    /// that filled it and the units before it keep nothing, and the writer goes on.
    #[test]
    fn a_full_disk_fails_the_batch_up_to_the_unit_that_filled_it() {
        let (dir, writer) = writer_on(
            "CREATE TABLE t (v INTEGER); CREATE TABLE big (b BLOB);",
            Arc::new(SystemClock),
        );
        {
            let connection = writer.try_connection().unwrap();
            let pages: i64 = connection
                .query_row("PRAGMA page_count", [], |row| row.get(0))
                .unwrap();
            connection
                .query_row(
                    &format!("PRAGMA max_page_count = {}", pages + 8),
                    [],
                    |_| Ok(()),
                )
                .unwrap();
        }
        let (before, filling, after) = behind_a_leader(&writer, 1, |writer| {
            (
                writer.enqueue(|txn, _| insert(txn, 2)),
                writer.enqueue(|txn, _| {
                    insert(txn, 3)?;
                    txn.connection
                        .execute("INSERT INTO big (b) VALUES (zeroblob(1048576))", [])?;
                    Ok(())
                }),
                writer.enqueue(|txn, _| insert(txn, 4)),
            )
        });
        let filled = filling.blocking_recv().unwrap();
        assert!(filled.is_err(), "{filled:?}");
        let before = before.blocking_recv().unwrap();
        assert!(rolled_back_with_the_batch(&before), "{before:?}");
        assert!(after.blocking_recv().unwrap().is_ok());
        assert_eq!(kept(&dir.path().join("w.db")), [1, 4]);
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
