//! Prometheus metrics of the datanode.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of per-operation counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OpLabel {
    /// gRPC method name.
    pub op: &'static str,
}

/// Label of refusal counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    /// Why.
    pub reason: &'static str,
}

/// Datanode counters and gauges.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Requests by operation.
    pub ops: Family<OpLabel, Counter>,
    /// Failed requests by operation.
    pub errors: Family<OpLabel, Counter>,
    /// Bytes received by WriteChunk.
    pub bytes_written: Counter,
    /// Bytes sent by ReadChunk/ReadBlock.
    pub bytes_read: Counter,
    /// WriteChunk calls refused for a checksum mismatch.
    pub write_checksum_failures: Counter,
    /// Blocks deleted.
    pub blocks_deleted: Counter,
    /// OM commands (DeleteBlocks, ReplicateBlock) refused: unsigned, forged,
    /// expired, for another datanode, or replayed.
    pub commands_refused: Counter,
    /// Bytes in committed blocks.
    pub used_bytes: Gauge,
    /// Open short-circuit connections.
    pub sc_connections: Gauge,
    /// Block fds handed out over the short-circuit socket.
    pub sc_opens: Counter,
    /// Short-circuit slots granted and not yet released by their clients.
    pub sc_slots: Gauge,
    /// Short-circuit requests or connections refused, by reason.
    pub sc_refusals: Family<ReasonLabel, Counter>,
    /// Short-circuit slots invalidated by block deletion.
    pub sc_invalidations: Counter,
    /// Bytes read by the background scanner.
    pub scan_bytes: Counter,
    /// Replicas scanned whole.
    pub scan_blocks: Counter,
    /// Corrupt replicas found by the scanner.
    pub scan_corrupt: Counter,
    /// Replicas copied here from another datanode.
    pub replications_done: Counter,
    /// Copies that failed (every source tried).
    pub replications_failed: Counter,
    /// Bytes copied here from other datanodes.
    pub replication_bytes: Counter,
    /// Copies running now.
    pub replications_in_flight: Gauge,
}

impl Metrics {
    /// Registers every metric under the `ozone_datanode` prefix.
    pub(crate) fn register(&self, reg: &mut Registry) {
        let r = reg.sub_registry_with_prefix("ozone_datanode");
        r.register("ops", "Requests by operation", self.ops.clone());
        r.register(
            "scanner_read_bytes",
            "Bytes read by the background replica scanner",
            self.scan_bytes.clone(),
        );
        r.register(
            "scanner_replicas",
            "Replicas scanned whole by the background scanner",
            self.scan_blocks.clone(),
        );
        r.register(
            "scanner_corrupt_replicas",
            "Corrupt replicas found (and no longer served) by the scanner",
            self.scan_corrupt.clone(),
        );
        r.register(
            "replications",
            "Replicas copied here from another datanode (verified on arrival)",
            self.replications_done.clone(),
        );
        r.register(
            "replication_failures",
            "Replica copies that failed from every source",
            self.replications_failed.clone(),
        );
        r.register(
            "replication_bytes",
            "Bytes copied here from other datanodes",
            self.replication_bytes.clone(),
        );
        r.register(
            "replications_in_flight",
            "Replica copies running now",
            self.replications_in_flight.clone(),
        );
        r.register(
            "errors",
            "Failed requests by operation",
            self.errors.clone(),
        );
        r.register(
            "written_bytes",
            "Bytes received by WriteChunk",
            self.bytes_written.clone(),
        );
        r.register("read_bytes", "Bytes sent by reads", self.bytes_read.clone());
        r.register(
            "write_checksum_failures",
            "WriteChunk calls refused for a checksum mismatch",
            self.write_checksum_failures.clone(),
        );
        r.register(
            "blocks_deleted",
            "Blocks deleted",
            self.blocks_deleted.clone(),
        );
        r.register(
            "commands_refused",
            "OM commands refused: unsigned, forged, expired, for another datanode, or replayed",
            self.commands_refused.clone(),
        );
        r.register(
            "used_bytes",
            "Bytes in committed blocks",
            self.used_bytes.clone(),
        );
        r.register(
            "sc_connections",
            "Open short-circuit connections",
            self.sc_connections.clone(),
        );
        r.register(
            "sc_opens",
            "Block fds handed out over the short-circuit socket",
            self.sc_opens.clone(),
        );
        r.register(
            "sc_slots",
            "Short-circuit slots granted and not yet released",
            self.sc_slots.clone(),
        );
        r.register(
            "sc_refusals",
            "Short-circuit refusals by reason",
            self.sc_refusals.clone(),
        );
        r.register(
            "sc_invalidations",
            "Short-circuit slots invalidated by block deletion",
            self.sc_invalidations.clone(),
        );
    }
}
