//! Which replicas each datanode says it holds, from its replica reports: a
//! full report replaces what was known, an incremental one adds to it.
//! Kept in memory only: after a restart the OM learns it again from the
//! full report each datanode sends when it registers.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use ozone_common::block_key::{BlockKey, key_of};
use ozone_proto::{BlockId, ReplicaReport};

/// What one datanode reported.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Healthy committed replicas.
    pub blocks: HashSet<BlockKey>,
    /// Replicas it found damaged.
    pub damaged: HashSet<BlockKey>,
}

/// Reported replicas of every datanode that sent a full report since it
/// last registered.
#[derive(Debug, Default)]
pub(crate) struct ReplicaMap {
    nodes: Mutex<HashMap<String, Held>>,
}

impl ReplicaMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A datanode (re)registered: what it holds is unknown until its next
    /// full report.
    pub(crate) fn forget(&self, dn: &str) {
        self.lock().remove(dn);
    }

    /// Applies a report of `dn`; an incremental report before any full one
    /// is dropped (the full one covers it). Returns whether it was applied.
    pub(crate) fn apply(&self, dn: &str, report: &ReplicaReport) -> bool {
        let mut nodes = self.lock();
        if report.full {
            let mut held = Held::default();
            held.blocks.extend(report.replicas.iter().map(key_of));
            held.damaged.extend(report.damaged.iter().map(key_of));
            nodes.insert(dn.to_string(), held);
            return true;
        }
        let Some(held) = nodes.get_mut(dn) else {
            return false;
        };
        for id in &report.replicas {
            held.blocks.insert(key_of(id));
            held.damaged.remove(&key_of(id));
        }
        for id in &report.removed {
            held.blocks.remove(&key_of(id));
            held.damaged.remove(&key_of(id));
        }
        for id in &report.damaged {
            held.blocks.remove(&key_of(id));
            held.damaged.insert(key_of(id));
        }
        true
    }

    /// Records that `dn` now holds `id` (a copy it confirmed).
    pub(crate) fn add(&self, dn: &str, id: &BlockId) {
        if let Some(h) = self.lock().get_mut(dn) {
            h.blocks.insert(key_of(id));
            h.damaged.remove(&key_of(id));
        }
    }

    /// Runs `f` over the reports (no I/O inside, please).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&HashMap<String, Held>) -> T) -> T {
        f(&self.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> BlockId {
        BlockId {
            container_id: 1,
            local_id: n,
            commit_seq: 0,
        }
    }

    #[test]
    fn full_then_incremental_reports() {
        let m = ReplicaMap::default();
        let inc = ReplicaReport {
            replicas: vec![id(9)],
            ..Default::default()
        };
        assert!(!m.apply("a", &inc), "no full report yet");
        m.apply(
            "a",
            &ReplicaReport {
                full: true,
                replicas: vec![id(1), id(2)],
                damaged: vec![id(3)],
                ..Default::default()
            },
        );
        m.apply(
            "a",
            &ReplicaReport {
                replicas: vec![id(3)],
                removed: vec![id(1)],
                damaged: vec![id(2)],
                ..Default::default()
            },
        );
        m.with(|n| {
            let h = &n["a"];
            assert_eq!(h.blocks, [(1, 3)].into());
            assert_eq!(h.damaged, [(1, 2)].into());
        });
        m.forget("a");
        assert!(m.with(|n| n.is_empty()));
    }
}
