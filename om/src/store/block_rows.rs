//! The replication manager's view of the OM database: every committed
//! block with its replicas and the row (key or file) that lists them, read
//! in one snapshot; and the one transaction that changes a block's replica
//! list (only if it is still what the manager saw).

use std::collections::HashSet;

use ozone_proto::{BlockId, KeyInfo};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable};

use super::tables::*;
use super::{OmError, OmStore, decode, id_only, replica_ids};
use ozone_common::block_key::{BlockKey, key_of};

/// Where a block's replica list is stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RowRef {
    /// An object-store key, `volume/bucket/name`.
    Key(String),
    /// A file of a file-system bucket: (parent id, name).
    File(u64, String),
}

/// A committed block as the replication manager sees it.
#[derive(Debug, Clone)]
pub(crate) struct BlockRow {
    /// Where its replica list is stored.
    pub row: RowRef,
    /// The block.
    pub id: BlockId,
    /// Its length.
    pub size: u64,
    /// Replicas it should have.
    pub replication: u32,
    /// Datanode ids listed as holding it.
    pub replicas: Vec<String>,
    /// The key or file, for reports.
    pub key: String,
    /// When the key was committed (ms since the epoch).
    pub committed_ms: u64,
}

/// One consistent read of everything the replication manager needs.
#[derive(Debug, Default)]
pub(crate) struct BlockSnapshot {
    /// Every block of a committed key or file.
    pub blocks: Vec<BlockRow>,
    /// Every block the OM knows (committed, being written, awaiting deletion).
    pub referenced: HashSet<BlockKey>,
    /// (datanode, block) pairs awaiting deletion.
    pub pending_deletes: HashSet<(String, u64, u64)>,
    /// Block local ids below this were allocated before the snapshot.
    pub allocated_below: u64,
}

fn rows_of(row: RowRef, key: &KeyInfo, shown: String, out: &mut BlockSnapshot) {
    for b in &key.blocks {
        let Some(id) = b.block else { continue };
        out.referenced.insert(key_of(&id));
        out.blocks.push(BlockRow {
            row: row.clone(),
            id,
            size: b.length,
            replication: (key.replication.max(1)) as u32,
            replicas: replica_ids(b),
            key: shown.clone(),
            committed_ms: key.modified_ms.max(key.created_ms),
        });
    }
}

impl OmStore {
    /// Every committed block with its replicas, the blocks of open sessions
    /// and those awaiting deletion, in one read transaction.
    pub(crate) fn block_snapshot(&self) -> Result<BlockSnapshot, OmError> {
        let txn = self.db.begin_read()?;
        let mut out = BlockSnapshot {
            allocated_below: txn
                .open_table(COUNTERS)?
                .get("local")?
                .map_or(0, |v| v.value())
                + 1,
            ..Default::default()
        };
        for row in txn.open_table(KEYS)?.iter()? {
            let (k, v) = row?;
            let key: KeyInfo = decode(v.value())?;
            let name = k.value().to_string();
            rows_of(
                RowRef::Key(name.clone()),
                &key,
                format!("/{name}"),
                &mut out,
            );
        }
        for row in txn.open_table(FS_FILES)?.iter()? {
            let (k, v) = row?;
            let (parent, name) = k.value();
            let key: KeyInfo = decode(v.value())?;
            let shown = format!("/{}/{}/…/{name}", key.volume, key.bucket);
            rows_of(
                RowRef::File(parent, name.to_string()),
                &key,
                shown,
                &mut out,
            );
        }
        for row in txn.open_table(OPEN_KEYS)?.iter()? {
            let session: KeyInfo = decode(row?.1.value())?;
            for b in session.blocks.iter().chain(&session.synced_blocks) {
                out.referenced.extend(b.block.as_ref().map(key_of));
            }
        }
        for row in txn.open_table(PENDING_DELETES)?.iter()? {
            let entry = row?;
            let (dn, c, l) = entry.0.value();
            out.referenced.insert((c, l));
            out.pending_deletes.insert((dn.to_string(), c, l));
        }
        Ok(out)
    }

