//! One way to read and write keys: [`KeyAccess`] and [`KeyRead`],
//! implemented by the direct client ([`Client`], [`KeyReader`]) and by the
//! sidecar client ([`SidecarClient`], [`SidecarReader`]), so that code
//! above them (the CLI, the benchmark) is written once; [`FsAccess`] adds
//! the file-system calls of FILE_SYSTEM_OPTIMIZED buckets.

use std::future::Future;

use ozone_proto::{ContentSummary, FileStatus, KeyInfo};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::sidecar::{SidecarClient, SidecarReader};
use crate::{Client, KeyReader, Result};

/// Key operations of a client.
pub trait KeyAccess: Send + Sync {
    /// An open key.
    type Reader: KeyRead;

    /// Opens a key for reading; `verify` overrides the client's
    /// verify-checksum default for this stream (a sidecar may refuse it).
    fn open(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        verify: Option<bool>,
    ) -> impl Future<Output = Result<Self::Reader>> + Send;

    /// Writes a key from `data`; returns the committed key.
    fn put<R: AsyncRead + Unpin + Send>(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        data: R,
    ) -> impl Future<Output = Result<KeyInfo>> + Send;

    /// A key's metadata.
    fn info(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> impl Future<Output = Result<KeyInfo>> + Send;

    /// The keys of a bucket whose names start with `prefix`.
    fn list(
        &self,
        volume: &str,
        bucket: &str,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<KeyInfo>>> + Send;

    /// Deletes a key.
    fn delete(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// File-system calls (FILE_SYSTEM_OPTIMIZED buckets) of a client.
pub trait FsAccess: KeyAccess {
    /// Makes directory `path` and its missing parents; whether it was made.
    fn mkdirs(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The status of `path` ("" is the bucket's root).
    fn file_status(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<FileStatus>> + Send;

    /// One page of directory `path`: entries after `start_after`, by name.
    fn list_status(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        start_after: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FileStatus>>> + Send;

    /// Renames atomically; returns the new path.
    fn rename(
        &self,
        volume: &str,
        bucket: &str,
        from: &str,
        to: &str,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Deletes a file or directory (`recursive` for a non-empty one).
    fn delete_path(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Bytes, files and directories under `path`.
    fn content_summary(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<ContentSummary>> + Send;

    /// Closes a file whose writer is gone at its last synced length;
    /// returns the length.
    fn recover_lease(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Whether the file at `path` is closed (not being written).
    fn is_file_closed(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Writes file `path` from `data` (with `overwrite` false an existing
    /// file is `ClientError::AlreadyExists`); returns the committed file.
    fn put_file<R: AsyncRead + Unpin + Send>(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        overwrite: bool,
        data: R,
    ) -> impl Future<Output = Result<KeyInfo>> + Send;

    /// Every entry of directory `path`, page by page.
    fn list_status_all(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> impl Future<Output = Result<Vec<FileStatus>>> + Send {
        async move {
            const PAGE: u32 = 1000;
            let mut out: Vec<FileStatus> = Vec::new();
            loop {
                let after = out
                    .last()
                    .map(|s| s.path.rsplit('/').next().unwrap_or_default().to_string())
                    .unwrap_or_default();
                let page = self.list_status(volume, bucket, path, &after, PAGE).await?;
                let done = page.len() < PAGE as usize;
                out.extend(page);
                if done {
                    return Ok(out);
                }
            }
        }
    }
}

/// Reads of an open key.
pub trait KeyRead: Send + Sync {
    /// Key length.
    fn size(&self) -> u64;

    /// Whether this stream verifies checksums.
    fn verify_checksum(&self) -> bool;

    /// Reads up to `buf.len()` bytes at `offset`; returns the count.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> impl Future<Output = Result<usize>> + Send;

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8])
    -> impl Future<Output = Result<()>> + Send;

    /// Reads exactly `buf.len()` bytes at `offset`, verified whatever the
    /// stream's setting.
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

/// The calls both clients make the same way.
macro_rules! shared_key_calls {
    () => {
        async fn put<R: AsyncRead + Unpin + Send>(
            &self,
            volume: &str,
            bucket: &str,
            key: &str,
            data: R,
        ) -> Result<KeyInfo> {
            self.put_key(volume, bucket, key, data).await
        }

        async fn info(&self, volume: &str, bucket: &str, key: &str) -> Result<KeyInfo> {
            self.key_info(volume, bucket, key).await
        }

        async fn list(&self, volume: &str, bucket: &str, prefix: &str) -> Result<Vec<KeyInfo>> {
            self.list_keys(volume, bucket, prefix).await
        }

        async fn delete(&self, volume: &str, bucket: &str, key: &str) -> Result<()> {
            self.delete_key(volume, bucket, key).await
        }
    };
}

/// A key being written, by either client.
pub(crate) trait KeyWrite: Send {
    /// Appends `data`.
    fn write(&mut self, data: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// Commits the key.
    fn close(self) -> impl Future<Output = Result<KeyInfo>> + Send;
}

impl KeyWrite for crate::KeyWriter {
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        crate::KeyWriter::write(self, data).await
    }
    async fn close(self) -> Result<KeyInfo> {
        crate::KeyWriter::close(self).await
    }
}

impl KeyWrite for crate::SidecarWriter {
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        crate::SidecarWriter::write(self, data).await
    }
    async fn close(self) -> Result<KeyInfo> {
        crate::SidecarWriter::close(self).await
    }
}

/// Writes everything `input` yields into `w`, then commits it.
pub(crate) async fn copy_in<W: KeyWrite, R: AsyncRead + Unpin>(
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

/// The file-system calls both clients have under the same names.
macro_rules! shared_fs_calls {
    () => {
        async fn mkdirs(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
            Self::mkdirs(self, volume, bucket, path).await
        }

        async fn file_status(&self, volume: &str, bucket: &str, path: &str) -> Result<FileStatus> {
            Self::file_status(self, volume, bucket, path).await
        }

        async fn list_status(
            &self,
            volume: &str,
            bucket: &str,
            path: &str,
            start_after: &str,
            limit: u32,
        ) -> Result<Vec<FileStatus>> {
            Self::list_status(self, volume, bucket, path, start_after, limit).await
        }

        async fn rename(&self, volume: &str, bucket: &str, from: &str, to: &str) -> Result<String> {
            Self::rename(self, volume, bucket, from, to).await
        }

        async fn delete_path(
            &self,
            volume: &str,
            bucket: &str,
            path: &str,
            recursive: bool,
        ) -> Result<()> {
            Self::delete_path(self, volume, bucket, path, recursive).await
        }

        async fn content_summary(
            &self,
            volume: &str,
            bucket: &str,
            path: &str,
        ) -> Result<ContentSummary> {
            Self::content_summary(self, volume, bucket, path).await
        }

        async fn recover_lease(&self, volume: &str, bucket: &str, path: &str) -> Result<u64> {
            Self::recover_lease(self, volume, bucket, path).await
        }

        async fn is_file_closed(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
            Self::is_file_closed(self, volume, bucket, path).await
        }

        async fn put_file<R: AsyncRead + Unpin + Send>(
            &self,
            volume: &str,
            bucket: &str,
            path: &str,
            overwrite: bool,
            data: R,
        ) -> Result<KeyInfo> {
            copy_in(
                self.create_file(volume, bucket, path, overwrite).await?,
                data,
            )
            .await
        }
    };
}

impl FsAccess for Client {
    shared_fs_calls!();
}

impl FsAccess for SidecarClient {
    shared_fs_calls!();
}

/// The reads both readers have under the same names.
macro_rules! shared_reads {
    ($t:ty) => {
        fn size(&self) -> u64 {
            <$t>::size(self)
        }

        fn verify_checksum(&self) -> bool {
            <$t>::verify_checksum(self)
        }

        async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
            <$t>::read_at(self, offset, buf).await
        }

        async fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            <$t>::read_exact_at(self, offset, buf).await
        }

        async fn verified_read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            <$t>::verified_read_at(self, offset, buf).await
        }

        async fn copy_to<W: AsyncWrite + Unpin + Send>(&self, w: &mut W) -> Result<u64> {
            <$t>::copy_to(self, w).await
        }
    };
}

impl KeyAccess for Client {
    type Reader = KeyReader;

    async fn open(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        verify: Option<bool>,
    ) -> Result<KeyReader> {
        let mut r = self.open_key(volume, bucket, key).await?;
        if let Some(v) = verify {
            r.set_verify_checksum(v);
        }
        Ok(r)
    }

    shared_key_calls!();
}

impl KeyRead for KeyReader {
    shared_reads!(KeyReader);

    /// A direct reader holds nothing on a server.
    async fn close(self) -> Result<()> {
        Ok(())
    }
}

impl KeyAccess for SidecarClient {
    type Reader = SidecarReader;

    async fn open(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        verify: Option<bool>,
    ) -> Result<SidecarReader> {
        self.open_key_with(volume, bucket, key, verify).await
    }

    shared_key_calls!();
}

impl KeyRead for SidecarReader {
    shared_reads!(SidecarReader);

    async fn close(self) -> Result<()> {
        SidecarReader::close(self).await
    }
}
