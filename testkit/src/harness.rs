//! The tests' helpers over real local clusters of OM, datanode and sidecar
//! processes.

use std::path::PathBuf;

use ozone_client::prelude::*;
use ozone_client::{Client, ClientConfig};
use ozone_common::config::Conf;

use crate::local::{LocalCluster, LocalSpec};

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub cluster: LocalCluster,
}

/// A binary of this workspace: `$OZONE_BIN_DIR/name` when set, else next to
/// the running test (`target/<profile>/name`, the test itself being in
/// `target/<profile>/deps/`). Panics with what to build when it is missing.
pub fn workspace_bin(name: &str) -> PathBuf {
    let dir = match std::env::var_os("OZONE_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let me = std::env::current_exe().expect("the test's own path");
            let deps = me.parent().expect("the test's directory");
            if deps.ends_with("deps") {
                deps.parent().expect("the profile directory").to_path_buf()
            } else {
                deps.to_path_buf()
            }
        }
    };
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build --workspace --bins, or cargo test --workspace)",
        p.display()
    );
    p
}

/// The `ozone` binary the local clusters run.
pub fn exe() -> PathBuf {
    workspace_bin("ozone")
}

/// The binary of the processes tests start and kill (`ozone-test-child`).
pub fn child_exe() -> PathBuf {
    workspace_bin("ozone-test-child")
}

/// Starts `n` datanodes and an OM with `conf` (`key=value`).
pub async fn cluster(n: usize, conf: &[&str]) -> TestCluster {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(LocalSpec {
        dir: dir.path().to_path_buf(),
        datanodes: n,
        exe: exe(),
        conf: conf.iter().map(|s| s.to_string()).collect(),
    })
    .await
    .unwrap_or_else(|e| panic!("cluster start: {e}"));
    TestCluster { dir, cluster }
}

/// A client on `node` with client config `conf` (`key=value`).
pub fn client(c: &LocalCluster, node: Option<&str>, conf: &[&str]) -> Client {
    let mut cf = Conf::new();
    cf.apply_overrides(conf).unwrap();
    let mut cfg = ClientConfig::from_conf(&c.om_address(), &cf).unwrap();
    cfg.node_name = node.map(str::to_string);
    cfg.om_retry_timeout = std::time::Duration::from_secs(30);
    Client::connect(cfg).unwrap()
}

