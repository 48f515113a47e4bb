//! Datanode settings, from the command line and Ozone config keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ozone_common::config::{self as keys, Conf, ConfigError};

use crate::shortcircuit::ShortCircuitConfig;

/// Everything a datanode needs to start.
#[derive(Debug, Clone)]
pub struct DatanodeConfig {
    /// Directories holding block files.
    pub data_dirs: Vec<PathBuf>,
    /// Directory of the metadata table and the datanode id.
    pub metadata_dir: PathBuf,
    /// gRPC listen address (port 0 picks a free port).
    pub grpc_bind: SocketAddr,
    /// HTTP (health, metrics) listen address.
    pub http_bind: SocketAddr,
    /// Host advertised to the OM; defaults to the bind IP, then the host
    /// name (the binary passes `POD_IP`).
    pub advertise_host: Option<String>,
    /// OM gRPC address, host:port.
    pub om_address: String,
    /// Node the datanode runs on (the binary passes `NODE_NAME`).
    pub node_name: String,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Check the checksums of every WriteChunk.
    pub verify_writes: bool,
    /// Largest gRPC message, bytes.
    pub max_message_size: usize,
    /// Short-circuit socket settings (off when `None`).
    pub short_circuit: Option<ShortCircuitConfig>,
    /// Block-token secret (tokens checked when set).
    pub block_token_secret: Option<Vec<u8>>,
    /// Background scan of the replicas (off when `None`).
    pub scan: Option<crate::scanner::ScanConfig>,
    /// Replica copies asked by the OM.
    pub replication: crate::replication::ReplicationConfig,
    /// Period of the full replica report.
    pub full_report_interval: Duration,
    /// TLS on the gRPC port and to the OM and other datanodes.
    pub tls: Option<ozone_common::tls::Tls>,
}

impl DatanodeConfig {
    /// Settings for a datanode rooted at `dir` (data in `dir/data`, metadata
    /// in `dir/meta`), on loopback with free ports, other values from `conf`.
    pub fn for_dir(
        dir: &Path,
        om_address: &str,
        node_name: &str,
        conf: &Conf,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            data_dirs: vec![dir.join("data")],
            metadata_dir: dir.join("meta"),
            grpc_bind: "127.0.0.1:0".parse().expect("addr"),
            http_bind: "127.0.0.1:0".parse().expect("addr"),
            advertise_host: None,
            om_address: om_address.to_string(),
            node_name: node_name.to_string(),
            heartbeat_interval: conf.value(&keys::HEARTBEAT_INTERVAL)?,
            verify_writes: conf.value(&keys::DATANODE_VERIFY_WRITES)?,
            max_message_size: conf.value(&keys::MAX_MESSAGE_SIZE)?.0 as usize,
            short_circuit: short_circuit_config(conf)?,
            block_token_secret: conf.block_token_secret()?,
            scan: conf
                .value(&keys::SCRUB_ENABLED)?
                .then(|| {
                    Ok::<_, ConfigError>(crate::scanner::ScanConfig {
                        interval: conf.value(&keys::SCRUB_INTERVAL)?,
                        bytes_per_sec: conf.value(&keys::SCRUB_BYTES_PER_SECOND)?.0.max(1),
                    })
                })
                .transpose()?,
            replication: crate::replication::ReplicationConfig {
                streams: conf.value(&keys::REPLICATION_STREAMS)?.clamp(1, 1024) as usize,
                bytes_per_sec: conf.value(&keys::REPLICATION_BYTES_PER_SECOND)?.0,
            },
            full_report_interval: conf.value(&keys::CONTAINER_REPORT_INTERVAL)?,
            tls: conf.tls(true)?,
        })
    }
}

/// Short-circuit settings from `conf` (`None` without a socket path).
pub(crate) fn short_circuit_config(conf: &Conf) -> Result<Option<ShortCircuitConfig>, ConfigError> {
    let Some(dir) = conf.opt(&keys::DOMAIN_SOCKET_PATH)? else {
        return Ok(None);
    };
    let slots = conf.value(&keys::DOMAIN_SOCKET_SLOTS)?;
    if !(1..=1 << 20).contains(&slots) {
        return Err(ConfigError::Value {
            key: keys::DOMAIN_SOCKET_SLOTS.name.into(),
            value: slots.to_string(),
            why: "must be 1 to 1048576".into(),
        });
    }
    Ok(Some(ShortCircuitConfig {
        dir,
        skip_security_check: conf.value(&keys::DOMAIN_SOCKET_SKIP_CHECK)?,
        max_connections: conf.value(&keys::DOMAIN_SOCKET_MAX_CONNECTIONS)? as usize,
        max_connections_per_uid: conf.value(&keys::DOMAIN_SOCKET_MAX_CONNECTIONS_PER_UID)? as usize,
        slots_per_connection: slots as u32,
        allowed_uids: conf.value(&keys::DOMAIN_SOCKET_ALLOWED_UIDS)?.0,
        allowed_gids: conf.value(&keys::DOMAIN_SOCKET_ALLOWED_GIDS)?.0,
    }))
}

/// The host name, the node name when none is given.
pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}
