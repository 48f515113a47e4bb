//! Block storage: one file per block under the data directories, grouped by
//! container, and a crash-safe metadata table (redb) of committed blocks.
//!
//! Layout: `<data dir>/containers/<container id>/chunks/<local id>.block`;
//! the data directory is picked by container id. Metadata lives in
//! `<metadata dir>/datanode.redb`: one row per committed block (its
//! `BlockData`: length, chunks, checksums).
//!
//! A block is written by WriteChunk calls (verified against their checksums,
//! then written with `pwrite`) and made durable and visible by PutBlock,
//! which checks the chunk list, truncates the file to the block length,
//! fsyncs the file and its directory, and commits the metadata row.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use ozone_common::checksum::{ChecksumError, Checksummer};
use ozone_proto::{BlockData, BlockId, ChecksumData, ChunkInfo};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::slots::SlotRegistry;

const BLOCKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("blocks");

/// Largest block accepted (bounds offsets in requests).
pub const MAX_BLOCK_SIZE: u64 = 16 << 30;

/// Fine checksum window the datanode keeps whatever a key's window is, so
/// a verified read checks only the 4 KiB windows it touches (a page: an
/// unaligned 64 KiB read widens by at most 8 KiB).
pub const FINE_WINDOW: u32 = 4 * 1024;

/// The fine checksummer for a key's checksummer, when its windows are a
/// larger multiple of [`FINE_WINDOW`].
pub fn fine_of(ck: &Checksummer) -> Option<Checksummer> {
    let bpc = ck.bytes_per_checksum();
    if ck.kind() == ozone_proto::ChecksumType::None
        || bpc <= FINE_WINDOW
        || !bpc.is_multiple_of(FINE_WINDOW)
    {
        return None;
    }
    Checksummer::new(ck.kind(), FINE_WINDOW).ok()
}

/// Checks that the fine checksums (windows of `fine_bpc` bytes) of `len`
/// bytes combine into the coarse ones; `first_coarse` is the index of the
/// first coarse window (for errors).
pub fn check_fine_against_coarse(
    ck: &Checksummer,
    fine_bpc: u32,
    fine: &[u32],
    coarse: &[u32],
    len: u64,
    first_coarse: u64,
) -> Result<(), ChecksumError> {
    let bpc = ck.bytes_per_checksum() as u64;
    if fine_bpc == 0 || !ck.bytes_per_checksum().is_multiple_of(fine_bpc) {
        return Err(ChecksumError::BadWindow(fine_bpc));
    }
    let per = (ck.bytes_per_checksum() / fine_bpc) as usize;
    if fine.len() != len.div_ceil(fine_bpc as u64) as usize || coarse.len() != ck.windows(len) {
        return Err(ChecksumError::Count {
            expected: ck.windows(len),
            got: coarse.len(),
            len,
        });
    }
    let whole = ck.combine_op(fine_bpc as u64);
    for (i, (&want, group)) in coarse.iter().zip(fine.chunks(per)).enumerate() {
        let start = i as u64 * bpc;
        let mut acc = group[0];
        for (j, &f) in group.iter().enumerate().skip(1) {
            let ws = start + j as u64 * fine_bpc as u64;
            let wl = (len - ws).min(fine_bpc as u64);
            acc = if wl == fine_bpc as u64 {
                ck.combine_with(whole, acc, f)
            } else {
                ck.combine(acc, f, wl)
            };
        }
        if acc != want {
            let window = first_coarse + i as u64;
            return Err(ChecksumError::Mismatch {
                window,
                offset: window * bpc,
                end: window * bpc + (len - start).min(bpc),
                expected: want,
                actual: acc,
            });
        }
    }
    Ok(())
}

/// Whether two chunk records describe the same chunk (ignoring the
/// datanode-derived fine checksums).
fn same_chunk(a: &ChunkInfo, b: &ChunkInfo) -> bool {
    a.offset == b.offset && a.len == b.len && a.checksum == b.checksum
}

/// Key of a block on this datanode: (container id, local id).
pub type BlockKey = (u64, u64);

/// The store key of a block id.
pub fn key_of(id: &BlockId) -> BlockKey {
    (id.container_id, id.local_id)
}

