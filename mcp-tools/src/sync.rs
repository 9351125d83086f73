//! Locking and sharing by key, for the crate's modules.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

// Only the features that share by key build the table.
#[cfg(any(feature = "postgres", feature = "oauth"))]
pub(crate) mod shared;

/// Locks `mutex`, taking over a lock that a panicking thread poisoned. Only for data that every
/// critical section leaves consistent even when it panics; each caller says why its data is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks `lock`, taking over a lock that a panicking thread poisoned; the same rule as
/// [`lock`].
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write-locks `lock`, taking over a lock that a panicking thread poisoned; the same rule as
/// [`lock`].
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
