//! The HBase read pattern: a verify-off reader for normal reads (HFile
//! blocks carry their own checksums) and a verified fallback reader for the
//! range whose own checksum failed.
//!
//! ```sh
//! ozone local up --dir /tmp/ozone &            # prints: ready om=ADDR
//! source /tmp/ozone/cluster.env
//! cargo run -p ozone-client --example hbase_pattern -- /tmp/ozone/node1/sockets node1
//! ```
//!
//! Arguments: the node's socket directory and node name (both optional).

use ozone_client::prelude::*;
use ozone_client::{Client, ClientConfig};
use ozone_common::checksum::Checksummer;
use ozone_common::config::{self as keys, Conf};
use ozone_proto::ChecksumType;

/// "HFile block" size: 64 KiB of payload after a 4-byte CRC32C of it.
const BLOCK: usize = 64 * 1024;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let om = std::env::var("OZONE_OM_ADDRESS").map_err(|_| "set OZONE_OM_ADDRESS")?;
    let mut args = std::env::args().skip(1);
    let mut conf = Conf::new();
    if let Some(dir) = args.next() {
        conf.set(keys::DOMAIN_SOCKET_PATH.name, dir);
    }
    let mut cfg = ClientConfig::from_conf(&om, &conf)?;
    cfg.node_name = args.next();
    // One connection, two instances: verification off for normal reads,
    // on for the fallback. They share connections and the fd cache.
    let base = Client::connect(cfg)?;
    let normal = base.with_verify_checksum(false);
    let fallback = base.with_verify_checksum(true);

    let _ = base.create_volume("hbase").await;
    let _ = base.create_bucket("hbase", "data").await;
    let crc = Checksummer::new(ChecksumType::Crc32c, BLOCK as u32)?;
    let mut file = Vec::new();
    for i in 0..64u32 {
        let payload: Vec<u8> = (0..BLOCK).map(|j| (j as u32 ^ i) as u8).collect();
        file.extend_from_slice(&crc.checksum(&payload).to_le_bytes());
        file.extend_from_slice(&payload);
    }
    let mut w = base
        .create_key(KeyPath::new("hbase", "data", "region1/cf/hfile1"))
        .await?;
    w.write(&file).await?;
    w.close().await?;

    let hfile = normal
        .open_key(KeyPath::new("hbase", "data", "region1/cf/hfile1"))
        .await?;
    let verified = fallback
        .open_key(KeyPath::new("hbase", "data", "region1/cf/hfile1"))
        .await?;
    let mut buf = vec![0u8; 4 + BLOCK];
    let mut fallbacks = 0;
    for i in 0..64u64 {
        let off = i * (4 + BLOCK as u64);
        hfile.read_exact_at(off, &mut buf).await?;
        let want = u32::from_le_bytes(buf[..4].try_into()?);
        if crc.checksum(&buf[4..]) != want {
            // HBase's HFile checksum failed: re-read verified. The client
            // checks the replica's checksums, moves to another replica if
            // this one is bad and reports it.
            fallbacks += 1;
            verified.read_exact_at(off, &mut buf).await?;
            assert_eq!(crc.checksum(&buf[4..]), want, "verified read still wrong");
        }
    }
    let s = base.stats();
    println!(
        "read 64 HFile blocks: {} verified fallbacks; short-circuit {} bytes, remote {} bytes, checksummed {} bytes",
        fallbacks, s.short_circuit_bytes, s.remote_bytes, s.checksummed_bytes
    );
    Ok(())
}
