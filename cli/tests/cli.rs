//! The `ozone` command from the outside: `local up`, then `ozone sh` and
//! `ozone admin` against it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use ozone_testkit::data;
use ozone_testkit::harness::exe;

/// Runs `ozone` with the `[export ]KEY=VALUE` lines of `env` (a cluster.env).
fn ozone(env: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(exe());
    cmd.args(args).env_remove("NODE_NAME");
    for line in env.lines() {
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (k, v) = line.split_once('=').unwrap();
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn ok(om: &str, args: &[&str]) -> String {
    let out = ozone(om, args);
    assert!(
        out.status.success(),
        "ozone {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stops `ozone local up` even when the test fails.
struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        // Bounded: SIGKILL after 30 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ozone local up` with `datanodes` in `dir`; returns it and the
/// cluster.env it wrote.
fn local_up(dir: &std::path::Path, datanodes: usize) -> (Up, String) {
    let cluster_dir = dir.join("cluster");
    let mut up = Up(Command::new(exe())
        .args([
            "local",
            "up",
            "--dir",
            cluster_dir.to_str().unwrap(),
            "--datanodes",
            &datanodes.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let mut line = String::new();
    BufReader::new(up.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let om = line
        .trim()
        .strip_prefix("ready om=")
        .unwrap_or_else(|| panic!("got {line:?}"))
        .to_string();
    let env = std::fs::read_to_string(cluster_dir.join("cluster.env")).unwrap();
    assert!(
        env.starts_with(&format!("export OZONE_OM_ADDRESS={om}\n")),
        "{env}"
    );
    assert!(env.contains("OZONE_LOCAL_CLUSTER_DIR="), "{env}");
    (up, env)
}

#[test]
fn local_up_then_shell_round_trips_50_mib() {
    let dir = tempfile::tempdir().unwrap();
    let (mut up, env) = local_up(dir.path(), 3);
    let om = env.as_str();

    // What the README does: `source cluster.env` in a shell, then `ozone`
    // as a child of that shell finds the OM with no flag.
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "unset OZONE_OM_ADDRESS; source {}/cluster/cluster.env && {} sh volume create /vol1",
            dir.path().display(),
            exe().display()
        ))
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert!(
        sourced.status.success(),
        "ozone after `source cluster.env`: {}",
        String::from_utf8_lossy(&sourced.stderr)
    );
    ok(om, &["sh", "bucket", "create", "/vol1/bucket1"]);
    let src = dir.path().join("in.bin");
    std::fs::write(&src, data::bytes(11, 50 << 20)).unwrap();
    ok(
        om,
        &[
            "sh",
            "key",
            "put",
            "/vol1/bucket1/dir/file.bin",
            src.to_str().unwrap(),
        ],
    );
    let dst = dir.path().join("out.bin");
    let out = ozone(
        om,
        &[
            "--node",
            "node2",
            "sh",
            "key",
            "get",
            "/vol1/bucket1/dir/file.bin",
            dst.to_str().unwrap(),
        ],
    );
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        report.contains("node-local replica: 52428800 bytes"),
        "{report}"
    );
    assert!(
        std::fs::read(&dst).unwrap() == std::fs::read(&src).unwrap(),
        "50 MiB round trip"
    );

    let ls = ok(om, &["sh", "key", "ls", "/vol1/bucket1"]);
    assert_eq!(ls.trim(), "52428800\tdir/file.bin");
    let info = ok(om, &["sh", "key", "info", "/vol1/bucket1/dir/file.bin"]);
    assert!(info.contains("size: 52428800"), "{info}");
    assert!(
        info.contains("checksum: CRC32C, 16384 bytes per checksum"),
        "{info}"
    );
    assert_eq!(info.matches("(HEALTHY)").count(), 3, "{info}");
    let dns = ok(om, &["admin", "datanode", "list"]);
    assert_eq!(dns.lines().count(), 4, "{dns}");
    assert!(dns.contains("node3") && dns.contains("HEALTHY"), "{dns}");

    let missing = ozone(
        om,
        &[
            "sh",
            "key",
            "get",
            "/vol1/bucket1/nope",
            dst.to_str().unwrap(),
        ],
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("key /vol1/bucket1/nope not found"));
    let bad = ozone(om, &["sh", "key", "put", "/vol1", src.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/volume/bucket/key"));
    ok(om, &["sh", "key", "rm", "/vol1/bucket1/dir/file.bin"]);
    assert_eq!(ok(om, &["sh", "key", "ls", "/vol1/bucket1"]).trim(), "");

    // SIGTERM stops the cluster and its children cleanly.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = up.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "local up did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    assert!(
        !dir.path().join("cluster/cluster.env").exists(),
        "cluster.env removed when the cluster stops"
    );
    let gone = ozone(
        om,
        &[
            "--set",
            "ozone.client.om.retry.timeout=0s",
            "sh",
            "volume",
            "ls",
        ],
    );
    assert!(!gone.status.success(), "OM stopped with local up");
}

/// `ozone config`: every key of a role with its value and source; a typo
/// named with the key meant; a bad value refused naming key, value and
/// what is allowed.
#[test]
fn config_shows_values_sources_and_typos() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ozone.conf");
    std::fs::write(
        &file,
        "ozone.client.verify.checksum = false\nozone.client.verfy.checksum = true\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = ok(
        "OZONE_DOMAIN_SOCKET_PATH=/var/lib/ozone/sockets",
        &[
            "--conf",
            file,
            "--set",
            "ozone.scm.chunk.size=8MB",
            "config",
            "--role",
            "client",
        ],
    );
    let line = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
            .to_string()
    };
    assert!(line("ozone.client.verify.checksum").contains("= false"));
    assert!(line("ozone.client.verify.checksum").ends_with(&format!("# file {file}")));
    assert!(
        line("ozone.scm.chunk.size").contains("8MB")
            && line("ozone.scm.chunk.size").ends_with("# --set")
    );
    assert!(line("ozone.client.bytes.per.checksum").ends_with("# default"));
    assert!(line("ozone.domain.socket.path").ends_with("# env OZONE_DOMAIN_SOCKET_PATH"));
    assert!(
        out.contains("unknown key ozone.client.verfy.checksum (ignored): did you mean ozone.client.verify.checksum?"),
        "{out}"
    );
    assert!(
        !out.contains("ozone.scm.block.size"),
        "an OM key in the client's list"
    );
    let om = ok("", &["config", "--role", "om"]);
    assert!(om.contains("ozone.scm.block.size") && !om.contains("ozone.client.verify.checksum"));

    let bad = ozone(
        "",
        &[
            "--set",
            "ozone.client.read.short-circuit=sometimes",
            "config",
        ],
    );
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("ozone.client.read.short-circuit")
            && err.contains("sometimes")
            && err.contains("on, auto or off"),
        "{err}"
    );
    let table = ok("", &["config", "--markdown"]);
    assert!(table.starts_with("| Key | Type | Default"));
}

#[test]
fn the_fs_shell_works_on_a_file_system_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let (_up, env) = local_up(dir.path(), 3);
    let env = env.as_str();
    let om = env
        .lines()
        .next()
        .unwrap()
        .strip_prefix("export OZONE_OM_ADDRESS=")
        .unwrap();
    ok(env, &["sh", "volume", "create", "/vol1"]);
    let made = ok(
        env,
        &[
            "sh",
            "bucket",
            "create",
            "--layout",
            "FILE_SYSTEM_OPTIMIZED",
            "/vol1/fsb",
        ],
    );
    assert!(made.contains("FILE_SYSTEM_OPTIMIZED"), "{made}");
    let src = dir.path().join("hfile");
    std::fs::write(&src, data::bytes(3, 3 << 20)).unwrap();
    let src = src.to_str().unwrap();
    ok(env, &["fs", "-mkdir", "-p", "/vol1/fsb/hbase/data/t1/.tmp"]);
    let no_parent = ozone(env, &["fs", "-mkdir", "/vol1/fsb/x/y"]);
    assert!(!no_parent.status.success());
    ok(
        env,
        &["fs", "-put", src, "/vol1/fsb/hbase/data/t1/.tmp/hf1"],
    );
    let again = ozone(
        env,
        &["fs", "-put", src, "/vol1/fsb/hbase/data/t1/.tmp/hf1"],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("-f"));
    ok(
        env,
        &["fs", "-put", "-f", src, "/vol1/fsb/hbase/data/t1/.tmp/hf1"],
    );
    // The HFile commit: rename from .tmp into the family directory.
    ok(env, &["fs", "-mkdir", "/vol1/fsb/hbase/data/t1/cf"]);
    let uri = format!("ofs://{om}/vol1/fsb/hbase/data/t1/.tmp/hf1");
    ok(env, &["fs", "-mv", &uri, "/vol1/fsb/hbase/data/t1/cf"]);
    let ls = ok(env, &["fs", "-ls", "-R", "/vol1/fsb/hbase"]);
    assert!(ls.contains(" /vol1/fsb/hbase/data/t1/cf/hf1"), "{ls}");
    assert!(!ls.contains(".tmp/hf1"), "{ls}");
    assert!(
        ls.lines()
            .any(|l| l.starts_with('d') && l.ends_with("/vol1/fsb/hbase/data")),
        "{ls}"
    );
    let cat = ozone(env, &["fs", "-cat", "/vol1/fsb/hbase/data/t1/cf/hf1"]);
    assert!(cat.status.success());
    assert!(
        cat.stdout == data::bytes(3, 3 << 20),
        "-cat gives the bytes"
    );
    let stat = ok(env, &["fs", "-stat", "/vol1/fsb/hbase/data/t1/cf/hf1"]);
    assert!(
        stat.starts_with('-') && stat.contains(&(3u64 << 20).to_string()),
        "{stat}"
    );
    let du = ok(env, &["fs", "-du", "-s", "/vol1/fsb/hbase"]);
    assert_eq!(du.trim(), format!("{}  /vol1/fsb/hbase", 3u64 << 20));
    let test = |args: &[&str]| ozone(env, args).status.code();
    assert_eq!(
        test(&["fs", "-test", "-e", "/vol1/fsb/hbase/data/t1/cf/hf1"]),
        Some(0)
    );
    assert_eq!(
        test(&["fs", "-test", "-d", "/vol1/fsb/hbase/data/t1/cf/hf1"]),
        Some(1)
    );
    assert_eq!(test(&["fs", "-test", "-e", "/vol1/fsb/nope"]), Some(1));
    let rm_dir = ozone(env, &["fs", "-rm", "/vol1/fsb/hbase"]);
    assert!(!rm_dir.status.success());
    assert!(String::from_utf8_lossy(&rm_dir.stderr).contains("-r"));
    ok(env, &["fs", "-rm", "-r", "/vol1/fsb/hbase"]);
    assert_eq!(test(&["fs", "-test", "-e", "/vol1/fsb/hbase"]), Some(1));
    // Object-store buckets say what they need.
    ok(env, &["sh", "bucket", "create", "/vol1/obs"]);
    let obs = ozone(env, &["fs", "-mkdir", "-p", "/vol1/obs/d"]);
    assert!(String::from_utf8_lossy(&obs.stderr).contains("FILE_SYSTEM_OPTIMIZED"));
    let usage = ozone(env, &["fs", "-frobnicate", "/vol1/fsb"]);
    assert!(!usage.status.success());
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Usage: ozone fs"));
}

/// The pid of the process whose command line contains `needle`.
fn pid_of(needle: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) && cmd.contains(" datanode ") {
            return Some(pid);
        }
    }
    None
}

