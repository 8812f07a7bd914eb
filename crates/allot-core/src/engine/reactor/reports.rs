//! What running workloads report about themselves, and the contract rules
//! that act on it: checkpoints (CON-7, CON-8) and the utilisation of their
//! GPUs (CON-9, idle reclaim).

use super::{Effect, Engine};
use crate::Time;
use crate::engine::{Change, Transition};
use crate::rule::{Reason, Rule};
use crate::workload::{Phase, WorkloadId};

/// Why a checkpoint report was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointRefused {
    /// The attempt named is not the workload's current one.
    #[error("attempt {asked} is not the workload's current attempt ({current})")]
    StaleAttempt { asked: u32, current: u32 },
    /// The workload holds no GPUs (pending or ended).
    #[error("the workload is {phase}, not running")]
    NotRunning { phase: &'static str },
}

impl Engine {
    /// CON-7: attempt `attempt` of `w` reports a checkpoint completed at
    /// `at` (no later than `now`): a stop keeps the progress it had then.
    /// Returns the progress of the attempt now saved.
    pub(in crate::engine) fn checkpointed(
        &mut self,
        w: WorkloadId,
        attempt: u32,
        at: Time,
        now: Time,
    ) -> Result<Time, CheckpointRefused> {
        let run = self.state.run(w);
        if run.attempts != attempt {
            return Err(CheckpointRefused::StaleAttempt { asked: attempt, current: run.attempts });
        }
        if !run.phase.holds_gpus() {
            return Err(CheckpointRefused::NotRunning { phase: run.phase.as_str() });
        }
        let at = at.min(now).max(run.started.unwrap_or(at));
        Ok(self.state.checkpoint(w, at))
    }

    /// CON-9: a sample of the mean utilisation (0..=1) of the GPUs of
    /// attempt `attempt` of `w` at `now`. A sample below its class's
    /// threshold starts (or continues) an idle spell; the first busy one
    /// ends it and withdraws a warning. Stale samples are ignored. Returns
    /// whether it changed anything (an idle spell began or ended).
    pub(in crate::engine) fn gpu_util(&mut self, w: WorkloadId, attempt: u32, util: f64, now: Time) -> bool {
        let run = self.state.run(w);
        if run.attempts != attempt || run.phase != Phase::Running {
            return false;
        }
        let Some(cfg) = self.state.contract.idle_reclaim.get(self.state.spec(w).class) else { return false };
        let x = &mut self.extra[w.0 as usize];
        if util < cfg.threshold {
            if x.idle_since.is_some() {
                return false;
            }
            x.idle_since = Some(now);
            self.idle.insert((now.saturating_add(cfg.after), w, attempt));
            return true;
        }
        let Some(since) = x.idle_since.take() else { return false };
        let warned = std::mem::take(&mut x.warned);
        let warn_at = since.saturating_add(cfg.after);
        self.idle.remove(&(warn_at, w, attempt));
        self.idle.remove(&(warn_at.saturating_add(cfg.warning), w, attempt));
        if warned {
            let pct = util * 100.0;
            let reason =
                Reason::new(Rule::IdleReclaim, format!("GPUs busy again ({pct:.0}%); the warning is withdrawn"));
            self.running_record(now, w, attempt, Change::IdleCleared, reason);
            self.effects.push(Effect::Idle { workload: w, attempt, reclaim_at: None });
        }
        true
    }

    /// CON-9: idle spells that reached their warning or their end at or
    /// before `now`: the workload is warned, then signalled and stopped
    /// after grace. Returns how many were due.
    pub(super) fn idle_due(&mut self, now: Time) -> usize {
        let mut n = 0;
        while let Some(&(t, w, attempt)) = self.idle.first() {
            if t > now {
                break;
            }
            self.idle.pop_first();
            n += 1;
            let run = self.state.run(w);
            let x = self.extra[w.0 as usize];
            let cfg = self.state.contract.idle_reclaim.get(self.state.spec(w).class);
            let (Some(cfg), Some(since)) = (cfg, x.idle_since) else { continue };
            if run.attempts != attempt || run.phase != Phase::Running {
                continue;
            }
            let pct = cfg.threshold * 100.0;
            let warn_at = since.saturating_add(cfg.after);
            if !x.warned && t == warn_at {
                let reclaim_at = warn_at.saturating_add(cfg.warning);
                self.extra[w.0 as usize].warned = true;
                self.idle.insert((reclaim_at, w, attempt));
                let reason = Reason::new(
                    Rule::IdleReclaim,
                    format!("GPUs below {pct:.0}% for {} s; stopping at {reclaim_at} unless they get busy", t - since),
                );
                self.running_record(t, w, attempt, Change::IdleWarning, reason);
                self.effects.push(Effect::Idle { workload: w, attempt, reclaim_at: Some(reclaim_at) });
            } else if x.warned && t == warn_at.saturating_add(cfg.warning) {
                self.extra[w.0 as usize].reclaimed = true;
                let grace = self.state.contract.grace;
                let reason = Reason::new(
                    Rule::IdleReclaim,
                    format!("GPUs below {pct:.0}% for {} s; stopping after grace ({grace} s)", t - since),
                );
                self.preempt(w, t, grace, reason, None);
            }
        }
        n
    }

    /// A change of a workload that stays running (CON-9's warnings).
    fn running_record(&mut self, t: Time, w: WorkloadId, attempt: u32, change: Change, reason: Reason) {
        self.state.runs[w.0 as usize].last_reason = Some(reason.clone());
        self.effects.push(Effect::Record(Transition::new(t, w, attempt, change, reason)));
    }
}
