//! The controller: reconciles each `OzoneCluster` into its objects with
//! server-side apply under one field manager, keeps its status current and
//! reports trouble as conditions and events.
//!
//! One reconcile, in order: read the StatefulSets and datanode pods; unless
//! paused or invalid, hold a datanode scale-down until the OM has
//! decommissioned the pods that go, create the block-token Secret once, the
//! TLS Secrets, then apply the ConfigMap, the identity objects (finalizer,
//! the OM's ServiceAccount and TokenReview binding, CA bundles), the
//! NetworkPolicies, the Services, the StatefulSets (a datanode template
//! change is held while a healthy datanode would have to go down beside an
//! unready one) and the PodDisruptionBudget; finally apply the status. An
//! object the API server refuses does not stop the others (only the
//! StatefulSets wait for what their pods mount or run as): the refusal
//! becomes a `Degraded` condition with the server's message and a Warning
//! event. An invalid spec waits for the next change of the resource; the
//! controller sees only spec changes (generation) of the resource itself, so
//! its own status writes wake nothing. Deleting the resource is left to the
//! garbage collector through owner references, except what none can cover
//! (the cluster-scoped binding, bundles in other namespaces): those go
//! under the finalizer ([`crate::unowned`]) first. Data claims follow
//! `spec.volumeDeletionPolicy`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{RollingUpdateStatefulSetStrategy, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::builders::{self, Objects, identity as names};
use crate::crd::OzoneCluster;
use crate::decommission::{DatanodeAdmin, OmAdmin, OmTls, ScaleDown};
use crate::metrics::Metrics;
use crate::status::{self, Observed};
use crate::unowned;

/// The one field manager of every apply.
pub const MANAGER: &str = "ozone-operator";
/// StatefulSet annotation: hash of the pod template last applied.
pub const TEMPLATE_HASH: &str = "ozone-rs.io/template-hash";
/// Requeue interval when nothing is happening.
const RESYNC: Duration = Duration::from_secs(300);
/// Requeue interval while a change is in progress.
const PROGRESS: Duration = Duration::from_secs(30);
/// Longest a reconcile may take before it is given up and retried.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);
/// Requeue interval while datanodes are decommissioned for a scale-down.
const DECOMMISSION_POLL: Duration = Duration::from_secs(5);
/// Longest backoff after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Label of a StatefulSet pod naming its revision.
const REVISION_LABEL: &str = "controller-revision-hash";

/// A failed reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be applied; the resource carries a Degraded condition.
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    /// The resource has no namespace (the CRD is namespaced).
    #[error("the resource has no namespace")]
    NoNamespace,
    /// The API server refused some objects (the others were applied).
    #[error("applying: {0}")]
    Apply(String),
    /// A reconcile did not finish in time (an API call or the OM hung):
    /// given up and retried, so one stuck call never stalls the cluster.
    #[error("reconcile did not finish within {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// Short kind, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Api(_) => "api",
            Error::NoNamespace => "no_namespace",
            Error::Apply(_) => "apply",
            Error::Timeout(_) => "timeout",
        }
    }
}

/// Shared state of the reconciler.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event publisher.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Consecutive failures per resource (for backoff).
    failures: Mutex<HashMap<String, u32>>,
    /// The OM's datanode administration (decommission before scale-down).
    pub admin: Arc<dyn DatanodeAdmin>,
    /// The CA bundles the OM administration checks TLS OMs against.
    pub om_tls: OmTls,
    /// What the builders need to know of this operator.
    pub env: builders::Environment,
    /// The ClusterRole (only `create tokenreviews`) bound to the OM of each
    /// cluster with authentication on.
    pub tokenreview_role: String,
}

/// The chart's ClusterRole for OMs reviewing tokens, unless told otherwise.
pub const DEFAULT_TOKENREVIEW_ROLE: &str = "ozone-operator-tokenreview";

