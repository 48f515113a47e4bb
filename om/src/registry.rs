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
pub(crate) struct Registry {
    nodes: Mutex<HashMap<String, (DatanodeDetails, Instant)>>,
    operational: Mutex<HashMap<String, OperationalState>>,
    stale_after: Duration,
    dead_after: Duration,
    started: Instant,
}

impl Registry {
    /// A registry with the given stale and dead intervals.
    pub(crate) fn new(stale_after: Duration, dead_after: Duration) -> Self {
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
    pub(crate) fn warming_up(&self) -> Option<Duration> {
        let age = self.started.elapsed();
        (age < self.stale_after).then_some(age)
    }

    /// The operational state of `id` (in service unless set).
    pub(crate) fn operational(&self, id: &str) -> OperationalState {
        self.operational
            .lock()
            .expect("lock")
            .get(id)
            .copied()
            .unwrap_or(OperationalState::InService)
    }

    /// Sets the operational state of `id`.
    pub(crate) fn set_operational(&self, id: &str, state: OperationalState) {
        self.operational
            .lock()
            .expect("lock")
            .insert(id.to_string(), state);
    }

    /// The datanode a user means by `name`: its id or address, else the
    /// one datanode with that host name (a pod name), address host, or
    /// first label of the address host, among `known`.
    pub(crate) fn resolve<'a>(
        known: &'a [DatanodeDetails],
        name: &str,
    ) -> Option<&'a DatanodeDetails> {
        fn host(d: &DatanodeDetails) -> &str {
            d.address.rsplit_once(':').map_or("", |(h, _)| h)
        }
        let only = |f: &dyn Fn(&DatanodeDetails) -> bool| {
            let mut it = known.iter().filter(|d| f(d));
            match (it.next(), it.next()) {
                (Some(d), None) => Some(d),
                _ => None,
            }
        };
        known
            .iter()
            .find(|d| d.id == name || d.address == name)
            .or_else(|| only(&|d| d.node_name == name))
            .or_else(|| only(&|d| d.host_name == name))
            .or_else(|| only(&|d| host(d) == name))
            .or_else(|| only(&|d| host(d).split('.').next() == Some(name)))
    }

    /// How long ago this registry (the OM) started.
    pub(crate) fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// Silence after which a datanode is dead.
    pub(crate) fn dead_after(&self) -> Duration {
        self.dead_after
    }

    /// Records a registration (a heartbeat too).
    pub(crate) fn register(&self, dn: DatanodeDetails) {
        self.nodes
            .lock()
            .expect("lock")
            .insert(dn.id.clone(), (dn, Instant::now()));
    }

    /// Records a heartbeat; false if the datanode is unknown.
    pub(crate) fn heartbeat(&self, id: &str, capacity: u64, used: u64) -> bool {
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
    pub(crate) fn get(&self, id: &str) -> Option<DatanodeDetails> {
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
    pub(crate) fn all(&self) -> Vec<DatanodeDetails> {
        let nodes = self.nodes.lock().expect("lock");
        let mut v: Vec<_> = nodes
            .values()
            .map(|(dn, at)| self.with_state(dn, *at))
            .collect();
        v.sort_by(|a, b| a.node_name.cmp(&b.node_name).then(a.id.cmp(&b.id)));
        v
    }

    /// Healthy datanodes in service, as placement candidates.
    pub(crate) fn healthy(&self) -> Vec<Candidate> {
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
    use ozone_proto::DatanodeDetails;

    #[test]
    fn a_datanode_is_found_by_id_address_or_pod_name() {
        let dn = |id: &str, addr: &str, host: &str| DatanodeDetails {
            id: id.into(),
            address: addr.into(),
            host_name: host.into(),
            ..Default::default()
        };
        let known = [
            dn("a1", "10.0.0.1:9858", "oz-datanode-0"),
            dn("b2", "10.0.0.2:9858", "oz-datanode-1"),
            dn("c3", "127.0.0.1:5000", "laptop"),
            dn("d4", "127.0.0.1:5001", "laptop"),
        ];
        let find = |n: &str| super::Registry::resolve(&known, n).map(|d| d.id.as_str());
        assert_eq!(find("b2"), Some("b2"));
        assert_eq!(find("10.0.0.1:9858"), Some("a1"));
        assert_eq!(find("oz-datanode-1"), Some("b2"));
        assert_eq!(find("10.0.0.2"), Some("b2"));
        assert_eq!(find("laptop"), None, "two datanodes share that host");
        assert_eq!(find("127.0.0.1:5001"), Some("d4"));
        assert_eq!(find("nope"), None);
    }

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
