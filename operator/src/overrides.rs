//! Pod overrides: a user-given part of a pod template merged over the one
//! the operator builds.
//!
//! Maps merge key by key; lists whose items all carry a `name` (containers,
//! volumes, env, ports) merge item by item on that name, new names appended;
//! anything else is replaced. A `null` removes a key.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// An override that does not leave a valid pod template.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct OverrideError(pub String);

/// Merges `over` into `base` in place.
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(slot) = b.get_mut(k) {
                    merge(slot, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (Value::Array(b), Value::Array(o)) if named(b) && named(o) => {
            for item in o {
                let name = &item["name"];
                match b.iter_mut().find(|x| &x["name"] == name) {
                    Some(slot) => merge(slot, item),
                    None => b.push(item.clone()),
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn named(items: &[Value]) -> bool {
    items
        .iter()
        .all(|i| i.get("name").is_some_and(Value::is_string))
}

/// The template with `over` (from `field`, for errors) merged in; an override
/// that does not leave a valid pod template is refused.
pub fn apply(
    template: PodTemplateSpec,
    over: Option<&Value>,
    field: &str,
) -> Result<PodTemplateSpec, OverrideError> {
    let Some(over) = over else {
        return Ok(template);
    };
    if !over.is_object() {
        return Err(OverrideError(format!("{field} must be an object")));
    }
    let mut v =
        serde_json::to_value(&template).map_err(|e| OverrideError(format!("{field}: {e}")))?;
    merge(&mut v, over);
    serde_json::from_value(v)
        .map_err(|e| OverrideError(format!("{field} does not give a valid pod template: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_maps_and_named_lists() {
        let mut base = json!({
            "metadata": {"labels": {"a": "1"}},
            "spec": {"containers": [
                {"name": "dn", "image": "x", "env": [{"name": "A", "value": "1"}]}
            ], "priorityClassName": "low"}
        });
        merge(
            &mut base,
            &json!({
                "metadata": {"labels": {"b": "2"}},
                "spec": {"containers": [
                    {"name": "dn", "env": [{"name": "B", "value": "2"}]},
                    {"name": "agent", "image": "y"}
                ], "priorityClassName": null}
            }),
        );
        assert_eq!(base["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        let cs = base["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "x");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(cs[1]["name"], "agent");
        assert!(base["spec"].get("priorityClassName").is_none());
    }

    #[test]
    fn unnamed_lists_are_replaced() {
        let mut base = json!({"args": ["a", "b"]});
        merge(&mut base, &json!({"args": ["c"]}));
        assert_eq!(base, json!({"args": ["c"]}));
    }

    #[test]
    fn an_override_that_breaks_the_template_is_refused() {
        let t = PodTemplateSpec::default();
        let e = apply(
            t,
            Some(&json!({"spec": {"containers": "not a list"}})),
            "spec.om.podOverrides",
        )
        .unwrap_err();
        assert!(e.to_string().contains("spec.om.podOverrides"), "{e}");
    }
}
