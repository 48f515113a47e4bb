//! Block integrity: the checksums of a whole block, checked for shape once,
//! and the window arithmetic of verified reads. The datanode uses it to
//! validate what it stores and to pick the windows it serves; the client
//! uses it to validate what a datanode hands over and to check ranges in
//! place (short-circuit) or as they arrive (gRPC).

use ozone_proto::{BlockData, ChecksumData, ChecksumType};

use crate::checksum::WindowShift;
use crate::checksum::{ChecksumError, Checksummer};
use crate::run_index::RunIndex;

/// Fine checksum window the datanode keeps whatever a key's window is, so
/// a verified read checks only the 4 KiB windows it touches (a page: an
/// unaligned 64 KiB read widens by at most 8 KiB).
pub const FINE_WINDOW: u32 = 4 * 1024;

/// Largest block accepted (bounds offsets in requests and chunk lists).
pub const MAX_BLOCK_SIZE: u64 = 16 << 30;

/// Why a block's checksums cannot be used.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum IntegrityError {
    /// The chunk list or checksum metadata is malformed.
    #[error("{0}")]
    Invalid(String),
    /// Data does not match its checksums (or the parameters are bad).
    #[error(transparent)]
    Checksum(#[from] ChecksumError),
}

/// The fine checksummer for a key's checksummer, when its windows are a
/// larger multiple of [`FINE_WINDOW`].
pub fn fine_of(ck: &Checksummer) -> Option<Checksummer> {
    let bpc = ck.bytes_per_checksum();
    if ck.kind() == ChecksumType::None || bpc <= FINE_WINDOW || !bpc.is_multiple_of(FINE_WINDOW) {
        return None;
    }
    Checksummer::new(ck.kind(), FINE_WINDOW).ok()
}

/// Checks that the fine checksums (windows of `fine_bpc` bytes) of `len`
/// bytes combine into the coarse ones; `first_coarse` is the index of the
/// first coarse window (for errors).
pub fn check_fine_against_coarse(
    ck: &Checksummer,
    fine_bpc: u32,
    fine: &[u32],
    coarse: &[u32],
    len: u64,
    first_coarse: u64,
) -> Result<(), ChecksumError> {
    let bpc = ck.bytes_per_checksum() as u64;
    if fine_bpc == 0 || !ck.bytes_per_checksum().is_multiple_of(fine_bpc) {
        return Err(ChecksumError::BadWindow(fine_bpc));
    }
    let per = (ck.bytes_per_checksum() / fine_bpc) as usize;
    if fine.len() != len.div_ceil(fine_bpc as u64) as usize || coarse.len() != ck.windows(len) {
        return Err(ChecksumError::Count {
            expected: ck.windows(len),
            got: coarse.len(),
            len,
        });
    }
    if coarse.is_empty() {
        return Ok(());
    }
    let fine_ck = Checksummer::new(ck.kind(), fine_bpc)?;
    let shift = WindowShift::of(&fine_ck).ok_or(ChecksumError::BadType(ck.kind() as i32))?;
    for (i, (&want, group)) in coarse.iter().zip(fine.chunks(per)).enumerate() {
        let start = i as u64 * bpc;
        let acc = shift.combine_run(&fine_ck, group, (len - start).min(bpc));
        if acc != want {
            let window = first_coarse + i as u64;
            return Err(ChecksumError::Mismatch {
                window,
                offset: window * bpc,
                end: window * bpc + (len - start).min(bpc),
                expected: want,
                actual: acc,
            });
        }
    }
    Ok(())
}

/// The whole checksum windows covering a byte range of a block:
/// bytes `start..end`, beginning with window `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// First byte of the first window.
    pub start: u64,
    /// End of the last window (the block's end for a short last window).
    pub end: u64,
    /// Index of the first window.
    pub first: u64,
    /// One past the index of the last window (`first` when none).
    pub end_window: u64,
}

