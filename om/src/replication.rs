//! The replication manager: a background pass over every committed block
//! that compares the replicas its key lists with what the datanodes report
//! and their health, then
//!
//! - asks a datanode to copy a verified replica from a healthy one when a
//!   block has fewer healthy replicas than its replication (a dead
//!   datanode, a damaged or missing replica, a decommissioning datanode),
//!   the blocks with fewest healthy replicas first, at most `limit` copies
//!   in flight per datanode; a damaged or missing replica on a live
//!   datanode is replaced where it is, otherwise the target is a healthy
//!   in-service datanode on a node holding no replica of the block (chosen
//!   by a hash of the block, so a restarted OM asks the same datanode);
//! - adopts a copy once its datanode reports it, and drops lost, damaged
//!   and excess replicas from the key (queued for deletion) once the block
//!   has enough healthy ones;
//! - deletes replicas no key knows (orphans) and marks a decommissioning
//!   datanode DECOMMISSIONED when no block needs its replicas any more.
//!
//! Nothing of a pass is kept but the keys' replica lists: after a restart
//! the OM learns what exists from the datanodes' full reports, and a copy
//! that finished meanwhile is adopted, not made again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ozone_proto::{
    BlockHealth, BlockId, KeyBlock, NodeState, OperationalState, ReplicateBlockRequest,
    ReplicationStatusResponse,
};
use tokio::sync::watch;

use crate::dn_channels::DatanodeChannels;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::replica_map::{Held, ReplicaMap};
use crate::store::OmStore;
use crate::store::block_rows::{BlockRow, BlockSnapshot, RowRef};
use ozone_common::block_key::{BlockKey, key_of};

/// Replication manager settings.
#[derive(Debug, Clone, Copy)]
pub struct ReplicationConfig {
    /// Pause between passes.
    pub interval: Duration,
    /// Copies in flight per datanode (as target or first source).
    pub limit: usize,
    /// A copy not answered after this long is given up.
    pub timeout: Duration,
    /// Healthy replicas a block keeps while one of its datanodes is in
    /// maintenance.
    pub maintenance_minimum: u32,
    /// A replica a datanode does not report is missing only once its key is
    /// older than this (reports trail commits by a heartbeat).
    pub report_grace: Duration,
}

/// What the pass knows of a datanode.
#[derive(Debug, Clone)]
pub(crate) struct NodeView {
    /// gRPC address.
    pub address: String,
    /// Node it runs on.
    pub node_name: String,
    /// Health from heartbeats.
    pub health: NodeState,
    /// Operational state.
    pub op: OperationalState,
}

impl NodeView {
    fn usable(&self) -> bool {
        self.health == NodeState::Healthy && self.op == OperationalState::InService
    }
}

/// A copy the pass wants made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Copy {
    /// The block.
    pub id: BlockId,
    /// Its length.
    pub size: u64,
    /// Datanode to hold the new replica.
    pub target: String,
    /// Datanodes with a healthy replica, best first.
    pub sources: Vec<String>,
    /// Healthy replicas now (fewest first).
    pub healthy: usize,
    /// Whether the target replaces its own damaged or missing replica.
    pub in_place: bool,
}

/// A change of one block's replica list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowUpdate {
    /// Where the list is stored.
    pub row: RowRef,
    /// The block.
    pub id: BlockId,
    /// The list the pass saw.
    pub expected: Vec<String>,
    /// The new list.
    pub new: Vec<String>,
    /// Datanodes whose replica is to be deleted.
    pub delete_on: Vec<String>,
}

/// Everything one pass decided.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Copies to start, most urgent first.
    pub copies: Vec<Copy>,
    /// Replica lists to change.
    pub updates: Vec<RowUpdate>,
    /// Replicas no key knows, per datanode.
    pub orphans: HashMap<String, Vec<BlockKey>>,
    /// Decommissioning datanodes with no replica still needed.
    pub decommissioned: Vec<String>,
    /// The replicas the OM lists per datanode.
    pub per_node: HashMap<String, NodeLoad>,
    /// Blocks with too few healthy replicas.
    pub short: HashSet<BlockKey>,
    /// Counts and the blocks at most risk.
    pub status: ReplicationStatusResponse,
}

/// A copy asked of a datanode.
#[derive(Debug, Clone)]
struct InFlight {
    target: String,
    source: String,
    started: Instant,
}

/// Rendezvous order of datanodes for a block: stable across passes,
/// restarts and Rust releases (FNV-1a 64 of the block and the datanode id,
/// finished with a 64-bit mixer so neighbouring blocks spread), spread
/// across blocks.
fn rank(k: BlockKey, dn: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in
        k.0.to_le_bytes()
            .into_iter()
            .chain(k.1.to_le_bytes())
            .chain(dn.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    // splitmix64's finalizer.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

const TOP: usize = 50;

/// Replicas a client reported bad (and the datanode has not yet cleared):
/// (block, datanode).
pub(crate) type BadReplicas = HashSet<(BlockKey, String)>;

/// What a pass finds of the replicas the OM lists on one datanode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeLoad {
    /// Replicas the OM lists on it.
    pub listed: u64,
    /// Those needed because their block lacks healthy replicas elsewhere
    /// (what a decommission waits for).
    pub needed: u64,
}

/// What one pass decides from.
pub(crate) struct PassInput<'a> {
    /// Every committed block and its listed replicas.
    pub snap: &'a BlockSnapshot,
    /// The datanodes the OM knows.
    pub nodes: &'a HashMap<String, NodeView>,
    /// What each datanode last reported holding.
    pub reports: &'a HashMap<String, Held>,
    /// Replicas reported bad.
    pub bad: &'a BadReplicas,
    /// Blocks with a copy under way, to its target.
    pub in_flight: &'a HashMap<BlockKey, String>,
    /// Settings.
    pub cfg: &'a ReplicationConfig,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
    /// Whether a datanode the OM does not know counts as dead (the OM has
    /// been up long enough to have heard from every live one).
    pub unknown_is_dead: bool,
}