/// A local cluster outlives one of its datanodes (SIGKILL): the OM keeps
/// answering, the loss shows in `admin datanode list`, and
/// `ozone local restart` brings the datanode back with its data.
#[test]
fn local_up_survives_a_killed_datanode_and_restarts_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut up, env) = local_up(dir.path(), 3);
    let env = env.as_str();
    ok(env, &["sh", "volume", "create", "/vol1"]);
    ok(env, &["sh", "bucket", "create", "/vol1/bkt1"]);
    let src = dir.path().join("in.bin");
    std::fs::write(&src, data::bytes(3, 3 << 20)).unwrap();
    ok(
        env,
        &["sh", "key", "put", "/vol1/bkt1/k", src.to_str().unwrap()],
    );
    let node2 = format!("{}/cluster/node2/data", dir.path().display());
    let pid = pid_of(&node2).expect("node2's datanode");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(up.0.try_wait().unwrap().is_none(), "local up kept running");
    let dns = ok(env, &["admin", "datanode", "list"]);
    assert!(dns.contains("node2"), "{dns}");
    // Reads go on from the other replicas.
    let dst = dir.path().join("out.bin");
    ok(
        env,
        &["sh", "key", "get", "/vol1/bkt1/k", dst.to_str().unwrap()],
    );
    assert!(std::fs::read(&dst).unwrap() == std::fs::read(&src).unwrap());

    let cluster = format!("{}/cluster", dir.path().display());
    let said = ok(env, &["local", "restart", "--dir", &cluster]);
    assert!(said.contains("asked local up"), "{said}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = pid_of(&node2)
            && p != pid
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node2 not restarted");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Back with its data: a reader on node2 gets the key from node2's
    // restarted datanode, its replica from before the kill.
    let again = dir.path().join("again.bin");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = ozone(
            env,
            &[
                "--node",
                "node2",
                "sh",
                "key",
                "get",
                "/vol1/bkt1/k",
                again.to_str().unwrap(),
            ],
        );
        let report = String::from_utf8_lossy(&out.stderr);
        if out.status.success() && report.contains("node-local replica: 3145728 bytes") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node2 never served its replica again: {report}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&src).unwrap());
    let none = ozone(env, &["local", "restart", "--dir", "/nonexistent"]);
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no local cluster runs in /nonexistent")
    );
}
