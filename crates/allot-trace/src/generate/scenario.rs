//! The `ai2` scenario's tables: workload kinds with their size, run-time and
//! utilisation distributions, and the teams with their projects, budget and
//! demand shares (docs/generator.md lists them and what is assumed).

use allot_core::{Class, Time};

/// What a workload is, for the generator (the id starts with its name).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Large multi-node LLM / VLM pre-training: long, gang, checkpointing.
    Pretrain,
    /// Fine-tuning, SFT, preference tuning: medium.
    PostTrain,
    /// RL simulation: many medium jobs at low GPU utilisation.
    RlSim,
    /// Evaluation jobs: small and short.
    Eval,
    /// Interactive debugging sessions: 1–8 GPUs, short, working hours.
    Interactive,
    /// Idle placeholders held by interactive users (GPU squatting).
    Squat,
    /// Inference services.
    Service,
}

impl Kind {
    pub const ALL: [Kind; 7] =
        [Kind::Pretrain, Kind::PostTrain, Kind::RlSim, Kind::Eval, Kind::Interactive, Kind::Squat, Kind::Service];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pretrain => "pretrain",
            Kind::PostTrain => "posttrain",
            Kind::RlSim => "rlsim",
            Kind::Eval => "eval",
            Kind::Interactive => "interactive",
            Kind::Squat => "squat",
            Kind::Service => "service",
        }
    }

    /// The kind named by the start of a generated id.
    pub fn of_id(id: &str) -> Option<Kind> {
        let head = id.split('-').next()?;
        Kind::ALL.into_iter().find(|k| k.as_str() == head)
    }
}

/// Size, run time and utilisation of one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct KindSpec {
    pub kind: Kind,
    pub class: Class,
    /// GPU counts and weights; counts above one node are whole nodes.
    pub gpus: &'static [(u32, f64)],
    /// Log-normal run time (services: lifetime) with this median and sigma,
    /// clamped to `[work_min_s, work_max_s]`.
    pub work_median_s: f64,
    pub work_sigma: f64,
    pub work_min_s: Time,
    pub work_max_s: Time,
    /// Utilisation, uniform in this range.
    pub util: (f64, f64),
    pub checkpoint_s: Time,
    /// Whether some of these jobs fail early (`fail_fraction`).
    pub can_fail: bool,
}

const H: Time = 3600;
const D: Time = 86_400;

/// The kinds (squats are set by [`super::Behaviour`]).
pub const KINDS: [KindSpec; 6] = [
    KindSpec {
        kind: Kind::Pretrain,
        class: Class::Batch,
        gpus: &[(64, 0.30), (128, 0.35), (256, 0.25), (512, 0.10)],
        work_median_s: 36.0 * 3600.0,
        work_sigma: 0.8,
        work_min_s: 2 * H,
        work_max_s: 14 * D,
        util: (0.85, 0.97),
        checkpoint_s: H,
        can_fail: true,
    },
    KindSpec {
        kind: Kind::PostTrain,
        class: Class::Batch,
        gpus: &[(8, 0.35), (16, 0.35), (32, 0.20), (64, 0.10)],
        work_median_s: 6.0 * 3600.0,
        work_sigma: 0.9,
        work_min_s: 20 * 60,
        work_max_s: 3 * D,
        util: (0.60, 0.85),
        checkpoint_s: 30 * 60,
        can_fail: true,
    },
    KindSpec {
        kind: Kind::RlSim,
        class: Class::Batch,
        gpus: &[(8, 0.50), (16, 0.35), (32, 0.15)],
        work_median_s: 8.0 * 3600.0,
        work_sigma: 0.8,
        work_min_s: 30 * 60,
        work_max_s: 3 * D,
        util: (0.15, 0.40),
        checkpoint_s: H,
        can_fail: true,
    },
    KindSpec {
        kind: Kind::Eval,
        class: Class::Batch,
        gpus: &[(1, 0.65), (2, 0.10), (4, 0.10), (8, 0.15)],
        work_median_s: 45.0 * 60.0,
        work_sigma: 1.0,
        work_min_s: 2 * 60,
        work_max_s: 12 * H,
        util: (0.40, 0.80),
        checkpoint_s: 0,
        can_fail: true,
    },
    KindSpec {
        kind: Kind::Interactive,
        class: Class::Interactive,
        gpus: &[(1, 0.45), (2, 0.25), (4, 0.15), (8, 0.15)],
        work_median_s: 40.0 * 60.0,
        work_sigma: 0.8,
        work_min_s: 5 * 60,
        work_max_s: 4 * H,
        util: (0.05, 0.30),
        checkpoint_s: 0,
        can_fail: false,
    },
    KindSpec {
        kind: Kind::Service,
        class: Class::Service,
        gpus: &[(1, 0.30), (2, 0.30), (4, 0.25), (8, 0.15)],
        work_median_s: 3.0 * 86_400.0,
        work_sigma: 0.7,
        work_min_s: H,
        work_max_s: 3660 * D,
        util: (0.30, 0.60),
        checkpoint_s: 0,
        can_fail: false,
    },
];

pub fn kind_spec(kind: Kind) -> &'static KindSpec {
    KINDS.iter().find(|k| k.kind == kind).expect("every generated kind has a spec")
}

