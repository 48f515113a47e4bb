//! TLS on every gRPC port (`hdds.grpc.tls.enabled`): a cluster of real
//! processes serving TLS, plaintext and untrusted clients refused,
//! certificates rotated (a new leaf, then a new CA) under a read and write
//! load with zero failed calls, each rotation seen by new connections
//! without a restart.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ozone_client::prelude::*;
use ozone_common::tls::issue::{Ca, write_dir};
use ozone_common::tls::{RECHECK, Tls};
use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::*;
use ozone_testkit::data;
use ozone_testkit::harness::*;

const DAY: Duration = Duration::from_secs(86_400);

fn names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

/// The DER of the certificate the server at `addr` presents to a client
/// trusting `trust`'s CA bundle.
async fn presented(addr: &str, trust: &Path) -> Vec<u8> {
    let tls = Tls::load(trust, false).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_name("127.0.0.1");
    let conn = tokio_rustls::TlsConnector::from(tls.client_config())
        .connect(name, tcp)
        .await
        .unwrap();
    conn.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn rustls_name(host: &str) -> tokio_rustls::rustls::pki_types::ServerName<'static> {
    tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string()).unwrap()
}

fn der_of(pem: &str) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Waits until the server at `addr` presents `want` (a PEM certificate).
async fn until_presented(addr: &str, trust: &Path, want: &str) {
    let want = der_of(want);
    let deadline = Instant::now() + RECHECK * 10;
    while presented(addr, trust).await != want {
        assert!(Instant::now() < deadline, "{addr} kept its old certificate");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_refuses_plaintext_and_rotates_under_load() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path().join("tls");
    let ca = Ca::new("ozone test CA", DAY).unwrap();
    write_dir(&dir, ca.cert_pem(), Some(&ca.issue(&names(), DAY).unwrap())).unwrap();
    let on = "hdds.grpc.tls.enabled=true".to_string();
    let at = format!("hdds.grpc.tls.dir={}", dir.display());
    let tc = cluster(3, &[&on, &at]).await;
    let om = tc.cluster.om_address();
    let c = client(&tc.cluster, None, &[&on, &at]);
    bucket(&c).await;
    let want = data::bytes(1, 300_000);
    let info = put(&c, "k", &want, 65_536).await;
    assert_eq!(get(&c, "k", 100_000).await, want, "read over TLS");

    // A plaintext client gets nothing from the OM or a datanode.
    let plain = client(&tc.cluster, None, &[]);
    let e = plain.create_volume("plain").await.unwrap_err();
    assert!(e.to_string().contains("hdds.grpc.tls.enabled"), "{e}");
    let dn = &info.blocks[0].replicas[0].address;
    let raw = tonic::transport::Endpoint::from_shared(format!("http://{dn}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    let e = ozone_proto::datanode_client::DatanodeClient::new(raw)
        .get_block(GetBlockRequest {
            block: info.blocks[0].block,
            ..Default::default()
        })
        .await
        .unwrap_err();
    // The transport's code varies with the moment the server hangs up
    // (Internal, Unavailable, Unknown); what matters is that no handler
    // answered.
    assert!(
        !matches!(
            e.code(),
            tonic::Code::Ok
                | tonic::Code::NotFound
                | tonic::Code::InvalidArgument
                | tonic::Code::PermissionDenied
                | tonic::Code::Unauthenticated
        ),
        "a plaintext call to a TLS datanode fails at the transport: {e}"
    );
    // So does a TLS client that does not trust the cluster's CA.
    let stranger = certs.path().join("stranger");
    write_dir(
        &stranger,
        Ca::new("another CA", DAY).unwrap().cert_pem(),
        None,
    )
    .unwrap();
    let untrusted = ozone_common::tls::channel(
        tonic::transport::Endpoint::from_shared(format!("http://{om}"))
            .unwrap()
            .timeout(Duration::from_secs(5)),
        Some(&Tls::load(&stranger, false).unwrap()),
    )
    .await;
    let e = untrusted.expect_err("an untrusted server is refused");
    let chain = format!("{e:?}");
    assert!(
        chain.contains("UnknownIssuer") || chain.contains("certificate"),
        "{chain}"
    );
    // A client that does not trust the server fails at once, naming the
    // certificate problem: no retrying for the OM retry timeout.
    let at_stranger = format!("hdds.grpc.tls.dir={}", stranger.display());
    let doubtful = client(&tc.cluster, None, &[&on, &at_stranger]);
    let t = std::time::Instant::now();
    let e = doubtful
        .create_volume("doubt")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("certificate is not accepted"), "{e}");
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "a certificate error was retried: {:?}",
        t.elapsed()
    );
    // Nothing the refused clients asked happened.
    let mut admin = OzoneManagerClient::new(
        ozone_common::tls::channel(
            tonic::transport::Endpoint::from_shared(format!("http://{om}")).unwrap(),
            Some(&Tls::load(&dir, false).unwrap()),
        )
        .await
        .unwrap(),
    );
    let vols = admin
        .list_volumes(ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(vols.volumes.iter().all(|v| v.name != "plain"));

    // Load: writers and readers, each round on a fresh client half the
    // time (so new connections and handshakes keep happening).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let (cl, on, at) = (tc.cluster.om_address(), on.clone(), at.clone());
        let mut cf = ozone_common::config::Conf::new();
        cf.apply_overrides(&[on.as_str(), at.as_str()]).unwrap();
        let want = want.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = 0u64;
            let mut c: Option<ozone_client::Client> = None;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                if c.is_none() || round.is_multiple_of(2) {
                    let cfg = ozone_client::ClientConfig::from_conf(&cl, &cf).unwrap();
                    c = Some(ozone_client::Client::connect(cfg).unwrap());
                }
                let c = c.as_ref().unwrap();
                let name = format!("load-{t}-{round}");
                let r: Result<(), String> = async {
                    let mut w = c
                        .create_key(KeyPath::new("vol", "bucket", &name))
                        .await
                        .map_err(|e| format!("create {name}: {e}"))?;
                    w.write(&want[..20_000 + (round as usize % 7) * 1000])
                        .await
                        .map_err(|e| format!("write {name}: {e}"))?;
                    w.close().await.map_err(|e| format!("close {name}: {e}"))?;
                    let r = c
                        .open_key(KeyPath::new("vol", "bucket", "k"))
                        .await
                        .map_err(|e| format!("open k: {e}"))?;
                    let mut buf = vec![0u8; 50_000];
                    let off = (round * 4099) % 250_000;
                    let n = r
                        .read_at(off, &mut buf)
                        .await
                        .map_err(|e| format!("read k: {e}"))?;
                    if buf[..n] != want[off as usize..off as usize + n] {
                        return Err(format!("read k at {off}: wrong bytes"));
                    }
                    Ok(())
                }
                .await;
                match r {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("failed call under rotation: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Rotation 1: a new certificate from the same CA.
    let leaf2 = ca.issue(&names(), DAY).unwrap();
    write_dir(&dir, ca.cert_pem(), Some(&leaf2)).unwrap();
    until_presented(&om, &dir, &leaf2.cert_pem).await;
    until_presented(dn, &dir, &leaf2.cert_pem).await;

    // Rotation 2: a new CA. Its certificate joins the bundle first; once
    // every process has had time to load the bundle, the certificates it
    // signs replace the old ones; then the old CA leaves the bundle.
    let ca2 = Ca::new("ozone test CA 2", DAY).unwrap();
    let bundle = format!("{}{}", ca.cert_pem(), ca2.cert_pem());
    write_dir(&dir, &bundle, Some(&leaf2)).unwrap();
    tokio::time::sleep(RECHECK * 2 + Duration::from_millis(500)).await;
    let leaf3 = ca2.issue(&names(), DAY).unwrap();
    write_dir(&dir, &bundle, Some(&leaf3)).unwrap();
    until_presented(&om, &dir, &leaf3.cert_pem).await;
    until_presented(dn, &dir, &leaf3.cert_pem).await;
    tokio::time::sleep(RECHECK * 2 + Duration::from_millis(500)).await;
    write_dir(&dir, ca2.cert_pem(), Some(&leaf3)).unwrap();
    tokio::time::sleep(RECHECK * 2).await;

    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("rotation under load: {ok} rounds succeeded, {failed} failed");
    assert_eq!(failed, 0, "calls failed during rotation");
    assert!(ok >= 20, "the load ran ({ok} rounds)");

    // A client trusting only the old CA is now refused; the new one works,
    // and the OM's deletions reach the datanodes over TLS.
    let old_only = certs.path().join("old");
    write_dir(&old_only, ca.cert_pem(), None).unwrap();
    let stale = ozone_common::tls::channel(
        tonic::transport::Endpoint::from_shared(format!("http://{om}")).unwrap(),
        Some(&Tls::load(&old_only, false).unwrap()),
    )
    .await;
    assert!(stale.is_err(), "the retired CA is no longer accepted");
    let c = client(&tc.cluster, None, &[&on, &at]);
    assert_eq!(get(&c, "k", 100_000).await, want);
    c.delete_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    wait_gone(&replica_files(&tc.cluster, 3, &info)).await;
}

#[test]
fn a_tls_directory_with_a_mismatched_or_missing_key_is_refused_with_its_path() {
    let d = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca", DAY).unwrap();
    let a = ca.issue(&names(), DAY).unwrap();
    let b = ca.issue(&names(), DAY).unwrap();
    write_dir(d.path(), ca.cert_pem(), Some(&a)).unwrap();
    std::fs::write(d.path().join("tls.key"), &b.key_pem).unwrap();
    let e = Tls::load(d.path(), true).unwrap_err().to_string();
    assert!(e.contains(&d.path().display().to_string()), "{e}");
    std::fs::remove_file(d.path().join("tls.key")).unwrap();
    let e = Tls::load(d.path(), true).unwrap_err().to_string();
    assert!(e.contains("tls.key") && e.contains("missing"), "{e}");
    // A client needs only the CA bundle.
    std::fs::remove_file(d.path().join("tls.crt")).unwrap();
    assert!(Tls::load(d.path(), false).is_ok());
    std::fs::write(d.path().join("ca.crt"), "not a certificate").unwrap();
    let e = Tls::load(d.path(), false).unwrap_err().to_string();
    assert!(e.contains("ca.crt"), "{e}");
}
