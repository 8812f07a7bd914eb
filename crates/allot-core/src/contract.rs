//! The time-slicing contract and the other policy knobs of `[contract]`.
//!
//! Defaults (documented in `docs/config.md`): budget period 7 days, usage
//! half-life 7 days, minimum slice 2 h for batch and 0 for interactive and
//! service, grace 10 minutes, interactive lane up to 8 GPUs and 8 hours,
//! scheduling interval 30 s, impact weighting off (`docs/impact.md`), no time
//! limits, idle reclaim for interactive work only (CON-9: below 5% for 2 h,
//! then 30 min of warning), claims not kept from pass to pass (CON-10).

use crate::Time;
use crate::alerts::Thresholds;
use crate::calendar::{Calendar, Periods};
use crate::slurm_params::SlurmParams;
use crate::workload::Class;

/// A value per workload class.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq)]
pub struct PerClass<T> {
    pub batch: T,
    pub interactive: T,
    pub service: T,
}

impl<T: Copy> PerClass<T> {
    pub fn get(&self, c: Class) -> T {
        match c {
            Class::Batch => self.batch,
            Class::Interactive => self.interactive,
            Class::Service => self.service,
        }
    }
}

/// Contract parameters, all in seconds.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct Contract {
    /// Length of a fixed budget period (ignored for calendar months).
    pub budget_period: Time,
    /// How budget periods are laid out (BUD-4): fixed from an anchor, or months.
    pub budget_calendar: Calendar,
    /// BUD-5: unused budget carried into the next period, at most this
    /// fraction (0..=1) of that period's budget; 0 carries nothing.
    pub budget_carry_over: f64,
    /// Fractions of the period's budget at which a threshold event fires.
    pub budget_alerts: Thresholds,
    pub usage_half_life: Time,
    pub min_slice: PerClass<Time>,
    pub grace: Time,
    pub interactive_max_gpus: u32,
    pub interactive_max_duration: Time,
    pub scheduling_interval: Time,
    /// IMP-3: FS-1 entitlements are weighted by share × impact among
    /// siblings (`docs/impact.md`); off by default.
    pub impact_weighting: bool,
    /// CON-10: the GPUs a waiting workload preempted or claimed stay its
    /// own from pass to pass until it starts. (Absent from contracts
    /// journalled before it: off.)
    #[serde(default)]
    pub keep_claims: bool,
    /// CON-11: the margin (0..1) by which a preemptor's side must rank
    /// below its victim's after a CON-4 swap; 0 (the default): none.
    #[serde(default)]
    pub swap_margin: f64,
    /// CON-12: a fair-share swap (CON-4) whose victims include one with its
    /// next checkpoint expected within this many seconds (and sooner than
    /// the progress it would lose) waits for that checkpoint; 0 (the
    /// default): off.
    #[serde(default)]
    pub checkpoint_wait: Time,
    /// CON-6: the time limit of work submitted without one, per class;
    /// `None` (the default): no limit.
    pub time_limit: PerClass<Option<Time>>,
    /// CON-6: the largest time limit a workload may ask for, per class;
    /// `None` (the default): no maximum.
    pub max_time_limit: PerClass<Option<Time>>,
    /// CON-9: idle reclaim per class; `None`: off. On by default for
    /// interactive work only ([`IdleReclaim::INTERACTIVE`]).
    pub idle_reclaim: PerClass<Option<IdleReclaim>>,
    /// `[slurm]`: the knobs of the `slurm` policy (SLURM-1 … SLURM-5).
    pub slurm: SlurmParams,
}

/// CON-9: when a workload's GPUs count as idle, and how long they may stay
/// so before it is warned, then stopped.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct IdleReclaim {
    /// Mean utilisation of the workload's GPUs (0..=1) below which a
    /// sample is idle.
    pub threshold: f64,
    /// Idle time after which the workload is warned.
    pub after: Time,
    /// Time from the warning to the signal, if its GPUs stay idle.
    pub warning: Time,
}

impl IdleReclaim {
    /// The interactive default: below 5% for 2 h, then 30 min of warning.
    pub const INTERACTIVE: IdleReclaim = IdleReclaim { threshold: 0.05, after: 2 * HOUR, warning: 1800 };
}

pub const HOUR: Time = 3600;
pub const DAY: Time = 24 * HOUR;

impl Default for Contract {
    fn default() -> Self {
        Contract {
            budget_period: 7 * DAY,
            budget_calendar: Calendar::Fixed { anchor: 0 },
            budget_carry_over: 0.0,
            budget_alerts: Thresholds::default(),
            usage_half_life: 7 * DAY,
            min_slice: PerClass { batch: 2 * HOUR, interactive: 0, service: 0 },
            grace: 600,
            interactive_max_gpus: 8,
            interactive_max_duration: 8 * HOUR,
            scheduling_interval: 30,
            impact_weighting: false,
            keep_claims: false,
            swap_margin: 0.0,
            checkpoint_wait: 0,
            time_limit: PerClass { batch: None, interactive: None, service: None },
            max_time_limit: PerClass { batch: None, interactive: None, service: None },
            idle_reclaim: PerClass { batch: None, interactive: Some(IdleReclaim::INTERACTIVE), service: None },
            slurm: SlurmParams::default(),
        }
    }
}

impl Contract {
    /// This contract with idle reclaim (CON-9) off for every class: what a
    /// baseline runs under unless asked otherwise
    /// ([`crate::PolicyKind::idle_reclaim`]).
    pub fn without_idle_reclaim(self) -> Contract {
        Contract { idle_reclaim: PerClass { batch: None, interactive: None, service: None }, ..self }
    }

    /// The budget periods (BUD-4).
    pub fn periods(&self) -> Periods {
        Periods { length: self.budget_period, calendar: self.budget_calendar }
    }

    /// CFG-1: the keys of `[contract]` that differ between `self` and
    /// `new` and cannot change while the engine runs: the budget periods
    /// lay out the ledger's usage, so their length and calendar change only
    /// at a restart (which charges the usage history again under the new
    /// periods). Empty: `new` may replace `self` live
    /// ([`crate::engine::Input::Contract`]).
    pub fn restart_only(&self, new: &Contract) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.budget_period != new.budget_period {
            out.push("contract.budget_period");
        }
        if self.budget_calendar != new.budget_calendar {
            out.push("contract.budget_calendar");
        }
        out
    }
}
