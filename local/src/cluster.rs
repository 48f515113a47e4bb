//! A local cluster: one OM and N datanodes as child processes of the
//! `ozone` binary, each datanode standing for its own node (`node1`,
//! `node2`, ...), all state under one directory.
//!
//! Layout: `DIR/om/` (OM database), `DIR/node<i>/{data,meta}/` (datanode
//! `i`), `DIR/node<i>/sockets/` (its socket directory, the hostPath),
//! `DIR/<node>/app/<sidecar>/` (a sidecar's emptyDir: `sidecar.sock`,
//! pass-through `sockets/`, and `sidecar.conf`, its ConfigMap),
//! `DIR/logs/*.log` (process output), `DIR/cluster.env`, `DIR/om.port`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ozone_client::{Client, ClientConfig, KeyAccess};
use ozone_common::config as keys;
use ozone_proto::NodeState;
use tokio::process::{Child, Command};

/// Config applied to every process of a local cluster unless overridden:
/// fast heartbeats so failures are noticed within seconds.
pub const LOCAL_DEFAULTS: &[(&str, &str)] = &[
    (keys::HEARTBEAT_INTERVAL.name, "1s"),
    (keys::STALE_NODE_INTERVAL.name, "5s"),
    (keys::DEAD_NODE_INTERVAL.name, "15s"),
];

/// Errors of the local cluster.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("I/O on {0}: {1}")]
    Io(String, std::io::Error),
    #[error("{what} did not become ready within {secs}s; see {log}")]
    Timeout {
        what: String,
        secs: u64,
        log: String,
    },
    #[error("{what} exited early ({status}); see {log}")]
    Exited {
        what: String,
        status: String,
        log: String,
    },
    #[error("client: {0}")]
    Client(#[from] ozone_client::ClientError),
}

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// Root directory of all state.
    pub dir: PathBuf,
    /// Number of datanodes.
    pub datanodes: usize,
    /// The `ozone` executable (subcommands `om` and `datanode`).
    pub exe: PathBuf,
    /// `key=value` config for every process (after [`LOCAL_DEFAULTS`]).
    pub conf: Vec<String>,
}

/// A running local cluster. Dropping it kills every process.
pub struct LocalCluster {
    spec: LocalSpec,
    om_port: u16,
    om: Option<Child>,
    datanodes: Vec<Option<Child>>,
    sidecars: Vec<(SidecarInfo, Vec<String>, Option<Child>)>,
}

/// Node name of the simulated node that runs workloads but no datanode.
pub const CLIENT_NODE: &str = "client-node";

/// A sidecar of the local cluster.
#[derive(Debug, Clone)]
pub struct SidecarInfo {
    /// Sidecar name (unique in the cluster).
    pub name: String,
    /// Node it runs on.
    pub node: String,
    /// The application-facing gRPC socket.
    pub socket: PathBuf,
    /// Directory of its pass-through relay sockets (an application's
    /// `ozone.domain.socket.path`).
    pub passthrough_dir: PathBuf,
    /// Its config file (policy), reloaded when it changes.
    pub conf: PathBuf,
    /// Its HTTP address (/metrics, /policy).
    pub http: String,
    /// The identity it presents to the OM, when the cluster checks tokens
    /// against a file: its own, `local/<name>`.
    pub identity: Option<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + '_ {
    move |e| LocalError::Io(path.display().to_string(), e)
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The OM port of the cluster in `dir`: the one an earlier run used
/// (`DIR/om.port`) while it is free, so addresses in scripts and shells stay
/// valid across restarts; else a free one, remembered.
fn om_port(dir: &std::path::Path) -> std::io::Result<u16> {
    let file = dir.join("om.port");
    if let Some(p) = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| s.trim().parse::<u16>().ok())
        && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
    {
        return Ok(p);
    }
    let p = free_port()?;
    std::fs::write(&file, format!("{p}\n"))?;
    Ok(p)
}

impl LocalCluster {
    /// Node name of datanode `i` (0-based): `node<i+1>`.
    pub fn node_name(i: usize) -> String {
        format!("node{}", i + 1)
    }

