//! Talking to a co-located `ozone-sidecar` instead of the cluster: the
//! sidecar holds the node's datanode sockets and the workload's policy; the
//! application only needs the sidecar's socket (in an emptyDir both
//! containers share).
//!
//! The API mirrors [`Client`](crate::Client): keys are listed, stat'ed,
//! opened, read at positions, written and deleted. [`SidecarReader`] adds
//! [`verified_read_at`](SidecarReader::verified_read_at), the fallback an
//! application uses after its own checksum (an HFile's) failed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ozone_proto::sidecar_client::SidecarClient as Rpc;
use ozone_proto::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};

use crate::fs::fs_path;
use crate::{ClientError, Result};

/// Largest piece asked for in one read call.
const MAX_PIECE: usize = 4 << 20;

/// A connection to a sidecar. Cheap to clone.
#[derive(Clone)]
pub struct SidecarClient {
    rpc: Rpc<Channel>,
    data: Option<Arc<DataPool>>,
}

/// Idle connections to a sidecar's data socket (positional reads without
/// HTTP/2; see `ozone_sidecar::data`).
struct DataPool {
    path: PathBuf,
    idle: Mutex<Vec<tokio::net::UnixStream>>,
}

/// Most idle data connections kept.
const MAX_IDLE: usize = 64;

impl DataPool {
    fn take(&self) -> Option<tokio::net::UnixStream> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn give(&self, s: tokio::net::UnixStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(s);
        }
    }

    /// One read on one connection; `Err(None)` when the connection failed
    /// (the caller may retry on a fresh one).
    async fn read_on(
        &self,
        s: &mut tokio::net::UnixStream,
        req: &SidecarReadRequest,
        out: &mut [u8],
    ) -> std::result::Result<usize, Option<ClientError>> {
        use ozone_common::shortcircuit as sc;
        sc::send(s, sc::CMD_SIDECAR_READ, req, &[])
            .await
            .map_err(|_| None)?;
        let mut hdr = [0u8; sc::HEADER];
        s.read_exact(&mut hdr).await.map_err(|_| None)?;
        let len = u32::from_be_bytes([hdr[2], hdr[3], hdr[4], hdr[5]]) as usize;
        if hdr[0] != sc::VERSION {
            return Err(Some(ClientError::Unavailable(format!(
                "sidecar data socket speaks version {}",
                hdr[0]
            ))));
        }
        if hdr[1] == sc::CMD_SIDECAR_READ | sc::RESPONSE {
            if len > out.len() {
                return Err(Some(ClientError::Unavailable(format!(
                    "sidecar returned {len} bytes for a read of {}",
                    out.len()
                ))));
            }
            s.read_exact(&mut out[..len]).await.map_err(|_| None)?;
            return Ok(len);
        }
        if len > sc::MAX_FRAME as usize {
            return Err(Some(ClientError::Unavailable(
                "oversized error from the sidecar data socket".into(),
            )));
        }
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.map_err(|_| None)?;
        let e = <SidecarDataError as prost::Message>::decode(body.as_slice()).map_err(|e| {
            Some(ClientError::Unavailable(format!(
                "malformed sidecar data socket reply: {e}"
            )))
        })?;
        Err(Some(ClientError::from(tonic::Status::new(
            tonic::Code::from_i32(e.code),
            e.message,
        ))))
    }

    /// Reads `out.len()` bytes (or fewer at the end) at `offset` of stream
    /// `handle`; `None` when the data socket cannot be reached.
    async fn read(&self, handle: u64, offset: u64, out: &mut [u8]) -> Option<Result<usize>> {
        let req = SidecarReadRequest {
            handle,
            offset,
            length: out.len() as u64,
        };
        // A pooled connection may be stale (sidecar restarted): one retry on
        // a fresh one.
        for pooled in [true, false] {
            let mut s = match if pooled { self.take() } else { None } {
                Some(s) => s,
                None if pooled => continue,
                None => match tokio::net::UnixStream::connect(&self.path).await {
                    Ok(s) => s,
                    Err(_) => return None,
                },
            };
            match self.read_on(&mut s, &req, out).await {
                Ok(n) => {
                    self.give(s);
                    return Some(Ok(n));
                }
                Err(Some(e)) => {
                    self.give(s);
                    return Some(Err(e));
                }
                Err(None) if pooled => continue,
                Err(None) => {
                    return Some(Err(ClientError::Unavailable(
                        "the sidecar closed its data socket mid-read".into(),
                    )));
                }
            }
        }
        None
    }
}

