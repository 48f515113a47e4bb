//! Block files damaged under long-lived readers: truncated and restored in
//! a loop while a direct short-circuit client and a sidecar keep reading.
//! Reads fail over to another replica and stay bit-exact; nobody crashes
//! (block files are read with `pread`, never mapped, so a truncated file
//! gives an error, not a SIGBUS).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use ozone_cli::data;
use ozone_client::{KeyRead, SidecarClient};
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncating_block_files_under_long_lived_readers_never_crashes_them() {
    let mut tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let w = client(&tc.cluster, Some("node1"), &[]);
    w.create_volume("vol").await.unwrap();
    w.create_bucket("vol", "bucket").await.unwrap();
    let want = Arc::new(data::bytes(77, 4 << 20));
    let key = put(&w, "k", &want, 1 << 20).await;
    let node1 = tc.cluster.datanode_id(0).unwrap();
    let files: Vec<_> = key
        .blocks
        .iter()
        .map(|b| {
            assert!(
                b.replicas.iter().any(|r| r.id == node1),
                "node1 holds a replica"
            );
            block_file(&tc.cluster, 0, b.block.as_ref().unwrap())
        })
        .collect();
    let sidecar = tc
        .cluster
        .start_sidecar("node1", "long", &["ozone.client.verify.checksum = false"])
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    let mut direct_stats = Vec::new();
    // Direct short-circuit readers, verify on and off, one open stream each.
    for verify in [true, false] {
        let sockets = format!(
            "ozone.domain.socket.path={}",
            tc.cluster.socket_dir(0).display()
        );
        let direct = client(&tc.cluster, Some("node1"), &[sockets.as_str()]);
        let r = direct
            .with_verify_checksum(verify)
            .open_key("vol", "bucket", "k")
            .await
            .unwrap();
        direct_stats.push(direct);
        let (stop, reads, want) = (stop.clone(), reads.clone(), want.clone());
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            while !stop.load(Ordering::Relaxed) {
                let off = rand::rng().random_range(0..want.len() - buf.len()) as u64;
                r.read_exact_at(off, &mut buf).await.unwrap();
                assert!(
                    buf == want[off as usize..off as usize + buf.len()],
                    "bit-exact at {off} (verify {verify})"
                );
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // The sidecar, a long-lived reader in its own process.
    {
        let app = SidecarClient::unix(&sidecar.socket).unwrap();
        let r = app.open_key("vol", "bucket", "k").await.unwrap();
        let (stop, reads, want) = (stop.clone(), reads.clone(), want.clone());
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            while !stop.load(Ordering::Relaxed) {
                let off = rand::rng().random_range(0..want.len() - buf.len()) as u64;
                r.read_exact_at(off, &mut buf).await.unwrap();
                assert!(
                    buf == want[off as usize..off as usize + buf.len()],
                    "sidecar at {off}"
                );
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Truncate node1's replicas and put them back, in a loop.
    let originals: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut cuts = 0;
    while Instant::now() < deadline {
        for (f, orig) in files.iter().zip(&originals) {
            let cut = rand::rng().random_range(0..orig.len() as u64);
            std::fs::OpenOptions::new()
                .write(true)
                .open(f)
                .unwrap()
                .set_len(cut)
                .unwrap();
            cuts += 1;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        for (f, orig) in files.iter().zip(&originals) {
            use std::os::unix::fs::FileExt;
            std::fs::OpenOptions::new()
                .write(true)
                .open(f)
                .unwrap()
                .write_all_at(orig, 0)
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader failed");
    }
    let n = reads.load(Ordering::Relaxed);
    assert!(n > 100, "readers kept reading: {n}");
    let sc: u64 = direct_stats
        .iter()
        .map(|c| c.stats().short_circuit_bytes)
        .sum();
    assert!(sc > 0, "the direct readers read short-circuit");
    // The sidecar process is alive and still serves.
    let app = SidecarClient::unix(&sidecar.socket).unwrap();
    let r = app.open_key("vol", "bucket", "k").await.unwrap();
    let mut buf = vec![0u8; 1000];
    r.read_exact_at(5, &mut buf).await.unwrap();
    assert!(buf == want[5..1005]);
    eprintln!("{n} reads bit-exact across {cuts} truncations");
    tc.cluster.stop_sidecar("long").await;
}
