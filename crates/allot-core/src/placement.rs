//! Placement shared by every policy (rules PLACE-1 … PLACE-7).
//!
//! * PLACE-1 gang: a workload gets all its GPUs at once or none.
//! * PLACE-2 `nodes = k > 0` means exactly k nodes with `gpus / k` each;
//!   `nodes = 0` lets placement choose. A workload never spans pools (a pool
//!   is one GPU type and one network fabric).
//! * PLACE-3 multi-node workloads go inside one rack when some rack can hold
//!   them; otherwise they span racks of one pool.
//! * PLACE-4 best fit: among feasible choices, the one leaving the fewest
//!   free GPUs on the nodes it touches, so whole nodes stay free for large
//!   jobs. Ties go to the lowest pool, rack and node index.
//! * PLACE-5 a GPU-type constraint restricts the pools.
//! * PLACE-6 only `Up` nodes receive new work.
//! * PLACE-7 on a pool with `placement = "spread"`, a `nodes = 0` workload
//!   that fits on no single node takes its GPUs from several nodes of the
//!   pool (as a multi-node `nodes = 0` workload does), so that it starts
//!   whenever the pool has that many free GPUs: count-based placement, as
//!   in Tiresias' `count` scheme and most academic simulators.
//! * MNT-5 nodes added at run time are placed exactly like laid-out ones:
//!   a pool's nodes are its laid-out range and its added nodes, its racks
//!   those of [`Pool::racks`] (a rack of added nodes has a fresh id, so a
//!   rack is not a run of node ids once nodes were added). A pool without
//!   added nodes keeps the range walk.
//!
//! In a fleet of several clusters (FLEET-1, FLEET-2):
//!
//! * FLEET-1 a workload runs only on the clusters it may use (its
//!   `clusters`, default any); since it never spans pools, it never spans
//!   clusters.
//! * FLEET-2 among eligible clusters: the best fit now (PLACE-3, PLACE-4:
//!   inside a rack, fewest free GPUs left on the touched nodes), then the
//!   cluster with the most free GPUs of the pool's type, then config order
//!   (pool, rack, node index).

use std::fmt;

pub use crate::allocation::Allocation;
use crate::cluster::{Cluster, ClusterId, Health, NodeId, Pool, PoolId, PoolPlacement};
use crate::rule::Rule;
use crate::words::count;
use crate::workload::WorkloadSpec;

/// Free GPUs per node, as a working copy a policy can consume during a pass.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FreeMap {
    pub free: Vec<u64>,
    pub usable: Vec<bool>,
    /// Free GPUs on usable nodes, per pool.
    pub pool_free: Vec<u32>,
    /// K8S-11: GPUs set aside for work Allot does not manage, per pool
    /// (kept by [`crate::State`]; read to say why a workload waits).
    pub pool_outside: Vec<u32>,
}

impl FreeMap {
    /// All GPUs free, all nodes up.
    pub fn new(cluster: &Cluster) -> FreeMap {
        let free = cluster.nodes.iter().map(|n| full_mask(n.gpus)).collect();
        let usable = vec![true; cluster.nodes.len()];
        let pool_free = cluster.pools.iter().map(|p| p.nodes * p.gpus_per_node).collect();
        FreeMap { free, usable, pool_free, pool_outside: vec![0; cluster.pools.len()] }
    }

    /// MNT-5: node `n`, just added to the cluster (the last node), with all
    /// its GPUs free and usable.
    pub fn add_node(&mut self, cluster: &Cluster, n: NodeId) {
        let node = cluster.node(n);
        debug_assert_eq!(n.0 as usize, self.free.len(), "an added node is appended");
        self.free.push(full_mask(node.gpus));
        self.usable.push(true);
        self.pool_free[node.pool.0 as usize] += node.gpus;
    }

