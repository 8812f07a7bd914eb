//! The scheduler state a policy reads: topology, node health, free GPUs, the
//! account tree and ledger, every known workload and the queues.
//!
//! The simulator and the server both mutate it only through the methods
//! here, so the invariants (no GPU in two workloads, queues match phases,
//! ledger matches allocations) hold in both; [`State::sanity_check`] verifies
//! them.

use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::account::{AccountId, AccountTree};
use crate::cluster::{AddNodeError, Cluster, GpuTypeId, Health, NodeId, PoolId};
use crate::contract::Contract;
use crate::ledger::Ledger;
use crate::pending::{MemberId, PendingIndex};
use crate::placement::{Allocation, FreeMap, full_mask};
use crate::rule::Reason;
use crate::workload::{Class, Phase, Priority, Run, WorkloadId, WorkloadSpec, kept};

/// A change of a node's health (events file / operator action).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeEvent {
    pub t: Time,
    pub node: NodeId,
    pub kind: NodeEventKind,
}

#[derive(
    serde::Serialize,
    serde::Deserialize,
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum NodeEventKind {
    /// The node fails: its workloads stop at once (MNT-2).
    Fail,
    /// The node is repaired / returned to service.
    Repair,
    /// The node is drained for maintenance (MNT-1).
    Drain,
    /// Drain cancelled or maintenance over: back in service.
    Undrain,
    /// The node fails because its whole cluster is out of service
    /// (FLEET-3): as `fail`, and remembered as the outage's.
    Outage,
    /// The cluster answers again (FLEET-4): a node its outage took out of
    /// service (and nothing else did since) returns to service.
    Return,
}

impl NodeEventKind {
    /// The kinds an operator or an events file may ask for; `outage` and
    /// `return` are the engine's own ([`crate::engine::Input::ClusterDown`]).
    pub const OPERATOR: [NodeEventKind; 4] =
        [NodeEventKind::Fail, NodeEventKind::Repair, NodeEventKind::Drain, NodeEventKind::Undrain];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<NodeEventKind> {
        s.parse().ok()
    }
}

/// MNT-5: a node that appears at `t` (events file `add`, a Kubernetes Node
/// joining) and joins `pool` as `name`, in service. `node` is the id it
/// gets: nodes are appended, so the k-th node added (in time order) to a
/// fleet of N nodes is `NodeId(N + k)`; [`crate::engine::Input::AddNode`]
/// returns it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeAdded {
    pub t: Time,
    pub pool: PoolId,
    pub name: String,
    pub node: NodeId,
}

/// The node events of a replay: health changes of existing nodes and nodes
/// that appear (MNT-5). At one instant, nodes are added before health
/// changes are applied, so an event may name a node added at its instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeEvents {
    pub changes: Vec<NodeEvent>,
    /// In the order they join (ids increasing).
    pub added: Vec<NodeAdded>,
}

impl NodeEvents {
    /// Events of both kinds.
    pub fn len(&self) -> usize {
        self.changes.len() + self.added.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<NodeEvent>> for NodeEvents {
    fn from(changes: Vec<NodeEvent>) -> NodeEvents {
        NodeEvents { changes, added: Vec::new() }
    }
}

/// What a stopped attempt amounted to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StopOutcome {
    /// GPU-seconds the attempt held.
    pub assigned_gpu_s: u64,
    /// GPU-seconds of progress kept.
    pub useful_gpu_s: u64,
    /// Progress (seconds) lost since the last checkpoint.
    pub lost_progress_s: Time,
}

/// A workload holding GPUs, with what the policies read of it on every
/// pass, kept compact and in id order ([`State::holding`]) so that a pass
/// does not chase every running workload's spec, run and allocation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Holding {
    pub w: WorkloadId,
    pub account: AccountId,
    pub member: MemberId,
    pub class: Class,
    pub priority: Priority,
    pub preemptible: bool,
    /// `Running` or `Stopping`.
    pub phase: Phase,
    pub gpus: u32,
    /// Start of the current attempt.
    pub started: Time,
    /// Work left at the start of the attempt.
    pub remaining: Time,
    pub checkpoint_s: Time,
    /// CON-7: it reports checkpoints; what its last report of the attempt
    /// saved.
    pub reports: bool,
    pub reported: Option<Time>,
    /// CON-8: it saves when signalled.
    pub on_signal: bool,
    /// When a stopping workload releases its GPUs.
    pub stop_at: Option<Time>,
    /// GPU type and pool of its first node (a workload never spans pools).
    pub gpu: GpuTypeId,
    pub pool: PoolId,
    /// Normalisation weight of its GPU type.
    pub weight: f64,
}

