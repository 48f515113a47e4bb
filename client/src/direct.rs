//! The direct client: talks to the OM and the datanodes itself (gRPC, and
//! short-circuit reads through the node's datanode sockets).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ozone_common::block_key::BlockKey;
use ozone_common::names::KeyPath;
use ozone_proto::*;

use crate::api::{FsAccess, KeyAccess};
use crate::om::om_call;
use crate::stats::{ReadStats, ReadStatsSnapshot};
use crate::{ClientConfig, ClientError, FileChecksum, KeyReader, KeyWriter, Om, Result};
use crate::{file_checksum, om, pool, shortcircuit};

pub(crate) struct ClientInner {
    pub(crate) config: ClientConfig,
    pub(crate) om: om::Om,
    pub(crate) pool: pool::Pool,
    pub(crate) stats: ReadStats,
    /// Replicas found bad by this client: (container, local id) -> datanodes.
    pub(crate) bad: Mutex<HashMap<BlockKey, Vec<String>>>,
    /// Whether `bad` holds anything (checked without its lock per read).
    pub(crate) any_bad: std::sync::atomic::AtomicBool,
    /// Short-circuit state, when enabled.
    pub(crate) sc: Option<shortcircuit::ShortCircuit>,
}

impl ClientInner {
    pub(crate) fn max_read(&self) -> usize {
        self.config
            .max_message_size
            .saturating_sub(1 << 20)
            .clamp(64 << 10, 16 << 20)
    }

