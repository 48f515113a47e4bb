//! Short-circuit reads from a read-only shared mapping of the block file,
//! made safe against the file shrinking (truncated by hand, a failing disk)
//! and against I/O errors: both reach a reader of a mapping as SIGBUS, which
//! would kill the process. A handler turns such a fault, and only such a
//! fault, into a failed read:
//!
//! - before copying out of a mapping, the reading thread records the
//!   mapping's address range in a thread-local ([`GUARD`]);
//! - on SIGBUS at an address inside the faulting thread's recorded range,
//!   the handler marks that mapping damaged (an atomic flag), maps an
//!   anonymous zero page over the faulting page (`mmap` with `MAP_FIXED`, a
//!   plain system call), sets the thread's [`FAULTED`] flag and returns:
//!   the faulting instruction runs again, now reading zeros;
//! - after the copy the thread clears its range and checks both flags
//!   (another thread's fault may have put the zero page it read): either
//!   set, the read fails and moves to another replica, and the mapping is
//!   never read again (the block is opened anew).
//!
//! Any other SIGBUS goes to the handler that was installed before this one,
//! or, if there was none, kills the process as it would have without us.
//!
//! A truncation that leaves part of a page (the page holding the new end of
//! file) reads as zeros without a fault. Verified reads catch that with
//! their checksums (and zeros where the data was zeros are the data).
//! Unverified reads touch the first byte of the page after the bytes they
//! copied, under the same guard: if the new end of file lies in the read's
//! last page, that next page is wholly past it and faults. A read that ends
//! in the block's last page asks the file's size instead.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering, compiler_fence};

use nix::libc::{self, c_int, c_void, siginfo_t};

thread_local! {
    /// The mapping the thread is reading: `[start, end)` and the address of
    /// its `damaged` flag; `(0, 0, 0)` when none.
    static GUARD: Cell<(usize, usize, usize)> = const { Cell::new((0, 0, 0)) };
    /// Set by the handler when a read of the guarded range faulted.
    static FAULTED: Cell<bool> = const { Cell::new(false) };
}

/// The handler in place before ours, and the page size.
struct Installed {
    previous: libc::sigaction,
    page: usize,
}

// SAFETY: `sigaction` is plain data (handler addresses, flags, a mask);
// set once before our handler is installed, only read afterwards.
unsafe impl Sync for Installed {}
unsafe impl Send for Installed {}

/// Set before our handler goes in, so the handler always finds it.
static PREVIOUS: OnceLock<Installed> = OnceLock::new();
/// Whether our handler is in place.
static READY: OnceLock<bool> = OnceLock::new();

/// Installs the SIGBUS handler once; false if it could not be installed
/// (then reads use `pread`).
pub(crate) fn install() -> bool {
    *READY.get_or_init(|| {
        // SAFETY: sysconf and sigaction with valid pointers. The previous
        // action is saved (in a OnceLock, read by the handler with one
        // atomic load) before ours is installed. SA_SIGINFO: the handler
        // takes the fault address; SA_ONSTACK: it runs on the thread's
        // alternate stack when there is one; without SA_NODEFER a SIGBUS
        // inside the handler is blocked, never recursive.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page <= 0 {
                return false;
            }
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return false;
            }
            if PREVIOUS
                .set(Installed {
                    previous,
                    page: page as usize,
                })
                .is_err()
            {
                return false;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) == 0
        }
    })
}

/// The system's page size (the unit in which a truncated file's pages
/// fault), once [`install`] succeeded; 4096 before.
pub(crate) fn page_size() -> usize {
    PREVIOUS.get().map_or(4096, |i| i.page)
}

