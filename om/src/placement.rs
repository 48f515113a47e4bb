//! Replica placement: which datanodes hold a new block.
//!
//! The first replica goes to a datanode on the writer's node when one is
//! healthy there (so the writer's later reads are node-local); the others go
//! to datanodes on distinct other nodes, preferring the less used of two
//! random picks.

use std::collections::HashSet;

use rand::Rng;
use rand::seq::SliceRandom;

/// A datanode that may receive a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Datanode id.
    pub id: String,
    /// Node it runs on.
    pub node_name: String,
    /// Bytes used.
    pub used: u64,
}

/// Not enough datanodes for the requested replication.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "cannot place {wanted} replicas: only {available} healthy datanodes on distinct nodes are available ({excluded} excluded)"
)]
pub(crate) struct PlacementError {
    /// Replicas requested.
    pub wanted: usize,
    /// Usable datanodes on distinct nodes.
    pub available: usize,
    /// Datanodes the caller excluded.
    pub excluded: usize,
}

/// Picks `count` datanodes on distinct nodes from `healthy`, skipping
/// `exclude`, the first on `client_node` when possible.
pub(crate) fn choose(
    healthy: &[Candidate],
    count: usize,
    client_node: Option<&str>,
    exclude: &HashSet<String>,
    rng: &mut impl Rng,
) -> Result<Vec<Candidate>, PlacementError> {
    let mut pool: Vec<&Candidate> = healthy
        .iter()
        .filter(|c| !exclude.contains(&c.id))
        .collect();
    pool.shuffle(rng);
    let distinct: HashSet<&str> = pool.iter().map(|c| c.node_name.as_str()).collect();
    if distinct.len() < count {
        return Err(PlacementError {
            wanted: count,
            available: distinct.len(),
            excluded: exclude.len(),
        });
    }
    let mut chosen: Vec<Candidate> = Vec::with_capacity(count);
    if let Some(node) = client_node.filter(|n| !n.is_empty())
        && let Some(c) = pool
            .iter()
            .filter(|c| c.node_name == node)
            .min_by_key(|c| c.used)
    {
        chosen.push((*c).clone());
    }
    while chosen.len() < count {
        let rest: Vec<&&Candidate> = pool
            .iter()
            .filter(|c| !chosen.iter().any(|x| x.node_name == c.node_name))
            .collect();
        // Power of two choices: the less used of two random candidates.
        let a = rest[rng.random_range(0..rest.len())];
        let b = rest[rng.random_range(0..rest.len())];
        chosen.push(if b.used < a.used {
            (*b).clone()
        } else {
            (*a).clone()
        });
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                id: format!("dn{i}"),
                node_name: format!("node{i}"),
                used: 0,
            })
            .collect()
    }

    #[test]
    fn first_replica_on_client_node_others_distinct() {
        let mut rng = rand::rng();
        let all = nodes(5);
        for _ in 0..100 {
            let c = choose(&all, 3, Some("node3"), &HashSet::new(), &mut rng).unwrap();
            assert_eq!(c[0].id, "dn3");
            let names: HashSet<_> = c.iter().map(|c| &c.node_name).collect();
            assert_eq!(names.len(), 3);
        }
    }

    #[test]
    fn excludes_and_fails_when_short() {
        let mut rng = rand::rng();
        let all = nodes(4);
        let ex: HashSet<String> = ["dn0".to_string()].into();
        for _ in 0..50 {
            let c = choose(&all, 3, Some("node0"), &ex, &mut rng).unwrap();
            assert!(c.iter().all(|c| c.id != "dn0"));
        }
        let ex: HashSet<String> = ["dn0".to_string(), "dn1".to_string()].into();
        let e = choose(&all, 3, None, &ex, &mut rng).unwrap_err();
        assert_eq!(e.available, 2);
        // Two datanodes on one node count once.
        let mut same = nodes(3);
        same[2].node_name = "node1".into();
        assert!(choose(&same, 3, None, &HashSet::new(), &mut rng).is_err());
        assert_eq!(
            choose(&same, 2, None, &HashSet::new(), &mut rng)
                .unwrap()
                .len(),
            2
        );
    }
}