/// One team: shares, users, projects and its batch mix.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamSpec {
    pub name: &'static str,
    /// Share of the cluster's budget (and of the legacy pools).
    pub budget_share: f64,
    /// Share of the batch demand (teams over- or under-ask their budget).
    pub demand_share: f64,
    /// Relative number of researchers.
    pub users: f64,
    /// Projects and the kinds submitted into each (interactive work goes to
    /// a user's home project, which is any project listing a batch kind).
    pub projects: &'static [(&'static str, &'static [Kind])],
    /// Batch GPU-time mix: pretrain, post-train, RL simulation, evaluation.
    pub mix: [f64; 4],
    /// Inference services at 1,024 GPUs (scaled with the cluster, at least 1).
    pub services: u32,
}

use Kind::{Eval, PostTrain, Pretrain, RlSim, Service};

/// The `ai2` teams. Budget shares sum to 1, demand shares sum to 1.
pub const TEAMS: [TeamSpec; 8] = [
    TeamSpec {
        name: "olmo",
        budget_share: 0.26,
        demand_share: 0.30,
        users: 26.0,
        projects: &[("pretrain", &[Pretrain, Eval]), ("midtrain", &[Pretrain, PostTrain]), ("evals", &[Eval])],
        mix: [0.75, 0.12, 0.0, 0.05],
        services: 0,
    },
    TeamSpec {
        name: "molmo",
        budget_share: 0.16,
        demand_share: 0.18,
        users: 18.0,
        projects: &[("pretrain", &[Pretrain]), ("data", &[PostTrain, Eval]), ("demo", &[Service, Eval])],
        mix: [0.60, 0.27, 0.0, 0.05],
        services: 1,
    },
    TeamSpec {
        name: "tulu",
        budget_share: 0.14,
        demand_share: 0.15,
        users: 20.0,
        projects: &[("sft", &[PostTrain]), ("rlvr", &[PostTrain, RlSim]), ("evals", &[Eval])],
        mix: [0.0, 0.62, 0.30, 0.08],
        services: 0,
    },
    TeamSpec {
        name: "prior",
        budget_share: 0.14,
        demand_share: 0.13,
        users: 26.0,
        projects: &[("embodied", &[RlSim, PostTrain]), ("sim", &[RlSim, Eval])],
        mix: [0.0, 0.12, 0.85, 0.03],
        services: 0,
    },
    TeamSpec {
        name: "agents",
        budget_share: 0.08,
        demand_share: 0.09,
        users: 16.0,
        projects: &[("rl", &[RlSim]), ("evals", &[Eval, PostTrain]), ("demo", &[Service])],
        mix: [0.0, 0.32, 0.60, 0.08],
        services: 1,
    },
    TeamSpec {
        name: "s2",
        budget_share: 0.08,
        demand_share: 0.06,
        users: 18.0,
        projects: &[("search", &[PostTrain, Eval]), ("serving", &[Service])],
        mix: [0.0, 0.75, 0.0, 0.25],
        services: 6,
    },
    TeamSpec {
        name: "climate",
        budget_share: 0.06,
        demand_share: 0.04,
        users: 12.0,
        projects: &[("modeling", &[PostTrain, RlSim, Eval])],
        mix: [0.0, 0.60, 0.30, 0.10],
        services: 0,
    },
    TeamSpec {
        name: "playground",
        budget_share: 0.08,
        demand_share: 0.05,
        users: 14.0,
        projects: &[("serving", &[Service]), ("demos", &[Eval, PostTrain])],
        mix: [0.0, 0.70, 0.0, 0.30],
        services: 8,
    },
];

/// The batch kinds in the order of [`TeamSpec::mix`].
pub const BATCH_KINDS: [Kind; 4] = [Kind::Pretrain, Kind::PostTrain, Kind::RlSim, Kind::Eval];

/// One cluster of the `ai2-fleet` scenario: its name, its GPUs in the
/// reference fleet of [`FLEET_REFERENCE_GPUS`] (`--gpus` scales them all in
/// proportion, each at least [`FLEET_MIN_GPUS`]) and its GPU models with
/// their shares of its nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPlan {
    pub name: &'static str,
    pub gpus: u32,
    pub mix: &'static [(&'static str, f64)],
}

/// The `ai2-fleet` clusters, largest first: 1,024 to 88 GPUs at the
/// reference size, H100, B200 and B300 (one mixed cluster).
pub const FLEET: [ClusterPlan; 5] = [
    ClusterPlan { name: "jupiter", gpus: 1024, mix: &[("H100", 1.0)] },
    ClusterPlan { name: "saturn", gpus: 640, mix: &[("B200", 1.0)] },
    ClusterPlan { name: "neptune", gpus: 512, mix: &[("H100", 0.5), ("B200", 0.5)] },
    ClusterPlan { name: "titan", gpus: 296, mix: &[("B300", 1.0)] },
    ClusterPlan { name: "ceres", gpus: 88, mix: &[("H100", 1.0)] },
];

/// GPUs of the reference fleet (the sum of [`FLEET`]).
pub const FLEET_REFERENCE_GPUS: u32 = 2560;

/// Smallest cluster of a scaled fleet (11 nodes of 8: one node per team
/// and a few more).
pub const FLEET_MIN_GPUS: u32 = 88;

/// Each team's home cluster (index into [`FLEET`], by [`TEAMS`] order):
/// where its data lives, where it submits pinned work and where its gang
/// size and pre-training GPU type come from.
pub const TEAM_HOMES: [usize; 8] = [0, 1, 2, 0, 3, 4, 2, 1];

/// Share of every team's workloads pinned to its home cluster (data
/// locality: the dataset or checkpoint is stored there); the rest may run
/// on any cluster that fits them.
pub const FLEET_PIN_FRACTION: f64 = 0.35;
