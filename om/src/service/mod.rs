//! The OM's gRPC service.

use ozone_common::names::KeyPath;
use std::collections::HashSet;
use std::sync::Arc;

use ozone_common::names::{check_key_name, check_resource_name};
use ozone_common::now_ms;
use ozone_proto::ozone_manager_server::OzoneManager;
use ozone_proto::*;
use tonic::{Request, Response, Status};

use crate::auth::acl::{self, AclChange, Rights};
use crate::bad_reports::{BadReports, Refused, short_reason};
use crate::metrics::{Metrics, OpLabel};
use crate::placement;
use crate::registry::Registry;
use crate::replica_map::ReplicaMap;
use crate::replication::ReplicationManager;
use crate::store::{OmError, OmStore};

mod access;

/// The longest error message the OM sends: a message that quotes something
/// huge a caller sent is cut, so the error itself still fits a reply.
const MAX_MESSAGE: usize = 4096;

/// `m`, cut to [`MAX_MESSAGE`] bytes on a character boundary.
fn capped(mut m: String) -> String {
    let end = ozone_common::names::prefix(&m, MAX_MESSAGE).len();
    if end < m.len() {
        m.truncate(end);
        m.push_str("...");
    }
    m
}

impl From<OmError> for Status {
    fn from(e: OmError) -> Self {
        let m = capped(e.to_string());
        match e {
            OmError::NotFound(_) => Status::not_found(m),
            OmError::AlreadyExists(_) => Status::already_exists(m),
            OmError::Invalid(_) => Status::invalid_argument(m),
            OmError::Unavailable(_) => Status::unavailable(m),
            OmError::Precondition(_) => Status::failed_precondition(m),
            OmError::QuotaExceeded(_) => Status::resource_exhausted(m),
            OmError::Meta(_) | OmError::Task(_) => Status::internal(m),
        }
    }
}

/// Settings the service needs.
#[derive(Clone)]
pub(crate) struct OmSettings {
    /// Block size handed to writers.
    pub block_size: u64,
    /// Block-token signer and token lifetime, when block tokens are on.
    pub tokens: Option<(ozone_common::token::TokenSigner, std::time::Duration)>,
    /// Who calls, when security is on.
    pub auth: Option<Arc<crate::auth::Authenticator>>,
}

/// gRPC front of the OM state.
#[derive(Clone)]
pub(crate) struct OmService {
    store: Arc<OmStore>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    settings: OmSettings,
    replicas: Arc<ReplicaMap>,
    replication: Arc<ReplicationManager>,
    bad_reports: Arc<BadReports>,
}

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(capped(e.to_string()))
}

/// A file-system path of a request, its volume and bucket checked.
fn fs_path(p: Option<FsPath>) -> Result<FsPath, Status> {
    let p = p.ok_or_else(|| invalid("no path given"))?;
    check_resource_name("volume", &p.volume).map_err(invalid)?;
    check_resource_name("bucket", &p.bucket).map_err(invalid)?;
    Ok(p)
}

impl OmService {
    /// A service over `store` and `registry`.
    pub(crate) fn new(
        store: Arc<OmStore>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        settings: OmSettings,
        replicas: Arc<ReplicaMap>,
        replication: Arc<ReplicationManager>,
        bad_reports: Arc<BadReports>,
    ) -> Self {
        Self {
            store,
            registry,
            metrics,
            settings,
            replicas,
            replication,
            bad_reports,
        }
    }

