//! Kubernetes identities of a secure cluster (`spec.security.authentication`)
//! and what reaches beyond its namespace: the OM's ServiceAccount, its
//! ClusterRoleBinding for TokenReview (cluster-scoped, so no owner
//! reference: removed under the finalizer [`FINALIZER`]), and the CA bundle
//! ConfigMaps for client namespaces.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{Context, labels, meta};
use crate::crd::OzoneCluster;

/// Finalizer of clusters with objects the garbage collector cannot remove
/// (the TokenReview ClusterRoleBinding, CA bundles in other namespaces).
pub const FINALIZER: &str = "ozone-rs.io/cleanup";
/// Label naming the cluster (`namespace.name`) on objects outside its
/// namespace.
pub const CLUSTER_LABEL: &str = "ozone-rs.io/cluster";
/// The key of the CA certificate in the CA bundle ConfigMap.
pub const CA_BUNDLE_KEY: &str = "ca.crt";

/// The OM's ServiceAccount name.
pub fn om_account_name(cluster: &str) -> String {
    format!("{cluster}-om")
}

/// The ClusterRoleBinding letting the OM of `ns/cluster` review tokens.
pub fn tokenreview_binding_name(ns: &str, cluster: &str) -> String {
    format!("ozone-rs:{ns}:{cluster}:tokenreview")
}

/// The CA bundle ConfigMap name.
pub fn ca_bundle_name(cluster: &str) -> String {
    format!("{cluster}-ca-bundle")
}

/// The `ozone-rs.io/cluster` value of a cluster.
pub fn cluster_label(ns: &str, cluster: &str) -> String {
    format!("{ns}.{cluster}")
}

/// The OM's ServiceAccount, when authentication is on: its token is the
/// OM's credential for TokenReview.
pub(crate) fn om_account(ctx: &Context) -> Option<ServiceAccount> {
    ctx.c
        .spec
        .security
        .authentication
        .enabled
        .then(|| ServiceAccount {
            metadata: meta(ctx.c, om_account_name(&ctx.name), "om"),
            ..Default::default()
        })
}

/// Metadata of an object of cluster `c` that cannot be owned by it (cluster
/// scoped, or in another namespace): labelled with the cluster instead.
fn unowned_meta(c: &OzoneCluster, name: String, namespace: Option<String>) -> ObjectMeta {
    let cluster = c.metadata.name.clone().unwrap_or_default();
    let ns = c.metadata.namespace.clone().unwrap_or_default();
    let mut l = labels(&cluster, "identity");
    l.insert(CLUSTER_LABEL.into(), cluster_label(&ns, &cluster));
    ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some(l),
        ..Default::default()
    }
}

/// Binds the OM's ServiceAccount to `cluster_role` (the chart's, allowing
/// only `create tokenreviews`).
pub fn tokenreview_binding(c: &OzoneCluster, cluster_role: &str) -> ClusterRoleBinding {
    let cluster = c.metadata.name.clone().unwrap_or_default();
    let ns = c.metadata.namespace.clone().unwrap_or_default();
    ClusterRoleBinding {
        metadata: unowned_meta(c, tokenreview_binding_name(&ns, &cluster), None),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: cluster_role.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: om_account_name(&cluster),
            namespace: Some(ns),
            ..Default::default()
        }]),
    }
}

/// The ConfigMap `<name>-ca-bundle` in `target` holding the cluster's CA
/// certificate (never its key): clients mount it as `hdds.grpc.tls.dir`.
/// Owned by the cluster in its own namespace; labelled elsewhere.
pub fn ca_bundle(c: &OzoneCluster, target: &str, ca_pem: &str) -> ConfigMap {
    let cluster = c.metadata.name.clone().unwrap_or_default();
    let metadata = if c.metadata.namespace.as_deref() == Some(target) {
        let mut m = meta(c, ca_bundle_name(&cluster), "identity");
        m.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(CLUSTER_LABEL.into(), cluster_label(target, &cluster));
        m
    } else {
        unowned_meta(c, ca_bundle_name(&cluster), Some(target.to_string()))
    };
    ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            CA_BUNDLE_KEY.to_string(),
            ca_pem.to_string(),
        )])),
        ..Default::default()
    }
}

/// Whether the cluster has (or may have) objects only the finalizer
/// removes.
pub fn needs_finalizer(c: &OzoneCluster) -> bool {
    let s = &c.spec.security;
    s.authentication.enabled || (s.tls.enabled && !s.tls.client_namespaces.is_empty())
}
