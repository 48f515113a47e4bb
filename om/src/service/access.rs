//! Who may call what: each RPC asks for its caller first, then for the
//! rights it needs on a volume or bucket, or for an admin.
//!
//! Rights on a bucket: everything for admins and the owners of the bucket
//! and of its volume; otherwise what the bucket's entries and its volume's
//! entries grant. Rights on a volume: everything for admins and its owner,
//! otherwise its entries.

use ozone_proto::{BucketInfo, VolumeInfo};
use tonic::{Request, Status};

use super::OmService;
use crate::auth::Caller;
use crate::auth::acl::{self, Rights};

impl OmService {
    /// The authenticated caller ([`Caller::Open`] when security is off).
    pub(super) async fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        match &self.settings.auth {
            None => Ok(Caller::Open),
            Some(a) => {
                let c = a.caller(req.metadata()).await;
                if let Err(e) = &c {
                    self.metrics.auth_failures.inc();
                    tracing::debug!("unauthenticated call: {}", e.message());
                }
                c
            }
        }
    }

    /// Whether `caller` administers the cluster.
    pub(super) fn is_admin(&self, caller: &Caller) -> bool {
        match &self.settings.auth {
            None => true,
            Some(a) => a.is_admin(caller),
        }
    }

    fn denied(&self, caller: &Caller, what: &str) -> Status {
        self.metrics.permission_denials.inc();
        tracing::info!(caller = %caller, "permission denied: {what}");
        Status::permission_denied(format!("{caller} may not {what}"))
    }

    /// Refuses callers that are not admins.
    pub(super) fn require_admin(&self, caller: &Caller, what: &str) -> Result<(), Status> {
        if self.is_admin(caller) {
            Ok(())
        } else {
            Err(self.denied(
                caller,
                &format!("{what} (admins only: ozone.administrators)"),
            ))
        }
    }

    /// Refuses datanodes: the calls of clients.
    pub(super) fn require_client(&self, caller: &Caller, what: &str) -> Result<(), Status> {
        match caller {
            Caller::Datanode(_) => Err(self.denied(caller, what)),
            _ => Ok(()),
        }
    }

    /// Refuses anyone but the datanode `id` (or anyone when security is off).
    pub(super) fn require_datanode(&self, caller: &Caller, id: &str) -> Result<(), Status> {
        match caller {
            Caller::Open => Ok(()),
            Caller::Datanode(d) if d == id => Ok(()),
            _ => Err(self.denied(caller, &format!("speak for datanode {id}"))),
        }
    }

    /// The rights of `caller` on a volume (and bucket) row.
    pub(super) fn rights(
        &self,
        caller: &Caller,
        volume: &VolumeInfo,
        bucket: Option<&BucketInfo>,
    ) -> Rights {
        if self.is_admin(caller) {
            return Rights::ALL;
        }
        let Some(u) = caller.user() else {
            return Rights::NONE;
        };
        let owns = |o: &str| !o.is_empty() && o == u;
        if owns(&volume.owner) || bucket.is_some_and(|b| owns(&b.owner)) {
            return Rights::ALL;
        }
        let on_volume = granted(&volume.acls, u);
        match bucket {
            Some(b) => on_volume.union(granted(&b.acls, u)),
            None => on_volume,
        }
    }

    /// Refuses `caller` unless it has `need` on `volume` (or its `bucket`).
    pub(super) async fn require(
        &self,
        caller: &Caller,
        volume: &str,
        bucket: Option<&str>,
        need: Rights,
        what: &str,
    ) -> Result<(), Status> {
        if self.is_admin(caller) {
            return Ok(());
        }
        self.require_client(caller, what)?;
        let (v, b) = {
            let (volume, bucket) = (volume.to_string(), bucket.map(str::to_string));
            self.read(move |s| s.access_rows(&volume, bucket.as_deref()))
                .await?
        };
        let have = self.rights(caller, &v, b.as_ref());
        if have.contains(need) {
            return Ok(());
        }
        let on = match bucket {
            Some(b) => format!("bucket /{volume}/{b}"),
            None => format!("volume /{volume}"),
        };
        Err(self.denied(
            caller,
            &format!("{what} (needs {} on {on}, has {})", need, have),
        ))
    }

    /// [`require`](Self::require) on a bucket.
    pub(super) async fn require_bucket(
        &self,
        caller: &Caller,
        volume: &str,
        bucket: &str,
        need: Rights,
        what: &str,
    ) -> Result<(), Status> {
        self.require(caller, volume, Some(bucket), need, what).await
    }

    /// The checked path of a file-system call, its caller holding `need`
    /// on the path's bucket.
    pub(super) async fn checked_path(
        &self,
        caller: &Caller,
        path: Option<ozone_proto::FsPath>,
        need: Rights,
        what: &str,
    ) -> Result<ozone_proto::FsPath, Status> {
        let p = super::fs_path(path)?;
        self.require_bucket(caller, &p.volume, &p.bucket, need, what)
            .await?;
        Ok(p)
    }

    /// Write session `id`, once `caller` is found to hold WRITE on its
    /// bucket.
    pub(super) async fn session_for(
        &self,
        caller: &Caller,
        id: u64,
        what: &str,
    ) -> Result<ozone_proto::KeyInfo, Status> {
        let key = self.read(move |s| s.session(id)).await?;
        self.require_bucket(caller, &key.volume, &key.bucket, Rights::WRITE, what)
            .await?;
        Ok(key)
    }

    /// Refuses `caller` unless it holds WRITE on the bucket of write session
    /// `id` (no read at all for admins and with security off).
    pub(super) async fn require_session(
        &self,
        caller: &Caller,
        id: u64,
        what: &str,
    ) -> Result<(), Status> {
        if !self.is_admin(caller) {
            self.session_for(caller, id, what).await?;
        }
        Ok(())
    }

    /// A read of the store for an access check: no durability wait and no
    /// count as an operation of its own (the call it guards is counted).
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&crate::store::OmStore) -> Result<T, crate::store::OmError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Status::internal(format!("worker failed: {e}")))?
            .map_err(Status::from)
    }
}

/// What stored entries grant `user`; entries that no longer parse grant
/// nothing.
fn granted(entries: &[String], user: &str) -> Rights {
    let parsed: Vec<_> = entries
        .iter()
        .filter_map(|e| acl::AclEntry::parse(e).ok())
        .collect();
    acl::granted(&parsed, user)
}
