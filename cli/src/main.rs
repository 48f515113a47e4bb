//! `ozone`: the shell (`ozone sh`), admin commands, a local cluster
//! (`ozone local up`), the demo, and the OM, datanode and sidecar processes.

mod demo;
mod fs_shell;

use ozone_client::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ozone_cli::local::{LocalCluster, LocalSpec};
use ozone_client::{Client, ClientConfig, KeyAccess, KeyRead};
use ozone_common::config::{self as keys, Conf, Source};
use ozone_common::names::OzonePath;
use ozone_proto::{BucketLayout, KeyInfo, NodeState};
use tokio::io::AsyncWriteExt;

#[derive(Parser)]
#[command(
    name = "ozone",
    version,
    about = "Ozone object store: shell, admin and local cluster",
    after_help = "Example: ozone --om om:9862 sh volume ls"
)]
struct Cli {
    /// OM address, host:port.
    #[arg(long, global = true, env = "OZONE_OM_ADDRESS")]
    om: Option<String>,
    /// Node this command runs on (for local-first placement and reads).
    #[arg(long = "node", global = true, env = "NODE_NAME")]
    node: Option<String>,
    /// Config file of `key = value` lines (Ozone key names).
    #[arg(long, global = true)]
    conf: Option<PathBuf>,
    /// Config overrides, `key=value` (repeatable).
    #[arg(long = "set", global = true)]
    set: Vec<String>,
    /// Key commands go through the sidecar listening on this UNIX socket
    /// (under its workload policy) instead of to the cluster; also
    /// `ozone.client.sidecar.socket`.
    #[arg(long, global = true, env = "OZONE_SIDECAR")]
    sidecar: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Volume, bucket and key commands.
    #[command(after_help = "Example: ozone sh key put /vol1/bucket1/file.bin ./file.bin")]
    Sh {
        #[command(subcommand)]
        cmd: ShCmd,
    },
    /// The Hadoop file-system shell on FILE_SYSTEM_OPTIMIZED buckets:
    /// -ls [-R], -mkdir [-p], -put [-f], -get, -cat, -mv, -rm [-r], -stat,
    /// -du -s, -test -e|-d|-f (`ozone fs -help` for details).
    #[command(
        after_help = "Example: ozone fs -mkdir -p /vol1/fsbucket/hbase/data && ozone fs -ls -R ofs://om:9862/vol1/fsbucket/hbase",
        disable_help_flag = true
    )]
    Fs {
        /// The command and its arguments, e.g. -ls -R /vol1/fsbucket/dir.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Cluster administration.
    #[command(after_help = "Example: ozone admin datanode list")]
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
    /// A local cluster of processes.
    #[command(after_help = "Example: ozone local up --dir /tmp/ozone --datanodes 3")]
    Local {
        #[command(subcommand)]
        cmd: LocalCmd,
    },
    /// Prints the effective configuration of a role: every key it reads,
    /// its value and where the value came from (default, file, --set, env,
    /// flag).
    #[command(
        alias = "getconf",
        after_help = "Example: ozone --conf /etc/ozone/ozone.conf config --role datanode"
    )]
    Config {
        /// om, datanode, client or sidecar.
        #[arg(long, default_value = "client")]
        role: String,
        /// Print the table of every key (Markdown) instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Starts a local cluster, writes and reads a few hundred MiB, reports.
    #[command(after_help = "Example: ozone demo")]
    Demo(demo::DemoArgs),
    /// Runs the OM (Ozone Manager).
    #[command(
        after_help = "Example: ozone om --metadata-dir /data/om --conf /etc/ozone/ozone.conf"
    )]
    Om(ozone_om::cmd::OmArgs),
    /// Runs a datanode.
    #[command(
        after_help = "Example: ozone datanode --om om:9862 --data-dir /data/dn --metadata-dir /data/meta"
    )]
    Datanode(ozone_datanode::cmd::DatanodeArgs),
    /// Runs a client sidecar (what `ozone-sidecar` runs).
    #[command(
        after_help = "Example: ozone sidecar --om om:9862 --socket /var/run/ozone/sidecar.sock --domain-socket-dir /var/lib/ozone/sockets --conf /etc/ozone-sidecar/policy.conf"
    )]
    Sidecar(ozone_sidecar::cmd::SidecarArgs),
    /// Prepares a datanode's host directories (the root init step of a
    /// datanode pod): creates them, hands them to OWNER, never
    /// world-writable, and checks the socket directory as the datanode will.
    #[command(
        after_help = "Example: ozone prepare-dirs --owner 1000:1000 --socket-dir /var/lib/ozone/sockets --data-dir /host-data/storage-ozone"
    )]
    PrepareDirs {
        /// Owner as UID:GID.
        #[arg(long)]
        owner: String,
        /// The short-circuit socket directory (mode 0755).
        #[arg(long)]
        socket_dir: Option<std::path::PathBuf>,
        /// The data directory (mode 0750).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum ShCmd {
    /// Volume commands.
    #[command(after_help = "Example: ozone sh volume create /vol1")]
    Volume {
        #[command(subcommand)]
        cmd: VolumeCmd,
    },
    /// Bucket commands.
    #[command(after_help = "Example: ozone sh bucket create /vol1/bucket1")]
    Bucket {
        #[command(subcommand)]
        cmd: BucketCmd,
    },
    /// Key commands.
    #[command(after_help = "Example: ozone sh key ls /vol1/bucket1")]
    Key {
        #[command(subcommand)]
        cmd: KeyCmd,
    },
}

