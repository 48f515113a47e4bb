//! `ozone demo`: a local cluster, a few hundred MiB written and read back.

use ozone_client::prelude::*;
use std::time::Instant;

use anyhow::{Context, ensure};
use clap::Args;
use futures::future::try_join_all;
use ozone_local::data;
use ozone_local::{LocalCluster, LocalSpec};

/// Arguments of the demo.
#[derive(Debug, Args, Clone)]
pub(crate) struct DemoArgs {
    /// Number of keys.
    #[arg(long, default_value_t = 8)]
    pub keys: usize,
    /// Size of each key, MiB.
    #[arg(long, default_value_t = 32)]
    pub key_mib: usize,
    /// Number of datanodes.
    #[arg(long, default_value_t = 3)]
    pub datanodes: usize,
}

/// Runs the demo.
pub(crate) async fn run(args: DemoArgs, conf: Vec<String>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    println!(
        "starting a local cluster (1 OM, {} datanodes) in {}",
        args.datanodes,
        dir.path().display()
    );
    let cluster = LocalCluster::start(LocalSpec {
        dir: dir.path().to_path_buf(),
        datanodes: args.datanodes,
        exe: std::env::current_exe()?,
        conf,
    })
    .await?;
    let result = workload(&cluster, &args).await;
    cluster.stop().await;
    println!("cluster stopped");
    result
}

async fn workload(cluster: &LocalCluster, args: &DemoArgs) -> anyhow::Result<()> {
    println!("OM at {}", cluster.om_address());
    // The demo's "application" runs on node1, where a datanode runs too.
    let node = LocalCluster::node_name(0);
    let client = cluster.client(Some(&node))?;
    client.create_volume("demo").await?;
    client.create_bucket("demo", "data").await?;
    let size = args.key_mib << 20;
    let total = (size * args.keys) as f64 / (1 << 20) as f64;

    let t = Instant::now();
    let writes = (0..args.keys).map(|i| {
        let client = client.clone();
        async move {
            let mut w = client
                .create_key(KeyPath::new("demo", "data", &format!("key-{i}")))
                .await?;
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0;
            while off < size {
                data::fill(i as u64, off as u64, &mut buf);
                w.write(&buf).await?;
                off += buf.len();
            }
            w.close().await
        }
    });
    let keys = try_join_all(writes).await?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "wrote {} keys x {} MiB = {total:.0} MiB, replication THREE, in {secs:.2}s ({:.0} MiB/s of key data)",
        args.keys,
        args.key_mib,
        total / secs
    );
    let k = &keys[0];
    let first = &k.blocks[0];
    let nodes: Vec<&str> = first
        .replicas
        .iter()
        .map(|r| r.node_name.as_str())
        .collect();
    println!(
        "key-0: {} block(s); first block on {} (first replica on the writer's node {node})",
        k.blocks.len(),
        nodes.join(", ")
    );

    let t = Instant::now();
    let reads = (0..args.keys).map(|i| {
        let client = client.clone();
        async move {
            let r = client
                .open_key(KeyPath::new("demo", "data", &format!("key-{i}")))
                .await?;
            let mut buf = vec![0u8; 4 << 20];
            let mut want = vec![0u8; 4 << 20];
            let mut off = 0u64;
            while off < r.size() {
                let n = r.read_at(off, &mut buf).await?;
                data::fill(i as u64, off, &mut want[..n]);
                ensure!(
                    buf[..n] == want[..n],
                    "key-{i}: data differs at offset {off}"
                );
                off += n as u64;
            }
            anyhow::Ok(())
        }
    });
    try_join_all(reads).await.context("read back")?;
    let secs = t.elapsed().as_secs_f64();
    let s = client.stats();
    println!(
        "read back and verified {total:.0} MiB in {secs:.2}s ({:.0} MiB/s), checksums verified",
        total / secs
    );
    println!(
        "replicas used: node-local {} MiB (short-circuit {} MiB, {} block fds opened), remote {} MiB, checksum failures {}, failovers {}",
        s.local_bytes >> 20,
        s.short_circuit_bytes >> 20,
        s.short_circuit_opens,
        s.remote_bytes >> 20,
        s.checksum_failures,
        s.failovers
    );
    let elsewhere = cluster.client(None)?;
    let r = elsewhere
        .open_key(KeyPath::new("demo", "data", "key-0"))
        .await?;
    let mut buf = vec![0u8; 4 << 20];
    let t = Instant::now();
    let mut off = 0u64;
    while off < r.size() {
        off += r.read_at(off, &mut buf).await? as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "the same key-0 from a node without a datanode (gRPC): {:.0} MiB/s",
        r.size() as f64 / (1 << 20) as f64 / secs
    );
    Ok(())
}
