//! `ozone-sidecar`: runs one sidecar.

use clap::Parser;

#[derive(Parser)]
#[command(name = "ozone-sidecar", version, about = "Ozone client sidecar")]
struct Cli {
    #[command(flatten)]
    args: ozone_sidecar::cmd::SidecarArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    ozone_process::logging::init();
    ozone_process::exit::code(ozone_sidecar::cmd::run(Cli::parse().args).await)
}