#[derive(Subcommand)]
enum VolumeCmd {
    /// Creates /VOLUME.
    #[command(after_help = "Example: ozone sh volume create /vol1")]
    Create { path: String },
    /// Lists volumes.
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh volume ls")]
    Ls,
}

#[derive(Subcommand)]
enum BucketCmd {
    /// Creates /VOLUME/BUCKET.
    #[command(
        after_help = "Example: ozone sh bucket create --layout FILE_SYSTEM_OPTIMIZED /vol1/fsbucket"
    )]
    Create {
        path: String,
        /// OBJECT_STORE (flat keys) or FILE_SYSTEM_OPTIMIZED (directories,
        /// atomic rename, recursive delete: what HBase needs; `ozone fs`).
        #[arg(long, default_value = "OBJECT_STORE", value_parser = ["OBJECT_STORE", "FILE_SYSTEM_OPTIMIZED", "FSO", "OBS"])]
        layout: String,
    },
    /// Lists the buckets of /VOLUME.
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh bucket ls /vol1")]
    Ls { path: String },
}

#[derive(Subcommand)]
enum KeyCmd {
    /// Writes FILE to /VOLUME/BUCKET/KEY.
    #[command(after_help = "Example: ozone sh key put /vol1/bucket1/file.bin ./file.bin")]
    Put { path: String, file: PathBuf },
    /// Reads /VOLUME/BUCKET/KEY into FILE.
    #[command(
        after_help = "Example: ozone --node node1 sh key get /vol1/bucket1/file.bin ./copy.bin"
    )]
    Get {
        path: String,
        file: PathBuf,
        /// Skip checksum verification for this read.
        #[arg(long)]
        no_verify: bool,
    },
    /// Writes /VOLUME/BUCKET/KEY to standard output.
    #[command(after_help = "Example: ozone sh key cat /vol1/bucket1/file.bin | sha256sum")]
    Cat {
        path: String,
        /// Skip checksum verification for this read.
        #[arg(long)]
        no_verify: bool,
    },
    /// Lists keys of /VOLUME/BUCKET (optionally with a name prefix).
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh key ls /vol1/bucket1 --prefix logs/")]
    Ls {
        path: String,
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Shows a key's size, checksum settings and block locations.
    #[command(after_help = "Example: ozone sh key info /vol1/bucket1/file.bin")]
    Info { path: String },
    /// Deletes a key.
    #[command(alias = "delete")]
    #[command(after_help = "Example: ozone sh key rm /vol1/bucket1/file.bin")]
    Rm { path: String },
    /// Prints the key's composite CRC (from block metadata, no data read).
    #[command(after_help = "Example: ozone sh key checksum /vol1/bucket1/file.bin")]
    Checksum { path: String },
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Datanode commands.
    #[command(after_help = "Example: ozone admin datanode list")]
    Datanode {
        #[command(subcommand)]
        cmd: DatanodeCmd,
    },
    /// Replication commands.
    #[command(after_help = "Example: ozone admin replication status")]
    Replication {
        #[command(subcommand)]
        cmd: ReplicationCmd,
    },
}

