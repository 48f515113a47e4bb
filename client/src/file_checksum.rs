//! Whole-key checksums computed from block metadata alone: the window CRCs
//! of every block are folded with CRC combine (like Hadoop's COMPOSITE_CRC),
//! so the result is the CRC of the key's bytes whatever bytes-per-checksum
//! the key was written with, and no data is read.

use ozone_common::checksum::Checksummer;
use ozone_proto::{ChecksumType, GetBlockRequest, KeyInfo};

use crate::direct::ClientInner;
use crate::error::{ClientError, Result};

/// A key's composite checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileChecksum {
    /// Algorithm.
    pub kind: ChecksumType,
    /// CRC of the whole key.
    pub crc: u32,
    /// Key length.
    pub size: u64,
    /// The key's bytes per checksum (the windows the CRC was combined from).
    pub bytes_per_checksum: u32,
}

pub(crate) async fn compute(inner: &ClientInner, key: &KeyInfo) -> Result<FileChecksum> {
    let kind = ChecksumType::try_from(key.checksum_type).unwrap_or(ChecksumType::Unspecified);
    if kind == ChecksumType::None {
        return Err(ClientError::InvalidArgument(format!(
            "key /{}/{}/{} was written without checksums",
            key.volume, key.bucket, key.name
        )));
    }
    let ck = Checksummer::new(kind, key.bytes_per_checksum.max(1))?;
    let mut acc: Option<u32> = None;
    for b in &key.blocks {
        let mut last_err = String::from("no replica");
        let mut data = None;
        for dn in &b.replicas {
            let r = match inner.pool.get(dn) {
                Ok(mut c) => crate::deadline::within(
                    inner.config.read_timeout,
                    c.get_block(GetBlockRequest {
                        block: b.block,
                        token: b.token.clone(),
                    }),
                    crate::deadline::READ_TIMEOUT.name,
                )
                .await
                .map_err(|s| s.message().to_string()),
                Err(e) => Err(e.to_string()),
            };
            match r {
                Ok(r) => {
                    data = r.into_inner().block;
                    break;
                }
                Err(e) => last_err = format!("{}: {e}", dn.id),
            }
        }
        let data = data.ok_or_else(|| ClientError::AllReplicasFailed {
            block: b.block.map(|i| i.display()).unwrap_or_default(),
            errors: last_err,
        })?;
        if data.size != b.length {
            return Err(ClientError::InvalidArgument(format!(
                "block {} holds {} bytes but the key says {}",
                b.block.map(|i| i.display()).unwrap_or_default(),
                data.size,
                b.length
            )));
        }
        for c in &data.chunks {
            let cd = c
                .checksum
                .as_ref()
                .ok_or_else(|| ClientError::InvalidArgument("chunk without checksums".into()))?;
            let bpc = cd.bytes_per_checksum.max(1) as u64;
            let mut left = c.len;
            for &crc in &cd.checksums {
                let len = left.min(bpc);
                left -= len;
                acc = Some(match acc {
                    None => crc,
                    Some(a) => ck.combine(a, crc, len),
                });
            }
        }
    }
    Ok(FileChecksum {
        kind,
        crc: acc.unwrap_or_else(|| ck.checksum(&[])),
        size: key.size,
        bytes_per_checksum: key.bytes_per_checksum,
    })
}
