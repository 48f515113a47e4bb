//! The namespace calls of both clients: keys, files, directories, volumes,
//! buckets and datanodes, each made once here on an [`Om`], which reaches
//! the OM directly or through a sidecar passing its service on.

use ozone_common::names::KeyPath;
use ozone_proto::*;

use crate::om::{Om, om_call};
use crate::{ClientError, Result};

/// The OM caps a page of keys at 10,000; whole listings go by this page.
const KEY_PAGE: u32 = 1000;

/// The path of a file-system request.
fn fs_path(path: KeyPath<'_>) -> Option<FsPath> {
    Some(FsPath {
        volume: path.volume.into(),
        bucket: path.bucket.into(),
        path: path.key.into(),
    })
}

impl Om {
    /// A committed key's metadata, with its block locations.
    pub async fn lookup(&self, path: KeyPath<'_>) -> Result<KeyInfo> {
        let req = LookupKeyRequest {
            volume: path.volume.into(),
            bucket: path.bucket.into(),
            name: path.key.into(),
        };
        let r = om_call!(self, lookup_key, req)?;
        r.key
            .ok_or_else(|| ClientError::NotFound(format!("key {path}")))
    }

    /// One page of keys starting with `prefix.key`, after `start_after`
    /// (file-system buckets: files by full path).
    pub async fn list_keys_page(
        &self,
        prefix: KeyPath<'_>,
        start_after: &str,
        limit: u32,
    ) -> Result<Vec<KeyInfo>> {
        let req = ListKeysRequest {
            volume: prefix.volume.into(),
            bucket: prefix.bucket.into(),
            prefix: prefix.key.into(),
            start_after: start_after.into(),
            limit,
        };
        Ok(om_call!(self, list_keys, req)?.keys)
    }

    /// At most `limit` (0: all) keys starting with `prefix.key` whose names
    /// sort after `start_after`, page by page.
    pub async fn list_keys(
        &self,
        prefix: KeyPath<'_>,
        start_after: &str,
        limit: u32,
    ) -> Result<Vec<KeyInfo>> {
        let mut out: Vec<KeyInfo> = Vec::new();
        loop {
            let after = out
                .last()
                .map_or(start_after, |k| k.name.as_str())
                .to_string();
            let want = match limit {
                0 => KEY_PAGE,
                l => (l - out.len() as u32).min(KEY_PAGE),
            };
            let page = self.list_keys_page(prefix, &after, want).await?;
            let done = page.len() < want as usize;
            out.extend(page);
            if done || (limit > 0 && out.len() >= limit as usize) {
                return Ok(out);
            }
        }
    }

    /// Deletes a key.
    pub async fn delete_key(&self, path: KeyPath<'_>) -> Result<()> {
        let req = DeleteKeyRequest {
            volume: path.volume.into(),
            bucket: path.bucket.into(),
            name: path.key.into(),
        };
        om_call!(self, delete_key, req)?;
        Ok(())
    }

    /// Renames a key within its bucket (a file, or a directory with what it
    /// holds, in a file-system bucket); the new name must be free.
    pub async fn rename_key(&self, from: KeyPath<'_>, to: &str) -> Result<()> {
        ozone_common::names::check_key_name(to)?;
        let req = RenameKeyRequest {
            volume: from.volume.into(),
            bucket: from.bucket.into(),
            from: from.key.into(),
            to: to.into(),
        };
        om_call!(self, rename_key, req)?;
        Ok(())
    }

    /// Makes a directory and its missing parents; whether it was made.
    pub async fn mkdirs(&self, path: KeyPath<'_>) -> Result<bool> {
        let req = MkdirsRequest {
            path: fs_path(path),
        };
        Ok(om_call!(self, mkdirs, req)?.created)
    }

    /// The status of a path.
    pub async fn file_status(&self, path: KeyPath<'_>) -> Result<FileStatus> {
        let req = GetFileStatusRequest {
            path: fs_path(path),
        };
        Ok(om_call!(self, get_file_status, req)?
            .status
            .unwrap_or_default())
    }

    /// One page of a directory.
    pub async fn list_status(
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
        Ok(om_call!(self, list_status, req)?.entries)
    }

    /// Renames a path within its bucket; returns the new path.
    pub async fn rename(&self, from: KeyPath<'_>, to: &str) -> Result<String> {
        let req = RenameRequest {
            from: fs_path(from),
            to: to.into(),
        };
        Ok(om_call!(self, rename, req)?.path)
    }

    /// Deletes a file or directory.
    pub async fn delete_path(&self, path: KeyPath<'_>, recursive: bool) -> Result<()> {
        let req = DeletePathRequest {
            path: fs_path(path),
            recursive,
        };
        om_call!(self, delete_path, req)?;
        Ok(())
    }

    /// Bytes, files and directories under a path.
    pub async fn content_summary(&self, path: KeyPath<'_>) -> Result<ContentSummary> {
        let req = ContentSummaryRequest {
            path: fs_path(path),
        };
        om_call!(self, get_content_summary, req)
    }

    /// Recovers the lease of the file at `path`.
    pub async fn recover_lease(&self, path: KeyPath<'_>) -> Result<RecoverLeaseResponse> {
        let req = RecoverLeaseRequest {
            path: fs_path(path),
        };
        om_call!(self, recover_lease, req)
    }

    /// Whether the file at `path` is closed.
    pub async fn is_file_closed(&self, path: KeyPath<'_>) -> Result<bool> {
        let req = IsFileClosedRequest {
            path: fs_path(path),
        };
        Ok(om_call!(self, is_file_closed, req)?.closed)
    }

    /// Every volume.
    pub async fn list_volumes(&self) -> Result<Vec<VolumeInfo>> {
        Ok(om_call!(self, list_volumes, ListVolumesRequest {})?.volumes)
    }

    /// The buckets of a volume.
    pub async fn list_buckets(&self, volume: &str) -> Result<Vec<BucketInfo>> {
        let req = ListBucketsRequest {
            volume: volume.into(),
        };
        Ok(om_call!(self, list_buckets, req)?.buckets)
    }

    /// Who the OM takes the caller for (through a sidecar: the workload).
    pub async fn who_am_i(&self) -> Result<WhoAmIResponse> {
        om_call!(self, who_am_i, WhoAmIRequest {})
    }

    /// Datanodes known to the OM.
    pub async fn list_datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        Ok(om_call!(self, list_datanodes, ListDatanodesRequest {})?.datanodes)
    }
}
