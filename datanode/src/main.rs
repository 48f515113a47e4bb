//! `ozone-datanode`: runs one datanode.

use clap::Parser;

#[derive(Parser)]
#[command(name = "ozone-datanode", version, about = "Ozone datanode")]
struct Cli {
    #[command(flatten)]
    args: ozone_datanode::cmd::DatanodeArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    ozone_process::logging::init();
    ozone_process::exit::code(ozone_datanode::cmd::run(Cli::parse().args).await)
}
