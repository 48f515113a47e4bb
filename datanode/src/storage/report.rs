//! What changed in the store since the last replica report: replicas
//! committed, deleted and found damaged. The heartbeat takes it; a report
//! the OM did not receive is put back.

use std::sync::Mutex;

use ozone_proto::{BlockId, ReplicaReport};

/// Changes waiting for the next incremental replica report.
#[derive(Debug, Default)]
pub struct ReportLog {
    pending: Mutex<ReplicaReport>,
}

impl ReportLog {
    fn with<T>(&self, f: impl FnOnce(&mut ReplicaReport) -> T) -> T {
        f(&mut self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A replica was committed here.
    pub fn added(&self, id: BlockId) {
        self.with(|r| add(r, id));
    }

    /// Replicas were deleted here.
    pub fn removed(&self, ids: &[BlockId]) {
        self.with(|r| ids.iter().for_each(|id| remove(r, *id)));
    }

    /// A replica was found damaged.
    pub fn damaged(&self, id: BlockId) {
        self.with(|r| damage(r, id));
    }

    /// Takes the changes so far (an incremental report), leaving none.
    pub fn take(&self) -> ReplicaReport {
        self.with(std::mem::take)
    }

    /// Drops the changes so far (a full report is about to replace them).
    pub fn clear(&self) {
        self.with(|r| *r = ReplicaReport::default());
    }

    /// Puts back an incremental report the OM did not receive; the changes
    /// made since override it.
    pub fn put_back(&self, mut report: ReplicaReport) {
        self.with(|r| {
            let later = std::mem::take(r);
            report.full = false;
            later
                .replicas
                .into_iter()
                .for_each(|id| add(&mut report, id));
            later
                .removed
                .into_iter()
                .for_each(|id| remove(&mut report, id));
            later
                .damaged
                .into_iter()
                .for_each(|id| damage(&mut report, id));
            *r = report;
        });
    }
}

// Each change cancels earlier ones of the same block, so the report holds
// the last state of every block whatever order the OM applies it in.
fn add(r: &mut ReplicaReport, id: BlockId) {
    r.removed.retain(|x| *x != id);
    r.damaged.retain(|x| *x != id);
    r.replicas.retain(|x| *x != id);
    r.replicas.push(id);
}

fn remove(r: &mut ReplicaReport, id: BlockId) {
    r.replicas.retain(|x| *x != id);
    r.damaged.retain(|x| *x != id);
    r.removed.retain(|x| *x != id);
    r.removed.push(id);
}

fn damage(r: &mut ReplicaReport, id: BlockId) {
    r.replicas.retain(|x| *x != id);
    r.removed.retain(|x| *x != id);
    r.damaged.retain(|x| *x != id);
    r.damaged.push(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> BlockId {
        BlockId {
            container_id: 1,
            local_id: n,
            commit_seq: 0,
        }
    }

    #[test]
    fn a_report_put_back_comes_before_later_changes() {
        let log = ReportLog::default();
        log.added(id(1));
        log.removed(&[id(2)]);
        let first = log.take();
        assert_eq!(first.replicas, [id(1)]);
        assert!(log.take().replicas.is_empty());
        log.added(id(3));
        log.damaged(id(4));
        log.put_back(first);
        let r = log.take();
        assert_eq!(r.replicas, [id(1), id(3)]);
        assert_eq!(r.removed, [id(2)]);
        assert_eq!(r.damaged, [id(4)]);
        // A replica replaced in place (deleted, copied again) ends present.
        log.damaged(id(5));
        log.removed(&[id(5)]);
        log.added(id(5));
        let r = log.take();
        assert_eq!(r.replicas, [id(5)]);
        assert!(r.removed.is_empty() && r.damaged.is_empty());
    }
}
