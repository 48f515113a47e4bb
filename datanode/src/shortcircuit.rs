//! The short-circuit server: a UNIX domain socket in the node's shared
//! socket directory over which local clients get a committed block's
//! metadata and its file descriptor (read-only), guarded by a slot in the
//! connection's shared-memory segment (see [`crate::slots`]).
//!
//! Per connection: Handshake first (answered with the datanode id, node
//! name, protocol version, features and the segment's read-only fd), then
//! any number of GetBlock and Release requests, one at a time. Closing the
//! connection clears and frees its slots, so a lost reply leaks nothing.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ozone_common::shortcircuit::{
    self as sc, CMD_ERROR, CMD_GET_BLOCK, CMD_HANDSHAKE, CMD_RELEASE, FrameError, RESPONSE,
    SLOT_SIZE,
};
use ozone_common::token::TokenSigner;
use ozone_proto::*;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

use crate::metrics::{Metrics, ReasonLabel};
use crate::slots::{GrantError, Segment};
use crate::socket_path::{self, PathSecurityError};
use crate::storage::{BlockStore, StorageError};
use crate::uid_limit::UidLimit;
use ozone_common::block_key::key_of;
use ozone_common::config::keys;

/// Largest request body accepted on the socket.
const MAX_REQUEST: u32 = 64 << 10;
/// Time a new connection has to send its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Short-circuit settings.
#[derive(Debug, Clone)]
pub struct ShortCircuitConfig {
    /// Socket directory (`ozone.domain.socket.path`).
    pub dir: PathBuf,
    /// Skip the path security check (development only).
    pub skip_security_check: bool,
    /// Concurrent connections served; more are closed at once.
    pub max_connections: usize,
    /// Concurrent connections served per peer uid.
    pub max_connections_per_uid: usize,
    /// Slots (so open block fds) per connection.
    pub slots_per_connection: u32,
    /// Peer uids allowed (empty: any).
    pub allowed_uids: Vec<u32>,
    /// Peer gids allowed (empty: any).
    pub allowed_gids: Vec<u32>,
}

/// Why the short-circuit server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ScStartError {
    #[error("{0}")]
    Path(#[from] PathSecurityError),
    #[error("cannot create socket {path}: {source}")]
    Bind {
        path: String,
        source: std::io::Error,
    },
}

/// Socket file of datanode `id` in `dir`.
pub(crate) fn socket_file(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("dn-{id}.sock"))
}

/// Checks the directory and binds the datanode's socket in it.
pub(crate) fn bind(
    cfg: &ShortCircuitConfig,
    id: &str,
) -> Result<(UnixListener, PathBuf), ScStartError> {
    let err = |path: &Path| {
        let path = path.display().to_string();
        move |source| ScStartError::Bind { path, source }
    };
    if !cfg.dir.exists() {
        std::fs::create_dir_all(&cfg.dir).map_err(err(&cfg.dir))?;
        std::fs::set_permissions(&cfg.dir, std::fs::Permissions::from_mode(0o755))
            .map_err(err(&cfg.dir))?;
    }
    if cfg.skip_security_check {
        tracing::warn!(dir = %cfg.dir.display(), "socket path security check skipped (development only)");
    } else {
        socket_path::check(&cfg.dir)?;
    }
    let path = socket_file(&cfg.dir, id);
    match std::fs::remove_file(&path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(&path)(e)),
    }
    let listener = UnixListener::bind(&path).map_err(err(&path))?;
    // Access is controlled by the directory; the socket itself is open.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(err(&path))?;
    Ok((listener, path))
}

/// What every connection handler shares.
pub(crate) struct ScContext {
    /// Block store (and its slot registry).
    pub store: Arc<BlockStore>,
    /// This datanode's id.
    pub datanode_id: String,
    /// Node it runs on.
    pub node_name: String,
    /// Settings.
    pub cfg: ShortCircuitConfig,
    /// Token checker when block tokens are on.
    pub tokens: Option<TokenSigner>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// Accepts connections until `stop` turns true; removes the socket then.
pub(crate) async fn serve(
    listener: UnixListener,
    path: PathBuf,
    ctx: Arc<ScContext>,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(ctx.cfg.max_connections.max(1)));
    let per_uid = UidLimit::new(ctx.cfg.max_connections_per_uid);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("short-circuit accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
        let slot = match per_uid.take(uid) {
            Ok(s) => s,
            Err(n) => {
                let m = format!(
                    "uid {uid} has {n} short-circuit connections open, the most one user may \
                     ({})",
                    keys::DOMAIN_SOCKET_MAX_CONNECTIONS_PER_UID.name
                );
                refuse_busy(&ctx, &stream, "uid_limit", &m).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let m = format!(
                "{} short-circuit connections are open, the most this datanode serves ({})",
                ctx.cfg.max_connections,
                keys::DOMAIN_SOCKET_MAX_CONNECTIONS.name
            );
            refuse_busy(&ctx, &stream, "connection_limit", &m).await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            ctx.metrics.sc_connections.inc();
            handle(&ctx, stream).await;
            ctx.metrics.sc_connections.dec();
            drop(permit);
            drop(slot);
        });
    }
    let _ = std::fs::remove_file(&path);
}

