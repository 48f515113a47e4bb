//! The command line: every command and its flags.

use std::path::PathBuf;

use anyhow::Context;
use ozone_client::{Client, ClientConfig};
use ozone_common::config::{self as keys, Conf, Source};
use ozone_testkit::local::LocalCluster;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ozone",
    version,
    about = "Ozone object store: shell, admin and local cluster",
    after_help = "Example: ozone --om om:9862 sh volume ls"
)]
pub(crate) struct Cli {
    /// OM address, host:port.
    #[arg(long, global = true, env = "OZONE_OM_ADDRESS")]
    pub(crate) om: Option<String>,
    /// Node this command runs on (for local-first placement and reads).
    #[arg(long = "node", global = true, env = "NODE_NAME")]
    pub(crate) node: Option<String>,
    /// Config file of `key = value` lines (Ozone key names).
    #[arg(long, global = true)]
    pub(crate) conf: Option<PathBuf>,
    /// Config overrides, `key=value` (repeatable).
    #[arg(long = "set", global = true)]
    pub(crate) set: Vec<String>,
    /// Key commands go through the sidecar listening on this UNIX socket
    /// (under its workload policy) instead of to the cluster; also
    /// `ozone.client.sidecar.socket`.
    #[arg(long, global = true, env = "OZONE_SIDECAR")]
    pub(crate) sidecar: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
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
    Demo(crate::demo::DemoArgs),
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
pub(crate) enum ShCmd {
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
pub(crate) enum VolumeCmd {
    /// Creates /VOLUME.
    #[command(after_help = "Example: ozone sh volume create /vol1")]
    Create { path: String },
    /// Lists volumes.
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh volume ls")]
    Ls,
}

#[derive(Subcommand)]
pub(crate) enum BucketCmd {
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
pub(crate) enum KeyCmd {
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
pub(crate) enum AdminCmd {
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
pub(crate) enum ReplicationCmd {
    /// Blocks by replication state, copies, and the blocks at most risk.
    #[command(after_help = "Example: ozone admin replication status --top 20")]
    Status {
        /// How many of the blocks at most risk to list.
        #[arg(long, default_value_t = 10)]
        top: u32,
    },
}

#[derive(Subcommand)]
pub(crate) enum DatanodeCmd {
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
pub(crate) enum LocalCmd {
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
    pub(crate) fn conf(&self) -> anyhow::Result<Conf> {
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

    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        self.client_of(&self.conf()?)
    }

    /// The cluster client for an already built configuration.
    pub(crate) fn client_of(&self, conf: &Conf) -> anyhow::Result<Client> {
        let om = conf
            .opt(&keys::OM_ADDRESS)?
            .context("no OM address: pass --om HOST:PORT or set OZONE_OM_ADDRESS")?;
        let mut cfg = ClientConfig::from_conf(&om, conf)?;
        cfg.node_name = self.node.clone().filter(|n| !n.is_empty());
        Ok(Client::connect(cfg)?)
    }
}
