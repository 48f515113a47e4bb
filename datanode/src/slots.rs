//! Shared-memory slots that keep short-circuit readers from serving
//! deleted blocks (the HDFS-347 design).
//!
//! Each short-circuit connection gets a segment (a memfd) of fixed-size
//! slots, mapped read-write here and read-only by the client. Granting a
//! block's fd allocates a slot, sets the block id and then the VALID bit.
//! Deleting a block first clears the VALID bit of every slot of that block
//! (and tombstones the block so no later grant can slip in), and only then
//! removes the file; the client checks the bit after each read. A slot is
//! reused only after the client releases it or its connection closes.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use ozone_common::shortcircuit::{SLOT_SIZE, SLOT_VALID};

use ozone_common::block_key::BlockKey;

/// How long a deleted block stays tombstoned (far longer than a grant).
const TOMBSTONE_TTL: Duration = Duration::from_secs(600);

/// Errors creating a segment.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("shared memory segment: {0}")]
    Shm(#[from] nix::Error),
    #[error("shared memory segment: {0}")]
    Io(#[from] std::io::Error),
}

/// One connection's segment of slots.
pub struct Segment {
    map: NonNull<u8>,
    len: usize,
    slots: u32,
    memfd: OwnedFd,
    state: Mutex<SegmentState>,
}

struct SegmentState {
    free: Vec<u32>,
    used: HashMap<u32, BlockKey>,
}

// SAFETY: the mapping is only touched through atomics; the map pointer
// stays valid until Drop.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// A segment of `slots` slots.
    pub fn new(slots: u32) -> Result<Self, SlotError> {
        let len = slots.max(1) as usize * SLOT_SIZE;
        let memfd = nix::sys::memfd::memfd_create(
            c"ozone-sc-slots",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )?;
        nix::unistd::ftruncate(&memfd, len as i64)?;
        // SAFETY: a fresh shared mapping of a file we own; unmapped in Drop.
        let map = unsafe {
            mmap(
                None,
                NonZeroUsize::new(len).expect("non-zero"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                memfd.as_fd(),
                0,
            )?
        };
        Ok(Self {
            map: map.cast(),
            len,
            slots,
            memfd,
            state: Mutex::new(SegmentState {
                free: (0..slots).rev().collect(),
                used: HashMap::new(),
            }),
        })
    }

    /// A read-only descriptor of the segment for the client.
    pub fn read_only_fd(&self) -> std::io::Result<OwnedFd> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", self.memfd.as_raw_fd());
        Ok(std::fs::File::open(path)?.into())
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    fn word(&self, slot: u32, i: usize) -> &AtomicU64 {
        assert!(slot < self.slots && i < SLOT_SIZE / 8);
        // SAFETY: in bounds of the page-aligned mapping; u64-aligned.
        unsafe { &*(self.map.as_ptr().add(slot as usize * SLOT_SIZE + i * 8) as *const AtomicU64) }
    }

    fn allocate(&self, key: BlockKey) -> Option<u32> {
        let mut st = self.state.lock().expect("lock");
        let slot = st.free.pop()?;
        st.used.insert(slot, key);
        self.word(slot, 1).store(key.0, Ordering::Relaxed);
        self.word(slot, 2).store(key.1, Ordering::Relaxed);
        self.word(slot, 0).store(SLOT_VALID, Ordering::Release);
        Some(slot)
    }

    fn clear(&self, slot: u32) {
        self.word(slot, 0).store(0, Ordering::Release);
    }

    fn release(&self, slot: u32) -> Option<BlockKey> {
        let mut st = self.state.lock().expect("lock");
        let key = st.used.remove(&slot)?;
        self.clear(slot);
        st.free.push(slot);
        Some(key)
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.state.lock().expect("lock").used.len()
    }

    /// Whether `slot` is VALID (for tests and diagnostics).
    pub fn is_valid(&self, slot: u32) -> bool {
        self.word(slot, 0).load(Ordering::Acquire) & SLOT_VALID != 0
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping created in `new`, no longer referenced.
        let _ = unsafe { munmap(self.map.cast(), self.len) };
    }
}

/// Why a grant was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    #[error("block {0}:{1} was deleted")]
    Deleted(u64, u64),
    #[error("all {0} slots of this connection are in use; release blocks before opening more")]
    NoSlot(u32),
    #[error("unknown connection")]
    NoConnection,
}

#[derive(Default)]
struct RegistryState {
    segments: HashMap<u64, Arc<Segment>>,
    by_block: HashMap<BlockKey, HashSet<(u64, u32)>>,
    tombstones: HashMap<BlockKey, Instant>,
    next_conn: u64,
}

/// Every connection's segment and which slots guard which block.
#[derive(Default)]
pub struct SlotRegistry {
    state: Mutex<RegistryState>,
    invalidated: AtomicU64,
}

