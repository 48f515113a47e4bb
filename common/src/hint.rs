//! Hints to the CPU: they change no memory and never fault.

/// Asks the CPU to bring the cache line holding `r` in while other work
/// runs. Harmless on any address, even one that would fault if read (a
/// page past the end of a mapped file).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint has no effect on memory or on faults.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(r as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
