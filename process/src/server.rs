//! The start-up and shutdown sequence every server process shares: bind the
//! HTTP side port (health, readiness, metrics) and the gRPC listener, serve
//! gRPC with the project's HTTP/2 settings until a stop switch flips, write
//! the ready file, and run until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::Path;

use ozone_common::tls::Tls;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::transport::server::{Connected, Router, TcpIncoming};

use crate::http::{self, HttpState};

/// A port that could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind {addr}: {source}")]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// The bound ports of a server.
pub struct Endpoints {
    /// Where the HTTP side port listens.
    pub http_addr: SocketAddr,
    /// The gRPC listener.
    pub grpc: TcpListener,
    /// Where it listens.
    pub grpc_addr: SocketAddr,
}

/// Binds the HTTP side port (serving it at once, not ready until `state`
/// says so) and the gRPC listener. Port 0 picks a free port.
pub async fn bind(
    http_bind: SocketAddr,
    grpc_bind: SocketAddr,
    state: HttpState,
) -> Result<Endpoints, BindError> {
    let http_addr = http::serve(http_bind, state)
        .await
        .map_err(|source| BindError {
            addr: http_bind,
            source,
        })?;
    let (grpc, grpc_addr) = http::bind(grpc_bind).await.map_err(|source| BindError {
        addr: grpc_bind,
        source,
    })?;
    Ok(Endpoints {
        http_addr,
        grpc,
        grpc_addr,
    })
}

/// A gRPC server builder with the project's HTTP/2 flow-control windows
/// (see [`ozone_common::grpc`]).
pub fn grpc() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .initial_stream_window_size(ozone_common::grpc::STREAM_WINDOW)
        .initial_connection_window_size(ozone_common::grpc::CONNECTION_WINDOW)
}

/// Serves `router` on connections from `incoming` until `stop` is true.
pub async fn serve<I, IO, IE>(
    router: Router,
    incoming: I,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    router
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

/// Serves `router` on a TCP listener (no Nagle delay), over TLS when `tls`
/// is set, in a task until `stop` is true; a failure is logged as `what`'s.
pub fn spawn_tcp(
    what: &'static str,
    router: Router,
    listener: TcpListener,
    tls: Option<Tls>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let result = match tls {
            Some(tls) => serve(router, ozone_common::tls::incoming(listener, tls), stop).await,
            None => {
                let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                serve(router, incoming, stop).await
            }
        };
        if let Err(e) = result {
            tracing::error!("{what} gRPC server failed: {e}");
        }
    })
}

/// Writes `line` to the ready file `path` atomically (a temporary file
/// renamed into place), for scripts and tests waiting for a process.
pub fn write_ready_file(path: &Path, line: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{line}\n"))?;
    std::fs::rename(&tmp, path)
}

/// A started server: what it reports (`T`, reachable through `Deref`), its
/// stop switch and its tasks.
pub struct Running<T> {
    info: T,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl<T> Running<T> {
    /// A server reporting `info`, whose `tasks` end when `shutdown` is sent
    /// `true`.
    pub fn new(info: T, shutdown: watch::Sender<bool>, tasks: Vec<JoinHandle<()>>) -> Self {
        Self {
            info,
            shutdown,
            tasks,
        }
    }

    /// Stops serving and waits for the tasks.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        self.wait().await;
    }

    /// Resolves when every task has ended (after a stop, or a fatal error).
    pub async fn wait(&mut self) {
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }

    /// Runs until SIGTERM or Ctrl-C, then stops (logging "`name` stopping"),
    /// or until the tasks end by themselves.
    pub async fn until_signal(mut self, name: &str) {
        let stop = self.shutdown.clone();
        tokio::select! {
            _ = crate::signal::shutdown() => {}
            _ = self.wait() => return,
        }
        tracing::info!("{name} stopping");
        let _ = stop.send(true);
        self.wait().await;
    }
}

impl<T> Deref for Running<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stop_ends_the_tasks_and_ports_are_reported() {
        let state = HttpState {
            ready: Default::default(),
            registry: Default::default(),
        };
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let e = bind(any, any, state.clone()).await.unwrap();
        assert_ne!(e.grpc_addr.port(), 0);
        // A taken port is an error naming it.
        let taken = bind(any, e.grpc_addr, state).await.err().unwrap();
        assert_eq!(taken.addr, e.grpc_addr);
        assert!(taken.to_string().contains("cannot bind"), "{taken}");
        let (tx, mut rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _ = rx.wait_for(|s| *s).await;
        });
        let r = Running::new(e.grpc_addr, tx, vec![task]);
        assert_eq!(*r, e.grpc_addr);
        tokio::time::timeout(std::time::Duration::from_secs(5), r.stop())
            .await
            .expect("stopped");
    }

    #[test]
    fn the_ready_file_appears_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ready");
        write_ready_file(&p, "grpc=1 http=2").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "grpc=1 http=2\n");
        assert!(!d.path().join("ready.tmp").exists());
    }
}
