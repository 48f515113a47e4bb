//! The Ozone operator: the `OzoneCluster` custom resource, the pure
//! builders of the objects it reconciles into, and the controller.

pub mod builders;
pub mod controller;
pub mod crd;
pub mod metrics;
pub mod overrides;
pub mod status;

/// The CRD as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    serde_yaml::to_string(&crd::OzoneCluster::crd())
}
