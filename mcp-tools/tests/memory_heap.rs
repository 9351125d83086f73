//! What the memory store's ledger costs the heap as it grows: a record lives in its shard's
//! table, with no heap block of its own. Records outlive the requests around them by hours;
//! with the C library's allocator, each small block kept between short-lived ones makes every
//! later request slower (reads over HTTP lost about 40% of their rate after 90,000 records when
//! each record held two blocks).
//!
//! The test counts live heap blocks with a counting global allocator, so it is alone in its
//! test binary: no other test allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use futures_util::FutureExt;
use mcp_tools::MemoryStore;
use mcp_tools::auth::Principal;
use mcp_tools::store::{
    CreateRequest, EntityKind, Fingerprint, ManualClock, MutationOutcome, MutationRequest, Store,
    StoreConfig, Transition,
};
use serde_json::{Value, json};

/// The system allocator, counting the blocks it has handed out and not yet taken back.
struct Counting;

static LIVE_BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to `System` unchanged; the counter is only arithmetic on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `layout` is `System`'s.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `alloc` above with this `layout`.
        unsafe { System.dealloc(block, layout) };
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const COUNTER: EntityKind = EntityKind::new("counter", "ctr");

/// One resource, mutated with a fresh operation id each time; every mutation leaves a ledger
/// record for the whole (default, 24 h) retention.
struct Writer {
    store: MemoryStore,
    handle: String,
    version: u64,
    next_id: u64,
}

impl Writer {
    fn new() -> Self {
        let store = MemoryStore::new(StoreConfig {
            ledger_quota: 1_000_000,
            clock: Arc::new(ManualClock::at_millis(1_785_231_000_000)),
            ..StoreConfig::default()
        });
        let request = CreateRequest::new(COUNTER, Principal::subject("alice"), json!({ "n": 0 }));
        let created = store.create(request).now_or_never().unwrap().unwrap();
        let handle = created.applied().unwrap().handle.clone();
        Writer {
            store,
            handle,
            version: 1,
            next_id: 0,
        }
    }

    fn mutate(&mut self, times: u64) {
        for _ in 0..times {
            self.next_id += 1;
            let operation_id = format!("op-{:08}", self.next_id);
            let arguments = json!({ "counter_id": self.handle, "operation_id": operation_id });
            let request = MutationRequest::new(COUNTER, Principal::subject("alice"), &self.handle)
                .expect_version(self.version)
                .operation(operation_id, Fingerprint::of_call("bump", &arguments));
            let transition = Transition::new(|state| {
                state["n"] = json!(state["n"].as_u64().unwrap_or(0) + 1);
                Ok(Value::Null)
            });
            let outcome = self.store.mutate(request, transition).now_or_never();
            match outcome.unwrap().unwrap() {
                MutationOutcome::Applied(applied) => self.version = applied.version,
                other => panic!("expected applied, got {other:?}"),
            }
        }
    }
}

#[test]
fn a_ledger_record_takes_no_heap_block_of_its_own() {
    let mut writer = Writer::new();
    // Past the history limit, so the history holds as many versions before as after.
    writer.mutate(2_000);
    let before = LIVE_BLOCKS.load(Ordering::Relaxed);
    const RECORDS: u64 = 20_000;
    writer.mutate(RECORDS);
    let grown = LIVE_BLOCKS.load(Ordering::Relaxed) - before;
    // The shards' tables are replaced, not added to, as they grow; two blocks a record would
    // be 40,000.
    assert!(
        grown < 100,
        "{RECORDS} more ledger records left {grown} more live heap blocks"
    );
    assert_eq!(writer.version, 1 + 2_000 + RECORDS);
}
