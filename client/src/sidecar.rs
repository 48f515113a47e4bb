//! Talking to a co-located `ozone-sidecar` instead of the cluster: the
//! sidecar holds the node's datanode sockets and the workload's policy; the
//! application only needs the sidecar's socket (in an emptyDir both
//! containers share).
//!
//! It implements the same traits as [`Client`](crate::Client): keys are
//! listed, stat'ed, opened, read at positions, written and deleted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ozone_proto::sidecar_client::SidecarClient as Rpc;
use ozone_proto::*;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};

use crate::api::{FsAccess, KeyAccess, KeyRead, KeyWrite};
use crate::{ClientConfig, ClientError, FileChecksum, Om, Result};
use ozone_common::names::KeyPath;

/// Largest piece asked for in one read call.
const MAX_PIECE: usize = 4 << 20;

/// A connection to a sidecar. Cheap to clone.
#[derive(Clone)]
pub struct SidecarClient {
    rpc: Rpc<Channel>,
    /// The OM's service on the same connection.
    om: Om,
    data: Option<Arc<DataPool>>,
}

/// Idle connections to a sidecar's data socket (positional reads without
/// HTTP/2; see the sidecar crate's `data` module).
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

fn key_ref(path: KeyPath<'_>) -> Option<KeyRef> {
    Some(KeyRef {
        volume: path.volume.into(),
        bucket: path.bucket.into(),
        key: path.key.into(),
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
        let mut c = Self::from_channel(ch, path_for_data.display().to_string());
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
        Ok(Self::from_channel(ch, addr.to_string()))
    }

    /// `address` names the sidecar in errors.
    fn from_channel(ch: Channel, address: String) -> Self {
        let config = ClientConfig::new(&address);
        Self {
            data: None,
            om: Om::through_sidecar(ch.clone(), address, &config),
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
}

impl KeyAccess for SidecarClient {
    type Reader = SidecarReader;
    type Writer = SidecarWriter;

    /// The OM's service as the sidecar passes it on.
    fn om(&self) -> &Om {
        &self.om
    }

    /// Refused by the sidecar when the workload policy forbids overrides
    /// and `verify` differs from it.
    async fn open_key_with(
        &self,
        path: KeyPath<'_>,
        verify: Option<bool>,
    ) -> Result<SidecarReader> {
        let r = self
            .rpc
            .clone()
            .open(SidecarOpenRequest {
                key: key_ref(path),
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

    async fn create_key(&self, path: KeyPath<'_>) -> Result<SidecarWriter> {
        self.create_file(path, true).await
    }

    /// Computed by the sidecar from block metadata.
    async fn key_checksum(&self, path: KeyPath<'_>) -> Result<FileChecksum> {
        let r = self
            .rpc
            .clone()
            .file_checksum(SidecarChecksumRequest { key: key_ref(path) })
            .await?
            .into_inner();
        Ok(FileChecksum {
            kind: ozone_proto::ChecksumType::try_from(r.r#type)
                .unwrap_or(ozone_proto::ChecksumType::Unspecified),
            crc: r.crc,
            size: r.length,
            bytes_per_checksum: r.bytes_per_checksum,
        })
    }
}

impl FsAccess for SidecarClient {
    async fn create_file(&self, path: KeyPath<'_>, overwrite: bool) -> Result<SidecarWriter> {
        let r = self
            .rpc
            .clone()
            .create(SidecarCreateRequest {
                key: key_ref(path.with_key(path.key.trim_start_matches('/'))),
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
    /// `OutOfRange` unless a read of `want` bytes at `offset` got them all.
    fn whole(&self, offset: u64, want: usize, got: usize) -> Result<()> {
        if got < want {
            return Err(ClientError::OutOfRange {
                offset,
                len: want as u64,
                size: self.size,
            });
        }
        Ok(())
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
}

impl KeyRead for SidecarReader {
    /// Key length.
    fn size(&self) -> u64 {
        self.size
    }

    /// The verify-checksum setting in force for this stream.
    fn verify_checksum(&self) -> bool {
        self.verify
    }

    /// Reads up to `buf.len()` bytes at `offset` under the stream's setting;
    /// returns the count (short only at the end of the key).
    async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_with(offset, buf, false).await
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    async fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf).await?;
        self.whole(offset, buf.len(), n)
    }

    /// Re-reads exactly `buf.len()` bytes at `offset` with checksums
    /// verified whatever the stream's setting; a bad replica is skipped and
    /// reported by the sidecar.
    async fn verified_read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_with(offset, buf, true).await?;
        self.whole(offset, buf.len(), n)
    }

    /// Streams the whole key into `w`; returns the bytes copied.
    async fn copy_to<W: AsyncWrite + Unpin + Send>(&self, w: &mut W) -> Result<u64> {
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
            w.write_all(&piece.data)
                .await
                .map_err(ClientError::Output)?;
            n += piece.data.len() as u64;
        }
        w.flush().await.map_err(ClientError::Output)?;
        if n != self.size {
            return Err(ClientError::Unavailable(format!(
                "sidecar streamed {n} of {} bytes",
                self.size
            )));
        }
        Ok(n)
    }

    /// Closes the stream in the sidecar.
    async fn close(mut self) -> Result<()> {
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

impl KeyWrite for SidecarWriter {
    /// Bytes written so far.
    fn size(&self) -> u64 {
        self.written
    }

    /// Appends `data`.
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        for piece in data.chunks(MAX_PIECE) {
            let r = self
                .rpc
                .write(SidecarWriteRequest {
                    handle: self.handle,
                    data: bytes::Bytes::copy_from_slice(piece),
                    hflush: false,
                })
                .await?
                .into_inner();
            self.written = r.written;
        }
        Ok(())
    }

    /// hflush: every replica holds the bytes written so far, and readers
    /// that open the file from now on see them.
    async fn hflush(&mut self) -> Result<()> {
        self.rpc
            .hflush(SidecarCommitRequest {
                handle: self.handle,
            })
            .await?;
        Ok(())
    }

    /// hsync: the bytes written so far are durable and visible to readers
    /// that open the file from now on.
    async fn hsync(&mut self) -> Result<()> {
        self.rpc
            .hsync(SidecarCommitRequest {
                handle: self.handle,
            })
            .await?;
        Ok(())
    }

    /// Commits the key; returns it.
    async fn close(mut self) -> Result<KeyInfo> {
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
