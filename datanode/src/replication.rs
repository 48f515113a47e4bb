//! Copying a replica from another datanode (the OM's replication manager
//! asks the datanode that is to hold it). The block's metadata and bytes
//! are read from a source over gRPC, every chunk is checked against its
//! checksums on arrival (a damaged source is skipped for the next one),
//! then committed like a client's write. A damaged or partial replica here
//! is replaced; a healthy one is re-verified and kept. Copies run as their
//! own tasks (an OM that goes away mid-call does not cut them short), at
//! most `streams` at once, their bytes paced to a shared rate.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ozone_proto::datanode_client::DatanodeClient;
use ozone_proto::{BlockData, BlockId, GetBlockRequest, ReadChunkRequest, ReplicateBlockRequest};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use crate::metrics::Metrics;
use crate::storage::{BlockStore, LocalReplica, ScanOutcome, StorageError};
use ozone_common::block_key::{BlockKey, key_of};
use ozone_common::tls::Tls;

/// Replication settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// Copies running at once.
    pub streams: usize,
    /// Bytes per second over all copies (0: unpaced).
    pub bytes_per_sec: u64,
}

/// A shared byte rate: each caller waits for its turn.
#[derive(Debug)]
pub(crate) struct Throttle {
    rate: u64,
    next: Mutex<Instant>,
}

