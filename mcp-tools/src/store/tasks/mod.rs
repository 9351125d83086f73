//! What a store does for tasks: four primitives over opaque records, so every store (memory,
//! SQLite, PostgreSQL, yours) keeps tasks the same way and the lifecycle lives in one place.

pub(crate) mod record;

use crate::store::error::StoreFuture;
use crate::store::tasks::record::TaskRecord;

/// A change to one task, applied by a store under its lock on that task (see
/// [`TaskStore::update_task`]).
pub struct TaskChange(Box<dyn FnOnce(&mut TaskRecord) -> bool + Send>);

impl TaskChange {
    pub(crate) fn new(change: impl FnOnce(&mut TaskRecord) -> bool + Send + 'static) -> Self {
        TaskChange(Box::new(change))
    }

    /// A change that cancels the task, for the tests of a store.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn cancel_for_tests() -> TaskChange {
        TaskChange::new(|record| record.end(crate::store::tasks::record::Ending::Cancelled, 1))
    }

    /// A change that changes nothing, for the tests of a store.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn nothing_for_tests() -> TaskChange {
        TaskChange::new(|_| false)
    }

    /// Applies the change; `true` when the record changed and must be written back.
    pub fn apply(self, record: &mut TaskRecord) -> bool {
        (self.0)(record)
    }
}

impl std::fmt::Debug for TaskChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskChange")
    }
}

/// What [`TaskStore::insert_task`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum TaskInsert {
    /// The task is stored: a `tasks/get` on any replica sharing the store now finds it.
    Inserted,
    /// A task with this id is stored already (a retry's, or a concurrent call's with the same
    /// operation id); nothing was stored.
    Existing(Box<TaskRecord>),
}

/// Durable task records. Every method is atomic; a record is committed before the method
/// answers, so a task created on one replica is visible to every replica sharing the store.
///
/// The built-in stores ([`MemoryStore`](crate::MemoryStore), `SqliteStore`, `PostgresStore`)
/// implement it next to [`Store`](crate::store::Store). A store keeps, per task, the encoded record
/// ([`TaskRecord::encode`]) under its id, and its expiry. A call with an operation id gets the
/// same task id on every retry, so the unique id is what makes its task exactly once.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task, unless one with its id is stored that has not expired by the new
    /// one's creation (its expiry instant is later): then that one is returned and nothing is
    /// stored. An expired one is replaced, from the instant it stops being visible: a retry
    /// after the time to live makes a new task.
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert>;

    /// The task with this id, if it is stored.
    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;

    /// Applies `change` to the task with this id while no other change to it can run, writes
    /// the record back when the change says it changed, and returns the record as it now is
    /// (`None` for an unknown id).
    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>>;

    /// Deletes the tasks whose [`expires_at_ms`](TaskRecord::expires_at_ms) is before
    /// `now_ms`; how many it deleted.
    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64>;

    /// The store's clock, in milliseconds since the Unix epoch: tasks judge time to live,
    /// purges and leases by it, so replicas whose own clocks disagree still agree. This host's
    /// clock by default, for a store on this host.
    fn now_millis(&self) -> u64 {
        clock_millis(&crate::store::clock::SystemClock)
    }
}

/// A shared task store is a task store.
impl<S: TaskStore + ?Sized> TaskStore for std::sync::Arc<S> {
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        (**self).insert_task(task)
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        (**self).load_task(id)
    }

    fn update_task<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        (**self).update_task(id, change)
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        (**self).purge_tasks(now_ms)
    }

    fn now_millis(&self) -> u64 {
        (**self).now_millis()
    }
}

/// A clock's reading as tasks count time: milliseconds since the Unix epoch, none before it.
pub(crate) fn clock_millis(clock: &dyn crate::store::clock::Clock) -> u64 {
    u64::try_from(clock.now_millis()).unwrap_or(0)
}