#[derive(Subcommand)]
enum ReplicationCmd {
    /// Blocks by replication state, copies, and the blocks at most risk.
    #[command(after_help = "Example: ozone admin replication status --top 20")]
    Status {
        /// How many of the blocks at most risk to list.
        #[arg(long, default_value_t = 10)]
        top: u32,
    },
}

#[derive(Subcommand)]
enum DatanodeCmd {
    /// Lists datanodes: id, address, node, health, operational state,
    /// capacity and use.
    #[command(alias = "ls")]
    #[command(after_help = "Example: ozone admin datanode list")]
    List,
    /// Moves every replica off a datanode (it keeps serving reads); it is
    /// DECOMMISSIONED when no key depends on it.
    #[command(after_help = "Example: ozone admin datanode decommission ozone-datanode-3")]
    Decommission {
        /// Datanode id, address, host or pod name.
        datanode: String,
    },
    /// Puts a datanode in maintenance: it may go away for a while without
    /// its replicas being copied (while enough others remain).
    #[command(after_help = "Example: ozone admin datanode maintenance ozone-datanode-1")]
    Maintenance {
        /// Datanode id, address, host or pod name.
        datanode: String,
    },
    /// Returns a datanode to service (ends decommission or maintenance).
    #[command(after_help = "Example: ozone admin datanode recommission ozone-datanode-3")]
    Recommission {
        /// Datanode id, address, host or pod name.
        datanode: String,
    },
    /// A datanode's health, operational state and the replicas still
    /// depending on it.
    #[command(after_help = "Example: ozone admin datanode status ozone-datanode-3")]
    Status {
        /// Datanode id, address, host or pod name.
        datanode: String,
    },
}

#[derive(Subcommand)]
enum LocalCmd {
    /// Starts again the datanodes and sidecars of a running `local up` that
    /// exited (killed, crashed); each keeps its data.
    #[command(after_help = "Example: ozone local restart --dir /tmp/ozone")]
    Restart {
        /// The directory `local up` runs in.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Runs an OM and datanodes in DIR until Ctrl-C or SIGTERM.
    #[command(after_help = "Example: ozone local up --dir /tmp/ozone --datanodes 3 --sidecars")]
    Up {
        /// Directory of all cluster state (reused across runs).
        #[arg(long)]
        dir: PathBuf,
        /// Number of datanodes (each on its own simulated node).
        #[arg(long, default_value_t = 3)]
        datanodes: usize,
        /// Also start one sidecar per node, and one on a node without a
        /// datanode (`client-node`).
        #[arg(long)]
        sidecars: bool,
    },
}

impl Cli {
    /// The client's configuration: the file, then `--set`, then what the
    /// environment and flags supply for keys still unset.
    fn conf(&self) -> anyhow::Result<Conf> {
        let mut conf = match &self.conf {
            Some(p) => Conf::load(p)?,
            None => Conf::new(),
        };
        conf.apply_overrides(&self.set)?;
        conf.warn_unknown();
        if let Some(om) = &self.om {
            conf.set_from(
                keys::OM_ADDRESS.name,
                om.clone(),
                Source::Flag("--om (or OZONE_OM_ADDRESS)"),
            );
        }
        if conf.opt(&keys::DOMAIN_SOCKET_PATH)?.is_none() {
            if let (Some(node), Ok(dir)) = (&self.node, std::env::var("OZONE_LOCAL_CLUSTER_DIR")) {
                // On a local cluster, a node's socket directory is known.
                let sockets = LocalCluster::socket_dir_of(std::path::Path::new(&dir), node);
                conf.set_from(
                    keys::DOMAIN_SOCKET_PATH.name,
                    sockets.display().to_string(),
                    Source::Env("OZONE_LOCAL_CLUSTER_DIR"),
                );
            } else if let Ok(dir) = std::env::var("OZONE_DOMAIN_SOCKET_PATH") {
                conf.set_from(
                    keys::DOMAIN_SOCKET_PATH.name,
                    dir,
                    Source::Env("OZONE_DOMAIN_SOCKET_PATH"),
                );
            }
        }
        if let Some(s) = &self.sidecar {
            conf.set_from(
                keys::CLIENT_SIDECAR_SOCKET.name,
                s.display().to_string(),
                Source::Flag("--sidecar (or OZONE_SIDECAR)"),
            );
        }
        Ok(conf)
    }

