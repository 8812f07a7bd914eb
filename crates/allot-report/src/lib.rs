//! Comparison reports of Allot policy runs (`allot compare`).
//!
//! * [`series`]: time series and queue-time distributions of one run,
//!   computed from its record and final state;
//! * [`stats`]: mean and 95% confidence interval over repeated runs;
//! * [`table`]: the measures of repeated runs side by side;
//! * [`headline()`]: the comparison in plain words, from the figures;
//! * [`svg`]: small hand-written SVG charts;
//! * [`charts`]: the charts of the comparison, one family per question;
//! * [`html`]: the self-contained page that holds them.
//!
//! What the page shows and how the intervals are computed: `docs/compare.md`.

pub mod charts;
pub mod headline;
pub mod html;
pub mod series;
pub mod stats;
pub mod svg;
pub mod table;

pub use headline::{Subject, headline, load, worse_tails};
pub use html::{Page, Setup, render};
pub use series::Series;
pub use stats::{MeanCi, mean_ci, summarise};
pub use table::seeds_tables;

use allot_core::State;
use allot_sim::SimOutput;
use allot_sim::measures::measure;
use allot_sim::report::{Report, TraceWarning, trace_warnings};

/// What the report keeps of one policy run: its measures, its series and
/// its warnings.
#[derive(Clone, Debug)]
pub struct PolicyRun {
    pub report: Report,
    pub series: Series,
    /// The policy rejected or never started a large part of the trace.
    pub warnings: Vec<TraceWarning>,
}

impl PolicyRun {
    /// Measures a finished run and computes its series and warnings.
    pub fn of(state: &State, out: &SimOutput) -> PolicyRun {
        PolicyRun {
            report: measure(state, out),
            series: Series::compute(state, out),
            warnings: trace_warnings(&out.policy, state, out.horizon_end),
        }
    }

    /// Renames the run (its report, series and warnings): a column of a
    /// comparison.
    pub fn rename(&mut self, name: &str) {
        self.report.policy = name.to_string();
        self.series.policy = name.to_string();
        for w in &mut self.warnings {
            w.policy = name.to_string();
        }
    }
}
