//! Local clusters of real processes and what tests build on them:
//!
//! - `local`: one OM, N datanodes and sidecars as child processes of the
//!   `ozone` binary, all state under one directory (`ozone local up`, the
//!   tests, the benchmarks);
//! - `data`: deterministic test data;
//! - `harness`: the tests' helpers over a local cluster (clients, block
//!   files, metrics, the `ozone` command);
//! - binary `ozone-test-child`: processes a test starts and kills (a WAL
//!   writer that hsyncs and waits to be SIGKILLed).

pub mod data;
pub mod harness;
pub mod local;
