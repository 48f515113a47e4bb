//! `ozone-operator`: `run` runs the controller; `crd` prints the CRD;
//! `render -f FILE` prints every object the operator would apply for a
//! cluster resource.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ozone-operator", version, about = "Ozone operator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the controller (one replica: run it as a single-replica
    /// Deployment with the Recreate strategy, as the Helm chart does).
    Run {
        /// Watch one namespace only (default: all).
        #[arg(long, env = "WATCH_NAMESPACE")]
        namespace: Option<String>,
        /// Address of /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:8080")]
        http_addr: SocketAddr,
    },
    /// Prints the OzoneCluster CustomResourceDefinition.
    Crd,
    /// Prints, offline, the objects for an OzoneCluster resource.
    Render {
        /// The resource (YAML).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Namespace when the resource names none.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Run {
            namespace,
            http_addr,
        } => {
            ozone_common::logging::init();
            tokio::runtime::Runtime::new()?.block_on(run(namespace, http_addr))?;
        }
        Cmd::Crd => print!("{}", ozone_operator::crd_yaml()?),
        Cmd::Render { file, namespace } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut c: ozone_operator::crd::OzoneCluster = serde_yaml::from_str(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            c.metadata.namespace.get_or_insert(namespace);
            c.metadata
                .uid
                .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
            let objs = ozone_operator::builders::build(&c)?;
            print!("{}", objs.to_yaml()?);
        }
    }
    Ok(())
}

async fn run(namespace: Option<String>, http_addr: SocketAddr) -> anyhow::Result<()> {
    use ozone_operator::controller::{Context, run};
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let metrics = ozone_operator::metrics::Metrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let ready = Arc::new(AtomicBool::new(true));
    let addr = ozone_common::http::serve(
        http_addr,
        ozone_common::http::HttpState {
            ready,
            registry: Arc::new(registry),
        },
    )
    .await
    .with_context(|| format!("binding {http_addr}"))?;
    tracing::info!(%addr, namespace = namespace.as_deref().unwrap_or("*"), "operator starting");
    run(
        Arc::new(Context::new(client, metrics)),
        namespace.as_deref(),
    )
    .await;
    Ok(())
}
