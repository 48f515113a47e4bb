//! How every process names a block in its maps and tables: (container id,
//! local id). One definition for the OM, the datanode and the client.

use ozone_proto::BlockId;

/// A block as (container id, local id); a redb key as it is.
pub type BlockKey = (u64, u64);

/// The key of a block id.
pub fn key_of(id: &BlockId) -> BlockKey {
    (id.container_id, id.local_id)
}
