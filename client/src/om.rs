//! Calls to the OM, retried while it is unavailable (e.g. restarting).

use std::future::Future;
use std::time::{Duration, Instant};

use ozone_proto::ozone_manager_client::OzoneManagerClient;
use tonic::transport::Channel;

use crate::error::{ClientError, Result};

/// Calls OM method `$method` with `$req` (cloned per attempt) through
/// [`Om::call`], retrying transient failures.
macro_rules! om_call {
    ($om:expr, $method:ident, $req:expr) => {{
        let req = $req;
        $om.call(|mut om| {
            let req = req.clone();
            async move { om.$method(req).await }
        })
        .await
    }};
}
pub(crate) use om_call;

/// The OM connection.
#[derive(Clone)]
pub struct Om {
    client: OzoneManagerClient<Channel>,
    retry_for: Duration,
}

/// Whether an OM error may go away by retrying (the OM answers a placement
/// it cannot make with RESOURCE_EXHAUSTED, which is not).
pub fn transient(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

impl Om {
    /// Connects lazily to `address`.
    pub fn new(address: &str, retry_for: Duration, max_message_size: usize) -> Result<Self> {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| ClientError::InvalidArgument(format!("OM address {address:?}: {e}")))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(60))
            .connect_lazy();
        Ok(Self {
            client: OzoneManagerClient::new(ch)
                .max_decoding_message_size(max_message_size)
                .max_encoding_message_size(max_message_size),
            retry_for,
        })
    }

    /// Runs `f` against the OM, retrying transient failures with backoff.
    /// Returns the final status and whether an earlier attempt failed
    /// transiently (its effect may have happened).
    pub async fn call_raw<T, F, Fut>(
        &self,
        mut f: F,
    ) -> (std::result::Result<T, tonic::Status>, bool)
    where
        F: FnMut(OzoneManagerClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut retried = false;
        loop {
            match f(self.client.clone()).await {
                Ok(r) => return (Ok(r.into_inner()), retried),
                Err(s) if transient(&s) && start.elapsed() < self.retry_for => {
                    tracing::debug!("OM unavailable, retrying: {}", s.message());
                    retried = true;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(s) => return (Err(s), retried),
            }
        }
    }

    /// Runs `f` against the OM, retrying transient failures.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnMut(OzoneManagerClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_raw(f).await.0.map_err(ClientError::from)
    }
}
