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
#[command(
    name = "ozone-operator",
    version,
    about = "Ozone operator",
    after_help = "Example: ozone-operator render -f examples/minimal.yaml"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the controller (one replica: run it as a single-replica
    /// Deployment with the Recreate strategy, as the Helm chart does).
    #[command(after_help = "Example: ozone-operator run --http-addr 0.0.0.0:8080")]
    Run {
        /// Watch one namespace only (default: all).
        #[arg(long, env = "WATCH_NAMESPACE")]
        namespace: Option<String>,
        /// Address of /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:8080")]
        http_addr: SocketAddr,
        /// Server-side apply the OzoneCluster CRD at start-up (keeps it
        /// current across chart upgrades, which never touch `crds/`).
        #[arg(long, env = "OZONE_OPERATOR_MANAGE_CRD", default_value_t = true, action = clap::ArgAction::Set)]
        manage_crd: bool,
        /// The operator's own identity, `namespace/serviceaccount`: made an
        /// administrator of clusters with authentication on (the chart sets
        /// it from its pod).
        #[arg(long, env = "OZONE_OPERATOR_IDENTITY")]
        identity: Option<String>,
        /// The token the operator presents to OMs (its projected
        /// ServiceAccount token for the audience `ozone`; re-read when the
        /// kubelet rotates it).
        #[arg(long, env = "OZONE_OPERATOR_OM_TOKEN_FILE")]
        om_token_file: Option<PathBuf>,
        /// The ClusterRole (only `create tokenreviews`) the OM of each
        /// cluster with authentication on is bound to.
        #[arg(long, env = "OZONE_OPERATOR_TOKENREVIEW_ROLE", default_value = ozone_operator::controller::DEFAULT_TOKENREVIEW_ROLE)]
        tokenreview_role: String,
    },
    /// Prints the OzoneCluster CustomResourceDefinition.
    #[command(after_help = "Example: ozone-operator crd > crds/ozonecluster.yaml")]
    Crd,
    /// GETs an http:// URL and exits 0 on a 2xx answer (the chart's
    /// `helm test`; the image carries no curl).
    #[command(
        after_help = "Example: ozone-operator probe http://ozone-operator-metrics.ozone-system.svc:8080/readyz"
    )]
    Probe {
        /// The URL, e.g. http://ozone-operator-metrics.ozone-system.svc:8080/readyz.
        url: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// Prints, offline, the objects for an OzoneCluster resource.
    #[command(after_help = "Example: ozone-operator render -f examples/production.yaml")]
    Render {
        /// The resource (YAML).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Namespace when the resource names none.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The operator's identity (`namespace/serviceaccount`), as `run
        /// --identity` (an administrator of clusters with authentication on).
        #[arg(long)]
        identity: Option<String>,
    },
}

fn main() -> std::process::ExitCode {
    ozone_process::exit::code(run_main())
}

fn run_main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Run {
            namespace,
            http_addr,
            manage_crd,
            identity,
            om_token_file,
            tokenreview_role,
        } => {
            ozone_process::logging::init();
            // An empty WATCH_NAMESPACE (the chart's default) means all.
            let namespace = namespace.filter(|n| !n.trim().is_empty());
            let identity = identity.filter(|i| !i.trim().is_empty());
            if let Some(id) = &identity {
                anyhow::ensure!(
                    id.split_once('/')
                        .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains('/')),
                    "--identity must be namespace/serviceaccount, not {id:?}"
                );
            }
            let operator = Operator {
                identity,
                om_token_file: om_token_file.filter(|p| !p.as_os_str().is_empty()),
                tokenreview_role,
            };
            tokio::runtime::Runtime::new()?
                .block_on(run(namespace, http_addr, manage_crd, operator))?;
        }
        Cmd::Crd => print!("{}", ozone_operator::crd_yaml()?),
        Cmd::Probe { url, timeout } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let status = rt.block_on(tokio::time::timeout(
                std::time::Duration::from_secs(timeout),
                probe(&url),
            ))??;
            println!("{url}: {status}");
            anyhow::ensure!(status.starts_with('2'), "{url} answered {status}");
        }
        Cmd::Render {
            file,
            namespace,
            identity,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut c = ozone_operator::render::admit(&text)
                .with_context(|| format!("{} would be refused", file.display()))?;
            c.metadata.namespace.get_or_insert(namespace);
            c.metadata
                .uid
                .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
            let env = ozone_operator::builders::Environment {
                operator_identity: identity,
            };
            let objs = ozone_operator::builders::build_in(&c, &env)?;
            print!("{}", objs.to_yaml()?);
        }
    }
    Ok(())
}

/// Who the operator is to the OMs it administers.
struct Operator {
    identity: Option<String>,
    om_token_file: Option<PathBuf>,
    tokenreview_role: String,
}

async fn run(
    namespace: Option<String>,
    http_addr: SocketAddr,
    manage_crd: bool,
    operator: Operator,
) -> anyhow::Result<()> {
    use ozone_operator::controller::{Context, run};
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let metrics = ozone_operator::metrics::Metrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    if manage_crd {
        ozone_operator::controller::apply_crd(&client)
            .await
            .context("applying the OzoneCluster CRD (or run with --manage-crd=false)")?;
        tracing::info!("CRD applied");
    }
    let ready = Arc::new(AtomicBool::new(false));
    let addr = ozone_process::http::serve(
        http_addr,
        ozone_process::http::HttpState {
            ready: ready.clone(),
            registry: Arc::new(registry),
        },
    )
    .await
    .with_context(|| format!("binding {http_addr}"))?;
    tracing::info!(%addr, namespace = namespace.as_deref().unwrap_or("*"), "operator starting");
    if operator.identity.is_none() {
        tracing::warn!(
            "no --identity: clusters with authentication on will not count the operator as \
             an administrator (scale-down decommissioning fails there)"
        );
    }
    let ctx = Context::new(client, metrics).with_operator(
        operator.identity,
        operator.om_token_file,
        operator.tokenreview_role,
    );
    run(Arc::new(ctx), namespace.as_deref(), ready).await;
    Ok(())
}

/// One HTTP/1.1 GET; returns the status code and reason.
async fn probe(url: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .context("only http:// URLs are probed")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::net::TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    let req = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or_default();
    let status = line.split_once(' ').map(|(_, r)| r).unwrap_or(line);
    Ok(status.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command's `--help` ends with an example.
    #[test]
    fn every_command_has_an_example() {
        use clap::CommandFactory;
        let mut root = Cli::command();
        root.build();
        assert!(root.render_long_help().to_string().contains("Example: "));
        for sub in root.get_subcommands_mut() {
            if sub.get_name() != "help" {
                let help = sub.render_long_help().to_string();
                assert!(
                    help.contains("Example: ozone-operator"),
                    "{}",
                    sub.get_name()
                );
            }
        }
    }
}
