//! The length of a file being written: the OM knows what the last hsync
//! (or the blocks the writer finished) showed; the replicas of the block
//! being written know what an hflush has shown since (HDFS's
//! `getReplicaVisibleLength`).

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use ozone_proto::{GetBlockRequest, KeyInfo};

use crate::deadline::{READ_TIMEOUT, within};
use crate::direct::ClientInner;

/// How long the other replicas are waited for once one has answered. Any
/// replica of the block serves every hflushed byte (an hflush returns when
/// all have it) unless a restart made it forget its unsynced tail: the
/// longest answer is taken, but a stopped datanode is not waited for.
const LATE_ANSWERS: Duration = Duration::from_millis(500);

/// When the last block of `key` is still being written, asks its replicas
/// how much of it they serve and extends `key` to the longest answer (a
/// replica that missed writes answers less, and a read it cannot serve
/// moves on to the next replica). Without an answer the OM's length
/// stands.
pub(crate) async fn settle(inner: &ClientInner, key: &mut KeyInfo) {
    if !key.last_block_open {
        return;
    }
    let Some(last) = key.blocks.last_mut() else {
        return;
    };
    let limit = inner.config.read_timeout;
    let mut asks: FuturesUnordered<_> = last
        .replicas
        .iter()
        .map(|dn| {
            let client = inner.pool.get(dn);
            let req = GetBlockRequest {
                block: last.block,
                token: last.token.clone(),
            };
            async move {
                let mut c = client.ok()?;
                let b = within(limit, c.get_block(req), READ_TIMEOUT.name)
                    .await
                    .ok()?
                    .into_inner()
                    .block?;
                Some(b.size)
            }
        })
        .collect();
    let mut seen: Option<u64> = None;
    let mut late = None;
    loop {
        let next = match late {
            None => asks.next().await,
            Some(until) => match tokio::time::timeout_at(until, asks.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
        };
        let Some(answer) = next else { break };
        if let Some(len) = answer {
            seen = Some(seen.map_or(len, |s| s.max(len)));
            late.get_or_insert_with(|| tokio::time::Instant::now() + LATE_ANSWERS);
        }
    }
    if let Some(len) = seen.filter(|&l| l > last.length) {
        key.size += len - last.length;
        last.length = len;
    }
}
