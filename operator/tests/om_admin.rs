//! The operator's calls to a secured OM (`spec.security.authentication`):
//! with its token (an administrator) the decommission RPCs go through;
//! without, the OM refuses them. A real OM, in this process.

use ozone_common::config::Conf;
use ozone_common::credentials::Credentials;
use ozone_operator::decommission::{DatanodeAdmin, Decommission, OmAdmin};

#[tokio::test]
async fn the_operators_token_makes_it_an_administrator() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("secret"),
        "0123456789abcdef0123456789abcdef-operator",
    )
    .unwrap();
    std::fs::write(
        d.join("tokens"),
        "op-token,ozone-system/ozone-operator\napp-token,team-a/app\n",
    )
    .unwrap();
    std::fs::write(d.join("op"), "op-token").unwrap();
    std::fs::write(d.join("app"), "app-token").unwrap();
    let mut conf = Conf::new();
    for (k, v) in [
        ("hdds.block.token.enabled", "true".to_string()),
        (
            "hdds.block.token.secret.file",
            d.join("secret").display().to_string(),
        ),
        ("ozone.security.enabled", "true".into()),
        (
            "ozone.om.token.auth.file",
            d.join("tokens").display().to_string(),
        ),
        // As the operator renders it: its own identity first.
        ("ozone.administrators", "ozone-system/ozone-operator".into()),
    ] {
        conf.set(k, v);
    }
    let om = ozone_om::start(ozone_om::OmConfig::for_dir(d.join("om"), &conf).unwrap())
        .await
        .unwrap();
    let addr = om.grpc_addr.to_string();
    let admin = |file: Option<&str>| OmAdmin {
        tls: Default::default(),
        credentials: file
            .map(|f| Credentials::token_file(d.join(f)))
            .unwrap_or_default(),
    };
    // The operator: no datanode of that pod ever registered.
    assert_eq!(
        admin(Some("op"))
            .decommission(&addr, "ozone-datanode-9")
            .await
            .unwrap(),
        Decommission::Unknown
    );
    admin(Some("op"))
        .recommission(&addr, "ozone-datanode-9")
        .await
        .unwrap();
    // No token, or a token that is not an administrator's: refused.
    let e = admin(None)
        .decommission(&addr, "ozone-datanode-9")
        .await
        .unwrap_err();
    assert!(e.contains("credentials"), "{e}");
    let e = admin(Some("app"))
        .decommission(&addr, "ozone-datanode-9")
        .await
        .unwrap_err();
    assert!(e.contains("team-a/app"), "{e}");
}
