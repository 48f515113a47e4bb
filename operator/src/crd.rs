//! The `OzoneCluster` custom resource (`ozone-rs.io/v1alpha1`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of an Ozone cluster: one OM and a datanode on every
/// selected node, sharing a hostPath directory of short-circuit sockets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[kube(
    group = "ozone-rs.io",
    version = "v1alpha1",
    kind = "OzoneCluster",
    namespaced,
    shortname = "oz",
    status = "OzoneClusterStatus",
    printcolumn = r#"{"name":"Datanodes","type":"string","jsonPath":".status.datanodes.summary"}"#,
    printcolumn = r#"{"name":"OM","type":"string","jsonPath":".status.om.summary"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.replication != 'THREE' || self.datanodes.replicas >= 3",
     "message": "replication THREE needs at least 3 datanodes (set datanodes.replicas >= 3 or replication ONE)"}
]))]
pub struct OzoneClusterSpec {
    /// Container image of the OM and datanodes.
    #[serde(default)]
    pub image: ImageSpec,
    /// The Ozone Manager.
    #[serde(default)]
    pub om: OmSpec,
    /// The datanodes (one per node).
    #[serde(default)]
    pub datanodes: DatanodeSpec,
    /// Short-circuit local reads through a hostPath socket directory.
    #[serde(default)]
    pub short_circuit: ShortCircuitSpec,
    /// Checksums of new keys.
    #[serde(default)]
    pub checksum: ChecksumSpec,
    /// Replication of new keys.
    #[serde(default)]
    pub replication: Replication,
    /// Security settings.
    #[serde(default)]
    pub security: SecuritySpec,
    /// Defaults handed to clients (through the cluster ConfigMap).
    #[serde(default)]
    pub client_defaults: ClientDefaults,
    /// Stop the cluster or pause reconciliation.
    #[serde(default)]
    pub cluster_operation: ClusterOperation,
    /// Seconds a rollout or scaling may take before the cluster is reported
    /// Degraded (reason ProgressDeadlineExceeded) instead of Progressing
    /// (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 86400))]
    pub progress_deadline_seconds: Option<i32>,
    /// What happens to the data volumes (PersistentVolumeClaims) when the
    /// resource is deleted: Retain (default) keeps them, Delete removes them.
    /// Host-path data always stays.
    #[serde(default)]
    pub volume_deletion_policy: VolumeDeletionPolicy,
}

/// Default of `spec.progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE: i32 = 600;

/// Host directories the operator refuses: system paths that a hostPath
/// mount (and the root init step that prepares it) must never touch.
pub const SYSTEM_PATHS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/var/lib",
    "/var/lib/kubelet",
    "/var/log",
    "/var/run",
    "/data",
    "/etc/ozone",
];

/// The CEL rule on host paths (mirrored by `builders::validate`): no `..`,
/// not a system directory nor inside `/etc`, `/proc`, `/sys`, `/dev`, `/boot`
/// or the kubelet's state, and not clashing with the container's `/data`.
macro_rules! host_path_rule {
    () => {
        serde_json::json!({
            "rule": "!self.contains('/..') && !self.contains('/./') && !self.endsWith('/.') && !self.contains('//') && !(self.endsWith('/') && self != '/') && !(self in ['/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/opt', '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/var/lib', '/var/lib/kubelet', '/var/log', '/var/run', '/data', '/etc/ozone']) && !['/etc/', '/proc/', '/sys/', '/dev/', '/boot/', '/usr/', '/bin/', '/sbin/', '/lib/', '/var/lib/kubelet/', '/data/', '/run/'].exists(p, self.startsWith(p))",
            "message": "must be a normalized absolute path outside system directories (/, /etc, /usr, /proc, /sys, /dev, /boot, /run, /var/lib/kubelet, ...) and not /data, which the container uses"
        })
    };
}

/// Fate of the data volumes when the resource is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq)]
pub enum VolumeDeletionPolicy {
    /// Keep the claims (and the data); a new resource of the same name reuses them.
    #[default]
    Retain,
    /// Delete the claims with the StatefulSets.
    Delete,
}

