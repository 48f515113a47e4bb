//! Reading a key: positional reads and streaming, from the replicas in
//! order (same node first, healthy before others, known-bad last),
//! verifying checksums when the stream asks for it. A checksum mismatch or
//! a failed replica moves the read to the next replica; a mismatch is also
//! reported to the OM.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use ozone_common::block_key::{BlockKey, key_of};
use ozone_common::checksum::{ChecksumError, Checksummer};
use ozone_common::integrity::{IntegrityError, verify_piece};
use ozone_common::names::KeyPath;
use ozone_common::token::EXPIRED_MESSAGE;
use ozone_proto::*;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::api::KeyRead;
use crate::deadline::{READ_TIMEOUT, within};
use crate::direct::ClientInner;
use crate::error::{ClientError, Result};
use crate::replicas::{Ordered, order_replicas};
use crate::shortcircuit::{HeldBlock, ScError};

/// An open key; each reader has its own verify-checksum switch. Clones
/// share the client and may differ in that switch.
#[derive(Clone)]
pub struct KeyReader {
    inner: Arc<ClientInner>,
    key: KeyInfo,
    checksum: Checksummer,
    verify: bool,
    /// The path the key was opened by (to fetch new block tokens).
    path: Arc<[String; 3]>,
    /// Tokens fetched again after the opening ones expired.
    fresh: Arc<FreshTokens>,
    /// The short-circuit descriptor last read of each block, shared by
    /// clones.
    held: Arc<[HeldBlock]>,
}

/// Block tokens expire (`hdds.block.token.expiry.time`, 24 h) while readers
/// stay open for days (an HBase region server keeps its store files open):
/// a read refused for an expired token looks the key up again and retries
/// with the new token, which later reads of the reader and its clones use.
#[derive(Default)]
struct FreshTokens {
    /// Whether `by_block` holds anything (reads check this flag only).
    any: AtomicBool,
    by_block: Mutex<HashMap<BlockKey, Arc<[u8]>>>,
}

/// Why one replica could not serve a read.
enum ReplicaError {
    Checksum(ChecksumError),
    Other(String),
    /// The destination failed (a full disk): the replica is not to blame
    /// and no other replica is tried.
    Output(std::io::Error),
}

impl KeyReader {
    pub(crate) fn new(
        inner: Arc<ClientInner>,
        key: KeyInfo,
        verify: bool,
        path: KeyPath<'_>,
    ) -> Result<Self> {
        let checksum = if key.blocks.is_empty() {
            Checksummer::new(ChecksumType::None, 1)?
        } else {
            Checksummer::from_raw(key.checksum_type, key.bytes_per_checksum)?
        };
        Ok(Self {
            inner,
            held: key.blocks.iter().map(|_| HeldBlock::default()).collect(),
            key,
            checksum,
            verify,
            path: Arc::new([path.volume.into(), path.bucket.into(), path.key.into()]),
            fresh: Arc::default(),
        })
    }

