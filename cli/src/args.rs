//! The command line: every command and its flags.

use std::path::PathBuf;

use anyhow::Context;
use ozone_client::{Client, ClientConfig};
use ozone_common::config::{self as keys, Conf, Source};
use ozone_local::LocalCluster;

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
    /// `ozone.client.sidecar.socket` and `OZONE_SIDECAR_SOCKET` (what the
    /// Hadoop FileSystem jar reads).
    #[arg(long, global = true, env = "OZONE_SIDECAR")]
    pub(crate) sidecar: Option<PathBuf>,
    /// Log lines on standard error: -v info, -vv debug (`RUST_LOG` also).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Read commands print one JSON document instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
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
        /// Print a config file for the role with every key it reads,
        /// commented out at its default.
        #[arg(long, conflicts_with = "markdown")]
        template: bool,
    },
    /// Prints the version of this build: release, source revision, and the
    /// Hadoop FileSystem scheme it serves.
    #[command(after_help = "Example: ozone version")]
    Version,
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

/// Space and namespace quotas to set (Ozone's `--space-quota`,
/// `--namespace-quota`).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct QuotaArgs {
    /// Bytes stored, replicas counted (e.g. 10GB, 1TB); 0 clears it.
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) space_quota: Option<u64>,
    /// Names: buckets of a volume; keys, files and directories of a bucket.
    #[arg(long)]
    pub(crate) namespace_quota: Option<u64>,
}

/// Which quotas to clear.
#[derive(clap::Args, Clone, Debug)]
#[group(required = true, multiple = true)]
pub(crate) struct ClearQuotaArgs {
    /// Clear the space quota.
    #[arg(long)]
    pub(crate) space_quota: bool,
    /// Clear the namespace quota.
    #[arg(long)]
    pub(crate) namespace_quota: bool,
}

