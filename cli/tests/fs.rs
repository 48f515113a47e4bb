//! File-system buckets (FILE_SYSTEM_OPTIMIZED) with a real OM and
//! datanodes: exclusive create races, directories, paged listing, rename
//! and delete semantics, readers across a directory rename, and an OM
//! killed with SIGKILL in the middle of renames and a recursive delete.

use ozone_client::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ozone_client::{Client, ClientError, FsAccess};
use ozone_proto::BucketLayout;
use ozone_testkit::data;
use ozone_testkit::harness::*;

const V: &str = "vol";
const B: &str = "fsb";

async fn fs_bucket(c: &Client) {
    c.create_volume(V).await.unwrap();
    c.create_bucket_with_layout(V, B, BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
}

async fn write(c: &Client, path: &str, bytes: &[u8]) {
    let mut w = c.create_file(KeyPath::new(V, B, path), true).await.unwrap();
    w.write(bytes).await.unwrap();
    w.close().await.unwrap();
}

async fn read(c: &Client, path: &str) -> Vec<u8> {
    let r = c.open_key(KeyPath::new(V, B, path)).await.unwrap();
    let mut out = Vec::new();
    r.copy_to(&mut out).await.unwrap();
    out
}

/// The index and process of datanode `id` of a cluster of `n`.
fn replica_process(tc: &TestCluster, n: usize, id: &str) -> (usize, nix::unistd::Pid) {
    let i = index_of(&tc.cluster, n, id);
    let pid = tc.cluster.datanode_pid(i).expect("running");
    (i, nix::unistd::Pid::from_raw(pid as i32))
}

async fn names(c: &Client, dir: &str) -> Vec<String> {
    c.list_status_all(KeyPath::new(V, B, dir))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.path)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_32_racing_exclusive_creates_exactly_one_wins() {
    let tc = cluster(3, &[]).await;
    let c = client(&tc.cluster, None, &[]);
    fs_bucket(&c).await;
    let mut tasks = Vec::new();
    for i in 0..32u8 {
        let c = client(&tc.cluster, None, &[]);
        tasks.push(tokio::spawn(async move {
            match c
                .create_file(KeyPath::new(V, B, "hbase/.tmp/hbase-hbck.lock"), false)
                .await
            {
                Ok(mut w) => {
                    w.write(&[i; 100]).await.unwrap();
                    w.close().await.unwrap();
                    Some(i)
                }
                Err(ClientError::AlreadyExists(m)) => {
                    assert!(m.contains("hbase-hbck.lock"), "{m}");
                    None
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(i) = t.await.unwrap() {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        read(&c, "hbase/.tmp/hbase-hbck.lock").await,
        vec![winners[0]; 100]
    );
    // Closed, the file still refuses an exclusive create; overwrite works.
    assert!(matches!(
        c.create_file(KeyPath::new(V, B, "hbase/.tmp/hbase-hbck.lock"), false)
            .await,
        Err(ClientError::AlreadyExists(_))
    ));
    write(&c, "hbase/.tmp/hbase-hbck.lock", b"again").await;
    assert_eq!(read(&c, "hbase/.tmp/hbase-hbck.lock").await, b"again");
    // A file being written is never taken over, even with overwrite.
    let open = c
        .create_file(KeyPath::new(V, B, "wal/w1"), false)
        .await
        .unwrap();
    assert!(matches!(
        c.create_file(KeyPath::new(V, B, "wal/w1"), true).await,
        Err(ClientError::AlreadyExists(_))
    ));
    let st = c.file_status(KeyPath::new(V, B, "wal/w1")).await.unwrap();
    assert!(st.open && !st.is_dir && st.size == 0, "{st:?}");
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_follow_hadoops_rules() {
    let tc = cluster(3, &[]).await;
    let c = client(&tc.cluster, None, &[]);
    fs_bucket(&c).await;
    assert!(c.mkdirs(KeyPath::new(V, B, "a/b/c")).await.unwrap());
    assert!(
        !c.mkdirs(KeyPath::new(V, B, "a/b")).await.unwrap(),
        "exists already"
    );
    write(&c, "a/b/f1", b"one").await;
    write(&c, "a/f2", b"two").await;
    assert_eq!(names(&c, "a").await, ["a/b", "a/f2"]);
    assert_eq!(names(&c, "").await, ["a"]);
    let st = c.file_status(KeyPath::new(V, B, "a/b")).await.unwrap();
    assert!(st.is_dir);
    assert_eq!(
        c.file_status(KeyPath::new(V, B, "a/f2"))
            .await
            .unwrap()
            .size,
        3
    );
    assert!(matches!(
        c.file_status(KeyPath::new(V, B, "a/nope")).await,
        Err(ClientError::NotFound(_))
    ));
    // A file where a directory is needed.
    assert!(matches!(
        c.mkdirs(KeyPath::new(V, B, "a/f2/x")).await,
        Err(ClientError::AlreadyExists(_))
    ));
    assert!(matches!(
        c.create_file(KeyPath::new(V, B, "a/f2/x"), true).await,
        Err(ClientError::AlreadyExists(_))
    ));
    // Rename a file; onto an existing file is refused; into a directory
    // it keeps its name.
    assert_eq!(
        c.rename(KeyPath::new(V, B, "a/f2"), "a/f3").await.unwrap(),
        "a/f3"
    );
    write(&c, "a/f4", b"four").await;
    assert!(matches!(
        c.rename(KeyPath::new(V, B, "a/f3"), "a/f4").await,
        Err(ClientError::AlreadyExists(_))
    ));
    assert_eq!(
        c.rename(KeyPath::new(V, B, "a/f3"), "a/b").await.unwrap(),
        "a/b/f3"
    );
    assert_eq!(read(&c, "a/b/f3").await, b"two");
    // A directory cannot move into itself or below itself.
    for dst in ["a/b/c", "a/b/c/d", "a/b"] {
        let e = c.rename(KeyPath::new(V, B, "a/b"), dst).await;
        assert!(
            matches!(e, Err(ClientError::InvalidArgument(_))) || dst == "a/b",
            "{dst}: {e:?}"
        );
    }
    // Missing source, missing destination parent.
    assert!(matches!(
        c.rename(KeyPath::new(V, B, "zz"), "a/zz").await,
        Err(ClientError::NotFound(_))
    ));
    assert!(matches!(
        c.rename(KeyPath::new(V, B, "a/f4"), "no/such/dir/f4").await,
        Err(ClientError::NotFound(_))
    ));
    // A directory moves with everything under it.
    c.mkdirs(KeyPath::new(V, B, "archive")).await.unwrap();
    assert_eq!(
        c.rename(KeyPath::new(V, B, "a/b"), "archive")
            .await
            .unwrap(),
        "archive/b"
    );
    assert_eq!(read(&c, "archive/b/f1").await, b"one");
    assert_eq!(
        names(&c, "archive/b").await,
        ["archive/b/c", "archive/b/f1", "archive/b/f3"]
    );
    let du = c
        .content_summary(KeyPath::new(V, B, "archive"))
        .await
        .unwrap();
    assert_eq!((du.length, du.file_count, du.directory_count), (6, 2, 3));
    // Delete: a non-empty directory needs recursive.
    assert!(matches!(
        c.delete_path(KeyPath::new(V, B, "archive"), false).await,
        Err(ClientError::Precondition(_))
    ));
    c.delete_path(KeyPath::new(V, B, "archive"), true)
        .await
        .unwrap();
    assert!(matches!(
        c.file_status(KeyPath::new(V, B, "archive/b/f1")).await,
        Err(ClientError::NotFound(_))
    ));
    assert!(matches!(
        c.open_key(KeyPath::new(V, B, "archive/b/f1")).await,
        Err(ClientError::NotFound(_))
    ));
    c.delete_path(KeyPath::new(V, B, "a/f4"), false)
        .await
        .unwrap();
    c.delete_path(KeyPath::new(V, B, "a"), false).await.unwrap();
    assert!(names(&c, "").await.is_empty());
    assert!(matches!(
        c.delete_path(KeyPath::new(V, B, ""), true).await,
        Err(ClientError::InvalidArgument(_))
    ));
    // Bad paths are refused with the rule they break.
    for bad in ["a/../b", "a//b"] {
        assert!(
            matches!(
                c.mkdirs(KeyPath::new(V, B, bad)).await,
                Err(ClientError::InvalidArgument(_))
            ),
            "{bad}"
        );
    }
    // Object-store buckets have no directories.
    c.create_bucket(V, "obs").await.unwrap();
    assert!(matches!(
        c.mkdirs(KeyPath::new(V, "obs", "d")).await,
        Err(ClientError::Precondition(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_through_100_000_entries_in_order() {
    let tc = cluster(1, &[]).await;
    let c = client(&tc.cluster, None, &[]);
    fs_bucket(&c).await;
    const N: usize = 100_000;
    let c = Arc::new(c);
    let mut tasks = Vec::new();
    for t in 0..32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..N).step_by(32) {
                if i % 2 == 0 {
                    c.mkdirs(KeyPath::new(V, B, &format!("big/d{i:05}")))
                        .await
                        .unwrap();
                } else {
                    let w = c
                        .create_file(KeyPath::new(V, B, &format!("big/f{i:05}")), false)
                        .await
                        .unwrap();
                    w.close().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let page = c
            .list_status(KeyPath::new(V, B, "big"), &after, 1000)
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        pages += 1;
        after = page
            .last()
            .unwrap()
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        seen.extend(page.into_iter().map(|s| (s.path, s.is_dir)));
    }
    assert_eq!(pages, N.div_ceil(1000));
    assert_eq!(seen.len(), N);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "names in order across pages");
    assert!(seen.iter().all(|(p, d)| *d == p.contains("/d")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_keep_reading_while_their_directory_is_renamed() {
    let tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let c = Arc::new(client(&tc.cluster, None, &[]));
    fs_bucket(&c).await;
    const FILES: usize = 10_000;
    let payload = data::bytes(5, 3_000_000);
    for i in 0..4 {
        write(&c, &format!("region/r{i}"), &payload).await;
    }
    let mut tasks = Vec::new();
    for t in 0..32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..FILES).step_by(32) {
                let w = c
                    .create_file(KeyPath::new(V, B, &format!("region/e{i:05}")), false)
                    .await
                    .unwrap();
                w.close().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut readers = Vec::new();
    for i in 0..4 {
        readers.push(
            c.open_key(KeyPath::new(V, B, &format!("region/r{i}")))
                .await
                .unwrap(),
        );
    }
    let t = Instant::now();
    assert_eq!(
        c.rename(KeyPath::new(V, B, "region"), "moved")
            .await
            .unwrap(),
        "moved"
    );
    let took = t.elapsed();
    for (i, r) in readers.iter().enumerate() {
        let mut buf = vec![0u8; 1 << 20];
        for off in [0u64, 1_000_000, 1_999_999] {
            let n = r.read_at(off, &mut buf).await.unwrap();
            assert_eq!(
                &buf[..n],
                &payload[off as usize..off as usize + n],
                "reader {i}"
            );
        }
    }
    assert_eq!(names(&c, "moved").await.len(), FILES + 4);
    assert!(matches!(
        c.file_status(KeyPath::new(V, B, "region")).await,
        Err(ClientError::NotFound(_))
    ));
    assert_eq!(read(&c, "moved/r3").await, payload);
    eprintln!("renamed a directory of {} entries in {took:?}", FILES + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_om_killed_mid_rename_or_delete_restarts_with_one_whole_tree() {
    let mut tc = cluster(3, &[]).await;
    let c = Arc::new(client(&tc.cluster, None, &[]));
    fs_bucket(&c).await;
    const FILES: usize = 100;
    for i in 0..FILES {
        write(&c, &format!("t/a/f{i:03}"), &[i as u8; 10]).await;
    }
    // Renames back and forth; the OM is killed at a different point each
    // round.
    for (round, kill_after_ms) in [37u64, 151, 263].into_iter().enumerate() {
        let renamer = {
            // Stops at the first failure instead of retrying for long.
            let mut cfg = ozone_client::ClientConfig::new(&tc.cluster.om_address());
            cfg.om_retry_timeout = Duration::from_millis(300);
            let c = Client::connect(cfg).unwrap();
            tokio::spawn(async move {
                let mut n = 0u64;
                loop {
                    let (from, to) = if n.is_multiple_of(2) {
                        ("t/a", "t/b")
                    } else {
                        ("t/b", "t/a")
                    };
                    if c.rename(KeyPath::new(V, B, from), to).await.is_err() {
                        return n;
                    }
                    n += 1;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        tc.cluster.kill_om().await;
        let renames = renamer.await.unwrap();
        tc.cluster.start_om().await.unwrap();
        tc.cluster
            .wait_healthy(3, Duration::from_secs(30))
            .await
            .unwrap();
        let c2 = client(&tc.cluster, None, &[]);
        let a = c2.list_status_all(KeyPath::new(V, B, "t/a")).await;
        let b = c2.list_status_all(KeyPath::new(V, B, "t/b")).await;
        let whole = match (&a, &b) {
            (Ok(x), Err(ClientError::NotFound(_))) | (Err(ClientError::NotFound(_)), Ok(x)) => x,
            _ => panic!("round {round}: expected exactly one of t/a, t/b: {a:?} / {b:?}"),
        };
        assert_eq!(whole.len(), FILES, "round {round} after {renames} renames");
        let dir = if a.is_ok() { "t/a" } else { "t/b" };
        assert_eq!(read(&c2, &format!("{dir}/f042")).await, [42u8; 10]);
        if dir == "t/b" {
            c2.rename(KeyPath::new(V, B, "t/b"), "t/a").await.unwrap();
        }
    }
    // Recursive deletes, the OM killed at different points of the
    // background purge: each directory stays gone and its blocks are
    // purged after restart.
    let used = |dns: &[ozone_proto::DatanodeDetails]| dns.iter().map(|d| d.used).sum::<u64>();
    for (round, kill_after_ms) in [0u64, 40, 150].into_iter().enumerate() {
        let c = client(&tc.cluster, None, &[]);
        let dir = format!("big{round}");
        for i in 0..200 {
            let name = format!("{dir}/d{}/e{}/f{i}", i % 7, i % 3);
            write(&c, &name, &data::bytes(i, 20_000)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = used(&c.om().list_datanodes().await.unwrap());
        assert!(before >= 3 * 200 * 20_000, "{before}");
        c.delete_path(KeyPath::new(V, B, &dir), true).await.unwrap();
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        tc.cluster.kill_om().await;
        tc.cluster.start_om().await.unwrap();
        tc.cluster
            .wait_healthy(3, Duration::from_secs(30))
            .await
            .unwrap();
        let c = client(&tc.cluster, None, &[]);
        assert!(matches!(
            c.file_status(KeyPath::new(V, B, &dir)).await,
            Err(ClientError::NotFound(_))
        ));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = used(&c.om().list_datanodes().await.unwrap());
            if now + 3 * 200 * 20_000 <= before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: blocks not purged: {now} of {before} bytes left"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let c = client(&tc.cluster, None, &[]);
    assert_eq!(names(&c, "t/a").await.len(), FILES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsync_makes_bytes_durable_and_visible_to_a_second_client() {
    let tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let conf = ["ozone.scm.chunk.size=64KB"];
    // The writer on node1 (a replica there); the reader on node1 too, so
    // short-circuit is tried and refused for the block still being written.
    let w = client(&tc.cluster, Some("node1"), &conf);
    fs_bucket(&w).await;
    let r = client(&tc.cluster, Some("node1"), &[]);
    let want = data::bytes(8, 2_600_000);
    let mut f = w
        .create_file(KeyPath::new(V, B, "WALs/rs1/wal.1"), false)
        .await
        .unwrap();
    let mut synced = 0usize;
    // Sync points inside a chunk, on a chunk boundary, across a block.
    for end in [100_001usize, 131_072, 1_048_576 + 7, 2_000_000] {
        f.write(&want[synced..end]).await.unwrap();
        f.hsync().await.unwrap();
        synced = end;
        let st = r
            .file_status(KeyPath::new(V, B, "WALs/rs1/wal.1"))
            .await
            .unwrap();
        assert!(st.open, "{st:?}");
        assert_eq!(st.size, end as u64);
        assert!(
            !r.is_file_closed(KeyPath::new(V, B, "WALs/rs1/wal.1"))
                .await
                .unwrap()
        );
        let got = read(&r, "WALs/rs1/wal.1").await;
        assert_eq!(got.len(), end, "a new reader sees the synced length");
        assert!(got == want[..end], "synced bytes read back at {end}");
    }
    // Bytes written after the last sync: a new reader sees at least the
    // synced ones (and the finished blocks, as on HDFS), all of them right.
    f.write(&want[synced..]).await.unwrap();
    let got = read(&r, "WALs/rs1/wal.1").await;
    assert!(
        got.len() >= synced && got == want[..got.len()],
        "{}",
        got.len()
    );
    f.close().await.unwrap();
    assert!(
        r.is_file_closed(KeyPath::new(V, B, "WALs/rs1/wal.1"))
            .await
            .unwrap()
    );
    assert!(read(&r, "WALs/rs1/wal.1").await == want);
    // hsync needs a file-system bucket.
    w.create_bucket(V, "obs").await.unwrap();
    let mut k = w.create_key(KeyPath::new(V, "obs", "k")).await.unwrap();
    k.write(b"abc").await.unwrap();
    assert!(matches!(k.hsync().await, Err(ClientError::Precondition(_))));
}

/// hflush: a second client sees every flushed byte (the replicas tell the
/// length of the block being written); the OM hears nothing of a flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hflush_shows_bytes_to_a_new_reader_without_the_om() {
    let tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let conf = ["ozone.scm.chunk.size=64KB"];
    let w = client(&tc.cluster, Some("node1"), &conf);
    fs_bucket(&w).await;
    let r = client(&tc.cluster, Some("node1"), &[]);
    let path = KeyPath::new(V, B, "WALs/rs1/wal.2");
    let want = data::bytes(9, 2_600_000);
    let mut f = w.create_file(path, false).await.unwrap();
    let writer_calls = || {
        ["OpenKey", "AllocateBlock", "Hsync", "CommitKey"]
            .iter()
            .map(|op| om_metric(&tc.cluster, &format!("ozone_om_ops_total{{op=\"{op}\"}}")))
            .sum::<u64>()
    };
    assert!(writer_calls() >= 1, "the OM counts the create");
    let mut flushed = 0usize;
    // Flush points inside a chunk, on a chunk boundary, on a block
    // boundary, across a block, twice in a row.
    for end in [
        1,
        100_001usize,
        131_072,
        1_048_576,
        1_048_576 + 7,
        2_000_000,
        2_000_000,
    ] {
        f.write(&want[flushed..end]).await.unwrap();
        let before = writer_calls();
        f.hflush().await.unwrap();
        assert_eq!(writer_calls(), before, "hflush at {end} called the OM");
        flushed = end;
        let got = read(&r, "WALs/rs1/wal.2").await;
        assert_eq!(got.len(), end, "a new reader sees the flushed length");
        assert!(got == want[..end], "flushed bytes read back at {end}");
        // The OM knows only the finished blocks.
        let st = r.file_status(path).await.unwrap();
        assert!(st.open && st.size <= end as u64, "{st:?}");
    }
    f.write(&want[flushed..]).await.unwrap();
    f.close().await.unwrap();
    assert!(read(&r, "WALs/rs1/wal.2").await == want);

    // WAL-sized appends into one growing tail chunk (4 MB chunks): each
    // flush sends its new bytes and at most one checksum window again,
    // not the whole tail.
    let http: Vec<String> = w
        .om()
        .list_datanodes()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.http_address)
        .collect();
    let received = || -> u64 {
        http.iter()
            .map(|h| metric(h, "ozone_datanode_written_bytes_total"))
            .sum()
    };
    let w4 = client(&tc.cluster, None, &[]);
    let before = received();
    let entries = data::bytes(12, 300 * 1000);
    let mut f = w4
        .create_file(KeyPath::new(V, B, "WALs/rs1/wal.3"), false)
        .await
        .unwrap();
    for e in entries.chunks(1000) {
        f.write(e).await.unwrap();
        f.hflush().await.unwrap();
    }
    let sent = received() - before;
    assert!(
        (3 * 300_000..=3 * 300 * (16_384 + 1000)).contains(&sent),
        "the replicas received {sent} bytes for 300 flushes of 1000 bytes"
    );
    assert!(read(&r, "WALs/rs1/wal.3").await == entries);
    f.close().await.unwrap();
}

/// A stream of hflushes while the datanodes of the block being written
/// are SIGKILLed one by one (its first replica, then the second of the
/// next block, then the third): the writer goes on, every flushed byte is
/// visible to a new reader after every flush, and the file reads back
/// exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hflushed_bytes_survive_each_replica_of_the_block_killed() {
    let mut tc = cluster(6, &["ozone.scm.block.size=1MB"]).await;
    let w = client(&tc.cluster, None, &["ozone.scm.chunk.size=64KB"]);
    fs_bucket(&w).await;
    let r = client(&tc.cluster, None, &[]);
    let p = "WALs/rs4/wal.9";
    let path = KeyPath::new(V, B, p);
    let want = data::bytes(11, 3_000_000);
    let mut f = w.create_file(path, false).await.unwrap();
    let (mut at, mut killed) = (0usize, 0usize);
    while at < want.len() {
        let end = (at + 37_000).min(want.len());
        f.write(&want[at..end]).await.unwrap();
        f.hflush().await.unwrap();
        at = end;
        let got = read(&r, p).await;
        assert_eq!(got.len(), at, "after {killed} kills");
        assert!(got == want[..at], "flushed bytes read back at {at}");
        if killed < 3 && at >= (killed + 1) * 800_000 {
            let info = r.key_info(path).await.unwrap();
            assert!(info.last_block_open, "{info:?}");
            let victim = &info.blocks.last().unwrap().replicas[killed].id;
            let i = (0..6)
                .find(|&i| tc.cluster.datanode_id(i).as_ref() == Some(victim))
                .unwrap();
            tc.cluster.kill_datanode(i).await;
            killed += 1;
        }
    }
    assert_eq!(killed, 3);
    f.close().await.unwrap();
    assert!(
        read(&r, p).await == want,
        "the closed file reads back exactly"
    );
}

/// A datanode of the block being written is stopped (SIGSTOP: its sockets
/// stay open, nothing answers). The writer's next call to it passes
/// `ozone.client.write.timeout`, the block moves to the other datanodes and
/// the writer goes on; readers are not held up either. Resumed after the
/// writer moved on, the datanode holds a replica that missed writes: a
/// reader on its node (which reads its own node's replica first) is never
/// served that replica as current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_is_left_behind_and_never_read_as_current() {
    use nix::sys::signal::{Signal, kill};
    let tc = cluster(4, &["ozone.scm.block.size=1MB"]).await;
    let deadlines = [
        "ozone.client.write.timeout=2s",
        "ozone.client.read.timeout=2s",
    ];
    let w = client(
        &tc.cluster,
        None,
        &["ozone.scm.chunk.size=64KB", deadlines[0], deadlines[1]],
    );
    fs_bucket(&w).await;
    let p = "WALs/rs5/wal.1";
    let path = KeyPath::new(V, B, p);
    let want = data::bytes(12, 700_000);
    let mut f = w.create_file(path, false).await.unwrap();
    f.write(&want[..200_000]).await.unwrap();
    f.hflush().await.unwrap();
    let old = w.key_info(path).await.unwrap().blocks.pop().unwrap();
    let victim = old.replicas[1].id.clone();
    let (i, pid) = replica_process(&tc, 4, &victim);
    let node = ozone_local::LocalCluster::node_name(i);
    let near = client(&tc.cluster, Some(&node), &deadlines);
    kill(pid, Signal::SIGSTOP).unwrap();
    let mut at = 200_000;
    while at < 400_000 {
        let end = at + 37_000;
        f.write(&want[at..end]).await.unwrap();
        f.hflush().await.unwrap();
        at = end;
        let got = read(&near, p).await;
        assert!(got == want[..at], "flushed bytes read back at {at}");
    }
    let info = near.key_info(path).await.unwrap();
    let cur = info.blocks.last().unwrap();
    assert_ne!(cur.block, old.block, "the block moved");
    assert!(
        cur.replicas.iter().all(|d| d.id != victim),
        "the stopped datanode is no replica of the block now written: {cur:?}"
    );
    kill(pid, Signal::SIGCONT).unwrap();
    // Resumed: it serves the old block, short of what was flushed since.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..3 {
        let got = read(&near, p).await;
        assert!(got == want[..at], "after the resume, {at} bytes");
        let r = near.open_key(path).await.unwrap();
        let mut piece = vec![0u8; 50_000];
        r.read_exact_at(at as u64 - 50_000, &mut piece)
            .await
            .unwrap();
        assert!(piece == want[at - 50_000..at], "a positioned read");
    }
    f.write(&want[at..]).await.unwrap();
    f.close().await.unwrap();
    let info = near.key_info(path).await.unwrap();
    assert!(
        info.blocks
            .iter()
            .all(|b| b.replicas.iter().all(|d| d.id != victim)),
        "the closed file names no replica on the resumed datanode: {info:?}"
    );
    assert!(read(&near, p).await == want, "the closed file reads back");
}

/// A writer holds write streams open to its block's datanodes between
/// hflushes (an idle WAL). A datanode asked to stop (SIGTERM) exits
/// cleanly instead of waiting for the writer to close them; the writer
/// moves the block to the other datanodes and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_stops_gracefully_under_open_write_streams() {
    use nix::sys::signal::{Signal, kill};
    let mut tc = cluster(4, &["ozone.scm.block.size=1MB"]).await;
    let w = client(&tc.cluster, None, &[]);
    fs_bucket(&w).await;
    let p = "WALs/rs6/wal.1";
    let path = KeyPath::new(V, B, p);
    let want = data::bytes(13, 300_000);
    let mut f = w.create_file(path, false).await.unwrap();
    f.write(&want[..100_000]).await.unwrap();
    f.hflush().await.unwrap();
    let info = w.key_info(path).await.unwrap();
    let (i, pid) = replica_process(&tc, 4, &info.blocks.last().unwrap().replicas[0].id);
    kill(pid, Signal::SIGTERM).unwrap();
    let (name, status) = tokio::time::timeout(Duration::from_secs(30), tc.cluster.next_exit())
        .await
        .expect("the datanode exits while a writer holds streams to it");
    assert_eq!(name, format!("node{}", i + 1));
    assert!(status.success(), "a clean exit: {status:?}");
    f.write(&want[100_000..200_000]).await.unwrap();
    f.hflush().await.unwrap();
    assert!(
        read(&w, p).await == want[..200_000],
        "flushed bytes after the stop"
    );
    f.write(&want[200_000..]).await.unwrap();
    f.close().await.unwrap();
    assert!(read(&w, p).await == want, "the closed file reads back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_of_a_killed_writer_is_recovered_at_its_synced_length() {
    killed_writer_recovered("WALs/rs2/wal.7", false).await;
}

/// HBase's WAL hflushes; its region server is SIGKILLed; the WAL split
/// recovers the lease: every hflushed entry is there (block recovery asks
/// the replicas), nothing the writer had not flushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_of_a_killed_writer_is_recovered_at_its_flushed_length() {
    killed_writer_recovered("WALs/rs3/wal.8", true).await;
}

async fn killed_writer_recovered(p: &str, flush_only: bool) {
    use std::io::BufRead;
    let tc = cluster(3, &["ozone.scm.block.size=1MB"]).await;
    let c = client(&tc.cluster, None, &[]);
    fs_bucket(&c).await;
    let mut args = vec![
        "wal-writer".to_string(),
        tc.cluster.om_address(),
        V.into(),
        B.into(),
        p.into(),
        "40".into(),
    ];
    if flush_only {
        args.push("hflush".into());
    }
    let mut child = std::process::Command::new(child_exe())
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut synced = 0u64;
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("synced ") {
            synced = n.parse().unwrap();
        }
        if line == "waiting" {
            break;
        }
    }
    assert!(synced > 1_048_576, "the WAL spans blocks: {synced}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    assert!(!c.is_file_closed(KeyPath::new(V, B, p)).await.unwrap());
    // Splitting the WAL: recover the lease, then read to the synced end.
    assert_eq!(
        c.recover_lease(KeyPath::new(V, B, p)).await.unwrap(),
        synced
    );
    assert!(c.is_file_closed(KeyPath::new(V, B, p)).await.unwrap());
    assert_eq!(
        c.recover_lease(KeyPath::new(V, B, p)).await.unwrap(),
        synced,
        "again: no change"
    );
    let got = read(&c, p).await;
    let mut want = Vec::new();
    for i in 0..40u64 {
        want.extend(data::bytes(i, 30_000 + i as usize * 911));
    }
    assert_eq!(got.len() as u64, synced);
    assert!(got == want, "every synced entry, bit-exact");
    // The recovered file is an ordinary file: renamed to oldWALs, deleted.
    c.mkdirs(KeyPath::new(V, B, "oldWALs")).await.unwrap();
    c.rename(KeyPath::new(V, B, p), "oldWALs").await.unwrap();
    c.delete_path(KeyPath::new(V, B, "oldWALs"), true)
        .await
        .unwrap();
}

/// Renames and recursive deletes interleaved from several clients over
/// overlapping trees: whatever wins, every file still listed reads back
/// whole, nothing is listed twice, and once the purge is done the
/// datanodes hold exactly the listed files' replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_renames_and_deletes_leave_a_consistent_tree() {
    let tc = cluster(3, &[]).await;
    let c = Arc::new(client(&tc.cluster, None, &[]));
    fs_bucket(&c).await;
    for d in 0..6 {
        for f in 0..20 {
            write(
                &c,
                &format!("t/d{d}/sub/f{f}"),
                &data::bytes(d * 100 + f, 4096),
            )
            .await;
        }
    }
    let mut tasks = Vec::new();
    for t in 0..6u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..30u64 {
                let a = (t + i) % 6;
                let b = (t * 7 + i * 3 + 1) % 6;
                let r = match (t + i) % 5 {
                    0 => {
                        c.delete_path(KeyPath::new(V, B, &format!("t/d{a}/sub")), true)
                            .await
                    }
                    1 => c
                        .rename(KeyPath::new(V, B, &format!("t/d{a}")), &format!("t/d{b}"))
                        .await
                        .map(|_| ()),
                    2 => c
                        .rename(
                            KeyPath::new(V, B, &format!("t/d{a}/sub")),
                            &format!("t/d{b}/sub2"),
                        )
                        .await
                        .map(|_| ()),
                    3 => c
                        .mkdirs(KeyPath::new(V, B, &format!("t/d{a}")))
                        .await
                        .map(|_| ()),
                    _ => c
                        .rename(
                            KeyPath::new(V, B, &format!("t/d{b}/sub2")),
                            &format!("t/d{a}/sub"),
                        )
                        .await
                        .map(|_| ()),
                };
                match r {
                    Ok(()) => {}
                    Err(ClientError::NotFound(_))
                    | Err(ClientError::AlreadyExists(_))
                    | Err(ClientError::InvalidArgument(_)) => {}
                    Err(e) => panic!("unexpected: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Walk the tree: every file reads back as written, no path twice.
    let mut files = Vec::new();
    let mut stack = vec!["t".to_string()];
    let mut seen = std::collections::HashSet::new();
    while let Some(dir) = stack.pop() {
        for e in c.list_status_all(KeyPath::new(V, B, &dir)).await.unwrap() {
            assert!(seen.insert(e.path.clone()), "listed twice: {}", e.path);
            if e.is_dir {
                stack.push(e.path);
            } else {
                files.push(e);
            }
        }
    }
    for f in &files {
        let got = read(&c, &f.path).await;
        assert_eq!(got.len(), 4096, "{}", f.path);
        let name: u64 = f.path.rsplit("/f").next().unwrap().parse().unwrap();
        assert!(
            (0..6).any(|d| got == data::bytes(d * 100 + name, 4096)),
            "{}",
            f.path
        );
    }
    let du = c.content_summary(KeyPath::new(V, B, "t")).await.unwrap();
    assert_eq!(du.file_count as usize, files.len());
    // After the purge the datanodes hold the listed files' replicas only.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let used: u64 = c
            .om()
            .list_datanodes()
            .await
            .unwrap()
            .iter()
            .map(|d| d.used)
            .sum();
        if used == 3 * 4096 * files.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "datanodes hold {used} bytes, the tree {} files",
            files.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("{} of 120 files left after the interleavings", files.len());
}
