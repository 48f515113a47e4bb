//! Block recovery (HDFS's), run when the lease of a file whose writer is
//! gone is recovered: the block being written may hold hflushed bytes the
//! OM never heard of. Each replica is asked how much of the block it
//! serves; the replicas serving the most commit the block at that length
//! (bytes written past it, never shown to a reader, are cut). Every
//! hflush that returned reached every replica of the block, so the longest
//! served length holds at least every hflushed byte; a replica that
//! missed writes serves less and is left out (the replication manager
//! copies the block to it, or elsewhere, once it is committed).

use std::time::Duration;

use ozone_common::token::{TokenSigner, sign_request};
use ozone_proto::{BlockId, KeyBlock, RecoverBlockRequest};

use crate::dn_channels::DatanodeChannels;
use crate::registry::Registry;

/// How long one replica may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The block being written as recovered: its length and the replicas
/// (datanode ids) that committed it at that length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecoveredBlock {
    pub(crate) id: BlockId,
    pub(crate) length: u64,
    pub(crate) replicas: Vec<String>,
}

/// Recovers `block` (the last block of a file being written; its `length`
/// is what the OM knows). `None` when no replica serves more than that and
/// commits it: the OM's length stands.
pub(crate) async fn recover(
    channels: &DatanodeChannels,
    registry: &Registry,
    signer: Option<&TokenSigner>,
    block: &KeyBlock,
) -> Option<RecoveredBlock> {
    let id = block.block?;
    let ask = |dn: String, commit: Option<u64>| async move {
        let address = registry.get(&dn)?.address;
        let mut client = channels.client(&address)?;
        let mut req = RecoverBlockRequest {
            block: Some(id),
            commit: commit.is_some(),
            length: commit.unwrap_or(0),
            auth: None,
        };
        if let Some(signer) = signer {
            req.auth = Some(sign_request(signer, "RecoverBlock", &dn, &req));
        }
        match tokio::time::timeout(ANSWER_WITHIN, client.recover_block(req)).await {
            Ok(Ok(r)) => Some((dn, r.into_inner())),
            Ok(Err(e)) => {
                if e.code() == tonic::Code::Unavailable {
                    channels.forget(&address);
                }
                tracing::info!(block = %id.display(), datanode = %dn, "block recovery: {}", e.message());
                None
            }
            Err(_) => None,
        }
    };
    let ids = block.replicas.iter().map(|r| r.id.clone());
    let served: Vec<(String, u64)> = futures::future::join_all(ids.map(|dn| ask(dn, None)))
        .await
        .into_iter()
        .flatten()
        .map(|(dn, r)| (dn, r.length))
        .collect();
    let longest = served.iter().map(|(_, l)| *l).max()?;
    if longest <= block.length {
        return None;
    }
    let holders = served
        .into_iter()
        .filter(|(_, l)| *l == longest)
        .map(|(dn, _)| ask(dn, Some(longest)));
    let replicas: Vec<String> = futures::future::join_all(holders)
        .await
        .into_iter()
        .flatten()
        .filter(|(_, r)| r.committed && r.length == longest)
        .map(|(dn, _)| dn)
        .collect();
    if replicas.is_empty() {
        return None;
    }
    tracing::info!(block = %id.display(), length = longest, replicas = ?replicas, "block recovered");
    Some(RecoveredBlock {
        id,
        length: longest,
        replicas,
    })
}
