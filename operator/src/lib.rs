//! The Ozone operator: the `OzoneCluster` custom resource and the pure
//! builders of the objects it reconciles into.

pub mod builders;
pub mod crd;

/// The CRD as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    serde_yaml::to_string(&crd::OzoneCluster::crd())
}
