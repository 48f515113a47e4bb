//! `ozone-om`: runs the Ozone Manager.

use clap::Parser;

#[derive(Parser)]
#[command(name = "ozone-om", version, about = "Ozone Manager")]
struct Cli {
    #[command(flatten)]
    args: ozone_om::cmd::OmArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    ozone_process::logging::init();
    ozone_process::exit::code(ozone_om::cmd::run(Cli::parse().args).await)
}
