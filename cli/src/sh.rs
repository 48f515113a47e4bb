//! `ozone sh`: volumes, buckets and keys, through the cluster or a sidecar.

use ozone_client::prelude::*;
use std::time::Instant;

use anyhow::{Context, bail};
use ozone_common::config::{self as keys};
use ozone_common::names::OzonePath;
use ozone_proto::{BucketLayout, KeyInfo};
use tokio::io::AsyncWriteExt;

use crate::admin::state_name;
use crate::args::*;

pub(crate) fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

pub(crate) fn print_key(k: &KeyInfo) {
    let ck = ozone_proto::ChecksumType::try_from(k.checksum_type)
        .map(|t| t.as_str_name())
        .unwrap_or("?");
    let rep = ozone_proto::ReplicationFactor::try_from(k.replication)
        .map(|t| t.as_str_name())
        .unwrap_or("?");
    println!("key: /{}/{}/{}", k.volume, k.bucket, k.name);
    println!("size: {}", k.size);
    println!("replication: {rep}");
    println!(
        "checksum: {ck}, {} bytes per checksum",
        k.bytes_per_checksum
    );
    println!("created_ms: {}", k.created_ms);
    println!("modified_ms: {}", k.modified_ms);
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

/// Runs a key command through either client (the cluster or a sidecar).
pub(crate) async fn key_cmd<A: KeyAccess>(a: &A, cmd: &KeyCmd) -> anyhow::Result<Option<Moved>> {
    let t = Instant::now();
    match cmd {
        KeyCmd::Put { path, file } => {
            let p = KeyPath::parse(path)?;
            let f = tokio::fs::File::open(file)
                .await
                .with_context(|| format!("opening {}", file.display()))?;
            let key = a
                .put_key(p, f)
                .await
                .with_context(|| format!("writing {} to {path}", file.display()))?;
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
        } => {
            let p = KeyPath::parse(path)?;
            let r = a.open_key_with(p, no_verify.then_some(false)).await?;
            let mut f = tokio::fs::File::create(file)
                .await
                .with_context(|| format!("creating {}", file.display()))?;
            let n = r
                .copy_to(&mut f)
                .await
                .with_context(|| format!("reading {path} into {}", file.display()))?;
            f.sync_all().await?;
            let verify = r.verify_checksum();
            r.close().await?;
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
        KeyCmd::Ls { path, prefix } => {
            let (v, b) = OzonePath::bucket_path(path)?;
            for k in a.list_keys(KeyPath::new(&v, &b, prefix)).await? {
                println!("{}\t{}", k.size, k.name);
            }
        }
        KeyCmd::Info { path } => {
            let p = KeyPath::parse(path)?;
            print_key(&a.key_info(p).await?);
        }
        KeyCmd::Rm { path } => {
            let p = KeyPath::parse(path)?;
            a.delete_key(p).await?;
            println!("deleted {path}");
        }
        KeyCmd::Checksum { path } => {
            let c = a.key_checksum(KeyPath::parse(path)?).await?;
            println!("{} {:08x} {} {path}", c.kind.as_str_name(), c.crc, c.size);
        }
    }
    Ok(None)
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

pub(crate) async fn sh(cli: &Cli, cmd: &ShCmd) -> anyhow::Result<()> {
    let conf = cli.conf()?;
    if let Some(socket) = conf.opt(&keys::CLIENT_SIDECAR_SOCKET)? {
        let ShCmd::Key { cmd } = cmd else {
            bail!("only key commands go through a sidecar; drop --sidecar for volumes and buckets");
        };
        let sc = ozone_client::SidecarClient::unix(&socket)?;
        if let Some(m) = key_cmd(&sc, cmd).await? {
            summary(&m, " through the sidecar");
        }
        return Ok(());
    }
    let client = cli.client_of(&conf)?;
    match cmd {
        ShCmd::Volume { cmd } => match cmd {
            VolumeCmd::Create { path } => {
                let p = OzonePath::parse(path)?;
                if p.bucket.is_some() {
                    bail!("expected /VOLUME, got {path}");
                }
                client.create_volume(&p.volume).await?;
                println!("created volume /{}", p.volume);
            }
            VolumeCmd::Ls => {
                for v in client.list_volumes().await? {
                    println!("/{}", v.name);
                }
            }
        },
        ShCmd::Bucket { cmd } => match cmd {
            BucketCmd::Create { path, layout } => {
                let (v, b) = OzonePath::bucket_path(path)?;
                let layout = match layout.as_str() {
                    "FILE_SYSTEM_OPTIMIZED" | "FSO" => BucketLayout::FileSystemOptimized,
                    _ => BucketLayout::ObjectStore,
                };
                client.create_bucket_with_layout(&v, &b, layout).await?;
                println!("created bucket /{v}/{b} ({})", layout.as_str_name());
            }
            BucketCmd::Ls { path } => {
                let p = OzonePath::parse(path)?;
                for b in client.list_buckets(&p.volume).await? {
                    println!("/{}/{}", b.volume, b.name);
                }
            }
        },
        ShCmd::Key { cmd } => {
            if let Some(m) = key_cmd(&client, cmd).await? {
                let s = client.stats();
                let tail = if m.verb == "read" {
                    tracing::info!(short_circuit_bytes = s.short_circuit_bytes, fallbacks = ?client.short_circuit_fallbacks(), "read done");
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
