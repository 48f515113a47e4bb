//! The shutdown signal every process obeys.

/// Resolves on SIGTERM (what Kubernetes and `podman stop` send) or Ctrl-C.
/// Without a SIGTERM handler (never expected) it waits for Ctrl-C alone.
pub async fn shutdown() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!("no SIGTERM handler ({e}); stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
