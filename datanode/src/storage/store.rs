//! The block store: WriteChunk calls (verified against their checksums,
//! then written with `pwrite`), PutBlock (checks the chunk list, truncates
//! the file to the block length, fsyncs the file and its directory, commits
//! the metadata row), reads of committed blocks and deletion.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use ozone_common::checksum::Checksummer;
use ozone_common::integrity::{
    BlockIntegrity, FINE_WINDOW, MAX_BLOCK_SIZE, check_fine_against_coarse, fine_of,
};
use ozone_proto::{BlockData, BlockId, ChecksumData, ChunkInfo};

use super::error::{StorageError, io_err};
use super::layout::Layout;
use super::meta::MetaTable;
use super::report::ReportLog;
use crate::slots::SlotRegistry;
use ozone_common::block_key::{BlockKey, key_of};

/// Whether two chunk records describe the same chunk (ignoring the
/// datanode-derived fine checksums).
fn same_chunk(a: &ChunkInfo, b: &ChunkInfo) -> bool {
    a.offset == b.offset && a.len == b.len && a.checksum == b.checksum
}

/// A block being written: its file and the chunks received so far.
struct OpenBlock {
    path: PathBuf,
    file: File,
    chunks: Mutex<BTreeMap<u64, ChunkInfo>>,
}

/// A committed block ready for reads: metadata, its checksums (checked for
/// shape) and an open read-only file.
pub struct CommittedBlock {
    /// The committed metadata.
    pub data: BlockData,
    /// The key's and the fine window checksums.
    pub integrity: BlockIntegrity,
    /// Path of the block file.
    pub path: PathBuf,
    file: File,
}

impl CommittedBlock {
    /// Length in bytes.
    pub fn size(&self) -> u64 {
        self.data.size
    }
}

/// The block store of one datanode.
pub struct BlockStore {
    layout: Layout,
    meta: MetaTable,
    open: Mutex<HashMap<BlockKey, Arc<OpenBlock>>>,
    committed: RwLock<HashMap<BlockKey, Arc<CommittedBlock>>>,
    /// Replicas a scan found damaged, with why: not served until deleted.
    corrupt: Mutex<HashMap<BlockKey, String>>,
    used: AtomicU64,
    slots: Arc<SlotRegistry>,
    reports: ReportLog,
}

/// What this datanode holds of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalReplica {
    /// Nothing.
    Absent,
    /// A committed replica, served.
    Committed,
    /// A committed replica a scan found damaged (not served).
    Quarantined,
    /// An uncommitted block (being written, synced, or a partial copy).
    Uncommitted,
}

/// What a scan of one replica found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanOutcome {
    /// Every window matches its checksum; the bytes read.
    Healthy(u64),
    /// The file is missing, short, or a window does not match.
    Corrupt(String),
    /// The block was deleted (or is not committed) meanwhile.
    Gone,
}

impl BlockStore {
    /// Opens (or creates) the store.
    pub fn open(data_dirs: Vec<PathBuf>, metadata_dir: &Path) -> Result<Self, StorageError> {
        let store = Self {
            layout: Layout::create(data_dirs)?,
            meta: MetaTable::open(metadata_dir)?,
            open: Mutex::new(HashMap::new()),
            committed: RwLock::new(HashMap::new()),
            corrupt: Mutex::new(HashMap::new()),
            used: AtomicU64::new(0),
            slots: Arc::new(SlotRegistry::new()),
            reports: ReportLog::default(),
        };
        let mut used = 0;
        store.meta.for_each(|b| used += b.size)?;
        store.used.store(used, Ordering::Relaxed);
        Ok(store)
    }

    /// The short-circuit slots guarding this store's blocks.
    pub fn slots(&self) -> &Arc<SlotRegistry> {
        &self.slots
    }

    /// Every committed block id.
    pub fn list_committed(&self) -> Result<Vec<BlockId>, StorageError> {
        let mut out = Vec::new();
        self.meta.for_each(|b| {
            if b.committed {
                out.extend(b.id)
            }
        })?;
        Ok(out)
    }

    /// The changes since the last replica report.
    pub fn reports(&self) -> &ReportLog {
        &self.reports
    }

    /// A full replica report: every durable replica (committed, or synced
    /// by hsync: a recovered file ends there), the damaged ones apart.
    /// Pending incremental changes are dropped (this replaces them).
    pub fn full_report(&self) -> Result<ozone_proto::ReplicaReport, StorageError> {
        self.reports.clear();
        let damaged: std::collections::HashSet<BlockKey> =
            self.corrupt.lock().expect("lock").keys().copied().collect();
        let mut report = ozone_proto::ReplicaReport {
            full: true,
            ..Default::default()
        };
        self.meta.for_each(|b| {
            let Some(id) = b.id else { return };
            if damaged.contains(&key_of(&id)) {
                report.damaged.push(id);
            } else {
                report.replicas.push(id);
            }
        })?;
        Ok(report)
    }

    /// What this datanode holds of `id`.
    pub fn local_replica(&self, id: &BlockId) -> Result<LocalReplica, StorageError> {
        let key = key_of(id);
        if self.corrupt.lock().expect("lock").contains_key(&key) {
            return Ok(LocalReplica::Quarantined);
        }
        if self.open.lock().expect("lock").contains_key(&key) {
            return Ok(LocalReplica::Uncommitted);
        }
        Ok(match self.meta.get(key)? {
            Some(row) if row.committed => LocalReplica::Committed,
            Some(_) => LocalReplica::Uncommitted,
            None if self.block_path(id).exists() => LocalReplica::Uncommitted,
            None => LocalReplica::Absent,
        })
    }