impl Context {
    /// A context over `client`.
    pub fn new(client: Client, metrics: Metrics) -> Self {
        let om_tls = OmTls::default();
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            failures: Mutex::new(HashMap::new()),
            admin: Arc::new(OmAdmin {
                tls: om_tls.clone(),
                credentials: Default::default(),
            }),
            om_tls,
            env: Default::default(),
            tokenreview_role: DEFAULT_TOKENREVIEW_ROLE.into(),
        }
    }

    /// The same context for an operator known as `identity`
    /// (`namespace/serviceaccount`) presenting the token in `om_token` to
    /// OMs, binding OMs to `tokenreview_role`.
    pub fn with_operator(
        mut self,
        identity: Option<String>,
        om_token: Option<std::path::PathBuf>,
        tokenreview_role: String,
    ) -> Self {
        self.env.operator_identity = identity;
        self.tokenreview_role = tokenreview_role;
        self.admin = Arc::new(OmAdmin {
            tls: self.om_tls.clone(),
            credentials: om_token
                .map(ozone_common::credentials::Credentials::token_file)
                .unwrap_or_default(),
        });
        self
    }

    /// The same context with another datanode administration (tests).
    pub fn with_admin(mut self, admin: Arc<dyn DatanodeAdmin>) -> Self {
        self.admin = admin;
        self
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(c: &OzoneCluster) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// Reconciles one resource (counted and timed).
pub async fn reconcile(c: Arc<OzoneCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let t = Instant::now();
    ctx.metrics.reconciles.inc();
    let r = match tokio::time::timeout(RECONCILE_TIMEOUT, reconcile_inner(&c, &ctx)).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout(RECONCILE_TIMEOUT)),
    };
    ctx.metrics.duration.observe(t.elapsed().as_secs_f64());
    if r.is_ok() {
        ctx.failures().remove(&key(&c));
    }
    r
}