fn key_ref(volume: &str, bucket: &str, key: &str) -> Option<KeyRef> {
    Some(KeyRef {
        volume: volume.into(),
        bucket: bucket.into(),
        key: key.into(),
    })
}

impl SidecarClient {
    /// A client of the sidecar listening on the UNIX socket `path`. The
    /// connection is made lazily and remade after a sidecar restart.
    pub fn unix(path: impl AsRef<Path>) -> Result<Self> {
        let path: PathBuf = path.as_ref().to_path_buf();
        let path_for_data = path.clone();
        let ch = Endpoint::from_static("http://sidecar.local")
            .connect_timeout(std::time::Duration::from_secs(5))
            .initial_stream_window_size(ozone_common::grpc::STREAM_WINDOW)
            .initial_connection_window_size(ozone_common::grpc::CONNECTION_WINDOW)
            .connect_with_connector_lazy(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot reach the sidecar at {}: {e}", path.display()),
                        )
                    })?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }));
        let mut c = Self::from_channel(ch);
        c.data = Some(Arc::new(DataPool {
            path: path_for_data.with_extension("data"),
            idle: Mutex::new(Vec::new()),
        }));
        Ok(c)
    }

    /// A client of the sidecar's TCP port (`host:port`).
    pub fn tcp(addr: &str) -> Result<Self> {
        let ch = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| ClientError::InvalidArgument(format!("sidecar address {addr}: {e}")))?
            .tcp_nodelay(true)
            .initial_stream_window_size(ozone_common::grpc::STREAM_WINDOW)
            .initial_connection_window_size(ozone_common::grpc::CONNECTION_WINDOW)
            .connect_lazy();
        Ok(Self::from_channel(ch))
    }

    fn from_channel(ch: Channel) -> Self {
        Self {
            data: None,
            rpc: Rpc::new(ch)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        }
    }

    /// The workload policy the sidecar enforces.
    pub async fn policy(&self) -> Result<SidecarPolicy> {
        Ok(self
            .rpc
            .clone()
            .get_policy(SidecarPolicyRequest {})
            .await?
            .into_inner())
    }

    /// Metadata of a committed key.
    pub async fn key_info(&self, volume: &str, bucket: &str, key: &str) -> Result<KeyInfo> {
        let r = self
            .rpc
            .clone()
            .stat(SidecarStatRequest {
                key: key_ref(volume, bucket, key),
            })
            .await?
            .into_inner();
        r.key
            .ok_or_else(|| ClientError::NotFound(format!("key /{volume}/{bucket}/{key}")))
    }

    /// A key's composite CRC, computed by the sidecar from block metadata.
    pub async fn key_checksum(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> Result<crate::file_checksum::FileChecksum> {
        let r = self
            .rpc
            .clone()
            .file_checksum(SidecarStatRequest {
                key: key_ref(volume, bucket, key),
            })
            .await?
            .into_inner();
        Ok(crate::file_checksum::FileChecksum {
            kind: ozone_proto::ChecksumType::try_from(r.r#type)
                .unwrap_or(ozone_proto::ChecksumType::Unspecified),
            crc: r.crc,
            size: r.length,
            bytes_per_checksum: r.bytes_per_checksum,
        })
    }

    /// Keys of a bucket starting with `prefix`.
    pub async fn list_keys(
        &self,
        volume: &str,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<KeyInfo>> {
        Ok(self
            .rpc
            .clone()
            .list(SidecarListRequest {
                volume: volume.into(),
                bucket: bucket.into(),
                prefix: prefix.into(),
                limit: 0,
            })
            .await?
            .into_inner()
            .keys)
    }

    /// Opens a key under the workload's verify-checksum default.
    pub async fn open_key(&self, volume: &str, bucket: &str, key: &str) -> Result<SidecarReader> {
        self.open_key_with(volume, bucket, key, None).await
    }

    /// Opens a key, asking for `verify` on this stream (refused when the
    /// workload policy forbids overrides and `verify` differs from it).
    pub async fn open_key_with(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        verify: Option<bool>,
    ) -> Result<SidecarReader> {
        let r = self
            .rpc
            .clone()
            .open(SidecarOpenRequest {
                key: key_ref(volume, bucket, key),
                verify_checksum: verify,
            })
            .await?
            .into_inner();
        Ok(SidecarReader {
            rpc: self.rpc.clone(),
            data: self.data.clone(),
            handle: r.handle,
            size: r.size,
            verify: r.verify_checksum,
            closed: false,
        })
    }

    /// Starts writing a key.
    pub async fn create_key(&self, volume: &str, bucket: &str, key: &str) -> Result<SidecarWriter> {
        self.create_file(volume, bucket, key, true).await
    }

    /// Starts writing file `path`; with `overwrite` false an existing file
    /// (or one being written) is `ClientError::AlreadyExists`.
    pub async fn create_file(
        &self,
        volume: &str,
        bucket: &str,
        path: &str,
        overwrite: bool,
    ) -> Result<SidecarWriter> {
        let r = self
            .rpc
            .clone()
            .create(SidecarCreateRequest {
                key: key_ref(volume, bucket, path.trim_start_matches('/')),
                exclusive: !overwrite,
            })
            .await?
            .into_inner();
        Ok(SidecarWriter {
            rpc: self.rpc.clone(),
            handle: r.handle,
            written: 0,
        })
    }

    /// Writes a key from an async reader; returns the committed key.
    pub async fn put_key<R: AsyncRead + Unpin>(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        input: R,
    ) -> Result<KeyInfo> {
        crate::access::copy_in(self.create_key(volume, bucket, key).await?, input).await
    }

    /// Deletes a key.
    pub async fn delete_key(&self, volume: &str, bucket: &str, key: &str) -> Result<()> {
        self.rpc
            .clone()
            .delete(SidecarDeleteRequest {
                key: key_ref(volume, bucket, key),
            })
            .await?;
        Ok(())
    }

    /// Makes directory `path` and its parents; whether it was made.
    pub async fn mkdirs(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
        let req = MkdirsRequest {
            path: fs_path(volume, bucket, path),
        };
        Ok(self.rpc.clone().mkdirs(req).await?.into_inner().created)
    }

    /// The status of `path`.
    pub async fn file_status(&self, volume: &str, bucket: &str, path: &str) -> Result<FileStatus> {
        let req = GetFileStatusRequest {
            path: fs_path(volume, bucket, path),
        };
        let r = self.rpc.clone().get_file_status(req).await?.into_inner();
        Ok(r.status.unwrap_or_default())
    }

    /// One page of directory `path`.
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
        Ok(self
            .rpc
            .clone()
            .list_status(req)
            .await?
            .into_inner()
            .entries)
    }

    /// Renames `from` to `to`; returns the new path.
    pub async fn rename(&self, volume: &str, bucket: &str, from: &str, to: &str) -> Result<String> {
        let req = RenameRequest {
            from: fs_path(volume, bucket, from),
            to: to.into(),
        };
        Ok(self.rpc.clone().rename(req).await?.into_inner().path)
    }

    /// Deletes a file or directory (`recursive` for a non-empty one).
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
        self.rpc.clone().delete_path(req).await?;
        Ok(())
    }

    /// Closes a file whose writer is gone at its last synced length;
    /// returns the length.
    pub async fn recover_lease(&self, volume: &str, bucket: &str, path: &str) -> Result<u64> {
        let req = RecoverLeaseRequest {
            path: fs_path(volume, bucket, path),
        };
        Ok(self
            .rpc
            .clone()
            .recover_lease(req)
            .await?
            .into_inner()
            .length)
    }

    /// Whether the file at `path` is closed.
    pub async fn is_file_closed(&self, volume: &str, bucket: &str, path: &str) -> Result<bool> {
        let req = IsFileClosedRequest {
            path: fs_path(volume, bucket, path),
        };
        Ok(self
            .rpc
            .clone()
            .is_file_closed(req)
            .await?
            .into_inner()
            .closed)
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
        Ok(self
            .rpc
            .clone()
            .get_content_summary(req)
            .await?
            .into_inner())
    }
}