impl Windows {
    /// Bytes covered.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether no bytes are covered.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The checksums of every window of one block, at one window size.
#[derive(Debug, Clone)]
pub struct BlockChecksums {
    checksummer: Checksummer,
    sums: Vec<u32>,
    size: u64,
    /// The window's combine shift, for checking runs of windows at once.
    shift: Option<&'static WindowShift>,
    /// Prefix CRCs, for checking runs in constant time
    /// ([`BlockChecksums::index_runs`]).
    runs: Option<RunIndex>,
}

impl PartialEq for BlockChecksums {
    fn eq(&self, o: &Self) -> bool {
        (self.checksummer, &self.sums, self.size) == (o.checksummer, &o.sums, o.size)
    }
}

impl Eq for BlockChecksums {}

impl BlockChecksums {
    /// Checksums `sums` of a block of `size` bytes; their number must match
    /// the windows (a block without checksums may carry none).
    pub fn new(checksummer: Checksummer, sums: Vec<u32>, size: u64) -> Result<Self, ChecksumError> {
        let unchecked = checksummer.kind() == ChecksumType::None && sums.is_empty();
        if !unchecked && sums.len() != checksummer.windows(size) {
            return Err(ChecksumError::Count {
                expected: checksummer.windows(size),
                got: sums.len(),
                len: size,
            });
        }
        Ok(Self {
            shift: (!unchecked)
                .then(|| WindowShift::of(&checksummer))
                .flatten(),
            checksummer,
            sums,
            size,
            runs: None,
        })
    }

    /// Adds the prefix CRCs of the windows (one `u32` per window, built in
    /// one pass), so that checking a run costs the same for any length.
    /// For checksums that serve many reads, such as an open short-circuit
    /// block's.
    pub fn index_runs(mut self) -> Self {
        self.runs = RunIndex::new(&self.checksummer, &self.sums, self.size);
        self
    }

    /// A block without checksums.
    pub fn unchecked(size: u64) -> Self {
        Self {
            checksummer: Checksummer::new(ChecksumType::None, 1).expect("a valid checksummer"),
            sums: Vec::new(),
            size,
            shift: None,
            runs: None,
        }
    }

    /// Algorithm and window.
    pub fn checksummer(&self) -> &Checksummer {
        &self.checksummer
    }

    /// Block length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether reads can be verified (the algorithm is not NONE).
    pub fn verifies(&self) -> bool {
        self.checksummer.kind() != ChecksumType::None
    }

    /// The whole windows covering `offset..offset + len`; `None` when the
    /// range leaves the block. An empty range covers no window.
    pub fn covering(&self, offset: u64, len: u64) -> Option<Windows> {
        let end = offset.checked_add(len).filter(|&e| e <= self.size)?;
        let bpc = self.checksummer.bytes_per_checksum() as u64;
        if len == 0 {
            return Some(Windows {
                start: offset,
                end: offset,
                first: offset / bpc,
                end_window: offset / bpc,
            });
        }
        let first = offset / bpc;
        let end_window = end.div_ceil(bpc);
        Some(Windows {
            start: first * bpc,
            end: (end_window * bpc).min(self.size),
            first,
            end_window,
        })
    }

    /// The checksums of `w` (empty for a block without checksums).
    pub fn sums_of(&self, w: &Windows) -> &[u32] {
        if self.sums.is_empty() {
            return &[];
        }
        &self.sums[w.first as usize..w.end_window as usize]
    }

    /// `w`'s checksums as sent on the wire.
    pub fn to_wire(&self, w: &Windows) -> ChecksumData {
        ChecksumData {
            r#type: self.checksummer.kind() as i32,
            bytes_per_checksum: self.checksummer.bytes_per_checksum(),
            checksums: self.sums_of(w).to_vec(),
        }
    }

    /// Checks `data`, the bytes of `w`.
    pub fn verify(&self, w: &Windows, data: &[u8]) -> Result<(), ChecksumError> {
        self.verify_pieces(w, &[data, &[], &[]])
    }

