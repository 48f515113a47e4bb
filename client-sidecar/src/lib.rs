//! `ozone-sidecar`: runs in a workload pod beside the application. It alone
//! mounts the node's datanode socket directory, reads local replicas
//! short-circuit, and serves the application over a UNIX socket in a shared
//! emptyDir, under the workload's verify-checksum policy. It can also hand
//! block descriptors to the application (pass-through, see [`relay`]).

mod active;
mod authority;
pub mod cmd;
mod conn;
mod data;
mod errors;
mod metrics;
mod namespace;
mod peer;
pub mod policy;
mod relay;
mod service;
mod state;
