//! A failure of the storage itself, and the future every store method returns.

use std::future::Future;
use std::pin::Pin;

/// The future every store method returns; boxed so stores can sit behind `Arc<dyn Store>`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A failure of the storage itself, not a product outcome: nothing is recorded in the ledger, so
/// the caller may retry with the same operation id.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The storage engine failed.
    #[error("storage failed: {0}")]
    Backend(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The worker running the boundary panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(String),
}
