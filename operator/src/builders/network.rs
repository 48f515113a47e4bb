//! NetworkPolicies (`spec.security.networkPolicies`): the OM's and the
//! datanodes' gRPC ports accept the cluster's own pods, client pods by
//! label in any namespace, and the operator; their HTTP (metrics) ports
//! accept the cluster's own pods and the metrics namespace. Everything
//! else reaching those pods is dropped by the network plugin.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{Context, meta, selector};
use super::{DN_HTTP_PORT, DN_PORT, OM_HTTP_PORT, OM_PORT};

/// Labels of the operator's pods (the chart's selector).
pub const OPERATOR_LABELS: [(&str, &str); 1] = [("app.kubernetes.io/name", "ozone-operator")];

/// Names of the policies of cluster `name` (also removed when turned off).
pub fn policy_names(name: &str) -> [String; 2] {
    [format!("{name}-om"), format!("{name}-datanode")]
}

fn labels(pairs: impl IntoIterator<Item = (String, String)>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(pairs.into_iter().collect()),
        ..Default::default()
    }
}

fn any_namespace(pods: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector::default()),
        pod_selector: Some(pods),
        ..Default::default()
    }
}

fn port(p: i32) -> Vec<NetworkPolicyPort> {
    vec![NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }]
}

/// The policies, when asked for.
pub(crate) fn policies(ctx: &Context) -> Vec<NetworkPolicy> {
    let np = &ctx.c.spec.security.network_policies;
    if !np.enabled {
        return Vec::new();
    }
    let own = NetworkPolicyPeer {
        pod_selector: Some(labels([
            ("app.kubernetes.io/name".to_string(), "ozone".to_string()),
            ("app.kubernetes.io/instance".to_string(), ctx.name.clone()),
        ])),
        ..Default::default()
    };
    let clients = any_namespace(labels(np.client_pod_labels.clone()));
    let operator = any_namespace(labels(
        OPERATOR_LABELS.map(|(k, v)| (k.to_string(), v.to_string())),
    ));
    let mut metrics_from = vec![own.clone()];
    if let Some(ns) = &np.metrics_namespace {
        metrics_from.push(NetworkPolicyPeer {
            namespace_selector: Some(labels([(
                "kubernetes.io/metadata.name".to_string(),
                ns.clone(),
            )])),
            ..Default::default()
        });
    }
    let [om_name, dn_name] = policy_names(&ctx.name);
    let build = |name: String, component: &str, grpc: i32, http: i32| {
        let pods: BTreeMap<String, String> = selector(&ctx.name, component);
        NetworkPolicy {
            metadata: meta(ctx.c, name, component),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(labels(pods)),
                policy_types: Some(vec!["Ingress".into()]),
                ingress: Some(vec![
                    NetworkPolicyIngressRule {
                        from: Some(vec![own.clone(), clients.clone(), operator.clone()]),
                        ports: Some(port(grpc)),
                    },
                    NetworkPolicyIngressRule {
                        from: Some(metrics_from.clone()),
                        ports: Some(port(http)),
                    },
                ]),
                ..Default::default()
            }),
        }
    };
    vec![
        build(om_name, "om", OM_PORT, OM_HTTP_PORT),
        build(dn_name, "datanode", DN_PORT, DN_HTTP_PORT),
    ]
}
