//! The one StatefulSet builder behind the OM's and the datanodes'.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::BuildError;
use super::pod::{Context, meta, selector};
use crate::overrides;

/// What differs between the cluster's StatefulSets.
pub(crate) struct Role<'a> {
    /// Component label and name suffix (`om`, `datanode`).
    pub component: &'static str,
    /// Pods wanted (0 when the cluster is stopped).
    pub replicas: i32,
    /// The pod, before the user's overrides.
    pub pod: PodSpec,
    /// The user's pod-template overrides, and the field they came from.
    pub overrides: (Option<&'a Value>, &'static str),
    /// Claim templates, when the role keeps data in claims.
    pub claims: Option<Vec<PersistentVolumeClaim>>,
    /// Pods started and rolled one at a time, each waiting for the last
    /// to be ready.
    pub ordered_rolling: bool,
}

/// The StatefulSet `<cluster>-<component>` of `role`, served by the
/// headless Service `<cluster>-<component>-headless`.
pub(crate) fn build(ctx: &Context, role: Role) -> Result<StatefulSet, BuildError> {
    let name = &ctx.name;
    let component = role.component;
    let stopped = ctx.c.spec.cluster_operation.stopped;
    let (over, field) = role.overrides;
    Ok(StatefulSet {
        metadata: meta(ctx.c, format!("{name}-{component}"), component),
        spec: Some(StatefulSetSpec {
            replicas: Some(if stopped { 0 } else { role.replicas }),
            service_name: Some(format!("{name}-{component}-headless")),
            pod_management_policy: role.ordered_rolling.then(|| "OrderedReady".into()),
            update_strategy: role.ordered_rolling.then(|| StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            selector: LabelSelector {
                match_labels: Some(selector(name, component)),
                ..Default::default()
            },
            template: overrides::apply(
                PodTemplateSpec {
                    metadata: Some(ctx.template_meta(component)),
                    spec: Some(role.pod),
                },
                over,
                field,
            )?,
            volume_claim_templates: role.claims,
            persistent_volume_claim_retention_policy: Some(ctx.retention.clone()),
            ..Default::default()
        }),
        ..Default::default()
    })
}
