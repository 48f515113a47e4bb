//! The direct client's file-system calls on FILE_SYSTEM_OPTIMIZED buckets:
//! directories, exclusive create, status, paged listing, atomic rename,
//! recursive delete, content summary, lease recovery. Files are read with
//! [`KeyAccess::open_key`].

use ozone_common::names::KeyPath;
use ozone_proto::*;

use crate::api::FsAccess;
use crate::om::om_call;
use crate::{Client, KeyWriter, Result};

/// The path of a request.
pub(crate) fn fs_path(path: KeyPath<'_>) -> Option<FsPath> {
    Some(FsPath {
        volume: path.volume.into(),
        bucket: path.bucket.into(),
        path: path.key.into(),
    })
}

impl FsAccess for Client {
    async fn mkdirs(&self, path: KeyPath<'_>) -> Result<bool> {
        let req = MkdirsRequest {
            path: fs_path(path),
        };
        let r = om_call!(self.inner.om, mkdirs, req)?;
        Ok(r.created)
    }

    async fn create_file(&self, path: KeyPath<'_>, overwrite: bool) -> Result<KeyWriter> {
        let path = path.with_key(path.key.trim_start_matches('/'));
        KeyWriter::open(self.inner.clone(), path, !overwrite).await
    }

    async fn file_status(&self, path: KeyPath<'_>) -> Result<FileStatus> {
        let req = GetFileStatusRequest {
            path: fs_path(path),
        };
        let r = om_call!(self.inner.om, get_file_status, req)?;
        Ok(r.status.unwrap_or_default())
    }

    async fn list_status(
        &self,
        path: KeyPath<'_>,
        start_after: &str,
        limit: u32,
    ) -> Result<Vec<FileStatus>> {
        let req = ListStatusRequest {
            path: fs_path(path),
            start_after: start_after.into(),
            limit,
        };
        let r = om_call!(self.inner.om, list_status, req)?;
        Ok(r.entries)
    }

    async fn rename(&self, from: KeyPath<'_>, to: &str) -> Result<String> {
        let req = RenameRequest {
            from: fs_path(from),
            to: to.into(),
        };
        let r = om_call!(self.inner.om, rename, req)?;
        Ok(r.path)
    }

    async fn delete_path(&self, path: KeyPath<'_>, recursive: bool) -> Result<()> {
        let req = DeletePathRequest {
            path: fs_path(path),
            recursive,
        };
        om_call!(self.inner.om, delete_path, req)?;
        Ok(())
    }

    async fn content_summary(&self, path: KeyPath<'_>) -> Result<ContentSummary> {
        let req = ContentSummaryRequest {
            path: fs_path(path),
        };
        let r = om_call!(self.inner.om, get_content_summary, req)?;
        Ok(r)
    }

    async fn recover_lease(&self, path: KeyPath<'_>) -> Result<u64> {
        let req = RecoverLeaseRequest {
            path: fs_path(path),
        };
        let r = om_call!(self.inner.om, recover_lease, req)?;
        Ok(r.length)
    }

    async fn is_file_closed(&self, path: KeyPath<'_>) -> Result<bool> {
        let req = IsFileClosedRequest {
            path: fs_path(path),
        };
        let r = om_call!(self.inner.om, is_file_closed, req)?;
        Ok(r.closed)
    }

    async fn volumes(&self) -> Result<Vec<VolumeInfo>> {
        self.list_volumes().await
    }

    async fn capacity(&self) -> Result<(u64, u64)> {
        let live = self.list_datanodes().await?.into_iter().filter(|d| {
            d.state == NodeState::Healthy as i32
                && d.operational_state == OperationalState::InService as i32
        });
        Ok(live.fold((0, 0), |(c, u), d| (c + d.capacity, u + d.used)))
    }

    async fn buckets(&self, volume: &str) -> Result<Vec<BucketInfo>> {
        self.list_buckets(volume).await
    }
}
