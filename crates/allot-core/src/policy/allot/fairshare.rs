//! Hierarchical fair share (rules FS-1 and FS-2; see `docs/fairshare.md`).
//!
//! The tree is walked in *slots*: every account is a slot, and an account
//! that has sub-accounts *and* work charged to itself gets one more slot for
//! that own work (an implicit child of share 1), so workloads always sit at a
//! leaf slot.
//!
//! FS-1, per slot `s` with demand (pending or running work in its subtree):
//! * entitlement `e(s) = e(parent) · share(s) / Σ share(siblings with demand)`,
//!   `e(root) = 1`; siblings without demand get nothing, so their part flows
//!   to those with demand (work conservation); with `impact_weighting = "on"`
//!   (IMP-3, `docs/impact.md`) every `share` here is `share · impact`;
//! * usage `m(s) = U(s) / τ`, the decayed usage `U` of the ledger divided by
//!   `τ = half_life / ln 2`: the steady-state usage of a constant allocation
//!   is `A·τ`, so `m` is an average allocation in normalised GPUs;
//! * level value `v(s) = (m(s) + A(s)) / (2 · e(s) · C)` with `A` the
//!   normalised GPUs held now and `C` the cluster's normalised capacity.
//!   `v = 1` means "exactly at its fair share, now and in the recent past".
//!   With a half-life of 0 there is no history: `v = A / (e · C)`.
//!
//! FS-2: users of one slot are weighed by their user share (1 unless the
//! account sets one, [`crate::account::Account::user_share`]); the user with
//! the lowest `(m(u) + A(u)) / share(u)` (the same measure, per member of the
//! slot: the ledger's decayed usage of the user's work in that account over
//! `τ`, plus the normalised GPUs held now) goes first, ties by the user's
//! oldest waiting workload. With a half-life of 0 it is `A(u) / share(u)`.

use crate::Time;
use crate::account::AccountId;
use crate::pending::MemberId;
use crate::state::{Holding, State};
use crate::workload::{Phase, WorkloadId};

/// A position in the fair-share tree: an account id, or `n + id` for the
/// own work of account `id` when it also has sub-accounts.
pub(crate) type Slot = u32;

/// The root slot.
pub(crate) const ROOT: Slot = 0;

/// An `f64` with a total order (values are never NaN).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Share(pub f64);

impl Eq for Share {}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Fair-share values of every slot for one pass. Allocations are updated as
/// the pass starts and preempts work, so ranks follow the pass (FS-1).
#[derive(Clone, Debug)]
pub(crate) struct FairShare {
    n: u32,
    /// Per slot.
    s: Vec<SlotShare>,
    /// Per account: whether it has sub-accounts.
    internal: Vec<bool>,
    cap: f64,
    decay: bool,
    /// `τ = half_life / ln 2`.
    tau: f64,
    now: Time,
    /// CON-11: `1 - swap_margin`, the factor of the victim's side a
    /// preemptor's must stay below after a swap.
    keep: f64,
}

/// What FS-1 knows of one slot.
#[derive(Copy, Clone, Debug)]
struct SlotShare {
    parent: Slot,
    depth: u32,
    share: f64,
    /// Own or inherited impact (an own-work slot: its account's).
    impact: f64,
    demand: bool,
    ent: f64,
    hist: f64,
    alloc: f64,
}

/// Normalised GPUs of a workload holding `gpus` GPUs of weight `weight`.
pub(crate) fn ngpus(gpus: u32, weight: f64) -> f64 {
    f64::from(gpus) * weight
}

/// The tables of a [`FairShare`], kept from one pass to the next.
#[derive(Clone, Debug, Default)]
pub(crate) struct FairShareBuffers {
    s: Vec<SlotShare>,
    internal: Vec<bool>,
}

impl FairShare {
    /// Values as of `now`: demand from the queues, history from the ledger,
    /// allocation from the running (not stopping) workloads.
    pub(crate) fn new(state: &State, now: Time) -> FairShare {
        FairShare::reuse(state, now, FairShareBuffers::default())
    }

