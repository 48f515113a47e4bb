//! Block files damaged under long-lived readers: truncated and restored in
//! a loop while a direct short-circuit client and a sidecar keep reading.
//! Reads fail over to another replica and stay bit-exact; nobody crashes:
//! block files are read from mappings, and a page that faults (SIGBUS) makes
//! the read fail over instead of killing the reader. Run with mappings
//! (verification on and off) and with `pread`.

use ozone_client::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ozone_client::{KeyRead, SidecarClient};
use ozone_testkit::data;
use ozone_testkit::harness::*;
use rand::Rng;

/// Reads random 64 KiB ranges of `r` until `stop`, each checked against
/// `want`, counting them in `reads`.
fn keep_reading<R: KeyRead + 'static>(
    r: R,
    who: String,
    stop: &Arc<AtomicBool>,
    reads: &Arc<AtomicU64>,
    want: &Arc<Vec<u8>>,
) -> tokio::task::JoinHandle<()> {
    let (stop, reads, want) = (stop.clone(), reads.clone(), want.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        while !stop.load(Ordering::Relaxed) {
            let off = rand::rng().random_range(0..want.len() - buf.len()) as u64;
            r.read_exact_at(off, &mut buf).await.unwrap();
            assert!(
                buf == want[off as usize..off as usize + buf.len()],
                "{who}: bit-exact at {off}"
            );
            reads.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncating_block_files_under_long_lived_readers_never_crashes_them() {
    truncations_under_readers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncations_under_pread_readers() {
    truncations_under_readers(false).await;
}

/// Long-lived readers (direct with verification on and off, a sidecar with
/// it off) while node1's replicas are truncated and restored in a loop;
/// `mmap`: short-circuit reads from mappings, else `pread`.
async fn truncations_under_readers(mmap: bool) {
    let mmap_key = format!("ozone.client.read.short-circuit.mmap={mmap}");
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
        .start_sidecar(
            "node1",
            "long",
            &[
                "ozone.client.verify.checksum = false",
                &format!("ozone.client.read.short-circuit.mmap = {mmap}"),
            ],
        )
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
        let direct = client(
            &tc.cluster,
            Some("node1"),
            &[sockets.as_str(), mmap_key.as_str()],
        );
        let r = direct
            .with_verify_checksum(verify)
            .open_key(KeyPath::new("vol", "bucket", "k"))
            .await
            .unwrap();
        direct_stats.push(direct);
        let who = format!("direct reader, verify {verify}");
        readers.push(keep_reading(r, who, &stop, &reads, &want));
    }
    // The sidecar, a long-lived reader in its own process.
    let app = SidecarClient::unix(&sidecar.socket).unwrap();
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    readers.push(keep_reading(r, "sidecar".into(), &stop, &reads, &want));
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
    let mapped: u64 = direct_stats
        .iter()
        .map(|c| c.stats().short_circuit_mapped_bytes)
        .sum();
    assert_eq!(mapped > 0, mmap, "mapped reads: {mapped} bytes");
    // With mappings, reads did meet truncated pages (SIGBUS, survived).
    let faulted: u64 = direct_stats
        .iter()
        .flat_map(|c| c.short_circuit_fallbacks())
        .filter(|(why, _)| *why == "truncated")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        faulted > 0,
        mmap,
        "reads that faulted and fell back: {faulted}"
    );
    // The sidecar process is alive and still serves.
    let app = SidecarClient::unix(&sidecar.socket).unwrap();
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 1000];
    r.read_exact_at(5, &mut buf).await.unwrap();
    assert!(buf == want[5..1005]);
    eprintln!(
        "mmap {mmap}: {n} reads bit-exact across {cuts} truncations, {faulted} faulted and fell back"
    );
    tc.cluster.stop_sidecar("long").await;
}

/// GET `path` from `addr`.
/// 1% of one datanode's replicas flipped, truncated or deleted: its scanner
/// finds every one, stops serving them and reports them; the OM's
/// replication manager has each replaced in place by a verified copy from
/// another datanode. Verified readers never get a wrong byte meanwhile.
/// (Readers start once the scanner has found the damage: a verifying
/// reader reports a bad replica too, and the repair could beat the scan.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_replicas_are_found_by_the_scanner_and_repaired() {
    let conf = fast_repair(&[
        "hdds.container.scrub.data.scan.interval=1s",
        "hdds.container.scrub.volume.bytes.per.second=200MB",
    ]);
    let tc = cluster(3, &conf).await;
    let c = client(&tc.cluster, Some("node1"), &[]);
    c.create_volume("vol").await.unwrap();
    c.create_bucket("vol", "bucket").await.unwrap();
    let mut keys = Vec::new();
    for i in 0..300u64 {
        let want = data::bytes(i, 8192 + i as usize);
        let k = put(&c, &format!("k{i}"), &want, 1 << 20).await;
        keys.push((k, want));
    }
    let node1 = tc.cluster.datanode_id(0).unwrap();
    let http = c
        .om()
        .list_datanodes()
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.id == node1)
        .unwrap()
        .http_address;
    // Three of node1's 300 replicas: a flipped byte, a cut, a deletion.
    let damaged = [17usize, 151, 288];
    let files: Vec<_> = damaged
        .iter()
        .map(|&i| block_file(&tc.cluster, 0, &keys[i].0.blocks[0].block.unwrap()))
        .collect();
    for (n, &i) in damaged.iter().enumerate() {
        let f = &files[n];
        match n {
            0 => {
                use std::os::unix::fs::FileExt;
                let file = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                file.write_all_at(&[keys[i].1[4000] ^ 1], 4000).unwrap();
            }
            1 => std::fs::OpenOptions::new()
                .write(true)
                .open(f)
                .unwrap()
                .set_len(100)
                .unwrap(),
            _ => std::fs::remove_file(f).unwrap(),
        }
    }
    let start = Instant::now();
    while metric(&http, "ozone_datanode_scanner_corrupt_replicas_total") < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the scanner did not find the damage"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let found = start.elapsed();
    // Verified readers of every key while the repair runs.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let all: Arc<Vec<(String, Vec<u8>)>> = Arc::new(
        keys.iter()
            .map(|(k, w)| (k.name.clone(), w.clone()))
            .collect(),
    );
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (reader, stop, reads, all) = (
            client(&tc.cluster, Some("node1"), &[]),
            stop.clone(),
            reads.clone(),
            all.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (name, want) = &all[rand::rng().random_range(0..all.len())];
                assert!(
                    read_all(&reader, name).await == *want,
                    "{name}: wrong bytes"
                );
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Each replica is copied back in place, bit-exact.
    loop {
        let repaired = damaged
            .iter()
            .zip(&files)
            .filter(|(i, f)| std::fs::read(f).is_ok_and(|b| b == keys[**i].1))
            .count();
        let st = c.replication_status(5).await.unwrap();
        if repaired == 3 && st.under_replicated == 0 && st.last_pass_ms > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{repaired} of 3 repaired: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let repaired = start.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let st = c.replication_status(5).await.unwrap();
    assert_eq!(st.copies_done, 3, "{st:?}");
    assert_eq!(metric(&http, "ozone_datanode_replications_total"), 3);
    // Found once each: the repaired replicas scan healthy.
    assert_eq!(
        metric(&http, "ozone_datanode_scanner_corrupt_replicas_total"),
        3
    );
    for (i, (k, want)) in keys.iter().enumerate() {
        let info = c
            .key_info(KeyPath::new("vol", "bucket", &k.name))
            .await
            .unwrap();
        assert_eq!(info.blocks[0].replicas.len(), 3, "k{i}");
        if damaged.contains(&i) {
            assert!(info.blocks[0].replicas.iter().any(|r| r.id == node1));
            assert!(read_all(&c, &k.name).await == *want);
        }
    }
    eprintln!(
        "3 of 300 replicas damaged: found in {found:?}, repaired in {repaired:?}; {} verified reads, none wrong",
        reads.load(Ordering::Relaxed)
    );
}

async fn read_all(c: &ozone_client::Client, name: &str) -> Vec<u8> {
    let r = c
        .open_key(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    let mut out = Vec::new();
    r.copy_to(&mut out).await.unwrap();
    out
}

/// With the scanner off, a replica damaged on disk is found by a verifying
/// reader (which reads another replica and reports it); the replication
/// manager has the datanode check it and replace it with a verified copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_replica_a_reader_reports_is_repaired() {
    let tc = cluster(3, &fast_repair(&["hdds.container.scrub.enabled=false"])).await;
    let sockets = format!(
        "ozone.domain.socket.path={}",
        tc.cluster.socket_dir(0).display()
    );
    let c = client(&tc.cluster, Some("node1"), &[sockets.as_str()]);
    c.create_volume("vol").await.unwrap();
    c.create_bucket("vol", "bucket").await.unwrap();
    let want = data::bytes(5, 300_000);
    let k = put(&c, "k", &want, 1 << 20).await;
    let f = block_file(&tc.cluster, 0, &k.blocks[0].block.unwrap());
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        file.write_all_at(&[want[123_456] ^ 0x40], 123_456).unwrap();
    }
    // The local (short-circuit) replica is read first, fails its checksum,
    // and the reader moves on.
    assert!(read_all(&c, "k").await == want);
    let start = Instant::now();
    while std::fs::read(&f).map_or(true, |b| b != want) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the reported replica was not repaired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let st = c.replication_status(5).await.unwrap();
    assert_eq!(st.copies_done, 1, "{st:?}");
    assert!(read_all(&c, "k").await == want);
}

