//! Command line of the datanode process (`ozone-datanode`, `ozone datanode`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ozone_common::config::Conf;

use crate::config::{DatanodeConfig, host_name};
use ozone_common::config as keys;

/// Arguments of a datanode process.
#[derive(Debug, Args, Clone)]
pub struct DatanodeArgs {
    /// Config file of `key = value` lines (Ozone key names).
    #[arg(long)]
    pub conf: Option<PathBuf>,
    /// Config overrides, `key=value`.
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// Data directory (repeatable); else `hdds.datanode.dir`.
    #[arg(long = "data-dir")]
    pub data_dirs: Vec<PathBuf>,
    /// Metadata directory; else `ozone.metadata.dirs`.
    #[arg(long)]
    pub metadata_dir: Option<PathBuf>,
    /// gRPC listen address.
    #[arg(long, default_value = "0.0.0.0:9858")]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "0.0.0.0:9882")]
    pub http_addr: SocketAddr,
    /// Host advertised to the OM (default: POD_IP, bind IP or host name).
    #[arg(long, env = "POD_IP")]
    pub advertise_host: Option<String>,
    /// OM address, host:port.
    #[arg(long = "om", env = "OZONE_OM_ADDRESS")]
    pub om: String,
    /// Node name (default: NODE_NAME or the host name).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// File to write `grpc=ADDR http=ADDR id=ID` to once listening.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

/// Runs a datanode until SIGTERM or Ctrl-C.
pub async fn run(args: DatanodeArgs) -> anyhow::Result<()> {
    let mut conf = match &args.conf {
        Some(p) => Conf::load(p)?,
        None => Conf::new(),
    };
    conf.apply_overrides(&args.set)?;
    conf.warn_unknown();
    let data_dirs = if args.data_dirs.is_empty() {
        conf.opt(&keys::DATA_DIRS)?
            .context("no data directory: pass --data-dir or set hdds.datanode.dir")?
            .0
    } else {
        args.data_dirs.clone()
    };
    let metadata_dir = match &args.metadata_dir {
        Some(d) => d.clone(),
        None => conf
            .opt(&keys::METADATA_DIRS)?
            .context("no metadata directory: pass --metadata-dir or set ozone.metadata.dirs")?,
    };
    let node_name = args
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(host_name);
    let base = DatanodeConfig::for_dir(&metadata_dir, &args.om, &node_name, &conf)?;
    let cfg = DatanodeConfig {
        data_dirs,
        metadata_dir,
        grpc_bind: args.grpc_addr,
        http_bind: args.http_addr,
        advertise_host: args.advertise_host.clone().filter(|h| !h.is_empty()),
        ..base
    };
    let handle = crate::start(cfg).await?;
    if let Some(p) = &args.ready_file {
        let line = format!(
            "grpc={} http={} id={}",
            handle.grpc_addr, handle.http_addr, handle.id
        );
        ozone_process::server::write_ready_file(p, &line)?;
    }
    handle.until_signal("datanode").await;
    Ok(())
}
