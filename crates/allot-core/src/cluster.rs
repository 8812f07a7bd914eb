//! The fleet: GPU types, clusters of pools of identical nodes, racks and
//! node health.
//!
//! A [`Cluster`] value is the whole fleet one policy schedules: one or more
//! named clusters (config order), each a set of pools. A pool is `nodes`
//! identical nodes of `gpus_per_node` GPUs of one type; every `rack_size`
//! consecutive nodes of a pool form one rack (network block). Nodes are
//! named `<pool>-<index>`; in a fleet of several clusters pools are named
//! `<cluster>/<pool>`, so node names are `<cluster>/<pool>-<index>` and
//! unique fleet-wide. A gang never spans pools, so never clusters (FLEET-1).
//!
//! The topology only grows: a node that appears at run time (a Kubernetes
//! Node joining, an `add` event) joins an existing pool with
//! [`Cluster::add_node`] (MNT-5). It is appended (`NodeId(nodes.len())`),
//! so every existing id stays; it extends the pool's last rack while that
//! rack has fewer than `rack_size` nodes, else starts a rack with a fresh
//! global id. A pool's nodes are its laid-out range
//! `first_node .. first_node + laid_out()` followed by [`Pool::added`].
//! Health and free GPUs live in [`crate::State`].

use serde::{Deserialize, Serialize};

/// Index of a GPU type in [`Cluster::gpu_types`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuTypeId(pub u16);

/// Index of a pool in [`Cluster::pools`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolId(pub u32);

/// Index of a cluster of the fleet in [`Cluster::clusters`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterId(pub u16);

/// Most clusters in one fleet (eligibility is a 64-bit set).
pub const MAX_CLUSTERS: usize = 64;

/// The clusters a workload may run on (rule FLEET-1): a set of
/// [`ClusterId`]s, [`ClusterSet::ANY`] by default.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterSet(pub u64);

impl ClusterSet {
    /// Every cluster of the fleet.
    pub const ANY: ClusterSet = ClusterSet(u64::MAX);

    pub fn of(ids: impl IntoIterator<Item = ClusterId>) -> ClusterSet {
        ClusterSet(ids.into_iter().fold(0, |m, c| m | 1u64 << c.0))
    }

    pub fn contains(self, c: ClusterId) -> bool {
        self.0 >> c.0 & 1 == 1
    }

    pub fn is_any(self) -> bool {
        self == ClusterSet::ANY
    }
}

impl Default for ClusterSet {
    fn default() -> Self {
        ClusterSet::ANY
    }
}

/// Index of a node in [`Cluster::nodes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// A GPU model and its normalisation weight (budgets are in normalised GPU-hours).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct GpuType {
    pub name: String,
    pub weight: f64,
}

/// What a pool is declared as, before nodes are laid out.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    pub gpu: GpuTypeId,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub rack_size: u32,
    pub shared: bool,
}

/// How a pool places workloads that may use any nodes (`nodes = 0`); its
/// name is the config's `placement` value.
#[derive(
    serde::Serialize,
    serde::Deserialize,
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
pub enum PoolPlacement {
    /// A workload no larger than a node goes on one node (PLACE-2, PLACE-4).
    #[default]
    Pack,
    /// Such a workload may take GPUs from several nodes when no single node
    /// fits it (PLACE-7): placement by GPU count, as in count-based studies.
    Spread,
}

impl PoolPlacement {
    /// The name used in configuration files.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<PoolPlacement> {
        s.parse().ok()
    }
}

/// A pool with its nodes laid out at `first_node .. first_node +
/// laid_out()`, then the nodes added at run time ([`Pool::added`], MNT-5).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct Pool {
    /// `<pool>`, or `<cluster>/<pool>` in a fleet of several clusters.
    pub name: String,
    /// The cluster of the fleet the pool belongs to.
    pub cluster: ClusterId,
    pub gpu: GpuTypeId,
    /// All its nodes: laid out and added.
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub rack_size: u32,
    pub shared: bool,
    /// [`PoolPlacement::Pack`] as laid out by [`Cluster::new`]; set with
    /// [`Cluster::set_placement`].
    pub placement: PoolPlacement,
    pub first_node: NodeId,
    /// Global id of this pool's first rack.
    pub first_rack: u32,
    /// MNT-5: nodes added after the layout, in the order they joined (ids
    /// not contiguous with the laid-out range nor with each other).
    pub added: Vec<NodeId>,
    /// MNT-5: global ids of the racks started by added nodes, in order.
    pub added_racks: Vec<u32>,
}

