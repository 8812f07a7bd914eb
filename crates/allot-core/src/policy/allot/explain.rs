//! Why a workload waits, and why a workload was preempted: the rule id and
//! the numbers behind it (every rule; see `docs/contract.md`).
//!
//! An explanation runs the same pass the scheduler would run now, keeping
//! every waiting workload's outcome (once per instant and state, shared by
//! all explanations of that instant), so it says what the pass does with it:
//! start it, hold GPUs being released for it, preempt for it, or leave it
//! waiting because of its budget (BUD-1), its rank (FS-1, FS-2), a service
//! cap (SVC-2) or placement (PLACE-*), with the preemption rules that keep
//! it from displacing running work (CON-1, CON-4).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::Time;
use crate::cluster::Health;
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::words::count;
use crate::workload::{Class, Phase, WorkloadId};

use super::budget::{self, Budgets};
use super::contract::{admit, slice_end};
use super::fairshare::{FairShare, Slot, Users};
use super::pass::{Outcome, Pass, Probe, released_at};
use super::rank::{Tier, ranks};

/// A workload's place in the static rank order of its tier.
#[derive(Copy, Clone, Debug)]
struct Standing {
    /// 1-based rank of its slot among slots with waiting work in the tier.
    account_rank: usize,
    /// The best-ranked slot of the tier.
    top: Slot,
    slot: Slot,
    user: u32,
    /// The best-ranked user of its slot, when that is another user.
    other_user: Option<u32>,
    /// Waiting workloads of the same user in the tier ranked before it.
    earlier: usize,
}

/// Everything needed to explain any waiting workload at one instant: the
/// outcome of a probing pass and the static rank order. Built once per
/// instant and state, then shared by all explanations of that instant.
pub(crate) struct Explainer {
    outcomes: BTreeMap<WorkloadId, Outcome>,
    standing: BTreeMap<WorkloadId, Standing>,
    fs: FairShare,
    user_names: Vec<String>,
    /// FS-2 value (usage + held, normalised GPUs) per user.
    user_value: Vec<f64>,
}

/// A cheap fingerprint of what an explanation depends on: time, queues,
/// free GPUs, node health and charged usage.
pub(crate) fn fingerprint(state: &State, now: Time) -> u64 {
    let mut h = DefaultHasher::new();
    (now, state.specs.len(), state.pending.len(), state.running.len()).hash(&mut h);
    (state.pending.first(), state.pending.last()).hash(&mut h);
    state.running.hash(&mut h);
    state.free.free.hash(&mut h);
    state.free.usable.hash(&mut h);
    for a in &state.accounts.account(crate::account::AccountId::ROOT).children {
        let u = &state.ledger.usage[a.0 as usize];
        (u.charged_gpu_s, u.alloc_gpus, u.last).hash(&mut h);
    }
    h.finish()
}

impl Explainer {
    pub(crate) fn new(state: &State, now: Time) -> Explainer {
        let mut pass = Pass::new(state, now, Probe::All);
        pass.run();
        let outcomes = std::mem::take(&mut pass.outcomes);
        let fs = FairShare::new(state, now);
        let users = Users::new(state, &fs);
        let budgets = Budgets::new(state, now);
        let mut standing = BTreeMap::new();
        let mut cur: Option<(Tier, Slot, Slot, usize, u32)> = None; // tier, top, slot, blocks, first user
        let mut user_run: (Option<(Tier, u32)>, usize) = (None, 0);
        for r in ranks(state, &fs, &users, &budgets) {
            let (tier, top, slot, blocks, first) = match cur {
                Some((t, top, slot, b, f)) if t == r.rank.tier && slot == r.slot => (t, top, slot, b, f),
                Some((t, top, _, b, _)) if t == r.rank.tier => (t, top, r.slot, b + 1, r.user),
                _ => (r.rank.tier, r.slot, r.slot, 1, r.user),
            };
            cur = Some((tier, top, slot, blocks, first));
            if user_run.0 != Some((tier, r.user)) {
                user_run = (Some((tier, r.user)), 0);
            }
            let other_user = (first != r.user).then_some(first);
            let st = Standing { account_rank: blocks, top, slot, user: r.user, other_user, earlier: user_run.1 };
            user_run.1 += 1;
            standing.insert(r.w, st);
        }
        let user_names = (0..users.len() as u32).map(|u| users.name(state, u).to_string()).collect();
        let user_value = (0..users.len() as u32).map(|u| users.value(u)).collect();
        Explainer { outcomes, standing, fs, user_names, user_value }
    }

