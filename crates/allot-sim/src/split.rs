//! Split budgets: the inputs an organisation has when it runs one scheduler
//! per cluster instead of one for the fleet (`allot compare --policies
//! allot-split`, docs/compare.md).
//!
//! [`split_by_cluster`] rewrites a fleet's account tree and trace so that
//! every cluster `c` has its own copy of the tree under the account `c`
//! (paths `c/<path>`), whose share is the cluster's part of the fleet's
//! normalised (NGH) capacity and in which every budget (user budgets too,
//! BUD-6) is the original
//! budget times that part; every workload is pinned to one cluster and
//! charged to that cluster's copy of its account. One `allot` policy run on
//! the rewritten inputs then behaves as independent per-cluster schedulers:
//! nothing is shared between the copies, a copy's standing depends only on
//! its own cluster's work. [`Split::unsplit`] maps a run's state and record
//! back onto the original accounts, so its measures compare like with like.

use allot_core::cluster::{ClusterId, ClusterSet};
use allot_core::{AccountId, AccountSpec, AccountTree, AccountTreeError, Cluster, State, WorkloadSpec};

use crate::record::SimOutput;

/// The rewritten inputs and the way back.
#[derive(Clone, Debug)]
pub struct Split {
    /// One copy of the tree per cluster, under the account named after it.
    pub accounts: AccountTree,
    /// Every workload pinned to one cluster, on that cluster's copy of its
    /// account (trace order kept).
    pub trace: Vec<WorkloadSpec>,
    /// Per account of [`Split::accounts`], the original account (the root
    /// for the per-cluster accounts themselves).
    pub back: Vec<AccountId>,
}

/// Each cluster's part of the fleet's normalised capacity (GPUs × weight),
/// by [`ClusterId`].
pub fn capacity_parts(cluster: &Cluster) -> Vec<f64> {
    let mut ngpus = vec![0.0; cluster.clusters.len()];
    for p in &cluster.pools {
        ngpus[p.cluster.0 as usize] += f64::from(p.nodes) * f64::from(p.gpus_per_node) * cluster.weight(p.gpu);
    }
    let total: f64 = ngpus.iter().sum();
    ngpus.iter().map(|n| if total > 0.0 { n / total } else { 0.0 }).collect()
}

/// The cluster a workload is pinned to in a split run:
///
/// 1. its only eligible cluster, if it names one;
/// 2. else its account's home: the cluster named most often by the
///    workloads pinned to a single cluster of its account, or failing that
///    of the nearest ancestor that has such workloads (ties: config order),
///    if the workload fits there;
/// 3. else a deterministic draw, weighted by capacity parts, among the
///    eligible clusters it fits (a hash of its id).
fn choose(cluster: &Cluster, parts: &[f64], homes: &[Option<ClusterId>], w: &WorkloadSpec) -> ClusterId {
    let n = cluster.clusters.len();
    let fits = |c: ClusterId| {
        w.clusters.contains(c) && cluster.fits_anywhere(w.gpus, w.nodes, w.gpu_type, ClusterSet::of([c]))
    };
    let eligible: Vec<ClusterId> = (0..n).map(|c| ClusterId(c as u16)).filter(|c| fits(*c)).collect();
    if let [only] = eligible[..] {
        return only;
    }
    if let Some(home) = homes[w.account.0 as usize].filter(|h| fits(*h)) {
        return home;
    }
    let Some(&first) = eligible.first() else {
        // Fits no cluster (the validator rejects such rows); keep the first.
        return ClusterId(0);
    };
    let total: f64 = eligible.iter().map(|c| parts[c.0 as usize]).sum();
    let u = fnv1a(&w.id) as f64 / (u64::MAX as f64 + 1.0) * total;
    let mut acc = 0.0;
    for &c in &eligible {
        acc += parts[c.0 as usize];
        if u < acc {
            return c;
        }
    }
    first
}

