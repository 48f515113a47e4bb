//! A read-only shared mapping of a committed block file. Reads copy from it
//! (a user-space copy is about twice as fast as `pread`'s kernel copy here)
//! and checksum it in place. Committed block files are never truncated or
//! rewritten by the datanode (deletion unlinks them, which leaves the
//! mapping valid), and a file shorter than its block is never mapped, so
//! the mapping stays backed for its whole length.

use std::fs::File;

/// A mapped block file.
pub(crate) struct Mapping {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is read-only and only read through shared slices.
unsafe impl Send for Mapping {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file`, if it holds that many.
    pub(crate) fn new(file: &File, len: u64) -> Option<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap};
        let n = std::num::NonZeroUsize::new(usize::try_from(len).ok()?)?;
        if file.metadata().ok()?.len() < len {
            return None;
        }
        // SAFETY: a fresh read-only shared mapping of a file we hold open;
        // see the module comment for why its pages stay backed.
        let ptr =
            unsafe { mmap(None, n, ProtFlags::PROT_READ, MapFlags::MAP_SHARED, file, 0) }.ok()?;
        Some(Self { ptr, len: n.get() })
    }

    /// The mapped bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_only_files_holding_the_whole_block() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let m = Mapping::new(&f, 10).unwrap();
        assert_eq!(m.bytes(), b"0123456789");
        assert_eq!(Mapping::new(&f, 4).unwrap().bytes(), b"0123");
        assert!(Mapping::new(&f, 11).is_none(), "a short file is not mapped");
        assert!(Mapping::new(&f, 0).is_none(), "nothing to map");
    }
}
