//! `ozone fs`: the Hadoop file-system shell's commands on file-system
//! (FILE_SYSTEM_OPTIMIZED) buckets. Paths are `/vol/bucket/path` or
//! `ofs://OM_HOST:PORT/vol/bucket/path`.

use ozone_client::prelude::*;
use std::path::Path;

use anyhow::{Context, bail};
use ozone_client::{ClientError, FsAccess, KeyRead};
use ozone_common::names::{check_resource_name, fs_components};
use ozone_proto::FileStatus;
use tokio::io::AsyncWriteExt;

/// Usage, printed for `ozone fs -help`.
pub const USAGE: &str = "\
Usage: ozone fs COMMAND [OPTIONS] PATH...
  -ls [-R] [-h] PATH       list a directory (recursively with -R; -h: sizes in KiB, MiB, ...);
                           / lists volumes, /VOLUME its buckets
  -mkdir [-p] PATH         make a directory (and its parents with -p)
  -put [-f] LOCAL PATH     copy a local file in (-f: overwrite; LOCAL - : standard input);
                           PATH may be a directory. Also -copyFromLocal
  -get [-f] PATH LOCAL     copy a file out (-f: overwrite LOCAL). Also -copyToLocal
  -cp [-f] SRC DST         copy a file (within or across buckets; -f: overwrite)
  -cat PATH                write a file to standard output
  -tail PATH               write a file's last kilobyte to standard output
  -touchz PATH             create an empty file (an existing empty file is kept)
  -mv SRC DST              rename (a directory moves with everything under it)
  -rm [-r] [-f] PATH       delete a file, or a directory with -r (-f: no error if missing)
  -rmdir PATH              delete an empty directory
  -stat PATH               print type, size, modification time and path
  -du [-s] [-h] PATH       bytes under PATH, or under each entry of a directory
  -count [-h] PATH         directories, files and bytes under PATH
  -df [-h]                 capacity, use and space left of the datanodes in service
  -test -e|-d|-f|-z PATH   exit 0 if PATH exists / is a directory / is a file / is empty, else 1
  -chmod, -chown, -chgrp   not supported: the store keeps no owners or modes
PATH is /VOLUME/BUCKET/PATH or ofs://OM_HOST:PORT/VOLUME/BUCKET/PATH.";

/// A usage error: one line, pointing at the help.
macro_rules! usage {
    ($($arg:tt)*) => {
        anyhow::bail!("{}; see `ozone fs -help`", format!($($arg)*))
    };
}

/// A path of a file-system bucket, with the OM its `ofs://` URI named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsTarget {
    /// OM address from an `ofs://` URI.
    pub om: Option<String>,
    pub volume: String,
    pub bucket: String,
    /// Path inside the bucket, normalized ("" is the bucket's root).
    pub path: String,
}

impl FsTarget {
    /// Parses `/vol/bucket[/path]` or `ofs://OM/vol/bucket[/path]`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let (om, rest) = match s.strip_prefix("ofs://") {
            Some(r) => {
                let (host, path) = r.split_once('/').unwrap_or((r, ""));
                if host.is_empty() {
                    bail!(
                        "{s}: an ofs:// URI needs the OM address (ofs://HOST:PORT/vol/bucket/path)"
                    );
                }
                (Some(host.to_string()), format!("/{path}"))
            }
            None => (None, s.to_string()),
        };
        if !rest.starts_with('/') {
            bail!("{s}: expected /VOLUME/BUCKET/PATH or ofs://OM/VOLUME/BUCKET/PATH");
        }
        let mut parts = rest.trim_start_matches('/').splitn(3, '/');
        let volume = parts.next().unwrap_or_default().to_string();
        let bucket = parts.next().unwrap_or_default().to_string();
        check_resource_name("volume", &volume)?;
        check_resource_name("bucket", &bucket)?;
        let path = fs_components(parts.next().unwrap_or_default())?.join("/");
        Ok(Self {
            om,
            volume,
            bucket,
            path,
        })
    }

    fn child(&self, name: &str) -> Self {
        Self {
            path: if self.path.is_empty() {
                name.to_string()
            } else {
                format!("{}/{name}", self.path)
            },
            ..self.clone()
        }
    }

    fn shown(&self) -> String {
        format!("/{}/{}/{}", self.volume, self.bucket, self.path)
            .trim_end_matches('/')
            .to_string()
    }
}

/// Options (`-x`) and operands of one command.
fn split_opts(args: &[String]) -> (Vec<&str>, Vec<&str>) {
    let (opts, rest): (Vec<&String>, Vec<&String>) = args
        .iter()
        .partition(|a| a.starts_with('-') && a.len() > 1 && !a.starts_with("--"));
    (
        opts.into_iter().map(String::as_str).collect(),
        rest.into_iter().map(String::as_str).collect(),
    )
}

