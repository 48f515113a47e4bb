//! Group commit: every write transaction commits without an fsync
//! (redb's `Durability::None`), and a reply is sent only after a later
//! durable commit has made it (and everything committed before it)
//! persistent. Concurrent operations share that durable commit, so one
//! fsync acknowledges many of them; acknowledged still means durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use redb::{Database, ReadableTable};

use super::OmError;
use super::tables::COUNTERS;

#[derive(Default)]
struct State {
    /// Commits made so far (not all durable).
    committed: u64,
    /// Commits known durable.
    durable: u64,
    /// A durable commit is under way.
    syncing: bool,
}

/// Tracks commits and makes them durable in groups.
#[derive(Default)]
pub(super) struct GroupCommit {
    state: Mutex<State>,
    cv: Condvar,
    /// Durable commits made (each one fsync).
    pub syncs: AtomicU64,
}

impl GroupCommit {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a commit made without durability.
    pub(super) fn committed(&self) {
        self.lock().committed += 1;
    }

    /// Returns once every commit recorded so far is durable: either a
    /// durable commit under way covers them, or this caller makes one.
    pub(super) fn wait(&self, db: &Database) -> Result<(), OmError> {
        let mut s = self.lock();
        let target = s.committed;
        loop {
            if s.durable >= target {
                return Ok(());
            }
            if s.syncing {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            s.syncing = true;
            let upto = s.committed;
            drop(s);
            let r = Self::durable_commit(db);
            s = self.lock();
            s.syncing = false;
            if r.is_ok() {
                s.durable = s.durable.max(upto);
                self.syncs.fetch_add(1, Ordering::Relaxed);
            }
            self.cv.notify_all();
            r?;
        }
    }

    /// A durable commit: persists every earlier non-durable commit.
    fn durable_commit(db: &Database) -> Result<(), OmError> {
        let txn = db.begin_write()?;
        {
            let mut t = txn.open_table(COUNTERS)?;
            let n = t.get("sync")?.map(|v| v.value()).unwrap_or(0);
            t.insert("sync", n + 1)?;
        }
        Ok(txn.commit()?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::OmStore;

    #[test]
    fn one_fsync_covers_every_commit_before_it() {
        let d = tempfile::tempdir().unwrap();
        let s = OmStore::open(&d.path().join("om.redb")).unwrap();
        // Nothing committed: nothing to sync.
        s.sync().unwrap();
        assert_eq!(s.syncs(), 0);
        for i in 0..3 {
            s.create_volume(&format!("vol{i}"), 1).unwrap();
        }
        s.sync().unwrap();
        assert_eq!(s.syncs(), 1);
        s.sync().unwrap();
        assert_eq!(s.syncs(), 1);
    }

    #[test]
    fn concurrent_waiters_share_one_fsync_and_lose_nothing() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("om.redb");
        let s = Arc::new(OmStore::open(&path).unwrap());
        let writers: Vec<_> = (0..8)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        s.create_volume(&format!("v{t}-{i}"), 1).unwrap();
                    }
                })
            })
            .collect();
        for t in writers {
            t.join().unwrap();
        }
        // Eight callers wait for the same 200 commits: one fsync covers them
        // all, whoever makes it; the others wait for it or find it done.
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || s.sync().unwrap())
            })
            .collect();
        for t in waiters {
            t.join().unwrap();
        }
        assert_eq!(s.syncs(), 1);
        drop(s);
        let s = OmStore::open(&path).unwrap();
        assert_eq!(s.list_volumes().unwrap().len(), 200);
    }
}