impl Holding {
    fn of(state: &State, w: WorkloadId) -> Holding {
        let (spec, run) = (state.spec(w), state.run(w));
        let alloc = run.alloc.as_ref().expect("holding workload has an allocation");
        let node = state.cluster.node(alloc.parts.first().expect("holding workload holds GPUs").0);
        Holding {
            w,
            account: spec.account,
            member: state.member(w),
            class: spec.class,
            priority: spec.priority,
            preemptible: spec.preemptible,
            phase: run.phase,
            gpus: spec.gpus,
            started: run.started.expect("holding workload has a start"),
            remaining: run.remaining,
            checkpoint_s: spec.checkpoint_s,
            reports: run.reports,
            reported: run.reported,
            on_signal: spec.checkpoint_on_signal,
            stop_at: run.stop_at,
            gpu: node.gpu,
            pool: node.pool,
            weight: state.cluster.weight(node.gpu),
        }
    }

    /// Progress a preemption of this running workload at `now` would
    /// lose (CON-5): since its last checkpoint (as
    /// [`Run::unsaved_progress`], CON-7), nothing if it checkpoints when
    /// signalled (CON-8).
    pub(crate) fn unsaved_progress(&self, now: Time) -> Time {
        if self.on_signal {
            return 0;
        }
        let p = now.saturating_sub(self.started).min(self.remaining);
        p - kept(p, self.checkpoint_s, self.reports, self.reported)
    }

    /// CON-12: when this running workload's next checkpoint is expected,
    /// if that is known and after `now`: its declared interval after its
    /// last checkpoint (reported, CON-7, or by the interval, CON-3).
    /// `None` when it saves on the signal (CON-8: a preemption loses
    /// nothing anyway), declares no interval, or a reported checkpoint is
    /// overdue, or its work ends first.
    pub(crate) fn next_checkpoint(&self, now: Time) -> Option<Time> {
        if self.on_signal || self.checkpoint_s == 0 {
            return None;
        }
        let p = now.saturating_sub(self.started).min(self.remaining);
        let next = self.started + kept(p, self.checkpoint_s, self.reports, self.reported) + self.checkpoint_s;
        (next > now && next < self.started + self.remaining).then_some(next)
    }
}

/// The full state.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub cluster: Cluster,
    pub accounts: AccountTree,
    pub contract: Contract,
    pub health: Vec<Health>,
    /// Free GPUs on every node (whatever its health) and usable = Up.
    pub free: FreeMap,
    /// K8S-11: per node, the GPUs held by work Allot does not manage
    /// (neither free nor any workload's).
    pub outside: Vec<u64>,
    /// K8S-11: per node, how many GPUs that work holds (more than
    /// `outside` while Allot's workloads held the others: set aside as
    /// they are released).
    outside_wanted: Vec<u32>,
    pub specs: Vec<WorkloadSpec>,
    pub runs: Vec<Run>,
    /// Pending workloads in FIFO order: (submit, id).
    pub pending: BTreeSet<(Time, WorkloadId)>,
    /// Every workload put into `pending` or taken out of it, in the order
    /// it happened (appended by every mutation of `pending`): a policy that
    /// keeps its own view of the queue between passes reads what changed
    /// since its last pass instead of the whole queue.
    pub queue_changes: Vec<WorkloadId>,
    /// Workloads holding GPUs (running or stopping).
    pub running: BTreeSet<WorkloadId>,
    /// Pending workloads that are not queued: a condition of theirs is not
    /// met (HOLD-1, DEP-1, ARR-1), so no policy sees them.
    pub parked: BTreeSet<WorkloadId>,
    /// FLEET-3: the nodes out of service because their cluster is, and
    /// nothing else took them out since; FLEET-4 returns exactly these.
    pub by_outage: BTreeSet<NodeId>,
    pub ledger: Ledger,
    /// Per workload: its member (account and user).
    member_of: Vec<MemberId>,
    /// Per member: account and user name.
    members: Vec<(AccountId, String)>,
    member_ids: BTreeMap<AccountId, BTreeMap<String, MemberId>>,
    /// Groups of `pending` (kept in step by every mutation below).
    index: PendingIndex,
    /// `running`, with what the policies read of each.
    holding: Vec<Holding>,
    /// CON-10: GPUs kept for a pending workload until it starts (set by a
    /// policy's [`crate::Action::Claim`]; gone when it leaves the queue, or
    /// when [`State::prune_claims`] finds one of its GPUs taken).
    pub claims: BTreeMap<WorkloadId, Allocation>,
}

