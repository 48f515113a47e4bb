//! Window checksums (CRC32C, CRC32) computed with `crc-fast`.
//!
//! Data is split in consecutive windows of `bytes_per_checksum` bytes (the
//! last may be shorter); each window has one 32-bit checksum.

use crc_fast::CrcAlgorithm;
use ozone_proto::ChecksumType;

/// Default window size: 16 KiB, as in current Apache Ozone.
pub const DEFAULT_BYTES_PER_CHECKSUM: u32 = 16 * 1024;

/// Errors in checksum parameters or verification.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ChecksumError {
    #[error("bytes per checksum must be at least 1 (got {0})")]
    BadWindow(u32),
    #[error("unsupported checksum type {0}")]
    BadType(i32),
    #[error(
        "checksum mismatch in window {window} (bytes {offset}..{end}): expected {expected:#010x}, computed {actual:#010x}"
    )]
    Mismatch {
        window: u64,
        offset: u64,
        end: u64,
        expected: u32,
        actual: u32,
    },
    #[error("expected {expected} checksums for {len} bytes, got {got}")]
    Count {
        expected: usize,
        got: usize,
        len: u64,
    },
}

/// The checksum algorithm and window size of a key or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checksummer {
    kind: ChecksumType,
    bytes_per_checksum: u32,
}

impl Checksummer {
    /// A checksummer; rejects a zero window and unknown types.
    pub fn new(kind: ChecksumType, bytes_per_checksum: u32) -> Result<Self, ChecksumError> {
        if bytes_per_checksum == 0 {
            return Err(ChecksumError::BadWindow(0));
        }
        if kind == ChecksumType::Unspecified {
            return Err(ChecksumError::BadType(kind as i32));
        }
        Ok(Self {
            kind,
            bytes_per_checksum,
        })
    }

    /// From the raw protobuf enum value.
    pub fn from_raw(kind: i32, bytes_per_checksum: u32) -> Result<Self, ChecksumError> {
        let kind = ChecksumType::try_from(kind).map_err(|_| ChecksumError::BadType(kind))?;
        Self::new(kind, bytes_per_checksum)
    }

    /// Algorithm.
    pub fn kind(&self) -> ChecksumType {
        self.kind
    }

    /// Window size in bytes.
    pub fn bytes_per_checksum(&self) -> u32 {
        self.bytes_per_checksum
    }

    /// Number of windows covering `len` bytes.
    pub fn windows(&self, len: u64) -> usize {
        len.div_ceil(self.bytes_per_checksum as u64) as usize
    }

    /// Checksum of one buffer.
    #[inline]
    pub fn checksum(&self, data: &[u8]) -> u32 {
        match self.kind {
            ChecksumType::Crc32c => crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32,
            ChecksumType::Crc32 => crc_fast::checksum(CrcAlgorithm::Crc32IsoHdlc, data) as u32,
            ChecksumType::None | ChecksumType::Unspecified => 0,
        }
    }

    /// CRC of `a ++ b` from the CRCs of `a` and `b` and the length of `b`.
    pub fn combine(&self, crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        let alg = match self.kind {
            ChecksumType::Crc32c => CrcAlgorithm::Crc32Iscsi,
            ChecksumType::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
            _ => return 0,
        };
        crc_fast::checksum_combine(alg, crc_a as u64, crc_b as u64, len_b) as u32
    }

    /// Appends the checksums of every window of `data` to `out`.
    pub fn compute_into(&self, data: &[u8], out: &mut Vec<u32>) {
        out.reserve(self.windows(data.len() as u64));
        for w in data.chunks(self.bytes_per_checksum as usize) {
            out.push(self.checksum(w));
        }
    }

    /// Checksums of every window of `data`.
    pub fn compute(&self, data: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        self.compute_into(data, &mut out);
        out
    }

    /// Verifies `data`, which starts at window `first_window` of its block,
    /// against `expected` (one checksum per window of `data`).
    pub fn verify(
        &self,
        data: &[u8],
        first_window: u64,
        expected: &[u32],
    ) -> Result<(), ChecksumError> {
        if self.kind == ChecksumType::None {
            return Ok(());
        }
        let n = self.windows(data.len() as u64);
        if expected.len() != n {
            return Err(ChecksumError::Count {
                expected: n,
                got: expected.len(),
                len: data.len() as u64,
            });
        }
        let bpc = self.bytes_per_checksum as u64;
        for (i, (w, &want)) in data
            .chunks(self.bytes_per_checksum as usize)
            .zip(expected)
            .enumerate()
        {
            let got = self.checksum(w);
            if got != want {
                let window = first_window + i as u64;
                return Err(ChecksumError::Mismatch {
                    window,
                    offset: window * bpc,
                    end: window * bpc + w.len() as u64,
                    expected: want,
                    actual: got,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        let c = Checksummer::new(ChecksumType::Crc32c, 16).unwrap();
        assert_eq!(c.checksum(b"123456789"), 0xe306_9283);
        let c = Checksummer::new(ChecksumType::Crc32, 16).unwrap();
        assert_eq!(c.checksum(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn windows_and_verify() {
        let c = Checksummer::new(ChecksumType::Crc32c, 4).unwrap();
        let data = b"abcdefghij";
        let sums = c.compute(data);
        assert_eq!(sums.len(), 3);
        assert_eq!(sums[2], c.checksum(b"ij"));
        c.verify(data, 0, &sums).unwrap();
        c.verify(&data[4..], 1, &sums[1..]).unwrap();
        let mut bad = *data;
        bad[5] ^= 1;
        let err = c.verify(&bad, 0, &sums).unwrap_err();
        assert!(matches!(
            err,
            ChecksumError::Mismatch {
                window: 1,
                offset: 4,
                end: 8,
                ..
            }
        ));
        assert!(matches!(
            c.verify(data, 0, &sums[..2]),
            Err(ChecksumError::Count { .. })
        ));
    }

    #[test]
    fn combine_matches_whole() {
        for kind in [ChecksumType::Crc32, ChecksumType::Crc32c] {
            let c = Checksummer::new(kind, 4).unwrap();
            let a = c.checksum(b"hello ");
            let b = c.checksum(b"world");
            assert_eq!(c.combine(a, b, 5), c.checksum(b"hello world"));
        }
    }

    #[test]
    fn rejects_bad_params() {
        assert_eq!(
            Checksummer::new(ChecksumType::Crc32c, 0),
            Err(ChecksumError::BadWindow(0))
        );
        assert!(Checksummer::from_raw(99, 16).is_err());
    }
}
