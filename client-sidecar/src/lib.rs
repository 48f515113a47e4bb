//! `ozone-sidecar`: runs in a workload pod beside the application. It alone
//! mounts the node's datanode socket directory, reads local replicas
//! short-circuit, and serves the application over a UNIX socket in a shared
//! emptyDir, under the workload's verify-checksum policy. It can also hand
//! block descriptors to the application (pass-through, see [`relay`]).

pub mod active;
pub mod authority;
pub mod cmd;
pub mod conn;
pub mod data;
pub mod errors;
pub mod metrics;
pub mod peer;
pub mod policy;
pub mod relay;
pub mod service;
pub mod state;
