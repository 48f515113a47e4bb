//! Background deletion: purges the subtrees of recursively deleted
//! directories (their blocks join the queue), then sends the blocks queued
//! for each healthy datanode in DeleteBlocks calls and drops them from the
//! queue once confirmed.

use std::sync::Arc;
use std::time::Duration;

use ozone_proto::{DeleteBlocksRequest, NodeState};
use tokio::sync::watch;

use crate::dn_channels::DatanodeChannels;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::store::OmStore;

/// Blocks per DeleteBlocks call.
const BATCH: usize = 1000;
/// Longest wait for one DeleteBlocks call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Purge batches per round.
const PURGE_ROUNDS: usize = 50;

/// Runs until `stop` turns true.
pub(crate) async fn run(
    store: Arc<OmStore>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    channels: Arc<DatanodeChannels>,
    signer: Option<ozone_common::token::TokenSigner>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let s = store.clone();
        let purged = tokio::task::spawn_blocking(move || purge(&s)).await;
        if let Ok(Err(e)) = purged {
            tracing::warn!("purging deleted directories failed: {e}");
        }
        let s = store.clone();
        let Ok(Ok(dns)) =
            tokio::task::spawn_blocking(move || s.datanodes_with_pending_deletes()).await
        else {
            continue;
        };
        for dn in dns {
            let Some(d) = registry.get(&dn) else { continue };
            if d.state != NodeState::Healthy as i32 {
                continue;
            }
            let s = store.clone();
            let id = dn.clone();
            let Ok(Ok(blocks)) = tokio::task::spawn_blocking(move || {
                // Only blocks whose release is durable may be deleted:
                // what was read is made durable first.
                let r = s.pending_deletes(&id, BATCH);
                s.sync()?;
                r
            })
            .await
            else {
                continue;
            };
            let Some(mut dn_client) = channels.client(&d.address) else {
                continue;
            };
            let mut req = DeleteBlocksRequest { blocks, auth: None };
            if let Some(signer) = &signer {
                // Signed for this datanode only, usable once.
                req.auth = Some(ozone_common::token::sign_request(
                    signer,
                    "DeleteBlocks",
                    &dn,
                    &req,
                ));
            }
            let call = dn_client.delete_blocks(req);
            match tokio::time::timeout(CALL_TIMEOUT, call)
                .await
                .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer within 30 s")))
            {
                Ok(r) => {
                    let deleted = r.into_inner().deleted;
                    metrics.replicas_deleted.inc_by(deleted.len() as u64);
                    tracing::debug!(datanode = %dn, count = deleted.len(), "blocks deleted");
                    let s = store.clone();
                    let _ =
                        tokio::task::spawn_blocking(move || s.confirm_deletes(&dn, &deleted)).await;
                }
                Err(e) => {
                    tracing::warn!(datanode = %dn, "DeleteBlocks failed: {}", e.message());
                    channels.forget(&d.address);
                }
            }
        }
    }
}

/// Purges deleted directories, a bounded number of batches per round (each
/// batch one transaction, so a crash loses nothing and repeats nothing).
fn purge(store: &OmStore) -> Result<usize, crate::store::OmError> {
    let mut total = 0;
    for _ in 0..PURGE_ROUNDS {
        let n = store.fs_purge(crate::store::fs::PURGE_BATCH)?;
        total += n;
        if n == 0 {
            break;
        }
    }
    if total > 0 {
        tracing::debug!(entries = total, "purged deleted directories");
    }
    Ok(total)
}