    /// The datanode `name` means (id, address, host or pod name), among
    /// every datanode ever registered.
    async fn find_datanode(&self, name: &str) -> Result<DatanodeDetails, Status> {
        let stored = self.run("ListDatanodes", |s| s.datanodes()).await?;
        let mut known = self.registry.all();
        for d in stored {
            if !known.iter().any(|x| x.id == d.id) {
                let op = self.registry.operational(&d.id) as i32;
                known.push(DatanodeDetails {
                    state: NodeState::Dead as i32,
                    operational_state: op,
                    ..d
                });
            }
        }
        Registry::resolve(&known, name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no datanode is known as {name:?}")))
    }

    /// Why decommissioning datanode `id` could never finish: too few other
    /// healthy datanodes in service to hold three replicas.
    fn decommission_blocked(&self, id: &str) -> Option<String> {
        let others = self
            .registry
            .all()
            .iter()
            .filter(|d| {
                d.id != id
                    && d.state == NodeState::Healthy as i32
                    && self.registry.operational(&d.id) == OperationalState::InService
            })
            .count();
        (others < 3).then(|| {
            format!(
                "blocks with replication THREE need 3 healthy datanodes in service besides it; \
                 {others} are, so its decommission could never finish"
            )
        })
    }

    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&OmStore) -> Result<T, OmError> + Send + 'static,
    ) -> Result<T, Status> {
        self.metrics.ops.get_or_create(&OpLabel { op }).inc();
        let store = self.store.clone();
        // The reply waits until everything committed so far is durable,
        // errors too (they may reflect state another call just committed).
        let r = tokio::task::spawn_blocking(move || {
            let r = f(&store);
            store.sync()?;
            r
        })
        .await
        .map_err(|e| Status::internal(format!("worker failed: {e}")))?;
        r.map_err(|e| {
            self.metrics.errors.get_or_create(&OpLabel { op }).inc();
            Status::from(e)
        })
    }

    /// What checks the datanodes' receipts for committed and synced block
    /// lengths: the token signer, when block tokens are on (without them a
    /// writer's lengths are taken as given).
    fn receipts(&self) -> Option<ozone_common::token::TokenSigner> {
        self.settings.tokens.as_ref().map(|(s, _)| s.clone())
    }

    /// Replaces id-only replicas with the registry's (or stored) details,
    /// bad replicas last.
    fn resolve(&self, key: &mut KeyInfo, stored: &[DatanodeDetails]) -> Result<(), OmError> {
        for b in &mut key.blocks {
            let bad = match &b.block {
                Some(id) => self.store.bad_replicas(id)?,
                None => Vec::new(),
            };
            for r in &mut b.replicas {
                *r = self.registry.get(&r.id).unwrap_or_else(|| {
                    stored
                        .iter()
                        .find(|d| d.id == r.id)
                        .map(|d| DatanodeDetails {
                            state: NodeState::Stale as i32,
                            ..d.clone()
                        })
                        .unwrap_or_else(|| DatanodeDetails {
                            id: r.id.clone(),
                            state: NodeState::Dead as i32,
                            ..Default::default()
                        })
                });
            }
            b.replicas.sort_by_key(|r| bad.contains(&r.id));
            if let (Some((signer, ttl)), Some(id)) = (&self.settings.tokens, &b.block) {
                b.token = signer.sign(id, "READ", now_ms() + ttl.as_millis() as u64);
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl OzoneManager for OmService {
    async fn create_volume(
        &self,
        req: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_admin(&who, "create volumes")?;
        let r = req.into_inner();
        let name = r.name;
        check_resource_name("volume", &name).map_err(invalid)?;
        let owner = if r.owner.is_empty() {
            who.user().unwrap_or_default().to_string()
        } else {
            acl::check_identity(&r.owner).map_err(invalid)?;
            r.owner
        };
        let v = self
            .run("CreateVolume", move |s| {
                s.create_volume_owned(&name, &owner, now_ms())
            })
            .await?;
        Ok(Response::new(CreateVolumeResponse { volume: Some(v) }))
    }

    async fn list_volumes(
        &self,
        req: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_client(&who, "list volumes")?;
        let mut volumes = self.run("ListVolumes", |s| s.list_volumes()).await?;
        // Others see the volumes they have some right on.
        volumes.retain(|v| self.rights(&who, v, None) != Rights::NONE);
        Ok(Response::new(ListVolumesResponse { volumes }))
    }

    async fn create_bucket(
        &self,
        req: Request<CreateBucketRequest>,
    ) -> Result<Response<CreateBucketResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        check_resource_name("volume", &r.volume).map_err(invalid)?;
        check_resource_name("bucket", &r.name).map_err(invalid)?;
        let layout = BucketLayout::try_from(r.layout)
            .map_err(|_| invalid(format!("unknown bucket layout {}", r.layout)))?;
        self.require(&who, &r.volume, None, Rights::CREATE, "create buckets")
            .await?;
        let owner = who.user().unwrap_or_default().to_string();
        let b = self
            .run("CreateBucket", move |s| {
                s.create_bucket_owned(&r.volume, &r.name, layout, &owner, now_ms())
            })
            .await?;
        Ok(Response::new(CreateBucketResponse { bucket: Some(b) }))
    }

    async fn list_buckets(
        &self,
        req: Request<ListBucketsRequest>,
    ) -> Result<Response<ListBucketsResponse>, Status> {
        let who = self.caller(&req).await?;
        let v = req.into_inner().volume;
        self.require(&who, &v, None, Rights::LIST, "list buckets")
            .await?;
        let buckets = self.run("ListBuckets", move |s| s.list_buckets(&v)).await?;
        Ok(Response::new(ListBucketsResponse { buckets }))
    }

    async fn get_volume(
        &self,
        req: Request<GetVolumeRequest>,
    ) -> Result<Response<VolumeInfo>, Status> {
        let who = self.caller(&req).await?;
        let v = req.into_inner().volume;
        self.require(&who, &v, None, Rights::READ, "read volumes")
            .await?;
        let info = self.run("GetVolume", move |s| s.get_volume(&v)).await?;
        Ok(Response::new(info))
    }

    async fn get_bucket(
        &self,
        req: Request<GetBucketRequest>,
    ) -> Result<Response<BucketInfo>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::READ, "read buckets")
            .await?;
        let info = self
            .run("GetBucket", move |s| s.get_bucket(&r.volume, &r.bucket))
            .await?;
        Ok(Response::new(info))
    }

    async fn delete_volume(
        &self,
        req: Request<GetVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let who = self.caller(&req).await?;
        let v = req.into_inner().volume;
        self.require(&who, &v, None, Rights::DELETE, "delete volumes")
            .await?;
        self.run("DeleteVolume", move |s| s.delete_volume(&v))
            .await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn delete_bucket(
        &self,
        req: Request<GetBucketRequest>,
    ) -> Result<Response<DeleteBucketResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::DELETE, "delete buckets")
            .await?;
        self.run("DeleteBucket", move |s| {
            s.delete_bucket(&r.volume, &r.bucket)
        })
        .await?;
        Ok(Response::new(DeleteBucketResponse {}))
    }

    async fn set_quota(
        &self,
        req: Request<SetQuotaRequest>,
    ) -> Result<Response<SetQuotaResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        if r.bucket.is_empty() {
            // A tenant does not raise its own volume's quota.
            self.require_admin(&who, "set volume quotas")?;
        } else {
            self.require(
                &who,
                &r.volume,
                None,
                Rights::WRITE_ACL,
                "set bucket quotas",
            )
            .await?;
        }
        self.run("SetQuota", move |s| {
            s.set_quota(&r.volume, &r.bucket, r.quota_in_bytes, r.quota_in_namespace)
        })
        .await?;
        Ok(Response::new(SetQuotaResponse {}))
    }

    async fn rename_key(
        &self,
        req: Request<RenameKeyRequest>,
    ) -> Result<Response<RenameKeyResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        check_key_name(&r.to).map_err(invalid)?;
        self.require_bucket(
            &who,
            &r.volume,
            &r.bucket,
            Rights::WRITE.union(Rights::DELETE),
            "rename keys",
        )
        .await?;
        self.run("RenameKey", move |s| {
            s.rename_key(KeyPath::new(&r.volume, &r.bucket, &r.from), &r.to)
        })
        .await?;
        Ok(Response::new(RenameKeyResponse {}))
    }

    async fn open_key(
        &self,
        req: Request<OpenKeyRequest>,
    ) -> Result<Response<OpenKeyResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        check_key_name(&r.name).map_err(invalid)?;
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::WRITE, "write keys")
            .await?;
        let replication = match ReplicationFactor::try_from(r.replication) {
            Ok(ReplicationFactor::Unspecified) => ReplicationFactor::Three,
            Ok(f) => f,
            Err(_) => return Err(invalid(format!("unknown replication {}", r.replication))),
        };
        let ck =
            ozone_common::checksum::Checksummer::from_raw(r.checksum_type, r.bytes_per_checksum)
                .map_err(invalid)?;
        if ck.bytes_per_checksum() as u64 > self.settings.block_size {
            return Err(invalid(format!(
                "bytes per checksum {} exceeds the block size {}",
                ck.bytes_per_checksum(),
                self.settings.block_size
            )));
        }
        let template = KeyInfo {
            volume: r.volume,
            bucket: r.bucket,
            name: r.name,
            replication: replication as i32,
            checksum_type: r.checksum_type,
            bytes_per_checksum: r.bytes_per_checksum,
            ..Default::default()
        };
        let exclusive = r.exclusive;
        let session_id = self
            .run("OpenKey", move |s| {
                s.open_key(&template, exclusive, now_ms())
            })
            .await?;
        Ok(Response::new(OpenKeyResponse {
            session_id,
            block_size: self.settings.block_size,
            replication: replication as i32,
        }))
    }

    async fn allocate_block(
        &self,
        req: Request<AllocateBlockRequest>,
    ) -> Result<Response<AllocateBlockResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let session = self.session_for(&who, r.session_id, "write keys").await?;
        let count = if session.replication == ReplicationFactor::One as i32 {
            1
        } else {
            3
        };
        let exclude: HashSet<String> = r.exclude_datanodes.into_iter().collect();
        let chosen = placement::choose(
            &self.registry.healthy(),
            count,
            Some(r.client_node.as_str()),
            &exclude,
            &mut rand::rng(),
        )
        .map_err(|e| match self.registry.warming_up() {
            // A restarted OM: datanodes re-register within a heartbeat or
            // two, so UNAVAILABLE (clients retry it). Otherwise too few
            // datanodes: RESOURCE_EXHAUSTED, which no retry fixes.
            Some(age) => Status::unavailable(format!(
                "the OM started {:.1}s ago and waits for datanodes to report: {e}",
                age.as_secs_f64()
            )),
            None => Status::resource_exhausted(e.to_string()),
        })?;
        let ids: Vec<String> = chosen.iter().map(|c| c.id.clone()).collect();
        let sid = r.session_id;
        let block_size = self.settings.block_size;
        let previous = r.previous;
        let receipts = self.receipts();
        let mut block = self
            .run("AllocateBlock", move |s| {
                s.allocate_block(sid, &ids, block_size, &previous, receipts.as_ref())
            })
            .await?;
        if let (Some((signer, ttl)), Some(id)) = (&self.settings.tokens, &block.block) {
            // The writer's token: WRITE on this block only (Ozone's write
            // block token), on the datanodes chosen, for at most the bytes
            // reserved; readers get READ tokens at lookup.
            let dns: Vec<String> = block.replicas.iter().map(|r| r.id.clone()).collect();
            block.token = signer.sign_write(
                id,
                &dns,
                block.max_length,
                now_ms() + ttl.as_millis() as u64,
            );
        }
        for rep in &mut block.replicas {
            if let Some(d) = self.registry.get(&rep.id) {
                *rep = d;
            }
        }
        self.metrics.blocks_allocated.inc();
        Ok(Response::new(AllocateBlockResponse { block: Some(block) }))
    }

    async fn commit_key(
        &self,
        req: Request<CommitKeyRequest>,
    ) -> Result<Response<CommitKeyResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_session(&who, r.session_id, "write keys")
            .await?;
        let receipts = self.receipts();
        let mut key = self
            .run("CommitKey", move |s| {
                s.commit_key(r.session_id, &r.blocks, r.size, receipts.as_ref(), now_ms())
            })
            .await?;
        self.metrics.keys_committed.inc();
        let stored = self.store.datanodes().map_err(Status::from)?;
        self.resolve(&mut key, &stored).map_err(Status::from)?;
        tracing::info!(key = %format!("/{}/{}/{}", key.volume, key.bucket, key.name), size = key.size, "key committed");
        Ok(Response::new(CommitKeyResponse { key: Some(key) }))
    }

    async fn lookup_key(
        &self,
        req: Request<LookupKeyRequest>,
    ) -> Result<Response<LookupKeyResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::READ, "read keys")
            .await?;
        let (mut key, stored) = self
            .run("LookupKey", move |s| {
                Ok((
                    s.lookup_key(KeyPath::new(&r.volume, &r.bucket, &r.name))?,
                    s.datanodes()?,
                ))
            })
            .await?;
        self.resolve(&mut key, &stored).map_err(Status::from)?;
        Ok(Response::new(LookupKeyResponse { key: Some(key) }))
    }

    async fn list_keys(
        &self,
        req: Request<ListKeysRequest>,
    ) -> Result<Response<ListKeysResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::LIST, "list keys")
            .await?;
        let limit = match r.limit {
            0 => 1000,
            n => n.min(10_000),
        } as usize;
        let mut keys = self
            .run("ListKeys", move |s| {
                s.list_keys(
                    KeyPath::new(&r.volume, &r.bucket, &r.prefix),
                    &r.start_after,
                    limit,
                )
            })
            .await?;
        for k in &mut keys {
            k.blocks.clear();
        }
        Ok(Response::new(ListKeysResponse { keys }))
    }

    async fn delete_key(
        &self,
        req: Request<DeleteKeyRequest>,
    ) -> Result<Response<DeleteKeyResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_bucket(&who, &r.volume, &r.bucket, Rights::DELETE, "delete keys")
            .await?;
        self.run("DeleteKey", move |s| {
            s.delete_key(KeyPath::new(&r.volume, &r.bucket, &r.name))
        })
        .await?;
        Ok(Response::new(DeleteKeyResponse {}))
    }

    async fn mkdirs(
        &self,
        req: Request<MkdirsRequest>,
    ) -> Result<Response<MkdirsResponse>, Status> {
        let who = self.caller(&req).await?;
        let p = self
            .checked_path(
                &who,
                req.into_inner().path,
                Rights::WRITE,
                "make directories",
            )
            .await?;
        let created = self
            .run("Mkdirs", move |s| s.fs_mkdirs(KeyPath::from(&p), now_ms()))
            .await?;
        Ok(Response::new(MkdirsResponse { created }))
    }

    async fn get_file_status(
        &self,
        req: Request<GetFileStatusRequest>,
    ) -> Result<Response<GetFileStatusResponse>, Status> {
        let who = self.caller(&req).await?;
        let p = self
            .checked_path(&who, req.into_inner().path, Rights::READ, "read files")
            .await?;
        let status = self
            .run("GetFileStatus", move |s| s.fs_status(KeyPath::from(&p)))
            .await?;
        Ok(Response::new(GetFileStatusResponse {
            status: Some(status),
        }))
    }

    async fn list_status(
        &self,
        req: Request<ListStatusRequest>,
    ) -> Result<Response<ListStatusResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let p = self
            .checked_path(&who, r.path, Rights::LIST, "list directories")
            .await?;
        let limit = match r.limit {
            0 => 1000,
            n => n.min(10_000),
        } as usize;
        let entries = self
            .run("ListStatus", move |s| {
                s.fs_list(KeyPath::from(&p), &r.start_after, limit)
            })
            .await?;
        Ok(Response::new(ListStatusResponse { entries }))
    }

    async fn rename(
        &self,
        req: Request<RenameRequest>,
    ) -> Result<Response<RenameResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let p = self
            .checked_path(
                &who,
                r.from,
                Rights::WRITE.union(Rights::DELETE),
                "rename files",
            )
            .await?;
        let to = r.to;
        let path = self
            .run("Rename", move |s| {
                s.fs_rename(KeyPath::from(&p), &to, now_ms())
            })
            .await?;
        Ok(Response::new(RenameResponse { path }))
    }

    async fn delete_path(
        &self,
        req: Request<DeletePathRequest>,
    ) -> Result<Response<DeletePathResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let p = self
            .checked_path(&who, r.path, Rights::DELETE, "delete files")
            .await?;
        let recursive = r.recursive;
        self.run("DeletePath", move |s| {
            s.fs_delete(KeyPath::from(&p), recursive)
        })
        .await?;
        Ok(Response::new(DeletePathResponse {}))
    }

    async fn get_content_summary(
        &self,
        req: Request<ContentSummaryRequest>,
    ) -> Result<Response<ContentSummary>, Status> {
        let who = self.caller(&req).await?;
        let p = self
            .checked_path(&who, req.into_inner().path, Rights::READ, "read files")
            .await?;
        let sum = self
            .run("GetContentSummary", move |s| {
                s.fs_summary(KeyPath::from(&p))
            })
            .await?;
        Ok(Response::new(sum))
    }

    async fn hsync(&self, req: Request<HsyncRequest>) -> Result<Response<HsyncResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_session(&who, r.session_id, "write keys")
            .await?;
        let receipts = self.receipts();
        self.run("Hsync", move |s| {
            s.hsync_key(r.session_id, &r.blocks, r.size, receipts.as_ref())
        })
        .await?;
        Ok(Response::new(HsyncResponse {}))
    }

    async fn recover_lease(
        &self,
        req: Request<RecoverLeaseRequest>,
    ) -> Result<Response<RecoverLeaseResponse>, Status> {
        let who = self.caller(&req).await?;
        let p = self
            .checked_path(&who, req.into_inner().path, Rights::WRITE, "recover leases")
            .await?;
        let shown = format!("/{}/{}/{}", p.volume, p.bucket, p.path);
        let q = p.clone();
        let view = self
            .run("RecoverLease", move |s| s.lookup_key(KeyPath::from(&q)))
            .await?;
        // The block being written may hold hflushed bytes the OM never
        // heard of: its replicas settle its length first.
        let block = match view.blocks.last() {
            Some(last) if view.last_block_open => self.replication.recover_block(last).await,
            _ => None,
        };
        let (length, recovered) = self
            .run("RecoverLease", move |s| {
                s.fs_recover_lease(KeyPath::from(&p), now_ms(), block.as_ref())
            })
            .await?;
        if recovered {
            tracing::info!(path = %shown, length, "lease recovered");
        }
        Ok(Response::new(RecoverLeaseResponse { length }))
    }

    async fn is_file_closed(
        &self,
        req: Request<IsFileClosedRequest>,
    ) -> Result<Response<IsFileClosedResponse>, Status> {
        let who = self.caller(&req).await?;
        let p = self
            .checked_path(&who, req.into_inner().path, Rights::READ, "read files")
            .await?;
        let closed = self
            .run("IsFileClosed", move |s| s.fs_is_closed(KeyPath::from(&p)))
            .await?;
        Ok(Response::new(IsFileClosedResponse { closed }))
    }

    async fn register_datanode(
        &self,
        req: Request<RegisterDatanodeRequest>,
    ) -> Result<Response<RegisterDatanodeResponse>, Status> {
        let who = self.caller(&req).await?;
        let dn = req
            .into_inner()
            .datanode
            .ok_or_else(|| invalid("missing datanode details"))?;
        if dn.id.is_empty() || dn.address.is_empty() {
            return Err(invalid("datanode id and address are required"));
        }
        self.require_datanode(&who, &dn.id)?;
        let stored = DatanodeDetails {
            state: NodeState::Unspecified as i32,
            operational_state: self.registry.operational(&dn.id) as i32,
            ..dn.clone()
        };
        self.run("RegisterDatanode", move |s| s.put_datanode(&stored))
            .await?;
        tracing::info!(id = %dn.id, address = %dn.address, node = %dn.node_name, "datanode registered");
        // What it holds is known again from its next full report.
        self.replicas.forget(&dn.id);
        self.registry.register(dn);
        Ok(Response::new(RegisterDatanodeResponse {}))
    }

    async fn heartbeat(
        &self,
        req: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        self.require_datanode(&who, &r.id)?;
        self.metrics
            .ops
            .get_or_create(&OpLabel { op: "Heartbeat" })
            .inc();
        let known = self.registry.heartbeat(&r.id, r.capacity, r.used);
        if known && let Some(report) = &r.report {
            self.replicas.apply(&r.id, report);
        }
        Ok(Response::new(HeartbeatResponse { reregister: !known }))
    }

    async fn list_datanodes(
        &self,
        req: Request<ListDatanodesRequest>,
    ) -> Result<Response<ListDatanodesResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_client(&who, "list datanodes")?;
        let stored = self.run("ListDatanodes", |s| s.datanodes()).await?;
        let mut datanodes = self.registry.all();
        for d in stored {
            if !datanodes.iter().any(|x| x.id == d.id) {
                let op = self.registry.operational(&d.id) as i32;
                datanodes.push(DatanodeDetails {
                    state: NodeState::Dead as i32,
                    operational_state: op,
                    ..d
                });
            }
        }
        Ok(Response::new(ListDatanodesResponse { datanodes }))
    }

    async fn set_operational_state(
        &self,
        req: Request<SetOperationalStateRequest>,
    ) -> Result<Response<SetOperationalStateResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_admin(&who, "change a datanode's operational state")?;
        let r = req.into_inner();
        let state = match OperationalState::try_from(r.state) {
            Ok(
                s @ (OperationalState::Decommissioning
                | OperationalState::InMaintenance
                | OperationalState::InService),
            ) => s,
            _ => {
                return Err(invalid(
                    "the state must be DECOMMISSIONING, IN_MAINTENANCE or IN_SERVICE",
                ));
            }
        };
        let dn = self.find_datanode(&r.datanode).await?;
        let current = self.registry.operational(&dn.id);
        if state == OperationalState::Decommissioning
            && current != OperationalState::Decommissioned
            && !r.force
            && let Some(why) = self.decommission_blocked(&dn.id)
        {
            return Err(Status::failed_precondition(format!(
                "{} ({}): {why}; add a datanode first, or decommission with --force",
                dn.id, dn.node_name
            )));
        }
        // Decommissioning a decommissioned datanode changes nothing.
        if !(state == OperationalState::Decommissioning
            && current == OperationalState::Decommissioned)
        {
            self.replication.set_operational(&dn.id, state).await?;
        }
        tracing::info!(datanode = %dn.id, address = %dn.address, from = ?current, to = ?self.registry.operational(&dn.id), "operational state set");
        let datanode = DatanodeDetails {
            operational_state: self.registry.operational(&dn.id) as i32,
            ..dn
        };
        Ok(Response::new(SetOperationalStateResponse {
            datanode: Some(datanode),
        }))
    }

    async fn datanode_status(
        &self,
        req: Request<DatanodeStatusRequest>,
    ) -> Result<Response<DatanodeStatusResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_admin(&who, "read a datanode's status")?;
        let dn = self.find_datanode(&req.into_inner().datanode).await?;
        let (replicas, needed_elsewhere, copies_in_flight) = self.replication.node_status(&dn.id);
        let blocked = match self.registry.operational(&dn.id) {
            OperationalState::Decommissioning => self.decommission_blocked(&dn.id),
            _ => None,
        };
        Ok(Response::new(DatanodeStatusResponse {
            datanode: Some(dn),
            replicas,
            needed_elsewhere,
            copies_in_flight,
            blocked: blocked.unwrap_or_default(),
        }))
    }

    async fn replication_status(
        &self,
        req: Request<ReplicationStatusRequest>,
    ) -> Result<Response<ReplicationStatusResponse>, Status> {
        let who = self.caller(&req).await?;
        self.require_admin(&who, "read the replication status")?;
        let top = match req.into_inner().top {
            0 => 10,
            n => n as usize,
        };
        Ok(Response::new(self.replication.status(top)))
    }

    async fn report_bad_replica(
        &self,
        req: Request<ReportBadReplicaRequest>,
    ) -> Result<Response<ReportBadReplicaResponse>, Status> {
        // A datanode reports its own replicas (its scanner checked them).
        // Anyone else must hold a READ token for the block (with block
        // tokens on), is held to a few reports a minute, and only asks: the
        // datanode checks its replica before the OM acts on the report.
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let block = r.block.ok_or_else(|| invalid("missing block id"))?;
        let reason = short_reason(&r.reason).to_string();
        if let crate::auth::Caller::Datanode(d) = &who {
            if d != &r.datanode_id {
                return Err(Status::permission_denied(format!(
                    "datanode {d} may report only its own replicas"
                )));
            }
            tracing::warn!(block = %block.display(), datanode = %r.datanode_id, reason = %reason, "bad replica reported by its datanode");
            self.metrics.bad_replicas_reported.inc();
            self.run("ReportBadReplica", move |s| {
                s.record_bad_replica(&block, &r.datanode_id, &reason)
            })
            .await?;
            return Ok(Response::new(ReportBadReplicaResponse {}));
        }
        if let Some((signer, _)) = &self.settings.tokens {
            signer
                .verify(&r.token, &block, "READ", now_ms())
                .map_err(|e| {
                    Status::permission_denied(format!(
                        "a bad-replica report needs a READ token for block {}: {e}",
                        block.display()
                    ))
                })?;
        }
        let caller = who.to_string();
        self.bad_reports
            .report(&caller, block, &r.datanode_id, &reason)
            .map_err(|e| match e {
                Refused::UnknownDatanode(_) => Status::not_found(e.to_string()),
                Refused::TooMany { .. } | Refused::Busy => {
                    Status::resource_exhausted(e.to_string())
                }
            })?;
        self.metrics.bad_replicas_reported.inc();
        Ok(Response::new(ReportBadReplicaResponse {}))
    }

    async fn get_acl(&self, req: Request<AclObject>) -> Result<Response<AclResponse>, Status> {
        let who = self.caller(&req).await?;
        let o = req.into_inner();
        let bucket = (!o.bucket.is_empty()).then_some(o.bucket);
        self.require(
            &who,
            &o.volume,
            bucket.as_deref(),
            Rights::READ_ACL,
            "read ACLs",
        )
        .await?;
        let (v, b) = self
            .run("GetAcl", move |s| {
                s.access_rows(&o.volume, bucket.as_deref())
            })
            .await?;
        Ok(Response::new(match b {
            Some(b) => AclResponse {
                owner: b.owner,
                acls: b.acls,
            },
            None => AclResponse {
                owner: v.owner,
                acls: v.acls,
            },
        }))
    }

    async fn modify_acl(
        &self,
        req: Request<ModifyAclRequest>,
    ) -> Result<Response<AclResponse>, Status> {
        let who = self.caller(&req).await?;
        let r = req.into_inner();
        let o = r
            .object
            .ok_or_else(|| invalid("no volume or bucket given"))?;
        let bucket = (!o.bucket.is_empty()).then_some(o.bucket);
        let op = match AclOp::try_from(r.op) {
            Ok(AclOp::Set) => AclChange::Set,
            Ok(AclOp::Add) => AclChange::Add,
            Ok(AclOp::Remove) => AclChange::Remove,
            _ => return Err(invalid("the ACL operation must be SET, ADD or REMOVE")),
        };
        let given = acl::parse_all(&r.acls).map_err(invalid)?;
        self.require(
            &who,
            &o.volume,
            bucket.as_deref(),
            Rights::WRITE_ACL,
            "change ACLs",
        )
        .await?;
        let changed = self
            .run("ModifyAcl", move |s| {
                s.modify_acl(&o.volume, bucket.as_deref(), |current| {
                    // Stored entries were checked when written.
                    let current = acl::parse_all(current).map_err(OmError::Invalid)?;
                    Ok(acl::apply(&current, op, &given)
                        .iter()
                        .map(|e| e.to_string())
                        .collect())
                })
            })
            .await?;
        tracing::info!(caller = %who, acls = ?changed.acls, "ACL changed");
        Ok(Response::new(AclResponse {
            owner: changed.owner,
            acls: changed.acls,
        }))
    }

    async fn who_am_i(
        &self,
        req: Request<WhoAmIRequest>,
    ) -> Result<Response<WhoAmIResponse>, Status> {
        let who = self.caller(&req).await?;
        Ok(Response::new(WhoAmIResponse {
            identity: who.to_string(),
            admin: self.is_admin(&who),
        }))
    }
}
