//! The Ozone Manager: volumes, buckets and keys; block allocation and
//! replica placement; the datanode registry; replica reports and the
//! replication manager; block deletion.

pub mod block_rows;
pub mod cmd;
pub mod deletion;
pub mod dn_channels;
pub mod fs;
pub mod group_commit;
pub mod metrics;
pub mod open_keys;
pub mod placement;
pub mod registry;
pub mod replica_map;
pub mod replication;
pub mod server;
pub mod service;
pub mod store;

pub use server::{OmConfig, OmHandle, StartError, start};
