//! The write benchmark: puts of one large key with replication ONE and
//! THREE from a client on a datanode's node, beside `dd` writing the same
//! number of bytes to the same disk (`conv=fdatasync`), rounds interleaved
//! so each row is measured next to the others. A put returns once every
//! replica's datanode has made the data durable and the OM committed the key.
//! Each put's CPU time in this process (the client: the cluster runs in
//! child processes) is reported per GiB.

use ozone_client::prelude::*;
use std::time::Instant;

use anyhow::{Context, bail};
use ozone_client::{Client, ClientConfig};
use ozone_local::{LocalCluster, LocalSpec};
use ozone_proto::ReplicationFactor;
use tokio::io::AsyncReadExt;

/// Options of the write benchmark.
#[derive(clap::Args, Clone)]
pub(crate) struct WriteArgs {
    /// Size of each key (and of the `dd` file), MiB.
    #[arg(long, default_value_t = 1024)]
    pub mib: u64,
    /// Rounds; each row's median is reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Directory of the cluster and the `dd` file (its disk is measured);
    /// a temporary directory by default.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// CPU seconds (user and system) this process has used.
fn cpu_seconds() -> anyhow::Result<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF)?;
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(s(u.user_time()) + s(u.system_time()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds `dd` takes to write `mib` MiB to `path` and fdatasync it.
fn dd(path: &std::path::Path, mib: u64) -> anyhow::Result<f64> {
    let t = Instant::now();
    let out = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", path.display()))
        .args(["bs=4M", &format!("count={}", mib / 4), "conv=fdatasync"])
        .output()
        .context("running dd")?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("dd: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_file(path)?;
    Ok(secs)
}

fn client(c: &LocalCluster, rep: ReplicationFactor) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::new(&c.om_address());
    cfg.replication = rep;
    cfg.node_name = Some(LocalCluster::node_name(0));
    Ok(Client::connect(cfg)?)
}

/// Runs the benchmark and prints its table.
pub(crate) async fn run(a: WriteArgs) -> anyhow::Result<()> {
    if a.mib < 4 || a.rounds == 0 {
        bail!("--mib must be at least 4 and --rounds at least 1");
    }
    let tmp = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let cluster = LocalCluster::start(LocalSpec {
        dir: tmp.path().join("cluster"),
        datanodes: 3,
        exe: std::env::current_exe()?,
        conf: vec![],
    })
    .await?;
    let one = client(&cluster, ReplicationFactor::One)?;
    let three = client(&cluster, ReplicationFactor::Three)?;
    one.create_volume("bench").await?;
    one.create_bucket("bench", "writes").await?;
    let bytes = a.mib << 20;
    let (mut dd_s, mut one_s, mut three_s) = (Vec::new(), Vec::new(), Vec::new());
    // Client CPU seconds per GiB written, per put.
    let (mut one_cpu, mut three_cpu) = (Vec::new(), Vec::new());
    let gib = bytes as f64 / (1u64 << 30) as f64;
    for round in 0..a.rounds {
        dd_s.push(dd(&tmp.path().join("dd.bin"), a.mib)?);
        for (c, out, cpu, name) in [
            (&one, &mut one_s, &mut one_cpu, "one"),
            (&three, &mut three_s, &mut three_cpu, "three"),
        ] {
            let path = KeyPath::new("bench", "writes", name);
            let (t, c0) = (Instant::now(), cpu_seconds()?);
            let key = c.put_key(path, tokio::io::repeat(0x5a).take(bytes)).await?;
            out.push(t.elapsed().as_secs_f64());
            cpu.push((cpu_seconds()? - c0) / gib);
            if key.size != bytes {
                bail!("{name}: wrote {} of {bytes} bytes", key.size);
            }
            c.delete_key(path).await?;
        }
        eprintln!("round {} of {} done", round + 1, a.rounds);
        // Let the datanodes delete the blocks before the next round.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    cluster.stop().await;
    let mibs = |s: f64| a.mib as f64 / s;
    let dd_m = mibs(median(dd_s.clone()));
    let (one_c, three_c) = (median(one_cpu), median(three_cpu));
    let rows = [
        ("dd, conv=fdatasync, same disk", median(dd_s), None),
        ("put, replication ONE", median(one_s), Some(one_c)),
        (
            "put, replication THREE (3 datanodes, same disk)",
            median(three_s),
            Some(three_c),
        ),
    ];
    println!(
        "| write of {} MiB | seconds | MiB/s | of dd | client CPU s/GiB |",
        a.mib
    );
    println!("|---|---:|---:|---:|---:|");
    let mut json = Vec::new();
    for (name, s, cpu) in rows {
        let cpu_text = cpu.map_or("-".to_string(), |c| format!("{c:.2}"));
        println!(
            "| {name} | {s:.2} | {:.0} | {:.2} | {cpu_text} |",
            mibs(s),
            mibs(s) / dd_m
        );
        json.push(serde_json::json!({
            "row": name, "mib": a.mib, "seconds": s, "mib_per_sec": mibs(s),
            "ratio_to_dd": mibs(s) / dd_m, "client_cpu_s_per_gib": cpu,
        }));
    }
    println!("\nclient CPU per GiB, THREE / ONE: {:.2}", three_c / one_c);
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(())
}