/// Schema of a pod override: any part of a pod template, merged over the
/// built one (maps key by key, lists of named items by name).
fn pod_overrides_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "Any part of a pod template (metadata, spec), merged over the one the operator builds: maps key by key, lists of named items (containers, volumes, env) by name, other values replaced.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Container image.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Repository, e.g. ghcr.io/ozone-rs/ozone.
    #[serde(default = "default_repository")]
    pub repository: String,
    /// Tag.
    #[serde(default = "default_tag")]
    pub tag: String,
    /// Pull policy.
    #[serde(default)]
    pub pull_policy: PullPolicy,
    /// Names of image pull secrets.
    #[serde(default)]
    pub pull_secrets: Vec<String>,
}

fn default_repository() -> String {
    "ghcr.io/ozone-rs/ozone".into()
}
fn default_tag() -> String {
    env!("CARGO_PKG_VERSION").into()
}

impl Default for ImageSpec {
    fn default() -> Self {
        Self {
            repository: default_repository(),
            tag: default_tag(),
            pull_policy: PullPolicy::default(),
            pull_secrets: Vec::new(),
        }
    }
}

/// Image pull policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq)]
pub enum PullPolicy {
    /// Always pull.
    Always,
    /// Pull when missing.
    #[default]
    IfNotPresent,
    /// Never pull.
    Never,
}

/// Persistent storage of a role. Fixed at creation: a StatefulSet's volume
/// claim templates cannot change.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf",
     "message": "storage cannot be changed after creation (a StatefulSet's volume claim templates are immutable); create a new cluster or resize the claims directly"}
]))]
pub struct StorageSpec {
    /// Volume size, a Kubernetes quantity such as 10Gi.
    #[serde(default = "default_size")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
         "message": "must be a positive Kubernetes quantity such as 10Gi, 500G or 1e12"}
    ]), length(max = 64))]
    pub size: String,
    /// Storage class (cluster default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

fn default_size() -> String {
    "10Gi".into()
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            size: default_size(),
            storage_class_name: None,
        }
    }
}

/// The OM.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OmSpec {
    /// OM replicas; one OM serves the cluster (no OM HA yet).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1))]
    pub replicas: i32,
    /// OM metadata volume.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Pod template overrides for what the spec does not name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_overrides_schema")]
    pub pod_overrides: Option<serde_json::Value>,
}

fn one() -> i32 {
    1
}

impl Default for OmSpec {
    fn default() -> Self {
        Self {
            replicas: 1,
            storage: StorageSpec::default(),
            resources: None,
            pod_overrides: None,
        }
    }
}

/// The datanodes.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.dataHostPath) == has(oldSelf.dataHostPath) && (!has(self.dataHostPath) || self.dataHostPath == oldSelf.dataHostPath)",
     "message": "dataHostPath cannot be changed after creation (the datanodes' blocks live there)"}
]))]
pub struct DatanodeSpec {
    /// Datanode replicas, at most one per node.
    #[serde(default = "three")]
    #[schemars(range(min = 1, max = 10000))]
    pub replicas: i32,
    /// Data volume (a volume claim per datanode) unless dataHostPath is set.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Keep block data in this host directory instead of a volume claim
    /// (each cluster uses its own subdirectory `<namespace>-<name>`). Fixed at
    /// creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/[A-Za-z0-9._/-]*$"), length(max = 1024))]
    #[schemars(extend("x-kubernetes-validations" = [host_path_rule!()]))]
    pub data_host_path: Option<String>,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Nodes that may run datanodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the datanode pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Extra affinity (the one-datanode-per-node anti-affinity is always added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Pod template overrides for what the spec does not name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_overrides_schema")]
    pub pod_overrides: Option<serde_json::Value>,
    /// On a scale-down, decommission the datanodes that go (their replicas
    /// are copied to the others) and lower the StatefulSet only once they
    /// are DECOMMISSIONED. Off: the pods go at once and the OM re-replicates
    /// after its dead-node interval.
    #[serde(default = "yes")]
    pub decommission_on_scale_down: bool,
}

fn three() -> i32 {
    3
}

impl Default for DatanodeSpec {
    fn default() -> Self {
        Self {
            replicas: 3,
            storage: StorageSpec::default(),
            data_host_path: None,
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            pod_overrides: None,
            decommission_on_scale_down: true,
        }
    }
}

/// Short-circuit reads.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShortCircuitSpec {
    /// Serve short-circuit reads through the node's socket directory.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Host directory of the sockets, shared by every pod of a node.
    #[serde(default = "default_socket_path")]
    #[schemars(regex(pattern = r"^/[A-Za-z0-9._/-]*$"), length(max = 100))]
    #[schemars(extend("x-kubernetes-validations" = [host_path_rule!()]))]
    pub socket_host_path: String,
}

