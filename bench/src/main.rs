//! `ozone-bench`: 64 KiB random positional reads, 16 threads, one shared
//! stream per key, over {gRPC, short-circuit} x {1 MiB, 16 KiB bytes per
//! checksum} x {verify on, off}, plus reads through a sidecar (gRPC over its
//! UNIX socket) and through sidecar pass-through (descriptors relayed to
//! the application), beside raw `pread` of the very block files, all in one
//! run on one local cluster. The paths of one setting are measured in the
//! same rounds, each round also timing raw `pread` (and, verify on, the
//! mmap CRC32C + copy primitive), so ratios compare what ran side by side.
//! Prints a markdown table (ratios to raw pread), the short-circuit targets
//! (medians of per-round ratios) and optionally JSON.
//!
//! `cargo run --release -p ozone-bench -- [--keys 16] [--key-mib 64] [--json out.json]`

mod metadata;
mod write;

use ozone_client::prelude::*;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ozone_client::SidecarClient;
use ozone_client::{Client, ClientConfig, KeyAccess, KeyRead};
use ozone_common::config::Conf;
use ozone_local::data;
use ozone_local::{LocalCluster, LocalSpec};
use rand::Rng;

#[derive(Parser)]
#[command(
    name = "ozone-bench",
    about = "Ozone read benchmark",
    after_help = "Example: ozone-bench --json bench.json"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    args: Args,
}

