//! The controller against a mocked API server: a tower-test service behind
//! `kube::Client` answers each request in turn, and every request is
//! asserted (method, path, query, body) in the order the controller must
//! make them.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use kube::Client;
use kube::client::Body;
use ozone_operator::controller::{Context, Error, TEMPLATE_HASH, backoff, error_policy, reconcile};
use ozone_operator::crd::{OzoneCluster, Replication};
use ozone_operator::decommission::{DatanodeAdmin, Decommission};
use ozone_operator::metrics::Metrics;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const NS: &str = "storage";

fn cluster() -> OzoneCluster {
    let mut c: OzoneCluster = serde_yaml::from_str(
        "apiVersion: ozone-rs.io/v1alpha1\nkind: OzoneCluster\nmetadata: {name: oz, namespace: storage}\nspec: {}\n",
    )
    .unwrap();
    c.metadata.uid = Some("uid-1".into());
    c.metadata.generation = Some(4);
    c
}

/// One expected request and what the fake API server answers.
enum Reply {
    /// 404 NotFound.
    NotFound,
    /// This JSON, 200.
    Json(Value),
    /// The request body back (what server-side apply returns).
    Echo,
}

/// A request as seen by the fake server.
struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

struct ApiServer {
    handle: Handle,
}

impl ApiServer {
    async fn next(&mut self, method: Method, path: &str, reply: Reply) -> Seen {
        let (req, send) = tokio::time::timeout(Duration::from_secs(10), self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("no request came; expected {method} {path}"))
            .unwrap_or_else(|| panic!("client gone; expected {method} {path}"));
        let seen_method = req.method().clone();
        let uri = req.uri().clone();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        assert_eq!(
            (&seen_method, uri.path()),
            (&method, path),
            "unexpected request (query {:?})",
            uri.query()
        );
        let (status, out) = match reply {
            Reply::NotFound => (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "not found", "reason": "NotFound", "code": 404}),
            ),
            Reply::Json(v) => (200, v),
            Reply::Echo => (200, body.clone()),
        };
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&out).unwrap()))
                .unwrap(),
        );
        Seen {
            method: seen_method,
            path: uri.path().to_string(),
            query: uri.query().unwrap_or_default().to_string(),
            body,
        }
    }

    /// A server-side apply of `kind` named `name`; returns the applied body.
    async fn apply(&mut self, group_path: &str, name: &str) -> Value {
        let s = self
            .next(
                Method::PATCH,
                &format!("{group_path}/namespaces/{NS}/{name}"),
                Reply::Echo,
            )
            .await;
        assert!(
            s.query.contains("fieldManager=ozone-operator") && s.query.contains("force=true"),
            "{} {}: not a forced apply by the one field manager: {}",
            s.method,
            s.path,
            s.query
        );
        s.body
    }

    /// The three reads every reconcile starts with.
    async fn reads(&mut self, om: Reply, dn: Reply, pods: Vec<Pod>) {
        self.next(
            Method::GET,
            &format!("/apis/apps/v1/namespaces/{NS}/statefulsets/oz-om"),
            om,
        )
        .await;
        self.next(
            Method::GET,
            &format!("/apis/apps/v1/namespaces/{NS}/statefulsets/oz-datanode"),
            dn,
        )
        .await;
        let s = self
            .next(
                Method::GET,
                &format!("/api/v1/namespaces/{NS}/pods"),
                Reply::Json(
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                                   "items": pods}),
                ),
            )
            .await;
        assert!(
            s.query.contains("app.kubernetes.io%2Finstance%3Doz")
                || s.query.contains("app.kubernetes.io/instance=oz"),
            "{}",
            s.query
        );
    }

    /// ConfigMap, Services, StatefulSets, the datanode PDB, in that order; returns the
    /// applied OM and datanode StatefulSets.
    async fn applies(&mut self) -> (StatefulSet, StatefulSet) {
        let cm = self.apply("/api/v1", "configmaps/oz-config").await;
        assert_eq!(cm["kind"], "ConfigMap");
        self.apply("/api/v1", "services/oz-om-headless").await;
        self.apply("/api/v1", "services/oz-om").await;
        self.apply("/api/v1", "services/oz-datanode-headless").await;
        let om = self.apply("/apis/apps/v1", "statefulsets/oz-om").await;
        let dn = self
            .apply("/apis/apps/v1", "statefulsets/oz-datanode")
            .await;
        self.apply("/apis/policy/v1", "poddisruptionbudgets/oz-datanode")
            .await;
        (
            serde_json::from_value(om).unwrap(),
            serde_json::from_value(dn).unwrap(),
        )
    }

    /// The status patch; returns the status sent.
    async fn status(&mut self, c: &OzoneCluster) -> Value {
        let s = self
            .next(
                Method::PATCH,
                &format!("/apis/ozone-rs.io/v1alpha1/namespaces/{NS}/ozoneclusters/oz/status"),
                Reply::Json(serde_json::to_value(c).unwrap()),
            )
            .await;
        assert!(
            s.query.contains("fieldManager=ozone-operator") && s.query.contains("force=true"),
            "status is not applied by the one field manager: {}",
            s.query
        );
        assert_eq!(s.body["kind"], "OzoneCluster");
        s.body["status"].clone()
    }

    /// A Warning event with `reason`.
    async fn event(&mut self, reason: &str) {
        let s = self
            .next(
                Method::POST,
                &format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"),
                Reply::Json(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                   "metadata": {"name": "e", "namespace": NS},
                                   "eventTime": null})),
            )
            .await;
        assert_eq!(s.body["type"], "Warning");
        assert_eq!(s.body["reason"], reason);
        assert_eq!(s.body["regarding"]["name"], "oz");
    }

    /// Asserts no further request arrives.
    async fn quiet(&mut self) {
        let r = tokio::time::timeout(Duration::from_millis(200), self.handle.next_request()).await;
        if let Ok(Some((req, _))) = r {
            panic!("unexpected request {} {}", req.method(), req.uri());
        }
    }
}

