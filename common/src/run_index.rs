//! Expected CRCs of runs of a block's windows in constant time.
//!
//! With `P[i]` the CRC of the block's first `i` windows, the CRC of windows
//! `a..b` is `P[b] ^ P[a]·x^(8·len)` modulo the polynomial, `len` the run's
//! bytes (the combine identity `crc(A‖B) = crc(A)·x^(8|B|) ^ crc(B)`). So a
//! verified read checks one CRC over its whole run against a value found
//! with two table reads and a multiplication or two, where folding the
//! windows' checksums takes one dependent step per window.
//!
//! A multiplication by a power of x is one carry-less multiply and one
//! CRC32C instruction where the CPU has both (CRC32C on x86-64), and a
//! 32-step shift-and-add otherwise.

use std::sync::Arc;

use ozone_proto::ChecksumType;

use crate::checksum::{Checksummer, PerWindow, WindowShift, gf2_poly, multmodp, x8nmodp};

/// `x^(8·w·2^j)` modulo the polynomial for `j` in `0..64`, `w` the window
/// size, in the form [`Powers::mul`] takes.
struct Powers {
    poly: u32,
    /// Multiplications use the CPU's carry-less multiply and CRC32C
    /// instructions: operands are kept times `x^-32`, this factor (`None`
    /// for the plain multiplication).
    hw: Option<u32>,
    ops: [u32; 64],
}

impl Powers {
    fn new(ck: &Checksummer) -> Option<Self> {
        let poly = gf2_poly(ck.kind())?;
        let hw = (ck.kind() == ChecksumType::Crc32c && hw::available()).then(|| x_inv32(poly));
        let mut p = Self {
            poly,
            hw,
            ops: [0; 64],
        };
        let mut op = x8nmodp(poly, ck.bytes_per_checksum() as u64);
        for j in 0..p.ops.len() {
            p.ops[j] = p.form(op);
            op = multmodp(poly, op, op);
        }
        Some(p)
    }

    /// The powers of `ck`'s window, built once per algorithm and window
    /// size for the life of the process; `None` for no checksum.
    fn of(ck: &Checksummer) -> Option<&'static Self> {
        static BUILT: PerWindow<Powers> = PerWindow::new();
        BUILT.get(ck, || Self::new(ck))
    }

    /// `op` (a plain `x^k` modulo the polynomial) in the form `mul` takes.
    fn form(&self, op: u32) -> u32 {
        match self.hw {
            Some(inv) => multmodp(self.poly, op, inv),
            None => op,
        }
    }

    /// `c` times the power `op` (as given by [`Powers::form`]).
    #[inline]
    fn mul(&self, op: u32, c: u32) -> u32 {
        if self.hw.is_some() {
            // SAFETY: `hw` is set only where the CPU has the instructions.
            unsafe { hw::mul(op, c) }
        } else {
            multmodp(self.poly, op, c)
        }
    }

    /// `c` times `x^(8·w·k)`: one multiplication per bit set in `k`.
    #[inline]
    fn windows(&self, mut c: u32, k: u64) -> u32 {
        let mut bits = k;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            c = self.mul(self.ops[j], c);
            bits &= bits - 1;
        }
        c
    }
}

/// `x^-32` modulo the reflected polynomial `poly` (whose constant term is
/// one, so x is invertible): `x^-1` is `(poly + 1) / x`, that is `poly`
/// shifted up one place with `x^31`'s bit set; then five squarings.
fn x_inv32(poly: u32) -> u32 {
    let mut v = (poly << 1) | 1;
    for _ in 0..5 {
        v = multmodp(poly, v, v);
    }
    v
}

/// The prefix CRCs of one block's windows.
#[derive(Clone)]
pub struct RunIndex {
    powers: &'static Powers,
    /// `prefix[i]`: CRC of the first `i` windows; `prefix[0]` is 0.
    prefix: Arc<[u32]>,
    /// `x^(8·t)` in `mul` form for the last window's `t` bytes when it is
    /// shorter than the others; `None` when it is whole.
    tail: Option<u32>,
}

impl std::fmt::Debug for RunIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunIndex({} windows)", self.prefix.len() - 1)
    }
}

impl RunIndex {
    /// The index of a block of `size` bytes whose windows of `ck` have
    /// checksums `sums` (one per window); `None` for no checksum or when
    /// their number does not match.
    pub fn new(ck: &Checksummer, sums: &[u32], size: u64) -> Option<Self> {
        let powers = Powers::of(ck)?;
        let bpc = ck.bytes_per_checksum() as u64;
        if sums.len() as u64 != size.div_ceil(bpc) {
            return None;
        }
        // Built with the one-window table shift (a few ns a window, for
        // every algorithm); the short last window, if any, by its own power.
        let shift = WindowShift::of(ck)?;
        let tail_op = Some(size % bpc)
            .filter(|&t| t != 0)
            .map(|t| x8nmodp(powers.poly, t));
        let mut prefix = Vec::with_capacity(sums.len() + 1);
        let mut p = 0u32;
        prefix.push(p);
        let last = sums.len().saturating_sub(1);
        for (i, &s) in sums.iter().enumerate() {
            p = match tail_op {
                Some(t) if i == last => multmodp(powers.poly, t, p),
                _ => shift.shift(p),
            } ^ s;
            prefix.push(p);
        }
        Some(Self {
            powers,
            prefix: prefix.into(),
            tail: tail_op.map(|t| powers.form(t)),
        })
    }