/// One rack of a pool: a contiguous run of laid-out node ids, then added
/// nodes (MNT-5: the pool's last laid-out rack may be extended by some,
/// later racks hold only added nodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRack<'a> {
    /// Global rack id.
    pub id: u32,
    /// Laid-out node ids (empty for a rack of added nodes).
    pub laid_out: std::ops::Range<u32>,
    pub added: &'a [NodeId],
}

impl<'a> PoolRack<'a> {
    /// Its nodes, laid-out ones first, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + Clone + use<'a> {
        let added: &'a [NodeId] = self.added;
        self.laid_out.clone().map(NodeId).chain(added.iter().copied())
    }
}

/// Why a node could not be added (MNT-5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddNodeError {
    #[error("no pool {0} in the fleet")]
    UnknownPool(u32),
    #[error("node {0} already exists")]
    NameTaken(String),
    #[error("a node name cannot be empty")]
    EmptyName,
}

impl Pool {
    /// Nodes laid out by [`Cluster::fleet`] (the contiguous range).
    pub fn laid_out(&self) -> u32 {
        self.nodes - self.added.len() as u32
    }

    /// GPUs of the pool, laid out and added.
    pub fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// Its racks in order: the laid-out ones (the last extended by the
    /// first added nodes while it has room), then those of added nodes.
    pub fn racks(&self) -> impl Iterator<Item = PoolRack<'_>> + '_ {
        let (first, laid, size) = (self.first_node.0, self.laid_out(), self.rack_size.max(1));
        let laid_racks = laid.div_ceil(size);
        // Added nodes that filled the last laid-out rack.
        let extend = if laid_racks == 0 { 0 } else { ((laid_racks * size - laid) as usize).min(self.added.len()) };
        let (into_last, rest) = self.added.split_at(extend);
        let laid_out = (0..laid_racks).map(move |r| {
            let start = first + r * size;
            let added = if r + 1 == laid_racks { into_last } else { &[][..] };
            PoolRack { id: self.first_rack + r, laid_out: start..(start + size).min(first + laid), added }
        });
        let added = rest.chunks(size as usize).zip(&self.added_racks).map(move |(nodes, &id)| PoolRack {
            id,
            laid_out: first..first,
            added: nodes,
        });
        laid_out.chain(added)
    }

    /// Whether the pool may serve work of this GPU-type constraint and
    /// these eligible clusters (PLACE-5, FLEET-1): the one check of both.
    pub fn may_serve(&self, gpu: Option<GpuTypeId>, clusters: ClusterSet) -> bool {
        gpu.is_none_or(|g| g == self.gpu) && clusters.contains(self.cluster)
    }
}

/// One node.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub pool: PoolId,
    /// Global rack id (racks never span pools).
    pub rack: u32,
    pub gpus: u32,
    pub gpu: GpuTypeId,
}

/// Health of a node. Only `Up` nodes receive new work (rule PLACE-5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// In service.
    Up,
    /// Being drained: its workloads are being preempted; no new work.
    Draining,
    /// Drained: out of service until repaired / undrained.
    Drained,
    /// Failed: out of service until repaired.
    Down,
}

impl Health {
    /// Whether the node counts as in service for availability: up, or
    /// draining while it still serves its last workloads.
    pub fn in_service(self) -> bool {
        matches!(self, Health::Up | Health::Draining)
    }
}

