//! Who is at the other end of a connection to one of the sidecar's UNIX
//! sockets (`SO_PEERCRED`), and whether that user may use it. In a pod the
//! sockets sit in a pod-private emptyDir; on a shared host
//! (`ozone local up --sidecars`, several workloads on one node path) any
//! local user could connect, so each connection's uid is checked against
//! `ozone.sidecar.allowed.uids`, and a pass-through relay also against the
//! datanode's own `ozone.domain.socket.allowed.uids` (the datanode sees the
//! sidecar's uid, not the application's). Refusals are counted
//! (`ozone_sidecar_connections_refused`) and logged.

use tokio::net::UnixStream;

/// The process at the other end of a UNIX connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Peer {
    pub uid: u32,
    /// As seen from the sidecar's pid namespace (0 when not visible there).
    pub pid: i32,
}

impl Peer {
    /// The peer of `s`, if the kernel says.
    pub(crate) fn of(s: &UnixStream) -> Option<Peer> {
        s.peer_cred().ok().map(|c| Peer {
            uid: c.uid(),
            pid: c.pid().unwrap_or(0),
        })
    }
}

/// The uids allowed on a socket: `None` lets anyone in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate {
    allowed: Option<Vec<u32>>,
}

impl Gate {
    /// A gate letting `allowed` in; an empty list lets anyone in.
    pub(crate) fn new(allowed: Vec<u32>) -> Self {
        Self {
            allowed: (!allowed.is_empty()).then_some(allowed),
        }
    }

    /// The peer of `s` if it may use the socket, else why not.
    pub(crate) fn admit(&self, s: &UnixStream) -> Result<Option<Peer>, String> {
        let peer = Peer::of(s);
        let Some(allowed) = &self.allowed else {
            return Ok(peer);
        };
        match peer {
            Some(p) if allowed.contains(&p.uid) => Ok(Some(p)),
            Some(p) => Err(format!(
                "uid {} (pid {}) is not allowed on this socket (allowed: {allowed:?})",
                p.uid, p.pid
            )),
            None => Err("the peer's credentials are unknown".into()),
        }
    }
}

/// Who may connect to the sidecar: the application sockets (gRPC and data)
/// and, for descriptor pass-through, the relays.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    /// `ozone.sidecar.allowed.uids`.
    pub sidecar: Gate,
    /// Those of `ozone.sidecar.allowed.uids` that the datanode's
    /// `ozone.domain.socket.allowed.uids` allows too.
    pub relay: Gate,
}

impl Access {
    /// Access for `sidecar` uids, and on the relays for those of them that
    /// `datanode` allows (an empty list allows anyone).
    pub(crate) fn new(sidecar: Vec<u32>, datanode: Vec<u32>) -> Self {
        let sidecar = Gate::new(sidecar);
        let datanode = Gate::new(datanode);
        let relay = match (&sidecar.allowed, &datanode.allowed) {
            (s, None) => s.clone(),
            (None, d) => d.clone(),
            (Some(s), Some(d)) => Some(s.iter().copied().filter(|u| d.contains(u)).collect()),
        };
        Self {
            sidecar,
            relay: Gate { allowed: relay },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn gates_admit_listed_uids_only() {
        let (a, _b) = UnixStream::pair().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let p = Gate::new(Vec::new()).admit(&a).unwrap().unwrap();
        assert_eq!(p.uid, me);
        assert_eq!(p.pid, std::process::id() as i32);
        assert!(Gate::new(vec![me]).admit(&a).is_ok());
        let e = Gate::new(vec![me + 1]).admit(&a).unwrap_err();
        assert!(e.contains(&format!("uid {me}")), "{e}");
    }

    #[test]
    fn relays_need_both_lists() {
        let a = Access::new(vec![1, 2], vec![2, 3]);
        assert_eq!(a.relay.allowed, Some(vec![2]));
        assert_eq!(Access::new(vec![], vec![3]).relay.allowed, Some(vec![3]));
        assert_eq!(Access::new(vec![4], vec![]).relay.allowed, Some(vec![4]));
        assert_eq!(Access::new(vec![], vec![]).relay.allowed, None);
        // Nothing in common: nobody, not anyone.
        assert_eq!(Access::new(vec![1], vec![2]).relay.allowed, Some(vec![]));
    }
}
