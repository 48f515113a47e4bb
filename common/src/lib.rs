//! Pieces shared by every Ozone process and the client: checksums,
//! configuration, names, block tokens, the short-circuit socket protocol.
//! What only servers need is in `ozone-process`.

pub mod block_key;
pub mod checksum;
pub mod config;
pub mod credentials;
pub mod grpc;
pub mod hint;
pub mod integrity;
pub mod names;
pub mod run_index;
pub mod shortcircuit;
pub mod tls;
pub mod token;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
