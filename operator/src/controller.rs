//! The controller: reconciles each `OzoneCluster` into its objects with
//! server-side apply under one field manager, keeps its status current and
//! reports trouble as conditions and events.
//!
//! One reconcile, in order: read the StatefulSets and datanode pods; unless
//! paused or invalid, create the block-token Secret once, then apply the
//! ConfigMap, the Services, the StatefulSets (a datanode template change is
//! held while any datanode is not ready) and the PodDisruptionBudgets;
//! finally patch the status. Deleting the resource is left to the garbage
//! collector through owner references; data claims follow
//! `spec.volumeDeletionPolicy`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{RollingUpdateStatefulSetStrategy, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::builders::{self, Objects};
use crate::crd::OzoneCluster;
use crate::metrics::Metrics;
use crate::status::{self, Observed};

/// The one field manager of every apply.
pub const MANAGER: &str = "ozone-operator";
/// StatefulSet annotation: hash of the pod template last applied.
pub const TEMPLATE_HASH: &str = "ozone-rs.io/template-hash";
/// Requeue interval when nothing is happening.
const RESYNC: Duration = Duration::from_secs(300);
/// Requeue interval while a change is in progress.
const PROGRESS: Duration = Duration::from_secs(30);
/// Longest backoff after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

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
}

impl Error {
    /// Short kind, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Api(_) => "api",
            Error::NoNamespace => "no_namespace",
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
}

impl Context {
    /// A context over `client`.
    pub fn new(client: Client, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            failures: Mutex::new(HashMap::new()),
        }
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
    let r = reconcile_inner(&c, &ctx).await;
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
    if c.meta().deletion_timestamp.is_some() {
        // Owner references hand everything to the garbage collector.
        return Ok(Action::await_change());
    }
    let ns = c.namespace().ok_or(Error::NoNamespace)?;
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
    let mut roll_held = false;
    match builders::build(c) {
        Err(e) => invalid = Some(e.to_string()),
        Ok(_) if paused => {}
        Ok(objs) => roll_held = apply_all(c, ctx, &ns, objs, dn.as_ref()).await?,
    }

    let st = status::compute(
        c,
        &Observed {
            om: om.as_ref(),
            datanodes: dn.as_ref(),
            pods: &pods,
            invalid: invalid.clone(),
            roll_held,
        },
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let progressing = st
        .conditions
        .iter()
        .any(|k| k.type_ == status::PROGRESSING && k.status == "True");
    let changed = c.status.as_ref() != Some(&st);
    if changed {
        Api::<OzoneCluster>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": st })),
            )
            .await?;
    }
    let reference = c.object_ref(&());
    if let Some(why) = invalid {
        if changed {
            publish(ctx, &reference, EventType::Warning, "InvalidSpec", &why).await;
        }
        return Err(Error::InvalidSpec(why));
    }
    if roll_held && changed {
        let msg = "datanode roll held until every datanode is ready";
        publish(ctx, &reference, EventType::Warning, "RollHeld", msg).await;
    }
    Ok(Action::requeue(if progressing { PROGRESS } else { RESYNC }))
}

/// Applies every object in order; returns whether the datanode roll was held.
async fn apply_all(
    c: &OzoneCluster,
    ctx: &Context,
    ns: &str,
    mut objs: Objects,
    current_dn: Option<&StatefulSet>,
) -> Result<bool, Error> {
    let client = &ctx.client;
    if c.spec.security.block_tokens {
        ensure_token_secret(c, client, ns).await?;
    }
    apply(client, ns, &objs.config).await?;
    apply(client, ns, &objs.om_headless).await?;
    apply(client, ns, &objs.om_service).await?;
    apply(client, ns, &objs.datanode_headless).await?;
    stamp_template_hash(&mut objs.om);
    stamp_template_hash(&mut objs.datanodes);
    let held = hold_roll_if_unready(&mut objs.datanodes, current_dn);
    apply(client, ns, &objs.om).await?;
    apply(client, ns, &objs.datanodes).await?;
    apply(client, ns, &objs.om_pdb).await?;
    apply(client, ns, &objs.datanode_pdb).await?;
    Ok(held)
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

/// Never roll datanodes while the cluster is degraded: when the template
/// changes (or a roll is under way) and a datanode is not ready, the
/// partition is set to the replica count so no further pod is replaced
/// until all are ready again. Returns whether the roll is held.
pub fn hold_roll_if_unready(desired: &mut StatefulSet, current: Option<&StatefulSet>) -> bool {
    let Some(cur) = current else {
        return false;
    };
    let want = desired
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_HASH));
    let have = cur
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_HASH));
    let st = cur.status.as_ref();
    let mid_roll =
        st.is_some_and(|s| s.update_revision.is_some() && s.current_revision != s.update_revision);
    if (want == have && !mid_roll) || !status::datanodes_unready(current) {
        return false;
    }
    let replicas = cur
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(st.map(|s| s.replicas).unwrap_or(0));
    if let Some(spec) = desired.spec.as_mut() {
        spec.update_strategy
            .get_or_insert_with(Default::default)
            .rolling_update = Some(RollingUpdateStatefulSetStrategy {
            partition: Some(replicas),
            ..Default::default()
        });
    }
    true
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

/// Runs the controller until SIGTERM or SIGINT; in-flight reconciles finish
/// first. `namespace` limits it to one namespace.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>) {
    let client = ctx.client.clone();
    let (clusters, sets) = match namespace {
        Some(ns) => (
            Api::<OzoneCluster>::namespaced(client.clone(), ns),
            Api::<StatefulSet>::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    Controller::new(clusters, watcher::Config::default())
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
    tracing::info!("controller stopped");
}