    /// As [`FairShare::new`], in the tables of an earlier pass.
    pub(crate) fn reuse(state: &State, now: Time, buffers: FairShareBuffers) -> FairShare {
        let tree = &state.accounts;
        let n = tree.len() as u32;
        let size = 2 * n as usize;
        let blank = SlotShare {
            parent: ROOT,
            depth: 0,
            share: 1.0,
            impact: 1.0,
            demand: false,
            ent: 0.0,
            hist: 0.0,
            alloc: 0.0,
        };
        let FairShareBuffers { mut s, mut internal } = buffers;
        s.clear();
        s.resize(size, blank);
        internal.clear();
        internal.resize(n as usize, false);
        let mut fs = FairShare {
            n,
            s,
            internal,
            cap: 0.0,
            decay: state.contract.usage_half_life > 0,
            tau: state.contract.usage_half_life as f64 / std::f64::consts::LN_2,
            now,
            keep: 1.0 - state.contract.swap_margin,
        };
        for a in tree.ids() {
            let acc = tree.account(a);
            let i = a.0 as usize;
            fs.s[i].parent = acc.parent.map_or(ROOT, |p| p.0);
            fs.s[i].depth = acc.depth;
            // IMP-3: entitlement weight share · impact among siblings.
            let weight = if state.contract.impact_weighting { acc.impact } else { 1.0 };
            fs.s[i].share = acc.share * weight;
            fs.s[i].impact = acc.impact;
            fs.internal[i] = !acc.children.is_empty();
            fs.s[n as usize + i].share = weight;
            fs.s[n as usize + i].impact = acc.impact;
            fs.s[n as usize + i].parent = a.0;
            fs.s[n as usize + i].depth = acc.depth + 1;
        }
        fs.internal[0] = true;
        fs.cap = state.cluster.nodes.iter().map(|x| ngpus(x.gpus, state.cluster.weight(x.gpu))).sum::<f64>().max(1.0);
        fs.init_demand(state);
        fs.init_entitlement(state);
        fs.init_history(state, now);
        for h in state.holding() {
            if h.phase == Phase::Running {
                fs.add(fs.slot(h.account), ngpus(h.gpus, h.weight));
            }
        }
        fs
    }

    /// The tables, for the next pass.
    pub(crate) fn into_buffers(self) -> FairShareBuffers {
        FairShareBuffers { s: self.s, internal: self.internal }
    }

    fn init_demand(&mut self, state: &State) {
        for (a, _) in state.pending_index().accounts() {
            let s = self.slot(a);
            self.s[s as usize].demand = true;
        }
        for h in state.holding() {
            let s = self.slot(h.account);
            self.s[s as usize].demand = true;
        }
        // Own-work slots first, then accounts children-first (ids are in
        // path order, so a child's id is larger than its parent's).
        for s in (self.n..2 * self.n).rev().chain((1..self.n).rev()) {
            if self.s[s as usize].demand {
                let p = self.s[s as usize].parent;
                self.s[p as usize].demand = true;
            }
        }
    }

    fn init_entitlement(&mut self, state: &State) {
        self.s[0].ent = 1.0;
        for a in 0..self.n {
            if !self.s[a as usize].demand {
                continue;
            }
            // Child slots: the sub-accounts, then the own-work slot.
            let own = (a != ROOT && self.internal[a as usize]).then_some(self.n + a);
            let children = &state.accounts.account(AccountId(a)).children;
            let kids = || children.iter().map(|c| c.0).chain(own);
            let total: f64 = kids().filter(|k| self.s[*k as usize].demand).map(|k| self.s[k as usize].share).sum();
            let ent = self.s[a as usize].ent;
            for k in kids() {
                if self.s[k as usize].demand && total > 0.0 {
                    self.s[k as usize].ent = ent * self.s[k as usize].share / total;
                }
            }
        }
    }

    fn init_history(&mut self, state: &State, now: Time) {
        if !self.decay {
            return;
        }
        let tau = self.tau;
        for a in state.accounts.ids() {
            self.s[a.0 as usize].hist = state.ledger.decayed_ngs_at(a, now) / tau;
        }
        self.s[0].hist =
            state.accounts.account(AccountId::ROOT).children.iter().map(|c| self.s[c.0 as usize].hist).sum();
        for a in state.accounts.ids() {
            if self.internal[a.0 as usize] {
                let kids: f64 = state.accounts.account(a).children.iter().map(|c| self.s[c.0 as usize].hist).sum();
                self.s[(self.n + a.0) as usize].hist = (self.s[a.0 as usize].hist - kids).max(0.0);
            }
        }
    }

