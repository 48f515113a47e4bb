//! Prometheus metrics of the OM.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Label of per-method counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// gRPC method.
    pub op: &'static str,
}

/// OM counters.
#[derive(Default)]
pub struct Metrics {
    /// Requests by method.
    pub ops: Family<OpLabel, Counter>,
    /// Failed requests by method.
    pub errors: Family<OpLabel, Counter>,
    /// Keys committed.
    pub keys_committed: Counter,
    /// Blocks allocated.
    pub blocks_allocated: Counter,
    /// Bad replicas reported by clients.
    pub bad_replicas_reported: Counter,
    /// Block replicas deleted on datanodes.
    pub replicas_deleted: Counter,
}

impl Metrics {
    /// Registers every metric under the `ozone_om` prefix.
    pub fn register(&self, reg: &mut Registry) {
        let r = reg.sub_registry_with_prefix("ozone_om");
        r.register("ops", "Requests by method", self.ops.clone());
        r.register("errors", "Failed requests by method", self.errors.clone());
        r.register(
            "keys_committed",
            "Keys committed",
            self.keys_committed.clone(),
        );
        r.register(
            "blocks_allocated",
            "Blocks allocated",
            self.blocks_allocated.clone(),
        );
        r.register(
            "bad_replicas_reported",
            "Bad replicas reported by clients",
            self.bad_replicas_reported.clone(),
        );
        r.register(
            "replicas_deleted",
            "Block replicas deleted on datanodes",
            self.replicas_deleted.clone(),
        );
    }
}
