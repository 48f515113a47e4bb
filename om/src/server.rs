//! Starting and stopping the OM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ozone_common::config::{self as keys, Conf, ConfigError};
use ozone_process::http::HttpState;
use ozone_process::server::{self, BindError, Running};
use ozone_proto::ozone_manager_server::OzoneManagerServer;
use prometheus_client::registry::Registry as PromRegistry;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::service::{OmService, OmSettings};
use crate::store::{OmError, OmStore};

/// Everything the OM needs to start.
#[derive(Debug, Clone)]
pub struct OmConfig {
    /// Directory of the OM database.
    pub metadata_dir: PathBuf,
    /// gRPC listen address.
    pub grpc_bind: SocketAddr,
    /// HTTP listen address.
    pub http_bind: SocketAddr,
    /// Block size for new blocks.
    pub block_size: u64,
    /// Silence after which a datanode is stale (no new blocks).
    pub stale_after: Duration,
    /// Silence after which a datanode is dead.
    pub dead_after: Duration,
    /// Period of the block deletion service.
    pub deletion_interval: Duration,
    /// Largest gRPC message.
    pub max_message_size: usize,
    /// Block-token secret (tokens issued when set).
    pub block_token_secret: Option<Vec<u8>>,
    /// Lifetime of issued block tokens.
    pub block_token_expiry: Duration,
    /// The replication manager's settings.
    pub replication: crate::replication::ReplicationConfig,
    /// When abandoned write sessions are cleaned up.
    pub open_keys: crate::open_keys::OpenKeyCleanup,
    /// Authentication and ACLs (`ozone.security.enabled`), when on.
    pub security: Option<SecurityConfig>,
    /// TLS on the gRPC port and to datanodes.
    pub tls: Option<ozone_common::tls::Tls>,
}

/// How the OM authenticates callers when security is on.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// Static client tokens (else the API server's TokenReview).
    pub token_file: Option<PathBuf>,
    /// Audience of reviewed tokens.
    pub audience: String,
    /// Admin identities.
    pub admins: Vec<String>,
    /// Namespaces whose ServiceAccounts are admins.
    pub admin_groups: Vec<String>,
}

impl OmConfig {
    /// Settings for an OM in `dir` on loopback with free ports, other
    /// values from `conf`.
    pub fn for_dir(dir: PathBuf, conf: &Conf) -> Result<Self, ConfigError> {
        Ok(Self {
            metadata_dir: dir,
            grpc_bind: "127.0.0.1:0".parse().expect("addr"),
            http_bind: "127.0.0.1:0".parse().expect("addr"),
            block_size: conf.value(&keys::BLOCK_SIZE)?.0,
            stale_after: conf.value(&keys::STALE_NODE_INTERVAL)?,
            dead_after: conf.value(&keys::DEAD_NODE_INTERVAL)?,
            deletion_interval: conf.value(&keys::BLOCK_DELETING_INTERVAL)?,
            max_message_size: conf.value(&keys::MAX_MESSAGE_SIZE)?.0 as usize,
            block_token_secret: conf.block_token_secret()?,
            block_token_expiry: conf.value(&keys::BLOCK_TOKEN_EXPIRY)?,
            open_keys: crate::open_keys::OpenKeyCleanup {
                interval: conf.value(&keys::OPEN_KEY_CLEANUP_INTERVAL)?,
                expire: conf.value(&keys::OPEN_KEY_EXPIRE)?,
                lease_hard_limit: conf.value(&keys::LEASE_HARD_LIMIT)?,
            },
            security: if conf.value(&keys::SECURITY_ENABLED)? {
                Some(SecurityConfig {
                    token_file: conf.opt(&keys::TOKEN_AUTH_FILE)?,
                    audience: conf.value(&keys::TOKEN_AUDIENCE)?,
                    admins: conf.value(&keys::ADMINISTRATORS)?.0,
                    admin_groups: conf.value(&keys::ADMINISTRATORS_GROUPS)?.0,
                })
            } else {
                None
            },
            tls: conf.tls(true)?,
            replication: crate::replication::ReplicationConfig {
                interval: conf.value(&keys::REPLICATION_INTERVAL)?,
                limit: conf.value(&keys::REPLICATION_LIMIT)?.max(1) as usize,
                timeout: conf.value(&keys::REPLICATION_TIMEOUT)?,
                maintenance_minimum: conf.value(&keys::MAINTENANCE_REPLICA_MINIMUM)?.clamp(1, 3)
                    as u32,
                // Reports go with heartbeats: a few of them.
                report_grace: conf.value(&keys::STALE_NODE_INTERVAL)?,
            },
        })
    }
}

/// Why the OM could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("OM store: {0}")]
    Store(#[from] OmError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("invalid setting: {0}")]
    Invalid(String),
}

/// What a running OM reports.
pub struct Om {
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
}

/// A running OM.
pub type OmHandle = Running<Om>;

