//! Writers that die before commit: the OM's open-key cleanup drops their
//! sessions and the datanodes get their space back.

use ozone_client::prelude::*;
use std::io::Write;
use std::time::{Duration, Instant};

use ozone_testkit::data;
use ozone_testkit::harness::*;

/// Bytes of block files on every datanode's disks.
fn block_bytes(c: &ozone_testkit::local::LocalCluster, n: usize) -> u64 {
    let mut total = 0;
    for i in 0..n {
        let mut stack = vec![c.datanode_dir(i).join("data")];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    stack.push(e.path());
                } else if e.path().extension().is_some_and(|x| x == "block") {
                    total += m.len();
                }
            }
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_killed_mid_put_leave_no_session_and_no_bytes() {
    let tc = cluster(
        3,
        &[
            "ozone.om.open.key.expire.threshold=3s",
            "ozone.om.open.key.cleanup.service.interval=1s",
        ],
    )
    .await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let kept = data::bytes(1, 1 << 20);
    put(&w, "kept", &kept, 1 << 20).await;

    // 50 `ozone sh key put` processes reading from pipes that stop after
    // 5 MiB (one 4 MiB chunk written to the datanodes, a second begun),
    // SIGKILLed mid-put.
    let mut writers = Vec::new();
    for i in 0..50 {
        let fifo = tc.dir.path().join(format!("in{i}"));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let child = std::process::Command::new(exe())
            .args(["--om", &c.om_address(), "sh", "key", "put"])
            .arg(format!("/vol/bucket/dead{i}"))
            .arg(&fifo)
            .env_remove("NODE_NAME")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        pipe.write_all(&data::bytes(i, 5 << 20)).unwrap();
        writers.push((child, pipe));
    }
    // Their first chunks reach the datanodes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while block_bytes(c, 3) < 3 * (kept.len() as u64) + 50 * (4 << 20) {
        assert!(
            Instant::now() < deadline,
            "the writers' chunks never reached the datanodes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (mut child, pipe) in writers {
        child.kill().unwrap();
        child.wait().unwrap();
        drop(pipe);
    }
    // The cleanup drops the 50 sessions; deletion frees their blocks.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let aborted = om_metric(c, "ozone_om_open_keys_aborted_total");
        let open = om_metric(c, "ozone_om_open_keys ");
        let bytes = block_bytes(c, 3);
        if aborted >= 50 && open == 0 && bytes == 3 * kept.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sessions aborted {aborted}, open {open}, block bytes {bytes} (want {})",
            3 * kept.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The committed key is untouched.
    assert_eq!(get(&w, "kept", 1 << 20).await, kept);
    for i in 0..50 {
        assert!(
            w.key_info(KeyPath::new("vol", "bucket", &format!("dead{i}")))
                .await
                .is_err()
        );
    }
}