fn setup() -> (Arc<Context>, ApiServer) {
    setup_with(Arc::new(FakeOm::default()))
}

fn setup_with(admin: Arc<FakeOm>) -> (Arc<Context>, ApiServer) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    (
        Arc::new(Context::new(client, Metrics::default()).with_admin(admin)),
        ApiServer { handle },
    )
}

/// The OM's datanode administration as the operator sees it: answers
/// decommission requests from `answer` and records every call.
#[derive(Default)]
struct FakeOm {
    answer: std::sync::Mutex<Option<Result<Decommission, String>>>,
    calls: std::sync::Mutex<Vec<String>>,
}

impl FakeOm {
    fn answering(a: Result<Decommission, String>) -> Arc<Self> {
        let f = Self::default();
        *f.answer.lock().unwrap() = Some(a);
        Arc::new(f)
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl DatanodeAdmin for FakeOm {
    fn decommission<'a>(
        &'a self,
        om: &'a str,
        pod: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Decommission, String>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("decommission {pod} at {om}"));
        let a = self.answer.lock().unwrap().clone();
        Box::pin(async move { a.expect("no decommission expected") })
    }

    fn recommission<'a>(
        &'a self,
        om: &'a str,
        pod: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("recommission {pod} at {om}"));
        Box::pin(async { Ok(()) })
    }
}

/// Runs one reconcile beside the scripted server.
async fn run<F>(
    c: OzoneCluster,
    ctx: Arc<Context>,
    server: ApiServer,
    script: impl FnOnce(ApiServer) -> F,
) -> Result<kube::runtime::controller::Action, Error>
where
    F: std::future::Future<Output = ApiServer> + Send + 'static,
{
    let verifier = tokio::spawn(script(server));
    let r = tokio::time::timeout(Duration::from_secs(20), reconcile(Arc::new(c), ctx))
        .await
        .expect("reconcile finished");
    let mut server = verifier.await.expect("every expected request came");
    server.quiet().await;
    r
}

fn existing(sts: &StatefulSet, ready: i32, replicas: i32, rolling: bool) -> StatefulSet {
    let mut s = sts.clone();
    s.metadata.generation = Some(2);
    s.status = Some(StatefulSetStatus {
        observed_generation: Some(2),
        replicas,
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        updated_replicas: Some(if rolling { replicas - 1 } else { replicas }),
        current_revision: Some("r1".into()),
        update_revision: Some(if rolling { "r2" } else { "r1" }.into()),
        ..Default::default()
    });
    s
}

fn dn_pod(i: usize, ready: bool) -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("oz-datanode-{i}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{i}")),
            ..Default::default()
        }),
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn condition<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["type"] == t)
        .unwrap_or_else(|| panic!("no {t} condition in {status}"))
}

