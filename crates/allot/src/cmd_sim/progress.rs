//! Progress of simulation runs on stderr, for `allot sim` and `allot
//! compare`: on a terminal, one bar per run in flight showing its simulated
//! time against its horizon (and one for the runs done); elsewhere (a pipe,
//! CI), plain lines: when a run starts, as it passes every tenth of its
//! horizon (at most one line per run every [`LINE_EVERY`], so a run of a
//! second prints none), and when it ends.
//!
//! A run's horizon is `--until` when given; otherwise the run goes on until
//! its last workload has ended, which is not known in advance, so the bar
//! runs to a lower bound (the latest submit + work of any workload) and
//! then says that the run is finishing the queue.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use allot_core::{Time, WorkloadSpec};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Least wall time between two plain progress lines of one run.
pub(crate) const LINE_EVERY: Duration = Duration::from_secs(2);

/// How far a run goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Horizon {
    /// `--until`: the run stops there.
    Until(Time),
    /// Until every workload has ended: at least this (the latest submit +
    /// work of any workload).
    AtLeast(Time),
}

impl Horizon {
    /// The horizon of a run of `trace` (stopped at `until`, if any).
    pub(crate) fn of(trace: &[WorkloadSpec], until: Option<Time>) -> Horizon {
        match until {
            Some(u) => Horizon::Until(u),
            None => Horizon::AtLeast(trace.iter().map(|w| w.submit + w.work_s).max().unwrap_or(0)),
        }
    }

    fn end(self) -> Time {
        match self {
            Horizon::Until(t) | Horizon::AtLeast(t) => t.max(1),
        }
    }

    /// `14d`, or `≥ 14d (until every workload has ended)`.
    fn length(self) -> String {
        match self {
            Horizon::Until(end) => span(end),
            Horizon::AtLeast(end) => format!("≥ {} (until every workload has ended)", span(end)),
        }
    }

    /// `3d04h of 14d`, or of `≥ 14d`, or past it.
    fn describe(self, t: Time) -> String {
        match self {
            Horizon::Until(end) => format!("{} of {}", span(t), span(end)),
            Horizon::AtLeast(end) if t <= end => format!("{} of ≥ {}", span(t), span(end)),
            Horizon::AtLeast(_) => format!("{}, finishing the queued work", span(t)),
        }
    }
}

/// A simulated time, compact: `45s`, `12m05s`, `3h07m`, `2d04h`.
fn span(t: Time) -> String {
    allot_report::svg::fmt_duration(t)
}

/// The progress display of a set of runs.
pub(crate) struct Progress {
    /// The bars (a terminal), or `None` for plain lines.
    multi: Option<(MultiProgress, ProgressBar)>,
}

impl Progress {
    /// A display for `runs` runs: bars when stderr is a terminal.
    pub(crate) fn new(runs: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { multi: None };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let total = multi.add(ProgressBar::new(runs as u64));
        total.set_style(style("{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} runs done"));
        total.enable_steady_tick(Duration::from_millis(120));
        Progress { multi: Some((multi, total)) }
    }

    /// The progress of one run, named `label`, announced now.
    pub(crate) fn start(&self, label: &str, horizon: Horizon) -> RunProgress {
        let bar = self.multi.as_ref().map(|(multi, _)| {
            let bar = multi.add(ProgressBar::new(horizon.end()));
            bar.set_style(style("  {bar:24} {prefix} {wide_msg}"));
            bar.set_prefix(label.to_string());
            bar.set_message(horizon.describe(0));
            bar
        });
        if bar.is_none() {
            eprintln!("{label}: started, horizon {}", horizon.length());
        }
        let started = Instant::now();
        RunProgress { label: label.to_string(), horizon, bar, started, next_t: 0, last_line: started, tenth: 0 }
    }