/// A client on `node` reading short-circuit from that node's sockets.
pub fn sc_client(c: &LocalCluster, node: &str, conf: &[&str]) -> Client {
    let dir = LocalCluster::socket_dir_of(c.dir(), node);
    let mut all: Vec<String> = vec![format!("ozone.domain.socket.path={}", dir.display())];
    all.extend(conf.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    client(c, Some(node), &refs)
}

/// Creates /vol/bucket.
pub async fn bucket(c: &Client) {
    c.create_volume("vol").await.unwrap();
    c.create_bucket("vol", "bucket").await.unwrap();
}

/// Writes `data` to /vol/bucket/`name` in pieces of `piece` bytes.
pub async fn put(c: &Client, name: &str, data: &[u8], piece: usize) -> ozone_proto::KeyInfo {
    let mut w = c
        .create_key(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    for p in data.chunks(piece.max(1)) {
        w.write(p).await.unwrap();
    }
    w.close().await.unwrap()
}

/// Reads the whole key with positional reads of `piece` bytes.
pub async fn get(c: &Client, name: &str, piece: usize) -> Vec<u8> {
    let r = c
        .open_key(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    let mut out = vec![0u8; r.size() as usize];
    let mut off = 0;
    while off < out.len() {
        let end = (off + piece).min(out.len());
        let n = r.read_at(off as u64, &mut out[off..end]).await.unwrap();
        assert!(n > 0);
        off += n;
    }
    out
}

/// Streams the whole key.
pub async fn stream(c: &Client, name: &str) -> Vec<u8> {
    let r = c
        .open_key(KeyPath::new("vol", "bucket", name))
        .await
        .unwrap();
    let mut out = Vec::new();
    let n = r.copy_to(&mut out).await.unwrap();
    assert_eq!(n as usize, out.len());
    out
}

/// The files of every replica of `key`'s first block on a cluster of `n`
/// datanodes.
pub fn replica_files(c: &LocalCluster, n: usize, key: &ozone_proto::KeyInfo) -> Vec<PathBuf> {
    let Some(first) = key.blocks.first() else {
        return Vec::new();
    };
    let b = first.block.expect("a block id");
    first
        .replicas
        .iter()
        .map(|r| block_file(c, index_of(c, n, &r.id), &b))
        .collect()
}

/// Waits up to a minute for `files` to be gone (a deleted key's replicas).
pub async fn wait_gone(files: &[PathBuf]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while files.iter().any(|f| f.exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "replicas of a deleted key stayed: {files:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Path of datanode `i`'s file for a block.
pub fn block_file(c: &LocalCluster, i: usize, b: &ozone_proto::BlockId) -> PathBuf {
    c.datanode_dir(i)
        .join("data/containers")
        .join(b.container_id.to_string())
        .join("chunks")
        .join(format!("{}.block", b.local_id))
}

/// Index of the datanode with id `id`.
pub fn index_of(c: &LocalCluster, n: usize, id: &str) -> usize {
    (0..n)
        .find(|&i| c.datanode_id(i).as_deref() == Some(id))
        .expect("datanode index")
}

/// The body (with headers) of an HTTP GET of `path` at `addr`.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// The sum of the samples of metric `name` at `addr`.
pub fn metric(addr: &str, name: &str) -> u64 {
    http_get(addr, "/metrics")
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Sum of the metric lines starting with `prefix` on the OM's /metrics
/// (its HTTP address is in its ready file).
pub fn om_metric(c: &LocalCluster, prefix: &str) -> u64 {
    let ready = std::fs::read_to_string(c.dir().join("om/ready")).unwrap();
    let http = ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .unwrap();
    metric(http, prefix)
}

/// Settings that make datanode loss and repair quick to see: heartbeats
/// every 300 ms, stale after 2 s, dead after 5 s, a replication pass every
/// second.
pub const FAST_REPAIR: &[&str] = &[
    "hdds.heartbeat.interval=300ms",
    "ozone.scm.stale.node.interval=2s",
    "ozone.scm.dead.node.interval=5s",
    "hdds.scm.replication.thread.interval=1s",
];

/// `FAST_REPAIR`, then `extra` (a later key overrides an earlier one).
pub fn fast_repair(extra: &[&'static str]) -> Vec<&'static str> {
    FAST_REPAIR.iter().chain(extra).copied().collect()
}

/// Runs `ozone --om OM ARGS...`, asserting it succeeds; its standard output.
pub fn ozone_ok(om: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(exe())
        .arg("--om")
        .arg(om)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ozone {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A child process, leader of a process group of its own, whose whole
/// group gets SIGTERM when this is dropped (and SIGKILL 30 s later, or at
/// once when the leader has exited): a `local up` a test started stops
/// with every process it started, even when the test fails or the leader
/// is killed before it could stop its children.
pub struct TermOnDrop(pub std::process::Child);

impl TermOnDrop {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0).spawn().map(Self)
    }
}

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Waited for without reaping: until it is reaped below, the
        // leader's pid (the group's id) cannot be taken by another process.
        let exited = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        while std::time::Instant::now() < deadline {
            match waitid(Id::Pid(group), exited) {
                Ok(WaitStatus::StillAlive) => {}
                _ => break,
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // The leader has stopped its children, or is gone without doing
        // so: whatever is left of the group goes now.
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::TermOnDrop;
    use std::io::BufRead;

    /// Whether `pid` is a live process (not gone, not a zombie).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    }

    /// The case that leaked clusters: the leader is SIGKILLed before it can
    /// stop its children; dropping the guard still ends them.
    #[test]
    fn a_killed_leaders_children_die_with_its_group() {
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["-c", "sleep 1000 & echo $!; wait"])
            .stdout(std::process::Stdio::piped());
        let mut up = TermOnDrop::spawn(&mut cmd).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(up.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child: i32 = line.trim().parse().unwrap();
        assert!(alive(child));
        let leader = nix::unistd::Pid::from_raw(up.0.id() as i32);
        nix::sys::signal::kill(leader, nix::sys::signal::Signal::SIGKILL).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(alive(child), "the orphan outlives its leader");
        drop(up);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while alive(child) {
            assert!(std::time::Instant::now() < deadline, "child {child} left");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
