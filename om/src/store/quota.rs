//! Volume and bucket details, deletion, and quotas: each bucket row keeps
//! its use (bytes of committed keys with replicas counted, and names: keys,
//! files, directories) and the bytes reserved for blocks allocated to open
//! writes, updated in the transaction that changes them; a change that
//! would pass a bucket's or its volume's quota is refused (Ozone's space
//! and namespace quotas). Space is charged when a block is allocated (its
//! most bytes times its replicas, as Ozone does) and turned into use at
//! commit, so bytes on the datanodes are counted before they are written.

use ozone_common::names::KeyPath;
use ozone_proto::{BucketInfo, KeyInfo, ReplicationFactor, VolumeInfo};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable};

use super::tables::*;
use super::{OmError, OmStore, bucket_key, decode};

/// Replicas a key of `k`'s replication has.
pub(crate) fn factor(k: &KeyInfo) -> u64 {
    match ReplicationFactor::try_from(k.replication) {
        Ok(ReplicationFactor::One) => 1,
        _ => 3,
    }
}

/// Bytes a committed key holds on datanodes: its size times its replicas.
pub(crate) fn stored_bytes(k: &KeyInfo) -> u64 {
    k.size.saturating_mul(factor(k))
}

/// A change of a bucket's use: bytes, names and reserved bytes, either
/// sign.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: i64,
    pub names: i64,
    pub reserved: i64,
}

impl Usage {
    /// A key (or file) added.
    pub(crate) fn key(k: &KeyInfo) -> Self {
        Self {
            bytes: stored_bytes(k) as i64,
            names: 1,
            reserved: 0,
        }
    }

    /// `n` names added (negative: removed), no bytes.
    pub(crate) fn names(n: i64) -> Self {
        Self {
            names: n,
            ..Self::default()
        }
    }

    /// What write session `s` holds reserved: each allocated block's most
    /// bytes times the replicas.
    pub(crate) fn reservation(s: &KeyInfo) -> Self {
        let per = s.blocks.iter().map(|b| b.max_length).sum::<u64>();
        Self {
            reserved: per.saturating_mul(factor(s)).min(i64::MAX as u64) as i64,
            ..Self::default()
        }
    }

    /// The same change, undone.
    pub(crate) fn neg(self) -> Self {
        Self {
            bytes: -self.bytes,
            names: -self.names,
            reserved: -self.reserved,
        }
    }

    /// `self` followed by `o`.
    pub(crate) fn plus(self, o: Self) -> Self {
        Self {
            bytes: self.bytes + o.bytes,
            names: self.names + o.names,
            reserved: self.reserved + o.reserved,
        }
    }

    /// The change of what counts against a space quota.
    fn space(self) -> i64 {
        self.bytes + self.reserved
    }
}

fn add(used: u64, delta: i64) -> u64 {
    if delta >= 0 {
        used.saturating_add(delta as u64)
    } else {
        used.saturating_sub(delta.unsigned_abs())
    }
}

fn quota_text(n: u64, bytes: bool) -> String {
    if bytes {
        format!("{n} bytes")
    } else {
        format!("{n} names")
    }
}

/// Refuses `used + delta` over a set quota (growth only).
fn check(what: &str, quota: u64, used: u64, delta: i64, bytes: bool) -> Result<(), OmError> {
    if quota == 0 || delta <= 0 {
        return Ok(());
    }
    let after = add(used, delta);
    if after > quota {
        return Err(OmError::QuotaExceeded(format!(
            "{what} {} quota exceeded: {} used of {}, this change needs {delta} more",
            if bytes { "space" } else { "namespace" },
            quota_text(used, bytes),
            quota_text(quota, bytes),
        )));
    }
    Ok(())
}

/// What the buckets of a volume hold: used and reserved bytes, and how many
/// buckets there are.
#[derive(Debug, Default)]
struct VolumeUse {
    used: u64,
    reserved: u64,
    buckets: u64,
}

impl VolumeUse {
    /// What counts against the volume's space quota.
    fn space(&self) -> u64 {
        self.used.saturating_add(self.reserved)
    }
}