impl Throttle {
    /// At most `rate` bytes per second (0: no limit).
    pub(crate) fn new(rate: u64) -> Self {
        Self {
            rate,
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits until `n` more bytes fit the rate.
    pub(crate) async fn take(&self, n: u64) {
        if self.rate == 0 {
            return;
        }
        let wait = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(n as f64 / self.rate as f64);
            start - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The datanode's copier.
pub(crate) struct Replicator {
    store: Arc<BlockStore>,
    metrics: Arc<Metrics>,
    streams: Semaphore,
    throttle: Throttle,
    running: Mutex<HashSet<BlockKey>>,
    channels: Mutex<HashMap<String, Channel>>,
    max_read: u64,
    tls: Option<Tls>,
}

/// Largest read asked of a source at once.
const PIECE: u64 = 4 << 20;

impl Replicator {
    /// A copier into `store`; reads of at most `max_read` bytes per call,
    /// over TLS when `tls` is set.
    pub(crate) fn new(
        store: Arc<BlockStore>,
        metrics: Arc<Metrics>,
        cfg: ReplicationConfig,
        max_read: u64,
        tls: Option<Tls>,
    ) -> Self {
        Self {
            store,
            metrics,
            streams: Semaphore::new(cfg.streams.max(1)),
            throttle: Throttle::new(cfg.bytes_per_sec),
            running: Mutex::new(HashSet::new()),
            channels: Mutex::new(HashMap::new()),
            max_read: max_read.clamp(64 << 10, PIECE),
            tls,
        }
    }

    /// Makes this datanode hold a healthy replica of the requested block;
    /// returns the bytes copied and the source (0 and "" when the replica
    /// here was healthy already). A copy of the same block already running
    /// is refused with ALREADY_EXISTS.
    pub(crate) async fn replicate(
        self: &Arc<Self>,
        req: ReplicateBlockRequest,
    ) -> Result<(u64, String), Status> {
        let id = req
            .block
            .ok_or_else(|| Status::invalid_argument("missing block id"))?;
        if req.sources.is_empty() {
            return Err(Status::invalid_argument("no source datanode given"));
        }
        let key = key_of(&id);
        if !self.lock_running().insert(key) {
            return Err(Status::already_exists(format!(
                "a copy of block {} is already running here",
                id.display()
            )));
        }
        let me = self.clone();
        // Its own task: finishes (and is reported) even if the caller goes.
        let task = tokio::spawn(async move {
            let r = me.run(id, &req).await;
            me.lock_running().remove(&key);
            r
        });
        task.await
            .map_err(|e| Status::internal(format!("copy task failed: {e}")))?
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashSet<BlockKey>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(&self, id: BlockId, req: &ReplicateBlockRequest) -> Result<(u64, String), Status> {
        let _permit = self
            .streams
            .acquire()
            .await
            .map_err(|_| Status::unavailable("shutting down"))?;
        self.metrics.replications_in_flight.inc();
        let r = self.copy(id, req).await;
        self.metrics.replications_in_flight.dec();
        match &r {
            Ok((n, source)) if !source.is_empty() => {
                self.metrics.replications_done.inc();
                tracing::info!(block = %id.display(), bytes = n, %source, "replica copied");
            }
            Ok(_) => {}
            Err(e) => {
                self.metrics.replications_failed.inc();
                tracing::warn!(block = %id.display(), "replica copy failed: {}", e.message());
            }
        }
        r
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&BlockStore) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, Status> {
        let s = self.store.clone();
        tokio::task::spawn_blocking(move || f(&s))
            .await
            .map_err(|e| Status::internal(format!("worker failed: {e}")))?
            .map_err(Status::from)
    }

    async fn copy(
        &self,
        id: BlockId,
        req: &ReplicateBlockRequest,
    ) -> Result<(u64, String), Status> {
        match self.blocking(move |s| s.local_replica(&id)).await? {
            LocalReplica::Committed => {
                // Reported bad by a reader, or asked again: check it first.
                let outcome = self
                    .blocking(move |s| s.scan_block(&id, &mut Vec::new(), |_| true))
                    .await?;
                match outcome {
                    ScanOutcome::Healthy(_) => return Ok((0, String::new())),
                    ScanOutcome::Corrupt(why) => {
                        tracing::warn!(block = %id.display(), "replacing a damaged replica: {why}");
                        self.store.quarantine(&id, &why);
                    }
                    ScanOutcome::Gone => {}
                }
                self.blocking(move |s| s.delete(&[id])).await?;
            }
            LocalReplica::Quarantined | LocalReplica::Uncommitted => {
                self.blocking(move |s| s.delete(&[id])).await?;
            }
            LocalReplica::Absent => {}
        }
        let mut last = Status::unavailable("no source tried");
        for source in &req.sources {
            match self.copy_from(source, id, req).await {
                Ok(n) => return Ok((n, source.clone())),
                Err(e) => {
                    tracing::warn!(block = %id.display(), %source, "copy from this source failed: {}", e.message());
                    // Nothing partial stays behind.
                    self.blocking(move |s| s.delete(&[id])).await?;
                    if matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown) {
                        self.lock_channels().remove(source);
                    }
                    last = e;
                }
            }
        }
        Err(Status::new(
            last.code(),
            format!(
                "every source failed for block {}; last: {}",
                id.display(),
                last.message()
            ),
        ))
    }

    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn client(&self, address: &str) -> Result<DatanodeClient<Channel>, Status> {
        let mut map = self.lock_channels();
        let ch = match map.get(address) {
            Some(c) => c.clone(),
            None => {
                let e = Endpoint::from_shared(format!("http://{address}"))
                    .map_err(|_| {
                        Status::invalid_argument(format!("bad source address {address:?}"))
                    })?
                    .connect_timeout(Duration::from_secs(3))
                    .timeout(Duration::from_secs(60));
                let c = ozone_common::tls::lazy_channel(e, self.tls.as_ref());
                map.insert(address.to_string(), c.clone());
                c
            }
        };
        Ok(DatanodeClient::new(ch)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }

    async fn copy_from(
        &self,
        source: &str,
        id: BlockId,
        req: &ReplicateBlockRequest,
    ) -> Result<u64, Status> {
        let mut dn = self.client(source)?;
        let data = dn
            .get_block(GetBlockRequest {
                block: Some(id),
                token: req.token.clone(),
            })
            .await?
            .into_inner()
            .block
            .ok_or_else(|| Status::internal("the source sent no block metadata"))?;
        if data.size != req.size {
            return Err(Status::failed_precondition(format!(
                "the source holds {} bytes of block {}, the key says {}",
                data.size,
                id.display(),
                req.size
            )));
        }
        let mut copied = 0u64;
        // The chunk records as a client sends them (the fine checksums are
        // the target's to derive).
        let chunks: Vec<ozone_proto::ChunkInfo> = data
            .chunks
            .iter()
            .map(|c| ozone_proto::ChunkInfo {
                fine_checksum: None,
                ..c.clone()
            })
            .collect();
        for chunk in &chunks {
            let mut pieces: Vec<bytes::Bytes> = Vec::new();
            let mut at = chunk.offset;
            let end = chunk.offset + chunk.len;
            while at < end {
                let n = self.max_read.min(end - at);
                self.throttle.take(n).await;
                let piece = dn
                    .read_chunk(ReadChunkRequest {
                        block: Some(id),
                        offset: at,
                        len: n,
                        with_checksums: false,
                        token: req.token.clone(),
                        coarse_checksums: false,
                    })
                    .await?
                    .into_inner();
                if piece.data_offset != at || piece.data.len() as u64 != n {
                    return Err(Status::data_loss(format!(
                        "the source sent {} bytes at {} for {n} at {at}",
                        piece.data.len(),
                        piece.data_offset
                    )));
                }
                pieces.push(piece.data);
                at += n;
            }
            // One piece is written as received; several are joined once.
            let bytes = match pieces.len() {
                1 => pieces.pop().expect("one piece"),
                _ => pieces.concat().into(),
            };
            let record = chunk.clone();
            // Checked against the chunk's checksums on arrival.
            self.blocking(move |s| s.write_chunk(&id, &record, &bytes, 0, true, false))
                .await?;
            copied += chunk.len;
            self.metrics.replication_bytes.inc_by(chunk.len);
        }
        let block = BlockData {
            id: Some(id),
            chunks,
            size: data.size,
            committed: false,
        };
        self.blocking(move |s| s.put_block(&block)).await?;
        self.metrics.used_bytes.set(self.store.used_bytes() as i64);
        Ok(copied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_throttle_paces_callers_to_its_rate() {
        let t = Arc::new(Throttle::new(1000));
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let t = t.clone();
            tasks.push(tokio::spawn(async move { t.take(500).await }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // 2000 bytes at 1000/s: the last caller starts after 1.5 s.
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(1400), "{waited:?}");
        assert!(waited < Duration::from_millis(2100), "{waited:?}");
        let free = Throttle::new(0);
        free.take(u64::MAX).await;
    }
}
