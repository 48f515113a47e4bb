//! The OM's persistent state in one redb database: volumes, buckets,
//! committed keys, open key sessions, the file-system tables, datanodes,
//! blocks awaiting deletion and reported bad replicas. Each operation is one
//! ACID transaction; replies wait for a group commit to make it durable.
//!
//! - `tables`: every table, in one list;
//! - `error`: [`OmError`] and [`StoreError`] (the database's failures, with
//!   their sources);
//! - `namespace`: volumes, buckets, object-store keys, sessions, datanodes,
//!   deletions, bad replicas;
//! - `fs`: directories and files of FILE_SYSTEM_OPTIMIZED buckets;
//! - `acl`: owners and ACL entries of volumes and buckets;
//! - `quota`: volume and bucket details and deletion, quotas and use;
//! - `block_rows`: the replication manager's view of every block;
//! - `group_commit`: one fsync for many transactions.

mod acl;
pub(crate) mod block_rows;
mod error;
pub(crate) mod fs;
mod group_commit;
mod namespace;
mod quota;
pub(crate) mod tables;

use std::path::Path;

use ozone_proto::{DatanodeDetails, KeyBlock};
use prost::Message;

pub(crate) use error::OmError;
use group_commit::GroupCommit;

pub(crate) fn bucket_key(volume: &str, bucket: &str) -> String {
    format!("{volume}/{bucket}")
}

pub(crate) fn key_key(volume: &str, bucket: &str, name: &str) -> String {
    format!("{volume}/{bucket}/{name}")
}

pub(crate) fn decode<M: Message + Default>(b: &[u8]) -> Result<M, OmError> {
    Ok(M::decode(b)?)
}

/// Replica ids of a key block (the OM stores ids; addresses are resolved
/// at lookup).
pub(crate) fn replica_ids(b: &KeyBlock) -> Vec<String> {
    b.replicas.iter().map(|r| r.id.clone()).collect()
}

pub(crate) fn id_only(id: &str) -> DatanodeDetails {
    DatanodeDetails {
        id: id.to_string(),
        ..Default::default()
    }
}

/// The OM database.
pub(crate) struct OmStore {
    pub(crate) db: redb::Database,
    group: GroupCommit,
}

impl OmStore {
    /// Opens or creates the database at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, OmError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let db = redb::Database::create(path)?;
        let txn = db.begin_write()?;
        tables::create_all(&txn)?;
        txn.commit()?;
        Ok(Self {
            db,
            group: GroupCommit::default(),
        })
    }

    /// A write transaction that commits without an fsync (see
    /// [`group_commit`]); [`Self::sync`] makes it durable.
    pub(crate) fn write(&self) -> Result<redb::WriteTransaction, OmError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None)?;
        Ok(txn)
    }

    /// Commits `txn` (not yet durable).
    pub(crate) fn commit(&self, txn: redb::WriteTransaction) -> Result<(), OmError> {
        txn.commit()?;
        self.group.committed();
        Ok(())
    }

    /// Makes every commit so far durable; concurrent callers share one
    /// fsync. Every reply of the OM waits for this.
    pub(crate) fn sync(&self) -> Result<(), OmError> {
        self.group.wait(&self.db)
    }

    /// Durable commits made since start (each one fsync).
    #[cfg(test)]
    pub(crate) fn syncs(&self) -> u64 {
        self.group.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }
}
