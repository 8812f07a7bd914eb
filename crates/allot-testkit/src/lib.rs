//! Fluent builders for tests (dev-only; never a dependency of shipped code).
//!
//! ```ignore
//! let state = StateBuilder::new().pool("a", "H100", 4, 8).account("org/x").build();
//! let w = Wl::new("w1").account("org/x").gpus(8).work(3600).build(&state);
//! ```

mod drive;
pub use drive::Drive;

use allot_core::{
    AccountSpec, AccountTree, Class, Cluster, Contract, GpuType, GpuTypeId, PoolSpec, Priority, State, Time,
    WorkloadSpec,
};

/// Builds a [`State`] from pools, accounts and a contract.
#[derive(Clone, Debug)]
pub struct StateBuilder {
    gpu_types: Vec<GpuType>,
    pools: Vec<PoolSpec>,
    /// Fleet clusters: (name, index of its first pool in `pools`).
    clusters: Vec<(String, usize)>,
    accounts: Vec<AccountSpec>,
    pub contract: Contract,
}

impl Default for StateBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StateBuilder {
    pub fn new() -> Self {
        StateBuilder {
            gpu_types: Vec::new(),
            pools: Vec::new(),
            clusters: Vec::new(),
            accounts: Vec::new(),
            contract: Contract::default(),
        }
    }

    fn gpu_id(&mut self, name: &str) -> GpuTypeId {
        match self.gpu_types.iter().position(|g| g.name == name) {
            Some(i) => GpuTypeId(i as u16),
            None => {
                self.gpu_types.push(GpuType { name: name.into(), weight: 1.0 });
                GpuTypeId((self.gpu_types.len() - 1) as u16)
            }
        }
    }

    /// Sets a GPU type's normalisation weight.
    pub fn gpu_weight(mut self, name: &str, weight: f64) -> Self {
        let id = self.gpu_id(name);
        self.gpu_types[id.0 as usize].weight = weight;
        self
    }

    /// Starts a cluster of a fleet: the pools added next are its own
    /// (pools added before the first call are a fleet of one).
    pub fn cluster(mut self, name: &str) -> Self {
        assert!(self.clusters.is_empty() == self.pools.is_empty(), "pools before the first cluster");
        self.clusters.push((name.into(), self.pools.len()));
        self
    }

    /// Adds a pool of `nodes` × `gpus_per_node`, all in one rack.
    pub fn pool(mut self, name: &str, gpu: &str, nodes: u32, gpus_per_node: u32) -> Self {
        let gpu = self.gpu_id(gpu);
        self.pools.push(PoolSpec { name: name.into(), gpu, nodes, gpus_per_node, rack_size: nodes, shared: false });
        self
    }

    /// Sets the rack size of the last pool.
    pub fn racks_of(mut self, rack_size: u32) -> Self {
        self.pools.last_mut().expect("a pool").rack_size = rack_size;
        self
    }

    /// Marks the last pool shared (legacy policy).
    pub fn shared(mut self) -> Self {
        self.pools.last_mut().expect("a pool").shared = true;
        self
    }

    pub fn account(self, path: &str) -> Self {
        self.account_with(path, |_| {})
    }

    /// Adds an account and edits its spec (share, budget, impact, …).
    pub fn account_with(mut self, path: &str, f: impl FnOnce(&mut AccountSpec)) -> Self {
        let mut a = AccountSpec { path: path.into(), ..Default::default() };
        f(&mut a);
        self.accounts.push(a);
        self
    }

    /// Gives an account legacy pools by name (call after the pools).
    pub fn legacy(mut self, path: &str, pools: &[&str]) -> Self {
        let ids = pools
            .iter()
            .map(|p| {
                let i = self.pools.iter().position(|x| x.name == *p).expect("known pool");
                allot_core::PoolId(i as u32)
            })
            .collect();
        match self.accounts.iter_mut().find(|a| a.path == path) {
            Some(a) => a.legacy_pools = Some(ids),
            None => {
                self.accounts.push(AccountSpec { path: path.into(), legacy_pools: Some(ids), ..Default::default() })
            }
        }
        self
    }

    pub fn contract(mut self, f: impl FnOnce(&mut Contract)) -> Self {
        f(&mut self.contract);
        self
    }

    pub fn build(self) -> State {
        let cluster = if self.clusters.is_empty() {
            Cluster::new("test", self.gpu_types, self.pools)
        } else {
            let mut pools = self.pools.into_iter();
            let mut fleet = Vec::new();
            for (i, (name, start)) in self.clusters.iter().enumerate() {
                let end = self.clusters.get(i + 1).map_or(usize::MAX, |c| c.1);
                fleet.push((name.clone(), pools.by_ref().take(end - start).collect()));
            }
            Cluster::fleet("test", self.gpu_types, fleet)
        };
        let accounts = AccountTree::build(&self.accounts).expect("valid accounts");
        State::new(cluster, accounts, self.contract)
    }
}

