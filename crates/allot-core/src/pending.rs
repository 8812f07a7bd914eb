//! Indexes of the waiting queue, so that a scheduling pass walks groups of
//! identical waiting workloads instead of every one of them.
//!
//! [`crate::State`] keeps them in step with its queues in every mutation
//! method, and [`crate::State::sanity_check`] rebuilds them from scratch and
//! compares. Every group is a FIFO set of `(submit, id)`, so a group can be
//! walked, or merged with others, in the order of [`crate::State::pending`].
//!
//! * Per [`MemberId`] (a user within one account, the unit of FS-2): its
//!   work per class and [`Shape`], so the smallest gang of each shape is the
//!   first group of that shape.
//! * Per priority level, account and shape (`priority` policy, PRIO-1).
//! * The largest interactive gang and duration waiting, so that a pass can
//!   tell in O(log n) whether any interactive workload is over the lane
//!   limits (INT-2).

use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::account::AccountId;
use crate::cluster::{ClusterSet, GpuTypeId};
use crate::workload::{Class, Priority, WorkloadId, WorkloadSpec};

/// A waiting workload as the queues order it: `(submit, id)`.
pub type Entry = (Time, WorkloadId);

/// A user as a member of one account: FS-2 ranks the users of one account,
/// so the same name in two accounts is two members. Ids are assigned in
/// submit order by [`crate::State::submit`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct MemberId(pub u32);

/// What placement sees of a gang: GPU type, eligible clusters (FLEET-1),
/// exact node count and size. Ordered by size last, so the smallest gang
/// of a type, cluster set and node count comes first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub gpu_type: Option<GpuTypeId>,
    pub clusters: ClusterSet,
    pub nodes: u32,
    pub gpus: u32,
}

impl Shape {
    pub fn of(spec: &WorkloadSpec) -> Shape {
        Shape { gpu_type: spec.gpu_type, clusters: spec.clusters, nodes: spec.nodes, gpus: spec.gpus }
    }
}

/// The waiting work of one member.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemberQueue {
    /// Per class and shape, FIFO; in (class, shape) order, so the smallest
    /// gang of a class, GPU type and node count is the first of its run.
    pub by_shape: BTreeMap<(Class, Shape), BTreeSet<Entry>>,
}

/// Key of a priority group: level, account, shape.
pub type LevelKey = (Priority, AccountId, Shape);

/// The indexes (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PendingIndex {
    members: BTreeMap<MemberId, MemberQueue>,
    levels: BTreeMap<LevelKey, BTreeSet<Entry>>,
    /// Waiting workloads per account (work charged to the account itself).
    per_account: BTreeMap<AccountId, u32>,
    interactive_gpus: BTreeSet<(u32, WorkloadId)>,
    interactive_work: BTreeSet<(Time, WorkloadId)>,
}

fn insert_in<K: Ord>(map: &mut BTreeMap<K, BTreeSet<Entry>>, k: K, e: Entry) {
    map.entry(k).or_default().insert(e);
}

fn remove_in<K: Ord + Copy>(map: &mut BTreeMap<K, BTreeSet<Entry>>, k: K, e: Entry) {
    let set = map.get_mut(&k).expect("indexed group");
    assert!(set.remove(&e), "workload missing from its group");
    if set.is_empty() {
        map.remove(&k);
    }
}

impl PendingIndex {
    /// Adds a waiting workload.
    pub(crate) fn insert(&mut self, w: WorkloadId, spec: &WorkloadSpec, member: MemberId) {
        let e = (spec.submit, w);
        let shape = Shape::of(spec);
        let q = self.members.entry(member).or_default();
        if spec.class == Class::Interactive {
            self.interactive_gpus.insert((spec.gpus, w));
            self.interactive_work.insert((spec.work_s, w));
        }
        insert_in(&mut q.by_shape, (spec.class, shape), e);
        insert_in(&mut self.levels, (spec.priority, spec.account, shape), e);
        *self.per_account.entry(spec.account).or_default() += 1;
    }

    /// Removes a waiting workload (started or ended).
    pub(crate) fn remove(&mut self, w: WorkloadId, spec: &WorkloadSpec, member: MemberId) {
        let e = (spec.submit, w);
        let shape = Shape::of(spec);
        let q = self.members.get_mut(&member).expect("indexed member");
        if spec.class == Class::Interactive {
            self.interactive_gpus.remove(&(spec.gpus, w));
            self.interactive_work.remove(&(spec.work_s, w));
        }
        remove_in(&mut q.by_shape, (spec.class, shape), e);
        if q.by_shape.is_empty() {
            self.members.remove(&member);
        }
        remove_in(&mut self.levels, (spec.priority, spec.account, shape), e);
        let n = self.per_account.get_mut(&spec.account).expect("indexed account");
        *n -= 1;
        if *n == 0 {
            self.per_account.remove(&spec.account);
        }
    }

    /// Members with waiting work, by id.
    pub fn members(&self) -> impl Iterator<Item = (MemberId, &MemberQueue)> {
        self.members.iter().map(|(m, q)| (*m, q))
    }

    /// Non-empty groups of one priority level, by account and shape.
    pub fn level(&self, p: Priority) -> impl Iterator<Item = (&LevelKey, &BTreeSet<Entry>)> {
        let lo = (p, AccountId(0), Shape { gpu_type: None, clusters: ClusterSet(0), nodes: 0, gpus: 0 });
        self.levels.range(lo..).take_while(move |(k, _)| k.0 == p)
    }

    /// Accounts with work of their own waiting, by id, with its count.
    pub fn accounts(&self) -> impl Iterator<Item = (AccountId, u32)> + '_ {
        self.per_account.iter().map(|(a, n)| (*a, *n))
    }

    /// The most GPUs any waiting interactive workload asks for.
    pub fn max_interactive_gpus(&self) -> Option<u32> {
        self.interactive_gpus.last().map(|(g, _)| *g)
    }

    /// The longest work any waiting interactive workload declares.
    pub fn max_interactive_work(&self) -> Option<Time> {
        self.interactive_work.last().map(|(t, _)| *t)
    }
}
