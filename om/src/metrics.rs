//! Prometheus metrics of the OM.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of per-method counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OpLabel {
    /// gRPC method.
    pub op: &'static str,
}

/// OM counters.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Requests by method.
    pub ops: Family<OpLabel, Counter>,
    /// Failed requests by method.
    pub errors: Family<OpLabel, Counter>,
    /// Keys committed.
    pub keys_committed: Counter,
    /// Blocks allocated.
    pub blocks_allocated: Counter,
    /// Bad replicas reported by clients and datanodes.
    pub bad_replicas_reported: Counter,
    /// Readers' reports the datanode's check confirmed (replica damaged).
    pub bad_replica_reports_confirmed: Counter,
    /// Readers' reports the datanode's check did not confirm.
    pub bad_replica_reports_unconfirmed: Counter,
    /// Block replicas deleted on datanodes.
    pub replicas_deleted: Counter,
    /// Blocks with too few healthy replicas (last pass).
    pub under_replicated: Gauge,
    /// Blocks with too many replicas (last pass).
    pub over_replicated: Gauge,
    /// Blocks with two replicas on one node (last pass).
    pub mis_replicated: Gauge,
    /// Blocks with no healthy replica (last pass).
    pub missing: Gauge,
    /// Replica copies in flight.
    pub copies_in_flight: Gauge,
    /// Replica copies done.
    pub copies_done: Counter,
    /// Replica copies that failed.
    pub copies_failed: Counter,
    /// Bytes copied between datanodes.
    pub bytes_copied: Counter,
    /// Passes of the replication manager.
    pub replication_passes: Counter,
    /// Open write sessions (last cleanup pass).
    pub open_keys: Gauge,
    /// Write sessions dropped by the open-key cleanup.
    pub open_keys_aborted: Counter,
    /// Files closed at their synced length by the lease hard limit.
    pub open_keys_lease_closed: Counter,
    /// Calls refused for missing or bad credentials.
    pub auth_failures: Counter,
    /// Calls refused for want of rights.
    pub permission_denials: Counter,
}

impl Metrics {
    /// Registers every metric under the `ozone_om` prefix.
    pub(crate) fn register(&self, reg: &mut Registry) {
        let r = reg.sub_registry_with_prefix("ozone_om");
        r.register("ops", "Requests by method", self.ops.clone());
        r.register(
            "open_keys",
            "Open write sessions (last cleanup pass)",
            self.open_keys.clone(),
        );
        r.register(
            "open_keys_aborted",
            "Write sessions dropped by the open-key cleanup",
            self.open_keys_aborted.clone(),
        );
        r.register(
            "open_keys_lease_closed",
            "Files closed at their synced length by the lease hard limit",
            self.open_keys_lease_closed.clone(),
        );
        r.register("errors", "Failed requests by method", self.errors.clone());
        r.register(
            "auth_failures",
            "Calls refused for missing or bad credentials",
            self.auth_failures.clone(),
        );
        r.register(
            "permission_denials",
            "Calls refused for want of rights",
            self.permission_denials.clone(),
        );
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
            "Bad replicas reported by clients and datanodes",
            self.bad_replicas_reported.clone(),
        );
        r.register(
            "bad_replica_reports_confirmed",
            "Readers' bad-replica reports a datanode's check confirmed",
            self.bad_replica_reports_confirmed.clone(),
        );
        r.register(
            "bad_replica_reports_unconfirmed",
            "Readers' bad-replica reports a datanode's check found healthy or gone",
            self.bad_replica_reports_unconfirmed.clone(),
        );
        r.register(
            "replicas_deleted",
            "Block replicas deleted on datanodes",
            self.replicas_deleted.clone(),
        );
        let gauges = [
            (
                "under_replicated_blocks",
                "Blocks with too few healthy replicas",
                &self.under_replicated,
            ),
            (
                "over_replicated_blocks",
                "Blocks with more replicas than their replication",
                &self.over_replicated,
            ),
            (
                "mis_replicated_blocks",
                "Blocks with two replicas on one node",
                &self.mis_replicated,
            ),
            (
                "missing_blocks",
                "Blocks with no healthy replica left",
                &self.missing,
            ),
            (
                "replication_copies_in_flight",
                "Replica copies in flight",
                &self.copies_in_flight,
            ),
        ];
        for (name, help, g) in gauges {
            r.register(name, help, g.clone());
        }
        let counters = [
            (
                "replication_copies",
                "Replica copies done",
                &self.copies_done,
            ),
            (
                "replication_copy_failures",
                "Replica copies that failed",
                &self.copies_failed,
            ),
            (
                "replication_copied_bytes",
                "Bytes copied between datanodes",
                &self.bytes_copied,
            ),
            (
                "replication_passes",
                "Passes of the replication manager",
                &self.replication_passes,
            ),
        ];
        for (name, help, c) in counters {
            r.register(name, help, c.clone());
        }
    }
}
