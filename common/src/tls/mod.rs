//! TLS on the gRPC ports (`hdds.grpc.tls.enabled`), with rustls.
//!
//! Every process reads its certificates from one directory
//! (`hdds.grpc.tls.dir`) in the layout of a Kubernetes TLS Secret:
//! `ca.crt` (the CA bundle it trusts), `tls.crt` (its certificate chain) and
//! `tls.key` (its private key). Servers need all three; clients need only
//! `ca.crt` and present `tls.crt` when they have one.
//!
//! The directory is read again when it changes (checked at most every
//! [`RECHECK`], at a handshake), so a rotated Secret takes effect for new
//! connections without a restart. Open connections keep the session they
//! negotiated. A directory caught half-written keeps the previous
//! configuration until it is whole again.

mod connect;
pub mod issue;
mod serve;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tonic::transport::{Channel, Endpoint};

pub use connect::{TlsConnector, UntrustedCertificate, untrusted_certificate};
pub use serve::{TlsConn, incoming};

/// How often, at most, the directory is checked for new files.
pub const RECHECK: Duration = Duration::from_secs(2);
/// The CA bundle's file name.
pub const CA_FILE: &str = "ca.crt";
/// The certificate chain's file name.
pub const CERT_FILE: &str = "tls.crt";
/// The private key's file name.
pub const KEY_FILE: &str = "tls.key";

/// Why a TLS directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM data.
    #[error("{path}: {what}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the certificates or key.
    #[error("{dir}: {source}")]
    Rustls {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// A certificate could not be issued.
    #[error("cannot issue a certificate: {0}")]
    Issue(#[from] rcgen::Error),
}

/// The TLS settings of a process: its certificate directory and the rustls
/// configurations built from it, rebuilt when the files change.
#[derive(Clone)]
pub struct Tls(Arc<Inner>);

struct Inner {
    /// Empty for a configuration given in memory (never reloaded).
    dir: PathBuf,
    server: bool,
    state: Mutex<State>,
    reloads: AtomicU64,
    handshake_failures: AtomicU64,
}

struct State {
    files: Files,
    server: Option<Arc<ServerConfig>>,
    client: Arc<ClientConfig>,
    checked: Instant,
}

/// The raw contents of the directory's files (compared to notice changes).
#[derive(PartialEq, Eq)]
struct Files {
    ca: Vec<u8>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({})", self.0.dir.display())
    }
}

impl Tls {
    /// Loads `dir` for a server (a certificate and key are required) or a
    /// client (`ca.crt` is enough).
    pub fn load(dir: &Path, server: bool) -> Result<Tls, TlsError> {
        // A directory being rewritten file by file can pair a new
        // certificate with the old key for a moment: look again.
        let mut attempt = 0;
        let (files, (server_cfg, client)) = loop {
            let files = Files::read(dir)?;
            match build(dir, &files, server) {
                Ok(built) => break (files, built),
                Err(TlsError::Rustls { .. }) if attempt < 3 => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        };
        Ok(Tls(Arc::new(Inner {
            dir: dir.to_path_buf(),
            server,
            state: Mutex::new(State {
                files,
                server: server_cfg,
                client,
                checked: Instant::now(),
            }),
            reloads: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
        })))
    }

    /// A client trusting the CA certificates in `ca_pem`, without a
    /// certificate of its own (never reloaded).
    pub fn client_from_ca_pem(ca_pem: &[u8]) -> Result<Tls, TlsError> {
        let files = Files {
            ca: ca_pem.to_vec(),
            cert: None,
            key: None,
        };
        let (_, client) = build(Path::new("(in memory)"), &files, false)?;
        Ok(Tls(Arc::new(Inner {
            dir: PathBuf::new(),
            server: false,
            state: Mutex::new(State {
                files,
                server: None,
                client,
                checked: Instant::now(),
            }),
            reloads: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
        })))
    }

    /// The certificate directory.
    pub fn dir(&self) -> &Path {
        &self.0.dir
    }

    /// How many times a changed directory was loaded.
    pub fn reloads(&self) -> u64 {
        self.0.reloads.load(Ordering::Relaxed)
    }

    /// How many incoming handshakes failed (plaintext or untrusted peers).
    pub fn handshake_failures(&self) -> u64 {
        self.0.handshake_failures.load(Ordering::Relaxed)
    }

    /// The server configuration now in force (`None` for a client-only
    /// directory).
    pub fn server_config(&self) -> Option<Arc<ServerConfig>> {
        self.fresh(|s| s.server.clone())
    }

    /// The client configuration now in force.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.fresh(|s| s.client.clone())
    }