/// FNV-1a, 64 bits: a stable hash of a workload id.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Per account, its home cluster (see [`choose`]), from the workloads
/// pinned to a single cluster.
fn homes(cluster: &Cluster, accounts: &AccountTree, trace: &[WorkloadSpec]) -> Vec<Option<ClusterId>> {
    let n = cluster.clusters.len();
    let mut counts = vec![vec![0u64; n]; accounts.len()];
    for w in trace {
        let pins: Vec<usize> = (0..n).filter(|c| w.clusters.contains(ClusterId(*c as u16))).collect();
        if let [c] = pins[..] {
            counts[w.account.0 as usize][c] += 1;
        }
    }
    let own: Vec<Option<ClusterId>> = counts
        .iter()
        .map(|row| {
            let best = (0..n).max_by(|a, b| row[*a].cmp(&row[*b]).then(b.cmp(a)))?;
            (row[best] > 0).then_some(ClusterId(best as u16))
        })
        .collect();
    // The nearest account on the path with pinned work of its own.
    (0..accounts.len()).map(|a| accounts.ancestry(AccountId(a as u32)).find_map(|x| own[x.0 as usize])).collect()
}

/// Rewrites a fleet's accounts and trace into per-cluster copies (see the
/// module documentation). A fleet of one is returned unchanged.
pub fn split_by_cluster(
    cluster: &Cluster,
    accounts: &AccountTree,
    trace: &[WorkloadSpec],
) -> Result<Split, AccountTreeError> {
    if !cluster.is_fleet() {
        let back = (0..accounts.len() as u32).map(AccountId).collect();
        return Ok(Split { accounts: accounts.clone(), trace: trace.to_vec(), back });
    }
    let parts = capacity_parts(cluster);
    let mut specs = Vec::new();
    for (c, name) in cluster.clusters.iter().enumerate() {
        specs.push(AccountSpec { path: name.clone(), share: Some(parts[c]), ..Default::default() });
        for id in accounts.ids() {
            let a = accounts.account(id);
            if !a.declared {
                continue;
            }
            let pools = a
                .legacy_pools
                .as_ref()
                .map(|ps| ps.iter().copied().filter(|p| cluster.pool(*p).cluster == ClusterId(c as u16)).collect());
            specs.push(AccountSpec {
                path: format!("{name}/{}", a.path),
                share: a.explicit_share.then_some(a.share),
                budget_gpu_hours: a.budget_gpu_hours.map(|b| b * parts[c]),
                impact: Some(a.impact),
                legacy_pools: pools,
                max_service_gpus: a.max_service_gpus,
                users: a.users.clone(),
                closed: a.own_closed,
                user_budgets: a.user_budgets.iter().map(|(u, b)| (u.clone(), b * parts[c])).collect(),
            });
        }
    }
    let tree = AccountTree::build(&specs)?;
    let back = tree
        .ids()
        .map(|id| {
            let path = &tree.account(id).path;
            path.split_once('/').and_then(|(_, rest)| accounts.get(rest)).unwrap_or(AccountId::ROOT)
        })
        .collect::<Vec<_>>();
    let back = std::iter::once(AccountId::ROOT).chain(back).collect();
    let homes = homes(cluster, accounts, trace);
    let trace = trace
        .iter()
        .map(|w| {
            let c = choose(cluster, &parts, &homes, w);
            let path = format!("{}/{}", cluster.cluster_name(c), accounts.account(w.account).path);
            let account = tree.get(&path).expect("every account has a copy in every cluster");
            WorkloadSpec { account, clusters: ClusterSet::of([c]), ..w.clone() }
        })
        .collect();
    Ok(Split { accounts: tree, trace, back })
}

