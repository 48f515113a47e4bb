//! The HTTP side port of each process: `/healthz`, `/readyz` and
//! `/metrics` (Prometheus text format).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Shared state of the health/metrics endpoint.
#[derive(Clone)]
pub struct HttpState {
    /// Set once the process serves traffic.
    pub ready: Arc<AtomicBool>,
    /// Metrics rendered at `/metrics`.
    pub registry: Arc<Registry>,
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}

/// Binds `addr` and serves the endpoints in a background task; returns the
/// bound address.
pub async fn serve(addr: SocketAddr, state: HttpState) -> std::io::Result<SocketAddr> {
    serve_with(addr, state, Vec::new()).await
}

/// A text page rendered on each request.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

/// [`serve`] plus extra text pages at the given paths.
pub async fn serve_with(
    addr: SocketAddr,
    state: HttpState,
    pages: Vec<(&'static str, Page)>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    for (path, page) in pages {
        app = app.route(path, get(move || async move { page() }));
    }
    let app = app.with_state(state);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("http endpoint stopped: {e}");
        }
    });
    Ok(local)
}

/// Binds a TCP listener for a gRPC server; returns it with its bound address
/// (port 0 picks a free port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
