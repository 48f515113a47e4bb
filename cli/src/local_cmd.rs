//! `ozone local up` and `ozone local restart`: a local cluster in the foreground.

use std::path::PathBuf;

use anyhow::bail;
use ozone_common::config::{self as keys, Conf};
use ozone_local::{LocalCluster, LocalSpec};

use crate::args::*;

/// Asks the `local up` running in `dir` (its pid file) to start its exited
/// processes again (SIGHUP).
pub(crate) fn local_restart(dir: &std::path::Path) -> anyhow::Result<()> {
    let pid_file = dir.join("local-up.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .map_err(|e| {
            anyhow::anyhow!(
                "no local cluster runs in {} ({}: {e})",
                dir.display(),
                pid_file.display()
            )
        })?
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{} holds no pid", pid_file.display()))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .map_err(|e| anyhow::anyhow!("local up (pid {pid}) in {}: {e}", dir.display()))?;
    println!("asked local up (pid {pid}) to restart its exited processes; see its output");
    Ok(())
}

pub(crate) async fn local_up(
    cli: &Cli,
    dir: PathBuf,
    datanodes: usize,
    sidecars: bool,
) -> anyhow::Result<()> {
    if datanodes == 0 {
        bail!("--datanodes must be at least 1");
    }
    let mut conf = Vec::new();
    if let Some(p) = &cli.conf {
        conf.extend(Conf::load(p)?.iter().map(|(k, v)| format!("{k}={v}")));
    }
    conf.extend(cli.set.iter().cloned());
    let replication = Conf::parse(&conf.join("\n"), "--conf/--set")?.value(&keys::REPLICATION)?;
    if datanodes < 3 && replication == keys::ReplicationFactor::Three {
        crate::output::warn(format!(
            "{datanodes} datanode(s): keys with replication THREE (ozone.replication, the \
             default) cannot be written; use --datanodes 3, or --set ozone.replication=ONE"
        ));
    }
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let spec = LocalSpec {
        dir: dir.clone(),
        datanodes,
        exe: std::env::current_exe()?,
        conf,
    };
    // One shutdown future for the whole run, polled from the start: its
    // handler is registered before anything is printed, so a SIGTERM sent
    // right after `ready` is never lost between two waits.
    let stop = ozone_process::signal::shutdown();
    tokio::pin!(stop);
    let mut cluster = tokio::select! {
        c = LocalCluster::start(spec) => c?,
        _ = &mut stop => bail!("interrupted while starting"),
    };
    println!("ready om={}", cluster.om_address());
    if sidecars {
        for s in cluster.start_sidecars().await? {
            println!(
                "sidecar {} node={} socket={} passthrough={} http={}{}",
                s.name,
                s.node,
                s.socket.display(),
                s.passthrough_dir.display(),
                s.http,
                s.identity
                    .map(|i| format!(" identity={i}"))
                    .unwrap_or_default()
            );
        }
    }
    eprintln!(
        "cluster state in {}; logs in {}/logs; `source {}/cluster.env` to use it",
        dir.display(),
        dir.display(),
        dir.display()
    );
    let pid_file = dir.join("local-up.pid");
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // A datanode or sidecar that exits is reported and the rest keeps
    // running (a lost datanode is what the replication manager repairs);
    // SIGHUP (`ozone local restart --dir DIR`) starts the exited ones again.
    // The OM's exit ends the cluster.
    let res = loop {
        tokio::select! {
            _ = &mut stop => {
                eprintln!("stopping");
                break Ok(());
            }
            (name, status) = cluster.next_exit() => {
                if name == "om" {
                    break Err(anyhow::anyhow!("the OM exited ({status}); see {}/logs/om.log", dir.display()));
                }
                eprintln!(
                    "{name} exited ({status}); the rest keeps running. `ozone local restart --dir {}` \
                     starts it again; its log is {}/logs/{name}.log",
                    dir.display(),
                    dir.display()
                );
            }
            _ = hup.recv() => {
                match cluster.restart_exited().await {
                    Ok(v) if v.is_empty() => eprintln!("restart: every process is running"),
                    Ok(v) => eprintln!("restarted {}", v.join(", ")),
                    Err(e) => eprintln!("restart failed: {e}"),
                }
            }
        }
    };
    cluster.stop().await;
    let _ = std::fs::remove_file(&pid_file);
    res
}
