//! What every Ozone server process runs on: the HTTP side port
//! (`/healthz`, `/readyz`, `/metrics`), the gRPC server's start-up and
//! shutdown sequence, the shutdown signal, log setup and exit codes. Kept
//! apart from `ozone-common` so that the embeddable client does not pull
//! in an HTTP server, a metrics registry or a log subscriber.

pub mod exit;
pub mod http;
pub mod logging;
pub mod server;
pub mod signal;
