//! One scheduling pass of `allot`.
//!
//! Tiers are served in rank order (INT-1 lane, in-budget, over-budget;
//! BUD-1/BUD-2), each through a fair-share [`Queue`]. For every waiting
//! workload, in order:
//! 1. SVC-2: a service that would exceed a service cap on its path waits;
//! 2. it starts if it fits in the free GPUs (backfill: a workload that does
//!    not fit never blocks later ones, so the pass is work-conserving);
//! 3. else it claims GPUs already being released by stopping workloads if
//!    they (with free ones) fit it, reserving them so that nothing else
//!    starts there; no new victim is chosen for it (CON-2);
//! 4. else it preempts victims chosen under CON-5 ([`Victims`]).
//!
//! CON-10 (`keep_claims`): the GPUs a workload claimed in step 3 or took
//! in step 4 are kept for it in the state ([`State::claims`]) until it
//! starts. Before the tiers are served, each kept claim is honoured: a
//! claim whose GPUs are all free now starts its workload on them; any
//! other is reserved (no other workload starts on or claims its GPUs) and
//! counts for its workload's fair share, as a claim made in the pass does.
//!
//! A user none of whose remaining workloads can start, claim or preempt
//! (the smallest gang of each of its shapes failed all three) leaves the
//! pass at once, so a saturated cluster with thousands waiting costs a few
//! steps per user, not per workload. A workload whose shape is already known
//! to fail all three changes nothing when considered, so while the queue
//! would take the same user next anyway, its next workload is taken at once
//! without re-ranking.
//!
//! Over-budget work is only served after all in-budget work had its turn,
//! so it runs only on capacity no in-budget work could use (BUD-2). Every
//! start, claim and preemption updates the fair-share allocations, so the
//! next choice sees them (FS-1).

use std::collections::BTreeMap;

use crate::Time;
use crate::account::AccountId;
use crate::decision::{Action, Decision};
use crate::pending::Shape;
use crate::placement::{Allocation, FreeMap, PlacementFailure, diagnose, find};
use crate::policy::FailCache;
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::workload::{Class, Phase, WorkloadId, WorkloadSpec};

use super::budget::{self, Budgets};
use super::contract::{lane_reject, service_cap, service_cap_for};
use super::fairshare::{FairShare, FairShareBuffers, Side, Users, ngpus};
use super::preempt::{Buffers, Found, Preemptor, SearchFails, Victims, any_for, any_of_type, candidate};
use super::queue::{Queue, QueueBuffers, Work};
use super::rank::Tier;
use super::waiting::Waiting;

/// What a pass did with one waiting workload (kept for the probed one).
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Started(Tier),
    /// Claimed GPUs that stopping workloads are releasing.
    Claimed(Allocation),
    /// Preempted victims for it.
    Preempting(Vec<(WorkloadId, Rule)>),
    /// CON-12: would preempt these victims, and waits for the checkpoint
    /// one of them has due (the latest such instant).
    AwaitsCheckpoint(Vec<WorkloadId>, Time),
    Rejected(Reason),
    /// SVC-2: (account, service GPUs held, cap).
    ServiceCap(AccountId, u32, u32),
    /// Did not fit and nothing could be preempted for it (the placement
    /// failure is only computed for the probed workload).
    Blocked(Tier, Option<PlacementFailure>),
    /// The pass ran out of capacity before reaching it.
    NotReached(Tier),
}

/// Which workloads' outcomes a pass keeps (for explanations).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    None,
    All,
}

/// Buffers a pass can take over from the previous one, so that a pass
/// does not allocate them anew; each is emptied (or, for the member table,
/// left empty) before use, so no data crosses from one pass to the next.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    fs: FairShareBuffers,
    users: Users,
    search_fails: SearchFails,
    svc: Vec<u32>,
    free: Option<FreeMap>,
    hyp: Option<FreeMap>,
    victims: Buffers,
    queue: QueueBuffers,
}