fn template_annotation(sts: &StatefulSet, key: &str) -> String {
    sts.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[key]
        .clone()
}

fn partition(sts: &StatefulSet) -> Option<i32> {
    sts.spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?
        .partition
}

/// The objects of a first reconcile, as the fake server echoes them.
async fn first_apply(c: &OzoneCluster) -> (StatefulSet, StatefulSet) {
    let (ctx, server) = setup();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cc = c.clone();
    run(c.clone(), ctx, server, |mut s| async move {
        s.reads(Reply::NotFound, Reply::NotFound, vec![]).await;
        let out = s.applies().await;
        s.status(&cc).await;
        tx.send(out).ok();
        s
    })
    .await
    .unwrap();
    rx.await.unwrap()
}

#[tokio::test]
async fn first_creation_applies_everything_in_order_and_creates_the_token_secret_once() {
    let mut c = cluster();
    c.spec.security.block_tokens = true;
    let (ctx, server) = setup();
    let cc = c.clone();
    let action = run(c.clone(), ctx.clone(), server, |mut s| async move {
        s.reads(Reply::NotFound, Reply::NotFound, vec![]).await;
        s.next(
            Method::GET,
            &format!("/api/v1/namespaces/{NS}/secrets/oz-block-token"),
            Reply::NotFound,
        )
        .await;
        let created = s
            .next(
                Method::POST,
                &format!("/api/v1/namespaces/{NS}/secrets"),
                Reply::Echo,
            )
            .await;
        assert_eq!(created.body["metadata"]["name"], "oz-block-token");
        assert_eq!(
            created.body["metadata"]["ownerReferences"][0]["uid"],
            "uid-1"
        );
        let key = created.body["data"]["secret"].as_str().unwrap();
        assert_eq!(
            key.len(),
            88,
            "64 hex digits (32 random bytes), base64: {key}"
        );
        let (om, dn) = s.applies().await;
        assert_eq!(om.spec.as_ref().unwrap().replicas, Some(1));
        assert_eq!(dn.spec.as_ref().unwrap().replicas, Some(3));
        assert_eq!(partition(&dn), None);
        let st = s.status(&cc).await;
        assert_eq!(st["observedGeneration"], 4);
        let p = condition(&st, "Progressing");
        assert_eq!(
            (&p["status"], &p["reason"]),
            (&json!("True"), &json!("Creating"))
        );
        assert_eq!(p["observedGeneration"], 4);
        assert_eq!(condition(&st, "Available")["status"], "False");
        assert_eq!(condition(&st, "Degraded")["status"], "False");
        s
    })
    .await
    .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(30))
    );

    // The next reconcile finds the Secret and never rewrites it.
    let (ctx, server) = setup();
    let cc2 = c.clone();
    run(c, ctx, server, |mut s| async move {
        s.reads(Reply::NotFound, Reply::NotFound, vec![]).await;
        s.next(
            Method::GET,
            &format!("/api/v1/namespaces/{NS}/secrets/oz-block-token"),
            Reply::Json(json!({"apiVersion": "v1", "kind": "Secret",
                               "metadata": {"name": "oz-block-token", "namespace": NS},
                               "data": {"secret": "a2VlcA=="}})),
        )
        .await;
        s.applies().await;
        s.status(&cc2).await;
        s
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn status_follows_the_statefulsets_and_pods() {
    let c = cluster();
    let (om0, dn0) = first_apply(&c).await;
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 3, 3, false);
    let (ctx, server) = setup();
    let cc = c.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(c.clone(), ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(2, true), dn_pod(0, true), dn_pod(1, true)],
        )
        .await;
        s.applies().await;
        tx.send(s.status(&cc).await).ok();
        s
    })
    .await
    .unwrap();
    let st = rx.await.unwrap();
    assert_eq!(st["datanodes"]["summary"], "3/3");
    assert_eq!(st["om"]["summary"], "1/1");
    let a = condition(&st, "Available");
    assert_eq!(
        (&a["status"], &a["reason"]),
        (&json!("True"), &json!("MinimumReplicasAvailable"))
    );
    assert_eq!(condition(&st, "Progressing")["reason"], "Reconciled");
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    let pods = st["datanodePods"].as_array().unwrap();
    assert_eq!(pods.len(), 3);
    assert_eq!(
        (&pods[0]["pod"], &pods[0]["node"]),
        (&json!("oz-datanode-0"), &json!("node-0"))
    );

    // The same observation again, with that status stored: nothing to patch.
    let mut c2 = c.clone();
    c2.status = Some(serde_json::from_value(st.clone()).unwrap());
    let settled = c2.clone();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 3, 3, false);
    let (ctx, server) = setup();
    let action = run(c2, ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(0, true), dn_pod(1, true), dn_pod(2, true)],
        )
        .await;
        s.applies().await;
        s
    })
    .await
    .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(300))
    );

    // A datanode of a settled cluster drops out: Degraded at once, still
    // Available? Not with THREE.
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 2, 3, false);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cc = settled.clone();
    run(settled, ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(0, true), dn_pod(1, false), dn_pod(2, true)],
        )
        .await;
        s.applies().await;
        tx.send(s.status(&cc).await).ok();
        s
    })
    .await
    .unwrap();
    let st = rx.await.unwrap();
    assert_eq!(condition(&st, "Degraded")["reason"], "ReplicasNotReady");
    assert_eq!(condition(&st, "Available")["status"], "False");
    assert_eq!(st["datanodePods"][1]["ready"], false);
}