/// Refuses a connection for a limit (`reason`, the metric's label): counted,
/// logged (the first refusal and every hundredth, so a flood does not flood
/// the log) and answered with a Busy refusal, which sends the client to gRPC.
async fn refuse_busy(ctx: &ScContext, stream: &UnixStream, reason: &'static str, message: &str) {
    let n = ctx.metrics.sc_refused(reason);
    if n % 100 == 1 {
        tracing::warn!(refused = n, "short-circuit connection refused: {message}");
    }
    let _ = send_error(stream, ScRefusal::Busy, message).await;
}

async fn send_error(
    stream: &UnixStream,
    refusal: ScRefusal,
    message: &str,
) -> Result<(), FrameError> {
    sc::send(
        stream,
        CMD_ERROR | RESPONSE,
        &ScError {
            message: message.into(),
            refusal: refusal as i32,
        },
        &[],
    )
    .await
}

fn peer_allowed(ctx: &ScContext, stream: &UnixStream) -> Result<(), String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("peer credentials: {e}"))?;
    let (uid, gid) = (cred.uid(), cred.gid());
    tracing::debug!(uid, gid, pid = ?cred.pid(), "short-circuit connection");
    if !ctx.cfg.allowed_uids.is_empty() && !ctx.cfg.allowed_uids.contains(&uid) {
        return Err(format!("uid {uid} is not allowed short-circuit reads"));
    }
    if !ctx.cfg.allowed_gids.is_empty() && !ctx.cfg.allowed_gids.contains(&gid) {
        return Err(format!("gid {gid} is not allowed short-circuit reads"));
    }
    Ok(())
}

async fn handle(ctx: &ScContext, stream: UnixStream) {
    if let Err(m) = peer_allowed(ctx, &stream) {
        tracing::warn!("{m}");
        ctx.metrics.sc_refused("peer_not_allowed");
        let _ = send_error(&stream, ScRefusal::Denied, &m).await;
        return;
    }
    let first =
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, sc::recv_limited(&stream, MAX_REQUEST)).await
        {
            Ok(Ok(f)) if f.cmd == CMD_HANDSHAKE => f,
            Ok(Ok(f)) => {
                let _ = send_error(
                    &stream,
                    ScRefusal::Denied,
                    &format!("expected a handshake, got command {}", f.cmd),
                )
                .await;
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!("short-circuit handshake failed: {e}");
                let _ = send_error(&stream, ScRefusal::Denied, &e.to_string()).await;
                return;
            }
            Err(_) => return,
        };
    let client = first
        .decode::<ScHandshakeRequest>()
        .map(|h| h.client_name)
        .unwrap_or_default();
    let seg = match Segment::new(ctx.cfg.slots_per_connection) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            let _ = send_error(
                &stream,
                ScRefusal::Error,
                &format!("datanode cannot create slots: {e}"),
            )
            .await;
            return;
        }
    };
    let ro = match seg.read_only_fd() {
        Ok(fd) => fd,
        Err(e) => {
            let _ = send_error(
                &stream,
                ScRefusal::Error,
                &format!("datanode cannot share slots: {e}"),
            )
            .await;
            return;
        }
    };
    let slots = ctx.store.slots().clone();
    let conn = slots.add_connection(seg.clone());
    let hello = ScHandshakeResponse {
        datanode_id: ctx.datanode_id.clone(),
        protocol_version: sc::VERSION as u32,
        features: vec!["fd".into(), "slots".into()],
        node_name: ctx.node_name.clone(),
        slot_count: seg.slots(),
        slot_size: SLOT_SIZE as u32,
    };
    let ok = sc::send(&stream, CMD_HANDSHAKE | RESPONSE, &hello, &[ro.as_raw_fd()]).await;
    drop(ro);
    if ok.is_ok() {
        tracing::debug!(client = %client, conn, "short-circuit client connected");
        serve_requests(ctx, &stream, conn).await;
    }
    slots.remove_connection(conn);
    ctx.metrics.sc_slots.set(slots.in_use() as i64);
}

