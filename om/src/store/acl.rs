//! Owners and ACL entries of volumes and buckets, as stored in their rows.

use ozone_proto::{BucketInfo, VolumeInfo};
use prost::Message;
use redb::{ReadableDatabase, ReadableTable};

use super::tables::*;
use super::{OmError, OmStore, bucket_key, decode};

/// The owner and entries of one volume or bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OwnedAcl {
    /// Owner identity (empty: none).
    pub owner: String,
    /// Entries as text (`user:ns/sa:rw`).
    pub acls: Vec<String>,
}

impl OmStore {
    /// The rows of `volume` and, when given, its `bucket`, as stored.
    pub(crate) fn access_rows(
        &self,
        volume: &str,
        bucket: Option<&str>,
    ) -> Result<(VolumeInfo, Option<BucketInfo>), OmError> {
        let txn = self.db.begin_read()?;
        let v: VolumeInfo = match txn.open_table(VOLUMES)?.get(volume)? {
            Some(row) => decode(row.value())?,
            None => return Err(OmError::NotFound(format!("volume /{volume}"))),
        };
        let b = match bucket {
            None => None,
            Some(b) => {
                let k = bucket_key(volume, b);
                match txn.open_table(BUCKETS)?.get(k.as_str())? {
                    Some(row) => Some(decode(row.value())?),
                    None => return Err(OmError::NotFound(format!("bucket /{k}"))),
                }
            }
        };
        Ok((v, b))
    }

    /// Replaces the entries of `volume` (or its `bucket`) with what
    /// `change` makes of the current ones, in one transaction.
    pub(crate) fn modify_acl(
        &self,
        volume: &str,
        bucket: Option<&str>,
        change: impl FnOnce(&[String]) -> Result<Vec<String>, OmError>,
    ) -> Result<OwnedAcl, OmError> {
        let txn = self.write()?;
        let out = match bucket {
            None => {
                let mut t = txn.open_table(VOLUMES)?;
                let mut v: VolumeInfo = match t.get(volume)? {
                    Some(row) => decode(row.value())?,
                    None => return Err(OmError::NotFound(format!("volume /{volume}"))),
                };
                v.acls = change(&v.acls)?;
                t.insert(volume, v.encode_to_vec().as_slice())?;
                OwnedAcl {
                    owner: v.owner,
                    acls: v.acls,
                }
            }
            Some(b) => {
                let k = bucket_key(volume, b);
                let mut t = txn.open_table(BUCKETS)?;
                let mut info: BucketInfo = match t.get(k.as_str())? {
                    Some(row) => decode(row.value())?,
                    None => return Err(OmError::NotFound(format!("bucket /{k}"))),
                };
                info.acls = change(&info.acls)?;
                t.insert(k.as_str(), info.encode_to_vec().as_slice())?;
                OwnedAcl {
                    owner: info.owner,
                    acls: info.acls,
                }
            }
        };
        self.commit(txn)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_proto::BucketLayout;

    #[test]
    fn owners_and_entries_persist() {
        let dir = tempfile::tempdir().unwrap();
        let s = OmStore::open(&dir.path().join("om.redb")).unwrap();
        s.create_volume_owned("v", "team-a/admin", 1).unwrap();
        s.create_bucket_owned("v", "b", BucketLayout::ObjectStore, "team-a/hbase", 1)
            .unwrap();
        let acl = s
            .modify_acl("v", Some("b"), |cur| {
                assert!(cur.is_empty());
                Ok(vec!["group:team-b:r".into()])
            })
            .unwrap();
        assert_eq!(acl.owner, "team-a/hbase");
        let (v, b) = s.access_rows("v", Some("b")).unwrap();
        assert_eq!(v.owner, "team-a/admin");
        assert_eq!(b.unwrap().acls, vec!["group:team-b:r".to_string()]);
        assert!(matches!(
            s.modify_acl("v", Some("none"), |_| Ok(vec![])),
            Err(OmError::NotFound(_))
        ));
        // A refused change writes nothing.
        assert!(
            s.modify_acl("v", None, |_| Err(OmError::Invalid("no".into())))
                .is_err()
        );
        assert!(s.access_rows("v", None).unwrap().0.acls.is_empty());
    }
}