/// The use of every bucket of `volume`.
fn volume_use(
    buckets: &impl ReadableTable<&'static str, &'static [u8]>,
    volume: &str,
) -> Result<VolumeUse, OmError> {
    let lo = format!("{volume}/");
    let hi = format!("{volume}0"); // '0' follows '/'
    let mut u = VolumeUse::default();
    for row in buckets.range(lo.as_str()..hi.as_str())? {
        let b: BucketInfo = decode(row?.1.value())?;
        u.used = u.used.saturating_add(b.used_bytes);
        u.reserved = u.reserved.saturating_add(b.reserved_bytes);
        u.buckets += 1;
    }
    Ok(u)
}

/// What counts against a bucket's space quota: use and reservations.
fn bucket_space(b: &BucketInfo) -> u64 {
    b.used_bytes.saturating_add(b.reserved_bytes)
}

impl OmStore {
    /// Applies `u` to the use of bucket `volume/bucket` in `txn`, refusing
    /// growth past the bucket's or the volume's quota. A bucket that no
    /// longer exists is left alone.
    pub(crate) fn charge(
        txn: &redb::WriteTransaction,
        volume: &str,
        bucket: &str,
        u: Usage,
    ) -> Result<(), OmError> {
        Self::apply(txn, volume, bucket, u, true)
    }

    /// Applies `u` to the bucket's use without checking quotas (data that
    /// must be kept, such as a recovered file's synced bytes).
    pub(crate) fn account(
        txn: &redb::WriteTransaction,
        volume: &str,
        bucket: &str,
        u: Usage,
    ) -> Result<(), OmError> {
        Self::apply(txn, volume, bucket, u, false)
    }

    fn apply(
        txn: &redb::WriteTransaction,
        volume: &str,
        bucket: &str,
        u: Usage,
        enforce: bool,
    ) -> Result<(), OmError> {
        if u == Usage::default() {
            return Ok(());
        }
        let k = bucket_key(volume, bucket);
        let mut buckets = txn.open_table(BUCKETS)?;
        let Some(mut b) = buckets
            .get(k.as_str())?
            .map(|v| decode::<BucketInfo>(v.value()))
            .transpose()?
        else {
            return Ok(());
        };
        let what = format!("bucket /{k}");
        if enforce {
            check(&what, b.quota_in_bytes, bucket_space(&b), u.space(), true)?;
            check(
                &what,
                b.quota_in_namespace,
                b.used_namespace,
                u.names,
                false,
            )?;
        }
        let volumes = txn.open_table(VOLUMES)?;
        if enforce
            && u.space() > 0
            && let Some(v) = volumes.get(volume)?
        {
            let v: VolumeInfo = decode(v.value())?;
            if v.quota_in_bytes > 0 {
                let used = volume_use(&buckets, volume)?.space();
                check(
                    &format!("volume /{volume}"),
                    v.quota_in_bytes,
                    used,
                    u.space(),
                    true,
                )?;
            }
        }
        b.used_bytes = add(b.used_bytes, u.bytes);
        b.used_namespace = add(b.used_namespace, u.names);
        b.reserved_bytes = add(b.reserved_bytes, u.reserved);
        buckets.insert(k.as_str(), b.encode_to_vec().as_slice())?;
        Ok(())
    }

    /// Refuses a write into a bucket already at its space quota, or a new
    /// name into one at its namespace quota (before any data is sent; the
    /// commit checks again with the real size). A bucket without quotas
    /// costs one read.
    pub(crate) fn check_room(&self, key: &KeyInfo) -> Result<(), OmError> {
        let b = self.get_bucket(&key.volume, &key.bucket)?;
        let what = format!("bucket /{}/{}", key.volume, key.bucket);
        check(&what, b.quota_in_bytes, bucket_space(&b), 1, true)?;
        if b.quota_in_namespace == 0 {
            return Ok(());
        }
        // A name not there yet takes a slot (a path that cannot be made
        // fails later with its own error).
        let new_name = match self.lookup_key(KeyPath::new(&key.volume, &key.bucket, &key.name)) {
            Ok(_) => 0,
            Err(e @ (OmError::Meta(_) | OmError::Task(_))) => return Err(e),
            Err(_) => 1,
        };
        check(
            &what,
            b.quota_in_namespace,
            b.used_namespace,
            new_name,
            false,
        )
    }