    /// Makes this map a copy of `other`, reusing its buffers.
    pub fn copy_from(&mut self, other: &FreeMap) {
        self.free.clone_from(&other.free);
        self.usable.clone_from(&other.usable);
        self.pool_free.clone_from(&other.pool_free);
        self.pool_outside.clone_from(&other.pool_outside);
    }

    pub fn free_on(&self, n: NodeId) -> u32 {
        if self.usable[n.0 as usize] { self.free[n.0 as usize].count_ones() } else { 0 }
    }

    /// Marks the allocation's GPUs as used. They must be free.
    pub fn take(&mut self, cluster: &Cluster, a: &Allocation) {
        for &(n, m) in &a.parts {
            let i = n.0 as usize;
            debug_assert_eq!(self.free[i] & m, m, "GPUs taken twice on node {i}");
            self.free[i] &= !m;
            if self.usable[i] {
                self.pool_free[cluster.nodes[i].pool.0 as usize] -= m.count_ones();
            }
        }
    }

    /// Returns the allocation's GPUs.
    pub fn give(&mut self, cluster: &Cluster, a: &Allocation) {
        for &(n, m) in &a.parts {
            let i = n.0 as usize;
            debug_assert_eq!(self.free[i] & m, 0, "GPUs returned twice on node {i}");
            self.free[i] |= m;
            if self.usable[i] {
                self.pool_free[cluster.nodes[i].pool.0 as usize] += m.count_ones();
            }
        }
    }

    /// Changes whether a node may receive work.
    pub fn set_usable(&mut self, cluster: &Cluster, n: NodeId, usable: bool) {
        let i = n.0 as usize;
        if self.usable[i] == usable {
            return;
        }
        let p = cluster.nodes[i].pool.0 as usize;
        let c = self.free[i].count_ones();
        if usable {
            self.pool_free[p] += c;
        } else {
            self.pool_free[p] -= c;
        }
        self.usable[i] = usable;
    }

    pub fn health_usable(h: Health) -> bool {
        h == Health::Up
    }
}

pub fn full_mask(gpus: u32) -> u64 {
    if gpus >= 64 { u64::MAX } else { (1u64 << gpus) - 1 }
}

fn lowest_bits(mask: u64, k: u32) -> u64 {
    let mut out = 0u64;
    let mut m = mask;
    for _ in 0..k {
        let b = m & m.wrapping_neg();
        out |= b;
        m &= !b;
    }
    out
}

/// Why a workload could not be placed, with the numbers behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementFailure {
    pub rule: Rule,
    pub gpus: u32,
    pub nodes: u32,
    /// Free GPUs on usable nodes of the pools it may use.
    pub free_in_pools: u32,
    /// Most free GPUs in one rack of those pools.
    pub best_rack_free: u32,
    /// Most free GPUs on one node of those pools.
    pub best_node_free: u32,
    /// In a fleet of several clusters: the eligible cluster with the most
    /// free GPUs of those pools (FLEET-2), with its free and total GPUs.
    pub best_cluster: Option<(String, u32, u32)>,
    /// GPUs of those pools held by work Allot does not manage (K8S-11).
    pub held_outside: u32,
}

impl fmt::Display for PlacementFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = if self.nodes > 0 {
            format!(
                "{} on exactly {} ({} each)",
                count(self.gpus, "GPU"),
                count(self.nodes, "node"),
                self.gpus / self.nodes
            )
        } else {
            count(self.gpus, "GPU")
        };
        write!(
            f,
            "waiting for {shape}; {} free in the pools it may use, best rack has {}, best node has {}",
            self.free_in_pools, self.best_rack_free, self.best_node_free
        )?;
        if self.held_outside > 0 {
            write!(f, "; {} held by pods Allot does not manage (K8S-11)", self.held_outside)?;
        }
        match &self.best_cluster {
            Some((name, free, total)) => {
                write!(f, "; fits no eligible cluster now (FLEET-2), best is {name} with {free} of {total} GPUs free")
            }
            None => Ok(()),
        }
    }
}

