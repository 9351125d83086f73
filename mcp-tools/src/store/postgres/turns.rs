//! Units of this process that would queue on one advisory lock take turns before they take a
//! connection.
//!
//! A unit holds its pooled connection while it waits for its locks in the database. Without
//! turns, the calls piling up on one busy resource would each hold a connection while they
//! wait, until the pool had none left for anything else: reads and changes of every other
//! resource would wait for a lock they do not need, and past the timeout fail. With turns, the
//! units of one lock key in this process wait here, holding no connection, and at most one per
//! key (per process) waits in the database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Mutex as Queue, OwnedMutexGuard};

use crate::sync::lock;

/// Shards of the table of keys someone holds or waits for, so that units of different keys
/// rarely meet on one mutex.
const SHARDS: usize = 16;

/// A key's queue and how many units hold or wait for its turn.
type Entry = (Arc<Queue<()>>, usize);

type Shard = Mutex<HashMap<i64, Entry>>;

/// The lock keys that units of this process hold or wait for, each with its queue (first come,
/// first served) and its count of units. A key with nobody holding or waiting has no entry.
pub(crate) struct Turns {
    shards: Box<[Shard]>,
}

impl Turns {
    pub(crate) fn new() -> Self {
        Turns {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Waits until the units of `key` that came first are done.
    pub(crate) async fn take(&self, key: i64) -> Turn<'_> {
        let ticket = Ticket::new(self, key);
        let held = Arc::clone(&ticket.queue).lock_owned().await;
        Turn {
            _held: held,
            _ticket: ticket,
        }
    }

    /// [`take`](Self::take) for a key the unit may not have.
    pub(crate) async fn take_if(&self, key: Option<i64>) -> Option<Turn<'_>> {
        match key {
            Some(key) => Some(self.take(key).await),
            None => None,
        }
    }

    fn shard(&self, key: i64) -> MutexGuard<'_, HashMap<i64, Entry>> {
        // Nothing panics while a shard is held; a poisoned one is still consistent.
        lock(&self.shards[key.rem_euclid(SHARDS as i64) as usize])
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        (0..SHARDS as i64)
            .map(|shard| self.shard(shard).len())
            .sum()
    }
}

/// A key's turn, until it is dropped.
pub(crate) struct Turn<'a> {
    // Declared first so it is dropped first: the turn is given up before the ticket may forget
    // the key, so a unit that comes after never runs beside this one.
    _held: OwnedMutexGuard<()>,
    _ticket: Ticket<'a>,
}

/// A unit's claim on a key's queue, while it waits and while it holds the turn. The last one to
/// go removes the key's entry, whether it had its turn or was given up while it waited.
struct Ticket<'a> {
    turns: &'a Turns,
    key: i64,
    queue: Arc<Queue<()>>,
}

impl<'a> Ticket<'a> {
    fn new(turns: &'a Turns, key: i64) -> Self {
        let mut shard = turns.shard(key);
        let (queue, units) = shard.entry(key).or_default();
        *units += 1;
        let queue = Arc::clone(queue);
        Ticket { turns, key, queue }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Counted rather than read off the queue's reference count: a unit given up while it
        // waits may drop its ticket before the future that held another reference.
        let mut shard = self.turns.shard(self.key);
        if let Some((_, units)) = shard.get_mut(&self.key) {
            *units -= 1;
            if *units == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_key_is_taken_in_turn_and_forgotten_when_nobody_holds_it() {
        let turns = Turns::new();
        let first = turns.take(7).await;
        let mut second = Box::pin(turns.take(7));
        assert!(second.as_mut().now_or_never().is_none(), "7 is held");
        // Another key is not held up.
        let other = turns.take(8).now_or_never().expect("8 is free");
        assert_eq!(turns.keys(), 2);
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second unit's turn comes when the first is done");
        drop(other);
        assert_eq!(turns.keys(), 1, "8 is forgotten, 7 is still held");
        drop(second);
        assert_eq!(turns.keys(), 0);
    }

    #[tokio::test]
    async fn a_unit_given_up_while_it_waits_leaves_nothing_behind() {
        let turns = Turns::new();
        let first = turns.take(-3).await;
        let mut waiting = Box::pin(turns.take(-3));
        assert!(waiting.as_mut().now_or_never().is_none());
        drop(waiting);
        assert_eq!(turns.keys(), 1, "the holder's entry stays");
        drop(first);
        assert_eq!(turns.keys(), 0);

        // The holder gone first, the waiter given up after: the last one out removes it.
        let first = turns.take(-3).await;
        let mut waiting = Box::pin(turns.take(-3));
        assert!(waiting.as_mut().now_or_never().is_none());
        drop(first);
        drop(waiting);
        assert_eq!(turns.keys(), 0);
    }

    #[tokio::test]
    async fn turns_come_in_the_order_units_asked() {
        let turns = Turns::new();
        let first = turns.take(1).await;
        let mut second = Box::pin(turns.take(1));
        let mut third = Box::pin(turns.take(1));
        assert!(second.as_mut().now_or_never().is_none());
        assert!(third.as_mut().now_or_never().is_none());
        drop(first);
        assert!(
            third.as_mut().now_or_never().is_none(),
            "the second asked first"
        );
        let second = second.now_or_never().expect("the second's turn");
        drop(second);
        third.now_or_never().expect("then the third's");
    }
}
