//! Datanode liveness: the last heartbeat of each datanode, and the
//! HEALTHY / STALE / DEAD state derived from it; and each datanode's
//! operational state (in service, decommissioning, in maintenance), which
//! outlives its registration and is persisted by the caller.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ozone_proto::{DatanodeDetails, NodeState, OperationalState};

use crate::placement::Candidate;

/// In-memory view of registered datanodes.
pub struct Registry {
    nodes: Mutex<HashMap<String, (DatanodeDetails, Instant)>>,
    operational: Mutex<HashMap<String, OperationalState>>,
    stale_after: Duration,
    dead_after: Duration,
    started: Instant,
}

impl Registry {
    /// A registry with the given stale and dead intervals.
    pub fn new(stale_after: Duration, dead_after: Duration) -> Self {
        Self {
            nodes: Mutex::new(HashMap::new()),
            operational: Mutex::new(HashMap::new()),
            stale_after,
            dead_after: dead_after.max(stale_after),
            started: Instant::now(),
        }
    }

    /// While the registry is younger than the stale interval, a live
    /// datanode may simply not have reported to this (restarted) OM yet:
    /// returns the registry's age then, `None` afterwards.
    pub fn warming_up(&self) -> Option<Duration> {
        let age = self.started.elapsed();
        (age < self.stale_after).then_some(age)
    }

    /// The operational state of `id` (in service unless set).
    pub fn operational(&self, id: &str) -> OperationalState {
        self.operational
            .lock()
            .expect("lock")
            .get(id)
            .copied()
            .unwrap_or(OperationalState::InService)
    }

    /// Sets the operational state of `id`.
    pub fn set_operational(&self, id: &str, state: OperationalState) {
        self.operational
            .lock()
            .expect("lock")
            .insert(id.to_string(), state);
    }

    /// The datanode a user means by `name`: its id, address, host, or the
    /// first label of its host (a pod name), among `known`.
    pub fn resolve<'a>(known: &'a [DatanodeDetails], name: &str) -> Option<&'a DatanodeDetails> {
        let host = |d: &DatanodeDetails| d.address.rsplit_once(':').map_or("", |(h, _)| h).to_string();
        let exact = known
            .iter()
            .find(|d| d.id == name || d.address == name || host(d) == name);
        exact.or_else(|| {
            let mut by_label = known
                .iter()
                .filter(|d| host(d).split('.').next() == Some(name));
            match (by_label.next(), by_label.next()) {
                (Some(d), None) => Some(d),
                _ => None,
            }
        })
    }

    /// How long ago this registry (the OM) started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// Silence after which a datanode is dead.
    pub fn dead_after(&self) -> Duration {
        self.dead_after
    }

    /// Records a registration (a heartbeat too).
    pub fn register(&self, dn: DatanodeDetails) {
        self.nodes
            .lock()
            .expect("lock")
            .insert(dn.id.clone(), (dn, Instant::now()));
    }

    /// Records a heartbeat; false if the datanode is unknown.
    pub fn heartbeat(&self, id: &str, capacity: u64, used: u64) -> bool {
        let mut nodes = self.nodes.lock().expect("lock");
        match nodes.get_mut(id) {
            Some((dn, at)) => {
                dn.capacity = capacity;
                dn.used = used;
                *at = Instant::now();
                true
            }
            None => false,
        }
    }

    fn state(&self, at: Instant) -> NodeState {
        let age = at.elapsed();
        if age < self.stale_after {
            NodeState::Healthy
        } else if age < self.dead_after {
            NodeState::Stale
        } else {
            NodeState::Dead
        }
    }

    /// Current details (with state and last heartbeat) of a datanode seen
    /// since this OM started.
    pub fn get(&self, id: &str) -> Option<DatanodeDetails> {
        let nodes = self.nodes.lock().expect("lock");
        nodes.get(id).map(|(dn, at)| self.with_state(dn, *at))
    }

    fn with_state(&self, dn: &DatanodeDetails, at: Instant) -> DatanodeDetails {
        let mut d = dn.clone();
        d.state = self.state(at) as i32;
        d.operational_state = self.operational(&dn.id) as i32;
        let age = at.elapsed().as_millis() as u64;
        d.last_heartbeat_ms = ozone_common::now_ms().saturating_sub(age);
        d
    }

    /// Every datanode seen since this OM started.
    pub fn all(&self) -> Vec<DatanodeDetails> {
        let nodes = self.nodes.lock().expect("lock");
        let mut v: Vec<_> = nodes
            .values()
            .map(|(dn, at)| self.with_state(dn, *at))
            .collect();
        v.sort_by(|a, b| a.node_name.cmp(&b.node_name).then(a.id.cmp(&b.id)));
        v
    }

    /// Healthy datanodes in service, as placement candidates.
    pub fn healthy(&self) -> Vec<Candidate> {
        let nodes = self.nodes.lock().expect("lock");
        nodes
            .values()
            .filter(|(dn, at)| {
                self.state(*at) == NodeState::Healthy
                    && self.operational(&dn.id) == OperationalState::InService
            })
            .map(|(dn, _)| Candidate {
                id: dn.id.clone(),
                node_name: dn.node_name.clone(),
                used: dn.used,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn warms_up_for_one_stale_interval() {
        let r = super::Registry::new(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(1),
        );
        assert!(r.warming_up().is_some());
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(r.warming_up().is_none());
    }
}