/// A candidate placement: (spans racks, leftover GPUs on touched nodes,
/// fewer free GPUs of its type in its cluster (FLEET-2; 0 in a fleet of
/// one, and until another candidate ties on the first two), pool, rack).
type Score = (bool, u32, u32, u32, u32);

/// Finds GPUs for `spec` in the allowed pools, or says why there are none
/// (the numbers of the failure cost a walk over the nodes; hot paths that do
/// not need them call [`find`]).
pub fn place(
    cluster: &Cluster,
    free: &FreeMap,
    spec: &WorkloadSpec,
    allowed: &dyn Fn(PoolId) -> bool,
) -> Result<Allocation, PlacementFailure> {
    find(cluster, free, spec, allowed).ok_or_else(|| diagnose(cluster, free, spec, allowed))
}

/// Finds GPUs for `spec` in the allowed pools (PLACE-1 … PLACE-6).
pub fn find(
    cluster: &Cluster,
    free: &FreeMap,
    spec: &WorkloadSpec,
    allowed: &dyn Fn(PoolId) -> bool,
) -> Option<Allocation> {
    let mut best: Option<(Score, Allocation)> = None;
    let fleet = cluster.is_fleet();
    for (pi, pool) in cluster.pools.iter().enumerate() {
        if free.pool_free[pi] < spec.gpus {
            continue;
        }
        let pid = PoolId(pi as u32);
        if !pool.may_serve(spec.gpu_type, spec.clusters) || !allowed(pid) {
            continue;
        }
        if let Some((mut score, alloc)) = place_in_pool(cluster, free, spec, pid) {
            if let Some((s, _)) = best.as_mut() {
                // FLEET-2's tie-break is summed only when the fit ties (it
                // would cost a walk over the pools for every candidate).
                if fleet && (score.0, score.1) == (s.0, s.1) {
                    if s.2 == 0 {
                        let p = cluster.pool(PoolId(s.3));
                        s.2 = u32::MAX - type_free(cluster, free, p.cluster, p.gpu);
                    }
                    score.2 = u32::MAX - type_free(cluster, free, pool.cluster, pool.gpu);
                }
                if score >= *s {
                    continue;
                }
            }
            best = Some((score, alloc));
        }
    }
    best.map(|(_, a)| a)
}

/// Free GPUs on usable nodes of one GPU type in one cluster (FLEET-2).
fn type_free(cluster: &Cluster, free: &FreeMap, c: ClusterId, gpu: crate::cluster::GpuTypeId) -> u32 {
    cluster
        .pools
        .iter()
        .enumerate()
        .filter(|(_, p)| p.cluster == c && p.gpu == gpu)
        .map(|(i, _)| free.pool_free[i])
        .sum()
}

/// Why `spec` does not fit now, with the numbers behind it.
pub fn diagnose(
    cluster: &Cluster,
    free: &FreeMap,
    spec: &WorkloadSpec,
    allowed: &dyn Fn(PoolId) -> bool,
) -> PlacementFailure {
    let mut fail = PlacementFailure {
        rule: Rule::PlaceGang,
        gpus: spec.gpus,
        nodes: spec.nodes,
        free_in_pools: 0,
        best_rack_free: 0,
        best_node_free: 0,
        best_cluster: None,
        held_outside: 0,
    };
    // Free and total GPUs per cluster, of the pools it may use.
    let mut per_cluster = vec![(0u32, 0u32); cluster.clusters.len()];
    for (pi, pool) in cluster.pools.iter().enumerate() {
        if pool.may_serve(spec.gpu_type, spec.clusters) && allowed(PoolId(pi as u32)) {
            fail.free_in_pools += free.pool_free[pi];
            fail.held_outside += free.pool_outside[pi];
            let c = &mut per_cluster[pool.cluster.0 as usize];
            c.0 += free.pool_free[pi];
            c.1 += pool.nodes * pool.gpus_per_node;
        }
    }
    if cluster.is_fleet() {
        // Most free first, then config order.
        let best =
            per_cluster.iter().enumerate().filter(|(_, c)| c.1 > 0).max_by_key(|(i, c)| (c.0, std::cmp::Reverse(*i)));
        fail.best_cluster = best.map(|(i, c)| (cluster.clusters[i].clone(), c.0, c.1));
    }
    fill_failure(cluster, free, spec, allowed, &mut fail);
    fail
}