    /// A volume with its use: the bytes of its buckets and their number.
    pub(crate) fn get_volume(&self, volume: &str) -> Result<VolumeInfo, OmError> {
        let txn = self.db.begin_read()?;
        let mut v: VolumeInfo = match txn.open_table(VOLUMES)?.get(volume)? {
            Some(v) => decode(v.value())?,
            None => return Err(OmError::NotFound(format!("volume /{volume}"))),
        };
        let u = volume_use(&txn.open_table(BUCKETS)?, volume)?;
        v.used_bytes = u.used;
        v.reserved_bytes = u.reserved;
        v.used_namespace = u.buckets;
        Ok(v)
    }

    /// A bucket with its quotas and use.
    pub(crate) fn get_bucket(&self, volume: &str, bucket: &str) -> Result<BucketInfo, OmError> {
        let txn = self.db.begin_read()?;
        if txn.open_table(VOLUMES)?.get(volume)?.is_none() {
            return Err(OmError::NotFound(format!("volume /{volume}")));
        }
        let k = bucket_key(volume, bucket);
        match txn.open_table(BUCKETS)?.get(k.as_str())? {
            Some(v) => decode(v.value()),
            None => Err(OmError::NotFound(format!("bucket /{k}"))),
        }
    }

    /// Deletes a volume without buckets.
    pub(crate) fn delete_volume(&self, volume: &str) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let buckets = txn.open_table(BUCKETS)?;
            let n = volume_use(&buckets, volume)?.buckets;
            if n > 0 {
                return Err(OmError::Precondition(format!(
                    "volume /{volume} is not empty: it has {n} bucket(s); delete them first"
                )));
            }
            if txn.open_table(VOLUMES)?.remove(volume)?.is_none() {
                return Err(OmError::NotFound(format!("volume /{volume}")));
            }
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Deletes a bucket without keys, files, directories or writes in
    /// progress.
    pub(crate) fn delete_bucket(&self, volume: &str, bucket: &str) -> Result<(), OmError> {
        let b = self.get_bucket(volume, bucket)?;
        let k = bucket_key(volume, bucket);
        let txn = self.write()?;
        {
            let busy = if b.object_id != 0 {
                let lo = (b.object_id, "");
                let hi = (b.object_id + 1, "");
                txn.open_table(FS_DIRS)?.range(lo..hi)?.next().is_some()
                    || txn.open_table(FS_FILES)?.range(lo..hi)?.next().is_some()
                    || txn.open_table(FS_OPEN)?.range(lo..hi)?.next().is_some()
            } else {
                let base = format!("{k}/");
                txn.open_table(KEYS)?
                    .range(base.as_str()..)?
                    .next()
                    .transpose()?
                    .is_some_and(|(name, _)| name.value().starts_with(&base))
            };
            let writing = txn.open_table(OPEN_KEYS)?.iter()?.any(|r| {
                r.ok()
                    .and_then(|(_, v)| decode::<KeyInfo>(v.value()).ok())
                    .is_some_and(|s| s.volume == volume && s.bucket == bucket)
            });
            if busy || writing {
                return Err(OmError::Precondition(format!(
                    "bucket /{k} is not empty{}; delete its keys first",
                    if writing && !busy {
                        " (a key is being written)"
                    } else {
                        ""
                    }
                )));
            }
            txn.open_table(BUCKETS)?.remove(k.as_str())?;
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Sets (`Some(n)`, 0 clears) the space and namespace quotas of a
    /// volume (`bucket` empty) or bucket. A quota below the current use is
    /// refused.
    pub(crate) fn set_quota(
        &self,
        volume: &str,
        bucket: &str,
        bytes: Option<u64>,
        names: Option<u64>,
    ) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let below = |what: &str, q: Option<u64>, used: u64, unit: bool| match q {
                Some(q) if q > 0 && q < used => Err(OmError::Invalid(format!(
                    "{what}: a quota of {} is below what is used now ({})",
                    quota_text(q, unit),
                    quota_text(used, unit)
                ))),
                _ => Ok(()),
            };
            if bucket.is_empty() {
                let mut t = txn.open_table(VOLUMES)?;
                let mut v: VolumeInfo = match t.get(volume)? {
                    Some(v) => decode(v.value())?,
                    None => return Err(OmError::NotFound(format!("volume /{volume}"))),
                };
                let u = volume_use(&txn.open_table(BUCKETS)?, volume)?;
                let what = format!("volume /{volume}");
                below(&what, bytes, u.used, true)?;
                below(&what, names, u.buckets, false)?;
                v.quota_in_bytes = bytes.unwrap_or(v.quota_in_bytes);
                v.quota_in_namespace = names.unwrap_or(v.quota_in_namespace);
                t.insert(volume, v.encode_to_vec().as_slice())?;
            } else {
                let k = bucket_key(volume, bucket);
                let mut t = txn.open_table(BUCKETS)?;
                let mut b: BucketInfo = match t.get(k.as_str())? {
                    Some(v) => decode(v.value())?,
                    None => return Err(OmError::NotFound(format!("bucket /{k}"))),
                };
                let what = format!("bucket /{k}");
                below(&what, bytes, b.used_bytes, true)?;
                below(&what, names, b.used_namespace, false)?;
                b.quota_in_bytes = bytes.unwrap_or(b.quota_in_bytes);
                b.quota_in_namespace = names.unwrap_or(b.quota_in_namespace);
                t.insert(k.as_str(), b.encode_to_vec().as_slice())?;
            }
        }
        self.commit(txn)?;
        Ok(())
    }

