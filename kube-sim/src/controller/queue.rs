//! A work queue of object keys, as Kubernetes controllers use: a key is queued at most once, and delayed
//! additions of the same key collapse into the earliest one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lock::MutexExt as _;
use crate::sparse::ShrinkWhenSparse as _;

/// A deduplicating queue of keys. Clones share the same queue.
pub struct Queue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Queue {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    /// Keys waiting for their delay, with the instant they become ready.
    delayed: HashMap<K, Instant>,
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    /// An empty queue.
    pub fn new() -> Queue<K> {
        Queue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    ready: VecDeque::new(),
                    queued: HashSet::new(),
                    delayed: HashMap::new(),
                }),
                notify: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.shared.state.lock_unpoisoned()
    }

    /// Queues a key now.
    pub fn add(&self, key: K) {
        let mut st = self.lock();
        if st.delayed.remove(&key).is_some() {
            st.delayed.shrink_when_sparse();
        }
        if st.queued.insert(key.clone()) {
            st.ready.push_back(key);
            drop(st);
            self.shared.notify.notify_one();
        }
    }

    /// Queues a key after a delay; an earlier pending addition of the same key wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        {
            let mut st = self.lock();
            if st.queued.contains(&key) {
                return;
            }
            if st.delayed.get(&key).is_some_and(|t| *t <= at) {
                return;
            }
            st.delayed.insert(key.clone(), at);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let due = {
                let st = queue.lock();
                st.delayed.get(&key).is_some_and(|t| *t <= Instant::now())
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// Waits for the next key and takes it off the queue.
    pub async fn next(&self) -> K {
        loop {
            let notified = self.shared.notify.notified();
            {
                let mut st = self.lock();
                if let Some(key) = st.ready.pop_front() {
                    st.queued.remove(&key);
                    st.ready.shrink_when_sparse();
                    st.queued.shrink_when_sparse();
                    if !st.ready.is_empty() {
                        self.shared.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// How many keys are ready.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_deduplicated_and_delays_collapse() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, "a");
        assert_eq!(q.next().await, "b");
        q.add_after("c", Duration::from_millis(30));
        q.add_after("c", Duration::from_millis(10));
        let got = tokio::time::timeout(Duration::from_secs(5), q.next()).await;
        assert_eq!(got, Ok("c"));
        assert_eq!(q.len(), 0);
    }
}