fn fill_failure(
    cluster: &Cluster,
    free: &FreeMap,
    spec: &WorkloadSpec,
    allowed: &dyn Fn(PoolId) -> bool,
    fail: &mut PlacementFailure,
) {
    let mut rack_free = vec![0u32; cluster.racks as usize];
    for (i, n) in cluster.nodes.iter().enumerate() {
        if !cluster.pool(n.pool).may_serve(spec.gpu_type, spec.clusters) || !allowed(n.pool) {
            continue;
        }
        let f = free.free_on(NodeId(i as u32));
        rack_free[n.rack as usize] += f;
        fail.best_node_free = fail.best_node_free.max(f);
    }
    fail.best_rack_free = rack_free.into_iter().max().unwrap_or(0);
    fail.rule = if spec.nodes > 1 || spec.gpus > fail.best_node_free {
        if fail.free_in_pools >= spec.gpus { Rule::PlaceNodes } else { Rule::PlaceGang }
    } else {
        Rule::PlaceGang
    };
}

/// Best placement inside one pool, rack-local when possible (PLACE-3); on a
/// spread pool, over several nodes when no single node fits (PLACE-7).
fn place_in_pool(cluster: &Cluster, free: &FreeMap, spec: &WorkloadSpec, pid: PoolId) -> Option<(Score, Allocation)> {
    let pool = cluster.pool(pid);
    if pool.added.is_empty() {
        // As laid out: one range of ids, every `rack_size` consecutive
        // ones a rack (no walk over the rack list, no chained iterators).
        let (first, size) = (pool.first_node.0, pool.rack_size.max(1));
        let end = first + pool.nodes;
        let racks = (first..end).step_by(size as usize).map(move |s| (s..(s + size).min(end)).map(NodeId));
        place_over(free, spec, pool, pid, (first..end).map(NodeId), racks)
    } else {
        // MNT-5: nodes were added; racks are no longer runs of ids.
        place_over(free, spec, pool, pid, cluster.pool_nodes(pid), pool.racks().map(|r| r.nodes()))
    }
}

/// [`place_in_pool`] over the pool's nodes `all` and its `racks` (each a
/// set of node ids, in rack order).
fn place_over<A, R, I>(
    free: &FreeMap,
    spec: &WorkloadSpec,
    pool: &Pool,
    pid: PoolId,
    all: A,
    racks: R,
) -> Option<(Score, Allocation)>
where
    A: Iterator<Item = NodeId> + Clone,
    R: Iterator<Item = I>,
    I: Iterator<Item = NodeId> + Clone,
{
    let gpn = pool.gpus_per_node;
    let spread = pool.placement == PoolPlacement::Spread && spec.nodes == 0;
    if !may_fit(free, all.clone(), spec) {
        return None;
    }
    let mut best: Option<(Score, Vec<(NodeId, u32)>)> = None;
    for (ri, rack) in racks.enumerate() {
        let pick = match pick_nodes(free, rack.clone(), spec, gpn) {
            None if spread && spec.gpus <= gpn => pick_any(free, rack, spec),
            p => p,
        };
        if let Some((left, pick)) = pick {
            let score = (false, left, 0, pid.0, ri as u32);
            if best.as_ref().is_none_or(|(s, _)| score < *s) {
                best = Some((score, pick));
            }
        }
    }
    if best.is_none()
        && (spec.nodes > 1 || spec.gpus > gpn || spread)
        && let Some((left, pick)) = if spec.gpus <= gpn && spec.nodes <= 1 {
            // Only a spread workload no larger than a node gets here; no
            // single node fits it (each rack was tried).
            pick_any(free, all, spec)
        } else {
            pick_nodes(free, all, spec, gpn)
        }
    {
        best = Some(((true, left, 0, pid.0, 0), pick));
    }
    let (score, pick) = best?;
    let mut parts: Vec<(NodeId, u64)> =
        pick.into_iter().map(|(n, take)| (n, lowest_bits(free.free[n.0 as usize], take))).collect();
    parts.sort_by_key(|(n, _)| *n);
    Some((score, Allocation { parts }))
}

