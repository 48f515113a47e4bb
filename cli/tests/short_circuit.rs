//! Short-circuit reads against real datanode processes and their sockets.

use ozone_client::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use ozone_client::DnConn;
use ozone_testkit::data;
use ozone_testkit::harness::*;
use ozone_testkit::local::LocalCluster;

fn socket_of(c: &LocalCluster, i: usize) -> std::path::PathBuf {
    c.socket_dir(i)
        .join(format!("dn-{}.sock", c.datanode_id(i).unwrap()))
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_circuit_reads_equal_grpc_reads_at_every_boundary() {
    let tc = cluster(3, &["ozone.scm.block.size=256KB"]).await;
    let c = &tc.cluster;
    let conf = [
        "ozone.client.bytes.per.checksum=16KB",
        "ozone.scm.chunk.size=64KB",
    ];
    let w = client(c, Some("node1"), &conf);
    bucket(&w).await;
    let sc = sc_client(c, "node1", &[]);
    let grpc = client(c, Some("node1"), &[]);
    let (bpc, chunk, block) = (16 << 10, 64 << 10, 256 << 10);
    let sizes = [
        0,
        1,
        bpc - 1,
        bpc,
        bpc + 1,
        chunk - 1,
        chunk,
        chunk + 1,
        block - 1,
        block,
        block + 1,
        3 * block + 5,
    ];
    let mut total = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        let name = format!("size-{size}");
        let want = data::bytes(100 + i as u64, size);
        put(&w, &name, &want, 9_999).await;
        for verify in [true, false] {
            let s = sc.with_verify_checksum(verify);
            let g = grpc.with_verify_checksum(verify);
            let via_sc = get(&s, &name, 5_000).await;
            assert_eq!(
                via_sc,
                get(&g, &name, 5_000).await,
                "{name} verify={verify}"
            );
            assert_eq!(via_sc, want);
            assert_eq!(stream(&s, &name).await, want);
            // Unaligned ranges inside and across windows and blocks.
            if size > 40_000 {
                let r = s
                    .open_key(KeyPath::new("vol", "bucket", &name))
                    .await
                    .unwrap();
                for (off, len) in [
                    (1usize, 3usize),
                    (bpc - 1, 2),
                    (bpc + 7, bpc * 2 + 3),
                    (size - 40_000, 39_999),
                ] {
                    let mut buf = vec![0u8; len];
                    r.read_exact_at(off as u64, &mut buf).await.unwrap();
                    assert_eq!(buf, want[off..off + len], "{name} {off}+{len}");
                    total += len as u64;
                }
            }
            total += 2 * size as u64;
        }
    }
    let st = sc.stats();
    assert_eq!(
        st.short_circuit_bytes, total,
        "every byte came through short-circuit"
    );
    assert_eq!(st.short_circuit_fallbacks, 0);
    assert!(st.fd_cache_hits > st.fd_cache_misses, "{st:?}");
    assert_eq!(grpc.stats().short_circuit_bytes, 0);
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_datanode_mid_read_then_restart_recovers_short_circuit() {
    let mut tc = cluster(3, &[]).await;
    let w = client(&tc.cluster, Some("node1"), &[]);
    bucket(&w).await;
    let want = data::bytes(7, 3_000_000);
    put(&w, "k", &want, 1 << 20).await;
    let sc = sc_client(
        &tc.cluster,
        "node1",
        &["ozone.client.read.short-circuit.backoff=1s"],
    );
    let r = sc
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 1_000_000];
    r.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(sc.stats().short_circuit_bytes, 1_000_000);
    tc.cluster.kill_datanode(0).await;
    // The client notices the closed socket within milliseconds (until then
    // the open descriptor still reads the committed, immutable block).
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The rest of the read completes from another replica.
    let mut rest = vec![0u8; 2_000_000];
    r.read_exact_at(1_000_000, &mut rest).await.unwrap();
    assert_eq!(rest, want[1_000_000..]);
    let st = sc.stats();
    assert_eq!(st.short_circuit_bytes, 1_000_000);
    assert!(st.failovers >= 1, "{st:?}");
    assert!(st.remote_bytes >= 2_000_000);
    // Restarted: short-circuit comes back after the back-off.
    tc.cluster.start_datanode(0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before = sc.stats().short_circuit_bytes;
        r.read_exact_at(0, &mut buf).await.unwrap();
        assert_eq!(buf, want[..1_000_000]);
        if sc.stats().short_circuit_bytes > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "short-circuit never recovered: {:?}",
            sc.short_circuit_fallbacks()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tc.cluster.stop().await;
}

/// After the datanodes acknowledge a deletion (the block files are gone),
/// no read returns the deleted block's data, even from a cached fd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_block_is_never_served_from_a_cached_fd() {
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let want = data::bytes(8, 500_000);
    let key = put(&w, "doomed", &want, 1 << 20).await;
    let id = key.blocks[0].block.unwrap();
    let sc = sc_client(c, "node1", &[]).with_verify_checksum(false);
    let r = sc
        .open_key(KeyPath::new("vol", "bucket", "doomed"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 100_000];
    r.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(sc.stats().short_circuit_opens, 1);
    assert_eq!(sc.cached_block_fds(), 1);

    // A reader hammering the key while it is deleted.
    let opened = std::sync::Arc::new(
        sc.open_key(KeyPath::new("vol", "bucket", "doomed"))
            .await
            .unwrap(),
    );
    let hammer = {
        let r = opened.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            let mut ok = 0u64;
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                match r.read_at(4096, &mut buf).await {
                    Ok(_) => ok += 1,
                    Err(_) => return ok,
                }
            }
            panic!("reads kept succeeding after deletion");
        })
    };
    w.delete_key(KeyPath::new("vol", "bucket", "doomed"))
        .await
        .unwrap();
    let files: Vec<_> = (0..3).map(|i| block_file(c, i, &id)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while files.iter().any(|f| f.exists()) {
        assert!(Instant::now() < deadline, "deletion never acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Acknowledged: every later read fails, none returns the old bytes.
    for _ in 0..50 {
        let e = r.read_exact_at(0, &mut buf).await;
        assert!(e.is_err(), "read after deletion returned data");
    }
    assert!(sc.stats().invalidations >= 1, "{:?}", sc.stats());
    let successes = hammer.await.unwrap();
    assert!(successes >= 1);
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_tokens_guard_socket_and_grpc() {
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef-test-secret").unwrap();
    let tok = format!("hdds.block.token.secret.file={}", secret.display());
    let tc = cluster(3, &["hdds.block.token.enabled=true", &tok]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let want = data::bytes(9, 200_000);
    let key = put(&w, "k", &want, 1 << 20).await;
    let sc = sc_client(c, "node1", &[]);
    assert_eq!(get(&sc, "k", 50_000).await, want);
    assert_eq!(sc.stats().short_circuit_bytes, want.len() as u64);
    assert_eq!(
        get(&w, "k", 50_000).await,
        want,
        "gRPC reads carry the token"
    );

    let id = key.blocks[0].block.unwrap();
    let conn = DnConn::connect(&socket_of(c, 0), "test").await.unwrap();
    let e = conn.get_block(&id, b"").await.err().unwrap();
    assert!(e.to_string().contains("block token required"), "{e}");
    // The kind of refusal travels typed, not as text to match.
    assert!(
        matches!(
            &e,
            ozone_client::ScError::Refused {
                refusal: ozone_proto::ScRefusal::Token,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.reason(), "token");
    let e = conn.get_block(&id, b"\x0a\x02garbage").await.err().unwrap();
    assert!(e.to_string().contains("token"), "{e}");
    // A token signed with another secret.
    let forged = ozone_common::token::TokenSigner::new(&[1u8; 32])
        .unwrap()
        .sign(&id, "READ", u64::MAX);
    let e = conn.get_block(&id, &forged).await.err().unwrap();
    assert!(e.to_string().contains("signature"), "{e}");
    let mut dn = ozone_proto::datanode_client::DatanodeClient::connect(format!(
        "http://{}",
        key.blocks[0].replicas[0].address
    ))
    .await
    .unwrap();
    let s = dn
        .read_chunk(ozone_proto::ReadChunkRequest {
            block: Some(id),
            offset: 0,
            len: 10,
            with_checksums: false,
            token: Vec::new(),
            coarse_checksums: false,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::PermissionDenied);

    // Writes need the block's WRITE token (the writer above had them from
    // AllocateBlock). Without one, with a READ token, with a WRITE token of
    // another block or another secret: refused, and nothing is written.
    let signer = ozone_common::token::TokenSigner::new(&std::fs::read(&secret).unwrap()).unwrap();
    let fresh = ozone_proto::BlockId {
        local_id: id.local_id + 1_000_000,
        ..id
    };
    let payload = bytes::Bytes::from(vec![7u8; 4096]);
    let ck =
        ozone_common::checksum::Checksummer::new(ozone_proto::ChecksumType::Crc32c, 4096).unwrap();
    let chunk = ozone_proto::ChunkInfo {
        offset: 0,
        len: 4096,
        checksum: Some(ozone_proto::ChecksumData {
            r#type: ozone_proto::ChecksumType::Crc32c as i32,
            bytes_per_checksum: 4096,
            checksums: ck.compute(&payload),
        }),
        fine_checksum: None,
    };
    let far = u64::MAX;
    let me = vec![key.blocks[0].replicas[0].id.clone()];
    for (what, token) in [
        ("no token", Vec::new()),
        ("a READ token", signer.sign(&fresh, "READ", far)),
        (
            "another block's WRITE token",
            signer.sign_write(&id, &me, 1 << 20, far),
        ),
        (
            "a WRITE token naming no datanode",
            signer.sign(&fresh, "WRITE", far),
        ),
        (
            "a WRITE token for other datanodes",
            signer.sign_write(&fresh, &["dn-elsewhere".to_string()], 1 << 20, far),
        ),
        (
            "a WRITE token for fewer bytes",
            signer.sign_write(&fresh, &me, 4095, far),
        ),
        (
            "an expired WRITE token",
            signer.sign_write(&fresh, &me, 1 << 20, 1),
        ),
        ("a forged WRITE token", forged_write(&fresh)),
    ] {
        let s = dn
            .write_chunk(ozone_proto::WriteChunkRequest {
                block: Some(fresh),
                chunk: Some(chunk.clone()),
                data: payload.clone(),
                token: token.clone(),
                flush: false,
                data_offset: 0,
            })
            .await
            .expect_err(what);
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{what}: {s:?}");
        let s = dn
            .put_block(ozone_proto::PutBlockRequest {
                block: Some(ozone_proto::BlockData {
                    id: Some(fresh),
                    chunks: vec![chunk.clone()],
                    size: 4096,
                    committed: false,
                }),
                sync: false,
                token,
            })
            .await
            .expect_err(what);
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{what}: {s:?}");
    }
    let read = signer.sign(&fresh, "READ", far);
    let s = dn
        .get_block(ozone_proto::GetBlockRequest {
            block: Some(fresh),
            token: read,
        })
        .await
        .unwrap_err();
    assert_eq!(
        s.code(),
        tonic::Code::NotFound,
        "nothing was written: {s:?}"
    );
    // The real WRITE token is accepted, and the old key still reads.
    dn.write_chunk(ozone_proto::WriteChunkRequest {
        block: Some(fresh),
        chunk: Some(chunk.clone()),
        data: payload.clone(),
        token: signer.sign_write(&fresh, &me, 4096, far),
        flush: false,
        data_offset: 0,
    })
    .await
    .unwrap();
    assert_eq!(get(&w, "k", 50_000).await, want);
    tc.cluster.stop().await;
}

/// A WRITE token for `id` signed with a secret the cluster does not have.
fn forged_write(id: &ozone_proto::BlockId) -> Vec<u8> {
    ozone_common::token::TokenSigner::new(&[9u8; 32])
        .unwrap()
        .sign(id, "WRITE", u64::MAX)
}

#[test]
fn datanode_refuses_an_unsafe_socket_directory() {
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let d = tempfile::tempdir_in(&base).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sockets = d.path().join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = std::process::Command::new(exe())
        .args(["datanode", "--data-dir"])
        .arg(d.path().join("data"))
        .arg("--metadata-dir")
        .arg(d.path().join("meta"))
        .args([
            "--om",
            "127.0.0.1:1",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .arg("--set")
        .arg(format!("ozone.domain.socket.path={}", sockets.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    if ozone_datanode::socket_path::check(&base).is_ok() {
        let want = format!(
            "socket path component {} is world-writable",
            sockets.display()
        );
        assert!(err.contains(&want), "{err}");
        assert!(err.contains("chmod o-w"), "{err}");
    } else {
        // The checkout itself sits under an unsafe path: that component is named.
        assert!(err.contains("socket path component"), "{err}");
    }
}

/// 100,000 open/release cycles leave both processes' fd counts where they
/// started; garbage and truncated frames cost only their own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_close_cycles_and_garbage_leak_nothing() {
    use tokio::io::AsyncWriteExt;
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let key = put(&w, "k", &data::bytes(1, 10_000), 1 << 20).await;
    let id = key.blocks[0].block.unwrap();
    let dn_pid = c.datanode_pid(0).unwrap();
    let me = std::process::id();
    let conn = DnConn::connect(&socket_of(c, 0), "cycles").await.unwrap();
    // Warm up, then measure.
    let (_, slot, f) = conn.get_block(&id, b"").await.unwrap();
    drop(f);
    conn.release(slot).await;
    let (mine, theirs) = (fd_count(me), fd_count(dn_pid));
    for _ in 0..100_000 {
        let (_, slot, f) = conn.get_block(&id, b"").await.unwrap();
        drop(f);
        conn.release(slot).await;
    }
    // This process may run other tests beside this one (`cargo test` runs
    // them as threads), whose fds come and go: a leak per cycle would show as
    // about 100,000 more, so a small margin keeps the check meaningful.
    let now = fd_count(me);
    assert!(now <= mine + 64, "fds {mine} -> {now} after 100,000 cycles");
    assert_eq!(fd_count(dn_pid), theirs);

    // Garbage, truncated frames and vanishing clients.
    let path = socket_of(c, 0);
    let mut junk = Vec::new();
    for i in 0..20u8 {
        let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
        let payload: Vec<u8> = match i % 4 {
            0 => data::bytes(i as u64, 1000),
            1 => vec![1, 1, 0, 0],
            2 => vec![1, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            _ => vec![1, 2, 0, 0, 0, 10, 1, 2],
        };
        let _ = s.write_all(&payload).await;
        if i % 2 == 0 {
            drop(s);
        } else {
            junk.push(s);
        }
    }
    // Unanswered handshakes (lost replies) leave no slot behind.
    drop(conn);
    drop(junk);
    let sc = sc_client(c, "node1", &[]);
    assert_eq!(get(&sc, "k", 4096).await, data::bytes(1, 10_000));
    assert_eq!(sc.stats().short_circuit_bytes, 10_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let metrics = reqwest_metrics(c, 0).await;
    assert!(
        metrics.contains("ozone_datanode_sc_opens_total"),
        "{metrics}"
    );
    tc.cluster.stop().await;
}

/// The datanode's gauge of short-circuit slots granted and not released.
async fn slots_in_use(c: &LocalCluster, i: usize) -> i64 {
    let m = reqwest_metrics(c, i).await;
    m.lines()
        .find_map(|l| l.strip_prefix("ozone_datanode_sc_slots "))
        .unwrap_or_else(|| panic!("no sc_slots gauge in {m}"))
        .trim()
        .parse()
        .unwrap()
}

/// Streams hold the descriptor they last read beyond the cache's size, and
/// a slot goes back to the datanode when its last holder lets go: with
/// four streams over four keys and a cache of two, the datanode's slots
/// settle at the cache's two once the streams are dropped, and the client
/// holds no more descriptors than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_descriptors_give_their_slots_back() {
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    for k in 0..4u64 {
        put(&w, &format!("k{k}"), &data::bytes(k, 100_000), 1 << 20).await;
    }
    let me = std::process::id();
    let sc = sc_client(
        c,
        "node1",
        &["ozone.client.read.short-circuit.cache.size=2"],
    );
    let fds_before = fd_count(me);
    let mut readers = Vec::new();
    for k in 0..4u64 {
        readers.push(
            sc.open_key(KeyPath::new("vol", "bucket", &format!("k{k}")))
                .await
                .unwrap(),
        );
    }
    let mut buf = vec![0u8; 4096];
    for round in 0..20u64 {
        for (k, r) in readers.iter().enumerate() {
            let off = (round * 4099 + k as u64 * 17) % 90_000;
            r.read_exact_at(off, &mut buf).await.unwrap();
            assert_eq!(buf, data::bytes(k as u64, 100_000)[off as usize..][..4096]);
        }
    }
    let st = sc.stats();
    assert_eq!(st.short_circuit_bytes, 20 * 4 * 4096, "{st:?}");
    assert_eq!(sc.cached_block_fds(), 2);
    // While the streams live: the cache's two plus at most one per stream,
    // once the releases of evicted descriptors (sent in the background)
    // have reached the datanode.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = slots_in_use(c, 0).await;
        if (2..=6).contains(&held) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slots in use with streams open: {held}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(readers);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = slots_in_use(c, 0).await;
        if n == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "slots in use stuck at {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Two descriptors (and mappings, which hold no fd) remain; this process
    // runs other tests as threads, so a small margin.
    assert!(
        fd_count(me) <= fds_before + 2 + 8,
        "{fds_before} -> {}",
        fd_count(me)
    );
    tc.cluster.stop().await;
}

/// Fetches a datanode's /metrics over plain HTTP.
async fn reqwest_metrics(c: &LocalCluster, i: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ready = std::fs::read_to_string(c.datanode_dir(i).join("ready")).unwrap();
    let http = ready
        .split_whitespace()
        .find_map(|p| p.strip_prefix("http="))
        .unwrap()
        .to_string();
    let mut s = tokio::net::TcpStream::connect(&http).await.unwrap();
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The reader runs as another uid (as in a separate pod): it reaches the
/// socket through the directory's permissions and reads via the passed fd;
/// a datanode restricted to other uids refuses it and the read falls back.
#[test]
fn reader_with_another_uid() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to switch uid");
        return;
    }
    // The other uid must be able to reach and run the binary.
    let reachable = exe().ancestors().skip(1).all(|d| {
        std::fs::metadata(d)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    });
    if !reachable {
        eprintln!("skipped: the build directory is not reachable by other users");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    for restricted in [false, true] {
        let conf: &[&str] = if restricted {
            &["ozone.domain.socket.allowed.uids=0"]
        } else {
            &[]
        };
        let tc = rt.block_on(cluster(3, conf));
        let c = &tc.cluster;
        std::fs::set_permissions(tc.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for i in 0..3 {
            std::fs::set_permissions(c.datanode_dir(i), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let w = client(c, Some("node1"), &[]);
        let want = data::bytes(3, 1_000_000);
        rt.block_on(async {
            bucket(&w).await;
            put(&w, "k", &want, 1 << 20).await;
        });
        let out_dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(out_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let dst = out_dir.path().join("out.bin");
        let mut cmd = std::process::Command::new(exe());
        cmd.args(["--node", "node1", "sh", "key", "get", "/vol/bucket/k"])
            .arg(&dst)
            .env("OZONE_OM_ADDRESS", c.om_address())
            .env("OZONE_LOCAL_CLUSTER_DIR", c.dir())
            .env_remove("NODE_NAME")
            .uid(65534)
            .gid(65534);
        use std::os::unix::process::CommandExt;
        let out = cmd.output().unwrap();
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{report}");
        assert_eq!(std::fs::read(&dst).unwrap(), want);
        if restricted {
            assert!(report.contains("short-circuit: 0 bytes"), "{report}");
        } else {
            assert!(report.contains("short-circuit: 1000000 bytes"), "{report}");
        }
        rt.block_on(tc.cluster.stop());
    }
}

/// Verified reads check only the fine windows covering the request, on
/// gRPC and short-circuit, whatever the key's bytes-per-checksum;
/// corruption inside the range is caught, corruption outside it is not this
/// read's error; per-stream switches in one process are independent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_without_widening() {
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let admin = client(c, None, &[]);
    bucket(&admin).await;
    let want = data::bytes(21, 3 << 20);
    for bpc in ["16KB", "1MB"] {
        let conf = format!("ozone.client.bytes.per.checksum={bpc}");
        let w = client(c, Some("node1"), &[&conf]);
        let name = format!("k-{bpc}");
        let key = put(&w, &name, &want, 1 << 20).await;
        for via_sc in [false, true] {
            let r = if via_sc {
                sc_client(c, "node1", &[])
            } else {
                client(c, Some("node1"), &[])
            };
            let k = r
                .open_key(KeyPath::new("vol", "bucket", &name))
                .await
                .unwrap();
            let mut buf = vec![0u8; 65_536];
            let before = r.stats().checksummed_bytes;
            k.read_exact_at(1_000_003, &mut buf).await.unwrap();
            assert_eq!(buf, want[1_000_003..1_065_539]);
            let checked = r.stats().checksummed_bytes - before;
            assert!(
                checked <= 65_536 + 2 * 4_096,
                "{bpc} sc={via_sc}: {checked} bytes checksummed"
            );
            assert!(checked >= 65_536);
        }
        // Corrupt node1's replica at byte 2,000,000.
        let id = key.blocks[0].block.unwrap();
        let path = block_file(c, 0, &id);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::os::unix::fs::FileExt;
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, 2_000_000).unwrap();
        f.write_all_at(&[byte[0] ^ 0x40], 2_000_000).unwrap();
        drop(f);
        let sc = sc_client(c, "node1", &[]);
        // Another client instance in this process, verification off (one
        // that has not learnt the replica is bad).
        let raw = sc_client(c, "node1", &[]).with_verify_checksum(false);
        let k = sc
            .open_key(KeyPath::new("vol", "bucket", &name))
            .await
            .unwrap();
        let mut buf = vec![0u8; 65_536];
        // Outside the corrupt 4 KiB fine window (but inside its 1 MiB window).
        k.read_exact_at(2_000_000 - 40_000, &mut buf[..20_000])
            .await
            .unwrap();
        assert_eq!(&buf[..20_000], &want[1_960_000..1_980_000]);
        assert_eq!(
            sc.stats().checksum_failures,
            0,
            "{bpc}: not this read's error"
        );
        assert_eq!(sc.stats().short_circuit_bytes, 20_000);
        // The verify-off instance sees the stored byte.
        let kr = raw
            .open_key(KeyPath::new("vol", "bucket", &name))
            .await
            .unwrap();
        kr.read_exact_at(1_990_000, &mut buf).await.unwrap();
        assert_eq!(buf[10_000], want[2_000_000] ^ 0x40);
        // Inside: caught, and the right bytes come from another replica.
        k.read_exact_at(1_990_000, &mut buf).await.unwrap();
        assert_eq!(buf, want[1_990_000..2_055_536]);
        assert_eq!(sc.stats().checksum_failures, 1, "{bpc}");
        // The report has node1 check its replica; found damaged, it is no
        // longer served, so soon even the verify-off instance reads the
        // right bytes (from another replica).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let kr = raw
                .open_key(KeyPath::new("vol", "bucket", &name))
                .await
                .unwrap();
            kr.read_exact_at(1_990_000, &mut buf).await.unwrap();
            if buf == want[1_990_000..2_055_536] {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{bpc}: the damaged replica was still served"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        // Verification asked for on one stream of that instance.
        let kr = raw
            .open_key_with(KeyPath::new("vol", "bucket", &name), Some(true))
            .await
            .unwrap();
        kr.read_exact_at(1_990_000, &mut buf).await.unwrap();
        assert_eq!(buf, want[1_990_000..2_055_536]);
    }
    tc.cluster.stop().await;
}

/// One user cannot take every short-circuit connection of a node: past its
/// per-uid limit its connections are refused as busy (the client falls
/// back to gRPC), counted and said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_cannot_take_every_short_circuit_connection() {
    let tc = cluster(3, &["ozone.domain.socket.max.connections.per.uid=2"]).await;
    let c = &tc.cluster;
    let sock = socket_of(c, 0);
    // Two connections held open (no handshake yet: the datanode waits).
    let _held: Vec<tokio::net::UnixStream> = held_connections(&sock, 2).await;
    let third = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let f = tokio::time::timeout(
        Duration::from_secs(5),
        ozone_common::shortcircuit::recv(&third),
    )
    .await
    .expect("an answer")
    .expect("a frame");
    assert_eq!(
        f.cmd,
        ozone_common::shortcircuit::CMD_ERROR | ozone_common::shortcircuit::RESPONSE
    );
    let e: ozone_proto::ScError = f.decode().unwrap();
    assert_eq!(e.refusal, ozone_proto::ScRefusal::Busy as i32);
    assert!(
        e.message
            .contains("ozone.domain.socket.max.connections.per.uid"),
        "{}",
        e.message
    );
    let m = reqwest_metrics(c, 0).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("ozone_datanode_sc_refusals_total{reason=\"uid_limit\"} 1")),
        "{m}"
    );
    // Once a held connection goes, the user may connect again.
    drop(_held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = sc_client(c, "node1", &[]);
    bucket(&r).await;
    let want = data::bytes(4, 100_000);
    put(&r, "k", &want, 65_536).await;
    assert_eq!(get(&r, "k", 65_536).await, want);
    assert!(r.stats().short_circuit_bytes > 0, "short-circuit again");
    tc.cluster.stop().await;
}

/// `n` connections to `sock`, held open.
async fn held_connections(sock: &std::path::Path, n: usize) -> Vec<tokio::net::UnixStream> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(tokio::net::UnixStream::connect(sock).await.unwrap());
    }
    v
}