    /// Reserves space for a block of write session `s` (in `txn`): the
    /// block may hold `block_size` bytes, or, near a space quota of its
    /// bucket or volume, what is left there divided by the replicas.
    /// Returns the block's most bytes; no room for one byte on every
    /// replica is `QuotaExceeded`.
    pub(crate) fn reserve_block(
        txn: &redb::WriteTransaction,
        s: &KeyInfo,
        block_size: u64,
    ) -> Result<u64, OmError> {
        let n = factor(s);
        let mut room = u64::MAX;
        let mut full = String::new();
        {
            let buckets = txn.open_table(BUCKETS)?;
            let k = bucket_key(&s.volume, &s.bucket);
            let b: BucketInfo = match buckets.get(k.as_str())? {
                Some(v) => decode(v.value())?,
                None => return Err(OmError::NotFound(format!("bucket /{k}"))),
            };
            if b.quota_in_bytes > 0 {
                room = b.quota_in_bytes.saturating_sub(bucket_space(&b));
                full = format!(
                    "bucket /{k} space quota exceeded: {} used and {} reserved for open writes of {}",
                    b.used_bytes, b.reserved_bytes, b.quota_in_bytes
                );
            }
            let volumes = txn.open_table(VOLUMES)?;
            if let Some(v) = volumes.get(s.volume.as_str())? {
                let v: VolumeInfo = decode(v.value())?;
                if v.quota_in_bytes > 0 {
                    let u = volume_use(&buckets, &s.volume)?;
                    let left = v.quota_in_bytes.saturating_sub(u.space());
                    if left < room {
                        room = left;
                        full = format!(
                            "volume /{} space quota exceeded: {} used and {} reserved for open writes of {}",
                            s.volume, u.used, u.reserved, v.quota_in_bytes
                        );
                    }
                }
            }
        }
        let grant = block_size.min(room / n);
        if grant == 0 {
            return Err(OmError::QuotaExceeded(full));
        }
        Self::account(
            txn,
            &s.volume,
            &s.bucket,
            Usage {
                reserved: (grant * n) as i64,
                ..Usage::default()
            },
        )?;
        Ok(grant)
    }