/// After a failure: requeue with exponential backoff per resource (5 s
/// doubling to 5 min), never a crash loop.
pub fn error_policy(c: Arc<OzoneCluster>, e: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(e.kind());
    let n = {
        let mut f = ctx.failures();
        let n = f.entry(key(&c)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    tracing::warn!(cluster = %key(&c), failures = n, "reconcile failed: {e}");
    Action::requeue(backoff(n))
}

/// Backoff after `n` consecutive failures.
pub fn backoff(n: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << n.saturating_sub(1).min(16));
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

async fn reconcile_inner(c: &OzoneCluster, ctx: &Context) -> Result<Action, Error> {
    tracing::debug!(cluster = %key(c), generation = ?c.metadata.generation, "reconciling");
    let ns = c.namespace().ok_or(Error::NoNamespace)?;
    if c.meta().deletion_timestamp.is_some() {
        // Owner references hand the rest to the garbage collector.
        if unowned::has_finalizer(c) {
            unowned::remove_unowned(c, &ctx.client, &ns, false, &[]).await?;
            unowned::set_finalizer(c, &ctx.client, &ns, false).await?;
            tracing::info!(cluster = %key(c), "cleaned up; finalizer removed");
        }
        return Ok(Action::await_change());
    }
    let name = c.name_any();
    let client = &ctx.client;
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let om = sts_api.get_opt(&format!("{name}-om")).await?;
    let dn = sts_api.get_opt(&format!("{name}-datanode")).await?;
    let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name=ozone,app.kubernetes.io/instance={name},app.kubernetes.io/component=datanode"
        )))
        .await?
        .items;

    let paused = c.spec.cluster_operation.reconciliation_paused;
    let mut invalid = None;
    let mut outcome = Applied::default();
    let decommissioned = c
        .status
        .as_ref()
        .map(|s| s.decommissioned_pods.clone())
        .unwrap_or_default();
    let mut scale = ScaleDown {
        decommissioned: decommissioned.clone(),
        ..Default::default()
    };
    match builders::build_in(c, &ctx.env) {
        Err(e) => invalid = Some(e.to_string()),
        Ok(_) if paused => {}
        Ok(mut objs) => {
            scale = plan_scale_down(c, ctx, &ns, dn.as_ref(), &decommissioned).await;
            if let Some(spec) = objs.datanodes.spec.as_mut()
                && scale.waiting.is_some()
            {
                spec.replicas = Some(scale.replicas);
            }
            outcome = apply_all(c, ctx, &ns, objs, dn.as_ref(), &pods).await
        }
    }
    let apply_failed = (!outcome.failures.is_empty()).then(|| outcome.failures.join("; "));

    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let st = status::compute(
        c,
        &Observed {
            om: om.as_ref(),
            datanodes: dn.as_ref(),
            pods: &pods,
            invalid: invalid.clone(),
            apply_failed: apply_failed.clone(),
            roll_held: outcome.roll_held,
            decommissioning: scale.waiting.clone(),
            decommissioned_pods: scale.decommissioned.clone(),
            network_policies: outcome.network_policies,
        },
        now.clone(),
    );
    let progressing = st
        .conditions
        .iter()
        .any(|k| k.type_ == status::PROGRESSING && k.status == "True");
    let changed = c.status.as_ref() != Some(&st);
    if changed {
        let body = serde_json::json!({
            "apiVersion": "ozone-rs.io/v1alpha1",
            "kind": "OzoneCluster",
            "status": st,
        });
        Api::<OzoneCluster>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await?;
    }
    let reference = c.object_ref(&());
    if let Some(why) = invalid {
        ctx.metrics.error("invalid_spec");
        if changed {
            publish(ctx, &reference, EventType::Warning, "InvalidSpec", &why).await;
        }
        // Nothing to retry: the next edit of the resource wakes the controller.
        tracing::warn!(cluster = %key(c), "invalid spec: {why}");
        return Ok(Action::await_change());
    }
    if let Some(why) = apply_failed {
        // Refused by the API server: visible as Degraded and an event, then
        // retried with backoff (the refusal may be transient, e.g. a quota).
        publish(ctx, &reference, EventType::Warning, "ApplyFailed", &why).await;
        return Err(Error::Apply(why));
    }
    if outcome.roll_held && changed {
        let msg = "datanode roll held until every datanode is ready";
        publish(ctx, &reference, EventType::Warning, "RollHeld", msg).await;
    }
    // While datanodes are decommissioned, ask the OM again soon.
    if scale.waiting.is_some() {
        return Ok(Action::requeue(DECOMMISSION_POLL));
    }
    // While progressing, look again at least every PROGRESS and exactly when
    // the progress deadline passes (pod events may not come then).
    Ok(Action::requeue(if progressing {
        status::until_deadline(c, &st, &now).map_or(PROGRESS, |d| d.min(PROGRESS))
    } else {
        RESYNC
    }))
}

/// The datanode replicas to apply: a scale-down waits until the datanodes
/// that go are decommissioned (unless the spec turns that off, or the
/// cluster is being stopped: its pods come back with their data).
async fn plan_scale_down(
    c: &OzoneCluster,
    ctx: &Context,
    ns: &str,
    current: Option<&StatefulSet>,
    decommissioned: &[String],
) -> ScaleDown {
    let name = c.name_any();
    let om = format!("{name}-om.{ns}.svc:{}", builders::OM_PORT);
    let stopped = c.spec.cluster_operation.stopped;
    let want = if stopped {
        0
    } else {
        c.spec.datanodes.replicas
    };
    let current = current
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas)
        .filter(|_| c.spec.datanodes.decommission_on_scale_down && !stopped);
    let plan = if stopped {
        // Nothing to recommission while stopped.
        ScaleDown {
            replicas: 0,
            waiting: None,
            decommissioned: decommissioned.to_vec(),
        }
    } else {
        crate::decommission::scale_down(
            ctx.admin.as_ref(),
            &om,
            &name,
            current,
            want,
            decommissioned,
        )
        .await
    };
    if let Some(why) = &plan.waiting {
        tracing::info!(cluster = %key(c), "{why}");
    }
    plan
}

