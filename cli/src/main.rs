//! `ozone`: the shell (`ozone sh`), admin commands, a local cluster
//! (`ozone local up`), the demo, and the OM, datanode and sidecar processes.

mod admin;
mod args;
mod demo;
mod fs_shell;
mod local_cmd;
mod output;
mod sh;

use anyhow::Context;
use ozone_common::config::{self as keys, Source};

use crate::args::*;
use clap::Parser;

use crate::admin::admin;
use crate::local_cmd::{local_restart, local_up};
use crate::sh::sh;

/// `ozone config`: the effective configuration of a role, each value with
/// its source, or the table of every key.
fn print_config(cli: &Cli, role: &str, markdown: bool, template: bool) -> anyhow::Result<()> {
    if markdown {
        print!("{}", keys::markdown_table());
        return Ok(());
    }
    let role = keys::Role::parse(role).with_context(|| {
        format!("unknown role {role}: expected om, datanode, client or sidecar")
    })?;
    if template {
        print!("{}", keys::template(role));
        return Ok(());
    }
    let conf = cli.conf()?;
    conf.validate()?;
    let rows = conf.effective(role);
    let width = rows.iter().map(|(k, _, _)| k.name.len()).max().unwrap_or(0);
    for (k, v, src) in rows {
        let v = v.unwrap_or_default();
        println!("{:<width$} = {:<12} # {src}", k.name, v);
    }
    for (k, near) in conf.unknown() {
        match near {
            Some(n) => println!("# unknown key {k} (ignored): did you mean {n}?"),
            None => println!("# unknown key {k} (ignored)"),
        }
    }
    Ok(())
}

/// The role names the image links to this binary: `ozone-om ARGS` runs as
/// `ozone om ARGS`, and so on.
const ROLE_NAMES: [(&str, &str); 3] = [
    ("ozone-om", "om"),
    ("ozone-datanode", "datanode"),
    ("ozone-sidecar", "sidecar"),
];

/// The arguments with the role subcommand put in when the program was
/// started under a role name.
fn role_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.collect();
    let name = args
        .first()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    if let Some((_, sub)) = ROLE_NAMES.iter().find(|(n, _)| Some(*n) == name) {
        args.insert(1, sub.into());
    }
    args
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(role_args(std::env::args_os()));
    match cli.cmd {
        Cmd::Om(_) | Cmd::Datanode(_) | Cmd::Sidecar(_) => output::init_logging("info"),
        _ => output::init_logging(output::user_log_level(cli.verbose)),
    }
    ozone_process::exit::code(run(cli).await)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.cmd {
        Cmd::Sh { cmd } => sh(&cli, cmd).await,
        Cmd::Fs { args } => {
            let conf = cli.conf()?;
            let code = if let Some(socket) = conf.opt(&keys::CLIENT_SIDECAR_SOCKET)? {
                // Through the workload's sidecar (its OM, its policy).
                fs_shell::run(|_| Ok(ozone_client::SidecarClient::unix(&socket)?), args).await?
            } else {
                fs_shell::run(
                    |om| match om {
                        Some(om) => {
                            let mut c = conf.clone();
                            c.set_from(
                                keys::OM_ADDRESS.name,
                                om.to_string(),
                                Source::Flag("ofs://"),
                            );
                            cli.client_of(&c)
                        }
                        None => cli.client_of(&conf),
                    },
                    args,
                )
                .await?
            };
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Cmd::Admin { cmd } => admin(&cli, cmd).await,
        Cmd::Local {
            cmd:
                LocalCmd::Up {
                    dir,
                    datanodes,
                    sidecars,
                },
        } => local_up(&cli, dir.clone(), *datanodes, *sidecars).await,
        Cmd::Local {
            cmd: LocalCmd::Restart { dir },
        } => local_restart(dir),
        Cmd::Demo(args) => demo::run(args.clone(), cli.set.clone()).await,
        Cmd::Config {
            role,
            markdown,
            template,
        } => print_config(&cli, role, *markdown, *template),
        Cmd::Version => {
            println!("ozone {}", env!("CARGO_PKG_VERSION"));
            println!("source revision: {}", env!("OZONE_GIT_REVISION"));
            println!("Hadoop FileSystem scheme: ozrs:// (hadoop-fs/, ozone-hadoop-fs.jar)");
            println!(
                "protocol: ozone.proto (OM, datanode, sidecar gRPC; short-circuit over UNIX sockets)"
            );
            Ok(())
        }
        Cmd::Om(args) => ozone_om::cmd::run(args.clone()).await,
        Cmd::Datanode(args) => ozone_datanode::cmd::run(args.clone()).await,
        Cmd::Sidecar(args) => ozone_sidecar::cmd::run(args.clone()).await,
        Cmd::PrepareDirs {
            owner,
            socket_dir,
            data_dir,
        } => {
            use ozone_datanode::prepare;
            let (uid, gid) = prepare::parse_owner(owner)?;
            prepare::prepare(uid, gid, socket_dir.as_deref(), data_dir.as_deref())?;
            for d in [socket_dir, data_dir].into_iter().flatten() {
                println!("prepared {} for {uid}:{gid}", d.display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(role_args(args.iter().map(std::ffi::OsString::from))).unwrap()
    }

    /// Every command's `--help` ends with an example.
    #[test]
    fn every_command_has_an_example() {
        use clap::CommandFactory;
        fn walk(c: &mut clap::Command, path: String, missing: &mut Vec<String>) {
            let help = c.render_long_help().to_string();
            if !help.contains("Example: ozone") {
                missing.push(path.clone());
            }
            for sub in c.get_subcommands_mut() {
                // clap's generated `help` subcommands print other commands' help.
                if sub.get_name() != "help" {
                    let name = format!("{path} {}", sub.get_name());
                    walk(sub, name, missing);
                }
            }
        }
        let mut missing = Vec::new();
        let mut root = Cli::command();
        root.build();
        assert!(
            root.render_long_help()
                .to_string()
                .contains("Example: ozone")
        );
        for sub in root.get_subcommands_mut() {
            if sub.get_name() != "help" {
                let name = format!("ozone {}", sub.get_name());
                walk(sub, name, &mut missing);
            }
        }
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }

    #[test]
    fn role_names_run_their_subcommand() {
        let c = parse(&["/usr/local/bin/ozone-om", "--metadata-dir", "/m"]);
        assert!(matches!(c.cmd, Cmd::Om(_)));
        let c = parse(&["ozone-datanode", "--om", "om:9862", "--data-dir", "/d"]);
        assert!(matches!(c.cmd, Cmd::Datanode(_)));
        let c = parse(&["ozone-sidecar", "--om", "om:9862", "--socket", "/s"]);
        assert!(matches!(c.cmd, Cmd::Sidecar(_)));
        // Under its own name, the subcommand comes from the arguments.
        let c = parse(&["ozone", "sh", "volume", "ls"]);
        assert!(matches!(c.cmd, Cmd::Sh { .. }));
        assert!(Cli::try_parse_from(role_args(["ozone-omx"].map(Into::into).into_iter())).is_err());
    }
}