/// The static topology.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct Cluster {
    /// The fleet's name: the cluster's in a fleet of one.
    pub name: String,
    /// The fleet's clusters in config order (one for a single `[cluster]`).
    pub clusters: Vec<String>,
    pub gpu_types: Vec<GpuType>,
    pub pools: Vec<Pool>,
    pub nodes: Vec<Node>,
    /// Number of racks over all pools.
    pub racks: u32,
}

/// Largest `gpus_per_node` supported (free GPUs are a 64-bit mask per node).
pub const MAX_GPUS_PER_NODE: u32 = 64;

impl Cluster {
    /// Lays out nodes and racks for the given pools: a fleet of one
    /// cluster. The caller validated the specs (non-zero sizes,
    /// `gpus_per_node <= 64`, known GPU types).
    pub fn new(name: impl Into<String>, gpu_types: Vec<GpuType>, specs: Vec<PoolSpec>) -> Self {
        let name = name.into();
        Cluster::fleet(name.clone(), gpu_types, vec![(name, specs)])
    }

    /// Lays out a fleet: clusters in order, each with its pools. With more
    /// than one cluster, pools are named `<cluster>/<pool>`. The caller
    /// validated names (unique clusters, pools unique per cluster, at most
    /// [`MAX_CLUSTERS`]) and specs.
    pub fn fleet(name: impl Into<String>, gpu_types: Vec<GpuType>, clusters: Vec<(String, Vec<PoolSpec>)>) -> Self {
        let qualify = clusters.len() > 1;
        let mut names = Vec::with_capacity(clusters.len());
        let mut pools = Vec::new();
        let mut nodes = Vec::new();
        let mut racks = 0u32;
        for (ci, (cname, specs)) in clusters.into_iter().enumerate() {
            for s in specs {
                let pi = pools.len();
                let rack_size = s.rack_size.max(1);
                let first_node = NodeId(nodes.len() as u32);
                let first_rack = racks;
                let pname = if qualify { format!("{cname}/{}", s.name) } else { s.name };
                for i in 0..s.nodes {
                    nodes.push(Node {
                        name: format!("{pname}-{i}"),
                        pool: PoolId(pi as u32),
                        rack: first_rack + i / rack_size,
                        gpus: s.gpus_per_node,
                        gpu: s.gpu,
                    });
                }
                racks += s.nodes.div_ceil(rack_size);
                pools.push(Pool {
                    name: pname,
                    cluster: ClusterId(ci as u16),
                    gpu: s.gpu,
                    nodes: s.nodes,
                    gpus_per_node: s.gpus_per_node,
                    rack_size,
                    shared: s.shared,
                    placement: PoolPlacement::Pack,
                    first_node,
                    first_rack,
                    added: Vec::new(),
                    added_racks: Vec::new(),
                });
            }
            names.push(cname);
        }
        Cluster { name: name.into(), clusters: names, gpu_types, pools, nodes, racks }
    }

    /// Whether the fleet has more than one cluster (names are qualified).
    pub fn is_fleet(&self) -> bool {
        self.clusters.len() > 1
    }

    pub fn cluster_by_name(&self, name: &str) -> Option<ClusterId> {
        self.clusters.iter().position(|c| c == name).map(|i| ClusterId(i as u16))
    }

    pub fn cluster_name(&self, c: ClusterId) -> &str {
        &self.clusters[c.0 as usize]
    }

    /// The cluster a node belongs to.
    pub fn cluster_of(&self, n: NodeId) -> ClusterId {
        self.pools[self.nodes[n.0 as usize].pool.0 as usize].cluster
    }

    /// GPUs of one cluster (added nodes included).
    pub fn cluster_gpus(&self, c: ClusterId) -> u64 {
        self.pools.iter().filter(|p| p.cluster == c).map(Pool::gpus).sum()
    }