    /// Checks the bytes of `w` given as the concatenation of three pieces
    /// (e.g. a head, the caller's buffer and a tail), without copying them
    /// (the short-circuit hot path): one CRC over all of them against the
    /// windows' checksums combined; only on a mismatch is each window
    /// checked, to name the bad one.
    pub fn verify_pieces(&self, w: &Windows, pieces: &[&[u8]; 3]) -> Result<(), ChecksumError> {
        if !self.verifies() {
            return Ok(());
        }
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if total as u64 != w.len() {
            return Err(ChecksumError::Count {
                expected: self.checksummer.windows(w.len()),
                got: self.checksummer.windows(total as u64),
                len: total as u64,
            });
        }
        if w.is_empty() {
            return Ok(());
        }
        if self.shift.is_some() {
            if let Some(ix) = &self.runs {
                // The prefix CRCs are far apart in a large block: ask for
                // them now, use them after the CRC pass.
                ix.prefetch(w.first as usize, w.end_window as usize);
            }
            let mut parts: [&[u8]; 3] = [&[]; 3];
            let mut n = 0;
            for p in pieces.iter().filter(|p| !p.is_empty()) {
                parts[n] = p;
                n += 1;
            }
            let crc = self.checksummer.checksum_pieces(&parts[..n]);
            if Some(crc) == self.expected_run(w) {
                return Ok(());
            }
        }
        self.verify_each(w, pieces)
    }

    /// The CRC of all of `w`'s bytes, as the checksums say: from the run
    /// index, or folded from the windows' checksums; `None` without
    /// checksums.
    #[inline]
    fn expected_run(&self, w: &Windows) -> Option<u32> {
        match (&self.runs, self.shift) {
            (Some(ix), _) => Some(ix.run(w.first as usize, w.end_window as usize)),
            (None, Some(shift)) => {
                Some(shift.combine_run(&self.checksummer, self.sums_of(w), w.len()))
            }
            (None, None) => None,
        }
    }

    /// Checks each window of `w` on its own (the pieces' total length
    /// already checked); the first bad window is the error.
    fn verify_each(&self, w: &Windows, pieces: &[&[u8]; 3]) -> Result<(), ChecksumError> {
        let bpc = self.checksummer.bytes_per_checksum() as u64;
        let sums = self.sums_of(w);
        let mut ws = w.start;
        for (i, &want) in sums.iter().enumerate() {
            let wl = (w.end - ws).min(bpc);
            let got = self.crc_of_range(pieces, (ws - w.start) as usize, wl as usize);
            if got != want {
                let window = w.first + i as u64;
                return Err(ChecksumError::Mismatch {
                    window,
                    offset: ws,
                    end: ws + wl,
                    expected: want,
                    actual: got,
                });
            }
            ws += wl;
        }
        Ok(())
    }

    /// CRC of `len` bytes at `at` of the concatenation of `pieces`.
    #[inline]
    fn crc_of_range(&self, pieces: &[&[u8]; 3], mut at: usize, mut len: usize) -> u32 {
        let mut parts: [&[u8]; 3] = [&[]; 3];
        let mut n = 0;
        for p in pieces {
            if at >= p.len() {
                at -= p.len();
                continue;
            }
            let take = (p.len() - at).min(len);
            parts[n] = &p[at..at + take];
            n += 1;
            len -= take;
            at = 0;
            if len == 0 {
                break;
            }
        }
        self.checksummer.checksum_pieces(&parts[..n])
    }
}

/// The checksums of a committed block, checked for shape: the key's
/// windows, and the datanode's fine windows when every chunk has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockIntegrity {
    /// The key's windows.
    pub coarse: BlockChecksums,
    /// The fine ([`FINE_WINDOW`]) windows, when kept.
    pub fine: Option<BlockChecksums>,
}

