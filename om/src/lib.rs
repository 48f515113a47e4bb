//! The Ozone Manager: volumes, buckets and keys; block allocation and
//! replica placement; the datanode registry; block deletion.

pub mod cmd;
pub mod deletion;
pub mod fs;
pub mod group_commit;
pub mod metrics;
pub mod placement;
pub mod registry;
pub mod server;
pub mod service;
pub mod store;

pub use server::{OmConfig, OmHandle, StartError, start};
