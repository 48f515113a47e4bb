//! The objects of a cluster, built as a pure function of the resource.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, HTTPGetAction, HostPathVolumeSource, LocalObjectReference, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, Secret, SecurityContext,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use sha2::{Digest, Sha256};

use crate::crd::{ChecksumKind, OzoneCluster, Replication, VolumeDeletionPolicy};
use crate::overrides;

/// The uid the OM and datanodes run as.
pub const RUN_AS: i64 = 1000;
/// OM gRPC port.
pub const OM_PORT: i32 = 9862;
/// OM HTTP port.
pub const OM_HTTP_PORT: i32 = 9874;
/// Datanode gRPC port.
pub const DN_PORT: i32 = 9858;
/// Datanode HTTP port.
pub const DN_HTTP_PORT: i32 = 9882;
/// Pod-template annotation carrying the config hash (a change rolls pods).
pub const CONFIG_HASH: &str = "ozone-rs.io/config-hash";
/// Key of the block-token secret in its Secret.
pub const TOKEN_KEY: &str = "secret";

/// Name of the block-token Secret of a cluster.
pub fn token_secret_name(cluster: &str) -> String {
    format!("{cluster}-block-token")
}

/// The block-token Secret holding `key`. The controller creates it once
/// with a random key (64 hex digits) and never rewrites it (tokens stay valid across
/// reconciles and restarts).
pub fn token_secret(c: &OzoneCluster, key: &[u8]) -> Result<Secret, BuildError> {
    let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
    Ok(Secret {
        metadata: meta(c, token_secret_name(&name), "block-token"),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            TOKEN_KEY.to_string(),
            k8s_openapi::ByteString(key.to_vec()),
        )])),
        ..Default::default()
    })
}

/// A resource that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("metadata.{0} is required")]
    Missing(&'static str),
    #[error("invalid spec: {0}")]
    Invalid(String),
}

/// Every object the operator applies for a cluster, in apply order
/// (ConfigMap before StatefulSets).
#[derive(Debug, Clone)]
pub struct Objects {
    pub config: ConfigMap,
    pub om_headless: Service,
    pub om_service: Service,
    pub datanode_headless: Service,
    pub om: StatefulSet,
    pub datanodes: StatefulSet,
    pub datanode_pdb: PodDisruptionBudget,
}

impl Objects {
    /// The objects as YAML documents, in apply order.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let docs = [
            serde_yaml::to_string(&self.config)?,
            serde_yaml::to_string(&self.om_headless)?,
            serde_yaml::to_string(&self.om_service)?,
            serde_yaml::to_string(&self.datanode_headless)?,
            serde_yaml::to_string(&self.om)?,
            serde_yaml::to_string(&self.datanodes)?,
            serde_yaml::to_string(&self.datanode_pdb)?,
        ];
        Ok(docs.iter().map(|d| format!("---\n{d}")).collect())
    }
}

/// Checks what the schema cannot, and mirrors the CRD's CEL rules (so
/// `render` and a controller facing an older CRD refuse the same).
pub fn validate(c: &OzoneCluster) -> Result<(), BuildError> {
    let s = &c.spec;
    if let Some(name) = &c.metadata.name {
        check_name(name)?;
    }
    if s.replication == Replication::THREE && s.datanodes.replicas < 3 {
        return Err(BuildError::Invalid(format!(
            "replication THREE needs at least 3 datanodes, spec.datanodes.replicas is {}",
            s.datanodes.replicas
        )));
    }
    if s.om.replicas != 1 {
        return Err(BuildError::Invalid("spec.om.replicas must be 1".into()));
    }
    if s.datanodes.replicas < 1 {
        return Err(BuildError::Invalid(
            "spec.datanodes.replicas must be at least 1".into(),
        ));
    }
    if !(512..=16 << 20).contains(&s.checksum.bytes_per_checksum) {
        return Err(BuildError::Invalid(
            "spec.checksum.bytesPerChecksum must be 512 to 16777216".into(),
        ));
    }
    if s.short_circuit.enabled {
        check_host_path(
            "spec.shortCircuit.socketHostPath",
            &s.short_circuit.socket_host_path,
        )?;
    }
    if let Some(p) = &s.datanodes.data_host_path {
        check_host_path("spec.datanodes.dataHostPath", p)?;
        if s.short_circuit.enabled && p == &s.short_circuit.socket_host_path {
            return Err(BuildError::Invalid(
                "spec.datanodes.dataHostPath and spec.shortCircuit.socketHostPath must differ"
                    .into(),
            ));
        }
    }
    if let Some(d) = s.progress_deadline_seconds
        && !(10..=86400).contains(&d)
    {
        return Err(BuildError::Invalid(
            "spec.progressDeadlineSeconds must be 10 to 86400".into(),
        ));
    }
    Ok(())
}

