//! A writer's streams to the replicas of the block it writes
//! (`WriteStream`): each chunk or flush is one message on a stream held
//! open for the block, acknowledged in order, instead of a call of its own
//! (no request headers, no new HTTP/2 stream, no task per write on the
//! datanode).

use std::collections::HashMap;

use futures::SinkExt;
use futures::channel::mpsc;
use futures::future::join_all;
use ozone_proto::{BlockId, DatanodeDetails, KeyBlock, WriteChunkRequest, WriteChunkResponse};

use crate::deadline::{WRITE_TIMEOUT, within};
use crate::direct::ClientInner;

/// One replica's stream: requests go in `tx`, acknowledgements come back
/// on `acks`, one per request, in order.
struct ReplicaStream {
    tx: mpsc::Sender<WriteChunkRequest>,
    acks: tonic::Streaming<WriteChunkResponse>,
}

/// The open streams of one block, by datanode id. A stream that failed is
/// dropped (the writer moves the block elsewhere); another block's streams
/// are closed when the first chunk of a new block is sent.
#[derive(Default)]
pub(crate) struct BlockStreams {
    block: Option<BlockId>,
    open: HashMap<String, ReplicaStream>,
}

impl BlockStreams {
    /// Sends `req` to every replica of `block` (opening streams as needed)
    /// and waits for each one's acknowledgement, at most
    /// `ozone.client.write.timeout`; the replicas that failed, and why.
    pub(crate) async fn send(
        &mut self,
        inner: &ClientInner,
        block: &KeyBlock,
        req: WriteChunkRequest,
    ) -> Vec<(String, tonic::Status)> {
        if self.block != block.block {
            self.close();
            self.block = block.block;
        }
        let limit = inner.config.write_timeout;
        let mut open = std::mem::take(&mut self.open);
        let sends = block.replicas.iter().map(|dn| {
            let existing = open.remove(&dn.id);
            let req = req.clone();
            async move {
                let r = within(limit, one(inner, dn, existing, req), WRITE_TIMEOUT.name).await;
                (dn.id.clone(), r)
            }
        });
        let mut failed = Vec::new();
        for (id, r) in join_all(sends).await {
            match r {
                Ok(Some(s)) => {
                    self.open.insert(id, s);
                }
                Ok(None) => {}
                Err(status) => failed.push((id, status)),
            }
        }
        failed
    }

    /// Closes every stream: the datanodes see the end of the writer's side.
    pub(crate) fn close(&mut self) {
        self.open.clear();
        self.block = None;
    }
}

/// `req` on `dn`'s stream (opened when `existing` is none) and its
/// acknowledgement; the stream to keep. A datanode without `WriteStream`
/// (an older version during a rolling upgrade) gets a `WriteChunk` call.
async fn one(
    inner: &ClientInner,
    dn: &DatanodeDetails,
    existing: Option<ReplicaStream>,
    req: WriteChunkRequest,
) -> Result<Option<ReplicaStream>, tonic::Status> {
    let mut s = match existing {
        Some(s) => s,
        None => {
            let mut client = inner
                .pool
                .get(dn)
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let (tx, rx) = mpsc::channel(1);
            match client.write_stream(rx).await {
                Ok(acks) => ReplicaStream {
                    tx,
                    acks: acks.into_inner(),
                },
                Err(s) if s.code() == tonic::Code::Unimplemented => {
                    client.write_chunk(req).await?;
                    return Ok(None);
                }
                Err(s) => return Err(s),
            }
        }
    };
    s.tx.send(req)
        .await
        .map_err(|_| tonic::Status::unavailable("the write stream is closed"))?;
    match s.acks.message().await? {
        Some(_) => Ok(Some(s)),
        None => Err(tonic::Status::unavailable(
            "the datanode ended the write stream",
        )),
    }
}