/// One block's listed replicas, by what they are worth.
#[derive(Default)]
struct Sorted<'a> {
    /// Healthy, in service, neither damaged nor missing.
    good: Vec<&'a str>,
    /// Of unknown fate: a stale datanode, or one not heard from yet.
    unknown: Vec<&'a str>,
    /// On a healthy datanode in maintenance.
    maint_live: Vec<&'a str>,
    /// On a datanode in maintenance that is not healthy.
    maint_away: Vec<&'a str>,
    /// On a healthy decommissioning (or decommissioned) datanode.
    leaving: Vec<&'a str>,
    /// Damaged or missing on a live datanode: repaired where it is.
    repair_here: Vec<&'a str>,
    /// Gone: dead, unknown, or damaged where it cannot be repaired.
    lost: Vec<&'a str>,
    /// Why replicas are not good, for the risk list.
    problems: Vec<String>,
}

impl Sorted<'_> {
    /// Replicas in maintenance counted as healthy: all of them while
    /// enough others are live, none otherwise.
    fn maintenance_counted(&self, cfg: &ReplicationConfig, wanted: usize) -> usize {
        let live = self.good.len() + self.maint_live.len();
        if live >= (cfg.maintenance_minimum as usize).min(wanted) {
            self.maint_live.len() + self.maint_away.len()
        } else {
            0
        }
    }
}

/// Sorts block `b`'s listed replicas (step 1 of a block), counting them
/// per datanode in `load`.
fn sort_replicas<'a>(
    input: &PassInput<'_>,
    b: &'a BlockRow,
    load: &mut HashMap<String, NodeLoad>,
) -> Sorted<'a> {
    let k = key_of(&b.id);
    let old_enough =
        input.now_ms.saturating_sub(b.committed_ms) > input.cfg.report_grace.as_millis() as u64;
    let mut r = Sorted::default();
    for dn in &b.replicas {
        let dn = dn.as_str();
        let Some(n) = input.nodes.get(dn) else {
            if input.unknown_is_dead {
                r.problems.push(format!("{dn}: unknown datanode"));
                r.lost.push(dn);
            } else {
                r.unknown.push(dn);
            }
            continue;
        };
        let rep = input.reports.get(dn);
        let damaged =
            input.bad.contains(&(k, dn.to_string())) || rep.is_some_and(|h| h.damaged.contains(&k));
        let missing =
            old_enough && rep.is_some_and(|h| !h.blocks.contains(&k) && !h.damaged.contains(&k));
        let defect = if damaged {
            Some("damaged")
        } else if missing {
            Some("missing")
        } else {
            None
        };
        load.entry(dn.to_string()).or_default().listed += 1;
        match (n.op, n.health, defect) {
            (OperationalState::InMaintenance, NodeState::Healthy, None) => r.maint_live.push(dn),
            (OperationalState::InMaintenance, NodeState::Healthy, Some(why)) => {
                r.problems.push(format!("{dn}: {why}"));
                r.lost.push(dn);
            }
            (OperationalState::InMaintenance, _, _) => r.maint_away.push(dn),
            (
                OperationalState::Decommissioning | OperationalState::Decommissioned,
                NodeState::Healthy,
                None,
            ) => r.leaving.push(dn),
            (OperationalState::Decommissioning | OperationalState::Decommissioned, _, why) => {
                let why = why.unwrap_or("leaving and not healthy");
                r.problems.push(format!("{dn}: {why}"));
                r.lost.push(dn);
            }
            (_, NodeState::Dead, _) => {
                r.problems.push(format!("{dn}: dead"));
                r.lost.push(dn);
            }
            (_, NodeState::Stale, _) => r.unknown.push(dn),
            (_, _, Some(why)) => {
                r.problems.push(format!("{dn}: {why}"));
                r.repair_here.push(dn);
            }
            (_, _, None) => r.good.push(dn),
        }
    }
    r
}

/// Copies of a block that datanodes report and its key does not list.
struct Reported<'a> {
    /// Taken into the key: needed, healthy, on a node of their own.
    adopted: Vec<&'a str>,
    /// Not needed: deleted unless a copy to that datanode is under way.
    extra: Vec<&'a str>,
}

/// Step 2: adopts reported copies the block needs (`names`: nodes already
/// holding a counted replica, grown by each adoption).
fn adopt_reported<'a>(
    input: &'a PassInput<'_>,
    b: &BlockRow,
    good: usize,
    names: &mut HashSet<&'a str>,
) -> Reported<'a> {
    let k = key_of(&b.id);
    let wanted = b.replication as usize;
    let mut out = Reported {
        adopted: Vec::new(),
        extra: Vec::new(),
    };
    for (dn, held) in input.reports {
        if !held.blocks.contains(&k) || b.replicas.iter().any(|r| r == dn) {
            continue;
        }
        let Some(n) = input.nodes.get(dn) else {
            continue;
        };
        // Only healthy replicas decide: while a datanode's fate is unknown
        // (stale, not yet heard from) a copy is kept, not trimmed.
        if good + out.adopted.len() < wanted && n.usable() && !names.contains(n.node_name.as_str())
        {
            out.adopted.push(dn);
            names.insert(n.node_name.as_str());
        } else if good + out.adopted.len() >= wanted && n.health == NodeState::Healthy {
            out.extra.push(dn);
        }
    }
    out
}

