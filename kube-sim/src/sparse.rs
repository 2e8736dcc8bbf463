//! Giving back the capacity of collections that a burst grew.
//!
//! Rust's maps, sets and deques keep their capacity when entries are removed. A burst (a thousand pods
//! rolled at once, tens of thousands of Events) grows the tables that index objects to the burst's size,
//! and without this they would keep that size after the objects are gone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};

/// Below this capacity a collection is left as it is.
const KEEP: usize = 64;

/// Shrinking a collection that is mostly empty.
pub(crate) trait ShrinkWhenSparse {
    /// Halves the spare capacity once fewer than a quarter of the slots are used, keeping room for
    /// twice the entries present, so repeated calls between removals cost amortised constant time.
    fn shrink_when_sparse(&mut self);
}

/// Whether a collection of `len` entries in `capacity` slots should shrink.
fn sparse(len: usize, capacity: usize) -> bool {
    capacity > KEEP && len.saturating_mul(4) < capacity
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkWhenSparse for HashMap<K, V, S> {
    fn shrink_when_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

impl<K: Eq + Hash, S: BuildHasher> ShrinkWhenSparse for HashSet<K, S> {
    fn shrink_when_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

impl<T> ShrinkWhenSparse for VecDeque<T> {
    fn shrink_when_sparse(&mut self) {
        if sparse(self.len(), self.capacity()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_capacity_back() {
        let mut map: HashMap<usize, String> = (0..10_000).map(|i| (i, i.to_string())).collect();
        let grown = map.capacity();
        for i in 10..10_000 {
            map.remove(&i);
            map.shrink_when_sparse();
        }
        assert_eq!(map.len(), 10);
        assert!(map.capacity() <= KEEP * 2, "{} of {grown}", map.capacity());
        assert!((0..10).all(|i| map.get(&i) == Some(&i.to_string())));
    }

    #[test]
    fn a_set_and_a_deque_shrink_only_when_mostly_empty() {
        let mut set: HashSet<usize> = (0..1000).collect();
        let full = set.capacity();
        set.retain(|i| *i < 500);
        set.shrink_when_sparse();
        assert!(
            set.capacity() * 10 > full * 9,
            "more than a quarter used: kept"
        );
        set.retain(|i| *i < 100);
        set.shrink_when_sparse();
        assert!(set.capacity() < full && set.capacity() >= 200);

        let mut deque: VecDeque<usize> = (0..1000).collect();
        deque.drain(..990);
        deque.shrink_when_sparse();
        assert!(deque.capacity() < KEEP * 2);
        assert_eq!(
            deque.iter().copied().collect::<Vec<_>>(),
            (990..1000).collect::<Vec<_>>()
        );
    }
}
