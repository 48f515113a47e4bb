//! Deterministic pseudo-random test data (fast, incompressible enough).

/// Fills `buf` with the bytes of stream `seed` starting at byte `offset`
/// (the same `(seed, offset)` always gives the same bytes).
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        let word = mix(seed, pos / 8).to_le_bytes();
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[skip..skip + n]);
        i += n;
        pos += n as u64;
    }
}

fn mix(seed: u64, n: u64) -> u64 {
    // splitmix64 of (seed, word index).
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(0x94D0_49BB_1331_11EB);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` bytes of stream `seed`.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, 0, &mut v);
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn offsets_agree() {
        let all = super::bytes(7, 100);
        let mut part = vec![0u8; 37];
        super::fill(7, 13, &mut part);
        assert_eq!(&all[13..50], &part[..]);
        assert_ne!(super::bytes(8, 100), all);
    }
}