fn yes() -> bool {
    true
}
fn default_socket_path() -> String {
    "/var/lib/ozone/sockets".into()
}

impl Default for ShortCircuitSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            socket_host_path: default_socket_path(),
        }
    }
}

/// Checksums of new keys.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChecksumSpec {
    /// Algorithm.
    #[serde(default, rename = "type")]
    pub kind: ChecksumKind,
    /// Bytes per checksum window (512 bytes to 16 MiB).
    #[serde(default = "default_bpc")]
    #[schemars(range(min = 512, max = 16777216))]
    pub bytes_per_checksum: u32,
}

fn default_bpc() -> u32 {
    16384
}

impl Default for ChecksumSpec {
    fn default() -> Self {
        Self {
            kind: ChecksumKind::default(),
            bytes_per_checksum: default_bpc(),
        }
    }
}

/// Checksum algorithm.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq)]
pub enum ChecksumKind {
    /// CRC32C (Castagnoli).
    #[default]
    CRC32C,
    /// CRC32 (IEEE), Apache Ozone's default.
    CRC32,
}

/// Replication factor of new keys.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq)]
pub enum Replication {
    /// One replica.
    ONE,
    /// Three replicas on distinct nodes.
    #[default]
    THREE,
}

/// Security.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.authentication) || !self.authentication.enabled || self.blockTokens",
     "message": "spec.security.authentication needs spec.security.blockTokens: datanodes prove themselves to the OM with the block-token key"}
]))]
pub struct SecuritySpec {
    /// OM-signed block tokens checked by datanodes (key kept in a Secret).
    #[serde(default)]
    pub block_tokens: bool,
    /// Callers known by their pods' ServiceAccount tokens
    /// (`ozone.security.enabled`).
    #[serde(default)]
    pub authentication: AuthenticationSpec,
    /// TLS on every gRPC port of the OM and the datanodes.
    #[serde(default)]
    pub tls: TlsSpec,
    /// NetworkPolicies limiting who reaches the OM and the datanodes.
    #[serde(default)]
    pub network_policies: NetworkPolicySpec,
}

/// Authenticated calls (`ozone.security.enabled`): every OM call carries a
/// projected ServiceAccount token for the audience `ozone`, which the OM
/// checks through the API server's TokenReview (its ServiceAccount
/// `<name>-om` is bound to the chart's ClusterRole for that). Users are
/// `namespace/serviceaccount`; the operator's ServiceAccount is an
/// administrator (it decommissions datanodes).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationSpec {
    /// Require credentials on every OM call.
    #[serde(default)]
    pub enabled: bool,
    /// More administrators (`namespace/serviceaccount`): create volumes,
    /// decommission datanodes, read replication status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"}))]
    pub administrators: Vec<String>,
    /// Namespaces whose every ServiceAccount is an administrator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}))]
    pub administrator_namespaces: Vec<String>,
}

/// TLS (`hdds.grpc.tls.enabled`). The certificate lives in the Secret
/// `<name>-tls` (`tls.crt`, `tls.key`, `ca.crt`), mounted in every OM and
/// datanode pod; its names are the OM Service's and the pods' DNS names.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Serve and call gRPC over TLS.
    #[serde(default)]
    pub enabled: bool,
    /// Days a certificate is valid; it is renewed when a third is left.
    #[serde(default = "default_certificate_days")]
    #[schemars(range(min = 1, max = 3650))]
    pub certificate_days: u32,
    /// Ask cert-manager for the certificate (a `Certificate` the operator
    /// applies) instead of the operator's own CA (the Secret `<name>-ca`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerIssuer>,
    /// Namespaces of client pods that get the ConfigMap `<name>-ca-bundle`
    /// (`ca.crt`, the CA clients check the cluster against; no key). The
    /// cluster's own namespace always has it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}))]
    pub client_namespaces: Vec<String>,
}

