//! Every table of the OM database, in one list. A table is opened only
//! through these definitions.

use redb::TableDefinition;

/// Volumes by name.
pub(crate) const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");
/// Buckets by `volume/bucket`.
pub(crate) const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
/// Committed object-store keys by `volume/bucket/name`.
pub(crate) const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");
/// Open write sessions by id.
pub(crate) const OPEN_KEYS: TableDefinition<u64, &[u8]> = TableDefinition::new("open_keys");
/// Registered datanodes by id.
pub(crate) const DATANODES: TableDefinition<&str, &[u8]> = TableDefinition::new("datanodes");
/// Container ids by pipeline (replica set).
pub(crate) const CONTAINERS: TableDefinition<&str, u64> =
    TableDefinition::new("pipeline_containers");
/// Named counters: id sequences, and `sync` (bumped by each durable commit).
pub(crate) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// Blocks each datanode must delete: (datanode, container, local id).
pub(crate) const PENDING_DELETES: TableDefinition<(&str, u64, u64), u8> =
    TableDefinition::new("pending_deletes");
/// Replicas reported bad: (container, local id, datanode) -> reason.
pub(crate) const BAD_REPLICAS: TableDefinition<(u64, u64, &str), &str> =
    TableDefinition::new("bad_replicas");

/// Directories: (parent id, name) -> `DirInfo`.
pub(crate) const FS_DIRS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("fs_dirs");
/// Directory object id -> parent id (ancestry checks after renames).
pub(crate) const FS_PARENTS: TableDefinition<u64, u64> = TableDefinition::new("fs_parents");
/// Files: (parent id, name) -> `KeyInfo` (its `name` is the file's own).
pub(crate) const FS_FILES: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("fs_files");
/// Files being written: (parent id, name) -> write session id.
pub(crate) const FS_OPEN: TableDefinition<(u64, &str), u64> = TableDefinition::new("fs_open_files");
/// Deleted directories whose subtrees are still being purged.
pub(crate) const FS_DELETED: TableDefinition<u64, u8> = TableDefinition::new("fs_deleted_dirs");

/// The bucket (`volume/bucket`) of each directory in `FS_DELETED`, whose
/// use its purge gives back.
pub(crate) const FS_DELETED_BUCKET: TableDefinition<u64, &str> =
    TableDefinition::new("fs_deleted_dir_buckets");

/// Creates every table that does not exist yet.
pub(crate) fn create_all(txn: &redb::WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(VOLUMES)?;
    txn.open_table(BUCKETS)?;
    txn.open_table(KEYS)?;
    txn.open_table(OPEN_KEYS)?;
    txn.open_table(DATANODES)?;
    txn.open_table(CONTAINERS)?;
    txn.open_table(COUNTERS)?;
    txn.open_table(PENDING_DELETES)?;
    txn.open_table(BAD_REPLICAS)?;
    txn.open_table(FS_DIRS)?;
    txn.open_table(FS_PARENTS)?;
    txn.open_table(FS_FILES)?;
    txn.open_table(FS_OPEN)?;
    txn.open_table(FS_DELETED)?;
    txn.open_table(FS_DELETED_BUCKET)?;
    Ok(())
}