/// The working state of one pass.
pub(crate) struct Pass<'a> {
    pub(crate) state: &'a State,
    pub(crate) now: Time,
    pub(crate) fs: FairShare,
    pub(crate) users: Users,
    pub(crate) budgets: Budgets,
    free: FreeMap,
    /// Free GPUs plus those of stopping workloads not yet claimed.
    hyp: FreeMap,
    fails: FailCache,
    hyp_fails: FailCache,
    search_fails: SearchFails,
    victims: Victims,
    queue: QueueBuffers,
    /// Service GPUs held per account subtree (SVC-2).
    svc: Vec<u32>,
    pub(crate) out: Vec<Decision>,
    probe: Probe,
    /// Outcome of every waiting workload when probing.
    pub(crate) outcomes: BTreeMap<WorkloadId, Outcome>,
    /// Whether the over-budget work of this pass has more than one impact,
    /// so IMP-1 orders it (and its start reasons say so).
    impact_steers: bool,
    /// CON-10: workloads whose kept claim this pass honoured: started on
    /// it (`None`) or still waiting for its GPUs to be released.
    kept: BTreeMap<WorkloadId, Option<Allocation>>,
}

/// Takes out of `free` the GPUs of `alloc` that are free there.
fn reserve(state: &State, free: &mut FreeMap, alloc: &Allocation) {
    let parts = alloc.parts.iter().map(|&(n, m)| (n, m & free.free[n.0 as usize])).filter(|(_, m)| *m != 0).collect();
    free.take(&state.cluster, &Allocation { parts });
}

fn total(m: &FreeMap) -> u32 {
    m.pool_free.iter().sum()
}

fn weight_of(state: &State, alloc: &Allocation) -> f64 {
    alloc.parts.first().map_or(1.0, |(n, _)| state.cluster.weight(state.cluster.node(*n).gpu))
}

