//! Protocol buffer messages and gRPC services spoken between the OM, the
//! datanodes and clients. Generated from `proto/ozone.proto`.

#![allow(clippy::all, missing_docs)]

/// Version 1 of the wire protocol.
pub mod v1 {
    tonic::include_proto!("ozone.v1");
}

pub use v1::*;

impl BlockId {
    /// Short printable form, `container:local`.
    pub fn display(&self) -> String {
        format!("{}:{}", self.container_id, self.local_id)
    }
}