    fn client(&self) -> anyhow::Result<Client> {
        self.client_of(&self.conf()?)
    }

    /// The cluster client for an already built configuration.
    fn client_of(&self, conf: &Conf) -> anyhow::Result<Client> {
        let om = conf
            .opt(&keys::OM_ADDRESS)?
            .context("no OM address: pass --om HOST:PORT or set OZONE_OM_ADDRESS")?;
        let mut cfg = ClientConfig::from_conf(&om, conf)?;
        cfg.node_name = self.node.clone().filter(|n| !n.is_empty());
        Ok(Client::connect(cfg)?)
    }
}

/// `ozone config`: the effective configuration of a role, each value with
/// its source, or the table of every key.
fn print_config(cli: &Cli, role: &str, markdown: bool) -> anyhow::Result<()> {
    if markdown {
        print!("{}", keys::markdown_table());
        return Ok(());
    }
    let role = keys::Role::parse(role).with_context(|| {
        format!("unknown role {role}: expected om, datanode, client or sidecar")
    })?;
    let conf = cli.conf()?;
    conf.validate()?;
    let rows = conf.effective(role);
    let width = rows.iter().map(|(k, _, _)| k.name.len()).max().unwrap_or(0);
    for (k, v, src) in rows {
        let v = v.unwrap_or_default();
        println!("{:<width$} = {:<12} # {src}", k.name, v);
    }
    for (k, near) in conf.unknown() {
        match near {
            Some(n) => println!("# unknown key {k} (ignored): did you mean {n}?"),
            None => println!("# unknown key {k} (ignored)"),
        }
    }
    Ok(())
}

fn state_name(s: i32) -> &'static str {
    match NodeState::try_from(s).unwrap_or(NodeState::Unspecified) {
        NodeState::Healthy => "HEALTHY",
        NodeState::Stale => "STALE",
        NodeState::Dead => "DEAD",
        NodeState::Unspecified => "UNKNOWN",
    }
}

fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn print_key(k: &KeyInfo) {
    let ck = ozone_proto::ChecksumType::try_from(k.checksum_type)
        .map(|t| t.as_str_name())
        .unwrap_or("?");
    let rep = ozone_proto::ReplicationFactor::try_from(k.replication)
        .map(|t| t.as_str_name())
        .unwrap_or("?");
    println!("key: /{}/{}/{}", k.volume, k.bucket, k.name);
    println!("size: {}", k.size);
    println!("replication: {rep}");
    println!(
        "checksum: {ck}, {} bytes per checksum",
        k.bytes_per_checksum
    );
    println!("created_ms: {}", k.created_ms);
    println!("modified_ms: {}", k.modified_ms);
    for b in &k.blocks {
        let id = b.block.unwrap_or_default();
        let reps: Vec<String> = b
            .replicas
            .iter()
            .map(|r| format!("{}@{}({})", r.id, r.node_name, state_name(r.state)))
            .collect();
        println!(
            "block {} offset {} length {} replicas {}",
            id.display(),
            b.offset,
            b.length,
            reps.join(" ")
        );
    }
}

/// What a key command moved, for its summary line.
struct Moved {
    verb: &'static str,
    bytes: u64,
    secs: f64,
    detail: String,
}

