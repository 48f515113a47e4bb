//! Readers' bad-replica reports: bounded per caller, and verified by the
//! datanode that holds the replica before they count. A report from a
//! reader only asks a question; the datanode's own check (every window
//! re-read, `VerifyBlock`) answers it, and only a damaged answer marks the
//! replica bad (listed last for readers, repaired by the replication
//! manager). Datanodes report their own replicas directly.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ozone_common::block_key::{BlockKey, key_of};
use ozone_common::token::TokenSigner;
use ozone_proto::{BlockId, VerifyBlockRequest};

use crate::dn_channels::DatanodeChannels;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::store::OmStore;

/// Reports one caller may make per [`WINDOW`].
pub(crate) const PER_CALLER: u32 = 30;
/// The window [`PER_CALLER`] counts over.
const WINDOW: Duration = Duration::from_secs(60);
/// Checks under way at once, over all callers; more are refused.
const IN_FLIGHT: usize = 32;
/// The most of a report's reason that is kept.
pub(crate) const MAX_REASON: usize = 1024;
/// How long a datanode has to re-read a replica.
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a report was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refused {
    #[error("{caller} made {PER_CALLER} bad-replica reports in the last minute; try later")]
    TooMany { caller: String },
    #[error("{IN_FLIGHT} reported replicas are being checked; try later")]
    Busy,
    #[error("no datanode {0} is registered")]
    UnknownDatanode(String),
}

/// Takes readers' reports and has the datanodes check them.
pub(crate) struct BadReports {
    store: Arc<OmStore>,
    registry: Arc<Registry>,
    channels: Arc<DatanodeChannels>,
    metrics: Arc<Metrics>,
    signer: Option<TokenSigner>,
    counts: Mutex<HashMap<String, (Instant, u32)>>,
    checking: Mutex<HashSet<(BlockKey, String)>>,
}

/// `reason` cut to [`MAX_REASON`] bytes on a character boundary.
pub(crate) fn short_reason(reason: &str) -> &str {
    ozone_common::names::prefix(reason, MAX_REASON)
}

impl BadReports {
    pub(crate) fn new(
        store: Arc<OmStore>,
        registry: Arc<Registry>,
        channels: Arc<DatanodeChannels>,
        metrics: Arc<Metrics>,
        signer: Option<TokenSigner>,
    ) -> Self {
        Self {
            store,
            registry,
            channels,
            metrics,
            signer,
            counts: Mutex::default(),
            checking: Mutex::default(),
        }
    }

    /// Counts a report by `caller` against its allowance.
    fn admit(&self, caller: &str) -> Result<(), Refused> {
        let now = Instant::now();
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.len() > 4096 {
            counts.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let (start, n) = counts.entry(caller.to_string()).or_insert((now, 0));
        if now.duration_since(*start) >= WINDOW {
            *start = now;
            *n = 0;
        }
        if *n >= PER_CALLER {
            return Err(Refused::TooMany {
                caller: caller.to_string(),
            });
        }
        *n += 1;
        Ok(())
    }

    /// Takes `caller`'s report that datanode `dn`'s replica of `block` is
    /// bad: the datanode is asked to check it, in the background; a
    /// replica found damaged is recorded as bad with the datanode's reason.
    /// A replica already being checked is not checked twice.
    pub(crate) fn report(
        self: &Arc<Self>,
        caller: &str,
        block: BlockId,
        dn: &str,
        reason: &str,
    ) -> Result<(), Refused> {
        let Some(details) = self.registry.get(dn) else {
            return Err(Refused::UnknownDatanode(dn.to_string()));
        };
        self.admit(caller)?;
        let key = (key_of(&block), dn.to_string());
        {
            let mut checking = self.checking.lock().unwrap_or_else(|e| e.into_inner());
            if checking.contains(&key) {
                return Ok(());
            }
            if checking.len() >= IN_FLIGHT {
                return Err(Refused::Busy);
            }
            checking.insert(key.clone());
        }
        tracing::info!(block = %block.display(), datanode = %dn, reporter = %caller, reason = %short_reason(reason), "bad replica reported; asking the datanode to check it");
        let me = self.clone();
        tokio::spawn(async move {
            me.check(block, &details.id, &details.address).await;
            me.checking
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        });
        Ok(())
    }

    /// Has datanode `dn` (at `address`) re-read its replica of `block`.
    async fn check(&self, block: BlockId, dn: &str, address: &str) {
        let Some(mut client) = self.channels.client(address) else {
            return;
        };
        let mut req = VerifyBlockRequest {
            block: Some(block),
            auth: None,
        };
        if let Some(signer) = &self.signer {
            req.auth = Some(ozone_common::token::sign_request(
                signer,
                "VerifyBlock",
                dn,
                &req,
            ));
        }
        let answer = tokio::time::timeout(CHECK_TIMEOUT, client.verify_block(req))
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in time")));
        let r = match answer {
            Ok(r) => r.into_inner(),
            Err(e) => {
                tracing::warn!(block = %block.display(), datanode = %dn, "checking a reported replica failed: {}", e.message());
                return;
            }
        };
        if r.healthy || r.gone {
            self.metrics.bad_replica_reports_unconfirmed.inc();
            tracing::info!(block = %block.display(), datanode = %dn, healthy = r.healthy, "reported replica checked: not damaged");
            return;
        }
        self.metrics.bad_replica_reports_confirmed.inc();
        tracing::warn!(block = %block.display(), datanode = %dn, reason = %r.reason, "reported replica checked: damaged");
        let s = self.store.clone();
        let dn = dn.to_string();
        let reason = format!("checked after a report: {}", short_reason(&r.reason));
        let _ =
            tokio::task::spawn_blocking(move || s.record_bad_replica(&block, &dn, &reason)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        assert_eq!(short_reason("short"), "short");
        let long = "é".repeat(1000);
        let cut = short_reason(&long);
        assert!(cut.len() <= MAX_REASON && cut.len() >= MAX_REASON - 1);
    }
}
