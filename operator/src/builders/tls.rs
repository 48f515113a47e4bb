//! TLS objects: the names a cluster's certificate must carry, the Secret
//! holding it (issued by the operator's CA, kept in `<name>-ca`), or the
//! cert-manager `Certificate` that fills that Secret instead.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use ozone_common::tls::issue::{Ca, Issued};
use ozone_common::tls::{CA_FILE, CERT_FILE, KEY_FILE};

use super::BuildError;
use super::pod::{Context, meta};
use crate::crd::{IssuerKind, OzoneCluster, TlsSpec};

/// Annotation of the TLS Secret: when its certificate expires (Unix seconds).
pub const NOT_AFTER: &str = "ozone-rs.io/not-after";
/// Annotation of the TLS Secret: hash of the names its certificate carries.
pub const NAMES_HASH: &str = "ozone-rs.io/names-hash";
/// Key of the CA's private key in the CA Secret.
pub const CA_KEY: &str = "ca.key";

/// The Secret the OM and datanodes mount at [`super::TLS_MOUNT`].
pub fn tls_secret_name(cluster: &str) -> String {
    format!("{cluster}-tls")
}

/// The Secret holding the operator's CA for a cluster.
pub fn ca_secret_name(cluster: &str) -> String {
    format!("{cluster}-ca")
}

/// Name of the CA certificate's subject.
pub fn ca_subject(cluster: &str, ns: &str) -> String {
    format!("ozone {ns}/{cluster} CA")
}

/// The DNS names of the cluster's certificate: the OM Service (short and
/// full forms), and every OM and datanode pod through its headless Service
/// (datanodes advertise these names when TLS is on).
pub fn dns_names(cluster: &str, ns: &str) -> Vec<String> {
    let mut v = Vec::new();
    let om = format!("{cluster}-om");
    v.push(om.clone());
    for suffix in [
        ns.to_string(),
        format!("{ns}.svc"),
        format!("{ns}.svc.cluster.local"),
    ] {
        v.push(format!("{om}.{suffix}"));
    }
    for component in ["om", "datanode"] {
        for suffix in [format!("{ns}.svc"), format!("{ns}.svc.cluster.local")] {
            v.push(format!("*.{cluster}-{component}-headless.{suffix}"));
        }
    }
    v
}

/// Hash of `names` (recorded on the Secret: a change reissues).
pub fn names_hash(names: &[String]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(names.join(",").as_bytes()))[..16].to_string()
}

/// Validity of the cluster's certificates.
pub fn validity(spec: &TlsSpec) -> Duration {
    Duration::from_secs(u64::from(spec.certificate_days.max(1)) * 86_400)
}

/// Whether the TLS Secret `current` needs a new certificate at `now`: none
/// yet, other names, or less than a third of its validity left.
pub fn needs_renewal(
    current: Option<&Secret>,
    names: &[String],
    spec: &TlsSpec,
    now: SystemTime,
) -> bool {
    let Some(s) = current else {
        return true;
    };
    let ann = s.metadata.annotations.clone().unwrap_or_default();
    let complete = s.data.as_ref().is_some_and(|d| {
        [CA_FILE, CERT_FILE, KEY_FILE]
            .iter()
            .all(|k| d.get(*k).is_some_and(|v| !v.0.is_empty()))
    });
    let not_after = ann
        .get(NOT_AFTER)
        .and_then(|v| v.parse::<u64>().ok())
        .map(|secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
    let renew_at = not_after.map(|t| t - validity(spec) / 3);
    !complete
        || ann.get(NAMES_HASH) != Some(&names_hash(names))
        || renew_at.is_none_or(|t| now >= t)
}

/// The CA Secret (`ca.crt`, `ca.key`).
pub fn ca_secret(c: &OzoneCluster, ca: &Ca) -> Result<Secret, BuildError> {
    let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
    Ok(Secret {
        metadata: meta(c, ca_secret_name(&name), "tls"),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (
                CA_FILE.to_string(),
                ByteString(ca.cert_pem().as_bytes().to_vec()),
            ),
            (CA_KEY.to_string(), ByteString(ca.key_pem().into_bytes())),
        ])),
        ..Default::default()
    })
}

