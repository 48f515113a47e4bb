//! Client tokens checked by the Kubernetes API server (TokenReview), with
//! the cluster's audience: a pod's projected ServiceAccount token.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use tonic::Status;

/// Asks the API server who a token belongs to.
pub(crate) struct TokenReviewer {
    api: Api<TokenReview>,
    audience: String,
}

impl TokenReviewer {
    /// A reviewer through `client` expecting tokens for `audience`.
    pub(crate) fn new(client: kube::Client, audience: String) -> Self {
        Self {
            api: Api::all(client),
            audience,
        }
    }

    /// A reviewer with the pod's in-cluster credentials (or `KUBECONFIG`).
    pub(crate) async fn from_environment(audience: String) -> Result<Self, kube::Error> {
        Ok(Self::new(kube::Client::try_default().await?, audience))
    }

    /// The identity (`namespace/serviceaccount`) of `token`, and its expiry.
    pub(crate) async fn review(&self, token: &str) -> Result<(String, Option<u64>), Status> {
        let req = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let res = self
            .api
            .create(&PostParams::default(), &req)
            .await
            .map_err(|e| {
                tracing::warn!("TokenReview failed: {e}");
                Status::unavailable(format!("the OM could not review the token: {e}"))
            })?;
        let status = res.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Status::unauthenticated(format!(
                "token refused by the API server{}",
                status.error.map(|e| format!(": {e}")).unwrap_or_default()
            )));
        }
        if let Some(aud) = &status.audiences
            && !aud.iter().any(|a| a == &self.audience)
        {
            return Err(Status::unauthenticated(format!(
                "the token is not for audience {:?}",
                self.audience
            )));
        }
        let user = status.user.and_then(|u| u.username).unwrap_or_default();
        let identity = service_account_identity(&user).ok_or_else(|| {
            Status::permission_denied(format!(
                "{user:?} is not a ServiceAccount: only pods' ServiceAccount tokens are accepted"
            ))
        })?;
        Ok((identity, super::jwt_expiry_ms(token)))
    }
}

/// `system:serviceaccount:<ns>:<name>` as `ns/name`.
pub(super) fn service_account_identity(user: &str) -> Option<String> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then(|| format!("{ns}/{name}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn service_account_names() {
        assert_eq!(
            super::service_account_identity("system:serviceaccount:team-a:hbase").as_deref(),
            Some("team-a/hbase")
        );
        assert_eq!(super::service_account_identity("kubernetes-admin"), None);
        assert_eq!(
            super::service_account_identity("system:serviceaccount:x"),
            None
        );
    }
}
