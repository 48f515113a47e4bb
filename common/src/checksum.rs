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

    /// Checksum of the concatenation of `pieces`, without copying them.
    #[inline]
    pub fn checksum_pieces(&self, pieces: &[&[u8]]) -> u32 {
        if let [one] = pieces {
            return self.checksum(one);
        }
        let alg = match self.kind {
            ChecksumType::Crc32c => CrcAlgorithm::Crc32Iscsi,
            ChecksumType::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
            ChecksumType::None | ChecksumType::Unspecified => return 0,
        };
        let mut d = crc_fast::Digest::new(alg);
        for p in pieces {
            d.update(p);
        }
        d.finalize() as u32
    }

    /// CRC of `a ++ b` from the CRCs of `a` and `b` and the length of `b`.
    #[inline]
    pub fn combine(&self, crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        self.combine_with(self.combine_op(len_b), crc_a, crc_b)
    }

    /// The operator that appends `len_b` bytes in [`Self::combine_with`];
    /// compute it once when many CRCs are combined over equal lengths.
    pub fn combine_op(&self, len_b: u64) -> CombineOp {
        match gf2_poly(self.kind) {
            Some(poly) => CombineOp(x8nmodp(poly, len_b), poly),
            None => CombineOp(0, 0),
        }
    }

    /// CRC of `a ++ b` where `op` is [`Self::combine_op`] of the length of `b`.
    #[inline]
    pub fn combine_with(&self, op: CombineOp, crc_a: u32, crc_b: u32) -> u32 {
        if op.1 == 0 {
            return 0;
        }
        multmodp(op.1, op.0, crc_a) ^ crc_b
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

/// The CRC combine over one whole window, by tables: for a `b` of exactly
/// one window, `crc(a ++ b) == shift(crc(a)) ^ crc(b)`. Four table lookups
/// where [`Checksummer::combine_with`] takes up to 32 shift-and-add steps,
/// so that checking a run of windows with one CRC over all their bytes
/// costs a few nanoseconds per window.
pub struct WindowShift([[u32; 256]; 4]);

impl WindowShift {
    /// The shift of `ck`'s window; `None` for no checksum.
    fn new(ck: &Checksummer) -> Option<Self> {
        let poly = gf2_poly(ck.kind)?;
        let op = x8nmodp(poly, ck.bytes_per_checksum as u64);
        let mut t = [[0u32; 256]; 4];
        for (k, table) in t.iter_mut().enumerate() {
            for (v, e) in table.iter_mut().enumerate() {
                *e = multmodp(poly, op, (v as u32) << (8 * k));
            }
        }
        Some(Self(t))
    }

    /// The shift of `ck`'s window, built once per algorithm and window size
    /// for the life of the process; `None` for no checksum.
    pub fn of(ck: &Checksummer) -> Option<&'static Self> {
        static BUILT: PerWindow<WindowShift> = PerWindow::new();
        BUILT.get(ck, || Self::new(ck))
    }

    /// The CRC of `len` bytes from the checksums `sums` of their
    /// consecutive windows of `ck` (whole, but for a shorter last one);
    /// `ck` must be the checksummer this shift was built for.
    pub fn combine_run(&self, ck: &Checksummer, sums: &[u32], len: u64) -> u32 {
        let Some((&first, rest)) = sums.split_first() else {
            return 0;
        };
        let tail = len % ck.bytes_per_checksum as u64;
        let mut crc = first;
        for (i, &s) in rest.iter().enumerate() {
            crc = if i + 1 < rest.len() || tail == 0 {
                self.shift(crc) ^ s
            } else {
                ck.combine(crc, s, tail)
            };
        }
        crc
    }

    /// `crc` followed by one window of zero bits, i.e. the first half of
    /// a combine.
    #[inline]
    pub fn shift(&self, crc: u32) -> u32 {
        let t = &self.0;
        t[0][(crc & 0xff) as usize]
            ^ t[1][((crc >> 8) & 0xff) as usize]
            ^ t[2][((crc >> 16) & 0xff) as usize]
            ^ t[3][(crc >> 24) as usize]
    }
}

impl std::fmt::Debug for WindowShift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WindowShift")
    }
}

/// Values built once per algorithm and window size, kept for the life of
/// the process (a handful of such pairs exist in a process).
pub(crate) struct PerWindow<T: 'static>(std::sync::Mutex<Vec<((i32, u32), &'static T)>>);

impl<T> PerWindow<T> {
    pub(crate) const fn new() -> Self {
        Self(std::sync::Mutex::new(Vec::new()))
    }

