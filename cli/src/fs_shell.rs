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
pub(crate) const USAGE: &str = "\
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
pub(crate) struct FsTarget {
    /// OM address from an `ofs://` URI.
    pub om: Option<String>,
    pub volume: String,
    pub bucket: String,
    /// Path inside the bucket, normalized ("" is the bucket's root).
    pub path: String,
}

impl FsTarget {
    /// Parses `/vol/bucket[/path]` or `ofs://OM/vol/bucket[/path]`.
    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
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

    /// The path as the client names it.
    fn key(&self) -> KeyPath<'_> {
        KeyPath::new(&self.volume, &self.bucket, &self.path)
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
pub(crate) async fn run<A: FsAccess>(
    client: impl Fn(Option<&str>) -> anyhow::Result<A>,
    args: &[String],
) -> anyhow::Result<i32> {
    let Some((cmd, rest)) = args.split_first() else {
        usage!("no command");
    };
    let (opts, rest) = split_opts(rest);
    let c = Call {
        client: &client,
        cmd: cmd.trim_start_matches('-'),
        opts,
        rest,
    };
    match c.cmd {
        "help" | "h" | "usage" => {
            println!("{USAGE}");
            Ok(0)
        }
        "ls" => ls(&c).await,
        "mkdir" => mkdir(&c).await,
        "put" | "copyFromLocal" => put(&c).await,
        "get" | "copyToLocal" => get(&c).await,
        "cp" => cp(&c).await,
        "cat" | "tail" => cat(&c).await,
        "touchz" => touchz(&c).await,
        "mv" => mv(&c).await,
        "rm" | "rmdir" => rm(&c).await,
        "stat" => stat(&c).await,
        "du" => du(&c).await,
        "count" => count(&c).await,
        "df" => df(&c).await,
        "test" => test(&c).await,
        "chmod" | "chown" | "chgrp" | "setfacl" | "getfacl" => bail!(
            "-{} is not supported: the store has no POSIX owners, groups or modes; with \
             security on, access follows the ACLs of volumes and buckets (`ozone sh volume|bucket \
             addacl|getacl`)",
            c.cmd
        ),
        other => usage!("unknown command -{other}"),
    }
}

/// One command as given: its name, options and operands, and how to make
/// a client.
struct Call<'a, A> {
    client: &'a dyn Fn(Option<&str>) -> anyhow::Result<A>,
    cmd: &'a str,
    opts: Vec<&'a str>,
    rest: Vec<&'a str>,
}

impl<A: FsAccess> Call<'_, A> {
    /// Whether option `o` was given.
    fn has(&self, o: &str) -> bool {
        self.opts.contains(&o)
    }

    /// The `N` operands, the options checked against `allowed`.
    fn operands<const N: usize>(&self, allowed: &[&str]) -> anyhow::Result<[String; N]> {
        for o in &self.opts {
            if !allowed.contains(o) {
                usage!("-{}: unknown option {o}", self.cmd);
            }
        }
        if self.rest.len() != N {
            usage!("-{} takes {N} path(s), got {}", self.cmd, self.rest.len());
        }
        Ok(std::array::from_fn(|i| self.rest[i].to_string()))
    }

    /// The path `p` names, and a client of its cluster.
    fn target(&self, p: &str) -> anyhow::Result<(FsTarget, A)> {
        let t = FsTarget::parse(p)?;
        let c = (self.client)(t.om.as_deref())?;
        Ok((t, c))
    }

    /// A size as `-h` asks.
    fn size(&self, n: u64) -> String {
        size(n, self.has("-h"))
    }
}

/// An "already exists" error with the hint to overwrite.
fn exists(cmd: &str) -> impl Fn(ClientError) -> anyhow::Error + '_ {
    move |e| match e {
        ClientError::AlreadyExists(m) => anyhow::anyhow!("-{cmd}: {m} (use -f to overwrite)"),
        e => e.into(),
    }
}

async fn ls<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&["-R", "-h"])?;
    if let Some(code) = list_above_buckets(c.client, &p).await? {
        return Ok(code);
    }
    let (t, client) = c.target(&p)?;
    list(&client, &t, c.has("-R"), c.has("-h")).await?;
    Ok(0)
}

