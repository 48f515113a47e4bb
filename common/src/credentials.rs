//! What a client of the OM presents: the `authorization` header added to
//! every call by a tonic interceptor.
//!
//! - a token read from a file (`ozone.client.token.file`: a projected
//!   ServiceAccount token, which the kubelet rotates; the file is read again
//!   when it changes),
//! - a datanode's service credential, signed with the cluster secret and
//!   renewed before it expires,
//! - nothing (security off).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::token::TokenSigner;

/// A channel whose calls carry [`Credentials`].
pub type AuthChannel = tonic::service::interceptor::InterceptedService<Channel, Credentials>;

/// How often a token file is checked for a new token.
const RECHECK: Duration = Duration::from_secs(10);
/// Lifetime of a service credential; renewed when a quarter is left.
const SERVICE_VALIDITY: Duration = Duration::from_secs(3600);

/// The credentials of a client.
#[derive(Clone, Default)]
pub enum Credentials {
    /// No header (security off).
    #[default]
    None,
    /// `Bearer <token>` from a file.
    TokenFile(Arc<TokenFile>),
    /// `OzoneService <credential>` signed with the cluster secret.
    Service(Arc<ServiceCredential>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("Credentials::None"),
            Credentials::TokenFile(t) => write!(f, "Credentials::TokenFile({})", t.path.display()),
            Credentials::Service(s) => write!(f, "Credentials::Service({}:{})", s.role, s.name),
        }
    }
}

impl Credentials {
    /// A bearer token read from `path`.
    pub fn token_file(path: PathBuf) -> Self {
        Credentials::TokenFile(Arc::new(TokenFile {
            path,
            cached: Mutex::new(None),
        }))
    }

    /// A service credential for `role` `name`.
    pub fn service(signer: TokenSigner, role: &str, name: &str) -> Self {
        Credentials::Service(Arc::new(ServiceCredential {
            signer,
            role: role.to_string(),
            name: name.to_string(),
            cached: Mutex::new(None),
        }))
    }

    /// The header value, if any.
    pub fn header(&self) -> Result<Option<MetadataValue<tonic::metadata::Ascii>>, Status> {
        let text = match self {
            Credentials::None => return Ok(None),
            Credentials::TokenFile(t) => format!("Bearer {}", t.token()?),
            Credentials::Service(s) => format!("OzoneService {}", s.credential()),
        };
        text.parse()
            .map(Some)
            .map_err(|_| Status::unauthenticated("the credential is not valid header text"))
    }

    /// `channel` with these credentials on every call.
    pub fn wrap(self, channel: Channel) -> AuthChannel {
        tonic::service::interceptor::InterceptedService::new(channel, self)
    }
}

impl Interceptor for Credentials {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(h) = self.header()? {
            req.metadata_mut().insert("authorization", h);
        }
        Ok(req)
    }
}

/// A token kept in a file.
pub struct TokenFile {
    path: PathBuf,
    /// The token, the file's modification time, and when it was checked.
    cached: Mutex<Option<(String, SystemTime, Instant)>>,
}

impl TokenFile {
    /// The current token.
    pub fn token(&self) -> Result<String, Status> {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, _, at)) = &*cached
            && at.elapsed() < RECHECK
        {
            return Ok(t.clone());
        }
        let unreadable = |e: std::io::Error| {
            Status::unauthenticated(format!(
                "cannot read the token file {} (ozone.client.token.file): {e}",
                self.path.display()
            ))
        };
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(unreadable)?;
        if let Some((t, m, at)) = &mut *cached
            && *m == mtime
        {
            *at = Instant::now();
            return Ok(t.clone());
        }
        let token = std::fs::read_to_string(&self.path)
            .map_err(unreadable)?
            .trim()
            .to_string();
        if token.is_empty() {
            return Err(Status::unauthenticated(format!(
                "the token file {} is empty",
                self.path.display()
            )));
        }
        *cached = Some((token.clone(), mtime, Instant::now()));
        Ok(token)
    }
}

/// A process's signed service credential.
pub struct ServiceCredential {
    signer: TokenSigner,
    role: String,
    name: String,
    cached: Mutex<Option<(String, u64)>>,
}

impl ServiceCredential {
    fn credential(&self) -> String {
        let now = crate::now_ms();
        let validity = SERVICE_VALIDITY.as_millis() as u64;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some((c, expiry)) if *expiry > now + validity / 4 => c.clone(),
            _ => {
                let expiry = now + validity;
                let c = self.signer.sign_service(&self.role, &self.name, expiry);
                *cached = Some((c.clone(), expiry));
                c
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_each_kind() {
        assert!(Credentials::None.header().unwrap().is_none());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        let c = Credentials::token_file(f.clone());
        let e = c.header().unwrap_err();
        assert!(e.message().contains("ozone.client.token.file"), "{e}");
        std::fs::write(&f, "abc\n").unwrap();
        assert_eq!(c.header().unwrap().unwrap(), "Bearer abc");
        let signer = TokenSigner::new(&[3u8; 32]).unwrap();
        let s = Credentials::service(signer.clone(), "datanode", "dn-1");
        let h = s.header().unwrap().unwrap();
        let cred = h.to_str().unwrap().strip_prefix("OzoneService ").unwrap();
        let id = signer.verify_service(cred, crate::now_ms()).unwrap();
        assert_eq!(id.name, "dn-1");
    }
}