/// Whether [`pick_nodes`] can succeed on some subset of `cands` (a rack or
/// the whole pool): for `k` nodes of `per` GPUs, `k` nodes with that many
/// free; for one node, one node with enough free; for any packing, enough
/// free in all. One scan without allocation, so that a pool where a gang
/// cannot fit is passed over at once.
fn may_fit(free: &FreeMap, cands: impl Iterator<Item = NodeId>, spec: &WorkloadSpec) -> bool {
    let mut nodes = cands.map(|n| free.free_on(n));
    match spec.gpus.checked_div(spec.nodes) {
        Some(per) => nodes.filter(|f| *f >= per).take(spec.nodes as usize).count() == spec.nodes as usize,
        None => {
            let mut total = 0;
            nodes.any(|f| {
                total += f;
                f >= spec.gpus || total >= spec.gpus
            })
        }
    }
}

/// Chooses nodes among the node ids `cands` by their free GPUs; returns the
/// leftover GPUs on touched nodes and (node, GPUs to take) pairs.
fn pick_nodes(
    free: &FreeMap,
    cands: impl Iterator<Item = NodeId> + Clone,
    spec: &WorkloadSpec,
    gpn: u32,
) -> Option<(u32, Vec<(NodeId, u32)>)> {
    let nodes = || cands.clone().map(|n| (n, free.free_on(n)));
    // One node: the one with the fewest free GPUs that still fits (ties by
    // index). With `nodes = 1` this is also the exact-count rule below.
    let single = |need: u32| {
        let (n, f) = nodes().filter(|(_, f)| *f >= need).min_by_key(|&(n, f)| (f, n))?;
        Some((f - need, vec![(n, need)]))
    };
    if let Some(per) = spec.gpus.checked_div(spec.nodes) {
        if per > gpn {
            return None;
        }
        if spec.nodes == 1 {
            return single(per);
        }
        let mut elig: Vec<(NodeId, u32)> = nodes().filter(|(_, f)| *f >= per).collect();
        if elig.len() < spec.nodes as usize {
            return None;
        }
        // Best fit: the fullest eligible nodes (fewest free), ties by index.
        elig.sort_by_key(|&(n, f)| (f, n));
        elig.truncate(spec.nodes as usize);
        let left = elig.iter().map(|(_, f)| f - per).sum();
        return Some((left, elig.into_iter().map(|(n, _)| (n, per)).collect()));
    }
    if spec.gpus <= gpn {
        return single(spec.gpus);
    }
    pick_any(free, cands, spec)
}

