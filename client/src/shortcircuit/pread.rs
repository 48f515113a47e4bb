//! Verified reads without a mapping: the whole checksum windows covering a
//! range are read with one `preadv` (the requested bytes straight into the
//! caller's buffer, the window parts outside it into a reused per-thread
//! scratch buffer) and checked where they lie.

use std::fs::File;

use ozone_common::integrity::{BlockChecksums, Windows};

use super::ScError;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads `out.len()` bytes at `offset` of `file`, a block with checksums
/// `sums`, and verifies `w`, the windows covering them
/// ([`BlockChecksums::covering`]). Returns the bytes checksummed.
pub(crate) fn read_verified(
    file: &File,
    sums: &BlockChecksums,
    w: Windows,
    offset: u64,
    out: &mut [u8],
) -> Result<u64, ScError> {
    if out.is_empty() {
        return Ok(0);
    }
    let head = (offset - w.start) as usize;
    let tail = (w.end - offset - out.len() as u64) as usize;
    SCRATCH.with(|s| -> Result<u64, ScError> {
        let mut s = s.borrow_mut();
        if s.len() < head + tail {
            s.resize(head + tail, 0);
        }
        let (h, t) = s[..head + tail].split_at_mut(head);
        read_exact_vectored_at(file, &mut [&mut *h, &mut *out, &mut *t], w.start)?;
        sums.verify_pieces(&w, &[h, out, t])?;
        Ok(w.len())
    })
}

/// `preadv` until every buffer is full; end of file is an error.
fn read_exact_vectored_at(
    file: &File,
    bufs: &mut [&mut [u8]; 3],
    mut offset: u64,
) -> Result<(), ScError> {
    let [a, b, c] = bufs;
    let mut iov = [
        std::io::IoSliceMut::new(a),
        std::io::IoSliceMut::new(b),
        std::io::IoSliceMut::new(c),
    ];
    let mut left: &mut [std::io::IoSliceMut] = &mut iov;
    while !left.is_empty() {
        let n = match nix::sys::uio::preadv(file, left, offset as nix::libc::off_t) {
            Ok(0) => {
                return Err(ScError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "block file is shorter than its metadata",
                )));
            }
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ScError::Io(e.into())),
        };
        offset += n as u64;
        std::io::IoSliceMut::advance_slices(&mut left, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozone_common::checksum::Checksummer;
    use ozone_proto::ChecksumType;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn block(n: usize) -> (File, Vec<u8>, BlockChecksums) {
        let data: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let ck = Checksummer::new(ChecksumType::Crc32c, 512).unwrap();
        let sums = BlockChecksums::new(ck, ck.compute(&data), n as u64).unwrap();
        (f, data, sums)
    }

    #[test]
    fn unaligned_ranges_read_exactly_and_count_the_widened_windows() {
        let (f, data, sums) = block(5000);
        for (off, len, checked) in [
            (0u64, 5000usize, 5000u64),
            (1, 1, 512),
            (511, 2, 1024),
            (700, 3000, 3584),
            (4999, 1, 5000 - 4608),
            (1024, 0, 0),
        ] {
            let mut out = vec![0u8; len];
            let n = read_verified(
                &f,
                &sums,
                sums.covering(off, len as u64).unwrap(),
                off,
                &mut out,
            )
            .unwrap();
            assert_eq!(n, checked, "{off}+{len}");
            assert_eq!(out, &data[off as usize..off as usize + len]);
        }
        assert!(sums.covering(4999, 2).is_none(), "past the end: no windows");
    }

    #[test]
    fn a_flipped_byte_outside_the_range_but_in_its_window_is_caught() {
        let (f, _, sums) = block(5000);
        // Byte 1030 lies in window 2 (1024..1536), outside the range read.
        f.write_all_at(&[0xff], 1030).unwrap();
        let mut out = [0u8; 10];
        let e =
            read_verified(&f, &sums, sums.covering(1100, 10).unwrap(), 1100, &mut out).unwrap_err();
        assert!(matches!(e, ScError::Checksum(_)), "{e}");
        read_verified(&f, &sums, sums.covering(2000, 10).unwrap(), 2000, &mut out).unwrap();
        // A file cut short is an error, not short data.
        f.set_len(3000).unwrap();
        let e =
            read_verified(&f, &sums, sums.covering(2990, 10).unwrap(), 2990, &mut out).unwrap_err();
        assert!(matches!(e, ScError::Io(_)), "{e}");
    }
}