    /// The value of `ck`'s algorithm and window, built by `build` the first
    /// time; `None` while `build` gives none.
    pub(crate) fn get(
        &self,
        ck: &Checksummer,
        build: impl FnOnce() -> Option<T>,
    ) -> Option<&'static T> {
        let key = (ck.kind as i32, ck.bytes_per_checksum);
        let mut built = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, v)) = built.iter().find(|(k, _)| *k == key) {
            return Some(v);
        }
        let v: &'static T = Box::leak(Box::new(build()?));
        built.push((key, v));
        Some(v)
    }
}

/// Precomputed "append n bytes" operator for CRC combine: x^(8n) modulo the
/// polynomial, with the polynomial itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CombineOp(u32, u32);

/// Reflected generator polynomial of a CRC type.
pub(crate) fn gf2_poly(kind: ChecksumType) -> Option<u32> {
    match kind {
        ChecksumType::Crc32c => Some(0x82f6_3b78),
        ChecksumType::Crc32 => Some(0xedb8_8320),
        ChecksumType::None | ChecksumType::Unspecified => None,
    }
}

/// `a * b` modulo the reflected polynomial `poly` (bit 31 is x^0).
#[inline]
pub(crate) fn multmodp(poly: u32, a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ poly } else { b >> 1 };
    }
    p
}

/// x^(8n) modulo `poly`, by squaring: at most 64 multiplications.
pub(crate) fn x8nmodp(poly: u32, mut n: u64) -> u32 {
    // x^(2^k), starting at k = 3 (x^8: one byte).
    let mut sq = 1u32 << (31 - 8);
    let mut p = 1u32 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(poly, sq, p);
        }
        n >>= 1;
        if n != 0 {
            sq = multmodp(poly, sq, sq);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_shift_combines_as_the_crc_of_the_concatenation() {
        for kind in [ChecksumType::Crc32c, ChecksumType::Crc32] {
            for bpc in [512u32, 4096, 16 << 10] {
                let ck = Checksummer::new(kind, bpc).unwrap();
                let shift = WindowShift::of(&ck).unwrap();
                assert!(
                    std::ptr::eq(shift, WindowShift::of(&ck).unwrap()),
                    "built once"
                );
                let data: Vec<u8> = (0..3 * bpc as usize + 100)
                    .map(|i| (i * 31 % 253) as u8)
                    .collect();
                let sums = ck.compute(&data);
                let mut crc = sums[0];
                for &s in &sums[1..3] {
                    crc = shift.shift(crc) ^ s;
                }
                assert_eq!(
                    crc,
                    ck.checksum(&data[..3 * bpc as usize]),
                    "{kind:?} {bpc}"
                );
                assert_eq!(ck.combine(crc, sums[3], 100), ck.checksum(&data));
                for n in [0, 1, 3] {
                    let len = (n * bpc as usize).min(data.len());
                    assert_eq!(
                        shift.combine_run(&ck, &sums[..n], len as u64),
                        ck.checksum(&data[..len])
                    );
                }
                assert_eq!(
                    shift.combine_run(&ck, &sums, data.len() as u64),
                    ck.checksum(&data)
                );
            }
        }
        assert!(WindowShift::of(&Checksummer::new(ChecksumType::None, 1).unwrap()).is_none());
    }

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
    fn combine_agrees_with_crc_fast_and_whole_buffers() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for kind in [ChecksumType::Crc32, ChecksumType::Crc32c] {
            let c = Checksummer::new(kind, 4096).unwrap();
            let alg = match kind {
                ChecksumType::Crc32c => CrcAlgorithm::Crc32Iscsi,
                _ => CrcAlgorithm::Crc32IsoHdlc,
            };
            for split in [0usize, 1, 7, 4096, 16_384, 65_535, 70_000] {
                let (a, b) = data.split_at(split);
                let (ca, cb) = (c.checksum(a), c.checksum(b));
                let whole = c.checksum(&data);
                assert_eq!(c.combine(ca, cb, b.len() as u64), whole, "split {split}");
                let theirs = crc_fast::checksum_combine(alg, ca as u64, cb as u64, b.len() as u64);
                assert_eq!(theirs as u32, whole);
                let op = c.combine_op(b.len() as u64);
                assert_eq!(c.combine_with(op, ca, cb), whole);
            }
            assert_eq!(
                c.checksum_pieces(&[&data[..10], &data[10..5000], &data[5000..]]),
                c.checksum(&data)
            );
            // Folding equal windows with one precomputed operator.
            let op = c.combine_op(4096);
            let mut acc = c.checksum(&data[..4096]);
            for w in data[4096..65_536].chunks(4096) {
                acc = c.combine_with(op, acc, c.checksum(w));
            }
            assert_eq!(acc, c.checksum(&data[..65_536]));
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
