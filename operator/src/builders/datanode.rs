//! The datanodes: their StatefulSet (with the init step that prepares host
//! directories, the socket directory for short-circuit reads, one pod per
//! node) and their PodDisruptionBudget.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, HostPathVolumeSource, PodAffinityTerm,
    PodAntiAffinity, PodSpec, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{
    Context, HOST_DATA_MOUNT, claim, data_subdir, env_field, http_probe, meta, non_root,
    runtime_default_seccomp, selector,
};
use super::statefulset::{self, Role};
use super::{BuildError, DN_HTTP_PORT, DN_PORT, OM_PORT, RUN_AS};

/// The datanode StatefulSet.
pub(crate) fn statefulset(ctx: &Context) -> Result<StatefulSet, BuildError> {
    let s = &ctx.c.spec;
    let sc = &s.short_circuit;
    let mut dn_mounts = ctx.base_mounts.clone();
    let mut dn_volumes = ctx.volumes.clone();
    // kubelet creates hostPath directories root-owned 0755: a root init
    // step (CHOWN/FOWNER/DAC_OVERRIDE only, paths passed as arguments, no
    // shell) hands them to the datanode's uid, never world-writable.
    let mut prepare: Vec<String> = ["ozone", "prepare-dirs", "--owner"]
        .map(String::from)
        .to_vec();
    prepare.push(format!("{RUN_AS}:{RUN_AS}"));
    let mut init_mounts = Vec::new();
    if sc.enabled {
        dn_mounts.push(VolumeMount {
            name: "sockets".into(),
            mount_path: sc.socket_host_path.clone(),
            ..Default::default()
        });
        dn_volumes.push(Volume {
            name: "sockets".into(),
            host_path: Some(HostPathVolumeSource {
                path: sc.socket_host_path.clone(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        });
        prepare.extend(["--socket-dir".into(), sc.socket_host_path.clone()]);
        init_mounts.push(VolumeMount {
            name: "sockets".into(),
            mount_path: sc.socket_host_path.clone(),
            ..Default::default()
        });
    }
    let data_claims = if let Some(p) = &s.datanodes.data_host_path {
        dn_volumes.push(Volume {
            name: "data".into(),
            host_path: Some(HostPathVolumeSource {
                path: p.clone(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        });
        let sub = data_subdir(&ctx.ns, &ctx.name);
        for m in dn_mounts.iter_mut().filter(|m| m.name == "data") {
            m.sub_path = Some(sub.clone());
        }
        prepare.extend(["--data-dir".into(), format!("{HOST_DATA_MOUNT}/{sub}")]);
        init_mounts.push(VolumeMount {
            name: "data".into(),
            mount_path: HOST_DATA_MOUNT.into(),
            ..Default::default()
        });
        None
    } else {
        Some(vec![claim(&s.datanodes.storage)])
    };
    let mut init = Vec::new();
    if !init_mounts.is_empty() {
        init.push(Container {
            name: "prepare-dirs".into(),
            image: Some(ctx.image.clone()),
            image_pull_policy: Some(ctx.pull_policy.clone()),
            command: Some(prepare),
            security_context: Some(SecurityContext {
                run_as_user: Some(0),
                run_as_group: Some(0),
                run_as_non_root: Some(false),
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: Some(vec!["CHOWN".into(), "FOWNER".into(), "DAC_OVERRIDE".into()]),
                }),
                seccomp_profile: Some(runtime_default_seccomp()),
                ..Default::default()
            }),
            volume_mounts: Some(init_mounts),
            ..Default::default()
        });
    }
    let mut dn_args: Vec<String> = [
        "datanode",
        "--data-dir",
        "/data/dn",
        "--metadata-dir",
        "/data/meta",
        "--om",
        &format!("{}-om.{}.svc:{OM_PORT}", ctx.name, ctx.ns),
        "--grpc-addr",
        "0.0.0.0:9858",
        "--http-addr",
        "0.0.0.0:9882",
        "--conf",
        "/etc/ozone/ozone.conf",
    ]
    .map(String::from)
    .to_vec();
    if s.security.tls.enabled {
        // Clients check the datanode's name against its certificate: the
        // pod's DNS name (a wildcard of the certificate), not its IP.
        dn_args.extend([
            "--advertise-host".into(),
            format!("$(POD_NAME).{}-datanode-headless.{}.svc", ctx.name, ctx.ns),
        ]);
    }
    let dn_container = Container {
        name: "datanode".into(),
        image: Some(ctx.image.clone()),
        image_pull_policy: Some(ctx.pull_policy.clone()),
        args: Some(dn_args),
        env: Some(vec![
            env_field("NODE_NAME", "spec.nodeName"),
            env_field("POD_NAME", "metadata.name"),
            env_field("POD_IP", "status.podIP"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("grpc".into()),
                container_port: DN_PORT,
                ..Default::default()
            },
            ContainerPort {
                name: Some("http".into()),
                container_port: DN_HTTP_PORT,
                ..Default::default()
            },
        ]),
        readiness_probe: Some(http_probe("/readyz", DN_HTTP_PORT, 5)),
        liveness_probe: Some(http_probe("/healthz", DN_HTTP_PORT, 10)),
        resources: s.datanodes.resources.clone(),
        security_context: Some(non_root()),
        volume_mounts: Some(dn_mounts),
        ..Default::default()
    };
    let mut affinity = s.datanodes.affinity.clone().unwrap_or_default();
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default);
    anti.required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(selector(&ctx.name, "datanode")),
                ..Default::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        });
    statefulset::build(
        ctx,
        Role {
            component: "datanode",
            replicas: s.datanodes.replicas,
            pod: PodSpec {
                // Datanodes never call the API server.
                automount_service_account_token: Some(false),
                init_containers: (!init.is_empty()).then_some(init),
                containers: vec![dn_container],
                volumes: Some(dn_volumes),
                security_context: Some(ctx.pod_security.clone()),
                image_pull_secrets: ctx.pull_secrets.clone(),
                affinity: Some(Affinity { ..affinity }),
                node_selector: (!s.datanodes.node_selector.is_empty())
                    .then(|| s.datanodes.node_selector.clone()),
                tolerations: (!s.datanodes.tolerations.is_empty())
                    .then(|| s.datanodes.tolerations.clone()),
                ..Default::default()
            },
            overrides: (
                s.datanodes.pod_overrides.as_ref(),
                "spec.datanodes.podOverrides",
            ),
            claims: data_claims,
            ordered_rolling: true,
        },
    )
}

/// The datanodes' disruption budget.
pub(crate) fn disruption_budget(ctx: &Context) -> PodDisruptionBudget {
    // One datanode at a time may be taken down voluntarily: with three
    // replicas two copies of everything stay; with one, a drain makes that
    // node's blocks unreadable until the pod is back, which beats blocking
    // node maintenance forever. Pods that are not ready anyway may always be
    // evicted. A single OM gets no budget: it would protect nothing.
    PodDisruptionBudget {
        metadata: meta(ctx.c, format!("{}-datanode", ctx.name), "datanode"),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            selector: Some(LabelSelector {
                match_labels: Some(selector(&ctx.name, "datanode")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
