//! Datanode settings, from the command line and Ozone config keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ozone_common::config::{self as keys, Conf, ConfigError};

use crate::shortcircuit::ShortCircuitConfig;

/// Data directories, comma separated (Ozone: `hdds.datanode.dir`).
pub const DATA_DIRS: &str = "hdds.datanode.dir";
/// Metadata directory (Ozone: `ozone.metadata.dirs`).
pub const METADATA_DIRS: &str = "ozone.metadata.dirs";

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
    /// Host advertised to the OM; defaults to `POD_IP`, then the bind IP,
    /// then the host name.
    pub advertise_host: Option<String>,
    /// OM gRPC address, host:port.
    pub om_address: String,
    /// Node the datanode runs on (`NODE_NAME`).
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
            heartbeat_interval: conf.duration(keys::HEARTBEAT_INTERVAL, Duration::from_secs(3))?,
            verify_writes: conf.bool(keys::DATANODE_VERIFY_WRITES, true)?,
            max_message_size: conf.size(keys::MAX_MESSAGE_SIZE, 64 << 20)? as usize,
            short_circuit: short_circuit_config(conf)?,
            block_token_secret: conf.block_token_secret()?,
        })
    }
}

/// Short-circuit settings from `conf` (`None` without a socket path).
pub fn short_circuit_config(conf: &Conf) -> Result<Option<ShortCircuitConfig>, ConfigError> {
    let Some(dir) = conf.get(keys::DOMAIN_SOCKET_PATH).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(ShortCircuitConfig {
        dir: PathBuf::from(dir),
        skip_security_check: conf.bool(keys::DOMAIN_SOCKET_SKIP_CHECK, false)?,
        max_connections: conf.size("ozone.domain.socket.max.connections", 256)? as usize,
        slots_per_connection: conf
            .size("ozone.domain.socket.slots.per.connection", 4096)?
            .clamp(1, 1 << 20) as u32,
        allowed_uids: conf.u32_list("ozone.domain.socket.allowed.uids")?,
        allowed_gids: conf.u32_list("ozone.domain.socket.allowed.gids")?,
    }))
}

/// The node name: `NODE_NAME`, else the host name.
pub fn default_node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into())
        })
}