/// Runs a key command through either client (the cluster or a sidecar).
async fn key_cmd<A: KeyAccess>(a: &A, cmd: &KeyCmd) -> anyhow::Result<Option<Moved>> {
    let t = Instant::now();
    match cmd {
        KeyCmd::Put { path, file } => {
            let p = KeyPath::parse(path)?;
            let f = tokio::fs::File::open(file)
                .await
                .with_context(|| format!("opening {}", file.display()))?;
            let key = a
                .put_key(p, f)
                .await
                .with_context(|| format!("writing {} to {path}", file.display()))?;
            return Ok(Some(Moved {
                verb: "wrote",
                bytes: key.size,
                secs: t.elapsed().as_secs_f64(),
                detail: format!("to {path}, {} block(s)", key.blocks.len()),
            }));
        }
        KeyCmd::Get {
            path,
            file,
            no_verify,
        } => {
            let p = KeyPath::parse(path)?;
            let r = a.open_key_with(p, no_verify.then_some(false)).await?;
            let mut f = tokio::fs::File::create(file)
                .await
                .with_context(|| format!("creating {}", file.display()))?;
            let n = r
                .copy_to(&mut f)
                .await
                .with_context(|| format!("reading {path} into {}", file.display()))?;
            f.sync_all().await?;
            let verify = r.verify_checksum();
            r.close().await?;
            return Ok(Some(Moved {
                verb: "read",
                bytes: n,
                secs: t.elapsed().as_secs_f64(),
                detail: format!("from {path} (verify-checksum {verify})"),
            }));
        }
        KeyCmd::Cat { path, no_verify } => {
            let p = KeyPath::parse(path)?;
            let r = a.open_key_with(p, no_verify.then_some(false)).await?;
            let mut out = tokio::io::stdout();
            r.copy_to(&mut out).await?;
            out.flush().await?;
            r.close().await?;
        }
        KeyCmd::Ls { path, prefix } => {
            let (v, b) = OzonePath::bucket_path(path)?;
            for k in a.list_keys(KeyPath::new(&v, &b, prefix)).await? {
                println!("{}\t{}", k.size, k.name);
            }
        }
        KeyCmd::Info { path } => {
            let p = KeyPath::parse(path)?;
            print_key(&a.key_info(p).await?);
        }
        KeyCmd::Rm { path } => {
            let p = KeyPath::parse(path)?;
            a.delete_key(p).await?;
            println!("deleted {path}");
        }
        KeyCmd::Checksum { path } => {
            let c = a.key_checksum(KeyPath::parse(path)?).await?;
            println!("{} {:08x} {} {path}", c.kind.as_str_name(), c.crc, c.size);
        }
    }
    Ok(None)
}

fn summary(m: &Moved, tail: &str) {
    eprintln!(
        "{} {} {} in {:.2}s ({:.1} MiB/s){tail}",
        m.verb,
        human(m.bytes),
        m.detail,
        m.secs,
        m.bytes as f64 / (1 << 20) as f64 / m.secs.max(1e-9),
    );
}

async fn sh(cli: &Cli, cmd: &ShCmd) -> anyhow::Result<()> {
    let conf = cli.conf()?;
    if let Some(socket) = conf.opt(&keys::CLIENT_SIDECAR_SOCKET)? {
        let ShCmd::Key { cmd } = cmd else {
            bail!("only key commands go through a sidecar; drop --sidecar for volumes and buckets");
        };
        let sc = ozone_client::SidecarClient::unix(&socket)?;
        if let Some(m) = key_cmd(&sc, cmd).await? {
            summary(&m, " through the sidecar");
        }
        return Ok(());
    }
    let client = cli.client_of(&conf)?;
    match cmd {
        ShCmd::Volume { cmd } => match cmd {
            VolumeCmd::Create { path } => {
                let p = OzonePath::parse(path)?;
                if p.bucket.is_some() {
                    bail!("expected /VOLUME, got {path}");
                }
                client.create_volume(&p.volume).await?;
                println!("created volume /{}", p.volume);
            }
            VolumeCmd::Ls => {
                for v in client.list_volumes().await? {
                    println!("/{}", v.name);
                }
            }
        },
        ShCmd::Bucket { cmd } => match cmd {
            BucketCmd::Create { path, layout } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                let layout = match layout.as_str() {
                    "FILE_SYSTEM_OPTIMIZED" | "FSO" => BucketLayout::FileSystemOptimized,
                    _ => BucketLayout::ObjectStore,
                };
                client.create_bucket_with_layout(&v, &b, layout).await?;
                println!("created bucket /{v}/{b} ({})", layout.as_str_name());
            }
            BucketCmd::Ls { path } => {
                let p = OzonePath::parse(path)?;
                for b in client.list_buckets(&p.volume).await? {
                    println!("/{}/{}", b.volume, b.name);
                }
            }
        },
        ShCmd::Key { cmd } => {
            if let Some(m) = key_cmd(&client, cmd).await? {
                let s = client.stats();
                let tail = if m.verb == "read" {
                    tracing::info!(short_circuit_bytes = s.short_circuit_bytes, fallbacks = ?client.short_circuit_fallbacks(), "read done");
                    format!(
                        "; node-local replica: {} bytes, remote: {} bytes, short-circuit: {} bytes",
                        s.local_bytes, s.remote_bytes, s.short_circuit_bytes
                    )
                } else {
                    String::new()
                };
                summary(&m, &tail);
            }
        }
    }
    Ok(())
}

