//! The metadata benchmark: file-system operations on a FILE_SYSTEM_OPTIMIZED
//! bucket of a local cluster (one OM, one datanode), with 1 and with many
//! concurrent clients, in ops/s, beside the fsync latency of the OM's disk
//! measured in the same run (every acknowledged operation is durable; the OM
//! groups concurrent commits into one fsync). The read-only operations also
//! run through a sidecar on the datanode's node, in the same run: the OM's
//! service as the sidecar passes it on, beside the direct calls.

use ozone_client::prelude::*;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ozone_client::{Client, SidecarClient};
use ozone_local::{LocalCluster, LocalSpec};
use ozone_proto::BucketLayout;

const V: &str = "bench";
const B: &str = "fsbench";

/// Options of the metadata benchmark.
#[derive(clap::Args, Clone)]
pub(crate) struct MetadataArgs {
    /// Concurrent clients of the parallel rows.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Length of each row, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One measured row.
struct Row {
    op: &'static str,
    /// `direct` or `sidecar`.
    via: &'static str,
    clients: usize,
    ops_per_sec: f64,
    mean_latency_ms: f64,
}

/// Median of `n` `fdatasync`s of a 4 KiB write in `dir`, in milliseconds.
fn fsync_latency(dir: &Path, n: usize) -> anyhow::Result<f64> {
    use std::os::unix::fs::FileExt;
    let p = dir.join("fsync-probe");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&p)?;
    let mut t = Vec::with_capacity(n);
    for i in 0..n {
        let s = Instant::now();
        f.write_all_at(&[i as u8; 4096], (i as u64 % 64) * 4096)?;
        f.sync_data()?;
        t.push(s.elapsed().as_secs_f64() * 1000.0);
    }
    std::fs::remove_file(&p)?;
    t.sort_by(f64::total_cmp);
    Ok(t[n / 2])
}

