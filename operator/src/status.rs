//! The status of a cluster, computed as a pure function of the resource and
//! the observed StatefulSets and datanode pods.
//!
//! Conditions follow the Kubernetes API conventions: `Available` (the
//! cluster can serve reads and writes at its replication), `Progressing` (a
//! change is being rolled out), `Degraded` (something is wrong that no change
//! in progress explains: replicas not ready, an invalid spec).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{DatanodePod, OzoneCluster, OzoneClusterStatus, Replication, RoleStatus};

/// Condition types.
pub const AVAILABLE: &str = "Available";
/// A change is being rolled out.
pub const PROGRESSING: &str = "Progressing";
/// Something is wrong that no change in progress explains.
pub const DEGRADED: &str = "Degraded";

/// What the controller observed, beside the resource itself.
#[derive(Debug, Default, Clone)]
pub struct Observed<'a> {
    /// The OM StatefulSet, if it exists.
    pub om: Option<&'a StatefulSet>,
    /// The datanode StatefulSet, if it exists.
    pub datanodes: Option<&'a StatefulSet>,
    /// The datanode pods.
    pub pods: &'a [Pod],
    /// Why the spec cannot be applied, if it cannot.
    pub invalid: Option<String>,
    /// Objects the API server refused, with its message.
    pub apply_failed: Option<String>,
    /// A datanode config roll held back because datanodes are not ready.
    pub roll_held: bool,
    /// A scale-down waiting for datanodes to be decommissioned, and why.
    pub decommissioning: Option<String>,
    /// Datanode pods decommissioned for a scale-down.
    pub decommissioned_pods: Vec<String>,
    /// Whether the cluster's NetworkPolicies exist now (`None`: as before).
    pub network_policies: Option<bool>,
}

/// Readiness and rollout state of one StatefulSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Role {
    ready: i32,
    desired: i32,
    exists: bool,
    /// Pods are being replaced with a new template.
    rolling: bool,
    /// Pods are being added or removed.
    scaling: bool,
    /// Pods on the newest template.
    updated: i32,
}

fn role(sts: Option<&StatefulSet>, desired: i32) -> Role {
    let Some(sts) = sts else {
        return Role {
            ready: 0,
            desired,
            exists: false,
            rolling: false,
            scaling: false,
            updated: 0,
        };
    };
    let st = sts.status.clone().unwrap_or_default();
    let generation = sts.metadata.generation.unwrap_or(0);
    let spec_replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let rolling = st.observed_generation.unwrap_or(0) < generation
        || st.update_revision.is_some() && st.current_revision != st.update_revision
        || st.updated_replicas.unwrap_or(0) < st.replicas;
    Role {
        ready: st.ready_replicas.unwrap_or(0),
        desired,
        exists: true,
        rolling,
        scaling: spec_replicas != desired || st.replicas != desired,
        updated: st.updated_replicas.unwrap_or(0),
    }
}