/// What one round of applies did.
#[derive(Debug, Default)]
struct Applied {
    /// The datanode roll was held.
    roll_held: bool,
    /// Objects the API server refused, with its message.
    failures: Vec<String>,
    /// Whether the cluster's NetworkPolicies exist after this round.
    network_policies: Option<bool>,
}

/// Applies every object in order. A refused object is recorded and the
/// independent ones are still applied; the StatefulSets are skipped when
/// their ConfigMap (or the token Secret) could not be written.
async fn apply_all(
    c: &OzoneCluster,
    ctx: &Context,
    ns: &str,
    mut objs: Objects,
    current_dn: Option<&StatefulSet>,
    pods: &[Pod],
) -> Applied {
    let client = &ctx.client;
    let mut out = Applied::default();
    let mut record = |what: String, r: Result<(), String>| match r {
        Ok(()) => true,
        Err(e) => {
            out.failures.push(format!("{what}: {e}"));
            false
        }
    };
    let mut prerequisites = true;
    if c.spec.security.block_tokens {
        let r = ensure_token_secret(c, client, ns)
            .await
            .map_err(|e| match e {
                Error::Api(e) => api_message(&e),
                other => other.to_string(),
            });
        prerequisites &= record(
            format!("Secret {}", builders::token_secret_name(&c.name_any())),
            r,
        );
    }
    let tls_secret = builders::tls::tls_secret_name(&c.name_any());
    let om_address = format!("{}-om.{ns}.svc:{}", c.name_any(), builders::OM_PORT);
    let mut ca_pem = None;
    if c.spec.security.tls.enabled {
        let r = ensure_tls(c, ctx, ns, objs.certificate.as_ref(), &om_address)
            .await
            .map(|pem| ca_pem = pem)
            .map_err(|e| match e {
                Error::Api(e) => api_message(&e),
                other => other.to_string(),
            });
        prerequisites &= record(format!("TLS Secret {tls_secret}"), r);
    } else {
        ctx.om_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&om_address);
    }
    let config = named("ConfigMap", &objs.config);
    prerequisites &= record(config, applied(apply(client, ns, &objs.config).await));
    for (what, r, needed) in apply_identity(c, ctx, ns, &objs, ca_pem.as_deref()).await {
        let ok = record(what, r);
        if needed {
            prerequisites &= ok;
        }
    }
    let had_policies = c.status.as_ref().is_some_and(|s| s.network_policies);
    let mut policies = !objs.network_policies.is_empty();
    for p in &objs.network_policies {
        record(
            named("NetworkPolicy", p),
            applied(apply(client, ns, p).await),
        );
    }
    if !policies && had_policies {
        // Turned off: ours go.
        let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
        for name in builders::network::policy_names(&c.name_any()) {
            match api.delete(&name, &Default::default()).await {
                Ok(_) => tracing::info!(policy = %name, "NetworkPolicy removed"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    policies = true;
                    record(format!("NetworkPolicy {name}"), Err(api_message(&e)));
                }
            }
        }
    }
    for svc in [&objs.om_headless, &objs.om_service, &objs.datanode_headless] {
        record(named("Service", svc), applied(apply(client, ns, svc).await));
    }
    stamp_template_hash(&mut objs.om);
    stamp_template_hash(&mut objs.datanodes);
    let held = hold_roll_if_unready(&mut objs.datanodes, current_dn, pods);
    if prerequisites {
        for sts in [&objs.om, &objs.datanodes] {
            record(
                named("StatefulSet", sts),
                applied(apply(client, ns, sts).await),
            );
        }
        // The StatefulSet controller (OrderedReady) never replaces a pod that
        // is not ready: one stuck on an old template (Pending for want of a
        // toleration the new one has) would block the roll forever. Delete
        // it so it comes back on the new template.
        if let Some(cur) = current_dn {
            for (pod, uid) in stuck_pods(&objs.datanodes, cur, pods) {
                let r = Api::<Pod>::namespaced(client.clone(), ns)
                    .delete(
                        &pod,
                        &kube::api::DeleteParams {
                            preconditions: Some(kube::api::Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..Default::default()
                        },
                    )
                    .await;
                match r {
                    Ok(_) => tracing::info!(%pod, "replacing an unready pod on an old template"),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => {
                        record(format!("Pod {pod}"), Err(api_message(&e)));
                    }
                }
            }
        }
    }
    let pdb = &objs.datanode_pdb;
    record(
        named("PodDisruptionBudget", pdb),
        applied(apply(client, ns, pdb).await),
    );
    out.roll_held = held;
    out.network_policies = Some(policies);
    out
}