    /// Sets the replicas of block `id` in `row` to `new`, if they are still
    /// `expected`; the replicas on `delete_on` are queued for deletion and
    /// their bad-replica records dropped. False when the row or block is gone
    /// or its replicas changed meanwhile (nothing is changed then).
    pub(crate) fn set_replicas(
        &self,
        row: &RowRef,
        id: &BlockId,
        expected: &[String],
        new: &[String],
        delete_on: &[String],
    ) -> Result<bool, OmError> {
        let txn = self.write()?;
        let updated = {
            let mut keys = txn.open_table(KEYS)?;
            let mut files = txn.open_table(FS_FILES)?;
            let stored = match row {
                RowRef::Key(k) => keys.get(k.as_str())?.map(|v| v.value().to_vec()),
                RowRef::File(p, n) => files.get((*p, n.as_str()))?.map(|v| v.value().to_vec()),
            };
            let Some(bytes) = stored else {
                return Ok(false);
            };
            let mut key: KeyInfo = decode(&bytes)?;
            let Some(b) = key.blocks.iter_mut().find(|b| b.block.as_ref() == Some(id)) else {
                return Ok(false);
            };
            if replica_ids(b) != expected {
                return Ok(false);
            }
            b.replicas = new.iter().map(|r| id_only(r)).collect();
            let v = key.encode_to_vec();
            match row {
                RowRef::Key(k) => keys.insert(k.as_str(), v.as_slice())?,
                RowRef::File(p, n) => files.insert((*p, n.as_str()), v.as_slice())?,
            };
            let mut pending = txn.open_table(PENDING_DELETES)?;
            let mut bad = txn.open_table(BAD_REPLICAS)?;
            for dn in delete_on {
                pending.insert((dn.as_str(), id.container_id, id.local_id), 0u8)?;
                bad.remove((id.container_id, id.local_id, dn.as_str()))?;
            }
            true
        };
        self.commit(txn)?;
        Ok(updated)
    }

    /// Persists the operational state of datanode `id` (with its stored
    /// details, or alone before it ever registered).
    pub(crate) fn set_operational_state(
        &self,
        id: &str,
        state: ozone_proto::OperationalState,
    ) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(DATANODES)?;
            let mut dn: ozone_proto::DatanodeDetails = match t.get(id)? {
                Some(v) => decode(v.value())?,
                None => id_only(id),
            };
            dn.operational_state = state as i32;
            t.insert(id, dn.encode_to_vec().as_slice())?;
        }
        self.commit(txn)
    }

    /// Forgets the bad-replica record of `dn`'s replica of `id` (it was
    /// replaced or found healthy).
    pub(crate) fn clear_bad_replica(&self, id: &BlockId, dn: &str) -> Result<(), OmError> {
        let txn = self.write()?;
        txn.open_table(BAD_REPLICAS)?
            .remove((id.container_id, id.local_id, dn))?;
        self.commit(txn)
    }

    /// Every (block, datanode) with a bad-replica record.
    pub(crate) fn all_bad_replicas(&self) -> Result<crate::replication::BadReplicas, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(BAD_REPLICAS)?;
        let mut out = HashSet::new();
        for row in t.iter()? {
            let entry = row?;
            let (c, l, dn) = entry.0.value();
            out.insert(((c, l), dn.to_string()));
        }
        Ok(out)
    }

    /// Queues `dn`'s replicas of `ids` for deletion (orphans, excess).
    pub(crate) fn queue_replica_deletes(&self, dn: &str, ids: &[BlockKey]) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(PENDING_DELETES)?;
            for (c, l) in ids {
                t.insert((dn, *c, *l), 0u8)?;
            }
        }
        self.commit(txn)
    }
}