/// Storage errors, each mapped to a gRPC status by the service.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("block {0}:{1} not found")]
    NotFound(u64, u64),
    #[error("block {0}:{1} is already committed")]
    AlreadyCommitted(u64, u64),
    #[error("block {0}:{1} is not committed")]
    NotCommitted(u64, u64),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("range {offset}+{len} is outside block {block} of {size} bytes")]
    OutOfRange {
        block: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("checksum of written data: {0}")]
    Checksum(#[from] ChecksumError),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("metadata store: {0}")]
    Meta(String),
}

fn meta_err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Meta(e.to_string())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A block being written: its file and the chunks received so far.
struct OpenBlock {
    path: PathBuf,
    file: File,
    chunks: Mutex<BTreeMap<u64, ChunkInfo>>,
}

/// A committed block ready for reads: metadata, flattened window checksums
/// and an open read-only file.
pub struct CommittedBlock {
    /// The committed metadata.
    pub data: BlockData,
    /// Checksum algorithm and window of the block.
    pub checksummer: Checksummer,
    /// Checksums of every window of the block, in order.
    pub checksums: Vec<u32>,
    /// Fine checksums (4 KiB windows) of the block, when kept.
    pub fine: Option<(Checksummer, Vec<u32>)>,
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
    data_dirs: Vec<PathBuf>,
    db: redb::Database,
    open: Mutex<HashMap<BlockKey, Arc<OpenBlock>>>,
    committed: RwLock<HashMap<BlockKey, Arc<CommittedBlock>>>,
    used: AtomicU64,
    slots: Arc<SlotRegistry>,
}

/// Checks a chunk list for a block: contiguous from 0, one checksum type and
/// window, every chunk but the last a whole number of windows, and the right
/// number of checksums; fine checksums, when every chunk has them, must
/// combine into the coarse ones. Returns the checksummer, the flattened
/// checksums and the flattened fine checksums.
pub fn validate_chunks(block: &BlockData) -> Result<Validated, StorageError> {
    let invalid = |m: String| StorageError::Invalid(m);
    let Some(first) = block.chunks.first() else {
        if block.size != 0 {
            return Err(invalid(format!(
                "block of {} bytes has no chunks",
                block.size
            )));
        }
        return Ok((
            Checksummer::new(ozone_proto::ChecksumType::None, 1).expect("valid"),
            Vec::new(),
            None,
        ));
    };
    let cd = first
        .checksum
        .as_ref()
        .ok_or_else(|| invalid("chunk without checksum data".into()))?;
    let ck = Checksummer::from_raw(cd.r#type, cd.bytes_per_checksum)?;
    let fine_ck = fine_of(&ck).filter(|_| block.chunks.iter().all(|c| c.fine_checksum.is_some()));
    let mut fine_sums = Vec::new();
    let mut fine_bpc = 0u32;
    let mut next = 0u64;
    let mut sums = Vec::new();
    for (i, c) in block.chunks.iter().enumerate() {
        if c.offset != next {
            return Err(invalid(format!(
                "chunk {i} starts at {} but the previous chunk ends at {next}",
                c.offset
            )));
        }
        let cd = c
            .checksum
            .as_ref()
            .ok_or_else(|| invalid(format!("chunk {i} has no checksum data")))?;
        if cd.r#type != ck.kind() as i32 || cd.bytes_per_checksum != ck.bytes_per_checksum() {
            return Err(invalid(format!(
                "chunk {i} uses another checksum type or window"
            )));
        }
        if i + 1 < block.chunks.len() && c.len % ck.bytes_per_checksum() as u64 != 0 {
            return Err(invalid(format!(
                "chunk {i} of {} bytes is not a whole number of {}-byte windows",
                c.len,
                ck.bytes_per_checksum()
            )));
        }
        if c.len == 0 {
            return Err(invalid(format!("chunk {i} is empty")));
        }
        if cd.checksums.len() != ck.windows(c.len) {
            return Err(invalid(format!(
                "chunk {i} of {} bytes has {} checksums, expected {}",
                c.len,
                cd.checksums.len(),
                ck.windows(c.len)
            )));
        }
        sums.extend_from_slice(&cd.checksums);
        if let (Some(f), Some(fd)) = (&fine_ck, &c.fine_checksum) {
            let same_window = fine_sums.is_empty() || fd.bytes_per_checksum == fine_bpc;
            if fd.r#type != f.kind() as i32 || !same_window {
                return Err(invalid(format!(
                    "chunk {i} has fine checksums of another kind"
                )));
            }
            fine_bpc = fd.bytes_per_checksum;
            check_fine_against_coarse(
                &ck,
                fd.bytes_per_checksum,
                &fd.checksums,
                &cd.checksums,
                c.len,
                c.offset / ck.bytes_per_checksum() as u64,
            )
            .map_err(|e| {
                invalid(format!(
                    "chunk {i}: fine and coarse checksums disagree: {e}"
                ))
            })?;
            fine_sums.extend_from_slice(&fd.checksums);
        }
        next = c
            .offset
            .checked_add(c.len)
            .filter(|&n| n <= MAX_BLOCK_SIZE)
            .ok_or_else(|| invalid("chunk ends past the largest block size".into()))?;
    }
    if next != block.size {
        return Err(invalid(format!(
            "block size {} does not match its chunks ({next} bytes)",
            block.size
        )));
    }
    let fine = match fine_ck {
        Some(f) => Some((Checksummer::new(f.kind(), fine_bpc)?, fine_sums)),
        None => None,
    };
    Ok((ck, sums, fine))
}

