//! [`measure`]: the report of one run.

use allot_core::State;

use crate::measures::capacity::{available_gpu_s, ratio, total_gpu_s};
use crate::measures::queue::{Times, stats};
use crate::measures::work::{Work, max_impact, wants};
use crate::measures::{budget, clusters, fairness, outcome, preemption};
use crate::record::SimOutput;
use crate::report::{Metrics, Report};

const HOUR: f64 = 3600.0;
const DAY: f64 = 86_400.0;

/// Measures a run over `[0, out.horizon_end]` from its final `state` (specs,
/// runs, accounts, contract, cluster) and its record `out`. Definitions:
/// `docs/measures.md`.
pub fn measure(state: &State, out: &SimOutput) -> Report {
    let h = out.horizon_end;
    let available_gpu_s = available_gpu_s(out);
    let available = available_gpu_s as f64;
    let work = Work::tally(state, out);
    let times = Times::collect(state, h);
    let wants = wants(state, out);
    let accounts = fairness::accounts(state, &work, &times, h);
    let [completed, failed, cancelled, idle_reclaimed, rejected, unfinished] =
        outcome::counts(&outcome::outcomes(state, out));
    let days = h as f64 / DAY;
    let assigned = work.assigned_gpu_s as f64;
    let useful = work.useful_gpu_s as f64;
    let (queue_time_s, by_class) = times.class_stats(|_| true);
    let metrics = Metrics {
        availability: ratio(available, total_gpu_s(out.total_gpus, &out.added_gpus, h) as f64),
        occupancy: ratio(assigned, available),
        utilization: ratio(work.util_gpu_s, available),
        impact: ratio(work.impact_gpu_s, available * max_impact(state)),
        budget_attainment: budget::attainment(state, out, &wants),
        jain_index: fairness::jain_index(state, &wants, available_gpu_s, &accounts),
        queue_time_s,
        queue_time_by_class: by_class,
        completed_workloads: completed,
        throughput_per_day: ratio(completed as f64, days),
        useful_gpu_hours: useful / HOUR,
        preemptions: work.preemptions,
        preemption_overhead_gpu_hours: work.preemption_overhead_gpu_s as f64 / HOUR,
        preemption_overhead_fraction: ratio(work.preemption_overhead_gpu_s as f64, assigned),
        time_to_gpu_s: by_class.interactive,
        rejected_workloads: rejected,
        unfinished_workloads: unfinished,
        failed_workloads: failed,
        cancelled_workloads: cancelled,
        idle_reclaimed_workloads: idle_reclaimed,
        failures: work.failures,
        node_failures: out.node_failures,
        lost_gpu_hours_failures: work.failure_lost_gpu_s as f64 / HOUR,
        assigned_gpu_hours: assigned / HOUR,
        available_gpu_hours: available / HOUR,
        useful_gpu_hours_per_day: ratio(useful / HOUR, days),
        jct_s: stats(times.jct.clone()),
    };
    Report {
        policy: out.policy.clone(),
        horizon_s: h,
        workloads: state.specs.len() as u64,
        metrics,
        accounts,
        clusters: clusters::clusters(out, &times),
        preemption_causes: preemption::causes(out),
        passes: out.passes,
        events: out.events,
    }
}