fn default_certificate_days() -> u32 {
    90
}

impl Default for TlsSpec {
    fn default() -> Self {
        Self {
            enabled: false,
            certificate_days: default_certificate_days(),
            cert_manager: None,
            client_namespaces: Vec::new(),
        }
    }
}

/// The cert-manager issuer that signs the cluster's certificate.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerIssuer {
    /// Name of the Issuer or ClusterIssuer.
    #[schemars(length(min = 1, max = 253))]
    pub issuer_name: String,
    /// `Issuer` (in the cluster's namespace) or `ClusterIssuer`.
    #[serde(default)]
    pub issuer_kind: IssuerKind,
}

/// Kind of a cert-manager issuer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq)]
pub enum IssuerKind {
    /// Namespaced.
    #[default]
    Issuer,
    /// Cluster-wide.
    ClusterIssuer,
}

/// NetworkPolicies: the OM and datanode gRPC ports accept only the
/// cluster's own pods, client pods (by label, in any namespace) and the
/// operator; the metrics ports only the named namespace.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Render the policies.
    #[serde(default)]
    pub enabled: bool,
    /// Labels of the pods that may call the OM and datanodes (the pods
    /// running the client sidecar), in any namespace.
    #[serde(default = "default_client_labels")]
    pub client_pod_labels: BTreeMap<String, String>,
    /// Namespace allowed to scrape the metrics ports (unset: none but the
    /// cluster's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_namespace: Option<String>,
}

/// Label of client pods allowed through the NetworkPolicies by default.
pub const CLIENT_LABEL: &str = "ozone-rs.io/client";

fn default_client_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(CLIENT_LABEL.to_string(), "true".to_string())])
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self {
            enabled: false,
            client_pod_labels: default_client_labels(),
            metrics_namespace: None,
        }
    }
}

/// Client defaults.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientDefaults {
    /// ozone.client.verify.checksum for clients that take the cluster config.
    #[serde(default = "yes")]
    pub verify_checksum: bool,
}

impl Default for ClientDefaults {
    fn default() -> Self {
        Self {
            verify_checksum: true,
        }
    }
}

/// Operations on the whole cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperation {
    /// Scale every role to zero (data volumes stay).
    #[serde(default)]
    pub stopped: bool,
    /// Make no changes; status is still kept current.
    #[serde(default)]
    pub reconciliation_paused: bool,
}

/// Observed state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OzoneClusterStatus {
    /// Generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Available, Progressing and Degraded, per the API conventions.
    #[serde(default)]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    /// OM readiness.
    #[serde(default)]
    pub om: RoleStatus,
    /// Datanode readiness.
    #[serde(default)]
    pub datanodes: RoleStatus,
    /// The datanode pods and the nodes they run on.
    #[serde(default)]
    pub datanode_pods: Vec<DatanodePod>,
    /// Readiness and rollout counts when they last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// When `progress` last changed (the progress deadline counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Datanode pods decommissioned for a scale-down (returned to service
    /// if the cluster grows back over them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decommissioned_pods: Vec<String>,
    /// The cluster's NetworkPolicies exist (removed when turned off).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network_policies: bool,
}

/// One datanode pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatanodePod {
    /// Pod name.
    pub pod: String,
    /// Node the pod runs on (empty while unscheduled).
    pub node: String,
    /// Whether the pod is Ready.
    pub ready: bool,
}

/// Ready and desired replicas of a role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleStatus {
    /// Ready replicas.
    pub ready: i32,
    /// Desired replicas.
    pub desired: i32,
    /// `ready/desired`, for printer columns.
    pub summary: String,
}