    /// The leaf slot where work charged to `account` sits.
    pub(crate) fn slot(&self, account: AccountId) -> Slot {
        if self.internal[account.0 as usize] { self.n + account.0 } else { account.0 }
    }

    pub(crate) fn parent(&self, s: Slot) -> Slot {
        self.s[s as usize].parent
    }

    /// CON-11: `1 - swap_margin` (1 without a margin).
    pub(crate) fn keep(&self) -> f64 {
        self.keep
    }

    /// Impact of a slot's account, own or inherited (IMP-1).
    pub(crate) fn impact(&self, s: Slot) -> f64 {
        self.s[s as usize].impact
    }

    /// Depth of a slot (top-level accounts are at depth 1).
    pub(crate) fn depth(&self, s: Slot) -> u32 {
        self.s[s as usize].depth
    }

    /// Number of slots (for per-slot tables).
    pub(crate) fn slots(&self) -> usize {
        self.s.len()
    }

    /// Human name of a slot: the account path, with " (own work)" for the
    /// own-work slot of an account that has sub-accounts.
    pub(crate) fn name(&self, state: &State, s: Slot) -> String {
        if s < self.n {
            state.accounts.account(AccountId(s)).path.clone()
        } else {
            format!("{} (own work)", state.accounts.account(AccountId(s - self.n)).path)
        }
    }

    /// FS-1 level value of a slot now.
    pub(crate) fn value(&self, s: Slot) -> f64 {
        self.value_with(s, self.s[s as usize].alloc)
    }

    /// FS-1 level value of a slot if it held `alloc` normalised GPUs.
    pub(crate) fn value_with(&self, s: Slot, alloc: f64) -> f64 {
        let e = self.s[s as usize].ent;
        if e <= 0.0 {
            return f64::INFINITY;
        }
        let alloc = alloc.max(0.0);
        if self.decay { (self.s[s as usize].hist + alloc) / (2.0 * e * self.cap) } else { alloc / (e * self.cap) }
    }

    /// Entitled fraction of the cluster.
    pub(crate) fn entitlement(&self, s: Slot) -> f64 {
        self.s[s as usize].ent
    }

    pub(crate) fn alloc(&self, s: Slot) -> f64 {
        self.s[s as usize].alloc
    }

    /// Adds `ng` normalised GPUs (negative to remove) to a slot and its
    /// ancestors.
    pub(crate) fn add(&mut self, s: Slot, ng: f64) {
        let mut x = s;
        loop {
            self.s[x as usize].alloc += ng;
            if x == ROOT {
                break;
            }
            x = self.s[x as usize].parent;
        }
    }

    /// The children of the lowest common ancestor on the paths to `a` and
    /// `b`: the level where their ranks are decided. `None` when one is the
    /// other or its ancestor.
    pub(crate) fn diverge(&self, a: Slot, b: Slot) -> Option<(Slot, Slot)> {
        let (mut x, mut y) = (a, b);
        while self.s[x as usize].depth > self.s[y as usize].depth {
            x = self.s[x as usize].parent;
        }
        while self.s[y as usize].depth > self.s[x as usize].depth {
            y = self.s[y as usize].parent;
        }
        if x == y {
            return None;
        }
        while self.s[x as usize].parent != self.s[y as usize].parent {
            x = self.s[x as usize].parent;
            y = self.s[y as usize].parent;
        }
        Some((x, y))
    }

    /// Slots from the top level down to `s` (root excluded).
    pub(crate) fn path(&self, s: Slot) -> Vec<Slot> {
        let mut p = Vec::with_capacity(self.s[s as usize].depth as usize);
        let mut x = s;
        while x != ROOT {
            p.push(x);
            x = self.s[x as usize].parent;
        }
        p.reverse();
        p
    }
}

/// Users of each leaf slot (FS-2) for one pass: the members (see
/// [`MemberId`]) with pending or holding work, numbered densely.
#[derive(Clone, Debug, Default)]
pub(crate) struct Users {
    /// Per member id: its number in this pass, or `NONE`.
    index: Vec<u32>,
    /// Member of each user.
    member: Vec<MemberId>,
    pub(crate) slot: Vec<Slot>,
    /// Normalised GPUs held by running workloads of the user in the slot.
    pub(crate) alloc: Vec<f64>,
    /// The user's decayed usage in the slot over `τ` (0 without decay).
    hist: Vec<f64>,
    /// The user's share in its account (FS-2; 1 unless set).
    share: Vec<f64>,
}