    /// MNT-5: a node named `name` appears in `pool`: it is appended
    /// (`NodeId(nodes.len())`, every existing id unchanged) with the pool's
    /// GPU type and `gpus_per_node` GPUs, in the pool's last rack if that
    /// has fewer than `rack_size` nodes, else in a new rack (the next
    /// global rack id). A name any node already has is refused. Only the
    /// topology changes: [`crate::State::add_node`] gives the node its
    /// health and free GPUs.
    pub fn add_node(&mut self, pool: PoolId, name: impl Into<String>) -> Result<NodeId, AddNodeError> {
        let name = name.into();
        if name.is_empty() {
            return Err(AddNodeError::EmptyName);
        }
        if (pool.0 as usize) >= self.pools.len() {
            return Err(AddNodeError::UnknownPool(pool.0));
        }
        if self.node_by_name(&name).is_some() {
            return Err(AddNodeError::NameTaken(name));
        }
        let id = NodeId(self.nodes.len() as u32);
        let p = &self.pools[pool.0 as usize];
        let last = p.racks().last();
        let room = last.as_ref().filter(|r| r.laid_out.len() + r.added.len() < p.rack_size.max(1) as usize);
        let rack = match room {
            Some(r) => r.id,
            None => {
                self.racks += 1;
                self.pools[pool.0 as usize].added_racks.push(self.racks - 1);
                self.racks - 1
            }
        };
        let p = &mut self.pools[pool.0 as usize];
        p.nodes += 1;
        p.added.push(id);
        self.nodes.push(Node { name, pool, rack, gpus: p.gpus_per_node, gpu: p.gpu });
        Ok(id)
    }

    /// Sets how a pool places `nodes = 0` workloads (PLACE-7).
    pub fn set_placement(&mut self, pool: PoolId, placement: PoolPlacement) {
        self.pools[pool.0 as usize].placement = placement;
    }

    /// Total GPUs in the cluster.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }

    /// Nodes of a pool: laid out, then added (MNT-5), in id order.
    pub fn pool_nodes(&self, pool: PoolId) -> impl Iterator<Item = NodeId> + Clone + '_ {
        let p = &self.pools[pool.0 as usize];
        (p.first_node.0..p.first_node.0 + p.laid_out()).map(NodeId).chain(p.added.iter().copied())
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    pub fn pool(&self, id: PoolId) -> &Pool {
        &self.pools[id.0 as usize]
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        // Laid-out names are `<pool>-<index>`: split at the last dash. Nodes
        // renamed after the layout (an engine's own names) and nodes added
        // (MNT-5) are searched.
        let laid_out = name.rsplit_once('-').and_then(|(pool, idx)| {
            let idx: u32 = idx.parse().ok()?;
            let p = self.pools.iter().find(|p| p.name == pool)?;
            (idx < p.laid_out()).then_some(NodeId(p.first_node.0 + idx))
        });
        laid_out
            .filter(|n| self.nodes[n.0 as usize].name == name)
            .or_else(|| self.nodes.iter().position(|n| n.name == name).map(|i| NodeId(i as u32)))
    }

    pub fn gpu_type_by_name(&self, name: &str) -> Option<GpuTypeId> {
        self.gpu_types.iter().position(|g| g.name == name).map(|i| GpuTypeId(i as u16))
    }

    pub fn pool_by_name(&self, name: &str) -> Option<PoolId> {
        self.pools.iter().position(|p| p.name == name).map(|i| PoolId(i as u32))
    }

    /// Normalisation weight of a GPU type.
    pub fn weight(&self, gpu: GpuTypeId) -> f64 {
        self.gpu_types[gpu.0 as usize].weight
    }

    /// Whether a workload could ever get its GPUs in one pool of a cluster
    /// it may use, honouring an optional GPU type and an exact node count,
    /// with the nodes the fleet has now (added ones included, MNT-5).
    pub fn fits_anywhere(&self, gpus: u32, nodes: u32, gpu: Option<GpuTypeId>, clusters: ClusterSet) -> bool {
        self.pools.iter().any(|p| {
            if !p.may_serve(gpu, clusters) {
                return false;
            }
            if nodes == 0 {
                u64::from(gpus) <= p.gpus()
            } else {
                nodes <= p.nodes && gpus.is_multiple_of(nodes) && gpus / nodes <= p.gpus_per_node
            }
        })
    }
}