impl<'a> Pass<'a> {
    /// Prepares a pass at `now`; `probe` says whether to keep outcomes.
    pub(crate) fn new(state: &'a State, now: Time, probe: Probe) -> Pass<'a> {
        Pass::with_scratch(state, now, probe, Scratch::default())
    }

    /// As [`Pass::new`], with buffers left by an earlier pass;
    /// [`Pass::finish`] gives them back.
    pub(crate) fn with_scratch(state: &'a State, now: Time, probe: Probe, scratch: Scratch) -> Pass<'a> {
        let Scratch { fs, users, mut search_fails, mut svc, free, hyp, victims, queue } = scratch;
        let fs = FairShare::reuse(state, now, fs);
        let budgets = Budgets::new(state, now);
        let users = Users::reuse(state, &fs, users, |h| candidate(state, now, &budgets, h).is_some());
        let victims = Victims::new(state, now, &fs, &users, &budgets, victims);
        let copy = |m: Option<FreeMap>| match m {
            Some(mut m) => {
                m.copy_from(&state.free);
                m
            }
            None => state.free.clone(),
        };
        let (free, mut hyp) = (copy(free), copy(hyp));
        search_fails.clear();
        svc.clear();
        svc.resize(state.accounts.len(), 0);
        for h in state.holding() {
            if h.phase == Phase::Stopping {
                hyp.give(&state.cluster, state.run(h.w).alloc.as_ref().expect("stopping workload holds GPUs"));
            }
            if h.class == Class::Service {
                for a in state.accounts.ancestry(h.account) {
                    svc[a.0 as usize] += h.gpus;
                }
            }
        }
        Pass {
            state,
            now,
            fs,
            users,
            budgets,
            free,
            hyp,
            fails: FailCache::default(),
            hyp_fails: FailCache::default(),
            search_fails,
            victims,
            queue,
            svc,
            out: Vec::new(),
            probe,
            outcomes: BTreeMap::new(),
            impact_steers: false,
            kept: BTreeMap::new(),
        }
    }

    /// Runs the pass; the decisions are in `out`.
    pub(crate) fn run(&mut self) {
        let state = self.state;
        if state.contract.keep_claims {
            self.honour_claims();
        }
        let waiting = Waiting::new(state, &self.budgets, &self.users);
        for &w in &waiting.rejected {
            let reason = lane_reject(state, state.spec(w));
            self.note(w, Outcome::Rejected(reason.clone()));
            self.out.push(Decision { action: Action::Reject { workload: w }, reason });
        }
        for tier in Tier::ALL {
            let work = &waiting.tiers[tier as usize];
            if self.exhausted() {
                self.not_reached(tier, work);
                continue;
            }
            if !work.is_empty() {
                self.serve(tier, work);
            }
            self.not_reached(tier, work);
        }
    }

    /// CON-10: starts each workload whose kept claim is all free now, on
    /// it, and reserves every other kept claim for its workload.
    fn honour_claims(&mut self) {
        let state = self.state;
        for (&w, alloc) in &state.claims {
            // Interactive work the lane no longer admits is rejected (INT-2).
            let Some(tier) = super::rank::tier_of(state, &self.budgets, w) else { continue };
            let u = self.users.of(state, w);
            let all_free = alloc.parts.iter().all(|&(n, m)| {
                let i = n.0 as usize;
                self.free.usable[i] && m & !self.free.free[i] == 0
            });
            if all_free {
                self.free.take(&state.cluster, alloc);
                reserve(state, &mut self.hyp, alloc);
                self.gain(state.spec(w), u, alloc);
                let reason = Reason::new(
                    Rule::ClaimKept,
                    format!("starts on the {} GPUs kept for it while the work on them stopped", alloc.gpus()),
                )
                .led_by("The GPUs freed for it are free now: it starts on them.");
                self.out.push(Decision { action: Action::Start { workload: w, alloc: alloc.clone() }, reason });
                self.note(w, Outcome::Started(tier));
                self.kept.insert(w, None);
            } else {
                reserve(state, &mut self.free, alloc);
                reserve(state, &mut self.hyp, alloc);
                self.gain(state.spec(w), u, alloc);
                self.note(w, Outcome::Claimed(alloc.clone()));
                self.kept.insert(w, Some(alloc.clone()));
            }
        }
    }

    /// CON-10: keeps `alloc` for `w` until it starts (when the contract
    /// says so).
    fn keep(&mut self, w: WorkloadId, alloc: &Allocation) {
        if self.state.contract.keep_claims {
            let reason = Reason::new(Rule::ClaimKept, format!("{} GPUs kept for it until it starts", alloc.gpus()));
            self.out.push(Decision { action: Action::Claim { workload: w, alloc: alloc.clone() }, reason });
        }
    }

    /// Serves one tier in fair-share order until it is empty or nothing
    /// more can be done.
    fn serve(&mut self, tier: Tier, work: &[Work]) {
        if tier == Tier::OverBudget {
            // Any two impacts on the paths of the tier's work (IMP-1
            // compares siblings at every level).
            let fs = &self.fs;
            let mut impacts = work.iter().flat_map(|wk| fs.path(fs.slot(wk.account))).map(|s| fs.impact(s));
            let first = impacts.next();
            self.impact_steers = impacts.any(|i| Some(i) != first);
        }
        let mut q = Queue::build(&self.fs, &self.users, tier, work, std::mem::take(&mut self.queue));
        while let Some((w, u, g)) = q.next() {
            if self.probe == Probe::All {
                let outcome = self.consider(w, u, tier, &mut q);
                q.done(&self.fs, &self.users, u);
                self.note(w, outcome);
            } else {
                self.serve_user(&mut q, w, u, g, tier);
            }
            if self.exhausted() {
                break;
            }
        }
        self.queue = q.into_buffers();
    }

    /// Handles workload `w` (of group `g`) of user `u`, just taken, and while
    /// that changes nothing the user's next ones as long as the queue would
    /// take them next anyway (outcomes are not kept).
    fn serve_user(&mut self, q: &mut Queue, mut w: WorkloadId, u: u32, mut g: usize, tier: Tier) {
        // Whether `hopeless(u)` is known to be false in the current state.
        let mut hope = false;
        loop {
            let group = q.group(u, g);
            if self.inert(group.class, group.shape, q.work(u).account, u, tier) {
                // Considering it would change nothing and find it blocked
                // (or held back by a service cap).
                if !hope && self.hopeless(q, u, tier) {
                    q.drop_user(u);
                    break;
                }
                hope = true;
                match q.pop_again(&self.users, u) {
                    Some((next, ng)) => (w, g) = (next, ng),
                    None => break,
                }
                continue;
            }
            let outcome = self.consider(w, u, tier, q);
            if matches!(outcome, Outcome::Blocked(..) | Outcome::ServiceCap(..)) && self.hopeless(q, u, tier) {
                q.drop_user(u);
            }
            break;
        }
        q.done(&self.fs, &self.users, u);
    }

    /// The decisions, and the buffers for the next pass.
    pub(crate) fn finish(self) -> (Vec<Decision>, Scratch) {
        let scratch = Scratch {
            fs: self.fs.into_buffers(),
            users: self.users.into_buffers(),
            search_fails: self.search_fails,
            svc: self.svc,
            free: Some(self.free),
            hyp: Some(self.hyp),
            victims: self.victims.into_buffers(),
            queue: self.queue,
        };
        (self.out, scratch)
    }

    fn note(&mut self, w: WorkloadId, o: Outcome) {
        if self.probe == Probe::All {
            self.outcomes.entry(w).or_insert(o);
        }
    }

    fn not_reached(&mut self, tier: Tier, work: &[Work]) {
        if self.probe == Probe::All {
            for w in work.iter().flat_map(|wk| wk.workloads()) {
                self.outcomes.entry(w).or_insert(Outcome::NotReached(tier));
            }
        }
    }

    /// Whether none of user `u`'s workloads left in this tier can start,
    /// claim or preempt in the rest of the pass: the smallest gang of each
    /// of its shapes already failed all three (free and released GPUs only
    /// shrink and failed searches stay failed until a preemption).
    fn hopeless(&self, q: &Queue, u: u32, tier: Tier) -> bool {
        let account = q.work(u).account;
        q.reps(u).all(|r| self.inert(r.class, r.shape, account, u, tier))
    }

    /// Whether a workload of this class and shape, of user `u` (of
    /// `account`), would do nothing at all if considered now: held back by
    /// a service cap, or every one of start, claim and preemption already
    /// known to fail for its shape (so that considering it changes no
    /// allocation, free map or cache).
    fn inert(&self, class: Class, shape: Shape, account: AccountId, u: u32, tier: Tier) -> bool {
        if service_cap_for(self.state, &self.svc, class, account, shape.gpus).is_some() {
            return true;
        }
        let no_free = shape.gpus > total(&self.free) || self.fails.known_shape(shape, 0);
        let no_hyp = shape.gpus > total(&self.hyp) || self.hyp_fails.known_shape(shape, 0);
        let search = (tier, shape.gpu_type, shape.clusters, shape.nodes, class);
        no_free
            && no_hyp
            && (!any_of_type(&self.victims, shape.gpu_type) || self.search_fails.known_for(u, search, shape.gpus))
    }

    /// Nothing more can start, be claimed or be preempted in this pass.
    fn exhausted(&self) -> bool {
        total(&self.hyp) == 0 && self.victims.left() == 0
    }

    fn consider(&mut self, w: WorkloadId, u: u32, tier: Tier, q: &mut Queue) -> Outcome {
        let state = self.state;
        let spec = state.spec(w);
        if let Some(kept) = self.kept.get(&w) {
            return kept.as_ref().map_or(Outcome::Started(tier), |a| Outcome::Claimed(a.clone()));
        }
        if let Some((a, held, cap)) = service_cap(state, &self.svc, spec) {
            return Outcome::ServiceCap(a, held, cap);
        }
        if spec.gpus <= total(&self.free) && !self.fails.known_to_fail(spec, 0) {
            match find(&state.cluster, &self.free, spec, &|_| true) {
                Some(alloc) => {
                    self.start(w, u, tier, alloc);
                    return Outcome::Started(tier);
                }
                None => self.fails.record(spec, 0),
            }
        }
        if spec.gpus <= total(&self.hyp) && !self.hyp_fails.known_to_fail(spec, 0) {
            match find(&state.cluster, &self.hyp, spec, &|_| true) {
                Some(alloc) => {
                    self.hyp.take(&state.cluster, &alloc);
                    reserve(state, &mut self.free, &alloc);
                    self.gain(spec, u, &alloc);
                    self.keep(w, &alloc);
                    return Outcome::Claimed(alloc);
                }
                None => self.hyp_fails.record(spec, 0),
            }
        }
        if let Some(outcome) = self.preempt(w, u, tier, q) {
            return outcome;
        }
        let probing = self.probe == Probe::All;
        let fail = probing.then(|| diagnose(&state.cluster, &self.free, spec, &|_| true));
        Outcome::Blocked(tier, fail)
    }

    /// Books an allocation for `spec` in the fair-share and service tallies.
    fn gain(&mut self, spec: &WorkloadSpec, u: u32, alloc: &Allocation) {
        self.victims.allocations_changed();
        let ng = ngpus(spec.gpus, weight_of(self.state, alloc));
        self.fs.add(self.fs.slot(spec.account), ng);
        self.users.alloc[u as usize] += ng;
        if spec.class == Class::Service {
            for a in self.state.accounts.ancestry(spec.account) {
                self.svc[a.0 as usize] += spec.gpus;
            }
        }
    }

    fn start(&mut self, w: WorkloadId, u: u32, tier: Tier, alloc: Allocation) {
        let state = self.state;
        let spec = state.spec(w);
        self.free.take(&state.cluster, &alloc);
        reserve(state, &mut self.hyp, &alloc);
        let reason = self.start_reason(w, u, tier);
        self.gain(spec, u, &alloc);
        self.out.push(Decision { action: Action::Start { workload: w, alloc }, reason });
    }

    fn start_reason(&self, w: WorkloadId, u: u32, tier: Tier) -> Reason {
        let spec = self.state.spec(w);
        let state = self.state;
        let slot = self.fs.slot(spec.account);
        match tier {
            Tier::Lane => Reason::new(
                Rule::Interactive,
                format!(
                    "interactive lane ({} GPUs <= {}, {} s <= {} s); fits",
                    spec.gpus,
                    state.contract.interactive_max_gpus,
                    spec.work_s,
                    state.contract.interactive_max_duration
                ),
            ),
            Tier::InBudget => Reason::new(
                Rule::FairShare,
                format!(
                    "{} next by fair share (usage/entitlement {:.2}{}), user {} usage+held {:.1} GPUs; fits",
                    self.fs.name(state, slot),
                    self.fs.value(slot),
                    if state.contract.impact_weighting { ", IMP-3: entitlement weighted by impact" } else { "" },
                    spec.user,
                    self.users.value(u)
                ),
            ),
            Tier::OverBudget => {
                let culprit = self.budgets.culprit(spec.account, state.member(w));
                let steer = if self.impact_steers {
                    format!(
                        "; IMP-1: over-budget work is served highest impact first (this account: {})",
                        self.fs.impact(slot)
                    )
                } else {
                    String::new()
                };
                Reason::new(
                    Rule::BudgetOver,
                    format!(
                        "{}; runs on capacity no in-budget work can use, without a slice{steer}",
                        budget::describe_over(state, culprit, spec.account, self.now)
                    ),
                )
            }
        }
    }

    /// Chooses and preempts victims for `w` (CON-5), or waits for a
    /// checkpoint one of them has due (CON-12); `None` if there are none.
    fn preempt(&mut self, w: WorkloadId, u: u32, tier: Tier, q: &mut Queue) -> Option<Outcome> {
        let state = self.state;
        let spec = state.spec(w);
        let slot = self.fs.slot(spec.account);
        let p = Preemptor { w, spec, side: Side { slot, user: u, ng: 0.0 }, tier };
        if !any_for(&self.victims, spec) || self.search_fails.known(&p) {
            return None;
        }
        let Some(found) = self.victims.search(state, &self.fs, &self.users, &self.hyp, &p) else {
            self.search_fails.record(&p);
            return None;
        };
        // CON-12: a swap waits for a checkpoint its victims have due; they
        // are held for it in this pass (no other preemptor takes them), and
        // the first periodic pass after the checkpoint decides afresh.
        let due = found
            .victims
            .iter()
            .filter(|(_, rule)| *rule == Rule::NoPingPong)
            .filter_map(|&(i, _)| self.victims.cands[i].checkpoint_due)
            .max();
        if let Some(t) = due {
            let held: Vec<WorkloadId> = found.victims.iter().map(|&(i, _)| self.victims.cands[i].w).collect();
            for &(i, _) in &found.victims {
                self.victims.take(i);
            }
            return Some(Outcome::AwaitsCheckpoint(held, t));
        }
        Some(Outcome::Preempting(self.apply(&p, found, q)))
    }

    fn apply(&mut self, p: &Preemptor, found: Found, q: &mut Queue) -> Vec<(WorkloadId, Rule)> {
        let state = self.state;
        let reasons = self.victim_reasons(p, &found);
        let mut done = Vec::with_capacity(found.victims.len());
        for ((i, rule), reason) in found.victims.iter().copied().zip(reasons) {
            let c = self.victims.cands[i].clone();
            self.victims.take(i);
            self.hyp.give(&state.cluster, state.run(c.w).alloc.as_ref().expect("running workload holds GPUs"));
            self.fs.add(c.side.slot, -c.side.ng);
            self.users.alloc[c.side.user as usize] -= c.side.ng;
            q.refresh_user(&self.users, c.side.user);
            q.rekey(&self.fs, c.side.slot);
            self.out.push(Decision { action: Action::Preempt { workload: c.w, by: Some(p.w) }, reason });
            done.push((c.w, rule));
        }
        self.hyp.take(&state.cluster, &found.alloc);
        reserve(state, &mut self.free, &found.alloc);
        self.gain(p.spec, p.side.user, &found.alloc);
        self.keep(p.w, &found.alloc);
        // Victims may have freed more than needed: spare GPUs are back in `hyp`.
        self.hyp_fails = FailCache::default();
        self.search_fails.clear();
        done
    }

    /// Reasons citing the rule and the numbers, for the final victim set.
    fn victim_reasons(&self, p: &Preemptor, found: &Found) -> Vec<Reason> {
        let state = self.state;
        let mut removed = super::fairshare::Removed::default();
        for &(i, _) in &found.victims {
            let c = &self.victims.cands[i];
            removed.add(&self.fs, c.side.slot, c.side.user, c.side.ng);
        }
        let w_ng = ngpus(p.spec.gpus, weight_of(state, &found.alloc));
        found
            .victims
            .iter()
            .map(|&(i, rule)| {
                let c = &self.victims.cands[i];
                let ran = self.now.saturating_sub(state.run(c.w).started.unwrap_or(self.now));
                let slice = state.contract.min_slice.get(c.class);
                let detail = match rule {
                    Rule::BudgetOver => {
                        let account = state.spec(c.w).account;
                        let culprit = self.budgets.culprit(account, state.member(c.w));
                        format!(
                            "{}: preemptible at once by in-budget {}",
                            budget::describe_over(state, culprit, account, self.now),
                            p.spec.id
                        )
                    }
                    Rule::Interactive => format!(
                        "interactive {} ({} GPUs) preempts batch past its slice (ran {ran} s >= {slice} s)",
                        p.spec.id, p.spec.gpus
                    ),
                    _ => {
                        super::swap::swap_detail((self.state, &self.fs, &self.users), p, c, w_ng, &removed, ran, slice)
                    }
                };
                Reason::new(rule, detail)
            })
            .collect()
    }
}

/// The last stop time of stopping workloads overlapping `alloc`.
pub(crate) fn released_at(state: &State, alloc: &Allocation) -> Option<Time> {
    state
        .running
        .iter()
        .filter(|w| state.run(**w).phase == Phase::Stopping)
        .filter(|w| {
            state
                .run(**w)
                .alloc
                .as_ref()
                .is_some_and(|a| a.parts.iter().any(|(n, m)| alloc.parts.iter().any(|(n2, m2)| n == n2 && m & m2 != 0)))
        })
        .filter_map(|w| state.run(*w).stop_at)
        .max()
}
