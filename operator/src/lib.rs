//! The Ozone operator: the `OzoneCluster` custom resource, the pure
//! builders of the objects it reconciles into, and the controller.

pub mod builders;
pub mod controller;
pub mod crd;
pub mod decommission;
pub mod metrics;
pub mod overrides;
pub mod render;
pub mod status;
pub mod unowned;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Longest `OzoneCluster` name: `<name>-datanode-<revision hash>` (the
/// StatefulSet's `controller-revision-hash` label) must fit in 63 characters.
pub const MAX_NAME_LEN: usize = 43;

/// The root CEL rule on `metadata.name` (mirrored by `builders::validate`).
const NAME_RULE: &str =
    "self.metadata.name.size() <= 43 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";
const NAME_MESSAGE: &str = "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of at most 43 characters: Service, pod and label names are derived from it";

/// The CustomResourceDefinition, with what the derive cannot express: the
/// rule on `metadata.name`, quantities checked in resource maps (bounded, so
/// the CEL cost stays within the API server's budget) and only Kubernetes
/// integer formats.
pub fn crd() -> CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = crd::OzoneCluster::crd();
    for v in &mut crd.spec.versions {
        let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut json = serde_json::to_value(&*schema).expect("schema serializes");
        json["x-kubernetes-validations"] = serde_json::json!([
            {"rule": NAME_RULE, "message": NAME_MESSAGE, "reason": "FieldValueInvalid"}
        ]);
        fix_schema(&mut json);
        *schema = serde_json::from_value(json).expect("schema deserializes");
    }
    crd
}

fn fix_schema(v: &mut serde_json::Value) {
    let Some(m) = v.as_object_mut() else { return };
    if let Some(f) = m.get("format").and_then(|f| f.as_str())
        && f.starts_with("uint")
    {
        m.remove("format");
    }
    if let Some(props) = m.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for key in ["requests", "limits"] {
            if let Some(p) = props.get_mut(key)
                && let Some(value) = p.get_mut("additionalProperties")
                && value.get("x-kubernetes-int-or-string").is_some()
            {
                value["maxLength"] = 64.into();
                value["x-kubernetes-validations"] = serde_json::json!([{
                    "rule": "isQuantity(string(self))",
                    "message": "must be a Kubernetes quantity such as 500m, 2 or 8Gi"
                }]);
                p["maxProperties"] = 16.into();
            }
        }
        if let Some(claims) = props.get_mut("claims")
            && claims.get("type").and_then(|t| t.as_str()) == Some("array")
        {
            claims["maxItems"] = 16.into();
        }
    }
    for (_, child) in m.iter_mut() {
        match child {
            serde_json::Value::Object(_) => fix_schema(child),
            serde_json::Value::Array(a) => a.iter_mut().for_each(fix_schema),
            _ => {}
        }
    }
}

/// The CRD as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&crd())
}
