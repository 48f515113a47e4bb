//! The datanode's gRPC service.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use ozone_proto::datanode_server::Datanode;
use ozone_proto::*;
use tonic::{Request, Response, Status};

use ozone_common::token::TokenSigner;

use crate::metrics::{Metrics, OpLabel};
use crate::storage::{BlockStore, ScanOutcome, StorageError};

/// Largest piece of a streamed read.
const MAX_PIECE: u64 = 4 << 20;

/// Writes up to this size to a block already open are made on the runtime
/// thread (a page-cache `pwrite`); larger ones, and the first write of a
/// block (which creates its file), go to the blocking pool.
const INLINE_WRITE: u64 = 64 << 10;

impl From<StorageError> for Status {
    fn from(e: StorageError) -> Self {
        let msg = e.to_string();
        match e {
            StorageError::NotFound(..) => Status::not_found(msg),
            StorageError::AlreadyCommitted(..)
            | StorageError::NotCommitted(..)
            | StorageError::Incomplete(_) => Status::failed_precondition(msg),
            StorageError::Invalid(_) | StorageError::Checksum(_) => Status::invalid_argument(msg),
            StorageError::OutOfRange { .. } => Status::out_of_range(msg),
            StorageError::Io { .. } | StorageError::Meta(_) => Status::internal(msg),
            StorageError::Corrupt(..) => Status::data_loss(msg),
        }
    }
}

/// gRPC front of a [`BlockStore`].
#[derive(Clone)]
pub(crate) struct DatanodeService {
    store: Arc<BlockStore>,
    metrics: Arc<Metrics>,
    verify_writes: bool,
    max_read: u64,
    tokens: Option<TokenSigner>,
    replicator: Arc<crate::replication::Replicator>,
    /// This datanode's id: signed OM commands must name it.
    id: Arc<str>,
    /// Nonces of OM commands already accepted.
    nonces: Arc<ozone_common::token::NonceCache>,
}

impl DatanodeService {
    /// A service over `store`; reads larger than `max_read` bytes are refused
    /// (they would not fit one gRPC message).
    pub(crate) fn new(
        id: &str,
        store: Arc<BlockStore>,
        metrics: Arc<Metrics>,
        verify_writes: bool,
        max_read: u64,
        tokens: Option<TokenSigner>,
        replicator: Arc<crate::replication::Replicator>,
    ) -> Self {
        Self {
            store,
            metrics,
            verify_writes,
            max_read,
            tokens,
            replicator,
            id: id.into(),
            nonces: Default::default(),
        }
    }

    /// Checks that a command (DeleteBlocks, ReplicateBlock) comes from the
    /// OM when block tokens are on: signed with the cluster secret, for this
    /// datanode, not expired, and not seen before. `unsigned` is the
    /// request with its signature taken out.
    fn check_command<M: prost::Message>(
        &self,
        kind: &'static str,
        auth: Option<&CommandAuth>,
        unsigned: &M,
    ) -> Result<(), Status> {
        let Some(t) = &self.tokens else {
            return Ok(());
        };
        let now = ozone_common::now_ms();
        let refused = |e: ozone_common::token::TokenError| {
            self.metrics.commands_refused.inc();
            tracing::warn!(command = kind, "refused: {e}");
            Status::permission_denied(format!("{kind} refused: {e}"))
        };
        t.verify_command(auth, kind, &self.id, &unsigned.encode_to_vec(), now)
            .map_err(refused)?;
        let a = auth.expect("verified");
        self.nonces
            .accept(&a.nonce, a.expiry_ms, now)
            .map_err(refused)
    }

    /// Checks a READ token when block tokens are on.
    fn check_token(&self, token: &[u8], id: &BlockId) -> Result<(), Status> {
        match &self.tokens {
            Some(t) => t
                .verify(token, id, "READ", ozone_common::now_ms())
                .map_err(|e| Status::permission_denied(e.to_string())),
            None => Ok(()),
        }
    }

