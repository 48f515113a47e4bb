//! Starting and stopping a datanode: storage, gRPC server, HTTP endpoint
//! and the registration/heartbeat loop with the OM.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ozone_process::http::HttpState;
use ozone_process::server::{self, BindError, Running};
use ozone_proto::datanode_server::DatanodeServer;
use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::{DatanodeDetails, HeartbeatRequest, RegisterDatanodeRequest};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::config::DatanodeConfig;
use crate::metrics::Metrics;
use crate::service::DatanodeService;
use crate::storage::{BlockStore, StorageError};

/// Why a datanode could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("datanode id file {path}: {source}")]
    Id {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid OM address {0:?}")]
    OmAddress(String),
    #[error("short-circuit socket: {0}")]
    ShortCircuit(#[from] crate::shortcircuit::ScStartError),
    #[error("block tokens: {0}")]
    Token(#[from] ozone_common::token::TokenError),
}

/// What a running datanode reports.
pub struct Datanode {
    /// Persistent datanode id.
    pub id: String,
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// The block store (for tests and tools).
    pub store: Arc<BlockStore>,
    /// The short-circuit socket, when enabled.
    pub socket_path: Option<std::path::PathBuf>,
}

/// A running datanode.
pub type DatanodeHandle = Running<Datanode>;

/// Reads the datanode id from `dir/datanode.id`, creating it the first time.
pub(crate) fn load_or_create_id(dir: &Path) -> Result<String, StartError> {
    let path = dir.join("datanode.id");
    let err = |source| StartError::Id {
        path: path.display().to_string(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Ok(_) | Err(_) => {
            std::fs::create_dir_all(dir).map_err(err)?;
            let id = uuid::Uuid::new_v4().to_string();
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &id).map_err(err)?;
            std::fs::rename(&tmp, &path).map_err(err)?;
            Ok(id)
        }
    }
}

fn advertise_host(cfg: &DatanodeConfig) -> String {
    if let Some(h) = &cfg.advertise_host {
        return h.clone();
    }
    if !cfg.grpc_bind.ip().is_unspecified() {
        return cfg.grpc_bind.ip().to_string();
    }
    crate::config::host_name()
}

/// Starts a datanode: opens storage, binds the ports and begins
/// registering with the OM.
pub async fn start(cfg: DatanodeConfig) -> Result<DatanodeHandle, StartError> {
    let id = load_or_create_id(&cfg.metadata_dir)?;
    let store = {
        let (dirs, meta) = (cfg.data_dirs.clone(), cfg.metadata_dir.clone());
        tokio::task::spawn_blocking(move || BlockStore::open(dirs, &meta))
            .await
            .map_err(|e| StorageError::Meta(e.to_string()))??
    };
    let store = Arc::new(store);
    let metrics = Arc::new(Metrics::default());
    metrics.used_bytes.set(store.used_bytes() as i64);
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    let ports = server::bind(
        cfg.http_bind,
        cfg.grpc_bind,
        HttpState {
            ready: ready.clone(),
            registry: Arc::new(registry),
        },
    )
    .await?;
    let (grpc_addr, http_addr) = (ports.grpc_addr, ports.http_addr);
    let om = tonic::transport::Endpoint::from_shared(format!("http://{}", cfg.om_address))
        .map_err(|_| StartError::OmAddress(cfg.om_address.clone()))?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(10));
    let om = ozone_common::tls::lazy_channel(om, cfg.tls.as_ref());

    let tokens = match &cfg.block_token_secret {
        Some(s) => Some(ozone_common::token::TokenSigner::new(s)?),
        None => None,
    };
    let sc_bound = match &cfg.short_circuit {
        Some(sc) => Some(crate::shortcircuit::bind(sc, &id)?),
        None => None,
    };
    let (shutdown, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let socket_path = sc_bound.as_ref().map(|(_, p)| p.clone());
    if let (Some((listener, path)), Some(sc)) = (sc_bound, cfg.short_circuit.clone()) {
        let ctx = Arc::new(crate::shortcircuit::ScContext {
            store: store.clone(),
            datanode_id: id.clone(),
            node_name: cfg.node_name.clone(),
            cfg: sc,
            tokens: tokens.clone(),
            metrics: metrics.clone(),
        });
        tracing::info!(socket = %path.display(), "short-circuit reads enabled");
        tasks.push(tokio::spawn(crate::shortcircuit::serve(
            listener,
            path,
            ctx,
            rx.clone(),
        )));
    }
    let max_read = (cfg.max_message_size as u64)
        .saturating_sub(64 << 10)
        .max(1 << 20);
    let scan_metrics = metrics.clone();
    let svc = DatanodeService::new(
        &id,
        store.clone(),
        metrics.clone(),
        cfg.verify_writes,
        max_read,
        tokens.clone(),
        Arc::new(crate::replication::Replicator::new(
            store.clone(),
            metrics.clone(),
            cfg.replication,
            max_read,
            cfg.tls.clone(),
        )),
    );
    // Calls to the OM prove they come from this datanode when the cluster
    // has a secret.
    let creds = match &tokens {
        Some(t) => ozone_common::credentials::Credentials::service(t.clone(), "datanode", &id),
        None => ozone_common::credentials::Credentials::None,
    };
    let om = creds.wrap(om);
    let dn = DatanodeServer::new(svc)
        .max_decoding_message_size(cfg.max_message_size)
        .max_encoding_message_size(cfg.max_message_size);
    tasks.push(server::spawn_tcp(
        "datanode",
        server::grpc().add_service(dn),
        ports.grpc,
        cfg.tls.clone(),
        rx.clone(),
    ));
    let details = DatanodeDetails {
        id: id.clone(),
        address: format!("{}:{}", advertise_host(&cfg), grpc_addr.port()),
        node_name: cfg.node_name.clone(),
        http_address: http_addr.to_string(),
        // The pod name in Kubernetes (what the operator decommissions by).
        host_name: std::env::var("POD_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(crate::config::host_name),
        ..Default::default()
    };
    tracing::info!(id = %id, grpc = %grpc_addr, http = %http_addr, node = %cfg.node_name, "datanode started");
    if let Some(scan) = cfg.scan {
        tasks.push(tokio::spawn(crate::scanner::run(
            store.clone(),
            scan,
            OzoneManagerClient::new(om.clone()),
            id.clone(),
            scan_metrics,
            rx.clone(),
        )));
    }
    tasks.push(tokio::spawn(heartbeat_loop(
        OzoneManagerClient::new(om),
        details,
        store.clone(),
        (cfg.heartbeat_interval, cfg.full_report_interval),
        ready,
        rx,
    )));
    Ok(Running::new(
        Datanode {
            id,
            grpc_addr,
            http_addr,
            store,
            socket_path,
        },
        shutdown,
        tasks,
    ))
}

/// Registers, then heartbeats with replica reports: a full one after each
/// registration and every `full_every`, the changes since in between. A
/// report the OM did not take is sent again.
async fn heartbeat_loop(
    mut om: OzoneManagerClient<ozone_common::credentials::AuthChannel>,
    mut details: DatanodeDetails,
    store: Arc<BlockStore>,
    (interval, full_every): (Duration, Duration),
    ready: Arc<AtomicBool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut registered = false;
    let mut last_full: Option<tokio::time::Instant> = None;
    loop {
        details.capacity = store.capacity_bytes();
        details.used = store.used_bytes();
        if !registered {
            match om
                .register_datanode(RegisterDatanodeRequest {
                    datanode: Some(details.clone()),
                })
                .await
            {
                Ok(_) => {
                    registered = true;
                    last_full = None;
                    ready.store(true, Ordering::Release);
                    tracing::info!(id = %details.id, address = %details.address, "registered with the OM");
                }
                Err(e) => tracing::warn!("register with the OM failed: {}", e.message()),
            }
        } else {
            let full = last_full.is_none_or(|t| t.elapsed() >= full_every);
            let report = if full {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.full_report()).await {
                    Ok(Ok(r)) => Some(r),
                    Ok(Err(e)) => {
                        tracing::warn!("listing replicas for the report failed: {e}");
                        None
                    }
                    Err(_) => None,
                }
            } else {
                Some(store.reports().take())
            };
            let sent_full = report.as_ref().is_some_and(|r| r.full);
            match om
                .heartbeat(HeartbeatRequest {
                    id: details.id.clone(),
                    capacity: details.capacity,
                    used: details.used,
                    report: report.clone(),
                })
                .await
            {
                Ok(r) if r.get_ref().reregister => registered = false,
                Ok(_) => {
                    if sent_full {
                        last_full = Some(tokio::time::Instant::now());
                    }
                }
                Err(e) => {
                    tracing::warn!("heartbeat failed: {}", e.message());
                    // An incremental report is sent again; a full one is
                    // made again (the changes were folded into it).
                    if let Some(r) = report.filter(|r| !r.full) {
                        store.reports().put_back(r);
                    }
                }
            }
        }
        let delay = if registered {
            interval
        } else {
            interval.min(Duration::from_millis(500))
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
