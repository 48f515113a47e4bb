//! README.md's walkthrough, run as written: its first block's `local up`
//! in the background, its second block in a fresh shell (no environment but
//! `PATH` and `HOME`), from a directory where `./target/release/ozone` is
//! the binary under test. Only `/tmp/ozone` is moved into a temporary
//! directory.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ozone_testkit::harness::{TermOnDrop as Up, exe};

/// The shell blocks between the walkthrough markers of README.md.
fn walkthrough() -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let begin = readme
        .find("<!-- walkthrough:begin -->")
        .expect("walkthrough markers");
    let end = readme.find("<!-- walkthrough:end -->").unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in readme[begin..end].lines() {
        match (line.trim(), current.take()) {
            ("```sh", None) => current = Some(Vec::new()),
            ("```", Some(b)) => blocks.push(b),
            (_, Some(mut b)) => {
                b.push(line.to_string());
                current = Some(b);
            }
            (_, None) => {}
        }
    }
    blocks
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let blocks = walkthrough();
    assert_eq!(blocks.len(), 2, "two shell blocks: {blocks:?}");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("target/release")).unwrap();
    std::os::unix::fs::symlink(exe(), root.join("target/release/ozone")).unwrap();
    let cluster = root.join("ozone");
    let moved = |l: &str| l.replace("/tmp/ozone", cluster.to_str().unwrap());

    // Block 1: the build (done: this test's binary), then `local up`.
    let up_line = blocks[0]
        .iter()
        .find(|l| l.contains(" local up "))
        .expect("a local up line");
    assert!(
        blocks[0]
            .iter()
            .any(|l| l.starts_with("cargo build --release"))
    );
    let command = moved(up_line.split('#').next().unwrap());
    let mut up = Up::spawn(
        Command::new("bash")
            .args(["-c", &format!("exec {command}")])
            .current_dir(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let mut ready = String::new();
    BufReader::new(up.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("ready om="), "local up said {ready:?}");

    // Block 2, in a fresh shell that stops at the first failing command.
    let script = format!(
        "set -euo pipefail\n{}\n",
        blocks[1]
            .iter()
            .map(|l| moved(l))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // From a file, as typed lines would be: not in any process's arguments
    // (the walkthrough's `pgrep -f` must find the datanode only).
    let script_file = root.join("walkthrough.sh");
    std::fs::write(&script_file, script).unwrap();
    let mut sh = Command::new("bash")
        .arg(&script_file)
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while sh.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = sh.kill();
            panic!("the walkthrough did not finish in 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = sh.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the walkthrough failed:\n{stdout}\n{stderr}"
    );
    // What the commands say they did.
    for said in [
        "created volume /vol1",
        "created bucket /vol1/bucket1 (OBJECT_STORE)",
        "renamed /vol1/bucket1/copy.bin to /vol1/bucket1/renamed.bin",
        "space quota:      1.0 GiB",
        "\"name\": \"vol1\"",
        "operational state:  DECOMMISSION",
        "asked local up",
        "/vol1/fsb/hbase/data/t1/hf1",
    ] {
        assert!(stdout.contains(said), "no {said:?} in:\n{stdout}");
    }
    assert!(
        stderr.contains("short-circuit: 10485760 bytes"),
        "the node1 read was not short-circuit:\n{stderr}"
    );
    // One result per command and clean errors: no log lines.
    assert!(
        !stderr.contains(" INFO ") && !stderr.contains(" WARN "),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(root.join("copy.bin")).unwrap(),
        std::fs::read(root.join("file.bin")).unwrap()
    );
    // Stopping the cluster removes cluster.env.
    drop(up);
    assert!(!cluster.join("cluster.env").exists());
}