/// The SIGBUS handler.
///
/// SAFETY (why each step is sound in a signal handler):
/// - The thread-locals are `const`-initialised `Cell`s of `Copy` types with
///   no destructor: reading or writing them is a plain access to the
///   thread's static TLS block (these crates link into executables, never
///   `dlopen`ed objects whose TLS could be allocated lazily), no lock, no
///   allocation, no lazy initialisation.
/// - The fault address comes from `siginfo_t` (`si_addr`, set by the
///   kernel for SIGBUS).
/// - `mmap(MAP_FIXED | MAP_ANONYMOUS | MAP_PRIVATE)` over the one page is a
///   single system call (glibc's wrapper takes no lock); it replaces only a
///   page of our own mapping (the address was checked to lie in the range
///   this thread is reading), so no memory anyone else uses changes.
/// - Chaining calls the previous action as the kernel would have: with
///   `SA_SIGINFO` its three-argument form with our arguments, otherwise the
///   one-argument form. With no previous handler (`SIG_DFL`) or an ignored
///   one (ignoring a hardware fault would spin), the default action is
///   restored and the handler returns: the instruction faults again and
///   the process dies of SIGBUS, exactly as without this handler.
///
/// Coexistence with a host process: the handler takes only faults inside a
/// mapping the faulting thread is copying from at that moment; every other
/// SIGBUS reaches the handler installed before ours. A JVM (which uses
/// SIGBUS for its own mapped buffers) reaches block files through the
/// sidecar or its own code, not through this library; a host that installs
/// its own SIGBUS handler after ours without chaining would leave our reads
/// unprotected: such hosts set `ozone.client.read.short-circuit.mmap` to
/// false, and reads use `pread`.
extern "C" fn on_sigbus(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(inst) = PREVIOUS.get() else {
        return default_action(sig);
    };
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, end, damaged) = GUARD.with(Cell::get);
    if start <= addr && addr < end {
        // First the mapping's flag (an atomic store), then the zero page:
        // another thread that reads the zero page finds the flag set when
        // it checks after its copy (the page-table change is ordered after
        // the store).
        // SAFETY: `damaged` is the address of the `AtomicBool` of the
        // mapping being read, which outlives the guarded read.
        unsafe { (*(damaged as *const AtomicBool)).store(true, Ordering::SeqCst) };
        let page = addr & !(inst.page - 1);
        // SAFETY: `page` is page-aligned and inside our mapping (start is
        // page-aligned, mmap returns such addresses), see above.
        let r = unsafe {
            libc::mmap(
                page as *mut c_void,
                inst.page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            FAULTED.with(|f| f.set(true));
            return;
        }
    }
    let prev = &inst.previous;
    if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
        return default_action(sig);
    }
    // SAFETY: the previous action's handler, called in the form its flags
    // declare, with the arguments the kernel gave us.
    unsafe {
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
                std::mem::transmute(prev.sa_sigaction);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(prev.sa_sigaction);
            f(sig);
        }
    }
}

/// Restores the default action; returning re-runs the faulting instruction,
/// which then kills the process with `sig`.
fn default_action(sig: c_int) {
    // SAFETY: sigaction is async-signal-safe; a zeroed action is SIG_DFL.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
    }
}

/// A read-only shared mapping of a whole block file.
pub(crate) struct Mapping {
    ptr: *const u8,
    len: usize,
    /// A read faulted: zero pages replaced some of the file's; set by the
    /// handler, so every reader of the mapping sees it.
    damaged: AtomicBool,
}

// SAFETY: the mapping is read-only and unmapped only on drop; threads read
// it only through `read_guarded`.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

/// Why a mapped read gave nothing.
#[derive(Debug)]
pub(crate) enum MappedError {
    /// A page of the file was gone (truncated) or unreadable (I/O error).
    Fault,
}