    /// Checks a WRITE token when block tokens are on: for block `id`, this
    /// datanode, and a write reaching byte `end` of the block.
    fn check_write(&self, token: &[u8], id: &BlockId, end: u64) -> Result<(), Status> {
        match &self.tokens {
            Some(t) => t
                .verify_write(token, id, &self.id, end, ozone_common::now_ms())
                .map_err(|e| Status::permission_denied(e.to_string())),
            None => Ok(()),
        }
    }

    fn count(&self, op: &'static str) {
        self.metrics.ops.get_or_create(&OpLabel { op }).inc();
    }

    /// One WriteChunk (unary or from a write stream): its WRITE token
    /// checked, then the chunk written (and, with `flush`, served).
    async fn write_one(&self, r: WriteChunkRequest) -> Result<(), Status> {
        let block = need_block(r.block)?;
        let chunk = r
            .chunk
            .ok_or_else(|| Status::invalid_argument("missing chunk info"))?;
        self.check_write(&r.token, &block, chunk.offset.saturating_add(chunk.len))?;
        let len = r.data.len() as u64;
        let verify = self.verify_writes;
        let flush = r.flush;
        let data_offset = r.data_offset;
        let data = r.data;
        let inline = len <= INLINE_WRITE && self.store.is_writing(&block);
        let write =
            move |s: &BlockStore| s.write_chunk(&block, &chunk, &data, data_offset, verify, flush);
        if inline {
            // A small write to an open block (an hflushed tail): one
            // pwrite into the page cache, done here; handing it to the
            // blocking pool and back cost more than the write.
            self.count("WriteChunk");
            write(&self.store).map_err(|e| self.failed("WriteChunk", e))?;
        } else {
            self.blocking("WriteChunk", write).await?;
        }
        self.metrics.bytes_written.inc_by(len);
        Ok(())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&BlockStore) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, Status> {
        self.count(op);
        let store = self.store.clone();
        let r = tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Status::internal(format!("worker failed: {e}")))?;
        r.map_err(|e| self.failed(op, e))
    }

    /// A refused or failed storage call, counted: its gRPC status.
    fn failed(&self, op: &'static str, e: StorageError) -> Status {
        self.metrics.errors.get_or_create(&OpLabel { op }).inc();
        if matches!(e, StorageError::Checksum(_)) {
            self.metrics.write_checksum_failures.inc();
        }
        tracing::debug!(op, "request failed: {e}");
        Status::from(e)
    }
}

fn need_block(b: Option<BlockId>) -> Result<BlockId, Status> {
    b.ok_or_else(|| Status::invalid_argument("missing block id"))
}

