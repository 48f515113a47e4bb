//! Storage errors.

use std::path::Path;

use ozone_common::checksum::ChecksumError;
use ozone_common::integrity::IntegrityError;

/// Storage errors, each mapped to a gRPC status by the service.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("block {0}:{1} not found")]
    NotFound(u64, u64),
    #[error("block {0}:{1} is already committed")]
    AlreadyCommitted(u64, u64),
    #[error("block {0}:{1} is not committed")]
    NotCommitted(u64, u64),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("range {offset}+{len} is outside block {block} of {size} bytes")]
    OutOfRange {
        block: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("checksum of written data: {0}")]
    Checksum(#[from] ChecksumError),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("metadata store: {0}")]
    Meta(String),
    /// A write continues a chunk whose earlier bytes this replica does not
    /// hold (the writer sends the chunk whole, or elsewhere).
    #[error("{0}")]
    Incomplete(String),
    /// The replica failed a scan and is no longer served.
    #[error("block {0}:{1} is corrupt on this datanode: {2}")]
    Corrupt(u64, u64, String),
}

impl From<IntegrityError> for StorageError {
    fn from(e: IntegrityError) -> Self {
        match e {
            IntegrityError::Invalid(m) => StorageError::Invalid(m),
            IntegrityError::Checksum(c) => StorageError::Checksum(c),
        }
    }
}

pub(crate) fn meta_err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Meta(e.to_string())
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.display().to_string(),
        source,
    }
}
