//! Faults during writes: a datanode killed with SIGKILL, the OM restarted.

use ozone_client::prelude::*;
use std::time::Duration;

use ozone_common::checksum::Checksummer;
use ozone_proto::datanode_client::DatanodeClient;
use ozone_proto::{NodeState, ReadChunkRequest};
use ozone_testkit::data;
use ozone_testkit::harness::*;

/// SIGKILL of a replica's datanode mid-write: the key commits with three
/// complete, verified replicas on the surviving datanodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datanode_sigkill_mid_write_commits_three_good_replicas() {
    let mut tc = cluster(4, &["ozone.scm.block.size=1MB"]).await;
    let conf = ["ozone.scm.chunk.size=64KB"];
    let w = client(&tc.cluster, Some("node1"), &conf);
    bucket(&w).await;
    let want = data::bytes(9, 2_500_000);
    let mut writer = w
        .create_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let (head, tail) = want.split_at(1_300_000);
    writer.write(head).await.unwrap();
    // node1 holds the first replica of the block being written.
    tc.cluster.kill_datanode(0).await;
    writer.write(tail).await.unwrap();
    let key = writer.close().await.unwrap();
    assert_eq!(key.size, want.len() as u64);
    let dead = tc.cluster.datanode_id(0).unwrap();
    let ck = Checksummer::from_raw(key.checksum_type, key.bytes_per_checksum).unwrap();
    for b in &key.blocks {
        assert_eq!(b.replicas.len(), 3);
        let id = b.block.unwrap();
        let expect = &want[b.offset as usize..(b.offset + b.length) as usize];
        if b.offset >= 1 << 20 {
            assert!(
                b.replicas.iter().all(|r| r.id != dead),
                "block after the kill avoids the dead node"
            );
        }
        for r in &b.replicas {
            if r.id == dead {
                continue;
            }
            let mut dn = DatanodeClient::connect(format!("http://{}", r.address))
                .await
                .unwrap();
            let resp = dn
                .read_chunk(ReadChunkRequest {
                    block: Some(id),
                    offset: 0,
                    len: b.length,
                    with_checksums: true,
                    token: Vec::new(),
                    coarse_checksums: true,
                })
                .await
                .unwrap()
                .into_inner();
            let cd = resp.checksum.unwrap();
            ck.verify(&resp.data, 0, &cd.checksums).unwrap();
            assert_eq!(
                &resp.data[..],
                expect,
                "replica on {} is complete",
                r.node_name
            );
        }
    }
    // The block written when the kill happened has three live replicas.
    let second = &key.blocks[1];
    assert!(second.replicas.iter().all(|r| r.id != dead));
    let r = client(&tc.cluster, None, &[]);
    assert_eq!(get(&r, "k", 1 << 20).await, want);
    // The OM notices the dead datanode.
    tc.cluster.start_datanode(0).await.unwrap();
    tc.cluster
        .wait_healthy(4, Duration::from_secs(30))
        .await
        .unwrap();
    tc.cluster.stop().await;
}

/// The OM killed and restarted in the middle of a write: the writer waits
/// for it, the key commits and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn om_restart_mid_write() {
    let mut tc = cluster(3, &["ozone.scm.block.size=512KB"]).await;
    let w = client(&tc.cluster, None, &[]);
    bucket(&w).await;
    let want = data::bytes(3, 2_000_000);
    let mut writer = w
        .create_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    writer.write(&want[..600_000]).await.unwrap();
    tc.cluster.kill_om().await;
    let restart = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        tc.cluster.start_om().await.unwrap();
    };
    let write = async {
        writer.write(&want[600_000..]).await.unwrap();
        writer.close().await.unwrap()
    };
    let (_, key) = tokio::join!(restart, write);
    assert_eq!(key.size, want.len() as u64);
    assert_eq!(key.blocks.len(), 4);
    assert_eq!(get(&w, "k", 300_000).await, want);
    tc.cluster.stop().await;
}

/// A datanode killed while a reader uses it: reads move to another replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_fails_over_when_local_datanode_dies() {
    let mut tc = cluster(3, &[]).await;
    let w = client(&tc.cluster, Some("node2"), &[]);
    bucket(&w).await;
    let want = data::bytes(4, 1_000_000);
    put(&w, "k", &want, 1 << 20).await;
    let r = w
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = vec![0u8; 1000];
    r.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(w.stats().local_bytes, 1000);
    tc.cluster.kill_datanode(1).await;
    let mut all = vec![0u8; want.len()];
    r.read_exact_at(0, &mut all).await.unwrap();
    assert_eq!(all, want);
    assert!(w.stats().failovers >= 1);
    // The OM marks it stale then dead; the admin view says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let id = tc.cluster.datanode_id(1).unwrap();
    loop {
        let dns = w.om().list_datanodes().await.unwrap();
        let d = dns.iter().find(|d| d.id == id).unwrap();
        if d.state == NodeState::Stale as i32 || d.state == NodeState::Dead as i32 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "datanode never went stale"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tc.cluster.stop().await;
}
