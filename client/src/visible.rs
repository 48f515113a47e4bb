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
    // The first answer, then the longest of those within LATE_ANSWERS.
    let mut longest = None;
    while let Some(answer) = asks.next().await {
        if answer.is_some() {
            longest = answer;
            break;
        }
    }
    let Some(mut longest) = longest else {
        return;
    };
    let _ = tokio::time::timeout(LATE_ANSWERS, async {
        while let Some(answer) = asks.next().await {
            longest = longest.max(answer.unwrap_or(0));
        }
    })
    .await;
    if longest > last.length {
        key.size += longest - last.length;
        last.length = longest;
    }
}