impl State {
    pub fn new(cluster: Cluster, accounts: AccountTree, contract: Contract) -> State {
        let free = FreeMap::new(&cluster);
        let mut ledger =
            Ledger::new(&accounts, contract.periods(), contract.budget_carry_over, contract.usage_half_life);
        ledger.priority_half_life = contract.slurm.decay_half_life;
        State {
            health: vec![Health::Up; cluster.nodes.len()],
            outside: vec![0; cluster.nodes.len()],
            outside_wanted: vec![0; cluster.nodes.len()],
            free,
            cluster,
            accounts,
            contract,
            specs: Vec::new(),
            runs: Vec::new(),
            pending: BTreeSet::new(),
            queue_changes: Vec::new(),
            running: BTreeSet::new(),
            parked: BTreeSet::new(),
            by_outage: BTreeSet::new(),
            ledger,
            member_of: Vec::new(),
            members: Vec::new(),
            member_ids: BTreeMap::new(),
            index: PendingIndex::default(),
            holding: Vec::new(),
            claims: BTreeMap::new(),
        }
    }

    /// The workloads holding GPUs, in id order (as `running`).
    pub(crate) fn holding(&self) -> &[Holding] {
        &self.holding
    }

    fn holding_at(&self, w: WorkloadId) -> Result<usize, usize> {
        self.holding.binary_search_by_key(&w, |h| h.w)
    }

    /// The member (account and user) a workload belongs to.
    pub(crate) fn member(&self, w: WorkloadId) -> MemberId {
        self.member_of[w.0 as usize]
    }

    /// Account and user name of a member.
    pub(crate) fn member_info(&self, m: MemberId) -> (AccountId, &str) {
        let (a, u) = &self.members[m.0 as usize];
        (*a, u.as_str())
    }

    /// Number of members known (ids are `0..member_count()`).
    pub(crate) fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The groups of the pending queue.
    pub(crate) fn pending_index(&self) -> &PendingIndex {
        &self.index
    }

    /// The period standing of `user` in `account` against their own budget
    /// (BUD-6; `budget_ngh` is `None` for a user without one), as
    /// [`crate::ledger::Ledger::projection`] gives it for accounts; `None`
    /// for a user the account has never seen.
    pub fn user_projection(&self, account: AccountId, user: &str, now: Time) -> Option<crate::ledger::Projection> {
        let m = self.member_ids.get(&account)?.get(user)?;
        let budget = self.accounts.account(account).user_budget(user);
        Some(self.ledger.member_projection(m.0 as usize, budget, now))
    }

    /// Charges `gpus` raw GPUs of weight `weight` (negative to release) to
    /// `account` and its user `user` at `now`, outside any workload: a live
    /// scheduler replays its recorded history into the ledger with it.
    pub fn charge(&mut self, account: AccountId, user: &str, now: Time, gpus: i64, weight: f64) {
        let m = self.intern_member(account, user);
        self.ledger.change(&self.accounts, account, now, gpus, weight);
        self.ledger.change_member(m.0 as usize, now, gpus, weight);
    }

    fn intern_member(&mut self, account: AccountId, user: &str) -> MemberId {
        let by_user = self.member_ids.entry(account).or_default();
        if let Some(m) = by_user.get(user) {
            return *m;
        }
        let m = MemberId(self.members.len() as u32);
        by_user.insert(user.to_string(), m);
        self.members.push((account, user.to_string()));
        m
    }

    fn enqueue(&mut self, w: WorkloadId) {
        let spec = &self.specs[w.0 as usize];
        self.pending.insert((spec.submit, w));
        self.queue_changes.push(w);
        self.index.insert(w, spec, self.member_of[w.0 as usize]);
    }

    fn dequeue(&mut self, w: WorkloadId) {
        self.claims.remove(&w);
        let spec = &self.specs[w.0 as usize];
        self.pending.remove(&(spec.submit, w));
        self.queue_changes.push(w);
        self.index.remove(w, spec, self.member_of[w.0 as usize]);
    }

