//! The conditions a pending workload waits on before it is queued: a hold
//! (HOLD-1), dependencies (DEP-1, DEP-2) and its array's limit (ARR-1).
//!
//! A workload whose conditions are not met is parked
//! ([`crate::State::park`]): pending, but in no queue a policy reads, so no
//! policy can start it. Its reason says what it waits for. The conditions
//! are the engine's, so the simulator and the live server keep them alike.

use std::collections::{BTreeMap, BTreeSet};

use super::Engine;
use crate::Time;
use crate::engine::Change;
use crate::rule::{Reason, Rule};
use crate::workload::{DepKind, DepTarget, Phase, WorkloadId};

/// What the engine keeps of the conditions.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Gate {
    /// Per pending workload with a condition not met: what it waits for.
    waits: BTreeMap<WorkloadId, Waits>,
    /// Per workload that has not ended: the workloads waiting on it, and how.
    dependents: BTreeMap<WorkloadId, Vec<(DepKind, WorkloadId)>>,
    /// Per array with a limit: its elements in and out of the queue.
    arrays: BTreeMap<u64, Slots>,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Waits {
    held: bool,
    /// Dependencies not yet satisfied.
    unmet: u32,
}

/// ARR-1: the elements of an array that are queued or hold GPUs
/// (`active`, at most `limit`), and those ready but waiting for a place,
/// by index.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Slots {
    limit: u32,
    active: BTreeSet<WorkloadId>,
    waiting: BTreeSet<(u32, WorkloadId)>,
}

/// Why a hold or a release was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldRefused {
    #[error("only a pending workload can be held (HOLD-1); it is {0}")]
    NotPending(&'static str),
    #[error("it is not held")]
    NotHeld,
}

/// Open dependencies a DEP-1 reason names; the others are counted.
const REASON_DEPS: usize = 8;

impl Engine {
    /// A parked workload just submitted (or restored): its conditions are
    /// taken in; it is queued if they are met, cancelled if a dependency
    /// can never be (DEP-2), else it stays parked with its reason.
    pub(super) fn open_gate(&mut self, w: WorkloadId, now: Time) {
        let spec = self.state.spec(w);
        let mut waits = Waits { held: spec.hold, unmet: 0 };
        let mut never = None;
        for dep in spec.after.clone() {
            let (phase, label) = match dep.on {
                DepTarget::Workload(d) => (self.state.run(d).phase, self.state.spec(d).id.clone()),
                DepTarget::Ended { phase, label } => (phase, label.to_string()),
            };
            match dep.kind.satisfied_by(phase) {
                Some(true) => {}
                Some(false) => {
                    never.get_or_insert((dep.kind, label, phase));
                }
                None => {
                    waits.unmet += 1;
                    if let DepTarget::Workload(d) = dep.on {
                        self.gate.dependents.entry(d).or_default().push((dep.kind, w));
                    }
                }
            }
        }
        if let Some((kind, label, phase)) = never {
            let reason = never_reason(kind, &label, phase);
            self.record(now, w, Change::Cancel, reason.clone());
            self.end_pending(w, now, Phase::Cancelled, reason);
            return;
        }
        self.gate.waits.insert(w, waits);
        let submit = self.state.spec(w).submit.min(now);
        self.try_queue(w, submit);
    }

    /// Queues `w` if its conditions are met and its array has a place;
    /// else it stays parked with the reason of the first unmet one.
    fn try_queue(&mut self, w: WorkloadId, now: Time) {
        let waits = self.gate.waits.get(&w).cloned().unwrap_or_default();
        if waits.held || waits.unmet > 0 {
            let reason = self.wait_reason(w, &waits);
            self.park(w, reason);
            return;
        }
        self.gate.waits.remove(&w);
        let spec = self.state.spec(w);
        if let Some(a) = spec.array
            && let Some(limit) = a.limit
        {
            let slots = self.gate.arrays.entry(a.array).or_insert_with(|| Slots { limit, ..Slots::default() });
            if !slots.active.contains(&w) {
                if slots.active.len() as u32 >= slots.limit {
                    slots.waiting.insert((a.index, w));
                    let reason = Reason::new(
                        Rule::ArrayLimit,
                        format!(
                            "element {} of array {} waits: {} of its elements are queued or running, its limit",
                            a.index, a.array, slots.limit
                        ),
                    );
                    self.park(w, reason);
                    return;
                }
                slots.active.insert(w);
            }
        }
        self.state.unpark(w, now);
        self.dirty = true;
    }

    fn park(&mut self, w: WorkloadId, reason: Reason) {
        self.state.park(w);
        self.state.runs[w.0 as usize].last_reason = Some(reason);
    }

