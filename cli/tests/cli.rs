//! The `ozone` command from the outside: `local up`, then `ozone sh` and
//! `ozone admin` against it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use ozone_testkit::data;
use ozone_testkit::harness::{TermOnDrop as Up, exe};

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

/// Starts `ozone local up` with `datanodes` in `dir`; returns it and the
/// cluster.env it wrote.
fn local_up(dir: &std::path::Path, datanodes: usize) -> (Up, String) {
    let cluster_dir = dir.join("cluster");
    let mut up = Up::spawn(
        Command::new(exe())
            .args([
                "local",
                "up",
                "--dir",
                cluster_dir.to_str().unwrap(),
                "--datanodes",
                &datanodes.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .unwrap();
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
    let said = String::from_utf8_lossy(&usage.stderr);
    assert_eq!(
        said.trim(),
        "error: unknown command -frobnicate; see `ozone fs -help`"
    );
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
                "--force",
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

fn fails(env: &str, args: &[&str]) -> String {
    let out = ozone(env, args);
    assert!(!out.status.success(), "ozone {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// What an Ozone or HDFS user reaches for: volume and bucket info, delete
/// and quotas; key rename, cp, paged long listings, `-` for standard
/// streams, --json; the fs shell's other commands; the rules for output
/// (one result, one error line, no log lines) and for bad addresses and
/// names.
#[test]
fn the_shells_do_what_ozone_and_hdfs_users_expect() {
    let dir = tempfile::tempdir().unwrap();
    let (mut up, env) = local_up(dir.path(), 3);
    let env = env.as_str();
    ok(
        env,
        &["sh", "volume", "create", "--namespace-quota", "2", "/vol"],
    );
    ok(
        env,
        &[
            "sh",
            "bucket",
            "create",
            "--space-quota",
            "30000",
            "/vol/bkt",
        ],
    );
    ok(
        env,
        &["sh", "bucket", "create", "--layout", "FSO", "/vol/fsb"],
    );
    let e = fails(env, &["sh", "bucket", "create", "/vol/third"]);
    assert!(e.contains("volume /vol namespace quota exceeded"), "{e}");
    // 3 replicas x 6000 bytes fit in 30000; another 6000 do not.
    let src = dir.path().join("six.bin");
    std::fs::write(&src, data::bytes(1, 6000)).unwrap();
    let put = ozone(
        env,
        &["sh", "key", "put", "/vol/bkt/a", src.to_str().unwrap()],
    );
    assert!(put.status.success());
    // The summary goes to stderr, never a log line.
    let said = String::from_utf8_lossy(&put.stderr);
    assert!(
        said.starts_with("wrote ") && !said.contains("INFO"),
        "{said}"
    );
    // On a terminal (util-linux `script` gives it one), progress is drawn
    // on stderr and cleared before the summary.
    let tty = Command::new("script")
        .arg("-qec")
        .arg(format!(
            "{} sh key put /vol/fsb/tty.bin {}",
            exe().display(),
            src.display()
        ))
        .arg("/dev/null")
        .envs(
            env.lines()
                .filter_map(|l| l.strip_prefix("export ").and_then(|kv| kv.split_once('='))),
        )
        .output()
        .unwrap();
    let drawn = String::from_utf8_lossy(&tty.stdout);
    assert!(
        drawn.contains("of 5.9 KiB (") && drawn.contains("\x1b[K") && drawn.contains("wrote "),
        "{drawn:?}"
    );
    ok(env, &["sh", "key", "rm", "/vol/fsb/tty.bin"]);
    let e = fails(
        env,
        &["sh", "key", "put", "/vol/bkt/b", src.to_str().unwrap()],
    );
    assert!(e.contains("bucket /vol/bkt space quota exceeded"), "{e}");
    let info: serde_json::Value =
        serde_json::from_str(&ok(env, &["--json", "sh", "bucket", "info", "/vol/bkt"])).unwrap();
    assert_eq!(info["usedBytes"], 18000);
    assert_eq!(info["usedNamespace"], 1);
    assert_eq!(info["quotaInBytes"], 30000);
    ok(
        env,
        &["sh", "bucket", "clrquota", "--space-quota", "/vol/bkt"],
    );
    // Standard input in, standard output out.
    let piped = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "printf 'from stdin' | {ozone} sh key put /vol/bkt/in - && {ozone} sh key get /vol/bkt/in -",
            ozone = exe().display()
        ))
        .envs(env.lines().filter_map(|l| {
            l.strip_prefix("export ")
                .and_then(|kv| kv.split_once('='))
        }))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&piped.stdout), "from stdin");
    // cp, rename, paged and long listings.
    ok(env, &["sh", "key", "cp", "/vol/bkt", "a", "c"]);
    ok(env, &["sh", "key", "rename", "/vol/bkt", "c", "d"]);
    let e = fails(env, &["sh", "key", "rename", "/vol/bkt", "d", "a"]);
    assert!(e.contains("already exists"), "{e}");
    let ls = ok(
        env,
        &[
            "sh", "key", "ls", "/vol/bkt", "--start", "a", "--length", "1",
        ],
    );
    assert_eq!(ls.trim(), "6000\td");
    let long = ok(env, &["sh", "key", "ls", "--long", "/vol/bkt"]);
    assert!(
        long.lines()
            .all(|l| l.starts_with("THREE") && l.contains(" UTC ")),
        "{long}"
    );
    let keys: serde_json::Value =
        serde_json::from_str(&ok(env, &["--json", "sh", "key", "ls", "/vol/bkt"])).unwrap();
    assert_eq!(keys.as_array().unwrap().len(), 3);
    let info = ok(env, &["sh", "key", "info", "/vol/bkt/d"]);
    assert!(
        info.contains("created: 20") && info.contains(" UTC"),
        "{info}"
    );
    // Names that would lead elsewhere are refused.
    let e = fails(
        env,
        &[
            "sh",
            "key",
            "put",
            "/vol/bkt/../../etc/x",
            src.to_str().unwrap(),
        ],
    );
    assert!(e.contains("'..'"), "{e}");
    // A get into a directory writes the key's last name there, keeps an
    // existing file unless --force, and an output error is the output's:
    // no replica is blamed, no failover.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    ok(
        env,
        &["sh", "key", "get", "/vol/bkt/d", out.to_str().unwrap()],
    );
    assert_eq!(std::fs::read(out.join("d")).unwrap(), data::bytes(1, 6000));
    let e = fails(
        env,
        &["sh", "key", "get", "/vol/bkt/d", out.to_str().unwrap()],
    );
    assert!(e.contains("--force"), "{e}");
    let full = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} sh key get /vol/bkt/d - > /dev/full",
            exe().display()
        ))
        .envs(
            env.lines()
                .filter_map(|l| l.strip_prefix("export ").and_then(|kv| kv.split_once('='))),
        )
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&full.stderr);
    assert!(!full.status.success());
    assert!(
        e.contains("No space left on device") && !e.contains("replica"),
        "{e}"
    );
    // The fs shell's other commands.
    ok(env, &["fs", "-mkdir", "-p", "/vol/fsb/d/e"]);
    ok(env, &["fs", "-touchz", "/vol/fsb/d/empty"]);
    ok(
        env,
        &["fs", "-put", src.to_str().unwrap(), "/vol/fsb/d/six"],
    );
    ok(env, &["fs", "-cp", "/vol/fsb/d/six", "/vol/bkt/from-fs"]);
    assert_eq!(
        ozone(env, &["fs", "-tail", "/vol/fsb/d/six"]).stdout,
        data::bytes(1, 6000)[6000 - 1024..]
    );
    let count = ok(env, &["fs", "-count", "/vol/fsb/d"]);
    let cols: Vec<&str> = count.split_whitespace().collect();
    assert_eq!(cols, ["2", "2", "6000", "/vol/fsb/d"], "{count}");
    assert!(ok(env, &["fs", "-ls", "-h", "/vol/fsb/d"]).contains("5.9 KiB"));
    assert!(ok(env, &["fs", "-du", "-s", "-h", "/vol/fsb/d"]).starts_with("5.9 KiB"));
    let e = fails(env, &["fs", "-rmdir", "/vol/fsb/d"]);
    assert!(e.contains("not empty"), "{e}");
    ok(env, &["fs", "-rmdir", "/vol/fsb/d/e"]);
    let e = fails(
        env,
        &[
            "fs",
            "-get",
            "/vol/fsb/d/six",
            out.join("d").to_str().unwrap(),
        ],
    );
    assert!(e.contains("-f"), "{e}");
    let e = fails(env, &["fs", "-chmod", "644", "/vol/fsb/d/six"]);
    assert!(e.contains("not supported"), "{e}");
    assert!(ok(env, &["fs", "-ls", "/"]).contains(" /vol\n"));
    assert!(ok(env, &["fs", "-ls", "/vol"]).contains(" /vol/fsb\n"));
    let df = ok(env, &["fs", "-df"]);
    assert_eq!(df.lines().count(), 2, "{df}");
    let files = ok(env, &["sh", "key", "ls", "/vol/fsb"]);
    assert_eq!(files, "0\td/empty\n6000\td/six\n");
    // Only empty volumes and buckets go.
    let e = fails(env, &["sh", "bucket", "delete", "/vol/bkt"]);
    assert!(e.contains("not empty"), "{e}");
    for k in ["a", "d", "in", "from-fs"] {
        ok(env, &["sh", "key", "rm", &format!("/vol/bkt/{k}")]);
    }
    ok(env, &["sh", "bucket", "delete", "/vol/bkt"]);
    let e = fails(env, &["sh", "volume", "delete", "/vol"]);
    assert!(e.contains("1 bucket(s)"), "{e}");
    // Admin: a datanode by its node name; a decommission that could never
    // finish is refused, and says why.
    let st = ok(env, &["admin", "datanode", "status", "node3"]);
    assert!(st.contains("node:               node3"), "{st}");
    let e = fails(env, &["admin", "datanode", "decommission", "node3"]);
    assert!(
        e.contains("could never finish") && e.contains("--force"),
        "{e}"
    );
    let dns: serde_json::Value =
        serde_json::from_str(&ok(env, &["--json", "admin", "datanode", "list"])).unwrap();
    assert_eq!(dns.as_array().unwrap().len(), 3);
    assert!(ok(env, &["version"]).starts_with("ozone "));
    // A datanode's port is not an OM; a closed port and an unknown host
    // fail within seconds, naming the address.
    let dn = dns[0]["address"].as_str().unwrap();
    let t = std::time::Instant::now();
    let e = fails("", &["--om", dn, "sh", "volume", "ls"]);
    assert!(e.contains(&format!("{dn} is not an OM")), "{e}");
    let e = fails("", &["--om", "127.0.0.1:1", "sh", "volume", "ls"]);
    assert!(e.contains("cannot reach the OM at 127.0.0.1:1"), "{e}");
    let e = fails(
        "",
        &["--om", "no-such-host.invalid:9862", "sh", "volume", "ls"],
    );
    assert!(e.contains("no-such-host.invalid:9862"), "{e}");
    // So does a sidecar socket that is not there, named once.
    let e = fails(
        "",
        &[
            "--sidecar",
            "/nonexistent/sidecar.sock",
            "sh",
            "key",
            "info",
            "/vol/bkt/k",
        ],
    );
    assert!(
        e.contains("cannot reach the sidecar at /nonexistent/sidecar.sock: No such file"),
        "{e}"
    );
    assert_eq!(e.matches("cannot reach").count(), 1, "{e}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // An unknown config key is one warning line, not a log line.
    let out = ozone(
        env,
        &[
            "--set",
            "ozone.client.verfy.checksum=false",
            "sh",
            "volume",
            "ls",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("warning: unknown config key ozone.client.verfy.checksum")
            && err.contains("did you mean ozone.client.verify.checksum"),
        "{err}"
    );
    let _ = up.0.kill();
}
