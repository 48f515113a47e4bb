//! The descriptor cache: least-recently-used entries beyond its capacity
//! are evicted and handed back to the caller, which releases them. A
//! lookup takes `&self` (recency is an atomic stamp), so readers share a
//! read lock on the hot path.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// An LRU map of at most `capacity` entries.
pub(crate) struct LruCache<K, V> {
    /// foldhash: keys are block ids, and a lookup is on every read.
    map: HashMap<K, (V, AtomicU64), foldhash::fast::RandomState>,
    tick: AtomicU64,
    capacity: usize,
}

impl<K: Hash + Eq + Copy, V: Clone> LruCache<K, V> {
    /// An empty cache of `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::default(),
            tick: AtomicU64::new(0),
            capacity: capacity.max(1),
        }
    }

    /// The entry for `key`, marked used since the latest insert. Recency
    /// is kept at the grain of inserts (the clock advances on insert only),
    /// so a hit writes nothing shared unless its stamp is behind: readers
    /// on several cores do not pass the clock's cache line around.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let (v, t) = self.map.get(key)?;
        let now = self.tick.load(Ordering::Relaxed);
        if t.load(Ordering::Relaxed) != now {
            t.store(now, Ordering::Relaxed);
        }
        Some(v.clone())
    }

    /// Inserts `v`; returns the entries it displaced (a previous value for
    /// `key` and the least recently used beyond capacity).
    pub(crate) fn insert(&mut self, key: K, v: V) -> Vec<V> {
        // The new entry takes the clock's value and the clock moves on, so
        // a later hit on any entry stamps it newer than this one.
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut evicted = Vec::new();
        if let Some((old, _)) = self.map.insert(key, (v, AtomicU64::new(tick))) {
            evicted.push(old);
        }
        while self.map.len() > self.capacity {
            let oldest = self
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, (_, t))| t.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            match oldest.and_then(|k| self.map.remove(&k)) {
                Some((old, _)) => evicted.push(old),
                None => break,
            }
        }
        evicted
    }

    /// Removes `key`'s entry.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key).map(|(v, _)| v)
    }

    /// Removes `key`'s entry if `pred` accepts its value.
    pub(crate) fn remove_if(&mut self, key: &K, pred: impl FnOnce(&V) -> bool) -> Option<V> {
        if pred(&self.map.get(key)?.0) {
            self.remove(key)
        } else {
            None
        }
    }

    /// Removes the entries `keep` refuses; returns them.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) -> Vec<V> {
        let gone: Vec<K> = self
            .map
            .iter()
            .filter(|(_, (v, _))| !keep(v))
            .map(|(k, _)| *k)
            .collect();
        gone.iter().filter_map(|k| self.remove(k)).collect()
    }

    /// Removes every entry; returns them.
    #[cfg(test)]
    fn drain(&mut self) -> Vec<V> {
        self.map.drain().map(|(_, (v, _))| v).collect()
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_beyond_capacity() {
        let mut c = LruCache::new(2);
        assert!(c.insert(1, "a").is_empty());
        assert!(c.insert(2, "b").is_empty());
        // Using 1 makes 2 the oldest.
        assert_eq!(c.get(&1), Some("a"));
        assert_eq!(c.insert(3, "c"), vec!["b"]);
        assert_eq!(
            (c.get(&2), c.get(&1), c.get(&3)),
            (None, Some("a"), Some("c"))
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn replacing_removing_and_filtering_hand_back_entries() {
        let mut c = LruCache::new(0);
        assert_eq!(
            c.insert(1, 10),
            Vec::<i32>::new(),
            "capacity is at least one"
        );
        assert_eq!(c.insert(1, 11), vec![10], "the old value is handed back");
        let mut c = LruCache::new(8);
        for k in 0..6 {
            c.insert(k, k * 10);
        }
        let mut odd = c.retain(|v| v % 20 == 0);
        odd.sort();
        assert_eq!(odd, vec![10, 30, 50]);
        assert_eq!(c.remove_if(&2, |v| *v == 21), None, "kept: refused");
        assert_eq!(c.remove(&2), Some(20));
        assert_eq!(c.remove(&2), None);
        let mut rest = c.drain();
        rest.sort();
        assert_eq!(rest, vec![0, 40]);
        assert_eq!(c.len(), 0);
    }
}
