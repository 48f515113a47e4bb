//! The workload policy in force and the client built to apply it.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use ozone_client::{Client, ClientConfig, ReadStatsSnapshot};
use ozone_common::config::Conf;
use ozone_proto::SidecarPolicy;

use crate::errors::SidecarError;
use crate::policy::Policy;

/// The policy in force and the client that applies it.
pub(crate) struct Active {
    /// The sidecar's own part of the policy.
    pub policy: Policy,
    /// The client, which holds the verify-checksum and short-circuit
    /// settings.
    pub client: Client,
    /// When it was loaded (seconds since the epoch).
    pub loaded_at: u64,
    /// Client counters already exported.
    pub(crate) exported: Mutex<ReadStatsSnapshot>,
}

impl Active {
    /// Builds the client for `conf`'s policy against the OM at `om`, on
    /// node `node` (local-first placement and reads).
    pub(crate) fn build(om: &str, node: Option<&str>, conf: &Conf) -> Result<Self, SidecarError> {
        let policy = Policy::from_conf(conf)?;
        let mut cfg = ClientConfig::from_conf(om, conf)?;
        cfg.node_name = node.filter(|n| !n.is_empty()).map(str::to_string);
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

    /// The verify-checksum setting of streams that ask for none.
    pub(crate) fn verify_checksum(&self) -> bool {
        self.client.verify_checksum()
    }

    /// Whether `other` enforces the same policy.
    pub(crate) fn same_policy(&self, other: &Active) -> bool {
        self.policy == other.policy
            && self.verify_checksum() == other.verify_checksum()
            && self.client.config().short_circuit_mode == other.client.config().short_circuit_mode
    }

    /// The verify setting of a stream that asks for `asked`; `Err` says why
    /// it is refused.
    pub(crate) fn stream_verify(&self, asked: Option<bool>) -> Result<bool, String> {
        self.policy.stream_verify(self.verify_checksum(), asked)
    }

    pub(crate) fn proto(&self, node: &str) -> SidecarPolicy {
        SidecarPolicy {
            verify_checksum: self.verify_checksum(),
            allow_verify_override: self.policy.allow_verify_override,
            short_circuit: self.client.config().short_circuit_mode.as_str().into(),
            passthrough: self.policy.passthrough,
            node_name: node.into(),
            loaded_at: self.loaded_at,
        }
    }
}