/// Several nodes, any packing: as few nodes as possible (emptiest first),
/// the last one chosen best-fit for the remainder (a gang larger than a
/// node, or on a spread pool, PLACE-7, one no single node fits).
fn pick_any(
    free: &FreeMap,
    cands: impl Iterator<Item = NodeId> + Clone,
    spec: &WorkloadSpec,
) -> Option<(u32, Vec<(NodeId, u32)>)> {
    let nodes = || cands.clone().map(|n| (n, free.free_on(n)));
    let total: u32 = nodes().map(|(_, f)| f).sum();
    if total < spec.gpus {
        return None;
    }
    let mut sorted: Vec<(NodeId, u32)> = nodes().filter(|(_, f)| *f > 0).collect();
    sorted.sort_by_key(|&(n, f)| (std::cmp::Reverse(f), n));
    let mut need = spec.gpus;
    let mut pick = Vec::new();
    let mut i = 0;
    while need > 0 {
        let (n, f) = sorted[i];
        if f >= need {
            // Best fit for the remainder among the nodes not yet used.
            let (bn, bf) = sorted[i..].iter().copied().filter(|(_, f)| *f >= need).min_by_key(|&(n, f)| (f, n))?;
            pick.push((bn, need));
            return Some((bf - need, pick));
        }
        pick.push((n, f));
        need -= f;
        i += 1;
    }
    Some((0, pick))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::AccountId;
    use crate::cluster::{GpuType, GpuTypeId, PoolPlacement, PoolSpec};
    use crate::workload::{Class, Priority};

    /// PLACE-7: 4 nodes of 4 GPUs in racks of 2, with `used[i]` GPUs taken
    /// on node i; a `nodes = 0` workload of `gpus`.
    fn placed(placement: PoolPlacement, used: [u32; 4], gpus: u32) -> Option<Vec<(u32, u32)>> {
        let gpu = GpuTypeId(0);
        let pool = PoolSpec { name: "p".into(), gpu, nodes: 4, gpus_per_node: 4, rack_size: 2, shared: false };
        let mut cluster = Cluster::new("c", vec![GpuType { name: "V100".into(), weight: 1.0 }], vec![pool]);
        cluster.set_placement(PoolId(0), placement);
        let mut free = FreeMap::new(&cluster);
        for (i, u) in used.into_iter().enumerate().filter(|(_, u)| *u > 0) {
            free.take(&cluster, &Allocation { parts: vec![(NodeId(i as u32), full_mask(u))] });
        }
        let spec = WorkloadSpec {
            id: "w".into(),
            submit: 0,
            account: AccountId(1),
            user: "u".into(),
            class: Class::Batch,
            gpus,
            nodes: 0,
            gpu_type: None,
            clusters: crate::cluster::ClusterSet::ANY,
            work_s: 60,
            checkpoint_s: 0,
            util: 1.0,
            priority: Priority::Normal,
            preemptible: false,
            time_limit_s: None,
            checkpoint_on_signal: false,
            after: Vec::new(),
            array: None,
            hold: false,
            billing: None,
        };
        let a = find(&cluster, &free, &spec, &|_| true)?;
        Some(a.parts.iter().map(|(n, m)| (n.0, m.count_ones())).collect())
    }

    /// (case, placement, GPUs used per node, GPUs asked, (node, GPUs) placed).
    type Case = (&'static str, PoolPlacement, [u32; 4], u32, Option<Vec<(u32, u32)>>);

    #[test]
    fn spread_pools_place_by_count() {
        use PoolPlacement::{Pack, Spread};
        let cases: [Case; 6] = [
            ("pack: no node has 2 free", Pack, [3, 3, 3, 3], 2, None),
            ("spread: one GPU of two nodes of the first rack", Spread, [3, 3, 3, 3], 2, Some(vec![(0, 1), (1, 1)])),
            ("spread: one node fits, so one node (best fit)", Spread, [3, 2, 0, 3], 2, Some(vec![(1, 2)])),
            ("spread: the rack that holds it", Spread, [3, 4, 2, 3], 3, Some(vec![(2, 2), (3, 1)])),
            ("spread: across racks when no rack holds it", Spread, [3, 4, 4, 3], 2, Some(vec![(0, 1), (3, 1)])),
            ("spread: not more than the pool has free", Spread, [4, 4, 4, 3], 2, None),
        ];
        for (name, placement, used, gpus, want) in cases {
            assert_eq!(placed(placement, used, gpus), want, "case {name}");
        }
    }
}
