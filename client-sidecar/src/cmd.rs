//! Command line of the sidecar process (`ozone-sidecar`, `ozone sidecar`).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use ozone_common::config::{self as keys, Conf};
use ozone_process::server;
use ozone_proto::sidecar_server::SidecarServer;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use crate::active::Active;
use crate::service::SidecarService;
use crate::state::State;

/// Arguments of a sidecar process.
#[derive(Debug, Args, Clone)]
pub struct SidecarArgs {
    /// Config file of `key = value` lines (mounted from a ConfigMap); the
    /// policy in it is reloaded when the file changes.
    #[arg(long)]
    pub conf: Option<PathBuf>,
    /// Config overrides, `key=value` (applied over the file on every reload).
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// OM address, host:port.
    #[arg(long = "om", env = "OZONE_OM_ADDRESS")]
    pub om: String,
    /// The application-facing gRPC socket (in the shared emptyDir).
    #[arg(long, env = "OZONE_SIDECAR_SOCKET")]
    pub socket: PathBuf,
    /// Also serve the API on this TCP address (keep it on localhost).
    #[arg(long)]
    pub tcp_addr: Option<SocketAddr>,
    /// The node's datanode socket directory (hostPath); else
    /// `ozone.domain.socket.path`.
    #[arg(long)]
    pub domain_socket_dir: Option<PathBuf>,
    /// Directory for pass-through relay sockets (in the shared emptyDir);
    /// none disables pass-through.
    #[arg(long)]
    pub passthrough_dir: Option<PathBuf>,
    /// HTTP address of /healthz, /readyz, /metrics and /policy.
    #[arg(long, default_value = "127.0.0.1:9890")]
    pub http_addr: SocketAddr,
    /// Node name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Longest wait on SIGTERM for in-flight requests and open streams.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// File to write `socket=PATH http=ADDR` to once serving.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    ozone_common::config::parse_duration(s).ok_or_else(|| format!("not a duration: {s}"))
}

/// The config: the file (if any), then `--set`, then the socket directory.
fn load(args: &SidecarArgs) -> anyhow::Result<Conf> {
    let mut conf = match &args.conf {
        Some(p) => Conf::load(p)?,
        None => Conf::new(),
    };
    conf.apply_overrides(&args.set)?;
    conf.warn_unknown();
    if let Some(d) = &args.domain_socket_dir {
        conf.set_from(
            keys::DOMAIN_SOCKET_PATH.name,
            d.display().to_string(),
            keys::Source::Flag("--domain-socket-dir"),
        );
    }
    Ok(conf)
}