const NONE: u32 = u32::MAX;

impl Users {
    /// Numbers the members with pending and holding workloads and sums what
    /// running ones hold.
    pub(crate) fn new(state: &State, fs: &FairShare) -> Users {
        Users::reuse(state, fs, Users::default(), |_| true)
    }

    /// As [`Users::new`], in the tables of `old` as left by
    /// [`Users::into_buffers`] (its numbering `NONE` everywhere), so that a
    /// pass costs the members it sees, not every member known, and
    /// allocates nothing new. Of the members only holding GPUs, only those
    /// of the workloads `wanted` are numbered (a pass only ever looks at
    /// the users of waiting work and of candidate victims); each numbered
    /// user's allocation sums all its running workloads, in holding order
    /// either way.
    pub(crate) fn reuse(state: &State, fs: &FairShare, old: Users, wanted: impl Fn(&Holding) -> bool) -> Users {
        let mut u = old;
        if u.index.len() < state.member_count() {
            u.index.resize(state.member_count(), NONE);
        }
        for (m, _) in state.pending_index().members() {
            u.intern(state, fs, m);
        }
        for h in state.holding().iter().filter(|h| wanted(h)) {
            u.intern(state, fs, h.member);
        }
        for h in state.holding() {
            let i = u.index[h.member.0 as usize];
            if i != NONE && h.phase == Phase::Running {
                u.alloc[i as usize] += ngpus(h.gpus, h.weight);
            }
        }
        u
    }

    /// The tables emptied, the numbering set back to `NONE` everywhere.
    pub(crate) fn into_buffers(mut self) -> Users {
        for m in &self.member {
            self.index[m.0 as usize] = NONE;
        }
        self.member.clear();
        self.slot.clear();
        self.alloc.clear();
        self.hist.clear();
        self.share.clear();
        self
    }

    fn intern(&mut self, state: &State, fs: &FairShare, m: MemberId) -> u32 {
        let i = self.index[m.0 as usize];
        if i != NONE {
            return i;
        }
        let i = self.slot.len() as u32;
        let (account, user) = state.member_info(m);
        self.share.push(state.accounts.account(account).user_share(user));
        self.index[m.0 as usize] = i;
        self.member.push(m);
        self.slot.push(fs.slot(account));
        self.alloc.push(0.0);
        self.hist.push(if fs.decay { state.ledger.member_decayed_ngs_at(m.0 as usize, fs.now) / fs.tau } else { 0.0 });
        i
    }

    /// The user's name.
    pub(crate) fn name<'s>(&self, state: &'s State, u: u32) -> &'s str {
        state.member_info(self.member[u as usize]).1
    }

    /// FS-2 value of user `u`: usage plus allocation, over its share.
    pub(crate) fn value(&self, u: u32) -> f64 {
        self.value_with(u, self.alloc[u as usize])
    }

    /// FS-2 value of user `u` if it held `alloc` normalised GPUs.
    pub(crate) fn value_with(&self, u: u32, alloc: f64) -> f64 {
        (self.hist[u as usize] + alloc.max(0.0)) / self.share[u as usize]
    }

    /// The user of a member with pending or holding work.
    pub(crate) fn of_member(&self, m: MemberId) -> u32 {
        let i = self.index[m.0 as usize];
        debug_assert_ne!(i, NONE, "member without work in this pass");
        i
    }

    /// The user of a workload known to the pass.
    pub(crate) fn of(&self, state: &State, w: WorkloadId) -> u32 {
        self.of_member(state.member(w))
    }

    pub(crate) fn len(&self) -> usize {
        self.slot.len()
    }
}

/// Allocations removed from slots and users by the victims chosen so far
/// for one preemptor (the "after the swap" of CON-4).
#[derive(Clone, Debug, Default)]
pub(crate) struct Removed {
    slots: Vec<(Slot, f64)>,
    users: Vec<(u32, f64)>,
}

impl Removed {
    pub(crate) fn add(&mut self, fs: &FairShare, slot: Slot, user: u32, ng: f64) {
        let mut x = slot;
        while x != ROOT {
            match self.slots.iter_mut().find(|(s, _)| *s == x) {
                Some((_, v)) => *v += ng,
                None => self.slots.push((x, ng)),
            }
            x = fs.parent(x);
        }
        match self.users.iter_mut().find(|(u, _)| *u == user) {
            Some((_, v)) => *v += ng,
            None => self.users.push((user, ng)),
        }
    }

