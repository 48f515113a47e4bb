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
pub(super) type ClientConn = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

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
                .map_err(|e| handshake_error(&format!("{host}:{port}"), e))?;
            Ok(TokioIo::new(conn))
        })
    }
}

/// A server whose certificate this client does not accept (signed by no CA
/// of the bundle, for another name, expired): retrying cannot help, so
/// callers fail at once, naming it.
#[derive(Debug, thiserror::Error)]
#[error(
    "TLS handshake with {peer}: the server's certificate is not accepted: {reason} \
     (the CA bundle in hdds.grpc.tls.dir must hold the CA that signed it, for this name)"
)]
pub struct UntrustedCertificate {
    /// The server, `host:port`.
    pub peer: String,
    /// What rustls said of the certificate.
    pub reason: String,
}

/// A failed handshake with `peer` as the connector reports it: a
/// certificate the client refused is [`UntrustedCertificate`].
fn handshake_error(peer: &str, e: std::io::Error) -> BoxError {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => Box::new(UntrustedCertificate {
            peer: peer.to_string(),
            reason: format!("{c:?}"),
        }),
        _ => format!("TLS handshake with {peer}: {e}").into(),
    }
}

/// The [`UntrustedCertificate`] behind a failed call, if that is why it
/// failed.
pub fn untrusted_certificate<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a UntrustedCertificate> {
    let mut cause: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(u) = c.downcast_ref::<UntrustedCertificate>() {
            return Some(u);
        }
        cause = c.source();
    }
    None
}
