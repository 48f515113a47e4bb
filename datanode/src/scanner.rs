//! The background scanner: re-reads every committed replica at a bounded
//! rate and checks it against its checksums. A replica that is missing,
//! short or fails a window is quarantined (no longer served: readers move
//! to another replica, short-circuit descriptors are invalidated) and
//! reported to the OM as bad.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::{BlockId, ReportBadReplicaRequest};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::storage::{BlockStore, ScanOutcome};

/// Scan settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanConfig {
    /// Pause between two full passes.
    pub interval: Duration,
    /// Bytes read per second at most.
    pub bytes_per_sec: u64,
}

/// Paces reads to `rate` bytes per second (blocking sleeps: called from
/// the scan's blocking task).
struct Pacer {
    rate: u64,
    start: Instant,
    bytes: u64,
}

impl Pacer {
    fn new(rate: u64) -> Self {
        Self {
            rate: rate.max(1),
            start: Instant::now(),
            bytes: 0,
        }
    }

    /// Accounts `n` bytes; sleeps until the average rate is back under the
    /// limit, in short steps; false as soon as `stopped` says so.
    fn take(&mut self, n: u64, stopped: &dyn Fn() -> bool) -> bool {
        self.bytes += n;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        loop {
            if stopped() {
                return false;
            }
            let el = self.start.elapsed();
            if due <= el {
                return true;
            }
            std::thread::sleep((due - el).min(Duration::from_millis(100)));
        }
    }
}

/// What one pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Replicas read whole and found healthy.
    pub healthy: u64,
    /// Replicas found damaged (and quarantined), with why.
    pub corrupt: Vec<(BlockId, String)>,
    /// Bytes read.
    pub bytes: u64,
}

/// Scans every committed replica once (blocking), until `stopped`.
pub(crate) fn scan_pass(
    store: &BlockStore,
    rate: u64,
    metrics: &Metrics,
    stopped: &dyn Fn() -> bool,
) -> PassReport {
    let mut report = PassReport::default();
    let Ok(ids) = store.list_committed() else {
        return report;
    };
    let mut pacer = Pacer::new(rate);
    let mut buf = Vec::new();
    for id in ids {
        if stopped() {
            break;
        }
        if store.is_quarantined(&id) {
            continue; // found before; reported already
        }
        let mut read = 0u64;
        let outcome = store.scan_block(&id, &mut buf, |n| {
            read += n;
            metrics.scan_bytes.inc_by(n);
            pacer.take(n, stopped)
        });
        report.bytes += read;
        match outcome {
            Ok(ScanOutcome::Healthy(_)) => {
                report.healthy += 1;
                metrics.scan_blocks.inc();
            }
            Ok(ScanOutcome::Corrupt(why)) => {
                tracing::warn!(block = %id.display(), "corrupt replica found by the scanner: {why}");
                store.quarantine(&id, &why);
                metrics.scan_blocks.inc();
                metrics.scan_corrupt.inc();
                report.corrupt.push((id, why));
            }
            Ok(ScanOutcome::Gone) => {}
            Err(e) => tracing::warn!(block = %id.display(), "scan failed: {e}"),
        }
    }
    report
}

