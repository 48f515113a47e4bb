//! Short-circuit reads: when a replica lives on this client's node, the
//! local datanode hands over the block file's descriptor over its UNIX
//! socket and the client reads the file itself.
//!
//! The local datanodes are found by connecting to every socket in the
//! node's socket directory (`ozone.domain.socket.path`) and reading the
//! datanode id from the handshake: pods have their own IPs, so an address
//! says nothing about locality. Descriptors are cached (LRU with expiry)
//! across every stream of a client; each is guarded by its slot's VALID
//! bit, checked after every read. A stream also holds the descriptor it
//! last read of each block ([`HeldBlock`]), so its next read skips the
//! cache; a slot goes back to the datanode when the last holder lets go.
//! A socket failure disables short-circuit to that datanode for a back-off
//! interval; reads then use gRPC.

pub(crate) mod cache;
pub(crate) mod conn;
pub(crate) mod mapped;
pub(crate) mod pread;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ozone_common::hint::prefetch;
use ozone_common::integrity::{BlockChecksums, BlockIntegrity};
use ozone_proto::BlockId;

use crate::counter::Counter;
use cache::LruCache;
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
    /// Read from a mapping of the block file (else `pread`).
    pub mmap: bool,
}

/// Short-circuit counters.
#[derive(Debug, Default)]
pub(crate) struct ScStats {
    /// Bytes read through short-circuit.
    pub bytes: Counter,
    /// Of those, bytes copied out of a mapping.
    pub mapped_bytes: Counter,
    /// Block descriptors obtained from a datanode.
    pub opens: AtomicU64,
    /// Reads served from a cached descriptor.
    pub cache_hits: Counter,
    /// Reads that had to open the block first.
    pub cache_misses: AtomicU64,
    /// Cached descriptors found invalidated.
    pub invalidations: AtomicU64,
    /// Reads that fell back to gRPC, by reason.
    pub fallbacks: Mutex<HashMap<&'static str, u64>>,
    /// Bytes checksummed by verifying short-circuit reads.
    pub checksummed_bytes: Counter,
}

/// An open block: its descriptor, checksums and guarding slot.
pub(crate) struct ScBlock {
    conn: Arc<DnConn>,
    slot: u32,
    id: BlockId,
    file: File,
    sums: BlockChecksums,
    /// When the descriptor is reopened: a time of [`coarse_ms`].
    expires_ms: u64,
    /// The file mapped, when mapped reads are on (see [`mapped`]).
    map: Option<mapped::Mapping>,
    /// Whether the descriptor cache still holds this block. Once it lets
    /// go (evicted, invalidated, truncated, expired, its datanode lost),
    /// holders outside the cache ([`HeldBlock`]) look the block up again.
    cached: AtomicBool,
}

impl Drop for ScBlock {
    /// The slot goes back to the datanode once no one holds the block (a
    /// read in flight keeps it); without a runtime, closing the connection
    /// frees it.
    fn drop(&mut self) {
        if self.conn.alive()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (conn, slot) = (self.conn.clone(), self.slot);
            handle.spawn(async move { conn.release(slot).await });
        }
    }
}

/// A stream's hold on the descriptor it last read of one block: the next
/// read of that block takes it from here, with no cache lookup (no shared
/// lock, hash or reference count written per read). A stream holds at most
/// one descriptor per block, as HDFS input streams hold their current
/// block's replica; one the cache let go is replaced at the next read.
#[derive(Default)]
pub(crate) struct HeldBlock(arc_swap::ArcSwapOption<ScBlock>);

impl ScBlock {
    /// Whether the datanode still vouches for this descriptor.
    #[inline]
    pub(crate) fn valid(&self) -> bool {
        self.conn
            .slot_valid(self.slot, self.id.container_id, self.id.local_id)
    }

    /// The datanode that handed over the descriptor.
    pub(crate) fn datanode_id(&self) -> &str {
        &self.conn.datanode_id
    }

