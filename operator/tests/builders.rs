//! Builders as pure functions of fixture resources, and the committed CRD.

use ozone_operator::builders::{CONFIG_HASH, build};
use ozone_operator::crd::{OzoneCluster, Replication};

use ozone_operator::builders::identity;

fn load(path: &str) -> OzoneCluster {
    let text =
        std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut c: OzoneCluster = serde_yaml::from_str(&text).unwrap();
    c.metadata.uid = Some("uid-1".into());
    c
}

/// The pod spec of a StatefulSet's template.
fn pod_of(s: &k8s_openapi::api::apps::v1::StatefulSet) -> &k8s_openapi::api::core::v1::PodSpec {
    s.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn hash(s: &k8s_openapi::api::apps::v1::StatefulSet) -> String {
    s.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[CONFIG_HASH]
        .clone()
}

#[test]
fn defaults_from_the_minimal_example() {
    let c = load("examples/minimal.yaml");
    let o = build(&c).unwrap();
    let dn = o.datanodes.spec.as_ref().unwrap();
    assert_eq!(dn.replicas, Some(3));
    assert_eq!(o.om.spec.as_ref().unwrap().replicas, Some(1));
    let pod = dn.template.spec.as_ref().unwrap();
    // One datanode per node.
    let anti = pod
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    let terms = anti
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
    // The socket hostPath and the init container that hands it to the datanode uid.
    let sockets = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "sockets")
        .unwrap();
    let hp = sockets.host_path.as_ref().unwrap();
    assert_eq!(
        (hp.path.as_str(), hp.type_.as_deref()),
        ("/var/lib/ozone/sockets", Some("DirectoryOrCreate"))
    );
    // Paths travel as arguments to the image's own binary: no shell.
    let init = &pod.init_containers.as_ref().unwrap()[0];
    let cmd = init.command.as_ref().unwrap();
    assert_eq!(
        cmd,
        &[
            "ozone",
            "prepare-dirs",
            "--owner",
            "1000:1000",
            "--socket-dir",
            "/var/lib/ozone/sockets"
        ]
    );
    let caps = init
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .as_ref()
        .unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    let main = &pod.containers[0];
    let env: Vec<_> = main
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e.name.as_str(),
                e.value_from
                    .as_ref()
                    .unwrap()
                    .field_ref
                    .as_ref()
                    .unwrap()
                    .field_path
                    .as_str(),
            )
        })
        .collect();
    assert!(
        env.contains(&("NODE_NAME", "spec.nodeName"))
            && env.contains(&("POD_NAME", "metadata.name"))
    );
    assert_eq!(
        main.readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/readyz")
    );
    assert_eq!(
        main.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    assert_eq!(
        dn.volume_claim_templates.as_ref().unwrap()[0]
            .metadata
            .name
            .as_deref(),
        Some("data")
    );
    assert_eq!(
        dn.update_strategy.as_ref().unwrap().type_.as_deref(),
        Some("RollingUpdate")
    );
    // Owner references on everything.
    let yaml = o.to_yaml().unwrap();
    assert_eq!(yaml.matches("ownerReferences:").count(), 7, "{yaml}");
    // The config.
    let conf = &o.config.data.as_ref().unwrap()["ozone.conf"];
    assert!(
        conf.contains("ozone.om.address = ozone-om.storage.svc:9862"),
        "{conf}"
    );
    assert!(conf.contains("ozone.domain.socket.path = /var/lib/ozone/sockets"));
    assert!(conf.contains("ozone.client.checksum.type = CRC32C"));
    assert_eq!(hash(&o.om), hash(&o.datanodes));
    assert_eq!(
        o.datanode_pdb.spec.as_ref().unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
}

#[test]
fn production_example_sections() {
    let c = load("examples/production.yaml");
    let o = build(&c).unwrap();
    let dn = o.datanodes.spec.as_ref().unwrap();
    assert_eq!(dn.replicas, Some(12));
    assert!(dn.volume_claim_templates.is_none(), "data on the host path");
    let pod = dn.template.spec.as_ref().unwrap();
    let data = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "data")
        .unwrap();
    assert_eq!(data.host_path.as_ref().unwrap().path, "/mnt/disks/ozone");
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["node-role.example.com/storage"],
        "true"
    );
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(
        pod.image_pull_secrets.as_ref().unwrap()[0].name,
        "registry-credentials"
    );
    assert!(
        pod.volumes
            .as_ref()
            .unwrap()
            .iter()
            .any(|v| v.name == "block-token")
    );
    let om = o.om.spec.as_ref().unwrap();
    let claim = &om.volume_claim_templates.as_ref().unwrap()[0];
    assert_eq!(
        claim.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("fast-ssd")
    );
    let res = om.template.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap();
    assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "8Gi");
    assert!(
        o.config.data.as_ref().unwrap()["ozone.conf"].contains("hdds.block.token.enabled = true")
    );
    // TLS: the config turns it on, both pods mount the TLS Secret, and the
    // datanodes advertise the DNS name their certificate carries.
    let conf = &o.config.data.as_ref().unwrap()["ozone.conf"];
    assert!(conf.contains("hdds.grpc.tls.enabled = true"), "{conf}");
    assert!(
        conf.contains("hdds.grpc.tls.dir = /etc/ozone/tls"),
        "{conf}"
    );
    for sts in [&o.om, &o.datanodes] {
        let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let vol = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "tls")
            .unwrap();
        assert_eq!(
            vol.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("ozone-prod-tls")
        );
        let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.name == "tls" && m.mount_path == "/etc/ozone/tls")
        );
    }
    let dn_args = dn.template.spec.as_ref().unwrap().containers[0]
        .args
        .as_ref()
        .unwrap()
        .join(" ");
    assert!(
        dn_args.contains("--advertise-host $(POD_NAME).ozone-prod-datanode-headless.storage.svc"),
        "{dn_args}"
    );
    assert!(o.certificate.is_none(), "the operator's own CA by default");
    // NetworkPolicies: gRPC from own pods, client pods and the operator;
    // metrics from own pods and the monitoring namespace.
    assert_eq!(o.network_policies.len(), 2);
    for (p, grpc, http) in [
        (&o.network_policies[0], 9862, 9874),
        (&o.network_policies[1], 9858, 9882),
    ] {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.policy_types.as_deref(),
            Some(&["Ingress".to_string()][..])
        );
        let rules = spec.ingress.as_ref().unwrap();
        let port = |i: usize| rules[i].ports.as_ref().unwrap()[0].port.clone();
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(port(0), Some(IntOrString::Int(grpc)));
        assert_eq!(port(1), Some(IntOrString::Int(http)));
        let from = rules[0].from.as_ref().unwrap();
        let labels = |i: usize| {
            from[i]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .clone()
                .unwrap()
        };
        assert_eq!(labels(0)["app.kubernetes.io/instance"], "ozone-prod");
        assert!(
            from[0].namespace_selector.is_none(),
            "own pods: this namespace"
        );
        assert_eq!(labels(1)["ozone-rs.io/client"], "true");
        assert!(
            from[1].namespace_selector.is_some(),
            "clients: any namespace"
        );
        assert_eq!(labels(2)["app.kubernetes.io/name"], "ozone-operator");
        let metrics = rules[1].from.as_ref().unwrap();
        assert_eq!(metrics.len(), 2);
        assert_eq!(
            metrics[1]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "monitoring"
        );
    }
    // Authentication: the OM runs as its own ServiceAccount (the only pod
    // with an API token), the operator and the named admins administer.
    let conf = &o.config.data.as_ref().unwrap()["ozone.conf"];
    assert!(conf.contains("ozone.security.enabled = true"), "{conf}");
    assert!(
        conf.contains("ozone.administrators = ozone-system/ozone-admin\n"),
        "{conf}"
    );
    assert_eq!(
        o.om_account.as_ref().unwrap().metadata.name.as_deref(),
        Some("ozone-prod-om")
    );
    let om_pod = pod_of(&o.om);
    assert_eq!(
        om_pod.service_account_name.as_deref(),
        Some("ozone-prod-om")
    );
    assert_eq!(om_pod.automount_service_account_token, Some(true));
    assert_eq!(
        pod_of(&o.datanodes).automount_service_account_token,
        Some(false)
    );
    let env = ozone_operator::builders::Environment {
        operator_identity: Some("ozone-system/ozone-operator".into()),
    };
    let with_op = ozone_operator::builders::build_in(&c, &env).unwrap();
    assert!(
        with_op.config.data.as_ref().unwrap()["ozone.conf"].contains(
            "ozone.administrators = ozone-system/ozone-operator,ozone-system/ozone-admin\n"
        )
    );
    let binding = identity::tokenreview_binding(&c, "ozone-operator-tokenreview");
    assert_eq!(
        binding.metadata.name.as_deref(),
        Some("ozone-rs:storage:ozone-prod:tokenreview")
    );
    assert!(
        binding.metadata.owner_references.is_none(),
        "cluster-scoped: no namespaced owner"
    );
    assert_eq!(binding.role_ref.name, "ozone-operator-tokenreview");
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        ("ozone-prod-om", Some("storage"))
    );
    assert!(identity::needs_finalizer(&c));
    // CA bundles: owned at home, labelled in client namespaces; never a key.
    let home = identity::ca_bundle(&c, "storage", "PEM");
    assert!(home.metadata.owner_references.is_some());
    let away = identity::ca_bundle(&c, "hbase", "PEM");
    assert!(away.metadata.owner_references.is_none());
    assert_eq!(
        away.metadata.labels.as_ref().unwrap()[identity::CLUSTER_LABEL],
        "storage.ozone-prod"
    );
    assert_eq!(
        away.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["ca.crt"]
    );
    // Authentication needs block tokens (the datanodes' credential).
    let mut no_tokens = c.clone();
    no_tokens.spec.security.block_tokens = false;
    let e = build(&no_tokens).unwrap_err().to_string();
    assert!(e.contains("spec.security.blockTokens"), "{e}");
    // Off: no policies, no TLS pieces.
    let mut plain = c.clone();
    plain.spec.security.network_policies.enabled = false;
    plain.spec.security.tls.enabled = false;
    plain.spec.security.authentication.enabled = false;
    assert!(!identity::needs_finalizer(&plain));
    let p = build(&plain).unwrap();
    assert!(p.om_account.is_none());
    let om_pod = pod_of(&p.om);
    assert_eq!(om_pod.service_account_name, None);
    assert_eq!(om_pod.automount_service_account_token, Some(false));
    assert!(p.network_policies.is_empty());
    assert!(!p.config.data.as_ref().unwrap()["ozone.conf"].contains("hdds.grpc.tls"));
    // cert-manager: a Certificate for the same Secret and names.
    let mut cm = c.clone();
    cm.spec.security.tls.cert_manager = Some(ozone_operator::crd::CertManagerIssuer {
        issuer_name: "storage-ca".into(),
        issuer_kind: ozone_operator::crd::IssuerKind::ClusterIssuer,
    });
    let cert = build(&cm).unwrap().certificate.unwrap();
    let spec = &cert.data["spec"];
    assert_eq!(spec["secretName"], "ozone-prod-tls");
    assert_eq!(spec["issuerRef"]["kind"], "ClusterIssuer");
    assert_eq!(spec["duration"], "2160h");
    assert_eq!(spec["renewBefore"], "720h");
    assert!(
        spec["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "*.ozone-prod-datanode-headless.storage.svc")
    );
    // Pod overrides: merged over the built template, nothing built is lost.
    let t = &o.datanodes.spec.as_ref().unwrap().template;
    let pod = t.spec.as_ref().unwrap();
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    let env = pod.containers[0].env.as_ref().unwrap();
    assert!(env.iter().any(|e| e.name == "RUST_LOG"));
    assert!(env.iter().any(|e| e.name == "NODE_NAME"), "built env kept");
    assert_eq!(pod.containers.len(), 1);
    let ann = t.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert!(ann.contains_key(CONFIG_HASH), "built annotation kept");
    // An override that breaks the template is an invalid spec, not a crash.
    let mut bad = c.clone();
    bad.spec.om.pod_overrides = Some(serde_json::json!({"spec": {"containers": 3}}));
    assert!(
        build(&bad)
            .unwrap_err()
            .to_string()
            .contains("spec.om.podOverrides")
    );
}

