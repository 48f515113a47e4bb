//! Open-key cleanup (Apache Ozone's open-key cleanup and lease hard limit):
//! a write session whose writer went away (killed before commit) would
//! otherwise hold its allocated blocks, and in a file-system bucket its
//! file's name, forever. Every `ozone.om.open.key.cleanup.service.interval`
//! the OM looks at each session's last activity (opened, block allocated,
//! hsync): a file being written (a file-system session with a block) is
//! closed once idle for `ozone.om.lease.hard.limit` (HDFS's lease hard
//! limit) at what a reader could see, after block recovery of the block
//! being written (hflushed bytes stay readable), or dropped when that is
//! nothing; any other session idle for
//! `ozone.om.open.key.expire.threshold` is dropped and its blocks go to
//! the deletion service (and so off the datanodes).

use ozone_common::names::KeyPath;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use ozone_proto::KeyBlock;

use crate::block_recovery::RecoveredBlock;
use crate::metrics::Metrics;
use crate::replication::ReplicationManager;
use crate::store::{OmError, OmStore};

/// When sessions are cleaned up.
#[derive(Debug, Clone, Copy)]
pub struct OpenKeyCleanup {
    /// Pause between two passes.
    pub interval: Duration,
    /// A session idle this long is dropped (no synced data).
    pub expire: Duration,
    /// A file being written idle this long is closed (lease recovery).
    pub lease_hard_limit: Duration,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cleaned {
    /// Sessions dropped, their blocks queued for deletion.
    pub aborted: u64,
    /// Files closed by lease recovery.
    pub closed: u64,
    /// Sessions still open after the pass.
    pub open: u64,
}

/// One pass over the open sessions at time `now` (ms since the epoch);
/// `recover` runs block recovery of the block being written.
pub(crate) fn pass(
    store: &OmStore,
    cfg: &OpenKeyCleanup,
    now: u64,
    recover: &dyn Fn(&KeyBlock) -> Option<RecoveredBlock>,
) -> Result<Cleaned, OmError> {
    let mut done = Cleaned::default();
    for (id, s) in store.sessions()? {
        let idle = now.saturating_sub(s.created_ms.max(s.modified_ms));
        let writing = s.parent_id != 0 && !(s.synced_blocks.is_empty() && s.blocks.is_empty());
        if writing && idle >= cfg.lease_hard_limit.as_millis() as u64 {
            // Lease recovery acts on whoever writes the path: only when
            // that is this session.
            let path = KeyPath::new(&s.volume, &s.bucket, &s.name);
            let recovered = if store.fs_holds(id, &s)? {
                let view = store.lookup_key(path)?;
                let block = match view.blocks.last() {
                    Some(last) if view.last_block_open => recover(last),
                    _ => None,
                };
                if view.size == 0 && block.is_none() {
                    // Nothing a reader could have seen: as an unsynced
                    // session past its expiry.
                    Ok((0, false))
                } else {
                    store.fs_recover_lease(path, now, block.as_ref())
                }
            } else {
                Ok((0, false))
            };
            match recovered {
                Ok((len, true)) => {
                    tracing::info!(volume = %s.volume, bucket = %s.bucket, path = %s.name, length = len,
                        "lease hard limit: file closed");
                    done.closed += 1;
                }
                // The path holds a file this session does not write (its
                // directory was deleted and made again), or the directory is
                // gone: the session is an orphan, nothing of it to keep.
                Ok((_, false)) | Err(OmError::NotFound(_)) => {
                    store.abort_session(id)?;
                    done.aborted += 1;
                }
                Err(e) => return Err(e),
            }
        } else if !writing && idle >= cfg.expire.as_millis() as u64 {
            tracing::info!(volume = %s.volume, bucket = %s.bucket, key = %s.name, idle_ms = idle,
                "open key expired: write session dropped, its blocks deleted");
            store.abort_session(id)?;
            done.aborted += 1;
        } else {
            done.open += 1;
        }
    }
    Ok(done)
}

/// Runs passes until `stop` turns true.
pub(crate) async fn run(
    store: Arc<OmStore>,
    cfg: OpenKeyCleanup,
    metrics: Arc<Metrics>,
    replication: Arc<ReplicationManager>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let s = store.clone();
        let rm = replication.clone();
        let rt = tokio::runtime::Handle::current();
        let recover = move |b: &KeyBlock| rt.block_on(rm.recover_block(b));
        let one = move || pass(&s, &cfg, ozone_common::now_ms(), &recover);
        match tokio::task::spawn_blocking(one).await {
            Ok(Ok(c)) => {
                metrics.open_keys_aborted.inc_by(c.aborted);
                metrics.open_keys_lease_closed.inc_by(c.closed);
                metrics.open_keys.set(c.open as i64);
            }
            Ok(Err(e)) => tracing::warn!("open-key cleanup failed: {e}"),
            Err(e) => tracing::warn!("open-key cleanup panicked: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_proto::{BucketLayout, KeyBlock, KeyInfo};

    /// The block size allocations reserve in these tests.
    const BS: u64 = 256 << 20;

    fn template(bucket: &str, name: &str) -> KeyInfo {
        KeyInfo {
            volume: "vol".into(),
            bucket: bucket.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn abandoned_sessions_are_dropped_and_synced_files_closed() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.redb")).unwrap();
        s.create_volume("vol", 1).unwrap();
        s.create_bucket("vol", "obj", BucketLayout::ObjectStore, 1)
            .unwrap();
        s.create_bucket("vol", "fsb", BucketLayout::FileSystemOptimized, 1)
            .unwrap();
        let t0 = ozone_common::now_ms();
        // An object-store write that died after its first block.
        let dead = s.open_key(&template("obj", "dead"), false, t0).unwrap();
        s.allocate_block(dead, &["dn1".into()], BS, &[], None)
            .unwrap();
        // A WAL-like file: a block, hsynced to 100 bytes, then its writer died.
        let wal = s.open_key(&template("fsb", "wal/1"), false, t0).unwrap();
        let b = s
            .allocate_block(wal, &["dn1".into()], BS, &[], None)
            .unwrap();
        let synced = KeyBlock {
            length: 100,
            ..b.clone()
        };
        s.hsync_key(wal, &[synced], 100, None).unwrap();
        // A file being written that never synced.
        let unsynced = s.open_key(&template("fsb", "tmp/x"), false, t0).unwrap();
        s.allocate_block(unsynced, &["dn2".into()], BS, &[], None)
            .unwrap();

        let cfg = OpenKeyCleanup {
            interval: Duration::from_secs(1),
            expire: Duration::from_secs(60),
            lease_hard_limit: Duration::from_secs(120),
        };
        let now = ozone_common::now_ms();
        // Young sessions stay.
        assert_eq!(
            pass(&s, &cfg, now, &|_| None).unwrap(),
            Cleaned {
                aborted: 0,
                closed: 0,
                open: 3
            }
        );
        // Past the expiry, before the hard limit: the object-store write
        // goes; files being written wait for the hard limit.
        let c = pass(&s, &cfg, now + 90_000, &|_| None).unwrap();
        assert_eq!((c.aborted, c.closed, c.open), (1, 0, 2));
        assert!(s.session(dead).is_err());
        assert!(
            s.lookup_key(KeyPath::new("vol", "obj", "dead")).is_err(),
            "never committed"
        );
        // Past the hard limit: the WAL is closed at what block recovery
        // found its replicas serve (hflushed past the hsync); the file
        // no reader could see anything of is dropped.
        let recovered = |k: &KeyBlock| {
            (k.block == b.block).then(|| RecoveredBlock {
                id: b.block.unwrap(),
                length: 300,
                replicas: vec!["dn1".into()],
            })
        };
        let c = pass(&s, &cfg, now + 200_000, &recovered).unwrap();
        assert_eq!((c.aborted, c.closed, c.open), (1, 1, 0));
        assert!(s.session(unsynced).is_err());
        let f = s.lookup_key(KeyPath::new("vol", "fsb", "wal/1")).unwrap();
        assert_eq!((f.size, f.blocks.len(), f.last_block_open), (300, 1, false));
        assert!(s.fs_is_closed(KeyPath::new("vol", "fsb", "wal/1")).unwrap());
        // The dropped sessions' blocks are queued for deletion on their datanodes.
        assert_eq!(s.pending_deletes("dn1", 100).unwrap().len(), 1);
        assert_eq!(s.pending_deletes("dn2", 100).unwrap().len(), 1);
        // The name of the dropped file is free again.
        s.open_key(&template("fsb", "tmp/x"), true, now).unwrap();
    }

    #[test]
    fn an_orphan_session_is_dropped_not_lease_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.redb")).unwrap();
        s.create_volume("vol", 1).unwrap();
        s.create_bucket("vol", "fsb", BucketLayout::FileSystemOptimized, 1)
            .unwrap();
        let t0 = ozone_common::now_ms();
        // A writer hsyncs d/wal, then its directory is deleted and made
        // again, and another writer is now writing d/wal there.
        let old = s.open_key(&template("fsb", "d/wal"), false, t0).unwrap();
        let b = s
            .allocate_block(old, &["dn1".into()], BS, &[], None)
            .unwrap();
        let synced = KeyBlock {
            length: 10,
            ..b.clone()
        };
        s.hsync_key(old, &[synced], 10, None).unwrap();
        s.fs_delete(KeyPath::new("vol", "fsb", "d"), true).unwrap();
        // (The new writer was active 20 s before the pass.)
        let new = s
            .open_key(&template("fsb", "d/wal"), false, t0 + 100_000)
            .unwrap();
        s.allocate_block(new, &["dn2".into()], BS, &[], None)
            .unwrap();
        // The old one is past the hard limit, the new one not.
        let cfg = OpenKeyCleanup {
            interval: Duration::from_secs(1),
            expire: Duration::from_secs(3600),
            lease_hard_limit: Duration::from_secs(60),
        };
        let c = pass(&s, &cfg, t0 + 120_000, &|_| None).unwrap();
        assert_eq!((c.aborted, c.closed, c.open), (1, 0, 1));
        assert!(s.session(old).is_err());
        // The new writer keeps writing: its file was not closed under it.
        assert!(s.session(new).is_ok());
        assert!(!s.fs_is_closed(KeyPath::new("vol", "fsb", "d/wal")).unwrap());
        assert_eq!(s.pending_deletes("dn1", 100).unwrap().len(), 1);
        assert!(s.pending_deletes("dn2", 100).unwrap().is_empty());
    }
}
