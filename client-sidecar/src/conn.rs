//! Application connections on the sidecar's UNIX socket. Each accepted
//! connection gets an id, handed to every request on it (tonic's connect
//! info); the streams a request opens belong to its connection, and when
//! the connection goes (the application closed it, exited or was killed)
//! its streams are closed. An application that dies mid-read leaves
//! nothing open behind.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::Connected;

use crate::authority::AuthorityFix;
use crate::peer::Peer;
use crate::state::State;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// The id of the application connection a request came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnId(pub u64);

/// What a request knows of its connection: its id and its peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnInfo {
    pub id: ConnId,
    pub peer: Option<Peer>,
}

/// Closes the connection's streams when dropped (the connection ended).
struct Owner {
    id: ConnId,
    state: Weak<State>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(s) = self.state.upgrade() {
            s.connection_closed(self.id);
        }
    }
}

/// An accepted application connection.
pub(crate) struct AppConn {
    io: UnixStream,
    owner: Owner,
    peer: Option<Peer>,
    /// C-core clients' socket-path authority, fixed (crate::authority).
    fix: AuthorityFix,
}

impl AppConn {
    /// Wraps an accepted connection of `state`'s socket from `peer`.
    pub(crate) fn new(io: UnixStream, state: &Arc<State>, peer: Option<Peer>) -> Self {
        Self {
            io,
            peer,
            fix: AuthorityFix::default(),
            owner: Owner {
                id: ConnId(NEXT.fetch_add(1, Ordering::Relaxed)),
                state: Arc::downgrade(state),
            },
        }
    }
}

impl Connected for AppConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            id: self.owner.id,
            peer: self.peer,
        }
    }
}

impl AsyncRead for AppConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        me.fix.poll_read(&mut me.io, cx, buf)
    }
}

impl AsyncWrite for AppConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The connection of a request, when it came on the UNIX socket (tonic
/// puts each connection's [`Connected::connect_info`] into its requests).
pub(crate) fn of<T>(req: &tonic::Request<T>) -> Option<ConnId> {
    req.extensions().get::<ConnInfo>().map(|i| i.id)
}

/// The peer of a request's connection, when it came on the UNIX socket
/// (`None` on TCP).
pub(crate) fn peer<T>(req: &tonic::Request<T>) -> Option<Peer> {
    req.extensions().get::<ConnInfo>().and_then(|i| i.peer)
}