type ReadStream = Pin<Box<dyn Stream<Item = Result<ReadChunkResponse, Status>> + Send>>;
type WriteAcks = Pin<Box<dyn Stream<Item = Result<WriteChunkResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Datanode for DatanodeService {
    async fn write_chunk(
        &self,
        req: Request<WriteChunkRequest>,
    ) -> Result<Response<WriteChunkResponse>, Status> {
        self.write_one(req.into_inner()).await?;
        Ok(Response::new(WriteChunkResponse {}))
    }

    type WriteStreamStream = WriteAcks;

    async fn write_stream(
        &self,
        req: Request<tonic::Streaming<WriteChunkRequest>>,
    ) -> Result<Response<Self::WriteStreamStream>, Status> {
        let inbound = req.into_inner();
        let acks = futures::stream::unfold(Some((self.clone(), inbound)), |state| async move {
            let (this, mut inbound) = state?;
            let r = match inbound.message().await {
                Ok(Some(r)) => r,
                // The writer closed its side: the stream ends.
                Ok(None) => return None,
                // A malformed message (or the writer went away).
                Err(status) => return Some((Err(status), None)),
            };
            match this.write_one(r).await {
                Ok(()) => Some((Ok(WriteChunkResponse {}), Some((this, inbound)))),
                Err(status) => Some((Err(status), None)),
            }
        });
        Ok(Response::new(Box::pin(acks)))
    }

    async fn put_block(
        &self,
        req: Request<PutBlockRequest>,
    ) -> Result<Response<PutBlockResponse>, Status> {
        let r = req.into_inner();
        let block = r
            .block
            .ok_or_else(|| Status::invalid_argument("missing block data"))?;
        let id = need_block(block.id)?;
        self.check_write(&r.token, &id, block.size)?;
        let sync = r.sync;
        let size = if sync {
            self.blocking("PutBlock", move |s| s.sync_block(&block))
                .await?
        } else {
            self.blocking("PutBlock", move |s| s.put_block(&block))
                .await?
        };
        self.metrics.used_bytes.set(self.store.used_bytes() as i64);
        let receipt = self
            .tokens
            .as_ref()
            .map(|t| t.sign_receipt(&self.id, &id, size, !sync));
        Ok(Response::new(PutBlockResponse {
            committed_size: size,
            receipt,
        }))
    }

    async fn get_block(
        &self,
        req: Request<GetBlockRequest>,
    ) -> Result<Response<GetBlockResponse>, Status> {
        let r = req.into_inner();
        let id = need_block(r.block)?;
        self.check_token(&r.token, &id)?;
        let b = self
            .blocking("GetBlock", move |s| s.committed_block(&id))
            .await?;
        Ok(Response::new(GetBlockResponse {
            block: Some(b.data.clone()),
        }))
    }

    async fn read_chunk(
        &self,
        req: Request<ReadChunkRequest>,
    ) -> Result<Response<ReadChunkResponse>, Status> {
        let r = req.into_inner();
        let id = need_block(r.block)?;
        self.check_token(&r.token, &id)?;
        if r.len > self.max_read {
            return Err(Status::invalid_argument(format!(
                "read of {} bytes exceeds the {}-byte message limit; use ReadBlock",
                r.len, self.max_read
            )));
        }
        let (off, len, with, coarse) = (r.offset, r.len, r.with_checksums, r.coarse_checksums);
        let (data_offset, data, checksum) = self
            .blocking("ReadChunk", move |s| s.read(&id, off, len, with, coarse))
            .await?;
        self.metrics.bytes_read.inc_by(data.len() as u64);
        Ok(Response::new(ReadChunkResponse {
            data_offset,
            data,
            checksum,
        }))
    }

    type ReadBlockStream = ReadStream;

    async fn read_block(
        &self,
        req: Request<ReadBlockRequest>,
    ) -> Result<Response<Self::ReadBlockStream>, Status> {
        let r = req.into_inner();
        let id = need_block(r.block)?;
        self.check_token(&r.token, &id)?;
        let store = self.store.clone();
        let b = self
            .blocking("ReadBlock", move |s| s.committed_block(&id))
            .await?;
        let size = b.size();
        let end = r
            .offset
            .checked_add(r.len)
            .filter(|&e| e <= size)
            .ok_or_else(|| {
                Status::from(StorageError::OutOfRange {
                    block: id.display(),
                    offset: r.offset,
                    len: r.len,
                    size,
                })
            })?;
        let sums = if r.coarse_checksums {
            &b.integrity.coarse
        } else {
            b.integrity.finest()
        };
        let bpc = sums.checksummer().bytes_per_checksum() as u64;
        let mut piece = (r.piece_size as u64).clamp(64 << 10, MAX_PIECE);
        if r.with_checksums {
            piece = piece.div_ceil(bpc) * bpc;
        }
        let metrics = self.metrics.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let mut pos = r.offset;
            while pos < end {
                // Pieces after the first start on window boundaries.
                let stop = if r.with_checksums {
                    ((pos / piece + 1) * piece).min(end)
                } else {
                    (pos + piece).min(end)
                };
                let (s, id2, with, coarse) =
                    (store.clone(), id, r.with_checksums, r.coarse_checksums);
                let res = tokio::task::spawn_blocking(move || {
                    s.read(&id2, pos, stop - pos, with, coarse)
                })
                .await
                .map_err(|e| Status::internal(e.to_string()))
                .and_then(|r| r.map_err(Status::from));
                let msg = res.map(|(data_offset, data, checksum)| {
                    metrics.bytes_read.inc_by(data.len() as u64);
                    ReadChunkResponse {
                        data_offset,
                        data,
                        checksum,
                    }
                });
                let failed = msg.is_err();
                if tx.send(msg).await.is_err() || failed {
                    return;
                }
                pos = stop;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn delete_blocks(
        &self,
        req: Request<DeleteBlocksRequest>,
    ) -> Result<Response<DeleteBlocksResponse>, Status> {
        let mut r = req.into_inner();
        let auth = r.auth.take();
        self.check_command("DeleteBlocks", auth.as_ref(), &r)?;
        let blocks = r.blocks;
        let before = self.store.slots().invalidated_total();
        let deleted = self
            .blocking("DeleteBlocks", move |s| s.delete(&blocks))
            .await?;
        self.metrics.blocks_deleted.inc_by(deleted.len() as u64);
        self.metrics
            .sc_invalidations
            .inc_by(self.store.slots().invalidated_total() - before);
        self.metrics.used_bytes.set(self.store.used_bytes() as i64);
        Ok(Response::new(DeleteBlocksResponse { deleted }))
    }

    async fn verify_block(
        &self,
        req: Request<VerifyBlockRequest>,
    ) -> Result<Response<VerifyBlockResponse>, Status> {
        let mut r = req.into_inner();
        let auth = r.auth.take();
        self.check_command("VerifyBlock", auth.as_ref(), &r)?;
        let id = need_block(r.block)?;
        let outcome = self
            .blocking("VerifyBlock", move |s| {
                if s.is_quarantined(&id) {
                    return Ok(ScanOutcome::Corrupt("quarantined here already".into()));
                }
                let outcome = s.scan_block(&id, &mut Vec::new(), |_| true)?;
                if let ScanOutcome::Corrupt(why) = &outcome {
                    tracing::warn!(block = %id.display(), "replica reported by a reader is damaged: {why}");
                    s.quarantine(&id, why);
                }
                Ok(outcome)
            })
            .await?;
        Ok(Response::new(match outcome {
            ScanOutcome::Healthy(_) => VerifyBlockResponse {
                healthy: true,
                ..Default::default()
            },
            ScanOutcome::Gone => VerifyBlockResponse {
                gone: true,
                ..Default::default()
            },
            ScanOutcome::Corrupt(reason) => VerifyBlockResponse {
                reason,
                ..Default::default()
            },
        }))
    }

    async fn replicate_block(
        &self,
        req: Request<ReplicateBlockRequest>,
    ) -> Result<Response<ReplicateBlockResponse>, Status> {
        self.count("ReplicateBlock");
        let mut r = req.into_inner();
        let auth = r.auth.take();
        self.check_command("ReplicateBlock", auth.as_ref(), &r)?;
        let (copied, source) = self.replicator.replicate(r).await.inspect_err(|_| {
            self.metrics
                .errors
                .get_or_create(&OpLabel {
                    op: "ReplicateBlock",
                })
                .inc();
        })?;
        Ok(Response::new(ReplicateBlockResponse { copied, source }))
    }

    async fn recover_block(
        &self,
        req: Request<RecoverBlockRequest>,
    ) -> Result<Response<RecoverBlockResponse>, Status> {
        self.count("RecoverBlock");
        let mut r = req.into_inner();
        let auth = r.auth.take();
        self.check_command("RecoverBlock", auth.as_ref(), &r)?;
        let id = need_block(r.block)?;
        let commit = r.commit.then_some(r.length);
        let b = self
            .blocking("RecoverBlock", move |s| s.recover_block(&id, commit))
            .await?;
        Ok(Response::new(RecoverBlockResponse {
            length: b.size,
            committed: b.committed,
        }))
    }
}
