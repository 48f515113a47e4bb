//! The data socket: positional reads of open streams without HTTP/2, for
//! applications that read through the sidecar at high rates. Framing as the
//! short-circuit protocol (`ozone_common::shortcircuit`): a request is a
//! `SidecarReadRequest` ([`CMD_READ`]); the reply ([`CMD_READ`] |
//! `RESPONSE`) carries the raw bytes, or ([`CMD_FAILED`]) a
//! `SidecarDataError` with a gRPC status code. One request at a time per
//! connection; clients keep a small pool of connections.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ozone_common::shortcircuit::{self as sc, HEADER, RESPONSE, VERSION};
use ozone_proto::{SidecarDataError, SidecarReadRequest};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use crate::peer::Peer;
use crate::state::State;

/// Read command.
pub(crate) const CMD_READ: u8 = sc::CMD_SIDECAR_READ;
/// Failure reply.
pub(crate) const CMD_FAILED: u8 = sc::CMD_ERROR | RESPONSE;

/// The data socket next to the gRPC socket `grpc`.
pub(crate) fn socket_of(grpc: &Path) -> PathBuf {
    grpc.with_extension("data")
}

/// Serves the data socket until the listener fails.
pub(crate) async fn serve(l: UnixListener, state: Arc<State>) {
    loop {
        match l.accept().await {
            Ok((s, _)) => match state.access.sidecar.admit(&s) {
                Ok(peer) => {
                    tokio::spawn(conn(s, peer, state.clone()));
                }
                Err(why) => state.refused("data", &why),
            },
            Err(e) => {
                tracing::warn!("data socket accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn conn(mut s: UnixStream, peer: Option<Peer>, state: Arc<State>) {
    let mut buf = Vec::new();
    loop {
        // Requests are tiny; anything larger is garbage.
        let f = match sc::recv_limited(&s, 1024).await {
            Ok(f) => f,
            Err(_) => return,
        };
        let res = match (f.cmd, f.decode::<SidecarReadRequest>()) {
            (CMD_READ, Ok(r)) => {
                state
                    .read_into(r.handle, peer, r.offset, r.length, false, &mut buf)
                    .await
            }
            (CMD_READ, Err(e)) => Err(tonic::Status::invalid_argument(format!(
                "malformed read request: {e}"
            ))),
            (cmd, _) => Err(tonic::Status::invalid_argument(format!(
                "unknown data socket command {cmd:#x}"
            ))),
        };
        let sent = match res {
            Ok(()) => {
                let mut hdr = [0u8; HEADER];
                hdr[0] = VERSION;
                hdr[1] = CMD_READ | RESPONSE;
                hdr[2..].copy_from_slice(&(buf.len() as u32).to_be_bytes());
                match s.write_all(&hdr).await {
                    Ok(()) => s.write_all(&buf).await,
                    Err(e) => Err(e),
                }
            }
            Err(st) => {
                let e = SidecarDataError {
                    code: st.code() as i32,
                    message: st.message().to_string(),
                };
                sc::send(&s, CMD_FAILED, &e, &[])
                    .await
                    .map_err(std::io::Error::other)
            }
        };
        if sent.is_err() {
            return;
        }
    }
}
