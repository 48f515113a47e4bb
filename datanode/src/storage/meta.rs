//! The crash-safe table of committed blocks: `<metadata dir>/datanode.redb`,
//! one row per committed block (its `BlockData`: length, chunks with the
//! key's and the fine checksums).

use std::path::Path;

use ozone_proto::BlockData;
use prost::Message;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::error::{StorageError, io_err, meta_err};
use ozone_common::block_key::BlockKey;

const BLOCKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("blocks");

/// The committed-block table.
pub(crate) struct MetaTable {
    db: redb::Database,
}

impl MetaTable {
    /// Opens (or creates) the table in `metadata_dir`.
    pub(crate) fn open(metadata_dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(metadata_dir).map_err(io_err(metadata_dir))?;
        let db = redb::Database::create(metadata_dir.join("datanode.redb")).map_err(meta_err)?;
        let txn = db.begin_write().map_err(meta_err)?;
        txn.open_table(BLOCKS).map_err(meta_err)?;
        txn.commit().map_err(meta_err)?;
        Ok(Self { db })
    }

    /// Calls `f` with every committed block.
    pub(crate) fn for_each(&self, mut f: impl FnMut(BlockData)) -> Result<(), StorageError> {
        let txn = self.db.begin_read().map_err(meta_err)?;
        let t = txn.open_table(BLOCKS).map_err(meta_err)?;
        for row in t.iter().map_err(meta_err)? {
            let (_, v) = row.map_err(meta_err)?;
            f(BlockData::decode(v.value()).map_err(meta_err)?);
        }
        Ok(())
    }

    /// The committed block `key`, if any.
    pub(crate) fn get(&self, key: BlockKey) -> Result<Option<BlockData>, StorageError> {
        let txn = self.db.begin_read().map_err(meta_err)?;
        let t = txn.open_table(BLOCKS).map_err(meta_err)?;
        match t.get(key).map_err(meta_err)? {
            Some(v) => Ok(Some(BlockData::decode(v.value()).map_err(meta_err)?)),
            None => Ok(None),
        }
    }

    /// Records a committed block durably (fsynced when this returns).
    pub(crate) fn insert(&self, key: BlockKey, block: &BlockData) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(meta_err)?;
        {
            let mut t = txn.open_table(BLOCKS).map_err(meta_err)?;
            t.insert(key, block.encode_to_vec().as_slice())
                .map_err(meta_err)?;
        }
        txn.commit().map_err(meta_err)
    }

    /// Removes blocks in one transaction; returns the bytes they held.
    pub(crate) fn remove(&self, keys: &[BlockKey]) -> Result<u64, StorageError> {
        let txn = self.db.begin_write().map_err(meta_err)?;
        let mut freed = 0u64;
        {
            let mut t = txn.open_table(BLOCKS).map_err(meta_err)?;
            for &key in keys {
                if let Some(v) = t.remove(key).map_err(meta_err)? {
                    freed += BlockData::decode(v.value()).map(|b| b.size).unwrap_or(0);
                }
            }
        }
        txn.commit().map_err(meta_err)?;
        Ok(freed)
    }
}
