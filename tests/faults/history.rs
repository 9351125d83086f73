//! The history of a fault test, as its agents saw it, and its check for linearizability with
//! `stateright`'s tester against a sequential model of one basket.
//!
//! Each basket is checked on its own: a history is linearizable exactly when the history of each
//! object in it is (linearizability is compositional), which keeps each search small.

use std::collections::BTreeMap;
use std::sync::Mutex;

use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// A basket as the workload changes it: its version, memory and number of notes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Model {
    pub version: u64,
    pub memory_gib: u64,
    pub notes: u64,
}

impl Model {
    /// A basket as `basket_create` makes it.
    pub fn created() -> Model {
        Model {
            version: 1,
            memory_gib: 16,
            notes: 0,
        }
    }
}

/// An operation of an agent, as one logical call: every retry under the same operation id is
/// part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `basket_get`.
    Read,
    /// `basket_replace_configuration` planned from `expected`, setting `memory_gib`.
    Replace { expected: u64, memory_gib: u64 },
    /// `basket_add_note`.
    Note,
}

/// What an operation answered in the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ret {
    Read {
        version: u64,
        memory_gib: u64,
        notes: u64,
    },
    /// `applied`, or `replayed` of an `applied`: the version the change made.
    Applied { version: u64 },
    /// `stale_view` (or its replay): nothing applied; the version the basket was at.
    Stale { current: u64 },
}

impl SequentialSpec for Model {
    type Op = Op;
    type Ret = Ret;

    fn invoke(&mut self, op: &Op) -> Ret {
        match *op {
            Op::Read => Ret::Read {
                version: self.version,
                memory_gib: self.memory_gib,
                notes: self.notes,
            },
            Op::Replace {
                expected,
                memory_gib,
            } => {
                if expected != self.version {
                    return Ret::Stale {
                        current: self.version,
                    };
                }
                self.version += 1;
                self.memory_gib = memory_gib;
                Ret::Applied {
                    version: self.version,
                }
            }
            Op::Note => {
                self.version += 1;
                self.notes += 1;
                Ret::Applied {
                    version: self.version,
                }
            }
        }
    }
}

/// One invocation or return, in the order the agents recorded them.
#[derive(Debug, Clone)]
enum Event {
    Invoke {
        client: u64,
        basket: usize,
        op: Op,
    },
    Return {
        client: u64,
        basket: usize,
        ret: Ret,
    },
}

/// The history of a run. Events are recorded under one lock, an invocation before its first
/// request goes out and a return after its answer came: their order is the real-time order.
pub struct History {
    events: Mutex<Vec<Event>>,
    /// How many operations were invoked so far, for a test that acts partway through a run.
    invoked: tokio::sync::watch::Sender<usize>,
}

