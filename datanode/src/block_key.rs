//! How the datanode names a block locally.

use ozone_proto::BlockId;

/// Key of a block on this datanode: (container id, local id).
pub type BlockKey = (u64, u64);

/// The store key of a block id.
pub fn key_of(id: &BlockId) -> BlockKey {
    (id.container_id, id.local_id)
}
