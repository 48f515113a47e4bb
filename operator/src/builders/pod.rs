//! Pieces shared by the cluster's pods: labels, metadata, probes, security
//! contexts, claims, headless Services, and the [`Context`] every builder
//! starts from (image, config hash, mounts and volumes common to all pods).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    LocalObjectReference, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSecurityContext, Probe, SeccompProfile, SecretVolumeSource, SecurityContext, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use sha2::{Digest, Sha256};

use super::config::{config_text, token_secret_name};
use super::{BuildError, CONFIG_HASH, Environment, RUN_AS};
use crate::crd::{OzoneCluster, VolumeDeletionPolicy};

/// What every builder of a cluster's objects starts from.
pub(crate) struct Context<'a> {
    /// The resource.
    pub c: &'a OzoneCluster,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// The config file's text.
    pub conf: String,
    /// Hash of the config (a pod-template annotation: a change rolls pods).
    pub hash: String,
    /// Container image.
    pub image: String,
    /// Its pull policy.
    pub pull_policy: String,
    /// Image pull secrets, when any.
    pub pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Claims kept on scale-down; deleted with the resource only if asked.
    pub retention: StatefulSetPersistentVolumeClaimRetentionPolicy,
    /// Mounts of every Ozone container: config, data, block token.
    pub base_mounts: Vec<VolumeMount>,
    /// Volumes behind `base_mounts` (the data volume aside).
    pub volumes: Vec<Volume>,
    /// Pod security context of every pod.
    pub pod_security: PodSecurityContext,
}

impl<'a> Context<'a> {
    /// The context of cluster `c` (validated).
    pub(crate) fn new(c: &'a OzoneCluster, env: &Environment) -> Result<Self, BuildError> {
        let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
        let ns = c
            .metadata
            .namespace
            .clone()
            .ok_or(BuildError::Missing("namespace"))?;
        let s = &c.spec;
        let conf = config_text(c, &name, &ns, env);
        let hash = format!("{:x}", Sha256::digest(conf.as_bytes()));
        let pull_secrets = (!s.image.pull_secrets.is_empty()).then(|| {
            s.image
                .pull_secrets
                .iter()
                .map(|n| LocalObjectReference { name: n.clone() })
                .collect()
        });
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
        let mut volumes = vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: format!("{name}-config"),
                ..Default::default()
            }),
            ..Default::default()
        }];
        if s.security.block_tokens {
            base_mounts.push(VolumeMount {
                name: "block-token".into(),
                mount_path: "/etc/ozone/token".into(),
                read_only: Some(true),
                ..Default::default()
            });
            volumes.push(Volume {
                name: "block-token".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(token_secret_name(&name)),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if s.security.tls.enabled {
            base_mounts.push(VolumeMount {
                name: "tls".into(),
                mount_path: super::TLS_MOUNT.into(),
                read_only: Some(true),
                ..Default::default()
            });
            volumes.push(Volume {
                name: "tls".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(super::tls::tls_secret_name(&name)),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        Ok(Self {
            c,
            image: format!("{}:{}", s.image.repository, s.image.tag),
            pull_policy: format!("{:?}", s.image.pull_policy),
            pull_secrets,
            retention,
            base_mounts,
            volumes,
            pod_security: PodSecurityContext {
                fs_group: Some(RUN_AS),
                run_as_non_root: Some(true),
                seccomp_profile: Some(runtime_default_seccomp()),
                ..Default::default()
            },
            name,
            ns,
            conf,
            hash,
        })
    }

    /// The ConfigMap holding `ozone.conf`.
    pub(crate) fn config_map(&self) -> ConfigMap {
        ConfigMap {
            metadata: meta(self.c, format!("{}-config", self.name), "config"),
            data: Some(BTreeMap::from([("ozone.conf".into(), self.conf.clone())])),
            ..Default::default()
        }
    }

    /// Pod-template metadata of `component`: labels and the config hash.
    pub(crate) fn template_meta(&self, component: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some(labels(&self.name, component)),
            annotations: Some(BTreeMap::from([(
                CONFIG_HASH.to_string(),
                self.hash.clone(),
            )])),
            ..Default::default()
        }
    }
}

pub(crate) fn labels(name: &str, component: &str) -> BTreeMap<String, String> {
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

pub(crate) fn selector(name: &str, component: &str) -> BTreeMap<String, String> {
    let mut l = labels(name, component);
    l.remove("app.kubernetes.io/managed-by");
    l
}

pub(crate) fn meta(c: &OzoneCluster, name: String, component: &str) -> ObjectMeta {
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

pub(crate) fn http_probe(path: &str, port: i32, period: i32) -> Probe {
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

pub(crate) fn env_field(name: &str, path: &str) -> EnvVar {
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

pub(crate) fn claim(storage: &crate::crd::StorageSpec) -> PersistentVolumeClaim {
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

pub(crate) fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}

pub(crate) fn non_root() -> SecurityContext {
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

pub(crate) fn headless(c: &OzoneCluster, name: String, component: &str, port: i32) -> Service {
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
