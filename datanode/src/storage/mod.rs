//! Block storage: one file per block under the data directories
//! ([`layout`]), a crash-safe table of committed blocks ([`meta`]), and the
//! store that writes, commits, reads and deletes them ([`store`]), and the
//! changes waiting for the next replica report ([`report`]). Block
//! checksums are checked with `ozone_common::integrity`.

pub(crate) mod error;
pub(crate) mod layout;
pub(crate) mod meta;
pub(crate) mod report;
pub(crate) mod store;

pub(crate) use error::StorageError;
pub(crate) use store::{BlockStore, LocalReplica, ScanOutcome};