#[test]
fn short_circuit_off_stopped_and_config_rolls() {
    let base = load("examples/minimal.yaml");
    let mut off = base.clone();
    off.spec.short_circuit.enabled = false;
    let o = build(&off).unwrap();
    let pod = pod_of(&o.datanodes).clone();
    assert!(pod.init_containers.is_none());
    assert!(!pod.volumes.unwrap().iter().any(|v| v.name == "sockets"));
    assert!(!o.config.data.as_ref().unwrap()["ozone.conf"].contains("socket"));

    let mut stopped = base.clone();
    stopped.spec.cluster_operation.stopped = true;
    let o = build(&stopped).unwrap();
    assert_eq!(o.om.spec.as_ref().unwrap().replicas, Some(0));
    assert_eq!(o.datanodes.spec.as_ref().unwrap().replicas, Some(0));

    // A config change changes the hash (pods roll); a scale does not.
    let h0 = hash(&build(&base).unwrap().datanodes);
    let mut bpc = base.clone();
    bpc.spec.checksum.bytes_per_checksum = 1 << 20;
    assert_ne!(hash(&build(&bpc).unwrap().datanodes), h0);
    let mut scaled = base.clone();
    scaled.spec.datanodes.replicas = 5;
    assert_eq!(hash(&build(&scaled).unwrap().datanodes), h0);
}