/// The cluster's identity objects and what reaches beyond its namespace:
/// the finalizer first (so nothing outlives the cluster), the OM's
/// ServiceAccount and TokenReview binding, the CA bundles; then what is no
/// longer asked for goes, and the finalizer with the last of it. Each
/// outcome says whether the StatefulSets need it (a bundle for a client
/// namespace that does not exist yet holds back no pod).
async fn apply_identity(
    c: &OzoneCluster,
    ctx: &Context,
    ns: &str,
    objs: &Objects,
    ca_pem: Option<&str>,
) -> Vec<(String, Result<(), String>, bool)> {
    let client = &ctx.client;
    let name = c.name_any();
    let sec = &c.spec.security;
    let mut out = Vec::new();
    let wants = names::needs_finalizer(c);
    if wants && !unowned::has_finalizer(c) {
        let r = unowned::set_finalizer(c, client, ns, true).await;
        let failed = r.is_err();
        out.push((
            format!("finalizer {}", names::FINALIZER),
            r.map_err(|e| api_message(&e)),
            true,
        ));
        if failed {
            // Nothing unowned is created without the finalizer.
            return out;
        }
    }
    if let Some(sa) = &objs.om_account {
        out.push((
            named("ServiceAccount", sa),
            applied(apply(client, ns, sa).await),
            true,
        ));
        let binding = names::tokenreview_binding(c, &ctx.tokenreview_role);
        let r = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
            .patch(
                &names::tokenreview_binding_name(ns, &name),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&binding),
            )
            .await;
        out.push((named("ClusterRoleBinding", &binding), applied(r), true));
    }
    let mut namespaces = Vec::new();
    if let (true, Some(pem)) = (sec.tls.enabled, ca_pem) {
        namespaces.push(ns.to_string());
        namespaces.extend(sec.tls.client_namespaces.iter().cloned());
        namespaces.sort();
        namespaces.dedup();
        for target in &namespaces {
            let cm = names::ca_bundle(c, target, pem);
            out.push((
                format!("ConfigMap {target}/{}", names::ca_bundle_name(&name)),
                applied(apply(client, target, &cm).await),
                false,
            ));
        }
    }
    if unowned::has_finalizer(c) || wants {
        let keep: &[String] = if sec.tls.enabled {
            &sec.tls.client_namespaces
        } else {
            &[]
        };
        let r = unowned::remove_unowned(c, client, ns, sec.authentication.enabled, keep).await;
        let clean = r.is_ok();
        out.push(("cleanup".into(), r.map_err(|e| api_message(&e)), false));
        if clean && !wants && unowned::has_finalizer(c) {
            let r = unowned::set_finalizer(c, client, ns, false).await;
            out.push((
                format!("finalizer {}", names::FINALIZER),
                r.map_err(|e| api_message(&e)),
                false,
            ));
        }
    }
    out
}

fn named<K: Resource>(kind: &str, obj: &K) -> String {
    format!("{kind} {}", obj.meta().name.as_deref().unwrap_or_default())
}

fn applied<K>(r: Result<K, kube::Error>) -> Result<(), String> {
    r.map(drop).map_err(|e| api_message(&e))
}

