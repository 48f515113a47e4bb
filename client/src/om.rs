//! Calls to the OM, retried while it is unavailable (e.g. restarting):
//! made directly, or through a co-located sidecar that serves the OM's own
//! service and passes it on (see [`Om::forward`]). Either way a call is made
//! and retried here, once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ozone_common::credentials::{AuthChannel, Credentials};
use ozone_common::tls::untrusted_certificate;
use ozone_proto::ozone_manager_client::OzoneManagerClient;

/// The channel of OM calls: each carries the client's credentials.
type Channel = AuthChannel;

use crate::ClientConfig;
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
    /// The channel `client` calls on (for [`Om::forward`]).
    channel: Channel,
    max_message_size: usize,
    /// What the errors name: the OM at its address, or the sidecar at its
    /// socket.
    peer: &'static str,
    address: String,
    retry_for: Duration,
    connect_attempts: u32,
    connect_wait: Duration,
    /// Whether the OM ever answered: a connection refused after that is a
    /// restarting OM (retried for `retry_for`), before it a wrong address
    /// (retried `connect_attempts` times).
    reached: Arc<AtomicBool>,
}

/// Whether an OM error may go away by retrying (the OM answers a placement
/// it cannot make with RESOURCE_EXHAUSTED, which is not).
pub(crate) fn transient(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    ) && s.metadata().get(DRAINING).is_none()
}

/// Metadata a draining sidecar puts on its refusals of new work: final for
/// this sidecar (it is going away), so not retried on its connection.
pub const DRAINING: &str = "ozone-sidecar-draining";

/// The innermost cause of a failed connection (refused, unknown host,
/// timed out), or `None` when the call reached a server.
pub(crate) fn connect_failure(s: &tonic::Status) -> Option<String> {
    if s.code() != tonic::Code::Unavailable {
        return None;
    }
    let mut cause: &dyn std::error::Error = std::error::Error::source(s)?;
    let mut connect = false;
    loop {
        let text = cause.to_string();
        connect |= text.contains("connect") || text.contains("dns");
        match cause.source() {
            Some(next) => cause = next,
            None => break,
        }
    }
    let text = cause.to_string();
    (connect || cause.downcast_ref::<std::io::Error>().is_some()).then_some(text)
}