fn operands<const N: usize>(cmd: &str, rest: &[&str]) -> anyhow::Result<[String; N]> {
    if rest.len() != N {
        usage!("-{cmd} takes {N} path(s), got {}", rest.len());
    }
    Ok(std::array::from_fn(|i| rest[i].to_string()))
}

fn check_opts(cmd: &str, opts: &[&str], allowed: &[&str]) -> anyhow::Result<()> {
    for o in opts {
        if !allowed.contains(o) {
            usage!("-{cmd}: unknown option {o}");
        }
    }
    Ok(())
}

/// A size as `-h` asks: binary units, or bytes.
fn size(n: u64, h: bool) -> String {
    if h {
        crate::output::human(n)
    } else {
        n.to_string()
    }
}

fn describe(s: &FileStatus, volume: &str, bucket: &str, h: bool) -> String {
    let kind = if s.is_dir {
        "d"
    } else if s.open {
        "o"
    } else {
        "-"
    };
    format!(
        "{kind} {:>14} {} /{volume}/{bucket}/{}",
        size(s.size, h),
        millis(s.modified_ms),
        s.path
    )
}

/// Hadoop's `-ls` time: `yyyy-MM-dd HH:mm`, UTC.
fn millis(ms: u64) -> String {
    crate::output::time(ms)[..16].to_string()
}