impl BlockIntegrity {
    /// The finest checksums kept.
    pub fn finest(&self) -> &BlockChecksums {
        self.fine.as_ref().unwrap_or(&self.coarse)
    }

    /// Checks a chunk list: contiguous from 0, one checksum type and window,
    /// every chunk but the last a whole number of windows, the right number
    /// of checksums, the size matching; fine checksums, when every chunk has
    /// them, must combine into the coarse ones.
    pub fn of_block(block: &BlockData) -> Result<Self, IntegrityError> {
        Self::build(block, true)
    }

    /// As [`of_block`](Self::of_block), for chunks whose fine checksums this
    /// process computed from the bytes it wrote (and, when it verifies
    /// writes, checked against the coarse ones then): the list's shape is
    /// checked, the windows are not combined again (a served view rebuilt on
    /// every hflush stays O(chunks) instead of O(windows)).
    pub fn of_written(block: &BlockData) -> Result<Self, IntegrityError> {
        Self::build(block, false)
    }

    fn build(block: &BlockData, check_fine: bool) -> Result<Self, IntegrityError> {
        let invalid = |m: String| IntegrityError::Invalid(m);
        let Some(first) = block.chunks.first() else {
            if block.size != 0 {
                return Err(invalid(format!(
                    "block of {} bytes has no chunks",
                    block.size
                )));
            }
            return Ok(Self {
                coarse: BlockChecksums::unchecked(0),
                fine: None,
            });
        };
        let cd = first
            .checksum
            .as_ref()
            .ok_or_else(|| invalid("chunk without checksum data".into()))?;
        let ck = Checksummer::from_raw(cd.r#type, cd.bytes_per_checksum)?;
        let fine_ck =
            fine_of(&ck).filter(|_| block.chunks.iter().all(|c| c.fine_checksum.is_some()));
        let mut fine_sums = Vec::new();
        let mut fine_bpc = 0u32;
        let mut next = 0u64;
        let mut sums = Vec::new();
        for (i, c) in block.chunks.iter().enumerate() {
            if c.offset != next {
                return Err(invalid(format!(
                    "chunk {i} starts at {} but the previous chunk ends at {next}",
                    c.offset
                )));
            }
            let cd = c
                .checksum
                .as_ref()
                .ok_or_else(|| invalid(format!("chunk {i} has no checksum data")))?;
            if cd.r#type != ck.kind() as i32 || cd.bytes_per_checksum != ck.bytes_per_checksum() {
                return Err(invalid(format!(
                    "chunk {i} uses another checksum type or window"
                )));
            }
            if i + 1 < block.chunks.len() && c.len % ck.bytes_per_checksum() as u64 != 0 {
                return Err(invalid(format!(
                    "chunk {i} of {} bytes is not a whole number of {}-byte windows",
                    c.len,
                    ck.bytes_per_checksum()
                )));
            }
            if c.len == 0 {
                return Err(invalid(format!("chunk {i} is empty")));
            }
            if cd.checksums.len() != ck.windows(c.len) {
                return Err(invalid(format!(
                    "chunk {i} of {} bytes has {} checksums, expected {}",
                    c.len,
                    cd.checksums.len(),
                    ck.windows(c.len)
                )));
            }
            sums.extend_from_slice(&cd.checksums);
            if let (Some(f), Some(fd)) = (&fine_ck, &c.fine_checksum) {
                let same_window = fine_sums.is_empty() || fd.bytes_per_checksum == fine_bpc;
                if fd.r#type != f.kind() as i32 || !same_window {
                    return Err(invalid(format!(
                        "chunk {i} has fine checksums of another kind"
                    )));
                }
                fine_bpc = fd.bytes_per_checksum;
                if check_fine {
                    check_fine_against_coarse(
                        &ck,
                        fd.bytes_per_checksum,
                        &fd.checksums,
                        &cd.checksums,
                        c.len,
                        c.offset / ck.bytes_per_checksum() as u64,
                    )
                    .map_err(|e| {
                        invalid(format!(
                            "chunk {i}: fine and coarse checksums disagree: {e}"
                        ))
                    })?;
                }
                fine_sums.extend_from_slice(&fd.checksums);
            }
            next = c
                .offset
                .checked_add(c.len)
                .filter(|&n| n <= MAX_BLOCK_SIZE)
                .ok_or_else(|| invalid("chunk ends past the largest block size".into()))?;
        }
        if next != block.size {
            return Err(invalid(format!(
                "block size {} does not match its chunks ({next} bytes)",
                block.size
            )));
        }
        let fine = match fine_ck {
            Some(f) => Some(BlockChecksums::new(
                Checksummer::new(f.kind(), fine_bpc)?,
                fine_sums,
                block.size,
            )?),
            None => None,
        };
        Ok(Self {
            coarse: BlockChecksums::new(ck, sums, block.size)?,
            fine,
        })
    }
}

