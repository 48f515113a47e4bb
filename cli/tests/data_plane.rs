//! End-to-end data plane tests against real OM and datanode processes.

use ozone_client::prelude::*;
use ozone_testkit::data;
use ozone_testkit::harness::*;

const BPC: usize = 16 * 1024;
const CHUNK: usize = 64 * 1024;
const BLOCK: usize = 256 * 1024;

/// Every boundary size, CRC32 and CRC32C, verify on and off, positional and
/// streaming reads, multi-block keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_sizes_round_trip_bit_exact() {
    let tc = cluster(3, &["ozone.scm.block.size=256KB"]).await;
    let c = &tc.cluster;
    let sizes = [
        0,
        1,
        BPC - 1,
        BPC,
        BPC + 1,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        3 * BLOCK + 5,
    ];
    let admin = client(c, None, &[]);
    bucket(&admin).await;
    for ck in ["CRC32", "CRC32C"] {
        let conf = [
            format!("ozone.client.checksum.type={ck}"),
            "ozone.client.bytes.per.checksum=16KB".to_string(),
            "ozone.scm.chunk.size=64KB".to_string(),
        ];
        let conf: Vec<&str> = conf.iter().map(String::as_str).collect();
        let w = client(c, Some("node1"), &conf);
        for (i, &size) in sizes.iter().enumerate() {
            let name = format!("{ck}/size-{size}");
            let want = data::bytes(i as u64, size);
            let key = put(&w, &name, &want, 10_000).await;
            assert_eq!(key.size as usize, size);
            assert_eq!(key.blocks.len(), size.div_ceil(BLOCK), "{name}");
            for b in &key.blocks {
                assert_eq!(b.replicas.len(), 3);
                assert_eq!(
                    b.replicas[0].node_name, "node1",
                    "first replica on the writer's node"
                );
            }
            for verify in [true, false] {
                let r = w.with_verify_checksum(verify);
                assert_eq!(get(&r, &name, 7_777).await, want, "{name} verify={verify}");
                assert_eq!(
                    stream(&r, &name).await,
                    want,
                    "{name} verify={verify} stream"
                );
            }
            // A read across every block boundary at once.
            if size > 2 {
                let r = w
                    .open_key(KeyPath::new("vol", "bucket", &name))
                    .await
                    .unwrap();
                let mut buf = vec![0u8; size - 2];
                r.read_exact_at(1, &mut buf).await.unwrap();
                assert_eq!(buf, want[1..size - 1]);
            }
        }
        // One channel per datanode, reused across every key and block.
        assert_eq!(w.pooled_connections(), 3);
    }
    tc.cluster.stop().await;
}

/// A 100 MiB key over several blocks, 1 MiB bytes per checksum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_mib_key_with_1mib_checksum_windows() {
    let tc = cluster(3, &["ozone.scm.block.size=32MB"]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node2"), &["ozone.client.bytes.per.checksum=1MB"]);
    bucket(&w).await;
    let want = data::bytes(42, 100 << 20);
    let key = put(&w, "big", &want, 3 << 20).await;
    assert_eq!(key.blocks.len(), 4);
    assert_eq!(key.bytes_per_checksum, 1 << 20);
    assert_eq!(get(&w, "big", 8 << 20).await, want);
    assert_eq!(stream(&w.with_verify_checksum(false), "big").await, want);
    let s = w.stats();
    assert_eq!(
        s.local_bytes,
        2 * (100 << 20),
        "reads served by node2's replica"
    );
    assert_eq!(s.remote_bytes, 0);
    tc.cluster.stop().await;
}

/// A flipped byte in one replica: verify-on reads return the right bytes
/// and report the replica; verify-off reads of that replica return the
/// flipped byte (the contract HBase relies on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_replica_is_caught_by_verify_and_visible_without() {
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let want = data::bytes(5, 300_000);
    let key = put(&w, "k", &want, 65_536).await;
    let b = &key.blocks[0];
    assert_eq!(b.replicas[0].node_name, "node1");
    let id = b.block.unwrap();
    let path = block_file(c, 0, &id);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[123_456] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();

    let raw = client(c, Some("node1"), &[]).with_verify_checksum(false);
    let got = get(&raw, "k", 1 << 20).await;
    assert_eq!(
        got[123_456],
        want[123_456] ^ 0x5a,
        "verify off returns the replica's bytes"
    );
    assert_eq!(raw.stats().local_bytes, want.len() as u64);

    let verified = client(c, Some("node1"), &[]);
    assert_eq!(get(&verified, "k", 1 << 20).await, want);
    let s = verified.stats();
    assert_eq!(s.checksum_failures, 1);
    assert_eq!(s.remote_bytes, want.len() as u64);
    // A read that does not touch the bad window is served locally.
    let r = verified
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 100];
    r.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf, want[..100]);
    // The OM now lists the bad replica last.
    let info = verified
        .key_info(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    assert_eq!(info.blocks[0].replicas.last().unwrap().node_name, "node1");
    tc.cluster.stop().await;
}