    /// The CRC of windows `first..end` (`end` exclusive, at most the
    /// block's window count), as the block's checksums say it should be.
    #[inline]
    pub fn run(&self, first: usize, end: usize) -> u32 {
        let (pa, pb) = (self.prefix[first], self.prefix[end]);
        if first == 0 {
            return pb;
        }
        let windows = self.prefix.len() - 1;
        let short = end == windows && self.tail.is_some();
        let mut v = self
            .powers
            .windows(pa, (end - first - short as usize) as u64);
        if let (true, Some(t)) = (short, self.tail) {
            v = self.powers.mul(t, v);
        }
        pb ^ v
    }

    /// Asks the CPU to bring in what [`RunIndex::run`] of the same windows
    /// reads, so that it need not wait for memory: a hint, issued before
    /// the CRC pass over the run's bytes.
    #[inline]
    pub fn prefetch(&self, first: usize, end: usize) {
        for i in [first, end] {
            if let Some(p) = self.prefix.get(i) {
                crate::hint::prefetch(p);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod hw {
    /// Whether this CPU has PCLMULQDQ and SSE4.2 (checked once).
    pub(super) fn available() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.2")
        })
    }

    /// `op·x^32 · c` modulo the CRC32C polynomial, both reflected 32-bit
    /// (bit 31 is x^0): the carry-less product of two reflected values has
    /// x^0 at bit 62, so shifted up one place it is a reflected 64-bit
    /// value; the CRC32C instruction with a zero register returns such a
    /// value times x^32 modulo the polynomial. `op` is kept times x^-32, so
    /// the result is the plain product.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE4.2 ([`available`]).
    #[target_feature(enable = "pclmulqdq,sse4.2")]
    pub(super) unsafe fn mul(op: u32, c: u32) -> u32 {
        use std::arch::x86_64::{
            _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi64_si128, _mm_cvtsi128_si64,
        };
        let p =
            _mm_clmulepi64_si128::<0>(_mm_cvtsi64_si128(op as i64), _mm_cvtsi64_si128(c as i64));
        _mm_crc32_u64(0, (_mm_cvtsi128_si64(p) as u64) << 1) as u32
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod hw {
    pub fn available() -> bool {
        false
    }

    /// Never called: [`available`] is false.
    pub unsafe fn mul(_: u32, _: u32) -> u32 {
        unreachable!("no hardware multiply on this architecture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_inv32_undoes_x32() {
        for kind in [ChecksumType::Crc32c, ChecksumType::Crc32] {
            let poly = gf2_poly(kind).unwrap();
            assert_eq!(
                multmodp(poly, x8nmodp(poly, 4), x_inv32(poly)),
                1 << 31,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn the_hardware_multiply_is_the_plain_one() {
        if !hw::available() {
            return;
        }
        let poly = gf2_poly(ChecksumType::Crc32c).unwrap();
        let inv = x_inv32(poly);
        let mut s = 0x1234_5678u32;
        for _ in 0..10_000 {
            // xorshift: operands over the whole range.
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let (a, b) = (s, s.rotate_left(11) ^ 0x9e37_79b9);
            let a = if a == 0 { 1 } else { a };
            // SAFETY: available() was checked above.
            let got = unsafe { hw::mul(multmodp(poly, a, inv), b) };
            assert_eq!(got, multmodp(poly, a, b), "{a:#x} * {b:#x}");
        }
    }

    #[test]
    fn runs_match_the_crc_of_their_bytes() {
        let data: Vec<u8> = (0..(37 * 512 + 200) as u32)
            .map(|i| (i * 131 + i / 7) as u8)
            .collect();
        for kind in [ChecksumType::Crc32c, ChecksumType::Crc32] {
            for (bpc, size) in [(512usize, data.len()), (512, 37 * 512), (4096, data.len())] {
                let ck = Checksummer::new(kind, bpc as u32).unwrap();
                let bytes = &data[..size];
                let sums = ck.compute(bytes);
                let ix = RunIndex::new(&ck, &sums, size as u64).unwrap();
                let n = sums.len();
                for a in 0..n {
                    for b in a..=n {
                        let (s, e) = (a * bpc, (b * bpc).min(size));
                        assert_eq!(
                            ix.run(a, b),
                            ck.checksum(&bytes[s..e]),
                            "{kind:?} bpc {bpc} size {size} windows {a}..{b}"
                        );
                    }
                }
                // And the plain (software) multiply gives the same.
                let mut soft = ix.clone();
                let p = Powers::new(&ck).unwrap();
                if p.hw.is_some() {
                    let soft_powers = Powers {
                        hw: None,
                        ops: std::array::from_fn(|j| {
                            multmodp(p.poly, p.ops[j], x8nmodp(p.poly, 4))
                        }),
                        ..p
                    };
                    soft.powers = Box::leak(Box::new(soft_powers));
                    soft.tail = ix.tail.map(|t| multmodp(p.poly, t, x8nmodp(p.poly, 4)));
                    assert_eq!(soft.run(3, n), ix.run(3, n));
                    assert_eq!(soft.run(1, 2), ix.run(1, 2));
                }
            }
        }
    }

    #[test]
    fn refuses_what_it_cannot_index() {
        let ck = Checksummer::new(ChecksumType::Crc32c, 512).unwrap();
        assert!(RunIndex::new(&ck, &[1, 2], 2000).is_none());
        let none = Checksummer::new(ChecksumType::None, 512).unwrap();
        assert!(RunIndex::new(&none, &[], 2000).is_none());
        let empty = RunIndex::new(&ck, &[], 0).unwrap();
        assert_eq!(empty.run(0, 0), 0);
    }
}
