//! A secured cluster (`ozone.security.enabled`, static tokens): every RPC
//! against each kind of caller. Each refusal is UNAUTHENTICATED or
//! PERMISSION_DENIED and changes nothing, shown by reading back after.

use std::path::{Path, PathBuf};

use ozone_client::Client;
use ozone_client::prelude::*;
use ozone_common::credentials::{AuthChannel, Credentials};
use ozone_common::token::TokenSigner;
use ozone_proto::datanode_client::DatanodeClient;
use ozone_proto::ozone_manager_client::OzoneManagerClient;
use ozone_proto::*;
use ozone_testkit::data;
use ozone_testkit::harness::*;
use ozone_testkit::local::LocalCluster;
use tonic::Code;

const SECRET: &str = "0123456789abcdef0123456789abcdef-security-test";

struct Secured {
    tc: TestCluster,
    dir: tempfile::TempDir,
}

impl Secured {
    fn token(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn cluster(&self) -> &LocalCluster {
        &self.tc.cluster
    }
    /// A client presenting the token in file `name`.
    fn client(&self, name: &str) -> Client {
        let f = format!("ozone.client.token.file={}", self.token(name).display());
        client(self.cluster(), Some("node1"), &[&f])
    }
    fn om(&self, creds: Credentials) -> OzoneManagerClient<AuthChannel> {
        let ch = tonic::transport::Endpoint::from_shared(format!(
            "http://{}",
            self.cluster().om_address()
        ))
        .unwrap()
        .connect_lazy();
        OzoneManagerClient::new(creds.wrap(ch))
    }
    fn om_as(&self, name: &str) -> OzoneManagerClient<AuthChannel> {
        self.om(Credentials::token_file(self.token(name)))
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

async fn secured(datanodes: usize) -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "secret", SECRET);
    write(
        d,
        "tokens",
        "# token,identity[,expiry]\n\
         admin-token,ops/admin\n\
         a-token,team-a/app\n\
         b-token,team-b/app\n\
         old-token,team-a/app,1000\n",
    );
    for (file, token) in [
        ("admin", "admin-token"),
        ("a", "a-token"),
        ("b", "b-token"),
        ("old", "old-token"),
        ("wrong", "no-such-token"),
    ] {
        write(d, file, token);
    }
    let conf: Vec<String> = vec![
        "hdds.block.token.enabled=true".into(),
        format!(
            "hdds.block.token.secret.file={}",
            d.join("secret").display()
        ),
        "ozone.security.enabled=true".into(),
        format!("ozone.om.token.auth.file={}", d.join("tokens").display()),
        "ozone.administrators=ops/admin".into(),
        format!("ozone.client.token.file={}", d.join("admin").display()),
    ];
    let refs: Vec<&str> = conf.iter().map(String::as_str).collect();
    let tc = cluster(datanodes, &refs).await;
    Secured { tc, dir }
}

/// Calls every OM RPC with an empty request, asserting each answers `code`.
macro_rules! every_rpc {
    ($om:expr, $code:expr) => {{
        let mut n = 0;
        every_rpc!(@ $om, $code, n,
            get_acl(AclObject::default()),
            modify_acl(ModifyAclRequest::default()),
            who_am_i(WhoAmIRequest::default()),
            create_volume(CreateVolumeRequest::default()),
            list_volumes(ListVolumesRequest::default()),
            create_bucket(CreateBucketRequest::default()),
            list_buckets(ListBucketsRequest::default()),
            get_volume(GetVolumeRequest::default()),
            get_bucket(GetBucketRequest::default()),
            delete_volume(GetVolumeRequest::default()),
            delete_bucket(GetBucketRequest::default()),
            set_quota(SetQuotaRequest::default()),
            rename_key(RenameKeyRequest::default()),
            open_key(OpenKeyRequest::default()),
            allocate_block(AllocateBlockRequest::default()),
            commit_key(CommitKeyRequest::default()),
            lookup_key(LookupKeyRequest::default()),
            list_keys(ListKeysRequest::default()),
            delete_key(DeleteKeyRequest::default()),
            register_datanode(RegisterDatanodeRequest::default()),
            heartbeat(HeartbeatRequest::default()),
            list_datanodes(ListDatanodesRequest::default()),
            report_bad_replica(ReportBadReplicaRequest::default()),
            mkdirs(MkdirsRequest::default()),
            get_file_status(GetFileStatusRequest::default()),
            list_status(ListStatusRequest::default()),
            rename(RenameRequest::default()),
            delete_path(DeletePathRequest::default()),
            get_content_summary(ContentSummaryRequest::default()),
            hsync(HsyncRequest::default()),
            recover_lease(RecoverLeaseRequest::default()),
            is_file_closed(IsFileClosedRequest::default()),
            set_operational_state(SetOperationalStateRequest::default()),
            datanode_status(DatanodeStatusRequest::default()),
            replication_status(ReplicationStatusRequest::default())
        );
        n
    }};
    (@ $om:expr, $code:expr, $n:ident, $($m:ident($req:expr)),+) => {
        $(
            let e = $om.$m($req).await.unwrap_err();
            assert_eq!(e.code(), $code, "{}: {}", stringify!($m), e.message());
            $n += 1;
        )+
    };
}

/// The OM's RPCs, as the proto declares them.
fn om_rpcs_declared() -> usize {
    let proto = include_str!("../../proto/proto/ozone.proto");
    let start = proto.find("service OzoneManager {").unwrap();
    let body = &proto[start..];
    let body = &body[..body.find("\n}").unwrap()];
    body.lines()
        .filter(|l| l.trim_start().starts_with("rpc "))
        .count()
}

fn path(v: &str, b: &str, p: &str) -> Option<FsPath> {
    Some(FsPath {
        volume: v.into(),
        bucket: b.into(),
        path: p.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_callers_without_rights_and_changes_nothing() {
    let s = secured(3).await;
    let admin = s.client("admin");
    let a = s.client("a");
    admin
        .create_volume_owned("vol", "team-a/app")
        .await
        .unwrap();
    admin
        .create_volume_owned("volb", "team-b/app")
        .await
        .unwrap();
    // The volume's owner makes a bucket there (owned by it) and writes.
    a.create_bucket("vol", "bucket").await.unwrap();
    let want = data::bytes(3, 300_000);
    let key = put(&a, "k", &want, 64 << 10).await;
    assert_eq!(get(&a, "k", 100_000).await, want);

    // No credentials, unknown token, expired token, forged service
    // credential: every RPC is UNAUTHENTICATED.
    let forged = TokenSigner::new(&[9u8; 32]).unwrap();
    let ids: Vec<String> = (0..3)
        .map(|i| s.cluster().datanode_id(i).unwrap())
        .collect();
    for (who, creds) in [
        ("nobody", Credentials::None),
        ("unknown token", Credentials::token_file(s.token("wrong"))),
        ("expired token", Credentials::token_file(s.token("old"))),
        (
            "forged datanode",
            Credentials::service(forged.clone(), "datanode", &ids[0]),
        ),
    ] {
        let mut om = s.om(creds);
        let n = every_rpc!(om, Code::Unauthenticated);
        assert_eq!(n, om_rpcs_declared(), "{who}: the table covers every RPC");
    }

    // team-b on team-a's bucket, team-a on admin calls, a client speaking
    // for a datanode, a datanode calling as a client: PERMISSION_DENIED.
    let mut b = s.om_as("b");
    let mut ca = s.om_as("a");
    let real = TokenSigner::new(SECRET.as_bytes()).unwrap();
    let mut dn = s.om(Credentials::service(real.clone(), "datanode", &ids[0]));
    macro_rules! refuse {
        ($om:expr, $m:ident, $req:expr) => {{
            let e = $om.$m($req).await.map(|_| ()).unwrap_err();
            assert_eq!(
                e.code(),
                Code::PermissionDenied,
                "{}: {}",
                stringify!($m),
                e.message()
            );
        }};
    }
    let lk = LookupKeyRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
        name: "k".into(),
    };
    let dk = DeleteKeyRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
        name: "k".into(),
    };
    let ok_req = |name: &str| OpenKeyRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
        name: name.into(),
        ..Default::default()
    };
    let gb = GetBucketRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
    };
    refuse!(b, lookup_key, lk.clone());
    refuse!(
        b,
        list_keys,
        ListKeysRequest {
            volume: "vol".into(),
            bucket: "bucket".into(),
            ..Default::default()
        }
    );
    refuse!(b, delete_key, dk.clone());
    refuse!(
        b,
        rename_key,
        RenameKeyRequest {
            volume: "vol".into(),
            bucket: "bucket".into(),
            from: "k".into(),
            to: "stolen".into()
        }
    );
    refuse!(b, open_key, ok_req("k"));
    refuse!(b, get_bucket, gb.clone());
    refuse!(b, delete_bucket, gb.clone());
    refuse!(
        b,
        create_bucket,
        CreateBucketRequest {
            volume: "vol".into(),
            name: "mine".into(),
            layout: 0
        }
    );
    refuse!(
        b,
        list_buckets,
        ListBucketsRequest {
            volume: "vol".into()
        }
    );
    refuse!(
        b,
        get_volume,
        GetVolumeRequest {
            volume: "vol".into()
        }
    );
    refuse!(
        b,
        delete_volume,
        GetVolumeRequest {
            volume: "vol".into()
        }
    );
    refuse!(
        b,
        get_acl,
        AclObject {
            volume: "vol".into(),
            bucket: "bucket".into()
        }
    );
    refuse!(
        b,
        modify_acl,
        ModifyAclRequest {
            object: Some(AclObject {
                volume: "vol".into(),
                bucket: "bucket".into()
            }),
            op: AclOp::Add as i32,
            acls: vec!["user:team-b/app:a".into()],
        }
    );
    refuse!(
        b,
        set_quota,
        SetQuotaRequest {
            volume: "vol".into(),
            bucket: "bucket".into(),
            quota_in_bytes: Some(1),
            ..Default::default()
        }
    );
    refuse!(
        b,
        delete_path,
        DeletePathRequest {
            path: path("vol", "bucket", "k"),
            recursive: true
        }
    );
    refuse!(
        b,
        get_file_status,
        GetFileStatusRequest {
            path: path("vol", "bucket", "k")
        }
    );
    // team-a's write session, continued by team-b.
    let session = ca
        .open_key(OpenKeyRequest {
            volume: "vol".into(),
            bucket: "bucket".into(),
            name: "in-flight".into(),
            checksum_type: ChecksumType::Crc32c as i32,
            bytes_per_checksum: 16 << 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    refuse!(
        b,
        allocate_block,
        AllocateBlockRequest {
            session_id: session,
            ..Default::default()
        }
    );
    refuse!(
        b,
        commit_key,
        CommitKeyRequest {
            session_id: session,
            ..Default::default()
        }
    );
    refuse!(
        b,
        hsync,
        HsyncRequest {
            session_id: session,
            ..Default::default()
        }
    );
    // Admin calls.
    refuse!(
        ca,
        create_volume,
        CreateVolumeRequest {
            name: "mine".into(),
            owner: String::new()
        }
    );
    refuse!(
        ca,
        set_quota,
        SetQuotaRequest {
            volume: "vol".into(),
            quota_in_bytes: Some(1 << 40),
            ..Default::default()
        }
    );
    refuse!(
        ca,
        set_operational_state,
        SetOperationalStateRequest {
            datanode: ids[0].clone(),
            state: OperationalState::Decommissioning as i32,
            force: true,
        }
    );
    refuse!(
        ca,
        datanode_status,
        DatanodeStatusRequest {
            datanode: ids[0].clone()
        }
    );
    refuse!(ca, replication_status, ReplicationStatusRequest::default());
    // team-a's volume is not team-b's: team-a has no right on volb.
    refuse!(
        ca,
        create_bucket,
        CreateBucketRequest {
            volume: "volb".into(),
            name: "intruder".into(),
            layout: 0
        }
    );
    // A client speaking for a datanode; a datanode for another one; a
    // datanode as a client.
    refuse!(
        ca,
        heartbeat,
        HeartbeatRequest {
            id: ids[0].clone(),
            ..Default::default()
        }
    );
    refuse!(
        ca,
        register_datanode,
        RegisterDatanodeRequest {
            datanode: Some(DatanodeDetails {
                id: "rogue".into(),
                address: "127.0.0.1:1".into(),
                ..Default::default()
            }),
        }
    );
    refuse!(
        dn,
        heartbeat,
        HeartbeatRequest {
            id: ids[1].clone(),
            ..Default::default()
        }
    );
    refuse!(dn, lookup_key, lk.clone());
    refuse!(dn, list_volumes, ListVolumesRequest {});

    // Nothing changed: the key reads back, the bucket keeps its ACL, no
    // datanode left service, no volume appeared.
    assert_eq!(get(&a, "k", 100_000).await, want);
    let keys = a
        .list_keys(KeyPath::new("vol", "bucket", ""))
        .await
        .unwrap();
    assert_eq!(
        keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["k"]
    );
    let acl = a.get_acl("vol", "bucket").await.unwrap();
    assert_eq!(acl.owner, "team-a/app");
    assert!(acl.acls.is_empty(), "{:?}", acl.acls);
    for d in admin.om().list_datanodes().await.unwrap() {
        assert_eq!(
            d.operational_state,
            OperationalState::InService as i32,
            "{}",
            d.id
        );
    }
    let vols: Vec<String> = admin
        .om()
        .list_volumes()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(vols, ["vol", "volb"]);
    // Each sees only its own volume.
    let seen: Vec<String> = a
        .om()
        .list_volumes()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(seen, ["vol"]);
    let me = ca.who_am_i(WhoAmIRequest {}).await.unwrap().into_inner();
    assert_eq!((me.identity.as_str(), me.admin), ("team-a/app", false));

    // Granted read and list, team-b reads the data, still cannot delete
    // or write.
    let added = a
        .modify_acl(
            "vol",
            "bucket",
            AclOp::Add,
            vec!["user:team-b/app:rl".into()],
        )
        .await
        .unwrap();
    assert_eq!(added.acls, ["user:team-b/app:rl"]);
    let rb = s.client("b");
    assert_eq!(get(&rb, "k", 100_000).await, want);
    refuse!(b, delete_key, dk.clone());
    refuse!(b, open_key, ok_req("k2"));
    let removed = a
        .modify_acl(
            "vol",
            "bucket",
            AclOp::Remove,
            vec!["user:team-b/app:r".into()],
        )
        .await
        .unwrap();
    assert_eq!(removed.acls, ["user:team-b/app:l"]);
    refuse!(b, lookup_key, lk.clone());
    let bad = a
        .modify_acl("vol", "bucket", AclOp::Add, vec!["user:nobody:r".into()])
        .await
        .unwrap_err();
    assert!(
        bad.to_string().contains("namespace/serviceaccount"),
        "{bad}"
    );

    // Datanode commands: unsigned, forged, for another datanode, expired,
    // replayed: refused, and the replica is still there.
    let block = key.blocks[0].block.unwrap();
    let holder = &key.blocks[0].replicas[0];
    let mut dnc = DatanodeClient::connect(format!("http://{}", holder.address))
        .await
        .unwrap();
    let unsigned = DeleteBlocksRequest {
        blocks: vec![block],
        auth: None,
    };
    let signed_by = |signer: &TokenSigner, target: &str, expiry: u64| {
        let mut r = unsigned.clone();
        r.auth = Some(signer.sign_command(
            "DeleteBlocks",
            target,
            &prost::Message::encode_to_vec(&unsigned),
            expiry,
        ));
        r
    };
    let soon = ozone_common::now_ms() + 60_000;
    let other = ids.iter().find(|i| **i != holder.id).unwrap();
    for (what, req) in [
        ("unsigned", unsigned.clone()),
        ("forged", signed_by(&forged, &holder.id, soon)),
        ("for another datanode", signed_by(&real, other, soon)),
        ("expired", signed_by(&real, &holder.id, 1000)),
    ] {
        let e = dnc.delete_blocks(req).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{what}: {}", e.message());
    }
    let e = dnc
        .replicate_block(ReplicateBlockRequest {
            block: Some(block),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "unsigned ReplicateBlock");
    assert_eq!(get(&a, "k", 100_000).await, want);
    let file = block_file(s.cluster(), index_of(s.cluster(), 3, &holder.id), &block);
    assert!(file.exists(), "{} was deleted", file.display());

    // A command the OM signed works once; its copy is refused.
    let throwaway = put(&a, "throwaway", b"bye", 1024).await;
    let tb = throwaway.blocks[0].block.unwrap();
    let th = &throwaway.blocks[0].replicas[0];
    let mut tdn = DatanodeClient::connect(format!("http://{}", th.address))
        .await
        .unwrap();
    let cmd = DeleteBlocksRequest {
        blocks: vec![tb],
        auth: None,
    };
    let auth = real.sign_command(
        "DeleteBlocks",
        &th.id,
        &prost::Message::encode_to_vec(&cmd),
        soon,
    );
    let cmd = DeleteBlocksRequest {
        auth: Some(auth),
        ..cmd
    };
    let done = tdn.delete_blocks(cmd.clone()).await.unwrap().into_inner();
    assert_eq!(done.deleted.len(), 1);
    let e = tdn.delete_blocks(cmd).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("replayed"), "{}", e.message());
    let refused = metric(&th.http_address, "ozone_datanode_commands_refused");
    assert!(refused >= 1, "refusals are counted");

    // The OM's own signed deletions are accepted: a deleted key's replicas
    // go away.
    let gone = put(&a, "gone", &data::bytes(5, 10_000), 4096).await;
    a.delete_key(KeyPath::new("vol", "bucket", "gone"))
        .await
        .unwrap();
    wait_gone(&replica_files(s.cluster(), 3, &gone)).await;
    assert_eq!(get(&a, "k", 100_000).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_acl_commands() {
    let s = secured(1).await;
    let om = s.cluster().om_address();
    let as_file = |f: &str| format!("ozone.client.token.file={}", s.token(f).display());
    let (admin, a, b) = (as_file("admin"), as_file("a"), as_file("b"));
    let sh = |who: &str, args: &[&str]| {
        let mut all = vec!["--set", who];
        all.extend_from_slice(args);
        ozone_ok(&om, &all)
    };
    sh(
        &admin,
        &["sh", "volume", "create", "--user", "team-a/app", "/vol"],
    );
    sh(&a, &["sh", "bucket", "create", "/vol/bucket"]);
    let out = sh(
        &a,
        &[
            "sh",
            "bucket",
            "addacl",
            "-a",
            "user:team-b/app:rl,group:team-c:l",
            "/vol/bucket",
        ],
    );
    assert_eq!(
        out,
        "owner: team-a/app\nuser:team-b/app:rl\ngroup:team-c:l\n"
    );
    let out = sh(&a, &["sh", "bucket", "getacl", "--json", "/vol/bucket"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["owner"], "team-a/app");
    assert_eq!(v["acls"][1], "group:team-c:l");
    let out = sh(
        &a,
        &[
            "sh",
            "bucket",
            "removeacl",
            "-a",
            "group:team-c:l",
            "/vol/bucket",
        ],
    );
    assert_eq!(out, "owner: team-a/app\nuser:team-b/app:rl\n");
    let out = sh(&a, &["sh", "volume", "info", "/vol"]);
    assert!(out.contains("owner:            team-a/app"), "{out}");
    // Refused: one error line naming the caller and the right it lacks.
    let denied = std::process::Command::new(exe())
        .args([
            "--om",
            &om,
            "--set",
            &b,
            "sh",
            "bucket",
            "setacl",
            "-a",
            "world::a",
            "/vol/bucket",
        ])
        .output()
        .unwrap();
    assert!(!denied.status.success());
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(err.contains("team-b/app may not change ACLs"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_presents_its_token() {
    let mut s = secured(3).await;
    let admin = s.client("admin");
    admin.create_volume("vol").await.unwrap();
    admin.create_bucket("vol", "bucket").await.unwrap();
    let want = data::bytes(8, 50_000);
    put(&admin, "k", &want, 8192).await;
    // The cluster's processes get the admin's token file (--set); a sidecar
    // gets a token and an identity of its own, never the admin's.
    let sc =
        s.tc.cluster
            .start_sidecar("node1", "app", &[])
            .await
            .unwrap();
    assert_eq!(sc.identity.as_deref(), Some("local/app"));
    let client = ozone_client::SidecarClient::unix(&sc.socket).unwrap();
    let e = client
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("PermissionDenied: local/app may not read keys"),
        "the sidecar has no right the admin did not grant it: {e}"
    );
    // The OM's service passed on by the sidecar carries the workload's
    // identity, and a refused call through it changes nothing.
    let me = client.om().who_am_i().await.unwrap();
    assert_eq!(me.identity, "local/app");
    let e = client
        .delete_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("PermissionDenied"), "{e:?}");
    admin
        .key_info(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    ozone_ok(
        &s.cluster().om_address(),
        &[
            "--set",
            &format!("ozone.client.token.file={}", s.token("admin").display()),
            "sh",
            "bucket",
            "addacl",
            "-a",
            "user:local/app:rl",
            "/vol/bucket",
        ],
    );
    let r = client
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let mut got = Vec::new();
    r.copy_to(&mut got).await.unwrap();
    assert_eq!(got, want);
    // The token's file emptied: the sidecar's next OM call is refused, as
    // UNAUTHENTICATED, with the file named.
    std::fs::write(sc.socket.with_file_name("token"), "").unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let e = client
        .open_key(KeyPath::new("vol", "bucket", "k"))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("token file"), "{e}");
}

/// Block tokens expire (here after 2 s) while readers stay open (an HBase
/// region server keeps its store files open for days): a read refused for
/// an expired token fetches new tokens once and goes on, over gRPC and
/// short-circuit, and the reader's clones use them too. A writer whose
/// block outlives its WRITE token moves to a fresh block, excluding no
/// datanode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_outlive_their_block_tokens() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "secret", SECRET);
    let secret = format!(
        "hdds.block.token.secret.file={}",
        dir.path().join("secret").display()
    );
    let tc = cluster(
        3,
        &[
            "hdds.block.token.enabled=true",
            &secret,
            "hdds.block.token.expiry.time=2s",
            "ozone.scm.block.size=1MB",
        ],
    )
    .await;
    let c = &tc.cluster;
    let w = client(c, Some("node1"), &[]);
    bucket(&w).await;
    let want = data::bytes(3, 3 << 20);
    let info = put(&w, "k", &want, 65536).await;
    assert_eq!(info.blocks.len(), 3, "three blocks of 1 MB");
    let grpc = client(c, Some("node1"), &["ozone.client.read.short-circuit=false"]);
    let sc = sc_client(c, "node1", &[]);
    let path = KeyPath::new("vol", "bucket", "k");
    let (rg, rs) = (
        grpc.open_key(path).await.unwrap(),
        sc.open_key(path).await.unwrap(),
    );
    let mut buf = vec![0u8; 4096];
    rg.read_exact_at(0, &mut buf).await.unwrap();
    assert_eq!(buf, want[..4096]);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    // The opening token is refused now, as the reader meets it.
    let first = &info.blocks[1];
    let dn = &first.replicas[0];
    let mut raw = DatanodeClient::connect(format!("http://{}", dn.address))
        .await
        .unwrap();
    let e = raw
        .read_chunk(ReadChunkRequest {
            block: first.block,
            offset: 0,
            len: 10,
            token: first.token.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("block token expired"),
        "{}",
        e.message()
    );
    // gRPC: every block, each past its token's life; a clone too.
    for (off, len) in [
        (5000usize, 100_000usize),
        (1 << 20, 70_000),
        (2 << 20, 1 << 20),
    ] {
        let mut got = vec![0u8; len];
        rg.read_exact_at(off as u64, &mut got).await.unwrap();
        assert!(got == want[off..off + len], "gRPC read at {off}");
        let mut again = vec![0u8; len];
        rg.clone()
            .read_exact_at(off as u64, &mut again)
            .await
            .unwrap();
        assert_eq!(got, again);
    }
    // Short-circuit: blocks first opened after expiry are opened with the
    // new token and still read locally.
    let before = sc.stats();
    let mut got = vec![0u8; 2 << 20];
    rs.read_exact_at(1 << 20, &mut got).await.unwrap();
    assert!(got == want[1 << 20..], "short-circuit read");
    let after = sc.stats();
    assert_eq!(
        after.short_circuit_bytes - before.short_circuit_bytes,
        2 << 20,
        "read locally after the renewal"
    );
    // A writer (chunks of 64 KiB go out as they fill): half a block, a
    // pause past the token's life, the rest.
    let small = client(c, Some("node1"), &["ozone.scm.chunk.size=64KB"]);
    let mut wr = small
        .create_key(KeyPath::new("vol", "bucket", "slow"))
        .await
        .unwrap();
    let slow = data::bytes(4, 900_000);
    wr.write(&slow[..400_000]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    wr.write(&slow[400_000..]).await.unwrap();
    let done = wr.close().await.unwrap();
    assert_eq!(done.size, slow.len() as u64);
    assert!(
        get(&grpc, "slow", 100_000).await == slow,
        "the slow writer's key"
    );
}

/// A chunk of `data` at `offset` of a block, with its CRC32C windows of
/// 16 KiB (the client's default).
fn chunk_of(offset: u64, data: &[u8]) -> ChunkInfo {
    let ck = ozone_common::checksum::Checksummer::new(ChecksumType::Crc32c, 16 << 10).unwrap();
    ChunkInfo {
        offset,
        len: data.len() as u64,
        checksum: Some(ChecksumData {
            r#type: ChecksumType::Crc32c as i32,
            bytes_per_checksum: 16 << 10,
            checksums: ck.compute(data),
        }),
        fine_checksum: None,
    }
}

/// Writes `len` bytes into `block` on every replica as a writer would
/// (WriteChunk, PutBlock); the replicas' receipts.
async fn write_block(block: &KeyBlock, len: usize) -> Vec<BlockReceipt> {
    let data = vec![5u8; len];
    let c = chunk_of(0, &data);
    let mut receipts = Vec::new();
    for r in &block.replicas {
        let mut dn = DatanodeClient::connect(format!("http://{}", r.address))
            .await
            .unwrap();
        dn.write_chunk(WriteChunkRequest {
            block: block.block,
            chunk: Some(c.clone()),
            data: data.clone().into(),
            token: block.token.clone(),
            flush: false,
            data_offset: 0,
        })
        .await
        .unwrap();
        let put = dn
            .put_block(PutBlockRequest {
                block: Some(BlockData {
                    id: block.block,
                    chunks: vec![c.clone()],
                    size: len as u64,
                    committed: false,
                }),
                sync: false,
                token: block.token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        receipts.push(put.receipt.expect("a receipt with block tokens on"));
    }
    receipts
}

/// What the datanodes of a 3-node cluster hold in block files.
fn bytes_on_datanodes(c: &LocalCluster) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.flatten()
            .map(|e| {
                let m = e.metadata().unwrap();
                if m.is_dir() { walk(&e.path()) } else { m.len() }
            })
            .sum()
    }
    (0..3)
        .map(|i| walk(&c.datanode_dir(i).join("data/containers")))
        .sum()
}

/// A tenant under a 3 MB volume quota tries to store more than its quota
/// on the datanodes: by committing blocks at a length of 0 (or a negative
/// or oversized one), by leaving blocks uncommitted, by writing past a
/// block's allocation or to a datanode the block was not allocated on, and
/// by committing one block under two keys. Every way is refused, and the
/// datanodes never hold more than the quota allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_quotas_hold_against_a_writer_that_lies() {
    let s = secured(3).await;
    let a = tenant_a_bucket(&s).await;
    let mut om_admin = s.om_as("admin");
    om_admin
        .set_quota(SetQuotaRequest {
            volume: "vol".into(),
            quota_in_bytes: Some(3_000_000),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut om = s.om_as("a");
    let open = |name: &str| OpenKeyRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
        name: name.into(),
        replication: ReplicationFactor::Three as i32,
        checksum_type: ChecksumType::Crc32c as i32,
        bytes_per_checksum: 16 << 10,
        ..Default::default()
    };
    let session = om
        .open_key(open("liar"))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let alloc = |sid: u64| AllocateBlockRequest {
        session_id: sid,
        ..Default::default()
    };
    let b1 = om
        .allocate_block(alloc(session))
        .await
        .unwrap()
        .into_inner()
        .block
        .unwrap();
    // The block may hold a third of the quota (three replicas): reserved
    // at once.
    assert_eq!(b1.max_length, 1_000_000, "{b1:?}");
    let v = volume_use(&mut om_admin).await;
    assert_eq!(v.1, 3 * 1_000_000);
    // Nothing more can be allocated while that is held: the refused write
    // ends.
    let other = om
        .open_key(open("other"))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let e = om.allocate_block(alloc(other)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
    assert!(
        e.message().contains("reserved for open writes"),
        "{}",
        e.message()
    );
    // A write past the allocation is refused (a WRITE token names its
    // datanodes too: short_circuit.rs writes with one naming others).
    let dn = &b1.replicas[0];
    let mut raw = DatanodeClient::connect(format!("http://{}", dn.address))
        .await
        .unwrap();
    let big = vec![1u8; 1 << 20];
    let past = WriteChunkRequest {
        block: b1.block,
        chunk: Some(chunk_of(0, &big)),
        data: big.clone().into(),
        token: b1.token.clone(),
        flush: false,
        data_offset: 0,
    };
    let e = raw.write_chunk(past.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    assert!(
        e.message().contains("allows 1000000 bytes"),
        "{}",
        e.message()
    );
    // The same on a write stream: refused, and the stream ends there.
    {
        use futures::SinkExt;
        let (mut tx, rx) = futures::channel::mpsc::channel(2);
        let mut acks = raw.write_stream(rx).await.unwrap().into_inner();
        tx.send(WriteChunkRequest {
            flush: true,
            ..past
        })
        .await
        .unwrap();
        let e = acks.message().await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    }
    assert_eq!(
        bytes_on_datanodes(s.cluster()),
        0,
        "the refusals wrote nothing"
    );
    // Fill the block, as much as it may hold.
    let receipts = write_block(&b1, 1_000_000).await;
    // Commits that misstate the length are refused: 0, a "negative" one,
    // one past the allocation, and without the datanodes' receipts.
    let commit = |length: u64, size: u64, receipts: Vec<BlockReceipt>| CommitKeyRequest {
        session_id: session,
        blocks: vec![KeyBlock {
            length,
            receipts,
            ..b1.clone()
        }],
        size,
    };
    for (what, req) in [
        ("zero length", commit(0, 0, receipts.clone())),
        (
            "a negative length",
            commit(u64::MAX, u64::MAX, receipts.clone()),
        ),
        (
            "past the allocation",
            commit(2_000_000, 2_000_000, receipts.clone()),
        ),
        ("no receipts", commit(1_000_000, 1_000_000, Vec::new())),
        (
            "one receipt",
            commit(1_000_000, 1_000_000, receipts[..1].to_vec()),
        ),
    ] {
        let e = om.commit_key(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {}", e.message());
    }
    let v = volume_use(&mut om_admin).await;
    assert_eq!(v, (0, 3 * 1_000_000), "refusals change nothing");
    // The true length commits, and is counted.
    om.commit_key(commit(1_000_000, 1_000_000, receipts.clone()))
        .await
        .unwrap();
    let v = volume_use(&mut om_admin).await;
    assert_eq!(v, (3 * 1_000_000, 0));
    // The block cannot be committed again under another key: the session of
    // "other" never had it.
    let other = om
        .open_key(open("other"))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let e = om
        .commit_key(CommitKeyRequest {
            session_id: other,
            blocks: vec![KeyBlock {
                length: 1_000_000,
                receipts,
                ..b1.clone()
            }],
            size: 1_000_000,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    // The quota is used: no further block, so the datanodes hold what the
    // OM counts and no more.
    let e = om.allocate_block(alloc(other)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    let e = a
        .put_key(KeyPath::new("vol", "bucket", "more"), &mut &b"x"[..])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("quota"), "{e}");
    let held = bytes_on_datanodes(s.cluster());
    assert!(
        held <= 3_000_000,
        "the datanodes hold {held} bytes under a 3 MB quota"
    );
    assert_eq!(held, 3 * 1_000_000);
}

/// Only a datanode, or a reader holding a READ token for the block, may
/// report a replica bad; a reader's report is checked by the datanode
/// before it counts; reports are bounded in size and number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_replica_reports_need_a_token_and_a_confirming_datanode() {
    let s = secured(3).await;
    let a = tenant_a_bucket(&s).await;
    let want = data::bytes(9, 200_000);
    let key = put(&a, "k", &want, 64 << 10).await;
    let b = &key.blocks[0];
    let bid = b.block.unwrap();
    let read_token = a
        .key_info(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap()
        .blocks[0]
        .token
        .clone();
    // Tenant b, who may not read the key, reports every replica: without a
    // token, with a forged one, with a token of another block.
    let mut om_b = s.om_as("b");
    let forged = TokenSigner::new(&[9u8; 32])
        .unwrap()
        .sign(&bid, "READ", u64::MAX);
    let other = BlockId {
        local_id: bid.local_id + 1,
        ..bid
    };
    let signer = TokenSigner::new(SECRET.as_bytes()).unwrap();
    let wrong_block = signer.sign(&other, "READ", u64::MAX);
    for r in &b.replicas {
        for (what, token) in [
            ("no token", Vec::new()),
            ("a forged token", forged.clone()),
            ("another block's token", wrong_block.clone()),
        ] {
            let e = om_b
                .report_bad_replica(ReportBadReplicaRequest {
                    block: Some(bid),
                    datanode_id: r.id.clone(),
                    reason: "attack".into(),
                    token,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{what}: {}", e.message());
        }
    }
    // A reader with the token reports healthy replicas, with a 2 MiB
    // reason: taken (as a question), checked by each datanode, not counted.
    let mut om_a = s.om_as("a");
    for r in &b.replicas {
        om_a.report_bad_replica(ReportBadReplicaRequest {
            block: Some(bid),
            datanode_id: r.id.clone(),
            reason: "x".repeat(2 << 20),
            token: read_token.clone(),
        })
        .await
        .unwrap();
    }
    // Invented datanodes are refused.
    let e = om_a
        .report_bad_replica(ReportBadReplicaRequest {
            block: Some(bid),
            datanode_id: "no-such-datanode".into(),
            reason: "x".into(),
            token: read_token.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{}", e.message());
    wait_om_metric(s.cluster(), "ozone_om_bad_replica_reports_unconfirmed", 3).await;
    assert_eq!(
        om_metric(s.cluster(), "ozone_om_bad_replica_reports_confirmed"),
        0
    );
    // Nothing changed: the key has its replicas in order, none bad, and
    // the replication status shows nothing missing or damaged.
    let again = a
        .key_info(KeyPath::new("vol", "bucket", "k"))
        .await
        .unwrap();
    let ids = |k: &KeyInfo| {
        k.blocks[0]
            .replicas
            .iter()
            .map(|r| r.id.clone())
            .collect::<Vec<_>>()
    };
    let mut before = ids(&key);
    let mut after = ids(&again);
    before.sort();
    after.sort();
    assert_eq!(before, after);
    let st = s
        .om_as("admin")
        .replication_status(ReplicationStatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!((st.missing, st.under_replicated), (0, 0), "{st:?}");
    assert_eq!(get(&a, "k", 100_000).await, want);
    // A replica that is damaged is confirmed by its datanode and counted.
    let victim = &b.replicas[0];
    let file = block_file(s.cluster(), index_of(s.cluster(), 3, &victim.id), &bid);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    om_a.report_bad_replica(ReportBadReplicaRequest {
        block: Some(bid),
        datanode_id: victim.id.clone(),
        reason: "checksum mismatch".into(),
        token: read_token.clone(),
    })
    .await
    .unwrap();
    wait_om_metric(s.cluster(), "ozone_om_bad_replica_reports_confirmed", 1).await;
    // Reports are bounded per caller: 30 a minute (4 taken so far; the
    // invented datanode's was refused before it was counted).
    let mut refused = 0;
    for _ in 0..30 {
        if let Err(e) = om_a
            .report_bad_replica(ReportBadReplicaRequest {
                block: Some(bid),
                datanode_id: b.replicas[1].id.clone(),
                reason: "again".into(),
                token: read_token.clone(),
            })
            .await
        {
            assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
            refused += 1;
        }
    }
    assert_eq!(refused, 4, "30 a minute, then refused");
}

/// The OM's error for a huge name is small, and names with control
/// characters are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_control_character_names_get_short_clear_errors() {
    let s = secured(3).await;
    tenant_a_bucket(&s).await;
    let mut om = s.om_as("a");
    let open = |name: String| OpenKeyRequest {
        volume: "vol".into(),
        bucket: "bucket".into(),
        name,
        ..Default::default()
    };
    let e = om.open_key(open("k".repeat(1 << 20))).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 1000, "{} bytes", e.message().len());
    for bad in ["a\nb", "x\u{1b}[2Jy", "bell\u{7}"] {
        let e = om.open_key(open(bad.into())).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        assert!(
            e.message().contains("control characters"),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\u{1b}'), "{}", e.message());
    }
}

/// Waits up to 30 s for the OM's metric `name` to reach `at_least`.
async fn wait_om_metric(c: &LocalCluster, name: &str, at_least: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while om_metric(c, name) < at_least {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} stayed below {at_least}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Bytes volume `vol` uses and holds reserved for open writes.
async fn volume_use(om: &mut OzoneManagerClient<AuthChannel>) -> (u64, u64) {
    let v = om
        .get_volume(GetVolumeRequest {
            volume: "vol".into(),
        })
        .await
        .unwrap()
        .into_inner();
    (v.used_bytes, v.reserved_bytes)
}

/// Volume `vol`, owned by tenant a (made by the admin), and a's bucket
/// `vol/bucket`; a's client.
async fn tenant_a_bucket(s: &Secured) -> Client {
    s.client("admin")
        .create_volume_owned("vol", "team-a/app")
        .await
        .unwrap();
    let a = s.client("a");
    a.create_bucket("vol", "bucket").await.unwrap();
    a
}