    /// Prints a line above the bars (or on its own without them).
    pub(crate) fn println(&self, line: &str) {
        match &self.multi {
            Some((multi, _)) => {
                let _ = multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// Ends a run's display: its bar goes and a line says it ended.
    pub(crate) fn done(&self, run: RunProgress, end: Time) {
        let took = run.started.elapsed().as_secs_f64();
        if let Some(bar) = &run.bar {
            bar.finish_and_clear();
            if let Some((multi, total)) = &self.multi {
                multi.remove(bar);
                total.inc(1);
            }
        }
        self.println(&format!("{}: done in {took:.2} s (simulated {})", run.label, span(end)));
    }

    /// Removes the bars.
    pub(crate) fn finish(self) {
        if let Some((_, total)) = self.multi {
            total.finish_and_clear();
        }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("a valid template")
}

/// The progress of one run, fed the simulated time at every instant
/// ([`allot_sim::simulate_observed`]).
pub(crate) struct RunProgress {
    label: String,
    horizon: Horizon,
    bar: Option<ProgressBar>,
    started: Instant,
    /// The next simulated time worth looking at (cheap to compare).
    next_t: Time,
    /// When the last plain line of this run was printed (or it started).
    last_line: Instant,
    /// Tenths of the horizon passed, as last reported.
    tenth: u64,
}

impl RunProgress {
    /// The run reached simulated time `t`.
    pub(crate) fn at(&mut self, t: Time) {
        if t < self.next_t {
            return;
        }
        let end = self.horizon.end();
        match &self.bar {
            Some(bar) => {
                // A few hundred updates per run at most.
                self.next_t = t + (end / 400).max(1);
                if t > bar.length().unwrap_or(0) {
                    bar.set_length(t);
                }
                bar.set_position(t);
                bar.set_message(self.horizon.describe(t));
            }
            None => {
                self.next_t = t + (end / 100).max(1);
                if let Some(line) = self.line(t, Instant::now()) {
                    eprintln!("{line}");
                }
            }
        }
    }

    /// The plain line due at simulated time `t` and wall time `now`: when
    /// the run has passed a new tenth of its horizon and the last line is
    /// at least [`LINE_EVERY`] old.
    fn line(&mut self, t: Time, now: Instant) -> Option<String> {
        let tenth = (t.saturating_mul(10) / self.horizon.end()).min(10);
        let quiet = now.duration_since(self.last_line) >= LINE_EVERY;
        if tenth <= self.tenth || !quiet {
            return None;
        }
        self.tenth = tenth;
        self.last_line = now;
        let took = now.duration_since(self.started).as_secs_f64();
        Some(format!("{}: {} ({took:.0} s)", self.label, self.horizon.describe(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(horizon: Horizon) -> RunProgress {
        let started = Instant::now();
        RunProgress {
            label: "allot (seed 3)".into(),
            horizon,
            bar: None,
            started,
            next_t: 0,
            last_line: started,
            tenth: 0,
        }
    }

    #[test]
    fn plain_lines_come_every_tenth_and_not_too_often() {
        let day = 86_400;
        let mut r = run(Horizon::Until(10 * day));
        let t0 = r.started;
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(r.line(day, at(1)), None, "a second after the start");
        assert_eq!(r.line(day / 2, at(5)), None, "before the first tenth");
        assert_eq!(r.line(day, at(5)).as_deref(), Some("allot (seed 3): 1d of 10d (5 s)"));
        assert_eq!(r.line(3 * day, at(6)), None, "one second after the last line");
        assert_eq!(r.line(3 * day, at(7)).as_deref(), Some("allot (seed 3): 3d of 10d (7 s)"));
        assert_eq!(r.line(3 * day + 5, at(60)), None, "still in the same tenth");
        let mut open = run(Horizon::AtLeast(10 * day));
        assert_eq!(open.line(5 * day, at(3)).as_deref(), Some("allot (seed 3): 5d of ≥ 10d (3 s)"));
        assert_eq!(open.line(12 * day, at(9)).as_deref(), Some("allot (seed 3): 12d, finishing the queued work (9 s)"));
    }

    #[test]
    fn the_horizon_is_until_or_the_latest_end_of_any_workload() {
        assert_eq!(Horizon::of(&[], Some(50)), Horizon::Until(50));
        assert_eq!(Horizon::of(&[], None), Horizon::AtLeast(0));
        assert_eq!(Horizon::AtLeast(0).end(), 1, "never a bar of length 0");
        assert_eq!(Horizon::Until(86_400).length(), "1d");
        assert_eq!(Horizon::AtLeast(90).length(), "≥ 1m30s (until every workload has ended)");
    }
}