    /// Why pending workload `w` is not running at `now`.
    pub(crate) fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason {
        let (spec, run) = (state.spec(w), state.run(w));
        if run.phase != Phase::Pending {
            return run
                .last_reason
                .clone()
                .unwrap_or_else(|| Reason::new(Rule::FairShare, format!("not waiting: {}", run.phase.as_str())));
        }
        if let Err(r) = admit(state, spec) {
            return r;
        }
        let Some(outcome) = self.outcomes.get(&w) else {
            return Reason::new(Rule::FairShare, "not considered by the scheduler");
        };
        if matches!(outcome, Outcome::Blocked(..) | Outcome::NotReached(_))
            && let Some(r) = out_of_service(state, w)
        {
            return r;
        }
        match outcome {
            Outcome::Blocked(tier, fail) => {
                let capacity = fail.as_ref().map_or_else(|| "does not fit now".to_string(), |f| f.to_string());
                let rule = fail.as_ref().map_or(Rule::PlaceGang, |f| f.rule);
                self.waiting(state, w, now, *tier, rule, capacity)
            }
            Outcome::NotReached(tier) => {
                let capacity = "no GPUs left after better-ranked work".to_string();
                self.waiting(state, w, now, *tier, Rule::FairShare, capacity)
            }
            _ => acted(state, w, outcome, now),
        }
    }

    /// A waiting workload: its budget, then its rank, then capacity.
    fn waiting(&self, state: &State, w: WorkloadId, now: Time, tier: Tier, rule: Rule, capacity: String) -> Reason {
        let spec = state.spec(w);
        if tier == Tier::OverBudget {
            return Reason::new(
                Rule::BudgetFirst,
                format!("{}; in-budget work ranks ahead; {capacity}", over(state, w, now)),
            );
        }
        // In budget, but not for long at this rate: say when it runs out (BUD-1).
        let capacity = match budget::near_exhaustion(state, spec.account, now) {
            Some(note) => format!("{capacity}; {}: {note}", Rule::BudgetFirst.id()),
            None => capacity,
        };
        let fs = &self.fs;
        let Some(st) = self.standing.get(&w) else {
            return Reason::new(rule, capacity);
        };
        if st.account_rank > 1
            && let Some((a, b)) = fs.diverge(st.top, st.slot)
        {
            return Reason::new(
                Rule::FairShare,
                format!(
                    "rank {} behind {} (usage/entitlement {:.2} vs {:.2}); {capacity}",
                    st.account_rank,
                    fs.name(state, a),
                    fs.value(a),
                    fs.value(b)
                ),
            );
        }
        if let Some(other) = st.other_user {
            return Reason::new(
                Rule::FairUsers,
                format!(
                    "in {} user {} is behind user {} (usage+held {:.1} vs {:.1} GPUs); {capacity}",
                    fs.name(state, st.slot),
                    spec.user,
                    self.user_names[other as usize],
                    self.user_value[st.user as usize],
                    self.user_value[other as usize]
                ),
            );
        }
        if st.earlier > 0 {
            return Reason::new(
                Rule::FairUsers,
                format!(
                    "{} of user {} in {} {}; {capacity}",
                    count(st.earlier as u64, "earlier workload"),
                    spec.user,
                    fs.name(state, st.slot),
                    if st.earlier == 1 { "goes first" } else { "go first" }
                ),
            )
            .led_by("Earlier work of the same user in its project goes first.");
        }
        let (lead, note) = preemption_note(state, w, now);
        Reason::new(rule, format!("{capacity}; {note}")).led_by(lead)
    }
}