/// Step 3 of a short block: the copy to make, if a source and a target
/// are free. The target is the first damaged or missing replica's datanode
/// (repaired in place), else the first usable datanode by rank on a node
/// holding no replica; busy or not, so that every OM (a restarted one too)
/// asks the same datanode and no copy is made twice.
fn choose_copy(
    input: &PassInput<'_>,
    b: &BlockRow,
    r: &Sorted<'_>,
    names: &HashSet<&str>,
    sources: Vec<String>,
    busy: &mut HashMap<String, usize>,
) -> Option<Copy> {
    let k = key_of(&b.id);
    if sources.is_empty() || input.in_flight.contains_key(&k) {
        return None;
    }
    let (target, in_place) = match r.repair_here.first() {
        Some(d) => (d.to_string(), true),
        None => {
            let pending = &input.snap.pending_deletes;
            let mut candidates: Vec<&String> = input
                .nodes
                .iter()
                .filter(|(id, n)| {
                    n.usable()
                        && !b.replicas.contains(id)
                        && !names.contains(n.node_name.as_str())
                        && !pending.contains(&(id.to_string(), k.0, k.1))
                })
                .map(|(id, _)| id)
                .collect();
            candidates.sort_by_key(|id| rank(k, id));
            (candidates.first()?.to_string(), false)
        }
    };
    let limit = input.cfg.limit;
    let free = |dn: &String| busy.get(dn).copied().unwrap_or(0) < limit;
    if !free(&sources[0]) || !free(&target) {
        return None;
    }
    *busy.entry(target.clone()).or_default() += 1;
    *busy.entry(sources[0].clone()).or_default() += 1;
    Some(Copy {
        id: b.id,
        size: b.size,
        target,
        sources,
        healthy: r.good.len(),
        in_place,
    })
}

/// Step 3 of a block with enough healthy replicas: the key lists exactly
/// those (the lowest-ranked excess ones deleted), with the replicas of
/// unknown fate and in maintenance; lost and repaired-elsewhere replicas
/// are deleted; replicas of leaving datanodes drop out of the key (their
/// data stays: the datanode is going away). `None` when the list stays.
fn trim(
    b: &BlockRow,
    r: &Sorted<'_>,
    adopted: &[&str],
    status: &mut ReplicationStatusResponse,
) -> Option<RowUpdate> {
    let k = key_of(&b.id);
    let mut keep: Vec<&str> = r.good.clone();
    let mut delete_on: Vec<String> = Vec::new();
    let excess = r.good.len().saturating_sub(b.replication as usize);
    if excess > 0 {
        status.over_replicated += 1;
        keep.sort_by_key(|d| std::cmp::Reverse(rank(k, d)));
        let removable = keep.len().min(excess);
        delete_on.extend(keep.drain(..removable).map(str::to_string));
    } else {
        status.healthy += 1;
    }
    keep.extend(r.unknown.iter().chain(&r.maint_live).chain(&r.maint_away));
    delete_on.extend(r.lost.iter().chain(&r.repair_here).map(|d| d.to_string()));
    let mut listed: Vec<String> = b
        .replicas
        .iter()
        .filter(|d| keep.contains(&d.as_str()))
        .cloned()
        .collect();
    listed.extend(
        adopted
            .iter()
            .filter(|d| keep.contains(d))
            .map(|d| d.to_string()),
    );
    (listed != b.replicas && !listed.is_empty()).then(|| RowUpdate {
        row: b.row.clone(),
        id: b.id,
        expected: b.replicas.clone(),
        new: listed,
        delete_on,
    })
}

/// Decides one pass: pure, no I/O. `busy` counts copies per datanode (the
/// ones under way on entry; the plan's own are added).
pub(crate) fn plan(input: &PassInput<'_>, busy: &mut HashMap<String, usize>) -> Plan {
    let mut plan = Plan::default();
    let mut at_risk: Vec<BlockHealth> = Vec::new();
    for b in &input.snap.blocks {
        let k = key_of(&b.id);
        let wanted = b.replication as usize;
        let mut r = sort_replicas(input, b, &mut plan.per_node);
        // Nodes already holding a counted replica.
        let counted: Vec<&str> = (r.good.iter())
            .chain(&r.unknown)
            .chain(&r.maint_live)
            .chain(&r.maint_away)
            .copied()
            .collect();
        let mut names: HashSet<&str> = counted
            .iter()
            .filter_map(|d| input.nodes.get(*d).map(|n| n.node_name.as_str()))
            .collect();
        if names.len() < counted.len() {
            plan.status.mis_replicated += 1;
        }
        let maint_counted = r.maintenance_counted(input.cfg, wanted);
        let reported = adopt_reported(input, b, r.good.len(), &mut names);
        let have = r.good.len() + r.unknown.len() + maint_counted + reported.adopted.len();
        r.good.extend(reported.adopted.iter().copied());
        for dn in &reported.extra {
            if input.in_flight.get(&k).map(String::as_str) != Some(*dn) {
                plan.orphans.entry(dn.to_string()).or_default().push(k);
            }
        }
        plan.status.blocks += 1;
        if r.good.len() + r.unknown.len() + maint_counted < wanted {
            for dn in &r.leaving {
                if let Some(e) = plan.per_node.get_mut(*dn) {
                    e.needed += 1;
                }
            }
        }
        let update = if have < wanted {
            plan.status.under_replicated += 1;
            plan.short.insert(k);
            let sources: Vec<String> = (r.good.iter())
                .chain(&r.leaving)
                .chain(&r.maint_live)
                .map(|d| d.to_string())
                .collect();
            if sources.is_empty() {
                plan.status.missing += 1;
            }
            if at_risk.len() < 4 * TOP || r.good.len() < 2 {
                at_risk.push(BlockHealth {
                    block: Some(b.id),
                    key: b.key.clone(),
                    wanted: wanted as u32,
                    healthy: r.good.len() as u32,
                    problems: r.problems.clone(),
                });
            }
            plan.copies
                .extend(choose_copy(input, b, &r, &names, sources, busy));
            // Still short: adopted copies join the list, nothing leaves it.
            (!reported.adopted.is_empty()).then(|| {
                let mut new = b.replicas.clone();
                new.extend(reported.adopted.iter().map(|d| d.to_string()));
                RowUpdate {
                    row: b.row.clone(),
                    id: b.id,
                    expected: b.replicas.clone(),
                    new,
                    delete_on: Vec::new(),
                }
            })
        } else {
            trim(b, &r, &reported.adopted, &mut plan.status)
        };
        plan.updates.extend(update);
    }
    find_orphans(input, &mut plan.orphans);
    plan.decommissioned = decommissioned(input, &plan.per_node);
    at_risk.sort_by_key(|h| (h.healthy, std::cmp::Reverse(h.wanted)));
    at_risk.truncate(TOP);
    plan.status.top = at_risk;
    plan.status.reports_complete = (input.nodes.iter())
        .filter(|(_, n)| n.health == NodeState::Healthy)
        .all(|(id, _)| input.reports.contains_key(id));
    plan
}