    /// Tells the OM that `dn`'s replica of `block` failed its checksums
    /// (the OM has the datanode check it); `token` is the block's READ
    /// token, which the OM asks for.
    pub(crate) async fn report_bad(&self, block: &BlockId, token: &[u8], dn: &str, reason: &str) {
        let req = ReportBadReplicaRequest {
            block: Some(*block),
            datanode_id: dn.to_string(),
            reason: reason.to_string(),
            token: token.to_vec(),
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
    pub(crate) inner: Arc<ClientInner>,
    verify: bool,
}

impl Client {
    /// A client for the cluster whose OM is at `config.om_address`
    /// (connections are made on first use).
    pub fn connect(config: ClientConfig) -> Result<Self> {
        let om = om::Om::new(&config)?;
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
                pool: pool::Pool::new(config.max_message_size, config.tls.clone()),
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
            local_bytes: s.local_bytes.get(),
            remote_bytes: s.remote_bytes.load(Ordering::Relaxed),
            checksum_failures: s.checksum_failures.load(Ordering::Relaxed),
            failovers: s.failovers.load(Ordering::Relaxed),
            checksummed_bytes: s.checksummed_bytes.load(Ordering::Relaxed),
            ..Default::default()
        };
        if let Some(sc) = &self.inner.sc {
            let c = &sc.stats;
            snap.short_circuit_bytes = c.bytes.get();
            snap.short_circuit_mapped_bytes = c.mapped_bytes.get();
            snap.short_circuit_opens = c.opens.load(Ordering::Relaxed);
            snap.fd_cache_hits = c.cache_hits.get();
            snap.fd_cache_misses = c.cache_misses.load(Ordering::Relaxed);
            snap.invalidations = c.invalidations.load(Ordering::Relaxed);
            snap.short_circuit_fallbacks = c.fallbacks.lock().expect("lock").values().sum();
            snap.checksummed_bytes += c.checksummed_bytes.get();
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

    /// Datanodes with an open connection.
    pub fn pooled_connections(&self) -> usize {
        self.inner.pool.len()
    }

    /// Creates a volume owned by the caller.
    pub async fn create_volume(&self, name: &str) -> Result<VolumeInfo> {
        self.create_volume_owned(name, "").await
    }

    /// Creates a volume owned by `owner` (namespace/serviceaccount; the
    /// caller when empty).
    pub async fn create_volume_owned(&self, name: &str, owner: &str) -> Result<VolumeInfo> {
        ozone_common::names::check_resource_name("volume", name)?;
        let req = CreateVolumeRequest {
            name: name.into(),
            owner: owner.into(),
        };
        let r = om_call!(self.inner.om, create_volume, req)?;
        Ok(r.volume.unwrap_or_default())
    }

    /// The owner and ACL entries of a volume (`bucket` empty) or bucket.
    pub async fn get_acl(&self, volume: &str, bucket: &str) -> Result<AclResponse> {
        let req = AclObject {
            volume: volume.into(),
            bucket: bucket.into(),
        };
        om_call!(self.inner.om, get_acl, req)
    }

    /// Sets, adds to or removes from the ACL of a volume or bucket.
    pub async fn modify_acl(
        &self,
        volume: &str,
        bucket: &str,
        op: AclOp,
        acls: Vec<String>,
    ) -> Result<AclResponse> {
        let req = ModifyAclRequest {
            object: Some(AclObject {
                volume: volume.into(),
                bucket: bucket.into(),
            }),
            op: op as i32,
            acls,
        };
        om_call!(self.inner.om, modify_acl, req)
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

    /// A volume with its quotas and use.
    pub async fn volume_info(&self, volume: &str) -> Result<VolumeInfo> {
        let req = GetVolumeRequest {
            volume: volume.into(),
        };
        om_call!(self.inner.om, get_volume, req)
    }

    /// A bucket with its layout, quotas and use.
    pub async fn bucket_info(&self, volume: &str, bucket: &str) -> Result<BucketInfo> {
        let req = GetBucketRequest {
            volume: volume.into(),
            bucket: bucket.into(),
        };
        om_call!(self.inner.om, get_bucket, req)
    }

    /// Deletes an empty volume.
    pub async fn delete_volume(&self, volume: &str) -> Result<()> {
        let req = GetVolumeRequest {
            volume: volume.into(),
        };
        om_call!(self.inner.om, delete_volume, req)?;
        Ok(())
    }

    /// Deletes an empty bucket.
    pub async fn delete_bucket(&self, volume: &str, bucket: &str) -> Result<()> {
        let req = GetBucketRequest {
            volume: volume.into(),
            bucket: bucket.into(),
        };
        om_call!(self.inner.om, delete_bucket, req)?;
        Ok(())
    }

    /// Sets the space (bytes, replicas counted) and namespace quotas of a
    /// volume (`bucket` empty) or bucket: `None` leaves one as it is, 0
    /// clears it.
    pub async fn set_quota(
        &self,
        volume: &str,
        bucket: &str,
        bytes: Option<u64>,
        names: Option<u64>,
    ) -> Result<()> {
        let req = SetQuotaRequest {
            volume: volume.into(),
            bucket: bucket.into(),
            quota_in_bytes: bytes,
            quota_in_namespace: names,
        };
        om_call!(self.inner.om, set_quota, req)?;
        Ok(())
    }

    /// Sets the operational state of the datanode known as `datanode` (id,
    /// address, host or pod name): DECOMMISSIONING, IN_MAINTENANCE or
    /// IN_SERVICE. Returns its details after the change.
    pub async fn set_operational_state(
        &self,
        datanode: &str,
        state: OperationalState,
    ) -> Result<DatanodeDetails> {
        self.set_operational_state_with(datanode, state, false)
            .await
    }

    /// [`Self::set_operational_state`]; with `force` a decommission is
    /// accepted even when too few datanodes would stay in service for it
    /// to finish.
    pub async fn set_operational_state_with(
        &self,
        datanode: &str,
        state: OperationalState,
        force: bool,
    ) -> Result<DatanodeDetails> {
        let req = SetOperationalStateRequest {
            datanode: datanode.to_string(),
            state: state as i32,
            force,
        };
        let r = om_call!(self.inner.om, set_operational_state, req)?;
        r.datanode.ok_or_else(|| ClientError::Rpc {
            code: tonic::Code::Internal,
            message: "the OM sent no datanode".into(),
        })
    }

    /// A datanode's state and the replicas that still depend on it.
    pub async fn datanode_status(&self, datanode: &str) -> Result<DatanodeStatusResponse> {
        let req = DatanodeStatusRequest {
            datanode: datanode.to_string(),
        };
        om_call!(self.inner.om, datanode_status, req)
    }

    /// The replication manager's last pass: counts by state and the `top`
    /// blocks at most risk.
    pub async fn replication_status(&self, top: u32) -> Result<ReplicationStatusResponse> {
        om_call!(
            self.inner.om,
            replication_status,
            ReplicationStatusRequest { top }
        )
    }
}

impl KeyAccess for Client {
    type Reader = KeyReader;
    type Writer = KeyWriter;

    fn om(&self) -> &Om {
        &self.inner.om
    }

    async fn open_key_with(&self, path: KeyPath<'_>, verify: Option<bool>) -> Result<KeyReader> {
        let mut key = self.inner.om.lookup(path).await?;
        crate::visible::settle(&self.inner, &mut key).await;
        if let Some(sc) = &self.inner.sc {
            sc.discover().await;
        }
        KeyReader::new(self.inner.clone(), key, verify.unwrap_or(self.verify), path)
    }

    async fn create_key(&self, path: KeyPath<'_>) -> Result<KeyWriter> {
        KeyWriter::open(self.inner.clone(), path, false).await
    }

    async fn key_checksum(&self, path: KeyPath<'_>) -> Result<FileChecksum> {
        let key = self.inner.om.lookup(path).await?;
        file_checksum::compute(&self.inner, &key).await
    }
}

impl FsAccess for Client {
    async fn create_file(&self, path: KeyPath<'_>, overwrite: bool) -> Result<KeyWriter> {
        let path = path.with_key(path.key.trim_start_matches('/'));
        KeyWriter::open(self.inner.clone(), path, !overwrite).await
    }
}
