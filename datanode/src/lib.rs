//! The Ozone datanode: block storage with window checksums, the gRPC
//! service over it, replica copies between datanodes, and registration
//! (with replica reports) with the OM.

pub mod cmd;
mod config;
mod metrics;
pub mod prepare;
mod replication;
mod scanner;
mod server;
mod service;
mod shortcircuit;
mod slots;
pub mod socket_path;
mod storage;
mod uid_limit;

pub use config::DatanodeConfig;
pub use server::{DatanodeHandle, StartError, start};
