//! "What would start next", for the dashboard's Queue page, noted as the
//! passes go so that answering it costs O(listed), never a pass or an
//! explanation of the whole queue.
//!
//! Every pass starts whatever fits the free GPUs (the passes are
//! work-conserving), so the waiting workloads next in line are those the
//! policy preempted running work for: the GPUs being released are theirs
//! (CON-2), and they start at the first pass after their victims' grace
//! ends. A pass names them in its decisions (`Action::Preempt { by }`), in
//! the order it served them, which is the policy's rank order. [`Noting`]
//! wraps the policy and keeps those choices in [`Chosen`]; the scheduler
//! answers `Msg::NextStarts` from them.
//!
//! A choice is forgotten once its workload starts or leaves the queue, or
//! at the first pass after all its victims released their GPUs (the pass
//! that would have started it did not: the claim is over). So the list
//! holds at most one entry per stopping workload.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use allot_core::decision::{Action, Decision};
use allot_core::{Phase, Policy, Reason, State, Time, WorkloadId, WorkloadSpec};

/// A pending workload the policy preempted running work for.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub w: WorkloadId,
    /// When the pass chose it.
    pub t: Time,
    /// Its victims: each with the attempt that was preempted and why.
    pub victims: Vec<(WorkloadId, u32, Reason)>,
}

/// The choices of the passes so far that still stand, in the order the
/// passes made them.
#[derive(Debug, Default)]
pub(crate) struct Chosen {
    pub choices: Vec<Choice>,
}

impl Chosen {
    /// Folds in the decisions of a pass at `now` on `state` (the state the
    /// pass saw, before its decisions apply).
    fn note(&mut self, state: &State, decisions: &[Decision], now: Time) {
        let started: BTreeSet<WorkloadId> = decisions
            .iter()
            .filter_map(|d| match d.action {
                Action::Start { workload, .. } => Some(workload),
                _ => None,
            })
            .collect();
        self.choices.retain(|c| {
            state.run(c.w).phase == Phase::Pending
                && !started.contains(&c.w)
                && c.victims.iter().any(|(v, attempt, _)| releasing(state, *v, *attempt))
        });
        for d in decisions {
            let Action::Preempt { workload: v, by: Some(w) } = d.action else { continue };
            let victim = (v, state.run(v).attempts, d.reason.clone());
            match self.choices.iter_mut().find(|c| c.w == w) {
                Some(c) => c.victims.push(victim),
                None => self.choices.push(Choice { w, t: now, victims: vec![victim] }),
            }
        }
    }
}

/// Whether attempt `attempt` of `v` still holds GPUs (running, or stopping
/// until its grace ends).
pub(crate) fn releasing(state: &State, v: WorkloadId, attempt: u32) -> bool {
    let r = state.run(v);
    matches!(r.phase, Phase::Running | Phase::Stopping) && r.attempts == attempt
}

/// A policy whose passes' choices are noted in [`Chosen`]; everything
/// else is the wrapped policy's, unchanged (each method of [`Policy`] is
/// passed on, so the decisions are exactly the policy's).
pub(crate) struct Noting {
    inner: Box<dyn Policy>,
    chosen: Arc<Mutex<Chosen>>,
}

impl Noting {
    pub(crate) fn wrap(inner: Box<dyn Policy>, chosen: Arc<Mutex<Chosen>>) -> Box<dyn Policy> {
        Box::new(Noting { inner, chosen })
    }
}

/// The choices, also after a panic elsewhere held the lock (they are
/// plain data, complete after every call).
pub(crate) fn lock(chosen: &Mutex<Chosen>) -> MutexGuard<'_, Chosen> {
    chosen.lock().unwrap_or_else(|e| e.into_inner())
}

impl Policy for Noting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        self.inner.admit(state, spec)
    }

    fn schedule(&mut self, state: &State, now: Time) -> Vec<Decision> {
        let out = self.inner.schedule(state, now);
        lock(&self.chosen).note(state, &out, now);
        out
    }

    fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason {
        self.inner.explain(state, w, now)
    }

    fn explain_all(&self, state: &State, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        self.inner.explain_all(state, ws, now)
    }

    fn next_wakeup(&self, state: &State, now: Time) -> Option<Time> {
        self.inner.next_wakeup(state, now)
    }

    fn periodic(&self) -> bool {
        self.inner.periodic()
    }

    fn memory(&self) -> Option<allot_core::policy::Memory> {
        self.inner.memory()
    }

    fn remember(&mut self, memory: allot_core::policy::Memory) {
        self.inner.remember(memory)
    }
}