/// Step 4: replicas no key, session or deletion knows, of blocks allocated
/// before the snapshot (a newer block may simply be unknown to it).
fn find_orphans(input: &PassInput<'_>, orphans: &mut HashMap<String, Vec<BlockKey>>) {
    let snap = input.snap;
    for (dn, held) in input.reports {
        for k in held.blocks.iter().chain(&held.damaged) {
            if k.1 < snap.allocated_below
                && !snap.referenced.contains(k)
                && !input.in_flight.contains_key(k)
            {
                orphans.entry(dn.clone()).or_default().push(*k);
            }
        }
    }
}

/// Step 5: decommissioning datanodes no block needs any more, with no copy
/// to them under way.
fn decommissioned(input: &PassInput<'_>, load: &HashMap<String, NodeLoad>) -> Vec<String> {
    (input.nodes.iter())
        .filter(|(dn, n)| {
            n.op == OperationalState::Decommissioning
                && load.get(*dn).is_none_or(|e| e.needed == 0)
                && !input.in_flight.values().any(|t| t == *dn)
        })
        .map(|(dn, _)| dn.clone())
        .collect()
}

/// What the last pass found: its counts, and per datanode the replicas
/// listed on it and how many of those are still needed.
type LastPass = (ReplicationStatusResponse, HashMap<String, NodeLoad>);

/// The running replication manager.
pub(crate) struct ReplicationManager {
    store: Arc<OmStore>,
    registry: Arc<Registry>,
    replicas: Arc<ReplicaMap>,
    metrics: Arc<Metrics>,
    cfg: ReplicationConfig,
    tokens: Option<(ozone_common::token::TokenSigner, Duration)>,
    in_flight: Mutex<HashMap<BlockKey, InFlight>>,
    status: Mutex<LastPass>,
    channels: Arc<DatanodeChannels>,
}

