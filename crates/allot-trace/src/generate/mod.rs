//! Synthetic workload generators (docs/generator.md).
//!
//! [`generate`] builds a trace and a matching config for a [`Scenario`]
//! from seeded parameters: the same parameters and seed give byte-identical
//! output. The scenario `ai2` ([`Ai2Params`]) is a research lab
//! with LLM/VLM pre-training, RL simulation, post-training, evaluations,
//! interactive debugging and inference services, whose behaviour under the
//! legacy model (priority inflation, GPU squatting, preemptible marking) is
//! an explicit [`Behaviour`] parameter set; `ai2-fleet` is the same lab on
//! a fleet of five clusters ([`FLEET`]) with part of its work pinned to
//! each team's home cluster.

mod ai2;
mod params;
mod sample;
mod scenario;
mod stats;

pub use ai2::{Generated, ROOT};
pub use params::{Ai2Params, Behaviour, GenerateError, GpuMix, Scenario};
pub use scenario::{
    ClusterPlan, FLEET, FLEET_MIN_GPUS, FLEET_PIN_FRACTION, FLEET_REFERENCE_GPUS, KINDS, Kind, KindSpec, TEAM_HOMES,
    TEAMS, TeamSpec,
};
pub use stats::GenStats;

/// Generates a scenario.
pub fn generate(scenario: Scenario, params: &Ai2Params) -> Result<Generated, GenerateError> {
    match scenario {
        Scenario::Ai2 => ai2::generate_ai2(params),
        Scenario::Ai2Fleet => ai2::generate_ai2_fleet(params),
    }
}