/// Runs one `ozone fs` command through either client (the cluster, or a
/// sidecar); returns the exit code. `client` makes the client for the OM
/// an `ofs://` URI names (or the configured one).
pub async fn run<A: FsAccess>(
    client: impl Fn(Option<&str>) -> anyhow::Result<A>,
    args: &[String],
) -> anyhow::Result<i32> {
    let Some((cmd, rest)) = args.split_first() else {
        usage!("no command");
    };
    let cmd = cmd.trim_start_matches('-');
    let (opts, rest) = split_opts(rest);
    let target = |s: &str| FsTarget::parse(s);
    let h = opts.contains(&"-h");
    match cmd {
        "help" | "h" | "usage" => {
            println!("{USAGE}");
        }
        "ls" => {
            check_opts(cmd, &opts, &["-R", "-h"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            if let Some(code) = list_above_buckets(&client, &p).await? {
                return Ok(code);
            }
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            list(&c, &t, opts.contains(&"-R"), h).await?;
        }
        "mkdir" => {
            check_opts(cmd, &opts, &["-p"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            if !opts.contains(&"-p") {
                if let Some((parent, _)) = t.path.rsplit_once('/') {
                    let st = c
                        .file_status(KeyPath::new(&t.volume, &t.bucket, parent))
                        .await
                        .with_context(|| format!("-mkdir {}: parent directory", t.shown()))?;
                    if !st.is_dir {
                        bail!("-mkdir {}: parent is not a directory", t.shown());
                    }
                }
                if !c
                    .mkdirs(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await?
                {
                    bail!("-mkdir {}: file exists", t.shown());
                }
            } else {
                c.mkdirs(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await?;
            }
        }
        "put" | "copyFromLocal" => {
            check_opts(cmd, &opts, &["-f"])?;
            let [local, p] = operands::<2>(cmd, &rest)?;
            let mut t = target(&p)?;
            let c = client(t.om.as_deref())?;
            if let Ok(st) = c
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await
                && st.is_dir
            {
                if local == "-" {
                    bail!("-put -: {} is a directory; name the file", t.shown());
                }
                let name = Path::new(&local)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .context("the local file has no name")?;
                t = t.child(name);
            }
            let exists = |e: ClientError| match e {
                ClientError::AlreadyExists(m) => {
                    anyhow::anyhow!("-{cmd}: {m} (use -f to overwrite)")
                }
                e => e.into(),
            };
            let force = opts.contains(&"-f");
            let path = KeyPath::new(&t.volume, &t.bucket, &t.path);
            let mut input = crate::output::open_input(Path::new(&local)).await?;
            let r = c.put_file(path, force, &mut input).await;
            input.progress.finish();
            r.map_err(exists)?;
        }
        "get" | "copyToLocal" => {
            check_opts(cmd, &opts, &["-f"])?;
            let [p, local] = operands::<2>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let dest = crate::sh::destination(Path::new(&local), &t.path)?;
            if dest.exists() && !opts.contains(&"-f") {
                bail!(
                    "-{cmd}: {}: file exists (use -f to overwrite)",
                    dest.display()
                );
            }
            let r = c
                .open_key(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            crate::sh::download(&r, &dest, &t.shown()).await?;
            r.close().await?;
        }
        "cp" => {
            check_opts(cmd, &opts, &["-f"])?;
            let [from, to] = operands::<2>(cmd, &rest)?;
            let (f, mut t) = (target(&from)?, target(&to)?);
            let c = client(f.om.as_deref())?;
            let dst = if t.om != f.om {
                Some(client(t.om.as_deref())?)
            } else {
                None
            };
            let d = dst.as_ref().unwrap_or(&c);
            if let Ok(st) = d
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await
                && st.is_dir
            {
                let name = f.path.rsplit('/').next().unwrap_or_default();
                t = t.child(name);
            }
            let r = c
                .open_key(KeyPath::new(&f.volume, &f.bucket, &f.path))
                .await?;
            let w = d
                .create_file(
                    KeyPath::new(&t.volume, &t.bucket, &t.path),
                    opts.contains(&"-f"),
                )
                .await
                .map_err(|e| match e {
                    ClientError::AlreadyExists(m) => {
                        anyhow::anyhow!("-cp: {m} (use -f to overwrite)")
                    }
                    e => e.into(),
                })?;
            crate::sh::copy(r, w).await?;
        }
        "cat" | "tail" => {
            check_opts(cmd, &opts, &[])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let r = c
                .open_key(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            let mut out = tokio::io::stdout();
            if cmd == "tail" {
                let start = r.size().saturating_sub(1024);
                let mut buf = vec![0u8; (r.size() - start) as usize];
                r.read_exact_at(start, &mut buf).await?;
                out.write_all(&buf).await?;
            } else {
                r.copy_to(&mut out).await?;
            }
            out.flush().await?;
            r.close().await?;
        }
        "touchz" => {
            check_opts(cmd, &opts, &[])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            match c
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await
            {
                Ok(st) if st.is_dir => bail!("-touchz: {} is a directory", t.shown()),
                Ok(st) if st.size > 0 => {
                    bail!("-touchz: {} is a non-empty file", t.shown())
                }
                Ok(_) => {}
                Err(ClientError::NotFound(_)) => {
                    c.put_file(
                        KeyPath::new(&t.volume, &t.bucket, &t.path),
                        false,
                        tokio::io::empty(),
                    )
                    .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        "mv" => {
            check_opts(cmd, &opts, &[])?;
            let [from, to] = operands::<2>(cmd, &rest)?;
            let (f, t) = (target(&from)?, target(&to)?);
            if (&f.volume, &f.bucket) != (&t.volume, &t.bucket) {
                bail!("-mv: source and destination must be in the same bucket (use -cp, then -rm)");
            }
            let c = client(f.om.as_deref())?;
            c.rename(KeyPath::new(&f.volume, &f.bucket, &f.path), &t.path)
                .await?;
        }
        "rm" | "rmdir" => {
            let allowed: &[&str] = if cmd == "rm" {
                &["-r", "-R", "-f"]
            } else {
                &[]
            };
            check_opts(cmd, &opts, allowed)?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let recursive = opts.contains(&"-r") || opts.contains(&"-R");
            let st = c
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await;
            match (&st, cmd) {
                (Ok(st), "rm") if st.is_dir && !recursive => {
                    bail!("-rm: {} is a directory (use -r)", t.shown())
                }
                (Ok(st), "rmdir") if !st.is_dir => {
                    bail!("-rmdir: {} is not a directory", t.shown())
                }
                _ => {}
            }
            match c
                .delete_path(KeyPath::new(&t.volume, &t.bucket, &t.path), recursive)
                .await
            {
                Err(ClientError::NotFound(_)) if opts.contains(&"-f") => {}
                Err(ClientError::Precondition(m)) if cmd == "rmdir" => {
                    bail!("-rmdir: {}: {m}", t.shown())
                }
                r => r?,
            }
        }
        "stat" => {
            check_opts(cmd, &opts, &[])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let s = c
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            println!("{}", describe(&s, &t.volume, &t.bucket, false));
        }
        "du" => {
            check_opts(cmd, &opts, &["-s", "-h"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            if opts.contains(&"-s") {
                let s = c
                    .content_summary(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await?;
                println!("{}  {}", size(s.length, h), t.shown());
            } else {
                for e in c
                    .list_status_all(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await?
                {
                    let s = c
                        .content_summary(KeyPath::new(&t.volume, &t.bucket, &e.path))
                        .await?;
                    println!(
                        "{}  /{}/{}/{}",
                        size(s.length, h),
                        t.volume,
                        t.bucket,
                        e.path
                    );
                }
            }
        }
        "count" => {
            check_opts(cmd, &opts, &["-h"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let s = c
                .content_summary(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            // Hadoop's columns: DIR_COUNT FILE_COUNT CONTENT_SIZE PATHNAME.
            println!(
                "{:>12} {:>12} {:>18} {}",
                s.directory_count,
                s.file_count,
                size(s.length, h),
                t.shown()
            );
        }
        "df" => {
            check_opts(cmd, &opts, &["-h"])?;
            if rest.len() > 1 {
                usage!("-df takes at most one path");
            }
            let om = match rest.first() {
                Some(p) if p.starts_with("ofs://") => target(p)?.om,
                _ => None,
            };
            let c = client(om.as_deref())?;
            let (cap, used) = c.capacity().await?;
            println!(
                "{:<20} {:>14} {:>14} {:>14} {:>5}",
                "Filesystem", "Size", "Used", "Available", "Use%"
            );
            println!(
                "{:<20} {:>14} {:>14} {:>14} {:>4}%",
                "ofs://",
                size(cap, h),
                size(used, h),
                size(cap.saturating_sub(used), h),
                (used * 100).checked_div(cap).unwrap_or(0)
            );
        }
        "test" => {
            check_opts(cmd, &opts, &["-e", "-d", "-f", "-z"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            if opts.len() != 1 {
                usage!("-test needs exactly one of -e, -d, -f, -z");
            }
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let ok = match c
                .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await
            {
                Ok(s) => match opts[0] {
                    "-d" => s.is_dir,
                    "-f" => !s.is_dir,
                    "-z" => s.size == 0,
                    _ => true,
                },
                Err(ClientError::NotFound(_)) => false,
                Err(e) => return Err(e.into()),
            };
            return Ok(if ok { 0 } else { 1 });
        }
        "chmod" | "chown" | "chgrp" | "setfacl" | "getfacl" => {
            bail!(
                "-{cmd} is not supported: the store has no POSIX owners, groups or modes; with \
                 security on, access follows the ACLs of volumes and buckets (`ozone sh volume|bucket \
                 addacl|getacl`)"
            );
        }
        other => usage!("unknown command -{other}"),
    }
    Ok(0)
}

/// `-ls /` (volumes) and `-ls /VOLUME` (its buckets); `None` for a path
/// inside a bucket.
async fn list_above_buckets<A: FsAccess>(
    client: &impl Fn(Option<&str>) -> anyhow::Result<A>,
    p: &str,
) -> anyhow::Result<Option<i32>> {
    let (om, rest) = match p.strip_prefix("ofs://") {
        Some(r) => {
            let (host, path) = r.split_once('/').unwrap_or((r, ""));
            (Some(host), path)
        }
        None => (None, p.strip_prefix('/').unwrap_or(p)),
    };
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        [] => {
            for v in client(om)?.volumes().await? {
                println!("d {:>14} {} /{}", 0, millis(v.created_ms), v.name);
            }
            Ok(Some(0))
        }
        [volume] => {
            check_resource_name("volume", volume)?;
            for b in client(om)?.buckets(volume).await? {
                println!(
                    "d {:>14} {} /{}/{}",
                    0,
                    millis(b.created_ms),
                    b.volume,
                    b.name
                );
            }
            Ok(Some(0))
        }
        _ => Ok(None),
    }
}

/// `-ls [-R]`: one line per entry, directories first visited in name order.
async fn list<A: FsAccess>(c: &A, t: &FsTarget, recursive: bool, h: bool) -> anyhow::Result<()> {
    let mut stack = vec![t.path.clone()];
    while let Some(dir) = stack.pop() {
        let entries = c
            .list_status_all(KeyPath::new(&t.volume, &t.bucket, &dir))
            .await?;
        let mut subdirs = Vec::new();
        for e in &entries {
            println!("{}", describe(e, &t.volume, &t.bucket, h));
            if recursive && e.is_dir {
                subdirs.push(e.path.clone());
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_ofs_uris_parse() {
        let t = FsTarget::parse("/vol1/bucket1/a/b/").unwrap();
        assert_eq!((t.om, t.path.as_str()), (None, "a/b"));
        let t = FsTarget::parse("ofs://om.example:9862/vol1/bucket1/x").unwrap();
        assert_eq!(t.om.as_deref(), Some("om.example:9862"));
        assert_eq!(
            (t.volume.as_str(), t.bucket.as_str(), t.path.as_str()),
            ("vol1", "bucket1", "x")
        );
        assert_eq!(FsTarget::parse("/vol1/bucket1").unwrap().path, "");
        for bad in [
            "vol1/bucket1",
            "/vol1",
            "ofs:///vol1/b1",
            "/vol1/bucket1/a//b",
            "/v/bucket1",
        ] {
            assert!(FsTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_print_to_the_minute() {
        assert_eq!(millis(1_796_342_400_000 + 61_000), "2026-12-04 00:01");
    }
}