    /// Bytes held by committed blocks.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Capacity of the first data directory's file system.
    pub fn capacity_bytes(&self) -> u64 {
        self.layout.capacity_bytes()
    }

    /// Path of a block's file.
    pub fn block_path(&self, id: &BlockId) -> PathBuf {
        self.layout.block_path(id)
    }

    fn open_block(&self, id: &BlockId) -> Result<Arc<OpenBlock>, StorageError> {
        let key = key_of(id);
        if let Some(b) = self.open.lock().expect("lock").get(&key) {
            return Ok(b.clone());
        }
        // A synced block (hsync) reopens with the chunks it had.
        let synced = match self.meta.get(key)? {
            Some(row) if row.committed => {
                return Err(StorageError::AlreadyCommitted(key.0, key.1));
            }
            Some(row) => row.chunks.into_iter().map(|c| (c.offset, c)).collect(),
            None => BTreeMap::new(),
        };
        let path = self.block_path(id);
        let dir = path.parent().expect("block path has a parent");
        super::layout::private_dirs(dir)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut open = self.open.lock().expect("lock");
        Ok(open
            .entry(key)
            .or_insert_with(|| {
                Arc::new(OpenBlock {
                    path,
                    file,
                    chunks: Mutex::new(synced),
                })
            })
            .clone())
    }

