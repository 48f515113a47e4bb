//! Replicas lost and restored, with real processes: a datanode of four
//! killed for good, a datanode decommissioned under a writer and readers,
//! and the OM killed and restarted while copies are under way. Every copy
//! is checked on disk against the key's bytes.

use ozone_client::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ozone_client::Client;
use ozone_proto::{KeyInfo, NodeState, OperationalState};
use ozone_testkit::data;
use ozone_testkit::harness::*;
use ozone_testkit::local::LocalCluster;
use rand::Rng;

const BLOCK: usize = 256 << 10;

/// Writes `n` keys of one to three blocks; returns them with their bytes.
async fn write_keys(c: &Client, prefix: &str, n: u64) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..n {
        let len = BLOCK / 2 + (i as usize * 7919) % (BLOCK * 2);
        let name = format!("{prefix}{i}");
        let want = data::bytes(i + 1000 * prefix.len() as u64, len);
        put(c, &name, &want, 64 << 10).await;
        out.push((name, want));
    }
    out
}

/// Readers of random keys checking every byte, until `stop`.
fn readers(
    c: &Client,
    keys: Arc<Vec<(String, Vec<u8>)>>,
    n: usize,
    stop: &Arc<AtomicBool>,
    reads: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (c, keys, stop, reads) = (c.clone(), keys.clone(), stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (name, want) = &keys[rand::rng().random_range(0..keys.len())];
                    let got = get(&c, name, 100 << 10).await;
                    assert!(got == *want, "{name}: bytes differ");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// Every block of every key has exactly three replicas on three distinct
/// datanodes among `live`, none on `gone`, and each replica's file holds
/// exactly the key's bytes of that block. Returns the replicas checked.
async fn check_fully_replicated(
    cl: &LocalCluster,
    c: &Client,
    n: usize,
    keys: &[(String, Vec<u8>)],
    gone: &str,
) -> usize {
    let mut checked = 0;
    for (name, want) in keys {
        let info = c
            .key_info(KeyPath::new("vol", "bucket", name))
            .await
            .unwrap();
        for b in &info.blocks {
            let ids: HashSet<&str> = b.replicas.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(ids.len(), 3, "{name}: replicas {ids:?}");
            assert!(!ids.contains(gone), "{name}: still on the lost datanode");
            let id = b.block.unwrap();
            let slice = &want[b.offset as usize..(b.offset + b.length) as usize];
            for r in &b.replicas {
                let file = block_file(cl, index_of(cl, n, &r.id), &id);
                let bytes = std::fs::read(&file)
                    .unwrap_or_else(|e| panic!("{name}: {}: {e}", file.display()));
                assert!(bytes == slice, "{name}: replica on {} differs", r.id);
                checked += 1;
            }
        }
    }
    checked
}

/// Waits until the replication manager's last pass saw no block short of
/// replicas, every key listing three replicas; returns how long it took.
async fn wait_repaired(
    c: &Client,
    keys: &[(String, Vec<u8>)],
    gone: &str,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let st = c.replication_status(5).await.unwrap();
        if st.last_pass_ms > 0 && st.under_replicated == 0 && st.missing == 0 {
            let mut all = true;
            for (name, _) in keys {
                let info = c
                    .key_info(KeyPath::new("vol", "bucket", name))
                    .await
                    .unwrap();
                all &= info
                    .blocks
                    .iter()
                    .all(|b| b.replicas.len() == 3 && b.replicas.iter().all(|r| r.id != gone));
                if !all {
                    break;
                }
            }
            if all {
                return start.elapsed();
            }
        }
        assert!(
            start.elapsed() < within,
            "not repaired within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn blocks_on(keys: &[KeyInfo], dn: &str) -> usize {
    keys.iter()
        .flat_map(|k| &k.blocks)
        .filter(|b| b.replicas.iter().any(|r| r.id == dn))
        .count()
}

async fn infos(c: &Client, keys: &[(String, Vec<u8>)]) -> Vec<KeyInfo> {
    let mut out = Vec::new();
    for (name, _) in keys {
        out.push(
            c.key_info(KeyPath::new("vol", "bucket", name))
                .await
                .unwrap(),
        );
    }
    out
}

async fn http_of(c: &Client) -> HashMap<String, String> {
    c.om()
        .list_datanodes()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.http_address))
        .collect()
}

/// A datanode of four is killed for good: once it is dead every block gets
/// its third replica back (copied and verified between datanodes), the
/// bound set by the dead interval and the copy rate; reads stay bit-exact
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_lost_for_good_has_its_replicas_restored() {
    let mut tc = cluster(4, &fast_repair(&["ozone.scm.block.size=256KB"])).await;
    let c = client(&tc.cluster, None, &[]);
    bucket(&c).await;
    let keys = Arc::new(write_keys(&c, "k", 60).await);
    let victim = tc.cluster.datanode_id(3).unwrap();
    let lost = blocks_on(&infos(&c, &keys).await, &victim);
    assert!(lost > 20, "the victim holds {lost} replicas");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let tasks = readers(&c, keys.clone(), 2, &stop, &reads);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.cluster.kill_datanode(3).await;
    let killed = Instant::now();
    // Dead after 5 s; 50 MB/s of copies and a pass a second do the rest.
    let took = wait_repaired(&c, &keys, &victim, Duration::from_secs(60)).await;
    let since_kill = killed.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let replicas = check_fully_replicated(&tc.cluster, &c, 4, &keys, &victim).await;
    let st = c.replication_status(5).await.unwrap();
    eprintln!(
        "lost {lost} replicas; all {replicas} replicas healthy {since_kill:?} after the kill \
         (waited {took:?}); {} copies, {} bytes; {} verified reads meanwhile",
        st.copies_done,
        st.bytes_copied,
        reads.load(Ordering::Relaxed)
    );
    assert_eq!(st.copies_done as usize, lost, "one copy per lost replica");
    let text = ozone_ok(
        &tc.cluster.om_address(),
        &["admin", "replication", "status"],
    );
    assert!(text.contains("under-replicated:   0"), "{text}");
    assert!(
        text.contains(&format!("copies done:        {lost}")),
        "{text}"
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
    // The dead datanode is listed as such.
    let dns = c.om().list_datanodes().await.unwrap();
    let v = dns.iter().find(|d| d.id == victim).unwrap();
    assert_eq!(v.state, NodeState::Dead as i32);
}

/// A datanode with 200 keys is decommissioned while a writer and readers
/// run: it reaches DECOMMISSIONED (keeping its data and serving reads
/// meanwhile), is stopped, and every key, old and new, is still fully
/// replicated and reads bit-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_datanode_can_be_stopped_without_losing_a_key() {
    let mut tc = cluster(4, FAST_REPAIR).await;
    let c = client(&tc.cluster, None, &[]);
    bucket(&c).await;
    let mut keys = Vec::new();
    for i in 0..200u64 {
        let want = data::bytes(i, 4096 + (i as usize * 131) % 20000);
        put(&c, &format!("k{i}"), &want, 1 << 20).await;
        keys.push((format!("k{i}"), want));
    }
    let leaving = tc.cluster.datanode_id(0).unwrap();
    let on_it = blocks_on(&infos(&c, &keys).await, &leaving);
    assert!(on_it > 100, "{on_it} of 200 keys on the leaving datanode");
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = readers(&c, keys.clone(), 2, &stop, &reads);
    // A writer adds keys all along; none may land on the leaving datanode.
    let written = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (c, stop, written) = (c.clone(), stop.clone(), written.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("new{i}");
                let want = data::bytes(10_000 + i, 30_000);
                put(&c, &name, &want, 1 << 20).await;
                written.lock().unwrap().push((name, want));
                i += 1;
            }
        }));
    }
    // By pod name in Kubernetes; by id here (the addresses are loopback).
    let d = c
        .set_operational_state(&leaving, OperationalState::Decommissioning)
        .await
        .unwrap();
    assert!(matches!(
        OperationalState::try_from(d.operational_state),
        Ok(OperationalState::Decommissioning | OperationalState::Decommissioned)
    ));
    let start = Instant::now();
    let mut seen_needed = 0;
    loop {
        let s = c.datanode_status(&leaving).await.unwrap();
        seen_needed = seen_needed.max(s.needed_elsewhere);
        let op = s.datanode.unwrap().operational_state;
        if op == OperationalState::Decommissioned as i32 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not decommissioned: {} replicas still needed",
            s.needed_elsewhere
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = start.elapsed();
    // The CLI shows it.
    let om = tc.cluster.om_address();
    let text = ozone_ok(&om, &["admin", "datanode", "status", &leaving]);
    assert!(text.contains("DECOMMISSIONED"), "{text}");
    let text = ozone_ok(&om, &["admin", "datanode", "list"]);
    assert!(
        text.contains("OPERATIONAL")
            && text.contains("DECOMMISSIONED")
            && text.contains("IN_SERVICE"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    tc.cluster.kill_datanode(0).await;
    let mut all: Vec<(String, Vec<u8>)> = keys.iter().cloned().collect();
    let new_keys = written.lock().unwrap().clone();
    assert!(!new_keys.is_empty());
    assert_eq!(
        blocks_on(&infos(&c, &new_keys).await, &leaving),
        0,
        "a new key went to the leaving datanode"
    );
    all.extend(new_keys.iter().cloned());
    let replicas = check_fully_replicated(&tc.cluster, &c, 4, &all, &leaving).await;
    for (name, want) in &all {
        assert!(get(&c, name, 1 << 20).await == *want, "{name}");
    }
    eprintln!(
        "decommissioned in {took:?} ({on_it} replicas moved, at most {seen_needed} seen needed); \
         {} keys written meanwhile; {replicas} replicas checked; {} verified reads",
        new_keys.len(),
        reads.load(Ordering::Relaxed)
    );
}

/// The OM is killed and restarted while copies run slowly (paced to
/// 1 MB/s per datanode): the copies finish, none is made twice (a finished
/// one is adopted from the datanode's report, a running one is not asked
/// of another datanode), and every block ends fully replicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_om_restart_during_re_replication_repeats_no_copy() {
    let conf = fast_repair(&[
        "ozone.scm.block.size=256KB",
        "hdds.datanode.replication.bytes.per.second=1MB",
        "hdds.scm.replication.datanode.replication.limit=4",
    ]);
    let mut tc = cluster(4, &conf).await;
    let c = client(&tc.cluster, None, &[]);
    bucket(&c).await;
    let keys = write_keys(&c, "k", 24).await;
    let victim = tc.cluster.datanode_id(3).unwrap();
    let lost = blocks_on(&infos(&c, &keys).await, &victim);
    let https = http_of(&c).await;
    let copies = |https: &HashMap<String, String>| -> u64 {
        https
            .iter()
            .filter(|(id, _)| **id != victim)
            .map(|(_, h)| metric(h, "ozone_datanode_replications_total"))
            .sum()
    };
    tc.cluster.kill_datanode(3).await;
    // Wait until copies run, then kill the OM.
    let start = Instant::now();
    loop {
        let running: u64 = https
            .iter()
            .filter(|(id, _)| **id != victim)
            .map(|(_, h)| metric(h, "ozone_datanode_replications_in_flight"))
            .sum();
        if running > 0 && copies(&https) > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "no copy started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = copies(&https);
    tc.cluster.kill_om().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.cluster.start_om().await.unwrap();
    let took = wait_repaired(&c, &keys, &victim, Duration::from_secs(90)).await;
    let replicas = check_fully_replicated(&tc.cluster, &c, 4, &keys, &victim).await;
    let made = copies(&https);
    let failed: u64 = https
        .iter()
        .filter(|(id, _)| **id != victim)
        .map(|(_, h)| metric(h, "ozone_datanode_replication_failures_total"))
        .sum();
    eprintln!(
        "{lost} replicas lost; {before} copied before the OM restart, {made} in all; \
         repaired {took:?} after the restart; {replicas} replicas checked; {failed} failed copies"
    );
    assert!(before < lost as u64, "the restart came after every copy");
    if std::env::var("KEEP").is_ok() && made != lost as u64 {
        let d = tc.dir.path().to_path_buf();
        std::mem::forget(tc);
        panic!("logs in {}", d.display());
    }
    assert_eq!(made, lost as u64, "each lost replica copied exactly once");
}

/// A datanode away for less than the dead interval (a node drain, a pod
/// rescheduled with its volume) comes back with its replicas: nothing is
/// copied and nothing is trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_back_within_the_dead_interval_costs_no_copy() {
    let conf = fast_repair(&[
        "ozone.scm.block.size=256KB",
        // Dead only after 8 s: the restart below takes about 2.
        "ozone.scm.dead.node.interval=8s",
    ]);
    let mut tc = cluster(4, &conf).await;
    let c = client(&tc.cluster, None, &[]);
    bucket(&c).await;
    let keys = write_keys(&c, "k", 20).await;
    let away = tc.cluster.datanode_id(2).unwrap();
    let held = blocks_on(&infos(&c, &keys).await, &away);
    assert!(held > 0);
    tc.cluster.kill_datanode(2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    tc.cluster.start_datanode(2).await.unwrap();
    // Several passes after it is back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let st = c.replication_status(5).await.unwrap();
    assert!(st.last_pass_ms > 0);
    assert_eq!((st.copies_done, st.copies_in_flight), (0, 0), "{st:?}");
    assert_eq!(st.under_replicated, 0, "{st:?}");
    assert_eq!(blocks_on(&infos(&c, &keys).await, &away), held);
    check_fully_replicated(&tc.cluster, &c, 4, &keys, "none").await;
}