impl ClearQuotaArgs {
    /// The quotas to set: 0 (none) for each one cleared.
    pub(crate) fn cleared(&self) -> QuotaArgs {
        QuotaArgs {
            space_quota: self.space_quota.then_some(0),
            namespace_quota: self.namespace_quota.then_some(0),
        }
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    use ozone_common::config::value::Value;
    ozone_common::config::Bytes::parse(s)
        .map(|b| b.0)
        .ok_or_else(|| format!("{s:?} is not a size (e.g. 500MB, 10GB, 1TB)"))
}

#[derive(Subcommand)]
pub(crate) enum VolumeCmd {
    /// Creates /VOLUME.
    #[command(
        after_help = "Example: ozone sh volume create --user team-a/hbase --space-quota 1TB /vol1"
    )]
    Create {
        path: String,
        /// Owner: namespace/serviceaccount (the caller when not given).
        #[arg(short = 'u', long = "user")]
        user: Option<String>,
        #[command(flatten)]
        quota: QuotaArgs,
    },
    /// Lists volumes.
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh volume ls")]
    Ls,
    /// A volume's creation time, quotas and use.
    #[command(after_help = "Example: ozone sh volume info /vol1")]
    Info { path: String },
    /// Deletes an empty volume.
    #[command(alias = "rm")]
    #[command(after_help = "Example: ozone sh volume delete /vol1")]
    Delete { path: String },
    /// Sets a volume's space quota (bytes of all its buckets) and namespace
    /// quota (number of buckets).
    #[command(after_help = "Example: ozone sh volume setquota --space-quota 10TB /vol1")]
    Setquota {
        path: String,
        #[command(flatten)]
        quota: QuotaArgs,
    },
    /// Clears a volume's quotas.
    #[command(after_help = "Example: ozone sh volume clrquota --space-quota /vol1")]
    Clrquota {
        path: String,
        #[command(flatten)]
        which: ClearQuotaArgs,
    },
    /// The owner and ACL entries.
    #[command(after_help = "Example: ozone sh volume getacl /vol1")]
    Getacl { path: String },
    /// Replaces every ACL entry (comma-separated TYPE:NAME:RIGHTS; types
    /// user (namespace/serviceaccount), group (namespace), world; rights
    /// r w c l d x y, a for all).
    #[command(
        after_help = "Example: ozone sh volume setacl -a user:team-a/hbase:rwl,group:team-a:r /vol1"
    )]
    Setacl {
        path: String,
        #[arg(short = 'a', long = "acls", alias = "acl")]
        acls: String,
    },
    /// Adds rights to ACL entries.
    #[command(after_help = "Example: ozone sh volume addacl -a user:team-b/reader:rl /vol1")]
    Addacl {
        path: String,
        #[arg(short = 'a', long = "acl", alias = "acls")]
        acls: String,
    },
    /// Removes rights from ACL entries.
    #[command(after_help = "Example: ozone sh volume removeacl -a user:team-b/reader:l /vol1")]
    Removeacl {
        path: String,
        #[arg(short = 'a', long = "acl", alias = "acls")]
        acls: String,
    },
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
        #[command(flatten)]
        quota: QuotaArgs,
    },
    /// Lists the buckets of /VOLUME.
    #[command(alias = "list")]
    #[command(after_help = "Example: ozone sh bucket ls /vol1")]
    Ls { path: String },
    /// A bucket's layout, creation time, quotas and use.
    #[command(after_help = "Example: ozone sh bucket info /vol1/bucket1")]
    Info { path: String },
    /// Deletes an empty bucket.
    #[command(alias = "rm")]
    #[command(after_help = "Example: ozone sh bucket delete /vol1/bucket1")]
    Delete { path: String },
    /// Sets a bucket's space quota (bytes, replicas counted) and namespace
    /// quota (keys, files and directories).
    #[command(
        after_help = "Example: ozone sh bucket setquota --space-quota 100GB --namespace-quota 1000000 /vol1/bucket1"
    )]
    Setquota {
        path: String,
        #[command(flatten)]
        quota: QuotaArgs,
    },
    /// Clears a bucket's quotas.
    #[command(after_help = "Example: ozone sh bucket clrquota --namespace-quota /vol1/bucket1")]
    Clrquota {
        path: String,
        #[command(flatten)]
        which: ClearQuotaArgs,
    },
    /// The owner and ACL entries.
    #[command(after_help = "Example: ozone sh bucket getacl /vol1/bucket1")]
    Getacl { path: String },
    /// Replaces every ACL entry (comma-separated TYPE:NAME:RIGHTS; types
    /// user (namespace/serviceaccount), group (namespace), world; rights
    /// r w c l d x y, a for all).
    #[command(
        after_help = "Example: ozone sh bucket setacl -a user:team-a/hbase:rwl,group:team-a:r /vol1/bucket1"
    )]
    Setacl {
        path: String,
        #[arg(short = 'a', long = "acls", alias = "acl")]
        acls: String,
    },
    /// Adds rights to ACL entries.
    #[command(
        after_help = "Example: ozone sh bucket addacl -a user:team-b/reader:rl /vol1/bucket1"
    )]
    Addacl {
        path: String,
        #[arg(short = 'a', long = "acl", alias = "acls")]
        acls: String,
    },
    /// Removes rights from ACL entries.
    #[command(
        after_help = "Example: ozone sh bucket removeacl -a user:team-b/reader:l /vol1/bucket1"
    )]
    Removeacl {
        path: String,
        #[arg(short = 'a', long = "acl", alias = "acls")]
        acls: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum KeyCmd {
    /// Writes FILE (`-`: standard input) to /VOLUME/BUCKET/KEY.
    #[command(after_help = "Example: ozone sh key put /vol1/bucket1/file.bin ./file.bin")]
    Put { path: String, file: PathBuf },
    /// Reads /VOLUME/BUCKET/KEY into FILE (a directory: FILE/KEY's last
    /// name; `-`: standard output). An existing file is kept unless
    /// `--force`; a failed read leaves no file behind.
    #[command(
        after_help = "Example: ozone --node node1 sh key get /vol1/bucket1/file.bin ./copy.bin"
    )]
    Get {
        path: String,
        file: PathBuf,
        /// Skip checksum verification for this read.
        #[arg(long)]
        no_verify: bool,
        /// Overwrite FILE if it exists.
        #[arg(long, short)]
        force: bool,
    },
    /// Writes /VOLUME/BUCKET/KEY to standard output.
    #[command(after_help = "Example: ozone sh key cat /vol1/bucket1/file.bin | sha256sum")]
    Cat {
        path: String,
        /// Skip checksum verification for this read.
        #[arg(long)]
        no_verify: bool,
    },
    /// Lists keys of /VOLUME/BUCKET (file-system buckets: files by full
    /// path), by name: SIZE and NAME, or more with `--long`.
    #[command(alias = "list")]
    #[command(
        after_help = "Example: ozone sh key ls --prefix logs/ --start logs/2026-12-01 --length 100 --long /vol1/bucket1"
    )]
    Ls {
        path: String,
        /// Only keys whose names start with this.
        #[arg(long, short, default_value = "")]
        prefix: String,
        /// Only keys after this name.
        #[arg(long, short, default_value = "")]
        start: String,
        /// At most this many keys (0: all).
        #[arg(long, short, default_value_t = 0)]
        length: u32,
        /// Replication, size, modification time and name.
        #[arg(long = "long")]
        long: bool,
    },
    /// Shows a key's size, times, checksum settings and block locations.
    #[command(after_help = "Example: ozone sh key info /vol1/bucket1/file.bin")]
    Info { path: String },
    /// Deletes a key.
    #[command(alias = "delete")]
    #[command(after_help = "Example: ozone sh key rm /vol1/bucket1/file.bin")]
    Rm { path: String },
    /// Prints the key's composite CRC (from block metadata, no data read).
    #[command(after_help = "Example: ozone sh key checksum /vol1/bucket1/file.bin")]
    Checksum { path: String },
    /// Renames key FROM to TO in bucket /VOLUME/BUCKET (TO must be free).
    #[command(after_help = "Example: ozone sh key rename /vol1/bucket1 old.bin new.bin")]
    Rename {
        bucket: String,
        from: String,
        to: String,
    },
    /// Copies key FROM to TO in bucket /VOLUME/BUCKET (data read and
    /// written again; TO is replaced).
    #[command(after_help = "Example: ozone sh key cp /vol1/bucket1 file.bin copy.bin")]
    Cp {
        bucket: String,
        from: String,
        to: String,
    },
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
        /// Datanode id, address, node, host or pod name.
        datanode: String,
        /// Accept it even when too few datanodes would stay in service for
        /// replication THREE (it then waits for more to join).
        #[arg(long)]
        force: bool,
    },
    /// Puts a datanode in maintenance: it may go away for a while without
    /// its replicas being copied (while enough others remain).
    #[command(after_help = "Example: ozone admin datanode maintenance ozone-datanode-1")]
    Maintenance {
        /// Datanode id, address, node, host or pod name.
        datanode: String,
    },
    /// Returns a datanode to service (ends decommission or maintenance).
    #[command(after_help = "Example: ozone admin datanode recommission ozone-datanode-3")]
    Recommission {
        /// Datanode id, address, node, host or pod name.
        datanode: String,
    },
    /// A datanode's health, operational state and the replicas still
    /// depending on it.
    #[command(after_help = "Example: ozone admin datanode status ozone-datanode-3")]
    Status {
        /// Datanode id, address, node, host or pod name.
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
        for w in conf.unknown_warnings() {
            crate::output::warn(w);
        }
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
        } else if conf.opt(&keys::CLIENT_SIDECAR_SOCKET)?.is_none()
            && let Ok(s) = std::env::var("OZONE_SIDECAR_SOCKET")
            && !s.is_empty()
        {
            conf.set_from(
                keys::CLIENT_SIDECAR_SOCKET.name,
                s,
                Source::Env("OZONE_SIDECAR_SOCKET"),
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