/// A cluster name from which valid child names follow (see
/// [`crate::MAX_NAME_LEN`]).
pub fn check_name(name: &str) -> Result<(), BuildError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && name.len() <= crate::MAX_NAME_LEN
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(())
    } else {
        Err(BuildError::Invalid(format!(
            "metadata.name {name:?} must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of at most {} characters: Service, pod and label names are derived from it",
            crate::MAX_NAME_LEN
        )))
    }
}

/// A host directory the operator may mount and prepare.
pub fn check_host_path(field: &str, p: &str) -> Result<(), BuildError> {
    let bad = |why: &str| Err(BuildError::Invalid(format!("{field} {p:?}: {why}")));
    if !p.starts_with('/') {
        return bad("must be absolute");
    }
    if !p
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"._/-".contains(&c))
    {
        return bad("may hold only letters, digits, '.', '_', '-' and '/'");
    }
    if p.len() > 1 && p.ends_with('/')
        || p.contains("//")
        || p.split('/').any(|c| c == ".." || c == ".")
    {
        return bad("must be a normalized path (no '..', '.', '//' or trailing '/')");
    }
    const UNDER: &[&str] = &[
        "/etc/",
        "/proc/",
        "/sys/",
        "/dev/",
        "/boot/",
        "/usr/",
        "/bin/",
        "/sbin/",
        "/lib/",
        "/var/lib/kubelet/",
        "/data/",
        "/run/",
    ];
    if crate::crd::SYSTEM_PATHS.contains(&p) || UNDER.iter().any(|u| p.starts_with(u)) {
        return bad("is a system directory (or /data, which the container uses)");
    }
    Ok(())
}

fn labels(name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "ozone".to_string()),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "ozone-operator".to_string(),
        ),
    ])
}

fn selector(name: &str, component: &str) -> BTreeMap<String, String> {
    let mut l = labels(name, component);
    l.remove("app.kubernetes.io/managed-by");
    l
}

/// The cluster config file (`ozone.conf`) handed to every process.
pub fn config_text(c: &OzoneCluster, name: &str, ns: &str) -> String {
    use ozone_common::config as keys;
    let s = &c.spec;
    let line = |k: &str, v: &dyn std::fmt::Display| format!("{k} = {v}");
    let mut lines = vec![
        line(
            keys::OM_ADDRESS.name,
            &format!("{name}-om.{ns}.svc:{OM_PORT}"),
        ),
        line(
            keys::REPLICATION.name,
            &match s.replication {
                Replication::ONE => "ONE",
                Replication::THREE => "THREE",
            },
        ),
        line(
            keys::CHECKSUM_TYPE.name,
            &match s.checksum.kind {
                ChecksumKind::CRC32C => "CRC32C",
                ChecksumKind::CRC32 => "CRC32",
            },
        ),
        line(
            keys::BYTES_PER_CHECKSUM.name,
            &s.checksum.bytes_per_checksum,
        ),
        line(
            keys::VERIFY_CHECKSUM.name,
            &s.client_defaults.verify_checksum,
        ),
        line(keys::BLOCK_TOKEN_ENABLED.name, &s.security.block_tokens),
    ];
    if s.security.block_tokens {
        lines.push(line(
            keys::BLOCK_TOKEN_SECRET_FILE.name,
            &"/etc/ozone/token/secret",
        ));
    }
    if s.short_circuit.enabled {
        lines.push(line(
            keys::DOMAIN_SOCKET_PATH.name,
            &s.short_circuit.socket_host_path,
        ));
    }
    lines.join("\n") + "\n"
}