#[test]
fn invalid_specs_say_what_to_fix() {
    let mut c = load("examples/minimal.yaml");
    c.spec.datanodes.replicas = 2;
    let e = build(&c).unwrap_err().to_string();
    assert!(
        e.contains("replication THREE needs at least 3 datanodes"),
        "{e}"
    );
    c.spec.replication = Replication::ONE;
    let o = build(&c).unwrap();
    // Replication ONE must not block node drains forever.
    let pdb = o.datanode_pdb.spec.as_ref().unwrap();
    assert_eq!(
        pdb.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        pdb.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
    // Names that would make invalid child names, unsafe host paths.
    for bad in [
        "ozone.prod",
        "1ozone",
        "a-name-that-is-much-too-long-for-its-children-x",
        "Oz",
    ] {
        let mut b = c.clone();
        b.metadata.name = Some(bad.into());
        let e = build(&b).unwrap_err().to_string();
        assert!(e.contains("DNS-1035"), "{bad}: {e}");
    }
    for bad in [
        "/",
        "/etc",
        "/etc/x",
        "/data",
        "/var/lib/kubelet/x",
        "/a/../etc",
        "/a;rm",
        "/a/",
        "rel",
    ] {
        let mut b = c.clone();
        b.spec.short_circuit.socket_host_path = bad.into();
        assert!(build(&b).is_err(), "socketHostPath {bad} accepted");
        let mut b = c.clone();
        b.spec.datanodes.data_host_path = Some(bad.into());
        assert!(build(&b).is_err(), "dataHostPath {bad} accepted");
    }
    let mut b = c.clone();
    b.spec.datanodes.data_host_path = Some("/mnt/disks/ozone".into());
    let dn = build(&b).unwrap().datanodes;
    let pod = dn.spec.unwrap().template.spec.unwrap();
    let cmd = pod.init_containers.unwrap()[0]
        .command
        .clone()
        .unwrap()
        .join(" ");
    assert!(
        cmd.ends_with("--data-dir /host-data/storage-ozone"),
        "{cmd}"
    );
    c.metadata.namespace = None;
    assert!(build(&c).unwrap_err().to_string().contains("namespace"));
    let bad: Result<OzoneCluster, _> = serde_yaml::from_str(
        "apiVersion: ozone-rs.io/v1alpha1\nkind: OzoneCluster\nmetadata: {name: x}\nspec: {replication: TWO}\n",
    );
    assert!(bad.is_err());
}

#[test]
fn committed_crd_is_current_and_carries_validation() {
    let want = ozone_operator::crd_yaml().unwrap();
    for rel in ["crds", "charts/ozone-operator/crds"] {
        let path = format!("{}/../{rel}/ozonecluster.yaml", env!("CARGO_MANIFEST_DIR"));
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{rel}/ozonecluster.yaml is stale: run `cargo run -p ozone-operator -- crd > {rel}/ozonecluster.yaml`"
        );
    }
    assert!(want.contains("x-kubernetes-validations"));
    assert!(want.contains("self.replication != 'THREE' || self.datanodes.replicas >= 3"));
    assert!(want.contains("shortNames:\n    - oz"));
    assert!(
        want.contains("Host directory of the sockets"),
        "field descriptions for kubectl explain"
    );
}

