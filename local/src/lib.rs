//! Local clusters of real processes:
//!
//! - [`LocalCluster`]: one OM, N datanodes and sidecars as child processes
//!   of the `ozone` binary, all state under one directory (`ozone local
//!   up`, `ozone demo`, the tests, the benchmarks);
//! - [`data`]: deterministic data (what the demo writes and checks).

mod cluster;
pub mod data;

pub use cluster::*;