fn role_status(r: Role) -> RoleStatus {
    RoleStatus {
        ready: r.ready,
        desired: r.desired,
        summary: format!("{}/{}", r.ready, r.desired),
    }
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Builds the status. Conditions whose status did not change keep their
/// `lastTransitionTime` from `c.status`.
pub fn compute(c: &OzoneCluster, obs: &Observed<'_>, now: Time) -> OzoneClusterStatus {
    let s = &c.spec;
    let stopped = s.cluster_operation.stopped;
    let paused = s.cluster_operation.reconciliation_paused;
    let (om_want, dn_want) = if stopped {
        (0, 0)
    } else {
        (s.om.replicas, s.datanodes.replicas)
    };
    let om = role(obs.om, om_want);
    let dn = role(obs.datanodes, dn_want);
    let needed = match s.replication {
        Replication::ONE => 1,
        Replication::THREE => 3,
    };
    let generation = c.metadata.generation;

    let available = if stopped {
        cond(
            AVAILABLE,
            false,
            "Stopped",
            "spec.clusterOperation.stopped is true".into(),
        )
    } else if om.ready >= 1 && dn.ready >= needed {
        cond(
            AVAILABLE,
            true,
            "MinimumReplicasAvailable",
            format!("OM ready, {}/{} datanodes ready", dn.ready, dn.desired),
        )
    } else {
        cond(
            AVAILABLE,
            false,
            "MinimumReplicasUnavailable",
            format!(
                "{}/{} OM and {}/{} datanodes ready; replication {:?} needs the OM and {needed} datanodes",
                om.ready, om.desired, dn.ready, dn.desired, s.replication
            ),
        )
    };

    // After a spec change the cluster is progressing until every replica is
    // ready (or the deadline passes); a replica lost after that is Degraded
    // at once. A held roll or a stalled one has not settled either.
    let settling = c.status.as_ref().is_none_or(|o| {
        o.observed_generation != generation
            || o.om.desired != om.desired
            || o.datanodes.desired != dn.desired
            || o.conditions.iter().any(|k| {
                k.type_ == PROGRESSING
                    && (k.status == "True"
                        || k.reason == "ProgressDeadlineExceeded"
                        || k.reason == "RollHeld")
            })
    });
    let waiting = settling && !stopped && (om.ready < om.desired || dn.ready < dn.desired);
    let progressing = if let Some(why) = &obs.invalid {
        cond(PROGRESSING, false, "InvalidSpec", why.clone())
    } else if paused {
        cond(
            PROGRESSING,
            false,
            "ReconciliationPaused",
            "spec.clusterOperation.reconciliationPaused is true: no changes are applied".into(),
        )
    } else if obs.roll_held {
        cond(
            PROGRESSING,
            false,
            "RollHeld",
            format!(
                "a datanode roll waits until every datanode is ready ({}/{} ready)",
                dn.ready, dn.desired
            ),
        )
    } else if let Some(why) = &obs.decommissioning {
        cond(PROGRESSING, true, "Decommissioning", why.clone())
    } else if !om.exists || !dn.exists {
        cond(
            PROGRESSING,
            true,
            "Creating",
            "creating the StatefulSets".into(),
        )
    } else if om.rolling || dn.rolling {
        cond(
            PROGRESSING,
            true,
            "RollingUpdate",
            "rolling pods to the current spec, datanodes one at a time".into(),
        )
    } else if om.scaling || dn.scaling {
        cond(
            PROGRESSING,
            true,
            if stopped { "Stopping" } else { "Scaling" },
            format!(
                "scaling to {} OM and {} datanodes ({} and {} ready)",
                om.desired, dn.desired, om.ready, dn.ready
            ),
        )
    } else if waiting {
        cond(
            PROGRESSING,
            true,
            "WaitingForReady",
            format!(
                "waiting for replicas to become ready ({}/{} OM, {}/{} datanodes)",
                om.ready, om.desired, dn.ready, dn.desired
            ),
        )
    } else {
        cond(
            PROGRESSING,
            false,
            "Reconciled",
            "the cluster matches its spec".into(),
        )
    };

    // Progress is any change in readiness or rollout; none for longer than
    // the deadline turns Progressing into Degraded.
    let mut marker = format!(
        "om {}/{}, datanodes {}/{} ready {} updated",
        om.ready, om.desired, dn.ready, dn.desired, dn.updated
    );
    if let Some(why) = &obs.decommissioning {
        // Each replica copied off a leaving datanode is progress.
        marker = format!("{marker}; {why}");
    }
    let last_progress = c
        .status
        .as_ref()
        .filter(|o| o.progress.as_deref() == Some(marker.as_str()))
        .and_then(|o| o.last_progress_time.clone())
        .unwrap_or_else(|| now.clone());
    let deadline = i64::from(
        s.progress_deadline_seconds
            .unwrap_or(crate::crd::DEFAULT_PROGRESS_DEADLINE),
    );
    let stalled =
        progressing.status == "True" && now.0.as_second() - last_progress.0.as_second() > deadline;
    let progressing = if stalled {
        cond(
            PROGRESSING,
            false,
            "ProgressDeadlineExceeded",
            format!(
                "no progress for {deadline} s ({marker}): {}",
                progressing.message
            ),
        )
    } else {
        progressing
    };

    let degraded = if let Some(why) = &obs.invalid {
        cond(DEGRADED, true, "InvalidSpec", why.clone())
    } else if let Some(why) = &obs.apply_failed {
        cond(DEGRADED, true, "ApplyFailed", why.clone())
    } else if stalled {
        cond(
            DEGRADED,
            true,
            "ProgressDeadlineExceeded",
            progressing.message.clone(),
        )
    } else if !stopped && !waiting && degraded_roles(om, dn) {
        cond(
            DEGRADED,
            true,
            "ReplicasNotReady",
            format!(
                "{}/{} OM and {}/{} datanodes ready",
                om.ready, om.desired, dn.ready, dn.desired
            ),
        )
    } else {
        cond(
            DEGRADED,
            false,
            "AsExpected",
            "every replica is ready or on its way".into(),
        )
    };

    let mut datanode_pods: Vec<DatanodePod> = obs
        .pods
        .iter()
        .map(|p| DatanodePod {
            pod: p.metadata.name.clone().unwrap_or_default(),
            node: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            ready: pod_ready(p),
        })
        .collect();
    datanode_pods.sort_by(|a, b| a.pod.cmp(&b.pod));

    let old = c
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let conditions = [available, progressing, degraded]
        .into_iter()
        .map(|mut k| {
            k.observed_generation = generation;
            k.last_transition_time = old
                .iter()
                .find(|o| o.type_ == k.type_ && o.status == k.status)
                .map(|o| o.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            k
        })
        .collect();
    OzoneClusterStatus {
        observed_generation: generation,
        conditions,
        om: role_status(om),
        datanodes: role_status(dn),
        datanode_pods,
        progress: Some(marker),
        last_progress_time: Some(last_progress),
        decommissioned_pods: obs.decommissioned_pods.clone(),
        network_policies: obs
            .network_policies
            .unwrap_or_else(|| c.status.as_ref().is_some_and(|s| s.network_policies)),
    }
}

/// Replicas are not ready with no rollout, scaling or creation to explain it.
fn degraded_roles(om: Role, dn: Role) -> bool {
    let short = |r: Role| r.exists && !r.rolling && !r.scaling && r.ready < r.desired;
    short(om) || short(dn)
}

fn cond(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: None,
        last_transition_time: Time(Default::default()),
    }
}

/// True when the datanodes are not all ready: a config roll must wait.
pub fn datanodes_unready(sts: Option<&StatefulSet>) -> bool {
    sts.and_then(|s| s.status.as_ref()).is_some_and(|st| {
        st.ready_replicas.unwrap_or(0) < st.replicas
            || st.available_replicas.unwrap_or(st.replicas) < st.replicas
    })
}

/// How long until the progress deadline of a progressing cluster passes
/// (a second after it), so that the controller looks again exactly then
/// instead of at its next periodic wake-up; `None` without a recorded
/// last progress.
pub fn until_deadline(
    c: &OzoneCluster,
    st: &OzoneClusterStatus,
    now: &Time,
) -> Option<std::time::Duration> {
    let last = st.last_progress_time.as_ref()?;
    let deadline = i64::from(
        c.spec
            .progress_deadline_seconds
            .unwrap_or(crate::crd::DEFAULT_PROGRESS_DEADLINE),
    );
    let left = last.0.as_second() + deadline + 1 - now.0.as_second();
    Some(std::time::Duration::from_secs(left.max(1) as u64))
}

#[cfg(test)]
mod deadline_tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn the_next_look_is_just_after_the_deadline() {
        let mut c = OzoneCluster::new("c", Default::default());
        c.spec.progress_deadline_seconds = Some(15);
        let st = OzoneClusterStatus {
            last_progress_time: Some(at(1000)),
            ..Default::default()
        };
        let secs = |now| until_deadline(&c, &st, &at(now)).unwrap().as_secs();
        assert_eq!(secs(1000), 16);
        assert_eq!(secs(1010), 6);
        assert_eq!(secs(1020), 1, "past it: look again at once");
        assert!(until_deadline(&c, &OzoneClusterStatus::default(), &at(1000)).is_none());
    }

    fn sts(spec_replicas: i32, replicas: i32, ready: i32) -> StatefulSet {
        use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
        StatefulSet {
            metadata: Default::default(),
            spec: Some(StatefulSetSpec {
                replicas: Some(spec_replicas),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                replicas,
                ready_replicas: Some(ready),
                updated_replicas: Some(replicas),
                ..Default::default()
            }),
        }
    }

    fn reason<'a>(st: &'a OzoneClusterStatus, t: &str) -> (&'a str, &'a str) {
        let k = st.conditions.iter().find(|k| k.type_ == t).unwrap();
        (k.status.as_str(), k.reason.as_str())
    }

    #[test]
    fn a_held_roll_has_not_settled_so_the_deadline_still_applies() {
        let mut c = OzoneCluster::new("c", Default::default());
        c.metadata.generation = Some(7);
        c.spec.datanodes.replicas = 4;
        c.spec.progress_deadline_seconds = Some(15);
        let om = sts(1, 1, 1);
        let dn = sts(4, 4, 3);
        let pods = [];
        let held = Observed {
            om: Some(&om),
            datanodes: Some(&dn),
            pods: &pods,
            roll_held: true,
            ..Default::default()
        };
        c.status = Some(compute(&c, &held, at(1000)));
        assert_eq!(
            reason(c.status.as_ref().unwrap(), PROGRESSING),
            ("False", "RollHeld")
        );
        // The hold is gone but the fourth datanode is still not ready: the
        // cluster waits for it (not "Reconciled" with a bare Degraded).
        let free = Observed {
            roll_held: false,
            ..held
        };
        let st = compute(&c, &free, at(1001));
        assert_eq!(reason(&st, PROGRESSING), ("True", "WaitingForReady"));
        assert_eq!(reason(&st, DEGRADED), ("False", "AsExpected"));
        c.status = Some(st);
        // With no progress past the deadline it is stalled.
        let st = compute(&c, &free, at(1020));
        assert_eq!(
            reason(&st, PROGRESSING),
            ("False", "ProgressDeadlineExceeded")
        );
        assert_eq!(reason(&st, DEGRADED), ("True", "ProgressDeadlineExceeded"));
    }
}
