//! Command line of the OM process (`ozone-om`, `ozone om`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use ozone_common::config::Conf;

use crate::server::OmConfig;

/// Arguments of an OM process.
#[derive(Debug, Args, Clone)]
pub struct OmArgs {
    /// Config file of `key = value` lines (Ozone key names).
    #[arg(long)]
    pub conf: Option<PathBuf>,
    /// Config overrides, `key=value`.
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// Metadata directory (the OM database lives here).
    #[arg(long)]
    pub metadata_dir: PathBuf,
    /// gRPC listen address.
    #[arg(long, default_value = "0.0.0.0:9862")]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "0.0.0.0:9874")]
    pub http_addr: SocketAddr,
    /// File to write `grpc=ADDR http=ADDR` to once listening.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

/// Runs the OM until SIGTERM or Ctrl-C.
pub async fn run(args: OmArgs) -> anyhow::Result<()> {
    let mut conf = match &args.conf {
        Some(p) => Conf::load(p)?,
        None => Conf::new(),
    };
    conf.apply_overrides(&args.set)?;
    conf.warn_unknown();
    let cfg = OmConfig {
        grpc_bind: args.grpc_addr,
        http_bind: args.http_addr,
        ..OmConfig::for_dir(args.metadata_dir.clone(), &conf)?
    };
    let handle = crate::server::start(cfg).await?;
    if let Some(p) = &args.ready_file {
        let line = format!("grpc={} http={}", handle.grpc_addr, handle.http_addr);
        ozone_process::server::write_ready_file(p, &line)?;
    }
    handle.until_signal("OM").await;
    Ok(())
}