impl Split {
    /// A split run's final state and record on the original accounts:
    /// every workload and attempt charged to the account it was copied
    /// from, the tree replaced by `original`, the record named `policy`.
    /// Measures of the result are per original account; pins stay as run.
    pub fn unsplit(
        &self,
        original: &AccountTree,
        mut state: State,
        mut out: SimOutput,
        policy: &str,
    ) -> (State, SimOutput) {
        let back = |a: AccountId| self.back[a.0 as usize];
        for s in &mut state.specs {
            s.account = back(s.account);
        }
        for a in &mut out.attempts {
            a.account = back(a.account);
        }
        state.accounts = original.clone();
        out.policy = policy.to_string();
        (state, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_core::{Contract, GpuType, PoolSpec};

    fn fleet(clusters: &[(&str, u32, f64)]) -> Cluster {
        let gpu_types: Vec<GpuType> =
            clusters.iter().map(|(n, _, w)| GpuType { name: format!("g{n}"), weight: *w }).collect();
        let spec = |i: usize, nodes| PoolSpec {
            name: "p".into(),
            gpu: allot_core::GpuTypeId(i as u16),
            nodes,
            gpus_per_node: 8,
            rack_size: nodes,
            shared: false,
        };
        let cs = clusters.iter().enumerate().map(|(i, (n, nodes, _))| (n.to_string(), vec![spec(i, *nodes)])).collect();
        if clusters.len() == 1 {
            let (n, nodes, _) = clusters[0];
            return Cluster::new(n, gpu_types, vec![spec(0, nodes)]);
        }
        Cluster::fleet("f", gpu_types, cs)
    }

    fn tree() -> AccountTree {
        let acc = |path: &str, budget: Option<f64>, pools: Option<Vec<u32>>| AccountSpec {
            path: path.into(),
            budget_gpu_hours: budget,
            legacy_pools: pools.map(|ps| ps.into_iter().map(allot_core::PoolId).collect()),
            ..Default::default()
        };
        AccountTree::build(&[
            acc("org/a", Some(300.0), Some(vec![0, 1])),
            acc("org/a/x", None, None),
            acc("org/b", Some(100.0), None),
            acc("org/c", None, None),
        ])
        .unwrap()
    }

    fn wl(tree: &AccountTree, id: &str, account: &str, gpus: u32, clusters: ClusterSet) -> WorkloadSpec {
        WorkloadSpec {
            id: id.into(),
            submit: 0,
            account: tree.get(account).unwrap(),
            user: "u".into(),
            class: allot_core::Class::Batch,
            gpus,
            nodes: 0,
            gpu_type: None,
            clusters,
            work_s: 10,
            checkpoint_s: 0,
            util: 1.0,
            priority: allot_core::Priority::Normal,
            preemptible: false,
            time_limit_s: None,
            checkpoint_on_signal: false,
            after: Vec::new(),
            array: None,
            hold: false,
            billing: None,
        }
    }

    #[test]
    fn budgets_split_by_capacity_and_sum_back() {
        // c1: 4 nodes of weight 1 (32 NGPUs); c2: 2 nodes of weight 2 (32); c3: 2 of weight 1 (16).
        let cluster = fleet(&[("c1", 4, 1.0), ("c2", 2, 2.0), ("c3", 2, 1.0)]);
        let parts = capacity_parts(&cluster);
        assert_eq!(parts, vec![0.4, 0.4, 0.2]);
        let orig = tree();
        let s = split_by_cluster(&cluster, &orig, &[]).unwrap();
        for (path, budget) in [("org/a", 300.0), ("org/b", 100.0)] {
            let copies: Vec<f64> = ["c1", "c2", "c3"]
                .iter()
                .map(|c| s.accounts.account(s.accounts.get(&format!("{c}/{path}")).unwrap()).budget_gpu_hours.unwrap())
                .collect();
            assert!((copies.iter().sum::<f64>() - budget).abs() < 1e-9, "{path}: {copies:?}");
            assert!((copies[0] - budget * 0.4).abs() < 1e-9);
        }
        assert_eq!(s.accounts.account(s.accounts.get("c3/org/c").unwrap()).budget_gpu_hours, None);
        // Static shares: each copy gets its cluster's part of the original.
        for id in orig.ids() {
            let path = &orig.account(id).path;
            let sum: f64 = ["c1", "c2", "c3"]
                .iter()
                .map(|c| s.accounts.static_share(s.accounts.get(&format!("{c}/{path}")).unwrap()))
                .sum();
            assert!((sum - orig.static_share(id)).abs() < 1e-9, "{path}");
        }
        // Legacy pools: only the cluster's own (pool 0 is c1's, pool 1 c2's).
        let pools = |p: &str| s.accounts.account(s.accounts.get(p).unwrap()).legacy_pools.clone();
        assert_eq!(pools("c1/org/a/x"), Some(vec![allot_core::PoolId(0)]));
        assert_eq!(pools("c2/org/a"), Some(vec![allot_core::PoolId(1)]));
        assert_eq!(pools("c3/org/a"), Some(vec![]));
        // The way back: every copy maps to its original.
        for id in s.accounts.ids() {
            let path = &s.accounts.account(id).path;
            let want = path.split_once('/').map_or(AccountId::ROOT, |(_, rest)| orig.get(rest).unwrap());
            assert_eq!(s.back[id.0 as usize], want, "{path}");
        }
    }

    #[test]
    fn every_workload_is_pinned_to_one_cluster_it_fits() {
        let cluster = fleet(&[("c1", 4, 1.0), ("c2", 2, 2.0), ("c3", 1, 1.0)]);
        let orig = tree();
        let (c1, c2, c3) = (ClusterId(0), ClusterId(1), ClusterId(2));
        let mut trace = vec![
            // org/a pins to c2 twice, to c1 once: its home (and its child's) is c2.
            wl(&orig, "p1", "org/a", 8, ClusterSet::of([c2])),
            wl(&orig, "p2", "org/a", 8, ClusterSet::of([c2])),
            wl(&orig, "p3", "org/a", 8, ClusterSet::of([c1])),
            wl(&orig, "free-a", "org/a/x", 8, ClusterSet::ANY),
            // Too large for c2 (16 GPUs) and c3: only c1 fits.
            wl(&orig, "big-a", "org/a", 24, ClusterSet::ANY),
            wl(&orig, "two", "org/b", 8, ClusterSet::of([c1, c3])),
        ];
        for i in 0..200 {
            trace.push(wl(&orig, &format!("free-c-{i}"), "org/c", 8, ClusterSet::ANY));
        }
        let s = split_by_cluster(&cluster, &orig, &trace).unwrap();
        let cluster_of = |i: usize| {
            let pins: Vec<u16> = (0..3).filter(|c| s.trace[i].clusters.contains(ClusterId(*c))).collect();
            assert_eq!(pins.len(), 1, "{} pinned to {pins:?}", s.trace[i].id);
            ClusterId(pins[0])
        };
        assert_eq!(cluster_of(0), c2);
        assert_eq!(cluster_of(2), c1, "its own pin");
        assert_eq!(cluster_of(3), c2, "home of org/a");
        assert_eq!(cluster_of(4), c1, "only c1 fits");
        assert!([c1, c3].contains(&cluster_of(5)));
        for (i, w) in s.trace.iter().enumerate() {
            let c = cluster_of(i);
            let path = &s.accounts.account(w.account).path;
            let want = format!("{}/{}", cluster.cluster_name(c), orig.account(trace[i].account).path);
            assert_eq!(path, &want);
            assert_eq!(s.back[w.account.0 as usize], trace[i].account);
            assert!(cluster.fits_anywhere(w.gpus, w.nodes, w.gpu_type, w.clusters), "{}", w.id);
        }
        // Without pins, by capacity parts 32 : 32 : 8, deterministically.
        let mut count = [0; 3];
        for i in 6..s.trace.len() {
            count[cluster_of(i).0 as usize] += 1;
        }
        assert!(count[0] > 60 && count[1] > 60 && count[2] < 45, "{count:?}");
        let again = split_by_cluster(&cluster, &orig, &trace).unwrap();
        assert_eq!(again.trace, s.trace);
    }

    #[test]
    fn a_fleet_of_one_is_unchanged() {
        let cluster = fleet(&[("solo", 4, 1.0)]);
        let orig = tree();
        let trace = vec![wl(&orig, "w", "org/b", 8, ClusterSet::ANY)];
        let s = split_by_cluster(&cluster, &orig, &trace).unwrap();
        assert_eq!(s.accounts, orig);
        assert_eq!(s.trace, trace);
        let state = State::new(cluster, orig.clone(), Contract::default());
        let out = SimOutput {
            policy: "allot".into(),
            horizon_end: 0,
            total_gpus: 32,
            added_gpus: Vec::new(),
            attempts: Vec::new(),
            capacity: Vec::new(),
            clusters: Vec::new(),
            log: Vec::new(),
            passes: 0,
            events: 0,
            node_failures: 0,
        };
        let (state, out) = s.unsplit(&orig, state, out, "allot-split");
        assert_eq!(state.accounts, orig);
        assert_eq!(out.policy, "allot-split");
    }
}