/// The image every shipped file names is the one this repo builds
/// (`e2e/image/build.sh`, the Containerfile): one repository, and one
/// version, the workspace's, which is also the chart's appVersion.
#[test]
fn shipped_files_name_the_image_this_repo_builds() {
    let version = env!("CARGO_PKG_VERSION");
    let image = ozone_operator::crd::ImageSpec::default();
    assert_eq!(image.repository, "ghcr.io/ozone-rs/ozone");
    assert_eq!(image.tag, version);
    let read = |rel: &str| {
        std::fs::read_to_string(format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let chart = read("charts/ozone-operator/Chart.yaml");
    assert!(
        chart.contains(&format!("appVersion: \"{version}\"")),
        "Chart.yaml appVersion must be the workspace version {version}"
    );
    let values = read("charts/ozone-operator/values.yaml");
    assert!(values.contains(&format!("repository: {}", image.repository)));
    for rel in [
        "examples/production.yaml",
        "examples/workloads/hbase-regionserver.yaml",
        "examples/workloads/secure-client.yaml",
    ] {
        let text = read(rel);
        for line in text.lines().filter(|l| l.contains("ghcr.io/")) {
            let named = line.split_whitespace().last().unwrap();
            assert!(
                named == image.repository || named == format!("{}:{version}", image.repository),
                "{rel} names {named}, not {}:{version}",
                image.repository
            );
        }
        for line in text.lines().filter(|l| l.trim_start().starts_with("tag:")) {
            assert!(line.contains(version), "{rel}: {line}");
        }
    }
    let containerfile = read("Containerfile");
    assert!(containerfile.contains(&format!("ARG VERSION={version}")));
}

#[test]
fn cel_rules_of_the_crd_are_evaluated() {
    // The CRD's x-kubernetes-validations, evaluated client-side the way the
    // API server does (kube's CEL support).
    let mut c = load("examples/minimal.yaml");
    kube::core::cel::validate_cel(&c).unwrap();
    c.spec.datanodes.replicas = 2;
    let e = format!("{:?}", kube::core::cel::validate_cel(&c).unwrap_err());
    assert!(
        e.contains("replication THREE needs at least 3 datanodes"),
        "{e}"
    );
    c.spec.replication = Replication::ONE;
    kube::core::cel::validate_cel(&c).unwrap();
    for f in ["examples/minimal.yaml", "examples/production.yaml"] {
        kube::core::cel::validate_cel(&load(f)).unwrap();
    }
    let mut secure = load("examples/production.yaml");
    secure.spec.security.block_tokens = false;
    let e = format!("{:?}", kube::core::cel::validate_cel(&secure).unwrap_err());
    assert!(e.contains("needs spec.security.blockTokens"), "{e}");
}
