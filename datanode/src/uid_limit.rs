//! Short-circuit connections counted per peer uid: one local user cannot
//! take every connection of the node and push every other reader back to
//! gRPC. A connection holds a [`UidSlot`] while it is served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Connections served per uid, with a limit.
#[derive(Debug)]
pub(crate) struct UidLimit {
    max: usize,
    held: Mutex<HashMap<u32, usize>>,
}

/// One connection of `uid`, given back when dropped.
#[derive(Debug)]
pub(crate) struct UidSlot {
    limit: Arc<UidLimit>,
    uid: u32,
}

impl UidLimit {
    /// At most `max` connections per uid (at least one).
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            held: Mutex::default(),
        })
    }

    /// A slot for a connection of `uid`, or the number it holds already
    /// when that is the limit.
    pub(crate) fn take(self: &Arc<Self>, uid: u32) -> Result<UidSlot, usize> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(uid).or_default();
        if *n >= self.max {
            return Err(*n);
        }
        *n += 1;
        Ok(UidSlot {
            limit: self.clone(),
            uid,
        })
    }
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        let mut held = self.limit.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_uid_has_its_own_allowance() {
        let l = UidLimit::new(2);
        let a1 = l.take(1000).unwrap();
        let _a2 = l.take(1000).unwrap();
        assert_eq!(l.take(1000).unwrap_err(), 2);
        // Another user is not held up by the first.
        let _b = l.take(2000).unwrap();
        drop(a1);
        let _a3 = l.take(1000).unwrap();
        assert!(l.take(1000).is_err());
    }
}
