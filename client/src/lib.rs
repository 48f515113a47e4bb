//! The Ozone client library: volumes, buckets and keys over gRPC.
//!
//! ```no_run
//! # async fn demo() -> ozone_client::Result<()> {
//! use ozone_client::{Client, ClientConfig};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:9862"))?;
//! let mut w = client.create_key("vol", "bucket", "key").await?;
//! w.write(b"hello").await?;
//! w.close().await?;
//! let r = client.open_key("vol", "bucket", "key").await?;
//! let mut buf = [0u8; 5];
//! r.read_exact_at(0, &mut buf).await?;
//! # Ok(()) }
//! ```

mod access;
mod config;
mod error;
mod file_checksum;
mod fs;
mod om;
mod pool;
mod reader;
mod replicas;
mod shortcircuit;
mod sidecar;
mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ozone_proto::*;
use tokio::io::AsyncRead;

use crate::om::om_call;

pub use access::{FsAccess, KeyAccess, KeyRead};
pub use config::ClientConfig;
pub use error::{ClientError, Result};
pub use file_checksum::FileChecksum;
pub use reader::KeyReader;
pub use shortcircuit::{DnConn, ScError};
pub use sidecar::{SidecarClient, SidecarReader, SidecarWriter};
pub use writer::KeyWriter;

/// Read counters of a client (shared by every stream it opened).
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Bytes read from a replica on this client's node.
    pub local_bytes: AtomicU64,
    /// Bytes read from replicas on other nodes.
    pub remote_bytes: AtomicU64,
    /// Checksum mismatches found (each reported to the OM).
    pub checksum_failures: AtomicU64,
    /// Reads moved to another replica.
    pub failovers: AtomicU64,
    /// Bytes checksummed by verifying reads (requested bytes plus widening).
    pub checksummed_bytes: AtomicU64,
}

/// A snapshot of [`ReadStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadStatsSnapshot {
    pub local_bytes: u64,
    pub remote_bytes: u64,
    pub checksum_failures: u64,
    pub failovers: u64,
    /// Bytes checksummed by verifying reads (requested bytes plus widening).
    pub checksummed_bytes: u64,
    /// Bytes read through short-circuit (also counted in `local_bytes`).
    pub short_circuit_bytes: u64,
    /// Block descriptors obtained over the socket.
    pub short_circuit_opens: u64,
    /// Short-circuit reads served by a cached descriptor.
    pub fd_cache_hits: u64,
    /// Short-circuit reads that opened the block first.
    pub fd_cache_misses: u64,
    /// Cached descriptors found invalidated by the datanode.
    pub invalidations: u64,
    /// Short-circuit reads that fell back to gRPC.
    pub short_circuit_fallbacks: u64,
}

pub(crate) struct ClientInner {
    pub(crate) config: ClientConfig,
    pub(crate) om: om::Om,
    pub(crate) pool: pool::Pool,
    pub(crate) stats: ReadStats,
    /// Replicas found bad by this client: (container, local id) -> datanodes.
    pub(crate) bad: Mutex<HashMap<(u64, u64), Vec<String>>>,
    /// Whether `bad` holds anything (checked without its lock per read).
    pub(crate) any_bad: std::sync::atomic::AtomicBool,
    /// Short-circuit state, when enabled.
    pub(crate) sc: Option<shortcircuit::ShortCircuit>,
}

impl ClientInner {
    fn max_read(&self) -> usize {
        self.config
            .max_message_size
            .saturating_sub(1 << 20)
            .clamp(64 << 10, 16 << 20)
    }

    async fn lookup(&self, volume: &str, bucket: &str, name: &str) -> Result<KeyInfo> {
        let req = LookupKeyRequest {
            volume: volume.into(),
            bucket: bucket.into(),
            name: name.into(),
        };
        let r = om_call!(self.om, lookup_key, req)?;
        r.key
            .ok_or_else(|| ClientError::NotFound(format!("key /{volume}/{bucket}/{name}")))
    }

    async fn report_bad(&self, block: &BlockId, dn: &str, reason: &str) {
        let req = ReportBadReplicaRequest {
            block: Some(*block),
            datanode_id: dn.to_string(),
            reason: reason.to_string(),
        };
        let r = om_call!(self.om, report_bad_replica, req);
        if let Err(e) = r {
            tracing::warn!("could not report bad replica to the OM: {e}");
        }
    }
}

/// A connection to an Ozone cluster. Cheap to clone; clones share the
/// connection pool. [`with_verify_checksum`](Client::with_verify_checksum)
/// makes an instance with its own verification default.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
    verify: bool,
}

