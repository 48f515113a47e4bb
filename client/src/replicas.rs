//! The order in which a reader tries the replicas of a block.

use ozone_proto::{DatanodeDetails, NodeState};

/// Most replicas of one block a reader considers.
pub(crate) const MAX_REPLICAS: usize = 16;

/// Replicas in read order, kept inline (no heap allocation per read).
pub(crate) struct Ordered<'a> {
    items: [Option<&'a DatanodeDetails>; MAX_REPLICAS],
    len: usize,
}

impl<'a> Ordered<'a> {
    /// The replicas, best first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a DatanodeDetails> + '_ {
        self.items[..self.len].iter().map(|d| d.expect("filled"))
    }
}

/// Orders replicas for reading: known-bad last, then the reader's node
/// (or a datanode reachable through its local socket) first, then healthy
/// ones; otherwise the OM's order. At most [`MAX_REPLICAS`] are kept.
pub(crate) fn order_replicas<'a>(
    replicas: &'a [DatanodeDetails],
    node_name: Option<&str>,
    is_bad: impl Fn(&str) -> bool,
    is_local: impl Fn(&str) -> bool,
) -> Ordered<'a> {
    let rank = |r: &DatanodeDetails| {
        (
            is_bad(&r.id),
            !(node_name == Some(r.node_name.as_str()) || is_local(&r.id)),
            r.state != NodeState::Healthy as i32,
        )
    };
    let mut out = Ordered {
        items: [None; MAX_REPLICAS],
        len: 0,
    };
    let mut ranks = [(false, false, false); MAX_REPLICAS];
    for r in replicas.iter().take(MAX_REPLICAS) {
        let k = rank(r);
        // Stable insertion sort.
        let mut at = out.len;
        while at > 0 && ranks[at - 1] > k {
            ranks[at] = ranks[at - 1];
            out.items[at] = out.items[at - 1];
            at -= 1;
        }
        ranks[at] = k;
        out.items[at] = Some(r);
        out.len += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dn(id: &str, node: &str, healthy: bool) -> DatanodeDetails {
        DatanodeDetails {
            id: id.into(),
            node_name: node.into(),
            state: if healthy {
                NodeState::Healthy
            } else {
                NodeState::Stale
            } as i32,
            ..Default::default()
        }
    }

    fn order(
        r: &[DatanodeDetails],
        node: Option<&str>,
        bad: &[&str],
        local: &[&str],
    ) -> Vec<String> {
        order_replicas(r, node, |id| bad.contains(&id), |id| local.contains(&id))
            .iter()
            .map(|d| d.id.clone())
            .collect()
    }

    #[test]
    fn local_first_bad_last_unhealthy_after_healthy_else_the_oms_order() {
        let r = [
            dn("a", "n1", true),
            dn("b", "n2", false),
            dn("c", "n3", true),
        ];
        // Healthy before unhealthy, otherwise the OM's order.
        assert_eq!(order(&r, None, &[], &[]), ["a", "c", "b"]);
        assert_eq!(order(&r[..1], None, &[], &[]), ["a"]);
        // The reader's node first, by name or by a local socket.
        assert_eq!(order(&r, Some("n3"), &[], &[]), ["c", "a", "b"]);
        assert_eq!(order(&r, None, &[], &["b"]), ["b", "a", "c"]);
        // A replica known bad goes last even when local.
        assert_eq!(order(&r, Some("n3"), &["c"], &[]), ["a", "b", "c"]);
        assert_eq!(order(&r, None, &["a", "c"], &[]), ["b", "a", "c"]);
    }

    #[test]
    fn at_most_max_replicas_are_kept() {
        let r: Vec<_> = (0..MAX_REPLICAS + 4)
            .map(|i| dn(&i.to_string(), "n", true))
            .collect();
        let got = order(&r, None, &[], &["17"]);
        assert_eq!(got.len(), MAX_REPLICAS);
        assert_eq!(got[0], "0", "a replica past the limit is not considered");
        assert!(order(&[], Some("n"), &[], &[]).is_empty());
    }
}