fn meta(c: &OzoneCluster, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: c.metadata.namespace.clone(),
        labels: Some(labels(
            c.metadata.name.as_deref().unwrap_or_default(),
            component,
        )),
        owner_references: c.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

fn http_probe(path: &str, port: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn claim(storage: &crate::crd::StorageSpec) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(storage.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}

fn non_root() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

/// Where the datanode init step sees the data host directory.
pub const HOST_DATA_MOUNT: &str = "/host-data";

/// The subdirectory of `dataHostPath` that holds one cluster's data.
pub fn data_subdir(ns: &str, name: &str) -> String {
    format!("{ns}-{name}")
}

fn headless(c: &OzoneCluster, name: String, component: &str, port: i32) -> Service {
    let inst = c.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: meta(c, name, component),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&inst, component)),
            ports: Some(vec![ServicePort {
                name: Some("grpc".into()),
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Builds every object of the cluster.
pub fn build(c: &OzoneCluster) -> Result<Objects, BuildError> {
    validate(c)?;
    let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
    let ns = c
        .metadata
        .namespace
        .clone()
        .ok_or(BuildError::Missing("namespace"))?;
    let s = &c.spec;
    let conf = config_text(c, &name, &ns);
    let hash = format!("{:x}", Sha256::digest(conf.as_bytes()));
    let image = format!("{}:{}", s.image.repository, s.image.tag);
    let pull_policy = format!("{:?}", s.image.pull_policy);
    let pull_secrets: Option<Vec<LocalObjectReference>> =
        (!s.image.pull_secrets.is_empty()).then(|| {
            s.image
                .pull_secrets
                .iter()
                .map(|n| LocalObjectReference { name: n.clone() })
                .collect()
        });
    let stopped = s.cluster_operation.stopped;
    // Scaling down (or stopping) never deletes claims; deleting the
    // resource does only when asked.
    let retention = StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_deleted: Some(
            match s.volume_deletion_policy {
                VolumeDeletionPolicy::Retain => "Retain",
                VolumeDeletionPolicy::Delete => "Delete",
            }
            .into(),
        ),
        when_scaled: Some("Retain".into()),
    };

    let config = ConfigMap {
        metadata: meta(c, format!("{name}-config"), "config"),
        data: Some(BTreeMap::from([("ozone.conf".into(), conf.clone())])),
        ..Default::default()
    };
    let config_volume = Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: format!("{name}-config"),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut base_mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: "/etc/ozone".into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        },
    ];
    let mut extra_volumes = Vec::new();
    if s.security.block_tokens {
        base_mounts.push(VolumeMount {
            name: "block-token".into(),
            mount_path: "/etc/ozone/token".into(),
            read_only: Some(true),
            ..Default::default()
        });
        extra_volumes.push(Volume {
            name: "block-token".into(),
            secret: Some(k8s_openapi::api::core::v1::SecretVolumeSource {
                secret_name: Some(token_secret_name(&name)),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let pod_security = PodSecurityContext {
        fs_group: Some(RUN_AS),
        run_as_non_root: Some(true),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    };
    let template_meta = |component: &str| ObjectMeta {
        labels: Some(labels(&name, component)),
        annotations: Some(BTreeMap::from([(CONFIG_HASH.to_string(), hash.clone())])),
        ..Default::default()
    };

    // OM.
    let om_container = Container {
        name: "om".into(),
        image: Some(image.clone()),
        image_pull_policy: Some(pull_policy.clone()),
        args: Some(
            [
                "om",
                "--metadata-dir",
                "/data/om",
                "--grpc-addr",
                "0.0.0.0:9862",
                "--http-addr",
                "0.0.0.0:9874",
                "--conf",
                "/etc/ozone/ozone.conf",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ports: Some(vec![
            ContainerPort {
                name: Some("grpc".into()),
                container_port: OM_PORT,
                ..Default::default()
            },
            ContainerPort {
                name: Some("http".into()),
                container_port: OM_HTTP_PORT,
                ..Default::default()
            },
        ]),
        readiness_probe: Some(http_probe("/readyz", OM_HTTP_PORT, 5)),
        liveness_probe: Some(http_probe("/healthz", OM_HTTP_PORT, 10)),
        resources: s.om.resources.clone(),
        security_context: Some(non_root()),
        volume_mounts: Some(base_mounts.clone()),
        ..Default::default()
    };
    let om = StatefulSet {
        metadata: meta(c, format!("{name}-om"), "om"),
        spec: Some(StatefulSetSpec {
            replicas: Some(if stopped { 0 } else { s.om.replicas }),
            service_name: Some(format!("{name}-om-headless")),
            selector: LabelSelector {
                match_labels: Some(selector(&name, "om")),
                ..Default::default()
            },
            template: overrides::apply(
                PodTemplateSpec {
                    metadata: Some(template_meta("om")),
                    spec: Some(PodSpec {
                        containers: vec![om_container],
                        volumes: Some(
                            [vec![config_volume.clone()], extra_volumes.clone()].concat(),
                        ),
                        security_context: Some(pod_security.clone()),
                        image_pull_secrets: pull_secrets.clone(),
                        ..Default::default()
                    }),
                },
                s.om.pod_overrides.as_ref(),
                "spec.om.podOverrides",
            )?,
            volume_claim_templates: Some(vec![claim(&s.om.storage)]),
            persistent_volume_claim_retention_policy: Some(retention.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };

    // Datanodes.
    let sc = &s.short_circuit;
    let mut dn_mounts = base_mounts.clone();
    let mut dn_volumes = vec![config_volume];
    dn_volumes.extend(extra_volumes);
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
        let sub = data_subdir(&ns, &name);
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
            image: Some(image.clone()),
            image_pull_policy: Some(pull_policy.clone()),
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
    let dn_container = Container {
        name: "datanode".into(),
        image: Some(image),
        image_pull_policy: Some(pull_policy),
        args: Some(
            [
                "datanode",
                "--data-dir",
                "/data/dn",
                "--metadata-dir",
                "/data/meta",
                "--om",
                &format!("{name}-om.{ns}.svc:{OM_PORT}"),
                "--grpc-addr",
                "0.0.0.0:9858",
                "--http-addr",
                "0.0.0.0:9882",
                "--conf",
                "/etc/ozone/ozone.conf",
            ]
            .map(String::from)
            .to_vec(),
        ),
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
                match_labels: Some(selector(&name, "datanode")),
                ..Default::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        });
    let datanodes = StatefulSet {
        metadata: meta(c, format!("{name}-datanode"), "datanode"),
        spec: Some(StatefulSetSpec {
            replicas: Some(if stopped { 0 } else { s.datanodes.replicas }),
            service_name: Some(format!("{name}-datanode-headless")),
            pod_management_policy: Some("OrderedReady".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            selector: LabelSelector {
                match_labels: Some(selector(&name, "datanode")),
                ..Default::default()
            },
            template: overrides::apply(
                PodTemplateSpec {
                    metadata: Some(template_meta("datanode")),
                    spec: Some(PodSpec {
                        init_containers: (!init.is_empty()).then_some(init),
                        containers: vec![dn_container],
                        volumes: Some(dn_volumes),
                        security_context: Some(pod_security),
                        image_pull_secrets: pull_secrets,
                        affinity: Some(Affinity { ..affinity }),
                        node_selector: (!s.datanodes.node_selector.is_empty())
                            .then(|| s.datanodes.node_selector.clone()),
                        tolerations: (!s.datanodes.tolerations.is_empty())
                            .then(|| s.datanodes.tolerations.clone()),
                        ..Default::default()
                    }),
                },
                s.datanodes.pod_overrides.as_ref(),
                "spec.datanodes.podOverrides",
            )?,
            persistent_volume_claim_retention_policy: Some(retention),
            volume_claim_templates: data_claims,
            ..Default::default()
        }),
        ..Default::default()
    };

    // One datanode at a time may be taken down voluntarily: with three
    // replicas two copies of everything stay; with one, a drain makes that
    // node's blocks unreadable until the pod is back, which beats blocking
    // node maintenance forever. Pods that are not ready anyway may always be
    // evicted. A single OM gets no budget: it would protect nothing.
    let datanode_pdb = PodDisruptionBudget {
        metadata: meta(c, format!("{name}-datanode"), "datanode"),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            selector: Some(LabelSelector {
                match_labels: Some(selector(&name, "datanode")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(Objects {
        config,
        om_headless: headless(c, format!("{name}-om-headless"), "om", OM_PORT),
        om_service: Service {
            metadata: meta(c, format!("{name}-om"), "om"),
            spec: Some(ServiceSpec {
                selector: Some(selector(&name, "om")),
                ports: Some(vec![ServicePort {
                    name: Some("grpc".into()),
                    port: OM_PORT,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
        datanode_headless: headless(c, format!("{name}-datanode-headless"), "datanode", DN_PORT),
        om,
        datanodes,
        datanode_pdb,
    })
}
