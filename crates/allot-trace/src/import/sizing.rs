//! Sizing the written cluster: node groups, per-team exclusive pools for the
//! legacy model, optional shared pools.
//!
//! Teams get node quotas, either fixed (observed peak demand or a legacy
//! sizes file, rounded up to whole nodes) or a split of a fixed capacity in
//! proportion to their GPU-hours (largest remainder). Every team's quota is at
//! least what its largest workload needs, so every workload fits one of its
//! own team's pools. Quotas are then carved out of the node groups: first the
//! nodes each team's largest workload needs, in the group with the most free
//! nodes that can hold it, then the rest of each quota in group order.

use std::collections::{BTreeMap, BTreeSet};

use crate::write::PoolOut;

/// Identical nodes the cluster is made of, before they are split into pools.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeGroup {
    pub model: String,
    pub gpus_per_node: u32,
    pub nodes: u32,
}

/// The workload shape a team's pools must be able to hold.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub gpus: u32,
    /// 0: any packing; k: exactly k nodes.
    pub nodes: u32,
}

impl Shape {
    /// Nodes of a group this shape needs, or `None` if the group cannot hold it.
    pub fn nodes_in(&self, gpn: u32) -> Option<u32> {
        match self.gpus.checked_div(self.nodes) {
            None => Some(self.gpus.div_ceil(gpn)),
            Some(per_node) => (per_node <= gpn).then_some(self.nodes),
        }
    }
}

/// What sizing needs to know about one team.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TeamNeed {
    /// Sanitized team name (pool names start with it).
    pub name: String,
    /// GPU-seconds of the team's workloads (the split weight).
    pub weight: f64,
    /// Shapes one of the team's pools must hold: its largest workload without
    /// a GPU type, and its largest workload of each required GPU type.
    pub reserve: Vec<(Shape, Option<String>)>,
    /// Fixed GPU count (peak demand or legacy sizes), if not a split.
    pub fixed_gpus: Option<u64>,
}

impl TeamNeed {
    /// Nodes of `g` that reservation `r` needs, if `g` can hold it.
    fn nodes_in(r: &(Shape, Option<String>), g: &NodeGroup) -> Option<u32> {
        if r.1.as_ref().is_some_and(|t| *t != g.model) {
            return None;
        }
        r.0.nodes_in(g.gpus_per_node)
    }

    /// The most nodes any reservation needs in its best group.
    fn min_nodes(&self, groups: &[NodeGroup]) -> u32 {
        self.reserve
            .iter()
            .filter_map(|r| groups.iter().filter_map(|g| Self::nodes_in(r, g)).min())
            .max()
            .unwrap_or(1)
            .max(1)
    }
}

/// The sized cluster.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sized {
    pub pools: Vec<PoolOut>,
    /// Team name → its exclusive pools.
    pub team_pools: BTreeMap<String, Vec<String>>,
    pub notes: Vec<String>,
}