    /// Starts the OM and every datanode; returns once all datanodes are
    /// registered and healthy.
    pub async fn start(spec: LocalSpec) -> Result<Self, LocalError> {
        std::fs::create_dir_all(spec.dir.join("logs")).map_err(io(&spec.dir))?;
        let om_port = om_port(&spec.dir).map_err(io(&spec.dir))?;
        let mut c = Self {
            datanodes: (0..spec.datanodes).map(|_| None).collect(),
            spec,
            om_port,
            om: None,
            sidecars: Vec::new(),
        };
        c.start_om().await?;
        for i in 0..c.spec.datanodes {
            c.start_datanode(i).await?;
        }
        c.wait_healthy(c.spec.datanodes, Duration::from_secs(30))
            .await?;
        let env = format!(
            "export OZONE_OM_ADDRESS={}\nexport OZONE_LOCAL_CLUSTER_DIR={}\n",
            c.om_address(),
            c.spec.dir.display()
        );
        let p = c.spec.dir.join("cluster.env");
        std::fs::write(&p, env).map_err(io(&p))?;
        Ok(c)
    }

    /// The OM's gRPC address.
    pub fn om_address(&self) -> String {
        format!("127.0.0.1:{}", self.om_port)
    }

    /// Root directory.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    /// Directory of datanode `i`.
    pub fn datanode_dir(&self, i: usize) -> PathBuf {
        self.spec.dir.join(Self::node_name(i))
    }

    /// The short-circuit socket directory of node `name` in cluster `dir`.
    pub fn socket_dir_of(dir: &Path, name: &str) -> PathBuf {
        dir.join(name).join("sockets")
    }

    /// The short-circuit socket directory of datanode `i`'s node.
    pub fn socket_dir(&self, i: usize) -> PathBuf {
        Self::socket_dir_of(&self.spec.dir, &Self::node_name(i))
    }