async fn mkdir<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&["-p"])?;
    let (t, client) = c.target(&p)?;
    if c.has("-p") {
        client.mkdirs(t.key()).await?;
        return Ok(0);
    }
    if let Some((parent, _)) = t.path.rsplit_once('/') {
        let st = client
            .file_status(KeyPath::new(&t.volume, &t.bucket, parent))
            .await
            .with_context(|| format!("-mkdir {}: parent directory", t.shown()))?;
        if !st.is_dir {
            bail!("-mkdir {}: parent is not a directory", t.shown());
        }
    }
    if !client.mkdirs(t.key()).await? {
        bail!("-mkdir {}: file exists", t.shown());
    }
    Ok(0)
}

async fn put<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [local, p] = c.operands::<2>(&["-f"])?;
    let (mut t, client) = c.target(&p)?;
    if let Ok(st) = client.file_status(t.key()).await
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
    let mut input = crate::output::open_input(Path::new(&local)).await?;
    let r = client.put_file(t.key(), c.has("-f"), &mut input).await;
    input.progress.finish();
    r.map_err(exists(c.cmd))?;
    Ok(0)
}

async fn get<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p, local] = c.operands::<2>(&["-f"])?;
    let (t, client) = c.target(&p)?;
    let dest = crate::sh::destination(Path::new(&local), &t.path)?;
    if dest.exists() && !c.has("-f") {
        bail!(
            "-{}: {}: file exists (use -f to overwrite)",
            c.cmd,
            dest.display()
        );
    }
    let r = client.open_key(t.key()).await?;
    crate::sh::download(&r, &dest, &t.shown()).await?;
    r.close().await?;
    Ok(0)
}

async fn cp<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [from, to] = c.operands::<2>(&["-f"])?;
    let (f, src) = c.target(&from)?;
    let mut t = FsTarget::parse(&to)?;
    let other = if t.om != f.om {
        Some((c.client)(t.om.as_deref())?)
    } else {
        None
    };
    let dst = other.as_ref().unwrap_or(&src);
    if let Ok(st) = dst.file_status(t.key()).await
        && st.is_dir
    {
        let name = f.path.rsplit('/').next().unwrap_or_default();
        t = t.child(name);
    }
    let r = src.open_key(f.key()).await?;
    let w = dst
        .create_file(t.key(), c.has("-f"))
        .await
        .map_err(exists(c.cmd))?;
    crate::sh::copy(r, w).await?;
    Ok(0)
}

/// `-cat`, and `-tail` (the last kilobyte).
async fn cat<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&[])?;
    let (t, client) = c.target(&p)?;
    let r = client.open_key(t.key()).await?;
    let mut out = tokio::io::stdout();
    if c.cmd == "tail" {
        let start = r.size().saturating_sub(1024);
        let mut buf = vec![0u8; (r.size() - start) as usize];
        r.read_exact_at(start, &mut buf).await?;
        out.write_all(&buf).await?;
    } else {
        r.copy_to(&mut out).await?;
    }
    out.flush().await?;
    r.close().await?;
    Ok(0)
}

async fn touchz<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&[])?;
    let (t, client) = c.target(&p)?;
    match client.file_status(t.key()).await {
        Ok(st) if st.is_dir => bail!("-touchz: {} is a directory", t.shown()),
        Ok(st) if st.size > 0 => bail!("-touchz: {} is a non-empty file", t.shown()),
        Ok(_) => {}
        Err(ClientError::NotFound(_)) => {
            client.put_file(t.key(), false, tokio::io::empty()).await?;
        }
        Err(e) => return Err(e.into()),
    }
    Ok(0)
}

async fn mv<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [from, to] = c.operands::<2>(&[])?;
    let (f, client) = c.target(&from)?;
    let t = FsTarget::parse(&to)?;
    if (&f.volume, &f.bucket) != (&t.volume, &t.bucket) {
        bail!("-mv: source and destination must be in the same bucket (use -cp, then -rm)");
    }
    client.rename(f.key(), &t.path).await?;
    Ok(0)
}

