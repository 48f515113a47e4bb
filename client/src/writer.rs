//! Writing a key: chunks are checksummed once and sent to every replica of
//! the current block; a failed datanode is excluded, a fresh block is
//! allocated and the block's chunks are written again, so a committed key
//! always has complete, verified replicas. Each allocation reports the
//! blocks finished so far to the OM (readers of a file being written see
//! them); hflush sends the buffered tail to every replica, which serve it
//! from then on, without the OM.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::join_all;
use ozone_common::names::KeyPath;
use ozone_common::token::EXPIRED_MESSAGE;
use ozone_proto::datanode_client::DatanodeClient;
use ozone_proto::*;
use tonic::transport::Channel;

use crate::api::KeyWrite;
use crate::deadline::{WRITE_TIMEOUT, within};
use crate::direct::ClientInner;
use crate::error::{ClientError, Result};
use crate::om::om_call;
use crate::write_stream::BlockStreams;

/// The block being written and the chunks sent to it so far (kept until
/// the block is committed, to rewrite them elsewhere on failure).
struct OpenBlock {
    block: KeyBlock,
    chunks: Vec<(ChunkInfo, Bytes)>,
    written: u64,
    /// Readers were shown part of this block (hflush or hsync): a block
    /// that replaces it must show them as much before the writer goes on.
    shown: bool,
    /// Bytes of the buffered tail (the chunk at `written`) every replica
    /// holds: the next send of the tail starts at the last whole checksum
    /// window before it.
    tail_sent: u64,
    /// The block's length as of the last hflush or hsync.
    visible: u64,
}

impl OpenBlock {
    fn new(block: KeyBlock) -> Self {
        Self {
            block,
            chunks: Vec::new(),
            written: 0,
            shown: false,
            tail_sent: 0,
            visible: 0,
        }
    }
}

/// A key being written; visible only after [`close`](KeyWriter::close).
pub struct KeyWriter {
    inner: Arc<ClientInner>,
    volume: String,
    bucket: String,
    key: String,
    session_id: u64,
    block_size: u64,
    buf: BytesMut,
    /// Checksums of the buffered tail's windows; those of its first
    /// `tail_whole` (whole) windows stay valid as it grows.
    tail_sums: Vec<u32>,
    tail_whole: usize,
    current: Option<OpenBlock>,
    done: Vec<KeyBlock>,
    exclude: HashSet<String>,
    attempts: usize,
    size: u64,
    /// Write streams to the current block's replicas.
    streams: BlockStreams,
}

/// A datanode that failed a write, and why.
struct ReplicaFailure {
    id: String,
    status: tonic::Status,
}

fn fatal(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::InvalidArgument | tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
    )
}

impl KeyWriter {
    pub(crate) async fn open(
        inner: Arc<ClientInner>,
        path: KeyPath<'_>,
        exclusive: bool,
    ) -> Result<Self> {
        let KeyPath {
            volume,
            bucket,
            key: name,
        } = path;
        ozone_common::names::check_resource_name("volume", volume)?;
        ozone_common::names::check_resource_name("bucket", bucket)?;
        ozone_common::names::check_key_name(name)?;
        let cfg = &inner.config;
        let req = OpenKeyRequest {
            volume: volume.into(),
            bucket: bucket.into(),
            name: name.into(),
            replication: cfg.replication as i32,
            checksum_type: cfg.checksum.kind() as i32,
            bytes_per_checksum: cfg.checksum.bytes_per_checksum(),
            client_node: cfg.node_name.clone().unwrap_or_default(),
            exclusive,
        };
        let r = om_call!(inner.om, open_key, req)?;
        Ok(Self {
            volume: volume.into(),
            bucket: bucket.into(),
            key: name.into(),
            session_id: r.session_id,
            block_size: r.block_size.max(1),
            buf: BytesMut::with_capacity(inner.config.chunk_size as usize),
            tail_sums: Vec::new(),
            tail_whole: 0,
            current: None,
            done: Vec::new(),
            exclude: HashSet::new(),
            attempts: 0,
            size: 0,
            streams: BlockStreams::default(),
            inner,
        })
    }