/// Runs passes every `cfg.interval` until `stop`, reporting corrupt
/// replicas to the OM (retried each pass until the OM has them).
pub(crate) async fn run(
    store: Arc<BlockStore>,
    cfg: ScanConfig,
    mut om: OzoneManagerClient<ozone_common::credentials::AuthChannel>,
    datanode_id: String,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let mut unreported: Vec<(BlockId, String)> = Vec::new();
    loop {
        let (s, m, st) = (store.clone(), metrics.clone(), stop.clone());
        let Ok(report) = tokio::task::spawn_blocking(move || {
            scan_pass(&s, cfg.bytes_per_sec, &m, &|| *st.borrow())
        })
        .await
        else {
            return;
        };
        if *stop.borrow() {
            return;
        }
        if !report.corrupt.is_empty() || report.healthy > 0 {
            tracing::info!(
                healthy = report.healthy,
                corrupt = report.corrupt.len(),
                bytes = report.bytes,
                "replica scan done"
            );
        }
        unreported.extend(report.corrupt);
        let mut left = Vec::new();
        for (block, why) in unreported.drain(..) {
            let req = ReportBadReplicaRequest {
                block: Some(block),
                datanode_id: datanode_id.clone(),
                reason: format!("scanner: {why}"),
                token: Vec::new(),
            };
            if let Err(e) = om.report_bad_replica(req).await {
                tracing::warn!(block = %block.display(), "reporting a corrupt replica failed: {}", e.message());
                left.push((block, why));
            }
        }
        unreported = left;
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_common::checksum::Checksummer;
    use ozone_proto::{BlockData, ChecksumData, ChecksumType, ChunkInfo};

    fn write(s: &BlockStore, local: u64, data: &[u8]) -> BlockId {
        let ck = Checksummer::new(ChecksumType::Crc32c, 16 * 1024).unwrap();
        let id = BlockId {
            container_id: 1,
            local_id: local,
            commit_seq: 0,
        };
        let c = ChunkInfo {
            offset: 0,
            len: data.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: ck.bytes_per_checksum(),
                checksums: ck.compute(data),
            }),
            fine_checksum: None,
        };
        s.write_chunk(&id, &c, data, 0, true, false).unwrap();
        s.put_block(&BlockData {
            id: Some(id),
            chunks: vec![c],
            size: data.len() as u64,
            committed: false,
        })
        .unwrap();
        id
    }

    #[test]
    fn a_pass_finds_flipped_truncated_and_missing_replicas_and_stops_serving_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = BlockStore::open(vec![dir.path().join("d")], &dir.path().join("m")).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let ids: Vec<BlockId> = (1..=5).map(|i| write(&s, i, &data)).collect();
        let m = Metrics::default();
        let clean = scan_pass(&s, u64::MAX, &m, &|| false);
        assert_eq!((clean.healthy, clean.corrupt.len()), (5, 0));
        assert_eq!(clean.bytes, 5 * data.len() as u64);
        // Flip a byte, truncate, delete.
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(s.block_path(&ids[0]))
            .unwrap();
        f.write_all_at(&[data[200_000] ^ 0x40], 200_000).unwrap();
        f.sync_all().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(s.block_path(&ids[1]))
            .unwrap()
            .set_len(1000)
            .unwrap();
        std::fs::remove_file(s.block_path(&ids[2])).unwrap();
        let r = scan_pass(&s, u64::MAX, &m, &|| false);
        assert_eq!(r.healthy, 2);
        let found: Vec<u64> = r.corrupt.iter().map(|(b, _)| b.local_id).collect();
        assert_eq!(found, [1, 2, 3]);
        assert!(r.corrupt[0].1.contains("window"), "{:?}", r.corrupt[0]);
        assert!(r.corrupt[1].1.contains("holds 1000"), "{:?}", r.corrupt[1]);
        assert!(r.corrupt[2].1.contains("missing"), "{:?}", r.corrupt[2]);
        assert_eq!(m.scan_corrupt.get(), 3);
        // Quarantined: not served any more, until deleted.
        assert!(matches!(
            s.read(&ids[0], 0, 10, false, false),
            Err(crate::storage::StorageError::Corrupt(..))
        ));
        assert_eq!(s.quarantined(), 3);
        let again = scan_pass(&s, u64::MAX, &m, &|| false);
        assert!(again.corrupt.is_empty(), "found once, not again");
        assert_eq!(m.scan_corrupt.get(), 3);
        s.delete(&ids[..3]).unwrap();
        assert_eq!(s.quarantined(), 0);
        assert_eq!(scan_pass(&s, u64::MAX, &m, &|| false).healthy, 2);
    }

    #[test]
    fn the_pacer_holds_the_rate() {
        let mut p = Pacer::new(10 << 20);
        let t = Instant::now();
        for _ in 0..4 {
            assert!(p.take(1 << 20, &|| false));
        }
        assert!(!p.take(1 << 30, &|| true), "a stop ends the wait");
        // 4 MiB at 10 MiB/s: at least 0.4 s.
        assert!(
            t.elapsed() >= Duration::from_millis(390),
            "{:?}",
            t.elapsed()
        );
    }
}
