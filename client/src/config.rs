//! Client settings, from Ozone config keys.

use std::time::Duration;

use ozone_common::checksum::Checksummer;
use ozone_common::config::{
    self as keys, Bytes, ChecksumAlgorithm, Conf, ConfigError, ShortCircuitMode,
};
use ozone_proto::{ChecksumType, ReplicationFactor};

/// Settings of a [`Client`](crate::Client).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// OM address, host:port.
    pub om_address: String,
    /// Verify checksums on read (`ozone.client.verify.checksum`).
    pub verify_checksum: bool,
    /// Checksum algorithm and window for new keys.
    pub checksum: Checksummer,
    /// Chunk size of writes, a whole number of checksum windows.
    pub chunk_size: u64,
    /// Replication of new keys.
    pub replication: ReplicationFactor,
    /// Node this client runs on (`NODE_NAME`), for local-first placement
    /// and reads.
    pub node_name: Option<String>,
    /// How long OM calls are retried while an OM reached before is
    /// unavailable (restarting).
    pub om_retry_timeout: Duration,
    /// Longest wait for a datanode's answer to a read
    /// (`ozone.client.read.timeout`).
    pub read_timeout: Duration,
    /// Longest wait for a datanode's answer to a write, flush or sync
    /// (`ozone.client.write.timeout`).
    pub write_timeout: Duration,
    /// Connection attempts to an OM never reached before giving up (a
    /// wrong address fails fast).
    pub om_connect_attempts: u32,
    /// Pause between those attempts.
    pub om_connect_wait: Duration,
    /// Largest gRPC message.
    pub max_message_size: usize,
    /// Block allocations a write may use before giving up.
    pub max_block_attempts: usize,
    /// `ozone.client.read.short-circuit` as configured.
    pub short_circuit_mode: ShortCircuitMode,
    /// Short-circuit reads in force: on when `ozone.domain.socket.path` is
    /// set and the mode is not off.
    pub short_circuit: Option<crate::shortcircuit::ScConfig>,
    /// `ozone.client.token.file`: the token presented to the OM.
    pub token_file: Option<std::path::PathBuf>,
    /// TLS to the OM and datanodes (`hdds.grpc.tls.enabled`).
    pub tls: Option<ozone_common::tls::Tls>,
}

/// Short-circuit settings from `conf`: on when a socket directory is set,
/// unless `mode` (`ozone.client.read.short-circuit`) is `off`.
fn short_circuit(
    conf: &Conf,
    mode: ShortCircuitMode,
) -> Result<Option<crate::shortcircuit::ScConfig>, ConfigError> {
    let Some(dir) = conf.opt(&keys::DOMAIN_SOCKET_PATH)? else {
        if mode == ShortCircuitMode::On {
            tracing::warn!(
                "short-circuit is on but no datanode socket directory is set \
                 ({}): reads use gRPC",
                keys::DOMAIN_SOCKET_PATH.name
            );
        }
        return Ok(None);
    };
    if mode == ShortCircuitMode::Off {
        return Ok(None);
    }
    Ok(Some(crate::shortcircuit::ScConfig {
        dir,
        backoff: conf.value(&keys::SHORT_CIRCUIT_BACKOFF)?,
        cache_size: conf.value(&keys::SHORT_CIRCUIT_CACHE_SIZE)? as usize,
        cache_expiry: conf.value(&keys::SHORT_CIRCUIT_CACHE_EXPIRY)?,
        mmap: conf.value(&keys::SHORT_CIRCUIT_MMAP)?,
    }))
}

/// A duration key that must be above zero (a zero deadline fails every call).
fn positive(conf: &Conf, key: &keys::Key<Duration>) -> Result<Duration, ConfigError> {
    let d = conf.value(key)?;
    if d.is_zero() {
        return Err(ConfigError::Value {
            key: key.name.into(),
            value: conf.raw(key.name).unwrap_or("0").into(),
            why: "must be above zero".into(),
        });
    }
    Ok(d)
}