    pub fn spec(&self, w: WorkloadId) -> &WorkloadSpec {
        &self.specs[w.0 as usize]
    }

    pub fn run(&self, w: WorkloadId) -> &Run {
        &self.runs[w.0 as usize]
    }

    /// Adds a submitted workload to the pending queue.
    pub fn submit(&mut self, spec: WorkloadSpec) -> WorkloadId {
        self.submit_as(spec, false)
    }

    /// Adds a submitted workload, queued, or parked (its conditions are not
    /// met: HOLD-1, DEP-1, ARR-1).
    pub fn submit_as(&mut self, spec: WorkloadSpec, parked: bool) -> WorkloadId {
        let id = WorkloadId(self.specs.len() as u32);
        let m = self.intern_member(spec.account, &spec.user);
        self.member_of.push(m);
        let mut run = Run::new(&spec);
        if parked {
            self.parked.insert(id);
        } else {
            run.queued = Some(spec.submit);
        }
        self.runs.push(run);
        self.specs.push(spec);
        if !parked {
            self.enqueue(id);
        }
        id
    }

    /// Takes a pending workload out of the queue: a condition of its is not
    /// met (HOLD-1, DEP-1, ARR-1). Parking a parked one changes nothing.
    pub fn park(&mut self, w: WorkloadId) {
        assert_eq!(self.runs[w.0 as usize].phase, Phase::Pending, "park of a workload that is not pending");
        if self.parked.insert(w) {
            self.dequeue(w);
        }
    }

    /// Queues a parked workload again at `now` (its conditions are met);
    /// the first time it is queued is kept in [`Run::queued`].
    pub fn unpark(&mut self, w: WorkloadId, now: Time) {
        if self.parked.remove(&w) {
            self.runs[w.0 as usize].queued.get_or_insert(now);
            self.enqueue(w);
        }
    }

    /// CON-10: keeps `alloc` for the pending workload `w` until it starts
    /// (replacing what was kept for it).
    pub fn claim(&mut self, w: WorkloadId, alloc: Allocation) {
        assert!(self.pending.contains(&(self.specs[w.0 as usize].submit, w)), "claim for a workload not queued");
        self.claims.insert(w, alloc);
    }

    /// CON-10: drops every claim one of whose GPUs is on a node out of
    /// service or is neither free nor held by a stopping workload (what
    /// was kept cannot be had as it was: its workload is considered anew).
    pub fn prune_claims(&mut self) {
        if self.claims.is_empty() {
            return;
        }
        let mut stopping: BTreeMap<NodeId, u64> = BTreeMap::new();
        for h in &self.holding {
            if h.phase == Phase::Stopping {
                for &(n, m) in &self.runs[h.w.0 as usize].alloc.as_ref().expect("stopping workload holds GPUs").parts {
                    *stopping.entry(n).or_default() |= m;
                }
            }
        }
        let free = &self.free;
        self.claims.retain(|_, a| {
            a.parts.iter().all(|&(n, m)| {
                let i = n.0 as usize;
                free.usable[i] && m & !(free.free[i] | stopping.get(&n).copied().unwrap_or(0)) == 0
            })
        });
    }

    /// Normalisation weight of the GPUs a workload holds.
    fn weight_of(&self, a: &Allocation) -> f64 {
        a.parts.first().map_or(1.0, |(n, _)| self.cluster.weight(self.cluster.node(*n).gpu))
    }

    /// Starts a pending workload on free GPUs of usable nodes.
    pub fn start(&mut self, w: WorkloadId, alloc: Allocation, now: Time, reason: Reason) {
        let i = w.0 as usize;
        let gpus = i64::from(alloc.gpus());
        let weight = self.weight_of(&alloc);
        self.occupy(w, alloc, now, reason);
        let billing = self.billing_of(i, gpus, weight);
        self.ledger.change_billed(&self.accounts, self.specs[i].account, now, gpus, weight, billing);
        self.ledger.change_member_billed(self.member_of[i].0 as usize, now, gpus, weight, billing);
    }

    /// SLURM-2: what workload `i` holding `gpus` GPUs of weight `weight`
    /// is billed per second: its `billing` when it has one, else its
    /// normalised GPUs (negative `gpus`: the release of as much).
    fn billing_of(&self, i: usize, gpus: i64, weight: f64) -> f64 {
        match self.specs[i].billing {
            Some(b) => (b as f64).copysign(gpus as f64),
            None => gpus as f64 * weight,
        }
    }