#[tokio::test]
async fn a_config_change_rolls_but_never_while_degraded() {
    let c = cluster();
    let (om0, dn0) = first_apply(&c).await;
    let mut changed = c.clone();
    changed.spec.checksum.bytes_per_checksum = 1 << 20;

    // Healthy: the new template goes out with a new config hash, no partition.
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 3, 3, false);
    let cc = changed.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(changed.clone(), ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(0, true), dn_pod(1, true), dn_pod(2, true)],
        )
        .await;
        let out = s.applies().await;
        s.status(&cc).await;
        tx.send(out).ok();
        s
    })
    .await
    .unwrap();
    let (_, dn_new) = rx.await.unwrap();
    let old_hash = template_annotation(&dn0, "ozone-rs.io/config-hash");
    assert_ne!(
        template_annotation(&dn_new, "ozone-rs.io/config-hash"),
        old_hash
    );
    assert_ne!(
        dn_new.metadata.annotations.as_ref().unwrap()[TEMPLATE_HASH],
        dn0.metadata.annotations.as_ref().unwrap()[TEMPLATE_HASH]
    );
    assert_eq!(partition(&dn_new), None, "healthy: the roll proceeds");
    let strategy = dn_new
        .spec
        .as_ref()
        .unwrap()
        .update_strategy
        .as_ref()
        .unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));

    // Degraded (one datanode not ready): the roll is held by the partition,
    // the status says why and a Warning event is published.
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 2, 3, false);
    let cc = changed.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(changed.clone(), ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(0, true), dn_pod(1, false), dn_pod(2, true)],
        )
        .await;
        let (_, dn_held) = s.applies().await;
        let st = s.status(&cc).await;
        s.event("RollHeld").await;
        tx.send((dn_held, st)).ok();
        s
    })
    .await
    .unwrap();
    let (dn_held, st) = rx.await.unwrap();
    assert_eq!(partition(&dn_held), Some(3), "no pod may be replaced");
    assert_eq!(condition(&st, "Progressing")["reason"], "RollHeld");

    // Mid-roll (revisions differ) with a pod down: still held.
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let mut dn = existing(&dn_new, 2, 3, true);
    dn.metadata.annotations = dn_new.metadata.annotations.clone();
    let cc = changed.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(changed, ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![],
        )
        .await;
        let (_, d) = s.applies().await;
        s.status(&cc).await;
        s.event("RollHeld").await;
        tx.send(d).ok();
        s
    })
    .await
    .unwrap();
    assert_eq!(partition(&rx.await.unwrap()), Some(3));
}

#[tokio::test]
async fn scale_up_applies_the_new_replica_count() {
    let c = cluster();
    let (om0, dn0) = first_apply(&c).await;
    let mut bigger = c.clone();
    bigger.spec.datanodes.replicas = 5;
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 3, 3, false);
    let cc = bigger.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(bigger, ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![],
        )
        .await;
        let (_, d) = s.applies().await;
        let st = s.status(&cc).await;
        tx.send((d, st)).ok();
        s
    })
    .await
    .unwrap();
    let (d, st) = rx.await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(
        template_annotation(&d, "ozone-rs.io/config-hash"),
        template_annotation(&dn0, "ozone-rs.io/config-hash"),
        "scaling does not roll"
    );
    assert_eq!(partition(&d), None);
    let p = condition(&st, "Progressing");
    assert_eq!(
        (&p["status"], &p["reason"]),
        (&json!("True"), &json!("Scaling"))
    );
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    assert_eq!(st["datanodes"]["summary"], "3/5");
}

