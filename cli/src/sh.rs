//! `ozone sh`: volumes, buckets and keys, through the cluster or a sidecar.

use ozone_client::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use ozone_common::config::{self as keys};
use ozone_common::names::OzonePath;
use ozone_proto::{AclOp, BucketInfo, BucketLayout, KeyInfo, VolumeInfo};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::admin::state_name;
use crate::args::*;
use crate::output::{self, Counted, Progress, human, time};

fn replication_name(r: i32) -> &'static str {
    ozone_proto::ReplicationFactor::try_from(r)
        .map(|t| t.as_str_name())
        .unwrap_or("?")
}

fn checksum_name(c: i32) -> &'static str {
    ozone_proto::ChecksumType::try_from(c)
        .map(|t| t.as_str_name())
        .unwrap_or("?")
}

/// A quota for people: "none" when unset.
fn quota(n: u64, bytes: bool) -> String {
    match (n, bytes) {
        (0, _) => "none".into(),
        (n, true) => format!("{} ({n} bytes)", human(n)),
        (n, false) => n.to_string(),
    }
}

pub(crate) fn key_json(k: &KeyInfo) -> Value {
    json!({
        "volume": k.volume,
        "bucket": k.bucket,
        "name": k.name,
        "size": k.size,
        "replication": replication_name(k.replication),
        "checksumType": checksum_name(k.checksum_type),
        "bytesPerChecksum": k.bytes_per_checksum,
        "creationTime": time(k.created_ms),
        "modificationTime": time(k.modified_ms),
        "blocks": k.blocks.iter().map(|b| json!({
            "block": b.block.unwrap_or_default().display(),
            "offset": b.offset,
            "length": b.length,
            "replicas": b.replicas.iter().map(|r| json!({
                "id": r.id, "node": r.node_name, "state": state_name(r.state),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn volume_json(v: &VolumeInfo) -> Value {
    json!({
        "name": v.name,
        "owner": v.owner,
        "acls": v.acls,
        "creationTime": time(v.created_ms),
        "quotaInBytes": v.quota_in_bytes,
        "quotaInNamespace": v.quota_in_namespace,
        "usedBytes": v.used_bytes,
        "reservedBytes": v.reserved_bytes,
        "usedNamespace": v.used_namespace,
    })
}

fn bucket_json(b: &BucketInfo) -> Value {
    json!({
        "volume": b.volume,
        "name": b.name,
        "layout": b.layout().as_str_name(),
        "owner": b.owner,
        "acls": b.acls,
        "creationTime": time(b.created_ms),
        "quotaInBytes": b.quota_in_bytes,
        "quotaInNamespace": b.quota_in_namespace,
        "usedBytes": b.used_bytes,
        "reservedBytes": b.reserved_bytes,
        "usedNamespace": b.used_namespace,
    })
}

pub(crate) fn print_key(k: &KeyInfo) {
    println!("key: /{}/{}/{}", k.volume, k.bucket, k.name);
    println!("size: {}", k.size);
    println!("replication: {}", replication_name(k.replication));
    println!(
        "checksum: {}, {} bytes per checksum",
        checksum_name(k.checksum_type),
        k.bytes_per_checksum
    );
    println!("created: {}", time(k.created_ms));
    println!("modified: {}", time(k.modified_ms));
    for b in &k.blocks {
        let id = b.block.unwrap_or_default();
        let reps: Vec<String> = b
            .replicas
            .iter()
            .map(|r| format!("{}@{}({})", r.id, r.node_name, state_name(r.state)))
            .collect();
        println!(
            "block {} offset {} length {} replicas {}",
            id.display(),
            b.offset,
            b.length,
            reps.join(" ")
        );
    }
}

/// What a key command moved, for its summary line.
pub(crate) struct Moved {
    verb: &'static str,
    bytes: u64,
    secs: f64,
    detail: String,
}

/// Where `key get` writes: FILE, or FILE/NAME when FILE is a directory
/// (NAME is the key's last segment, never a path).
pub(crate) fn destination(file: &Path, key: &str) -> anyhow::Result<PathBuf> {
    if !file.is_dir() {
        return Ok(file.to_path_buf());
    }
    let name = key.rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." {
        bail!(
            "key {key} has no file name to use in {}: give a file",
            file.display()
        );
    }
    Ok(file.join(name))
}

/// A file being written under a temporary name beside its destination;
/// renamed into place by [`Partial::finish`], removed if dropped before.
/// The name is random and the file is made with `O_CREAT | O_EXCL` (which
/// follows no symlink), so nobody who can write to the destination's
/// directory can plant a file or link where the download goes.
struct Partial {
    file: std::fs::File,
    tmp: tempfile::TempPath,
    dest: PathBuf,
}

impl Partial {
    fn new(dest: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let (file, tmp) = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".ozone-tmp")
            // 0666 less the umask, as a plain create would give.
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)?
            .into_parts();
        Ok(Self {
            file,
            tmp,
            dest: dest.to_path_buf(),
        })
    }

    fn finish(self) -> anyhow::Result<()> {
        self.tmp
            .persist(&self.dest)
            .map_err(|e| e.error)
            .with_context(|| format!("renaming into {}", self.dest.display()))
    }
}

/// Reads key `path` into `file` (see [`KeyCmd::Get`]); returns the bytes.
async fn get<A: KeyAccess>(
    a: &A,
    path: &str,
    file: &Path,
    verify: Option<bool>,
    force: bool,
) -> anyhow::Result<(u64, bool)> {
    let p = KeyPath::parse(path)?;
    let r = a.open_key_with(p, verify).await?;
    if file == Path::new("-") {
        let mut out = Counted {
            inner: tokio::io::stdout(),
            progress: Progress::new(Some(r.size())),
        };
        let n = r.copy_to(&mut out).await;
        out.progress.finish();
        let n = n?;
        out.flush().await?;
        let verify = r.verify_checksum();
        r.close().await?;
        return Ok((n, verify));
    }
    let dest = destination(file, p.key)?;
    if dest.exists() && !force {
        bail!(
            "{} exists: the read would overwrite it (use --force)",
            dest.display()
        );
    }
    let n = download(&r, &dest, path).await?;
    let verify = r.verify_checksum();
    r.close().await?;
    Ok((n, verify))
}

/// Copies what `r` reads into the local file `dest` through a temporary
/// name beside it (progress on a terminal; nothing left behind on an
/// error); returns the bytes. `what` names the source in errors.
pub(crate) async fn download<R: KeyRead>(r: &R, dest: &Path, what: &str) -> anyhow::Result<u64> {
    let partial = Partial::new(dest)
        .with_context(|| format!("creating a temporary file beside {}", dest.display()))?;
    let f = partial
        .file
        .try_clone()
        .context("duplicating a descriptor")?;
    let mut out = Counted {
        inner: tokio::fs::File::from_std(f),
        progress: Progress::new(Some(r.size())),
    };
    let n = r.copy_to(&mut out).await;
    out.progress.finish();
    let n = n.map_err(|e| match e {
        ozone_client::ClientError::Output(io) => {
            anyhow::Error::new(io).context(format!("writing {}", dest.display()))
        }
        e => anyhow::Error::new(e).context(format!("reading {what}")),
    })?;
    out.inner
        .sync_all()
        .await
        .with_context(|| format!("writing {}", dest.display()))?;
    partial.finish()?;
    Ok(n)
}

/// Runs a key command through either client (the cluster or a sidecar).
pub(crate) async fn key_cmd<A: KeyAccess>(
    a: &A,
    cmd: &KeyCmd,
    json_out: bool,
) -> anyhow::Result<Option<Moved>> {
    let t = Instant::now();
    match cmd {
        KeyCmd::Put { path, file } => {
            let p = KeyPath::parse(path)?;
            let mut input = output::open_input(file).await?;
            let key = a.put_key(p, &mut input).await;
            input.progress.finish();
            let key = key.with_context(|| format!("writing {} to {path}", file.display()))?;
            return Ok(Some(Moved {
                verb: "wrote",
                bytes: key.size,
                secs: t.elapsed().as_secs_f64(),
                detail: format!("to {path}, {} block(s)", key.blocks.len()),
            }));
        }
        KeyCmd::Get {
            path,
            file,
            no_verify,
            force,
        } => {
            let (n, verify) = get(a, path, file, no_verify.then_some(false), *force).await?;
            return Ok(Some(Moved {
                verb: "read",
                bytes: n,
                secs: t.elapsed().as_secs_f64(),
                detail: format!("from {path} (verify-checksum {verify})"),
            }));
        }
        KeyCmd::Cat { path, no_verify } => {
            let p = KeyPath::parse(path)?;
            let r = a.open_key_with(p, no_verify.then_some(false)).await?;
            let mut out = tokio::io::stdout();
            r.copy_to(&mut out).await?;
            out.flush().await?;
            r.close().await?;
        }
        KeyCmd::Ls {
            path,
            prefix,
            start,
            length,
            long,
        } => {
            let (v, b) = OzonePath::bucket_path(path)?;
            let keys = a
                .list_keys_after(KeyPath::new(&v, &b, prefix), start, *length)
                .await?;
            print_keys(&keys, *long, json_out);
        }
        KeyCmd::Info { path } => {
            let p = KeyPath::parse(path)?;
            let k = a.key_info(p).await?;
            if json_out {
                output::json(&key_json(&k));
            } else {
                print_key(&k);
            }
        }
        KeyCmd::Rm { path } => {
            let p = KeyPath::parse(path)?;
            a.delete_key(p).await?;
            println!("deleted {path}");
        }
        KeyCmd::Checksum { path } => {
            let c = a.key_checksum(KeyPath::parse(path)?).await?;
            if json_out {
                output::json(&json!({
                    "algorithm": c.kind.as_str_name(),
                    "checksum": format!("{:08x}", c.crc),
                    "size": c.size,
                    "path": path,
                }));
            } else {
                println!("{} {:08x} {} {path}", c.kind.as_str_name(), c.crc, c.size);
            }
        }
        KeyCmd::Cp { bucket, from, to } => {
            let (v, b) = OzonePath::bucket_path(bucket)?;
            let r = a.open_key(KeyPath::new(&v, &b, from)).await?;
            let w = a.create_key(KeyPath::new(&v, &b, to)).await?;
            let key = copy(r, w).await?;
            return Ok(Some(Moved {
                verb: "copied",
                bytes: key.size,
                secs: t.elapsed().as_secs_f64(),
                detail: format!("/{v}/{b}/{from} to /{v}/{b}/{to}"),
            }));
        }
        KeyCmd::Rename { bucket, from, to } => {
            let (v, b) = OzonePath::bucket_path(bucket)?;
            a.om().rename_key(KeyPath::new(&v, &b, from), to).await?;
            println!("renamed /{v}/{b}/{from} to /{v}/{b}/{to}");
        }
    }
    Ok(None)
}

/// Copies what `r` reads into `w` in 4 MiB pieces (progress on a
/// terminal), closing both; returns the key written.
pub(crate) async fn copy<R: KeyRead, W: KeyWrite>(r: R, mut w: W) -> anyhow::Result<KeyInfo> {
    let mut buf = vec![0u8; 4 << 20];
    let mut pos = 0u64;
    let mut progress = Progress::new(Some(r.size()));
    while pos < r.size() {
        let n = ((r.size() - pos) as usize).min(buf.len());
        r.read_exact_at(pos, &mut buf[..n]).await?;
        w.write(&buf[..n]).await?;
        pos += n as u64;
        progress.advance(n);
    }
    progress.finish();
    r.close().await?;
    Ok(w.close().await?)
}

fn print_keys(keys: &[KeyInfo], long: bool, json_out: bool) {
    if json_out {
        output::json(&Value::Array(
            keys.iter()
                .map(|k| {
                    json!({
                        "name": k.name,
                        "size": k.size,
                        "replication": replication_name(k.replication),
                        "modificationTime": time(k.modified_ms),
                    })
                })
                .collect(),
        ));
    } else if long {
        for k in keys {
            println!(
                "{:<5}  {:>14}  {}  {}",
                replication_name(k.replication),
                k.size,
                time(k.modified_ms),
                k.name
            );
        }
    } else {
        for k in keys {
            println!("{}\t{}", k.size, k.name);
        }
    }
}

pub(crate) fn summary(m: &Moved, tail: &str) {
    eprintln!(
        "{} {} {} in {:.2}s ({:.1} MiB/s){tail}",
        m.verb,
        human(m.bytes),
        m.detail,
        m.secs,
        m.bytes as f64 / (1 << 20) as f64 / m.secs.max(1e-9),
    );
}

fn volume_of(path: &str) -> anyhow::Result<String> {
    let p = OzonePath::parse(path)?;
    if p.bucket.is_some() {
        bail!("expected /VOLUME, got {path}");
    }
    Ok(p.volume)
}

fn owner(o: &str) -> &str {
    if o.is_empty() { "-" } else { o }
}

fn print_volume(v: &VolumeInfo, json_out: bool) {
    if json_out {
        return output::json(&volume_json(v));
    }
    println!("volume:           /{}", v.name);
    println!("owner:            {}", owner(&v.owner));
    println!("created:          {}", time(v.created_ms));
    println!("space quota:      {}", quota(v.quota_in_bytes, true));
    println!("namespace quota:  {}", quota(v.quota_in_namespace, false));
    println!(
        "used:             {} ({} bytes), {} bucket(s)",
        human(v.used_bytes),
        v.used_bytes,
        v.used_namespace
    );
    println!(
        "reserved:         {} ({} bytes) for blocks of open writes",
        human(v.reserved_bytes),
        v.reserved_bytes
    );
}

fn print_bucket(b: &BucketInfo, json_out: bool) {
    if json_out {
        return output::json(&bucket_json(b));
    }
    println!("bucket:           /{}/{}", b.volume, b.name);
    println!("layout:           {}", b.layout().as_str_name());
    println!("owner:            {}", owner(&b.owner));
    println!("created:          {}", time(b.created_ms));
    println!("space quota:      {}", quota(b.quota_in_bytes, true));
    println!("namespace quota:  {}", quota(b.quota_in_namespace, false));
    println!(
        "used:             {} ({} bytes, replicas counted), {} name(s)",
        human(b.used_bytes),
        b.used_bytes,
        b.used_namespace
    );
    println!(
        "reserved:         {} ({} bytes, replicas counted) for blocks of open writes",
        human(b.reserved_bytes),
        b.reserved_bytes
    );
}

async fn set_quota(
    client: &ozone_client::Client,
    volume: &str,
    bucket: &str,
    q: &QuotaArgs,
) -> anyhow::Result<()> {
    if q.space_quota.is_none() && q.namespace_quota.is_none() {
        return Ok(());
    }
    client
        .set_quota(volume, bucket, q.space_quota, q.namespace_quota)
        .await?;
    Ok(())
}

/// Prints an owner and its ACL entries, one per line (or as JSON).
fn print_acl(a: &ozone_proto::AclResponse, json_out: bool) {
    if json_out {
        output::json(&serde_json::json!({"owner": a.owner, "acls": a.acls}));
        return;
    }
    println!("owner: {}", owner(&a.owner));
    for e in &a.acls {
        println!("{e}");
    }
}

/// Sets, adds or removes comma-separated entries, then prints the result.
async fn acl_change(
    client: &ozone_client::Client,
    volume: &str,
    bucket: &str,
    op: AclOp,
    acls: &str,
) -> anyhow::Result<()> {
    let entries: Vec<String> = acls
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if entries.is_empty() && op != AclOp::Set {
        bail!("give ACL entries with -a, e.g. -a user:team-a/hbase:rw");
    }
    print_acl(
        &client.modify_acl(volume, bucket, op, entries).await?,
        false,
    );
    Ok(())
}

pub(crate) async fn sh(cli: &Cli, cmd: &ShCmd) -> anyhow::Result<()> {
    let conf = cli.conf()?;
    if let Some(socket) = conf.opt(&keys::CLIENT_SIDECAR_SOCKET)? {
        let ShCmd::Key { cmd } = cmd else {
            bail!("only key commands go through a sidecar; drop --sidecar for volumes and buckets");
        };
        let sc = ozone_client::SidecarClient::unix(&socket)?;
        if let Some(m) = key_cmd(&sc, cmd, cli.json).await? {
            summary(&m, " through the sidecar");
        }
        return Ok(());
    }
    let client = cli.client_of(&conf)?;
    let json_out = cli.json;
    match cmd {
        ShCmd::Volume { cmd } => match cmd {
            VolumeCmd::Create { path, user, quota } => {
                let v = volume_of(path)?;
                client
                    .create_volume_owned(&v, user.as_deref().unwrap_or(""))
                    .await?;
                set_quota(&client, &v, "", quota).await?;
                println!("created volume /{v}");
            }
            VolumeCmd::Ls => {
                let vols = client.om().list_volumes().await?;
                if json_out {
                    output::json(&Value::Array(vols.iter().map(volume_json).collect()));
                } else {
                    for v in vols {
                        println!("/{}", v.name);
                    }
                }
            }
            VolumeCmd::Info { path } => {
                print_volume(&client.volume_info(&volume_of(path)?).await?, json_out);
            }
            VolumeCmd::Delete { path } => {
                let v = volume_of(path)?;
                client.delete_volume(&v).await?;
                println!("deleted volume /{v}");
            }
            VolumeCmd::Setquota { path, quota } => {
                let v = volume_of(path)?;
                if quota.space_quota.is_none() && quota.namespace_quota.is_none() {
                    bail!("give --space-quota and/or --namespace-quota");
                }
                set_quota(&client, &v, "", quota).await?;
                print_volume(&client.volume_info(&v).await?, false);
            }
            VolumeCmd::Clrquota { path, which } => {
                let v = volume_of(path)?;
                set_quota(&client, &v, "", &which.cleared()).await?;
                print_volume(&client.volume_info(&v).await?, false);
            }
            VolumeCmd::Getacl { path } => {
                let v = volume_of(path)?;
                print_acl(&client.get_acl(&v, "").await?, json_out);
            }
            VolumeCmd::Setacl { path, acls } => {
                let v = volume_of(path)?;
                acl_change(&client, &v, "", AclOp::Set, acls).await?;
            }
            VolumeCmd::Addacl { path, acls } => {
                let v = volume_of(path)?;
                acl_change(&client, &v, "", AclOp::Add, acls).await?;
            }
            VolumeCmd::Removeacl { path, acls } => {
                let v = volume_of(path)?;
                acl_change(&client, &v, "", AclOp::Remove, acls).await?;
            }
        },
        ShCmd::Bucket { cmd } => match cmd {
            BucketCmd::Create {
                path,
                layout,
                quota,
            } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                let layout = match layout.as_str() {
                    "FILE_SYSTEM_OPTIMIZED" | "FSO" => BucketLayout::FileSystemOptimized,
                    _ => BucketLayout::ObjectStore,
                };
                client.create_bucket_with_layout(&v, &b, layout).await?;
                set_quota(&client, &v, &b, quota).await?;
                println!("created bucket /{v}/{b} ({})", layout.as_str_name());
            }
            BucketCmd::Ls { path } => {
                let buckets = client.om().list_buckets(&volume_of(path)?).await?;
                if json_out {
                    output::json(&Value::Array(buckets.iter().map(bucket_json).collect()));
                } else {
                    for b in buckets {
                        println!("/{}/{}", b.volume, b.name);
                    }
                }
            }
            BucketCmd::Info { path } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                print_bucket(&client.bucket_info(&v, &b).await?, json_out);
            }
            BucketCmd::Delete { path } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                client.delete_bucket(&v, &b).await?;
                println!("deleted bucket /{v}/{b}");
            }
            BucketCmd::Setquota { path, quota } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                if quota.space_quota.is_none() && quota.namespace_quota.is_none() {
                    bail!("give --space-quota and/or --namespace-quota");
                }
                set_quota(&client, &v, &b, quota).await?;
                print_bucket(&client.bucket_info(&v, &b).await?, false);
            }
            BucketCmd::Clrquota { path, which } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                set_quota(&client, &v, &b, &which.cleared()).await?;
                print_bucket(&client.bucket_info(&v, &b).await?, false);
            }
            BucketCmd::Getacl { path } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                print_acl(&client.get_acl(&v, &b).await?, json_out);
            }
            BucketCmd::Setacl { path, acls } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                acl_change(&client, &v, &b, AclOp::Set, acls).await?;
            }
            BucketCmd::Addacl { path, acls } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                acl_change(&client, &v, &b, AclOp::Add, acls).await?;
            }
            BucketCmd::Removeacl { path, acls } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                acl_change(&client, &v, &b, AclOp::Remove, acls).await?;
            }
        },
        ShCmd::Key { cmd } => {
            if let Some(m) = key_cmd(&client, cmd, json_out).await? {
                let s = client.stats();
                let tail = if m.verb == "read" {
                    format!(
                        "; node-local replica: {} bytes, remote: {} bytes, short-circuit: {} bytes",
                        s.local_bytes, s.remote_bytes, s.short_circuit_bytes
                    )
                } else {
                    String::new()
                };
                summary(&m, &tail);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_into_a_directory_takes_the_keys_last_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(destination(d, "a/b/c.bin").unwrap(), d.join("c.bin"));
        assert_eq!(destination(d, "c.bin").unwrap(), d.join("c.bin"));
        let f = d.join("out");
        assert_eq!(destination(&f, "a/b").unwrap(), f);
        assert!(destination(d, "a/").is_err());
    }

    #[test]
    fn a_partial_file_is_removed_unless_finished() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("k.bin");
        let mut p = Partial::new(&dest).unwrap();
        p.file.write_all(b"half").unwrap();
        drop(p);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut p = Partial::new(&dest).unwrap();
        p.file.write_all(b"all").unwrap();
        p.finish().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"all");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_planted_symlink_is_never_written_through() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dest = dir.path().join("k.bin");
        // Links where a predictable temporary name would be: the process's
        // pid, and the pids around it.
        let me = std::process::id();
        for pid in me.saturating_sub(2)..=me + 2 {
            let link = dir.path().join(format!(".k.bin.{pid}.ozone-tmp"));
            std::os::unix::fs::symlink(&victim, link).unwrap();
        }
        let mut p = Partial::new(&dest).unwrap();
        assert!(!p.tmp.is_symlink());
        p.file.write_all(b"downloaded").unwrap();
        p.finish().unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&dest).unwrap(), b"downloaded");
        assert!(!dest.is_symlink());
    }
}