async fn admin(cli: &Cli, cmd: &AdminCmd) -> anyhow::Result<()> {
    use ozone_proto::OperationalState as Op;
    let client = cli.client()?;
    match cmd {
        AdminCmd::Datanode { cmd } => match cmd {
            DatanodeCmd::List => {
                println!(
                    "{:<36}  {:<21}  {:<12}  {:<8}  {:<15}  {:>10}  {:>10}",
                    "ID", "ADDRESS", "NODE", "STATE", "OPERATIONAL", "CAPACITY", "USED"
                );
                for d in client.list_datanodes().await? {
                    println!(
                        "{:<36}  {:<21}  {:<12}  {:<8}  {:<15}  {:>10}  {:>10}",
                        d.id,
                        d.address,
                        d.node_name,
                        state_name(d.state),
                        op_name(d.operational_state),
                        human(d.capacity),
                        human(d.used)
                    );
                }
            }
            DatanodeCmd::Decommission { datanode }
            | DatanodeCmd::Maintenance { datanode }
            | DatanodeCmd::Recommission { datanode } => {
                let state = match cmd {
                    DatanodeCmd::Decommission { .. } => Op::Decommissioning,
                    DatanodeCmd::Maintenance { .. } => Op::InMaintenance,
                    _ => Op::InService,
                };
                let d = client.set_operational_state(datanode, state).await?;
                println!("{} ({}): {}", d.id, d.address, op_name(d.operational_state));
            }
            DatanodeCmd::Status { datanode } => {
                let s = client.datanode_status(datanode).await?;
                let d = s.datanode.unwrap_or_default();
                println!("id:                 {}", d.id);
                println!("address:            {}", d.address);
                println!("node:               {}", d.node_name);
                println!("health:             {}", state_name(d.state));
                println!("operational state:  {}", op_name(d.operational_state));
                println!("replicas:           {}", s.replicas);
                println!("needed elsewhere:   {}", s.needed_elsewhere);
                println!("copies in flight:   {}", s.copies_in_flight);
            }
        },
        AdminCmd::Replication {
            cmd: ReplicationCmd::Status { top },
        } => {
            let s = client.replication_status(*top).await?;
            println!("blocks:             {}", s.blocks);
            println!("healthy:            {}", s.healthy);
            println!("under-replicated:   {}", s.under_replicated);
            println!("over-replicated:    {}", s.over_replicated);
            println!("mis-replicated:     {}", s.mis_replicated);
            println!("missing:            {}", s.missing);
            println!("copies in flight:   {}", s.copies_in_flight);
            println!("copies done:        {}", s.copies_done);
            println!("copies failed:      {}", s.copies_failed);
            println!("bytes copied:       {}", human(s.bytes_copied));
            println!(
                "reports:            {}",
                if s.reports_complete {
                    "every live datanode reported"
                } else {
                    "waiting for datanode reports"
                }
            );
            if s.last_pass_ms == 0 {
                println!("last pass:          none yet");
            }
            if !s.top.is_empty() {
                println!();
                println!("{:<24}  {:>7}  {:<40}  PROBLEMS", "BLOCK", "HEALTHY", "KEY");
                for h in &s.top {
                    println!(
                        "{:<24}  {:>7}  {:<40}  {}",
                        h.block.map(|b| b.display()).unwrap_or_default(),
                        format!("{}/{}", h.healthy, h.wanted),
                        h.key,
                        h.problems.join("; ")
                    );
                }
            }
        }
    }
    Ok(())
}

/// The operational state's name, as Ozone prints it.
fn op_name(s: i32) -> &'static str {
    match ozone_proto::OperationalState::try_from(s) {
        Ok(ozone_proto::OperationalState::Decommissioning) => "DECOMMISSIONING",
        Ok(ozone_proto::OperationalState::Decommissioned) => "DECOMMISSIONED",
        Ok(ozone_proto::OperationalState::InMaintenance) => "IN_MAINTENANCE",
        _ => "IN_SERVICE",
    }
}

