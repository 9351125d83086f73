//! The automatic sweep of a store, on a thread of its own: requests only count their writes, so
//! none of them waits for a sweep or is answered with a sweep's failure.

use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::Duration;

/// How long the sweeper waits for writes before it sweeps anyway, so a store that went quiet
/// still lets go of what expired.
const IDLE: Duration = Duration::from_secs(5);

/// Wakes the sweep thread every `every` writes. The thread ends when the store is dropped.
pub(crate) struct Sweeper {
    wake: Option<SyncSender<()>>,
    writes: AtomicU64,
    every: u64,
}

impl Sweeper {
    /// Starts a thread that runs `step` on the store behind `store` at each wake-up and every
    /// [`IDLE`] interval, for as long as the store lives.
    pub(crate) fn spawn<T: Send + Sync + 'static>(
        store: Weak<T>,
        step: fn(&T),
        every: u64,
    ) -> Self {
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let spawned = std::thread::Builder::new()
            .name("mcp-tools-sweep".into())
            .spawn(move || {
                loop {
                    match woken.recv_timeout(IDLE) {
                        Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let Some(store) = store.upgrade() else {
                        return;
                    };
                    step(&store);
                }
            });
        let wake = match spawned {
            Ok(_) => Some(wake),
            Err(error) => {
                // Without the thread nothing expires on its own; `Store::prune` still works.
                tracing::warn!(%error, "could not start the store's sweep thread");
                None
            }
        };
        Sweeper {
            wake,
            writes: AtomicU64::new(0),
            every: every.max(1),
        }
    }

    /// Counts one write, and wakes the thread every `every` writes without waiting for it.
    pub(crate) fn count_write(&self) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed);
        if writes % self.every == self.every - 1
            && let Some(wake) = &self.wake
        {
            // A full channel means a wake-up is already pending.
            let _ = wake.try_send(());
        }
    }
}
