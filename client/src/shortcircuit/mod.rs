//! Short-circuit reads: when a replica lives on this client's node, the
//! local datanode hands over the block file's descriptor over its UNIX
//! socket and the client reads the file itself.
//!
//! The local datanodes are found by connecting to every socket in the
//! node's socket directory (`ozone.domain.socket.path`) and reading the
//! datanode id from the handshake: pods have their own IPs, so an address
//! says nothing about locality. Descriptors are cached (LRU with expiry)
//! across every stream of a client; each is guarded by its slot's VALID
//! bit, checked after every read. A socket failure disables short-circuit
//! to that datanode for a back-off interval; reads then use gRPC.

pub mod conn;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ozone_common::checksum::Checksummer;
use ozone_proto::BlockId;

pub use conn::{DnConn, ScError};

/// Short-circuit settings of a client.
#[derive(Debug, Clone)]
pub struct ScConfig {
    /// The node's socket directory.
    pub dir: PathBuf,
    /// Short-circuit off after a socket failure, per datanode.
    pub backoff: Duration,
    /// Cached block descriptors (LRU).
    pub cache_size: usize,
    /// A cached descriptor older than this is reopened.
    pub cache_expiry: Duration,
}

/// Short-circuit counters.
#[derive(Debug, Default)]
pub struct ScStats {
    /// Bytes read through short-circuit.
    pub bytes: AtomicU64,
    /// Block descriptors obtained from a datanode.
    pub opens: AtomicU64,
    /// Reads served from a cached descriptor.
    pub cache_hits: AtomicU64,
    /// Reads that had to open the block first.
    pub cache_misses: AtomicU64,
    /// Cached descriptors found invalidated.
    pub invalidations: AtomicU64,
    /// Reads that fell back to gRPC, by reason.
    pub fallbacks: Mutex<HashMap<&'static str, u64>>,
    /// Total time spent opening blocks, microseconds.
    pub open_micros: AtomicU64,
    /// Bytes checksummed by verifying short-circuit reads.
    pub checksummed_bytes: AtomicU64,
}

