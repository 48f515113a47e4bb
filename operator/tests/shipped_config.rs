//! Every configuration this repo ships, loaded into the real parsers of the
//! roles that read it: the `ozone.conf` the operator renders for each example
//! cluster (OM, datanode, client, sidecar), the HBase workload policy
//! (sidecar and its client), and every key named in the docs.

use std::path::Path;

use ozone_common::config::{self as keys, Conf};
use ozone_operator::crd::OzoneCluster;

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Every role's parser accepts `conf`, and no key in it is unknown.
fn every_role_accepts(what: &str, conf: &Conf) {
    assert!(
        conf.unknown().is_empty(),
        "{what}: unknown keys {:?}",
        conf.unknown()
    );
    conf.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    let dir = Path::new("/var/lib/ozone");
    ozone_om::OmConfig::for_dir(dir.join("om"), conf)
        .unwrap_or_else(|e| panic!("{what} (OM): {e}"));
    ozone_datanode::DatanodeConfig::for_dir(dir, "om:9862", "node1", conf)
        .unwrap_or_else(|e| panic!("{what} (datanode): {e}"));
    ozone_client::ClientConfig::from_conf("om:9862", conf)
        .unwrap_or_else(|e| panic!("{what} (client): {e}"));
    ozone_sidecar::policy::Policy::from_conf(conf)
        .unwrap_or_else(|e| panic!("{what} (sidecar): {e}"));
}

#[test]
fn rendered_cluster_config_is_read_by_every_role() {
    for example in ["examples/minimal.yaml", "examples/production.yaml"] {
        let mut c: OzoneCluster = serde_yaml::from_str(&read(example)).unwrap();
        // Block tokens need the secret file the pod mounts; the parsers are
        // checked without it here.
        c.spec.security.block_tokens = false;
        let name = c.metadata.name.clone().unwrap();
        let env = ozone_operator::builders::Environment {
            operator_identity: Some("ozone-system/ozone-operator".into()),
        };
        let text = ozone_operator::builders::config_text(&c, &name, "storage", &env);
        // The TLS Secret the pods mount: a real CA and certificate here.
        let certs = tempfile::tempdir().unwrap();
        let ca = ozone_common::tls::issue::Ca::new("test", std::time::Duration::from_secs(3600))
            .unwrap();
        let leaf = ca
            .issue(&["om".into()], std::time::Duration::from_secs(3600))
            .unwrap();
        ozone_common::tls::issue::write_dir(certs.path(), ca.cert_pem(), Some(&leaf)).unwrap();
        let text = text.replace(
            ozone_operator::builders::TLS_MOUNT,
            &certs.path().display().to_string(),
        );
        assert_eq!(
            text.contains(keys::GRPC_TLS_ENABLED.name),
            c.spec.security.tls.enabled,
            "{example}"
        );
        let conf = Conf::parse(&text, example).unwrap();
        every_role_accepts(example, &conf);
        let client = ozone_client::ClientConfig::from_conf("om:9862", &conf).unwrap();
        assert_eq!(
            client.verify_checksum, c.spec.client_defaults.verify_checksum,
            "{example}"
        );
        assert_eq!(
            conf.opt(&keys::DOMAIN_SOCKET_PATH).unwrap().is_some(),
            c.spec.short_circuit.enabled
        );
    }
}

/// The policy block of the HBase example (`policy.conf: |`).
fn hbase_policy() -> String {
    policy_of("examples/workloads/hbase-regionserver.yaml")
}

/// The policy block of a workload example.
fn policy_of(example: &str) -> String {
    let text = read(example);
    let doc = text
        .split("\n---\n")
        .find(|d| d.contains("kind: ConfigMap"))
        .unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(doc).unwrap();
    v["data"]["policy.conf"].as_str().unwrap().to_string()
}

#[test]
fn the_hbase_policy_is_read_by_the_sidecar_and_its_client() {
    let mut conf = Conf::parse(&hbase_policy(), "hbase policy.conf").unwrap();
    assert!(conf.unknown().is_empty(), "{:?}", conf.unknown());
    conf.validate().unwrap();
    let p = ozone_sidecar::policy::Policy::from_conf(&conf).unwrap();
    // Verify by default (HBase's fallback reader), overrides allowed (its
    // HFileSystem turns verification off on the instance it reads HFiles with).
    assert!(p.allow_verify_override && p.passthrough);
    // The sidecar builds its client from the same file, with the node's
    // socket directory; the client holds verify and short-circuit.
    conf.set(keys::DOMAIN_SOCKET_PATH.name, "/var/lib/ozone/sockets");
    let client = ozone_client::ClientConfig::from_conf("om:9862", &conf).unwrap();
    assert!(client.verify_checksum);
    assert_eq!(client.short_circuit_mode, keys::ShortCircuitMode::Auto);
    assert!(client.short_circuit.is_some());
}