impl Default for History {
    fn default() -> Self {
        History {
            events: Mutex::new(Vec::new()),
            invoked: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl History {
    pub fn invoke(&self, client: u64, basket: usize, op: Op) {
        self.events
            .lock()
            .unwrap()
            .push(Event::Invoke { client, basket, op });
        self.invoked.send_modify(|invoked| *invoked += 1);
    }

    /// Returns once `operations` operations were invoked.
    pub async fn reached(&self, operations: usize) {
        let mut invoked = self.invoked.subscribe();
        let _ = invoked.wait_for(|invoked| *invoked >= operations).await;
    }

    pub fn complete(&self, client: u64, basket: usize, ret: Ret) {
        self.events.lock().unwrap().push(Event::Return {
            client,
            basket,
            ret,
        });
    }

    /// How many operations were invoked.
    pub fn operations(&self) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|event| matches!(event, Event::Invoke { .. }))
            .count()
    }

    /// Checks each basket's history with the linearizability tester; `Err` names the first
    /// basket whose history no sequential order of the model explains. An operation never
    /// answered (its client gave up) may or may not have taken effect.
    pub fn check(&self) -> Result<Verdict, String> {
        let events = self.events.lock().unwrap().clone();
        // The search recurses once per operation: a thread of its own with room for it.
        std::thread::Builder::new()
            .stack_size(512 * 1024 * 1024)
            .spawn(move || check(&events))
            .unwrap()
            .join()
            .unwrap()
    }
}

/// What the checker found.
#[derive(Debug)]
pub struct Verdict {
    pub baskets: usize,
    pub operations: usize,
    /// Operations whose client never heard their answer.
    pub unanswered: usize,
}

fn check(events: &[Event]) -> Result<Verdict, String> {
    let mut testers: BTreeMap<usize, LinearizabilityTester<u64, Model>> = BTreeMap::new();
    let (mut operations, mut answered) = (0, 0);
    for event in events {
        match event {
            Event::Invoke { client, basket, op } => {
                operations += 1;
                testers
                    .entry(*basket)
                    .or_insert_with(|| LinearizabilityTester::new(Model::created()))
                    .on_invoke(*client, op.clone())?;
            }
            Event::Return {
                client,
                basket,
                ret,
            } => {
                answered += 1;
                testers
                    .get_mut(basket)
                    .ok_or("a return before any invocation")?
                    .on_return(*client, ret.clone())?;
            }
        }
    }
    for (basket, tester) in &testers {
        if tester.serialized_history().is_none() {
            return Err(format!(
                "the history of basket {basket} is not linearizable ({} operations)",
                tester.len()
            ));
        }
    }
    Ok(Verdict {
        baskets: testers.len(),
        operations,
        unanswered: operations - answered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker is not a rubber stamp: a change applied twice, a lost update and a stale
    /// read are each refused, and their correct counterparts accepted.
    #[test]
    fn the_checker_refuses_histories_no_order_explains() {
        let linearizable = |build: &dyn Fn(&History)| {
            let history = History::default();
            build(&history);
            history.check().is_ok()
        };
        // Two clients, one after the other: the second plans from the first's version.
        assert!(linearizable(&|h| {
            h.invoke(
                1,
                0,
                Op::Replace {
                    expected: 1,
                    memory_gib: 17,
                },
            );
            h.complete(1, 0, Ret::Applied { version: 2 });
            h.invoke(
                2,
                0,
                Op::Replace {
                    expected: 2,
                    memory_gib: 18,
                },
            );
            h.complete(2, 0, Ret::Applied { version: 3 });
            h.invoke(3, 0, Op::Read);
            h.complete(
                3,
                0,
                Ret::Read {
                    version: 3,
                    memory_gib: 18,
                    notes: 0,
                },
            );
        }));
        // Both planned from version 1 and both were told `applied`: a lost update.
        assert!(!linearizable(&|h| {
            h.invoke(
                1,
                0,
                Op::Replace {
                    expected: 1,
                    memory_gib: 17,
                },
            );
            h.invoke(
                2,
                0,
                Op::Replace {
                    expected: 1,
                    memory_gib: 17,
                },
            );
            h.complete(1, 0, Ret::Applied { version: 2 });
            h.complete(2, 0, Ret::Applied { version: 2 });
        }));
        // A note applied twice: the read after it shows two.
        assert!(!linearizable(&|h| {
            h.invoke(1, 0, Op::Note);
            h.complete(1, 0, Ret::Applied { version: 2 });
            h.invoke(2, 0, Op::Read);
            h.complete(
                2,
                0,
                Ret::Read {
                    version: 3,
                    memory_gib: 16,
                    notes: 2,
                },
            );
        }));
        // A read that began after a change was answered, and missed it.
        assert!(!linearizable(&|h| {
            h.invoke(
                1,
                0,
                Op::Replace {
                    expected: 1,
                    memory_gib: 20,
                },
            );
            h.complete(1, 0, Ret::Applied { version: 2 });
            h.invoke(2, 0, Op::Read);
            h.complete(
                2,
                0,
                Ret::Read {
                    version: 1,
                    memory_gib: 16,
                    notes: 0,
                },
            );
        }));
        // An unanswered change may have been applied, or not.
        for seen in [1, 2] {
            assert!(linearizable(&|h| {
                h.invoke(1, 0, Op::Note);
                h.invoke(2, 0, Op::Read);
                h.complete(
                    2,
                    0,
                    Ret::Read {
                        version: seen,
                        memory_gib: 16,
                        notes: seen - 1,
                    },
                );
            }));
        }
        // A change told `stale_view` yet applied: the read shows it.
        assert!(!linearizable(&|h| {
            h.invoke(
                1,
                0,
                Op::Replace {
                    expected: 1,
                    memory_gib: 17,
                },
            );
            h.complete(1, 0, Ret::Stale { current: 2 });
            h.invoke(2, 0, Op::Read);
            h.complete(
                2,
                0,
                Ret::Read {
                    version: 2,
                    memory_gib: 17,
                    notes: 0,
                },
            );
        }));
    }
}
