//! The OM's own `OzoneManager` service, served on the sidecar's socket and
//! passed on to the OM unread: each call goes out with the workload's
//! credentials over the sidecar's OM connection, and is retried there by
//! the client's one rule ([`ozone_client::Om::forward`]). What the sidecar
//! adds: its drain guard (no new call once draining) and a count of the
//! answers. The OM authorizes every call as the workload.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use ozone_client::RawCodec;
use ozone_client::prelude::*;
use ozone_proto::ozone_manager_server::SERVICE_NAME;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use crate::metrics::OmCallLabels;
use crate::state::State;

/// The pass-through of the OM's service.
#[derive(Clone)]
pub(crate) struct OmPassThrough {
    state: Arc<State>,
}

impl OmPassThrough {
    /// Passes calls on through `state`'s client.
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

impl NamedService for OmPassThrough {
    const NAME: &'static str = SERVICE_NAME;
}

impl tonic::codegen::Service<http::Request<Body>> for OmPassThrough {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let call = Forward {
            state: self.state.clone(),
            path: req.uri().path_and_query().cloned(),
        };
        let max = self.state.active().client.config().max_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(RawCodec).apply_max_message_size_config(Some(max), Some(max));
            Ok(grpc.unary(call, req).await)
        })
    }
}

/// One call being passed on.
struct Forward {
    state: Arc<State>,
    path: Option<http::uri::PathAndQuery>,
}

impl UnaryService<Bytes> for Forward {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<Response<Bytes>, Status>>;

    fn call(&mut self, req: Request<Bytes>) -> Self::Future {
        let state = self.state.clone();
        let path = self.path.take();
        Box::pin(async move {
            let path = path.ok_or_else(|| Status::invalid_argument("a call without a path"))?;
            let _g = state.enter()?;
            let client = state.active().client.clone();
            let answer = client.om().forward(path, req.into_inner()).await;
            let code = match &answer {
                Ok(_) => tonic::Code::Ok,
                Err(s) => s.code(),
            };
            state
                .metrics
                .om_calls
                .get_or_create(&OmCallLabels {
                    code: format!("{code:?}"),
                })
                .inc();
            answer.map(Response::new)
        })
    }
}