/// Builds a [`WorkloadSpec`]; defaults: 1 GPU, batch, submit 0, 1 h of work,
/// no checkpoints, util 1, normal priority, not preemptible.
#[derive(Clone, Debug)]
pub struct Wl {
    id: String,
    account: String,
    user: String,
    class: Class,
    gpus: u32,
    nodes: u32,
    gpu_type: Option<String>,
    /// Names of the clusters it may run on; empty: any.
    clusters: Vec<String>,
    submit: Time,
    work: Time,
    checkpoint: Time,
    util: f64,
    priority: Priority,
    preemptible: bool,
    time_limit: Option<Time>,
    on_signal: bool,
    after: Vec<allot_core::Dependency>,
    array: Option<allot_core::ArrayPart>,
    hold: bool,
    billing: Option<u64>,
}

impl Wl {
    pub fn new(id: impl Into<String>) -> Wl {
        Wl {
            id: id.into(),
            account: String::new(),
            user: "u".into(),
            class: Class::Batch,
            gpus: 1,
            nodes: 0,
            gpu_type: None,
            clusters: Vec::new(),
            submit: 0,
            work: 3600,
            checkpoint: 0,
            util: 1.0,
            priority: Priority::Normal,
            preemptible: false,
            time_limit: None,
            on_signal: false,
            after: Vec::new(),
            array: None,
            hold: false,
            billing: None,
        }
    }

    /// SLURM-2: billed `b` per second it runs (Slurm's `billing` TRES).
    pub fn billing(mut self, b: u64) -> Self {
        self.billing = Some(b);
        self
    }

    /// HOLD-1: submitted on hold.
    pub fn hold(mut self) -> Self {
        self.hold = true;
        self
    }

    /// DEP-1: waits for `on` as `kind` says.
    pub fn after(mut self, kind: allot_core::DepKind, on: allot_core::WorkloadId) -> Self {
        self.after.push(allot_core::Dependency { kind, on: allot_core::DepTarget::Workload(on) });
        self
    }

    /// ARR-1: element `index` of `count` of array `array`, at most `limit`
    /// queued or running.
    pub fn array(mut self, array: u64, index: u32, count: u32, limit: Option<u32>) -> Self {
        self.array = Some(allot_core::ArrayPart { array, index, count, limit });
        self
    }
    pub fn account(mut self, a: &str) -> Self {
        self.account = a.into();
        self
    }
    pub fn user(mut self, u: &str) -> Self {
        self.user = u.into();
        self
    }
    pub fn class(mut self, c: Class) -> Self {
        self.class = c;
        self
    }
    pub fn gpus(mut self, g: u32) -> Self {
        self.gpus = g;
        self
    }
    pub fn nodes(mut self, n: u32) -> Self {
        self.nodes = n;
        self
    }
    pub fn gpu_type(mut self, t: &str) -> Self {
        self.gpu_type = Some(t.into());
        self
    }
    /// The clusters it may run on (FLEET-1).
    pub fn on(mut self, clusters: &[&str]) -> Self {
        self.clusters = clusters.iter().map(|c| c.to_string()).collect();
        self
    }
    pub fn submit(mut self, t: Time) -> Self {
        self.submit = t;
        self
    }
    pub fn work(mut self, s: Time) -> Self {
        self.work = s;
        self
    }
    pub fn checkpoint(mut self, s: Time) -> Self {
        self.checkpoint = s;
        self
    }
    pub fn util(mut self, u: f64) -> Self {
        self.util = u;
        self
    }
    pub fn priority(mut self, p: Priority) -> Self {
        self.priority = p;
        self
    }
    /// CON-6: running time allowed per attempt.
    /// CON-8: it checkpoints when signalled.
    pub fn on_signal(mut self) -> Self {
        self.on_signal = true;
        self
    }

    pub fn time_limit(mut self, s: Time) -> Self {
        self.time_limit = Some(s);
        self
    }
    pub fn preemptible(mut self) -> Self {
        self.preemptible = true;
        self
    }

    /// Resolves names against `state` (panics on unknown names: tests only).
    pub fn build(&self, state: &State) -> WorkloadSpec {
        let account = state.accounts.get(&self.account).unwrap_or_else(|| panic!("unknown account {:?}", self.account));
        let gpu_type =
            self.gpu_type.as_ref().map(|t| state.cluster.gpu_type_by_name(t).unwrap_or_else(|| panic!("gpu {t}")));
        WorkloadSpec {
            id: self.id.clone(),
            submit: self.submit,
            account,
            user: self.user.clone(),
            class: self.class,
            gpus: self.gpus,
            nodes: self.nodes,
            gpu_type,
            clusters: if self.clusters.is_empty() {
                allot_core::cluster::ClusterSet::ANY
            } else {
                allot_core::cluster::ClusterSet::of(
                    self.clusters
                        .iter()
                        .map(|c| state.cluster.cluster_by_name(c).unwrap_or_else(|| panic!("cluster {c}"))),
                )
            },
            work_s: self.work,
            checkpoint_s: self.checkpoint,
            util: self.util,
            priority: self.priority,
            preemptible: self.preemptible,
            time_limit_s: self.time_limit,
            checkpoint_on_signal: self.on_signal,
            after: self.after.clone(),
            array: self.array,
            hold: self.hold,
            billing: self.billing,
        }
    }
}