/// A read-only shared mapping of a committed block file. Reads copy from
/// it (a user-space copy is about twice as fast as `pread`'s kernel copy
/// here) and checksum it in place. Committed block files are never
/// truncated or rewritten by the datanode (deletion unlinks them, which
/// leaves the mapping valid), and a file shorter than its block is never
/// mapped, so the mapping stays backed for its whole length.
struct Mapping {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is read-only and only read through shared slices.
unsafe impl Send for Mapping {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file`, if it holds that many.
    fn new(file: &File, len: u64) -> Option<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap};
        let n = std::num::NonZeroUsize::new(usize::try_from(len).ok()?)?;
        if file.metadata().ok()?.len() < len {
            return None;
        }
        // SAFETY: a fresh read-only shared mapping of a file we hold open;
        // see the type's comment for why its pages stay backed.
        let ptr =
            unsafe { mmap(None, n, ProtFlags::PROT_READ, MapFlags::MAP_SHARED, file, 0) }.ok()?;
        Some(Self { ptr, len: n.get() })
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
    }
}

/// An open block: its descriptor, checksums and guarding slot.
pub struct ScBlock {
    conn: Arc<DnConn>,
    slot: u32,
    id: BlockId,
    file: File,
    map: Option<Mapping>,
    size: u64,
    checksum: Checksummer,
    checksums: Vec<u32>,
    opened: Instant,
}

impl ScBlock {
    /// Whether the datanode still vouches for this descriptor.
    #[inline]
    pub fn valid(&self) -> bool {
        self.conn
            .slot_valid(self.slot, self.id.container_id, self.id.local_id)
    }

    /// Block length.
    pub fn size(&self) -> u64 {
        self.size
    }
}

type Key = (u64, u64);

struct Cache {
    map: HashMap<Key, (Arc<ScBlock>, u64)>,
    tick: u64,
}

/// The short-circuit state of one client.
pub struct ShortCircuit {
    cfg: ScConfig,
    client_name: String,
    conns: Mutex<HashMap<String, Arc<DnConn>>>,
    /// Next directory scan allowed at (after a failure).
    next_scan: Mutex<Option<Instant>>,
    /// Held during a scan, so concurrent callers wait for its result.
    scanning: tokio::sync::Mutex<()>,
    disabled_until: Mutex<HashMap<String, Instant>>,
    cache: Mutex<Cache>,
    /// Counters.
    pub stats: ScStats,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl ShortCircuit {
    /// Short-circuit state for a client named `client_name`.
    pub fn new(cfg: ScConfig, client_name: String) -> Self {
        Self {
            cfg,
            client_name,
            conns: Mutex::new(HashMap::new()),
            next_scan: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
            disabled_until: Mutex::new(HashMap::new()),
            cache: Mutex::new(Cache {
                map: HashMap::new(),
                tick: 0,
            }),
            stats: ScStats::default(),
        }
    }

    /// Connects to every datanode socket in the directory (once, or again
    /// after a back-off); returns the ids of the local datanodes.
    pub async fn discover(&self) -> Vec<String> {
        let _scan = self.scanning.lock().await;
        let due = {
            let mut next = self.next_scan.lock().expect("lock");
            let due = next.is_none_or(|t| Instant::now() >= t);
            if due {
                *next = Some(Instant::now() + self.cfg.backoff);
            }
            due
        };
        if due {
            let paths: Vec<PathBuf> = match std::fs::read_dir(&self.cfg.dir) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                    .collect(),
                Err(e) => {
                    tracing::debug!(dir = %self.cfg.dir.display(), "no short-circuit socket directory: {e}");
                    Vec::new()
                }
            };
            for p in paths {
                match DnConn::connect(&p, &self.client_name).await {
                    Ok(c) => {
                        tracing::debug!(datanode = %c.datanode_id, socket = %p.display(), "local datanode found");
                        self.conns
                            .lock()
                            .expect("lock")
                            .insert(c.datanode_id.clone(), c);
                    }
                    Err(e) => {
                        tracing::debug!(socket = %p.display(), "short-circuit socket unusable: {e}")
                    }
                }
            }
        }
        self.conns
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, c)| c.alive())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether datanode `id` is known to be local (without scanning).
    pub fn is_local(&self, id: &str) -> bool {
        self.conns
            .lock()
            .expect("lock")
            .get(id)
            .is_some_and(|c| c.alive())
    }

    /// Whether datanode `id` can serve short-circuit now; rescans the
    /// socket directory (at most once per back-off interval) when its
    /// connection is gone, e.g. after a datanode restart.
    pub async fn usable(&self, id: &str) -> bool {
        if self.is_local(id) {
            return true;
        }
        if self.disabled(id) {
            return false;
        }
        let due = self
            .next_scan
            .lock()
            .expect("lock")
            .is_none_or(|t| Instant::now() >= t);
        if due {
            self.discover().await;
        }
        self.is_local(id)
    }

    fn disabled(&self, dn: &str) -> bool {
        let d = self.disabled_until.lock().expect("lock");
        d.get(dn).is_some_and(|t| Instant::now() < *t)
    }

    /// Records a fallback; socket failures disable the datanode for the
    /// back-off interval.
    pub fn fell_back(&self, dn: &str, e: &ScError) {
        *self
            .stats
            .fallbacks
            .lock()
            .expect("lock")
            .entry(e.reason())
            .or_default() += 1;
        if matches!(e, ScError::Socket(_)) {
            tracing::info!(datanode = %dn, "short-circuit disabled for {:?}: {e}", self.cfg.backoff);
            self.disabled_until
                .lock()
                .expect("lock")
                .insert(dn.to_string(), Instant::now() + self.cfg.backoff);
            self.conns.lock().expect("lock").remove(dn);
            *self.next_scan.lock().expect("lock") = Some(Instant::now() + self.cfg.backoff);
            self.purge_conn(dn);
        }
    }

    fn purge_conn(&self, dn: &str) {
        let mut c = self.cache.lock().expect("lock");
        c.map.retain(|_, (b, _)| b.conn.datanode_id != dn);
    }

    /// A connection to local datanode `dn`, reconnecting after back-off.
    async fn conn(&self, dn: &str) -> Result<Arc<DnConn>, ScError> {
        if self.disabled(dn) {
            return Err(ScError::Socket(
                "short-circuit to this datanode is backing off".into(),
            ));
        }
        if let Some(c) = self
            .conns
            .lock()
            .expect("lock")
            .get(dn)
            .filter(|c| c.alive())
        {
            return Ok(c.clone());
        }
        self.discover().await;
        self.conns
            .lock()
            .expect("lock")
            .get(dn)
            .filter(|c| c.alive())
            .cloned()
            .ok_or_else(|| ScError::Socket(format!("datanode {dn} has no usable local socket")))
    }

    fn cached(&self, key: Key) -> Option<Arc<ScBlock>> {
        let mut c = self.cache.lock().expect("lock");
        c.tick += 1;
        let tick = c.tick;
        let (b, t) = c.map.get_mut(&key)?;
        *t = tick;
        Some(b.clone())
    }

    fn insert(&self, key: Key, b: Arc<ScBlock>) {
        let mut evicted = Vec::new();
        {
            let mut c = self.cache.lock().expect("lock");
            c.tick += 1;
            let tick = c.tick;
            if let Some((old, _)) = c.map.insert(key, (b, tick)) {
                evicted.push(old);
            }
            while c.map.len() > self.cfg.cache_size.max(1) {
                let oldest = c.map.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k);
                match oldest.and_then(|k| c.map.remove(&k)) {
                    Some((old, _)) => evicted.push(old),
                    None => break,
                }
            }
        }
        for old in evicted {
            Self::release(old);
        }
    }

    fn release(b: Arc<ScBlock>) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if Arc::strong_count(&b) == 1 && b.conn.alive() {
                    b.conn.release(b.slot).await;
                }
            });
        }
    }

    fn remove(&self, key: Key) {
        let old = self.cache.lock().expect("lock").map.remove(&key);
        if let Some((b, _)) = old {
            Self::release(b);
        }
    }

    /// The open block `id` on local datanode `dn`, from the cache or the
    /// datanode.
    pub async fn open(
        &self,
        dn: &str,
        id: &BlockId,
        token: &[u8],
    ) -> Result<Arc<ScBlock>, ScError> {
        let key = (id.container_id, id.local_id);
        if let Some(b) = self.cached(key) {
            if b.valid() && b.opened.elapsed() < self.cfg.cache_expiry {
                self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(b);
            }
            if !b.valid() {
                self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            }
            self.remove(key);
        }
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        let conn = self.conn(dn).await?;
        let t = Instant::now();
        let (data, slot, file) = conn.get_block(id, token).await?;
        let (checksum, checksums) = flatten(&data)?;
        let map = Mapping::new(&file, data.size);
        let b = Arc::new(ScBlock {
            conn,
            slot,
            id: *id,
            file,
            map,
            size: data.size,
            checksum,
            checksums,
            opened: Instant::now(),
        });
        self.stats.opens.fetch_add(1, Ordering::Relaxed);
        self.stats
            .open_micros
            .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.insert(key, b.clone());
        Ok(b)
    }

    /// Reads `out.len()` bytes at `offset` of an open block, verifying when
    /// asked: from the block's mapping (the covering windows checked in
    /// place, then one copy), or, when the file could not be mapped, with
    /// one `preadv` (see `read_verified`). Data is returned only if the
    /// block is still valid after the read.
    pub fn read(
        &self,
        b: &ScBlock,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ScError> {
        if !b.valid() {
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            self.remove((b.id.container_id, b.id.local_id));
            return Err(ScError::Invalidated);
        }
        let end = offset + out.len() as u64;
        if end > b.size {
            return Err(ScError::Refused {
                refusal: ozone_proto::ScRefusal::Denied,
                message: format!("read past the end of a {}-byte block", b.size),
            });
        }
        let verify = verify && b.checksum.kind() != ozone_proto::ChecksumType::None;
        if let Some(m) = &b.map {
            let map = m.bytes();
            if verify && !out.is_empty() {
                // The whole windows covering the range, checked in place.
                let bpc = b.checksum.bytes_per_checksum() as u64;
                let ws = offset / bpc * bpc;
                let we = (end.div_ceil(bpc) * bpc).min(b.size);
                let (w0, w1) = ((ws / bpc) as usize, we.div_ceil(bpc) as usize);
                b.checksum.verify(
                    &map[ws as usize..we as usize],
                    ws / bpc,
                    &b.checksums[w0..w1],
                )?;
                self.stats
                    .checksummed_bytes
                    .fetch_add(we - ws, Ordering::Relaxed);
            }
            out.copy_from_slice(&map[offset as usize..end as usize]);
        } else if verify {
            let n = read_verified(b, offset, out)?;
            self.stats.checksummed_bytes.fetch_add(n, Ordering::Relaxed);
        } else {
            b.file.read_exact_at(out, offset).map_err(ScError::Io)?;
        }
        if !b.valid() {
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
            self.remove((b.id.container_id, b.id.local_id));
            return Err(ScError::Invalidated);
        }
        self.stats
            .bytes
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Cached descriptors.
    pub fn cached_blocks(&self) -> usize {
        self.cache.lock().expect("lock").map.len()
    }

    /// Drops every cached descriptor (releasing their slots).
    pub fn clear_cache(&self) {
        let all: Vec<_> = self
            .cache
            .lock()
            .expect("lock")
            .map
            .drain()
            .map(|(_, (b, _))| b)
            .collect();
        for b in all {
            Self::release(b);
        }
    }
}

/// The finest checksums of a block: the datanode's fine windows when every
/// chunk has them, else the key's windows.
fn flatten(data: &ozone_proto::BlockData) -> Result<(Checksummer, Vec<u32>), ScError> {
    let mut sums = Vec::new();
    let mut ck = Checksummer::new(ozone_proto::ChecksumType::None, 1)?;
    let fine = !data.chunks.is_empty() && data.chunks.iter().all(|c| c.fine_checksum.is_some());
    for (i, c) in data.chunks.iter().enumerate() {
        let cd = if fine {
            c.fine_checksum.as_ref()
        } else {
            c.checksum.as_ref()
        }
        .ok_or_else(|| ScError::Socket("chunk without checksums".into()))?;
        if i == 0 {
            ck = Checksummer::from_raw(cd.r#type, cd.bytes_per_checksum)?;
        }
        sums.extend_from_slice(&cd.checksums);
    }
    if sums.len() != ck.windows(data.size) && ck.kind() != ozone_proto::ChecksumType::None {
        return Err(ScError::Socket(
            "block checksums do not cover the block".into(),
        ));
    }
    Ok((ck, sums))
}

/// Reads the whole checksum windows covering `offset..offset + out.len()`
/// with one `preadv`: the requested bytes land in `out`, the parts of the
/// end windows outside the request in a reused scratch buffer; each window
/// is then checked where it lies (no copy). Returns the bytes checksummed.
fn read_verified(b: &ScBlock, offset: u64, out: &mut [u8]) -> Result<u64, ScError> {
    if out.is_empty() {
        return Ok(0);
    }
    let bpc = b.checksum.bytes_per_checksum() as u64;
    let end = offset + out.len() as u64;
    let ws0 = offset / bpc * bpc;
    let we = (end.div_ceil(bpc) * bpc).min(b.size);
    let head = (offset - ws0) as usize;
    let tail = (we - end) as usize;
    SCRATCH.with(|s| -> Result<u64, ScError> {
        let mut s = s.borrow_mut();
        if s.len() < head + tail {
            s.resize(head + tail, 0);
        }
        let (h, t) = s[..head + tail].split_at_mut(head);
        read_exact_vectored_at(&b.file, &mut [&mut *h, &mut *out, &mut *t], ws0)?;
        let pieces: [&[u8]; 3] = [h, out, t];
        let mut ws = ws0;
        while ws < we {
            let wl = (we - ws).min(bpc);
            let w = ws / bpc;
            let got = crc_of_range(&b.checksum, &pieces, (ws - ws0) as usize, wl as usize);
            let want = b.checksums[w as usize];
            if got != want {
                return Err(ozone_common::checksum::ChecksumError::Mismatch {
                    window: w,
                    offset: ws,
                    end: ws + wl,
                    expected: want,
                    actual: got,
                }
                .into());
            }
            ws += wl;
        }
        Ok(we - ws0)
    })
}

/// CRC of `len` bytes at `at` of the concatenation of `pieces` (a window
/// spans at most all three).
#[inline]
fn crc_of_range(ck: &Checksummer, pieces: &[&[u8]; 3], mut at: usize, mut len: usize) -> u32 {
    let mut parts: [&[u8]; 3] = [&[]; 3];
    let mut n = 0;
    for p in pieces {
        if at >= p.len() {
            at -= p.len();
            continue;
        }
        let take = (p.len() - at).min(len);
        parts[n] = &p[at..at + take];
        n += 1;
        len -= take;
        at = 0;
        if len == 0 {
            break;
        }
    }
    ck.checksum_pieces(&parts[..n])
}

/// `preadv` until every buffer is full; end of file is an error.
fn read_exact_vectored_at(
    file: &File,
    bufs: &mut [&mut [u8]; 3],
    mut offset: u64,
) -> Result<(), ScError> {
    let [a, b, c] = bufs;
    let mut iov = [
        std::io::IoSliceMut::new(a),
        std::io::IoSliceMut::new(b),
        std::io::IoSliceMut::new(c),
    ];
    let mut left: &mut [std::io::IoSliceMut] = &mut iov;
    while !left.is_empty() {
        let n = match nix::sys::uio::preadv(file, left, offset as nix::libc::off_t) {
            Ok(0) => {
                return Err(ScError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "block file is shorter than its metadata",
                )));
            }
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ScError::Io(e.into())),
        };
        offset += n as u64;
        std::io::IoSliceMut::advance_slices(&mut left, n);
    }
    Ok(())
}