impl ReplicationManager {
    /// A manager over the OM's store, registry and replica reports.
    pub(crate) fn new(
        store: Arc<OmStore>,
        registry: Arc<Registry>,
        replicas: Arc<ReplicaMap>,
        metrics: Arc<Metrics>,
        cfg: ReplicationConfig,
        tokens: Option<(ozone_common::token::TokenSigner, Duration)>,
        channels: Arc<DatanodeChannels>,
    ) -> Self {
        Self {
            store,
            registry,
            replicas,
            metrics,
            cfg,
            tokens,
            in_flight: Mutex::new(HashMap::new()),
            status: Mutex::new(Default::default()),
            channels,
        }
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<BlockKey, InFlight>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last pass's counts (copy counters are live), the `top` blocks
    /// at most risk.
    pub(crate) fn status(&self, top: usize) -> ReplicationStatusResponse {
        let mut s = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        s.top.truncate(top);
        s.copies_in_flight = self.flights().len() as u64;
        s.copies_done = self.metrics.copies_done.get();
        s.copies_failed = self.metrics.copies_failed.get();
        s.bytes_copied = self.metrics.bytes_copied.get();
        s
    }

    /// Replicas listed on `dn`, those still needed, copies from or to it.
    pub(crate) fn node_status(&self, dn: &str) -> (u64, u64, u64) {
        let NodeLoad { listed: n, needed } = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .get(dn)
            .copied()
            .unwrap_or_default();
        let flights = self
            .flights()
            .values()
            .filter(|f| f.target == dn || f.source == dn)
            .count() as u64;
        (n, needed, flights)
    }

    /// Runs passes until `stop` turns true.
    pub(crate) async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            // A restarted OM first hears from the datanodes.
            if self.registry.warming_up().is_some() {
                continue;
            }
            if let Err(e) = self.clone().pass().await {
                tracing::warn!("replication pass failed: {e}");
            }
        }
    }

    /// One pass: read, decide, act.
    pub(crate) async fn pass(self: Arc<Self>) -> Result<(), crate::store::OmError> {
        let s = self.store.clone();
        let (snap, bad) = tokio::task::spawn_blocking(move || {
            Ok::<_, crate::store::OmError>((s.block_snapshot()?, s.all_bad_replicas()?))
        })
        .await??;
        let nodes: HashMap<String, NodeView> = self
            .registry
            .all()
            .into_iter()
            .map(|d| {
                let view = NodeView {
                    address: d.address.clone(),
                    node_name: d.node_name.clone(),
                    health: NodeState::try_from(d.state).unwrap_or(NodeState::Dead),
                    op: OperationalState::try_from(d.operational_state)
                        .unwrap_or(OperationalState::InService),
                };
                (d.id, view)
            })
            .collect();
        let (in_flight, mut busy) = {
            let mut flights = self.flights();
            flights.retain(|_, f| f.started.elapsed() < self.cfg.timeout);
            let mut busy: HashMap<String, usize> = HashMap::new();
            for f in flights.values() {
                *busy.entry(f.target.clone()).or_default() += 1;
                *busy.entry(f.source.clone()).or_default() += 1;
            }
            let targets: HashMap<BlockKey, String> = flights
                .iter()
                .map(|(k, f)| (*k, f.target.clone()))
                .collect();
            (targets, busy)
        };
        let unknown_is_dead = self.registry.age() > self.registry.dead_after();
        let plan = self.replicas.with(|reports| {
            let input = PassInput {
                snap: &snap,
                nodes: &nodes,
                reports,
                bad: &bad,
                in_flight: &in_flight,
                cfg: &self.cfg,
                now_ms: ozone_common::now_ms(),
                unknown_is_dead,
            };
            plan(&input, &mut busy)
        });
        self.metrics.replication_passes.inc();
        let st = &plan.status;
        self.metrics
            .under_replicated
            .set(st.under_replicated as i64);
        self.metrics.over_replicated.set(st.over_replicated as i64);
        self.metrics.mis_replicated.set(st.mis_replicated as i64);
        self.metrics.missing.set(st.missing as i64);
        if st.under_replicated > 0 || st.over_replicated > 0 || !plan.copies.is_empty() {
            tracing::info!(
                blocks = st.blocks,
                under = st.under_replicated,
                over = st.over_replicated,
                missing = st.missing,
                copies = plan.copies.len(),
                "replication pass"
            );
        }
        // A block no longer short needs no copy in flight.
        self.flights().retain(|k, _| plan.short.contains(k));
        let updates = plan.updates.clone();
        let orphans = plan.orphans.clone();
        let decommissioned = plan.decommissioned.clone();
        let s = self.store.clone();
        let done = tokio::task::spawn_blocking(move || {
            let mut applied = 0usize;
            for u in &updates {
                if s.set_replicas(&u.row, &u.id, &u.expected, &u.new, &u.delete_on)? {
                    applied += 1;
                }
            }
            for (dn, ks) in &orphans {
                s.queue_replica_deletes(dn, ks)?;
            }
            s.sync()?;
            Ok::<_, crate::store::OmError>(applied)
        })
        .await??;
        if done > 0 || !plan.orphans.is_empty() {
            tracing::info!(
                replica_lists = done,
                orphans = plan.orphans.values().map(Vec::len).sum::<usize>(),
                "replica lists updated"
            );
        }
        for dn in decommissioned {
            self.set_operational(&dn, OperationalState::Decommissioned)
                .await?;
            tracing::info!(datanode = %dn, "decommissioned: no block needs its replicas");
        }
        {
            let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
            st.0 = plan.status.clone();
            st.0.last_pass_ms = ozone_common::now_ms();
            st.1 = plan.per_node.clone();
        }
        for c in plan.copies {
            self.start_copy(c, &nodes);
        }
        self.metrics
            .copies_in_flight
            .set(self.flights().len() as i64);
        Ok(())
    }

    /// Sets and persists a datanode's operational state.
    pub(crate) async fn set_operational(
        &self,
        dn: &str,
        state: OperationalState,
    ) -> Result<(), crate::store::OmError> {
        self.registry.set_operational(dn, state);
        let s = self.store.clone();
        let id = dn.to_string();
        tokio::task::spawn_blocking(move || {
            s.set_operational_state(&id, state)?;
            s.sync()
        })
        .await?
    }

    /// Block recovery of `block`, the last block of a file whose lease is
    /// recovered (see [`crate::block_recovery`]).
    pub(crate) async fn recover_block(
        &self,
        block: &KeyBlock,
    ) -> Option<crate::block_recovery::RecoveredBlock> {
        let signer = self.tokens.as_ref().map(|(s, _)| s);
        crate::block_recovery::recover(&self.channels, &self.registry, signer, block).await
    }

    fn start_copy(self: &Arc<Self>, c: Copy, nodes: &HashMap<String, NodeView>) {
        let Some(target) = nodes.get(&c.target) else {
            return;
        };
        let Some(mut client) = self.channels.client(&target.address) else {
            return;
        };
        let k = key_of(&c.id);
        self.flights().insert(
            k,
            InFlight {
                target: c.target.clone(),
                source: c.sources[0].clone(),
                started: Instant::now(),
            },
        );
        let req = ReplicateBlockRequest {
            block: Some(c.id),
            sources: c
                .sources
                .iter()
                .filter_map(|s| nodes.get(s).map(|n| n.address.clone()))
                .collect(),
            token: self
                .tokens
                .as_ref()
                .map(|(signer, ttl)| {
                    signer.sign(
                        &c.id,
                        "READ",
                        ozone_common::now_ms() + ttl.as_millis() as u64,
                    )
                })
                .unwrap_or_default(),
            size: c.size,
            auth: None,
        };
        let mut req = req;
        if let Some((signer, _)) = &self.tokens {
            req.auth = Some(ozone_common::token::sign_request(
                signer,
                "ReplicateBlock",
                &c.target,
                &req,
            ));
        }
        tracing::debug!(block = %c.id.display(), target = %c.target, in_place = c.in_place, healthy = c.healthy, "copy asked");
        let me = self.clone();
        let target_address = target.address.clone();
        tokio::spawn(async move {
            let address = target_address;
            let answer = tokio::time::timeout(me.cfg.timeout, client.replicate_block(req))
                .await
                .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in time")));
            match answer {
                Ok(r) => {
                    let r = r.into_inner();
                    if r.copied > 0 || !r.source.is_empty() {
                        me.metrics.copies_done.inc();
                        me.metrics.bytes_copied.inc_by(r.copied);
                    }
                    me.replicas.add(&c.target, &c.id);
                    let s = me.store.clone();
                    let (id, dn) = (c.id, c.target.clone());
                    let _ =
                        tokio::task::spawn_blocking(move || s.clear_bad_replica(&id, &dn)).await;
                    me.flights().remove(&k);
                }
                Err(e) if e.code() == tonic::Code::AlreadyExists => {
                    // The datanode is copying it already (asked by an OM
                    // before a restart): wait for its report.
                }
                Err(e) => {
                    if e.code() == tonic::Code::Unavailable {
                        me.channels.forget(&address);
                    }
                    me.metrics.copies_failed.inc();
                    tracing::warn!(block = %c.id.display(), target = %c.target, "copy failed: {}", e.message());
                    me.flights().remove(&k);
                }
            }
            me.metrics.copies_in_flight.set(me.flights().len() as i64);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn view(name: &str, health: NodeState, op: OperationalState) -> NodeView {
        NodeView {
            address: format!("{name}:1"),
            node_name: name.into(),
            health,
            op,
        }
    }

    pub(super) fn nodes(n: usize) -> HashMap<String, NodeView> {
        (0..n)
            .map(|i| {
                (
                    format!("d{i}"),
                    view(
                        &format!("n{i}"),
                        NodeState::Healthy,
                        OperationalState::InService,
                    ),
                )
            })
            .collect()
    }

    pub(super) fn block(local: u64, replicas: &[&str]) -> BlockRow {
        BlockRow {
            row: RowRef::Key(format!("v/b/k{local}")),
            id: BlockId {
                container_id: 1,
                local_id: local,
                commit_seq: 0,
            },
            size: 10,
            replication: 3,
            replicas: replicas.iter().map(|s| s.to_string()).collect(),
            key: format!("/v/b/k{local}"),
            committed_ms: 0,
        }
    }

    pub(super) fn snap(blocks: Vec<BlockRow>) -> BlockSnapshot {
        BlockSnapshot {
            referenced: blocks.iter().map(|b| key_of(&b.id)).collect(),
            allocated_below: 1000,
            blocks,
            ..Default::default()
        }
    }

    pub(super) fn reports(of: &[(&str, &[u64])]) -> HashMap<String, Held> {
        of.iter()
            .map(|(dn, ls)| {
                let mut h = Held::default();
                h.blocks.extend(ls.iter().map(|l| (1, *l)));
                (dn.to_string(), h)
            })
            .collect()
    }

    pub(super) fn cfg() -> ReplicationConfig {
        ReplicationConfig {
            interval: Duration::from_secs(1),
            limit: 2,
            timeout: Duration::from_secs(60),
            maintenance_minimum: 2,
            report_grace: Duration::from_secs(5),
        }
    }

    fn run(
        s: &BlockSnapshot,
        n: &HashMap<String, NodeView>,
        r: &HashMap<String, Held>,
        bad: &BadReplicas,
    ) -> Plan {
        let input = PassInput {
            snap: s,
            nodes: n,
            reports: r,
            bad,
            in_flight: &HashMap::new(),
            cfg: &cfg(),
            now_ms: 60_000,
            unknown_is_dead: true,
        };
        plan(&input, &mut HashMap::new())
    }

    #[test]
    fn a_dead_datanode_is_replaced_most_urgent_first_within_the_limit() {
        let mut n = nodes(5);
        n.get_mut("d0").unwrap().health = NodeState::Dead;
        n.get_mut("d1").unwrap().health = NodeState::Dead;
        let s = snap(vec![
            block(1, &["d0", "d2", "d3"]),
            block(2, &["d0", "d1", "d2"]),
            block(3, &["d0", "d3", "d4"]),
            block(4, &["d2", "d3", "d4"]),
        ]);
        let r = reports(&[("d2", &[1, 2, 4]), ("d3", &[1, 3, 4]), ("d4", &[3, 4])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert_eq!(p.status.under_replicated, 3);
        assert_eq!(p.status.healthy, 1);
        // Block 2 (one healthy replica) leads the risk list.
        assert_eq!(p.status.top[0].block.unwrap().local_id, 2);
        for c in &p.copies {
            let b = &s.blocks[c.id.local_id as usize - 1];
            assert!(!b.replicas.contains(&c.target), "{c:?}");
            assert!(c.sources.iter().all(|s| s != "d0" && s != "d1"));
        }
        // Nothing is dropped from a key before the copies exist.
        assert!(p.updates.is_empty());
        // At most `limit` per datanode.
        let mut per: HashMap<&str, usize> = HashMap::new();
        for c in &p.copies {
            *per.entry(&c.target).or_default() += 1;
            *per.entry(&c.sources[0]).or_default() += 1;
        }
        assert!(per.values().all(|&v| v <= 2), "{per:?}");
    }

    #[test]
    fn a_reported_copy_is_adopted_and_the_lost_replica_dropped() {
        let mut n = nodes(4);
        n.get_mut("d0").unwrap().health = NodeState::Dead;
        let s = snap(vec![block(1, &["d0", "d1", "d2"])]);
        let r = reports(&[("d1", &[1]), ("d2", &[1]), ("d3", &[1])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert!(p.copies.is_empty());
        assert_eq!(p.updates.len(), 1);
        assert_eq!(p.updates[0].new, ["d1", "d2", "d3"]);
        assert_eq!(p.updates[0].delete_on, ["d0"]);
        assert!(p.orphans.is_empty());
    }

    #[test]
    fn damaged_and_missing_replicas_are_replaced_in_place() {
        let n = nodes(3);
        let s = snap(vec![
            block(1, &["d0", "d1", "d2"]),
            block(2, &["d0", "d1", "d2"]),
        ]);
        let mut r = reports(&[("d0", &[1, 2]), ("d1", &[1, 2]), ("d2", &[])]);
        r.get_mut("d0").unwrap().blocks.remove(&(1, 1));
        r.get_mut("d0").unwrap().damaged.insert((1, 1));
        let p = run(&s, &n, &r, &HashSet::new());
        let mut targets: Vec<(u64, &str, bool)> = p
            .copies
            .iter()
            .map(|c| (c.id.local_id, c.target.as_str(), c.in_place))
            .collect();
        targets.sort();
        assert_eq!(targets, [(1, "d0", true), (2, "d2", true)]);
        // A reader's report counts too.
        let bad: BadReplicas = [((1, 2), "d1".to_string())].into();
        let r = reports(&[("d0", &[1, 2]), ("d1", &[1, 2]), ("d2", &[1, 2])]);
        let p = run(&s, &n, &r, &bad);
        assert_eq!(p.copies.len(), 1);
        assert_eq!(
            (p.copies[0].id.local_id, p.copies[0].target.as_str()),
            (2, "d1")
        );
    }

    #[test]
    fn a_young_key_is_not_missing_before_its_report() {
        let n = nodes(3);
        let mut b = block(1, &["d0", "d1", "d2"]);
        b.committed_ms = 58_000;
        let s = snap(vec![b]);
        let r = reports(&[("d0", &[1]), ("d1", &[1]), ("d2", &[])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert!(p.copies.is_empty());
        assert_eq!(p.status.healthy, 1);
    }

    #[test]
    fn a_copy_is_kept_while_another_replica_is_of_unknown_fate() {
        let mut n = nodes(4);
        n.get_mut("d0").unwrap().health = NodeState::Stale;
        let s = snap(vec![block(1, &["d0", "d1", "d2"])]);
        let r = reports(&[("d1", &[1]), ("d2", &[1]), ("d3", &[1])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert!(p.orphans.is_empty(), "{:?}", p.orphans);
        assert!(p.copies.is_empty());
        assert_eq!(p.updates[0].new, ["d0", "d1", "d2", "d3"]);
        assert!(p.updates[0].delete_on.is_empty());
    }

    #[test]
    fn excess_and_orphan_replicas_are_deleted() {
        let n = nodes(5);
        let s = snap(vec![block(1, &["d0", "d1", "d2", "d3"])]);
        let r = reports(&[
            ("d0", &[1]),
            ("d1", &[1]),
            ("d2", &[1]),
            ("d3", &[1]),
            ("d4", &[1, 7, 5000]),
        ]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert_eq!(p.status.over_replicated, 1);
        assert_eq!(p.updates[0].new.len(), 3);
        assert_eq!(p.updates[0].delete_on.len(), 1);
        let mut o = p.orphans["d4"].clone();
        o.sort();
        // Block 1 is excess there, 7 is unknown, 5000 may be newer than the snapshot.
        assert_eq!(o, [(1, 1), (1, 7)]);
    }

    #[test]
    fn decommissioning_copies_first_then_completes() {
        let mut n = nodes(4);
        n.get_mut("d0").unwrap().op = OperationalState::Decommissioning;
        let s = snap(vec![block(1, &["d0", "d1", "d2"])]);
        let r = reports(&[("d0", &[1]), ("d1", &[1]), ("d2", &[1])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert_eq!(p.copies.len(), 1);
        assert_eq!(p.copies[0].target, "d3");
        assert!(p.decommissioned.is_empty());
        assert_eq!(
            p.per_node["d0"],
            NodeLoad {
                listed: 1,
                needed: 1
            }
        );
        let r = reports(&[("d0", &[1]), ("d1", &[1]), ("d2", &[1]), ("d3", &[1])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert!(p.copies.is_empty());
        assert_eq!(p.updates[0].new, ["d1", "d2", "d3"]);
        assert!(
            p.updates[0].delete_on.is_empty(),
            "a leaving node keeps its data"
        );
        assert_eq!(p.decommissioned, ["d0"]);
    }

    #[test]
    fn maintenance_holds_off_copies_while_enough_remain() {
        let mut n = nodes(4);
        n.get_mut("d0").unwrap().op = OperationalState::InMaintenance;
        n.get_mut("d0").unwrap().health = NodeState::Dead;
        let s = snap(vec![block(1, &["d0", "d1", "d2"])]);
        let r = reports(&[("d1", &[1]), ("d2", &[1])]);
        let p = run(&s, &n, &r, &HashSet::new());
        assert!(p.copies.is_empty() && p.updates.is_empty());
        // With one healthy replica left, maintenance no longer counts.
        n.get_mut("d2").unwrap().health = NodeState::Dead;
        let p = run(&s, &n, &r, &HashSet::new());
        assert_eq!(p.copies.len(), 1);
    }
}

/// One test per step of a pass, each on the step alone.
#[cfg(test)]
mod step_tests {
    use super::tests::*;
    use super::*;

    fn input<'a>(
        snap: &'a BlockSnapshot,
        nodes: &'a HashMap<String, NodeView>,
        reports: &'a HashMap<String, Held>,
        bad: &'a BadReplicas,
        in_flight: &'a HashMap<BlockKey, String>,
        cfg: &'a ReplicationConfig,
    ) -> PassInput<'a> {
        PassInput {
            snap,
            nodes,
            reports,
            bad,
            in_flight,
            cfg,
            now_ms: 60_000,
            unknown_is_dead: false,
        }
    }

    #[test]
    fn replicas_are_sorted_by_what_they_are_worth() {
        let mut n = nodes(7);
        n.get_mut("d1").unwrap().health = NodeState::Dead;
        n.get_mut("d2").unwrap().health = NodeState::Stale;
        n.get_mut("d3").unwrap().op = OperationalState::InMaintenance;
        n.get_mut("d4").unwrap().op = OperationalState::Decommissioning;
        let b = block(1, &["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d9"]);
        let s = snap(vec![b.clone()]);
        // d5 no longer holds the block; d6 was reported bad; d9 is unknown.
        let r = reports(&[
            ("d0", &[1]),
            ("d3", &[1]),
            ("d4", &[1]),
            ("d5", &[]),
            ("d6", &[1]),
        ]);
        let bad: BadReplicas = [((1, 1), "d6".to_string())].into();
        let (f, c) = (HashMap::new(), cfg());
        let mut load = HashMap::new();
        let sorted = sort_replicas(&input(&s, &n, &r, &bad, &f, &c), &b, &mut load);
        assert_eq!(sorted.good, ["d0"]);
        assert_eq!(sorted.unknown, ["d2", "d9"]);
        assert_eq!(sorted.maint_live, ["d3"]);
        assert_eq!(sorted.leaving, ["d4"]);
        assert_eq!(sorted.repair_here, ["d5", "d6"]);
        assert_eq!(sorted.lost, ["d1"]);
        assert_eq!(load["d0"].listed, 1);
        assert!(!load.contains_key("d9"), "an unknown datanode has no load");
    }

    #[test]
    fn maintenance_counts_only_while_enough_others_are_live() {
        let c = cfg();
        let mut r = Sorted {
            good: vec!["d0"],
            maint_live: vec!["d1"],
            maint_away: vec!["d2"],
            ..Default::default()
        };
        assert_eq!(r.maintenance_counted(&c, 3), 2);
        r.maint_live.clear();
        assert_eq!(r.maintenance_counted(&c, 3), 0);
    }

    #[test]
    fn a_reported_copy_is_adopted_only_when_needed_and_on_a_node_of_its_own() {
        let mut n = nodes(5);
        // d4 runs on d0's node.
        n.get_mut("d4").unwrap().node_name = "n0".into();
        let b = block(1, &["d0", "d1"]);
        let s = snap(vec![b.clone()]);
        let r = reports(&[("d2", &[1]), ("d3", &[1]), ("d4", &[1])]);
        let (bad, f, c) = (BadReplicas::new(), HashMap::new(), cfg());
        let inp = input(&s, &n, &r, &bad, &f, &c);
        let mut names: HashSet<&str> = ["n0", "n1"].into();
        let got = adopt_reported(&inp, &b, 2, &mut names);
        assert_eq!(got.adopted.len(), 1, "one copy makes three");
        assert!(!got.adopted.contains(&"d4"), "never beside another replica");
        let other = if got.adopted[0] == "d2" { "d3" } else { "d2" };
        assert!(got.extra.contains(&other), "the copy not needed is extra");
    }

    #[test]
    fn a_copy_goes_in_place_first_and_waits_for_busy_datanodes() {
        let n = nodes(5);
        let b = block(1, &["d0", "d1", "d2"]);
        let s = snap(vec![b.clone()]);
        let r = reports(&[]);
        let (bad, f, c) = (BadReplicas::new(), HashMap::new(), cfg());
        let inp = input(&s, &n, &r, &bad, &f, &c);
        let names: HashSet<&str> = ["n0", "n1"].into();
        let sorted = Sorted {
            good: vec!["d0", "d1"],
            repair_here: vec!["d2"],
            ..Default::default()
        };
        let src = || vec!["d0".to_string(), "d1".to_string()];
        let mut busy = HashMap::new();
        let copy = choose_copy(&inp, &b, &sorted, &names, src(), &mut busy).unwrap();
        assert_eq!((copy.target.as_str(), copy.in_place), ("d2", true));
        assert_eq!((busy["d0"], busy["d2"]), (1, 1));
        // The source at its limit: no copy now.
        busy.insert("d0".into(), c.limit);
        assert!(choose_copy(&inp, &b, &sorted, &names, src(), &mut busy).is_none());
        // Elsewhere: a datanode on a node holding no replica.
        let sorted = Sorted {
            good: vec!["d0", "d1"],
            ..Default::default()
        };
        let mut busy = HashMap::new();
        let copy = choose_copy(&inp, &b, &sorted, &names, src(), &mut busy).unwrap();
        assert!(["d3", "d4"].contains(&copy.target.as_str()), "{copy:?}");
        assert!(!copy.in_place);
    }

    #[test]
    fn trimming_keeps_the_wanted_healthy_replicas_and_deletes_the_rest() {
        let b = block(1, &["d0", "d1", "d2", "d3", "d4"]);
        let sorted = Sorted {
            good: vec!["d0", "d1", "d2", "d3"],
            lost: vec!["d4"],
            ..Default::default()
        };
        let mut status = ReplicationStatusResponse::default();
        let u = trim(&b, &sorted, &[], &mut status).unwrap();
        assert_eq!(u.new.len(), 3);
        assert_eq!(u.delete_on.len(), 2, "one excess and one lost: {u:?}");
        assert!(u.delete_on.contains(&"d4".to_string()));
        assert_eq!(status.over_replicated, 1);
        // Exactly the wanted replicas: nothing changes.
        let b = block(2, &["d0", "d1", "d2"]);
        let sorted = Sorted {
            good: vec!["d0", "d1", "d2"],
            ..Default::default()
        };
        assert!(trim(&b, &sorted, &[], &mut status).is_none());
        assert_eq!(status.healthy, 1);
    }

    #[test]
    fn orphans_are_only_old_unreferenced_replicas_with_no_copy_under_way() {
        let n = nodes(3);
        let mut s = snap(vec![block(1, &["d0"])]);
        s.allocated_below = 10;
        // 1: referenced; 5: no key knows it; 6: a copy under way; 20: newer
        // than the snapshot.
        let r = reports(&[("d1", &[1, 5, 6, 20])]);
        let f: HashMap<BlockKey, String> = [((1, 6), "d1".to_string())].into();
        let (bad, c) = (BadReplicas::new(), cfg());
        let mut orphans = HashMap::new();
        find_orphans(&input(&s, &n, &r, &bad, &f, &c), &mut orphans);
        assert_eq!(orphans["d1"], [(1, 5)]);
    }

    #[test]
    fn a_decommission_completes_once_nothing_needs_the_datanode() {
        let mut n = nodes(3);
        n.get_mut("d0").unwrap().op = OperationalState::Decommissioning;
        n.get_mut("d1").unwrap().op = OperationalState::Decommissioning;
        n.get_mut("d2").unwrap().op = OperationalState::Decommissioning;
        let s = snap(vec![]);
        let r = reports(&[]);
        let f: HashMap<BlockKey, String> = [((1, 1), "d2".to_string())].into();
        let (bad, c) = (BadReplicas::new(), cfg());
        let load: HashMap<String, NodeLoad> = [(
            "d1".to_string(),
            NodeLoad {
                listed: 4,
                needed: 1,
            },
        )]
        .into();
        let done = decommissioned(&input(&s, &n, &r, &bad, &f, &c), &load);
        assert_eq!(done, ["d0"], "d1 is still needed, d2 receives a copy");
    }
}

#[cfg(test)]
mod rank_tests {
    use super::rank;

    /// The order is part of the OM's behaviour across restarts (a restarted
    /// OM asks the same datanode for a copy): pinned values.
    #[test]
    fn rank_is_fixed_and_spreads() {
        assert_eq!(rank((1, 2), "dn-a"), rank((1, 2), "dn-a"));
        assert_ne!(rank((1, 2), "dn-a"), rank((1, 2), "dn-b"));
        assert_ne!(rank((1, 2), "dn-a"), rank((1, 3), "dn-a"));
        assert_eq!(rank((1, 2), "dn-a"), 16_534_731_623_653_799_606);
    }
}