/// A key opened through the sidecar. Dropped without [`SidecarReader::close`]
/// inside a Tokio runtime, it closes its stream in the background (the
/// sidecar also closes the streams of a connection that goes away).
pub struct SidecarReader {
    rpc: Rpc<Channel>,
    data: Option<Arc<DataPool>>,
    handle: u64,
    size: u64,
    verify: bool,
    closed: bool,
}

impl Drop for SidecarReader {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut rpc = self.rpc.clone();
            let handle = self.handle;
            rt.spawn(async move {
                let _ = rpc.close(SidecarCloseRequest { handle }).await;
            });
        }
    }
}

impl SidecarReader {
    /// Key length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The verify-checksum setting in force for this stream.
    pub fn verify_checksum(&self) -> bool {
        self.verify
    }

    async fn read_with(&self, offset: u64, buf: &mut [u8], verified: bool) -> Result<usize> {
        if offset > self.size {
            return Err(ClientError::OutOfRange {
                offset,
                len: buf.len() as u64,
                size: self.size,
            });
        }
        let want = buf.len().min((self.size - offset) as usize);
        let mut got = 0;
        while got < want {
            let len = (want - got).min(MAX_PIECE);
            if !verified && let Some(d) = &self.data {
                match d
                    .read(self.handle, offset + got as u64, &mut buf[got..got + len])
                    .await
                {
                    Some(Ok(0)) => {
                        return Err(ClientError::Unavailable("sidecar returned no bytes".into()));
                    }
                    Some(Ok(n)) => {
                        got += n;
                        continue;
                    }
                    Some(Err(e)) => return Err(e),
                    // No data socket: the gRPC call below.
                    None => {}
                }
            }
            let req = SidecarReadRequest {
                handle: self.handle,
                offset: offset + got as u64,
                length: len as u64,
            };
            let mut rpc = self.rpc.clone();
            let r = if verified {
                rpc.verified_read(req).await?
            } else {
                rpc.read(req).await?
            }
            .into_inner();
            if r.data.is_empty() || r.data.len() > len {
                return Err(ClientError::Unavailable(format!(
                    "sidecar returned {} bytes for a read of {len}",
                    r.data.len()
                )));
            }
            buf[got..got + r.data.len()].copy_from_slice(&r.data);
            got += r.data.len();
        }
        Ok(got)
    }