    /// Refuses a new bucket in a volume at its namespace quota (in `txn`).
    pub(crate) fn check_bucket_room(
        txn: &redb::WriteTransaction,
        volume: &str,
    ) -> Result<(), OmError> {
        let volumes = txn.open_table(VOLUMES)?;
        let Some(v) = volumes.get(volume)? else {
            return Ok(());
        };
        let v: VolumeInfo = decode(v.value())?;
        let n = volume_use(&txn.open_table(BUCKETS)?, volume)?.buckets;
        check(
            &format!("volume /{volume}"),
            v.quota_in_namespace,
            n,
            1,
            false,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_proto::{BucketLayout, KeyBlock};

    /// The block size allocations reserve in these tests.
    const BS: u64 = 256 << 20;

    fn key(name: &str, size: u64, rep: ReplicationFactor) -> KeyInfo {
        KeyInfo {
            volume: "v".into(),
            bucket: "b".into(),
            name: name.into(),
            replication: rep as i32,
            size,
            ..Default::default()
        }
    }

    /// Writes `name` of `size` bytes through a session as a writer does:
    /// blocks as large as each allocation allows.
    fn put(s: &OmStore, name: &str, size: u64) -> Result<KeyInfo, OmError> {
        let id = s.open_key(&key(name, 0, ReplicationFactor::Three), false, 1)?;
        let mut blocks = Vec::new();
        let mut left = size;
        while left > 0 {
            let b = s.allocate_block(id, &["dn1".into()], BS, &[], None)?;
            let length = left.min(b.max_length);
            left -= length;
            blocks.push(ozone_proto::KeyBlock { length, ..b });
        }
        s.commit_key(id, &blocks, size, None, 2)
    }

    #[test]
    fn allocation_reserves_space_and_commit_or_abort_gives_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.db")).unwrap();
        s.create_volume("v", 1).unwrap();
        s.create_bucket("v", "b", BucketLayout::ObjectStore, 1)
            .unwrap();
        let t = key("k", 0, ReplicationFactor::Three);
        // Without a quota a block may hold the block size.
        let id = s.open_key(&t, false, 1).unwrap();
        let b1 = s
            .allocate_block(id, &["dn1".into()], 1000, &[], None)
            .unwrap();
        assert_eq!(b1.max_length, 1000);
        assert_eq!(s.get_bucket("v", "b").unwrap().reserved_bytes, 3000);
        s.abort_session(id).unwrap();
        let b = s.get_bucket("v", "b").unwrap();
        assert_eq!((b.used_bytes, b.reserved_bytes), (0, 0));
        // Near a quota the block shrinks to the room left, whole windows.
        s.set_quota("v", "b", Some(2000), None).unwrap();
        let id = s.open_key(&t, false, 1).unwrap();
        let b1 = s
            .allocate_block(id, &["dn1".into()], 1000, &[], None)
            .unwrap();
        assert_eq!(b1.max_length, 666, "2000 / 3 replicas");
        assert_eq!(s.get_bucket("v", "b").unwrap().reserved_bytes, 1998);
        // The volume counts the reservation too.
        assert_eq!(s.get_volume("v").unwrap().reserved_bytes, 1998);
        // Another writer gets what is left: 2 bytes on one replica.
        let other = s
            .open_key(&key("o", 0, ReplicationFactor::One), false, 1)
            .unwrap();
        let b = s
            .allocate_block(other, &["dn1".into()], 1000, &[], None)
            .unwrap();
        assert_eq!(b.max_length, 2);
        // Then nothing is left: refused, and the refused session ends with
        // its reservation and blocks gone.
        let e = s
            .allocate_block(other, &["dn1".into()], 1000, &[], None)
            .unwrap_err();
        assert!(matches!(e, OmError::QuotaExceeded(_)), "{e}");
        assert!(e.to_string().contains("2000 reserved"), "{e}");
        assert!(s.session(other).is_err());
        assert_eq!(s.get_bucket("v", "b").unwrap().reserved_bytes, 1998);
        // A block longer than allocated is refused at commit, and so is a
        // length that overflows.
        let long = KeyBlock {
            length: 667,
            ..b1.clone()
        };
        let e = s.commit_key(id, &[long], 667, None, 2).unwrap_err();
        assert!(e.to_string().contains("at most 666"), "{e}");
        let huge = KeyBlock {
            length: u64::MAX,
            ..b1.clone()
        };
        assert!(s.commit_key(id, &[huge], u64::MAX, None, 2).is_err());
        // A refused commit keeps the session and its reservation; ending
        // it gives the space back.
        assert_eq!(s.get_bucket("v", "b").unwrap().reserved_bytes, 1998);
        s.abort_session(id).unwrap();
        assert_eq!(s.get_bucket("v", "b").unwrap().reserved_bytes, 0);
        // A commit turns the reservation into the key's use.
        let id = s.open_key(&t, false, 1).unwrap();
        let b1 = s
            .allocate_block(id, &["dn1".into()], 1000, &[], None)
            .unwrap();
        s.commit_key(id, &[KeyBlock { length: 250, ..b1 }], 250, None, 2)
            .unwrap();
        let b = s.get_bucket("v", "b").unwrap();
        assert_eq!((b.used_bytes, b.reserved_bytes), (750, 0));
    }

    #[test]
    fn bucket_quotas_are_enforced_and_use_follows_commits_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.db")).unwrap();
        s.create_volume("v", 1).unwrap();
        s.create_bucket("v", "b", BucketLayout::ObjectStore, 1)
            .unwrap();
        s.set_quota("v", "b", Some(3000), Some(2)).unwrap();
        put(&s, "k1", 600).unwrap();
        let b = s.get_bucket("v", "b").unwrap();
        assert_eq!((b.used_bytes, b.used_namespace), (1800, 1));
        // 1800 + 3 x 500 > 3000: refused, nothing changes, the session is gone.
        let e = put(&s, "k2", 500).unwrap_err();
        assert!(matches!(e, OmError::QuotaExceeded(_)), "{e}");
        assert!(e.to_string().contains("space quota"), "{e}");
        assert!(s.sessions().unwrap().is_empty());
        assert_eq!(s.get_bucket("v", "b").unwrap().used_bytes, 1800);
        // Overwriting k1 with a smaller key fits.
        put(&s, "k1", 100).unwrap();
        put(&s, "k2", 100).unwrap();
        let b = s.get_bucket("v", "b").unwrap();
        assert_eq!((b.used_bytes, b.used_namespace), (600, 2));
        // A third name is over the namespace quota, before any data.
        let e = s
            .open_key(&key("k3", 0, ReplicationFactor::Three), false, 1)
            .unwrap_err();
        assert!(e.to_string().contains("namespace quota"), "{e}");
        // A quota below the use is refused; clearing it lets k3 in.
        assert!(s.set_quota("v", "b", None, Some(1)).is_err());
        s.set_quota("v", "b", None, Some(0)).unwrap();
        put(&s, "k3", 1).unwrap();
        s.delete_key(KeyPath::new("v", "b", "k1")).unwrap();
        let b = s.get_bucket("v", "b").unwrap();
        assert_eq!((b.used_bytes, b.used_namespace), (303, 2));
        // Volume quotas: bytes over all buckets, buckets by number.
        s.set_quota("v", "", Some(400), Some(1)).unwrap();
        let e = s
            .create_bucket("v", "b2", BucketLayout::ObjectStore, 1)
            .unwrap_err();
        assert!(e.to_string().contains("volume /v namespace quota"), "{e}");
        let e = put(&s, "k4", 100).unwrap_err();
        assert!(e.to_string().contains("volume /v space quota"), "{e}");
        let v = s.get_volume("v").unwrap();
        assert_eq!((v.used_bytes, v.used_namespace), (303, 1));
        // The use survives a reopen.
        drop(s);
        let s = OmStore::open(&dir.path().join("om.db")).unwrap();
        assert_eq!(s.get_bucket("v", "b").unwrap().used_bytes, 303);
    }