/// One reconcile of `c` over an OM StatefulSet with one ready pod and a
/// datanode StatefulSet of `replicas` ready pods; returns the applied
/// datanode StatefulSet and the status.
async fn reconcile_datanodes(
    c: &OzoneCluster,
    admin: Arc<FakeOm>,
    replicas: i32,
) -> (StatefulSet, Value, kube::runtime::controller::Action) {
    let (om0, dn0) = first_apply(c).await;
    let om = existing(&om0, 1, 1, false);
    let mut dn = existing(&dn0, replicas, replicas, false);
    dn.spec.as_mut().unwrap().replicas = Some(replicas);
    let (ctx, server) = setup_with(admin);
    let cc = c.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let pods: Vec<Pod> = (0..replicas as usize).map(|i| dn_pod(i, true)).collect();
    let action = run(c.clone(), ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            pods,
        )
        .await;
        let (_, d) = s.applies().await;
        let st = s.status(&cc).await;
        tx.send((d, st)).ok();
        s
    })
    .await
    .unwrap();
    let (d, st) = rx.await.unwrap();
    (d, st, action)
}

#[tokio::test]
async fn scale_down_decommissions_first_and_scale_up_recommissions() {
    let mut c = cluster();
    c.spec.datanodes.replicas = 3;
    let om = "oz-om.storage.svc:9862";
    // 4 -> 3 while the OM still copies replicas off oz-datanode-3: the
    // StatefulSet keeps 4, the status says why, the OM is asked again soon.
    let fake = FakeOm::answering(Ok(Decommission::InProgress(12)));
    let (d, st, action) = reconcile_datanodes(&c, fake.clone(), 4).await;
    assert_eq!(
        fake.calls(),
        [format!("decommission oz-datanode-3 at {om}")]
    );
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4), "held at 4");
    let p = condition(&st, "Progressing");
    assert_eq!(
        (&p["status"], &p["reason"]),
        (&json!("True"), &json!("Decommissioning"))
    );
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("oz-datanode-3 (12 replicas still to copy)"),
        "{p}"
    );
    assert_eq!(st["decommissionedPods"], json!(["oz-datanode-3"]));
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    // The OM unreachable: still held, with its error.
    let fake = FakeOm::answering(Err("OM at oz-om.storage.svc:9862 unreachable".into()));
    let (d, st, _) = reconcile_datanodes(&c, fake, 4).await;
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4));
    assert!(
        condition(&st, "Progressing")["message"]
            .as_str()
            .unwrap()
            .contains("unreachable")
    );
    // DECOMMISSIONED: the StatefulSet goes down to 3.
    let fake = FakeOm::answering(Ok(Decommission::Done));
    let (d, st, _) = reconcile_datanodes(&c, fake.clone(), 4).await;
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(condition(&st, "Progressing")["reason"], "Scaling");
    assert_eq!(st["decommissionedPods"], json!(["oz-datanode-3"]));
    // Turned off in the spec: no OM call, the pods go at once.
    let mut off = c.clone();
    off.spec.datanodes.decommission_on_scale_down = false;
    let fake = Arc::new(FakeOm::default());
    let (d, _, _) = reconcile_datanodes(&off, fake.clone(), 4).await;
    assert!(fake.calls().is_empty());
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    // Grown back over a decommissioned pod: it is returned to service.
    let mut back = c.clone();
    back.spec.datanodes.replicas = 4;
    back.status =
        Some(serde_json::from_value(json!({"decommissionedPods": ["oz-datanode-3"]})).unwrap());
    let fake = Arc::new(FakeOm::default());
    let (d, st, _) = reconcile_datanodes(&back, fake.clone(), 3).await;
    assert_eq!(
        fake.calls(),
        [format!("recommission oz-datanode-3 at {om}")]
    );
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4));
    assert!(st.get("decommissionedPods").is_none(), "{st}");
}