    /// Reads up to `buf.len()` bytes at `offset` under the stream's setting;
    /// returns the count (short only at the end of the key).
    pub async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_with(offset, buf, false).await
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub async fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf).await?;
        if n < buf.len() {
            return Err(ClientError::OutOfRange {
                offset,
                len: buf.len() as u64,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Re-reads exactly `buf.len()` bytes at `offset` with checksums
    /// verified whatever the stream's setting; a bad replica is skipped and
    /// reported by the sidecar.
    pub async fn verified_read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_with(offset, buf, true).await?;
        if n < buf.len() {
            return Err(ClientError::OutOfRange {
                offset,
                len: buf.len() as u64,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Streams the whole key into `w`; returns the bytes copied.
    pub async fn copy_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> Result<u64> {
        let mut s = self
            .rpc
            .clone()
            .read_stream(SidecarReadRequest {
                handle: self.handle,
                offset: 0,
                length: self.size,
            })
            .await?
            .into_inner();
        let mut n = 0u64;
        while let Some(piece) = s.message().await? {
            w.write_all(&piece.data).await?;
            n += piece.data.len() as u64;
        }
        w.flush().await?;
        if n != self.size {
            return Err(ClientError::Unavailable(format!(
                "sidecar streamed {n} of {} bytes",
                self.size
            )));
        }
        Ok(n)
    }

    /// Closes the stream in the sidecar.
    pub async fn close(mut self) -> Result<()> {
        self.closed = true;
        self.rpc
            .clone()
            .close(SidecarCloseRequest {
                handle: self.handle,
            })
            .await?;
        Ok(())
    }
}

/// A key being written through the sidecar.
pub struct SidecarWriter {
    rpc: Rpc<Channel>,
    handle: u64,
    written: u64,
}

impl SidecarWriter {
    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.written
    }

    /// Appends `data`.
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        for piece in data.chunks(MAX_PIECE) {
            let r = self
                .rpc
                .write(SidecarWriteRequest {
                    handle: self.handle,
                    data: bytes::Bytes::copy_from_slice(piece),
                })
                .await?
                .into_inner();
            self.written = r.written;
        }
        Ok(())
    }

    /// hsync: the bytes written so far are durable and visible to readers
    /// that open the file from now on.
    pub async fn hsync(&mut self) -> Result<()> {
        self.rpc
            .hsync(SidecarCommitRequest {
                handle: self.handle,
            })
            .await?;
        Ok(())
    }

    /// Commits the key; returns it.
    pub async fn close(mut self) -> Result<KeyInfo> {
        let r = self
            .rpc
            .commit(SidecarCommitRequest {
                handle: self.handle,
            })
            .await?
            .into_inner();
        r.key
            .ok_or_else(|| ClientError::Unavailable("sidecar committed no key".into()))
    }
}