/// `-rm [-r] [-f]`, and `-rmdir` (an empty directory only).
async fn rm<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let rmdir = c.cmd == "rmdir";
    let [p] = c.operands::<1>(if rmdir { &[] } else { &["-r", "-R", "-f"] })?;
    let (t, client) = c.target(&p)?;
    let recursive = c.has("-r") || c.has("-R");
    match client.file_status(t.key()).await {
        Ok(st) if !rmdir && st.is_dir && !recursive => {
            bail!("-rm: {} is a directory (use -r)", t.shown())
        }
        Ok(st) if rmdir && !st.is_dir => bail!("-rmdir: {} is not a directory", t.shown()),
        _ => {}
    }
    match client.delete_path(t.key(), recursive).await {
        Err(ClientError::NotFound(_)) if c.has("-f") => {}
        Err(ClientError::Precondition(m)) if rmdir => bail!("-rmdir: {}: {m}", t.shown()),
        r => r?,
    }
    Ok(0)
}

async fn stat<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&[])?;
    let (t, client) = c.target(&p)?;
    let s = client.file_status(t.key()).await?;
    println!("{}", describe(&s, &t.volume, &t.bucket, false));
    Ok(0)
}

async fn du<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&["-s", "-h"])?;
    let (t, client) = c.target(&p)?;
    if c.has("-s") {
        let s = client.content_summary(t.key()).await?;
        println!("{}  {}", c.size(s.length), t.shown());
        return Ok(0);
    }
    for e in client.list_status_all(t.key()).await? {
        let s = client
            .content_summary(KeyPath::new(&t.volume, &t.bucket, &e.path))
            .await?;
        let shown = format!("/{}/{}/{}", t.volume, t.bucket, e.path);
        println!("{}  {shown}", c.size(s.length));
    }
    Ok(0)
}

async fn count<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&["-h"])?;
    let (t, client) = c.target(&p)?;
    let s = client.content_summary(t.key()).await?;
    // Hadoop's columns: DIR_COUNT FILE_COUNT CONTENT_SIZE PATHNAME.
    println!(
        "{:>12} {:>12} {:>18} {}",
        s.directory_count,
        s.file_count,
        c.size(s.length),
        t.shown()
    );
    Ok(0)
}

async fn df<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    for o in &c.opts {
        if *o != "-h" {
            usage!("-df: unknown option {o}");
        }
    }
    if c.rest.len() > 1 {
        usage!("-df takes at most one path");
    }
    let om = match c.rest.first() {
        Some(p) if p.starts_with("ofs://") => FsTarget::parse(p)?.om,
        _ => None,
    };
    let (cap, used) = (c.client)(om.as_deref())?.capacity().await?;
    println!(
        "{:<20} {:>14} {:>14} {:>14} {:>5}",
        "Filesystem", "Size", "Used", "Available", "Use%"
    );
    println!(
        "{:<20} {:>14} {:>14} {:>14} {:>4}%",
        "ofs://",
        c.size(cap),
        c.size(used),
        c.size(cap.saturating_sub(used)),
        (used * 100).checked_div(cap).unwrap_or(0)
    );
    Ok(0)
}

/// `-test -e|-d|-f|-z`: the answer is the exit code.
async fn test<A: FsAccess>(c: &Call<'_, A>) -> anyhow::Result<i32> {
    let [p] = c.operands::<1>(&["-e", "-d", "-f", "-z"])?;
    if c.opts.len() != 1 {
        usage!("-test needs exactly one of -e, -d, -f, -z");
    }
    let (t, client) = c.target(&p)?;
    let ok = match client.file_status(t.key()).await {
        Ok(s) => match c.opts[0] {
            "-d" => s.is_dir,
            "-f" => !s.is_dir,
            "-z" => s.size == 0,
            _ => true,
        },
        Err(ClientError::NotFound(_)) => false,
        Err(e) => return Err(e.into()),
    };
    Ok(if ok { 0 } else { 1 })
}

/// `-ls /` (volumes) and `-ls /VOLUME` (its buckets); `None` for a path
/// inside a bucket.
async fn list_above_buckets<A: FsAccess>(
    client: &dyn Fn(Option<&str>) -> anyhow::Result<A>,
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
        let entries = c.list_status_all(t.key().with_key(&dir)).await?;
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