/// What [`validate_chunks`] returns: checksummer, window checksums and the
/// fine checksums when kept.
pub type Validated = (Checksummer, Vec<u32>, Option<(Checksummer, Vec<u32>)>);

impl BlockStore {
    /// Opens (or creates) the store.
    pub fn open(data_dirs: Vec<PathBuf>, metadata_dir: &Path) -> Result<Self, StorageError> {
        if data_dirs.is_empty() {
            return Err(StorageError::Invalid("no data directory configured".into()));
        }
        for d in &data_dirs {
            std::fs::create_dir_all(d.join("containers")).map_err(io_err(d))?;
        }
        std::fs::create_dir_all(metadata_dir).map_err(io_err(metadata_dir))?;
        let db = redb::Database::create(metadata_dir.join("datanode.redb")).map_err(meta_err)?;
        let txn = db.begin_write().map_err(meta_err)?;
        txn.open_table(BLOCKS).map_err(meta_err)?;
        txn.commit().map_err(meta_err)?;
        let store = Self {
            data_dirs,
            db,
            open: Mutex::new(HashMap::new()),
            committed: RwLock::new(HashMap::new()),
            used: AtomicU64::new(0),
            slots: Arc::new(SlotRegistry::new()),
        };
        let mut used = 0;
        store.for_each_committed(|b| used += b.size)?;
        store.used.store(used, Ordering::Relaxed);
        Ok(store)
    }

    fn for_each_committed(&self, mut f: impl FnMut(BlockData)) -> Result<(), StorageError> {
        let txn = self.db.begin_read().map_err(meta_err)?;
        let t = txn.open_table(BLOCKS).map_err(meta_err)?;
        for row in t.iter().map_err(meta_err)? {
            let (_, v) = row.map_err(meta_err)?;
            f(BlockData::decode(v.value()).map_err(meta_err)?);
        }
        Ok(())
    }

    /// The short-circuit slots guarding this store's blocks.
    pub fn slots(&self) -> &Arc<SlotRegistry> {
        &self.slots
    }

    /// Every committed block id.
    pub fn list_committed(&self) -> Result<Vec<BlockId>, StorageError> {
        let mut out = Vec::new();
        self.for_each_committed(|b| out.extend(b.id))?;
        Ok(out)
    }

    /// Bytes held by committed blocks.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Capacity of the first data directory's file system.
    pub fn capacity_bytes(&self) -> u64 {
        nix::sys::statvfs::statvfs(&self.data_dirs[0])
            .map(|s| s.blocks() * s.fragment_size())
            .unwrap_or(0)
    }

    /// Path of a block's file.
    pub fn block_path(&self, id: &BlockId) -> PathBuf {
        let dir = &self.data_dirs[(id.container_id % self.data_dirs.len() as u64) as usize];
        dir.join("containers")
            .join(id.container_id.to_string())
            .join("chunks")
            .join(format!("{}.block", id.local_id))
    }

    fn is_committed_row(&self, key: BlockKey) -> Result<bool, StorageError> {
        let txn = self.db.begin_read().map_err(meta_err)?;
        let t = txn.open_table(BLOCKS).map_err(meta_err)?;
        Ok(t.get(key).map_err(meta_err)?.is_some())
    }