    /// The token fetched again for block `id`, if its first one expired.
    fn fresh_token(&self, id: &BlockId) -> Option<Arc<[u8]>> {
        if !self.fresh.any.load(Ordering::Acquire) {
            return None;
        }
        self.fresh
            .by_block
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key_of(id))
            .cloned()
    }

    /// Looks the key up again for new block tokens; the one of block `id`,
    /// if the key still has that block.
    async fn refresh_tokens(&self, id: &BlockId) -> Result<Option<Arc<[u8]>>> {
        let [volume, bucket, key] = &*self.path;
        let info = self
            .inner
            .om
            .lookup(KeyPath {
                volume,
                bucket,
                key,
            })
            .await?;
        let mut map = self
            .fresh
            .by_block
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for b in info.blocks.iter().chain(&info.synced_blocks) {
            if let Some(bid) = &b.block {
                map.insert(key_of(bid), Arc::from(b.token.as_slice()));
            }
        }
        self.fresh.any.store(true, Ordering::Release);
        tracing::info!(volume = %volume, bucket = %bucket, key = %key, "block tokens renewed");
        Ok(map.get(&key_of(id)).cloned())
    }

    /// The key's metadata.
    pub fn info(&self) -> &KeyInfo {
        &self.key
    }

    fn verifying(&self) -> bool {
        self.verifying_with(self.verify)
    }

    fn verifying_with(&self, verify: bool) -> bool {
        verify && self.checksum.kind() != ChecksumType::None
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        let size = self.key.size;
        if offset.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(ClientError::OutOfRange {
                offset,
                len: len as u64,
                size,
            });
        }
        Ok(())
    }

    async fn read_at_with(&self, offset: u64, buf: &mut [u8], verify: bool) -> Result<usize> {
        let size = self.key.size;
        if offset > size {
            return Err(ClientError::OutOfRange {
                offset,
                len: buf.len() as u64,
                size,
            });
        }
        let len = (buf.len() as u64).min(size - offset) as usize;
        let mut done = 0usize;
        let blocks = &self.key.blocks;
        let mut i = blocks.partition_point(|b| b.offset + b.length <= offset);
        while done < len {
            let b = &blocks[i];
            let pos = offset + done as u64;
            let in_block = pos - b.offset;
            let n = ((b.length - in_block) as usize).min(len - done);
            self.read_block(b, &self.held[i], in_block, &mut buf[done..done + n], verify)
                .await?;
            done += n;
            i += 1;
        }
        Ok(len)
    }

    fn is_bad(&self, block: &BlockId, dn: &str) -> bool {
        if !self.inner.any_bad.load(Ordering::Acquire) {
            return false;
        }
        let bad = self.inner.bad.lock().expect("lock");
        !bad.is_empty()
            && bad
                .get(&key_of(block))
                .is_some_and(|v| v.iter().any(|d| d == dn))
    }

    fn replicas<'a>(&'a self, b: &'a KeyBlock, id: &BlockId) -> Ordered<'a> {
        order_replicas(
            &b.replicas,
            self.inner.config.node_name.as_deref(),
            |dn| self.is_bad(id, dn),
            |dn| self.sc_local(dn),
        )
    }

    fn sc_local(&self, dn: &str) -> bool {
        self.inner.sc.as_ref().is_some_and(|sc| sc.is_local(dn))
    }

    fn account(&self, dn: &DatanodeDetails, bytes: u64) {
        let local = self.inner.config.node_name.as_deref() == Some(dn.node_name.as_str())
            || self.sc_local(&dn.id);
        self.account_as(local, bytes);
    }

    /// Ends a short-circuit read of `n` bytes: local by definition; and as
    /// it never waits, the scheduler gets to run other tasks (and timers)
    /// regularly.
    async fn short_circuited(&self, n: usize) -> Result<()> {
        self.account_as(true, n as u64);
        tokio::task::consume_budget().await;
        Ok(())
    }

    fn account_as(&self, local: bool, bytes: u64) {
        let s = &self.inner.stats;
        if local {
            s.local_bytes.add(bytes);
        } else {
            s.remote_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A replica that failed a read: counted, and a checksum mismatch
    /// remembered and reported to the OM with the block's READ `token`.
    async fn failed(
        &self,
        id: &BlockId,
        token: &[u8],
        dn: &DatanodeDetails,
        e: ReplicaError,
        errors: &mut Vec<String>,
    ) {
        match e {
            ReplicaError::Checksum(c) => {
                self.inner
                    .stats
                    .checksum_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(block = %id.display(), datanode = %dn.id, "checksum mismatch: {c}");
                self.inner
                    .bad
                    .lock()
                    .expect("lock")
                    .entry(key_of(id))
                    .or_default()
                    .push(dn.id.clone());
                self.inner.any_bad.store(true, Ordering::Release);
                self.inner
                    .report_bad(id, token, &dn.id, &c.to_string())
                    .await;
                errors.push(format!("{}: {c}", dn.id));
            }
            ReplicaError::Other(m) => {
                tracing::info!(block = %id.display(), datanode = %dn.id, "replica read failed: {m}");
                errors.push(format!("{}: {m}", dn.id));
            }
            ReplicaError::Output(e) => errors.push(format!("output: {e}")),
        }
        self.inner.stats.failovers.fetch_add(1, Ordering::Relaxed);
    }

    /// Fills `out` from `len(out)` bytes at `offset` of block `b`; once
    /// more with a new token when the replicas refused an expired one.
    async fn read_block(
        &self,
        b: &KeyBlock,
        held: &HeldBlock,
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<()> {
        let id = b
            .block
            .as_ref()
            .ok_or_else(|| ClientError::InvalidArgument("key block without id".into()))?;
        let fresh = self.fresh_token(id);
        let token = fresh.as_deref().unwrap_or(&b.token);
        match self
            .read_block_with(b, held, id, token, offset, out, verify)
            .await
        {
            Err(ClientError::AllReplicasFailed { errors, .. })
                if errors.contains(EXPIRED_MESSAGE) =>
            {
                match self.refresh_tokens(id).await? {
                    Some(t) => {
                        self.read_block_with(b, held, id, &t, offset, out, verify)
                            .await
                    }
                    None => Err(ClientError::AllReplicasFailed {
                        block: id.display(),
                        errors: format!("{errors}; the key no longer has this block"),
                    }),
                }
            }
            r => r,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn read_block_with(
        &self,
        b: &KeyBlock,
        held: &HeldBlock,
        id: &BlockId,
        token: &[u8],
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<()> {
        // The hot path: a descriptor of this block already open and valid
        // (held by this stream, or cached) is a local replica; read it
        // without ordering the replicas. After an error the full path below
        // tries again. An error that dropped the descriptor (truncated,
        // invalidated) is counted by `read_held`, since the full path opens
        // the block anew and may succeed; any other is met there again and
        // counted and handled there. Off once a replica was found bad (the
        // full path orders bad replicas last).
        if let Some(sc) = &self.inner.sc
            && !self.inner.any_bad.load(Ordering::Acquire)
            && let Some(Ok(())) = sc.read_held(held, id, offset, out, self.verifying_with(verify))
        {
            return self.short_circuited(out.len()).await;
        }
        let mut errors = Vec::new();
        for dn in self.replicas(b, id).iter() {
            if let Some(sc) = &self.inner.sc
                && (sc.is_local(&dn.id)
                    || (self.inner.config.node_name.as_deref() == Some(dn.node_name.as_str())
                        && sc.usable(&dn.id).await))
            {
                let r = match sc.open(&dn.id, id, token).await {
                    Ok(blk) => sc.read(&blk, offset, out, self.verifying_with(verify)),
                    Err(e) => Err(e),
                };
                match r {
                    Ok(()) => return self.short_circuited(out.len()).await,
                    Err(ScError::Checksum(c)) => {
                        sc.fell_back(&dn.id, &ScError::Checksum(c.clone()));
                        self.failed(id, token, dn, ReplicaError::Checksum(c), &mut errors)
                            .await;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(block = %id.display(), datanode = %dn.id, "short-circuit read fell back to gRPC: {e}");
                        sc.fell_back(&dn.id, &e);
                    }
                }
            }
            match self.read_replica(dn, id, token, offset, out, verify).await {
                Ok(()) => {
                    self.account(dn, out.len() as u64);
                    return Ok(());
                }
                Err(e) => self.failed(id, token, dn, e, &mut errors).await,
            }
        }
        Err(ClientError::AllReplicasFailed {
            block: id.display(),
            errors: errors.join("; "),
        })
    }

    async fn read_replica(
        &self,
        dn: &DatanodeDetails,
        id: &BlockId,
        token: &[u8],
        offset: u64,
        out: &mut [u8],
        verify: bool,
    ) -> Result<(), ReplicaError> {
        let mut client = self
            .inner
            .pool
            .get(dn)
            .map_err(|e| ReplicaError::Other(e.to_string()))?;
        let max = self.inner.max_read();
        let mut done = 0usize;
        while done < out.len() {
            let n = (out.len() - done).min(max);
            let pos = offset + done as u64;
            let r = within(
                self.inner.config.read_timeout,
                client.read_chunk(ReadChunkRequest {
                    block: Some(*id),
                    offset: pos,
                    len: n as u64,
                    with_checksums: self.verifying_with(verify),
                    token: token.to_vec(),
                    coarse_checksums: false,
                }),
                READ_TIMEOUT.name,
            )
            .await
            .map_err(|s| ReplicaError::Other(format!("{:?}: {}", s.code(), s.message())))?
            .into_inner();
            self.check_piece(&r, pos, n as u64, verify)?;
            let skip = (pos - r.data_offset) as usize;
            out[done..done + n].copy_from_slice(&r.data[skip..skip + n]);
            done += n;
        }
        Ok(())
    }

    /// Checks that a piece covers `pos..pos+len` and, when verifying, that
    /// its checksums match.
    fn check_piece(
        &self,
        r: &ReadChunkResponse,
        pos: u64,
        len: u64,
        verify: bool,
    ) -> Result<(), ReplicaError> {
        let end = r.data_offset + r.data.len() as u64;
        if r.data_offset > pos || end < pos + len {
            return Err(ReplicaError::Other(format!(
                "datanode returned bytes {}..{end} for a read of {pos}..{}",
                r.data_offset,
                pos + len
            )));
        }
        if self.verifying_with(verify) {
            let cd = r
                .checksum
                .as_ref()
                .ok_or_else(|| ReplicaError::Other("datanode sent no checksums".into()))?;
            // The datanode may answer with finer windows than the key's
            // (it keeps 4 KiB windows); they must divide the key's.
            verify_piece(&self.checksum, cd, r.data_offset, &r.data).map_err(|e| match e {
                IntegrityError::Checksum(c) => ReplicaError::Checksum(c),
                IntegrityError::Invalid(m) => ReplicaError::Other(m),
            })?;
            self.inner
                .stats
                .checksummed_bytes
                .fetch_add(r.data.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn stream_replica<W: AsyncWrite + Unpin>(
        &self,
        dn: &DatanodeDetails,
        id: &BlockId,
        token: &[u8],
        pos: &mut u64,
        end: u64,
        w: &mut W,
    ) -> Result<(), ReplicaError> {
        let other =
            |s: tonic::Status| ReplicaError::Other(format!("{:?}: {}", s.code(), s.message()));
        let mut client = self
            .inner
            .pool
            .get(dn)
            .map_err(|e| ReplicaError::Other(e.to_string()))?;
        let limit = self.inner.config.read_timeout;
        let mut stream = within(
            limit,
            client.read_block(ReadBlockRequest {
                block: Some(*id),
                offset: *pos,
                len: end - *pos,
                with_checksums: self.verifying(),
                piece_size: 1 << 20,
                token: token.to_vec(),
                coarse_checksums: false,
            }),
            READ_TIMEOUT.name,
        )
        .await
        .map_err(other)?
        .into_inner();
        while *pos < end {
            // Each piece within the deadline: a datanode that stops
            // mid-stream is left for the next replica.
            let next = async { Ok(stream.next().await) };
            let r = match within(limit, next, READ_TIMEOUT.name)
                .await
                .map_err(other)?
            {
                Some(r) => r.map_err(other)?,
                None => return Err(ReplicaError::Other("stream ended early".into())),
            };
            let piece_end = r.data_offset + r.data.len() as u64;
            let len = piece_end.min(end).saturating_sub(*pos);
            if len == 0 {
                return Err(ReplicaError::Other("empty piece".into()));
            }
            self.check_piece(&r, *pos, len, self.verify)?;
            let skip = (*pos - r.data_offset) as usize;
            let piece: Bytes = r.data.slice(skip..skip + len as usize);
            w.write_all(&piece).await.map_err(ReplicaError::Output)?;
            *pos += len;
        }
        Ok(())
    }
}

impl KeyRead for KeyReader {
    /// Key length.
    fn size(&self) -> u64 {
        self.key.size
    }

    /// Whether this stream verifies checksums.
    fn verify_checksum(&self) -> bool {
        self.verify
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns the count (short
    /// only at the end of the key; 0 at the end).
    async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_at_with(offset, buf, self.verify).await
    }

    /// Reads exactly `buf.len()` bytes at `offset` with checksums verified,
    /// whatever this stream's setting (HBase's fallback reader after an
    /// HFile checksum failure).
    async fn verified_read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        self.read_at_with(offset, buf, true).await.map(|_| ())
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    async fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        self.read_at(offset, buf).await.map(|_| ())
    }

    /// Streams the whole key into `w` (ReadBlock per block, resuming on the
    /// next replica after a failure). Returns the bytes written.
    async fn copy_to<W: AsyncWrite + Unpin + Send>(&self, w: &mut W) -> Result<u64> {
        let mut total = 0u64;
        let mut buf: Vec<u8> = Vec::new();
        for (b, held) in self.key.blocks.iter().zip(self.held.iter()) {
            if b.replicas.iter().any(|r| self.sc_local(&r.id)) {
                // A local replica: positional short-circuit reads in pieces.
                buf.resize((4 << 20).min(b.length as usize), 0);
                let mut pos = 0u64;
                while pos < b.length {
                    let n = ((b.length - pos) as usize).min(buf.len());
                    self.read_block(b, held, pos, &mut buf[..n], self.verify)
                        .await?;
                    w.write_all(&buf[..n]).await.map_err(ClientError::Output)?;
                    pos += n as u64;
                }
                total += b.length;
                continue;
            }
            let id = b
                .block
                .as_ref()
                .ok_or_else(|| ClientError::InvalidArgument("key block without id".into()))?;
            let mut pos = 0u64;
            let mut errors = Vec::new();
            for dn in self.replicas(b, id).iter() {
                let start = pos;
                match self
                    .stream_replica(dn, id, &b.token, &mut pos, b.length, w)
                    .await
                {
                    Ok(()) => {
                        self.account(dn, pos - start);
                        break;
                    }
                    Err(ReplicaError::Output(e)) => return Err(ClientError::Output(e)),
                    Err(e) => {
                        self.account(dn, pos - start);
                        self.failed(id, &b.token, dn, e, &mut errors).await
                    }
                }
            }
            if pos < b.length {
                return Err(ClientError::AllReplicasFailed {
                    block: id.display(),
                    errors: errors.join("; "),
                });
            }
            total += b.length;
        }
        w.flush().await.map_err(ClientError::Output)?;
        Ok(total)
    }

    /// A direct reader holds nothing on a server.
    async fn close(self) -> Result<()> {
        Ok(())
    }
}