/// The API server's own words for a failed call.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// Records the hash of the pod template on the StatefulSet, so a template
/// change is seen before the StatefulSet controller reacts to it.
pub fn stamp_template_hash(sts: &mut StatefulSet) {
    let t = sts.spec.as_ref().map(|s| &s.template);
    let json = serde_json::to_vec(&t).unwrap_or_default();
    let hash = format!("{:x}", Sha256::digest(&json));
    sts.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(TEMPLATE_HASH.into(), hash);
}

/// Never take a healthy datanode down beside an unready one. When the
/// template changes (or a roll is under way) and some datanode is not ready,
/// the RollingUpdate partition is set so that only pods that are down anyway
/// (unready and not yet on the new template) or already updated are
/// replaced: a Pending pod that the new template fixes (a toleration, a
/// resource request) gets it, every healthy pod keeps running. When an
/// unready pod already runs the new template, or sits below a healthy old
/// one, everything is held (partition = replicas) until all are ready.
/// Returns whether the roll is held.
pub fn hold_roll_if_unready(
    desired: &mut StatefulSet,
    current: Option<&StatefulSet>,
    pods: &[Pod],
) -> bool {
    let Some(cur) = current else {
        return false;
    };
    let template_changed = template_hash(desired) != template_hash(cur);
    let st = cur.status.as_ref();
    let update_revision = st.and_then(|s| s.update_revision.clone());
    // A roll is under way while revisions differ, while the StatefulSet
    // controller has not yet observed the last applied template (its
    // revisions are stale then), or while any pod runs another revision.
    let stale = !observed(cur);
    let revisions_differ = st
        .is_some_and(|s| s.update_revision.is_some() && s.current_revision != s.update_revision)
        || pods.iter().any(|p| {
            update_revision.is_some()
                && p.labels()
                    .get(REVISION_LABEL)
                    .is_some_and(|r| Some(r) != update_revision.as_ref())
        });
    let mid_roll = stale || revisions_differ;
    let replicas = cur
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(st.map(|s| s.replicas).unwrap_or(0));
    // Per ordinal: (ready, on the template being applied).
    let mut by_ordinal: Vec<Option<(bool, bool)>> = vec![None; replicas.max(0) as usize];
    for p in pods {
        let Some(i) = ordinal(cur, p) else {
            continue;
        };
        if i >= by_ordinal.len() {
            continue;
        }
        let revision = p.labels().get(REVISION_LABEL);
        let updated =
            !template_changed && revision.is_some() && revision == update_revision.as_ref();
        by_ordinal[i] = Some((status::pod_ready(p), updated));
    }
    let any_unready = by_ordinal.iter().any(|p| !matches!(p, Some((true, _))))
        || status::datanodes_unready(current);
    if (!template_changed && !mid_roll) || !any_unready {
        return false;
    }
    // Smallest q such that every pod >= q is down-and-old or up-and-new.
    let mut q = by_ordinal.len();
    while q > 0 {
        match by_ordinal[q - 1] {
            Some((false, false)) | Some((true, true)) => q -= 1,
            _ => break,
        }
    }
    let unready_below = by_ordinal[..q]
        .iter()
        .any(|p| !matches!(p, Some((true, _))));
    // A missing pod is being (re)created: count it as down on the new template.
    let unready_new = by_ordinal
        .iter()
        .any(|p| matches!(p, Some((false, true)) | None));
    let (partition, held) = if unready_below || unready_new {
        (replicas, true)
    } else {
        (q as i32, false)
    };
    if let Some(spec) = desired.spec.as_mut() {
        spec.update_strategy
            .get_or_insert_with(Default::default)
            .rolling_update = Some(RollingUpdateStatefulSetStrategy {
            partition: Some(partition),
            ..Default::default()
        });
    }
    // A StatefulSet not yet observed may only be scaling (a replicas change
    // bumps its generation too): the partition stays cautious, but a roll is
    // reported held only when one is known to be under way.
    held && (template_changed || revisions_differ)
}

