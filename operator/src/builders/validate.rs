//! What the schema cannot check, mirroring the CRD's CEL rules (so `render`
//! and a controller facing an older CRD refuse the same).

use super::BuildError;
use crate::crd::{OzoneCluster, Replication};

/// Checks what the schema cannot, and mirrors the CRD's CEL rules (so
/// `render` and a controller facing an older CRD refuse the same).
pub fn validate(c: &OzoneCluster) -> Result<(), BuildError> {
    let s = &c.spec;
    if let Some(name) = &c.metadata.name {
        check_name(name)?;
    }
    if s.replication == Replication::THREE && s.datanodes.replicas < 3 {
        return Err(BuildError::Invalid(format!(
            "replication THREE needs at least 3 datanodes, spec.datanodes.replicas is {}",
            s.datanodes.replicas
        )));
    }
    if s.om.replicas != 1 {
        return Err(BuildError::Invalid("spec.om.replicas must be 1".into()));
    }
    if s.datanodes.replicas < 1 {
        return Err(BuildError::Invalid(
            "spec.datanodes.replicas must be at least 1".into(),
        ));
    }
    if !(512..=16 << 20).contains(&s.checksum.bytes_per_checksum) {
        return Err(BuildError::Invalid(
            "spec.checksum.bytesPerChecksum must be 512 to 16777216".into(),
        ));
    }
    if s.short_circuit.enabled {
        check_host_path(
            "spec.shortCircuit.socketHostPath",
            &s.short_circuit.socket_host_path,
        )?;
    }
    if let Some(p) = &s.datanodes.data_host_path {
        check_host_path("spec.datanodes.dataHostPath", p)?;
        if s.short_circuit.enabled && p == &s.short_circuit.socket_host_path {
            return Err(BuildError::Invalid(
                "spec.datanodes.dataHostPath and spec.shortCircuit.socketHostPath must differ"
                    .into(),
            ));
        }
    }
    if s.security.authentication.enabled && !s.security.block_tokens {
        return Err(BuildError::Invalid(
            "spec.security.authentication needs spec.security.blockTokens: datanodes prove \
             themselves to the OM with the block-token key"
                .into(),
        ));
    }
    if let Some(d) = s.progress_deadline_seconds
        && !(10..=86400).contains(&d)
    {
        return Err(BuildError::Invalid(
            "spec.progressDeadlineSeconds must be 10 to 86400".into(),
        ));
    }
    Ok(())
}

/// A cluster name from which valid child names follow (see
/// [`crate::MAX_NAME_LEN`]).
pub fn check_name(name: &str) -> Result<(), BuildError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && name.len() <= crate::MAX_NAME_LEN
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(())
    } else {
        Err(BuildError::Invalid(format!(
            "metadata.name {name:?} must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of at most {} characters: Service, pod and label names are derived from it",
            crate::MAX_NAME_LEN
        )))
    }
}

/// A host directory the operator may mount and prepare.
pub fn check_host_path(field: &str, p: &str) -> Result<(), BuildError> {
    let bad = |why: &str| Err(BuildError::Invalid(format!("{field} {p:?}: {why}")));
    if !p.starts_with('/') {
        return bad("must be absolute");
    }
    if !p
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"._/-".contains(&c))
    {
        return bad("may hold only letters, digits, '.', '_', '-' and '/'");
    }
    if p.len() > 1 && p.ends_with('/')
        || p.contains("//")
        || p.split('/').any(|c| c == ".." || c == ".")
    {
        return bad("must be a normalized path (no '..', '.', '//' or trailing '/')");
    }
    const UNDER: &[&str] = &[
        "/etc/",
        "/proc/",
        "/sys/",
        "/dev/",
        "/boot/",
        "/usr/",
        "/bin/",
        "/sbin/",
        "/lib/",
        "/var/lib/kubelet/",
        "/data/",
        "/run/",
    ];
    if crate::crd::SYSTEM_PATHS.contains(&p) || UNDER.iter().any(|u| p.starts_with(u)) {
        return bad("is a system directory (or /data, which the container uses)");
    }
    Ok(())
}