#[test]
fn the_secure_client_example_names_its_token_and_the_published_ca() {
    let example = "examples/workloads/secure-client.yaml";
    let text = read(example);
    let policy = policy_of(example);
    // The files exist where the pod mounts them: a real bundle and token.
    let dir = tempfile::tempdir().unwrap();
    let ca =
        ozone_common::tls::issue::Ca::new("test", std::time::Duration::from_secs(3600)).unwrap();
    ozone_common::tls::issue::write_dir(&dir.path().join("ca"), ca.cert_pem(), None).unwrap();
    std::fs::write(dir.path().join("token"), "t0ken").unwrap();
    let local = policy
        .replace(
            "/etc/ozone/ca",
            &dir.path().join("ca").display().to_string(),
        )
        .replace(
            "/var/run/secrets/ozone/token",
            &dir.path().join("token").display().to_string(),
        );
    let conf = Conf::parse(&local, example).unwrap();
    assert!(conf.unknown().is_empty(), "{:?}", conf.unknown());
    conf.validate().unwrap();
    ozone_sidecar::policy::Policy::from_conf(&conf).unwrap();
    let client = ozone_client::ClientConfig::from_conf("om:9862", &conf).unwrap();
    assert!(client.tls.is_some());
    assert!(conf.opt(&keys::CLIENT_TOKEN_FILE).unwrap().is_some());
    // The pod mounts what the policy names, from what the operator publishes.
    for want in [
        "mountPath: /etc/ozone/ca",
        "mountPath: /var/run/secrets/ozone",
        "audience: ozone",
        "name: ozone-prod-ca-bundle",
        "ozone-rs.io/client: \"true\"",
    ] {
        assert!(text.contains(want), "{example} lacks {want}");
    }
    let prod: OzoneCluster = serde_yaml::from_str(&read("examples/production.yaml")).unwrap();
    assert_eq!(
        ozone_operator::builders::identity::ca_bundle_name(prod.metadata.name.as_deref().unwrap()),
        "ozone-prod-ca-bundle"
    );
    assert!(
        prod.spec
            .security
            .tls
            .client_namespaces
            .contains(&"hbase".to_string())
    );
}

#[test]
fn every_key_the_docs_name_is_declared() {
    let mut files = vec![
        "README.md".to_string(),
        "e2e/README.md".into(),
        "examples/workloads/hbase-regionserver.yaml".into(),
        "examples/workloads/secure-client.yaml".into(),
        "charts/ozone-operator/values.yaml".into(),
    ];
    for e in std::fs::read_dir(format!("{}/../docs", env!("CARGO_MANIFEST_DIR"))).unwrap() {
        let e = e.unwrap();
        files.push(format!("docs/{}", e.file_name().to_str().unwrap()));
    }
    let mut seen = 0;
    for f in files {
        let text = read(&f);
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-')) {
            let word = word.trim_end_matches('.');
            if !(word.starts_with("ozone.") || word.starts_with("hdds.")) {
                continue;
            }
            if ["ozone.conf", "ozone.proto", "ozone.v1", "ozone.json"].contains(&word)
                || word.starts_with("ozone.v1.")
            {
                continue;
            }
            assert!(
                keys::find(word).is_some(),
                "{f} names {word}, which no role reads (closest: {:?})",
                keys::closest(word)
            );
            seen += 1;
        }
    }
    assert!(seen > 20, "only {seen} key mentions found");
}

/// Every `spec.…` field of an `OzoneCluster` that the docs name exists in
/// the CRD's schema: a doc that outlives a renamed or removed field fails
/// here.
#[test]
fn every_cluster_field_the_docs_name_exists() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(OzoneCluster::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut files: Vec<String> = [
        "README.md",
        "e2e/README.md",
        "operator/README.md",
        "charts/ozone-operator/README.md",
        "charts/ozone-operator/templates/NOTES.txt",
        "examples/production.yaml",
        "examples/minimal.yaml",
    ]
    .map(String::from)
    .to_vec();
    for e in std::fs::read_dir(format!("{}/../docs", env!("CARGO_MANIFEST_DIR"))).unwrap() {
        files.push(format!("docs/{}", e.unwrap().file_name().to_str().unwrap()));
    }
    let mut seen = 0;
    for f in files {
        let text = read(&f);
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.')) {
            let word = word.trim_end_matches('.');
            let Some(path) = word.strip_prefix("spec.") else {
                continue;
            };
            let mut node = &schema["properties"]["spec"];
            for part in path.split('.') {
                while node["type"] == "array" {
                    node = &node["items"];
                }
                node = &node["properties"][part];
                assert!(
                    !node.is_null(),
                    "{f} names {word}, which the OzoneCluster CRD does not have ({part})"
                );
            }
            seen += 1;
        }
    }
    assert!(seen > 20, "only {seen} field mentions found");
}
