//! HTTP/2 settings shared by every gRPC client and server of the project.
//!
//! HTTP/2's default flow-control window is 64 KiB: a 64 KiB read reply would
//! stall for a WINDOW_UPDATE round trip on every response. Data-plane
//! connections use larger windows.

/// Per-stream flow-control window (bytes).
pub const STREAM_WINDOW: u32 = 8 << 20;
/// Per-connection flow-control window (bytes).
pub const CONNECTION_WINDOW: u32 = 32 << 20;
