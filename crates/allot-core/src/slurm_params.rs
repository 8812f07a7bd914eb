//! `[slurm]`: the slurm.conf knobs of the `slurm` policy, with Slurm's
//! documented defaults (`docs/config.md`, `docs/baselines.md`).

use crate::Time;
use crate::cluster::GpuTypeId;
use crate::workload::Priority;

/// `PreemptType`: off, or `preempt/qos` with `PreemptMode=REQUEUE` (SLURM-5).
#[derive(
    serde::Serialize,
    serde::Deserialize,
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    Default,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
pub enum SlurmPreempt {
    /// `PreemptType=preempt/none` (Slurm's default).
    #[default]
    Off,
    /// `PreemptType=preempt/qos`, `PreemptMode=REQUEUE`.
    Qos,
}

impl SlurmPreempt {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<SlurmPreempt> {
        s.parse().ok()
    }
}

/// How many GPU types may be given a partition `PriorityJobFactor`: the
/// knobs are a value type ([`crate::Contract`] is `Copy`).
pub const MAX_PARTITIONS: usize = 32;

/// The `slurm` policy's parameters (rules SLURM-1 … SLURM-5). Times in
/// seconds. Defaults are Slurm's where it has one: every `PriorityWeight*`
/// 0, `PriorityCalcPeriod` 5 minutes, `PriorityMaxAge` 7 days, `PriorityDecayHalfLife` 7 days,
/// `PriorityFavorSmall` no, QOS priority 0, partition `PriorityJobFactor`
/// 1, `bf_interval` 30 s, `bf_window` 1 day, `bf_max_job_test` 500,
/// `PreemptType=preempt/none`; without a `DefaultTime` a job without a
/// time limit runs unlimited.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct SlurmParams {
    pub weight_age: u32,
    pub weight_fairshare: u32,
    pub weight_job_size: u32,
    pub weight_partition: u32,
    pub weight_qos: u32,
    /// The GPU weight of `PriorityWeightTRES` (`GRES/gpu=N`).
    pub weight_tres_gpu: u32,
    /// `PriorityCalcPeriod`: how often every pending workload's priority
    /// and the Fair Tree are recomputed; between, a workload keeps the
    /// priority it was given at the last one or when it was queued.
    pub calc_period: Time,
    /// `PriorityMaxAge`: the age at which the age factor reaches 1.
    pub max_age: Time,
    /// `PriorityDecayHalfLife`: the half-life of the usage Fair Tree ranks by.
    pub decay_half_life: Time,
    /// `PriorityFavorSmall`.
    pub favor_small: bool,
    /// The QOS priority of each priority label, indexed by [`Priority`]
    /// (an import maps Slurm QOS names to the labels).
    pub qos_priority: [u32; 4],
    /// The largest QOS priority of the site, which Slurm divides each QOS
    /// priority by (its QOS need not be any label's); `None`: the largest
    /// of `qos_priority`.
    pub qos_priority_max: Option<u32>,
    /// The partition `PriorityJobFactor` of each GPU type, by
    /// [`GpuTypeId`] (a partition is the pools of one GPU type).
    pub partition_priority: [u32; MAX_PARTITIONS],
    /// `bf_interval`: seconds between backfill passes.
    pub bf_interval: Time,
    /// `bf_window`: how far ahead backfill plans reservations.
    pub bf_window: Time,
    /// `bf_max_job_test`: jobs a backfill pass considers.
    pub bf_max_job_test: u32,
    /// `DefaultTime`: the time limit assumed for a job without one;
    /// `None`: unlimited.
    pub default_time_limit: Option<Time>,
    pub preempt: SlurmPreempt,
}

pub const DAY: Time = 86_400;

impl Default for SlurmParams {
    fn default() -> Self {
        SlurmParams {
            weight_age: 0,
            weight_fairshare: 0,
            weight_job_size: 0,
            weight_partition: 0,
            weight_qos: 0,
            weight_tres_gpu: 0,
            calc_period: 300,
            max_age: 7 * DAY,
            decay_half_life: 7 * DAY,
            favor_small: false,
            qos_priority: [0; 4],
            qos_priority_max: None,
            partition_priority: [1; MAX_PARTITIONS],
            bf_interval: 30,
            bf_window: DAY,
            bf_max_job_test: 500,
            default_time_limit: None,
            preempt: SlurmPreempt::Off,
        }
    }
}

impl SlurmParams {
    /// The QOS priority of a label.
    pub fn qos(&self, p: Priority) -> u32 {
        self.qos_priority[p as usize]
    }

    /// The partition `PriorityJobFactor` of a GPU type.
    pub fn partition(&self, g: GpuTypeId) -> u32 {
        self.partition_priority.get(g.0 as usize).copied().unwrap_or(1)
    }
}