/// PLACE-6: the nodes a waiting workload may run on are drained or down,
/// so that, not better-ranked work, is what it waits for: `None` while
/// nodes in service could hold it.
fn out_of_service(state: &State, w: WorkloadId) -> Option<Reason> {
    let spec = state.spec(w);
    let (mut in_service, mut out) = (0u32, [0u32; 3]);
    for (i, n) in state.cluster.nodes.iter().enumerate() {
        if !state.cluster.pool(n.pool).may_serve(spec.gpu_type, spec.clusters) {
            continue;
        }
        match state.health[i] {
            Health::Up => in_service += n.gpus,
            Health::Draining => out[0] += 1,
            Health::Drained => out[1] += 1,
            Health::Down => out[2] += 1,
        }
    }
    if in_service >= spec.gpus || out.iter().all(|&k| k == 0) {
        return None;
    }
    let what: Vec<String> = out
        .iter()
        .zip(["draining", "drained", "down"])
        .filter(|(k, _)| **k > 0)
        .map(|(k, word)| format!("{k} {word}"))
        .collect();
    let up = if in_service == 0 {
        "none is in service".to_string()
    } else {
        format!("those in service have {} in all", count(in_service, "GPU"))
    };
    Reason::new(
        Rule::PlaceHealthy,
        format!(
            "the nodes it may run on are out of service ({}; {up}, it needs {}): it waits until an operator \
             undrains or repairs them",
            what.join(", "),
            count(spec.gpus, "GPU")
        ),
    )
    .into()
}

/// What the pass does for a waiting workload that it starts, holds GPUs
/// for, preempts for, rejects or holds back by a service cap.
fn acted(state: &State, w: WorkloadId, outcome: &Outcome, now: Time) -> Reason {
    let spec = state.spec(w);
    let soon = "fits now; starts at the next scheduling pass";
    match outcome {
        Outcome::Started(Tier::Lane) => Reason::new(Rule::Interactive, soon).led_by(STARTS),
        Outcome::Started(Tier::InBudget) => Reason::new(Rule::FairShare, soon).led_by(STARTS),
        Outcome::Started(Tier::OverBudget) => Reason::new(
            Rule::BudgetOver,
            format!("{}; fits on capacity no in-budget work can use; {soon}", over(state, w, now)),
        )
        .led_by(STARTS),
        Outcome::Claimed(alloc) => {
            let at = released_at(state, alloc).map_or_else(String::new, |t| format!(" at t={t}"));
            Reason::new(
                Rule::Grace,
                format!(
                    "{} GPUs are being released by preempted workloads; starts when their grace ends{at}",
                    spec.gpus
                ),
            )
            .led_by("GPUs are being freed for it: it starts when the work on them has saved and stopped.")
        }
        Outcome::Preempting(victims) => {
            let rule = victims.first().map_or(Rule::NoPingPong, |(_, r)| *r);
            let ids: Vec<&str> = victims.iter().map(|(v, _)| state.spec(*v).id.as_str()).collect();
            let end = now + state.contract.grace;
            Reason::new(rule, format!("preempting {} for it; starts when their grace ends at t={end}", ids.join(", ")))
                .led_by("Running work is being stopped to make room for it.")
        }
        Outcome::AwaitsCheckpoint(victims, t) => {
            let ids: Vec<&str> = victims.iter().map(|v| state.spec(*v).id.as_str()).collect();
            let c = &state.contract;
            Reason::new(
                Rule::CheckpointWait,
                format!(
                    "preempts {} for it just after their checkpoint at t={t} (checkpoint_wait {} s); starts when \
                     their grace ends at t={}",
                    ids.join(", "),
                    c.checkpoint_wait,
                    t + c.grace
                ),
            )
            .led_by(
                "Running work will be stopped for it right after that work saves a checkpoint, so none of it is lost.",
            )
        }
        Outcome::Rejected(r) => r.clone(),
        Outcome::ServiceCap(a, held, cap) => Reason::new(
            Rule::ServiceCap,
            format!(
                "account {} holds {held} service GPUs; {} more would exceed its cap of {cap}",
                state.accounts.account(*a).path,
                spec.gpus
            ),
        ),
        Outcome::Blocked(..) | Outcome::NotReached(_) => Reason::new(Rule::FairShare, "waiting"),
    }
}

