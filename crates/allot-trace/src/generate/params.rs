//! Parameters of the synthetic scenarios, with their documented defaults
//! (docs/generator.md). Behaviour under the legacy model (priority
//! inflation, GPU squatting, preemptible marking) is set here explicitly; it
//! is an input of the trace, never a conclusion drawn from it.

use std::fmt;

use allot_core::Time;

/// A synthetic scenario.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// A research lab shaped like Ai2: LLM/VLM pre-training, RL simulation,
    /// post-training, interactive debugging and inference services.
    Ai2,
    /// The same lab on a fleet of five clusters of 88 to 1,024 GPUs (H100,
    /// B200, B300) under one budget ledger: teams with home clusters, part
    /// of their work pinned there (docs/generator.md).
    Ai2Fleet,
}

impl Scenario {
    pub const ALL: [Scenario; 2] = [Scenario::Ai2, Scenario::Ai2Fleet];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Ai2 => "ai2",
            Scenario::Ai2Fleet => "ai2-fleet",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Legacy-model behaviour: explicit, documented assumptions.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    /// Priority inflation: share of non-service workloads labelled `high`
    /// at the end of the horizon (`--high-share`)…
    pub high_share: f64,
    /// …growing linearly from this share at the start.
    pub high_share_start: f64,
    /// Share of non-service workloads labelled `urgent` (constant).
    pub urgent_share: f64,
    /// Share of evaluation and RL-simulation jobs not labelled high/urgent
    /// that are labelled `low`.
    pub low_share: f64,
    /// GPU squatting: probability that an interactive user, on a day they
    /// debug, also holds an idle placeholder (`--squat-fraction`). Models
    /// users who keep GPUs because launch latency is high.
    pub squat_fraction: f64,
    /// Placeholder holding time, uniform in this range (hours; at most the
    /// contract's interactive limit of 8 h).
    pub squat_hours: (f64, f64),
    /// Placeholder utilisation, uniform in this range.
    pub squat_util: (f64, f64),
    /// Share of `batch` workloads at `low`/`normal` priority marked
    /// preemptible (`--preemptible-fraction`); high/urgent, interactive and
    /// service workloads never are.
    pub preemptible_fraction: f64,
    /// Share of `batch` workloads that checkpoint when signalled (CON-8,
    /// `--checkpoint-on-signal-fraction`); 0 by default.
    pub on_signal_fraction: f64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            high_share: 0.45,
            high_share_start: 0.10,
            urgent_share: 0.02,
            low_share: 0.30,
            squat_fraction: 0.25,
            squat_hours: (2.0, 8.0),
            squat_util: (0.0, 0.03),
            preemptible_fraction: 0.30,
            on_signal_fraction: 0.0,
        }
    }
}

/// A GPU model of the cluster: share of the nodes and normalisation weight.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuMix {
    pub model: String,
    pub node_share: f64,
    pub weight: f64,
}

/// Parameters of the `ai2` scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Ai2Params {
    /// Cluster size in GPUs, a multiple of 8 (`--gpus`).
    pub gpus: u32,
    /// Horizon in days (`--days`); time 0 is a Monday 00:00.
    pub days: u32,
    pub seed: u64,
    /// Demand / capacity in GPU-seconds over the horizon (`--load`).
    pub load: f64,
    /// Researchers, spread over the teams (`--users`).
    pub users: u32,
    pub gpus_per_node: u32,
    /// Nodes per rack (at most the pool size).
    pub rack_size: u32,
    pub gpu_mix: Vec<GpuMix>,
    /// Share of users who debug interactively.
    pub interactive_users: f64,
    /// Interactive sessions per interactive user per working day.
    pub sessions_per_day: f64,
    /// Share of batch jobs that fail early (calibrated: Acme Kalos 0.397,
    /// Seren 0.429 of GPU jobs failed).
    pub fail_fraction: f64,
    /// Run time of a failing job: log-normal with this median (seconds) and
    /// `fail_sigma`, at most its planned run time: mostly early, sometimes
    /// hours in. Calibrated so failed jobs hold ~10% of batch GPU-time
    /// (Acme: Kalos 8%, Seren 12%).
    pub fail_median_s: Time,
    pub fail_sigma: f64,
    /// Legacy-model behaviour.
    pub behaviour: Behaviour,
}

