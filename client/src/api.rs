//! The client API: [`KeyAccess`] (keys), [`FsAccess`] (the file-system calls
//! of FILE_SYSTEM_OPTIMIZED buckets), [`KeyRead`] (an open key) and
//! [`KeyWrite`] (a key being written). The direct client ([`Client`]) and
//! the sidecar client ([`SidecarClient`]) implement them, so that code above
//! them (the CLI, the benchmark, the sidecar itself) is written once.
//! Every call names its key with one [`KeyPath`].
//!
//! The namespace calls (lookups, listings, deletes, directories, renames)
//! are provided here once, on the client's [`Om`]: the OM's own service,
//! reached directly or through the sidecar. A client implements only
//! opening, creating and checksumming keys.
//!
//! [`Client`]: crate::Client
//! [`SidecarClient`]: crate::SidecarClient

use std::future::Future;

use ozone_common::names::KeyPath;
use ozone_proto::{ContentSummary, FileStatus, KeyInfo};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{FileChecksum, Om, Result};

/// Key operations of a client.
pub trait KeyAccess: Send + Sync {
    /// An open key.
    type Reader: KeyRead;
    /// A key being written.
    type Writer: KeyWrite;

    /// The OM's service the namespace calls go to.
    fn om(&self) -> &Om;

    /// Opens a key for reading under the client's verify-checksum setting.
    fn open_key(&self, path: KeyPath<'_>) -> impl Future<Output = Result<Self::Reader>> + Send {
        self.open_key_with(path, None)
    }

    /// Opens a key for reading; `verify` overrides the client's
    /// verify-checksum setting for this stream (a sidecar may refuse it).
    fn open_key_with(
        &self,
        path: KeyPath<'_>,
        verify: Option<bool>,
    ) -> impl Future<Output = Result<Self::Reader>> + Send;