impl Mapping {
    /// Maps `len` bytes of `file`; `None` when empty or refused (the reads
    /// of that block then use `pread`).
    pub(crate) fn new(file: &File, len: u64) -> Option<Self> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a fresh read-only shared mapping of an open descriptor;
        // nothing else is placed at the address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Self {
            ptr: ptr as *const u8,
            len,
            damaged: AtomicBool::new(false),
        })
    }

    /// Whether a read of the mapping faulted (it holds zero pages).
    pub(crate) fn damaged(&self) -> bool {
        self.damaged.load(Ordering::SeqCst)
    }

    /// Runs `f` over the mapped bytes with the fault guard on; a fault
    /// anywhere in the mapping, by this read or another thread's, before
    /// `f` ends makes it `Fault` (the mapping holds zero pages: it is not
    /// read again).
    ///
    /// `f` must only read the slice (copy, checksum): it sees the file's
    /// bytes as they are at each access.
    pub(crate) fn read_guarded<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R, MappedError> {
        if self.damaged() {
            return Err(MappedError::Fault);
        }
        let start = self.ptr as usize;
        let flag = &self.damaged as *const AtomicBool as usize;
        GUARD.with(|g| g.set((start, start + self.len, flag)));
        FAULTED.with(|x| x.set(false));
        // The handler runs on this thread: keep the compiler from moving
        // the reads of the mapping outside the guarded stretch.
        compiler_fence(Ordering::SeqCst);
        // SAFETY: `ptr` maps `len` readable bytes until drop; a page that
        // faults is replaced by a readable zero page before the access
        // repeats, so every access completes.
        let r = f(unsafe { std::slice::from_raw_parts(self.ptr, self.len) });
        compiler_fence(Ordering::SeqCst);
        GUARD.with(|g| g.set((0, 0, 0)));
        if FAULTED.with(Cell::get) || self.damaged() {
            return Err(MappedError::Fault);
        }
        Ok(r)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no slice of it
        // outlives `read_guarded`.
        unsafe {
            libc::munmap(self.ptr as *mut c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(n: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        (f, data)
    }

    #[test]
    fn reads_what_the_file_holds() {
        assert!(install());
        let (f, data) = file(100_000);
        let m = Mapping::new(f.as_file(), data.len() as u64).unwrap();
        let mut out = vec![0u8; 5000];
        m.read_guarded(|s| out.copy_from_slice(&s[777..5777]))
            .unwrap();
        assert_eq!(out, data[777..5777]);
    }

    #[test]
    fn a_truncated_file_is_a_fault_not_a_crash() {
        assert!(install());
        let (f, data) = file(1 << 20);
        let m = Mapping::new(f.as_file(), data.len() as u64).unwrap();
        f.as_file().set_len(10_000).unwrap();
        let mut out = vec![0u8; 64 << 10];
        let r = m.read_guarded(|s| {
            // black_box: an optimised build would drop a copy never read.
            out.copy_from_slice(&s[500_000..500_000 + (64 << 10)]);
            std::hint::black_box(&out);
        });
        assert!(matches!(r, Err(MappedError::Fault)), "{r:?}");
        // The handler is still in place for the next fault, on another
        // mapping of the same file.
        let m2 = Mapping::new(f.as_file(), data.len() as u64).unwrap();
        let r = m2.read_guarded(|s| {
            // black_box: an optimised build would drop a copy never read.
            out.copy_from_slice(&s[200_000..200_000 + (64 << 10)]);
            std::hint::black_box(&out);
        });
        assert!(matches!(r, Err(MappedError::Fault)));
        // Damaged now: even a read of the surviving part is refused (a
        // zero page may sit anywhere a fault was taken).
        assert!(m2.damaged());
        assert!(matches!(m2.read_guarded(|s| s[0]), Err(MappedError::Fault)));
        // A fresh mapping reads the surviving part.
        let m3 = Mapping::new(f.as_file(), data.len() as u64).unwrap();
        let r = m3.read_guarded(|s| s[..4096].to_vec()).unwrap();
        assert_eq!(r, data[..4096]);
    }

    /// A SIGBUS outside any guarded read still kills: run in a child
    /// process, which must die of SIGBUS.
    #[test]
    fn faults_outside_a_guarded_read_still_kill() {
        if std::env::var_os("OZONE_SIGBUS_CHILD").is_some() {
            assert!(install());
            let (f, data) = file(1 << 20);
            let m = Mapping::new(f.as_file(), data.len() as u64).unwrap();
            f.as_file().set_len(0).unwrap();
            // SAFETY: deliberately unguarded: this must die of SIGBUS.
            let v = unsafe { std::ptr::read_volatile(m.ptr.add(600_000)) };
            println!("survived with {v}");
            std::process::exit(0);
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "shortcircuit::mapped::tests::faults_outside_a_guarded_read_still_kill",
                "--nocapture",
            ])
            .env("OZONE_SIGBUS_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