/// The `ozone-rs.io/template-hash` a StatefulSet was applied with.
fn template_hash(s: &StatefulSet) -> Option<&String> {
    s.metadata.annotations.as_ref()?.get(TEMPLATE_HASH)
}

/// Whether the StatefulSet controller has seen the last applied spec (its
/// revisions in status describe it).
fn observed(s: &StatefulSet) -> bool {
    let seen = s.status.as_ref().and_then(|st| st.observed_generation);
    seen.unwrap_or(0) >= s.metadata.generation.unwrap_or(0) && s.status.is_some()
}

/// The ordinal of a pod of the StatefulSet (`<set>-<ordinal>`).
fn ordinal(sts: &StatefulSet, pod: &Pod) -> Option<usize> {
    let set = sts.metadata.name.as_deref()?;
    pod.metadata
        .name
        .as_deref()?
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// Pods of the datanode StatefulSet that the roll must replace but the
/// StatefulSet controller will not: not ready, not terminating, on an older
/// revision than the current template's, at or above the partition. Only
/// once the StatefulSet has observed the template being applied (so its
/// update revision is that template's).
pub fn stuck_pods(
    desired: &StatefulSet,
    current: &StatefulSet,
    pods: &[Pod],
) -> Vec<(String, String)> {
    let Some(st) = current.status.as_ref() else {
        return Vec::new();
    };
    let Some(update) = st.update_revision.as_ref() else {
        return Vec::new();
    };
    if template_hash(desired) != template_hash(current) || !observed(current) {
        return Vec::new();
    }
    let partition = desired
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !status::pod_ready(p))
        .filter(|p| p.labels().get(REVISION_LABEL).is_some_and(|r| r != update))
        .filter(|p| ordinal(current, p).is_some_and(|i| i >= partition.max(0) as usize))
        .filter_map(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            Some((p.metadata.name.clone()?, uid))
        })
        .collect()
}

/// Server-side apply of one object under [`MANAGER`], forcing conflicts.
pub async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
}

