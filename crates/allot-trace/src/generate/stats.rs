//! What a generated trace contains: counts and GPU-hours per kind and class,
//! demand over capacity, priority inflation, and the run-time / size
//! statistics that docs/generator.md compares with the Acme summary.

use std::collections::BTreeMap;
use std::fmt;

use allot_core::{Class, Priority};

use super::params::Ai2Params;
use super::scenario::Kind;
use crate::write::TraceRow;

/// Summary of a generated trace.
#[derive(Clone, Debug, PartialEq)]
pub struct GenStats {
    pub workloads: usize,
    /// Kind → (workloads, GPU-hours).
    pub by_kind: BTreeMap<Kind, (usize, f64)>,
    pub by_class: BTreeMap<Class, usize>,
    /// Requested GPU-seconds / (GPUs x horizon).
    pub demand_over_capacity: f64,
    /// Share of non-service workloads labelled high or urgent, first and last 7 days.
    pub high_share_first_week: f64,
    pub high_share_last_week: f64,
    pub preemptible: usize,
    /// Batch jobs that fail early, and their share of batch GPU-time.
    pub failed_early: usize,
    pub failed_gpu_share: f64,
    /// Over batch and interactive jobs (not services or placeholders), as
    /// in the Acme summary of GPU jobs.
    pub median_run_s: f64,
    pub mean_run_s: f64,
    pub median_gpus: f64,
    pub mean_gpus: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

impl GenStats {
    pub(crate) fn of(rows: &[TraceRow], p: &Ai2Params, failed: (usize, f64)) -> GenStats {
        let horizon = u64::from(p.days) * 86_400;
        let mut by_kind: BTreeMap<Kind, (usize, f64)> = BTreeMap::new();
        let mut by_class: BTreeMap<Class, usize> = BTreeMap::new();
        let (mut runs, mut gpus) = (Vec::new(), Vec::new());
        let (mut first, mut last) = ((0usize, 0usize), (0usize, 0usize));
        let week = 7 * 86_400;
        for r in rows {
            let kind = Kind::of_id(&r.id).expect("generated ids start with their kind");
            let e = by_kind.entry(kind).or_default();
            e.0 += 1;
            e.1 += r.gpu_seconds() as f64 / 3600.0;
            *by_class.entry(r.class).or_default() += 1;
            if !matches!(kind, Kind::Service | Kind::Squat) {
                runs.push(r.work_s as f64);
                gpus.push(f64::from(r.gpus));
            }
            if r.class != Class::Service {
                let high = r.priority >= Priority::High;
                if r.submit_s < week {
                    first = (first.0 + usize::from(high), first.1 + 1);
                }
                if r.submit_s + week >= horizon {
                    last = (last.0 + usize::from(high), last.1 + 1);
                }
            }
        }
        let demand: f64 = rows.iter().map(|r| r.gpu_seconds() as f64).sum();
        let batch_gpu_s: f64 = rows.iter().filter(|r| r.class == Class::Batch).map(|r| r.gpu_seconds() as f64).sum();
        let share = |(h, n): (usize, usize)| if n == 0 { 0.0 } else { h as f64 / n as f64 };
        let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        GenStats {
            workloads: rows.len(),
            by_kind,
            by_class,
            demand_over_capacity: demand / (f64::from(p.gpus) * horizon as f64),
            high_share_first_week: share(first),
            high_share_last_week: share(last),
            preemptible: rows.iter().filter(|r| r.preemptible).count(),
            failed_early: failed.0,
            failed_gpu_share: failed.1 / batch_gpu_s.max(1.0),
            mean_run_s: mean(&runs),
            median_run_s: median(&mut runs),
            mean_gpus: mean(&gpus),
            median_gpus: median(&mut gpus),
        }
    }
}

impl fmt::Display for GenStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "generated {} workloads, demand / capacity {:.2}", self.workloads, self.demand_over_capacity)?;
        for (k, (n, gh)) in &self.by_kind {
            writeln!(f, "  {:<12} {n:>7} workloads {gh:>12.0} GPU-hours", k.as_str())?;
        }
        let classes: Vec<String> = self.by_class.iter().map(|(c, n)| format!("{} {n}", c.as_str())).collect();
        writeln!(f, "  classes: {}", classes.join(", "))?;
        writeln!(
            f,
            "  high/urgent share: {:.2} in the first week, {:.2} in the last; {} preemptible",
            self.high_share_first_week, self.high_share_last_week, self.preemptible
        )?;
        writeln!(
            f,
            "  {} batch jobs fail early, holding {:.1}% of batch GPU-time",
            self.failed_early,
            100.0 * self.failed_gpu_share
        )?;
        writeln!(
            f,
            "  jobs (batch + interactive): run time median {:.0} s, mean {:.0} s; GPUs median {}, mean {:.2}",
            self.median_run_s, self.mean_run_s, self.median_gpus, self.mean_gpus
        )
    }
}
