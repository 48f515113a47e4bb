//! Volumes, buckets, object-store keys and their write sessions,
//! datanodes, blocks awaiting deletion and reported bad replicas.

use ozone_common::names::KeyPath;
use ozone_proto::{
    BlockId, BucketInfo, BucketLayout, DatanodeDetails, KeyBlock, KeyInfo, VolumeInfo,
};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable};

use ozone_common::token::TokenSigner;

use super::quota::Usage;
use super::tables::*;
use super::{OmError, OmStore, bucket_key, decode, id_only, key_key};

impl OmStore {
    /// Creates a volume without an owner.
    #[cfg(test)]
    pub(crate) fn create_volume(&self, name: &str, now: u64) -> Result<VolumeInfo, OmError> {
        self.create_volume_owned(name, "", now)
    }

    /// Creates a volume owned by `owner` (namespace/serviceaccount).
    pub(crate) fn create_volume_owned(
        &self,
        name: &str,
        owner: &str,
        now: u64,
    ) -> Result<VolumeInfo, OmError> {
        let txn = self.write()?;
        let info = VolumeInfo {
            name: name.to_string(),
            created_ms: now,
            owner: owner.to_string(),
            ..Default::default()
        };
        {
            let mut t = txn.open_table(VOLUMES)?;
            if t.get(name)?.is_some() {
                return Err(OmError::AlreadyExists(format!("volume /{name}")));
            }
            t.insert(name, info.encode_to_vec().as_slice())?;
        }
        self.commit(txn)?;
        Ok(info)
    }

