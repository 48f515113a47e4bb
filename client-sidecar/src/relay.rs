//! Descriptor pass-through: for each datanode socket in the node's socket
//! directory the sidecar listens on a socket of the same name in a directory
//! the application can see (the shared emptyDir), and relays the
//! short-circuit protocol frame by frame, descriptors included.
//!
//! The application's client then reads block files itself at local-disk
//! speed, with no hop through the sidecar, while invalidation keeps
//! working: the slot segment it maps is the datanode's own, so the datanode
//! clearing a slot's VALID bit stops the application's reads. Only the
//! sidecar mounts the hostPath; the application sees the relay sockets.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ozone_common::shortcircuit::{self as sc, CMD_ERROR, RESPONSE};
use tokio::net::{UnixListener, UnixStream};

use crate::metrics::PassLabels;
use crate::state::State;

/// Keeps relays for every `*.sock` in `dn_dir` under `app_dir`, rescanning
/// every second, until `stop` turns true.
pub(crate) async fn run(
    dn_dir: PathBuf,
    app_dir: PathBuf,
    state: Arc<State>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(&app_dir)?;
    std::fs::set_permissions(&app_dir, std::fs::Permissions::from_mode(0o755))?;
    let mut relayed = std::collections::HashSet::new();
    loop {
        if let Ok(entries) = std::fs::read_dir(&dn_dir) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(n) = name.to_str() else { continue };
                if !n.ends_with(".sock") || relayed.contains(n) {
                    continue;
                }
                let at = app_dir.join(n);
                let _ = std::fs::remove_file(&at);
                match UnixListener::bind(&at) {
                    Ok(l) => {
                        // Access is governed by the directory, as for the
                        // datanode's own sockets.
                        let _ =
                            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o666));
                        tracing::info!(socket = %at.display(), "pass-through relay listening");
                        relayed.insert(n.to_string());
                        tokio::spawn(accept(l, e.path(), state.clone()));
                    }
                    Err(err) => tracing::warn!("relay socket {}: {err}", at.display()),
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => {
                for n in &relayed {
                    let _ = std::fs::remove_file(app_dir.join(n));
                }
                return Ok(());
            }
        }
    }
}

async fn accept(l: UnixListener, dn: PathBuf, state: Arc<State>) {
    loop {
        match l.accept().await {
            Ok((app, _)) => match state.access.relay.admit(&app) {
                Ok(_) => {
                    tokio::spawn(relay(app, dn.clone(), state.clone()));
                }
                Err(why) => state.refused("relay", &why),
            },
            Err(e) => {
                tracing::warn!("pass-through accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn refuse(app: &UnixStream, refusal: ozone_proto::ScRefusal, why: String, state: &State) {
    state
        .metrics
        .passthrough
        .get_or_create(&PassLabels { result: "refused" })
        .inc();
    // The application's client reads this as a refusal and uses gRPC.
    let _ = sc::send(
        app,
        CMD_ERROR | RESPONSE,
        &ozone_proto::ScError {
            message: why,
            refusal: refusal as i32,
        },
        &[],
    )
    .await;
}

/// Relays one application connection to the datanode at `dn`.
async fn relay(app: UnixStream, dn: PathBuf, state: Arc<State>) {
    if !state.active().policy.passthrough {
        let why = format!(
            "descriptor pass-through is disabled by the workload policy ({}=false)",
            ozone_common::config::SIDECAR_PASSTHROUGH.name
        );
        // Wait for the handshake so the refusal answers it.
        let _ = tokio::time::timeout(Duration::from_secs(5), sc::recv(&app)).await;
        refuse(&app, ozone_proto::ScRefusal::Policy, why, &state).await;
        return;
    }
    let dn_stream = match UnixStream::connect(&dn).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tokio::time::timeout(Duration::from_secs(5), sc::recv(&app)).await;
            refuse(
                &app,
                ozone_proto::ScRefusal::Unreachable,
                format!("local datanode socket {}: {e}", dn.display()),
                &state,
            )
            .await;
            return;
        }
    };
    state
        .metrics
        .passthrough
        .get_or_create(&PassLabels { result: "relayed" })
        .inc();
    let r = tokio::select! {
        r = pump(&app, &dn_stream, None) => r,
        r = pump(&dn_stream, &app, Some(&state)) => r,
    };
    if let Err(e) = r
        && !matches!(e, sc::FrameError::Closed)
    {
        tracing::debug!("pass-through relay to {}: {e}", dn.display());
    }
}

/// Forwards frames (and their descriptors) from `from` to `to` until one
/// side closes or sends something that is not a frame; descriptors sent on
/// are counted in `count`'s metrics.
async fn pump(
    from: &UnixStream,
    to: &UnixStream,
    count: Option<&State>,
) -> Result<(), sc::FrameError> {
    loop {
        let f = sc::recv(from).await?;
        let fds: Vec<i32> = f.fds.iter().map(|fd| fd.as_raw_fd()).collect();
        sc::send_raw(to, f.cmd, &f.body, &fds).await?;
        if let Some(s) = count {
            s.metrics.passthrough_fds.inc_by(fds.len() as u64);
        }
        // `f.fds` closes here: the receiver holds its own copies.
    }
}
