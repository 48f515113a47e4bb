//! The test kit, a dev-dependency only: the tests' helpers over a local
//! cluster (`harness`: clients, block files, metrics, the `ozone` command,
//! process groups stopped on drop), the cluster itself and its data
//! re-exported from `ozone-local`, and binary `ozone-test-child`: processes
//! a test starts and kills (a WAL writer that hsyncs and waits to be
//! SIGKILLed).

pub mod harness;
pub use ozone_local as local;
pub use ozone_local::data;