#[tokio::test]
async fn paused_changes_nothing_but_keeps_status_current() {
    let mut c = cluster();
    c.spec.cluster_operation.reconciliation_paused = true;
    c.spec.datanodes.replicas = 7;
    let (om0, dn0) = first_apply(&cluster()).await;
    let (ctx, server) = setup();
    let om = existing(&om0, 1, 1, false);
    let dn = existing(&dn0, 3, 3, false);
    let cc = c.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(c, ctx, server, |mut s| async move {
        s.reads(
            Reply::Json(serde_json::to_value(&om).unwrap()),
            Reply::Json(serde_json::to_value(&dn).unwrap()),
            vec![dn_pod(0, true)],
        )
        .await;
        // No apply at all: straight to the status.
        tx.send(s.status(&cc).await).ok();
        s
    })
    .await
    .unwrap();
    let st = rx.await.unwrap();
    let p = condition(&st, "Progressing");
    assert_eq!(
        (&p["status"], &p["reason"]),
        (&json!("False"), &json!("ReconciliationPaused"))
    );
    assert_eq!(st["datanodes"]["ready"], 3);
}

#[tokio::test]
async fn deletion_leaves_everything_to_the_garbage_collector() {
    let mut c = cluster();
    c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    let (ctx, server) = setup();
    let action = run(c, ctx, server, |s| async move { s }).await.unwrap();
    assert_eq!(action, kube::runtime::controller::Action::await_change());

    // What the collector does follows from the owner references and the
    // claim retention policy the objects carry.
    let mut keep = cluster();
    keep.spec.datanodes.replicas = 3;
    let (om, dn) = first_apply(&keep).await;
    for sts in [&om, &dn] {
        let owner = &sts.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("OzoneCluster", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let p = sts
            .spec
            .as_ref()
            .unwrap()
            .persistent_volume_claim_retention_policy
            .as_ref()
            .unwrap();
        assert_eq!(p.when_deleted.as_deref(), Some("Retain"));
        assert_eq!(p.when_scaled.as_deref(), Some("Retain"));
    }
    let mut delete = cluster();
    delete.spec.volume_deletion_policy = ozone_operator::crd::VolumeDeletionPolicy::Delete;
    let (_, dn) = first_apply(&delete).await;
    let p = dn
        .spec
        .as_ref()
        .unwrap()
        .persistent_volume_claim_retention_policy
        .as_ref()
        .unwrap();
    assert_eq!(p.when_deleted.as_deref(), Some("Delete"));
}

#[tokio::test]
async fn an_invalid_spec_gets_a_condition_an_event_and_waits_for_a_change() {
    let mut c = cluster();
    c.spec.replication = Replication::THREE;
    c.spec.datanodes.replicas = 2;
    let (ctx, server) = setup();
    let cc = c.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let r = run(c.clone(), ctx.clone(), server, |mut s| async move {
        s.reads(Reply::NotFound, Reply::NotFound, vec![]).await;
        // Nothing is applied.
        tx.send(s.status(&cc).await).ok();
        s.event("InvalidSpec").await;
        s
    })
    .await;
    // No retry loop: the next edit of the resource wakes the controller.
    assert_eq!(
        r.unwrap(),
        kube::runtime::controller::Action::await_change()
    );
    let st = rx.await.unwrap();
    let d = condition(&st, "Degraded");
    assert_eq!(
        (&d["status"], &d["reason"]),
        (&json!("True"), &json!("InvalidSpec"))
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("at least 3 datanodes"),
        "{d}"
    );
    assert_eq!(
        ctx.metrics
            .errors
            .get_or_create(&ozone_operator::metrics::ErrorLabels {
                kind: "invalid_spec".into()
            })
            .get(),
        1
    );
    // Failures that may pass (API refusals) back off per resource, capped.
    let e = Error::Apply("StatefulSet oz-datanode: refused".into());
    let c = Arc::new(c);
    let a1 = error_policy(c.clone(), &e, ctx.clone());
    let a2 = error_policy(c.clone(), &e, ctx.clone());
    assert_eq!(
        a1,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(
        a2,
        kube::runtime::controller::Action::requeue(Duration::from_secs(10))
    );
    assert_eq!(backoff(30), Duration::from_secs(300));
    assert_eq!(ctx.metrics.reconciles.get(), 1);
}

#[test]
fn a_pending_pod_on_the_old_template_is_updated_while_healthy_pods_wait() {
    use ozone_operator::controller::hold_roll_if_unready;
    let mut c = cluster();
    c.spec.datanodes.replicas = 4;
    c.metadata.namespace = Some(NS.into());
    let mut objs = ozone_operator::builders::build(&c).unwrap();
    let mut cur = objs.datanodes.clone();
    ozone_operator::controller::stamp_template_hash(&mut cur);
    cur.status = Some(StatefulSetStatus {
        replicas: 4,
        ready_replicas: Some(3),
        current_revision: Some("r1".into()),
        update_revision: Some("r1".into()),
        ..Default::default()
    });
    let with_rev = |mut p: Pod| {
        p.metadata.labels =
            Some([("controller-revision-hash".to_string(), "r1".to_string())].into());
        p
    };
    let pods: Vec<Pod> = vec![
        with_rev(dn_pod(0, true)),
        with_rev(dn_pod(1, true)),
        with_rev(dn_pod(2, true)),
        with_rev(dn_pod(3, false)),
    ];
    // The new template (a toleration) reaches the Pending top pod only.
    c.spec.datanodes.tolerations = vec![Default::default()];
    let mut desired = ozone_operator::builders::build(&c).unwrap().datanodes;
    ozone_operator::controller::stamp_template_hash(&mut desired);
    assert!(!hold_roll_if_unready(&mut desired, Some(&cur), &pods));
    assert_eq!(partition(&desired), Some(3));
    // Once the StatefulSet runs that template (revision r2), the Pending pod
    // still on r1 is deleted by the operator (the StatefulSet controller
    // never replaces an unready pod); the healthy ones are not.
    let mut applied = desired.clone();
    applied.status = Some(StatefulSetStatus {
        replicas: 4,
        ready_replicas: Some(3),
        current_revision: Some("r1".into()),
        update_revision: Some("r2".into()),
        ..Default::default()
    });
    let stuck = ozone_operator::controller::stuck_pods(&desired, &applied, &pods);
    assert_eq!(
        stuck.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["oz-datanode-3"]
    );
    // Not before the StatefulSet has the template (revisions would be stale).
    assert!(ozone_operator::controller::stuck_pods(&desired, &cur, &pods).is_empty());
    // An unready pod below a healthy old one: everything held.
    let mut pods2 = pods.clone();
    pods2[1] = with_rev(dn_pod(1, false));
    pods2[3] = with_rev(dn_pod(3, true));
    let mut desired2 = ozone_operator::builders::build(&c).unwrap().datanodes;
    ozone_operator::controller::stamp_template_hash(&mut desired2);
    assert!(hold_roll_if_unready(&mut desired2, Some(&cur), &pods2));
    assert_eq!(partition(&desired2), Some(4));
    // All ready: no partition.
    let ready: Vec<Pod> = (0..4).map(|i| with_rev(dn_pod(i, true))).collect();
    objs.datanodes = ozone_operator::builders::build(&c).unwrap().datanodes;
    ozone_operator::controller::stamp_template_hash(&mut objs.datanodes);
    let mut cur_ready = cur.clone();
    cur_ready.status.as_mut().unwrap().ready_replicas = Some(4);
    assert!(!hold_roll_if_unready(
        &mut objs.datanodes,
        Some(&cur_ready),
        &ready
    ));
    assert_eq!(partition(&objs.datanodes), None);

    // Scaling up only: the StatefulSet's new generation (its replicas) is not
    // yet observed and the new pod does not exist yet. The partition stays
    // cautious, but no roll is reported held: the template did not change.
    let mut scaling = cur.clone();
    scaling.metadata.generation = Some(3);
    scaling.status = Some(StatefulSetStatus {
        observed_generation: Some(2),
        replicas: 3,
        ready_replicas: Some(3),
        current_revision: Some("r1".into()),
        update_revision: Some("r1".into()),
        ..Default::default()
    });
    let three: Vec<Pod> = (0..3).map(|i| with_rev(dn_pod(i, true))).collect();
    let mut same = scaling.clone();
    same.status = None;
    assert!(!hold_roll_if_unready(&mut same, Some(&scaling), &three));
    // The same staleness after a template change is a roll: held.
    let mut changed = desired.clone();
    assert!(hold_roll_if_unready(&mut changed, Some(&scaling), &three));
}
