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

/// Usage, printed for `ozone fs -help` and on a usage error.
pub const USAGE: &str = "\
Usage: ozone fs COMMAND [OPTIONS] PATH...
  -ls [-R] PATH            list a directory (recursively with -R)
  -mkdir [-p] PATH         make a directory (and its parents with -p)
  -put [-f] LOCAL PATH     copy a local file in (-f: overwrite); PATH may be a directory
  -get PATH LOCAL          copy a file out
  -cat PATH                write a file to standard output
  -mv SRC DST              rename (a directory moves with everything under it)
  -rm [-r] PATH            delete a file, or a directory with -r
  -stat PATH               print type, size, modification time and path
  -du -s PATH              print the bytes under PATH
  -test -e|-d|-f PATH      exit 0 if PATH exists / is a directory / is a file, else 1
PATH is /VOLUME/BUCKET/PATH or ofs://OM_HOST:PORT/VOLUME/BUCKET/PATH.";

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
        bail!("-{cmd} takes {N} path(s), got {}\n{USAGE}", rest.len());
    }
    Ok(std::array::from_fn(|i| rest[i].to_string()))
}

fn check_opts(cmd: &str, opts: &[&str], allowed: &[&str]) -> anyhow::Result<()> {
    for o in opts {
        if !allowed.contains(o) {
            bail!("-{cmd}: unknown option {o}\n{USAGE}");
        }
    }
    Ok(())
}

fn describe(s: &FileStatus, volume: &str, bucket: &str) -> String {
    let kind = if s.is_dir {
        "d"
    } else if s.open {
        "o"
    } else {
        "-"
    };
    format!(
        "{kind} {:>14} {} /{volume}/{bucket}/{}",
        s.size,
        millis(s.modified_ms),
        s.path
    )
}

fn millis(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Runs one `ozone fs` command through either client (the cluster, or a
/// sidecar); returns the exit code. `client` makes the client for the OM
/// an `ofs://` URI names (or the configured one).
pub async fn run<A: FsAccess>(
    client: impl Fn(Option<&str>) -> anyhow::Result<A>,
    args: &[String],
) -> anyhow::Result<i32> {
    let Some((cmd, rest)) = args.split_first() else {
        bail!("{USAGE}");
    };
    let cmd = cmd.trim_start_matches('-');
    let (opts, rest) = split_opts(rest);
    let target = |s: &str| FsTarget::parse(s);
    match cmd {
        "help" | "h" => {
            println!("{USAGE}");
        }
        "ls" => {
            check_opts(cmd, &opts, &["-R"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            list(&c, &t, opts.contains(&"-R")).await?;
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
                let name = Path::new(&local)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .context("the local file has no name")?;
                t = t.child(name);
            }
            let f = tokio::fs::File::open(&local)
                .await
                .with_context(|| format!("opening {local}"))?;
            c.put_file(
                KeyPath::new(&t.volume, &t.bucket, &t.path),
                opts.contains(&"-f"),
                f,
            )
            .await
            .map_err(|e| match e {
                ClientError::AlreadyExists(m) => {
                    anyhow::anyhow!("-put: {m} (use -f to overwrite)")
                }
                e => e.into(),
            })?;
        }
        "get" | "copyToLocal" => {
            check_opts(cmd, &opts, &[])?;
            let [p, local] = operands::<2>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let r = c
                .open_key(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            let mut f = tokio::fs::File::create(&local)
                .await
                .with_context(|| format!("creating {local}"))?;
            r.copy_to(&mut f).await?;
            f.sync_all().await?;
            r.close().await?;
        }
        "cat" => {
            check_opts(cmd, &opts, &[])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let r = c
                .open_key(KeyPath::new(&t.volume, &t.bucket, &t.path))
                .await?;
            let mut out = tokio::io::stdout();
            r.copy_to(&mut out).await?;
            out.flush().await?;
            r.close().await?;
        }
        "mv" => {
            check_opts(cmd, &opts, &[])?;
            let [from, to] = operands::<2>(cmd, &rest)?;
            let (f, t) = (target(&from)?, target(&to)?);
            if (&f.volume, &f.bucket) != (&t.volume, &t.bucket) {
                bail!("-mv: source and destination must be in the same bucket");
            }
            let c = client(f.om.as_deref())?;
            c.rename(KeyPath::new(&f.volume, &f.bucket, &f.path), &t.path)
                .await?;
        }
        "rm" => {
            check_opts(cmd, &opts, &["-r", "-R", "-f"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            let t = target(&p)?;
            let c = client(t.om.as_deref())?;
            let recursive = opts.contains(&"-r") || opts.contains(&"-R");
            if !recursive
                && let Ok(st) = c
                    .file_status(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await
                && st.is_dir
            {
                bail!("-rm: {} is a directory (use -r)", t.shown());
            }
            match c
                .delete_path(KeyPath::new(&t.volume, &t.bucket, &t.path), recursive)
                .await
            {
                Err(ClientError::NotFound(_)) if opts.contains(&"-f") => {}
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
            println!("{}", describe(&s, &t.volume, &t.bucket));
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
                println!("{}  {}", s.length, t.shown());
            } else {
                for e in c
                    .list_status_all(KeyPath::new(&t.volume, &t.bucket, &t.path))
                    .await?
                {
                    let s = c
                        .content_summary(KeyPath::new(&t.volume, &t.bucket, &e.path))
                        .await?;
                    println!("{}  /{}/{}/{}", s.length, t.volume, t.bucket, e.path);
                }
            }
        }
        "test" => {
            check_opts(cmd, &opts, &["-e", "-d", "-f"])?;
            let [p] = operands::<1>(cmd, &rest)?;
            if opts.len() != 1 {
                bail!("-test needs exactly one of -e, -d, -f\n{USAGE}");
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
                    _ => true,
                },
                Err(ClientError::NotFound(_)) => false,
                Err(e) => return Err(e.into()),
            };
            return Ok(if ok { 0 } else { 1 });
        }
        other => bail!("unknown command -{other}\n{USAGE}"),
    }
    Ok(0)
}

/// `-ls [-R]`: one line per entry, directories first visited in name order.
async fn list<A: FsAccess>(c: &A, t: &FsTarget, recursive: bool) -> anyhow::Result<()> {
    let mut stack = vec![t.path.clone()];
    while let Some(dir) = stack.pop() {
        let entries = c
            .list_status_all(KeyPath::new(&t.volume, &t.bucket, &dir))
            .await?;
        let mut subdirs = Vec::new();
        for e in &entries {
            println!("{}", describe(e, &t.volume, &t.bucket));
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
    fn dates_print_in_utc() {
        assert_eq!(millis(0), "1970-01-01 00:00");
        assert_eq!(millis(1_796_342_400_000 + 61_000), "2026-12-04 00:01");
    }
}
