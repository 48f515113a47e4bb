//! Block storage: one file per block under the data directories
//! ([`layout`]), a crash-safe table of committed blocks ([`meta`]), and the
//! store that writes, commits, reads and deletes them ([`store`]), and the
//! changes waiting for the next replica report ([`report`]). Block
//! checksums are checked with `ozone_common::integrity`.

pub mod error;
pub mod layout;
pub mod meta;
pub mod report;
pub mod store;

pub use error::StorageError;
pub use store::{BlockStore, LocalReplica, ScanOutcome};
