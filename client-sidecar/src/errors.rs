//! Sidecar errors, and client errors as the gRPC statuses the application
//! sees.

use ozone_client::ClientError;
use ozone_common::config::ConfigError;
use tonic::Status;

/// A sidecar that cannot start or reload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SidecarError {
    /// A config value is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// A client error as a gRPC status.
pub(crate) fn status(e: ClientError) -> Status {
    let m = e.to_string();
    match e {
        ClientError::NotFound(_) => Status::not_found(m),
        ClientError::AlreadyExists(_) => Status::already_exists(m),
        ClientError::InvalidArgument(_) | ClientError::Name(_) | ClientError::Config(_) => {
            Status::invalid_argument(m)
        }
        ClientError::OutOfRange { .. } => Status::out_of_range(m),
        ClientError::Precondition(_) => Status::failed_precondition(m),
        ClientError::Exhausted(_) => Status::resource_exhausted(m),
        ClientError::Unavailable(_) | ClientError::AllReplicasFailed { .. } => {
            Status::unavailable(m)
        }
        ClientError::Checksum(_) => Status::data_loss(m),
        ClientError::Rpc { code, message } => Status::new(code, message),
        _ => Status::internal(m),
    }
}