    /// A client of this cluster running on `node` (or on no datanode's
    /// node), reading short-circuit from that node's socket directory.
    pub fn client(&self, node: Option<&str>) -> Result<Client, LocalError> {
        let mut conf = ozone_common::config::Conf::new();
        // A secured cluster's own client presents the token it was given
        // and speaks TLS when the cluster does.
        use ozone_common::config::{CLIENT_TOKEN_FILE, GRPC_TLS_DIR, GRPC_TLS_ENABLED};
        for key in [
            CLIENT_TOKEN_FILE.name,
            GRPC_TLS_ENABLED.name,
            GRPC_TLS_DIR.name,
        ] {
            for kv in &self.spec.conf {
                if let Some(v) = kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')) {
                    conf.set(key, v.to_string());
                }
            }
        }
        if let Some(n) = node {
            conf.set(
                ozone_common::config::DOMAIN_SOCKET_PATH.name,
                Self::socket_dir_of(&self.spec.dir, n).display().to_string(),
            );
        }
        let mut cfg = ClientConfig::from_conf(&self.om_address(), &conf)
            .map_err(ozone_client::ClientError::from)?;
        cfg.node_name = node.map(str::to_string);
        Ok(Client::connect(cfg)?)
    }

    fn conf_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        for kv in LOCAL_DEFAULTS
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(self.spec.conf.iter().cloned())
        {
            v.push("--set".to_string());
            v.push(kv);
        }
        v
    }

    fn spawn(&self, name: &str, args: Vec<String>) -> Result<Child, LocalError> {
        self.spawn_env(name, args, &[])
    }

    fn spawn_env(
        &self,
        name: &str,
        args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Result<Child, LocalError> {
        let log = self.spec.dir.join("logs").join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io(&log))?;
        let err = out.try_clone().map_err(io(&log))?;
        Command::new(&self.spec.exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(&self.spec.exe))
    }

    async fn wait_file(
        &self,
        child: &mut Child,
        file: &Path,
        what: &str,
    ) -> Result<(), LocalError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !file.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(LocalError::Exited {
                    what: what.into(),
                    status: status.to_string(),
                    log: self.log_path(what),
                });
            }
            if Instant::now() > deadline {
                return Err(LocalError::Timeout {
                    what: what.into(),
                    secs: 30,
                    log: self.log_path(what),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn log_path(&self, name: &str) -> String {
        self.spec
            .dir
            .join("logs")
            .join(format!("{name}.log"))
            .display()
            .to_string()
    }

    /// Starts (or restarts) the OM on its port.
    pub async fn start_om(&mut self) -> Result<(), LocalError> {
        let dir = self.spec.dir.join("om");
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut args = vec![
            "om".to_string(),
            "--metadata-dir".into(),
            dir.display().to_string(),
            "--grpc-addr".into(),
            self.om_address(),
            "--http-addr".into(),
            "127.0.0.1:0".into(),
            "--ready-file".into(),
            ready.display().to_string(),
        ];
        args.extend(self.conf_args());
        let mut child = self.spawn("om", args)?;
        self.wait_file(&mut child, &ready, "om").await?;
        self.om = Some(child);
        Ok(())
    }

    /// Starts (or restarts) datanode `i` with its directories.
    pub async fn start_datanode(&mut self, i: usize) -> Result<(), LocalError> {
        let name = Self::node_name(i);
        let dir = self.datanode_dir(i);
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut args = vec![
            "datanode".to_string(),
            "--data-dir".into(),
            dir.join("data").display().to_string(),
            "--metadata-dir".into(),
            dir.join("meta").display().to_string(),
            "--grpc-addr".into(),
            "127.0.0.1:0".into(),
            "--http-addr".into(),
            "127.0.0.1:0".into(),
            "--om".into(),
            self.om_address(),
            "--node-name".into(),
            name.clone(),
            "--ready-file".into(),
            ready.display().to_string(),
        ];
        args.extend(self.conf_args());
        let sockets = self.socket_dir(i);
        args.push("--set".into());
        args.push(format!(
            "{}={}",
            ozone_common::config::DOMAIN_SOCKET_PATH.name,
            sockets.display()
        ));
        std::fs::create_dir_all(&sockets).map_err(io(&sockets))?;
        std::fs::set_permissions(
            &sockets,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(io(&sockets))?;
        if let Err(e) = ozone_datanode::socket_path::check(&sockets) {
            // Typical under /tmp: fine for a local cluster, never for production.
            tracing::debug!(
                "local cluster socket directory fails the security check ({e}); skipping it"
            );
            args.push("--set".into());
            args.push(format!(
                "{}=true",
                ozone_common::config::DOMAIN_SOCKET_SKIP_CHECK.name
            ));
        }
        let mut child = self.spawn(&name, args)?;
        self.wait_file(&mut child, &ready, &name).await?;
        self.datanodes[i] = Some(child);
        Ok(())
    }

    /// Waits until at least `n` datanodes are registered and healthy.
    pub async fn wait_healthy(&self, n: usize, timeout: Duration) -> Result<(), LocalError> {
        let client = self.client(None)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(dns) = client.om().list_datanodes().await
                && dns
                    .iter()
                    .filter(|d| d.state == NodeState::Healthy as i32)
                    .count()
                    >= n
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LocalError::Timeout {
                    what: format!("{n} healthy datanodes"),
                    secs: timeout.as_secs(),
                    log: self.log_path("om"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The datanode id of datanode `i` (from its metadata directory).
    pub fn datanode_id(&self, i: usize) -> Option<String> {
        std::fs::read_to_string(self.datanode_dir(i).join("meta").join("datanode.id"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Kills datanode `i` with SIGKILL and reaps it.
    pub async fn kill_datanode(&mut self, i: usize) {
        if let Some(mut c) = self.datanodes[i].take() {
            let _ = c.kill().await;
        }
    }

    /// Kills the OM with SIGKILL and reaps it.
    pub async fn kill_om(&mut self) {
        if let Some(mut c) = self.om.take() {
            let _ = c.kill().await;
        }
    }

    /// Process id of datanode `i`.
    pub fn datanode_pid(&self, i: usize) -> Option<u32> {
        self.datanodes[i].as_ref().and_then(|c| c.id())
    }

    /// Starts a sidecar named `name` on `node` whose config file holds
    /// `policy` (`key = value` lines). The node's socket directory is its
    /// hostPath; its own directory stands for the pod's emptyDir.
    pub async fn start_sidecar(
        &mut self,
        node: &str,
        name: &str,
        policy: &[&str],
    ) -> Result<SidecarInfo, LocalError> {
        let dir = self.spec.dir.join(node).join("app").join(name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let sockets = Self::socket_dir_of(&self.spec.dir, node);
        std::fs::create_dir_all(&sockets).map_err(io(&sockets))?;
        let conf = dir.join("sidecar.conf");
        let mut text = keys::template(keys::Role::Sidecar);
        if !policy.is_empty() {
            text.push_str("\n# This sidecar's policy.\n");
        }
        text.extend(policy.iter().map(|l| format!("{l}\n")));
        std::fs::write(&conf, text).map_err(io(&conf))?;
        let info = SidecarInfo {
            name: name.into(),
            node: node.into(),
            socket: dir.join("sidecar.sock"),
            passthrough_dir: dir.join("sockets"),
            conf,
            http: String::new(),
            identity: None,
        };
        let mut args = vec![
            "sidecar".to_string(),
            "--om".into(),
            self.om_address(),
            "--socket".into(),
            info.socket.display().to_string(),
            "--passthrough-dir".into(),
            info.passthrough_dir.display().to_string(),
            "--domain-socket-dir".into(),
            sockets.display().to_string(),
            "--http-addr".into(),
            "127.0.0.1:0".into(),
            "--conf".into(),
            info.conf.display().to_string(),
            "--ready-file".into(),
            dir.join("ready").display().to_string(),
        ];
        args.extend(self.conf_args());
        // On a shared host the sidecar's sockets are open to other users:
        // only this user's processes may use them (unless the policy says
        // who may).
        if !policy
            .iter()
            .any(|l| l.trim_start().starts_with(keys::SIDECAR_ALLOWED_UIDS.name))
        {
            args.push("--set".into());
            args.push(format!(
                "{}={}",
                keys::SIDECAR_ALLOWED_UIDS.name,
                nix::unistd::getuid().as_raw()
            ));
        }
        let mut info = info;
        if let Some(token) = self.sidecar_token(name, &dir)? {
            // Its own identity, not the token the cluster was started with.
            args.push("--set".into());
            args.push(format!(
                "{}={}",
                keys::CLIENT_TOKEN_FILE.name,
                token.display()
            ));
            info.identity = Some(Self::sidecar_identity(name));
        }
        self.sidecars.retain(|(s, _, _)| s.name != name);
        self.sidecars.push((info, args, None));
        self.restart_sidecar(name).await
    }

    /// The identity sidecar `name` presents to the OM: `local/<name>`.
    pub fn sidecar_identity(name: &str) -> String {
        format!("local/{name}")
    }

    /// On a cluster whose OM checks client tokens against a file
    /// (`ozone.om.token.auth.file`), gives sidecar `name` a token of its
    /// own: a fresh random one, entered in that file as
    /// [`sidecar_identity`](Self::sidecar_identity) (replacing an earlier
    /// one of that name) and written to `dir/token` (0600). Its path, or
    /// `None` when the OM checks no token file.
    fn sidecar_token(&self, name: &str, dir: &Path) -> Result<Option<PathBuf>, LocalError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let prefix = format!("{}=", keys::TOKEN_AUTH_FILE.name);
        let Some(file) = self
            .spec
            .conf
            .iter()
            .rev()
            .find_map(|kv| kv.strip_prefix(&prefix))
            .map(PathBuf::from)
        else {
            return Ok(None);
        };
        let token: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        let who = Self::sidecar_identity(name);
        let old = std::fs::read_to_string(&file).map_err(io(&file))?;
        let mut text: String = old
            .lines()
            .filter(|l| l.split(',').nth(1).map(str::trim) != Some(who.as_str()))
            .map(|l| format!("{l}\n"))
            .collect();
        text.push_str(&format!("{token},{who}\n"));
        std::fs::write(&file, text).map_err(io(&file))?;
        let path = dir.join("token");
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        f.write_all(token.as_bytes()).map_err(io(&path))?;
        Ok(Some(path))
    }

    /// (Re)starts sidecar `name` with the arguments it was first started with.
    pub async fn restart_sidecar(&mut self, name: &str) -> Result<SidecarInfo, LocalError> {
        let i = self
            .sidecars
            .iter()
            .position(|(s, _, _)| s.name == name)
            .ok_or_else(|| LocalError::Io(name.into(), std::io::Error::other("no such sidecar")))?;
        if let Some(mut old) = self.sidecars[i].2.take() {
            Self::term(&mut old).await;
        }
        let (info, args) = (self.sidecars[i].0.clone(), self.sidecars[i].1.clone());
        let ready = info.socket.with_file_name("ready");
        let _ = std::fs::remove_file(&ready);
        let log = format!("sidecar-{name}");
        let mut child = self.spawn_env(&log, args, &[("NODE_NAME", info.node.as_str())])?;
        self.wait_file(&mut child, &ready, &log).await?;
        let line = std::fs::read_to_string(&ready).map_err(io(&ready))?;
        let http = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http="))
            .unwrap_or_default()
            .to_string();
        let entry = &mut self.sidecars[i];
        entry.0.http = http;
        entry.2 = Some(child);
        Ok(entry.0.clone())
    }

    /// Starts one sidecar per datanode node and one on [`CLIENT_NODE`]
    /// (no datanode there: its reads go over gRPC), all with the default
    /// policy.
    pub async fn start_sidecars(&mut self) -> Result<Vec<SidecarInfo>, LocalError> {
        let mut out = Vec::new();
        for i in 0..self.spec.datanodes {
            let node = Self::node_name(i);
            out.push(
                self.start_sidecar(&node, &format!("{node}-sidecar"), &[])
                    .await?,
            );
        }
        out.push(
            self.start_sidecar(CLIENT_NODE, &format!("{CLIENT_NODE}-sidecar"), &[])
                .await?,
        );
        Ok(out)
    }

    /// Kills sidecar `name` with SIGKILL and reaps it.
    pub async fn kill_sidecar(&mut self, name: &str) {
        for (s, _, c) in &mut self.sidecars {
            if s.name == name
                && let Some(mut c) = c.take()
            {
                let _ = c.kill().await;
            }
        }
    }

    /// Stops sidecar `name` with SIGTERM (it drains) and waits for it.
    pub async fn stop_sidecar(&mut self, name: &str) {
        for (s, _, c) in &mut self.sidecars {
            if s.name == name
                && let Some(mut c) = c.take()
            {
                Self::term(&mut c).await;
            }
        }
    }

    async fn term(child: &mut Child) {
        if let Some(pid) = child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }

    /// Stops every process with SIGTERM (SIGKILL after 10 s) and removes
    /// `cluster.env`, so a later `source` cannot point at a dead OM.
    pub async fn stop(mut self) {
        let _ = std::fs::remove_file(self.spec.dir.join("cluster.env"));
        for (_, _, c) in &mut self.sidecars {
            if let Some(mut c) = c.take() {
                Self::term(&mut c).await;
            }
        }
        for c in self.datanodes.iter_mut().flatten() {
            Self::term(c).await;
        }
        self.datanodes.iter_mut().for_each(|c| *c = None);
        if let Some(mut om) = self.om.take() {
            Self::term(&mut om).await;
        }
    }

    /// Resolves when a process of the cluster exits: returns its name
    /// (`om`, `node<i>` or `sidecar-<name>`) and how it ended, and forgets
    /// it (see [`LocalCluster::restart_exited`]).
    pub async fn next_exit(&mut self) -> (String, std::process::ExitStatus) {
        loop {
            if let Some(om) = self.om.as_mut()
                && let Ok(Some(st)) = om.try_wait()
            {
                self.om = None;
                return ("om".into(), st);
            }
            for (i, slot) in self.datanodes.iter_mut().enumerate() {
                if let Some(c) = slot
                    && let Ok(Some(st)) = c.try_wait()
                {
                    *slot = None;
                    return (Self::node_name(i), st);
                }
            }
            for (s, _, slot) in &mut self.sidecars {
                if let Some(c) = slot
                    && let Ok(Some(st)) = c.try_wait()
                {
                    *slot = None;
                    return (format!("sidecar-{}", s.name), st);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts again every datanode and sidecar that exited (each with its
    /// own directory, so a datanode keeps its data and id); returns their
    /// names.
    pub async fn restart_exited(&mut self) -> Result<Vec<String>, LocalError> {
        let mut done = Vec::new();
        for i in 0..self.datanodes.len() {
            if self.datanodes[i].is_none() {
                self.start_datanode(i).await?;
                done.push(Self::node_name(i));
            }
        }
        let gone: Vec<String> = self
            .sidecars
            .iter()
            .filter(|(_, _, c)| c.is_none())
            .map(|(s, _, _)| s.name.clone())
            .collect();
        for name in gone {
            self.restart_sidecar(&name).await?;
            done.push(format!("sidecar-{name}"));
        }
        Ok(done)
    }
}