impl Om {
    /// Connects lazily to the OM at `config.om_address`.
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let address = config.om_address.as_str();
        let e = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| ClientError::InvalidArgument(format!("OM address {address:?}: {e}")))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(60));
        let ch = ozone_common::tls::lazy_channel(e, config.tls.as_ref());
        let creds = match &config.token_file {
            Some(f) => Credentials::token_file(f.clone()),
            None => Credentials::None,
        };
        Ok(Self::on(
            creds.wrap(ch),
            ("the OM", address.to_string()),
            config,
        ))
    }

    /// The OM's service as a sidecar serves it on `channel` (the sidecar
    /// adds the workload's credentials); `address` (its socket or port)
    /// names the sidecar in errors. Retried by the rule of [`Om::call_raw`], as a direct call is.
    pub fn through_sidecar(
        channel: tonic::transport::Channel,
        address: String,
        config: &ClientConfig,
    ) -> Self {
        Self::on(
            Credentials::None.wrap(channel),
            ("the sidecar", address),
            config,
        )
    }

    fn on(
        channel: Channel,
        (peer, address): (&'static str, String),
        config: &ClientConfig,
    ) -> Self {
        Self {
            client: OzoneManagerClient::new(channel.clone())
                .max_decoding_message_size(config.max_message_size)
                .max_encoding_message_size(config.max_message_size),
            channel,
            max_message_size: config.max_message_size,
            peer,
            address,
            retry_for: config.om_retry_timeout,
            connect_attempts: config.om_connect_attempts.max(1),
            connect_wait: config.om_connect_wait,
            reached: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Calls OM method `path` (`/ozone.OzoneManager/<Method>`) with an
    /// encoded request and returns the encoded answer, retried as every
    /// call is: how a sidecar passes an application's call on.
    pub async fn forward(
        &self,
        path: tonic::codegen::http::uri::PathAndQuery,
        request: bytes::Bytes,
    ) -> std::result::Result<bytes::Bytes, tonic::Status> {
        self.retry(false, || {
            let mut grpc = tonic::client::Grpc::new(self.channel.clone())
                .max_decoding_message_size(self.max_message_size)
                .max_encoding_message_size(self.max_message_size);
            let (path, request) = (path.clone(), request.clone());
            async move {
                grpc.ready()
                    .await
                    .map_err(|e| tonic::Status::unavailable(format!("OM channel: {e}")))?;
                grpc.unary(tonic::Request::new(request), path, RawCodec)
                    .await
            }
        })
        .await
        .0
    }

    /// Runs `f` against the OM, retrying transient failures with backoff.
    /// Returns the final status and whether an earlier attempt failed
    /// transiently (its effect may have happened). A connection that fails
    /// (refused, unknown host) before the OM ever answered is tried
    /// `ozone.client.failover.max.attempts` times; the error names the
    /// address and what was tried.
    pub async fn call_raw<T, F, Fut>(
        &self,
        mut f: F,
    ) -> (std::result::Result<T, tonic::Status>, bool)
    where
        F: FnMut(OzoneManagerClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.retry(true, || f(self.client.clone())).await
    }

    /// The retry rule of [`Om::call_raw`], over attempts made by `f`. With
    /// `whole_service`, UNIMPLEMENTED means the address serves no OM (every
    /// call the client makes is one the OM serves); a forwarded call may
    /// name a method the OM does not have, and gets the OM's answer.
    async fn retry<T, F, Fut>(
        &self,
        whole_service: bool,
        mut f: F,
    ) -> (std::result::Result<T, tonic::Status>, bool)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut retried = false;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let s = match f().await {
                Ok(r) => {
                    self.reached.store(true, Ordering::Relaxed);
                    return (Ok(r.into_inner()), retried);
                }
                Err(s) => s,
            };
            if let Some(u) = std::error::Error::source(&s).and_then(untrusted_certificate) {
                // Final: no retry makes a refused certificate good.
                return (
                    Err(tonic::Status::failed_precondition(format!(
                        "cannot reach {} at {}: {u}",
                        self.peer, self.address
                    ))),
                    retried,
                );
            }
            let refused = connect_failure(&s);
            if refused.is_none() {
                // The OM (or something at its address) answered.
                self.reached.store(true, Ordering::Relaxed);
            }
            let first_contact = !self.reached.load(Ordering::Relaxed);
            let retry = match &refused {
                Some(_) if first_contact => attempts < self.connect_attempts,
                _ => transient(&s) && start.elapsed() < self.retry_for,
            };
            if retry {
                tracing::debug!(
                    "{} at {} unavailable, retrying: {s}",
                    self.peer,
                    self.address
                );
                retried = true;
                if first_contact {
                    tokio::time::sleep(self.connect_wait).await;
                } else {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                continue;
            }
            if !whole_service && s.code() == tonic::Code::Unimplemented {
                return (Err(s), retried);
            }
            return (Err(self.explain(s, refused, attempts, start)), retried);
        }
    }

    /// The final error of a call, saying which address failed and how.
    fn explain(
        &self,
        s: tonic::Status,
        refused: Option<String>,
        attempts: u32,
        start: Instant,
    ) -> tonic::Status {
        let (peer, addr) = (self.peer, &self.address);
        let tried = format!(
            "{attempts} attempt{} in {:.1}s",
            if attempts == 1 { "" } else { "s" },
            start.elapsed().as_secs_f64()
        );
        match refused {
            Some(cause) => {
                // A cause that names the address already says it all.
                let what = if cause.contains(addr.as_str()) {
                    cause
                } else {
                    format!("cannot reach {peer} at {addr}: {cause}")
                };
                tonic::Status::unavailable(format!(
                    "{what} ({tried}; {} sets the attempts)",
                    if self.reached.load(Ordering::Relaxed) {
                        "ozone.client.om.retry.timeout"
                    } else {
                        "ozone.client.failover.max.attempts"
                    }
                ))
            }
            None if s.code() == tonic::Code::Unimplemented => {
                tonic::Status::failed_precondition(format!(
                    "{addr} is not an OM: it does not serve the OM's calls (a datanode's or \
                     sidecar's port?)"
                ))
            }
            None if transient(&s) => tonic::Status::new(
                s.code(),
                format!("{peer} at {addr}: {} ({tried})", s.message()),
            ),
            None => s,
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

/// A gRPC codec of encoded messages: what the sidecar passes on unread.
#[derive(Clone, Copy, Default)]
pub struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: bytes::Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> std::result::Result<(), tonic::Status> {
        bytes::BufMut::put(dst, item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> std::result::Result<Option<bytes::Bytes>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
