//! Errors returned by the client library.

use ozone_common::checksum::ChecksumError;
use ozone_common::config::ConfigError;
use ozone_common::names::NameError;

/// A client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("read of {len} bytes at offset {offset} is past the end of a {size}-byte key")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("{0}")]
    Unavailable(String),
    /// The path's state forbids the operation (a directory not empty, a
    /// file where a directory is needed, a file being written, an
    /// object-store bucket).
    #[error("{0}")]
    Precondition(String),
    /// A quota is full, or no datanodes can take a block.
    #[error("{0}")]
    Exhausted(String),
    #[error("block {block}: every replica failed: {errors}")]
    AllReplicasFailed { block: String, errors: String },
    #[error("write failed after {attempts} block allocations: {last}")]
    WriteFailed { attempts: usize, last: String },
    #[error("checksum: {0}")]
    Checksum(#[from] ChecksumError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{code:?}: {message}")]
    Rpc { code: tonic::Code, message: String },
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Writing what was read failed (the destination's fault, not a
    /// replica's).
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        let m = s.message().to_string();
        // A plaintext client reading a TLS server's alert sees an HTTP/2
        // protocol error: say what is likely wrong.
        if s.code() == tonic::Code::Internal && m.contains("h2 protocol error") {
            return ClientError::Unavailable(format!(
                "{m}: the server does not speak plaintext gRPC; if the cluster uses TLS, \
                 set hdds.grpc.tls.enabled and hdds.grpc.tls.dir here too"
            ));
        }
        match s.code() {
            tonic::Code::NotFound => ClientError::NotFound(m),
            tonic::Code::AlreadyExists => ClientError::AlreadyExists(m),
            tonic::Code::InvalidArgument => ClientError::InvalidArgument(m),
            tonic::Code::Unavailable => ClientError::Unavailable(m),
            tonic::Code::FailedPrecondition => ClientError::Precondition(m),
            tonic::Code::ResourceExhausted => ClientError::Exhausted(m),
            code => ClientError::Rpc { code, message: m },
        }
    }
}

/// Client result.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;
