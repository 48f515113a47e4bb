//! The Ozone Manager: volumes, buckets and keys; block allocation and
//! replica placement; the datanode registry; replica reports and the
//! replication manager; block deletion.

mod auth;
mod bad_reports;
mod block_recovery;
pub mod cmd;
mod deletion;
mod dn_channels;
mod metrics;
mod open_keys;
mod placement;
mod registry;
mod replica_map;
mod replication;
mod server;
mod service;
mod store;

pub use server::{OmConfig, OmHandle, SecurityConfig, StartError, start};