/// Asks the `local up` running in `dir` (its pid file) to start its exited
/// processes again (SIGHUP).
fn local_restart(dir: &std::path::Path) -> anyhow::Result<()> {
    let pid_file = dir.join("local-up.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .map_err(|e| {
            anyhow::anyhow!(
                "no local cluster runs in {} ({}: {e})",
                dir.display(),
                pid_file.display()
            )
        })?
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{} holds no pid", pid_file.display()))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .map_err(|e| anyhow::anyhow!("local up (pid {pid}) in {}: {e}", dir.display()))?;
    println!("asked local up (pid {pid}) to restart its exited processes; see its output");
    Ok(())
}

async fn local_up(cli: &Cli, dir: PathBuf, datanodes: usize, sidecars: bool) -> anyhow::Result<()> {
    if datanodes == 0 {
        bail!("--datanodes must be at least 1");
    }
    let mut conf = Vec::new();
    if let Some(p) = &cli.conf {
        conf.extend(Conf::load(p)?.iter().map(|(k, v)| format!("{k}={v}")));
    }
    conf.extend(cli.set.iter().cloned());
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let spec = LocalSpec {
        dir: dir.clone(),
        datanodes,
        exe: std::env::current_exe()?,
        conf,
    };
    // One shutdown future for the whole run, polled from the start: its
    // handler is registered before anything is printed, so a SIGTERM sent
    // right after `ready` is never lost between two waits.
    let stop = ozone_process::signal::shutdown();
    tokio::pin!(stop);
    let mut cluster = tokio::select! {
        c = LocalCluster::start(spec) => c?,
        _ = &mut stop => bail!("interrupted while starting"),
    };
    println!("ready om={}", cluster.om_address());
    if sidecars {
        for s in cluster.start_sidecars().await? {
            println!(
                "sidecar {} node={} socket={} passthrough={} http={}",
                s.name,
                s.node,
                s.socket.display(),
                s.passthrough_dir.display(),
                s.http
            );
        }
    }
    eprintln!(
        "cluster state in {}; logs in {}/logs; `source {}/cluster.env` to use it",
        dir.display(),
        dir.display(),
        dir.display()
    );
    let pid_file = dir.join("local-up.pid");
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // A datanode or sidecar that exits is reported and the rest keeps
    // running (a lost datanode is what the replication manager repairs);
    // SIGHUP (`ozone local restart --dir DIR`) starts the exited ones again.
    // The OM's exit ends the cluster.
    let res = loop {
        tokio::select! {
            _ = &mut stop => {
                eprintln!("stopping");
                break Ok(());
            }
            (name, status) = cluster.next_exit() => {
                if name == "om" {
                    break Err(anyhow::anyhow!("the OM exited ({status}); see {}/logs/om.log", dir.display()));
                }
                eprintln!(
                    "{name} exited ({status}); the rest keeps running. `ozone local restart --dir {}` \
                     starts it again; its log is {}/logs/{name}.log",
                    dir.display(),
                    dir.display()
                );
            }
            _ = hup.recv() => {
                match cluster.restart_exited().await {
                    Ok(v) if v.is_empty() => eprintln!("restart: every process is running"),
                    Ok(v) => eprintln!("restarted {}", v.join(", ")),
                    Err(e) => eprintln!("restart failed: {e}"),
                }
            }
        }
    };
    cluster.stop().await;
    let _ = std::fs::remove_file(&pid_file);
    res
}

/// The role names the image links to this binary: `ozone-om ARGS` runs as
/// `ozone om ARGS`, and so on.
const ROLE_NAMES: [(&str, &str); 3] = [
    ("ozone-om", "om"),
    ("ozone-datanode", "datanode"),
    ("ozone-sidecar", "sidecar"),
];