    /// HOLD-1 or DEP-1: what a parked workload waits for. The first
    /// [`REASON_DEPS`] open dependencies are named and the others counted,
    /// so that a reason (asked for by every listing of pending work, in the
    /// scheduler task) costs a count, not a text, per dependency.
    fn wait_reason(&self, w: WorkloadId, waits: &Waits) -> Reason {
        if waits.held {
            return Reason::new(Rule::Hold, "held; it waits until released");
        }
        // An array named in a dependency is one condition per element:
        // said once, by the array's id as people know it, with how many of
        // its elements are in which phase (issue 30, point 5); at most
        // REASON_DEPS conditions are named, the others counted.
        type Group = (&'static str, Option<(u64, u32)>, WorkloadId, Vec<(Phase, u32)>);
        let mut groups: Vec<Group> = Vec::new();
        let mut index: BTreeMap<(&'static str, u64, bool), usize> = BTreeMap::new();
        for d in &self.state.spec(w).after {
            let DepTarget::Workload(o) = d.on else { continue };
            let array = self.state.spec(o).array.as_ref().map(|p| (p.array, p.count));
            let key = match array {
                Some((id, _)) => (d.kind.as_str(), id, true),
                None => (d.kind.as_str(), u64::from(o.0), false),
            };
            let i = *index.entry(key).or_insert_with(|| {
                groups.push((d.kind.as_str(), array, o, Vec::new()));
                groups.len() - 1
            });
            let phase = self.state.run(o).phase;
            let counts = &mut groups[i].3;
            match counts.iter_mut().find(|(p, _)| *p == phase) {
                Some((_, k)) => *k += 1,
                None => counts.push((phase, 1)),
            }
        }
        let mut open = groups.into_iter().filter(|(_, _, _, counts)| counts.iter().any(|(p, _)| !p.is_terminal()));
        let named: Vec<String> = open
            .by_ref()
            .take(REASON_DEPS)
            .map(|(kind, array, o, counts)| match array {
                Some((id, n)) => {
                    let phases: Vec<String> = counts.iter().map(|(p, k)| format!("{k} {}", p.as_str())).collect();
                    format!("{kind}:{id} (array of {n}: {})", phases.join(", "))
                }
                None => format!("{kind}:{} ({})", self.state.spec(o).id, self.state.run(o).phase.as_str()),
            })
            .collect();
        let more = open.count();
        let text = match more {
            0 => format!("waits for {}", named.join(", ")),
            n => format!("waits for {} and {n} more", named.join(", ")),
        };
        Reason::new(Rule::DepWait, text)
    }

    /// A workload ended for good: its array place is freed, and the
    /// workloads waiting on it are queued, or cancelled when it can no
    /// longer satisfy them (DEP-2), in turn.
    pub(super) fn gate_ended(&mut self, w: WorkloadId, now: Time) {
        let mut ended = vec![w];
        while let Some(w) = ended.pop() {
            self.gate.waits.remove(&w);
            self.free_slot(w, now);
            let phase = self.state.run(w).phase;
            for (kind, d) in self.gate.dependents.remove(&w).unwrap_or_default() {
                if self.state.run(d).phase != Phase::Pending {
                    continue;
                }
                if kind.satisfied_by(phase) == Some(true) {
                    if let Some(x) = self.gate.waits.get_mut(&d) {
                        x.unmet = x.unmet.saturating_sub(1);
                    }
                    self.try_queue(d, now);
                } else {
                    let reason = never_reason(kind, &self.state.spec(w).id.clone(), phase);
                    self.record(now, d, Change::Cancel, reason.clone());
                    self.state.end_pending(d, now, Phase::Cancelled, reason);
                    self.dirty = true;
                    ended.push(d);
                }
            }
        }
    }

    /// ARR-1: `w` leaves its array's places (it ended, or was held): the
    /// lowest waiting index takes the place.
    fn free_slot(&mut self, w: WorkloadId, now: Time) {
        let Some(a) = self.state.spec(w).array else { return };
        let Some(slots) = self.gate.arrays.get_mut(&a.array) else { return };
        slots.active.remove(&w);
        slots.waiting.remove(&(a.index, w));
        let mut next = Vec::new();
        while (slots.active.len() as u32) < slots.limit {
            let Some((_, n)) = slots.waiting.pop_first() else { break };
            slots.active.insert(n);
            next.push(n);
        }
        if slots.active.is_empty() && slots.waiting.is_empty() {
            self.gate.arrays.remove(&a.array);
        }
        for n in next {
            self.state.unpark(n, now);
            self.dirty = true;
        }
    }

    /// HOLD-1: holds a pending workload (queued or parked): it leaves the
    /// queue (and its array's place) until released. Holding a held one
    /// changes nothing.
    pub(in crate::engine) fn hold(&mut self, w: WorkloadId, now: Time) -> Result<(), HoldRefused> {
        let phase = self.state.run(w).phase;
        if phase != Phase::Pending {
            return Err(HoldRefused::NotPending(phase.as_str()));
        }
        let waits = self.gate.waits.entry(w).or_default();
        if waits.held {
            return Ok(());
        }
        waits.held = true;
        self.free_slot(w, now);
        let waits = self.gate.waits[&w].clone();
        let reason = self.wait_reason(w, &waits);
        self.park(w, reason);
        Ok(())
    }

    /// HOLD-1: releases a held workload: it is queued when its other
    /// conditions are met.
    pub(in crate::engine) fn release(&mut self, w: WorkloadId, now: Time) -> Result<(), HoldRefused> {
        let phase = self.state.run(w).phase;
        if phase != Phase::Pending {
            return Err(HoldRefused::NotPending(phase.as_str()));
        }
        match self.gate.waits.get_mut(&w) {
            Some(x) if x.held => x.held = false,
            _ => return Err(HoldRefused::NotHeld),
        }
        self.try_queue(w, now);
        Ok(())
    }

    /// Whether the workload is on hold (HOLD-1).
    pub fn held(&self, w: WorkloadId) -> bool {
        self.gate.waits.get(&w).is_some_and(|x| x.held)
    }

    /// Why each of `ws` is pending: the condition it waits for when parked,
    /// the policy's explanation otherwise ([`crate::Policy::explain_all`],
    /// once for all of those).
    pub fn explain_all(&self, policy: &dyn crate::Policy, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        let queued: Vec<WorkloadId> = ws.iter().copied().filter(|w| !self.state.parked.contains(w)).collect();
        let mut theirs = policy.explain_all(&self.state, &queued, now).into_iter();
        ws.iter()
            .map(|w| match self.state.parked.contains(w) {
                true => match self.gate.waits.get(w) {
                    Some(x) if x.held || x.unmet > 0 => self.wait_reason(*w, x),
                    _ => self.state.run(*w).last_reason.clone().unwrap_or_else(|| Reason::new(Rule::ArrayLimit, "")),
                },
                false => theirs.next().expect("a reason per queued workload"),
            })
            .collect()
    }

    /// Every pending workload's reason now ([`Engine::explain_all`]), kept
    /// as its last reason: the end of a replay, where the reasons people
    /// would read are the ones the record keeps.
    pub fn keep_reasons(&mut self, policy: &dyn crate::Policy, now: Time) {
        let mut waiting: Vec<WorkloadId> = self.state.pending.iter().map(|(_, w)| *w).collect();
        waiting.extend(self.state.parked.iter().copied());
        let reasons = self.explain_all(policy, &waiting, now);
        for (w, r) in waiting.into_iter().zip(reasons) {
            self.state.runs[w.0 as usize].last_reason = Some(r);
        }
    }

    /// [`Engine::explain_all`] of one workload.
    pub fn explain(&self, policy: &dyn crate::Policy, w: WorkloadId, now: Time) -> Reason {
        self.explain_all(policy, &[w], now).pop().expect("one reason")
    }

    /// Checks the conditions' invariants: a parked workload waits for
    /// something, a queued one for nothing, and no array has more than its
    /// limit in its places.
    pub fn check_gate(&self) -> Result<(), String> {
        for &w in &self.state.parked {
            let waiting = self.gate.waits.get(&w).is_some_and(|x| x.held || x.unmet > 0)
                || self.gate.arrays.values().any(|s| s.waiting.iter().any(|(_, n)| *n == w));
            if !waiting {
                return Err(format!("workload {} is parked but waits for nothing", self.state.spec(w).id));
            }
        }
        for (array, s) in &self.gate.arrays {
            if s.active.len() as u32 > s.limit {
                return Err(format!(
                    "array {array} has {} elements in places, its limit is {}",
                    s.active.len(),
                    s.limit
                ));
            }
            if let Some(w) = s.active.iter().find(|w| self.state.run(**w).phase.is_terminal()) {
                return Err(format!("array {array} keeps a place for {}, which ended", self.state.spec(*w).id));
            }
            if !s.waiting.is_empty() && (s.active.len() as u32) < s.limit {
                return Err(format!("array {array} has a free place while elements wait"));
            }
        }
        Ok(())
    }
}

/// DEP-2: the reason of a workload cancelled because its dependency of
/// kind `kind` on `on` ended in `phase`.
fn never_reason(kind: DepKind, on: &str, phase: Phase) -> Reason {
    Reason::new(
        Rule::DepNever,
        format!("dependency {}:{on} can never be satisfied: {on} ended {}; cancelled", kind.as_str(), phase.as_str()),
    )
}