impl Client {
    /// A client for the cluster whose OM is at `config.om_address`
    /// (connections are made on first use).
    pub fn connect(config: ClientConfig) -> Result<Self> {
        let om = om::Om::new(
            &config.om_address,
            config.om_retry_timeout,
            config.max_message_size,
        )?;
        let verify = config.verify_checksum;
        let sc = config.short_circuit.clone().map(|c| {
            let name = format!(
                "pid{}@{}",
                std::process::id(),
                config.node_name.as_deref().unwrap_or("?")
            );
            shortcircuit::ShortCircuit::new(c, name)
        });
        Ok(Self {
            inner: Arc::new(ClientInner {
                sc,
                pool: pool::Pool::new(config.max_message_size),
                config,
                om,
                stats: ReadStats::default(),
                bad: Mutex::new(HashMap::new()),
                any_bad: std::sync::atomic::AtomicBool::new(false),
            }),
            verify,
        })
    }

    /// The same client with another verify-checksum default for the
    /// streams it opens (Hadoop's `FileSystem#setVerifyChecksum`).
    pub fn with_verify_checksum(&self, verify: bool) -> Self {
        Self {
            inner: self.inner.clone(),
            verify,
        }
    }

    /// This instance's verify-checksum default.
    pub fn verify_checksum(&self) -> bool {
        self.verify
    }

    /// The settings in use.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Read counters so far.
    pub fn stats(&self) -> ReadStatsSnapshot {
        let s = &self.inner.stats;
        let mut snap = ReadStatsSnapshot {
            local_bytes: s.local_bytes.load(Ordering::Relaxed),
            remote_bytes: s.remote_bytes.load(Ordering::Relaxed),
            checksum_failures: s.checksum_failures.load(Ordering::Relaxed),
            failovers: s.failovers.load(Ordering::Relaxed),
            checksummed_bytes: s.checksummed_bytes.load(Ordering::Relaxed),
            ..Default::default()
        };
        if let Some(sc) = &self.inner.sc {
            let c = &sc.stats;
            snap.short_circuit_bytes = c.bytes.load(Ordering::Relaxed);
            snap.short_circuit_opens = c.opens.load(Ordering::Relaxed);
            snap.fd_cache_hits = c.cache_hits.load(Ordering::Relaxed);
            snap.fd_cache_misses = c.cache_misses.load(Ordering::Relaxed);
            snap.invalidations = c.invalidations.load(Ordering::Relaxed);
            snap.short_circuit_fallbacks = c.fallbacks.lock().expect("lock").values().sum();
            snap.checksummed_bytes += c.checksummed_bytes.load(Ordering::Relaxed);
        }
        snap
    }

    /// Short-circuit fallbacks by reason.
    pub fn short_circuit_fallbacks(&self) -> Vec<(&'static str, u64)> {
        match &self.inner.sc {
            Some(sc) => {
                let mut v: Vec<_> = sc
                    .stats
                    .fallbacks
                    .lock()
                    .expect("lock")
                    .iter()
                    .map(|(k, v)| (*k, *v))
                    .collect();
                v.sort();
                v
            }
            None => Vec::new(),
        }
    }

    /// Block descriptors in the short-circuit cache.
    pub fn cached_block_fds(&self) -> usize {
        self.inner.sc.as_ref().map_or(0, |s| s.cached_blocks())
    }

    /// Drops every cached short-circuit descriptor.
    pub fn clear_fd_cache(&self) {
        if let Some(sc) = &self.inner.sc {
            sc.clear_cache();
        }
    }

    /// Datanodes with an open connection.
    pub fn pooled_connections(&self) -> usize {
        self.inner.pool.len()
    }

    /// Creates a volume.
    pub async fn create_volume(&self, name: &str) -> Result<VolumeInfo> {
        ozone_common::names::check_resource_name("volume", name)?;
        let req = CreateVolumeRequest { name: name.into() };
        let r = om_call!(self.inner.om, create_volume, req)?;
        Ok(r.volume.unwrap_or_default())
    }

    /// Lists volumes.
    pub async fn list_volumes(&self) -> Result<Vec<VolumeInfo>> {
        let r = self
            .inner
            .om
            .call(|mut om| async move { om.list_volumes(ListVolumesRequest {}).await })
            .await?;
        Ok(r.volumes)
    }

    /// Creates a bucket in a volume.
    pub async fn create_bucket(&self, volume: &str, name: &str) -> Result<BucketInfo> {
        self.create_bucket_with_layout(volume, name, BucketLayout::ObjectStore)
            .await
    }

    /// Creates a bucket with the given layout (`FILE_SYSTEM_OPTIMIZED` for
    /// directories, rename and the file-system calls).
    pub async fn create_bucket_with_layout(
        &self,
        volume: &str,
        name: &str,
        layout: BucketLayout,
    ) -> Result<BucketInfo> {
        ozone_common::names::check_resource_name("volume", volume)?;
        ozone_common::names::check_resource_name("bucket", name)?;
        let req = CreateBucketRequest {
            volume: volume.into(),
            name: name.into(),
            layout: layout as i32,
        };
        let r = om_call!(self.inner.om, create_bucket, req)?;
        Ok(r.bucket.unwrap_or_default())
    }

    /// Lists the buckets of a volume.
    pub async fn list_buckets(&self, volume: &str) -> Result<Vec<BucketInfo>> {
        let req = ListBucketsRequest {
            volume: volume.into(),
        };
        let r = om_call!(self.inner.om, list_buckets, req)?;
        Ok(r.buckets)
    }