/// Checks a piece of a block received from a datanode: `data` starts at
/// `data_offset` and `cd` holds its window checksums, whose window must
/// divide the key's (`key`) and align with the piece. Returns the bytes
/// checksummed.
pub fn verify_piece(
    key: &Checksummer,
    cd: &ChecksumData,
    data_offset: u64,
    data: &[u8],
) -> Result<u64, IntegrityError> {
    let bpc = cd.bytes_per_checksum;
    if cd.r#type != key.kind() as i32
        || bpc == 0
        || !key.bytes_per_checksum().is_multiple_of(bpc)
        || !data_offset.is_multiple_of(bpc as u64)
    {
        return Err(IntegrityError::Invalid(
            "datanode checksums do not match the key's checksum settings".into(),
        ));
    }
    Checksummer::new(key.kind(), bpc)?.verify(data, data_offset / bpc as u64, &cd.checksums)?;
    Ok(data.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_proto::{BlockId, ChunkInfo};

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn checksums(bpc: u32, d: &[u8]) -> BlockChecksums {
        let ck = Checksummer::new(ChecksumType::Crc32c, bpc).unwrap();
        BlockChecksums::new(ck, ck.compute(d), d.len() as u64).unwrap()
    }

    fn chunk(ck: &Checksummer, offset: u64, d: &[u8], fine: bool) -> ChunkInfo {
        ChunkInfo {
            offset,
            len: d.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ck.kind() as i32,
                bytes_per_checksum: ck.bytes_per_checksum(),
                checksums: ck.compute(d),
            }),
            fine_checksum: fine.then(|| {
                let f = fine_of(ck).unwrap();
                ChecksumData {
                    r#type: f.kind() as i32,
                    bytes_per_checksum: FINE_WINDOW,
                    checksums: f.compute(d),
                }
            }),
        }
    }

    #[test]
    fn covering_widens_to_whole_windows_and_stops_at_the_block_end() {
        let c = checksums(100, &data(1050));
        let w = |o, l| c.covering(o, l).unwrap();
        assert_eq!(
            w(0, 1),
            Windows {
                start: 0,
                end: 100,
                first: 0,
                end_window: 1
            }
        );
        assert_eq!(
            w(150, 100),
            Windows {
                start: 100,
                end: 300,
                first: 1,
                end_window: 3
            }
        );
        assert_eq!(w(200, 100), w(200, 100));
        assert_eq!((w(200, 100).start, w(200, 100).end), (200, 300));
        // The short last window ends at the block's end.
        assert_eq!(
            w(1049, 1),
            Windows {
                start: 1000,
                end: 1050,
                first: 10,
                end_window: 11
            }
        );
        assert_eq!(c.sums_of(&w(1049, 1)).len(), 1);
        assert_eq!(c.sums_of(&w(0, 1050)).len(), 11);
        assert!(w(500, 0).is_empty());
        assert!(c.sums_of(&w(500, 0)).is_empty());
        assert_eq!(c.covering(1000, 51), None);
        assert_eq!(c.covering(u64::MAX, 2), None);
    }

    #[test]
    fn verify_finds_the_bad_window_in_one_piece_or_three() {
        let d = data(1050);
        let plain = checksums(100, &d);
        // The same checks with the run index (prefix CRCs) and without.
        for c in [plain.clone(), plain.index_runs()] {
            verify_finds_the_bad_window(&d, &c);
        }
        // Without checksums nothing is checked.
        let u = BlockChecksums::unchecked(1050).index_runs();
        assert!(!u.verifies());
        u.verify(&u.covering(0, 10).unwrap(), &[0; 10]).unwrap();
    }

    fn verify_finds_the_bad_window(d: &[u8], c: &BlockChecksums) {
        // An empty read checks nothing, wherever it starts.
        c.verify(&c.covering(130, 0).unwrap(), &[]).unwrap();
        // Every run of windows, whole.
        for s in (0..1050).step_by(100) {
            for e in (s + 1..=1050).step_by(70) {
                let w = c.covering(s, e - s).unwrap();
                let bytes = &d[w.start as usize..w.end as usize];
                // The one-CRC check is what passes, not the per-window one.
                let crc = c.checksummer().checksum(bytes);
                assert_eq!(c.expected_run(&w), Some(crc), "{s}..{e}");
                c.verify(&w, bytes).unwrap();
            }
        }
        let w = c.covering(130, 800).unwrap();
        let bytes = &d[w.start as usize..w.end as usize];
        c.verify(&w, bytes).unwrap();
        // Split as head / caller's buffer / tail, unaligned to windows.
        let (h, rest) = bytes.split_at(30);
        let (m, t) = rest.split_at(800);
        c.verify_pieces(&w, &[h, m, t]).unwrap();
        let mut bad = bytes.to_vec();
        bad[455] ^= 1; // byte 555 of the block: window 5
        let e = c.verify(&w, &bad).unwrap_err();
        assert!(
            matches!(
                e,
                ChecksumError::Mismatch {
                    window: 5,
                    offset: 500,
                    end: 600,
                    ..
                }
            ),
            "{e}"
        );
        let (h, rest) = bad.split_at(30);
        let (m, t) = rest.split_at(800);
        assert!(c.verify_pieces(&w, &[h, m, t]).is_err());
        // A run ending in the block's short last window (1000..1050).
        let w = c.covering(850, 200).unwrap();
        let mut end = d[w.start as usize..].to_vec();
        c.verify(&w, &end).unwrap();
        end[249] ^= 1; // byte 1049: window 10
        let e = c.verify(&w, &end).unwrap_err();
        assert!(
            matches!(e, ChecksumError::Mismatch { window: 10, .. }),
            "{e}"
        );
        // Too few bytes for the windows is an error, not a short check.
        assert!(c.verify(&w, &end[1..]).is_err());
    }

    #[test]
    fn checksum_counts_must_cover_the_block() {
        let ck = Checksummer::new(ChecksumType::Crc32c, 100).unwrap();
        assert!(BlockChecksums::new(ck, vec![0; 10], 1050).is_err());
        assert!(BlockChecksums::new(ck, vec![0; 11], 1050).is_ok());
    }

    #[test]
    fn a_block_is_checked_for_shape_and_fine_against_coarse() {
        let ck = Checksummer::new(ChecksumType::Crc32c, 16 * 1024).unwrap();
        let d = data(40_000);
        let (a, b) = d.split_at(32 * 1024);
        let block = |chunks| BlockData {
            id: Some(BlockId::default()),
            chunks,
            size: d.len() as u64,
            committed: true,
        };
        let good = block(vec![
            chunk(&ck, 0, a, true),
            chunk(&ck, a.len() as u64, b, true),
        ]);
        let i = BlockIntegrity::of_block(&good).unwrap();
        assert_eq!(i.finest().checksummer().bytes_per_checksum(), FINE_WINDOW);
        assert_eq!(i.coarse.checksummer().bytes_per_checksum(), 16 * 1024);
        let w = i.finest().covering(5000, 10).unwrap();
        assert_eq!((w.start, w.end), (4096, 8192));
        i.finest()
            .verify(&w, &d[w.start as usize..w.end as usize])
            .unwrap();
        // Without fine checksums on every chunk, the coarse ones are finest.
        let mixed = block(vec![
            chunk(&ck, 0, a, true),
            chunk(&ck, a.len() as u64, b, false),
        ]);
        assert_eq!(BlockIntegrity::of_block(&mixed).unwrap().fine, None);
        // Shape errors name the chunk.
        let gap = block(vec![chunk(&ck, 0, a, false), chunk(&ck, 40_000, b, false)]);
        let e = BlockIntegrity::of_block(&gap).unwrap_err().to_string();
        assert!(e.contains("chunk 1 starts at 40000"), "{e}");
        let short = block(vec![chunk(&ck, 0, a, false)]);
        let e = BlockIntegrity::of_block(&short).unwrap_err().to_string();
        assert!(e.contains("does not match its chunks"), "{e}");
        let mut odd = good.clone();
        odd.chunks[0].fine_checksum.as_mut().unwrap().checksums[3] ^= 1;
        let e = BlockIntegrity::of_block(&odd).unwrap_err().to_string();
        assert!(e.contains("disagree"), "{e}");
        let mut few = good.clone();
        few.chunks[1].checksum.as_mut().unwrap().checksums.pop();
        assert!(BlockIntegrity::of_block(&few).is_err());
        // An empty block has no chunks and nothing to check.
        let empty = BlockData {
            size: 0,
            chunks: vec![],
            ..good.clone()
        };
        assert!(!BlockIntegrity::of_block(&empty).unwrap().coarse.verifies());
        // Chunks this process wrote (its own fine checksums): the same
        // result, the shape still checked, the windows not combined again.
        let w = BlockIntegrity::of_written(&good).unwrap();
        assert_eq!(
            w.finest()
                .expected_run(&w.finest().covering(0, 40_000).unwrap()),
            i.finest()
                .expected_run(&i.finest().covering(0, 40_000).unwrap())
        );
        assert!(BlockIntegrity::of_written(&gap).is_err());
        assert!(BlockIntegrity::of_written(&few).is_err());
        assert!(BlockIntegrity::of_written(&odd).is_ok());
    }

    #[test]
    fn a_received_piece_must_use_windows_dividing_the_keys() {
        let key = Checksummer::new(ChecksumType::Crc32c, 16 * 1024).unwrap();
        let fine = Checksummer::new(ChecksumType::Crc32c, FINE_WINDOW).unwrap();
        let d = data(8192);
        let cd = ChecksumData {
            r#type: ChecksumType::Crc32c as i32,
            bytes_per_checksum: FINE_WINDOW,
            checksums: fine.compute(&d),
        };
        assert_eq!(verify_piece(&key, &cd, 4096, &d).unwrap(), 8192);
        // Misaligned piece, wrong type, window not dividing the key's.
        assert!(verify_piece(&key, &cd, 100, &d).is_err());
        let other = ChecksumData {
            r#type: ChecksumType::Crc32 as i32,
            ..cd.clone()
        };
        assert!(verify_piece(&key, &other, 4096, &d).is_err());
        let odd = ChecksumData {
            bytes_per_checksum: 3000,
            ..cd.clone()
        };
        assert!(verify_piece(&key, &odd, 0, &d).is_err());
        let mut bad = d.clone();
        bad[5000] ^= 1;
        assert!(matches!(
            verify_piece(&key, &cd, 4096, &bad),
            Err(IntegrityError::Checksum(ChecksumError::Mismatch {
                window: 2,
                ..
            }))
        ));
    }
}