    /// K8S-10: a pending workload whose attempt has run on `alloc` since
    /// `started` (before a server restart) holds its GPUs again, as its
    /// next attempt. The ledger is not charged: the server replayed the
    /// attempt from its recorded start into it.
    pub fn resume(&mut self, w: WorkloadId, alloc: Allocation, started: Time, reason: Reason) {
        self.occupy(w, alloc, started, reason);
    }

    /// Whether `alloc` is on usable nodes' free GPUs: a pending workload
    /// could hold it.
    pub fn can_hold(&self, alloc: &Allocation) -> bool {
        alloc.parts.iter().all(|(n, m)| {
            let i = n.0 as usize;
            i < self.cluster.nodes.len() && self.free.usable[i] && self.free.free[i] & m == *m
        })
    }

    /// A pending workload holds `alloc` from `now`, the ledger aside.
    fn occupy(&mut self, w: WorkloadId, alloc: Allocation, now: Time, reason: Reason) {
        let i = w.0 as usize;
        assert_eq!(self.runs[i].phase, Phase::Pending, "start of a workload that is not pending");
        for (n, m) in &alloc.parts {
            assert!(self.free.usable[n.0 as usize], "start on a node that is not up");
            assert_eq!(self.free.free[n.0 as usize] & m, *m, "start on GPUs that are not free");
        }
        self.free.take(&self.cluster, &alloc);
        self.dequeue(w);
        self.running.insert(w);
        let r = &mut self.runs[i];
        r.phase = Phase::Running;
        r.started = Some(now);
        r.first_start.get_or_insert(now);
        r.attempts += 1;
        r.alloc = Some(alloc);
        r.last_reason = Some(reason);
        r.reported = None;
        let at = self.holding_at(w).expect_err("a started workload was not holding");
        self.holding.insert(at, Holding::of(self, w));
    }

    /// CON-7: the workload holding GPUs reported a checkpoint completed at
    /// `at`: the progress it had made then is saved (frozen at the signal
    /// once stopping, so a report in the grace saves all of it: CON-8).
    /// Returns the progress saved.
    pub fn checkpoint(&mut self, w: WorkloadId, at: Time) -> Time {
        let r = &mut self.runs[w.0 as usize];
        assert!(r.phase.holds_gpus(), "checkpoint of a workload that holds no GPUs");
        let started = r.started.expect("holding workload has a start");
        let mut p = at.saturating_sub(started).min(r.remaining);
        if let Some(frozen) = r.progress_at_signal {
            p = p.min(frozen);
        }
        let p = p.max(r.reported.unwrap_or(0));
        r.reported = Some(p);
        r.reports = true;
        let at = self.holding_at(w).expect("a running workload is holding");
        self.holding[at].reported = Some(p);
        self.holding[at].reports = true;
        p
    }

    /// When a running workload completes if left alone.
    pub fn finish_time(&self, w: WorkloadId) -> Option<Time> {
        let r = self.run(w);
        Some(r.started? + r.remaining)
    }

    /// Signals a running workload to stop after `grace` (CON-2). Its
    /// progress is frozen now; it keeps its GPUs until `now + grace`.
    pub fn signal(&mut self, w: WorkloadId, now: Time, grace: Time, reason: Reason) -> Time {
        let r = &mut self.runs[w.0 as usize];
        assert_eq!(r.phase, Phase::Running, "signal to a workload that is not running");
        r.progress_at_signal = Some(r.progress(now));
        r.phase = Phase::Stopping;
        r.stop_at = Some(now + grace);
        r.last_reason = Some(reason);
        let at = self.holding_at(w).expect("a running workload is holding");
        self.holding[at].phase = Phase::Stopping;
        self.holding[at].stop_at = Some(now + grace);
        now + grace
    }