fn bind_unix(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // A socket left by a killed sidecar: replace it.
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

/// An open stream with no request for this long no longer holds a drain.
const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// Runs a sidecar until SIGTERM or Ctrl-C, then drains: new work (opens,
/// creates, lookups) is refused, while in-flight requests and the streams
/// already open are served until the application closes them or stops
/// using them (up to the drain timeout).
pub async fn run(args: SidecarArgs) -> anyhow::Result<()> {
    let conf = load(&args)?;
    let node = args.node_name.clone().unwrap_or_default();
    let access = crate::peer::Access::new(
        conf.value(&keys::SIDECAR_ALLOWED_UIDS)?.0,
        conf.value(&keys::DOMAIN_SOCKET_ALLOWED_UIDS)?.0,
    );
    let state = State::new(Active::build(&args.om, Some(&node), &conf)?, node, access);
    let ready = Arc::new(AtomicBool::new(false));
    let mut registry = prometheus_client::registry::Registry::default();
    state.metrics.register(&mut registry);
    let st = state.clone();
    let policy_page: ozone_process::http::Page = Arc::new(move || {
        let p = st.policy();
        format!(
            "verify_checksum = {}\nallow_verify_override = {}\nshort_circuit = {}\npassthrough = {}\nnode_name = {}\nloaded_at = {}\n",
            p.verify_checksum,
            p.allow_verify_override,
            p.short_circuit,
            p.passthrough,
            p.node_name,
            p.loaded_at
        )
    });
    let http = ozone_process::http::serve_with(
        args.http_addr,
        ozone_process::http::HttpState {
            ready: ready.clone(),
            registry: Arc::new(registry),
        },
        vec![("/policy", policy_page)],
    )
    .await
    .with_context(|| format!("binding {}", args.http_addr))?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let svc = SidecarServer::new(SidecarService::new(state.clone()))
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let om = crate::namespace::OmPassThrough::new(state.clone());
    let unix = bind_unix(&args.socket)?;
    let data_socket = crate::data::socket_of(&args.socket);
    tokio::spawn(crate::data::serve(bind_unix(&data_socket)?, state.clone()));
    let mut servers = tokio::task::JoinSet::new();
    // Each application connection owns the streams it opens: they close
    // when it goes (crate::conn).
    let st = state.clone();
    let incoming = UnixListenerStream::new(unix).filter_map(move |c| match c {
        Ok(io) => match st.access.sidecar.admit(&io) {
            Ok(peer) => Some(Ok(crate::conn::AppConn::new(io, &st, peer))),
            Err(why) => {
                st.refused("grpc", &why);
                None
            }
        },
        Err(e) => Some(Err(e)),
    });
    servers.spawn(server::serve(
        server::grpc()
            .add_service(svc.clone())
            .add_service(om.clone()),
        incoming,
        stop_rx.clone(),
    ));
    let idle = conf.value(&keys::SIDECAR_STREAM_IDLE_TIMEOUT)?;
    tokio::spawn(reap_idle_loop(state.clone(), idle, stop_rx.clone()));
    let mut tcp_bound = None;
    if let Some(addr) = args.tcp_addr {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        tcp_bound = Some(l.local_addr()?);
        servers.spawn(server::serve(
            server::grpc().add_service(svc).add_service(om),
            TcpListenerStream::new(l),
            stop_rx.clone(),
        ));
    }
    if let (Some(app_dir), Some(dn_dir)) = (
        args.passthrough_dir.clone(),
        conf.opt(&keys::DOMAIN_SOCKET_PATH)?,
    ) {
        let st = state.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::relay::run(dn_dir, app_dir, st, stop).await {
                tracing::error!("pass-through relays stopped: {e}");
            }
        });
    }
    tokio::spawn(reload_loop(args.clone(), state.clone(), stop_rx.clone()));

    ready.store(true, Ordering::Release);
    if let Some(p) = &args.ready_file {
        let mut line = format!("socket={} http={http}", args.socket.display());
        if let Some(t) = tcp_bound {
            line.push_str(&format!(" tcp={t}"));
        }
        server::write_ready_file(p, &line)?;
    }
    tracing::info!(socket = %args.socket.display(), %http, policy = ?state.policy(), "sidecar serving");

    tokio::select! {
        _ = ozone_process::signal::shutdown() => {}
        r = servers.join_next() => {
            if let Some(Ok(Err(e))) = r {
                return Err(e).context("gRPC server stopped");
            }
        }
    }
    // Drain: refuse new work (opens, creates, lookups); serve the streams
    // already open until the application closes them, up to the timeout.
    tracing::info!(
        inflight = state.inflight(),
        open_streams = state.open_handles(),
        "sidecar draining"
    );
    ready.store(false, Ordering::Release);
    state.drain();
    let deadline = Instant::now() + args.drain_timeout;
    while !state.drained(DRAIN_IDLE) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while servers.join_next().await.is_some() {}
    })
    .await;
    let _ = std::fs::remove_file(&args.socket);
    let _ = std::fs::remove_file(&data_socket);
    tracing::info!("sidecar stopped");
    Ok(())
}

/// Re-reads the config file every second; a changed policy is put in force
/// for new streams. A bad file is logged and the old policy kept.
/// Closes streams left unused for `idle`, every tenth of it (at least 1 s,
/// at most a minute), until stopped.
async fn reap_idle_loop(
    state: Arc<State>,
    idle: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let every = (idle / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let n = state.reap_idle(idle);
        if n > 0 {
            tracing::info!(streams = n, idle = ?idle, "closed streams left idle");
        }
    }
}

async fn reload_loop(
    args: SidecarArgs,
    state: Arc<State>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = args.conf.as_ref().and_then(|p| std::fs::read(p).ok());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
        state.export_stats();
        let Some(path) = &args.conf else { continue };
        let now = std::fs::read(path).ok();
        if now == last {
            continue;
        }
        last = now;
        let conf = match load(&args) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("config {} not reloaded: {e:#}", path.display());
                continue;
            }
        };
        match Active::build(&args.om, args.node_name.as_deref(), &conf) {
            Ok(a) if a.same_policy(&state.active()) => continue,
            Ok(a) => {
                state.replace(a);
                tracing::info!(policy = ?state.policy(), "workload policy reloaded");
            }
            Err(e) => tracing::warn!("config {} not reloaded: {e}", path.display()),
        }
    }
}