    fn open_block(&self, id: &BlockId) -> Result<Arc<OpenBlock>, StorageError> {
        let key = key_of(id);
        if let Some(b) = self.open.lock().expect("lock").get(&key) {
            return Ok(b.clone());
        }
        if self.is_committed_row(key)? {
            return Err(StorageError::AlreadyCommitted(key.0, key.1));
        }
        let path = self.block_path(id);
        let dir = path.parent().expect("block path has a parent");
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut open = self.open.lock().expect("lock");
        Ok(open
            .entry(key)
            .or_insert_with(|| {
                Arc::new(OpenBlock {
                    path,
                    file,
                    chunks: Mutex::new(BTreeMap::new()),
                })
            })
            .clone())
    }

    /// Writes one chunk of an uncommitted block after checking its checksums
    /// (unless `verify` is false). Blocking: call from a blocking context.
    pub fn write_chunk(
        &self,
        id: &BlockId,
        chunk: &ChunkInfo,
        data: &[u8],
        verify: bool,
    ) -> Result<(), StorageError> {
        if chunk.len != data.len() as u64 {
            return Err(StorageError::Invalid(format!(
                "chunk says {} bytes but carries {}",
                chunk.len,
                data.len()
            )));
        }
        let cd = chunk
            .checksum
            .as_ref()
            .ok_or_else(|| StorageError::Invalid("chunk without checksum data".into()))?;
        let ck = Checksummer::from_raw(cd.r#type, cd.bytes_per_checksum)?;
        if !chunk.offset.is_multiple_of(ck.bytes_per_checksum() as u64) {
            return Err(StorageError::Invalid(format!(
                "chunk offset {} is not aligned to the {}-byte checksum window",
                chunk.offset,
                ck.bytes_per_checksum()
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
        let mut record = chunk.clone();
        record.fine_checksum = None;
        if let Some(f) = fine_of(&ck) {
            // One pass over the data: fine checksums, combined to check the
            // client's coarse ones.
            let fine = f.compute(data);
            if verify {
                check_fine_against_coarse(
                    &ck,
                    FINE_WINDOW,
                    &fine,
                    &cd.checksums,
                    chunk.len,
                    chunk.offset / ck.bytes_per_checksum() as u64,
                )?;
            } else if cd.checksums.len() != ck.windows(chunk.len) {
                return Err(StorageError::Invalid("wrong number of checksums".into()));
            }
            record.fine_checksum = Some(ChecksumData {
                r#type: f.kind() as i32,
                bytes_per_checksum: FINE_WINDOW,
                checksums: fine,
            });
        } else if verify {
            ck.verify(
                data,
                chunk.offset / ck.bytes_per_checksum() as u64,
                &cd.checksums,
            )?;
        } else if cd.checksums.len() != ck.windows(chunk.len) {
            return Err(StorageError::Invalid("wrong number of checksums".into()));
        }
        let block = self.open_block(id)?;
        block
            .file
            .write_all_at(data, chunk.offset)
            .map_err(io_err(&block.path))?;
        block
            .chunks
            .lock()
            .expect("lock")
            .insert(chunk.offset, record);
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
        validate_chunks(block)?;
        let open = self.open.lock().expect("lock").get(&key).cloned();
        let Some(open) = open else {
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
        let mut recorded = Vec::with_capacity(block.chunks.len());
        {
            let written = open.chunks.lock().expect("lock");
            for c in &block.chunks {
                match written.get(&c.offset) {
                    Some(w) if same_chunk(w, c) => recorded.push(w.clone()),
                    Some(_) => {
                        return Err(StorageError::Invalid(format!(
                            "chunk at {} differs from the chunk written there",
                            c.offset
                        )));
                    }
                    None => {
                        return Err(StorageError::Invalid(format!(
                            "chunk at {} was never written",
                            c.offset
                        )));
                    }
                }
            }
        }
        open.file.set_len(block.size).map_err(io_err(&open.path))?;
        open.file.sync_all().map_err(io_err(&open.path))?;
        let dir = open.path.parent().expect("parent");
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
        let mut stored = block.clone();
        stored.committed = true;
        // Keep the chunk records as written: they carry the fine checksums.
        stored.chunks = recorded;
        let (ck, sums, fine) = validate_chunks(&stored)?;
        let txn = self.db.begin_write().map_err(meta_err)?;
        {
            let mut t = txn.open_table(BLOCKS).map_err(meta_err)?;
            t.insert(key, stored.encode_to_vec().as_slice())
                .map_err(meta_err)?;
        }
        txn.commit().map_err(meta_err)?;
        self.open.lock().expect("lock").remove(&key);
        self.used.fetch_add(block.size, Ordering::Relaxed);
        let file = File::open(&open.path).map_err(io_err(&open.path))?;
        let committed = Arc::new(CommittedBlock {
            data: stored,
            checksummer: ck,
            checksums: sums,
            fine,
            path: open.path.clone(),
            file,
        });
        self.committed.write().expect("lock").insert(key, committed);
        Ok(block.size)
    }

    /// A committed block (loaded and cached on first use).
    pub fn committed_block(&self, id: &BlockId) -> Result<Arc<CommittedBlock>, StorageError> {
        let key = key_of(id);
        if let Some(b) = self.committed.read().expect("lock").get(&key) {
            return Ok(b.clone());
        }
        let data = {
            let txn = self.db.begin_read().map_err(meta_err)?;
            let t = txn.open_table(BLOCKS).map_err(meta_err)?;
            match t.get(key).map_err(meta_err)? {
                Some(v) => BlockData::decode(v.value()).map_err(meta_err)?,
                None => {
                    if self.open.lock().expect("lock").contains_key(&key) {
                        return Err(StorageError::NotCommitted(key.0, key.1));
                    }
                    return Err(StorageError::NotFound(key.0, key.1));
                }
            }
        };
        // Fine and coarse checksums are checked against each other here too.
        let (checksummer, checksums, fine) = validate_chunks(&data)?;
        let path = self.block_path(id);
        let file = File::open(&path).map_err(io_err(&path))?;
        let block = Arc::new(CommittedBlock {
            data,
            checksummer,
            checksums,
            fine,
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
        let size = b.size();
        let end = offset.checked_add(len).filter(|&e| e <= size);
        let Some(end) = end else {
            return Err(StorageError::OutOfRange {
                block: id.display(),
                offset,
                len,
                size,
            });
        };
        let (start, stop, sums) = if with_checksums && len > 0 {
            let (ck, all) = match &b.fine {
                Some((f, sums)) if !coarse => (f, sums),
                _ => (&b.checksummer, &b.checksums),
            };
            let bpc = ck.bytes_per_checksum() as u64;
            let w0 = offset / bpc;
            let w1 = end.div_ceil(bpc);
            let cd = ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: bpc as u32,
                checksums: all[w0 as usize..w1 as usize].to_vec(),
            };
            (w0 * bpc, (w1 * bpc).min(size), Some(cd))
        } else {
            (offset, end, None)
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
        let txn = self.db.begin_write().map_err(meta_err)?;
        let mut freed = 0u64;
        {
            let mut t = txn.open_table(BLOCKS).map_err(meta_err)?;
            for id in ids {
                if let Some(v) = t.remove(key_of(id)).map_err(meta_err)? {
                    freed += BlockData::decode(v.value()).map(|b| b.size).unwrap_or(0);
                }
            }
        }
        txn.commit().map_err(meta_err)?;
        self.used
            .fetch_sub(freed.min(self.used_bytes()), Ordering::Relaxed);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let key = key_of(id);
            self.committed.write().expect("lock").remove(&key);
            self.open.lock().expect("lock").remove(&key);
            let path = self.block_path(id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
            out.push(*id);
        }
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
            let e = s.write_chunk(&id, &bad, a, true).unwrap_err().to_string();
            assert!(e.contains("window 1"), "{e}");
            s.write_chunk(&id, &c1, a, true).unwrap();
            s.write_chunk(&id, &c2, b, true).unwrap();
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
            validate_chunks(&b2)
                .unwrap_err()
                .to_string()
                .contains("disagree")
        );
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
            s.write_chunk(&id, &c1, &data[..16], true).unwrap();
            // A corrupt chunk is refused.
            let mut bad = data[16..].to_vec();
            bad[3] ^= 0xff;
            assert!(matches!(
                s.write_chunk(&id, &c2, &bad, true),
                Err(StorageError::Checksum(_))
            ));
            // Not readable before commit.
            assert!(matches!(
                s.read(&id, 0, 1, false, false),
                Err(StorageError::NotCommitted(1, 7))
            ));
            s.write_chunk(&id, &c2, &data[16..], true).unwrap();
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
        s.write_chunk(&id, &c1, b"abcd", true).unwrap();
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
        assert!(s.write_chunk(&id, &unaligned, b"zz", true).is_err());
    }
}
