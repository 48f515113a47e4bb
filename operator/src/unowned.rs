//! Objects of a cluster the garbage collector cannot remove, because an
//! owner reference cannot point at the cluster: the OM's TokenReview
//! ClusterRoleBinding (cluster-scoped) and the CA bundles in client
//! namespaces. The cluster carries the finalizer
//! [`FINALIZER`](crate::builders::identity::FINALIZER) while it has any;
//! they are removed when turned off, and before the cluster goes.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::builders::identity::{self, FINALIZER};
use crate::crd::OzoneCluster;

/// The field manager owning the finalizer (apart from the objects' manager,
/// so applying the finalizer list touches nothing else).
const FINALIZER_MANAGER: &str = "ozone-operator-finalizer";

/// Whether the cluster carries the operator's finalizer.
pub fn has_finalizer(c: &OzoneCluster) -> bool {
    c.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds (`on`) or removes the operator's finalizer. Server-side apply treats
/// finalizers as a set: other finalizers are left alone.
pub async fn set_finalizer(
    c: &OzoneCluster,
    client: &Client,
    ns: &str,
    on: bool,
) -> Result<(), kube::Error> {
    let finalizers: Vec<&str> = if on { vec![FINALIZER] } else { vec![] };
    let body = serde_json::json!({
        "apiVersion": "ozone-rs.io/v1alpha1",
        "kind": "OzoneCluster",
        "metadata": {"name": c.name_any(), "finalizers": finalizers},
    });
    match Api::<OzoneCluster>::namespaced(client.clone(), ns)
        .patch(
            &c.name_any(),
            &PatchParams::apply(FINALIZER_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone already (the last finalizer was ours).
        Err(kube::Error::Api(s)) if s.code == 404 && !on => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes what the cluster no longer needs: the TokenReview binding unless
/// `keep_binding`, and the CA bundles of namespaces (other than its own)
/// not in `keep_namespaces`. A deleted cluster keeps nothing.
pub async fn remove_unowned(
    c: &OzoneCluster,
    client: &Client,
    ns: &str,
    keep_binding: bool,
    keep_namespaces: &[String],
) -> Result<(), kube::Error> {
    let name = c.name_any();
    if !keep_binding {
        let binding = identity::tokenreview_binding_name(ns, &name);
        match Api::<ClusterRoleBinding>::all(client.clone())
            .delete(&binding, &DeleteParams::default())
            .await
        {
            Ok(_) => tracing::info!(%binding, "TokenReview binding removed"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let selector = format!(
        "{}={}",
        identity::CLUSTER_LABEL,
        identity::cluster_label(ns, &name)
    );
    let bundles = Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default().labels(&selector))
        .await?;
    for cm in bundles {
        let Some(target) = cm.namespace() else {
            continue;
        };
        // The cluster's own bundle is owned by it: the garbage collector's.
        if target == ns || keep_namespaces.contains(&target) {
            continue;
        }
        match Api::<ConfigMap>::namespaced(client.clone(), &target)
            .delete(&cm.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => tracing::info!(namespace = %target, "CA bundle removed"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