#[derive(Subcommand)]
enum Cmd {
    /// (internal) runs the OM for the benchmark's local cluster.
    Om(ozone_om::cmd::OmArgs),
    /// (internal) runs a datanode for the benchmark's local cluster.
    Datanode(ozone_datanode::cmd::DatanodeArgs),
    /// (internal) runs a sidecar for the benchmark's local cluster.
    Sidecar(ozone_sidecar::cmd::SidecarArgs),
    /// File-system metadata operations (create, mkdirs, rename, stat, list)
    /// with 1 and with many concurrent clients, beside the disk's fsync
    /// latency.
    #[command(after_help = "Example: ozone-bench metadata --clients 32 --json metadata.json")]
    Metadata(metadata::MetadataArgs),
    /// Puts of one large key with replication ONE and THREE beside `dd`
    /// of the same size on the same disk.
    #[command(after_help = "Example: ozone-bench write --mib 1024 --json write.json")]
    Write(write::WriteArgs),
    /// The primitives under the short-circuit path, alone: `pread` vs a
    /// copy from a mapping, each with and without one CRC32C pass over the
    /// bytes read, and CRC32C throughput by window size.
    #[command(after_help = "Example: ozone-bench primitives --mib 512 --threads 2")]
    Primitives {
        /// File size in MiB (created in a temporary directory).
        #[arg(long, default_value_t = 512)]
        mib: usize,
        /// Threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

#[derive(clap::Args, Clone)]
struct Args {
    /// Keys per bytes-per-checksum setting.
    #[arg(long, default_value_t = 16)]
    keys: usize,
    /// Size of each key, MiB.
    #[arg(long, default_value_t = 64)]
    key_mib: usize,
    /// Concurrent readers.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Read size, KiB.
    #[arg(long, default_value_t = 64)]
    read_kib: usize,
    /// Length of one timed round, seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Timed rounds per row (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only these paths (comma list of grpc, grpc-tls, sc, sc-pread,
    /// sidecar, passthrough; grpc-tls runs on a second cluster with TLS on;
    /// sc-pread is short-circuit with `ozone.client.read.short-circuit.mmap`
    /// off).
    #[arg(long, default_value = "grpc,grpc-tls,sc,sc-pread,sidecar,passthrough")]
    paths: String,
}

/// One row of the table: a read path under one setting, and its rounds.
#[derive(Clone)]
struct Row {
    name: String,
    path: &'static str,
    bpc: u32,
    verify: bool,
    disk_reads_kib: u64,
    /// This row's ops/s per round, and the raw `pread` and (verified
    /// settings) primitive ops/s of the same rounds.
    rounds: Vec<f64>,
    raw_rounds: Vec<f64>,
    prim_rounds: Vec<f64>,
}

impl Row {
    /// Median ops/s over the row's rounds.
    fn ops(&self) -> f64 {
        median(self.rounds.clone())
    }

    /// Median raw `pread` ops/s over the rounds interleaved with the row's.
    fn raw_ops(&self) -> f64 {
        median(self.raw_rounds.clone())
    }

    /// A row of one contender measured in a group's rounds.
    fn of(c: &Contender, bpc: u32, verify: bool, raw: &[f64], prim: &[f64]) -> Self {
        Row {
            name: row_name(c.path, bpc, verify),
            path: c.path,
            bpc,
            verify,
            disk_reads_kib: c.disk,
            rounds: c.rounds.clone(),
            raw_rounds: raw.to_vec(),
            prim_rounds: prim.to_vec(),
        }
    }
}

fn pgpgin() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("pgpgin ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Reads every file fully so it is in the page cache.
fn warm(files: &[PathBuf]) {
    let mut buf = vec![0u8; 1 << 20];
    for f in files {
        if let Ok(file) = std::fs::File::open(f) {
            let mut off = 0u64;
            while let Ok(n) = file.read_at(&mut buf, off) {
                if n == 0 {
                    break;
                }
                off += n as u64;
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Raw pread of the block files, `threads` OS threads.
fn raw_round(files: &[(std::fs::File, u64)], a: &Args, secs: f64) -> f64 {
    let len = a.read_kib << 10;
    timed_round(a.threads, secs, len, |rng, buf| {
        let (f, size) = &files[rng.random_range(0..files.len())];
        let off = rng.random_range(0..size - len as u64);
        f.read_exact_at(buf, off).expect("pread");
        0
    })
}

/// Calls `op` in a loop on `threads` OS threads for `secs` seconds, each
/// with its own random source and `len`-byte buffer; `op` returns a value
/// folded into a sink, so no work is optimised away. Returns calls/s.
fn timed_round(
    threads: usize,
    secs: f64,
    len: usize,
    op: impl Fn(&mut rand::rngs::ThreadRng, &mut [u8]) -> u32 + Sync,
) -> f64 {
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut rng = rand::rng();
                let mut buf = vec![0u8; len];
                let (mut n, mut acc) = (0u64, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    acc ^= op(&mut rng, &mut buf);
                    n += 1;
                }
                std::hint::black_box(acc);
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    ops.load(Ordering::Relaxed) as f64 / secs
}

async fn client_round<R: KeyRead + 'static>(
    readers: &[Arc<R>],
    a: &Args,
    secs: f64,
) -> anyhow::Result<f64> {
    // A thread, not a timer, ends the round (as in `timed_round`): the
    // readers never wait, so they check one flag per read.
    let stop = Arc::new(AtomicBool::new(false));
    let len = a.read_kib << 10;
    let mut tasks = Vec::new();
    for _ in 0..a.threads {
        let readers = readers.to_vec();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; len];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (i, off) = {
                    let mut rng = rand::rng();
                    let i = rng.random_range(0..readers.len());
                    (i, rng.random_range(0..readers[i].size() - len as u64))
                };
                readers[i].read_exact_at(off, &mut buf).await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let timer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    timer.join().ok();
    Ok(total as f64 / secs)
}

/// Open readers of the benchmark's keys, through a client or a sidecar.
enum Readers {
    Direct(Vec<Arc<<Client as KeyAccess>::Reader>>),
    Sidecar(Vec<Arc<<SidecarClient as KeyAccess>::Reader>>),
}

async fn open_readers<A: KeyAccess>(
    access: &A,
    bucket: &str,
    verify: bool,
    a: &Args,
) -> anyhow::Result<Vec<Arc<A::Reader>>> {
    let mut readers = Vec::new();
    for k in 0..a.keys {
        let r = access
            .open_key_with(
                KeyPath::new("bench", bucket, &format!("k{k}")),
                Some(verify),
            )
            .await?;
        readers.push(Arc::new(r));
    }
    Ok(readers)
}

impl Readers {
    async fn round(&self, a: &Args, secs: f64) -> anyhow::Result<f64> {
        match self {
            Readers::Direct(r) => client_round(r, a, secs).await,
            Readers::Sidecar(r) => client_round(r, a, secs).await,
        }
    }
}

/// One read path of a setting: its readers, and its ops/s per round.
struct Contender {
    path: &'static str,
    /// The client the readers came from (for its counters), if direct.
    client: Option<Client>,
    readers: Readers,
    rounds: Vec<f64>,
    /// KiB read from disk during its rounds.
    disk: u64,
}

/// The rounds of one setting: in each, a raw `pread` round, with
/// `primitive` a round of mmap CRC32C + copy, then one round of every
/// contender, so each ratio compares measurements taken side by side.
/// Returns raw ops/s per round and primitive ops/s per round.
async fn measure_group(
    contenders: &mut [Contender],
    primitive: Option<&Mapped>,
    a: &Args,
    (all_files, raw_files): (&[PathBuf], &[(std::fs::File, u64)]),
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let len = a.read_kib << 10;
    warm(all_files);
    for c in contenders.iter() {
        c.readers.round(a, a.seconds.min(1.0)).await?;
    }
    let (mut raw_r, mut prim_r) = (Vec::new(), Vec::new());
    for _ in 0..a.rounds {
        warm(all_files);
        raw_r.push(raw_round(raw_files, a, a.seconds));
        if let Some(maps) = primitive {
            warm(all_files);
            prim_r.push(mapped_round(maps, a.threads, len, a.seconds, true));
        }
        for c in contenders.iter_mut() {
            warm(all_files);
            let before = pgpgin();
            c.rounds.push(c.readers.round(a, a.seconds).await?);
            c.disk += pgpgin() - before;
        }
    }
    Ok((raw_r, prim_r))
}

/// A local cluster holding the benchmark's keys: one bucket per bytes per
/// checksum setting, every key's first replica on datanode 0's node.
struct Setup {
    cluster: LocalCluster,
    om: String,
    node: String,
    sockets: PathBuf,
    /// Extra client settings (TLS).
    conf: Vec<(&'static str, String)>,
    per_bpc: Vec<(u32, String)>,
    all_files: Vec<PathBuf>,
    raw_files: Vec<(std::fs::File, u64)>,
}

impl Setup {
    /// A client reading short-circuit from `dir` (the node's sockets, or a
    /// sidecar's relay sockets), or over gRPC only.
    fn client_in(&self, bpc: u32, dir: Option<&std::path::Path>) -> anyhow::Result<Client> {
        self.client_with(bpc, dir, &[])
    }

    /// [`Setup::client_in`] with `extra` settings.
    fn client_with(
        &self,
        bpc: u32,
        dir: Option<&std::path::Path>,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Client> {
        let mut conf = Conf::new();
        for (k, v) in extra {
            conf.set(k, v.to_string());
        }
        conf.set(
            ozone_common::config::BYTES_PER_CHECKSUM.name,
            bpc.to_string(),
        );
        for (k, v) in &self.conf {
            conf.set(k, v.clone());
        }
        if let Some(d) = dir {
            conf.set(
                ozone_common::config::DOMAIN_SOCKET_PATH.name,
                d.display().to_string(),
            );
        }
        let mut cfg = ClientConfig::from_conf(&self.om, &conf)?;
        cfg.node_name = Some(self.node.clone());
        Ok(Client::connect(cfg)?)
    }

    fn client(&self, bpc: u32, sc: bool) -> anyhow::Result<Client> {
        self.client_in(bpc, sc.then_some(self.sockets.as_path()))
    }
}

/// Starts a cluster in `dir` with `conf` (`key=value`; `client_conf` for
/// its clients) and writes the keys.
async fn setup(
    a: &Args,
    dir: &std::path::Path,
    conf: Vec<String>,
    client_conf: Vec<(&'static str, String)>,
) -> anyhow::Result<Setup> {
    eprintln!("starting a local cluster in {}", dir.display());
    let mut all = vec![format!("{}=256MB", ozone_common::config::BLOCK_SIZE.name)];
    all.extend(conf);
    let cluster = LocalCluster::start(LocalSpec {
        dir: dir.to_path_buf(),
        datanodes: 3,
        exe: std::env::current_exe()?,
        conf: all,
    })
    .await?;
    let mut s = Setup {
        om: cluster.om_address(),
        node: LocalCluster::node_name(0),
        sockets: cluster.socket_dir(0),
        cluster,
        conf: client_conf,
        per_bpc: Vec::new(),
        all_files: Vec::new(),
        raw_files: Vec::new(),
    };
    let admin = s.client(16 << 10, false)?;
    admin.create_volume("bench").await?;
    let size = a.key_mib << 20;
    if size <= a.read_kib << 10 {
        bail!("keys must be larger than one read");
    }
    for bpc in [1u32 << 20, 16 << 10] {
        let bucket = format!("b{bpc}");
        admin.create_bucket("bench", &bucket).await?;
        let w = s.client(bpc, false)?;
        eprintln!(
            "writing {} keys of {} MiB, {} bytes per checksum",
            a.keys, a.key_mib, bpc
        );
        for k in 0..a.keys {
            let mut wr = w
                .create_key(KeyPath::new("bench", &bucket, &format!("k{k}")))
                .await?;
            let mut buf = vec![0u8; 4 << 20];
            let mut off = 0;
            while off < size {
                let n = buf.len().min(size - off);
                data::fill(k as u64, off as u64, &mut buf[..n]);
                wr.write(&buf[..n]).await?;
                off += n;
            }
            let key = wr.close().await?;
            for b in &key.blocks {
                let id = b.block.context("block id")?;
                if b.replicas.first().map(|r| r.node_name.as_str()) != Some(s.node.as_str()) {
                    bail!("first replica not on {}", s.node);
                }
                let p = s
                    .cluster
                    .datanode_dir(0)
                    .join("data/containers")
                    .join(id.container_id.to_string())
                    .join("chunks")
                    .join(format!("{}.block", id.local_id));
                s.all_files.push(p);
            }
        }
        s.per_bpc.push((bpc, bucket));
    }
    s.raw_files = s
        .all_files
        .iter()
        .map(|p| {
            let f = std::fs::File::open(p)?;
            let len = f.metadata()?.len();
            Ok((f, len))
        })
        .collect::<std::io::Result<_>>()?;
    Ok(s)
}

/// Maps of the block files, for the primitive rows.
struct Mapped(Vec<(*const u8, usize)>);

// SAFETY: read-only mappings, unmapped only on drop.
unsafe impl Sync for Mapped {}

impl Mapped {
    fn of(files: &[(std::fs::File, u64)]) -> anyhow::Result<Self> {
        let mut maps = Vec::new();
        for (f, size) in files {
            let n = std::num::NonZeroUsize::new(*size as usize).context("empty block file")?;
            // SAFETY: a read-only shared mapping of a block file the
            // benchmark wrote and no one changes while it runs.
            let p = unsafe {
                nix::sys::mman::mmap(
                    None,
                    n,
                    nix::sys::mman::ProtFlags::PROT_READ,
                    nix::sys::mman::MapFlags::MAP_SHARED,
                    f,
                    0,
                )?
            };
            maps.push((p.as_ptr() as *const u8, *size as usize));
        }
        Ok(Self(maps))
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        for (p, n) in &self.0 {
            // SAFETY: unmapping what `of` mapped; nothing reads it after.
            unsafe {
                let _ = nix::sys::mman::munmap(
                    std::ptr::NonNull::new_unchecked(*p as *mut std::ffi::c_void),
                    *n,
                );
            }
        }
    }
}

/// Reads of `len` bytes at random offsets, `threads` OS threads, as copies
/// out of the mappings; with `crc`, first one CRC32C pass over the covering
/// 4 KiB windows (the least a verified read does: one pass over the bytes
/// its checksums cover, one copy). Returns ops/s.
fn mapped_round(maps: &Mapped, threads: usize, len: usize, secs: f64, crc: bool) -> f64 {
    use ozone_common::checksum::Checksummer;
    const WIN: usize = 4 << 10;
    let ck = Checksummer::new(ozone_proto::ChecksumType::Crc32c, WIN as u32).expect("crc");
    timed_round(threads, secs, len, |rng, out| {
        let (p, size) = maps.0[rng.random_range(0..maps.0.len())];
        // SAFETY: `p` maps `size` readable bytes until `maps` is dropped.
        let map = unsafe { std::slice::from_raw_parts(p, size) };
        let off = rng.random_range(0..size - len);
        let mut acc = 0u32;
        if crc {
            let ws = off / WIN * WIN;
            let we = ((off + len).div_ceil(WIN) * WIN).min(size);
            acc = ck.checksum(&map[ws..we]);
        }
        out.copy_from_slice(&map[off..off + len]);
        acc
    })
}

/// The short-circuit targets, from the rows of one run. Each is the
/// median over rounds of a ratio of measurements taken in the same round
/// (a row's rounds are interleaved with raw `pread`, the primitive, and
/// the other paths of its setting), so a slow or fast moment of a shared
/// machine moves both sides of a ratio.
fn targets(rows: &[Row]) -> Vec<(String, f64, &'static str)> {
    let row = |path: &str, bpc: u32, verify: bool| {
        rows.iter()
            .find(|r| r.path == path && r.verify == verify && r.bpc == bpc)
    };
    let paired = |x: &[f64], y: &[f64], f: &dyn Fn(f64, f64) -> f64| {
        (!x.is_empty() && x.len() == y.len())
            .then(|| median(x.iter().zip(y).map(|(x, y)| f(*x, *y)).collect()))
    };
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.path == "sc") {
        let size = row_name("", r.bpc, r.verify);
        let size = size.split(", ").nth(1).unwrap_or_default().to_string();
        if r.verify {
            if let Some(v) = paired(&r.rounds, &r.prim_rounds, &|c, p| c / p) {
                out.push((
                    format!("short-circuit verify on, {size}: ratio over mmap CRC32C + copy"),
                    v,
                    ">= 0.95",
                ));
            }
        } else if let Some(v) = paired(&r.rounds, &r.raw_rounds, &|c, p| c / p) {
            out.push((
                format!("short-circuit verify off, {size}: ratio to raw pread"),
                v,
                ">= 1.10",
            ));
        }
    }
    for verify in [true, false] {
        if let (Some(pt), Some(sc)) = (
            row("passthrough", 16 << 10, verify),
            row("sc", 16 << 10, verify),
        ) {
            let diff: Vec<f64> = pt
                .rounds
                .iter()
                .zip(&sc.rounds)
                .map(|(p, s)| p - s)
                .collect();
            if let Some(v) = paired(&diff, &sc.raw_rounds, &|d, raw| d / raw) {
                out.push((
                    format!(
                        "pass-through minus short-circuit, 16 KiB, verify {}",
                        if verify { "on" } else { "off" }
                    ),
                    v,
                    ">= -0.05",
                ));
            }
        }
    }
    out
}

/// The name of a row.
fn row_name(path: &str, bpc: u32, verify: bool) -> String {
    format!(
        "{}, {} bytes per checksum, verify {}",
        match path {
            "sc" => "short-circuit (mapped)",
            "sc-pread" => "short-circuit (pread)",
            "sidecar" => "through the sidecar",
            "passthrough" => "sidecar pass-through (mapped)",
            "grpc-tls" => "gRPC with TLS",
            _ => "gRPC",
        },
        if bpc == 1 << 20 {
            "1 MiB".to_string()
        } else {
            format!("{} KiB", bpc >> 10)
        },
        if verify { "on" } else { "off" }
    )
}

/// The rows over TLS: a second cluster with `hdds.grpc.tls.enabled`, the
/// same keys, gRPC reads (the short-circuit path has no TLS to pay).
async fn tls_rows(a: &Args, dir: &std::path::Path, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    use ozone_common::config::{GRPC_TLS_DIR, GRPC_TLS_ENABLED};
    use ozone_common::tls::issue::{Ca, write_dir};
    let certs = dir.join("certs");
    let day = Duration::from_secs(86_400);
    let ca = Ca::new("ozone-bench CA", day)?;
    let leaf = ca.issue(&["localhost".into(), "127.0.0.1".into()], day)?;
    write_dir(&certs, ca.cert_pem(), Some(&leaf))?;
    let keys = [
        (GRPC_TLS_ENABLED.name, "true".to_string()),
        (GRPC_TLS_DIR.name, certs.display().to_string()),
    ];
    let s = setup(
        a,
        &dir.join("cluster"),
        keys.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        keys.to_vec(),
    )
    .await?;
    for (bpc, bucket) in &s.per_bpc {
        for verify in [true, false] {
            let c = s.client(*bpc, false)?.with_verify_checksum(verify);
            let readers = Readers::Direct(open_readers(&c, bucket, verify, a).await?);
            let mut group = [Contender {
                path: "grpc-tls",
                client: Some(c),
                readers,
                rounds: Vec::new(),
                disk: 0,
            }];
            let (raw, prim) =
                measure_group(&mut group, None, a, (&s.all_files, &s.raw_files)).await?;
            let row = Row::of(&group[0], *bpc, verify, &raw, &prim);
            eprintln!("{}: {:.0} ops/s", row.name, row.ops());
            rows.push(row);
        }
    }
    s.cluster.stop().await;
    Ok(())
}

async fn bench(a: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut s = setup(&a, dir.path(), Vec::new(), Vec::new()).await?;
    let sidecar = if a
        .paths
        .split(',')
        .any(|p| p == "sidecar" || p == "passthrough")
    {
        Some(s.cluster.start_sidecar(&s.node, "bench", &[]).await?)
    } else {
        None
    };
    let relay = sidecar.as_ref().map(|s| s.passthrough_dir.clone());
    let (all_files, raw_files, per_bpc) = (&s.all_files, &s.raw_files, &s.per_bpc);
    let mut rows = Vec::new();

    // Raw pread baseline.
    warm(all_files);
    let mut disk = 0;
    let mut r = Vec::new();
    raw_round(raw_files, &a, a.seconds.min(1.0));
    for _ in 0..a.rounds {
        warm(all_files);
        let before = pgpgin();
        r.push(raw_round(raw_files, &a, a.seconds));
        disk += pgpgin() - before;
    }
    rows.push(Row {
        name: "raw pread of the block files".into(),
        path: "raw",
        bpc: 0,
        verify: false,
        disk_reads_kib: disk,
        raw_rounds: r.clone(),
        rounds: r,
        prim_rounds: Vec::new(),
    });

    // The limit of a verified short-circuit read on this CPU: the same
    // reads as copies out of mappings of the block files, with and without
    // one CRC32C pass over the covering 4 KiB windows (the datanode's fine
    // checksums).
    let maps = Mapped::of(raw_files)?;
    for crc in [false, true] {
        let mut r = Vec::new();
        let mut raw_r = Vec::new();
        let len = a.read_kib << 10;
        mapped_round(&maps, a.threads, len, a.seconds.min(1.0), crc);
        for _ in 0..a.rounds {
            warm(all_files);
            raw_r.push(raw_round(raw_files, &a, a.seconds));
            warm(all_files);
            r.push(mapped_round(&maps, a.threads, len, a.seconds, crc));
        }
        rows.push(Row {
            name: if crc {
                "mmap CRC32C + copy of the block files (primitive)".into()
            } else {
                "mmap copy of the block files (primitive)".into()
            },
            path: if crc { "mmap-crc" } else { "mmap" },
            bpc: 0,
            verify: crc,
            disk_reads_kib: 0,
            rounds: r,
            raw_rounds: raw_r,
            prim_rounds: Vec::new(),
        });
    }

    // Every path of one setting is measured in the same rounds.
    for (bpc, bucket) in per_bpc {
        for verify in [true, false] {
            let mut group = Vec::new();
            for path in ["grpc", "sc", "sc-pread", "sidecar", "passthrough"] {
                // Through the sidecar: its own (default) 16 KiB setting only.
                if !a.paths.split(',').any(|p| p == path)
                    || ((path == "sidecar" || path == "passthrough") && *bpc != 16 << 10)
                {
                    continue;
                }
                let (client, readers) = if path == "sidecar" {
                    let s = sidecar.as_ref().context("sidecar")?;
                    let sc = SidecarClient::unix(&s.socket)?;
                    let r = open_readers(&sc, bucket, verify, &a).await?;
                    (None, Readers::Sidecar(r))
                } else {
                    let c = match path {
                        "passthrough" => s.client_in(*bpc, relay.as_deref())?,
                        "sc-pread" => s.client_with(
                            *bpc,
                            Some(&s.sockets),
                            &[(ozone_common::config::SHORT_CIRCUIT_MMAP.name, "false")],
                        )?,
                        _ => s.client(*bpc, path == "sc")?,
                    }
                    .with_verify_checksum(verify);
                    let r = open_readers(&c, bucket, verify, &a).await?;
                    (Some(c), Readers::Direct(r))
                };
                group.push(Contender {
                    path,
                    client,
                    readers,
                    rounds: Vec::new(),
                    disk: 0,
                });
            }
            if group.is_empty() {
                continue;
            }
            let prim = (verify && group.iter().any(|c| c.path == "sc")).then_some(&maps);
            let (raw, prim) =
                measure_group(&mut group, prim, &a, (&all_files[..], &raw_files[..])).await?;
            for c in &group {
                if let Some(client) = &c.client {
                    let st = client.stats();
                    let mapped = matches!(c.path, "sc" | "passthrough");
                    if (mapped || c.path == "sc-pread")
                        && (st.short_circuit_mapped_bytes > 0) != mapped
                    {
                        bail!(
                            "{}: {} of {} short-circuit bytes came from mappings",
                            c.path,
                            st.short_circuit_mapped_bytes,
                            st.short_circuit_bytes
                        );
                    }
                    if (mapped || c.path == "sc-pread") && st.short_circuit_fallbacks > 0 {
                        eprintln!(
                            "warning: {} short-circuit fallbacks: {:?}",
                            st.short_circuit_fallbacks,
                            client.short_circuit_fallbacks()
                        );
                    }
                }
                let row = Row::of(c, *bpc, verify, &raw, &prim);
                eprintln!("{}: {:.0} ops/s", row.name, row.ops());
                rows.push(row);
            }
        }
    }
    drop(maps);
    s.cluster.stop().await;
    if a.paths.split(',').any(|p| p == "grpc-tls") {
        tls_rows(&a, &dir.path().join("tls"), &mut rows).await?;
    }

    println!(
        "\n{} KiB random positional reads, {} concurrent readers, {} keys x {} MiB per setting, median of {} x {:.1}s rounds\n",
        a.read_kib, a.threads, a.keys, a.key_mib, a.rounds, a.seconds
    );
    println!(
        "| read path | ops/s | MiB/s | raw pread ops/s, interleaved | ratio to raw pread | disk reads during row |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.3} | {} |",
            r.name,
            r.ops(),
            r.ops() * a.read_kib as f64 / 1024.0,
            r.raw_ops(),
            r.ops() / r.raw_ops(),
            if r.disk_reads_kib > 1024 {
                format!("{} KiB", r.disk_reads_kib)
            } else {
                "none".into()
            }
        );
    }
    let targets = targets(&rows);
    if !targets.is_empty() {
        println!("\n| target | measured | wanted |\n|---|---:|---:|");
        for (what, got, want) in &targets {
            println!("| {what} | {got:.3} | {want} |");
        }
    }
    if let Some(p) = &a.json {
        let json = serde_json::json!({
            "targets": targets.iter().map(|(what, got, want)| serde_json::json!({
                "target": what, "measured": got, "wanted": want,
            })).collect::<Vec<_>>(),
            "read_kib": a.read_kib,
            "threads": a.threads,
            "keys": a.keys,
            "key_mib": a.key_mib,
            "rounds": a.rounds,
            "seconds": a.seconds,
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "rows": rows.iter().map(|r| serde_json::json!({
                "name": r.name,
                "path": r.path,
                "bytes_per_checksum": r.bpc,
                "verify": r.verify,
                "ops_per_sec": r.ops(),
                "ratio_to_raw": r.ops() / r.raw_ops(),
                "raw_pread_ops_per_sec": r.raw_ops(),
                "disk_reads_kib": r.disk_reads_kib,
                "ops_per_round": r.rounds,
                "raw_pread_ops_per_round": r.raw_rounds,
                "primitive_ops_per_round": r.prim_rounds,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(p, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    ozone_process::exit::code(run_main())
}

fn run_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Om(args)) => {
            ozone_process::logging::init();
            tokio::runtime::Runtime::new()?.block_on(ozone_om::cmd::run(args))
        }
        Some(Cmd::Datanode(args)) => {
            ozone_process::logging::init();
            tokio::runtime::Runtime::new()?.block_on(ozone_datanode::cmd::run(args))
        }
        Some(Cmd::Primitives { mib, threads }) => primitives(mib << 20, threads),
        Some(Cmd::Metadata(args)) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(metadata::run(args)),
        Some(Cmd::Write(args)) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(write::run(args)),
        Some(Cmd::Sidecar(args)) => {
            ozone_process::logging::init();
            tokio::runtime::Runtime::new()?.block_on(ozone_sidecar::cmd::run(args))
        }
        None => {
            let a = cli.args;
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(a.threads.max(1))
                .enable_all()
                .build()?
                .block_on(bench(a))
        }
    }
}

/// See [`Cmd::Primitives`].
fn primitives(size: usize, threads: usize) -> anyhow::Result<()> {
    use ozone_common::checksum::Checksummer;
    use ozone_proto::ChecksumType;
    const READ: usize = 64 << 10;
    const WIN: usize = 4 << 10;
    if size < 4 * READ {
        bail!("--mib too small");
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("data");
    let mut data = vec![0u8; size];
    data::fill(1, 0, &mut data);
    std::fs::write(&path, &data)?;
    drop(data);
    let file = std::fs::File::open(&path)?;
    warm(std::slice::from_ref(&path));
    let maps = Mapped::of(&[(file.try_clone()?, size as u64)])?;
    let (ptr, _) = maps.0[0];
    // SAFETY: `maps` maps `size` readable bytes until it is dropped below.
    let map = unsafe { std::slice::from_raw_parts(ptr, size) };
    let ck = Checksummer::new(ChecksumType::Crc32c, WIN as u32)?;
    let secs = 2.0;
    println!("| operation, 64 KiB random reads, {threads} threads | ops/s |");
    println!("|---|---:|");
    for crc in [false, true] {
        let ops = timed_round(threads, secs, READ, |rng, out| {
            let off = rng.random_range(0..size - READ - WIN);
            file.read_exact_at(out, off as u64).expect("pread");
            let mut acc = 0u32;
            if crc {
                acc = ck.checksum(out);
            }
            acc
        });
        let name = if crc { "pread + CRC32C" } else { "pread" };
        println!("| {name} | {ops:.0} |");
    }
    for crc in [false, true] {
        let name = if crc {
            "mmap CRC32C + copy"
        } else {
            "mmap copy"
        };
        let ops = mapped_round(&maps, threads, READ, secs, crc);
        println!("| {name} | {ops:.0} |");
    }
    println!("\n| CRC32C window | GB/s (one thread) |\n|---:|---:|");
    for win in [4usize << 10, 16 << 10, 72 << 10] {
        let c = Checksummer::new(ChecksumType::Crc32c, win as u32)?;
        let t = std::time::Instant::now();
        let mut bytes = 0usize;
        let mut acc = 0u32;
        while t.elapsed().as_secs_f64() < 1.0 {
            let span = size.min(8 << 20);
            for w in map[..span].chunks(win) {
                acc ^= c.checksum(w);
            }
            bytes += span;
        }
        std::hint::black_box(acc);
        println!(
            "| {} KiB | {:.1} |",
            win >> 10,
            bytes as f64 / t.elapsed().as_secs_f64() / 1e9
        );
    }
    drop(maps);
    Ok(())
}