    /// A connector for tonic channels that speaks TLS with this
    /// directory's configuration.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector::new(self.clone())
    }

    /// Reads the directory again if [`RECHECK`] has passed, then returns
    /// `pick` of the state. Reading three small files under the lock once
    /// every two seconds, at a handshake, keeps every caller consistent.
    fn fresh<T>(&self, pick: impl FnOnce(&State) -> T) -> T {
        let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if !self.0.dir.as_os_str().is_empty() && st.checked.elapsed() >= RECHECK {
            st.checked = Instant::now();
            match Files::read(&self.0.dir) {
                Ok(files) if files != st.files => match build(&self.0.dir, &files, self.0.server) {
                    Ok((server, client)) => {
                        st.files = files;
                        st.server = server;
                        st.client = client;
                        self.0.reloads.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            "TLS: loaded new certificates from {}",
                            self.0.dir.display()
                        );
                    }
                    Err(e) => tracing::warn!("TLS: keeping the previous certificates: {e}"),
                },
                Ok(_) => {}
                Err(e) => tracing::warn!("TLS: keeping the previous certificates: {e}"),
            }
        }
        pick(&st)
    }
}

/// A channel to `endpoint` (an `http://host:port` URI), over TLS when `tls`
/// is set, connected on first use.
pub fn lazy_channel(endpoint: Endpoint, tls: Option<&Tls>) -> Channel {
    match tls {
        Some(t) => endpoint.connect_with_connector_lazy(t.connector()),
        None => endpoint.connect_lazy(),
    }
}

/// Like [`lazy_channel`], connected now.
pub async fn channel(
    endpoint: Endpoint,
    tls: Option<&Tls>,
) -> Result<Channel, tonic::transport::Error> {
    match tls {
        Some(t) => endpoint.connect_with_connector(t.connector()).await,
        None => endpoint.connect().await,
    }
}

impl Files {
    fn read(dir: &Path) -> Result<Files, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
        };
        let optional = |name: &str| match read(name) {
            Ok(b) => Ok(Some(b)),
            Err(TlsError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        };
        Ok(Files {
            ca: read(CA_FILE)?,
            cert: optional(CERT_FILE)?,
            key: optional(KEY_FILE)?,
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn invalid(dir: &Path, name: &str, what: impl Into<String>) -> TlsError {
    TlsError::Invalid {
        path: dir.join(name),
        what: what.into(),
    }
}

fn certs(dir: &Path, name: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(dir, name, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(dir, name, "holds no certificate"));
    }
    Ok(certs)
}

/// The server and client configurations for `files`.
#[allow(clippy::type_complexity)]
fn build(
    dir: &Path,
    files: &Files,
    server: bool,
) -> Result<(Option<Arc<ServerConfig>>, Arc<ClientConfig>), TlsError> {
    let rustls_err = |source| TlsError::Rustls {
        dir: dir.to_path_buf(),
        source,
    };
    let mut roots = RootCertStore::empty();
    for c in certs(dir, CA_FILE, &files.ca)? {
        roots
            .add(c)
            .map_err(|e| invalid(dir, CA_FILE, format!("not a usable CA certificate: {e}")))?;
    }
    let roots = Arc::new(roots);
    let identity = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = certs(dir, CERT_FILE, cert)?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| invalid(dir, KEY_FILE, format!("not a PEM private key: {e}")))?;
            Some((chain, key))
        }
        (None, None) if !server => None,
        (None, _) => return Err(invalid(dir, CERT_FILE, "is missing")),
        (_, None) => return Err(invalid(dir, KEY_FILE, "is missing")),
    };
    let h2 = vec![b"h2".to_vec()];

    let client_builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err)?
        .with_root_certificates(roots.clone());
    let mut client = match &identity {
        Some((chain, key)) => client_builder
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(rustls_err)?,
        None => client_builder.with_no_client_auth(),
    };
    client.alpn_protocols = h2.clone();

    let server_cfg = match identity {
        Some((chain, key)) if server => {
            // Client certificates are checked when presented; callers are
            // identified by their tokens, so one is not required.
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| invalid(dir, CA_FILE, e.to_string()))?;
            let mut cfg = ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(rustls_err)?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .map_err(rustls_err)?;
            cfg.alpn_protocols = h2;
            Some(Arc::new(cfg))
        }
        _ => None,
    };
    Ok((server_cfg, Arc::new(client)))
}

/// Counts a failed incoming handshake.
fn handshake_failed(tls: &Tls) {
    tls.0.handshake_failures.fetch_add(1, Ordering::Relaxed);
}
