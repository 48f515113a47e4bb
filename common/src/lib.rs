//! Pieces shared by every Ozone process: checksums, configuration, names,
//! the HTTP health/metrics endpoint and logging setup.

pub mod block_key;
pub mod checksum;
pub mod config;
pub mod exit;
pub mod grpc;
pub mod http;
pub mod integrity;
pub mod logging;
pub mod names;
pub mod server;
pub mod shortcircuit;
pub mod signal;
pub mod token;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