    /// Lists keys of a bucket whose names start with `prefix` (all pages).
    pub async fn list_keys(
        &self,
        volume: &str,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<KeyInfo>> {
        let mut out: Vec<KeyInfo> = Vec::new();
        loop {
            let req = ListKeysRequest {
                volume: volume.into(),
                bucket: bucket.into(),
                prefix: prefix.into(),
                start_after: out.last().map(|k| k.name.clone()).unwrap_or_default(),
                limit: 1000,
            };
            let r = om_call!(self.inner.om, list_keys, req)?;
            let n = r.keys.len();
            out.extend(r.keys);
            if n < 1000 {
                return Ok(out);
            }
        }
    }

    /// Metadata of a committed key, with block locations.
    pub async fn key_info(&self, volume: &str, bucket: &str, name: &str) -> Result<KeyInfo> {
        self.inner.lookup(volume, bucket, name).await
    }

    /// The composite CRC of a whole key, from block metadata only (the
    /// same for any bytes-per-checksum the key was written with).
    pub async fn key_checksum(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
    ) -> Result<file_checksum::FileChecksum> {
        let key = self.inner.lookup(volume, bucket, name).await?;
        file_checksum::compute(&self.inner, &key).await
    }

    /// Deletes a key.
    pub async fn delete_key(&self, volume: &str, bucket: &str, name: &str) -> Result<()> {
        let req = DeleteKeyRequest {
            volume: volume.into(),
            bucket: bucket.into(),
            name: name.into(),
        };
        om_call!(self.inner.om, delete_key, req)?;
        Ok(())
    }

    /// Datanodes known to the OM.
    pub async fn list_datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        let r = self
            .inner
            .om
            .call(|mut om| async move { om.list_datanodes(ListDatanodesRequest {}).await })
            .await?;
        Ok(r.datanodes)
    }

    /// Sets the operational state of the datanode known as `datanode` (id,
    /// address, host or pod name): DECOMMISSIONING, IN_MAINTENANCE or
    /// IN_SERVICE. Returns its details after the change.
    pub async fn set_operational_state(
        &self,
        datanode: &str,
        state: OperationalState,
    ) -> Result<DatanodeDetails> {
        let datanode = datanode.to_string();
        let r = self
            .inner
            .om
            .call(|mut om| {
                let datanode = datanode.clone();
                async move {
                    om.set_operational_state(SetOperationalStateRequest {
                        datanode,
                        state: state as i32,
                    })
                    .await
                }
            })
            .await?;
        r.datanode.ok_or_else(|| ClientError::Rpc {
            code: tonic::Code::Internal,
            message: "the OM sent no datanode".into(),
        })
    }

    /// A datanode's state and the replicas that still depend on it.
    pub async fn datanode_status(&self, datanode: &str) -> Result<DatanodeStatusResponse> {
        let datanode = datanode.to_string();
        self.inner
            .om
            .call(|mut om| {
                let datanode = datanode.clone();
                async move { om.datanode_status(DatanodeStatusRequest { datanode }).await }
            })
            .await
    }

    /// The replication manager's last pass: counts by state and the `top`
    /// blocks at most risk.
    pub async fn replication_status(&self, top: u32) -> Result<ReplicationStatusResponse> {
        self.inner
            .om
            .call(|mut om| async move {
                om.replication_status(ReplicationStatusRequest { top })
                    .await
            })
            .await
    }

    /// Starts writing a key (replacing any key of that name on close).
    pub async fn create_key(&self, volume: &str, bucket: &str, name: &str) -> Result<KeyWriter> {
        KeyWriter::open(self.inner.clone(), volume, bucket, name, false).await
    }

    /// Writes a key from an async reader; returns the committed key.
    pub async fn put_key<R: AsyncRead + Unpin>(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
        input: R,
    ) -> Result<KeyInfo> {
        crate::access::copy_in(self.create_key(volume, bucket, name).await?, input).await
    }

    /// Writes a key from a file.
    pub async fn put_file(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
        path: &Path,
    ) -> Result<KeyInfo> {
        let f = tokio::fs::File::open(path).await?;
        self.put_key(volume, bucket, name, f).await
    }

    /// Opens a key for reading with this instance's verify default.
    pub async fn open_key(&self, volume: &str, bucket: &str, name: &str) -> Result<KeyReader> {
        let key = self.inner.lookup(volume, bucket, name).await?;
        if let Some(sc) = &self.inner.sc {
            sc.discover().await;
        }
        KeyReader::new(self.inner.clone(), key, self.verify)
    }

    /// Reads a whole key into a file.
    pub async fn get_file(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
        path: &Path,
    ) -> Result<u64> {
        let r = self.open_key(volume, bucket, name).await?;
        let mut f = tokio::fs::File::create(path).await?;
        let n = r.copy_to(&mut f).await?;
        f.sync_all().await?;
        Ok(n)
    }
}
