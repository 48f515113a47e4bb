//! The server side: TLS handshakes on accepted TCP connections, handed to
//! tonic as a stream of connections.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::{Tls, handshake_failed};

/// Longest a peer may take to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS connection accepted by a server.
pub struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// The TLS connections accepted on `listener` (without Nagle's delay), each
/// with the server configuration in force when it arrived. A handshake runs
/// in its own task, so a slow or silent peer holds up no one; a failed one
/// is counted and logged at debug level. Accepting stops when the stream is
/// dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Tls,
) -> ReceiverStream<Result<TlsConn, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = tx.closed() => return,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors and the like: pause, keep serving.
                    tracing::warn!("gRPC accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let Some(cfg) = tls.server_config() else {
                return;
            };
            let tx = tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let peer = tcp.peer_addr().ok();
                let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(conn)) => {
                        let _ = tx.send(Ok(TlsConn(conn))).await;
                    }
                    Ok(Err(e)) => {
                        handshake_failed(&tls);
                        tracing::debug!("TLS handshake with {peer:?} failed: {e}");
                    }
                    Err(_) => {
                        handshake_failed(&tls);
                        tracing::debug!("TLS handshake with {peer:?} timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