    /// Block length.
    pub(crate) fn size(&self) -> u64 {
        self.sums.size()
    }
}

use ozone_common::block_key::BlockKey as Key;

/// The short-circuit state of one client.
pub(crate) struct ShortCircuit {
    cfg: ScConfig,
    client_name: String,
    /// Local datanodes by id (foldhash: looked up on every read).
    conns: RwLock<HashMap<String, Arc<DnConn>, foldhash::fast::RandomState>>,
    /// Next directory scan allowed at (after a failure).
    next_scan: Mutex<Option<Instant>>,
    /// Held during a scan, so concurrent callers wait for its result.
    scanning: tokio::sync::Mutex<()>,
    disabled_until: Mutex<HashMap<String, Instant>>,
    cache: RwLock<LruCache<Key, Arc<ScBlock>>>,
    /// Counters.
    pub stats: ScStats,
}

impl ShortCircuit {
    /// Short-circuit state for a client named `client_name`.
    pub(crate) fn new(cfg: ScConfig, client_name: String) -> Self {
        let cfg_cache_size = cfg.cache_size;
        Self {
            cfg,
            client_name,
            conns: RwLock::new(HashMap::default()),
            next_scan: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
            disabled_until: Mutex::new(HashMap::new()),
            cache: RwLock::new(LruCache::new(cfg_cache_size)),
            stats: ScStats::default(),
        }
    }