    /// Starts writing a key (replacing any key of that name on close).
    fn create_key(&self, path: KeyPath<'_>) -> impl Future<Output = Result<Self::Writer>> + Send;

    /// Writes a key from `data`; returns the committed key.
    fn put_key<R: AsyncRead + Unpin + Send>(
        &self,
        path: KeyPath<'_>,
        data: R,
    ) -> impl Future<Output = Result<KeyInfo>> + Send {
        async move { copy_in(self.create_key(path).await?, data).await }
    }

    /// A committed key's metadata, with its block locations.
    fn key_info(&self, path: KeyPath<'_>) -> impl Future<Output = Result<KeyInfo>> + Send {
        self.om().lookup(path)
    }

    /// The keys of `prefix`'s bucket whose names start with `prefix.key`.
    fn list_keys(&self, prefix: KeyPath<'_>) -> impl Future<Output = Result<Vec<KeyInfo>>> + Send {
        self.om().list_keys(prefix, "", 0)
    }

    /// At most `limit` (0: all) of those keys whose names sort after
    /// `start_after`, asked of the OM page by page.
    fn list_keys_after(
        &self,
        prefix: KeyPath<'_>,
        start_after: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<KeyInfo>>> + Send {
        self.om().list_keys(prefix, start_after, limit)
    }

    /// Deletes a key.
    fn delete_key(&self, path: KeyPath<'_>) -> impl Future<Output = Result<()>> + Send {
        self.om().delete_key(path)
    }

    /// A key's composite CRC, from block metadata only (the same for any
    /// bytes-per-checksum the key was written with).
    fn key_checksum(&self, path: KeyPath<'_>) -> impl Future<Output = Result<FileChecksum>> + Send;
}

/// File-system calls (FILE_SYSTEM_OPTIMIZED buckets) of a client. A path's
/// `key` is the path inside the bucket ("" is the bucket's root).
pub trait FsAccess: KeyAccess {
    /// Makes directory `path` and its missing parents; whether it was made
    /// (false: it existed).
    fn mkdirs(&self, path: KeyPath<'_>) -> impl Future<Output = Result<bool>> + Send {
        self.om().mkdirs(path)
    }

    /// Creates file `path` for writing, making missing parent directories.
    /// With `overwrite` false an existing file is
    /// `ClientError::AlreadyExists`; a file being written is never taken
    /// over. Of racing exclusive creates exactly one succeeds.
    fn create_file(
        &self,
        path: KeyPath<'_>,
        overwrite: bool,
    ) -> impl Future<Output = Result<Self::Writer>> + Send;

    /// Writes file `path` from `data` (with `overwrite` false an existing
    /// file is `ClientError::AlreadyExists`); returns the committed file.
    fn put_file<R: AsyncRead + Unpin + Send>(
        &self,
        path: KeyPath<'_>,
        overwrite: bool,
        data: R,
    ) -> impl Future<Output = Result<KeyInfo>> + Send {
        async move { copy_in(self.create_file(path, overwrite).await?, data).await }
    }

    /// The status of `path`.
    fn file_status(&self, path: KeyPath<'_>) -> impl Future<Output = Result<FileStatus>> + Send {
        self.om().file_status(path)
    }

    /// One page of directory `path`: entries named after `start_after`, at
    /// most `limit` (0: the OM's default), by name.
    fn list_status(
        &self,
        path: KeyPath<'_>,
        start_after: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FileStatus>>> + Send {
        self.om().list_status(path, start_after, limit)
    }

    /// Every entry of directory `path`, page by page.
    fn list_status_all(
        &self,
        path: KeyPath<'_>,
    ) -> impl Future<Output = Result<Vec<FileStatus>>> + Send {
        async move {
            const PAGE: u32 = 1000;
            let mut out: Vec<FileStatus> = Vec::new();
            loop {
                let after = out
                    .last()
                    .map(|s| s.path.rsplit('/').next().unwrap_or_default().to_string())
                    .unwrap_or_default();
                let page = self.list_status(path, &after, PAGE).await?;
                let done = page.len() < PAGE as usize;
                out.extend(page);
                if done {
                    return Ok(out);
                }
            }
        }
    }

    /// Renames `from` to `to` (a path in the same bucket) atomically: a
    /// directory with everything under it, in O(1); an existing directory
    /// `to` receives `from` under its own name. Returns the new path.
    fn rename(&self, from: KeyPath<'_>, to: &str) -> impl Future<Output = Result<String>> + Send {
        self.om().rename(from, to)
    }

    /// Deletes a file or an empty directory, or with `recursive` a
    /// directory and everything under it.
    fn delete_path(
        &self,
        path: KeyPath<'_>,
        recursive: bool,
    ) -> impl Future<Output = Result<()>> + Send {
        self.om().delete_path(path, recursive)
    }

    /// Bytes, files and directories under `path`.
    fn content_summary(
        &self,
        path: KeyPath<'_>,
    ) -> impl Future<Output = Result<ContentSummary>> + Send {
        self.om().content_summary(path)
    }

    /// Closes the file at `path` if its writer is gone, at its last synced
    /// length (HBase's WAL recovery); returns the length. The file is
    /// closed when this returns; the old writer's later calls fail.
    fn recover_lease(&self, path: KeyPath<'_>) -> impl Future<Output = Result<u64>> + Send {
        async move { Ok(self.om().recover_lease(path).await?.length) }
    }

    /// Whether the file at `path` is closed (not being written).
    fn is_file_closed(&self, path: KeyPath<'_>) -> impl Future<Output = Result<bool>> + Send {
        self.om().is_file_closed(path)
    }

    /// Every volume (`ozone fs -ls /`).
    fn volumes(&self) -> impl Future<Output = Result<Vec<ozone_proto::VolumeInfo>>> + Send {
        self.om().list_volumes()
    }

    /// Capacity and use of the datanodes in service, in bytes (`ozone fs
    /// -df`).
    fn capacity(&self) -> impl Future<Output = Result<(u64, u64)>> + Send {
        async move {
            use ozone_proto::{NodeState, OperationalState};
            let nodes = self.om().list_datanodes().await?;
            let live = nodes.into_iter().filter(|d| {
                d.state == NodeState::Healthy as i32
                    && d.operational_state == OperationalState::InService as i32
            });
            Ok(live.fold((0, 0), |(c, u), d| (c + d.capacity, u + d.used)))
        }
    }

    /// The buckets of `volume` (`ozone fs -ls /VOLUME`).
    fn buckets(
        &self,
        volume: &str,
    ) -> impl Future<Output = Result<Vec<ozone_proto::BucketInfo>>> + Send {
        self.om().list_buckets(volume)
    }
}

/// Reads of an open key.
pub trait KeyRead: Send + Sync {
    /// Key length.
    fn size(&self) -> u64;

    /// Whether this stream verifies checksums.
    fn verify_checksum(&self) -> bool;

    /// Reads up to `buf.len()` bytes at `offset` under the stream's setting;
    /// returns the count (short only at the end of the key).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> impl Future<Output = Result<usize>> + Send;

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8])
    -> impl Future<Output = Result<()>> + Send;

    /// Reads exactly `buf.len()` bytes at `offset` with checksums verified
    /// whatever the stream's setting (the fallback after an application's
    /// own checksum failed); a bad replica is skipped and reported.
    fn verified_read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Copies the whole key into `w`; returns the bytes copied.
    fn copy_to<W: AsyncWrite + Unpin + Send>(
        &self,
        w: &mut W,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Ends the stream.
    fn close(self) -> impl Future<Output = Result<()>> + Send;
}

/// A key being written.
pub trait KeyWrite: Send {
    /// Bytes written so far.
    fn size(&self) -> u64;

    /// Appends `data`.
    fn write(&mut self, data: &[u8]) -> impl Future<Output = Result<()>> + Send;

    /// hflush (HDFS's): every replica holds the bytes written so far and
    /// readers that open the file from now on see them. Nothing is
    /// fsynced and the OM is not called: a datanode that crashes, or a
    /// whole-cluster power loss, may lose them.
    fn hflush(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// hsync: as hflush, and every replica has fsynced the bytes and the
    /// OM has recorded the length (what lease recovery keeps at least).
    fn hsync(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Commits the key; returns it.
    fn close(self) -> impl Future<Output = Result<KeyInfo>> + Send;
}

/// Writes everything `input` yields into `w`, then commits it.
async fn copy_in<W: KeyWrite, R: AsyncRead + Unpin + Send>(
    mut w: W,
    mut input: R,
) -> Result<KeyInfo> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        w.write(&buf[..n]).await?;
    }
    w.close().await
}
