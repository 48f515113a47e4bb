//! The Ozone client library: volumes, buckets and keys over gRPC, directly
//! ([`Client`]) or through a co-located sidecar ([`SidecarClient`]), both
//! behind the traits of [`prelude`].
//!
//! ```no_run
//! # async fn demo() -> ozone_client::Result<()> {
//! use ozone_client::prelude::*;
//! use ozone_client::{Client, ClientConfig};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:9862"))?;
//! let path = KeyPath::new("vol", "bucket", "key");
//! let mut w = client.create_key(path).await?;
//! w.write(b"hello").await?;
//! w.close().await?;
//! let r = client.open_key(path).await?;
//! let mut buf = [0u8; 5];
//! r.read_exact_at(0, &mut buf).await?;
//! # Ok(()) }
//! ```

mod api;
mod config;
mod counter;
mod deadline;
mod direct;
mod error;
mod file_checksum;
mod namespace;
mod om;
mod pool;
mod reader;
mod replicas;
mod shortcircuit;
mod sidecar;
mod stats;
mod visible;
mod write_stream;
mod writer;

pub use api::{FsAccess, KeyAccess, KeyRead, KeyWrite};
pub use config::ClientConfig;
pub use direct::Client;
pub use error::{ClientError, Result};
pub use file_checksum::FileChecksum;
pub use om::{DRAINING, Om, RawCodec};
pub use ozone_common::names::KeyPath;
pub use reader::KeyReader;
pub use shortcircuit::{DnConn, ScError};
pub use sidecar::{SidecarClient, SidecarReader, SidecarWriter};
pub use stats::{ReadStats, ReadStatsSnapshot};
pub use writer::KeyWriter;

/// The traits of the client API and the path type, for `use ozone_client::prelude::*`.
pub mod prelude {
    pub use crate::api::{FsAccess, KeyAccess, KeyRead, KeyWrite};
    pub use ozone_common::names::KeyPath;
}
