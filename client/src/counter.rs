//! Counters added to on every read, by many threads at once: striped over
//! cache lines, so the cores reading do not pass one line back and forth.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter (a power of two).
const STRIPES: usize = 8;

/// One stripe, alone on its cache lines (128 bytes: adjacent-line
/// prefetchers pair 64-byte lines).
#[repr(align(128))]
#[derive(Default)]
struct Stripe(AtomicU64);

/// A sum striped over cache lines; each thread adds to its own stripe and
/// a read sums them.
#[derive(Default)]
pub struct Counter([Stripe; STRIPES]);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0[stripe()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The sum so far.
    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// This thread's stripe: threads take stripes in turn as they first add.
#[inline]
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        let s = m.get();
        if s != usize::MAX {
            return s;
        }
        let s = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
        m.set(s);
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_what_every_thread_added() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for t in 0..20u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(t);
                    }
                });
            }
        });
        assert_eq!(c.get(), 1000 * (0..20).sum::<u64>());
        assert_eq!(format!("{c:?}"), c.get().to_string());
    }
}