/// Validity of the operator's CA for a cluster.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The cluster's TLS Secret: through cert-manager (the `Certificate` is
/// applied; cert-manager writes the Secret), or from the operator's CA
/// (created once in `<name>-ca`), issued again when missing, when its names
/// change or when a third of its validity is left. The pods mount the
/// Secret; the kubelet updates it in place and the processes load it
/// without a restart. Also records the CA bundle for the operator's own
/// calls to the OM.
async fn ensure_tls(
    c: &OzoneCluster,
    ctx: &Context,
    ns: &str,
    certificate: Option<&kube::api::DynamicObject>,
    om_address: &str,
) -> Result<Option<String>, Error> {
    use builders::tls;
    use ozone_common::tls::issue::Ca;
    let client = &ctx.client;
    let name = c.name_any();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let pem_of = |s: &Secret, key: &str| -> Option<String> {
        s.data
            .as_ref()?
            .get(key)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
    };
    let invalid = |e: &dyn std::fmt::Display| Error::InvalidSpec(e.to_string());
    let ca_pem = if let Some(cert) = certificate {
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &tls::certificate_resource());
        api.patch(
            &tls::tls_secret_name(&name),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(cert),
        )
        .await?;
        // cert-manager writes the Secret; until then the pods wait for it.
        secrets
            .get_opt(&tls::tls_secret_name(&name))
            .await?
            .and_then(|s| pem_of(&s, ozone_common::tls::CA_FILE))
    } else {
        let subject = tls::ca_subject(&name, ns);
        let ca = match secrets.get_opt(&tls::ca_secret_name(&name)).await? {
            Some(s) => {
                let (Some(crt), Some(key)) = (
                    pem_of(&s, ozone_common::tls::CA_FILE),
                    pem_of(&s, tls::CA_KEY),
                ) else {
                    return Err(Error::InvalidSpec(format!(
                        "Secret {} lacks {} or {}",
                        tls::ca_secret_name(&name),
                        ozone_common::tls::CA_FILE,
                        tls::CA_KEY
                    )));
                };
                Ca::from_pem(&subject, &crt, &key).map_err(|e| invalid(&e))?
            }
            None => {
                let ca = Ca::new(&subject, CA_VALIDITY).map_err(|e| invalid(&e))?;
                let secret = tls::ca_secret(c, &ca).map_err(|e| invalid(&e))?;
                let pp = PostParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                };
                match secrets.create(&pp, &secret).await {
                    Ok(_) => ca,
                    // Created meanwhile: the next reconcile uses that one.
                    Err(kube::Error::Api(s)) if s.code == 409 => return Ok(None),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let names = tls::dns_names(&name, ns);
        let current = secrets.get_opt(&tls::tls_secret_name(&name)).await?;
        let spec = &c.spec.security.tls;
        if tls::needs_renewal(current.as_ref(), &names, spec, std::time::SystemTime::now()) {
            let issued = ca
                .issue(&names, tls::validity(spec))
                .map_err(|e| invalid(&e))?;
            let secret =
                tls::tls_secret(c, ca.cert_pem(), &issued, &names).map_err(|e| invalid(&e))?;
            apply(client, ns, &secret).await?;
            tracing::info!(cluster = %key(c), "issued a TLS certificate");
        }
        Some(ca.cert_pem().to_string())
    };
    if let Some(pem) = &ca_pem {
        let t =
            ozone_common::tls::Tls::client_from_ca_pem(pem.as_bytes()).map_err(|e| invalid(&e))?;
        ctx.om_tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(om_address.to_string(), t);
    }
    Ok(ca_pem)
}

/// Creates the block-token Secret with a random key unless it exists; an
/// existing Secret is never rewritten.
async fn ensure_token_secret(c: &OzoneCluster, client: &Client, ns: &str) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = builders::token_secret_name(&c.name_any());
    if api.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    // 32 random bytes, hex: printable, so nothing is lost to trimming.
    let mut raw = [0u8; 32];
    rand::fill(&mut raw);
    let key: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let secret =
        builders::token_secret(c, key.as_bytes()).map_err(|e| Error::InvalidSpec(e.to_string()))?;
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, &secret).await {
        Ok(_) => Ok(()),
        // Created meanwhile (another reconcile): keep that one.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        tracing::warn!("publishing event {reason}: {e}");
    }
}

/// Server-side applies the operator's CRD (Helm installs a chart's `crds/`
/// once and never upgrades them; the operator keeps its own schema current).
pub async fn apply_crd(client: &Client) -> Result<(), kube::Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = crate::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map(drop)
}

/// Runs the controller until SIGTERM or SIGINT; in-flight reconciles finish
/// first. `namespace` limits it to one namespace. `ready` turns true once
/// the resources have been listed, false at shutdown.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>, ready: Arc<AtomicBool>) {
    use kube::runtime::{WatchStreamExt, predicates, reflector};
    let client = ctx.client.clone();
    let (clusters, sets) = match namespace {
        Some(ns) => (
            Api::<OzoneCluster>::namespaced(client.clone(), ns),
            Api::<StatefulSet>::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (reader, writer) = reflector::store();
    // Only spec changes (generation) of the resource wake a reconcile: the
    // controller's own status writes do not.
    let stream = watcher(clusters, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let store = reader.clone();
    let flag = ready.clone();
    tokio::spawn(async move {
        // Polled again each second: the store wakes only its first waiter.
        loop {
            match tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    flag.store(true, Ordering::SeqCst);
                    tracing::info!("resources listed: ready");
                    return;
                }
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
    });
    Controller::for_stream(stream, reader)
        .owns(
            sets,
            watcher::Config::default().labels("app.kubernetes.io/managed-by=ozone-operator"),
        )
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            match r {
                Ok((obj, _)) => tracing::debug!(cluster = %obj.name, "reconciled"),
                Err(e) => tracing::debug!("reconcile: {e}"),
            }
        })
        .await;
    ready.store(false, Ordering::SeqCst);
    tracing::info!("controller stopped");
}
