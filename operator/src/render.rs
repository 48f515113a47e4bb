//! Offline admission: checks a resource the way the API server would before
//! the builders see it (unknown fields, the CRD's CEL rules, then the
//! builders' own checks), so `render` refuses what `kubectl apply` would.

use serde_json::Value;

use crate::crd::OzoneCluster;

/// Why a resource would be refused.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// Not an OzoneCluster document.
    #[error("{0}")]
    Parse(String),
    /// A field the schema does not declare (`kubectl --validate=strict`).
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
    /// A CEL rule of the CRD failed.
    #[error("{0}")]
    Rule(String),
    /// The builders refuse it.
    #[error(transparent)]
    Build(#[from] crate::builders::BuildError),
}

/// Parses and admits one resource (YAML or JSON); returns it typed.
pub fn admit(text: &str) -> Result<OzoneCluster, AdmissionError> {
    let raw: Value =
        serde_yaml::from_str(text).map_err(|e| AdmissionError::Parse(e.to_string()))?;
    let crd = crate::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).expect("schema serializes"))
        .ok_or_else(|| AdmissionError::Parse("the CRD has no schema".into()))?;
    for (key, want) in [
        ("apiVersion", "ozone-rs.io/v1alpha1"),
        ("kind", "OzoneCluster"),
    ] {
        if raw.get(key).and_then(|v| v.as_str()) != Some(want) {
            return Err(AdmissionError::Parse(format!("{key} must be {want}")));
        }
    }
    if let Some(spec) = raw.get("spec") {
        unknown_fields(spec, &schema["properties"]["spec"], "spec")?;
    }
    let c: OzoneCluster =
        serde_json::from_value(raw).map_err(|e| AdmissionError::Parse(e.to_string()))?;
    // Defaults applied (as the API server does before evaluating rules).
    let defaulted = serde_json::to_value(&c).expect("resource serializes");
    kube::core::cel::Validator::new()
        .validate(&schema, &defaulted, None)
        .map_err(|e| AdmissionError::Rule(format!("{e}")))?;
    crate::builders::validate(&c)?;
    Ok(c)
}

fn unknown_fields(v: &Value, schema: &Value, path: &str) -> Result<(), AdmissionError> {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(|b| b.as_bool())
        == Some(true)
    {
        return Ok(());
    }
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(|p| p.as_object());
            let extra = schema.get("additionalProperties");
            for (k, child) in m {
                let sub = props.and_then(|p| p.get(k)).or(extra);
                match sub {
                    Some(s) if s.is_object() => unknown_fields(child, s, &format!("{path}.{k}"))?,
                    Some(_) => {}
                    None => return Err(AdmissionError::UnknownField(format!("{path}.{k}"))),
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, child) in a.iter().enumerate() {
                    unknown_fields(child, items, &format!("{path}[{i}]"))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}
