//! The Ozone datanode: block storage with window checksums, the gRPC
//! service over it, replica copies between datanodes, and registration
//! (with replica reports) with the OM.

pub mod block_key;
pub mod cmd;
pub mod config;
pub mod metrics;
pub mod prepare;
pub mod replication;
pub mod scanner;
pub mod server;
pub mod service;
pub mod shortcircuit;
pub mod slots;
pub mod socket_path;
pub mod storage;

pub use config::DatanodeConfig;
pub use server::{DatanodeHandle, StartError, start};