    fn release(&mut self, w: WorkloadId, now: Time) -> (Allocation, u64) {
        let i = w.0 as usize;
        let alloc = self.runs[i].alloc.take().expect("holding workload has an allocation");
        self.free.give(&self.cluster, &alloc);
        for n in alloc.nodes() {
            if self.outside[n.0 as usize].count_ones() < self.outside_wanted[n.0 as usize] {
                self.set_aside(n);
            }
        }
        let gpus = alloc.gpus();
        let weight = self.weight_of(&alloc);
        let billing = self.billing_of(i, -i64::from(gpus), weight);
        self.ledger.change_billed(&self.accounts, self.specs[i].account, now, -i64::from(gpus), weight, billing);
        self.ledger.change_member_billed(self.member_of[i].0 as usize, now, -i64::from(gpus), weight, billing);
        self.running.remove(&w);
        let at = self.holding_at(w).expect("a released workload was holding");
        self.holding.remove(at);
        let held = now - self.runs[i].started.expect("holding workload has a start");
        (alloc, held * u64::from(gpus))
    }

    /// Stops a running or stopping workload and requeues it (CON-3 / MNT-2):
    /// progress since its last checkpoint is lost.
    pub fn stop(&mut self, w: WorkloadId, now: Time, reason: Reason) -> StopOutcome {
        self.stop_releasing(w, now, reason).0
    }

    /// [`State::stop`], handing back the GPUs it held.
    pub fn stop_releasing(&mut self, w: WorkloadId, now: Time, reason: Reason) -> (StopOutcome, Allocation) {
        let i = w.0 as usize;
        assert!(self.runs[i].phase.holds_gpus(), "stop of a workload that holds no GPUs");
        let progress = self.runs[i].progress(now);
        let kept = self.runs[i].kept(progress, self.specs[i].checkpoint_s);
        let gpus = u64::from(self.specs[i].gpus);
        let (alloc, assigned) = self.release(w, now);
        let useful = kept * gpus;
        let r = &mut self.runs[i];
        r.remaining -= kept;
        r.phase = Phase::Pending;
        r.started = None;
        r.stop_at = None;
        r.progress_at_signal = None;
        r.preemptions += 1;
        r.lost_gpu_s += assigned - useful;
        r.last_reason = Some(reason);
        self.enqueue(w);
        (StopOutcome { assigned_gpu_s: assigned, useful_gpu_s: useful, lost_progress_s: progress - kept }, alloc)
    }

    /// Completes a workload whose work is done.
    pub fn finish(&mut self, w: WorkloadId, now: Time, reason: Reason) -> StopOutcome {
        self.finish_releasing(w, now, reason).0
    }

    /// [`State::finish`], handing back the GPUs it held.
    pub fn finish_releasing(&mut self, w: WorkloadId, now: Time, reason: Reason) -> (StopOutcome, Allocation) {
        let i = w.0 as usize;
        let (alloc, assigned) = self.release(w, now);
        let r = &mut self.runs[i];
        let useful = r.remaining * u64::from(self.specs[i].gpus);
        r.remaining = 0;
        r.phase = Phase::Finished;
        r.end = Some(now);
        r.started = None;
        r.stop_at = None;
        r.progress_at_signal = None;
        r.last_reason = Some(reason);
        (StopOutcome { assigned_gpu_s: assigned, useful_gpu_s: useful, lost_progress_s: 0 }, alloc)
    }

    /// Ends a pending workload for good (rejected, cancelled or failed).
    pub fn end_pending(&mut self, w: WorkloadId, now: Time, phase: Phase, reason: Reason) {
        let i = w.0 as usize;
        assert_eq!(self.runs[i].phase, Phase::Pending);
        assert!(phase.is_terminal());
        if !self.parked.remove(&w) {
            self.dequeue(w);
        }
        let r = &mut self.runs[i];
        r.phase = phase;
        r.end = Some(now);
        r.last_reason = Some(reason);
    }

    /// K8S-11: `gpus` GPUs of node `n` are held by work Allot does not
    /// manage: that many of its free GPUs (highest indices first) are set
    /// aside, those set aside before and no longer held are free again.
    /// GPUs Allot's workloads hold are never set aside (they are as they
    /// are released): returns how many are now (at most `gpus`).
    pub fn hold_outside(&mut self, n: NodeId, gpus: u32) -> u32 {
        let i = n.0 as usize;
        self.outside_wanted[i] = gpus;
        let before = Allocation { parts: vec![(n, std::mem::take(&mut self.outside[i]))] };
        self.free.pool_outside[self.cluster.node(n).pool.0 as usize] -= before.gpus();
        self.free.give(&self.cluster, &before);
        self.set_aside(n)
    }

