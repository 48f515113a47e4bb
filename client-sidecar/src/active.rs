//! The workload policy in force and the client built to apply it.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use ozone_client::{Client, ClientConfig, ReadStatsSnapshot};
use ozone_common::config::Conf;
use ozone_proto::SidecarPolicy;

use crate::errors::SidecarError;
use crate::policy::{Policy, ShortCircuit};

/// The policy in force and the client that applies it.
pub struct Active {
    /// The policy.
    pub policy: Policy,
    /// Client whose defaults follow the policy.
    pub client: Client,
    /// When it was loaded (seconds since the epoch).
    pub loaded_at: u64,
    /// Client counters already exported.
    pub(crate) exported: Mutex<ReadStatsSnapshot>,
}

impl Active {
    /// Builds the client for `conf`'s policy against the OM at `om`, on
    /// node `node` (local-first placement and reads).
    pub fn build(om: &str, node: Option<&str>, conf: &Conf) -> Result<Self, SidecarError> {
        let policy = Policy::from_conf(conf)?;
        let mut cfg = ClientConfig::from_conf(om, conf)?;
        cfg.node_name = node.filter(|n| !n.is_empty()).map(str::to_string);
        cfg.verify_checksum = policy.verify_checksum;
        match policy.short_circuit {
            ShortCircuit::Off => cfg.short_circuit = None,
            ShortCircuit::On if cfg.short_circuit.is_none() => tracing::warn!(
                "short-circuit is on but no datanode socket directory is set \
                 (ozone.domain.socket.path): reads use gRPC"
            ),
            _ => {}
        }
        Ok(Self {
            policy,
            client: Client::connect(cfg)?,
            loaded_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            exported: Mutex::new(ReadStatsSnapshot::default()),
        })
    }

    pub(crate) fn proto(&self, node: &str) -> SidecarPolicy {
        SidecarPolicy {
            verify_checksum: self.policy.verify_checksum,
            allow_verify_override: self.policy.allow_verify_override,
            short_circuit: self.policy.short_circuit.as_str().into(),
            passthrough: self.policy.passthrough,
            node_name: node.into(),
            loaded_at: self.loaded_at,
        }
    }
}
