//! Prometheus metrics of a sidecar.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::active::Active;

/// Labels of a read.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReadLabels {
    /// `read`, `stream` or `verified` (a verified re-read).
    pub kind: &'static str,
    /// Whether checksums were verified.
    pub verify: &'static str,
}

/// Labels of bytes by path.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PathLabels {
    /// `short-circuit`, `grpc-local` or `grpc-remote`.
    pub path: &'static str,
}

/// Labels of read streams opened.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OpenLabels {
    /// Whether the stream verifies checksums (the workload's policy and
    /// its request together): also how the application's pass-through
    /// reads of the stream verify.
    pub verify: &'static str,
}

/// Labels of pass-through connections.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PassLabels {
    /// `relayed` or `refused`.
    pub result: &'static str,
}

/// Labels of OM calls passed on.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OmCallLabels {
    /// The gRPC status code of the answer (`Ok`, `NotFound`, ...).
    pub code: String,
}

/// Labels of connections refused for their peer's uid.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SocketLabels {
    /// `grpc`, `data` or `relay`.
    pub socket: &'static str,
}

/// Labels of streams the sidecar closed itself.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReapLabels {
    /// `connection` (its application's connection went) or `idle`.
    pub reason: &'static str,
}

/// The policy in force, as labels of a gauge set to 1.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabels {
    /// Default verify-checksum.
    pub verify_checksum: String,
    /// Whether streams may override it.
    pub allow_verify_override: String,
    /// on, auto or off.
    pub short_circuit: String,
    /// Descriptor pass-through allowed.
    pub passthrough: String,
}

/// Every metric of a sidecar.
#[derive(Clone)]
pub(crate) struct Metrics {
    /// Reads served, by kind and verification.
    pub reads: Family<ReadLabels, Counter>,
    /// Read latency in seconds, by kind and verification.
    pub latency: Family<ReadLabels, Histogram>,
    /// Bytes read, by path (from the client's counters).
    pub bytes: Family<PathLabels, Counter>,
    /// Short-circuit reads that fell back to gRPC.
    pub fallbacks: Counter,
    /// Checksum failures found (each reported to the OM).
    pub checksum_failures: Counter,
    /// Requests refused by the policy.
    pub policy_denials: Counter,
    /// Requests refused while draining.
    pub drain_refusals: Counter,
    /// Read streams opened, by verification.
    pub opens: Family<OpenLabels, Counter>,
    /// OM calls passed on for the application, by answer.
    pub om_calls: Family<OmCallLabels, Counter>,
    /// Pass-through connections.
    pub passthrough: Family<PassLabels, Counter>,
    /// Descriptors relayed to applications (block files and slot segments).
    pub passthrough_fds: Counter,
    /// Connections refused for their peer's uid, by socket.
    pub connections_refused: Family<SocketLabels, Counter>,
    /// Open read streams.
    pub open_streams: Gauge,
    /// Open write streams.
    pub open_writers: Gauge,
    /// Streams closed by the sidecar, by reason.
    pub reaped: Family<ReapLabels, Counter>,
    /// Policy reloads.
    pub reloads: Counter,
    /// The policy in force.
    pub policy: Family<PolicyLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reads: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_02, 2.0, 18))
            }),
            bytes: Family::default(),
            fallbacks: Counter::default(),
            checksum_failures: Counter::default(),
            policy_denials: Counter::default(),
            drain_refusals: Counter::default(),
            opens: Family::default(),
            om_calls: Family::default(),
            passthrough: Family::default(),
            passthrough_fds: Counter::default(),
            connections_refused: Family::default(),
            open_streams: Gauge::default(),
            open_writers: Gauge::default(),
            reaped: Family::default(),
            reloads: Counter::default(),
            policy: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under `ozone_sidecar`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ozone_sidecar");
        r.register("reads", "Reads served", self.reads.clone());
        r.register("read_latency_seconds", "Read latency", self.latency.clone());
        r.register("read_bytes", "Bytes read by path", self.bytes.clone());
        r.register(
            "short_circuit_fallbacks",
            "Short-circuit reads that fell back to gRPC",
            self.fallbacks.clone(),
        );
        r.register(
            "checksum_failures",
            "Checksum failures found and reported",
            self.checksum_failures.clone(),
        );
        r.register(
            "policy_denials",
            "Requests refused by the workload policy",
            self.policy_denials.clone(),
        );
        r.register(
            "drain_refusals",
            "Requests refused while draining",
            self.drain_refusals.clone(),
        );
        r.register(
            "stream_opens",
            "Read streams opened, by whether they verify checksums",
            self.opens.clone(),
        );
        r.register(
            "om_calls",
            "Calls of the OM's service passed on for the application, by status code",
            self.om_calls.clone(),
        );
        r.register(
            "passthrough_connections",
            "Pass-through connections",
            self.passthrough.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused because their peer's uid is not allowed, by socket",
            self.connections_refused.clone(),
        );
        r.register(
            "passthrough_descriptors",
            "Descriptors relayed to applications: block files and slot segments",
            self.passthrough_fds.clone(),
        );
        r.register(
            "open_streams",
            "Open read streams",
            self.open_streams.clone(),
        );
        r.register(
            "open_writers",
            "Open write streams",
            self.open_writers.clone(),
        );
        r.register(
            "streams_reaped",
            "Streams closed by the sidecar: their connection went, or they were idle",
            self.reaped.clone(),
        );
        r.register("policy_reloads", "Policy reloads", self.reloads.clone());
        r.register(
            "policy",
            "The workload policy in force",
            self.policy.clone(),
        );
    }

    /// Shows `a`'s policy as the one in force.
    pub(crate) fn set_policy(&self, a: &Active) {
        self.policy.clear();
        self.policy
            .get_or_create(&PolicyLabels {
                verify_checksum: a.verify_checksum().to_string(),
                allow_verify_override: a.policy.allow_verify_override.to_string(),
                short_circuit: a.client.config().short_circuit_mode.as_str().into(),
                passthrough: a.policy.passthrough.to_string(),
            })
            .set(1);
    }
}
