//! File-system calls on FILE_SYSTEM_OPTIMIZED buckets: directories,
//! exclusive create, status, paged listing, atomic rename, recursive
//! delete, content summary. Files are read with [`Client::open_key`].

use ozone_proto::*;

use crate::om::om_call;
use crate::{Client, KeyWriter, Result};

/// A path of a request.
pub(crate) fn fs_path(volume: &str, bucket: &str, path: &str) -> Option<FsPath> {
    Some(FsPath {
        volume: volume.into(),
        bucket: bucket.into(),
        path: path.into(),
    })
}

impl Client {
    /// Makes directory `path` and its missing parents; whether it was made
    /// (false: it existed).
    pub async fn mkdirs(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
        let req = MkdirsRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = om_call!(self.inner.om, mkdirs, req)?;
        Ok(r.created)
    }

    /// Creates file `path` for writing, making missing parent directories.
    /// With `overwrite` false an existing file is an error
    /// (`ClientError::AlreadyExists`); a file being written is never taken
    /// over. Of racing exclusive creates exactly one succeeds.
    pub async fn create_file(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        overwrite: bool,
    ) -> Result<KeyWriter> {
        let name = path.trim_start_matches('/');
        KeyWriter::open(self.inner.clone(), volume, bucket, name, !overwrite).await
    }

    /// The status of `path` ("" is the bucket's root).
    pub async fn file_status(&self, volume: &str, bucket: &str, path: &str) -> Result<FileStatus> {
        let req = GetFileStatusRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = om_call!(self.inner.om, get_file_status, req)?;
        Ok(r.status.unwrap_or_default())
    }

    /// One page of directory `path`: entries named after `start_after`, at
    /// most `limit` (0: the OM's default), by name.
    pub async fn list_status(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        start_after: &str,
        limit: u32,
    ) -> Result<Vec<FileStatus>> {
        let req = ListStatusRequest {
            path: fs_path(volume, bucket, path),
            start_after: start_after.into(),
            limit,
        };
        let r = om_call!(self.inner.om, list_status, req)?;
        Ok(r.entries)
    }

    /// Renames `from` to `to` atomically (a directory with everything under
    /// it, in O(1)); an existing directory `to` receives `from` under its
    /// own name. Returns the new path.
    pub async fn rename(&self, volume: &str, bucket: &str, from: &str, to: &str) -> Result<String> {
        let req = RenameRequest {
            from: fs_path(volume, bucket, from),
            to: to.into(),
        };
        let r = om_call!(self.inner.om, rename, req)?;
        Ok(r.path)
    }

    /// Deletes a file or an empty directory, or with `recursive` a
    /// directory and everything under it.
    pub async fn delete_path(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        recursive: bool,
    ) -> Result<()> {
        let req = DeletePathRequest {
            path: fs_path(volume, bucket, path),
            recursive,
        };
        om_call!(self.inner.om, delete_path, req)?;
        Ok(())
    }

    /// Closes the file at `path` if its writer is gone, at its last synced
    /// length (HBase's WAL recovery); returns the length. The file is
    /// closed when this returns; the old writer's later calls fail.
    pub async fn recover_lease(&self, volume: &str, bucket: &str, path: &str) -> Result<u64> {
        let req = RecoverLeaseRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = om_call!(self.inner.om, recover_lease, req)?;
        Ok(r.length)
    }

    /// Whether the file at `path` is closed (not being written).
    pub async fn is_file_closed(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
        let req = IsFileClosedRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = om_call!(self.inner.om, is_file_closed, req)?;
        Ok(r.closed)
    }

    /// Bytes, files and directories under `path`.
    pub async fn content_summary(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> Result<ContentSummary> {
        let req = ContentSummaryRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = om_call!(self.inner.om, get_content_summary, req)?;
        Ok(r)
    }
}