    #[test]
    fn only_empty_volumes_and_buckets_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.db")).unwrap();
        s.create_volume("v", 1).unwrap();
        s.create_bucket("v", "b", BucketLayout::ObjectStore, 1)
            .unwrap();
        s.create_bucket("v", "fs", BucketLayout::FileSystemOptimized, 1)
            .unwrap();
        put(&s, "k", 1).unwrap();
        s.fs_mkdirs(KeyPath::new("v", "fs", "d"), 1).unwrap();
        let e = s.delete_volume("v").unwrap_err().to_string();
        assert!(e.contains("2 bucket(s)"), "{e}");
        assert!(s.delete_bucket("v", "b").is_err());
        assert!(s.delete_bucket("v", "fs").is_err());
        s.delete_key(KeyPath::new("v", "b", "k")).unwrap();
        s.delete_bucket("v", "b").unwrap();
        s.fs_delete(KeyPath::new("v", "fs", "d"), false).unwrap();
        assert_eq!(s.get_bucket("v", "fs").unwrap().used_namespace, 0);
        s.delete_bucket("v", "fs").unwrap();
        s.delete_volume("v").unwrap();
        assert!(matches!(s.get_volume("v"), Err(OmError::NotFound(_))));
        assert!(matches!(s.delete_volume("v"), Err(OmError::NotFound(_))));
    }
}
