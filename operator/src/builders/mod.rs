//! The objects of a cluster, built as a pure function of the resource:
//! checks ([`validate`]), the shared config file and token Secret
//! ([`config`]), pod pieces ([`pod`]), one StatefulSet builder
//! ([`statefulset`]) used by the OM ([`om`]) and the datanodes
//! ([`datanode`]).

pub mod config;
pub mod datanode;
pub mod identity;
pub mod network;
pub mod om;
pub mod pod;
pub mod statefulset;
pub mod tls;
pub mod validate;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::DynamicObject;

use crate::crd::OzoneCluster;
use crate::overrides::OverrideError;

pub use config::{config_text, token_secret, token_secret_name};
pub use pod::{HOST_DATA_MOUNT, data_subdir};
pub use validate::{check_host_path, check_name, validate};

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
/// Where the OM and datanode pods see the TLS Secret.
pub const TLS_MOUNT: &str = "/etc/ozone/tls";

/// What the objects depend on besides the resource: facts of the operator
/// that builds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// The operator's own identity (`namespace/serviceaccount`), made an
    /// administrator of clusters with authentication on.
    pub operator_identity: Option<String>,
}

/// A resource that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("metadata.{0} is required")]
    Missing(&'static str),
    #[error("invalid spec: {0}")]
    Invalid(String),
}

impl From<OverrideError> for BuildError {
    fn from(e: OverrideError) -> Self {
        BuildError::Invalid(e.to_string())
    }
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
    /// NetworkPolicies (none unless asked for).
    pub network_policies: Vec<NetworkPolicy>,
    /// The cert-manager Certificate (TLS through cert-manager only).
    pub certificate: Option<DynamicObject>,
    /// The OM's ServiceAccount (authentication on only).
    pub om_account: Option<ServiceAccount>,
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
        let mut docs = docs.to_vec();
        for p in &self.network_policies {
            docs.push(serde_yaml::to_string(p)?);
        }
        if let Some(c) = &self.certificate {
            docs.insert(0, serde_yaml::to_string(c)?);
        }
        if let Some(a) = &self.om_account {
            docs.insert(0, serde_yaml::to_string(a)?);
        }
        Ok(docs.iter().map(|d| format!("---\n{d}")).collect())
    }
}

/// Builds every object of the cluster, as an operator without a known
/// identity would.
pub fn build(c: &OzoneCluster) -> Result<Objects, BuildError> {
    build_in(c, &Environment::default())
}

/// Builds every object of the cluster for the operator described by `env`.
pub fn build_in(c: &OzoneCluster, env: &Environment) -> Result<Objects, BuildError> {
    validate(c)?;
    let ctx = pod::Context::new(c, env)?;
    Ok(Objects {
        config: ctx.config_map(),
        om_headless: pod::headless(c, format!("{}-om-headless", ctx.name), "om", OM_PORT),
        om_service: om::service(&ctx),
        datanode_headless: pod::headless(
            c,
            format!("{}-datanode-headless", ctx.name),
            "datanode",
            DN_PORT,
        ),
        om: om::statefulset(&ctx)?,
        datanodes: datanode::statefulset(&ctx)?,
        datanode_pdb: datanode::disruption_budget(&ctx),
        network_policies: network::policies(&ctx),
        certificate: tls::certificate(&ctx),
        om_account: identity::om_account(&ctx),
    })
}
