//! Scale-down without data loss: before the datanode StatefulSet loses its
//! highest ordinals, the OM decommissions those pods' datanodes (their
//! replicas are copied elsewhere while they keep serving reads), and only
//! when each is DECOMMISSIONED (or never registered) is the StatefulSet
//! lowered. A later scale-up recommissions pods decommissioned this way.
//! The OM is reached at its Service; [`DatanodeAdmin`] lets tests stand in
//! for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ozone_common::credentials::Credentials;
use ozone_common::tls::Tls;

use futures::future::BoxFuture;
use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::{DatanodeStatusRequest, OperationalState, SetOperationalStateRequest};

/// What the OM says of a datanode pod after a decommission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decommission {
    /// No datanode of that pod ever registered: nothing depends on it.
    Unknown,
    /// Replicas are being copied off it; this many still lack a healthy
    /// copy elsewhere.
    InProgress(u64),
    /// No key depends on it any more.
    Done,
}

/// The OM's datanode administration, as the operator needs it.
pub trait DatanodeAdmin: Send + Sync {
    /// Asks the OM at `om` to decommission the datanode of `pod` (again: it
    /// is idempotent) and returns how far it is.
    fn decommission<'a>(
        &'a self,
        om: &'a str,
        pod: &'a str,
    ) -> BoxFuture<'a, Result<Decommission, String>>;
    /// Returns the datanode of `pod` to service.
    fn recommission<'a>(&'a self, om: &'a str, pod: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

/// The CA bundle each TLS cluster's OM is checked against, by OM address
/// (filled by the controller from the cluster's TLS Secret).
pub type OmTls = Arc<Mutex<HashMap<String, Tls>>>;

/// The OM over gRPC (over TLS for the addresses in `tls`), with the
/// operator's token when it has one.
#[derive(Debug, Default)]
pub struct OmAdmin {
    /// TLS settings by OM address.
    pub tls: OmTls,
    /// The operator's credentials: its projected ServiceAccount token for
    /// the audience `ozone` (re-read as the kubelet rotates it), an
    /// administrator of clusters with authentication on.
    pub credentials: Credentials,
}

type Om = OzoneManagerClient<ozone_common::credentials::AuthChannel>;

impl OmAdmin {
    async fn client(&self, om: &str) -> Result<Om, String> {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{om}"))
            .map_err(|e| format!("OM address {om}: {e}"))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10));
        let tls = self
            .tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(om)
            .cloned();
        // The bound covers the name lookup too: a reconcile never hangs on it.
        let connect = ozone_common::tls::channel(endpoint, tls.as_ref());
        let ch = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .map_err(|_| format!("OM at {om} unreachable: no connection within 5 s"))?
            .map_err(|e| format!("OM at {om} unreachable: {e}"))?;
        Ok(OzoneManagerClient::new(self.credentials.clone().wrap(ch)))
    }

    /// Sets the state; `None` when the OM knows no such datanode.
    async fn set(
        &self,
        om: &mut Om,
        pod: &str,
        state: OperationalState,
    ) -> Result<Option<i32>, String> {
        let r = om
            .set_operational_state(SetOperationalStateRequest {
                datanode: pod.to_string(),
                state: state as i32,
                force: false,
            })
            .await;
        match r {
            Ok(r) => Ok(r.into_inner().datanode.map(|d| d.operational_state)),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(format!("the OM: {}", s.message())),
        }
    }
}

impl DatanodeAdmin for OmAdmin {
    fn decommission<'a>(
        &'a self,
        om: &'a str,
        pod: &'a str,
    ) -> BoxFuture<'a, Result<Decommission, String>> {
        Box::pin(async move {
            let mut c = self.client(om).await?;
            Ok(
                match self
                    .set(&mut c, pod, OperationalState::Decommissioning)
                    .await?
                {
                    None => Decommission::Unknown,
                    Some(s) if s == OperationalState::Decommissioned as i32 => Decommission::Done,
                    Some(_) => {
                        let st = c
                            .datanode_status(DatanodeStatusRequest {
                                datanode: pod.to_string(),
                            })
                            .await
                            .map_err(|s| format!("the OM: {}", s.message()))?
                            .into_inner();
                        Decommission::InProgress(st.needed_elsewhere)
                    }
                },
            )
        })
    }

    fn recommission<'a>(&'a self, om: &'a str, pod: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let mut c = self.client(om).await?;
            self.set(&mut c, pod, OperationalState::InService)
                .await
                .map(drop)
        })
    }
}

/// Where the scale-down of a cluster stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScaleDown {
    /// Replicas the datanode StatefulSet may have now.
    pub replicas: i32,
    /// Why it keeps more than the spec asks (pods still decommissioning).
    pub waiting: Option<String>,
    /// Pods whose datanodes are decommissioned (kept in the status).
    pub decommissioned: Vec<String>,
}

/// The name of datanode pod `i` of cluster `name`.
pub fn pod_name(name: &str, i: i32) -> String {
    format!("{name}-datanode-{i}")
}

/// Decides the datanode replicas for a spec of `want` when the StatefulSet
/// has `current`: the pods above `want` go only once decommissioned.
/// `decommissioned` are the pods decommissioned before (from the status):
/// those below `want` again are recommissioned.
pub async fn scale_down(
    admin: &dyn DatanodeAdmin,
    om: &str,
    name: &str,
    current: Option<i32>,
    want: i32,
    decommissioned: &[String],
) -> ScaleDown {
    let mut out = ScaleDown {
        replicas: want,
        waiting: None,
        decommissioned: Vec::new(),
    };
    // Scaled up again: those pods serve again.
    for pod in decommissioned {
        let ordinal = pod
            .rsplit_once('-')
            .and_then(|(_, i)| i.parse::<i32>().ok())
            .unwrap_or(i32::MAX);
        if ordinal < want {
            if let Err(e) = admin.recommission(om, pod).await {
                tracing::warn!(%pod, "recommission failed (retried): {e}");
                out.decommissioned.push(pod.clone());
            } else {
                tracing::info!(%pod, "datanode recommissioned");
            }
        } else {
            out.decommissioned.push(pod.clone());
        }
    }
    let Some(current) = current.filter(|&c| c > want) else {
        return out;
    };
    let mut pending = Vec::new();
    for i in want..current {
        let pod = pod_name(name, i);
        match admin.decommission(om, &pod).await {
            Ok(Decommission::Done | Decommission::Unknown) => {
                if !out.decommissioned.contains(&pod) {
                    out.decommissioned.push(pod);
                }
            }
            Ok(Decommission::InProgress(needed)) => {
                if !out.decommissioned.contains(&pod) {
                    out.decommissioned.push(pod.clone());
                }
                pending.push(format!("{pod} ({needed} replicas still to copy)"));
            }
            Err(e) => pending.push(format!("{pod} ({e})")),
        }
    }
    if !pending.is_empty() {
        out.replicas = current;
        out.waiting = Some(format!(
            "decommissioning before the scale-down to {want}: {}",
            pending.join(", ")
        ));
    }
    out
}