    pub(crate) fn slot(&self, s: Slot) -> f64 {
        self.slots.iter().find(|(x, _)| *x == s).map_or(0.0, |(_, v)| *v)
    }

    pub(crate) fn user(&self, u: u32) -> f64 {
        self.users.iter().find(|(x, _)| *x == u).map_or(0.0, |(_, v)| *v)
    }
}

/// The two sides of a CON-4 comparison with their values before and after
/// the swap.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Swap {
    /// Where the two workloads' ranks are decided: slots, or users of one
    /// slot (`level_users`), or FIFO within one user.
    pub(crate) level: SwapLevel,
    pub(crate) w_before: f64,
    pub(crate) w_after: f64,
    pub(crate) v_before: f64,
    pub(crate) v_after: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SwapLevel {
    Slots(Slot, Slot),
    Users(u32, u32),
    Fifo,
}

/// One side of a swap: a workload's slot, user and normalised GPUs.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Side {
    pub(crate) slot: Slot,
    pub(crate) user: u32,
    pub(crate) ng: f64,
}

/// Compares preemptor `w` (gaining `w.ng`) with victim `v` (losing `v.ng`
/// on top of `removed`) at the level where they diverge (CON-4).
pub(crate) fn swap(fs: &FairShare, users: &Users, w: Side, v: Side, removed: &Removed) -> Swap {
    let (level, w_after, v_after) = after_swap(fs, users, w, v, removed);
    let (w_before, v_before) = match level {
        SwapLevel::Slots(a, b) => (fs.value(a), fs.value(b)),
        SwapLevel::Users(x, y) => (users.value(x), users.value(y)),
        SwapLevel::Fifo => (0.0, 0.0),
    };
    Swap { level, w_before, w_after, v_before, v_after }
}

/// CON-4: the preemptor ranks strictly better after the swap ([`swap`]
/// without the values before it). Within one user of one slot nothing is
/// gained by swapping, so never there. Between over-budget workloads
/// (`over`) the rank is IMP-1's: where their accounts diverge, the higher
/// impact ranks first whatever the swap does ([`impact_decides`]).
pub(crate) fn better_after_swap(
    fs: &FairShare,
    users: &Users,
    w: Side,
    v: Side,
    removed: &Removed,
    over: bool,
) -> bool {
    if let Some(better) = impact_decides(fs, w.slot, v.slot, over) {
        return better;
    }
    let (level, w_after, v_after) = after_swap(fs, users, w, v, removed);
    level != SwapLevel::Fifo && w_after < v_after * fs.keep
}

/// IMP-1 in CON-4: between over-budget workloads of slots `w` and `v`
/// (`over`), `Some(true)` if `w`'s side has the higher impact where the
/// two paths diverge, `Some(false)` if the lower; `None` if fair share
/// decides (equal impacts, the same slot, or not over budget). A swap
/// never changes impacts, so neither does the rank it decides.
pub(crate) fn impact_decides(fs: &FairShare, w: Slot, v: Slot, over: bool) -> Option<bool> {
    let (a, b) = fs.diverge(w, v).filter(|_| over)?;
    let (ia, ib) = (fs.impact(a), fs.impact(b));
    (ia != ib).then_some(ia > ib)
}

/// The level of [`swap`] and the two values after the swap.
fn after_swap(fs: &FairShare, users: &Users, w: Side, v: Side, removed: &Removed) -> (SwapLevel, f64, f64) {
    if let Some((a, b)) = fs.diverge(w.slot, v.slot) {
        let wa = fs.alloc(a) - removed.slot(a);
        let vb = fs.alloc(b) - removed.slot(b);
        return (SwapLevel::Slots(a, b), fs.value_with(a, wa + w.ng), fs.value_with(b, vb - v.ng));
    }
    if w.user != v.user {
        let wa = users.alloc[w.user as usize] - removed.user(w.user);
        let vb = users.alloc[v.user as usize] - removed.user(v.user);
        return (
            SwapLevel::Users(w.user, v.user),
            users.value_with(w.user, wa + w.ng),
            users.value_with(v.user, vb - v.ng),
        );
    }
    (SwapLevel::Fifo, 0.0, 0.0)
}