impl ClientConfig {
    /// Settings from `conf` (missing keys take their declared defaults) for
    /// the OM at `om_address`. The node is unset: the caller knows it.
    pub fn from_conf(om_address: &str, conf: &Conf) -> Result<Self, ConfigError> {
        let Bytes(bpc) = conf.value(&keys::BYTES_PER_CHECKSUM)?;
        let bad = |k: &str, v: String, why: &str| ConfigError::Value {
            key: k.into(),
            value: v,
            why: why.into(),
        };
        if bpc == 0 || bpc > 64 << 20 {
            return Err(bad(
                keys::BYTES_PER_CHECKSUM.name,
                bpc.to_string(),
                "must be 1 byte to 64MB",
            ));
        }
        let kind = match conf.value(&keys::CHECKSUM_TYPE)? {
            ChecksumAlgorithm::Crc32 => ChecksumType::Crc32,
            ChecksumAlgorithm::None => ChecksumType::None,
            ChecksumAlgorithm::Crc32c => ChecksumType::Crc32c,
        };
        let checksum = Checksummer::new(kind, bpc as u32).map_err(|e| {
            bad(
                keys::BYTES_PER_CHECKSUM.name,
                bpc.to_string(),
                &e.to_string(),
            )
        })?;
        let Bytes(chunk) = conf.value(&keys::CHUNK_SIZE)?;
        // Chunks hold whole checksum windows.
        let chunk_size = (chunk / bpc).max(1) * bpc;
        let replication = match conf.value(&keys::REPLICATION)? {
            keys::ReplicationFactor::One => ReplicationFactor::One,
            keys::ReplicationFactor::Three => ReplicationFactor::Three,
        };
        let max_message_size = conf.value(&keys::MAX_MESSAGE_SIZE)?.0 as usize;
        if chunk_size + (1 << 20) > max_message_size as u64 {
            return Err(bad(
                keys::CHUNK_SIZE.name,
                chunk.to_string(),
                "chunk must be at least 1MB smaller than ozone.grpc.max.message.size",
            ));
        }
        let short_circuit_mode = conf.value(&keys::READ_SHORT_CIRCUIT)?;
        Ok(Self {
            om_address: om_address.to_string(),
            verify_checksum: conf.value(&keys::VERIFY_CHECKSUM)?,
            checksum,
            chunk_size,
            replication,
            node_name: None,
            om_retry_timeout: conf.value(&keys::OM_RETRY_TIMEOUT)?,
            read_timeout: positive(conf, &keys::READ_TIMEOUT)?,
            write_timeout: positive(conf, &keys::WRITE_TIMEOUT)?,
            om_connect_attempts: conf
                .value(&keys::FAILOVER_MAX_ATTEMPTS)?
                .clamp(1, u32::MAX as u64) as u32,
            om_connect_wait: Duration::from_millis(conf.value(&keys::WAIT_BETWEEN_RETRIES)?),
            max_message_size,
            max_block_attempts: 8,
            short_circuit_mode,
            short_circuit: short_circuit(conf, short_circuit_mode)?,
            token_file: conf.opt(&keys::CLIENT_TOKEN_FILE)?,
            tls: conf.tls(false)?,
        })
    }

    /// Defaults for the OM at `om_address`.
    pub fn new(om_address: &str) -> Self {
        Self::from_conf(om_address, &Conf::new()).expect("defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(text: &str) -> Result<Option<crate::shortcircuit::ScConfig>, ConfigError> {
        ClientConfig::from_conf("om:9862", &Conf::parse(text, "t").unwrap())
            .map(|c| c.short_circuit)
    }

    #[test]
    fn a_zero_datanode_deadline_is_refused() {
        for key in ["ozone.client.read.timeout", "ozone.client.write.timeout"] {
            let e = ClientConfig::from_conf(
                "om:9862",
                &Conf::parse(&format!("{key} = 0s\n"), "t").unwrap(),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(key) && e.contains("above zero"), "{e}");
        }
        let c = ClientConfig::new("om:9862");
        assert_eq!(c.read_timeout, Duration::from_secs(30));
        assert_eq!(c.write_timeout, Duration::from_secs(60));
    }

    #[test]
    fn short_circuit_modes() {
        let dir = "ozone.domain.socket.path = /var/lib/ozone/sockets\n";
        for on in ["on", "auto", "AUTO", "true"] {
            let c = sc(&format!("{dir}ozone.client.read.short-circuit = {on}\n")).unwrap();
            assert!(c.is_some(), "{on}");
        }
        for off in ["off", "false"] {
            let c = sc(&format!("{dir}ozone.client.read.short-circuit = {off}\n")).unwrap();
            assert!(c.is_none(), "{off}");
        }
        assert!(sc(dir).unwrap().is_some());
        assert!(
            sc("ozone.client.read.short-circuit = on\n")
                .unwrap()
                .is_none()
        );
        let e = sc(&format!(
            "{dir}ozone.client.read.short-circuit = sometimes\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ozone.client.read.short-circuit") && e.contains("auto"),
            "{e}"
        );
    }
}
