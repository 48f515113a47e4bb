//! A short-circuit positional read allocates nothing on the heap (after the
//! block is open), verified or not. Counted by a global allocator.

use ozone_client::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ozone_testkit::data;
use ozone_testkit::harness::*;
use ozone_testkit::local::LocalCluster;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn short_circuit_reads_do_not_allocate() {
    // One thread: nothing else in this process runs while counting.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tc = cluster(3, &[]).await;
        let c = &tc.cluster;
        let dir = LocalCluster::socket_dir_of(c.dir(), "node1");
        let sockets = format!("ozone.domain.socket.path={}", dir.display());
        let writer = client(c, Some("node1"), &[&sockets]);
        bucket(&writer).await;
        let want = data::bytes(5, 4 << 20);
        put(&writer, "k", &want, 1 << 20).await;
        // Mapped reads and pread, each with verification off and on.
        for (mmap, verify) in [(true, false), (true, true), (false, false), (false, true)] {
            let key = format!("ozone.client.read.short-circuit.mmap={mmap}");
            let w = client(c, Some("node1"), &[&sockets, &key]);
            let r = w
                .with_verify_checksum(verify)
                .open_key(KeyPath::new("vol", "bucket", "k"))
                .await
                .unwrap();
            let mut buf = vec![0u8; 65_536];
            let offsets: Vec<u64> = (0..1000u64)
                .map(|i| (i * 40_009) % ((4 << 20) - 65_536))
                .collect();
            // Warm up: opens the block, fills the scratch buffer and the caches.
            for &o in &offsets {
                r.read_exact_at(o, &mut buf).await.unwrap();
            }
            let before = w.stats();
            ALLOCS.store(0, Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
            for &o in &offsets {
                r.read_exact_at(o, &mut buf).await.unwrap();
            }
            COUNTING.store(false, Ordering::Relaxed);
            let n = ALLOCS.load(Ordering::Relaxed);
            let after = w.stats();
            assert_eq!(
                after.short_circuit_bytes - before.short_circuit_bytes,
                1000 * 65_536,
                "all reads short-circuit"
            );
            assert_eq!(
                after.short_circuit_mapped_bytes - before.short_circuit_mapped_bytes,
                if mmap { 1000 * 65_536 } else { 0 },
                "mapped: {mmap}"
            );
            let o = *offsets.last().unwrap() as usize;
            assert_eq!(buf, want[o..o + 65_536]);
            assert_eq!(
                n, 0,
                "{n} heap allocations in 1000 reads (mmap {mmap}, verify {verify})"
            );
        }
        tc.cluster.stop().await;
    });
}
