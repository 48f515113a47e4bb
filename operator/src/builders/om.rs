//! The OM: its StatefulSet and its client Service.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, Service, ServicePort, ServiceSpec,
};

use super::pod::{Context, claim, http_probe, meta, non_root, selector};
use super::statefulset::{self, Role};
use super::{BuildError, OM_HTTP_PORT, OM_PORT};

/// The OM StatefulSet.
pub(crate) fn statefulset(ctx: &Context) -> Result<StatefulSet, BuildError> {
    let s = &ctx.c.spec;
    let auth = s.security.authentication.enabled;
    let container = Container {
        name: "om".into(),
        image: Some(ctx.image.clone()),
        image_pull_policy: Some(ctx.pull_policy.clone()),
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
        volume_mounts: Some(ctx.base_mounts.clone()),
        ..Default::default()
    };
    statefulset::build(
        ctx,
        Role {
            component: "om",
            replicas: s.om.replicas,
            pod: PodSpec {
                // With authentication on, the OM's token reviews clients'
                // tokens; otherwise it has no business with the API server.
                service_account_name: auth.then(|| super::identity::om_account_name(&ctx.name)),
                automount_service_account_token: Some(auth),
                containers: vec![container],
                volumes: Some(ctx.volumes.clone()),
                security_context: Some(ctx.pod_security.clone()),
                image_pull_secrets: ctx.pull_secrets.clone(),
                ..Default::default()
            },
            overrides: (s.om.pod_overrides.as_ref(), "spec.om.podOverrides"),
            claims: Some(vec![claim(&s.om.storage)]),
            ordered_rolling: false,
        },
    )
}

/// The Service clients reach the OM through.
pub(crate) fn service(ctx: &Context) -> Service {
    Service {
        metadata: meta(ctx.c, format!("{}-om", ctx.name), "om"),
        spec: Some(ServiceSpec {
            selector: Some(selector(&ctx.name, "om")),
            ports: Some(vec![ServicePort {
                name: Some("grpc".into()),
                port: OM_PORT,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
