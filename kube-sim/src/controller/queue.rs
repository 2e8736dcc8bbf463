//! A work queue of object keys, as Kubernetes controllers use: a key is queued at most once, and delayed
//! additions of the same key collapse into the earliest one. Delayed keys wait on one timer per queue, as
//! client-go's delaying queue does, not on a task each: a rollout re-queues its Deployments with their
//! progress deadline (ten minutes) on every sync, and a task per addition kept thousands of sleeping
//! tasks for that long.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
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
    /// Wakes a consumer waiting in [`Queue::next`].
    notify: Notify,
    /// Wakes the timer when a key is due earlier than those it waits for.
    timer: Notify,
}

/// When a delayed key is due, made unique by the order of its addition.
type Due = (Instant, u64);

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    /// Keys waiting for their delay, with when each is due...
    delayed: HashMap<K, Due>,
    /// ...and the same keys in the order they are due.
    due: BTreeMap<Due, K>,
    added: u64,
    /// Whether the timer task runs; it ends when no key waits.
    timer: bool,
}

impl<K> State<K> {
    /// Forgets the delayed addition of `key`.
    fn undelay(&mut self, key: &K) -> Option<Due>
    where
        K: Eq + Hash,
    {
        let due = self.delayed.remove(key)?;
        self.due.remove(&due);
        self.delayed.shrink_when_sparse();
        Some(due)
    }

    /// Queues `key` unless it is queued already; whether it was added.
    fn push(&mut self, key: K) -> bool
    where
        K: Clone + Eq + Hash,
    {
        if !self.queued.insert(key.clone()) {
            return false;
        }
        self.ready.push_back(key);
        true
    }
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
                    due: BTreeMap::new(),
                    added: 0,
                    timer: false,
                }),
                notify: Notify::new(),
                timer: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.shared.state.lock_unpoisoned()
    }

    /// Queues a key now.
    pub fn add(&self, key: K) {
        let mut st = self.lock();
        let first = st.due.first_key_value().map(|(d, _)| *d);
        if first.is_some() && st.undelay(&key) == first {
            // The timer waits for this key: it looks again (and ends when no key is left).
            self.shared.timer.notify_one();
        }
        if st.push(key) {
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
        let mut st = self.lock();
        if st.queued.contains(&key) || st.delayed.get(&key).is_some_and(|(t, _)| *t <= at) {
            return;
        }
        st.undelay(&key);
        st.added += 1;
        let due = (at, st.added);
        st.delayed.insert(key.clone(), due);
        st.due.insert(due, key);
        let earliest = st.due.first_key_value().is_some_and(|(d, _)| *d == due);
        if !st.timer {
            st.timer = true;
            tokio::spawn(self.clone().run_timer());
        } else if earliest {
            self.shared.timer.notify_one();
        }
    }

    /// Moves keys to the ready queue as they become due, until none waits.
    async fn run_timer(self) {
        loop {
            let next = {
                let mut st = self.lock();
                let now = Instant::now();
                let mut added = false;
                while let Some(entry) = st.due.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let key = entry.remove();
                    st.delayed.remove(&key);
                    added |= st.push(key);
                }
                st.delayed.shrink_when_sparse();
                if added {
                    self.shared.notify.notify_one();
                }
                match st.due.first_key_value() {
                    Some(((at, _), _)) => *at,
                    None => {
                        st.timer = false;
                        return;
                    }
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.shared.timer.notified() => {}
            }
        }
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

    #[tokio::test]
    async fn delayed_keys_come_due_in_order_and_an_earlier_addition_wins() {
        let q = Queue::new();
        q.add_after("late", Duration::from_millis(120));
        q.add_after("soon", Duration::from_millis(40));
        // A later addition does not postpone, an earlier one brings it forward.
        q.add_after("soon", Duration::from_secs(60));
        q.add_after("late", Duration::from_millis(80));
        q.add_after("now", Duration::from_secs(60));
        q.add("now");
        let next = || tokio::time::timeout(Duration::from_secs(5), q.next());
        assert_eq!(next().await, Ok("now"));
        let started = Instant::now();
        assert_eq!(next().await, Ok("soon"));
        assert_eq!(next().await, Ok("late"));
        assert!(started.elapsed() >= Duration::from_millis(60));
        // "now" was taken off the delayed keys when it was queued: it does not come again.
        let again = tokio::time::timeout(Duration::from_millis(200), q.next()).await;
        assert!(again.is_err(), "{again:?}");
    }

    #[tokio::test]
    async fn keys_delayed_over_and_over_wait_on_one_timer() {
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let q = Queue::new();
        for round in 0..200u64 {
            let key = round % 20;
            // As a controller does: a sync queues its key now, then asks to look again much later.
            q.add(key);
            assert_eq!(q.next().await, key);
            q.add_after(key, Duration::from_secs(600 - round));
            tokio::task::yield_now().await;
        }
        assert_eq!(q.lock().due.len(), 20);
        assert_eq!(tasks(), before + 1, "one timer for the queue");
        for key in 0..20 {
            q.add(key);
        }
        assert!(q.lock().due.is_empty());
        let deadline = Instant::now() + Duration::from_secs(5);
        while tasks() > before && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(tasks(), before, "the timer ends once no key waits");
    }
}
