//! Errors of OM operations, and of its database with their sources kept.

/// Errors of OM operations, mapped to gRPC codes by the service.
#[derive(Debug, thiserror::Error)]
pub enum OmError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    /// The path is in a state that forbids the operation (not empty, not a
    /// directory, being written, wrong bucket layout).
    #[error("{0}")]
    Precondition(String),
    /// A space or namespace quota would be passed.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The database failed.
    #[error("metadata store: {0}")]
    Meta(#[from] StoreError),
    /// A task the call waited for died (a panic in a blocking section).
    #[error("OM task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A failure of the OM database, with its source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb failed (I/O, a corrupt file, a table of another type).
    #[error(transparent)]
    Db(#[from] redb::Error),
    /// A stored row does not decode.
    #[error("undecodable row: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The database's directory could not be made.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// `?` on every redb error type inside the OM's calls.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for OmError {
            fn from(e: $t) -> Self {
                OmError::Meta(StoreError::Db(e.into()))
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

impl From<prost::DecodeError> for OmError {
    fn from(e: prost::DecodeError) -> Self {
        OmError::Meta(StoreError::Decode(e))
    }
}

impl From<std::io::Error> for OmError {
    fn from(e: std::io::Error) -> Self {
        OmError::Meta(StoreError::Io(e))
    }
}
