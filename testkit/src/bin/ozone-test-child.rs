//! Processes the tests start and SIGKILL.
//!
//! `ozone-test-child wal-writer OM VOLUME BUCKET PATH ENTRIES [hflush]`:
//! creates file PATH, appends ENTRIES entries (`data::bytes(i, 30_000 + i *
//! 911)`), hsyncs (or hflushes) after each and prints `synced <length>`,
//! then appends 5,000 bytes it neither syncs nor flushes, prints `waiting`
//! and sleeps until killed.

use anyhow::{Context, bail};
use ozone_client::prelude::*;
use ozone_client::{Client, ClientConfig};
use ozone_testkit::data;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [
            "wal-writer",
            om,
            volume,
            bucket,
            path,
            entries,
            ref how @ ..,
        ] => {
            let entries: u64 = entries.parse().context("ENTRIES")?;
            let flush_only = match how {
                [] => false,
                ["hflush"] => true,
                _ => bail!("the last argument may only be hflush"),
            };
            wal_writer(om, KeyPath::new(volume, bucket, path), entries, flush_only).await
        }
        _ => bail!("usage: ozone-test-child wal-writer OM VOLUME BUCKET PATH ENTRIES [hflush]"),
    }
}

async fn wal_writer(
    om: &str,
    path: KeyPath<'_>,
    entries: u64,
    flush_only: bool,
) -> anyhow::Result<()> {
    let mut cfg = ClientConfig::new(om);
    cfg.chunk_size = 64 << 10;
    let c = Client::connect(cfg)?;
    let mut f = c.create_file(path, false).await?;
    let mut len = 0u64;
    for i in 0..entries {
        let entry = data::bytes(i, 30_000 + i as usize * 911);
        f.write(&entry).await?;
        len += entry.len() as u64;
        if flush_only {
            f.hflush().await?;
        } else {
            f.hsync().await?;
        }
        println!("synced {len}");
    }
    // Bytes neither synced nor flushed: lost with the writer.
    f.write(&[7u8; 5000]).await?;
    println!("waiting");
    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
    Ok(())
}