/// Starts the OM.
pub async fn start(cfg: OmConfig) -> Result<OmHandle, StartError> {
    if cfg.block_size == 0 {
        return Err(StartError::Invalid(format!(
            "{} must be positive",
            keys::BLOCK_SIZE.name
        )));
    }
    let path = cfg.metadata_dir.join("om.redb");
    let store = tokio::task::spawn_blocking(move || OmStore::open(&path))
        .await
        .map_err(OmError::from)??;
    let store = Arc::new(store);
    let registry = Arc::new(Registry::new(cfg.stale_after, cfg.dead_after));
    {
        let s = store.clone();
        let known = tokio::task::spawn_blocking(move || s.datanodes())
            .await
            .map_err(OmError::from)??;
        for d in known {
            if let Ok(op) = ozone_proto::OperationalState::try_from(d.operational_state)
                && op != ozone_proto::OperationalState::Unspecified
            {
                registry.set_operational(&d.id, op);
            }
        }
    }
    let metrics = Arc::new(Metrics::default());
    let mut prom = PromRegistry::default();
    metrics.register(&mut prom);
    let ready = Arc::new(AtomicBool::new(false));
    let ports = server::bind(
        cfg.http_bind,
        cfg.grpc_bind,
        HttpState {
            ready: ready.clone(),
            registry: Arc::new(prom),
        },
    )
    .await?;
    let (grpc_addr, http_addr) = (ports.grpc_addr, ports.http_addr);
    let tokens = match &cfg.block_token_secret {
        Some(s) => Some((
            ozone_common::token::TokenSigner::new(s)
                .map_err(|e| StartError::Invalid(e.to_string()))?,
            cfg.block_token_expiry,
        )),
        None => None,
    };
    let auth = match &cfg.security {
        None => None,
        Some(sec) => {
            let Some((signer, _)) = &tokens else {
                return Err(StartError::Invalid(format!(
                    "{} needs {} and its secret: datanodes prove who they are with it",
                    keys::SECURITY_ENABLED.name,
                    keys::BLOCK_TOKEN_ENABLED.name
                )));
            };
            for a in &sec.admins {
                if a != "*" {
                    crate::auth::acl::check_identity(a).map_err(|e| {
                        StartError::Invalid(format!("{}: {e}", keys::ADMINISTRATORS.name))
                    })?;
                }
            }
            let source = match &sec.token_file {
                Some(f) => {
                    if !f.is_file() {
                        return Err(StartError::Invalid(format!(
                            "{}: {} is not a file",
                            keys::TOKEN_AUTH_FILE.name,
                            f.display()
                        )));
                    }
                    crate::auth::TokenSource::File(crate::auth::StaticTokens::new(f.clone()))
                }
                None => crate::auth::TokenSource::Review(Box::new(
                    crate::auth::TokenReviewer::from_environment(sec.audience.clone())
                        .await
                        .map_err(|e| {
                            StartError::Invalid(format!(
                                "{} is on without {}, so tokens go to the Kubernetes API \
                                 server, which cannot be reached: {e}",
                                keys::SECURITY_ENABLED.name,
                                keys::TOKEN_AUTH_FILE.name
                            ))
                        })?,
                )),
            };
            Some(Arc::new(crate::auth::Authenticator::new(
                source,
                signer.clone(),
                sec.admins.clone(),
                sec.admin_groups.clone(),
            )))
        }
    };
    // OM commands to datanodes are signed with the block-token secret.
    let command_signer = tokens.as_ref().map(|(s, _)| s.clone());
    let replicas = Arc::new(crate::replica_map::ReplicaMap::default());
    let channels = Arc::new(crate::dn_channels::DatanodeChannels::new(cfg.tls.clone()));
    let replication = Arc::new(crate::replication::ReplicationManager::new(
        store.clone(),
        registry.clone(),
        replicas.clone(),
        metrics.clone(),
        cfg.replication,
        tokens.clone(),
        channels.clone(),
    ));
    let svc = OmService::new(
        store.clone(),
        registry.clone(),
        metrics.clone(),
        OmSettings {
            block_size: cfg.block_size,
            tokens,
            auth,
        },
        replicas,
        replication.clone(),
        Arc::new(crate::bad_reports::BadReports::new(
            store.clone(),
            registry.clone(),
            channels.clone(),
            metrics.clone(),
            command_signer.clone(),
        )),
    );
    let (shutdown, rx) = watch::channel(false);
    let om = OzoneManagerServer::new(svc)
        .max_decoding_message_size(cfg.max_message_size)
        .max_encoding_message_size(cfg.max_message_size);
    let grpc = server::spawn_tcp(
        "OM",
        server::grpc().add_service(om),
        ports.grpc,
        cfg.tls.clone(),
        rx.clone(),
    );
    let recovery = replication.clone();
    let replicator = tokio::spawn(replication.run(rx.clone()));
    let cleaner = tokio::spawn(crate::open_keys::run(
        store.clone(),
        cfg.open_keys,
        metrics.clone(),
        recovery,
        rx.clone(),
    ));
    let deleter = tokio::spawn(crate::deletion::run(
        store,
        registry,
        metrics,
        channels,
        command_signer,
        cfg.deletion_interval,
        rx,
    ));
    ready.store(true, Ordering::Release);
    tracing::info!(grpc = %grpc_addr, http = %http_addr, "OM started");
    Ok(Running::new(
        Om {
            grpc_addr,
            http_addr,
        },
        shutdown,
        vec![grpc, deleter, replicator, cleaner],
    ))
}