/// The arguments with the role subcommand put in when the program was
/// started under a role name.
fn role_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.collect();
    let name = args
        .first()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    if let Some((_, sub)) = ROLE_NAMES.iter().find(|(n, _)| Some(*n) == name) {
        args.insert(1, sub.into());
    }
    args
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    ozone_process::logging::init();
    let cli = Cli::parse_from(role_args(std::env::args_os()));
    ozone_process::exit::code(run(cli).await)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.cmd {
        Cmd::Sh { cmd } => sh(&cli, cmd).await,
        Cmd::Fs { args } => {
            let conf = cli.conf()?;
            let code = if let Some(socket) = conf.opt(&keys::CLIENT_SIDECAR_SOCKET)? {
                // Through the workload's sidecar (its OM, its policy).
                fs_shell::run(|_| Ok(ozone_client::SidecarClient::unix(&socket)?), args).await?
            } else {
                fs_shell::run(
                    |om| match om {
                        Some(om) => {
                            let mut c = conf.clone();
                            c.set_from(
                                keys::OM_ADDRESS.name,
                                om.to_string(),
                                Source::Flag("ofs://"),
                            );
                            cli.client_of(&c)
                        }
                        None => cli.client_of(&conf),
                    },
                    args,
                )
                .await?
            };
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Cmd::Admin { cmd } => admin(&cli, cmd).await,
        Cmd::Local {
            cmd:
                LocalCmd::Up {
                    dir,
                    datanodes,
                    sidecars,
                },
        } => local_up(&cli, dir.clone(), *datanodes, *sidecars).await,
        Cmd::Local {
            cmd: LocalCmd::Restart { dir },
        } => local_restart(dir),
        Cmd::Demo(args) => demo::run(args.clone(), cli.set.clone()).await,
        Cmd::Config { role, markdown } => print_config(&cli, role, *markdown),
        Cmd::Om(args) => ozone_om::cmd::run(args.clone()).await,
        Cmd::Datanode(args) => ozone_datanode::cmd::run(args.clone()).await,
        Cmd::Sidecar(args) => ozone_sidecar::cmd::run(args.clone()).await,
        Cmd::PrepareDirs {
            owner,
            socket_dir,
            data_dir,
        } => {
            use ozone_datanode::prepare;
            let (uid, gid) = prepare::parse_owner(owner)?;
            prepare::prepare(uid, gid, socket_dir.as_deref(), data_dir.as_deref())?;
            for d in [socket_dir, data_dir].into_iter().flatten() {
                println!("prepared {} for {uid}:{gid}", d.display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(role_args(args.iter().map(std::ffi::OsString::from))).unwrap()
    }

    /// Every command's `--help` ends with an example.
    #[test]
    fn every_command_has_an_example() {
        use clap::CommandFactory;
        fn walk(c: &mut clap::Command, path: String, missing: &mut Vec<String>) {
            let help = c.render_long_help().to_string();
            if !help.contains("Example: ozone") {
                missing.push(path.clone());
            }
            for sub in c.get_subcommands_mut() {
                // clap's generated `help` subcommands print other commands' help.
                if sub.get_name() != "help" {
                    let name = format!("{path} {}", sub.get_name());
                    walk(sub, name, missing);
                }
            }
        }
        let mut missing = Vec::new();
        let mut root = Cli::command();
        root.build();
        assert!(
            root.render_long_help()
                .to_string()
                .contains("Example: ozone")
        );
        for sub in root.get_subcommands_mut() {
            if sub.get_name() != "help" {
                let name = format!("ozone {}", sub.get_name());
                walk(sub, name, &mut missing);
            }
        }
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }

    #[test]
    fn role_names_run_their_subcommand() {
        let c = parse(&["/usr/local/bin/ozone-om", "--metadata-dir", "/m"]);
        assert!(matches!(c.cmd, Cmd::Om(_)));
        let c = parse(&["ozone-datanode", "--om", "om:9862", "--data-dir", "/d"]);
        assert!(matches!(c.cmd, Cmd::Datanode(_)));
        let c = parse(&["ozone-sidecar", "--om", "om:9862", "--socket", "/s"]);
        assert!(matches!(c.cmd, Cmd::Sidecar(_)));
        // Under its own name, the subcommand comes from the arguments.
        let c = parse(&["ozone", "sh", "volume", "ls"]);
        assert!(matches!(c.cmd, Cmd::Sh { .. }));
        assert!(Cli::try_parse_from(role_args(["ozone-omx"].map(Into::into).into_iter())).is_err());
    }
}
