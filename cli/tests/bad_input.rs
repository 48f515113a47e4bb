//! Bad input gets a clear error and the servers keep serving.

use ozone_client::prelude::*;
use std::io::Write;

use bytes::{Buf, BufMut, Bytes};
use ozone_client::ClientError;
use ozone_common::checksum::Checksummer;
use ozone_proto::datanode_client::DatanodeClient;
use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::*;
use ozone_testkit::data;
use ozone_testkit::harness::*;
use tonic::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Sends raw bytes as a gRPC message body.
#[derive(Default, Clone)]
struct RawCodec;
struct RawEnc;
struct RawDec;

impl Encoder for RawEnc {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEnc;
    type Decoder = RawDec;
    fn encoder(&mut self) -> RawEnc {
        RawEnc
    }
    fn decoder(&mut self) -> RawDec {
        RawDec
    }
}

async fn raw_call(addr: &str, path: &'static str, body: Bytes) -> tonic::Status {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut g = tonic::client::Grpc::new(ch);
    g.ready().await.unwrap();
    g.unary(
        tonic::Request::new(body),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .expect_err("malformed request must fail")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_nothing_breaks() {
    let tc = cluster(3, &["ozone.grpc.max.message.size=8MB"]).await;
    let c = &tc.cluster;
    let w = client(c, None, &["ozone.grpc.max.message.size=8MB"]);

    // Missing volume, bucket, key.
    let e = w.create_bucket("nope", "b12").await.unwrap_err();
    assert!(
        matches!(&e, ClientError::NotFound(m) if m.contains("volume /nope")),
        "{e}"
    );
    bucket(&w).await;
    let e = w.create_volume("vol").await.unwrap_err();
    assert!(matches!(e, ClientError::AlreadyExists(_)), "{e}");
    let e = w
        .open_key(KeyPath::new("vol", "nobucket", "k"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, ClientError::NotFound(m) if m.contains("bucket /vol/nobucket")),
        "{e}"
    );
    let e = w
        .open_key(KeyPath::new("vol", "bucket", "missing"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, ClientError::NotFound(m) if m.contains("key /vol/bucket/missing")),
        "{e}"
    );
    let e = w
        .delete_key(KeyPath::new("vol", "bucket", "missing"))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::NotFound(_)), "{e}");
    // Invalid names.
    assert!(w.create_volume("UPPER").await.is_err());
    let mut om = OzoneManagerClient::connect(format!("http://{}", c.om_address()))
        .await
        .unwrap();
    let s = om
        .create_volume(CreateVolumeRequest {
            name: "x".into(),
            owner: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("length"), "{}", s.message());

    // Reads past the end, zero and huge lengths.
    let want = data::bytes(1, 50_000);
    let key = put(&w, "k", &want, 50_000).await;
    let r = w
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(r.read_at(50_000, &mut buf).await.unwrap(), 0);
    assert_eq!(r.read_at(49_995, &mut buf).await.unwrap(), 5);
    assert_eq!(buf[..5], want[49_995..]);
    let e = r.read_at(50_001, &mut buf).await.unwrap_err();
    assert!(
        matches!(e, ClientError::OutOfRange { offset: 50_001, .. }),
        "{e}"
    );
    let e = r.read_exact_at(u64::MAX - 3, &mut buf).await.unwrap_err();
    assert!(matches!(e, ClientError::OutOfRange { .. }), "{e}");
    assert_eq!(r.read_at(0, &mut []).await.unwrap(), 0);

    let b = &key.blocks[0];
    let id = b.block.unwrap();
    let addr = b.replicas[0].address.clone();
    let mut dn = DatanodeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let read = |offset, len| ReadChunkRequest {
        block: Some(id),
        offset,
        len,
        with_checksums: true,
        token: Vec::new(),
        coarse_checksums: false,
    };
    let s = dn.read_chunk(read(49_999, 2)).await.unwrap_err();
    assert_eq!(s.code(), Code::OutOfRange, "{}", s.message());
    assert!(s.message().contains("50000 bytes"), "{}", s.message());
    let s = dn.read_chunk(read(u64::MAX, 2)).await.unwrap_err();
    assert_eq!(s.code(), Code::OutOfRange);
    let s = dn.read_chunk(read(0, u64::MAX)).await.unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    let ok = dn.read_chunk(read(10, 0)).await.unwrap().into_inner();
    assert!(ok.data.is_empty());
    let s = dn
        .read_chunk(ReadChunkRequest {
            block: Some(BlockId {
                container_id: 999,
                local_id: 1,
                commit_seq: 0,
            }),
            offset: 0,
            len: 1,
            with_checksums: false,
            token: Vec::new(),
            coarse_checksums: false,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound);
    let s = dn
        .read_chunk(ReadChunkRequest::default())
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);

    // A write whose checksums do not match is refused and never committed.
    let ck = Checksummer::new(ChecksumType::Crc32c, 16384).unwrap();
    let bad_id = BlockId {
        container_id: 77,
        local_id: 1,
        commit_seq: 0,
    };
    let payload = data::bytes(2, 40_000);
    let mut sums = ck.compute(&payload);
    sums[1] ^= 1;
    let chunk = ChunkInfo {
        offset: 0,
        len: payload.len() as u64,
        checksum: Some(ChecksumData {
            r#type: ChecksumType::Crc32c as i32,
            bytes_per_checksum: 16384,
            checksums: sums,
        }),
        fine_checksum: None,
    };
    let s = dn
        .write_chunk(WriteChunkRequest {
            block: Some(bad_id),
            chunk: Some(chunk.clone()),
            data: Bytes::from(payload.clone()),
            token: Vec::new(),
            flush: false,
            data_offset: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(
        s.message().contains("checksum mismatch in window 1"),
        "{}",
        s.message()
    );
    // On a write stream: a good chunk is acknowledged (and, flushed,
    // served); a bad one ends the stream with its refusal, and nothing sent
    // after it is written.
    {
        use futures::SinkExt;
        let good_id = BlockId {
            container_id: 78,
            local_id: 1,
            commit_seq: 0,
        };
        let good = data::bytes(3, 40_000);
        let good_chunk = |offset: u64, bytes: &[u8]| ChunkInfo {
            offset,
            len: bytes.len() as u64,
            checksum: Some(ChecksumData {
                r#type: ChecksumType::Crc32c as i32,
                bytes_per_checksum: 16384,
                checksums: ck.compute(bytes),
            }),
            fine_checksum: None,
        };
        let msg = |id: BlockId, chunk: ChunkInfo, bytes: &[u8]| WriteChunkRequest {
            block: Some(id),
            chunk: Some(chunk),
            data: Bytes::from(bytes.to_vec()),
            token: Vec::new(),
            flush: true,
            data_offset: 0,
        };
        let (mut tx, rx) = futures::channel::mpsc::channel(4);
        let mut acks = dn.write_stream(rx).await.unwrap().into_inner();
        tx.send(msg(good_id, good_chunk(0, &good), &good))
            .await
            .unwrap();
        assert!(acks.message().await.unwrap().is_some(), "acknowledged");
        let served = |dn: &mut DatanodeClient<tonic::transport::Channel>| {
            let mut dn = dn.clone();
            async move {
                dn.get_block(GetBlockRequest {
                    block: Some(good_id),
                    token: Vec::new(),
                })
                .await
                .unwrap()
                .into_inner()
                .block
                .unwrap()
                .size
            }
        };
        assert_eq!(served(&mut dn).await, 40_000);
        tx.send(msg(bad_id, chunk.clone(), &payload)).await.unwrap();
        let s = acks.message().await.unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        let more = data::bytes(4, 10_000);
        let _ = tx
            .send(msg(good_id, good_chunk(40_000, &more), &more))
            .await;
        assert!(
            !matches!(acks.message().await, Ok(Some(_))),
            "the stream ended at the refusal"
        );
        assert_eq!(served(&mut dn).await, 40_000, "nothing written after it");
    }
    let s = dn
        .put_block(PutBlockRequest {
            block: Some(BlockData {
                id: Some(bad_id),
                chunks: vec![chunk],
                size: 40_000,
                committed: false,
            }),
            sync: false,
            token: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(s.code(), Code::NotFound | Code::InvalidArgument),
        "{s:?}"
    );
    let s = dn
        .get_block(GetBlockRequest {
            block: Some(bad_id),
            token: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound);

    // Malformed protobuf bodies.
    for (path, body) in [
        ("/ozone.v1.Datanode/WriteChunk", &b"\xff\xff\xff\xff"[..]),
        ("/ozone.v1.Datanode/WriteStream", &b"\xff\xff\xff\xff"[..]),
        ("/ozone.v1.Datanode/ReadChunk", &b"\x0a\xff\x01"[..]),
        ("/ozone.v1.OzoneManager/LookupKey", &b"\x12\x80"[..]),
    ] {
        let target = if path.contains("Datanode") {
            addr.clone()
        } else {
            c.om_address()
        };
        let s = raw_call(&target, path, Bytes::from_static(body)).await;
        assert!(
            matches!(s.code(), Code::Internal | Code::InvalidArgument),
            "{path}: {s:?}"
        );
    }
    // Oversized message.
    let big = Bytes::from(vec![0u8; 9 << 20]);
    let s = raw_call(&addr, "/ozone.v1.Datanode/WriteChunk", big).await;
    assert!(
        matches!(
            s.code(),
            Code::ResourceExhausted | Code::OutOfRange | Code::Internal
        ),
        "{s:?}"
    );
    // Garbage on the TCP port.
    {
        let mut sock = std::net::TcpStream::connect(&addr).unwrap();
        let _ = sock.write_all(b"GET / HTTP/1.1\r\n\r\n\x00\x01garbage\xff\xfe");
    }

    // Everything still serves.
    let again = put(&w, "after", &want, 7000).await;
    assert_eq!(again.blocks[0].replicas.len(), 3);
    assert_eq!(get(&w, "after", 10_000).await, want);
    let dns = w.om().list_datanodes().await.unwrap();
    assert_eq!(
        dns.iter()
            .filter(|d| d.state == NodeState::Healthy as i32)
            .count(),
        3
    );
    tc.cluster.stop().await;
}

/// Too few datanodes for the replication asked: the OM answers
/// RESOURCE_EXHAUSTED (no retry fixes it), and the client fails at once
/// instead of retrying for its OM retry timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_the_om_cannot_make_fails_fast_and_typed() {
    let tc = cluster(2, &[]).await;
    let c = &tc.cluster;
    let w = client(c, None, &["ozone.client.om.retry.timeout=60s"]);
    bucket(&w).await;
    let t = std::time::Instant::now();
    // Right after start the OM may still wait for datanodes to report
    // (UNAVAILABLE, which the client retries); then it knows there are two.
    let e = w
        .put_key(KeyPath::new("vol", "bucket", "three"), &b"abc"[..])
        .await
        .expect_err("three replicas placed on two datanodes");
    assert!(matches!(&e, ClientError::Exhausted(_)), "{e:?}");
    assert!(e.to_string().contains("cannot place 3 replicas"), "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "retried for {:?}",
        t.elapsed()
    );
    // ONE replica fits.
    let one = client(c, None, &["ozone.replication=ONE"]);
    one.put_key(KeyPath::new("vol", "bucket", "one"), &b"abc"[..])
        .await
        .unwrap();
}