    /// Connects to every datanode socket in the directory (once, or again
    /// after a back-off); returns the ids of the local datanodes.
    pub(crate) async fn discover(&self) -> Vec<String> {
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
                            .write()
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
            .read()
            .expect("lock")
            .iter()
            .filter(|(_, c)| c.alive())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether datanode `id` is known to be local (without scanning).
    pub(crate) fn is_local(&self, id: &str) -> bool {
        self.conns
            .read()
            .expect("lock")
            .get(id)
            .is_some_and(|c| c.alive())
    }

    /// Whether datanode `id` can serve short-circuit now; rescans the
    /// socket directory (at most once per back-off interval) when its
    /// connection is gone, e.g. after a datanode restart.
    pub(crate) async fn usable(&self, id: &str) -> bool {
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
    pub(crate) fn fell_back(&self, dn: &str, e: &ScError) {
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
            self.conns.write().expect("lock").remove(dn);
            *self.next_scan.lock().expect("lock") = Some(Instant::now() + self.cfg.backoff);
            self.purge_conn(dn);
        }
    }

    fn purge_conn(&self, dn: &str) {
        let gone = self
            .cache
            .write()
            .expect("lock")
            .retain(|b| b.conn.datanode_id != dn);
        for b in gone {
            Self::uncache(b);
        }
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
            .read()
            .expect("lock")
            .get(dn)
            .filter(|c| c.alive())
        {
            return Ok(c.clone());
        }
        self.discover().await;
        self.conns
            .read()
            .expect("lock")
            .get(dn)
            .filter(|c| c.alive())
            .cloned()
            .ok_or_else(|| ScError::Socket(format!("datanode {dn} has no usable local socket")))
    }

    fn cached(&self, key: Key) -> Option<Arc<ScBlock>> {
        self.cache.read().expect("lock").get(&key)
    }

    fn insert(&self, key: Key, b: Arc<ScBlock>) {
        let evicted = self.cache.write().expect("lock").insert(key, b);
        for old in evicted {
            Self::uncache(old);
        }
    }

    /// Marks a block the cache let go of; its slot is released when the
    /// last holder drops it.
    fn uncache(b: Arc<ScBlock>) {
        b.cached.store(false, Ordering::Release);
    }

    /// Drops block `b` from the cache, if the cache's entry for its id is
    /// still `b` (not a newer descriptor another reader opened).
    fn remove(&self, b: &ScBlock) {
        let key = ozone_common::block_key::key_of(&b.id);
        let old = self
            .cache
            .write()
            .expect("lock")
            .remove_if(&key, |v| std::ptr::eq(Arc::as_ptr(v), b));
        if let Some(b) = old {
            Self::uncache(b);
        }
    }

    /// Whether cached block `b` may serve a read: the cache still holds it,
    /// its datanode vouches for it and it has not expired. A stale one is
    /// dropped from the cache.
    fn fresh(&self, b: &ScBlock) -> bool {
        if !b.cached.load(Ordering::Acquire) {
            return false;
        }
        let valid = b.valid();
        if valid && coarse_ms() < b.expires_ms {
            return true;
        }
        if !valid {
            self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
        }
        self.remove(b);
        false
    }

    /// Block `id`, if a local datanode's descriptor for it is cached, still
    /// valid and not expired (a stale entry is dropped). Reads that find one
    /// need no datanode lookup: it is local by construction.
    pub(crate) fn cached_open(&self, id: &BlockId) -> Option<Arc<ScBlock>> {
        let b = self.cached(ozone_common::block_key::key_of(id))?;
        if !self.fresh(&b) {
            return None;
        }
        self.stats.cache_hits.add(1);
        Some(b)
    }

    /// Reads like [`ShortCircuit::read`] from block `id`'s descriptor held
    /// in `held`, or else from the cache's (which `held` then keeps for
    /// the next read). `None` when neither has a usable one: nothing was
    /// read. A read that found the descriptor truncated or invalidated is
    /// recorded as a fallback here (the caller opens the block anew); any
    /// other error is left to the caller, who meets it again.
    pub(crate) fn read_held(
        &self,
        held: &HeldBlock,
        id: &BlockId,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Option<Result<(), ScError>> {
        let g = held.0.load();
        if let Some(b) = &*g
            && b.id == *id
            && self.fresh(b)
        {
            self.stats.cache_hits.add(1);
            return Some(self.read_open(b, offset, out, verify));
        }
        let stale = g.is_some();
        drop(g);
        let Some(b) = self.cached_open(id) else {
            if stale {
                // Let go of a descriptor the cache no longer has.
                held.0.store(None);
            }
            return None;
        };
        held.0.store(Some(b.clone()));
        Some(self.read_open(&b, offset, out, verify))
    }

    /// [`ShortCircuit::read`] of a block just found fresh, recording a read
    /// that dropped the descriptor (truncated, invalidated) as a fallback.
    fn read_open(
        &self,
        b: &ScBlock,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ScError> {
        let r = self.read_unchecked(b, offset, out, verify);
        if let Err(e @ (ScError::Truncated | ScError::Invalidated)) = &r {
            tracing::debug!(block = %b.id.display(), "cached short-circuit read failed: {e}");
            self.fell_back(b.datanode_id(), e);
        }
        r
    }

    /// The open block `id` on local datanode `dn`, from the cache or the
    /// datanode.
    pub(crate) async fn open(
        &self,
        dn: &str,
        id: &BlockId,
        token: &[u8],
    ) -> Result<Arc<ScBlock>, ScError> {
        if let Some(b) = self.cached_open(id) {
            return Ok(b);
        }
        let key = ozone_common::block_key::key_of(id);
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        let conn = self.conn(dn).await?;
        let (data, slot, file) = conn.get_block(id, token).await?;
        // The finest checksums the datanode keeps, checked for shape, with
        // their prefix CRCs (each verified read then checks its run with
        // one CRC and a multiplication).
        let sums = BlockIntegrity::of_block(&data).map_err(|e| {
            ScError::Socket(format!(
                "block {} metadata from the datanode: {e}",
                id.display()
            ))
        })?;
        let sums = sums.fine.unwrap_or(sums.coarse).index_runs();
        let map = (self.cfg.mmap && mapped::install())
            .then(|| mapped::Mapping::new(&file, sums.size()))
            .flatten();
        let b = Arc::new(ScBlock {
            conn,
            slot,
            id: *id,
            file,
            sums,
            expires_ms: coarse_ms().saturating_add(self.cfg.cache_expiry.as_millis() as u64),
            map,
            cached: AtomicBool::new(true),
        });
        self.stats.opens.fetch_add(1, Ordering::Relaxed);
        self.insert(key, b.clone());
        Ok(b)
    }

    /// Reads `out.len()` bytes at `offset` of an open block, verifying when
    /// asked: from the block's mapping (the covering windows checked in
    /// place, the bytes copied once; see [`mapped`] for why a file
    /// truncated under the reader is an error, not a SIGBUS), or with
    /// `pread` (one `preadv` of the covering windows, checked where they
    /// land: see [`pread::read_verified`]). Data is returned only if the
    /// block is still valid after the read.
    pub(crate) fn read(
        &self,
        b: &ScBlock,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ScError> {
        self.still_valid(b)?;
        self.read_unchecked(b, offset, out, verify)
    }

    /// `Ok` while the datanode vouches for `b`; otherwise the cache lets
    /// go of it and the invalidation is counted.
    fn still_valid(&self, b: &ScBlock) -> Result<(), ScError> {
        if b.valid() {
            return Ok(());
        }
        self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
        self.remove(b);
        Err(ScError::Invalidated)
    }

    /// [`ShortCircuit::read`] without the check before the read, for a
    /// block whose validity was checked just before (the check after the
    /// read is what keeps data of an invalidated block from the caller).
    fn read_unchecked(
        &self,
        b: &ScBlock,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ScError> {
        let Some(windows) = b.sums.covering(offset, out.len() as u64) else {
            return Err(ScError::Refused {
                refusal: ozone_proto::ScRefusal::Denied,
                message: format!("read past the end of a {}-byte block", b.size()),
            });
        };
        let verify = verify && b.sums.verifies();
        match &b.map {
            Some(map) => {
                let r = mapped_read(map, &b.file, &b.sums, windows, offset, out, verify);
                if let Err(ScError::Truncated) = r {
                    // Zero pages replaced the faulting ones: the next read
                    // opens the block again, with a new mapping.
                    self.remove(b);
                }
                r?;
                if verify {
                    self.stats.checksummed_bytes.add(windows.len());
                }
                self.stats.mapped_bytes.add(out.len() as u64);
            }
            None if verify => {
                let n = pread::read_verified(&b.file, &b.sums, windows, offset, out)?;
                self.stats.checksummed_bytes.add(n);
            }
            None => b.file.read_exact_at(out, offset).map_err(ScError::Io)?,
        }
        self.still_valid(b)?;
        self.stats.bytes.add(out.len() as u64);
        Ok(())
    }

    /// Cached descriptors.
    pub(crate) fn cached_blocks(&self) -> usize {
        self.cache.read().expect("lock").len()
    }
}

/// Milliseconds on the system's coarse monotonic clock: a resolution of a
/// few milliseconds (the kernel's tick), read without the timestamp
/// counter, so cheap enough to check a descriptor's expiry on every read.
fn coarse_ms() -> u64 {
    let mut ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Copies `out.len()` bytes at `offset` out of `map`; when `verify`, first
/// checks the covering windows `w` in place in the mapping (the check
/// streams them into the cache, the copy then reads them from there).
///
/// The copied bytes are the checked ones: a block file's written bytes do
/// not change in place, and a truncation faults or zeroes. Zeroes come
/// without a fault only in the page holding the new end of file; so after
/// the copy the first byte of the page after the read is touched under the
/// guard: if the end of file now lies in the read's last page, that next
/// page is wholly past it and faults. A read ending in the mapping's last
/// page checks the file's size instead.
///
/// The CPU is asked for that byte halfway through the work, not first: a
/// prefetch waits for its address translation, which at the start is a
/// page-table walk of its own, and in the middle follows the read's own
/// walks.
fn mapped_read(
    map: &mapped::Mapping,
    file: &File,
    sums: &BlockChecksums,
    w: ozone_common::integrity::Windows,
    offset: u64,
    out: &mut [u8],
    verify: bool,
) -> Result<(), ScError> {
    let (o, len) = (offset as usize, out.len());
    let (ws, we) = (w.start as usize, w.end as usize);
    let next_page = (o + len).next_multiple_of(mapped::page_size());
    let at_end = map
        .read_guarded(|s| -> Result<bool, ozone_common::checksum::ChecksumError> {
            let probe = s.get(next_page);
            let src = &s[o..o + len];
            // The probe's prefetch goes after the check, or after half
            // the copy when there is none.
            let half = if verify {
                sums.verify(&w, &s[ws..we])?;
                0
            } else {
                len / 2
            };
            out[..half].copy_from_slice(&src[..half]);
            if let Some(b) = probe {
                prefetch(b);
            }
            out[half..].copy_from_slice(&src[half..]);
            match probe {
                Some(b) => {
                    // SAFETY: a read of one byte of the mapping, under the
                    // guard (a fault makes this read `Fault`); volatile so
                    // it is not optimised away.
                    unsafe { std::ptr::read_volatile(b) };
                    Ok(false)
                }
                None => Ok(true),
            }
        })
        .map_err(|mapped::MappedError::Fault| ScError::Truncated)??;
    if at_end {
        let size = file.metadata().map_err(ScError::Io)?.len();
        if size < offset + len as u64 {
            return Err(ScError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "block file is shorter than its metadata",
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_common::checksum::Checksummer;
    use ozone_proto::ChecksumType;
    use std::io::Write;

    fn block(n: usize) -> (File, Vec<u8>, BlockChecksums, mapped::Mapping) {
        assert!(mapped::install());
        let data: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8 | 1).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 4096).unwrap();
        let sums = BlockChecksums::new(ck, ck.compute(&data), n as u64).unwrap();
        let map = mapped::Mapping::new(&f, n as u64).unwrap();
        (f, data, sums, map)
    }

    fn read(
        (f, _, sums, map): &(File, Vec<u8>, BlockChecksums, mapped::Mapping),
        off: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ScError> {
        let w = sums.covering(off, out.len() as u64).unwrap();
        mapped_read(map, f, sums, w, off, out, verify)
    }

    /// A file cut inside a read's last page reads as zeros there without a
    /// fault; both with verification on and off this must be an error,
    /// never the zeros.
    #[test]
    fn a_file_cut_inside_the_reads_last_page_is_an_error_not_zeros() {
        let page = mapped::page_size();
        for verify in [false, true] {
            let b = block(64 * page);
            let mut out = vec![0u8; 3 * page];
            let off = 10 * page as u64 + 100;
            read(&b, off, &mut out, verify).unwrap();
            assert_eq!(out, b.1[off as usize..off as usize + out.len()]);
            // Cut 50 bytes before the read's end: the rest of that page
            // reads as zeros, the pages after it fault.
            b.0.set_len(off + out.len() as u64 - 50).unwrap();
            let e = read(&b, off, &mut out, verify).unwrap_err();
            // Verified, the check in place meets the zeros first.
            let want = if verify {
                matches!(e, ScError::Checksum(_))
            } else {
                matches!(e, ScError::Truncated)
            };
            assert!(want, "verify {verify}: {e}");
        }
    }

    /// At the end of the mapping there is no next page to touch: the file's
    /// size is asked instead.
    #[test]
    fn a_read_ending_in_the_last_page_checks_the_files_size() {
        let page = mapped::page_size();
        let b = block(8 * page + 300);
        let mut out = vec![0u8; 1000];
        let off = 8 * page as u64 + 300 - 1000;
        read(&b, off, &mut out, false).unwrap();
        assert_eq!(out, b.1[off as usize..]);
        b.0.set_len(8 * page as u64 + 200).unwrap();
        let e = read(&b, off, &mut out, false).unwrap_err();
        assert!(matches!(e, ScError::Io(_)), "{e}");
    }
}