impl SlotRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a connection's segment; returns its connection id.
    pub fn add_connection(&self, seg: Arc<Segment>) -> u64 {
        let mut st = self.state.lock().expect("lock");
        st.next_conn += 1;
        let id = st.next_conn;
        st.segments.insert(id, seg);
        id
    }

    /// Allocates a VALID slot for `key` on connection `conn`.
    pub fn grant(&self, conn: u64, key: BlockKey) -> Result<u32, GrantError> {
        let mut st = self.state.lock().expect("lock");
        if st.tombstones.contains_key(&key) {
            return Err(GrantError::Deleted(key.0, key.1));
        }
        let seg = st
            .segments
            .get(&conn)
            .ok_or(GrantError::NoConnection)?
            .clone();
        let slot = seg.allocate(key).ok_or(GrantError::NoSlot(seg.slots()))?;
        st.by_block.entry(key).or_default().insert((conn, slot));
        Ok(slot)
    }

    /// Frees a slot the client released.
    pub fn release(&self, conn: u64, slot: u32) -> bool {
        let mut st = self.state.lock().expect("lock");
        let Some(seg) = st.segments.get(&conn).cloned() else {
            return false;
        };
        if slot >= seg.slots() {
            return false;
        }
        match seg.release(slot) {
            Some(key) => {
                if let Some(set) = st.by_block.get_mut(&key) {
                    set.remove(&(conn, slot));
                    if set.is_empty() {
                        st.by_block.remove(&key);
                    }
                }
                true
            }
            None => false,
        }
    }

    /// Drops a closed connection: every slot of it is cleared and freed.
    pub fn remove_connection(&self, conn: u64) {
        let mut st = self.state.lock().expect("lock");
        let Some(seg) = st.segments.remove(&conn) else {
            return;
        };
        let used: Vec<(u32, BlockKey)> = seg.state.lock().expect("lock").used.drain().collect();
        for (slot, key) in used {
            seg.clear(slot);
            if let Some(set) = st.by_block.get_mut(&key) {
                set.remove(&(conn, slot));
                if set.is_empty() {
                    st.by_block.remove(&key);
                }
            }
        }
    }

    /// Clears the VALID bit of every slot of these blocks and refuses later
    /// grants for them. Call before deleting the blocks' files.
    pub fn invalidate(&self, keys: &[BlockKey]) -> usize {
        let mut st = self.state.lock().expect("lock");
        let now = Instant::now();
        st.tombstones
            .retain(|_, t| now.duration_since(*t) < TOMBSTONE_TTL);
        let mut cleared = 0;
        for key in keys {
            st.tombstones.insert(*key, now);
            if let Some(set) = st.by_block.get(key) {
                for (conn, slot) in set {
                    if let Some(seg) = st.segments.get(conn) {
                        seg.clear(*slot);
                        cleared += 1;
                    }
                }
            }
        }
        self.invalidated
            .fetch_add(cleared as u64, Ordering::Relaxed);
        cleared
    }

    /// Slots invalidated since start.
    pub fn invalidated_total(&self) -> u64 {
        self.invalidated.load(Ordering::Relaxed)
    }

    /// Slots granted and not yet released, over every connection.
    pub fn in_use(&self) -> usize {
        let st = self.state.lock().expect("lock");
        st.segments.values().map(|s| s.in_use()).sum()
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.state.lock().expect("lock").segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_invalidate_release() {
        let reg = SlotRegistry::new();
        let seg = Arc::new(Segment::new(2).unwrap());
        let c = reg.add_connection(seg.clone());
        let a = reg.grant(c, (1, 1)).unwrap();
        let b = reg.grant(c, (1, 2)).unwrap();
        assert_eq!(reg.grant(c, (1, 3)), Err(GrantError::NoSlot(2)));
        assert!(seg.is_valid(a) && seg.is_valid(b));
        assert_eq!(reg.in_use(), 2);
        assert_eq!(reg.invalidate(&[(1, 1)]), 1);
        assert!(!seg.is_valid(a));
        assert!(seg.is_valid(b));
        // A deleted block is never granted again, and its slot is not
        // reused until the client releases it.
        assert_eq!(reg.grant(c, (1, 1)), Err(GrantError::Deleted(1, 1)));
        assert!(reg.release(c, a));
        assert!(!reg.release(c, a), "double release is refused");
        assert!(!reg.release(c, 99));
        assert_eq!(reg.in_use(), 1, "only the granted release counts");
        let again = reg.grant(c, (1, 4)).unwrap();
        assert_eq!(again, a);
        assert_eq!(reg.in_use(), 2);
        reg.remove_connection(c);
        assert_eq!(reg.in_use(), 0);
        assert!(!seg.is_valid(b) && !seg.is_valid(again));
        assert_eq!(reg.connections(), 0);
        assert_eq!(reg.grant(c, (1, 5)), Err(GrantError::NoConnection));
    }

    #[test]
    fn read_only_fd_sees_bits() {
        let seg = Segment::new(4).unwrap();
        let fd = seg.read_only_fd().unwrap();
        // SAFETY: mapping a segment read-only for the test.
        let map = unsafe {
            mmap(
                None,
                NonZeroUsize::new(4 * SLOT_SIZE).unwrap(),
                ProtFlags::PROT_READ,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
            .unwrap()
        };
        let word = unsafe { &*(map.as_ptr().cast::<u8>().add(SLOT_SIZE) as *const AtomicU64) };
        let s = seg.allocate((3, 4)).unwrap();
        assert_eq!(s, 0);
        let s = seg.allocate((3, 5)).unwrap();
        assert_eq!(s, 1);
        assert_eq!(word.load(Ordering::Acquire), SLOT_VALID);
        seg.clear(1);
        assert_eq!(word.load(Ordering::Acquire), 0);
        // Writable mappings of the read-only fd are refused.
        let w = unsafe {
            mmap(
                None,
                NonZeroUsize::new(SLOT_SIZE).unwrap(),
                ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
        };
        assert!(w.is_err());
        unsafe { munmap(map, 4 * SLOT_SIZE).unwrap() };
    }
}