/// The TLS Secret holding `issued` and the CA bundle `ca_pem`.
pub fn tls_secret(
    c: &OzoneCluster,
    ca_pem: &str,
    issued: &Issued,
    names: &[String],
) -> Result<Secret, BuildError> {
    let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
    let mut m = meta(c, tls_secret_name(&name), "tls");
    let secs = issued
        .not_after
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    m.annotations = Some(BTreeMap::from([
        (NOT_AFTER.to_string(), secs.to_string()),
        (NAMES_HASH.to_string(), names_hash(names)),
    ]));
    Ok(Secret {
        metadata: m,
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (CA_FILE.to_string(), ByteString(ca_pem.as_bytes().to_vec())),
            (
                CERT_FILE.to_string(),
                ByteString(issued.cert_pem.as_bytes().to_vec()),
            ),
            (
                KEY_FILE.to_string(),
                ByteString(issued.key_pem.as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    })
}

/// The cert-manager `Certificate` kind.
pub fn certificate_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cert-manager.io",
        "v1",
        "Certificate",
    ))
}

/// The cert-manager `Certificate` filling the TLS Secret, when the spec
/// asks for cert-manager.
pub(crate) fn certificate(ctx: &Context) -> Option<DynamicObject> {
    let (c, name, ns) = (ctx.c, &ctx.name, &ctx.ns);
    let tls = &c.spec.security.tls;
    let (true, Some(issuer)) = (tls.enabled, &tls.cert_manager) else {
        return None;
    };
    let hours = u64::from(tls.certificate_days.max(1)) * 24;
    let mut obj = DynamicObject::new(&tls_secret_name(name), &certificate_resource());
    obj.metadata = meta(c, tls_secret_name(name), "tls");
    obj.data = serde_json::json!({
        "spec": {
            "secretName": tls_secret_name(name),
            "commonName": format!("{name}-om.{ns}.svc"),
            "dnsNames": dns_names(name, ns),
            "duration": format!("{hours}h"),
            "renewBefore": format!("{}h", hours / 3),
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["server auth", "client auth", "digital signature", "key encipherment"],
            "issuerRef": {
                "name": issuer.issuer_name,
                "kind": match issuer.issuer_kind {
                    IssuerKind::Issuer => "Issuer",
                    IssuerKind::ClusterIssuer => "ClusterIssuer",
                },
                "group": "cert-manager.io",
            },
        }
    });
    Some(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_the_om_service_and_every_pod() {
        let n = dns_names("oz", "storage");
        for want in [
            "oz-om",
            "oz-om.storage.svc",
            "oz-om.storage.svc.cluster.local",
            "*.oz-datanode-headless.storage.svc",
            "*.oz-om-headless.storage.svc",
        ] {
            assert!(n.iter().any(|x| x == want), "{want} in {n:?}");
        }
    }

    #[test]
    fn renewal_when_missing_renamed_or_a_third_is_left() {
        let mut c = OzoneCluster::new("oz", Default::default());
        c.metadata.namespace = Some("storage".into());
        let spec = TlsSpec {
            enabled: true,
            ..Default::default()
        };
        let names = dns_names("oz", "storage");
        let now = SystemTime::now();
        assert!(needs_renewal(None, &names, &spec, now));
        let ca = Ca::new("ca", validity(&spec)).unwrap();
        let leaf = ca.issue(&names, validity(&spec)).unwrap();
        let s = tls_secret(&c, ca.cert_pem(), &leaf, &names).unwrap();
        assert!(!needs_renewal(Some(&s), &names, &spec, now));
        // 61 of 90 days later: less than a third left.
        let later = now + Duration::from_secs(61 * 86_400);
        assert!(needs_renewal(Some(&s), &names, &spec, later));
        let other = dns_names("oz", "elsewhere");
        assert!(needs_renewal(Some(&s), &other, &spec, now));
        let mut empty = s.clone();
        empty.data.as_mut().unwrap().remove(KEY_FILE);
        assert!(needs_renewal(Some(&empty), &names, &spec, now));
    }
}
