//! Units of this process that would queue on one advisory lock take turns before they take a
//! connection.
//!
//! A unit holds its pooled connection while it waits for its locks in the database. Without
//! turns, the calls piling up on one busy resource would each hold a connection while they
//! wait, until the pool had none left for anything else: reads and changes of every other
//! resource would wait for a lock they do not need, and past the timeout fail. With turns, the
//! units of one lock key in this process wait here, holding no connection, and at most one per
//! key (per process) waits in the database.

use std::sync::Arc;

use tokio::sync::{Mutex as Queue, OwnedMutexGuard};

use crate::sync::shared::{Member, Shared};

/// Shards of the table of keys someone holds or waits for, so that units of different keys
/// rarely meet on one mutex.
const SHARDS: usize = 16;

/// The lock keys that units of this process hold or wait for, each with its queue (first come,
/// first served). A key with nobody holding or waiting has no entry.
pub(crate) struct Turns {
    shards: Box<[Shared<i64, Queue<()>>]>,
}

impl Turns {
    pub(crate) fn new() -> Self {
        Turns {
            shards: (0..SHARDS).map(|_| Shared::new()).collect(),
        }
    }

    /// Waits until the units of `key` that came first are done.
    pub(crate) async fn take(&self, key: i64) -> Turn<'_> {
        let member = self.shards[key.rem_euclid(SHARDS as i64) as usize].join(key);
        let held = Arc::clone(member.value()).lock_owned().await;
        Turn {
            _held: held,
            _member: member,
        }
    }

    /// [`take`](Self::take) for a key the unit may not have.
    pub(crate) async fn take_if(&self, key: Option<i64>) -> Option<Turn<'_>> {
        match key {
            Some(key) => Some(self.take(key).await),
            None => None,
        }
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.shards.iter().map(Shared::len).sum()
    }
}

/// A key's turn, until it is dropped. A unit given up while it waits leaves the key's queue as
/// a [`Member`] does.
pub(crate) struct Turn<'a> {
    // Declared first so it is dropped first: the turn is given up before the member may forget
    // the key, so a unit that comes after never runs beside this one.
    _held: OwnedMutexGuard<()>,
    _member: Member<'a, i64, Queue<()>>,
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
    async fn a_key_a_unit_has_is_taken_and_none_takes_nothing() {
        let turns = Turns::new();
        let held = turns.take_if(Some(5)).await.expect("a turn for a key");
        assert!(
            Box::pin(turns.take(5)).now_or_never().is_none(),
            "5 is held"
        );
        assert!(turns.take_if(None).await.is_none());
        assert_eq!(turns.keys(), 1);
        drop(held);
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
