//! What the fuzz targets share: a runtime, requests through the HTTP router in-process, and the
//! checks every answer must pass whatever the input was.

pub mod answer;
pub mod counter;
pub mod draw;
pub mod http;
pub mod json;
pub mod routed;

use std::cell::RefCell;

thread_local! {
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// Runs `future` to completion on this thread's current-thread runtime (made once, reused by
/// every input: building one per input would cost more than most inputs do).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let runtime = slot.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a current-thread runtime")
        });
        runtime.block_on(future)
    })
}

/// The fixed signing key of the servers under test: 32 bytes, so validators and confirmations
/// are issued the same way on every run.
pub const SIGNING_KEY: &[u8; 32] = b"fuzz-signing-key-0123456789abcde";
