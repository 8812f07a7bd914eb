//! Synthetic workload generators (docs/generator.md).
//!
//! [`generate`] builds a trace and a matching config for a [`Scenario`]
//! from seeded parameters: the same parameters and seed give byte-identical
//! output. The only scenario so far is `ai2` ([`Ai2Params`]): a research lab
//! with LLM/VLM pre-training, RL simulation, post-training, evaluations,
//! interactive debugging and inference services, whose behaviour under the
//! legacy model (priority inflation, GPU squatting, preemptible marking) is
//! an explicit [`Behaviour`] parameter set.

mod ai2;
mod params;
mod sample;
mod scenario;
mod stats;

pub use ai2::{Generated, ROOT};
pub use params::{Ai2Params, Behaviour, GenerateError, GpuMix, Scenario};
pub use scenario::{KINDS, Kind, KindSpec, TEAMS, TeamSpec};
pub use stats::GenStats;

/// Generates a scenario.
pub fn generate(scenario: Scenario, params: &Ai2Params) -> Result<Generated, GenerateError> {
    match scenario {
        Scenario::Ai2 => ai2::generate_ai2(params),
    }
}