/// A replica a reader reports bad is listed last to every later reader
/// until it is repaired (here the replication manager does not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_replica_is_listed_last() {
    let conf = fast_repair(&[
        "hdds.container.scrub.enabled=false",
        "hdds.scm.replication.thread.interval=1h",
    ]);
    let tc = cluster(3, &conf).await;
    let sockets = format!(
        "ozone.domain.socket.path={}",
        tc.cluster.socket_dir(0).display()
    );
    let c = client(&tc.cluster, Some("node1"), &[sockets.as_str()]);
    c.create_volume("vol").await.unwrap();
    c.create_bucket("vol", "bucket").await.unwrap();
    let want = data::bytes(6, 100_000);
    let k = put(&c, "k", &want, 1 << 20).await;
    let node1 = tc.cluster.datanode_id(0).unwrap();
    assert_eq!(k.blocks[0].replicas[0].id, node1, "written local-first");
    let f = block_file(&tc.cluster, 0, &k.blocks[0].block.unwrap());
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        file.write_all_at(&[want[50_000] ^ 1], 50_000).unwrap();
    }
    assert!(read_all(&c, "k").await == want);
    // The OM asks the datanode to check the reported replica in the
    // background; once it is confirmed damaged it is listed last.
    let start = Instant::now();
    loop {
        let info = c
            .key_info(KeyPath::new("vol", "bucket", "k"))
            .await
            .unwrap();
        let ids: Vec<String> = info.blocks[0]
            .replicas
            .iter()
            .map(|r| r.id.clone())
            .collect();
        assert_eq!(ids.len(), 3);
        if ids[2] == node1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the reported replica is not listed last: {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
