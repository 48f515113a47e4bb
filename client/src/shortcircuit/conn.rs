//! One connection to a local datanode's short-circuit socket: the
//! handshake, the shared slot segment (mapped read-only), GetBlock and
//! Release requests, and a watcher that notices when the datanode goes away.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use nix::sys::socket::{MsgFlags, recv};
use ozone_common::shortcircuit::{
    self as sc, CMD_ERROR, CMD_GET_BLOCK, CMD_HANDSHAKE, CMD_RELEASE, RESPONSE, SLOT_SIZE,
    SLOT_VALID,
};
use ozone_proto::*;
use tokio::io::Interest;
use tokio::net::UnixStream;

/// Timeout of one request on the socket.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a short-circuit request failed.
#[derive(Debug, thiserror::Error)]
pub enum ScError {
    #[error("socket: {0}")]
    Socket(String),
    #[error("refused: {message}")]
    Refused {
        /// The kind of refusal, as the datanode (or sidecar relay) said.
        refusal: ozone_proto::ScRefusal,
        /// Its explanation.
        message: String,
    },
    #[error("the datanode invalidated the block")]
    Invalidated,
    #[error("reading the block file: {0}")]
    Io(std::io::Error),
    /// A read of the block's mapping faulted (the file was truncated, or
    /// the disk failed to read a page).
    #[error(
        "the block file is shorter than its metadata, or unreadable (a read of its mapping faulted)"
    )]
    Truncated,
    #[error("{0}")]
    Checksum(#[from] ozone_common::checksum::ChecksumError),
}

impl ScError {
    /// The error a peer sent.
    pub fn from_wire(e: ozone_proto::ScError) -> Self {
        ScError::Refused {
            refusal: e.refusal(),
            message: e.message,
        }
    }

    /// Metric label of the failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ScError::Socket(_) => "socket",
            ScError::Refused { refusal, .. } => match refusal {
                ScRefusal::Token => "token",
                ScRefusal::NotCommitted => "not_committed",
                ScRefusal::NotFound | ScRefusal::Deleted => "not_found",
                ScRefusal::Policy => "policy",
                _ => "refused",
            },
            ScError::Invalidated => "invalidated",
            ScError::Io(_) => "io",
            ScError::Truncated => "truncated",
            ScError::Checksum(_) => "checksum",
        }
    }
}

/// The client's read-only view of a connection's slot segment.
struct SlotMap {
    map: NonNull<u8>,
    len: usize,
    slots: u32,
    _fd: OwnedFd,
}

// SAFETY: only read through atomics; valid until Drop.
unsafe impl Send for SlotMap {}
unsafe impl Sync for SlotMap {}

impl SlotMap {
    fn new(fd: OwnedFd, slots: u32, slot_size: u32) -> Result<Self, ScError> {
        if slot_size as usize != SLOT_SIZE || slots == 0 || slots > 1 << 20 {
            return Err(ScError::Socket(format!(
                "unexpected slot layout {slots}x{slot_size}"
            )));
        }
        let len = slots as usize * SLOT_SIZE;
        // SAFETY: a shared read-only mapping of the segment the datanode sent.
        let map = unsafe {
            mmap(
                None,
                NonZeroUsize::new(len).expect("non-zero"),
                ProtFlags::PROT_READ,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
        }
        .map_err(|e| ScError::Socket(format!("mapping slots: {e}")))?;
        Ok(Self {
            map: map.cast(),
            len,
            slots,
            _fd: fd,
        })
    }

    fn word(&self, slot: u32, i: usize) -> Option<&AtomicU64> {
        if slot >= self.slots {
            return None;
        }
        // SAFETY: in bounds of the page-aligned mapping; u64-aligned.
        Some(unsafe {
            &*(self.map.as_ptr().add(slot as usize * SLOT_SIZE + i * 8) as *const AtomicU64)
        })
    }
}

impl Drop for SlotMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        let _ = unsafe { munmap(self.map.cast(), self.len) };
    }
}

/// A connection to one local datanode.
pub struct DnConn {
    /// The datanode's id from the handshake.
    pub datanode_id: String,
    /// Its node name.
    pub node_name: String,
    stream: Arc<UnixStream>,
    lock: tokio::sync::Mutex<()>,
    slots: SlotMap,
    dead: Arc<AtomicBool>,
    closed: Arc<tokio::sync::Notify>,
}

impl Drop for DnConn {
    fn drop(&mut self) {
        self.closed.notify_one();
    }
}