    /// The key's path.
    fn key_path(&self) -> KeyPath<'_> {
        KeyPath::new(&self.volume, &self.bucket, &self.key)
    }

    /// The most bytes `block` may hold: what the OM allocated it for (the
    /// block size, or less near a space quota).
    fn limit(&self, block: &KeyBlock) -> u64 {
        match block.max_length {
            0 => self.block_size,
            n => n,
        }
    }

    /// Length of the next chunk: the chunk size, cut at the block's end.
    fn next_chunk_len(&self) -> usize {
        let (in_block, limit) = self
            .current
            .as_ref()
            .map_or((0, self.block_size), |b| (b.written, self.limit(&b.block)));
        (limit - in_block).min(self.inner.config.chunk_size) as usize
    }

    /// Makes sure a block is open, allocating one if none is.
    async fn ensure_block(&mut self) -> Result<()> {
        if self.current.is_none() {
            let block = self.allocate().await?;
            self.current = Some(OpenBlock::new(block));
        }
        Ok(())
    }

    async fn allocate(&mut self) -> Result<KeyBlock> {
        self.attempts += 1;
        let req = AllocateBlockRequest {
            session_id: self.session_id,
            exclude_datanodes: self.exclude.iter().cloned().collect(),
            client_node: self.inner.config.node_name.clone().unwrap_or_default(),
            previous: self.done.clone(),
        };
        let r = om_call!(self.inner.om, allocate_block, req)?;
        r.block
            .ok_or_else(|| ClientError::Unavailable("OM returned no block".into()))
    }

    async fn write_chunk(&mut self, data: Bytes) -> Result<()> {
        // The tail became this chunk: a new tail starts.
        self.tail_sums.clear();
        self.tail_whole = 0;
        self.ensure_block().await?;
        let ck = self.inner.config.checksum;
        let cur = self.current.as_mut().expect("current block");
        let info = ChunkInfo {
            offset: cur.written,
            len: data.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: ck.bytes_per_checksum(),
                checksums: ck.compute(&data),
            }),
            fine_checksum: None,
        };
        // What an hflush sent of this chunk already stays where it is.
        let from = window_floor(cur.tail_sent, ck.bytes_per_checksum());
        cur.tail_sent = 0;
        cur.written += info.len;
        cur.chunks.push((info.clone(), data.clone()));
        let block = cur.block.clone();
        let full = cur.written == self.limit(&block);
        let rest = data.slice(from as usize..);
        let failures = self.send_chunk(&block, &info, &rest, false, from).await;
        if !failures.is_empty() {
            self.recover(failures).await?;
        }
        if full {
            self.finish_block().await?;
        }
        Ok(())
    }

    /// WriteChunk on every replica of `block`: the chunk `info`, whose
    /// bytes from `data_offset` on are `data` (`flush`: hflush, the
    /// replicas serve the block up to the chunk's end from then on).
    async fn send_chunk(
        &mut self,
        block: &KeyBlock,
        info: &ChunkInfo,
        data: &Bytes,
        flush: bool,
        data_offset: u64,
    ) -> Vec<ReplicaFailure> {
        let req = WriteChunkRequest {
            block: block.block,
            chunk: Some(info.clone()),
            data: data.clone(),
            token: block.token.clone(),
            flush,
            data_offset,
        };
        self.streams
            .send(&self.inner, block, req)
            .await
            .into_iter()
            .map(|(id, status)| ReplicaFailure { id, status })
            .collect()
    }

    /// Runs `call` against every replica of `block` at once; what those
    /// that answered returned, and the replicas that failed.
    async fn on_replicas<T, F, Fut>(
        &self,
        block: &KeyBlock,
        call: F,
    ) -> (Vec<T>, Vec<ReplicaFailure>)
    where
        F: Fn(DatanodeClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let limit = self.inner.config.write_timeout;
        let calls = block.replicas.iter().map(|dn| {
            let r = self.inner.pool.get(dn).map(&call);
            async move {
                let r = match r {
                    Ok(fut) => within(limit, fut, WRITE_TIMEOUT.name).await,
                    Err(e) => Err(tonic::Status::unavailable(e.to_string())),
                };
                r.map_err(|status| ReplicaFailure {
                    id: dn.id.clone(),
                    status,
                })
            }
        });
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for r in join_all(calls).await {
            match r {
                Ok(t) => ok.push(t),
                Err(f) => failed.push(f),
            }
        }
        (ok, failed)
    }

    /// Excludes the failed datanodes, allocates a fresh block and rewrites
    /// the current block's chunks there, until one block takes them all.
    async fn recover(&mut self, mut failures: Vec<ReplicaFailure>) -> Result<()> {
        loop {
            if let Some(f) = failures.iter().find(|f| fatal(&f.status)) {
                return Err(ClientError::from(f.status.clone()));
            }
            for f in &failures {
                // An expired WRITE token (a block open longer than
                // hdds.block.token.expiry.time) is no fault of the
                // datanode: the fresh block comes with a fresh token.
                if f.status.message().contains(EXPIRED_MESSAGE) {
                    tracing::info!(key = %self.key_path(), datanode = %f.id, "block token expired: moving to a fresh block");
                    continue;
                }
                tracing::warn!(key = %self.key_path(), datanode = %f.id, "write to datanode failed, excluding it: {}", f.status.message());
                self.exclude.insert(f.id.clone());
            }
            if self.attempts >= self.inner.config.max_block_attempts {
                return Err(ClientError::WriteFailed {
                    attempts: self.attempts,
                    last: failures
                        .iter()
                        .map(|f| format!("{}: {}", f.id, f.status.message()))
                        .collect::<Vec<_>>()
                        .join("; "),
                });
            }
            let block = self.allocate().await?;
            let old = self.limit(&self.current.as_ref().expect("current block").block);
            if self.limit(&block) < old {
                // Near a space quota the fresh block may be smaller than
                // what was cut for the old one.
                return Err(ClientError::Exhausted(format!(
                    "a replacement block may hold only {} bytes, fewer than the {old} already \
                     cut for the block it replaces: the space quota is nearly used",
                    self.limit(&block)
                )));
            }
            let cur = self.current.as_mut().expect("current block");
            cur.block = block.clone();
            cur.tail_sent = 0;
            let mut chunks = cur.chunks.clone();
            let shown = cur.shown;
            if shown {
                // Readers saw part of the block, perhaps up to a tail: the
                // new one shows at least as much before the writer goes on.
                chunks.push(self.tail_chunk(0));
            }
            failures.clear();
            let last = chunks.len().saturating_sub(1);
            for (i, (info, data)) in chunks.iter().enumerate() {
                failures = self
                    .send_chunk(&block, info, data, shown && i == last, 0)
                    .await;
                if !failures.is_empty() {
                    break;
                }
            }
            if failures.is_empty() && shown {
                let tail = self.buf.len() as u64;
                self.current.as_mut().expect("current block").tail_sent = tail;
                failures = self.name_replacement().await?;
            }
            if failures.is_empty() {
                return Ok(());
            }
        }
    }

    /// `PutBlock{sync}` of the current block, its chunks and the buffered
    /// tail (which its replicas hold): the block, its synced length, the
    /// replicas' receipts, and the replicas that failed.
    async fn sync_with_tail(&mut self) -> (KeyBlock, u64, Vec<BlockReceipt>, Vec<ReplicaFailure>) {
        let (tail, _) = self.tail_chunk(self.buf.len());
        let cur = self.current.as_ref().expect("current block");
        let block = cur.block.clone();
        let mut chunks: Vec<ChunkInfo> = cur.chunks.iter().map(|(c, _)| c.clone()).collect();
        if tail.len > 0 {
            chunks.push(tail);
        }
        let length = chunks.iter().map(|c| c.len).sum();
        let data = BlockData {
            id: block.block,
            size: length,
            chunks,
            committed: false,
        };
        let (receipts, failures) = self.put_block(&block, data, true).await;
        (block, length, receipts, failures)
    }

    /// After a block readers had seen part of was replaced: syncs the
    /// replacement (its chunks and the flushed tail) and has the OM name
    /// it, so that readers and lease recovery look there. The replicas
    /// that failed the sync, if any.
    async fn name_replacement(&mut self) -> Result<Vec<ReplicaFailure>> {
        let (block, length, receipts, failures) = self.sync_with_tail().await;
        if !failures.is_empty() {
            return Ok(failures);
        }
        let mut blocks = self.done.clone();
        blocks.push(KeyBlock {
            length,
            receipts,
            ..block
        });
        let req = HsyncRequest {
            session_id: self.session_id,
            blocks,
            size: self.size,
        };
        match om_call!(self.inner.om, hsync, req) {
            // An object-store key has no readers while it is written.
            Ok(_) | Err(ClientError::Precondition(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// PutBlock of `data` on every replica of `block` (`sync`: hsync, the
    /// block stays open); the replicas' receipts (with block tokens on),
    /// and the replicas that failed.
    async fn put_block(
        &self,
        block: &KeyBlock,
        data: BlockData,
        sync: bool,
    ) -> (Vec<BlockReceipt>, Vec<ReplicaFailure>) {
        let (receipts, failed) = self
            .on_replicas(block, |mut c| {
                let req = PutBlockRequest {
                    block: Some(data.clone()),
                    sync,
                    token: block.token.clone(),
                };
                async move { c.put_block(req).await.map(|r| r.into_inner().receipt) }
            })
            .await;
        (receipts.into_iter().flatten().collect(), failed)
    }

    /// Commits the current block on every replica (PutBlock).
    async fn finish_block(&mut self) -> Result<()> {
        loop {
            let Some(cur) = self.current.as_ref() else {
                return Ok(());
            };
            let data = BlockData {
                id: cur.block.block,
                chunks: cur.chunks.iter().map(|(c, _)| c.clone()).collect(),
                size: cur.written,
                committed: false,
            };
            let (receipts, failures) = self.put_block(&cur.block, data, false).await;
            if failures.is_empty() {
                self.streams.close();
                let cur = self.current.take().expect("current block");
                self.done.push(KeyBlock {
                    length: cur.written,
                    receipts,
                    ..cur.block
                });
                return Ok(());
            }
            self.recover(failures).await?;
        }
    }

    /// Records that readers are shown every byte of the current block.
    fn shown_up_to_here(&mut self) {
        let tail = self.buf.len() as u64;
        if let Some(cur) = self.current.as_mut() {
            cur.visible = cur.written + tail;
        }
    }

    /// The buffered bytes as the current block's next chunk (empty when
    /// nothing is buffered: flushed, it shows the block's chunks so far):
    /// its record, every window's checksum, and its bytes from `from` on.
    fn tail_chunk(&mut self, from: usize) -> (ChunkInfo, Bytes) {
        let ck = self.inner.config.checksum;
        let bpc = ck.bytes_per_checksum() as usize;
        // Whole windows summed before keep their checksums.
        self.tail_sums.truncate(self.tail_whole);
        ck.compute_into(&self.buf[self.tail_whole * bpc..], &mut self.tail_sums);
        self.tail_whole = self.buf.len() / bpc;
        let data = Bytes::copy_from_slice(&self.buf[from..]);
        let offset = self.current.as_ref().map_or(0, |c| c.written);
        let info = ChunkInfo {
            offset,
            len: self.buf.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: ck.bytes_per_checksum(),
                checksums: self.tail_sums.clone(),
            }),
            fine_checksum: None,
        };
        (info, data)
    }

    /// Sends what the replicas of the current block lack of the buffered
    /// tail (from the last whole window they hold); `flush`: they serve
    /// the block up to its end from then on. The replicas that failed.
    async fn send_tail_piece(&mut self, flush: bool) -> Vec<ReplicaFailure> {
        let bpc = self.inner.config.checksum.bytes_per_checksum();
        let sent = self.current.as_ref().map_or(0, |c| c.tail_sent);
        let from = window_floor(sent, bpc);
        let (info, data) = self.tail_chunk(from as usize);
        let cur = self.current.as_mut().expect("current block");
        // A replica may serve the flush even if another fails it.
        cur.shown |= flush;
        let block = cur.block.clone();
        let failures = self.send_chunk(&block, &info, &data, flush, from).await;
        if failures.is_empty() {
            let tail = self.buf.len() as u64;
            self.current.as_mut().expect("current block").tail_sent = tail;
        }
        failures
    }

    /// Sends the buffered tail to the current block (a block is allocated
    /// if none is open), moving to a fresh block on failure; `flush`: the
    /// replicas serve the block up to its end from then on.
    async fn send_tail(&mut self, flush: bool) -> Result<()> {
        self.ensure_block().await?;
        loop {
            let failures = self.send_tail_piece(flush).await;
            if failures.is_empty() {
                return Ok(());
            }
            self.recover(failures).await?;
        }
    }

    /// Syncs the current block (its chunks and the buffered tail) on every
    /// replica; after a failure the chunks move to a fresh block (the tail
    /// too). Returns the replicas' receipts for the synced length.
    async fn sync_current(&mut self) -> Result<Vec<BlockReceipt>> {
        loop {
            let Some(cur) = self.current.as_ref() else {
                return Ok(Vec::new());
            };
            if cur.tail_sent < self.buf.len() as u64 {
                let failures = self.send_tail_piece(false).await;
                if !failures.is_empty() {
                    self.recover(failures).await?;
                }
                continue;
            }
            let (_, _, receipts, failures) = self.sync_with_tail().await;
            if failures.is_empty() {
                return Ok(receipts);
            }
            self.recover(failures).await?;
        }
    }
}

/// `n` rounded down to a whole number of `bpc`-byte windows.
fn window_floor(n: u64, bpc: u32) -> u64 {
    n - n % bpc as u64
}

impl KeyWrite for KeyWriter {
    /// Bytes accepted so far.
    fn size(&self) -> u64 {
        self.size
    }

    /// Appends data to the key.
    async fn write(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            // The block first: how much it may hold decides where the
            // chunks are cut.
            self.ensure_block().await?;
            let want = self.next_chunk_len() - self.buf.len();
            let n = want.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            self.size += n as u64;
            if self.buf.len() == self.next_chunk_len() {
                let chunk = self.buf.split().freeze();
                self.buf.reserve(self.inner.config.chunk_size as usize);
                self.write_chunk(chunk).await?;
            }
        }
        Ok(())
    }

    /// hflush: every replica holds (and serves) every byte written so far;
    /// the buffered tail's new bytes go to the current block as its last
    /// chunk, which grows with the file (the tail is kept until the chunk
    /// is whole). No fsync, no OM call; a flush with nothing new sends
    /// nothing.
    async fn hflush(&mut self) -> Result<()> {
        let Some(cur) = self.current.as_ref() else {
            if self.buf.is_empty() {
                // Nothing written, or every byte is in finished blocks,
                // which the replicas serve.
                return Ok(());
            }
            self.send_tail(true).await?;
            self.shown_up_to_here();
            return Ok(());
        };
        if cur.visible == cur.written + self.buf.len() as u64 {
            return Ok(());
        }
        self.send_tail(true).await?;
        self.shown_up_to_here();
        Ok(())
    }

    /// hsync: makes every byte written so far durable on all replicas and
    /// visible to readers that open the file from now on (file-system
    /// buckets), as hflush and with an fsync on every replica and the
    /// length recorded by the OM.
    async fn hsync(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.ensure_block().await?;
        }
        if let Some(cur) = self.current.as_mut() {
            cur.shown = true;
        }
        let receipts = self.sync_current().await?;
        let mut blocks = self.done.clone();
        if let Some(cur) = &self.current {
            blocks.push(KeyBlock {
                length: cur.written + self.buf.len() as u64,
                receipts,
                ..cur.block.clone()
            });
        }
        let req = HsyncRequest {
            session_id: self.session_id,
            blocks,
            size: self.size,
        };
        om_call!(self.inner.om, hsync, req)?;
        self.shown_up_to_here();
        Ok(())
    }

    /// Writes what is buffered, commits the last block and makes the key
    /// visible. Returns the committed key.
    async fn close(mut self) -> Result<KeyInfo> {
        if !self.buf.is_empty() {
            let chunk = self.buf.split().freeze();
            self.write_chunk(chunk).await?;
        }
        self.finish_block().await?;
        let req = CommitKeyRequest {
            session_id: self.session_id,
            blocks: self.done.clone(),
            size: self.size,
        };
        let (r, retried) = self
            .inner
            .om
            .call_raw(|mut om| {
                let req = req.clone();
                async move { om.commit_key(req).await }
            })
            .await;
        match r {
            Ok(r) => r
                .key
                .ok_or_else(|| ClientError::Unavailable("OM returned no key".into())),
            Err(s) if retried && s.code() == tonic::Code::NotFound => {
                // An earlier attempt may have committed before its reply was lost.
                let key = self.inner.om.lookup(self.key_path()).await?;
                let ids: Vec<_> = key.blocks.iter().map(|b| b.block).collect();
                let mine: Vec<_> = self.done.iter().map(|b| b.block).collect();
                if ids == mine && key.size == self.size {
                    Ok(key)
                } else {
                    Err(ClientError::from(s))
                }
            }
            Err(s) => Err(ClientError::from(s)),
        }
    }
}