/// Why waiting workload `w` is over budget: its account's path (BUD-1) or
/// its user's own budget (BUD-6).
fn over(state: &State, w: WorkloadId, now: Time) -> String {
    let a = state.spec(w).account;
    let culprit = Budgets::new(state, now).culprit(a, state.member(w));
    budget::describe_over(state, culprit, a, now)
}

/// The plain sentence of a workload the next pass starts.
const STARTS: &str = "It starts at the next scheduling pass.";

/// Why nothing is preempted for a top-ranked waiting workload: the plain
/// sentence, and the rules and times behind it.
fn preemption_note(state: &State, w: WorkloadId, now: Time) -> (&'static str, String) {
    let spec = state.spec(w);
    let mut past = 0usize;
    let mut earliest: Option<Time> = None;
    // CON-6: the first running attempt that must end by its time limit.
    let mut limit_end: Option<Time> = None;
    for &v in &state.running {
        let Some(end) = slice_end(state, v) else { continue };
        let first = state.run(v).alloc.as_ref().and_then(|a| a.parts.first()).map(|(n, _)| *n);
        let on_type = first.map(|n| state.cluster.node(n).gpu);
        let elsewhere = first.is_some_and(|n| !spec.clusters.contains(state.cluster.cluster_of(n)));
        if spec.gpu_type.is_some_and(|g| Some(g) != on_type) || elsewhere {
            continue;
        }
        if let (Some(started), Some(limit)) = (state.run(v).started, state.spec(v).time_limit_s) {
            let at = started + limit;
            limit_end = Some(limit_end.map_or(at, |e: Time| e.min(at)));
        }
        if end <= now {
            past += 1;
        } else {
            earliest = Some(earliest.map_or(end, |e: Time| e.min(end)));
        }
    }
    let services = state.running.iter().filter(|v| state.spec(**v).class == Class::Service).count();
    // CON-4 (issue 30, point 9): when its turn comes if nothing is preempted.
    let turn = match limit_end {
        Some(t) => format!("it starts when running work ends, at the latest when one reaches its time limit at t={t}"),
        None => "it starts when running work ends (none has a time limit, so no time can be promised)".to_string(),
    };
    match (past, earliest) {
        (0, Some(t)) => (
            "It is next in line; the GPUs are busy with work inside its guaranteed time, which ends soon.",
            format!("no running workload is past its slice (CON-1); the earliest slice ends at t={t}"),
        ),
        (0, None) if services > 0 => (
            "It is next in line, but only services run, and they are not stopped for other work.",
            "only services run, and they are not preempted (SVC-1)".to_string(),
        ),
        (0, None) => (
            "It is next in line and starts when running work ends.",
            format!("nothing running can be preempted; {turn}"),
        ),
        (n, _) => (
            "It is next in line, but stopping running work for it would only swap places back later, so it waits for running work to end.",
            format!(
                "{} past their slice, but preempting them would not make it rank strictly better (CON-4) or \
                 would not free a fitting placement; {turn}",
                if n == 1 { "1 running workload is".to_string() } else { format!("{n} running workloads are") }
            ),
        ),
    }
}
