//! Sidecars as real processes beside a local cluster: per-workload policies,
//! verified re-reads, policy reload, a killed and restarted sidecar, and
//! descriptor pass-through with invalidation.

use ozone_client::prelude::*;
use std::time::{Duration, Instant};

use ozone_client::SidecarClient;
use ozone_client::{Client, ClientError};
use ozone_testkit::data;
use ozone_testkit::harness::*;
use ozone_testkit::local::{CLIENT_NODE, LocalCluster, SidecarInfo};

/// GET `path` from a sidecar's HTTP port.
fn http_get(s: &SidecarInfo, path: &str) -> String {
    ozone_testkit::harness::http_get(&s.http, path)
}

/// The value of a sidecar's metric lines starting with `prefix`, summed.
fn metric(s: &SidecarInfo, prefix: &str) -> f64 {
    ozone_testkit::harness::metric(&s.http, prefix) as f64
}

/// Waits until `f` holds (the sidecar exports counters every second).
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Flips one byte of datanode `i`'s replica of the key's first block.
fn flip(c: &LocalCluster, i: usize, key: &ozone_proto::KeyInfo, at: u64) {
    use std::os::unix::fs::FileExt;
    let id = key.blocks[0].block.unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(block_file(c, i, &id))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
}

/// A writer on node1 (so node1 holds the first replica) and a 3 MiB key.
async fn setup(c: &LocalCluster, name: &str) -> (Client, Vec<u8>, ozone_proto::KeyInfo) {
    let w = client(c, Some("node1"), &[]);
    let _ = w.create_volume("vol").await;
    let _ = w.create_bucket("vol", "bucket").await;
    let want = data::bytes(31, 3 << 20);
    let key = put(&w, name, &want, 1 << 20).await;
    let node1 = c.datanode_id(0).unwrap();
    assert!(
        key.blocks[0].replicas.iter().any(|r| r.id == node1),
        "node1 holds a replica"
    );
    (w, want, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workload_policies_on_one_node_and_a_corrupt_local_replica() {
    let mut tc = cluster(3, &[]).await;
    let (_, want, key) = setup(&tc.cluster, "hfile").await;
    let c = &mut tc.cluster;
    // HBase-like: verification off, no per-stream overrides.
    let hbase = c
        .start_sidecar(
            "node1",
            "hbase",
            &[
                "ozone.client.verify.checksum = false",
                "ozone.sidecar.verify.override.allowed = false",
            ],
        )
        .await
        .unwrap();
    let strict = c
        .start_sidecar("node1", "strict", &["ozone.client.verify.checksum = true"])
        .await
        .unwrap();
    let remote = c.start_sidecar(CLIENT_NODE, "remote", &[]).await.unwrap();
    flip(c, 0, &key, 2_000_000);

    let app = SidecarClient::unix(&hbase.socket).unwrap();
    let p = app.policy().await.unwrap();
    assert!(!p.verify_checksum && !p.allow_verify_override);
    assert_eq!(
        (p.node_name.as_str(), p.short_circuit.as_str()),
        ("node1", "auto")
    );
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "hfile"))
        .await
        .unwrap();
    assert!(!r.verify_checksum());
    let mut buf = vec![0u8; 65_536];
    // A normal read: the stored (corrupt) byte, as HBase's own HFile
    // checksum would then find.
    r.read_exact_at(1_990_000, &mut buf).await.unwrap();
    assert_eq!(buf[10_000], want[2_000_000] ^ 0x40);
    assert_eq!(buf[..10_000], want[1_990_000..2_000_000]);
    // The fallback: a verified re-read gets the right bytes from another
    // replica and reports the bad one.
    r.verified_read_at(1_990_000, &mut buf).await.unwrap();
    assert_eq!(buf, want[1_990_000..2_055_536]);
    eventually("checksum failure exported", || {
        metric(&hbase, "ozone_sidecar_checksum_failures_total") >= 1.0
    })
    .await;
    assert!(
        metric(
            &hbase,
            "ozone_sidecar_reads_total{kind=\"verified\",verify=\"true\"}"
        ) >= 1.0
    );
    // A per-stream override the policy forbids is refused, saying why.
    let e = app
        .open_key_with(KeyPath::new("vol", "bucket", "hfile"), Some(true))
        .await
        .err()
        .expect("override refused");
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            ClientError::Rpc {
                code: tonic::Code::PermissionDenied,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg.contains("override refused")
            && msg.contains("ozone.sidecar.verify.override.allowed=false"),
        "{msg}"
    );
    assert_eq!(metric(&hbase, "ozone_sidecar_policy_denials_total"), 1.0);
    // Asking for what the policy already says is fine.
    app.open_key_with(KeyPath::new("vol", "bucket", "hfile"), Some(false))
        .await
        .unwrap();

    // The verify-on workload always gets the right bytes.
    let app2 = SidecarClient::unix(&strict.socket).unwrap();
    let r2 = app2
        .open_key(KeyPath::new("vol", "bucket", "hfile"))
        .await
        .unwrap();
    assert!(r2.verify_checksum());
    r2.read_exact_at(1_990_000, &mut buf).await.unwrap();
    assert_eq!(buf, want[1_990_000..2_055_536]);
    let mut all = Vec::new();
    r2.copy_to(&mut all).await.unwrap();
    assert_eq!(all, want);
    // It allows overrides (the default).
    let off = app2
        .open_key_with(KeyPath::new("vol", "bucket", "hfile"), Some(false))
        .await
        .unwrap();
    assert!(!off.verify_checksum());

    // Reads on node1 go short-circuit (the verify-off one read the local
    // replica); on a node without a datanode, gRPC.
    let app3 = SidecarClient::unix(&remote.socket).unwrap();
    let r3 = app3
        .open_key(KeyPath::new("vol", "bucket", "hfile"))
        .await
        .unwrap();
    r3.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf, want[..65_536]);
    eventually("bytes by path exported", || {
        metric(
            &hbase,
            "ozone_sidecar_read_bytes_total{path=\"short-circuit\"}",
        ) > 0.0
            && metric(
                &remote,
                "ozone_sidecar_read_bytes_total{path=\"grpc-remote\"}",
            ) > 0.0
    })
    .await;
    assert_eq!(
        metric(
            &remote,
            "ozone_sidecar_read_bytes_total{path=\"short-circuit\"}"
        ),
        0.0
    );
    // The policy is visible over HTTP too.
    let page = http_get(&hbase, "/policy");
    assert!(page.contains("verify_checksum = false"), "{page}");
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_file_change_applies_to_new_streams() {
    let mut tc = cluster(3, &[]).await;
    let (_, want, key) = setup(&tc.cluster, "k").await;
    let c = &mut tc.cluster;
    let s = c
        .start_sidecar("node1", "p", &["ozone.client.verify.checksum = true"])
        .await
        .unwrap();
    flip(c, 0, &key, 100);
    let app = SidecarClient::unix(&s.socket).unwrap();
    let before = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    assert!(before.verify_checksum());

    // The ConfigMap changes.
    std::fs::write(&s.conf, "ozone.client.verify.checksum = false\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.policy().await.unwrap().verify_checksum {
        assert!(Instant::now() < deadline, "policy never reloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    assert!(
        !after.verify_checksum(),
        "new streams follow the new policy"
    );
    let mut buf = vec![0u8; 4096];
    after.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf[100], want[100] ^ 0x40, "no verification: stored bytes");
    // The stream opened before keeps its setting.
    before.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf, want[..4096]);
    assert!(
        http_get(&s, "/metrics").contains("verify_checksum=\"false\""),
        "policy gauge follows"
    );

    // A broken file keeps the policy in force; the sidecar keeps serving.
    std::fs::write(&s.conf, "ozone.client.read.short-circuit = sometimes\n").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let p = app.policy().await.unwrap();
    assert!(!p.verify_checksum);
    app.open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sidecar_fails_reads_cleanly_and_a_restarted_one_serves_again() {
    let mut tc = cluster(3, &[]).await;
    let (_, want, _) = setup(&tc.cluster, "k").await;
    let c = &mut tc.cluster;
    let s = c.start_sidecar("node1", "k", &[]).await.unwrap();
    let app = SidecarClient::unix(&s.socket).unwrap();
    let r = std::sync::Arc::new(
        app.open_key(KeyPath::new("vol", "bucket", "k"))
            .await
            .unwrap(),
    );
    let reader = {
        let r = r.clone();
        let want = want.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 20];
            let mut ok = 0u32;
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                let off = (ok as u64 * 65_536) % (2 << 20);
                match r.read_exact_at(off, &mut buf).await {
                    Ok(()) => {
                        assert_eq!(buf, want[off as usize..off as usize + (1 << 20)]);
                        ok += 1;
                    }
                    Err(e) => return (ok, e),
                }
            }
            panic!("reads kept succeeding with the sidecar dead");
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.kill_sidecar("k").await;
    let (ok, e) = reader.await.unwrap();
    assert!(ok >= 1, "some reads before the kill");
    assert!(
        matches!(e, ClientError::Unavailable(_) | ClientError::Rpc { .. }),
        "a clean error, not wrong data: {e:?}"
    );
    // Restarted: the old stream is gone (it says to reopen), a new one works
    // over the same client (it reconnects).
    c.restart_sidecar("k").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let e = r.read_exact_at(0, &mut buf).await.unwrap_err();
    assert!(e.to_string().contains("reopen"), "{e}");
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    r.read_exact_at(1000, &mut buf).await.unwrap();
    assert_eq!(buf, want[1000..5096]);
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_writes_go_through_the_sidecar() {
    let mut tc = cluster(3, &[]).await;
    let c = &mut tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let s = c.start_sidecar("node1", "d", &[]).await.unwrap();
    let app = SidecarClient::unix(&s.socket).unwrap();
    // Writes (HFiles, WALs) through the sidecar.
    let want = data::bytes(5, 5 << 20);
    let k = app
        .put_key(KeyPath::new("vol", "bucket", "wal"), &want[..])
        .await
        .unwrap();
    assert_eq!(k.size, want.len() as u64);
    assert_eq!(get(&w, "wal", 1 << 20).await, want);
    let names: Vec<String> = app
        .list_keys(KeyPath::new("vol", "bucket", ""))
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["wal"]);
    assert_eq!(
        app.key_info(KeyPath::new("vol", "bucket", "wal"))
            .await
            .unwrap()
            .size,
        5 << 20
    );
    // Bad input: a clear error each, and the sidecar stays up.
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "wal"))
        .await
        .unwrap();
    let mut big = vec![0u8; 10];
    let e = r.read_exact_at(6 << 20, &mut big).await.unwrap_err();
    assert!(matches!(e, ClientError::OutOfRange { .. }), "{e:?}");
    let e = app
        .open_key(KeyPath::new("vol", "bucket", "missing"))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ClientError::NotFound(_)), "{e:?}");
    let e = app
        .open_key(KeyPath::new("vol", "", "x"))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ClientError::InvalidArgument(_)), "{e:?}");
    // Garbage on the data socket closes that connection only.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut g = tokio::net::UnixStream::connect(s.socket.with_extension("data"))
            .await
            .unwrap();
        g.write_all(b"not a frame at all").await.unwrap();
        let mut b = [0u8; 16];
        assert_eq!(g.read(&mut b).await.unwrap_or(0), 0, "closed");
    }
    r.read_exact_at(0, &mut big).await.unwrap();
    assert_eq!(big, want[..10]);

    // SIGTERM with a stream open: the sidecar refuses new work, serves the
    // open stream until the application closes it, then exits.
    let t = Instant::now();
    let during = async {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match app.key_info(KeyPath::new("vol", "bucket", "wal")).await {
                Err(e) if e.to_string().contains("draining") => break,
                _ => assert!(Instant::now() < deadline, "never refused new work"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let e = app
            .open_key(KeyPath::new("vol", "bucket", "wal"))
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("draining"), "{e}");
        let mut b = vec![0u8; 1 << 20];
        r.read_exact_at(1 << 20, &mut b).await.unwrap();
        assert_eq!(b, want[1 << 20..2 << 20], "the open stream is served");
        r.close().await.unwrap();
    };
    tokio::join!(c.stop_sidecar("d"), during);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "exited once the stream closed, not at the drain timeout"
    );
    assert!(!s.socket.exists(), "socket removed on exit");
    let r = app
        .open_key(KeyPath::new("vol", "bucket", "wal"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(r, ClientError::Unavailable(_) | ClientError::Rpc { .. }),
        "{r:?}"
    );
    app.delete_key(KeyPath::new("vol", "bucket", "wal"))
        .await
        .unwrap_err();
    tc.cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_reads_at_local_speed_and_stop_after_deletion() {
    let mut tc = cluster(3, &[]).await;
    let (w, want, key) = setup(&tc.cluster, "pt").await;
    let c = &mut tc.cluster;
    let s = c.start_sidecar("node1", "pt", &[]).await.unwrap();
    // The application: no hostPath, only the sidecar's relay sockets.
    let relay = s.passthrough_dir.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&s.passthrough_dir)
        .map(|d| d.count())
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline, "no relay socket appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let app = client(
        c,
        Some("node1"),
        &[&format!("ozone.domain.socket.path={relay}")],
    )
    .with_verify_checksum(true);
    let r = std::sync::Arc::new(
        app.open_key(KeyPath::new("vol", "bucket", "pt"))
            .await
            .unwrap(),
    );
    let mut buf = vec![0u8; 65_536];
    r.read_exact_at(100_000, &mut buf).await.unwrap();
    assert_eq!(buf, want[100_000..165_536]);
    let st = app.stats();
    assert_eq!(st.short_circuit_bytes, 65_536, "{st:?}");
    assert_eq!(st.short_circuit_opens, 1);
    eventually("relayed connection counted", || {
        metric(
            &s,
            "ozone_sidecar_passthrough_connections_total{result=\"relayed\"}",
        ) >= 1.0
    })
    .await;

    // Delete the key: once the datanodes drop the block, reads through the
    // handed-over descriptor stop.
    w.delete_key(KeyPath::new("vol", "bucket", "pt"))
        .await
        .unwrap();
    let id = key.blocks[0].block.unwrap();
    let files: Vec<_> = (0..3).map(|i| block_file(c, i, &id)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while files.iter().any(|f| f.exists()) {
        assert!(Instant::now() < deadline, "deletion never acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..20 {
        assert!(
            r.read_exact_at(0, &mut buf).await.is_err(),
            "read after deletion returned data"
        );
    }
    assert!(app.stats().invalidations >= 1, "{:?}", app.stats());

    // Pass-through off by policy: the relay refuses, the app reads over gRPC.
    std::fs::write(&s.conf, "ozone.sidecar.passthrough.enabled = false\n").unwrap();
    let sc = SidecarClient::unix(&s.socket).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sc.policy().await.unwrap().passthrough {
        assert!(Instant::now() < deadline, "policy never reloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = data::bytes(77, 100_000);
    put(&w, "pt2", &again, 1 << 20).await;
    let app2 = client(
        c,
        Some("node1"),
        &[&format!("ozone.domain.socket.path={relay}")],
    );
    assert_eq!(get(&app2, "pt2", 65_536).await, again);
    assert_eq!(app2.stats().short_circuit_bytes, 0);
    eventually("refusal counted", || {
        metric(
            &s,
            "ozone_sidecar_passthrough_connections_total{result=\"refused\"}",
        ) >= 1.0
    })
    .await;
    tc.cluster.stop().await;
}

/// The policy block (`policy.conf: |`) of the shipped HBase example.
fn hbase_policy() -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/workloads/hbase-regionserver.yaml"
    ))
    .unwrap();
    text.lines()
        .skip_while(|l| !l.contains("policy.conf: |"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", l.trim()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_hbase_policy_loads_and_is_obeyed() {
    let mut tc = cluster(3, &[]).await;
    let (_, want, key) = setup(&tc.cluster, "k").await;
    let policy = hbase_policy();
    assert!(
        policy.contains("ozone.client.read.short-circuit = auto"),
        "{policy}"
    );
    let lines: Vec<&str> = policy.lines().collect();
    let c = &mut tc.cluster;
    let s = c.start_sidecar("node1", "hbase", &lines).await.unwrap();
    flip(c, 0, &key, 100);
    let app = SidecarClient::unix(&s.socket).unwrap();
    let p = app.policy().await.unwrap();
    assert!(p.verify_checksum && p.allow_verify_override && p.passthrough);
    assert_eq!(p.short_circuit, "auto");
    // Obeyed as HBase's HFileSystem uses it: its no-checksum instance asks
    // for no verification (HBase checks its HFile checksums), reads the
    // local replica short-circuit, and the flipped byte comes back ...
    let r = app
        .open_key_with(KeyPath::new("vol", "bucket", "k"), Some(false))
        .await
        .unwrap();
    assert!(!r.verify_checksum());
    let mut buf = vec![0u8; 4096];
    r.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf[100], want[100] ^ 0x40);
    r.close().await.unwrap();
    assert!(
        metric(&s, "ozone_sidecar_read_bytes_total{path=\"short-circuit\"}") >= 4096.0,
        "read short-circuit"
    );
    // ... while its checksummed instance (the fallback reader) verifies by
    // default, skips the bad replica and reads the right byte.
    let v = app
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    assert!(v.verify_checksum());
    v.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf[100], want[100]);
    v.close().await.unwrap();

    // A sidecar whose policy file changes to the example's content reloads it.
    let s2 = c
        .start_sidecar(
            "node1",
            "other",
            &[
                "ozone.client.verify.checksum = false",
                "ozone.sidecar.verify.override.allowed = false",
            ],
        )
        .await
        .unwrap();
    let app2 = SidecarClient::unix(&s2.socket).unwrap();
    assert!(!app2.policy().await.unwrap().allow_verify_override);
    std::fs::write(&s2.conf, &policy).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !app2.policy().await.unwrap().allow_verify_override {
        assert!(
            Instant::now() < deadline,
            "the example's policy never loaded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tc.cluster.stop().await;
}

/// The same key code run through both clients: the cluster directly and a
/// sidecar (`KeyAccess` / `KeyRead`).
async fn one_key_lifecycle<A: ozone_client::KeyAccess>(a: &A, name: &str) {
    use ozone_client::KeyRead;
    let want = data::bytes(name.len() as u64, (2 << 20) + 123);
    let k = a
        .put_key(KeyPath::new("vol", "bucket", name), &want[..])
        .await
        .unwrap();
    assert_eq!(k.size, want.len() as u64);
    assert_eq!(
        a.key_info(KeyPath::new("vol", "bucket", name))
            .await
            .unwrap()
            .size,
        k.size
    );
    let listed = a
        .list_keys(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let r = a
        .open_key_with(KeyPath::new("vol", "bucket", name), Some(false))
        .await
        .unwrap();
    assert!(!r.verify_checksum());
    assert_eq!(r.size(), want.len() as u64);
    let mut buf = vec![0u8; 4096];
    r.verified_read_at(1 << 20, &mut buf).await.unwrap();
    assert_eq!(buf, want[1 << 20..(1 << 20) + 4096]);
    assert_eq!(
        r.read_at(want.len() as u64 - 100, &mut buf).await.unwrap(),
        100
    );
    let e = r
        .read_exact_at(want.len() as u64, &mut buf)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::OutOfRange { .. }), "{e:?}");
    let mut all = Vec::new();
    assert_eq!(r.copy_to(&mut all).await.unwrap(), want.len() as u64);
    assert_eq!(all, want);
    r.close().await.unwrap();
    a.delete_key(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    let e = a
        .open_key(KeyPath::new("vol", "bucket", name))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ClientError::NotFound(_)), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_interface_for_the_cluster_and_the_sidecar() {
    let mut tc = cluster(3, &[]).await;
    let c = &mut tc.cluster;
    let direct = client(c, Some("node1"), &[]);
    bucket(&direct).await;
    let s = c.start_sidecar("node1", "ka", &[]).await.unwrap();
    one_key_lifecycle(&direct, "direct").await;
    one_key_lifecycle(&SidecarClient::unix(&s.socket).unwrap(), "through-sidecar").await;
    tc.cluster.stop().await;
}

/// The file-system calls through a sidecar: an application with only the
/// sidecar's socket makes directories, creates exclusively, renames, lists,
/// reads under the policy and deletes recursively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_system_calls_go_through_the_sidecar() {
    use ozone_client::FsAccess;
    use ozone_proto::BucketLayout;
    let tc = cluster(3, &[]).await;
    let c = &tc.cluster;
    let admin = client(c, None, &[]);
    admin.create_volume("vol").await.unwrap();
    admin
        .create_bucket_with_layout("vol", "fsb", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let mut c = tc.cluster;
    let s = c
        .start_sidecar("node1", "fs", &["ozone.client.verify.checksum = false"])
        .await
        .unwrap();
    let app = SidecarClient::unix(&s.socket).unwrap();
    assert!(
        app.mkdirs(KeyPath::new("vol", "fsb", "hbase/WALs/rs1"))
            .await
            .unwrap()
    );
    let wal = data::bytes(21, 300_000);
    app.put_file(
        KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.1"),
        false,
        &wal[..],
    )
    .await
    .unwrap();
    // Exclusive create of an existing file is refused with its own code.
    let again = app
        .put_file(
            KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.1"),
            false,
            &b"x"[..],
        )
        .await;
    assert!(
        matches!(again, Err(ClientError::AlreadyExists(_))),
        "{again:?}"
    );
    assert_eq!(
        app.rename(
            KeyPath::new("vol", "fsb", "hbase/WALs/rs1"),
            "hbase/oldWALs"
        )
        .await
        .unwrap(),
        "hbase/oldWALs"
    );
    let listed = app
        .list_status_all(KeyPath::new("vol", "fsb", "hbase/oldWALs"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].path, "hbase/oldWALs/w.1");
    assert_eq!(listed[0].size, wal.len() as u64);
    let r = app
        .open_key(KeyPath::new("vol", "fsb", "hbase/oldWALs/w.1"))
        .await
        .unwrap();
    assert!(
        !r.verify_checksum(),
        "the workload's policy applies to files"
    );
    let mut got = vec![0u8; wal.len()];
    r.read_exact_at(0, &mut got).await.unwrap();
    assert!(got == wal);
    r.close().await.unwrap();
    let du = app
        .content_summary(KeyPath::new("vol", "fsb", "hbase"))
        .await
        .unwrap();
    assert_eq!((du.length, du.file_count), (wal.len() as u64, 1));
    assert!(matches!(
        app.delete_path(KeyPath::new("vol", "fsb", "hbase"), false)
            .await,
        Err(ClientError::Precondition(_))
    ));
    app.delete_path(KeyPath::new("vol", "fsb", "hbase"), true)
        .await
        .unwrap();
    assert!(matches!(
        app.file_status(KeyPath::new("vol", "fsb", "hbase/oldWALs/w.1"))
            .await,
        Err(ClientError::NotFound(_))
    ));
    // A WAL written through the sidecar: hsync makes it visible to the
    // cluster's readers, lease recovery closes it at the synced length.
    let mut w = app
        .create_file(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"), false)
        .await
        .unwrap();
    w.write(&wal[..123_457]).await.unwrap();
    w.hsync().await.unwrap();
    w.write(&wal[123_457..200_000]).await.unwrap();
    assert!(
        !app.is_file_closed(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"))
            .await
            .unwrap()
    );
    assert_eq!(
        admin
            .file_status(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"))
            .await
            .unwrap()
            .size,
        123_457
    );
    assert_eq!(
        app.recover_lease(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"))
            .await
            .unwrap(),
        123_457
    );
    assert!(
        app.is_file_closed(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"))
            .await
            .unwrap()
    );
    let r = admin
        .open_key(KeyPath::new("vol", "fsb", "hbase/WALs/rs1/w.2"))
        .await
        .unwrap();
    let mut got = Vec::new();
    r.copy_to(&mut got).await.unwrap();
    assert!(got == wal[..123_457]);
    // The writer's lease is gone: its commit fails.
    assert!(w.close().await.is_err());

    // The namespace is the OM's own service, passed on unread: the
    // datanodes' capacity the OM knows, a call the OM does not serve, and
    // a request that is no message get the OM's answers, and the sidecar
    // serves on.
    let (cap, _) = app.capacity().await.unwrap();
    assert_eq!(cap, admin.capacity().await.unwrap().0);
    assert!(cap > 0);
    use tonic::codegen::http::uri::PathAndQuery;
    let e = app
        .om()
        .forward(
            PathAndQuery::from_static("/ozone.v1.OzoneManager/NoSuchCall"),
            bytes::Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
    let e = app
        .om()
        .forward(
            PathAndQuery::from_static("/ozone.v1.OzoneManager/LookupKey"),
            bytes::Bytes::from_static(b"\xff\xff\xff not a message"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");
    assert!(e.message().contains("decode"), "{e:?}");
    assert!(app.volumes().await.unwrap().iter().any(|v| v.name == "vol"));
    // Each answer is counted by its code.
    let page = ozone_testkit::harness::http_get(&s.http, "/metrics");
    for code in ["Ok", "NotFound", "Unimplemented", "Internal"] {
        let line = format!("ozone_sidecar_om_calls_total{{code=\"{code}\"}}");
        assert!(page.contains(&line), "{line} in\n{page}");
    }
    c.stop_sidecar("fs").await;
}

/// Streams the application does not close are closed anyway: a dropped
/// reader closes its stream, and a client whose connection goes takes its
/// streams with it; streams left idle are closed after the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclosed_streams_do_not_stay_open() {
    let mut tc = cluster(3, &[]).await;
    let c = &mut tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    put(&w, "k", &data::bytes(5, 100_000), 1 << 20).await;
    let s = c.start_sidecar("node1", "reaper", &[]).await.unwrap();
    let open = |s: &SidecarInfo| metric(s, "ozone_sidecar_open_streams ");

    // Dropped without close: closed in the background.
    let sc = SidecarClient::unix(&s.socket).unwrap();
    let r = sc
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    assert_eq!(open(&s), 1.0);
    drop(r);
    eventually("a dropped reader's stream closed", || open(&s) == 0.0).await;

    // A key renamed through the sidecar (the OM's RenameKey, passed on).
    let out = std::process::Command::new(exe())
        .args(["--sidecar", s.socket.to_str().unwrap()])
        .args(["sh", "key", "rename", "/vol/bucket", "k", "k2"])
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    w.key_info(KeyPath::new("vol", "bucket", "k2"))
        .await
        .unwrap();
    w.om()
        .rename_key(KeyPath::new("vol", "bucket", "k2"), "k")
        .await
        .unwrap();

    // Processes killed mid-read (their output blocked on a full pipe):
    // each one's stream is closed with its connection.
    put(&w, "big", &data::bytes(6, 8 << 20), 1 << 20).await;
    let mut apps: Vec<std::process::Child> = (0..20)
        .map(|_| {
            std::process::Command::new(exe())
                .args([
                    "--sidecar",
                    s.socket.to_str().unwrap(),
                    "sh",
                    "key",
                    "cat",
                    "/vol/bucket/big",
                ])
                .env_remove("NODE_NAME")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("20 applications mid-read", || open(&s) == 20.0).await;
    for a in &mut apps {
        a.kill().unwrap();
        a.wait().unwrap();
    }
    eventually("the streams of the killed applications closed", || {
        open(&s) == 0.0
    })
    .await;
    assert!(
        metric(
            &s,
            "ozone_sidecar_streams_reaped_total{reason=\"connection\"}"
        ) >= 20.0
    );

    // Held open but unused: closed after the idle timeout; a read then
    // says to reopen.
    let s = c
        .start_sidecar(
            "node1",
            "idler",
            &["ozone.sidecar.stream.idle.timeout = 2s"],
        )
        .await
        .unwrap();
    let sc3 = SidecarClient::unix(&s.socket).unwrap();
    let r = sc3
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut b = vec![0u8; 10];
    r.read_exact_at(0, &mut b).await.unwrap();
    eventually("an idle stream closed", || open(&s) == 0.0).await;
    assert!(metric(&s, "ozone_sidecar_streams_reaped_total{reason=\"idle\"}") >= 1.0);
    let e = r.read_exact_at(0, &mut b).await.unwrap_err();
    assert!(e.to_string().contains("reopen"), "{e}");
    tc.cluster.stop().await;
}

/// The metric names a process exposes at `addr` (`# TYPE` lines), with the
/// names samples carry (counters end in `_total`, histograms add
/// `_bucket`, `_sum`, `_count`).
fn exposed(addr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in ozone_testkit::harness::http_get(addr, "/metrics").lines() {
        let mut w = l.split_whitespace();
        if (w.next(), w.next()) != (Some("#"), Some("TYPE")) {
            continue;
        }
        let (Some(name), Some(kind)) = (w.next(), w.next()) else {
            continue;
        };
        out.push(name.to_string());
        match kind {
            "counter" => out.push(format!("{name}_total")),
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    out.push(format!("{name}{s}"));
                }
            }
            _ => {}
        }
    }
    out
}

/// The HTTP address in a process's ready file (`... http=ADDR ...`).
fn ready_http(file: &std::path::Path) -> String {
    std::fs::read_to_string(file)
        .unwrap()
        .split_whitespace()
        .find_map(|p| p.strip_prefix("http="))
        .expect("http= in the ready file")
        .to_string()
}

/// Every metric the chart's Grafana dashboard queries is one the OM, a
/// datanode or a sidecar exports (after a write, a read through the
/// sidecar and a failed OM call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_only_metrics_the_processes_export() {
    let mut tc = cluster(3, &[]).await;
    let (w, _, _) = setup(&tc.cluster, "k").await;
    let s = tc.cluster.start_sidecar("node1", "app", &[]).await.unwrap();
    let sc = SidecarClient::unix(&s.socket).unwrap();
    let r = sc
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    r.read_exact_at(0, &mut buf).await.unwrap();
    r.close().await.unwrap();
    assert!(
        w.key_info(KeyPath::new("vol", "bucket", "nope"))
            .await
            .is_err()
    );
    let mut names = exposed(&ready_http(&tc.cluster.dir().join("om/ready")));
    names.extend(exposed(&ready_http(
        &tc.cluster.datanode_dir(0).join("ready"),
    )));
    names.extend(exposed(&s.http));
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/ozone-operator/dashboards/ozone.json"
    ))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    assert!(json["panels"].as_array().unwrap().len() > 10);
    let mut queried: Vec<&str> = dashboard
        .match_indices("ozone_")
        .map(|(i, _)| {
            let rest = &dashboard[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|n| n.len() > "ozone_".len() && !n.starts_with("ozone_rs"))
        .collect();
    queried.sort();
    queried.dedup();
    assert!(queried.len() >= 25, "{queried:?}");
    let missing: Vec<&&str> = queried
        .iter()
        .filter(|q| !names.iter().any(|n| n == **q))
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

/// Python: `varint(n)`, a protobuf varint.
const PY_VARINT: &str = r#"
def varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])
"#;

/// A raw gRPC client of the sidecar at `socket`, for what `SidecarClient`
/// keeps to itself (stream handles).
async fn raw_sidecar(
    socket: &std::path::Path,
) -> ozone_proto::sidecar_client::SidecarClient<tonic::transport::Channel> {
    let path = socket.to_path_buf();
    let ch = tonic::transport::Endpoint::from_static("http://sidecar.local")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .unwrap();
    ozone_proto::sidecar_client::SidecarClient::new(ch)
}

/// What another process (python3) gets asking the data socket beside
/// `socket` for 10 bytes of stream `handle`: `data N` or `error CODE`, or
/// `closed` when the sidecar hangs up.
fn read_from_another_process(socket: &std::path::Path, handle: u64) -> String {
    let script = [
        PY_VARINT,
        r#"
import socket, struct, sys
path, handle = sys.argv[1], int(sys.argv[2])
body = b"\x08" + varint(handle) + b"\x10" + varint(0) + b"\x18" + varint(10)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
hdr = b""
try:
    s.sendall(bytes([1, 0x10]) + struct.pack(">I", len(body)) + body)
    while len(hdr) < 6:
        got = s.recv(6 - len(hdr))
        if not got:
            break
        hdr += got
except (BrokenPipeError, ConnectionResetError):
    pass
if len(hdr) < 6:
    print("closed")
    sys.exit(0)
n = struct.unpack(">I", hdr[2:6])[0]
rest = b""
while len(rest) < n:
    rest += s.recv(n - len(rest))
if hdr[1] == 0xff:
    # SidecarDataError{code = 1}
    print("error", rest[1] if rest[:1] == b"\x08" else -1)
else:
    print("data", n)
"#,
    ]
    .concat();
    let data = socket.with_extension("data");
    run_python(
        "python3".as_ref(),
        &script,
        &[data.as_os_str(), handle.to_string().as_ref()],
    )
    .trim()
    .to_string()
}

/// Runs `script` with `python` and `args`, asserting it succeeds; its
/// standard output.
fn run_python(python: &std::path::Path, script: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// On a shared host: a sidecar serves only the uids it allows, on every
/// socket; a relay only those the datanode allows too; and a stream's
/// handle is random and answers only the process that opened it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_sockets_serve_allowed_users_and_handles_only_their_opener() {
    let mut tc = cluster(3, &[]).await;
    let (_w, want, _key) = setup(&tc.cluster, "acc").await;
    let c = &mut tc.cluster;
    let s = c.start_sidecar("node1", "acc", &[]).await.unwrap();
    let mut raw = raw_sidecar(&s.socket).await;
    let open = |key: &str| ozone_proto::SidecarOpenRequest {
        key: Some(ozone_proto::KeyRef {
            volume: "vol".into(),
            bucket: "bucket".into(),
            key: key.into(),
        }),
        ..Default::default()
    };
    let h1 = raw.open(open("acc")).await.unwrap().into_inner().handle;
    let h2 = raw.open(open("acc")).await.unwrap().into_inner().handle;
    assert!(h1 > 1 << 32 && h2 > 1 << 32, "random handles: {h1} {h2}");
    // Its opener reads it, on gRPC and on the data socket.
    let read = |offset: u64| ozone_proto::SidecarReadRequest {
        handle: h1,
        offset,
        length: 10,
    };
    let r = raw.read(read(0)).await.unwrap().into_inner();
    assert_eq!(r.data[..], want[..10]);
    let app = SidecarClient::unix(&s.socket).unwrap();
    let mine = app
        .open_key(KeyPath::new("vol", "bucket", "acc"))
        .await
        .unwrap();
    let mut buf = [0u8; 10];
    mine.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf[..], want[..10]);
    // Another process, with the right handle, gets NOT_FOUND (5); the
    // stream still serves its opener.
    assert_eq!(read_from_another_process(&s.socket, h1), "error 5");
    let r = raw.read(read(10)).await.unwrap().into_inner();
    assert_eq!(r.data[..], want[10..20]);

    // A sidecar that allows another uid only: every socket refuses us.
    let strict = c
        .start_sidecar(
            "node1",
            "strict-uid",
            &["ozone.sidecar.allowed.uids = 4242"],
        )
        .await
        .unwrap();
    let e = SidecarClient::unix(&strict.socket)
        .unwrap()
        .policy()
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::Unavailable(_) | ClientError::Rpc { .. }),
        "{e:?}"
    );
    assert_eq!(read_from_another_process(&strict.socket, h1), "closed");
    eventually("the refusals counted", || {
        metric(
            &strict,
            "ozone_sidecar_connections_refused_total{socket=\"grpc\"}",
        ) >= 1.0
            && metric(
                &strict,
                "ozone_sidecar_connections_refused_total{socket=\"data\"}",
            ) >= 1.0
    })
    .await;
    // A relay also applies the datanode's list to whoever connects.
    let dn_rule = c
        .start_sidecar(
            "node1",
            "dn-rule",
            &["ozone.domain.socket.allowed.uids = 4242"],
        )
        .await
        .unwrap();
    let relay = dn_rule
        .passthrough_dir
        .join(format!("dn-{}.sock", c.datanode_id(0).unwrap()));
    eventually("the relay socket", || relay.exists()).await;
    {
        use tokio::io::AsyncReadExt;
        let mut r = tokio::net::UnixStream::connect(&relay).await.unwrap();
        let mut b = [0u8; 8];
        assert_eq!(r.read(&mut b).await.unwrap_or(0), 0, "closed");
    }
    eventually("the relay refusal counted", || {
        metric(
            &dn_rule,
            "ozone_sidecar_connections_refused_total{socket=\"relay\"}",
        ) >= 1.0
    })
    .await;
    // The sidecar that allows us still relays.
    let ok_relay = s
        .passthrough_dir
        .join(format!("dn-{}.sock", c.datanode_id(0).unwrap()));
    eventually("the relay socket", || ok_relay.exists()).await;
    let via = sc_client_at(c, &s.passthrough_dir);
    let k = via
        .open_key(KeyPath::new("vol", "bucket", "acc"))
        .await
        .unwrap();
    k.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf[..], want[..10]);
    assert!(
        via.stats().short_circuit_bytes > 0,
        "read through the relay"
    );
    tc.cluster.stop().await;
}

/// A client on node1 reading short-circuit through the sockets in `dir`.
fn sc_client_at(c: &LocalCluster, dir: &std::path::Path) -> Client {
    let at = format!("ozone.domain.socket.path={}", dir.display());
    client(c, Some("node1"), &[&at])
}

/// A python3 that has `grpcio`: the system's, or one in a virtual
/// environment this test makes under the target directory (from PyPI).
fn python_with_grpc() -> std::path::PathBuf {
    use std::process::Command;
    let has_grpc = |py: &std::path::Path| {
        Command::new(py)
            .args(["-c", "import grpc"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_grpc(std::path::Path::new("python3")) {
        return "python3".into();
    }
    let venv = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("py-grpc");
    let py = venv.join("bin/python");
    if !has_grpc(&py) {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap()
            .success();
        assert!(ok, "python3 -m venv {}", venv.display());
        let ok = Command::new(&py)
            .args(["-m", "pip", "install", "-q", "grpcio"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "pip install grpcio");
    }
    py
}

/// Python's gRPC client (C core, whose default `:authority` for a UNIX
/// socket is the socket's path) is served like any other: several calls on
/// one connection, a stream opened and read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpc_clients_are_served() {
    use prost::Message;
    let mut tc = cluster(3, &[]).await;
    let (_w, want, _key) = setup(&tc.cluster, "py").await;
    let s = tc.cluster.start_sidecar("node1", "py", &[]).await.unwrap();
    let open = ozone_proto::SidecarOpenRequest {
        key: Some(ozone_proto::KeyRef {
            volume: "vol".into(),
            bucket: "bucket".into(),
            key: "py".into(),
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let script = [
        PY_VARINT,
        r#"
import sys, grpc
sock, open_req = sys.argv[1], bytes.fromhex(sys.argv[2])
ch = grpc.insecure_channel("unix:" + sock)
def call(method, req):
    f = ch.unary_unary("/ozone.v1.Sidecar/" + method,
                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
    return f(req, timeout=10)
def field1(msg):
    assert msg[0] == 0x08
    n, shift, i = 0, 0, 1
    while True:
        n |= (msg[i] & 0x7f) << shift
        shift += 7
        if msg[i] & 0x80 == 0:
            return n
        i += 1
print(call("GetPolicy", b"").hex())
opened = call("Open", open_req)
print(opened.hex())
handle = field1(opened)
print(call("Read", b"\x08" + varint(handle) + b"\x18" + varint(10)).hex())
volumes = ch.unary_unary("/ozone.v1.OzoneManager/ListVolumes",
                         request_serializer=lambda b: b, response_deserializer=lambda b: b)
print(volumes(b"", timeout=10).hex())
"#,
    ]
    .concat();
    let out = run_python(
        &python_with_grpc(),
        &script,
        &[s.socket.as_os_str(), hex(&open).as_ref()],
    );
    let lines: Vec<Vec<u8>> = out
        .lines()
        .map(|l| {
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 4);
    let policy = ozone_proto::SidecarPolicy::decode(&lines[0][..]).unwrap();
    assert_eq!(policy.node_name, "node1");
    let opened = ozone_proto::SidecarOpenResponse::decode(&lines[1][..]).unwrap();
    assert_eq!(opened.size, want.len() as u64);
    let read = ozone_proto::SidecarReadResponse::decode(&lines[2][..]).unwrap();
    assert_eq!(read.data[..], want[..10]);
    // The OM's own service, passed on by the sidecar, to a C-core client.
    let volumes = ozone_proto::ListVolumesResponse::decode(&lines[3][..]).unwrap();
    assert!(
        volumes.volumes.iter().any(|v| v.name == "vol"),
        "{volumes:?}"
    );
    tc.cluster.stop().await;
}