/// Every process restarted (cleanly, then by SIGKILL): every key reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_survive_restart_of_every_process() {
    let mut tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let w = client(&tc.cluster, None, &[]);
    bucket(&w).await;
    let sizes = [0usize, 10, 1 << 20, 3_000_000];
    for (i, s) in sizes.iter().enumerate() {
        put(&w, &format!("k{i}"), &data::bytes(i as u64, *s), 100_000).await;
    }
    w.delete_key(KeyPath::new("vol", "bucket", "k1"))
        .await
        .unwrap();
    for round in 0..2 {
        let c = &mut tc.cluster;
        if round == 0 {
            // Clean stop of every process, by SIGTERM.
            for i in 0..3 {
                let pid = c.datanode_pid(i).unwrap();
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                )
                .unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            for i in 0..3 {
                c.kill_datanode(i).await;
            }
            c.kill_om().await;
        } else {
            for i in 0..3 {
                c.kill_datanode(i).await;
            }
            c.kill_om().await;
        }
        c.start_om().await.unwrap();
        for i in 0..3 {
            c.start_datanode(i).await.unwrap();
        }
        c.wait_healthy(3, std::time::Duration::from_secs(30))
            .await
            .unwrap();
        let r = client(c, None, &[]);
        for (i, s) in sizes.iter().enumerate() {
            let name = format!("k{i}");
            if i == 1 {
                assert!(matches!(
                    r.key_info(KeyPath::new("vol", "bucket", &name)).await,
                    Err(ozone_client::ClientError::NotFound(_))
                ));
                continue;
            }
            assert_eq!(
                get(&r, &name, 1 << 20).await,
                data::bytes(i as u64, *s),
                "{name} round {round}"
            );
        }
    }
    tc.cluster.stop().await;
}

/// Deleting a key removes its block files from every datanode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_block_files() {
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let w = client(c, None, &[]);
    bucket(&w).await;
    let key = put(&w, "gone", &data::bytes(1, 100_000), 100_000).await;
    let id = key.blocks[0].block.unwrap();
    let files: Vec<_> = (0..3).map(|i| block_file(c, i, &id)).collect();
    assert!(files.iter().all(|f| f.exists()));
    w.delete_key(KeyPath::new("vol", "bucket", "gone"))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while files.iter().any(|f| f.exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "block files still present"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let listed = w
        .list_keys(KeyPath::new("vol", "bucket", ""))
        .await
        .unwrap();
    assert!(listed.is_empty());
    tc.cluster.stop().await;
}

/// The composite key checksum: the same for every bytes-per-checksum,
/// equal to the CRC of the bytes, different when one byte differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_checksum_is_independent_of_bytes_per_checksum() {
    use ozone_common::checksum::Checksummer;
    use ozone_proto::ChecksumType;
    let tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let c = &tc.cluster;
    let admin = client(c, None, &[]);
    bucket(&admin).await;
    let want = data::bytes(77, 2_500_123);
    for ck in ["CRC32C", "CRC32"] {
        let mut sums = Vec::new();
        for bpc in ["1000", "16KB", "1MB"] {
            let conf = [
                format!("ozone.client.checksum.type={ck}"),
                format!("ozone.client.bytes.per.checksum={bpc}"),
            ];
            let conf: Vec<&str> = conf.iter().map(String::as_str).collect();
            let w = client(c, None, &conf);
            let name = format!("{ck}-{bpc}");
            put(&w, &name, &want, 300_000).await;
            let k = w
                .key_checksum(KeyPath::new("vol", "bucket", &name))
                .await
                .unwrap();
            assert_eq!(
                k.bytes_per_checksum,
                w.config().checksum.bytes_per_checksum(),
                "{k:?}"
            );
            sums.push((k.kind, k.crc, k.size));
        }
        // The same CRC whatever windows the key was written with.
        assert!(sums.windows(2).all(|p| p[0] == p[1]), "{sums:?}");
        let kind = if ck == "CRC32" {
            ChecksumType::Crc32
        } else {
            ChecksumType::Crc32c
        };
        assert_eq!(
            sums[0].1,
            Checksummer::new(kind, 1).unwrap().checksum(&want)
        );
        let mut changed = want.clone();
        changed[1_234_567] ^= 1;
        let w = client(c, None, &[&format!("ozone.client.checksum.type={ck}")]);
        put(&w, "changed", &changed, 1 << 20).await;
        assert_ne!(
            w.key_checksum(KeyPath::new("vol", "bucket", "changed"))
                .await
                .unwrap()
                .crc,
            sums[0].1
        );
        put(&w, "empty", &[], 1).await;
        assert_eq!(
            w.key_checksum(KeyPath::new("vol", "bucket", "empty"))
                .await
                .unwrap()
                .size,
            0
        );
    }
    tc.cluster.stop().await;
}