/// A waiting workload next in line, as `Msg::NextStarts` answers it.
#[derive(Clone, Debug, PartialEq)]
pub struct NextStart {
    /// The workload's id.
    pub seq: i64,
    pub account: String,
    pub user: String,
    pub class: String,
    pub gpus: u32,
    pub submit_t: i64,
    /// When the pass preempted work for it.
    pub chosen_t: i64,
    /// Its victims, in the order they were chosen.
    pub victims: Vec<Victim>,
}

/// A workload preempted so that a [`NextStart`] can start.
#[derive(Clone, Debug, PartialEq)]
pub struct Victim {
    pub seq: i64,
    pub account: String,
    /// When its GPUs are released (its grace ends); `None`: released.
    pub stop_at: Option<i64>,
    /// Why it was preempted (the rule and the numbers).
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use allot_core::{Class, Engine};

    use crate::executor::{ExecEvent, ExitStatus};
    use crate::scheduler::Live;
    use crate::scheduler::testing::{batch, scheduler};
    use crate::store::Store;

    const CONFIG: &str = r#"
[cluster]
name = "c"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 1
gpus_per_node = 4
[[accounts]]
path = "org/a"
[[accounts]]
path = "org/b"
[contract]
grace = "60s"
min_slice = { batch = "0s", interactive = "0s", service = "0s" }
interactive_max_gpus = 4
interactive_max_duration = "1h"
"#;

    fn live(seq: i64) -> Live {
        Live {
            seq,
            command: vec!["work".into()],
            env: BTreeMap::new(),
            workdir: None,
            run_as: crate::identity::RunAs::Server,
            after: Vec::new(),
        }
    }

    /// An interactive workload preempts the batch work filling the node
    /// (INT-1): it is listed next, with its victim, the victim's reason and
    /// when its GPUs come free; once the victim is gone it starts and
    /// leaves the list.
    #[tokio::test]
    async fn a_workload_preempted_for_is_next_until_it_starts() {
        let cfg = allot_trace::config::parse_config(CONFIG, "c.toml").unwrap();
        let dir = std::env::temp_dir().join(format!("allot-next-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.join("allot.db").display())).await.unwrap();
        let state = allot_core::State::new(cfg.cluster.clone(), cfg.accounts.clone(), cfg.contract);
        let mut s = scheduler(Engine::new(state), store, &dir);
        let now = s.tick_now();
        let (a, b) = (cfg.accounts.get("org/a").unwrap(), cfg.accounts.get("org/b").unwrap());
        s.arrive(batch("1", a, 4, 1, now), live(1), 0, now);
        s.pass(now);
        let first = s.launches.pop().expect("the batch work starts");
        s.exec_event(ExecEvent::Started { key: first.key, pid: 7 });
        assert!(s.next_starts().is_empty(), "nothing was preempted");

        let inter = allot_core::WorkloadSpec { class: Class::Interactive, work_s: 60, ..batch("2", b, 4, 1, now) };
        s.arrive(inter, live(2), 0, now);
        let chosen_at = s.tick_now();
        s.pass(chosen_at);
        let next = s.next_starts();
        assert_eq!(next.len(), 1, "{next:?}");
        let n = &next[0];
        assert_eq!((n.seq, n.account.as_str(), n.class.as_str(), n.gpus), (2, "org/b", "interactive", 4));
        assert_eq!(n.victims.len(), 1, "{n:?}");
        let v = &n.victims[0];
        assert_eq!((v.seq, v.account.as_str(), v.stop_at), (1, "org/a", Some(chosen_at as i64 + 60)));
        assert_eq!(n.chosen_t, chosen_at as i64);
        assert!(v.reason.starts_with("INT-1: interactive 2"), "{v:?}");

        // Another pass while the victim's grace runs: still next.
        let t = s.tick_now();
        s.pass(t);
        assert_eq!(s.next_starts().len(), 1);
        // The victim is gone: the next pass starts it, and it leaves the list.
        s.exec_event(ExecEvent::Exited { key: first.key, status: ExitStatus { code: None, signal: Some(15) } });
        let t = s.tick_now();
        s.pass(t);
        assert_eq!(s.launches.pop().map(|l| l.key.seq), Some(2), "the interactive work starts");
        assert!(s.next_starts().is_empty());
        assert!(super::lock(&s.chosen).choices.is_empty(), "its choice is forgotten at once");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