    /// Sets free GPUs of node `n` aside up to what work outside Allot
    /// holds there; returns how many are set aside.
    fn set_aside(&mut self, n: NodeId) -> u32 {
        let i = n.0 as usize;
        let gpus = self.outside_wanted[i];
        let mut mask = self.outside[i];
        let mut free = self.free.free[i];
        while mask.count_ones() < gpus && free != 0 {
            let top = 1u64 << (63 - free.leading_zeros());
            mask |= top;
            free &= !top;
        }
        let newly = Allocation { parts: vec![(n, mask & !self.outside[i])] };
        self.free.pool_outside[self.cluster.node(n).pool.0 as usize] += newly.gpus();
        self.free.take(&self.cluster, &newly);
        self.outside[i] = mask;
        mask.count_ones()
    }

    /// Sets a node's health; only `Up` nodes are usable for new work.
    pub fn set_health(&mut self, n: NodeId, h: Health) {
        self.health[n.0 as usize] = h;
        self.free.set_usable(&self.cluster, n, FreeMap::health_usable(h));
    }

    /// MNT-5: a node named `name` appears in `pool`: appended to the
    /// cluster ([`Cluster::add_node`]: existing ids, allocations and
    /// workloads are untouched), `Up` with all its GPUs free, nothing held
    /// outside Allot. A name that exists is refused, the state unchanged.
    pub fn add_node(&mut self, pool: PoolId, name: impl Into<String>) -> Result<NodeId, AddNodeError> {
        let n = self.cluster.add_node(pool, name)?;
        self.health.push(Health::Up);
        self.outside.push(0);
        self.outside_wanted.push(0);
        self.free.add_node(&self.cluster, n);
        Ok(n)
    }

    /// Workloads holding GPUs on a node, in id order.
    pub fn workloads_on(&self, n: NodeId) -> Vec<WorkloadId> {
        self.running
            .iter()
            .copied()
            .filter(|w| self.run(*w).alloc.as_ref().is_some_and(|a| a.nodes().any(|x| x == n)))
            .collect()
    }

    /// GPUs on usable nodes, free or not.
    pub fn usable_gpus(&self) -> u64 {
        self.cluster.nodes.iter().zip(&self.free.usable).filter(|(_, u)| **u).map(|(n, _)| u64::from(n.gpus)).sum()
    }