    /// Writes one chunk of an uncommitted block, or its bytes from
    /// `data_offset` on (a growing tail chunk; the replica must hold the
    /// bytes before, as written with the same checksums), after checking
    /// the checksums (unless `verify` is false); with `flush` (hflush),
    /// readers see the block up to this chunk's end from then on.
    /// Blocking: call from a blocking context.
    #[allow(clippy::too_many_arguments)]
    pub fn write_chunk(
        &self,
        id: &BlockId,
        chunk: &ChunkInfo,
        data: &[u8],
        data_offset: u64,
        verify: bool,
        flush: bool,
    ) -> Result<(), StorageError> {
        if data_offset.checked_add(data.len() as u64) != Some(chunk.len) {
            return Err(StorageError::Invalid(format!(
                "chunk says {} bytes but carries {} from byte {data_offset}",
                chunk.len,
                data.len()
            )));
        }
        let cd = chunk
            .checksum
            .as_ref()
            .ok_or_else(|| StorageError::Invalid("chunk without checksum data".into()))?;
        let ck = Checksummer::from_raw(cd.r#type, cd.bytes_per_checksum)?;
        let bpc = ck.bytes_per_checksum() as u64;
        if !chunk.offset.is_multiple_of(bpc) || !data_offset.is_multiple_of(bpc) {
            return Err(StorageError::Invalid(format!(
                "chunk offset {} (data from byte {data_offset}) is not aligned to the {bpc}-byte \
                 checksum window",
                chunk.offset,
            )));
        }
        if chunk
            .offset
            .checked_add(chunk.len)
            .is_none_or(|e| e > MAX_BLOCK_SIZE)
        {
            return Err(StorageError::Invalid(format!(
                "chunk {}+{} ends past the largest block size {MAX_BLOCK_SIZE}",
                chunk.offset, chunk.len
            )));
        }
        if cd.checksums.len() != ck.windows(chunk.len) {
            return Err(StorageError::Invalid("wrong number of checksums".into()));
        }
        // The checksums of the windows `data` covers.
        let first = (data_offset / bpc) as usize;
        let sums = &cd.checksums[first..];
        let first_window = (chunk.offset + data_offset) / bpc;
        let mut record = chunk.clone();
        record.fine_checksum = None;
        let fine = match fine_of(&ck) {
            Some(f) => {
                // One pass over the data: fine checksums, combined to check
                // the client's coarse ones.
                let fine = f.compute(data);
                if verify {
                    check_fine_against_coarse(
                        &ck,
                        FINE_WINDOW,
                        &fine,
                        sums,
                        data.len() as u64,
                        first_window,
                    )?;
                }
                Some((f, fine))
            }
            None => {
                if verify {
                    ck.verify(data, first_window, sums)?;
                }
                None
            }
        };
        if data_offset > 0 && !self.is_open(id)? {
            // Refused before a block file is made for it.
            return Err(StorageError::Incomplete(format!(
                "chunk at {} goes on from byte {data_offset} of a block this replica is not \
                 writing: send the chunk whole",
                chunk.offset
            )));
        }
        let block = self.open_block(id)?;
        let before = if data_offset > 0 {
            self.chunk_prefix(&block, chunk, first, data_offset)?
        } else {
            Vec::new()
        };
        if let Some((f, fine)) = fine {
            let mut all = before;
            all.extend_from_slice(&fine);
            record.fine_checksum = Some(ChecksumData {
                r#type: f.kind() as i32,
                bytes_per_checksum: FINE_WINDOW,
                checksums: all,
            });
        }
        block
            .file
            .write_all_at(data, chunk.offset + data_offset)
            .map_err(io_err(&block.path))?;
        let mut chunks = block.chunks.lock().expect("lock");
        if chunk.len > 0 {
            // An empty chunk only flushes what precedes it.
            chunks.insert(chunk.offset, record);
        }
        if flush {
            let end = chunk.offset + chunk.len;
            let visible = Self::visible_prefix(&chunks, end).ok_or_else(|| {
                StorageError::Invalid(format!(
                    "hflush at {end}: the block's chunks do not cover 0..{end} without a gap"
                ))
            })?;
            drop(chunks);
            self.publish(id, &block, visible)?;
        }
        Ok(())
    }

    /// Whether block `id` is open for writes in memory (its file open): a
    /// write to it opens no file and reads no metadata.
    pub fn is_writing(&self, id: &BlockId) -> bool {
        self.open.lock().expect("lock").contains_key(&key_of(id))
    }

    /// Whether block `id` is being written here (open, or synced and not
    /// committed).
    fn is_open(&self, id: &BlockId) -> Result<bool, StorageError> {
        if self.is_writing(id) {
            return Ok(true);
        }
        Ok(self.meta.get(key_of(id))?.is_some_and(|row| !row.committed))
    }

    /// For a write of `chunk` from byte `data_offset` (window `first`):
    /// checks that this replica holds the chunk's bytes before it, written
    /// with the same checksums, and returns their fine checksums.
    fn chunk_prefix(
        &self,
        block: &OpenBlock,
        chunk: &ChunkInfo,
        first: usize,
        data_offset: u64,
    ) -> Result<Vec<u32>, StorageError> {
        let chunks = block.chunks.lock().expect("lock");
        let held = chunks.get(&chunk.offset).filter(|prev| {
            prev.len >= data_offset
                && match (&prev.checksum, &chunk.checksum) {
                    (Some(a), Some(b)) => {
                        a.r#type == b.r#type
                            && a.bytes_per_checksum == b.bytes_per_checksum
                            && a.checksums.get(..first) == b.checksums.get(..first)
                    }
                    _ => false,
                }
        });
        let Some(prev) = held else {
            return Err(StorageError::Incomplete(format!(
                "chunk at {} goes on from byte {data_offset}, and this replica does not hold \
                 the bytes before as the request describes them: send the chunk whole",
                chunk.offset
            )));
        };
        Ok(match &prev.fine_checksum {
            Some(f) => {
                let n = (data_offset / f.bytes_per_checksum as u64) as usize;
                f.checksums.get(..n).unwrap_or_default().to_vec()
            }
            None => Vec::new(),
        })
    }

    /// The chunk records from the block's start to exactly `end`, when
    /// they follow each other without a gap (a chunk written again, longer,
    /// replaces the shorter one at its offset).
    fn visible_prefix(chunks: &BTreeMap<u64, ChunkInfo>, end: u64) -> Option<Vec<ChunkInfo>> {
        let mut at = 0;
        let mut out = Vec::new();
        for c in chunks.values() {
            if at == end {
                break;
            }
            if c.offset != at || at + c.len > end {
                return None;
            }
            at += c.len;
            out.push(c.clone());
        }
        (at == end).then_some(out)
    }

    /// hflush: serves `chunks` of open block `id` to readers (not durable:
    /// nothing is fsynced and a restart forgets it).
    fn publish(
        &self,
        id: &BlockId,
        open: &OpenBlock,
        chunks: Vec<ChunkInfo>,
    ) -> Result<(), StorageError> {
        let data = BlockData {
            id: Some(*id),
            size: chunks.iter().map(|c| c.len).sum(),
            chunks,
            committed: false,
        };
        // The chunks' fine checksums were computed here from the bytes (and
        // checked against the client's when written, unless write
        // verification is off; the commit checks them in any case).
        let integrity = BlockIntegrity::of_written(&data)?;
        let file = open.file.try_clone().map_err(io_err(&open.path))?;
        let visible = Arc::new(CommittedBlock {
            data,
            integrity,
            path: open.path.clone(),
            file,
        });
        let key = key_of(id);
        let mut served = self.committed.write().expect("lock");
        // A flush never shortens what readers see (a late, shorter flush
        // of a chunk written again loses to the longer one).
        if served.get(&key).is_none_or(|b| b.size() <= visible.size()) {
            served.insert(key, visible);
        }
        Ok(())
    }

    /// Commits a block: checks its chunk list against what was written,
    /// fsyncs data and metadata. Repeating a commit with the same metadata
    /// succeeds. Blocking.
    pub fn put_block(&self, block: &BlockData) -> Result<u64, StorageError> {
        let id = block
            .id
            .as_ref()
            .ok_or_else(|| StorageError::Invalid("missing block id".into()))?;
        let key = key_of(id);
        // The client's list carries no fine checksums; validate its shape.
        BlockIntegrity::of_block(block)?;
        let open = self.open.lock().expect("lock").get(&key).cloned();
        let Some(open) = open else {
            if self.meta.get(key)?.is_some_and(|row| !row.committed) {
                // Synced before a restart: reopen it with its chunks.
                self.open_block(id)?;
                return self.put_block(block);
            }
            if let Ok(existing) = self.committed_block(id) {
                let same = existing.data.size == block.size
                    && existing.data.chunks.len() == block.chunks.len()
                    && existing
                        .data
                        .chunks
                        .iter()
                        .zip(&block.chunks)
                        .all(|(a, b)| same_chunk(a, b));
                if same {
                    return Ok(block.size);
                }
                return Err(StorageError::AlreadyCommitted(key.0, key.1));
            }
            if block.size == 0 {
                // An empty block has no chunks to write; create its file now.
                self.open_block(id)?;
                return self.put_block(block);
            }
            return Err(StorageError::NotFound(key.0, key.1));
        };
        let (stored, integrity) = self.persist(key, &open, block, true)?;
        self.open.lock().expect("lock").remove(&key);
        let file = File::open(&open.path).map_err(io_err(&open.path))?;
        let committed = Arc::new(CommittedBlock {
            data: stored,
            integrity,
            path: open.path.clone(),
            file,
        });
        self.committed.write().expect("lock").insert(key, committed);
        self.reports.added(*id);
        Ok(block.size)
    }

    /// Makes `block` (its chunks as written to `open`) durable: the file
    /// (cut to the block's size when `committed`) and its directory are
    /// fsynced, then its metadata row is stored, marked `committed` or
    /// synced only. Returns the row and its checksums.
    fn persist(
        &self,
        key: BlockKey,
        open: &OpenBlock,
        block: &BlockData,
        committed: bool,
    ) -> Result<(BlockData, BlockIntegrity), StorageError> {
        let recorded = Self::as_written(open, block)?;
        if committed {
            open.file.set_len(block.size).map_err(io_err(&open.path))?;
            open.file.sync_all().map_err(io_err(&open.path))?;
        } else {
            open.file.sync_data().map_err(io_err(&open.path))?;
        }
        let dir = open.path.parent().expect("parent");
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
        let mut stored = block.clone();
        stored.committed = committed;
        // Keep the chunk records as written: they carry the fine checksums.
        stored.chunks = recorded;
        let integrity = BlockIntegrity::of_block(&stored)?;
        let before = self.meta.get(key)?.map_or(0, |row| row.size);
        self.meta.insert(key, &stored)?;
        self.account(before, block.size);
        Ok((stored, integrity))
    }

    /// The records of `block`'s chunks as they were written to `open` (with
    /// the fine checksums the datanode derived); every chunk must have been
    /// written exactly so.
    fn as_written(open: &OpenBlock, block: &BlockData) -> Result<Vec<ChunkInfo>, StorageError> {
        let written = open.chunks.lock().expect("lock");
        block
            .chunks
            .iter()
            .map(|c| match written.get(&c.offset) {
                Some(w) if same_chunk(w, c) => Ok(w.clone()),
                Some(_) => Err(StorageError::Invalid(format!(
                    "chunk at {} differs from the chunk written there",
                    c.offset
                ))),
                None => Err(StorageError::Invalid(format!(
                    "chunk at {} was never written",
                    c.offset
                ))),
            })
            .collect()
    }

    /// Moves the used-bytes count from a block's old size to its new one.
    fn account(&self, before: u64, after: u64) {
        if after >= before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            let d = (before - after).min(self.used_bytes());
            self.used.fetch_sub(d, Ordering::Relaxed);
        }
    }

