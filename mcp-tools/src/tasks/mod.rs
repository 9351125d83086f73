//! The Tasks extension (`io.modelcontextprotocol/tasks`): a long-running tool answers a call
//! with a task id at once and keeps running; the client polls `tasks/get`, answers
//! `inputRequests` with `tasks/update`, or cancels with `tasks/cancel`.
//!
//! # Declaring
//!
//! A tool opts in with [`TaskSupport`](crate::tools::TaskSupport) ([`ToolInfo::task_support`](crate::tools::ToolInfo::task_support),
//! or `#[tool(task = optional)]` / `#[tool(task = required)]`). The server then advertises the
//! extension, and a call from a client that declares it on that request (in
//! `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`) becomes a task unless the
//! tool finishes, or asks for input, without waiting on anything: then the answer is the plain
//! result, or a multi-round `input_required` result, and no task is made. A client that does
//! not declare the extension gets the tool run synchronously (`optional`) or `-32021` naming
//! the extension (`required`).
//!
//! # Durability
//!
//! The task record is committed to the server's [`TaskStore`] (the same store as the
//! versioned state when one is configured with [`McpServerBuilder::store`](crate::McpServerBuilder::store);
//! an in-process [`MemoryStore`](crate::MemoryStore) otherwise, whose tasks live as long as the
//! process) before the `CreateTaskResult` is sent, so any replica sharing the store answers
//! `tasks/get`, `tasks/update` and `tasks/cancel` for it right away.
//!
//! The tool runs on the replica that accepted the call. That replica's worker reads the record
//! every [`poll_interval`](TaskOptions::poll_interval), picking up what other replicas wrote:
//! answers to its input requests, or a cancellation, which drops the tool's future. It holds a
//! [`lease`](TaskOptions::lease) on the record and extends it once less than half a lease and a
//! poll are left, so a running task costs a read per poll and a write about twice per lease.
//! If the replica dies, the lease lapses and the next `tasks/get` on any replica marks the task
//! `failed` with a message saying so. When a replica shuts down gracefully
//! (SIGTERM through [`McpServer::serve`](crate::McpServer::serve)), it takes no new tasks
//! (a task-mode call is refused with HTTP 503, so the client retries elsewhere) and ends its
//! running tasks as `failed` at once, telling the client to call the tool again.
//!
//! Results stay with the task until its time to live ([`TaskOptions::ttl`]) ends; a background
//! purge deletes expired records, off the request path.

pub(crate) mod runtime;

use std::time::Duration;

pub use crate::store::tasks::record::{TaskRecord, TaskStatus};
pub use crate::store::tasks::{TaskChange, TaskInsert, TaskStore};

/// The extension's identifier, under `capabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How the server runs tasks.
#[derive(Debug, Clone)]
pub struct TaskOptions {
    pub(crate) ttl: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_running: usize,
    pub(crate) max_running_per_principal: usize,
    pub(crate) purge_interval: Duration,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            lease: Duration::from_secs(10),
            max_running: 64,
            max_running_per_principal: 16,
            purge_interval: Duration::from_secs(60),
        }
    }
}

impl TaskOptions {
    /// How long a task stays readable after its creation, result included (default 1 hour).
    /// Published as `ttlMs`; a task is never purged before it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often clients should poll, published as `pollIntervalMs`, and how often a worker
    /// reads its task for input and cancellations written on other replicas (default 500 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a worker's lease lasts past its last renewal (default 10 s): a task whose
    /// replica died is marked `failed` this long after its last renewal. At least twice the
    /// poll interval.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Tasks one replica runs at once (default 64); past it a task-mode call is refused with
    /// HTTP 429 and `Retry-After`.
    pub fn max_running(mut self, max: usize) -> Self {
        self.max_running = max;
        self
    }

    /// Tasks one principal runs at once on one replica (default 16); past it that principal's
    /// task-mode calls are refused with HTTP 429 and `Retry-After`. Without authentication every
    /// caller is the one anonymous principal, so this bounds the tasks of all of them together:
    /// one anonymous client can hold every slot for as long as its tasks run. Authenticate
    /// callers where that matters.
    pub fn max_running_per_principal(mut self, max: usize) -> Self {
        self.max_running_per_principal = max;
        self
    }

    /// How often a replica deletes the records of tasks past their time to live from the store
    /// (default 60 s), starting with its first task. Expired tasks are unreadable at once;
    /// this bounds how long their records take space.
    pub fn purge_interval(mut self, interval: Duration) -> Self {
        self.purge_interval = interval;
        self
    }

    /// The instant before which a lease must run for a heartbeat at `now_ms` to leave it
    /// alone: half a lease and a poll from now. A lease is extended only once less than that is
    /// left, so it is written about twice per lease rather than at every poll, and it never
    /// lapses between two polls of a live worker (the lease is at least two polls).
    pub(crate) fn renewal_due(&self, now_ms: u64) -> u64 {
        let margin = self.lease / 2 + self.poll_interval;
        now_ms.saturating_add(u64::try_from(margin.as_millis()).unwrap_or(u64::MAX))
    }

    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self.ttl.is_zero() || self.poll_interval.is_zero() || self.purge_interval.is_zero() {
            return Err("task ttl, poll_interval and purge_interval must be longer than zero");
        }
        if self.lease < self.poll_interval * 2 {
            return Err("the task lease must be at least twice the poll interval");
        }
        if self.max_running == 0 || self.max_running_per_principal == 0 {
            return Err("task limits must allow at least one running task");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting that would stall or starve the runtime is refused when the server is built.
    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert_eq!(TaskOptions::default().check(), Ok(()));
        let zero = Duration::ZERO;
        for refused in [
            TaskOptions::default().ttl(zero),
            TaskOptions::default().poll_interval(zero),
            TaskOptions::default().purge_interval(zero),
            TaskOptions::default().lease(Duration::from_millis(999)),
            TaskOptions::default().max_running(0),
            TaskOptions::default().max_running_per_principal(0),
        ] {
            assert!(refused.check().is_err(), "{refused:?}");
        }
        let poll = Duration::from_millis(500);
        assert_eq!(
            TaskOptions::default()
                .poll_interval(poll)
                .lease(poll * 2)
                .check(),
            Ok(()),
            "a lease of exactly two polls"
        );
    }
}
