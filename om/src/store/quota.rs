//! Volume and bucket details, deletion, and quotas: each bucket row keeps
//! its use (bytes of committed keys with replicas counted, and names: keys,
//! files, directories), updated in the transaction that changes it; a
//! change that would pass a bucket's or its volume's quota is refused
//! (Ozone's space and namespace quotas).

use ozone_proto::{BucketInfo, KeyInfo, ReplicationFactor, VolumeInfo};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable};

use super::tables::*;
use super::{OmError, OmStore, bucket_key, decode};

/// Bytes a committed key holds on datanodes: its size times its replicas.
pub(crate) fn stored_bytes(k: &KeyInfo) -> u64 {
    let factor = match ReplicationFactor::try_from(k.replication) {
        Ok(ReplicationFactor::One) => 1,
        _ => 3,
    };
    k.size.saturating_mul(factor)
}

/// A change of a bucket's use: bytes and names, either sign.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: i64,
    pub names: i64,
}

impl Usage {
    /// A key (or file) added.
    pub(crate) fn key(k: &KeyInfo) -> Self {
        Self {
            bytes: stored_bytes(k) as i64,
            names: 1,
        }
    }

    /// `n` names added (negative: removed), no bytes.
    pub(crate) fn names(n: i64) -> Self {
        Self { bytes: 0, names: n }
    }

    /// The same change, undone.
    pub(crate) fn neg(self) -> Self {
        Self {
            bytes: -self.bytes,
            names: -self.names,
        }
    }

    /// `self` followed by `o`.
    pub(crate) fn plus(self, o: Self) -> Self {
        Self {
            bytes: self.bytes + o.bytes,
            names: self.names + o.names,
        }
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

/// Bytes used by every bucket of `volume`.
fn volume_bytes(
    buckets: &impl ReadableTable<&'static str, &'static [u8]>,
    volume: &str,
) -> Result<(u64, u64), OmError> {
    let lo = format!("{volume}/");
    let hi = format!("{volume}0"); // '0' follows '/'
    let (mut bytes, mut n) = (0u64, 0u64);
    for row in buckets.range(lo.as_str()..hi.as_str())? {
        let b: BucketInfo = decode(row?.1.value())?;
        bytes = bytes.saturating_add(b.used_bytes);
        n += 1;
    }
    Ok((bytes, n))
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
            check(&what, b.quota_in_bytes, b.used_bytes, u.bytes, true)?;
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
            && u.bytes > 0
            && let Some(v) = volumes.get(volume)?
        {
            let v: VolumeInfo = decode(v.value())?;
            if v.quota_in_bytes > 0 {
                let (used, _) = volume_bytes(&buckets, volume)?;
                check(
                    &format!("volume /{volume}"),
                    v.quota_in_bytes,
                    used,
                    u.bytes,
                    true,
                )?;
            }
        }
        b.used_bytes = add(b.used_bytes, u.bytes);
        b.used_namespace = add(b.used_namespace, u.names);
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
        check(&what, b.quota_in_bytes, b.used_bytes, 1, true)?;
        if b.quota_in_namespace == 0 {
            return Ok(());
        }
        // A name not there yet takes a slot (a path that cannot be made
        // fails later with its own error).
        let new_name = match self.lookup_key(&key.volume, &key.bucket, &key.name) {
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
    pub fn get_volume(&self, volume: &str) -> Result<VolumeInfo, OmError> {
        let txn = self.db.begin_read()?;
        let mut v: VolumeInfo = match txn.open_table(VOLUMES)?.get(volume)? {
            Some(v) => decode(v.value())?,
            None => return Err(OmError::NotFound(format!("volume /{volume}"))),
        };
        let (bytes, n) = volume_bytes(&txn.open_table(BUCKETS)?, volume)?;
        v.used_bytes = bytes;
        v.used_namespace = n;
        Ok(v)
    }

    /// A bucket with its quotas and use.
    pub fn get_bucket(&self, volume: &str, bucket: &str) -> Result<BucketInfo, OmError> {
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
    pub fn delete_volume(&self, volume: &str) -> Result<(), OmError> {
        let txn = self.write()?;
        {
            let buckets = txn.open_table(BUCKETS)?;
            let (_, n) = volume_bytes(&buckets, volume)?;
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
    pub fn delete_bucket(&self, volume: &str, bucket: &str) -> Result<(), OmError> {
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
    pub fn set_quota(
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
                let (used, n) = volume_bytes(&txn.open_table(BUCKETS)?, volume)?;
                let what = format!("volume /{volume}");
                below(&what, bytes, used, true)?;
                below(&what, names, n, false)?;
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
        let (_, n) = volume_bytes(&txn.open_table(BUCKETS)?, volume)?;
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
    use ozone_proto::BucketLayout;

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

    /// Writes `name` through a session with one empty block of `size`.
    fn put(s: &OmStore, name: &str, size: u64) -> Result<KeyInfo, OmError> {
        let id = s.open_key(&key(name, 0, ReplicationFactor::Three), false, 1)?;
        let b = s.allocate_block(id, &["dn1".into()])?;
        let b = ozone_proto::KeyBlock { length: size, ..b };
        s.commit_key(id, &[b], size, 2)
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
        s.delete_key("v", "b", "k1").unwrap();
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
        s.fs_mkdirs("v", "fs", "d", 1).unwrap();
        let e = s.delete_volume("v").unwrap_err().to_string();
        assert!(e.contains("2 bucket(s)"), "{e}");
        assert!(s.delete_bucket("v", "b").is_err());
        assert!(s.delete_bucket("v", "fs").is_err());
        s.delete_key("v", "b", "k").unwrap();
        s.delete_bucket("v", "b").unwrap();
        s.fs_delete("v", "fs", "d", false).unwrap();
        assert_eq!(s.get_bucket("v", "fs").unwrap().used_namespace, 0);
        s.delete_bucket("v", "fs").unwrap();
        s.delete_volume("v").unwrap();
        assert!(matches!(s.get_volume("v"), Err(OmError::NotFound(_))));
        assert!(matches!(s.delete_volume("v"), Err(OmError::NotFound(_))));
    }
}
