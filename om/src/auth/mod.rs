//! Who calls the OM, and what they may do.
//!
//! With `ozone.security.enabled`, every call carries an `authorization`
//! header: `Bearer <token>` from a client (a pod's projected ServiceAccount
//! token, checked by the API server's TokenReview, or a token of the static
//! file `ozone.om.token.auth.file`), or `OzoneService <credential>` from a
//! datanode (signed with the cluster secret). Users are
//! `namespace/serviceaccount`; admins are named by `ozone.administrators`
//! and `ozone.administrators.groups`.

pub(crate) mod acl;
mod review;
mod static_tokens;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ozone_common::token::TokenSigner;
use sha2::{Digest, Sha256};
use tonic::Status;

pub(crate) use review::TokenReviewer;
pub(crate) use static_tokens::StaticTokens;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Caller {
    /// Security is off: anyone may do anything.
    Open,
    /// A client: `namespace/serviceaccount`.
    User(String),
    /// A datanode, by id.
    Datanode(String),
}

impl Caller {
    /// The identity of a client (`namespace/serviceaccount`), if it is one.
    pub(crate) fn user(&self) -> Option<&str> {
        match self {
            Caller::User(u) => Some(u),
            _ => None,
        }
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Open => f.write_str("anonymous"),
            Caller::User(u) => f.write_str(u),
            Caller::Datanode(d) => write!(f, "datanode:{d}"),
        }
    }
}

/// Where client tokens are checked.
pub(crate) enum TokenSource {
    /// A file of `token,namespace/serviceaccount[,expiry]` lines.
    File(StaticTokens),
    /// The Kubernetes API server's TokenReview.
    Review(Box<TokenReviewer>),
}

/// What answers "who is this?".
pub(crate) struct Authenticator {
    source: TokenSource,
    service: TokenSigner,
    admins: Vec<String>,
    admin_groups: Vec<String>,
    /// Accepted tokens by SHA-256, with the identity and when to forget it.
    cache: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

/// Longest a reviewed token is trusted without asking again.
const MAX_CACHE: Duration = Duration::from_secs(600);

impl Authenticator {
    /// Checks clients with `source`, datanodes with `service` (the cluster
    /// secret); `admins` are identities, `admin_groups` namespaces.
    pub(crate) fn new(
        source: TokenSource,
        service: TokenSigner,
        admins: Vec<String>,
        admin_groups: Vec<String>,
    ) -> Self {
        Self {
            source,
            service,
            admins,
            admin_groups,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The caller of a request with `metadata`.
    pub(crate) async fn caller(
        &self,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Caller, Status> {
        let Some(h) = metadata.get("authorization") else {
            return Err(Status::unauthenticated(
                "this cluster requires credentials (ozone.security.enabled): set \
                 ozone.client.token.file to a ServiceAccount token",
            ));
        };
        let h = h
            .to_str()
            .map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
        if let Some(cred) = h.strip_prefix("OzoneService ") {
            let id = self
                .service
                .verify_service(cred, ozone_common::now_ms())
                .map_err(|e| Status::unauthenticated(format!("service credential: {e}")))?;
            return match id.role.as_str() {
                "datanode" => Ok(Caller::Datanode(id.name)),
                other => Err(Status::unauthenticated(format!(
                    "unknown service role {other:?}"
                ))),
            };
        }
        let Some(token) = h.strip_prefix("Bearer ") else {
            return Err(Status::unauthenticated(
                "the authorization header is neither Bearer nor OzoneService",
            ));
        };
        let token = token.trim();
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(&digest) {
                Some((who, until)) if *until > Instant::now() => {
                    return Ok(Caller::User(who.clone()));
                }
                Some(_) => {
                    cache.remove(&digest);
                }
                None => {}
            }
        }
        let (who, expires_ms) = match &self.source {
            TokenSource::File(f) => f.check(token)?,
            TokenSource::Review(r) => r.review(token).await?,
        };
        let now = ozone_common::now_ms();
        let left = expires_ms
            .map(|e| Duration::from_millis(e.saturating_sub(now)))
            .unwrap_or(MAX_CACHE)
            .min(MAX_CACHE);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 10_000 {
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
        }
        cache.insert(digest, (who.clone(), Instant::now() + left));
        Ok(Caller::User(who))
    }

    /// Whether `caller` administers the cluster.
    pub(crate) fn is_admin(&self, caller: &Caller) -> bool {
        match caller {
            Caller::Open => true,
            Caller::User(u) => {
                let ns = u.split_once('/').map(|(ns, _)| ns).unwrap_or("");
                self.admins.iter().any(|a| a == u || a == "*")
                    || self.admin_groups.iter().any(|g| g == ns)
            }
            Caller::Datanode(_) => false,
        }
    }
}

/// The expiry (ms since the epoch) a JWT claims, read without checking its
/// signature (the issuer checked it): only to bound how long it is cached.
pub(crate) fn jwt_expiry_ms(token: &str) -> Option<u64> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("exp")?.as_u64().map(|s| s * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(admins: &[&str], groups: &[&str]) -> (Authenticator, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "t-a,team-a/hbase\nt-old,team-a/old,1\n").unwrap();
        let a = Authenticator::new(
            TokenSource::File(StaticTokens::new(f)),
            TokenSigner::new(&[1u8; 32]).unwrap(),
            admins.iter().map(|s| s.to_string()).collect(),
            groups.iter().map(|s| s.to_string()).collect(),
        );
        (a, dir)
    }

    fn md(h: &str) -> tonic::metadata::MetadataMap {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("authorization", h.parse().unwrap());
        m
    }

    #[tokio::test]
    async fn users_datanodes_and_refusals() {
        let (a, _dir) = auth(&["ops/admin"], &["ozone-system"]);
        assert_eq!(
            a.caller(&md("Bearer t-a")).await.unwrap(),
            Caller::User("team-a/hbase".into())
        );
        // Cached the second time, same answer.
        assert_eq!(
            a.caller(&md("Bearer t-a")).await.unwrap(),
            Caller::User("team-a/hbase".into())
        );
        for bad in [
            "Bearer nope",
            "Bearer t-old",
            "Basic x",
            "OzoneService x:y:1:00",
        ] {
            let e = a.caller(&md(bad)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad}");
        }
        let e = a
            .caller(&tonic::metadata::MetadataMap::new())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let cred = TokenSigner::new(&[1u8; 32]).unwrap().sign_service(
            "datanode",
            "dn-1",
            ozone_common::now_ms() + 60_000,
        );
        assert_eq!(
            a.caller(&md(&format!("OzoneService {cred}")))
                .await
                .unwrap(),
            Caller::Datanode("dn-1".into())
        );
        assert!(a.is_admin(&Caller::User("ops/admin".into())));
        assert!(a.is_admin(&Caller::User("ozone-system/operator".into())));
        assert!(!a.is_admin(&Caller::User("team-a/hbase".into())));
        assert!(!a.is_admin(&Caller::Datanode("dn-1".into())));
    }

    #[test]
    fn reads_jwt_expiry() {
        use base64::Engine;
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let t = format!("{}.{}.sig", enc("{}"), enc(r#"{"exp":1700000000}"#));
        assert_eq!(jwt_expiry_ms(&t), Some(1_700_000_000_000));
        assert_eq!(jwt_expiry_ms("opaque"), None);
    }
}