    /// hsync: makes the chunks written so far durable and readable up to
    /// `block.size` (a metadata row marked not committed) and keeps the
    /// block open for more writes; its last chunk may be written again,
    /// longer. Repeating a sync succeeds. Blocking.
    pub fn sync_block(&self, block: &BlockData) -> Result<u64, StorageError> {
        let id = block
            .id
            .as_ref()
            .ok_or_else(|| StorageError::Invalid("missing block id".into()))?;
        let key = key_of(id);
        BlockIntegrity::of_block(block)?;
        let open = match self.open.lock().expect("lock").get(&key).cloned() {
            Some(o) => o,
            None => match self.meta.get(key)? {
                Some(row) if row.committed => {
                    return Err(StorageError::AlreadyCommitted(key.0, key.1));
                }
                Some(_) => self.open_block(id)?,
                None if block.size == 0 => self.open_block(id)?,
                None => return Err(StorageError::NotFound(key.0, key.1)),
            },
        };
        self.persist(key, &open, block, false)?;
        // Readers see the new length from now on.
        self.committed.write().expect("lock").remove(&key);
        self.reports.added(*id);
        Ok(block.size)
    }

    /// Block recovery: what this replica serves of block `id` (hflushed,
    /// synced or committed); with `commit_at`, commits it at that length,
    /// which must be what it serves, cutting what was written past it
    /// (not acknowledged to readers). Blocking.
    pub fn recover_block(
        &self,
        id: &BlockId,
        commit_at: Option<u64>,
    ) -> Result<BlockData, StorageError> {
        let served = self.committed_block(id)?;
        let Some(length) = commit_at else {
            return Ok(served.data.clone());
        };
        if served.size() != length {
            return Err(StorageError::Invalid(format!(
                "block recovery at {length} bytes: this replica serves {}",
                served.size()
            )));
        }
        if served.data.committed {
            return Ok(served.data.clone());
        }
        let key = key_of(id);
        if let Some(open) = self.open.lock().expect("lock").get(&key) {
            // Chunks written past the served length, or written again
            // longer, give way to the records served.
            *open.chunks.lock().expect("lock") = served
                .data
                .chunks
                .iter()
                .map(|c| (c.offset, c.clone()))
                .collect();
        }
        let mut data = served.data.clone();
        data.chunks.iter_mut().for_each(|c| c.fine_checksum = None);
        self.put_block(&data)?;
        Ok(self.committed_block(id)?.data.clone())
    }

    /// Reads a committed replica from its file (opened afresh, so a file
    /// deleted or replaced by hand is seen) in pieces into `buf` and checks
    /// every window against the block's finest checksums; `pace` is called
    /// with the bytes of each piece (to bound the scan rate) and stops the
    /// scan by returning false. Blocking.
    pub fn scan_block(
        &self,
        id: &BlockId,
        buf: &mut Vec<u8>,
        pace: impl FnMut(u64) -> bool,
    ) -> Result<ScanOutcome, StorageError> {
        let key = key_of(id);
        match self.scan_once(id, buf, pace)? {
            // Deleted while it was read: not a damaged replica.
            ScanOutcome::Corrupt(_) if self.meta.get(key)?.is_none() => Ok(ScanOutcome::Gone),
            other => Ok(other),
        }
    }