impl Default for Ai2Params {
    fn default() -> Self {
        let mix = |model: &str, node_share, weight| GpuMix { model: model.to_string(), node_share, weight };
        Ai2Params {
            gpus: 1024,
            days: 30,
            seed: 1,
            load: 2.5,
            users: 150,
            gpus_per_node: 8,
            rack_size: 16,
            gpu_mix: vec![mix("H100", 0.5, 1.0), mix("B200", 0.375, 2.0), mix("B300", 0.125, 2.5)],
            interactive_users: 0.7,
            sessions_per_day: 3.0,
            fail_fraction: 0.4,
            fail_median_s: 900,
            fail_sigma: 3.0,
            behaviour: Behaviour::default(),
        }
    }
}

/// Invalid generator parameters.
#[derive(Debug, thiserror::Error)]
#[error("invalid generator parameter: {0}")]
pub struct GenerateError(pub String);

impl Ai2Params {
    pub(crate) fn validate(&self, teams: usize) -> Result<(), GenerateError> {
        let bad = |m: String| Err(GenerateError(m));
        let min = self.gpus_per_node * teams as u32;
        if self.gpus_per_node == 0 || !self.gpus.is_multiple_of(self.gpus_per_node) || self.gpus < min {
            return bad(format!(
                "--gpus must be a multiple of {} and at least {min}, got {}",
                self.gpus_per_node, self.gpus
            ));
        }
        if self.days == 0 || self.days > 3660 {
            return bad(format!("--days must be 1..=3660, got {}", self.days));
        }
        if !(self.load.is_finite() && self.load > 0.0 && self.load <= 100.0) {
            return bad(format!("--load must be in (0, 100], got {}", self.load));
        }
        if self.users < teams as u32 {
            return bad(format!("--users must be at least {teams} (one per team), got {}", self.users));
        }
        let b = &self.behaviour;
        for (name, v) in [
            ("--high-share", b.high_share),
            ("high_share_start", b.high_share_start),
            ("urgent_share", b.urgent_share),
            ("low_share", b.low_share),
            ("--squat-fraction", b.squat_fraction),
            ("--preemptible-fraction", b.preemptible_fraction),
            ("--checkpoint-on-signal-fraction", b.on_signal_fraction),
            ("interactive_users", self.interactive_users),
            ("fail_fraction", self.fail_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} must be in [0, 1], got {v}"));
            }
        }
        if b.urgent_share + b.high_share.max(b.high_share_start) > 1.0 {
            return bad("urgent_share + high_share must not exceed 1".into());
        }
        if !(0.0 < b.squat_hours.0 && b.squat_hours.0 <= b.squat_hours.1 && b.squat_hours.1 <= 8.0) {
            return bad(format!("squat_hours must satisfy 0 < min <= max <= 8, got {:?}", b.squat_hours));
        }
        if self.gpu_mix.is_empty() || self.gpu_mix.iter().any(|m| !(m.node_share >= 0.0 && m.weight > 0.0)) {
            return bad("gpu_mix needs models with node_share >= 0 and weight > 0".into());
        }
        if !(self.fail_sigma.is_finite() && self.fail_sigma >= 0.0 && self.fail_median_s > 0) {
            return bad(format!(
                "fail_median_s must be > 0 and fail_sigma >= 0, got {} and {}",
                self.fail_median_s, self.fail_sigma
            ));
        }
        if !(self.sessions_per_day >= 0.0 && self.sessions_per_day <= 50.0) {
            return bad(format!("sessions_per_day must be in [0, 50], got {}", self.sessions_per_day));
        }
        Ok(())
    }
}
