//! Read counters of a client.

use std::sync::atomic::AtomicU64;

/// Read counters of a client (shared by every stream it opened).
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Bytes read from a replica on this client's node.
    pub local_bytes: crate::counter::Counter,
    /// Bytes read from replicas on other nodes.
    pub remote_bytes: AtomicU64,
    /// Checksum mismatches found (each reported to the OM).
    pub checksum_failures: AtomicU64,
    /// Reads moved to another replica.
    pub failovers: AtomicU64,
    /// Bytes checksummed by verifying reads (requested bytes plus widening).
    pub checksummed_bytes: AtomicU64,
}

/// A snapshot of [`ReadStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadStatsSnapshot {
    pub local_bytes: u64,
    pub remote_bytes: u64,
    pub checksum_failures: u64,
    pub failovers: u64,
    /// Bytes checksummed by verifying reads (requested bytes plus widening).
    pub checksummed_bytes: u64,
    /// Bytes read through short-circuit (also counted in `local_bytes`).
    pub short_circuit_bytes: u64,
    /// Of those, bytes copied out of a mapping of the block file (the rest
    /// were read with `pread`).
    pub short_circuit_mapped_bytes: u64,
    /// Block descriptors obtained over the socket.
    pub short_circuit_opens: u64,
    /// Short-circuit reads served by a cached descriptor.
    pub fd_cache_hits: u64,
    /// Short-circuit reads that opened the block first.
    pub fd_cache_misses: u64,
    /// Cached descriptors found invalidated by the datanode.
    pub invalidations: u64,
    /// Short-circuit reads that fell back to gRPC.
    pub short_circuit_fallbacks: u64,
}