    /// Checks every invariant; returns the first violation.
    pub fn sanity_check(&self, now: Time) -> Result<(), String> {
        let mut used: Vec<u64> = vec![0; self.cluster.nodes.len()];
        let mut alloc_by_account = vec![0u64; self.accounts.len()];
        let mut alloc_by_member = vec![0u64; self.members.len()];
        for (i, r) in self.runs.iter().enumerate() {
            let w = WorkloadId(i as u32);
            let spec = &self.specs[i];
            let queued = self.pending.contains(&(spec.submit, w));
            let parked = self.parked.contains(&w);
            if queued != (r.phase == Phase::Pending && !parked) || (parked && r.phase != Phase::Pending) {
                return Err(format!("workload {} queued={queued} parked={parked} but phase {:?}", spec.id, r.phase));
            }
            if self.running.contains(&w) != r.phase.holds_gpus() {
                return Err(format!("workload {} running-set mismatch in phase {:?}", spec.id, r.phase));
            }
            match (&r.alloc, r.phase.holds_gpus()) {
                (Some(a), true) => {
                    if a.gpus() != spec.gpus {
                        return Err(format!("workload {} holds {} GPUs, gang is {}", spec.id, a.gpus(), spec.gpus));
                    }
                    if spec.nodes > 0 && a.parts.len() != spec.nodes as usize {
                        return Err(format!("workload {} on {} nodes, asked {}", spec.id, a.parts.len(), spec.nodes));
                    }
                    for (n, m) in &a.parts {
                        let ni = n.0 as usize;
                        if used[ni] & m != 0 {
                            return Err(format!("GPU on node {} in two workloads", self.cluster.nodes[ni].name));
                        }
                        if m & !full_mask(self.cluster.nodes[ni].gpus) != 0 {
                            return Err(format!("workload {} holds GPUs beyond the node", spec.id));
                        }
                        used[ni] |= m;
                    }
                    for x in self.accounts.ancestry(spec.account) {
                        alloc_by_account[x.0 as usize] += u64::from(spec.gpus);
                    }
                    if let Some(m) = self.member_of.get(i) {
                        alloc_by_member[m.0 as usize] += u64::from(spec.gpus);
                    }
                }
                (None, false) => {}
                _ => return Err(format!("workload {} allocation does not match phase {:?}", spec.id, r.phase)),
            }
        }
        let n = self.cluster.nodes.len();
        let per_node = [self.health.len(), self.free.free.len(), self.free.usable.len(), self.outside.len()];
        if per_node.iter().chain([&self.outside_wanted.len()]).any(|l| *l != n) {
            return Err(format!(
                "per-node tables of {per_node:?} and {} entries for {n} nodes",
                self.outside_wanted.len()
            ));
        }
        if self.free.pool_free.len() != self.cluster.pools.len() {
            return Err(format!(
                "{} pool free counts for {} pools",
                self.free.pool_free.len(),
                self.cluster.pools.len()
            ));
        }
        for (pi, p) in self.cluster.pools.iter().enumerate() {
            let racked: u32 = p.racks().map(|r| r.nodes().count() as u32).sum();
            let own = self.cluster.pool_nodes(PoolId(pi as u32)).all(|x| self.cluster.node(x).pool.0 as usize == pi);
            if racked != p.nodes || !own || p.racks().any(|r| r.nodes().any(|x| self.cluster.node(x).rack != r.id)) {
                return Err(format!("pool {} nodes and racks do not match its node list", p.name));
            }
        }
        for (i, n) in self.cluster.nodes.iter().enumerate() {
            let (free, outside) = (self.free.free[i], self.outside[i]);
            if used[i] & free != 0 || outside & (used[i] | free) != 0 || (used[i] | free | outside) != full_mask(n.gpus)
            {
                return Err(format!("free map of node {} does not match allocations", n.name));
            }
            if self.free.usable[i] != (self.health[i] == Health::Up) {
                return Err(format!("node {} usable flag does not match health", n.name));
            }
        }
        for (pi, _) in self.cluster.pools.iter().enumerate() {
            let want: u32 =
                self.cluster.pool_nodes(crate::cluster::PoolId(pi as u32)).map(|n| self.free.free_on(n)).sum();
            if want != self.free.pool_free[pi] {
                return Err(format!("pool {} free count {} != {}", pi, self.free.pool_free[pi], want));
            }
            let outside: u32 = self
                .cluster
                .pool_nodes(crate::cluster::PoolId(pi as u32))
                .map(|n| self.outside[n.0 as usize].count_ones())
                .sum();
            if self.free.pool_outside.get(pi) != Some(&outside) {
                return Err(format!("pool {pi} outside count {:?} != {outside}", self.free.pool_outside.get(pi)));
            }
        }
        for a in self.accounts.ids() {
            if self.ledger.at(a, now).alloc_gpus != alloc_by_account[a.0 as usize] {
                return Err(format!("ledger allocation of {} does not match", self.accounts.account(a).path));
            }
        }
        for (m, want) in alloc_by_member.iter().enumerate() {
            let held = self.ledger.members.get(m).map_or(0, |u| u.alloc_gpus);
            if held != *want {
                let (a, user) = &self.members[m];
                return Err(format!(
                    "ledger allocation of user {user} in {} is {held} GPUs, its workloads hold {want}",
                    self.accounts.account(*a).path
                ));
            }
        }
        self.check_index()
    }

    /// Members, the pending index and the holding table match the
    /// workloads.
    fn check_index(&self) -> Result<(), String> {
        if self.member_of.len() != self.specs.len() {
            return Err(format!("{} members for {} workloads", self.member_of.len(), self.specs.len()));
        }
        let holding: Vec<Holding> = self.running.iter().map(|&w| Holding::of(self, w)).collect();
        if holding != self.holding {
            return Err("holding table does not match the running workloads".to_string());
        }
        let mut index = PendingIndex::default();
        for (i, spec) in self.specs.iter().enumerate() {
            let m = self.member_of[i];
            if self.member_info(m) != (spec.account, spec.user.as_str()) {
                return Err(format!("workload {} has the member of another account or user", spec.id));
            }
            if self.runs[i].phase == Phase::Pending && !self.parked.contains(&WorkloadId(i as u32)) {
                index.insert(WorkloadId(i as u32), spec, m);
            }
        }
        if index != self.index {
            return Err("pending index does not match the pending queue".to_string());
        }
        Ok(())
    }
}