impl DnConn {
    /// Connects to `path` and performs the handshake.
    pub async fn connect(path: &Path, client_name: &str) -> Result<Arc<Self>, ScError> {
        let sock = |e: &dyn std::fmt::Display| ScError::Socket(format!("{}: {e}", path.display()));
        let stream = tokio::time::timeout(REQUEST_TIMEOUT, UnixStream::connect(path))
            .await
            .map_err(|_| sock(&"connect timed out"))?
            .map_err(|e| sock(&e))?;
        let hello = ScHandshakeRequest {
            client_name: client_name.to_string(),
        };
        sc::send(&stream, CMD_HANDSHAKE, &hello, &[])
            .await
            .map_err(|e| sock(&e))?;
        let mut f = tokio::time::timeout(REQUEST_TIMEOUT, sc::recv(&stream))
            .await
            .map_err(|_| sock(&"handshake timed out"))?
            .map_err(|e| sock(&e))?;
        if f.cmd == CMD_ERROR | RESPONSE {
            let e: ScError = f
                .decode::<ozone_proto::ScError>()
                .map(ScError::from_wire)
                .unwrap_or_else(|e| sock(&e));
            return Err(e);
        }
        if f.cmd != CMD_HANDSHAKE | RESPONSE {
            return Err(sock(&format!("unexpected reply {}", f.cmd)));
        }
        let h: ScHandshakeResponse = f.decode().map_err(|e| sock(&e))?;
        if h.protocol_version != sc::VERSION as u32 {
            return Err(sock(&format!(
                "datanode speaks protocol {}",
                h.protocol_version
            )));
        }
        let fd = f
            .fds
            .pop()
            .ok_or_else(|| sock(&"handshake carried no slot segment"))?;
        let slots = SlotMap::new(fd, h.slot_count, h.slot_size)?;
        let dead = Arc::new(AtomicBool::new(false));
        let stream = Arc::new(stream);
        let closed = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(watch(stream.clone(), dead.clone(), closed.clone()));
        Ok(Arc::new(Self {
            datanode_id: h.datanode_id,
            node_name: h.node_name,
            stream,
            lock: tokio::sync::Mutex::new(()),
            slots,
            dead,
            closed,
        }))
    }

    /// False once the connection is known broken.
    pub fn alive(&self) -> bool {
        !self.dead.load(Ordering::Acquire)
    }

    /// Whether `slot` still vouches for block `(container, local)`.
    #[inline]
    pub fn slot_valid(&self, slot: u32, container: u64, local: u64) -> bool {
        match (
            self.slots.word(slot, 0),
            self.slots.word(slot, 1),
            self.slots.word(slot, 2),
        ) {
            (Some(flags), Some(c), Some(l)) => {
                flags.load(Ordering::Acquire) & SLOT_VALID != 0
                    && c.load(Ordering::Relaxed) == container
                    && l.load(Ordering::Relaxed) == local
                    && self.alive()
            }
            _ => false,
        }
    }

    async fn request(&self, cmd: u8, msg: &impl prost::Message) -> Result<sc::Frame, ScError> {
        if !self.alive() {
            return Err(ScError::Socket("connection closed".into()));
        }
        let _g = self.lock.lock().await;
        let r = tokio::time::timeout(REQUEST_TIMEOUT, async {
            sc::send(&self.stream, cmd, msg, &[]).await?;
            sc::recv(&self.stream).await
        })
        .await;
        match r {
            Ok(Ok(f)) if f.cmd == cmd | RESPONSE => Ok(f),
            Ok(Ok(f)) if f.cmd == CMD_ERROR | RESPONSE => {
                self.dead.store(true, Ordering::Release);
                Err(f
                    .decode::<ozone_proto::ScError>()
                    .map(ScError::from_wire)
                    .unwrap_or_else(|e| ScError::Socket(e.to_string())))
            }
            Ok(Ok(f)) => {
                self.dead.store(true, Ordering::Release);
                Err(ScError::Socket(format!("unexpected reply {}", f.cmd)))
            }
            Ok(Err(e)) => {
                self.dead.store(true, Ordering::Release);
                Err(ScError::Socket(e.to_string()))
            }
            Err(_) => {
                // A lost or late reply: closing the connection frees its slots
                // on the datanode, so nothing leaks.
                self.dead.store(true, Ordering::Release);
                Err(ScError::Socket("request timed out".into()))
            }
        }
    }

    /// Asks for a committed block's metadata, fd and slot.
    pub async fn get_block(
        &self,
        id: &BlockId,
        token: &[u8],
    ) -> Result<(BlockData, u32, std::fs::File), ScError> {
        let req = ScGetBlockRequest {
            block: Some(*id),
            token: token.to_vec(),
            want_fd: true,
        };
        let mut f = self.request(CMD_GET_BLOCK, &req).await?;
        let r: ScGetBlockResponse = f.decode().map_err(|e| ScError::Socket(e.to_string()))?;
        if !r.granted {
            return Err(ScError::Refused {
                refusal: r.refusal(),
                message: r.reason,
            });
        }
        let fd = f
            .fds
            .pop()
            .ok_or_else(|| ScError::Socket("granted without a descriptor".into()))?;
        let block = r
            .block
            .ok_or_else(|| ScError::Socket("granted without metadata".into()))?;
        Ok((block, r.slot, std::fs::File::from(fd)))
    }

    /// Returns a slot to the datanode.
    pub async fn release(&self, slot: u32) {
        let _ = self.request(CMD_RELEASE, &ScReleaseRequest { slot }).await;
    }
}

/// Marks the connection dead when the datanode closes it (e.g. it was
/// killed), so cached descriptors stop being trusted.
async fn watch(stream: Arc<UnixStream>, dead: Arc<AtomicBool>, closed: Arc<tokio::sync::Notify>) {
    loop {
        if dead.load(Ordering::Acquire) {
            return;
        }
        tokio::select! {
            r = stream.readable() => if r.is_err() { break },
            _ = closed.notified() => return,
        }
        let mut b = [0u8; 1];
        let r = stream.try_io(Interest::READABLE, || {
            recv(
                stream.as_raw_fd(),
                &mut b,
                MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
            )
            .map_err(std::io::Error::from)
        });
        match r {
            Ok(0) => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    dead.store(true, Ordering::Release);
}
