//! The client side: a tonic connector that opens TCP and speaks TLS with
//! the configuration in force at each new connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::transport::Uri;

use super::Tls;

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects tonic channels over TLS. The server's certificate must be
/// signed by the CA bundle and name the host of the channel's URI (a DNS
/// name or an IP address).
#[derive(Clone)]
pub struct TlsConnector {
    tls: Tls,
}

impl TlsConnector {
    pub(super) fn new(tls: Tls) -> Self {
        Self { tls }
    }
}

/// A connection a [`TlsConnector`] made.
pub type ClientConn = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for TlsConnector {
    type Response = ClientConn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ClientConn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| format!("no host in {uri}"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let name = ServerName::try_from(host.clone())
                .map_err(|e| format!("{host} is not a TLS server name: {e}"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            let connector = tokio_rustls::TlsConnector::from(tls.client_config());
            let conn = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp))
                .await
                .map_err(|_| format!("TLS handshake with {host}:{port} timed out"))?
                .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
            Ok(TokioIo::new(conn))
        })
    }
}
