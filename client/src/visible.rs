//! The length of a file being written: the OM knows what the last hsync
//! (or the blocks the writer finished) showed; the replicas of the block
//! being written know what an hflush has shown since (HDFS's
//! `getReplicaVisibleLength`).

use futures::future::join_all;
use ozone_proto::{GetBlockRequest, KeyInfo};

use crate::direct::ClientInner;

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
    let asks = last.replicas.iter().map(|dn| {
        let client = inner.pool.get(dn);
        let req = GetBlockRequest {
            block: last.block,
            token: last.token.clone(),
        };
        async move {
            let mut c = client.ok()?;
            let b = c.get_block(req).await.ok()?.into_inner().block?;
            Some(b.size)
        }
    });
    let seen = join_all(asks).await.into_iter().flatten().max();
    if let Some(len) = seen.filter(|&l| l > last.length) {
        key.size += len - last.length;
        last.length = len;
    }
}