/// Runs `op(client, i)` from `clients` tasks for `secs` and adds the row
/// `name` (ops/s, mean latency) to `rows`; returns the operations done.
async fn measure<C, F, Fut>(
    rows: &mut Vec<Row>,
    (name, via): (&'static str, &'static str),
    clients: &[C],
    secs: f64,
    op: F,
) -> anyhow::Result<u64>
where
    C: Clone + Send + 'static,
    F: Fn(C, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for c in clients {
        let (c, op, done, next) = (c.clone(), op.clone(), done.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let i = next.fetch_add(1, Ordering::Relaxed);
                op(c.clone(), i).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let count = done.load(Ordering::Relaxed);
    let n = count as f64;
    let el = start.elapsed().as_secs_f64();
    rows.push(Row {
        op: name,
        via,
        clients: clients.len(),
        ops_per_sec: n / el,
        mean_latency_ms: el * clients.len() as f64 / n.max(1.0) * 1000.0,
    });
    Ok(count)
}

/// The read-only rows (stat of a directory, a page of 1000 entries) through
/// `clients`, over the `dirs` directories the mkdirs row made under `tag`.
async fn read_only<C: FsAccess + Clone + 'static>(
    rows: &mut Vec<Row>,
    clients: &[C],
    via: &'static str,
    tag: &str,
    dirs: u64,
    secs: f64,
) -> anyhow::Result<()> {
    let t = tag.to_string();
    measure(
        rows,
        ("stat (directory)", via),
        clients,
        secs,
        move |c, i| {
            let p = format!("{t}/dirs/d{}", i % dirs.max(1));
            async move {
                c.file_status(KeyPath::new(V, B, &p)).await?;
                Ok(())
            }
        },
    )
    .await?;
    let p = format!("{tag}/dirs");
    measure(
        rows,
        ("list (page of 1000)", via),
        clients,
        secs,
        move |c, _| {
            let p = p.clone();
            async move {
                c.list_status(KeyPath::new(V, B, &p), "", 1000).await?;
                Ok(())
            }
        },
    )
    .await?;
    Ok(())
}

/// Runs the benchmark; prints a Markdown table.
pub(crate) async fn run(a: MetadataArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    eprintln!("starting a local cluster in {}", dir.path().display());
    let mut cluster = LocalCluster::start(LocalSpec {
        dir: dir.path().to_path_buf(),
        datanodes: 1,
        exe: std::env::current_exe()?,
        conf: vec![],
    })
    .await?;
    let admin = cluster.client(None)?;
    admin.create_volume(V).await?;
    admin
        .create_bucket_with_layout(V, B, BucketLayout::FileSystemOptimized)
        .await?;
    let fsync_ms = fsync_latency(dir.path(), 200)?;
    let sidecar = cluster.start_sidecar("node1", "bench", &[]).await?;
    let mut rows = Vec::new();
    let counts = if a.clients > 1 {
        vec![1, a.clients]
    } else {
        vec![1]
    };
    for n in counts {
        let clients: Vec<Client> = (0..n)
            .map(|_| cluster.client(None))
            .collect::<Result<_, _>>()?;
        let tag = format!("c{n}");
        admin.mkdirs(KeyPath::new(V, B, &tag)).await?;
        let t = tag.clone();
        let files = measure(
            &mut rows,
            ("create+close (empty file)", "direct"),
            &clients,
            a.seconds,
            move |c, i| {
                let p = format!("{t}/files/f{i}");
                async move {
                    let w = c.create_file(KeyPath::new(V, B, &p), false).await?;
                    w.close().await?;
                    Ok(())
                }
            },
        )
        .await?;
        let t = tag.clone();
        let dirs = measure(
            &mut rows,
            ("mkdirs (2 levels)", "direct"),
            &clients,
            a.seconds,
            move |c, i| {
                let p = format!("{t}/dirs/d{i}/e");
                async move {
                    c.mkdirs(KeyPath::new(V, B, &p)).await?;
                    Ok(())
                }
            },
        )
        .await?;
        let t = tag.clone();
        // Each file back and forth between two names.
        measure(
            &mut rows,
            ("rename (file)", "direct"),
            &clients,
            a.seconds,
            move |c, i| {
                let (k, round) = (i % files.max(1), i / files.max(1));
                let (f, g) = (format!("{t}/files/f{k}"), format!("{t}/files/g{k}"));
                let (from, to) = if round % 2 == 0 { (f, g) } else { (g, f) };
                async move {
                    c.rename(KeyPath::new(V, B, &from), &to).await?;
                    Ok(())
                }
            },
        )
        .await?;
        let apps: Vec<SidecarClient> = (0..n)
            .map(|_| SidecarClient::unix(&sidecar.socket))
            .collect::<Result<_, _>>()?;
        read_only(&mut rows, &clients, "direct", &tag, dirs, a.seconds).await?;
        read_only(&mut rows, &apps, "sidecar", &tag, dirs, a.seconds).await?;
    }
    println!(
        "\nFile-system metadata operations, FILE_SYSTEM_OPTIMIZED bucket, {:.0} s per row; \
         fsync (4 KiB fdatasync) median on this disk: {fsync_ms:.2} ms\n",
        a.seconds
    );
    println!("| operation | via | clients | ops/s | mean latency, ms |");
    println!("|---|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.2} |",
            r.op, r.via, r.clients, r.ops_per_sec, r.mean_latency_ms
        );
    }
    if let Some(p) = &a.json {
        let out = serde_json::json!({
            "fsync_median_ms": fsync_ms,
            "seconds": a.seconds,
            "rows": rows.iter().map(|r| serde_json::json!({
                "op": r.op,
                "via": r.via,
                "clients": r.clients,
                "ops_per_sec": r.ops_per_sec,
                "mean_latency_ms": r.mean_latency_ms,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(p, serde_json::to_string_pretty(&out)?)?;
    }
    cluster.stop().await;
    Ok(())
}