    fn scan_once(
        &self,
        id: &BlockId,
        buf: &mut Vec<u8>,
        mut pace: impl FnMut(u64) -> bool,
    ) -> Result<ScanOutcome, StorageError> {
        const PIECE: u64 = 1 << 20;
        let key = key_of(id);
        let Some(data) = self.meta.get(key)? else {
            return Ok(ScanOutcome::Gone);
        };
        if !data.committed {
            return Ok(ScanOutcome::Gone);
        }
        let integrity = match BlockIntegrity::of_block(&data) {
            Ok(i) => i,
            Err(e) => return Ok(ScanOutcome::Corrupt(format!("metadata: {e}"))),
        };
        let sums = integrity.finest();
        let path = self.block_path(id);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ScanOutcome::Corrupt("the block file is missing".into()));
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let len = file.metadata().map_err(io_err(&path))?.len();
        if len < data.size {
            return Ok(ScanOutcome::Corrupt(format!(
                "the block file holds {len} of its {} bytes",
                data.size
            )));
        }
        let bpc = sums.checksummer().bytes_per_checksum() as u64;
        let piece = (PIECE / bpc).max(1) * bpc;
        let mut at = 0;
        while at < data.size {
            let n = piece.min(data.size - at);
            buf.resize(n as usize, 0);
            if let Err(e) = file.read_exact_at(buf, at) {
                return Ok(ScanOutcome::Corrupt(format!("reading at {at}: {e}")));
            }
            let w = sums.covering(at, n).expect("within the block");
            if let Err(e) = sums.verify(&w, buf) {
                return Ok(ScanOutcome::Corrupt(e.to_string()));
            }
            if !pace(n) {
                return Ok(ScanOutcome::Gone); // stopped
            }
            at += n;
        }
        Ok(ScanOutcome::Healthy(data.size))
    }

    /// Stops serving a replica a scan found damaged: readers get
    /// `Corrupt` (and move to another replica), short-circuit descriptors
    /// of it are invalidated. Cleared when the block is deleted.
    pub fn quarantine(&self, id: &BlockId, why: &str) {
        let key = key_of(id);
        self.corrupt
            .lock()
            .expect("lock")
            .insert(key, why.to_string());
        self.committed.write().expect("lock").remove(&key);
        self.slots.invalidate(&[key]);
        self.reports.damaged(*id);
    }

    /// Whether a scan found this replica damaged.
    pub fn is_quarantined(&self, id: &BlockId) -> bool {
        self.corrupt.lock().expect("lock").contains_key(&key_of(id))
    }

    /// Replicas quarantined so far.
    pub fn quarantined(&self) -> usize {
        self.corrupt.lock().expect("lock").len()
    }

    /// A committed block (loaded and cached on first use).
    pub fn committed_block(&self, id: &BlockId) -> Result<Arc<CommittedBlock>, StorageError> {
        let key = key_of(id);
        if let Some(why) = self.corrupt.lock().expect("lock").get(&key) {
            return Err(StorageError::Corrupt(key.0, key.1, why.clone()));
        }
        if let Some(b) = self.committed.read().expect("lock").get(&key) {
            return Ok(b.clone());
        }
        let data = {
            match self.meta.get(key)? {
                Some(d) => d,
                None => {
                    if self.open.lock().expect("lock").contains_key(&key) {
                        return Err(StorageError::NotCommitted(key.0, key.1));
                    }
                    return Err(StorageError::NotFound(key.0, key.1));
                }
            }
        };
        // Fine and coarse checksums are checked against each other here too.
        let integrity = BlockIntegrity::of_block(&data)?;
        let path = self.block_path(id);
        let file = File::open(&path).map_err(io_err(&path))?;
        let block = Arc::new(CommittedBlock {
            data,
            integrity,
            path,
            file,
        });
        Ok(self
            .committed
            .write()
            .expect("lock")
            .entry(key)
            .or_insert(block)
            .clone())
    }

    /// Reads `len` bytes at `offset` of a committed block. With checksums,
    /// the range is widened to whole windows (the fine 4 KiB windows when
    /// kept, unless `coarse`) and their checksums returned. Blocking.
    pub fn read(
        &self,
        id: &BlockId,
        offset: u64,
        len: u64,
        with_checksums: bool,
        coarse: bool,
    ) -> Result<(u64, Bytes, Option<ChecksumData>), StorageError> {
        let b = self.committed_block(id)?;
        let sums = if coarse {
            &b.integrity.coarse
        } else {
            b.integrity.finest()
        };
        let Some(windows) = sums.covering(offset, len) else {
            return Err(StorageError::OutOfRange {
                block: id.display(),
                offset,
                len,
                size: b.size(),
            });
        };
        let (start, stop, sums) = if with_checksums && len > 0 {
            (windows.start, windows.end, Some(sums.to_wire(&windows)))
        } else {
            (offset, offset + len, None)
        };
        let mut buf = BytesMut::zeroed((stop - start) as usize);
        b.file
            .read_exact_at(&mut buf, start)
            .map_err(io_err(&b.path))?;
        Ok((start, buf.freeze(), sums))
    }

    /// Deletes blocks (committed or not); returns the ids now absent.
    /// Short-circuit readers of these blocks are invalidated first.
    pub fn delete(&self, ids: &[BlockId]) -> Result<Vec<BlockId>, StorageError> {
        let keys: Vec<BlockKey> = ids.iter().map(key_of).collect();
        self.slots.invalidate(&keys);
        let freed = self.meta.remove(&keys)?;
        self.used
            .fetch_sub(freed.min(self.used_bytes()), Ordering::Relaxed);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let key = key_of(id);
            self.committed.write().expect("lock").remove(&key);
            self.open.lock().expect("lock").remove(&key);
            self.corrupt.lock().expect("lock").remove(&key);
            let path = self.block_path(id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
            out.push(*id);
        }
        self.reports.removed(&out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_proto::ChecksumType;

    fn chunk(ck: &Checksummer, offset: u64, data: &[u8]) -> ChunkInfo {
        ChunkInfo {
            offset,
            len: data.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: ck.bytes_per_checksum(),
                checksums: ck.compute(data),
            }),
            fine_checksum: None,
        }
    }

    #[test]
    fn fine_checksums_narrow_verified_reads_and_match_coarse() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 64 * 1024).unwrap();
        let id = BlockId {
            container_id: 3,
            local_id: 9,
            commit_seq: 0,
        };
        let data: Vec<u8> = (0..(128 * 1024 + 50_000))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let (a, b) = data.split_at(128 * 1024);
        let c1 = chunk(&ck, 0, a);
        let c2 = chunk(&ck, a.len() as u64, b);
        {
            let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
            // A wrong coarse checksum is caught through the fine ones.
            let mut bad = c1.clone();
            bad.checksum.as_mut().unwrap().checksums[1] ^= 1;
            let e = s
                .write_chunk(&id, &bad, a, 0, true, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("window 1"), "{e}");
            s.write_chunk(&id, &c1, a, 0, true, false).unwrap();
            s.write_chunk(&id, &c2, b, 0, true, false).unwrap();
            let bd = BlockData {
                id: Some(id),
                chunks: vec![c1.clone(), c2.clone()],
                size: data.len() as u64,
                committed: false,
            };
            s.put_block(&bd).unwrap();
            assert_eq!(s.put_block(&bd).unwrap(), data.len() as u64, "idempotent");
        }
        // Reopened: fine checksums are checked against the coarse ones.
        let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        let fine = Checksummer::new(ChecksumType::Crc32c, FINE_WINDOW).unwrap();
        // A 20,000-byte read inside the second 64 KiB window: only the five
        // 4 KiB windows covering it.
        let (off, got, sums) = s.read(&id, 70_000, 20_000, true, false).unwrap();
        let sums = sums.unwrap();
        assert_eq!(
            (off, got.len(), sums.bytes_per_checksum),
            (69_632, 20_480, FINE_WINDOW)
        );
        fine.verify(&got, off / FINE_WINDOW as u64, &sums.checksums)
            .unwrap();
        assert_eq!(&got[..], &data[69_632..90_112]);
        // The key's own windows on request.
        let (off, got, sums) = s.read(&id, 70_000, 20_000, true, true).unwrap();
        assert_eq!((off, got.len()), (65_536, 65_536));
        ck.verify(&got, 1, &sums.unwrap().checksums).unwrap();
        // The tail window is short.
        let (off, got, sums) = s.read(&id, data.len() as u64 - 1, 1, true, false).unwrap();
        let tail_start = (data.len() as u64 - 1) / FINE_WINDOW as u64 * FINE_WINDOW as u64;
        assert_eq!(off, tail_start);
        fine.verify(&got, off / FINE_WINDOW as u64, &sums.unwrap().checksums)
            .unwrap();
        // Inconsistent fine and coarse metadata is refused.
        let mut b2 = s.committed_block(&id).unwrap().data.clone();
        b2.chunks[0].fine_checksum.as_mut().unwrap().checksums[0] ^= 1;
        assert!(
            BlockIntegrity::of_block(&b2)
                .unwrap_err()
                .to_string()
                .contains("disagree")
        );
    }

    #[test]
    fn block_files_and_their_directories_are_the_datanodes_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("d");
        // A containers directory left open by an older version is closed.
        std::fs::create_dir_all(data_dir.join("containers")).unwrap();
        std::fs::set_permissions(
            data_dir.join("containers"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let s = BlockStore::open(vec![data_dir.clone()], &dir.path().join("m")).unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 8).unwrap();
        let id = BlockId {
            container_id: 3,
            local_id: 9,
            commit_seq: 0,
        };
        s.write_chunk(
            &id,
            &chunk(&ck, 0, b"12345678"),
            b"12345678",
            0,
            true,
            false,
        )
        .unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let file = s.block_path(&id);
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        let mut d = file.parent().unwrap();
        while d != data_dir {
            assert_eq!(mode(d), 0o700, "{}", d.display());
            d = d.parent().unwrap();
        }
    }

    #[test]
    fn write_commit_read_delete_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 8).unwrap();
        let id = BlockId {
            container_id: 1,
            local_id: 7,
            commit_seq: 0,
        };
        let data: Vec<u8> = (0..40u8).collect();
        {
            let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
            let c1 = chunk(&ck, 0, &data[..16]);
            let c2 = chunk(&ck, 16, &data[16..]);
            s.write_chunk(&id, &c1, &data[..16], 0, true, false)
                .unwrap();
            // A corrupt chunk is refused.
            let mut bad = data[16..].to_vec();
            bad[3] ^= 0xff;
            assert!(matches!(
                s.write_chunk(&id, &c2, &bad, 0, true, false),
                Err(StorageError::Checksum(_))
            ));
            // Not readable before commit.
            assert!(matches!(
                s.read(&id, 0, 1, false, false),
                Err(StorageError::NotCommitted(1, 7))
            ));
            s.write_chunk(&id, &c2, &data[16..], 0, true, false)
                .unwrap();
            let bd = BlockData {
                id: Some(id),
                chunks: vec![c1, c2],
                size: 40,
                committed: false,
            };
            assert_eq!(s.put_block(&bd).unwrap(), 40);
            assert_eq!(s.put_block(&bd).unwrap(), 40, "repeat commit is idempotent");
            assert_eq!(s.used_bytes(), 40);
        }
        let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        assert_eq!(s.used_bytes(), 40);
        let (off, got, sums) = s.read(&id, 10, 5, false, false).unwrap();
        assert_eq!((off, &got[..], sums), (10, &data[10..15], None));
        let (off, got, sums) = s.read(&id, 10, 20, true, false).unwrap();
        assert_eq!(off, 8);
        assert_eq!(&got[..], &data[8..32]);
        assert_eq!(sums.unwrap().checksums, ck.compute(&data[8..32]));
        let (off, got, _) = s.read(&id, 39, 1, true, false).unwrap();
        assert_eq!((off, &got[..]), (32, &data[32..40]));
        assert!(matches!(
            s.read(&id, 39, 2, false, false),
            Err(StorageError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.read(&id, u64::MAX, 2, false, false),
            Err(StorageError::OutOfRange { .. })
        ));
        assert_eq!(s.delete(std::slice::from_ref(&id)).unwrap().len(), 1);
        assert!(matches!(
            s.read(&id, 0, 1, false, false),
            Err(StorageError::NotFound(1, 7))
        ));
        assert!(!s.block_path(&id).exists());
        assert_eq!(s.used_bytes(), 0);
    }

    #[test]
    fn synced_blocks_grow_stay_readable_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 16).unwrap();
        let id = BlockId {
            container_id: 4,
            local_id: 2,
            commit_seq: 0,
        };
        let data: Vec<u8> = (0..100u8).collect();
        let block = |chunks: Vec<ChunkInfo>| BlockData {
            id: Some(id),
            size: chunks.iter().map(|c| c.len).sum(),
            chunks,
            committed: false,
        };
        let open = || BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        {
            let s = open();
            // 32 whole bytes, then a 10-byte tail: sync.
            let c1 = chunk(&ck, 0, &data[..32]);
            let tail = chunk(&ck, 32, &data[32..42]);
            s.write_chunk(&id, &c1, &data[..32], 0, true, false)
                .unwrap();
            s.write_chunk(&id, &tail, &data[32..42], 0, true, false)
                .unwrap();
            assert_eq!(
                s.sync_block(&block(vec![c1.clone(), tail.clone()]))
                    .unwrap(),
                42
            );
            assert_eq!(
                s.sync_block(&block(vec![c1.clone(), tail])).unwrap(),
                42,
                "repeated"
            );
            let (off, got, _) = s.read(&id, 30, 12, true, false).unwrap();
            assert_eq!((off, &got[..]), (16, &data[16..42]));
            assert!(
                s.read(&id, 30, 13, false, false).is_err(),
                "past the synced length"
            );
            assert_eq!(s.used_bytes(), 42);
            // The tail is written again, longer, and synced.
            let longer = chunk(&ck, 32, &data[32..70]);
            s.write_chunk(&id, &longer, &data[32..70], 0, true, false)
                .unwrap();
            s.sync_block(&block(vec![c1, longer])).unwrap();
            assert_eq!(
                &s.read(&id, 0, 70, false, false).unwrap().1[..],
                &data[..70]
            );
            assert_eq!(s.used_bytes(), 70);
            assert!(!s.committed_block(&id).unwrap().data.committed);
        }
        // After a restart the synced length is there, and the writer goes on.
        let s = open();
        assert_eq!(s.used_bytes(), 70);
        assert_eq!(
            &s.read(&id, 0, 70, true, false).unwrap().1[..70],
            &data[..70]
        );
        let c1 = chunk(&ck, 0, &data[..32]);
        let rest = chunk(&ck, 32, &data[32..]);
        s.write_chunk(&id, &rest, &data[32..], 0, true, false)
            .unwrap();
        assert_eq!(s.put_block(&block(vec![c1, rest])).unwrap(), 100);
        assert!(s.committed_block(&id).unwrap().data.committed);
        assert_eq!(s.used_bytes(), 100);
        assert_eq!(&s.read(&id, 0, 100, false, false).unwrap().1[..], &data[..]);
        // A committed block takes no more syncs.
        assert!(matches!(
            s.sync_block(&block(vec![chunk(&ck, 0, &data[..32])])),
            Err(StorageError::AlreadyCommitted(4, 2))
        ));
    }

    #[test]
    fn flushed_chunks_are_read_up_to_the_flush_and_forgotten_by_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 16).unwrap();
        let id = BlockId {
            container_id: 5,
            local_id: 1,
            commit_seq: 0,
        };
        let data: Vec<u8> = (0..100u8).collect();
        let open = || BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        {
            let s = open();
            let c1 = chunk(&ck, 0, &data[..32]);
            s.write_chunk(&id, &c1, &data[..32], 0, true, false)
                .unwrap();
            assert!(
                matches!(
                    s.committed_block(&id),
                    Err(StorageError::NotCommitted(5, 1))
                ),
                "nothing flushed yet: nothing to read"
            );
            // hflush of a 10-byte tail: 42 bytes readable, checksummed.
            let tail = chunk(&ck, 32, &data[32..42]);
            s.write_chunk(&id, &tail, &data[32..42], 0, true, true)
                .unwrap();
            let b = s.committed_block(&id).unwrap();
            assert_eq!((b.size(), b.data.committed), (42, false));
            let (off, got, sums) = s.read(&id, 30, 12, true, false).unwrap();
            assert_eq!((off, &got[..]), (16, &data[16..42]));
            assert_eq!(sums.unwrap().checksums, ck.compute(&data[16..42]));
            assert!(s.read(&id, 30, 13, false, false).is_err(), "past the flush");
            assert_eq!(s.used_bytes(), 0, "flushed bytes are not durable yet");
            // The tail written again, longer, and flushed: readers see more.
            let longer = chunk(&ck, 32, &data[32..70]);
            s.write_chunk(&id, &longer, &data[32..70], 0, true, true)
                .unwrap();
            assert_eq!(&s.read(&id, 0, 70, true, false).unwrap().1[..], &data[..70]);
            // Longer again, only the bytes from its last whole window on
            // sent (32 of the chunk's 60 bytes: data[64..92]).
            let grown = chunk(&ck, 32, &data[32..92]);
            s.write_chunk(&id, &grown, &data[64..92], 32, true, true)
                .unwrap();
            assert_eq!(&s.read(&id, 0, 92, true, false).unwrap().1[..], &data[..92]);
            let (_, got, sums) = s.read(&id, 64, 28, true, false).unwrap();
            assert_eq!(sums.unwrap().checksums, ck.compute(&got));
            // A continuation whose earlier windows differ from what was
            // written is refused and changes nothing; so is one of a chunk
            // never written here.
            let mut other = data[32..92].to_vec();
            other[0] ^= 1;
            let forged = chunk(&ck, 32, &other);
            let e = s
                .write_chunk(&id, &forged, &other[32..], 32, true, true)
                .unwrap_err();
            assert!(matches!(e, StorageError::Incomplete(_)), "{e}");
            let fresh = BlockId { local_id: 9, ..id };
            let e = s
                .write_chunk(&fresh, &grown, &data[64..92], 32, true, true)
                .unwrap_err();
            assert!(matches!(e, StorageError::Incomplete(_)), "{e}");
            assert!(!s.block_path(&fresh).exists(), "no file made for it");
            // A continuation that does not add up to the chunk is refused.
            assert!(matches!(
                s.write_chunk(&id, &grown, &data[64..90], 32, true, true),
                Err(StorageError::Invalid(_))
            ));
            assert_eq!(&s.read(&id, 0, 92, true, false).unwrap().1[..], &data[..92]);
            // A flush that would leave a gap is refused and changes nothing.
            let after_gap = chunk(&ck, 80, &data[80..96]);
            let e = s
                .write_chunk(&id, &after_gap, &data[80..96], 0, true, true)
                .unwrap_err();
            assert!(e.to_string().contains("without a gap"), "{e}");
            assert_eq!(s.committed_block(&id).unwrap().size(), 92);
        }
        // Nothing was synced: a restarted datanode serves nothing of it.
        let s = open();
        assert!(s.committed_block(&id).is_err());
    }

    #[test]
    fn replica_reports_and_local_states() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 16).unwrap();
        let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        let id = |l| BlockId {
            container_id: 9,
            local_id: l,
            commit_seq: 0,
        };
        let data = [7u8; 48];
        let c = chunk(&ck, 0, &data);
        let block = |l| BlockData {
            id: Some(id(l)),
            chunks: vec![c.clone()],
            size: 48,
            committed: false,
        };
        assert_eq!(s.local_replica(&id(1)).unwrap(), LocalReplica::Absent);
        for l in 1..=3 {
            s.write_chunk(&id(l), &c, &data, 0, true, false).unwrap();
        }
        assert_eq!(s.local_replica(&id(1)).unwrap(), LocalReplica::Uncommitted);
        s.put_block(&block(1)).unwrap();
        s.put_block(&block(2)).unwrap();
        s.sync_block(&block(3)).unwrap();
        assert_eq!(s.local_replica(&id(1)).unwrap(), LocalReplica::Committed);
        s.quarantine(&id(2), "test");
        assert_eq!(s.local_replica(&id(2)).unwrap(), LocalReplica::Quarantined);
        let inc = s.reports().take();
        assert_eq!(inc.replicas, [id(1), id(3)]);
        assert_eq!(inc.damaged, [id(2)]);
        s.delete(&[id(1)]).unwrap();
        assert_eq!(s.reports().take().removed, [id(1)]);
        s.write_chunk(&id(4), &c, &data, 0, true, false).unwrap();
        // Full: committed and synced replicas, damaged apart; an open
        // block is not a replica yet.
        let full = s.full_report().unwrap();
        assert!(full.full);
        assert_eq!(full.replicas, [id(3)]);
        assert_eq!(full.damaged, [id(2)]);
        assert!(s.reports().take().replicas.is_empty());
    }

    #[test]
    fn put_block_checks_chunk_list() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32, 4).unwrap();
        let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        let id = BlockId {
            container_id: 2,
            local_id: 1,
            commit_seq: 0,
        };
        let c1 = chunk(&ck, 0, b"abcd");
        s.write_chunk(&id, &c1, b"abcd", 0, true, false).unwrap();
        let missing = BlockData {
            id: Some(id),
            chunks: vec![c1.clone(), chunk(&ck, 4, b"efgh")],
            size: 8,
            committed: false,
        };
        let e = s.put_block(&missing).unwrap_err().to_string();
        assert!(e.contains("never written"), "{e}");
        let wrong_size = BlockData {
            id: Some(id),
            chunks: vec![c1],
            size: 5,
            committed: false,
        };
        assert!(matches!(
            s.put_block(&wrong_size),
            Err(StorageError::Invalid(_))
        ));
        let unaligned = ChunkInfo {
            offset: 2,
            ..chunk(&ck, 2, b"zz")
        };
        assert!(
            s.write_chunk(&id, &unaligned, b"zz", 0, true, false)
                .is_err()
        );
    }
}