/// Splits `total` into integer parts: at least `mins[i]`, the rest in
/// proportion to how far `weights[i]`'s ideal share exceeds its minimum
/// (largest remainder, ties to the lower index). If the minimums exceed
/// `total` they are returned as they are.
pub(crate) fn apportion(total: u32, weights: &[f64], mins: &[u32]) -> Vec<u32> {
    let mut alloc = mins.to_vec();
    let min_sum: u32 = mins.iter().sum();
    if min_sum >= total || weights.is_empty() {
        return alloc;
    }
    let rest = total - min_sum;
    let wsum: f64 = weights.iter().sum();
    let mut extra: Vec<f64> = weights
        .iter()
        .zip(mins)
        .map(|(w, m)| if wsum > 0.0 { (f64::from(total) * w / wsum - f64::from(*m)).max(0.0) } else { 1.0 })
        .collect();
    let esum: f64 = extra.iter().sum();
    if esum <= 0.0 {
        extra = vec![1.0; weights.len()];
    }
    let esum: f64 = extra.iter().sum();
    let ideal: Vec<f64> = extra.iter().map(|e| f64::from(rest) * e / esum).collect();
    let mut given = 0;
    for (a, x) in alloc.iter_mut().zip(&ideal) {
        let f = x.floor() as u32;
        *a += f;
        given += f;
    }
    let mut order: Vec<usize> = (0..ideal.len()).collect();
    order.sort_by(|&a, &b| {
        let fa = ideal[a] - ideal[a].floor();
        let fb = ideal[b] - ideal[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take((rest - given) as usize) {
        alloc[i] += 1;
    }
    alloc
}

/// Node quota of a team whose size is fixed: GPUs rounded up to whole nodes,
/// at least what its largest workload needs.
fn fixed_quota(t: &TeamNeed, group: &NodeGroup) -> u32 {
    let by_size = t.fixed_gpus.unwrap_or(0).div_ceil(u64::from(group.gpus_per_node)) as u32;
    by_size.max(t.min_nodes(std::slice::from_ref(group)))
}

/// Sizes pools for teams. `fixed` groups are split among teams; with `None`
/// one group of `model` / `gpn` is created from the teams' fixed sizes.
pub(crate) fn size_cluster(
    fixed: Option<Vec<NodeGroup>>,
    model: &str,
    gpn: u32,
    teams: &[TeamNeed],
    shared_fraction: f64,
    rack_size: u32,
) -> Sized {
    let mut notes = Vec::new();
    let (groups, quotas, shared) = match fixed {
        Some(groups) => {
            let total: u32 = groups.iter().map(|g| g.nodes).sum();
            let shared = (shared_fraction * f64::from(total)).round() as u32;
            let weights: Vec<f64> = teams.iter().map(|t| t.weight).collect();
            let mins: Vec<u32> = teams.iter().map(|t| t.min_nodes(&groups)).collect();
            if mins.iter().sum::<u32>() > total.saturating_sub(shared) {
                notes.push(format!(
                    "the teams' largest workloads need {} nodes, more than the {} available: pools are larger than the capacity",
                    mins.iter().sum::<u32>(),
                    total.saturating_sub(shared)
                ));
            }
            (groups, apportion(total.saturating_sub(shared), &weights, &mins), shared)
        }
        None => {
            let mut group = NodeGroup { model: model.to_string(), gpus_per_node: gpn, nodes: 0 };
            let quotas: Vec<u32> = teams.iter().map(|t| fixed_quota(t, &group)).collect();
            let sum: u32 = quotas.iter().sum();
            let f = shared_fraction.clamp(0.0, 0.95);
            let shared = (f / (1.0 - f) * f64::from(sum)).round() as u32;
            group.nodes = sum + shared;
            (vec![group], quotas, shared)
        }
    };
    let alloc = carve(&groups, teams, &quotas, &mut notes);
    let names = group_names(&groups);
    let mut pools = Vec::new();
    let mut team_pools = BTreeMap::new();
    let mut taken = BTreeSet::new();
    let mut used = vec![0u32; groups.len()];
    for (t, row) in teams.iter().zip(&alloc) {
        let mut mine = Vec::new();
        for (gi, &n) in row.iter().enumerate() {
            if n > 0 {
                let name = unique_pool_name(&format!("{}_{}", t.name, names[gi]), &mut taken);
                pools.push(pool(&name, &groups[gi], n, rack_size, false));
                mine.push(name);
                used[gi] += n;
            }
        }
        team_pools.insert(t.name.clone(), mine);
    }
    let mut left = 0;
    for (gi, g) in groups.iter().enumerate() {
        let free = g.nodes.saturating_sub(used[gi]);
        if free > 0 {
            let name = unique_pool_name(&format!("shared_{}", names[gi]), &mut taken);
            pools.push(pool(&name, g, free, rack_size, true));
            left += free;
        }
    }
    if left != shared {
        notes.push(format!("{left} nodes left after the team quotas form shared pools (asked for {shared})"));
    }
    Sized { pools, team_pools, notes }
}

fn pool(name: &str, g: &NodeGroup, nodes: u32, rack_size: u32, shared: bool) -> PoolOut {
    PoolOut {
        cluster: String::new(),
        name: name.to_string(),
        gpu: g.model.clone(),
        nodes,
        gpus_per_node: g.gpus_per_node,
        rack_size: rack_size.min(nodes).max(1),
        shared,
    }
}

/// A pool name: letters, digits, '_' and '.' only (nodes are named
/// `<pool>-<index>`), made unique with a `_<n>` suffix.
pub(crate) fn unique_pool_name(want: &str, taken: &mut BTreeSet<String>) -> String {
    let base: String = want.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// Pool-name suffix per group: the lowercase model, plus `x<gpus per node>`
/// when the model comes in several node sizes.
fn group_names(groups: &[NodeGroup]) -> Vec<String> {
    groups
        .iter()
        .map(|g| {
            let (m, _) = super::record::sanitize(&g.model.to_lowercase());
            if groups.iter().filter(|o| o.model == g.model).count() > 1 {
                format!("{m}x{}", g.gpus_per_node)
            } else {
                m
            }
        })
        .collect()
}

/// Nodes per team and group. Quotas are filled in group order, heaviest
/// teams first; if that leaves some team without a pool for one of its
/// reserved shapes, the reserved shapes are placed first and the rest of the
/// quotas filled after.
fn carve(groups: &[NodeGroup], teams: &[TeamNeed], quotas: &[u32], notes: &mut Vec<String>) -> Vec<Vec<u32>> {
    let mut free: Vec<u32> = groups.iter().map(|g| g.nodes).collect();
    let mut alloc = vec![vec![0u32; groups.len()]; teams.len()];
    fill_quotas(teams, quotas, &mut alloc, &mut free);
    let met = |alloc: &Vec<Vec<u32>>| {
        teams.iter().zip(alloc).all(|(t, row)| {
            t.reserve
                .iter()
                .all(|r| (0..groups.len()).any(|g| TeamNeed::nodes_in(r, &groups[g]).is_some_and(|n| n <= row[g])))
        })
    };
    if met(&alloc) {
        return alloc;
    }
    let mut free: Vec<u32> = groups.iter().map(|g| g.nodes).collect();
    let mut alloc = vec![vec![0u32; groups.len()]; teams.len()];
    let mut order: Vec<usize> = (0..teams.len()).collect();
    let need = |i: usize| teams[i].min_nodes(groups);
    order.sort_by(|&a, &b| need(b).cmp(&need(a)).then(a.cmp(&b)));
    for &t in &order {
        let mut reserve = teams[t].reserve.clone();
        reserve.sort_by_key(|r| std::cmp::Reverse(groups.iter().filter_map(|g| TeamNeed::nodes_in(r, g)).min()));
        for r in &reserve {
            let have = |g: usize| alloc[t][g];
            let candidates: Vec<(usize, u32)> = (0..groups.len())
                .filter_map(|g| TeamNeed::nodes_in(r, &groups[g]).map(|n| (g, n)))
                .filter(|&(g, n)| have(g) + free[g] >= n)
                .collect();
            // A pool the team already has that is large enough costs nothing;
            // otherwise take the group with the most free nodes.
            let best = candidates
                .iter()
                .find(|&&(g, n)| have(g) >= n)
                .or_else(|| candidates.iter().max_by(|a, b| free[a.0].cmp(&free[b.0]).then(b.0.cmp(&a.0))));
            match best {
                Some(&(g, n)) => {
                    let add = n.saturating_sub(alloc[t][g]);
                    alloc[t][g] += add;
                    free[g] -= add;
                }
                None => notes.push(format!(
                    "team {}: no group has room for its largest workload ({} GPUs{}); it will not run under the legacy policy",
                    teams[t].name,
                    r.0.gpus,
                    r.1.as_ref().map_or(String::new(), |m| format!(" of {m}"))
                )),
            }
        }
    }
    fill_quotas(teams, quotas, &mut alloc, &mut free);
    alloc
}

/// Tops every team up to its quota from the free nodes, in group order,
/// heaviest teams first.
fn fill_quotas(teams: &[TeamNeed], quotas: &[u32], alloc: &mut [Vec<u32>], free: &mut [u32]) {
    let mut by_weight: Vec<usize> = (0..teams.len()).collect();
    by_weight.sort_by(|&a, &b| teams[b].weight.total_cmp(&teams[a].weight).then(a.cmp(&b)));
    for &t in &by_weight {
        let mut rest = quotas[t].saturating_sub(alloc[t].iter().sum());
        for g in 0..free.len() {
            let take = rest.min(free[g]);
            alloc[t][g] += take;
            free[g] -= take;
            rest -= take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(name: &str, weight: f64, gpus: u32, nodes: u32, fixed: Option<u64>) -> TeamNeed {
        TeamNeed { name: name.into(), weight, reserve: vec![(Shape { gpus, nodes }, None)], fixed_gpus: fixed }
    }

    #[test]
    fn apportion_keeps_minimums_and_total() {
        let cases = [
            ("proportional", 10, vec![3.0, 1.0], vec![1, 1], vec![8, 2]),
            ("minimum dominates", 10, vec![9.0, 1.0], vec![1, 5], vec![5, 5]),
            ("minimums exceed", 4, vec![1.0, 1.0], vec![3, 3], vec![3, 3]),
            ("ties to lower index", 3, vec![1.0, 1.0], vec![0, 0], vec![2, 1]),
        ];
        for (name, total, w, m, want) in cases {
            assert_eq!(apportion(total, &w, &m), want, "case {name}");
        }
    }

    #[test]
    fn fixed_sizes_round_up_to_nodes_and_fit_the_largest_job() {
        let teams = [team("a", 1.0, 128, 16, Some(20)), team("b", 1.0, 4, 1, Some(20))];
        let s = size_cluster(None, "GPU", 8, &teams, 0.0, 16);
        let nodes: Vec<(String, u32)> = s.pools.iter().map(|p| (p.name.clone(), p.nodes)).collect();
        assert_eq!(nodes, vec![("a_gpu".to_string(), 16), ("b_gpu".to_string(), 3)]);
        assert_eq!(s.team_pools["b"], vec!["b_gpu".to_string()]);
    }

    #[test]
    fn fixed_capacity_is_split_by_weight_with_a_shared_part() {
        let groups = vec![
            NodeGroup { model: "G2".into(), gpus_per_node: 8, nodes: 10 },
            NodeGroup { model: "T4".into(), gpus_per_node: 2, nodes: 10 },
        ];
        let teams = [team("big", 3.0, 8, 1, None), team("small", 1.0, 8, 1, None)];
        let s = size_cluster(Some(groups), "x", 8, &teams, 0.2, 16);
        let total: u32 = s.pools.iter().map(|p| p.nodes).sum();
        assert_eq!(total, 20);
        let shared: u32 = s.pools.iter().filter(|p| p.shared).map(|p| p.nodes).sum();
        assert_eq!(shared, 4);
        for t in &teams {
            let fits = s.team_pools[&t.name]
                .iter()
                .any(|n| s.pools.iter().any(|p| &p.name == n && p.fits(t.reserve[0].0.gpus, 1, "")));
            assert!(fits, "team {} has a pool for its largest pod", t.name);
        }
    }
}