async fn serve_requests(ctx: &ScContext, stream: &UnixStream, conn: u64) {
    loop {
        let frame = match sc::recv_limited(stream, MAX_REQUEST).await {
            Ok(f) => f,
            Err(FrameError::Closed) => return,
            Err(e) => {
                ctx.metrics.sc_refused("bad_frame");
                let _ = send_error(stream, ScRefusal::Denied, &e.to_string()).await;
                return;
            }
        };
        let sent = match frame.cmd {
            CMD_GET_BLOCK => match frame.decode::<ScGetBlockRequest>() {
                Ok(req) => get_block(ctx, stream, conn, req).await,
                Err(e) => {
                    let _ = send_error(stream, ScRefusal::Denied, &e.to_string()).await;
                    return;
                }
            },
            CMD_RELEASE => match frame.decode::<ScReleaseRequest>() {
                Ok(req) => {
                    ctx.store.slots().release(conn, req.slot);
                    sc::send(stream, CMD_RELEASE | RESPONSE, &ScReleaseResponse {}, &[]).await
                }
                Err(e) => {
                    let _ = send_error(stream, ScRefusal::Denied, &e.to_string()).await;
                    return;
                }
            },
            other => {
                ctx.metrics.sc_refused("bad_command");
                let _ = send_error(
                    stream,
                    ScRefusal::Denied,
                    &format!("unknown command {other}"),
                )
                .await;
                return;
            }
        };
        ctx.metrics.sc_slots.set(ctx.store.slots().in_use() as i64);
        if sent.is_err() {
            return;
        }
    }
}

/// Answers a GetBlock with a refusal and its reason.
async fn refuse(
    stream: &UnixStream,
    refusal: ScRefusal,
    reason: impl Into<String>,
) -> Result<(), FrameError> {
    let resp = ScGetBlockResponse {
        granted: false,
        reason: reason.into(),
        refusal: refusal as i32,
        ..Default::default()
    };
    sc::send(stream, CMD_GET_BLOCK | RESPONSE, &resp, &[]).await
}

async fn get_block(
    ctx: &ScContext,
    stream: &UnixStream,
    conn: u64,
    req: ScGetBlockRequest,
) -> Result<(), FrameError> {
    let Some(id) = req.block else {
        return refuse(stream, ScRefusal::Denied, "missing block id").await;
    };
    if let Some(t) = &ctx.tokens
        && let Err(e) = t.verify(&req.token, &id, "READ", ozone_common::now_ms())
    {
        ctx.metrics.sc_refused("token");
        return refuse(stream, ScRefusal::Token, e.to_string()).await;
    }
    let key = key_of(&id);
    // The slot is registered before the block is looked up, so a deletion
    // racing with this grant either clears the slot or is seen here.
    let slot = match ctx.store.slots().grant(conn, key) {
        Ok(s) => s,
        Err(e) => {
            let (label, refusal) = match e {
                GrantError::Deleted(..) => ("deleted", ScRefusal::Deleted),
                _ => ("no_slot", ScRefusal::NoSlot),
            };
            ctx.metrics.sc_refused(label);
            return refuse(stream, refusal, e.to_string()).await;
        }
    };
    let store = ctx.store.clone();
    let want_fd = req.want_fd;
    let opened = tokio::task::spawn_blocking(move || {
        let b = store.committed_block(&id)?;
        if !b.data.committed {
            // Synced but still being written: its last window may be
            // rewritten, so it is read over gRPC only.
            return Err(StorageError::NotCommitted(id.container_id, id.local_id));
        }
        let file = if want_fd {
            Some(
                std::fs::File::open(&b.path).map_err(|source| StorageError::Io {
                    path: b.path.display().to_string(),
                    source,
                })?,
            )
        } else {
            None
        };
        Ok::<_, StorageError>((b, file))
    })
    .await;
    let (b, file) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            ctx.store.slots().release(conn, slot);
            let (label, refusal) = match e {
                StorageError::NotFound(..) => ("not_found", ScRefusal::NotFound),
                StorageError::NotCommitted(..) => ("not_committed", ScRefusal::NotCommitted),
                _ => ("error", ScRefusal::Error),
            };
            ctx.metrics.sc_refused(label);
            return refuse(stream, refusal, e.to_string()).await;
        }
        Err(e) => {
            ctx.store.slots().release(conn, slot);
            return refuse(stream, ScRefusal::Error, e.to_string()).await;
        }
    };
    let resp = ScGetBlockResponse {
        granted: true,
        reason: String::new(),
        refusal: ScRefusal::Unspecified as i32,
        block: Some(b.data.clone()),
        slot,
    };
    let fds: Vec<i32> = file.iter().map(|f| f.as_raw_fd()).collect();
    let r = sc::send(stream, CMD_GET_BLOCK | RESPONSE, &resp, &fds).await;
    if r.is_ok() {
        ctx.metrics.sc_opens.inc();
    } else {
        ctx.store.slots().release(conn, slot);
    }
    r
}

/// Label helper for refusal counters.
impl Metrics {
    /// Counts a short-circuit refusal by reason; the count before it.
    pub(crate) fn sc_refused(&self, reason: &'static str) -> u64 {
        self.sc_refusals
            .get_or_create(&ReasonLabel { reason })
            .inc()
            + 1
    }
}