    /// Every volume, by name.
    pub(crate) fn list_volumes(&self) -> Result<Vec<VolumeInfo>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(VOLUMES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            out.push(decode(row?.1.value())?);
        }
        Ok(out)
    }

    /// Creates a bucket in an existing volume, without an owner.
    #[cfg(test)]
    pub(crate) fn create_bucket(
        &self,
        volume: &str,
        name: &str,
        layout: BucketLayout,
        now: u64,
    ) -> Result<BucketInfo, OmError> {
        self.create_bucket_owned(volume, name, layout, "", now)
    }

    /// Creates a bucket owned by `owner` in an existing volume.
    pub(crate) fn create_bucket_owned(
        &self,
        volume: &str,
        name: &str,
        layout: BucketLayout,
        owner: &str,
        now: u64,
    ) -> Result<BucketInfo, OmError> {
        let txn = self.write()?;
        let fs = layout == BucketLayout::FileSystemOptimized;
        let info = BucketInfo {
            volume: volume.to_string(),
            name: name.to_string(),
            created_ms: now,
            layout: if fs {
                BucketLayout::FileSystemOptimized
            } else {
                BucketLayout::ObjectStore
            } as i32,
            object_id: if fs { Self::next(&txn, "object")? } else { 0 },
            owner: owner.to_string(),
            ..Default::default()
        };
        {
            if txn.open_table(VOLUMES)?.get(volume)?.is_none() {
                return Err(OmError::NotFound(format!("volume /{volume}")));
            }
            Self::check_bucket_room(&txn, volume)?;
            let mut t = txn.open_table(BUCKETS)?;
            let k = bucket_key(volume, name);
            if t.get(k.as_str())?.is_some() {
                return Err(OmError::AlreadyExists(format!("bucket /{k}")));
            }
            t.insert(k.as_str(), info.encode_to_vec().as_slice())?;
        }
        self.commit(txn)?;
        Ok(info)
    }

    /// Buckets of a volume.
    pub(crate) fn list_buckets(&self, volume: &str) -> Result<Vec<BucketInfo>, OmError> {
        let txn = self.db.begin_read()?;
        if txn.open_table(VOLUMES)?.get(volume)?.is_none() {
            return Err(OmError::NotFound(format!("volume /{volume}")));
        }
        let t = txn.open_table(BUCKETS)?;
        let lo = format!("{volume}/");
        let hi = format!("{volume}0"); // '0' follows '/'
        let mut out = Vec::new();
        for row in t.range(lo.as_str()..hi.as_str())? {
            out.push(decode(row?.1.value())?);
        }
        Ok(out)
    }

    pub(crate) fn check_bucket(
        txn: &redb::ReadTransaction,
        volume: &str,
        bucket: &str,
    ) -> Result<(), OmError> {
        if txn.open_table(VOLUMES)?.get(volume)?.is_none() {
            return Err(OmError::NotFound(format!("volume /{volume}")));
        }
        let k = bucket_key(volume, bucket);
        if txn.open_table(BUCKETS)?.get(k.as_str())?.is_none() {
            return Err(OmError::NotFound(format!("bucket /{k}")));
        }
        Ok(())
    }

    pub(crate) fn next(txn: &redb::WriteTransaction, counter: &str) -> Result<u64, OmError> {
        let mut t = txn.open_table(COUNTERS)?;
        let n = t.get(counter)?.map(|v| v.value()).unwrap_or(0) + 1;
        t.insert(counter, n)?;
        Ok(n)
    }

    /// Opens a write session for a key (its bucket must exist). `template`
    /// carries the key's names and settings; returns the session id. With
    /// `exclusive` an existing key (in a file-system bucket also one being
    /// written) is an error. In a file-system bucket missing parent
    /// directories are made and the name is held until commit.
    pub(crate) fn open_key(
        &self,
        template: &KeyInfo,
        exclusive: bool,
        now: u64,
    ) -> Result<u64, OmError> {
        // The session's start, for the open-key cleanup.
        let template = &KeyInfo {
            created_ms: now,
            ..template.clone()
        };
        self.check_room(template)?;
        if let Some(root) = self.fs_root(&template.volume, &template.bucket)? {
            return self.fs_create(root, template, exclusive, now);
        }
        if exclusive {
            match self.lookup_key(KeyPath::new(
                &template.volume,
                &template.bucket,
                &template.name,
            )) {
                Ok(_) => {
                    return Err(OmError::AlreadyExists(format!(
                        "key /{}",
                        key_key(&template.volume, &template.bucket, &template.name)
                    )));
                }
                Err(OmError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let txn = self.write()?;
        let id = Self::next(&txn, "session")?;
        txn.open_table(OPEN_KEYS)?
            .insert(id, template.encode_to_vec().as_slice())?;
        self.commit(txn)?;
        Ok(id)
    }

    /// The open session `id`.
    pub(crate) fn session(&self, id: u64) -> Result<KeyInfo, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(OPEN_KEYS)?;
        match t.get(id)? {
            Some(v) => decode(v.value()),
            None => Err(OmError::NotFound(format!("open key session {id}"))),
        }
    }

    /// Allocates a block on `replicas` (datanode ids) for session `id`,
    /// reserves its space (see [`OmStore::reserve_block`]: `block_size`
    /// bytes, or fewer near a quota) and records it in the session. In a
    /// file-system bucket, `previous` (the blocks the writer has finished,
    /// with committed receipts when `receipts` is on) becomes what readers
    /// see, unless an hsync already showed them more.
    pub(crate) fn allocate_block(
        &self,
        id: u64,
        replicas: &[String],
        block_size: u64,
        previous: &[KeyBlock],
        receipts: Option<&TokenSigner>,
    ) -> Result<KeyBlock, OmError> {
        match self.allocate_block_in(id, replicas, block_size, previous, receipts) {
            Err(OmError::QuotaExceeded(m)) => {
                // Refused: the write ends, its blocks are deleted and its
                // reservation given back (as for a commit over a quota).
                self.abort_session(id)?;
                Err(OmError::QuotaExceeded(m))
            }
            r => r,
        }
    }

    fn allocate_block_in(
        &self,
        id: u64,
        replicas: &[String],
        block_size: u64,
        previous: &[KeyBlock],
        receipts: Option<&TokenSigner>,
    ) -> Result<KeyBlock, OmError> {
        let txn = self.write()?;
        let block = {
            let mut open = txn.open_table(OPEN_KEYS)?;
            let mut session: KeyInfo = match open.get(id)? {
                Some(v) => decode(v.value())?,
                None => return Err(OmError::NotFound(format!("open key session {id}"))),
            };
            let finished: u64 = previous.iter().map(|b| b.length).sum();
            if session.parent_id != 0 && !previous.is_empty() && finished >= session.size {
                // HDFS's addBlock(previous): the finished blocks are
                // committed on every replica, so they are also where lease
                // recovery closes the file.
                session.synced_blocks =
                    Self::checked_blocks(&session, previous, finished, receipts, true)?;
                session.size = finished;
                session.last_block_open = false;
            }
            let mut sorted = replicas.to_vec();
            sorted.sort();
            let pipeline = sorted.join(",");
            let container = {
                let existing = txn
                    .open_table(CONTAINERS)?
                    .get(pipeline.as_str())?
                    .map(|v| v.value());
                match existing {
                    Some(c) => c,
                    None => {
                        let c = Self::next(&txn, "container")?;
                        txn.open_table(CONTAINERS)?.insert(pipeline.as_str(), c)?;
                        c
                    }
                }
            };
            let max_length = Self::reserve_block(&txn, &session, block_size)?;
            let local = Self::next(&txn, "local")?;
            let block = KeyBlock {
                block: Some(BlockId {
                    container_id: container,
                    local_id: local,
                    commit_seq: 0,
                }),
                offset: 0,
                length: 0,
                replicas: replicas.iter().map(|r| id_only(r)).collect(),
                max_length,
                ..Default::default()
            };
            session.blocks.push(block.clone());
            // The session's last activity, for the open-key cleanup.
            session.modified_ms = ozone_common::now_ms();
            open.insert(id, session.encode_to_vec().as_slice())?;
            block
        };
        self.commit(txn)?;
        Ok(block)
    }

    pub(crate) fn queue_deletes(
        txn: &redb::WriteTransaction,
        blocks: &[KeyBlock],
    ) -> Result<(), OmError> {
        let mut t = txn.open_table(PENDING_DELETES)?;
        for b in blocks {
            let Some(id) = &b.block else { continue };
            for r in &b.replicas {
                t.insert((r.id.as_str(), id.container_id, id.local_id), 0u8)?;
            }
        }
        Ok(())
    }

    /// Commits session `id`: the key becomes visible with `blocks` (which
    /// must be blocks allocated to the session, with their final lengths,
    /// and with `receipts`, the datanodes' receipts for those lengths) in
    /// one transaction; the session's reserved space becomes the key's
    /// use. A previous key of that name and the session's unused blocks are
    /// queued for deletion.
    pub(crate) fn commit_key(
        &self,
        id: u64,
        blocks: &[KeyBlock],
        size: u64,
        receipts: Option<&TokenSigner>,
        now: u64,
    ) -> Result<KeyInfo, OmError> {
        match self.commit_key_in(id, blocks, size, receipts, now) {
            Err(OmError::QuotaExceeded(m)) => {
                // Refused: the session ends and its blocks are deleted.
                self.abort_session(id)?;
                Err(OmError::QuotaExceeded(m))
            }
            r => r,
        }
    }

    fn commit_key_in(
        &self,
        id: u64,
        blocks: &[KeyBlock],
        size: u64,
        receipts: Option<&TokenSigner>,
        now: u64,
    ) -> Result<KeyInfo, OmError> {
        let txn = self.write()?;
        let key = {
            let mut open = txn.open_table(OPEN_KEYS)?;
            let session: KeyInfo = match open.remove(id)? {
                Some(v) => decode(v.value())?,
                None => return Err(OmError::NotFound(format!("open key session {id}"))),
            };
            let committed = Self::checked_blocks(&session, blocks, size, receipts, true)?;
            Self::account(
                &txn,
                &session.volume,
                &session.bucket,
                Usage::reservation(&session).neg(),
            )?;
            let unused: Vec<KeyBlock> = session
                .blocks
                .iter()
                .filter(|a| !committed.iter().any(|c| c.block == a.block))
                .cloned()
                .collect();
            Self::queue_deletes(&txn, &unused)?;
            if session.parent_id != 0 {
                let file = KeyInfo {
                    size,
                    created_ms: now,
                    blocks: committed.clone(),
                    synced_blocks: Vec::new(),
                    ..session.clone()
                };
                drop(open);
                match Self::fs_commit(&txn, id, &file, now)? {
                    Some(k) => {
                        self.commit(txn)?;
                        return Ok(k);
                    }
                    None => {
                        // The parent directory was deleted while writing.
                        Self::queue_deletes(&txn, &committed)?;
                        self.commit(txn)?;
                        return Err(OmError::NotFound(format!(
                            "the parent directory of /{}/{}/{} was deleted while it was written",
                            session.volume, session.bucket, session.name
                        )));
                    }
                }
            }
            let kk = key_key(&session.volume, &session.bucket, &session.name);
            let mut keys = txn.open_table(KEYS)?;
            let old: Option<KeyInfo> = keys
                .get(kk.as_str())?
                .map(|v| decode(v.value()))
                .transpose()?;
            let key = KeyInfo {
                size,
                created_ms: old.as_ref().map_or(now, |o| o.created_ms),
                modified_ms: now,
                blocks: committed,
                ..session
            };
            let freed = old.as_ref().map(Usage::key).unwrap_or_default();
            Self::charge(
                &txn,
                &key.volume,
                &key.bucket,
                Usage::key(&key).plus(freed.neg()),
            )?;
            if let Some(old) = &old {
                Self::queue_deletes(&txn, &old.blocks)?;
            }
            keys.insert(kk.as_str(), key.encode_to_vec().as_slice())?;
            key
        };
        self.commit(txn)?;
        Ok(key)
    }

    /// `blocks` as a key's block list: each allocated to `session`, listed
    /// once, no longer than it was allocated for, offsets recomputed,
    /// lengths adding up to `size`. With `receipts` (block tokens on) each
    /// length needs every replica's receipt (`committed`: of a commit;
    /// otherwise a sync's will do).
    fn checked_blocks(
        session: &KeyInfo,
        blocks: &[KeyBlock],
        size: u64,
        receipts: Option<&TokenSigner>,
        committed: bool,
    ) -> Result<Vec<KeyBlock>, OmError> {
        let mut offset = 0u64;
        let mut out: Vec<KeyBlock> = Vec::with_capacity(blocks.len());
        for b in blocks {
            let bid = b
                .block
                .as_ref()
                .ok_or_else(|| OmError::Invalid("a block without id is listed".into()))?;
            let Some(alloc) = session
                .blocks
                .iter()
                .find(|a| a.block.as_ref() == Some(bid))
            else {
                return Err(OmError::Invalid(format!(
                    "block {} was not allocated to this key",
                    bid.display()
                )));
            };
            if out.iter().any(|c| c.block.as_ref() == Some(bid)) {
                return Err(OmError::Invalid(format!(
                    "block {} listed twice",
                    bid.display()
                )));
            }
            if alloc.max_length > 0 && b.length > alloc.max_length {
                return Err(OmError::Invalid(format!(
                    "block {} is said to hold {} bytes; it was allocated for at most {}",
                    bid.display(),
                    b.length,
                    alloc.max_length
                )));
            }
            if let Some(signer) = receipts {
                let ids: Vec<&str> = alloc.replicas.iter().map(|r| r.id.as_str()).collect();
                signer
                    .verify_receipts(&b.receipts, bid, &ids, b.length, committed)
                    .map_err(|e| {
                        OmError::Invalid(format!(
                            "block {} at {} bytes: {e}",
                            bid.display(),
                            b.length
                        ))
                    })?;
            }
            out.push(KeyBlock {
                block: Some(*bid),
                offset,
                length: b.length,
                replicas: alloc.replicas.clone(),
                ..Default::default()
            });
            offset = offset
                .checked_add(b.length)
                .ok_or_else(|| OmError::Invalid("key length overflows".into()))?;
        }
        if offset != size {
            return Err(OmError::Invalid(format!(
                "key size {size} does not match its blocks ({offset} bytes)"
            )));
        }
        Ok(out)
    }

    /// hsync of write session `id` (a file of a file-system bucket): from
    /// now on readers see `size` bytes in `blocks`.
    pub(crate) fn hsync_key(
        &self,
        id: u64,
        blocks: &[KeyBlock],
        size: u64,
        receipts: Option<&TokenSigner>,
    ) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let mut open = txn.open_table(OPEN_KEYS)?;
            let mut session: KeyInfo = match open.get(id)? {
                Some(v) => decode(v.value())?,
                None => {
                    return Err(OmError::NotFound(format!(
                        "open key session {id} (closed, or its lease was recovered)"
                    )));
                }
            };
            if session.parent_id == 0 {
                return Err(OmError::Precondition(format!(
                    "hsync needs a FILE_SYSTEM_OPTIMIZED bucket; /{}/{} is an object store",
                    session.volume, session.bucket
                )));
            }
            if size < session.size {
                return Err(OmError::Invalid(format!(
                    "hsync to {size} bytes after {} were synced",
                    session.size
                )));
            }
            session.synced_blocks = Self::checked_blocks(&session, blocks, size, receipts, false)?;
            session.size = size;
            session.last_block_open = true;
            session.modified_ms = ozone_common::now_ms();
            open.insert(id, session.encode_to_vec().as_slice())?;
        }
        self.commit(txn)?;
        Ok(())
    }

    /// A committed key (in a file-system bucket, the file at that path).
    pub(crate) fn lookup_key(&self, path: KeyPath<'_>) -> Result<KeyInfo, OmError> {
        let (volume, bucket, name) = path.parts();
        if let Some(root) = self.fs_root(volume, bucket)? {
            return self.fs_lookup(root, volume, bucket, name);
        }
        // `fs_root` found the volume and bucket.
        let txn = self.db.begin_read()?;
        let kk = key_key(volume, bucket, name);
        match txn.open_table(KEYS)?.get(kk.as_str())? {
            Some(v) => decode(v.value()),
            None => Err(OmError::NotFound(format!("key /{kk}"))),
        }
    }

    /// Keys of a bucket whose names start with `prefix`, after `start_after`.
    pub(crate) fn list_keys(
        &self,
        prefix: KeyPath<'_>,
        start_after: &str,
        limit: usize,
    ) -> Result<Vec<KeyInfo>, OmError> {
        let (volume, bucket, prefix) = prefix.parts();
        if let Some(root) = self.fs_root(volume, bucket)? {
            return self.fs_list_keys(root, prefix, start_after, limit);
        }
        let txn = self.db.begin_read()?;
        // `fs_root` found the volume and bucket.
        let t = txn.open_table(KEYS)?;
        let base = format!("{volume}/{bucket}/");
        let lo = format!("{base}{prefix}");
        let mut out = Vec::new();
        for row in t.range(lo.as_str()..)? {
            let (k, v) = row?;
            let Some(name) = k.value().strip_prefix(&base) else {
                break;
            };
            if !name.starts_with(prefix) {
                break;
            }
            if !start_after.is_empty() && name <= start_after {
                continue;
            }
            out.push(decode(v.value())?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes a committed key; its blocks are queued for deletion. In a
    /// file-system bucket: a file or an empty directory.
    pub(crate) fn delete_key(&self, path: KeyPath<'_>) -> Result<(), OmError> {
        let (volume, bucket, name) = path.parts();
        if self.fs_root(volume, bucket)?.is_some() {
            return self.fs_delete(KeyPath::new(volume, bucket, name), false);
        }
        let txn = self.write()?;
        let kk = key_key(volume, bucket, name);
        let key: KeyInfo = {
            let mut t = txn.open_table(KEYS)?;
            match t.remove(kk.as_str())? {
                Some(v) => decode(v.value())?,
                None => return Err(OmError::NotFound(format!("key /{kk}"))),
            }
        };
        Self::charge(&txn, volume, bucket, Usage::key(&key).neg())?;
        Self::queue_deletes(&txn, &key.blocks)?;
        self.commit(txn)?;
        Ok(())
    }

    /// Renames a key of an object-store bucket; the new name must be free.
    pub(crate) fn rename_key(&self, from: KeyPath<'_>, to: &str) -> Result<(), OmError> {
        let (volume, bucket, from) = from.parts();
        if self.fs_root(volume, bucket)?.is_some() {
            return self
                .fs_rename(
                    KeyPath::new(volume, bucket, from),
                    to,
                    ozone_common::now_ms(),
                )
                .map(|_| ());
        }
        let txn = self.write()?;
        {
            let mut t = txn.open_table(KEYS)?;
            let (fk, tk) = (key_key(volume, bucket, from), key_key(volume, bucket, to));
            if t.get(tk.as_str())?.is_some() {
                return Err(OmError::AlreadyExists(format!("key /{tk}")));
            }
            let mut key: KeyInfo = match t.remove(fk.as_str())? {
                Some(v) => decode(v.value())?,
                None => return Err(OmError::NotFound(format!("key /{fk}"))),
            };
            key.name = to.to_string();
            key.modified_ms = ozone_common::now_ms();
            t.insert(tk.as_str(), key.encode_to_vec().as_slice())?;
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Stores (or replaces) a datanode's details.
    pub(crate) fn put_datanode(&self, dn: &DatanodeDetails) -> Result<(), OmError> {
        let txn = self.write()?;
        txn.open_table(DATANODES)?
            .insert(dn.id.as_str(), dn.encode_to_vec().as_slice())?;
        self.commit(txn)?;
        Ok(())
    }

    /// Every datanode ever registered.
    pub(crate) fn datanodes(&self) -> Result<Vec<DatanodeDetails>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(DATANODES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            out.push(decode(row?.1.value())?);
        }
        Ok(out)
    }

    /// Up to `limit` blocks awaiting deletion on datanode `dn`.
    pub(crate) fn pending_deletes(&self, dn: &str, limit: usize) -> Result<Vec<BlockId>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(PENDING_DELETES)?;
        let mut out = Vec::new();
        for row in t.range((dn, 0u64, 0u64)..=(dn, u64::MAX, u64::MAX))? {
            let (k, _) = row?;
            let (_, c, l) = k.value();
            out.push(BlockId {
                container_id: c,
                local_id: l,
                commit_seq: 0,
            });
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Datanode ids with blocks awaiting deletion.
    pub(crate) fn datanodes_with_pending_deletes(&self) -> Result<Vec<String>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(PENDING_DELETES)?;
        let mut out: Vec<String> = Vec::new();
        for row in t.iter()? {
            let (k, _) = row?;
            let dn = k.value().0;
            if out.last().map(String::as_str) != Some(dn) {
                out.push(dn.to_string());
            }
        }
        Ok(out)
    }

    /// Removes blocks a datanode confirmed deleted.
    pub(crate) fn confirm_deletes(&self, dn: &str, ids: &[BlockId]) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(PENDING_DELETES)?;
            for id in ids {
                t.remove((dn, id.container_id, id.local_id))?;
            }
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Records that `dn`'s replica of `block` is bad.
    pub(crate) fn record_bad_replica(
        &self,
        block: &BlockId,
        dn: &str,
        reason: &str,
    ) -> Result<(), OmError> {
        let txn = self.write()?;
        txn.open_table(BAD_REPLICAS)?
            .insert((block.container_id, block.local_id, dn), reason)?;
        self.commit(txn)?;
        Ok(())
    }

    /// Datanode ids with a bad replica of `block`.
    pub(crate) fn bad_replicas(&self, block: &BlockId) -> Result<Vec<String>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(BAD_REPLICAS)?;
        let (c, l) = (block.container_id, block.local_id);
        let mut out = Vec::new();
        for row in t.range((c, l, "")..=(c, l, "\u{10ffff}"))? {
            out.push(row?.0.value().2.to_string());
        }
        Ok(out)
    }

    /// Open sessions, oldest first: (session id, key).
    pub(crate) fn sessions(&self) -> Result<Vec<(u64, KeyInfo)>, OmError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(OPEN_KEYS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    /// Drops an abandoned session; its blocks are queued for deletion.
    pub(crate) fn abort_session(&self, id: u64) -> Result<(), OmError> {
        let txn = self.write()?;
        let removed: Option<KeyInfo> = {
            let mut t = txn.open_table(OPEN_KEYS)?;
            let r = t.remove(id)?;
            match r {
                Some(v) => Some(decode(v.value())?),
                None => None,
            }
        };
        if let Some(s) = removed {
            Self::queue_deletes(&txn, &s.blocks)?;
            Self::fs_release(&txn, id, &s)?;
            Self::account(&txn, &s.volume, &s.bucket, Usage::reservation(&s).neg())?;
        }
        self.commit(txn)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block size allocations reserve in these tests.
    const BS: u64 = 256 << 20;

    fn template(name: &str) -> KeyInfo {
        KeyInfo {
            volume: "vol".into(),
            bucket: "buck".into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn key_lifecycle_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.redb")).unwrap();
        assert!(matches!(
            s.create_bucket("vol", "buck", BucketLayout::ObjectStore, 1),
            Err(OmError::NotFound(_))
        ));
        s.create_volume("vol", 1).unwrap();
        assert!(matches!(
            s.create_volume("vol", 1),
            Err(OmError::AlreadyExists(_))
        ));
        s.create_bucket("vol", "buck", BucketLayout::ObjectStore, 1)
            .unwrap();
        assert_eq!(s.list_buckets("vol").unwrap().len(), 1);

        let sid = s.open_key(&template("a/b"), false, 1).unwrap();
        let b1 = s
            .allocate_block(sid, &["dn1".into(), "dn2".into()], BS, &[], None)
            .unwrap();
        let b2 = s
            .allocate_block(sid, &["dn2".into(), "dn3".into()], BS, &[], None)
            .unwrap();
        assert_ne!(b1.block, b2.block);
        // Not visible before commit.
        assert!(matches!(
            s.lookup_key(KeyPath::new("vol", "buck", "a/b")),
            Err(OmError::NotFound(_))
        ));
        let mut c2 = b2.clone();
        c2.length = 10;
        // Wrong size is refused and keeps the session.
        assert!(
            s.commit_key(sid, std::slice::from_ref(&c2), 11, None, 2)
                .is_err()
        );
        assert_eq!(s.session(sid).unwrap().blocks.len(), 2);
        let sid = s.open_key(&template("a/b"), false, 1).unwrap();
        let b3 = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        let mut c3 = b3.clone();
        c3.length = 10;
        // A block of another session is refused.
        assert!(s.commit_key(sid, &[c2], 10, None, 2).is_err());
        let sid = s.open_key(&template("a/b"), false, 1).unwrap();
        let b4 = s
            .allocate_block(sid, &["dn1".into()], BS, &[], None)
            .unwrap();
        let b5 = s
            .allocate_block(sid, &["dn4".into()], BS, &[], None)
            .unwrap();
        let mut c5 = b5.clone();
        c5.length = 7;
        let k = s.commit_key(sid, &[c5], 7, None, 3).unwrap();
        assert_eq!(k.size, 7);
        assert_eq!(k.blocks[0].replicas[0].id, "dn4");
        // The unused block of the session is queued for deletion on dn1.
        let pend = s.pending_deletes("dn1", 100).unwrap();
        assert!(pend.contains(b4.block.as_ref().unwrap()));
        assert_eq!(
            s.lookup_key(KeyPath::new("vol", "buck", "a/b"))
                .unwrap()
                .size,
            7
        );
        assert_eq!(
            s.list_keys(KeyPath::new("vol", "buck", "a/"), "", 10)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            s.list_keys(KeyPath::new("vol", "buck", "b"), "", 10)
                .unwrap()
                .len(),
            0
        );
        s.delete_key(KeyPath::new("vol", "buck", "a/b")).unwrap();
        assert_eq!(s.pending_deletes("dn4", 10).unwrap().len(), 1);
        s.confirm_deletes("dn4", &s.pending_deletes("dn4", 10).unwrap())
            .unwrap();
        assert!(s.pending_deletes("dn4", 10).unwrap().is_empty());
        assert!(matches!(
            s.delete_key(KeyPath::new("vol", "buck", "a/b")),
            Err(OmError::NotFound(_))
        ));
        let _ = b3;
    }
}
