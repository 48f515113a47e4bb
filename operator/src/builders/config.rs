//! The cluster's config file (`ozone.conf`, in a ConfigMap) and its
//! block-token Secret.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use super::pod::meta;
use super::{BuildError, Environment, OM_PORT, TOKEN_KEY};
use crate::crd::{ChecksumKind, OzoneCluster, Replication};

/// The cluster config file (`ozone.conf`) handed to every process; `env`
/// names the operator (an administrator when authentication is on).
pub fn config_text(c: &OzoneCluster, name: &str, ns: &str, env: &Environment) -> String {
    use ozone_common::config as keys;
    let s = &c.spec;
    let line = |k: &str, v: &dyn std::fmt::Display| format!("{k} = {v}");
    let mut lines = vec![
        line(
            keys::OM_ADDRESS.name,
            &format!("{name}-om.{ns}.svc:{OM_PORT}"),
        ),
        line(
            keys::REPLICATION.name,
            &match s.replication {
                Replication::ONE => "ONE",
                Replication::THREE => "THREE",
            },
        ),
        line(
            keys::CHECKSUM_TYPE.name,
            &match s.checksum.kind {
                ChecksumKind::CRC32C => "CRC32C",
                ChecksumKind::CRC32 => "CRC32",
            },
        ),
        line(
            keys::BYTES_PER_CHECKSUM.name,
            &s.checksum.bytes_per_checksum,
        ),
        line(
            keys::VERIFY_CHECKSUM.name,
            &s.client_defaults.verify_checksum,
        ),
        line(keys::BLOCK_TOKEN_ENABLED.name, &s.security.block_tokens),
    ];
    if s.security.block_tokens {
        lines.push(line(
            keys::BLOCK_TOKEN_SECRET_FILE.name,
            &"/etc/ozone/token/secret",
        ));
    }
    let auth = &s.security.authentication;
    if auth.enabled {
        lines.push(line(keys::SECURITY_ENABLED.name, &true));
        let admins: Vec<&str> = env
            .operator_identity
            .as_deref()
            .into_iter()
            .chain(auth.administrators.iter().map(String::as_str))
            .collect();
        lines.push(line(keys::ADMINISTRATORS.name, &admins.join(",")));
        if !auth.administrator_namespaces.is_empty() {
            lines.push(line(
                keys::ADMINISTRATORS_GROUPS.name,
                &auth.administrator_namespaces.join(","),
            ));
        }
    }
    if s.security.tls.enabled {
        lines.push(line(keys::GRPC_TLS_ENABLED.name, &true));
        lines.push(line(keys::GRPC_TLS_DIR.name, &super::TLS_MOUNT));
    }
    if s.short_circuit.enabled {
        lines.push(line(
            keys::DOMAIN_SOCKET_PATH.name,
            &s.short_circuit.socket_host_path,
        ));
    }
    lines.join("\n") + "\n"
}

/// Name of the block-token Secret of a cluster.
pub fn token_secret_name(cluster: &str) -> String {
    format!("{cluster}-block-token")
}

/// The block-token Secret holding `key`. The controller creates it once
/// with a random key (64 hex digits) and never rewrites it (tokens stay valid across
/// reconciles and restarts).
pub fn token_secret(c: &OzoneCluster, key: &[u8]) -> Result<Secret, BuildError> {
    let name = c.metadata.name.clone().ok_or(BuildError::Missing("name"))?;
    Ok(Secret {
        metadata: meta(c, token_secret_name(&name), "block-token"),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            TOKEN_KEY.to_string(),
            k8s_openapi::ByteString(key.to_vec()),
        )])),
        ..Default::default()
    })
}
